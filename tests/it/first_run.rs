//! What a user meets running `doctor` and `serve` for the first time after `init`: advice that
//! agrees with what `init` wrote (the webhook secret is in `rowbranch.env`, beside the config,
//! and in the SQL files), a private key that is checked by signing with it, a listen address
//! that may name a host, and a port in use that names the setting to change.

use std::path::Path;

use fake_github::{TEST_APP_PRIVATE_KEY_PEM, TEST_APP_PUBLIC_KEY_PEM};

use crate::support::child::{
    local_config, rowbranch, run, serve_until_healthy, stderr, stdout, terminate,
};
use crate::support::github::{fake, GithubOptions};
use crate::support::http::free_port;
use crate::support::local::dir_with_repository;
use crate::support::random::random_secret;
use crate::support::tools::assert_says;

/// `rowbranch init` for `acme/app` into `dir`, asking GitHub nothing.
async fn init(dir: &Path) {
    let out = run(rowbranch(dir).args([
        "init",
        "--dir",
        "setup",
        "--repo",
        "acme/app",
        "--url",
        "https://hooks.example.com",
        "--owner-type",
        "user",
    ]))
    .await;
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(dir.join("setup/rowbranch.env").is_file());
}

#[tokio::test]
async fn after_init_doctor_and_serve_say_to_take_the_secret_from_the_env_file_init_wrote() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path()).await;

    let out = run(rowbranch(dir.path()).args(["doctor", "--config", "setup/rowbranch.toml"])).await;
    let report = stdout(&out);
    let lines: Vec<&str> = report.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == "✗ webhook secret is not set")
        .unwrap_or_else(|| panic!("no secret check in:\n{report}"));
    let fix = lines[at + 1];
    assert!(
        fix.starts_with("    fix: set ROWBRANCH_WEBHOOK_SECRET from setup/rowbranch.env (init wrote it and the SQL files use it)"),
        "{fix}"
    );
    assert!(
        fix.contains("set -a; . setup/rowbranch.env; set +a"),
        "{fix}"
    );
    assert!(!fix.contains("random string"), "{fix}");

    let out = run(rowbranch(dir.path()).args(["serve", "--config", "setup/rowbranch.toml"])).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let error = stderr(&out);
    assert!(
        error.contains("no webhook secret: set ROWBRANCH_WEBHOOK_SECRET from setup/rowbranch.env (init wrote it and the SQL files use it)"),
        "{error}"
    );

    // Sourcing the file as the advice says is enough for the secret.
    let script =
        "set -a; . setup/rowbranch.env; set +a; exec \"$0\" doctor --config setup/rowbranch.toml";
    let out = run(tokio::process::Command::new("sh")
        .current_dir(dir.path())
        .env_remove("ROWBRANCH_WEBHOOK_SECRET")
        .args(["-c", script, env!("CARGO_BIN_EXE_rowbranch")]))
    .await;
    assert!(
        stdout(&out).contains("✓ webhook secret set (2 secrets)"),
        "{}",
        stdout(&out)
    );

    // Without the file beside the config, the advice is a new secret, as before.
    std::fs::remove_file(dir.path().join("setup/rowbranch.env")).unwrap();
    let out = run(rowbranch(dir.path()).args(["doctor", "--config", "setup/rowbranch.toml"])).await;
    let report = stdout(&out);
    assert!(
        report.contains("fix: set ROWBRANCH_WEBHOOK_SECRET to a random string"),
        "{report}"
    );
    assert!(!report.contains("rowbranch.env"), "{report}");
}

