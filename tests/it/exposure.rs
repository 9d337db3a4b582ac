//! What rowbranch's secrets are exposed to, and says so: `doctor` warns of a DATABASE_URL that
//! reaches another machine without checking its certificate, `serve` warns of an App key file
//! that group or others may read, and an `on_dispatch` command runs without rowbranch's secrets.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use fake_github::TEST_APP_PRIVATE_KEY_PEM;
use serde_json::json;
use tempfile::TempDir;

use crate::support::app::FEEDBACK_ROUTE;
use crate::support::child::{self, Start};
use crate::support::github::{fake, GithubOptions};
use crate::support::http::{insert, post_webhook};
use crate::support::local::dir_with_repository;
use crate::support::random::random_secret;
use crate::support::tools::output_text;

/// `rowbranch doctor` over a local repository with `DATABASE_URL` set to `url`.
async fn doctor(url: &str) -> (bool, String) {
    let dir = dir_with_repository().await;
    let config = format!("[forge]\nkind = \"local\"\npath = \"repo.git\"\n{FEEDBACK_ROUTE}");
    std::fs::write(dir.path().join("rowbranch.toml"), config).unwrap();
    let mut command = child::rowbranch(dir.path());
    command
        .arg("doctor")
        .env("DATABASE_URL", url)
        .env("ROWBRANCH_WEBHOOK_SECRET", random_secret());
    let out = child::run(&mut command).await;
    (out.status.success(), output_text(&out))
}

/// 0.0.0.0 is no loopback name or address, and a connection to it stays on this machine (Linux
/// takes it for the local host): nothing listens on port 1, so the doctor's attempt to read the
/// tables is refused at once, with no packet on a network.
const REMOTE: &str = "postgres://rowbranch:pw@0.0.0.0:1/postgres";

#[tokio::test]
async fn doctor_warns_when_a_remote_database_url_does_not_check_the_certificate() {
    for (query, mode) in [
        ("?sslmode=require", "require"),
        ("", "prefer"),
        ("?sslmode=disable", "disable"),
    ] {
        let (passed, report) = doctor(&format!("{REMOTE}{query}")).await;
        assert!(passed, "a warning, not a failure:\n{report}");
        let line = report
            .lines()
            .find(|l| l.starts_with("! DATABASE_URL reaches 0.0.0.0"))
            .unwrap_or_else(|| panic!("no warning for sslmode={mode}:\n{report}"));
        assert!(line.contains(&format!("with sslmode={mode}:")), "{line}");
        assert!(line.contains("become work"), "{line}");
        let fix = report.lines().skip_while(|l| *l != line).nth(1).unwrap();
        for says in [
            "sslmode=verify-full",
            "sslrootcert=",
            "Dashboard → Database Settings → SSL Configuration → Download certificate",
            "https://supabase.com/docs/guides/platform/ssl-enforcement",
        ] {
            assert!(fix.contains(says), "{says:?} in {fix}");
        }
    }
    let dir = TempDir::new().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, "").unwrap();
    for checked in [
        format!("{REMOTE}?sslmode=verify-full&sslrootcert={}", ca.display()),
        format!("{REMOTE}?sslmode=verify-ca&sslrootcert={}", ca.display()),
        "postgres://rowbranch:pw@127.0.0.1:1/postgres?sslmode=disable".to_owned(),
    ] {
        let (_, report) = doctor(&checked).await;
        assert!(
            !report.contains("DATABASE_URL reaches"),
            "{checked}:\n{report}"
        );
    }
}

/// `serve` on the fake GitHub with the App's key in `app.pem`, of `mode`: its log once it
/// listens.
async fn serve_with_key_mode(mode: u32) -> (String, String) {
    let fake = fake().await;
    let dir = Arc::new(TempDir::new().unwrap());
    let key = dir.path().join("app.pem");
    std::fs::write(&key, TEST_APP_PRIVATE_KEY_PEM).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
    let config = GithubOptions::default()
        .config_text(&fake)
        .replace("[github]\n", "[github]\nprivate_key_path = \"app.pem\"\n");
    let served = child::serve(
        dir,
        Start {
            config: &config,
            env: vec![],
            nofile: None,
            secret: random_secret(),
        },
    )
    .await;
    // The warning comes before the line that says where it listens.
    (served.log(), key.display().to_string())
}

#[tokio::test]
async fn serve_warns_once_when_the_app_key_file_is_open_to_group_or_others() {
    for mode in [0o644, 0o640, 0o604] {
        let (log, key) = serve_with_key_mode(mode).await;
        let warnings: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("private key file is accessible by group or others"))
            .collect();
        assert_eq!(warnings.len(), 1, "mode {mode:o}:\n{log}");
        assert!(warnings[0].contains("WARN"), "{}", warnings[0]);
        assert!(
            warnings[0].contains(&format!("chmod 600 {key}")),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[0].contains(&format!("{mode:04o}")),
            "{}",
            warnings[0]
        );
    }
    let (log, _) = serve_with_key_mode(0o600).await;
    assert!(!log.contains("private key file is accessible"), "{log}");
}

#[tokio::test]
async fn on_dispatch_runs_without_the_secrets_in_serves_environment() {
    let dir = dir_with_repository().await;
    let config = format!(
        "listen = \"127.0.0.1:0\"\n[forge]\nkind = \"local\"\npath = \"repo.git\"\n\
         on_dispatch = \"cat > /dev/null; env > env.txt\"\n{FEEDBACK_ROUTE}"
    );
    let secret = random_secret();
    let secrets = [
        (
            "DATABASE_URL",
            "postgres://rowbranch:db-password-7f3a@127.0.0.1:1/postgres".to_owned(),
        ),
        (
            "GITHUB_APP_PRIVATE_KEY",
            TEST_APP_PRIVATE_KEY_PEM.to_owned(),
        ),
        ("GITHUB_TOKEN", "ghs_token7f3a".to_owned()),
        (
            "ROWBRANCH_STATUS_PASSWORD",
            "status-password-7f3a".to_owned(),
        ),
        ("UNRELATED_API_KEY", "unrelated-7f3a".to_owned()),
    ];
    let mut env: Vec<(&'static str, String)> = secrets.to_vec();
    env.extend([
        ("LANG", "C.UTF-8".to_owned()),
        ("TZ", "Europe/Berlin".to_owned()),
    ]);
    let served = child::serve(
        Arc::clone(&dir),
        Start {
            config: &config,
            env,
            nofile: None,
            secret: secret.clone(),
        },
    )
    .await;
    let client = reqwest::Client::new();
    post_webhook(
        &client,
        &served.url,
        &secret,
        &insert(json!(1), "Dark mode"),
    )
    .await
    .expect(200, "dispatched");
    // The dispatch, on_dispatch included, is done before the answer.
    let seen = std::fs::read_to_string(dir.path().join("env.txt")).unwrap();
    assert!(
        !seen.contains(&secret),
        "the webhook secret reached on_dispatch:\n{seen}"
    );
    for (name, value) in &secrets {
        let first_line = value.lines().next().unwrap();
        assert!(
            !seen.contains(first_line),
            "{name} reached on_dispatch:\n{seen}"
        );
        assert!(
            !seen.contains(&format!("{name}=")),
            "{name} reached on_dispatch:\n{seen}"
        );
    }
    for kept in ["PATH=", "LANG=C.UTF-8", "TZ=Europe/Berlin"] {
        assert!(
            seen.lines().any(|l| l.starts_with(kept)),
            "{kept} in:\n{seen}"
        );
    }
}
