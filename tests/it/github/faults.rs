//! GitHub's faults: lost answers, 5xx, rate limits, refusals. Retried when GitHub says so, never
//! otherwise; a definite failure after a claim releases it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_github::{FakeGithub, Fault, Op};
use serde_json::json;

use crate::support::github::{branches, fake, spawn, GithubApp, GithubOptions, REPO};

/// rowbranch with the default options on a fake that fails each `(op, fault, times)`: the
/// next `times` requests of `op` meet `fault`.
async fn meeting(faults: &[(Op, Fault, usize)]) -> (Arc<FakeGithub>, GithubApp) {
    let fake = fake().await;
    for (op, fault, times) in faults {
        fake.inject(*op, fault.clone(), *times);
    }
    let app = spawn(&fake, GithubOptions::default()).await;
    (fake, app)
}

/// rowbranch on a fake that fails `faults` (as [`meeting`]), sent row `id`: it is answered
/// `dispatched` and has its one branch, `branch`, dispatched once. The fake, for what a test
/// checks besides.
async fn dispatched_once_despite(
    faults: &[(Op, Fault, usize)],
    id: u64,
    text: &str,
    branch: &str,
) -> Arc<FakeGithub> {
    let (fake, app) = meeting(faults).await;
    app.dispatched(json!(id), text).await;
    claimed_and_dispatched_once(&fake, branch);
    app.shutdown().await;
    fake
}

/// Checks the row has its one branch, `branch`, and was dispatched once.
#[track_caller]
fn claimed_and_dispatched_once(fake: &FakeGithub, branch: &str) {
    assert_eq!(branches(fake), [branch]);
    assert_eq!(fake.dispatches(REPO).len(), 1);
}

#[tokio::test]
async fn a_refused_dispatch_releases_the_claim_and_a_redelivery_then_dispatches() {
    let (fake, app) = meeting(&[(
        Op::Dispatch,
        Fault::Unprocessable("Invalid request.".into()),
        1,
    )])
    .await;
    let reply = app.post_insert(json!(3), "Dark mode").await;
    reply.expect(422, "error");
    assert!(
        reply.message().contains("Invalid request."),
        "{}",
        reply.text
    );
    assert!(branches(&fake).is_empty(), "the claim is released");
    app.dispatched(json!(3), "Dark mode").await;
    claimed_and_dispatched_once(&fake, "feedback/3-dark-mode");
    app.shutdown().await;
}

#[tokio::test]
async fn a_claim_applied_then_answered_502_is_dispatched_once() {
    let faults = [(Op::CreateRef, Fault::AppliedThen(502), 1)];
    let fake = dispatched_once_despite(&faults, 4, "Export", "feedback/4-export").await;
    assert_eq!(
        fake.requests_for(Op::CreateRef).len(),
        2,
        "retried once, found it exists"
    );
}

#[tokio::test]
async fn a_claim_whose_connection_dropped_after_it_applied_is_dispatched() {
    let faults = [(Op::CreateRef, Fault::DropAfterApply, 1)];
    dispatched_once_despite(&faults, 4, "Export", "feedback/4-export").await;
}

#[tokio::test]
async fn a_dispatch_applied_then_answered_502_is_dispatched_at_most_twice() {
    let (fake, app) = meeting(&[(Op::Dispatch, Fault::AppliedThen(502), 1)]).await;
    app.dispatched(json!(5), "Search").await;
    let n = fake.dispatches(REPO).len();
    assert!((1..=2).contains(&n), "{n} dispatches");
    assert_eq!(branches(&fake), ["feedback/5-search"]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_secondary_rate_limit_is_waited_for_as_retry_after_says() {
    let (fake, app) = meeting(&[(
        Op::Dispatch,
        Fault::SecondaryRateLimit {
            retry_after_secs: 2,
        },
        1,
    )])
    .await;
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
    let (fake, app) = meeting(&[(
        Op::MatchingRefs,
        Fault::PrimaryRateLimit { reset_in_secs: 2 },
        1,
    )])
    .await;
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
    let (fake, app) = meeting(&[
        (Op::ListPulls, Fault::Status(500), 2),
        (Op::GetRef, Fault::Status(502), 1),
    ])
    .await;
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
    // The create is applied and its answer lost; the retry is told to wait longer than the
    // budget allows. The branch may be ours: dispatch rather than leave it undone.
    let wait = Fault::SecondaryRateLimit {
        retry_after_secs: 60,
    };
    let faults = [
        (Op::CreateRef, Fault::AppliedThen(502), 1),
        (Op::CreateRef, wait, 1),
    ];
    dispatched_once_despite(&faults, 13, "Lost answer", "feedback/13-lost-answer").await;
}

#[tokio::test]
async fn a_422_that_is_not_exists_looks_the_ref_up_and_tries_again() {
    let failed = Fault::Unprocessable("Reference update failed".into());
    let faults = [(Op::CreateRef, failed, 1)];
    let branch = "feedback/14-update-failed";
    let fake = dispatched_once_despite(&faults, 14, "Update failed", branch).await;
    assert_eq!(fake.requests_for(Op::CreateRef).len(), 2);
}