#[tokio::test]
async fn a_public_key_given_as_the_apps_private_key_fails_the_key_check_with_the_fix() {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rowbranch.toml"),
        GithubOptions::default().config_text(&fake),
    )
    .unwrap();
    let secret = random_secret();
    let out = run(rowbranch(dir.path())
        .args(["doctor", "--config", "rowbranch.toml"])
        .env("ROWBRANCH_WEBHOOK_SECRET", &secret)
        .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PUBLIC_KEY_PEM))
    .await;
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("✗ the GitHub App private key cannot sign the App's JWT"),
        "{report}"
    );
    assert!(report.contains("it is a public key"), "{report}");
    assert!(!report.contains("✓ GitHub App private key"), "{report}");
    assert!(
        report.contains("fix: set [github] private_key_path to the App's private key file")
            && report.contains("Private keys → Generate a private key")
            && report.contains("-----BEGIN RSA PRIVATE KEY-----")
            && report.contains("-----BEGIN PRIVATE KEY-----"),
        "{report}"
    );
    assert!(
        fake.requests().is_empty(),
        "the key is checked before GitHub is asked"
    );

    // serve refuses to start with it, saying the same.
    let out = run(rowbranch(dir.path())
        .args(["serve", "--config", "rowbranch.toml"])
        .env("ROWBRANCH_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env("ROWBRANCH_WEBHOOK_SECRET", &secret)
        .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PUBLIC_KEY_PEM))
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_says(
        &stderr(&out),
        &["cannot sign the App's JWT", "Generate a private key"],
    );

    // The private key itself passes, as before.
    let out = run(rowbranch(dir.path())
        .args(["doctor", "--config", "rowbranch.toml"])
        .env("ROWBRANCH_WEBHOOK_SECRET", &secret)
        .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM))
    .await;
    assert_says(
        &stdout(&out),
        &["✓ GitHub App private key parses and signs the App's JWT"],
    );
}

