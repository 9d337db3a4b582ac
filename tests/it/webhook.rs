//! SPEC §3's table, one row at a time: each status and outcome, and what it left behind.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::app::{
    spawn_app, spawn_two_apps, Options, TestApp, GATED_DISPATCH, GATED_ROUTE,
};
use crate::support::faulty_forge::{Fault, Op, OTHER_DETAIL};
use crate::support::http::{delivery, insert, raw_head, raw_http, Reply};
/// An app on the faulty forge whose next `op` fails with `fault`.
/// An app whose forge fails `op` once with `fault`, and its answer to row 42: a `status` error.
async fn failing_once(op: Op, fault: Fault, status: u16) -> (TestApp, Reply) {
    let app = spawn_app(Options::default().faulty()).await;
    app.forge().fail_next(op, 1, fault);
    let reply = app.post_insert(json!(42), "Add dark mode!").await;
    reply.expect(status, "error");
    (app, reply)
}

#[tokio::test]
async fn a_new_row_is_dispatched_on_its_own_branch() {
    let app = spawn_app(Options::default()).await;
    let reply = app.post_insert(json!(42), "Add dark mode!").await;
    reply.expect(200, "dispatched");
    assert_eq!(reply.body["id"], "42");
    assert_eq!(reply.body["branch"], "feedback/42-add-dark-mode");
    assert_eq!(reply.body["repo"], "acme/app");
    assert_eq!(app.branches().await, ["feedback/42-add-dark-mode"]);

    let lines = app.expect_dispatches(1).await;
    assert_eq!(lines[0]["event_type"], "feedback");
    let payload = &lines[0]["client_payload"];
    assert_eq!(payload["id"], "42");
    assert_eq!(payload["branch"], "feedback/42-add-dark-mode");
    assert_eq!(payload["base"], "main");
    assert_eq!(payload["repo"], "acme/app");
    assert_eq!(payload["table"], "feedbacks");
    assert_eq!(payload["text"], "Add dark mode!");
    app.shutdown().await;
}

