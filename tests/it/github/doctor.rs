//! The binary against the fake GitHub: `doctor` line by line — including the workflow's
//! `allowed_bots` against the App GitHub really created, from `init` to a passing check — and
//! `serve`'s logs, which never show a token, a key or a secret.

use std::path::Path;
use std::process::Output;

use fake_github::{FakeGithub, HookConfig, TEST_APP_PRIVATE_KEY_PEM};
use tokio::process::Command;

use crate::support::child;
use crate::support::github::{fake, GithubOptions, INSTALLATION, REPO};
use crate::support::http::{free_port, insert, post_webhook, webhook};
use crate::support::random::random_secret;
use crate::support::tools::output_text;

const WORKFLOW: &str = "name: rowbranch\non:\n  repository_dispatch:\n    types: [feedback]\njobs:\n  work:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo hi\n";

/// A workflow whose claude-code-action step allows `allowed_bots`, each run bounded as the
/// route says by default.
fn claude_workflow(allowed_bots: &str) -> String {
    format!(
        "on:\n  repository_dispatch:\n    types: [feedback]\njobs:\n  work:\n    runs-on: ubuntu-latest\n    timeout-minutes: 30\n    steps:\n      - uses: anthropics/claude-code-action@v1\n        with:\n          allowed_bots: {allowed_bots:?}\n          claude_args: --max-turns 30\n          prompt: hi\n"
    )
}

pub(super) fn write_config(
    dir: &Path,
    fake: &FakeGithub,
    options: &GithubOptions,
) -> std::path::PathBuf {
    let path = dir.join("rowbranch.toml");
    std::fs::write(&path, options.config_text(fake)).unwrap();
    path
}

/// `rowbranch doctor` for `config`, in its folder, with nothing of rowbranch's set.
fn doctor_command(config: &Path) -> Command {
    let mut command = child::rowbranch(config.parent().expect("the config's folder"));
    command.args(["doctor", "--config"]).arg(config);
    command
}

/// `doctor` with the App's key and `secret` set: its exit code, and its output and errors.
pub(super) async fn doctor(config: &Path, secret: Option<&str>) -> (i32, String) {
    let mut command = doctor_command(config);
    command.env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM);
    if let Some(secret) = secret {
        command.env("ROWBRANCH_WEBHOOK_SECRET", secret);
    }
    let out = child::run(&mut command).await;
    (out.status.code().unwrap_or(-1), output_text(&out))
}

/// `doctor` without the App's key or id, as before the App is created: what it printed.
async fn doctor_before_the_app(config: &Path) -> Output {
    let mut command = doctor_command(config);
    child::run(command.env("ROWBRANCH_WEBHOOK_SECRET", random_secret())).await
}