#[tokio::test]
async fn a_listen_address_may_name_a_host_in_the_environment_or_the_file() {
    let dir = dir_with_repository().await;
    std::fs::write(dir.path().join("rowbranch.toml"), local_config("")).unwrap();
    let secret = random_secret();
    let mut command = rowbranch(dir.path());
    command
        .args(["serve", "--config", "rowbranch.toml"])
        .env("ROWBRANCH_WEBHOOK_SECRET", &secret);
    let server = serve_until_healthy(&mut command, &format!("localhost:{}", free_port())).await;
    let (code, log) = terminate(server).await;
    assert_eq!(code, Some(0), "{log}");

    let port = free_port();
    let config = local_config("").replace("127.0.0.1:0", &format!("localhost:{port}"));
    std::fs::write(dir.path().join("rowbranch.toml"), config).unwrap();
    let mut command = rowbranch(dir.path());
    command
        .args(["serve", "--config", "rowbranch.toml"])
        .env("ROWBRANCH_WEBHOOK_SECRET", &secret)
        .env_remove("ROWBRANCH_LISTEN");
    let server = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    crate::support::wait::eventually("the server on localhost to answer", || async {
        let up = client
            .get(format!("http://localhost:{port}/healthz"))
            .send()
            .await;
        up.ok().filter(|r| r.status() == 200)
    })
    .await;
    let (code, log) = terminate(server).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn a_host_name_that_does_not_resolve_is_a_config_error_naming_the_variable() {
    let dir = dir_with_repository().await;
    std::fs::write(dir.path().join("rowbranch.toml"), local_config("")).unwrap();
    // A label longer than DNS allows (63 bytes): the resolver refuses it without asking a
    // name server, so the test stays off the network.
    let host = format!("{}.invalid", "x".repeat(64));
    let out = run(rowbranch(dir.path())
        .args(["serve", "--config", "rowbranch.toml"])
        .env("ROWBRANCH_WEBHOOK_SECRET", random_secret())
        .env("ROWBRANCH_LISTEN", format!("{host}:8080")))
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let says = format!("ROWBRANCH_LISTEN=`{host}:8080`: the host name `{host}` does not resolve");
    assert_says(&stderr(&out), &[&says]);
}

#[tokio::test]
async fn a_port_in_use_names_the_setting_that_chose_it() {
    let dir = dir_with_repository().await;
    let secret = random_secret();
    let held = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let serve = |setting: (&str, String), config: String| {
        std::fs::write(dir.path().join("rowbranch.toml"), config).unwrap();
        let mut command = rowbranch(dir.path());
        command
            .args(["serve", "--config", "rowbranch.toml"])
            .env("ROWBRANCH_WEBHOOK_SECRET", &secret);
        if !setting.0.is_empty() {
            command.env(setting.0, setting.1);
        }
        command
    };
    let in_file = local_config("").replace("127.0.0.1:0", &format!("0.0.0.0:{port}"));
    for (setting, config, fix) in [
        (
            ("ROWBRANCH_LISTEN", format!("0.0.0.0:{port}")),
            local_config(""),
            "stop it, or set ROWBRANCH_LISTEN to a free HOST:PORT".to_owned(),
        ),
        (
            ("PORT", port.to_string()),
            local_config(""),
            "stop it, or set PORT to a free port (ROWBRANCH_LISTEN wins over it)".to_owned(),
        ),
        (
            ("", String::new()),
            in_file,
            "stop it, or change listen in rowbranch.toml to a free HOST:PORT (or set ROWBRANCH_LISTEN)"
                .to_owned(),
        ),
    ] {
        let out = run(&mut serve(setting, config)).await;
        let error = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{error}");
        assert!(
            error.contains(&format!("could not listen on 0.0.0.0:{port}: Address already in use")),
            "{error}"
        );
        assert!(error.contains(&fix), "expected {fix:?} in: {error}");
    }
    drop(held);
}

/// A GitHub host that does not resolve fails `doctor` at its first attempt, naming the host,
/// with the App and with a token alike: no retry budget spent on a mistyped `api_url`.
#[tokio::test]
async fn doctor_gives_up_at_once_on_a_github_host_that_does_not_resolve() {
    // A label longer than DNS allows: the resolver refuses it without asking a name server.
    let host = format!("{}.invalid", "x".repeat(64));
    let route = "[[routes]]\ntable = \"feedbacks\"\nrepo = \"acme/app\"\n\
                 branch_prefix = \"feedback\"\nevent_type = \"feedback\"\n";
    let app = format!("[github]\napp_id = 1\napi_url = \"https://{host}/api/v3\"\n{route}");
    let token = format!(
        "[github]\ntoken_env = \"GITHUB_TOKEN\"\napi_url = \"https://{host}/api/v3\"\n\
         {route}intake = \"pgmq\"\n"
    );
    for config in [token, app] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rowbranch.toml"), &config).unwrap();
        let mut doctor = rowbranch(dir.path());
        doctor
            .args(["doctor", "--config", "rowbranch.toml"])
            .env("ROWBRANCH_WEBHOOK_SECRET", random_secret())
            .env_remove("DATABASE_URL")
            .env_remove("GITHUB_API_URL");
        match config.contains("token_env") {
            true => doctor.env("GITHUB_TOKEN", "ghp_a-test-token-that-goes-nowhere"),
            false => doctor.env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM),
        };
        let out = run(&mut doctor).await;
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{config}\n{text}");
        assert!(
            text.contains("could not resolve the host") && text.contains(&host),
            "{config}\n{text}"
        );
        let retried = text.contains(" attempts in ") && !text.contains("; 1 attempts in ");
        assert!(!retried, "{config}\n{text}");
    }
}

/// `doctor --json`: one object a line, one per check, for a script or a CI step to read.
#[tokio::test]
async fn doctor_json_is_one_object_per_check() {
    let dir = dir_with_repository().await;
    std::fs::write(dir.path().join("rowbranch.toml"), local_config("")).unwrap();
    let doctor = |secret: Option<String>| {
        let mut command = rowbranch(dir.path());
        command.args(["doctor", "--json", "--config", "rowbranch.toml"]);
        if let Some(secret) = secret {
            command.env("ROWBRANCH_WEBHOOK_SECRET", secret);
        }
        command
    };
    for (secret, code) in [(Some(random_secret()), 0), (None, 1)] {
        let out = run(&mut doctor(secret)).await;
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(code), "{text}");
        let checks: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("one object a line"))
            .collect();
        assert!(checks.len() >= 3, "{text}");
        for check in &checks {
            assert!(check["what"].is_string(), "{check}");
            assert!(["pass", "advice", "fail"].contains(&check["status"].as_str().unwrap()));
        }
        let failed = checks.iter().filter(|c| c["status"] == "fail").count();
        assert_eq!(failed > 0, code == 1, "{text}");
    }
}
