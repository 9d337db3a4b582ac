//! `rowbranch init`: the setup files, filled in, and the end of "create an App from a manifest"
//! against the fake GitHub.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use fake_github::{FakeGithub, TEST_APP_PRIVATE_KEY_PEM};
use rowbranch::config::{Config, ForgeSettings};
use serde_json::Value;

fn rowbranch(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(args)
        .env_remove("GITHUB_API_URL")
        .output()
        .expect("the binary runs")
}

fn init(dir: &Path, extra: &[&str]) -> Output {
    let dir = dir.to_str().unwrap();
    let mut args = vec![
        "init",
        "--dir",
        dir,
        "--repo",
        "acme/app",
        "--url",
        "https://hooks.example.com",
    ];
    args.extend_from_slice(extra);
    rowbranch(&args)
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The secret `init` generated, as it wrote it for rowbranch.
fn secret(dir: &Path) -> String {
    let env = std::fs::read_to_string(dir.join("rowbranch.env")).unwrap();
    env.lines()
        .find_map(|l| l.strip_prefix("ROWBRANCH_WEBHOOK_SECRET="))
        .expect("the env file names the secret")
        .to_owned()
}

#[test]
fn init_writes_the_five_templates_and_the_page_filled_in_for_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let setup = dir.path().join("setup");
    let out = init(&setup, &[]);
    assert!(out.status.success(), "{}", text(&out));
    for name in [
        "rowbranch.toml",
        "workflow.yml",
        "supabase.sql",
        "app-manifest.json",
        "payload.json.j2",
        "create-app.html",
        "rowbranch.env",
    ] {
        assert!(setup.join(name).is_file(), "{name} missing");
    }
    let secret = secret(&setup);
    assert!(secret.len() >= 24);
    assert!(!text(&out).contains(&secret), "the secret is never printed");
    let sql = std::fs::read_to_string(setup.join("supabase.sql")).unwrap();
    assert!(sql.contains("https://hooks.example.com/webhook"), "{sql}");
    assert!(sql.contains(&secret), "the trigger sends the same secret");
    assert_eq!(mode(&setup.join("supabase.sql")), 0o600);
    assert_eq!(mode(&setup.join("rowbranch.env")), 0o600);
    let workflow = std::fs::read_to_string(setup.join("workflow.yml")).unwrap();
    assert!(
        workflow.contains("rowbranch-acme[bot]"),
        "allowed_bots names the App"
    );
    for step in [
        "create-app.html",
        "--manifest-code",
        "Install",
        "ANTHROPIC_API_KEY",
        "create and approve pull requests",
        ".github/workflows/rowbranch.yml",
        "Database Webhooks",
        "rowbranch doctor",
    ] {
        assert!(
            text(&out).contains(step),
            "next steps miss {step:?}:\n{}",
            text(&out)
        );
    }
}

#[test]
fn the_written_config_parses_and_routes_the_table_to_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let out = init(
        dir.path(),
        &[
            "--table",
            "ideas",
            "--text-column",
            "body",
            "--branch-prefix",
            "idea",
            "--event-type",
            "idea",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let secret = secret(dir.path());
    let env = |key: &str| match key {
        "ROWBRANCH_WEBHOOK_SECRET" => Some(secret.clone()),
        _ => None,
    };
    let config = Config::load(&dir.path().join("rowbranch.toml"), &env).unwrap();
    let route = config
        .route("public", "ideas")
        .expect("the route for the table");
    assert_eq!(route.repo.to_string(), "acme/app");
    assert_eq!(route.text_column.as_deref(), Some("body"));
    assert_eq!(route.branch_prefix.as_str(), "idea");
    assert_eq!(route.event_type.as_str(), "idea");
    let ForgeSettings::Github(github) = &config.forge else {
        panic!("init writes a GitHub config");
    };
    assert!(format!("{:?}", github.key).contains("app.pem"));
}

#[test]
fn the_manifest_asks_for_the_least_permissions_and_no_webhook() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &["--app-name", "Feedback Bot"])
        .status
        .success());
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("app-manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["name"], "Feedback Bot");
    assert_eq!(manifest["hook_attributes"]["active"], false);
    assert_eq!(manifest["default_events"], serde_json::json!([]));
    let permissions = manifest["default_permissions"].as_object().unwrap();
    assert_eq!(permissions.len(), 3, "{permissions:?}");
    assert_eq!(permissions["contents"], "write");
    assert_eq!(permissions["pull_requests"], "read");
    assert_eq!(permissions["metadata"], "read");

    // The page posts exactly that manifest to GitHub's manifest flow.
    let page = std::fs::read_to_string(dir.path().join("create-app.html")).unwrap();
    assert!(page.contains("action=\"https://github.com/settings/apps/new\""));
    assert!(page.contains("action=\"https://github.com/organizations/acme/settings/apps/new\""));
    let value = page
        .split("name=\"manifest\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let unescaped = value
        .replace("&quot;", "\"")
        .replace("&#x2f;", "/")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let posted: Value =
        serde_json::from_str(&unescaped).expect("the page carries the manifest as JSON");
    assert_eq!(posted, manifest);
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let first = secret(dir.path());
    let again = init(dir.path(), &[]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("--force"), "{}", text(&again));
    assert_eq!(secret(dir.path()), first, "nothing was overwritten");
    assert!(init(dir.path(), &["--force"]).status.success());
    assert_ne!(secret(dir.path()), first, "a fresh secret each time");
}

#[test]
fn init_without_a_repository_or_with_a_bad_one_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = rowbranch(&["init", "--dir", d, "--url", "https://x.example"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = rowbranch(&[
        "init",
        "--dir",
        d,
        "--repo",
        "acme",
        "--url",
        "https://x.example",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("owner/name"), "{}", text(&out));
    let out = rowbranch(&["init", "--dir", d, "--repo", "acme/app", "--url", "ftp://x"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[tokio::test]
async fn the_manifest_code_is_traded_for_the_apps_id_and_key() {
    let fake = FakeGithub::start().await;
    fake.add_manifest_code("one-time-code");
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let d = dir.path().to_str().unwrap().to_owned();
    let url = fake.url();
    let run = |d: String, url: String| {
        tokio::task::spawn_blocking(move || {
            rowbranch(&[
                "init",
                "--dir",
                &d,
                "--manifest-code",
                "one-time-code",
                "--api-url",
                &url,
            ])
        })
    };
    let out = run(d.clone(), url.clone()).await.unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let key = dir.path().join("app.pem");
    assert_eq!(
        std::fs::read_to_string(&key).unwrap(),
        TEST_APP_PRIVATE_KEY_PEM
    );
    assert_eq!(mode(&key), 0o600);
    assert!(
        !text(&out).contains("PRIVATE KEY"),
        "the key is never printed"
    );
    let config = std::fs::read_to_string(dir.path().join("rowbranch.toml")).unwrap();
    assert!(
        config.contains(&format!("app_id = {}", fake.app_id())),
        "{config}"
    );
    let secret = secret(dir.path());
    let env = |key: &str| (key == "ROWBRANCH_WEBHOOK_SECRET").then(|| secret.clone());
    let loaded = Config::load(&dir.path().join("rowbranch.toml"), &env).unwrap();
    let ForgeSettings::Github(github) = &loaded.forge else {
        panic!("a GitHub config");
    };
    assert_eq!(github.app_id, fake.app_id());

    // The code works once; the key is not replaced without --force.
    std::fs::remove_file(&key).unwrap();
    let again = run(d, url).await.unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("works once"), "{}", text(&again));
    fake.assert_no_unexpected();
}