#[tokio::test]
async fn doctor_passes_every_check_when_the_setup_is_complete() {
    let fake = fake().await;
    fake.add_workflow(REPO, "rowbranch.yml", WORKFLOW);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &fake, &GithubOptions::default());
    let (code, out) = doctor(&config, Some(&random_secret())).await;
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains('✗'), "{out}");
    for expected in [
        "✓ webhook secret set",
        "✓ GitHub App private key parses",
        "✓ GitHub accepts the App's JWT",
        "✓ acme/app: the App is installed",
        "✓ acme/app: contents: write",
        "✓ acme/app: pull_requests: read",
        "✓ acme/app: actions: read",
        "✓ acme/app: default branch main",
        "✓ acme/app: .github/workflows/rowbranch.yml runs on repository_dispatch `feedback`",
        "✓ acme/app: .github/workflows/rowbranch.yml runs no claude-code-action step",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn doctor_checks_allowed_bots_the_way_claude_code_action_compares_names() {
    for (allowed, ok) in [
        ("rowbranch-test[bot]", true),
        ("RowBranch-Test", true),
        ("dependabot[bot], rowbranch-test", true),
        ("*", true),
        ("rowbranch-acme[bot]", false),
        ("", false),
    ] {
        let fake = fake().await;
        fake.add_workflow(REPO, "rowbranch.yml", &claude_workflow(allowed));
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(dir.path(), &fake, &GithubOptions::default());
        let (code, out) = doctor(&config, Some(&random_secret())).await;
        if ok {
            assert_eq!(code, 0, "{allowed:?}: {out}");
            assert!(
                out.contains("✓ acme/app: .github/workflows/rowbranch.yml lets the App's bot rowbranch-test[bot] start the work"),
                "{out}"
            );
        } else {
            assert_eq!(code, 1, "{allowed:?}: {out}");
            assert!(
                out.contains("✗ acme/app: .github/workflows/rowbranch.yml does not let the App's bot rowbranch-test[bot] start the work"),
                "{out}"
            );
            assert!(
                out.contains("Workflow initiated by non-human actor"),
                "{out}"
            );
            assert!(
                out.contains("fix: set `allowed_bots: \"rowbranch-test[bot]\"` in that step and commit it to main"),
                "{out}"
            );
        }
    }
}

/// `init`, then `init --manifest-code` for an App GitHub created under another name, against
/// the fake; returns the folder.
async fn init_then_create_app(fake: &FakeGithub) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().to_owned();
    let run = |args: Vec<String>| {
        let mut command = child::rowbranch(&folder);
        command.args(&args);
        async move {
            let out = child::run(&mut command).await;
            assert!(out.status.success(), "{args:?}: {}", output_text(&out));
        }
    };
    let d = dir.path().to_str().unwrap().to_owned();
    run(vec![
        "init".into(),
        "--dir".into(),
        d.clone(),
        "--repo".into(),
        REPO.into(),
        "--url".into(),
        "https://hooks.example.com".into(),
        "--api-url".into(),
        fake.url(),
    ])
    .await;
    fake.add_manifest_code_for_app("code", "Rowbranch Acme 2", "rowbranch-acme-2");
    run(vec![
        "init".into(),
        "--dir".into(),
        d,
        "--manifest-code".into(),
        "code".into(),
        "--api-url".into(),
        fake.url(),
    ])
    .await;
    dir
}

#[tokio::test]
async fn the_workflow_init_wrote_lets_the_renamed_app_start_the_work_and_the_one_asked_for_would_not(
) {
    let fake = fake().await;
    let dir = init_then_create_app(&fake).await;
    let workflow = std::fs::read_to_string(dir.path().join("workflow.yml")).unwrap();
    fake.add_workflow(REPO, "rowbranch.yml", &workflow);
    // Point the written config at the fake.
    let config = dir.path().join("rowbranch.toml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("https://api.github.com", &fake.url());
    std::fs::write(&config, text).unwrap();
    let (code, out) = doctor(&config, Some(&random_secret())).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("lets the App's bot rowbranch-acme-2[bot] start the work"),
        "{out}"
    );

    // The workflow as rendered before GitHub renamed the App is caught.
    let asked_for = workflow.replace("rowbranch-acme-2[bot]", "rowbranch-acme[bot]");
    fake.add_workflow(REPO, "rowbranch.yml", &asked_for);
    let (code, out) = doctor(&config, Some(&random_secret())).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("fix: set `allowed_bots: \"rowbranch-acme-2[bot]\"`"),
        "{out}"
    );
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn before_the_app_is_created_doctor_says_to_finish_creating_it() {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let mut init = child::rowbranch(dir.path());
    init.args(["init", "--dir"]).arg(dir.path());
    init.args(["--repo", REPO, "--url", "https://hooks.example.com"]);
    let out = child::run(init.arg("--api-url").arg(fake.url())).await;
    assert!(out.status.success());
    let config = dir.path().join("rowbranch.toml");
    let out = doctor_before_the_app(&config).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("✗ app_id is 123456, the placeholder `rowbranch init` writes"),
        "{text}"
    );
    assert!(text.contains("--manifest-code CODE"), "{text}");
    assert!(text.contains("create-app.html"), "{text}");
    assert!(!text.contains("can be generated"), "{text}");

    // With an id but still no key file, it says the same.
    let with_id = std::fs::read_to_string(&config)
        .unwrap()
        .replace("app_id = 123456", "app_id = 4242");
    std::fs::write(&config, with_id).unwrap();
    let out = doctor_before_the_app(&config).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("app.pem does not exist"), "{text}");
    assert!(text.contains("--manifest-code CODE"), "{text}");
}

