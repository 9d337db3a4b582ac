//! The binary as a user runs it: exit codes, messages, `serve` end to end, `preview`, `demo`.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;

use rowbranch::forge::local::create_repository;
use serde_json::json;
use tempfile::TempDir;
use tokio::process::Command;

use crate::support::child::{self, run, stderr, stdout};
use crate::support::http::{free_port, insert, post_webhook};
use crate::support::local::{branches, dispatches};
use crate::support::random::random_secret;
use crate::support::tools::assert_says;
use crate::support::wait::eventually;

const SUPABASE_INSERT: &str = include_str!("../fixtures/supabase-insert.json");

/// A local-forge config for the route `public.feedbacks` with the slug from `text_column`.
fn local_config(text_column: &str) -> String {
    format!(
        r#"listen = "127.0.0.1:8080"

[forge]
kind = "local"
path = "repo.git"

[[routes]]
table = "feedbacks"
repo = "acme/app"
text_column = "{text_column}"
branch_prefix = "feedback"
event_type = "feedback"
"#
    )
}

/// The binary in `dir`, its temporary files there too.
fn rowbranch(dir: &Path) -> Command {
    let mut command = child::rowbranch(dir);
    command.env("TMPDIR", dir);
    command
}

/// `serve` with `args` and a webhook secret, run to its end: what it printed.
async fn serve_with_a_secret(dir: &Path, args: &[&OsStr]) -> Output {
    let mut serve = rowbranch(dir);
    serve.arg("serve").args(args);
    run(serve.env("ROWBRANCH_WEBHOOK_SECRET", random_secret())).await
}

#[tokio::test]
async fn version_and_help_exit_zero() {
    let dir = TempDir::new().unwrap();
    let out = run(rowbranch(dir.path()).arg("--version")).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains(env!("CARGO_PKG_VERSION")),
        "{}",
        stdout(&out)
    );

    let out = run(rowbranch(dir.path()).arg("--help")).await;
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    for command in ["serve", "demo", "preview"] {
        assert!(help.contains(command), "{help}");
    }
    for command in ["serve", "demo", "preview"] {
        let out = run(rowbranch(dir.path()).args([command, "--help"])).await;
        assert_eq!(out.status.code(), Some(0), "{command} --help");
    }
}

#[tokio::test]
async fn a_usage_error_exits_two() {
    let dir = TempDir::new().unwrap();
    let out = run(rowbranch(dir.path()).arg("frobnicate")).await;
    assert_eq!(out.status.code(), Some(2));
    let out = run(rowbranch(dir.path()).args(["serve", "--no-such-flag"])).await;
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test]
async fn serve_help_lists_every_environment_variable_the_config_reads() {
    let dir = TempDir::new().unwrap();
    let out = run(rowbranch(dir.path()).args(["serve", "--help"])).await;
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    // The variables the config reads, from its list (which its own tests hold to what it reads).
    let mut read: Vec<_> = rowbranch::config::env::variables().collect();
    read.push("RUST_LOG");
    for variable in read {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(variable)),
            "serve --help does not list {variable}:\n{help}"
        );
    }
}

#[tokio::test]
async fn serve_with_a_missing_config_exits_two_naming_the_file() {
    let dir = TempDir::new().unwrap();
    let missing = dir.path().join("nowhere.toml");
    let out = serve_with_a_secret(dir.path(), &["--config".as_ref(), missing.as_os_str()]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_says(
        &stderr(&out),
        &[
            &*missing.to_string_lossy(),
            "run `rowbranch init` to write one",
        ],
    );

    // The default is ./rowbranch.toml.
    let out = serve_with_a_secret(dir.path(), &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("rowbranch.toml"), "{}", stderr(&out));
}

#[tokio::test]
async fn an_unknown_key_in_the_config_exits_two_naming_the_key_and_the_file() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("rowbranch.toml");
    let text = local_config("message")
        .replace("[[routes]]\n", "[[routes]]\nbranch_prefx = \"feedback\"\n");
    std::fs::write(&path, text).unwrap();
    let out = serve_with_a_secret(dir.path(), &["--config".as_ref(), path.as_os_str()]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("branch_prefx"), "{err}");
    assert!(err.contains(&*path.to_string_lossy()), "{err}");
}

#[tokio::test]
async fn serve_without_a_secret_or_insecure_no_auth_exits_two() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("rowbranch.toml"), local_config("message")).unwrap();
    create_repository(&dir.path().join("repo.git"))
        .await
        .unwrap();
    let out = run(rowbranch(dir.path()).arg("serve")).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("ROWBRANCH_WEBHOOK_SECRET"), "{err}");
    assert!(err.contains("--insecure-no-auth"), "{err}");

    // A secret too short to be one is a config error too, and is not echoed.
    let out = run(rowbranch(dir.path())
        .arg("serve")
        .env("ROWBRANCH_WEBHOOK_SECRET", "hunter2-hunter2"))
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
}