#[tokio::test]
async fn a_redelivery_is_a_duplicate_because_the_branch_exists() {
    let app = spawn_app(Options::default()).await;
    app.dispatched(json!(42), "Add dark mode!").await;
    let again = app.post_insert(json!(42), "Add dark mode!").await;
    again.expect_duplicate("branch_exists");
    assert_eq!(again.body["id"], "42");
    assert_eq!(again.body["branch"], "feedback/42-add-dark-mode");
    assert_eq!(again.body["repo"], "acme/app");
    app.expect_dispatches(1).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_row_whose_merged_pull_request_deleted_its_branch_is_a_duplicate() {
    let app = spawn_app(Options::default().faulty()).await;
    app.forge().add_pull_request("feedback/5-x");
    // Another row's pull request, whose head only starts like this row's branch.
    app.forge().add_pull_request("feedback/6-x-y");
    let reply = app.post_insert(json!(5), "x").await;
    reply.expect_duplicate("pull_request");
    assert_eq!(reply.body["branch"], "feedback/5-x");
    assert_eq!(app.forge().writes(), 0, "nothing is claimed or dispatched");
    assert!(app.branches().await.is_empty());

    // `feedback/6-x` is not `feedback/6-x-y`: row 6 is new.
    app.dispatched(json!(6), "x").await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_branch_created_between_check_and_claim_makes_the_claim_taken() {
    let app = spawn_app(Options::default().faulty()).await;
    app.forge().lose_next_claim();
    let reply = app.post_insert(json!(42), "Add dark mode!").await;
    reply.expect_duplicate("claim_taken");
    assert_eq!(reply.body["branch"], "feedback/42-add-dark-mode");
    assert_eq!(
        app.forge().calls(Op::Dispatch),
        0,
        "the loser never dispatches"
    );
    assert_eq!(
        app.forge().calls(Op::Release),
        0,
        "nor releases the winner's claim"
    );
    assert_eq!(app.branches().await, ["feedback/42-add-dark-mode"]);
    assert!(app.dispatches().is_empty());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_won_by_another_process_is_claim_taken_there() {
    // The first app is slow between its checks and its claim, so the second claims first.
    let (slow, fast) = spawn_two_apps(Options::default().faulty()).await;
    slow.forge().delay(Op::Claim, Duration::from_millis(600));
    let body = insert(json!(42), "Add dark mode!");
    let slow_reply = tokio::spawn({
        let (url, secret, body) = (slow.url.clone(), slow.secret.clone(), body.to_string());
        async move {
            reqwest::Client::new()
                .post(format!("{url}/webhook"))
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {secret}"))
                .body(body)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    });
    // Once the slow app has looked and found nothing, the fast one claims and dispatches.
    crate::support::wait::eventually("the slow app's check", || async {
        (slow.forge().calls(Op::Claim) == 1).then_some(())
    })
    .await;
    fast.post_json(&body).await.expect(200, "dispatched");
    let slow_reply: Value = serde_json::from_str(&slow_reply.await.unwrap()).unwrap();
    assert_eq!(slow_reply["outcome"], "duplicate", "{slow_reply}");
    assert_eq!(slow_reply["reason"], "claim_taken", "{slow_reply}");
    slow.expect_dispatches(1).await;
    assert_eq!(slow.forge().calls(Op::Dispatch), 0);
    slow.shutdown().await;
    fast.shutdown().await;
}

#[tokio::test]
async fn a_copy_that_arrives_while_the_row_is_being_handled_joins_it_in_flight() {
    let app = spawn_app(Options::default().on_dispatch(GATED_DISPATCH)).await;
    let first = tokio::spawn({
        let (addr, request) = (app.addr, delivery(&app.secret, json!(42), "Add dark mode!"));
        async move { raw_http(addr, &request).await }
    });
    // The branch is claimed and the dispatch is held at the gate: the run is under way.
    app.wait_for_branches(1).await;
    let second = tokio::spawn({
        let (addr, request) = (app.addr, delivery(&app.secret, json!(42), "Add dark mode!"));
        async move { raw_http(addr, &request).await }
    });
    // Settling time for the second copy to reach the server; not an assertion.
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.open_gate();
    let first = first.await.unwrap();
    let second = second.await.unwrap();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.contains(r#""outcome":"dispatched""#), "{first}");
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(second.contains(r#""reason":"in_flight""#), "{second}");
    assert!(
        second.contains(r#""branch":"feedback/42-add-dark-mode""#),
        "{second}"
    );
    app.expect_dispatches(1).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_insert_into_a_table_without_a_route_is_refused_and_an_update_of_an_inserts_route_ignored(
) {
    let app = spawn_app(Options::default()).await;
    let mut other_table = insert(json!(7), "Nice work");
    other_table["table"] = json!("comments");
    let mut other_schema = insert(json!(8), "Nice work");
    other_schema["schema"] = json!("private");
    // The route takes only inserts.
    let mut update = insert(json!(42), "Add dark mode (edited)");
    update["type"] = json!("UPDATE");
    update["old_record"] = json!({ "id": 42, "message": "Add dark mode" });
    // A table no route takes is a setup to fix: 422, which pg_net's log does not read as a
    // success.
    for (body, says) in [
        (other_table, "public.comments"),
        (other_schema, "private.feedbacks"),
    ] {
        app.post_json(&body)
            .await
            .expect(422, "error")
            .expect_message(says);
    }
    app.post_json(&update)
        .await
        .expect(200, "ignored")
        .expect_message("UPDATE");
    app.assert_untouched().await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_update_is_dispatched_by_a_route_that_takes_updates() {
    let routes = r#"
[[routes]]
table = "feedbacks"
repo = "acme/app"
events = ["INSERT", "UPDATE"]
branch_prefix = "feedback"
event_type = "feedback"
"#;
    let app = spawn_app(Options::default().routes(routes)).await;
    let mut update = insert(json!(42), "Add dark mode");
    update["type"] = json!("UPDATE");
    app.post_json(&update).await.expect(200, "dispatched");
    app.shutdown().await;
}

#[tokio::test]
async fn a_slow_dispatch_is_accepted_and_finishes_in_the_background() {
    let options = Options::default()
        .respond_within_ms(200)
        .on_dispatch(GATED_DISPATCH);
    let app = spawn_app(options).await;
    let reply = app.post_insert(json!(42), "Add dark mode!").await;
    reply.expect(202, "accepted");
    assert_eq!(reply.body["id"], "42");
    assert_eq!(reply.body["branch"], "feedback/42-add-dark-mode");
    assert_eq!(reply.body["repo"], "acme/app");
    assert!(app.dispatches().is_empty(), "the dispatch is still held");

    app.open_gate();
    let lines = app.wait_for_dispatches(1).await;
    assert_eq!(
        lines[0]["client_payload"]["branch"],
        "feedback/42-add-dark-mode"
    );
    assert_eq!(app.branches().await, ["feedback/42-add-dark-mode"]);
    app.duplicate(json!(42), "Add dark mode!", "branch_exists")
        .await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_body_not_of_the_supabase_shape_is_a_400_that_names_the_field() {
    let app = spawn_app(Options::default()).await;
    let cases: &[(Value, &str)] = &[
        (
            json!({"table": "feedbacks", "schema": "public", "record": {"id": 1}}),
            "`type`",
        ),
        (
            json!({"type": "INSERT", "schema": "public", "record": {"id": 1}}),
            "`table`",
        ),
        (
            json!({"type": "INSERT", "table": "feedbacks", "record": {"id": 1}}),
            "`schema`",
        ),
        (
            json!({"type": "INSERT", "table": "feedbacks", "schema": "public"}),
            "`record`",
        ),
        (
            json!({"type": "INSERT", "table": "feedbacks", "schema": "public", "record": [1]}),
            "`record`",
        ),
        (
            json!({"type": "INSERT", "table": 5, "schema": "public", "record": {"id": 1}}),
            "`table`",
        ),
        (
            json!({"type": "MERGE", "table": "feedbacks", "schema": "public", "record": {"id": 1}}),
            "`type`",
        ),
        (
            json!({"type": "INSERT", "table": "feedbacks", "schema": "public", "record": {"id": 1}, "old_record": "x"}),
            "`old_record`",
        ),
        (
            json!({"type": "DELETE", "table": "feedbacks", "schema": "public", "record": null}),
            "`old_record`",
        ),
    ];
    for (body, field) in cases {
        let reply = app.post_json(body).await;
        reply.expect(400, "error");
        assert!(reply.message().contains(field), "{body} → {}", reply.text);
    }
    assert!(app.branches().await.is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn a_row_without_a_usable_id_is_a_422_that_says_why() {
    let app = spawn_app(Options::default()).await;
    let long = "a".repeat(101);
    let cases: &[(Option<Value>, &str)] = &[
        (Some(json!("../x")), "'/'"),
        (Some(json!("a b")), "a space"),
        (Some(Value::Null), "null"),
        (Some(json!({"n": 1})), "an object"),
        (None, "no `id` column"),
        (Some(json!("x.lock")), ".lock"),
        (Some(json!(long)), "101 characters"),
        (Some(json!("..x")), "'.'"),
        (Some(json!("x.")), "ends with '.'"),
        (Some(json!("")), "empty"),
    ];
    for (id, why) in cases {
        let mut body = insert(json!(0), "Sneaky");
        match id {
            Some(id) => body["record"]["id"] = id.clone(),
            None => {
                body["record"].as_object_mut().unwrap().remove("id");
            }
        }
        let reply = app.post_json(&body).await;
        reply.expect(422, "error");
        assert!(reply.message().contains(why), "{id:?} → {}", reply.text);
    }
    // Nothing was claimed.
    app.assert_untouched().await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_bug_in_the_forge_is_a_500_that_says_nothing_more() {
    let (app, reply) = failing_once(Op::RowBranches, Fault::Other, 500).await;
    assert_eq!(
        reply.body,
        json!({"outcome": "error", "message": "internal error"})
    );
    assert!(!reply.text.contains(OTHER_DETAIL));
    app.assert_untouched().await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_claim_the_forge_refuses_is_a_503_that_leaves_nothing_behind() {
    // A refusal outside the dispatch is the forge's state, not the row's: retry later.
    let (app, reply) = failing_once(Op::Claim, Fault::Refused, 503).await;
    assert_eq!(reply.headers["retry-after"], "60");
    assert_eq!(app.forge().calls(Op::Dispatch), 0);
    assert!(app.branches().await.is_empty());
    app.dispatched(json!(42), "Add dark mode!").await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_failing_on_dispatch_is_a_503_that_leaves_no_claim_and_a_redelivery_then_succeeds() {
    // Fails until the file `ok` exists beside the repository.
    let options = Options::default()
        .on_dispatch("[ -e ok ] && cat >/dev/null")
        .faulty();
    let app = spawn_app(options).await;
    app.forge().expect_inner_failures();
    let reply = app.post_insert(json!(42), "Add dark mode!").await;
    reply.expect(503, "error");
    let retry_after = reply
        .headers
        .get("retry-after")
        .expect("a Retry-After header");
    let secs: u64 = retry_after
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in seconds");
    assert!(secs >= 1);
    assert_eq!(app.forge().calls(Op::Release), 1);
    // The claim was rolled back.
    app.assert_untouched().await;

    std::fs::write(app.dir.path().join("ok"), b"").unwrap();
    app.dispatched(json!(42), "Add dark mode!").await;
    assert_eq!(app.branches().await, ["feedback/42-add-dark-mode"]);
    app.expect_dispatches(1).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_unavailable_forge_is_a_503_with_its_retry_after() {
    let app = spawn_app(Options::default().faulty()).await;
    app.forge().fail_next(
        Op::Dispatch,
        1,
        Fault::Unavailable {
            retry_after: Some(Duration::from_secs(7)),
        },
    );
    let reply = app.post_insert(json!(42), "Add dark mode!").await;
    reply.expect(503, "error");
    assert_eq!(reply.headers["retry-after"], "7");
    assert_eq!(app.forge().calls(Op::Release), 1, "the claim is released");
    assert!(app.branches().await.is_empty());

    // Unavailable before the claim: nothing to release, and no hint means a default wait.
    app.forge()
        .fail_next(Op::Base, 1, Fault::Unavailable { retry_after: None });
    let reply = app.post_insert(json!(42), "Add dark mode!").await;
    reply.expect(503, "error");
    assert!(reply.headers.contains_key("retry-after"));
    assert_eq!(
        app.forge().calls(Op::Claim),
        1,
        "only the first delivery claimed"
    );

    app.dispatched(json!(42), "Add dark mode!").await;
    app.expect_dispatches(1).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_dispatch_the_forge_refuses_is_a_422_and_the_claim_is_released() {
    let (app, reply) = failing_once(Op::Dispatch, Fault::Refused, 422).await;
    reply.expect_message("refused");
    assert_eq!(app.forge().calls(Op::Release), 1);
    assert!(app.branches().await.is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn a_body_over_max_body_bytes_is_a_413() {
    let app = spawn_app(Options::default().max_body_bytes(1024)).await;
    // Exactly at the limit is fine.
    let mut body = insert(json!(42), "Add dark mode!").to_string();
    body.push_str(&" ".repeat(1024 - body.len()));
    app.post_bytes(body.clone()).await.expect(200, "dispatched");

    // One byte over, with a declared length.
    body.push(' ');
    let reply = app.post_bytes(body).await;
    reply.expect(413, "error");
    reply.expect_message("1024");

    // Over the limit without a Content-Length: chunked, so only reading tells.
    let chunk = format!("{:x}\r\n{}\r\n", 512, " ".repeat(512));
    let request = format!(
        "{}{}0\r\n\r\n",
        raw_head(&app.secret, "Transfer-Encoding: chunked"),
        chunk.repeat(4)
    );
    let answer = raw_http(app.addr, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains(r#""outcome":"error""#), "{answer}");
    app.expect_dispatches(1).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_body_that_is_not_json_by_its_content_type_is_a_415() {
    let app = spawn_app(Options::default()).await;
    let body = insert(json!(42), "Add dark mode!").to_string();
    let auth = format!("Bearer {}", app.secret);
    for headers in [
        vec![
            ("content-type", "text/plain"),
            ("authorization", auth.as_str()),
        ],
        vec![("authorization", auth.as_str())],
        vec![
            ("content-type", "application/x-www-form-urlencoded"),
            ("authorization", auth.as_str()),
        ],
    ] {
        let reply = app.post_raw(body.clone(), &headers).await;
        reply.expect(415, "error");
        reply.expect_message("application/json");
    }
    // A charset parameter is still JSON.
    app.post_raw(
        body,
        &[
            ("content-type", "application/json; charset=utf-8"),
            ("authorization", &auth),
        ],
    )
    .await
    .expect(200, "dispatched");
    app.shutdown().await;
}

/// A row answers `dispatched` only once its line is in the dispatch log: tokio's `File` finishes
/// writes in the background, so an unflushed append could land after the answer, or fail unseen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatch_line_is_in_the_log_when_the_webhook_answers_dispatched() {
    let app = spawn_app(Options::default()).await;
    for id in 1..=100 {
        app.dispatched(json!(id), "Row").await;
        assert_eq!(app.dispatches().len(), id as usize, "after row {id}");
    }
    app.shutdown().await;
}

const ROUTE_WITH_TEMPLATE: &str = r#"
[[routes]]
table = "feedbacks"
repo = "acme/app"
branch_prefix = "feedback"
event_type = "feedback"
payload_template = "payload.json.j2"
"#;

#[tokio::test]
async fn a_payload_that_cannot_be_sent_is_a_422_before_anything_is_claimed() {
    let template = r#"{"id": {{ id }}, "branch": {{ branch }}, "note": {{ record.note }}}"#;
    let options = Options::default()
        .routes(ROUTE_WITH_TEMPLATE)
        .file("payload.json.j2", template)
        .faulty();
    let app = spawn_app(options).await;
    let mut body = insert(json!(42), "Add dark mode!");
    body["record"]["note"] = json!("n".repeat(70 * 1024));
    let reply = app.post_json(&body).await;
    reply.expect(422, "error");
    reply.expect_message("bytes");
    assert_eq!(app.forge().writes(), 0, "no claim to roll back");
    assert!(app.branches().await.is_empty());

    // The template, found relative to the config file, shapes the payload.
    body["record"]["note"] = json!("short");
    app.post_json(&body).await.expect(200, "dispatched");
    let lines = app.expect_dispatches(1).await;
    assert_eq!(
        lines[0]["client_payload"],
        json!({"id": "42", "branch": "feedback/42-add-dark-mode", "note": "short"})
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_long_text_is_cut_to_fit_the_dispatch() {
    let app = spawn_app(Options::default()).await;
    let text = "Please make it faster. ".repeat(4000);
    let reply = app.post_insert(json!(42), &text).await;
    reply.expect(200, "dispatched");
    assert_eq!(
        reply.body["branch"],
        "feedback/42-please-make-it-faster-please-make-it"
    );
    let lines = app.expect_dispatches(1).await;
    let payload = &lines[0]["client_payload"];
    assert_eq!(payload["text_truncated"], true);
    let kept = payload["text"].as_str().unwrap();
    assert!(text.starts_with(kept) && kept.len() < text.len());
    assert!(payload.to_string().len() < 64 * 1024);
    app.shutdown().await;
}

#[tokio::test]
async fn a_gated_row_runs_once_when_an_update_approves_it_and_never_again() {
    let app = spawn_app(Options::default().routes(GATED_ROUTE).faulty()).await;
    let row = |status: Value| {
        json!({ "id": 7, "message": "Add dark mode", "status": status,
                "created_at": "2026-12-02T09:30:00.000000+00:00" })
    };
    let event = |kind: &str, old: Value, new: Value| {
        let mut body = insert(json!(7), "");
        body["type"] = json!(kind);
        body["record"] = row(new);
        body["old_record"] = if old.is_null() { old } else { row(old) };
        body
    };
    // Written by the public: held, saying what the gate wants.
    let held = app
        .post_json(&event("INSERT", Value::Null, json!("new")))
        .await;
    held.expect(200, "ignored")
        .expect_message(r#"status = "approved""#);
    assert_eq!(held.reason(), "not_ready");
    app.assert_untouched().await;
    // Approved by the owner: one branch, one dispatch.
    app.post_json(&event("UPDATE", json!("new"), json!("approved")))
        .await
        .expect(200, "dispatched")
        .expect_branch("feedback/7-add-dark-mode");
    // A later write to the approved row (rowbranch's own status, an `updated_at` trigger) is
    // ignored and asks nothing of GitHub.
    app.forge().reset_counts();
    let echo = app
        .post_json(&event("UPDATE", json!("approved"), json!("approved")))
        .await;
    echo.expect(200, "ignored");
    assert_eq!(echo.reason(), "passed_before");
    let asked = [
        Op::RowBranches,
        Op::HasPullRequest,
        Op::Base,
        Op::Claim,
        Op::Dispatch,
    ];
    let asked: usize = asked.into_iter().map(|op| app.forge().calls(op)).sum();
    assert_eq!(asked, 0, "an echo asks nothing of the forge");
    // Unapproved and approved again: still one branch, one run.
    let unapproved = app
        .post_json(&event("UPDATE", json!("approved"), json!("new")))
        .await;
    assert_eq!(unapproved.reason(), "not_ready");
    app.post_json(&event("UPDATE", json!("new"), json!("approved")))
        .await
        .expect_duplicate("branch_exists");
    assert_eq!(app.dispatches().len(), 1);
    assert_eq!(app.branches().await, ["feedback/7-add-dark-mode"]);
    app.shutdown().await;
}