#[tokio::test]
async fn a_github_that_does_not_answer_is_one_line_of_the_report_without_log_lines() {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = GithubOptions::default()
        .config_text(&fake)
        .replace(&fake.url(), &format!("http://127.0.0.1:{port}"));
    let config = dir.path().join("rowbranch.toml");
    std::fs::write(&config, text).unwrap();
    let mut command = doctor_command(&config);
    command.env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM);
    let out = child::run(command.env("ROWBRANCH_WEBHOOK_SECRET", random_secret())).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with('✗')).collect();
    assert_eq!(failed.len(), 1, "{stdout}");
    assert!(failed[0].contains("did not answer"), "{stdout}");
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(
            line.starts_with('✓')
                || line.starts_with('✗')
                // Advice: with no DATABASE_URL the webhook route has no sweep.
                || line.starts_with("! ")
                || line.starts_with("    fix: ")
                || line.starts_with("error: "),
            "a line that is not the report's: {line:?}"
        );
    }
}

#[tokio::test]
async fn doctor_names_each_failure_with_its_fix_and_exits_one() {
    let fake = fake().await;
    fake.set_installation_permissions(INSTALLATION, &[("contents", "read")]);
    fake.add_workflow(REPO, "ci.yml", "on: push\njobs: {}\n");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &fake, &GithubOptions::default());
    let (code, out) = doctor(&config, None).await;
    assert_eq!(code, 1, "{out}");
    for expected in [
        "✗ webhook secret is not set",
        "✗ acme/app: contents is read, needs write",
        "✗ acme/app: pull_requests is not granted, needs read",
        "! acme/app: actions is not granted: `rowbranch explain` cannot list the row's workflow runs, a claim whose run pushed nothing is taken for a dead claim and dispatched (and paid for) again, and no row is marked failed",
        "✗ acme/app: no workflow on main listens to repository_dispatch `feedback`",
        "fix: ",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn doctor_says_when_the_app_is_not_installed_or_the_jwt_is_refused() {
    let fake = fake().await;
    fake.uninstall(INSTALLATION);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &fake, &GithubOptions::default());
    let (code, out) = doctor(&config, Some(&random_secret())).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("✗ acme/app: the App is not installed on acme/app"),
        "{out}"
    );

    fake.set_app_id(999);
    let (code, out) = doctor(&config, Some(&random_secret())).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("✗ GitHub refused the App's JWT"), "{out}");
}

#[tokio::test]
async fn a_key_that_does_not_parse_is_named() {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &fake, &GithubOptions::default());
    let not_a_key = "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----\n";
    let mut command = doctor_command(&config);
    let out = child::run(command.env("GITHUB_APP_PRIVATE_KEY", not_a_key)).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("✗ the GitHub App private key does not parse"),
        "{text}"
    );
    assert!(
        !text.contains("not a key"),
        "the key's text is never echoed: {text}"
    );
}

