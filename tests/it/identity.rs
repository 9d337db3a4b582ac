//! The row's id is its identity (SPEC §4): redeliveries, edited texts and string ids map to the
//! branch the row already has, and a row whose id only starts like another's is another row.

use serde_json::json;

use crate::support::app::{spawn_app, Options};
use crate::support::faulty_forge::Op;
#[tokio::test]
async fn a_redelivery_is_answered_from_one_read_without_any_write() {
    let app = spawn_app(Options::default().faulty()).await;
    app.dispatched(json!(42), "Add dark mode!").await;
    assert_eq!(app.forge().calls(Op::Claim), 1);
    assert_eq!(app.forge().calls(Op::Dispatch), 1);

    app.forge().reset_counts();
    for _ in 0..3 {
        app.duplicate(json!(42), "Add dark mode!", "branch_exists")
            .await;
    }
    assert_eq!(app.forge().calls(Op::RowBranches), 3);
    assert_eq!(app.forge().writes(), 0, "no claim, dispatch or release");
    app.expect_dispatches(1).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_edited_text_does_not_make_a_handled_row_new() {
    let app = spawn_app(Options::default().faulty()).await;
    app.dispatched(json!(42), "Add dark mode!").await;
    app.forge().reset_counts();
    let reply = app.post_insert(json!(42), "Add a dark theme, please").await;
    reply.expect_duplicate("branch_exists");
    // The answer names the branch the row has, not the one the new text would give.
    assert_eq!(reply.body["branch"], "feedback/42-add-dark-mode");
    assert_eq!(app.forge().writes(), 0);
    // Without any text at all, the same.
    app.duplicate(json!(42), "", "branch_exists").await;
    assert_eq!(app.branches().await, ["feedback/42-add-dark-mode"]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_number_and_the_same_number_as_a_string_are_one_row() {
    let app = spawn_app(Options::default()).await;
    app.dispatched(json!(7), "Seven").await;
    let reply = app.post_insert(json!("7"), "Seven").await;
    reply.expect_duplicate("branch_exists");
    assert_eq!(reply.body["id"], "7");

    app.dispatched(json!("8"), "Eight").await;
    app.duplicate(json!(8), "Eight", "branch_exists").await;
    assert_eq!(
        app.branches().await,
        ["feedback/7-seven", "feedback/8-eight"]
    );
    app.expect_dispatches(2).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_row_whose_id_starts_like_another_rows_id_is_another_row() {
    let app = spawn_app(Options::default()).await;
    app.dispatched(json!(42), "Add dark mode!").await;
    app.dispatched(json!(420), "Add dark mode!").await;
    // The other way round: 73's listing also matches `feedback/730…`, which is not its own.
    app.dispatched(json!(730), "Faster search").await;
    app.dispatched(json!(73), "Faster search").await;
    // Without a slug, the bare `{prefix}/{id}` branch too.
    app.dispatched(json!(9), "").await;
    app.dispatched(json!(90), "").await;
    assert_eq!(
        app.branches().await,
        [
            "feedback/42-add-dark-mode",
            "feedback/420-add-dark-mode",
            "feedback/73-faster-search",
            "feedback/730-faster-search",
            "feedback/9",
            "feedback/90",
        ]
    );
    app.expect_dispatches(6).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_uuid_row_gets_one_branch() {
    let app = spawn_app(Options::default()).await;
    let id = "0b7c9e1a-5f3d-4c2a-9e8b-7d6f5a4b3c21";
    let reply = app.post_insert(json!(id), "Export to CSV").await;
    reply.expect(200, "dispatched");
    assert_eq!(reply.body["branch"], format!("feedback/{id}-export-to-csv"));
    app.duplicate(json!(id), "Export to CSV (edited)", "branch_exists")
        .await;
    app.shutdown().await;
}
