//! The route from the environment alone (SPEC §2), as a container runs it: no config file,
//! `ROWBRANCH_REPO` and its companions set. Through the library on the local forge, and through
//! the binary on the fake GitHub, each row goes end to end; a file and the variables together
//! are refused.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use fake_github::{FakeGithub, TEST_APP_PRIVATE_KEY_PEM};
use rowbranch::config::{Config, ForgeSettings, LocalSettings};
use rowbranch::forge::local::create_repository;
use rowbranch::startup::{Application, Listen};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::process::Command;

use crate::support::child::{self, run, stderr};
use crate::support::http::{free_port, post_webhook};
use crate::support::local::{branches, dispatches, write_local_config};
use crate::support::random::random_secret;
use crate::support::server::{serve_env, Server};
use crate::support::wait::PATIENCE;

/// A route unlike the defaults in every part, so each variable is seen to be read.
fn route_variables() -> Vec<(&'static str, String)> {
    [
        ("ROWBRANCH_REPO", "acme/app"),
        ("ROWBRANCH_TABLE", "wishes"),
        ("ROWBRANCH_SCHEMA", "app"),
        ("ROWBRANCH_ID_COLUMN", "wish_id"),
        ("ROWBRANCH_TEXT_COLUMN", "title"),
        ("ROWBRANCH_BRANCH_PREFIX", "wish"),
        ("ROWBRANCH_EVENT_TYPE", "wish-made"),
    ]
    .map(|(name, value)| (name, value.to_owned()))
    .to_vec()
}

/// A Supabase INSERT into `app.wishes`, the table of [`route_variables`].
fn wish(id: u64, title: &str) -> Value {
    json!({
        "type": "INSERT",
        "table": "wishes",
        "schema": "app",
        "record": { "wish_id": id, "title": title, "message": "not the text column" },
        "old_record": null
    })
}

#[tokio::test]
async fn the_route_from_the_environment_takes_a_row_end_to_end_on_the_local_forge() {
    let dir = TempDir::new().unwrap();
    let repo = dir.path().join("repo.git");
    create_repository(&repo).await.unwrap();
    let secret = random_secret();
    let mut vars: HashMap<&str, String> = route_variables().into_iter().collect();
    vars.insert("ROWBRANCH_WEBHOOK_SECRET", secret.clone());
    vars.insert("GITHUB_APP_ID", "123456".to_owned());
    vars.insert(
        "GITHUB_APP_PRIVATE_KEY",
        TEST_APP_PRIVATE_KEY_PEM.to_owned(),
    );
    let env = |key: &str| vars.get(key).cloned();

    // No file where the config would be: the environment makes the config.
    let mut config = Config::load(&dir.path().join("rowbranch.toml"), &env)
        .unwrap_or_else(|e| panic!("the route from the environment does not load: {e}"));
    assert!(matches!(config.forge, ForgeSettings::Github(_)));
    // The same routes, served over a local repository in place of GitHub.
    config.forge = ForgeSettings::Local(LocalSettings {
        path: repo.clone(),
        on_dispatch: None,
    });
    let application = Application::build(config, serve_env(Listen::FreePort))
        .await
        .expect("the local forge opens and the route compiles");
    let mut server = Server::run(application, secret, PATIENCE);

    let first = server.post_json(&wish(7, "Dark mode, please")).await;
    first
        .expect(200, "dispatched")
        .expect_branch("wish/7-dark-mode-please");
    assert_eq!(first.body["repo"], "acme/app");
    server
        .post_json(&wish(7, "Dark mode, please"))
        .await
        .expect_duplicate("branch_exists");
    // Another table has no route; the default one neither, since the variables replaced it.
    let elsewhere = json!({"type":"INSERT","table":"feedbacks","schema":"public",
        "record":{"id":8,"message":"x"},"old_record":null});
    server.post_json(&elsewhere).await.expect(422, "error");

    tokio::time::timeout(PATIENCE, server.stop())
        .await
        .expect("the server did not stop");
    assert_eq!(branches(&repo).await, ["wish/7-dark-mode-please"]);
    let lines = dispatches(&dir.path().join("dispatches.jsonl"));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event_type"], "wish-made");
    assert_eq!(lines[0]["client_payload"]["text"], "Dark mode, please");
    assert_eq!(lines[0]["client_payload"]["table"], "wishes");
}

/// The binary, in a folder with no config file, with only these variables of rowbranch's.
fn rowbranch(dir: &Path, vars: &[(&str, String)]) -> Command {
    let mut command = child::rowbranch(dir);
    command.envs(vars.iter().map(|(k, v)| (*k, v.as_str())));
    command
}

#[tokio::test]
async fn serve_with_no_file_takes_its_route_from_the_environment_and_dispatches_on_github() {
    let fake = Arc::new(FakeGithub::start().await);
    fake.add_repo("acme/app");
    fake.install("acme/app", 77);
    let dir = TempDir::new().unwrap();
    let secret = random_secret();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut vars = route_variables();
    vars.extend([
        ("ROWBRANCH_WEBHOOK_SECRET", secret.clone()),
        ("GITHUB_APP_ID", fake.app_id().to_string()),
        (
            "GITHUB_APP_PRIVATE_KEY",
            // As `"$(cat app.pem)"` gives it: without the last newline.
            TEST_APP_PRIVATE_KEY_PEM.trim_end().to_owned(),
        ),
        ("GITHUB_API_URL", fake.url()),
    ]);
    let mut serve = rowbranch(dir.path(), &vars);
    let server = child::serve_until_healthy(serve.arg("serve"), &addr).await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}");
    let answer = post_webhook(&client, &url, &secret, &wish(41, "Export to CSV")).await;
    answer
        .expect(200, "dispatched")
        .expect_branch("wish/41-export-to-csv");
    post_webhook(&client, &url, &secret, &wish(41, "Export to CSV"))
        .await
        .expect_duplicate("branch_exists");

    let (code, log) = child::terminate(server).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains(&secret), "the log shows the secret:\n{log}");
    assert!(
        !log.contains("PRIVATE KEY"),
        "the log shows the key:\n{log}"
    );

    assert!(fake
        .refs("acme/app")
        .contains(&"wish/41-export-to-csv".to_owned()));
    let sent = fake.dispatches("acme/app");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].event_type, "wish-made");
    assert_eq!(sent[0].client_payload["branch"], "wish/41-export-to-csv");
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_config_file_and_the_route_variables_together_exit_two_naming_both() {
    let dir = TempDir::new().unwrap();
    let file = write_local_config(dir.path());
    let vars = [
        ("ROWBRANCH_REPO", "acme/app".to_owned()),
        ("ROWBRANCH_WEBHOOK_SECRET", random_secret()),
    ];
    let out = run(rowbranch(dir.path(), &vars).arg("serve")).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("rowbranch.toml"), "{err}");
    assert!(err.contains("unset ROWBRANCH_REPO"), "{err}");
    assert!(err.contains("remove the file"), "{err}");

    // Without the file, the same variables are a config that needs the App.
    std::fs::remove_file(&file).unwrap();
    let out = run(rowbranch(dir.path(), &vars).arg("serve")).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("GITHUB_APP_ID is not set"), "{err}");
}
