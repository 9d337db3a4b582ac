//! GitHub's faults: lost answers, 5xx, rate limits, refusals. Retried when GitHub says so, never
//! otherwise; a definite failure after a claim releases it.

use std::time::{Duration, Instant};

use fake_github::{Fault, Op};
use serde_json::json;

use crate::support::github::{branches, fake, spawn, GithubOptions, REPO};

#[tokio::test]
async fn a_refused_dispatch_releases_the_claim_and_a_redelivery_then_dispatches() {
    let fake = fake().await;
    fake.inject(
        Op::Dispatch,
        Fault::Unprocessable("Invalid request.".into()),
        1,
    );
    let app = spawn(&fake, GithubOptions::default()).await;
    let reply = app.post_insert(json!(3), "Dark mode").await;
    reply.expect(422, "error");
    assert!(
        reply.message().contains("Invalid request."),
        "{}",
        reply.text
    );
    assert!(branches(&fake).is_empty(), "the claim is released");
    app.dispatched(json!(3), "Dark mode").await;
    assert_eq!(branches(&fake), ["feedback/3-dark-mode"]);
    assert_eq!(fake.dispatches(REPO).len(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_claim_applied_then_answered_502_is_dispatched_once() {
    let fake = fake().await;
    fake.inject(Op::CreateRef, Fault::AppliedThen(502), 1);
    let app = spawn(&fake, GithubOptions::default()).await;
    app.dispatched(json!(4), "Export").await;
    assert_eq!(branches(&fake), ["feedback/4-export"]);
    assert_eq!(
        fake.requests_for(Op::CreateRef).len(),
        2,
        "retried once, found it exists"
    );
    assert_eq!(fake.dispatches(REPO).len(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_claim_whose_connection_dropped_after_it_applied_is_dispatched() {
    let fake = fake().await;
    fake.inject(Op::CreateRef, Fault::DropAfterApply, 1);
    let app = spawn(&fake, GithubOptions::default()).await;
    app.dispatched(json!(4), "Export").await;
    assert_eq!(branches(&fake), ["feedback/4-export"]);
    assert_eq!(fake.dispatches(REPO).len(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_dispatch_applied_then_answered_502_is_dispatched_at_most_twice() {
    let fake = fake().await;
    fake.inject(Op::Dispatch, Fault::AppliedThen(502), 1);
    let app = spawn(&fake, GithubOptions::default()).await;
    app.dispatched(json!(5), "Search").await;
    let n = fake.dispatches(REPO).len();
    assert!((1..=2).contains(&n), "{n} dispatches");
    assert_eq!(branches(&fake), ["feedback/5-search"]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_secondary_rate_limit_is_waited_for_as_retry_after_says() {
    let fake = fake().await;
    fake.inject(
        Op::Dispatch,
        Fault::SecondaryRateLimit {
            retry_after_secs: 2,
        },
        1,
    );
    let app = spawn(&fake, GithubOptions::default()).await;
    app.dispatched(json!(6), "Paging").await;
    let tries = fake.requests_for(Op::Dispatch);
    assert_eq!(tries.len(), 2);
    let waited = tries[1].at.duration_since(tries[0].at);
    assert!(waited >= Duration::from_secs(2), "waited only {waited:?}");
    assert_eq!(fake.dispatches(REPO).len(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn an_exhausted_rate_limit_is_waited_for_until_its_reset() {
    let fake = fake().await;
    fake.inject(
        Op::MatchingRefs,
        Fault::PrimaryRateLimit { reset_in_secs: 2 },
        1,
    );
    let app = spawn(&fake, GithubOptions::default()).await;
    let started = Instant::now();
    app.dispatched(json!(8), "Limits").await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(fake.requests_for(Op::MatchingRefs).len(), 2);
    app.shutdown().await;
}

#[tokio::test]
async fn server_errors_on_reads_are_retried() {
    let fake = fake().await;
    fake.inject(Op::ListPulls, Fault::Status(500), 2);
    fake.inject(Op::GetRef, Fault::Status(502), 1);
    let app = spawn(&fake, GithubOptions::default()).await;
    app.dispatched(json!(9), "Retry me").await;
    assert_eq!(fake.requests_for(Op::ListPulls).len(), 3);
    assert_eq!(fake.pending_faults(), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn a_dispatch_failing_past_the_budget_releases_the_claim_and_answers_503() {
    let fake = fake().await;
    fake.inject(Op::Dispatch, Fault::Status(502), 1000);
    let options = GithubOptions {
        retry_budget_ms: 1500,
        ..GithubOptions::default()
    };
    let app = spawn(&fake, options).await;
    let reply = app.post_insert(json!(10), "Budget").await;
    reply.expect(503, "error");
    assert!(
        reply.headers.get("retry-after").is_some(),
        "{:?}",
        reply.headers
    );
    assert!(branches(&fake).is_empty(), "the claim is released");
    fake.clear_faults();
    app.dispatched(json!(10), "Budget").await;
    assert_eq!(fake.dispatches(REPO).len(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_missing_permission_is_not_retried() {
    let fake = fake().await;
    fake.set_installation_permissions(
        crate::support::github::INSTALLATION,
        &[("contents", "read"), ("pull_requests", "read")],
    );
    let app = spawn(&fake, GithubOptions::default()).await;
    let reply = app.post_insert(json!(11), "No write").await;
    reply.expect(503, "error");
    assert!(reply.message().contains("403"), "{}", reply.text);
    assert_eq!(
        fake.requests_for(Op::CreateRef).len(),
        1,
        "a 403 without a rate limit is final"
    );
    assert!(fake.dispatches(REPO).is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn an_app_not_installed_on_the_repository_is_a_503_that_says_so() {
    let fake = fake().await;
    fake.uninstall(crate::support::github::INSTALLATION);
    let app = spawn(&fake, GithubOptions::default()).await;
    let reply = app.post_insert(json!(12), "Nowhere").await;
    reply.expect(503, "error");
    assert!(reply.message().contains("not installed"), "{}", reply.text);
    assert!(fake.writes().is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn a_claim_that_gives_up_after_a_lost_answer_dispatches_when_the_branch_is_there() {
    let fake = fake().await;
    // The create is applied and its answer lost; the retry is told to wait longer than the
    // budget allows. The branch may be ours: dispatch rather than leave it undone.
    fake.inject(Op::CreateRef, Fault::AppliedThen(502), 1);
    fake.inject(
        Op::CreateRef,
        Fault::SecondaryRateLimit {
            retry_after_secs: 60,
        },
        1,
    );
    let app = spawn(&fake, GithubOptions::default()).await;
    app.dispatched(json!(13), "Lost answer").await;
    assert_eq!(branches(&fake), ["feedback/13-lost-answer"]);
    assert_eq!(fake.dispatches(REPO).len(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_422_that_is_not_exists_looks_the_ref_up_and_tries_again() {
    let fake = fake().await;
    fake.inject(
        Op::CreateRef,
        Fault::Unprocessable("Reference update failed".into()),
        1,
    );
    let app = spawn(&fake, GithubOptions::default()).await;
    app.dispatched(json!(14), "Update failed").await;
    assert_eq!(fake.requests_for(Op::CreateRef).len(), 2);
    assert_eq!(branches(&fake), ["feedback/14-update-failed"]);
    assert_eq!(fake.dispatches(REPO).len(), 1);
    app.shutdown().await;
}