#[tokio::test]
async fn serve_logs_never_show_tokens_keys_or_secrets() {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &fake, &GithubOptions::default());
    let secret = random_secret();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut serve = child::rowbranch(dir.path());
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("ROWBRANCH_WEBHOOK_SECRET", &secret)
        .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM)
        .env("RUST_LOG", "debug");
    let server = child::serve_until_healthy(&mut serve, &addr).await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}");
    let row = insert(serde_json::json!(1), "Log me");
    assert_eq!(post_webhook(&client, &url, &secret, &row).await.status, 200);
    // A refused delivery too: its header must not be echoed either.
    let _ = webhook(&client, &url, &format!("wrong-{secret}"), "{}")
        .send()
        .await;
    let (_, logs) = child::terminate(server).await;

    assert!(
        logs.contains("dispatched"),
        "the logs say what happened:\n{logs}"
    );
    let tokens = fake.tokens();
    assert!(!tokens.is_empty());
    for token in tokens {
        assert!(!logs.contains(&token.token), "a token is in the logs");
    }
    assert!(!logs.contains(&secret), "the webhook secret is in the logs");
    assert!(!logs.contains("PRIVATE KEY"), "the key is in the logs");
    let key_body = TEST_APP_PRIVATE_KEY_PEM.lines().nth(1).unwrap();
    assert!(!logs.contains(key_body), "the key is in the logs");
    assert!(
        !logs.contains(&fake.app_jwt()[..40]),
        "a JWT is in the logs"
    );
}

/// `doctor` with the App's key, a webhook secret and, when given, the App's webhook secret.
async fn doctor_with_hook_secret(config: &Path, hook_secret: Option<&str>) -> (i32, String) {
    let mut command = doctor_command(config);
    command.env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM);
    command.env("ROWBRANCH_WEBHOOK_SECRET", random_secret());
    if let Some(secret) = hook_secret {
        command.env("GITHUB_WEBHOOK_SECRET", secret);
    }
    let out = child::run(&mut command).await;
    (out.status.code().unwrap_or(-1), output_text(&out))
}

#[tokio::test]
async fn doctor_reads_the_apps_webhook_and_holds_it_to_post_github() {
    let fake = fake().await;
    fake.add_workflow(REPO, "rowbranch.yml", WORKFLOW);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &fake, &GithubOptions::default());
    let hook = |url: &str, content_type: &str, secret: bool| HookConfig {
        url: url.to_owned(),
        content_type: content_type.to_owned(),
        secret,
        insecure_ssl: false,
    };
    let line = |out: &str, start: &str| -> String {
        let found = out
            .lines()
            .find(|l| l.contains("the App's webhook") || l.contains("the App has no webhook"));
        let found = found.unwrap_or_else(|| panic!("no line of the App's webhook in:\n{out}"));
        assert!(found.starts_with(start), "{found}\n{out}");
        found.to_owned()
    };

    // An App made without a webhook, and no route that writes its rows' states: nothing to do.
    let (code, out) = doctor_with_hook_secret(&config, None).await;
    assert_eq!(code, 0, "{out}");
    line(&out, "✓ the App has no webhook");

    // The webhook on, at /github, and the secret missing here: every event would be a 404.
    fake.set_hook_config(hook("https://h.example/github", "json", true));
    let (code, out) = doctor_with_hook_secret(&config, None).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        line(&out, "✗").contains("GITHUB_WEBHOOK_SECRET is not set"),
        "{out}"
    );
    let (code, out) = doctor_with_hook_secret(&config, Some("the App's hook secret")).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        line(&out, "✓").contains("https://h.example/github as JSON, signed"),
        "{out}"
    );
    assert!(
        !out.contains("the App's hook secret"),
        "never the secret: {out}"
    );

    // As a form, or unsigned: POST /github refuses each event.
    fake.set_hook_config(hook("https://h.example/github", "form", true));
    let (code, out) = doctor_with_hook_secret(&config, Some("the App's hook secret")).await;
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "✗").contains("(415)"), "{out}");
    fake.set_hook_config(hook("https://h.example/github", "json", false));
    let (code, out) = doctor_with_hook_secret(&config, Some("the App's hook secret")).await;
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "✗").contains("no secret"), "{out}");

    // An App made before, its webhook at /webhook: advice, since no route writes states.
    fake.set_hook_config(hook("https://h.example/webhook", "json", true));
    let (code, out) = doctor_with_hook_secret(&config, None).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        line(&out, "!").contains("not to rowbranch's POST /github"),
        "{out}"
    );
    fake.assert_no_unexpected();
}