#[tokio::test]
async fn serve_dispatches_a_row_once_and_stops_cleanly_on_sigterm() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("rowbranch.toml"), local_config("message")).unwrap();
    let repo = dir.path().join("repo.git");
    create_repository(&repo).await.unwrap();
    let secret = random_secret();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut serve = rowbranch(dir.path());
    serve.arg("serve").env("ROWBRANCH_WEBHOOK_SECRET", &secret);
    let server = child::serve_until_healthy(&mut serve, &addr).await;

    let client = reqwest::Client::new();
    let url = format!("http://{addr}");
    let row = insert(json!(42), "Add dark mode!");
    let reply = post_webhook(&client, &url, &secret, &row).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["outcome"], "dispatched", "{}", reply.text);
    assert_eq!(reply.body["branch"], "feedback/42-add-dark-mode");
    assert_eq!(reply.body["id"], "42");
    assert_eq!(reply.body["repo"], "acme/app");
    let reply = post_webhook(&client, &url, &secret, &row).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["outcome"], "duplicate", "{}", reply.text);
    assert_eq!(reply.body["reason"], "branch_exists", "{}", reply.text);

    let (code, log) = child::terminate(server).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains(&secret), "the log shows the secret:\n{log}");
    assert_eq!(branches(&repo).await, ["feedback/42-add-dark-mode"]);
    let log = dir.path().join("dispatches.jsonl");
    let lines = eventually("the dispatch line", || async {
        Some(dispatches(&log)).filter(|lines| !lines.is_empty())
    })
    .await;
    assert_eq!(lines.len(), 1);
}

#[tokio::test]
async fn preview_prints_route_id_branch_and_payload_for_the_recorded_supabase_body() {
    let dir = TempDir::new().unwrap();
    let config = dir.path().join("rowbranch.toml");
    std::fs::write(&config, local_config("title")).unwrap();
    let body = dir.path().join("insert.json");
    std::fs::write(&body, SUPABASE_INSERT).unwrap();
    let out = run(rowbranch(dir.path())
        .arg("preview")
        .arg(&body)
        .arg("--config")
        .arg(&config))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("public.feedbacks -> acme/app"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("id:") && l.trim_end().ends_with(" 1")),
        "{text}"
    );
    assert!(text.contains("feedback/1-button-broken"), "{text}");
    assert!(text.contains("\"text\": \"Button broken\""), "{text}");
    // Preview touches no forge: there is not even a repository here.
    assert!(!dir.path().join("repo.git").exists());
}

#[tokio::test]
async fn preview_of_a_bad_id_exits_one_with_the_reason() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("rowbranch.toml"), local_config("message")).unwrap();
    let body = dir.path().join("bad.json");
    std::fs::write(&body, insert(json!("../etc"), "Sneaky").to_string()).unwrap();
    let out = run(rowbranch(dir.path()).arg("preview").arg(&body)).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("422"), "{text}");
    assert!(text.contains("'/' (a slash)"), "{text}");
}

#[tokio::test]
async fn demo_shows_eight_rows_becoming_eight_branches_and_eight_dispatches() {
    let dir = TempDir::new().unwrap();
    let out = run(rowbranch(dir.path()).arg("demo")).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr(&out));
    assert!(
        text.contains("8 rows → 8 branches → 8 dispatches"),
        "{text}"
    );
    assert!(!text.contains('✗'), "an unexpected answer: {text}");
    // The demo's repository is in a new temporary directory, never the current one.
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(
        entries.len(),
        1,
        "the demo made exactly one directory in TMPDIR"
    );
}

#[tokio::test]
async fn preview_of_a_gated_route_says_a_held_row_is_ignored_and_names_a_passing_row_s_branch() {
    let dir = TempDir::new().unwrap();
    let gated = local_config("message")
        + "events = [\"INSERT\", \"UPDATE\"]\nrun_when = { column = \"status\", equals = \"approved\" }\n";
    std::fs::write(dir.path().join("rowbranch.toml"), gated).unwrap();
    let body = dir.path().join("row.json");
    let mut row = insert(json!(9), "Add dark mode");
    row["record"]["status"] = json!("new");
    std::fs::write(&body, row.to_string()).unwrap();
    let out = run(rowbranch(dir.path()).arg("preview").arg(&body)).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("200 ignored (reason not_ready)"), "{text}");
    assert!(
        text.contains(r#"run_when is status = "approved" and the row holds "new""#),
        "{text}"
    );

    row["record"]["status"] = json!("approved");
    std::fs::write(&body, row.to_string()).unwrap();
    let out = run(rowbranch(dir.path()).arg("preview").arg(&body)).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("feedback/9-add-dark-mode"),
        "{}",
        stdout(&out)
    );

    // A table no route takes is the server's 422, not a 200.
    row["table"] = json!("comments");
    std::fs::write(&body, row.to_string()).unwrap();
    let out = run(rowbranch(dir.path()).arg("preview").arg(&body)).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).contains("422"), "{}", stdout(&out));
}
