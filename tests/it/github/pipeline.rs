//! The pipeline on GitHub: one ref and one dispatch per row, however it arrives.

use std::collections::BTreeMap;

use fake_github::{FakeGithub, PullState};
use serde_json::json;

use crate::support::github::{
    branches, dispatched_branches, fake, on_a_fake, spawn, GithubOptions, REPO,
};

#[tokio::test]
async fn a_new_row_is_claimed_at_the_default_branch_head_and_dispatched() {
    let fake = fake().await;
    let main = fake.branch_sha(REPO, "main").unwrap();
    let app = spawn(&fake, GithubOptions::default()).await;
    let reply = app.post_insert(json!(42), "Add dark mode!").await;
    reply.expect(200, "dispatched");
    assert_eq!(reply.body["branch"], "feedback/42-add-dark-mode");
    assert_eq!(reply.body["repo"], REPO);
    assert_eq!(branches(&fake), ["feedback/42-add-dark-mode"]);
    assert_eq!(
        fake.branch_sha(REPO, "feedback/42-add-dark-mode"),
        Some(main.clone())
    );
    let dispatches = fake.dispatches(REPO);
    assert_eq!(dispatches.len(), 1);
    assert_eq!(dispatches[0].event_type, "feedback");
    let payload = &dispatches[0].client_payload;
    assert_eq!(payload["id"], "42");
    assert_eq!(payload["base"], "main");
    assert_eq!(payload["base_sha"], main);
    assert_eq!(payload["text"], "Add dark mode!");
    app.duplicate(json!(42), "Add dark mode!", "branch_exists")
        .await;
    assert_eq!(fake.dispatches(REPO).len(), 1);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_deliveries_through_two_instances_make_one_ref_and_one_dispatch() {
    let fake = fake().await;
    let first = spawn(&fake, GithubOptions::default()).await;
    let second = spawn(&fake, GithubOptions::default()).await;
    let sends = (0..50).map(|i| {
        let app = if i % 2 == 0 { &first } else { &second };
        app.post_insert(json!(7), "Crash on upload")
    });
    let replies = futures_util::future::join_all(sends).await;
    let mut tally = BTreeMap::<String, usize>::new();
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.text);
        *tally
            .entry(format!("{} {}", reply.outcome(), reply.reason()))
            .or_default() += 1;
    }
    assert_eq!(tally.get("dispatched "), Some(&1), "{tally:?}");
    assert_eq!(branches(&fake), ["feedback/7-crash-on-upload"]);
    assert_eq!(dispatched_branches(&fake), ["feedback/7-crash-on-upload"]);
    first.shutdown().await;
    second.shutdown().await;
}

#[tokio::test]
async fn a_merged_pull_request_whose_branch_is_gone_is_a_duplicate_without_a_write() {
    let fake = fake().await;
    fake.add_pull(REPO, "feedback/5-fix-login", PullState::Closed, true);
    let app = spawn(&fake, GithubOptions::default()).await;
    let reply = app.post_insert(json!(5), "Fix login").await;
    reply.expect_duplicate("pull_request");
    assert_eq!(reply.body["branch"], "feedback/5-fix-login");
    assert!(fake.writes().is_empty(), "{:?}", fake.writes());
    assert!(branches(&fake).is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn an_edited_text_is_a_duplicate_of_the_row_not_a_new_one() {
    let (fake, app) = on_a_fake().await;
    app.dispatched(json!(42), "Add dark mode!").await;
    let reply = app.post_insert(json!(42), "Dark mode, please").await;
    reply.expect_duplicate("branch_exists");
    assert_eq!(reply.body["branch"], "feedback/42-add-dark-mode");
    app.dispatched(json!(420), "Another row").await;
    assert_eq!(
        branches(&fake),
        ["feedback/42-add-dark-mode", "feedback/420-another-row"]
    );
    assert_eq!(fake.dispatches(REPO).len(), 2);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_rows_mint_one_installation_token() {
    let fake = fake().await;
    let app = spawn(
        &fake,
        GithubOptions {
            write_interval_ms: 5,
            ..GithubOptions::default()
        },
    )
    .await;
    for reply in app.post_inserts(1..=20, "A row").await {
        reply.expect(200, "dispatched");
    }
    assert_eq!(fake.token_mints(), 1);
    assert_eq!(fake.dispatches(REPO).len(), 20);
    app.shutdown().await;
}

#[tokio::test]
async fn a_token_that_github_expired_is_minted_again_and_kept() {
    let (fake, app) = on_a_fake().await;
    app.dispatched(json!(1), "One").await;
    assert_eq!(fake.token_mints(), 1);
    fake.expire_tokens();
    app.dispatched(json!(2), "Two").await;
    // Each request that met the 401 re-mints once (the token is dropped, one minted, the request sent again):
    // the row's two concurrent reads at most, never a loop.
    let after_expiry = fake.token_mints();
    assert!((2..=3).contains(&after_expiry), "{after_expiry} mints");
    app.dispatched(json!(3), "Three").await;
    assert_eq!(fake.token_mints(), after_expiry, "the new token is kept");
    assert_eq!(
        branches(&fake),
        ["feedback/1-one", "feedback/2-two", "feedback/3-three"]
    );
    app.shutdown().await;
}

#[tokio::test]
async fn the_installation_token_is_narrowed_to_the_routed_repository() {
    let fake = fake().await;
    fake.add_repo("acme/other");
    fake.install("acme/other", crate::support::github::INSTALLATION);
    let app = spawn(&fake, GithubOptions::default()).await;
    app.dispatched(json!(1), "One").await;
    let tokens = fake.tokens();
    assert_eq!(tokens.len(), 1);
    let narrowed: Vec<&str> = tokens[0]
        .repositories
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    assert_eq!(narrowed, ["acme/app"]);
    app.shutdown().await;
}

#[tokio::test]
async fn readyz_says_whether_github_takes_the_apps_credentials() {
    let (_fake, app) = on_a_fake().await;
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    app.shutdown().await;

    let stranger = FakeGithub::start().await;
    stranger.set_app_id(1);
    let stranger = std::sync::Arc::new(stranger);
    // The same App id and key, but the fake now expects another id: the JWT is refused.
    let app = spawn(&stranger, GithubOptions::default()).await;
    stranger.set_app_id(2);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text);
    assert_eq!(ready.body["status"], "not ready");
    app.shutdown().await;
}
