//! What GitHub asks of every request, on every kind rowbranch sends: the App's JWT requests,
//! the installation-token mints, the installation's requests, and `init`'s calls without
//! credentials — each with `User-Agent: rowbranch/VERSION`, `Accept:
//! application/vnd.github+json` and `X-GitHub-Api-Version: 2022-11-28`, once. The fake, like
//! GitHub, refuses a request without a `User-Agent`.

use fake_github::{FakeGithub, Op, TEST_APP_PRIVATE_KEY_PEM};
use serde_json::json;
use tokio::process::Command;

use crate::support::github::{fake, spawn, GithubOptions, REPO};
use crate::support::random::random_secret;
use crate::support::tools::output_text;

/// Runs the binary with `args`; panics unless it exits 0.
async fn rowbranch(args: &[&str], env: &[(&str, &str)]) {
    let out = Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(args)
        .env_remove("GITHUB_API_URL")
        .env_remove("RUST_LOG")
        // GitHub's requests are the point, not a table in the test's database.
        .env_remove("DATABASE_URL")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("the binary runs");
    assert!(out.status.success(), "{args:?}: {}", output_text(&out));
}

#[tokio::test]
async fn every_request_names_rowbranch_the_media_type_and_the_api_version() {
    let fake = fake().await;
    fake.add_workflow(
        REPO,
        "rowbranch.yml",
        "on:\n  repository_dispatch:\n    types: [feedback]\njobs: {}\n",
    );
    // serve: the installation lookup and the token mint (JWT), the row's reads, the claim and
    // the dispatch (the installation's token), and `/readyz`'s GET /app.
    let app = spawn(&fake, GithubOptions::default()).await;
    let answer = app.post_insert(json!(7), "Add dark mode").await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(app.get("/readyz").await.status, 200);
    app.shutdown().await;

    // doctor: GET /app, the installation's permissions, the workflows.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rowbranch.toml");
    std::fs::write(&config, GithubOptions::default().config_text(&fake)).unwrap();
    let secret = random_secret();
    rowbranch(
        &["doctor", "--config", config.to_str().unwrap()],
        &[
            ("ROWBRANCH_WEBHOOK_SECRET", &secret),
            ("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM),
        ],
    )
    .await;

    // init: the owner's account type and the manifest's conversion, without credentials.
    let setup = tempfile::tempdir().unwrap();
    let d = setup.path().to_str().unwrap();
    let api = fake.url();
    rowbranch(
        &[
            "init",
            "--dir",
            d,
            "--repo",
            REPO,
            "--url",
            "https://hooks.example.com",
            "--api-url",
            &api,
        ],
        &[],
    )
    .await;
    fake.add_manifest_code("code");
    rowbranch(
        &[
            "init",
            "--dir",
            d,
            "--manifest-code",
            "code",
            "--api-url",
            &api,
        ],
        &[],
    )
    .await;

    let requests = fake.requests();
    for op in [
        Op::GetInstallation,
        Op::MintToken,
        Op::MatchingRefs,
        Op::CreateRef,
        Op::Dispatch,
        Op::GetApp,
        Op::GetContents,
        Op::GetUser,
        Op::ManifestConversion,
    ] {
        assert!(
            requests.iter().any(|r| r.op == Some(op)),
            "no {op:?} request was made"
        );
    }
    let user_agent = format!("rowbranch/{}", env!("CARGO_PKG_VERSION"));
    for request in &requests {
        let what = format!("{} {} ({:?})", request.method, request.path, request.op);
        assert_eq!(
            request.header_values("user-agent"),
            [user_agent.as_str()],
            "{what}"
        );
        assert_eq!(
            request.header_values("accept"),
            ["application/vnd.github+json"],
            "{what}"
        );
        assert_eq!(
            request.header_values("x-github-api-version"),
            ["2022-11-28"],
            "{what}"
        );
        assert_ne!(request.status, Some(403), "{what}");
    }
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn the_fake_refuses_a_request_without_a_user_agent_as_github_does() {
    let fake = FakeGithub::start().await;
    let bare = reqwest::Client::new();
    let answer = bare
        .get(format!("{}/users/acme", fake.url()))
        .send()
        .await
        .expect("the fake answers");
    assert_eq!(answer.status().as_u16(), 403);
    assert!(answer.text().await.unwrap().contains("User-Agent"));
}
