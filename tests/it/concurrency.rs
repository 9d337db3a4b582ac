//! Many copies of one row at once, in one process and across two; and a client that goes away.

use std::collections::BTreeMap;

use futures_util::future::join_all;
use serde_json::json;
use tokio::net::TcpStream;

use crate::support::app::{spawn_app, spawn_two_apps, Options, TestApp, GATED_DISPATCH};
use crate::support::http::{delivery, insert, send_whole, Reply};

/// Sends `copies` identical deliveries of row 42 to each app at once; returns every answer.
async fn burst(apps: &[&TestApp], copies: usize) -> Vec<Reply> {
    let body = insert(json!(42), "Add dark mode!");
    let sends = apps
        .iter()
        .flat_map(|app| (0..copies).map(|_| app.post_json(&body)));
    join_all(sends).await
}

/// `outcome` or `duplicate/reason` → how many answers said it.
fn tally(replies: &[Reply]) -> BTreeMap<String, usize> {
    let mut tally = BTreeMap::new();
    for reply in replies {
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(
            reply.body["branch"], "feedback/42-add-dark-mode",
            "{}",
            reply.text
        );
        let key = match reply.outcome() {
            "duplicate" => format!("duplicate/{}", reply.reason()),
            other => other.to_owned(),
        };
        *tally.entry(key).or_default() += 1;
    }
    tally
}

/// An app whose dispatches wait at the gate, and a connection that has sent it row 42 whole
/// and not read the answer.
async fn sent_to_a_gated_app() -> (TestApp, TcpStream) {
    let app = spawn_app(Options::default().on_dispatch(GATED_DISPATCH)).await;
    let request = delivery(&app.secret, json!(42), "Add dark mode!");
    let stream = send_whole(app.addr, &request).await;
    (app, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_copies_of_a_row_dispatch_exactly_once() {
    let app = spawn_app(Options::default()).await;
    let replies = burst(&[&app], 50).await;
    let tally = tally(&replies);
    assert_eq!(tally.get("dispatched"), Some(&1), "{tally:?}");
    assert_eq!(tally.values().sum::<usize>(), 50);
    // In one process, copies join the run or find its branch; none races it to the claim.
    assert!(!tally.contains_key("duplicate/claim_taken"), "{tally:?}");
    assert_eq!(app.branches().await, ["feedback/42-add-dark-mode"]);
    app.expect_dispatches(1).await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_copies_across_two_processes_sharing_a_repository_dispatch_exactly_once() {
    let (first, second) = spawn_two_apps(Options::default()).await;
    let replies = burst(&[&first, &second], 25).await;
    let tally = tally(&replies);
    assert_eq!(tally.get("dispatched"), Some(&1), "{tally:?}");
    assert_eq!(tally.values().sum::<usize>(), 50);
    assert_eq!(first.branches().await, ["feedback/42-add-dark-mode"]);
    first.expect_dispatches(1).await;
    first.shutdown().await;
    second.shutdown().await;
}

#[tokio::test]
async fn a_client_that_disconnects_does_not_cancel_the_work() {
    let (app, stream) = sent_to_a_gated_app().await;
    // Gone before any answer.
    drop(stream);

    app.wait_for_branches(1).await;
    app.open_gate();
    let lines = app.wait_for_dispatches(1).await;
    assert_eq!(lines.len(), 1);
    assert_eq!(
        lines[0]["client_payload"]["branch"],
        "feedback/42-add-dark-mode"
    );
    app.duplicate(json!(42), "Add dark mode!", "branch_exists")
        .await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_client_that_disconnects_while_the_dispatch_runs_does_not_cancel_it() {
    let (app, stream) = sent_to_a_gated_app().await;
    // The claim is made and the dispatch is held: the client leaves mid-run.
    app.wait_for_branches(1).await;
    drop(stream);
    app.open_gate();
    app.wait_for_dispatches(1).await;
    assert_eq!(app.branches().await, ["feedback/42-add-dark-mode"]);
    app.shutdown().await;
}
