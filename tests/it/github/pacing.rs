//! Paced writes: a single row goes at once; a burst is queued at one write per interval after
//! the burst allowance; a full queue answers 503 with Retry-After.

use std::time::Duration;

use fake_github::Op;
use serde_json::json;

use crate::support::github::{
    branches, dispatched_branches, fake, on_a_fake, spawn, GithubOptions,
};

#[tokio::test]
async fn a_single_rows_claim_and_dispatch_go_at_once() {
    let (fake, app) = on_a_fake().await;
    app.dispatched(json!(1), "Now").await;
    let writes = fake.writes();
    assert_eq!(writes.len(), 2);
    let gap = writes[1].at.duration_since(writes[0].at);
    assert!(
        gap < Duration::from_millis(500),
        "the dispatch waited {gap:?}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_rows_is_paced_and_each_row_dispatched_once() {
    let fake = fake().await;
    let interval = Duration::from_millis(10);
    let burst = 10;
    let options = GithubOptions {
        write_interval_ms: interval.as_millis() as u64,
        write_burst: burst,
        // A queued row is answered `accepted` and finishes in the background: how long the
        // queue takes depends on the machine, which this test does not measure.
        respond_within_ms: 1_000,
        ..GithubOptions::default()
    };
    let app = spawn(&fake, options).await;
    for reply in app.post_inserts(1..=200, "Burst row").await {
        assert!(
            matches!(
                (reply.status, reply.outcome()),
                (200, "dispatched") | (202, "accepted")
            ),
            "{} {}",
            reply.status,
            reply.text
        );
    }
    // Rows answered `accepted` finish in the background; shutting down would leave those
    // that have not claimed yet.
    app.drained().await;
    app.shutdown().await;
    assert_eq!(branches(&fake).len(), 200);
    let mut dispatched = dispatched_branches(&fake);
    assert_eq!(dispatched.len(), 200);
    dispatched.sort();
    dispatched.dedup();
    assert_eq!(dispatched.len(), 200, "no row dispatched twice");

    // In any run of writes, all but `burst` of them needed an interval each.
    let times: Vec<_> = fake.writes().iter().map(|w| w.at).collect();
    assert_eq!(times.len(), 400);
    let slack = Duration::from_millis(2);
    for n in [burst as usize + 1, 50, 100, 399] {
        for i in 0..times.len() - n {
            let span = times[i + n].duration_since(times[i]);
            let least = interval * (n as u32 - burst) - slack;
            assert!(
                span >= least,
                "{n} writes after #{i} took {span:?} < {least:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_503_with_retry_after_and_claims_nothing_for_that_row() {
    let fake = fake().await;
    let options = GithubOptions {
        write_interval_ms: 300,
        write_burst: 1,
        queue_capacity: 2,
        respond_within_ms: 30_000,
        ..GithubOptions::default()
    };
    let app = spawn(&fake, options).await;
    let replies = app.post_inserts(1..=8, "Queued").await;
    let (full, done): (Vec<_>, Vec<_>) = replies.iter().partition(|r| r.status == 503);
    assert!(!full.is_empty(), "some rows met a full queue");
    for reply in &full {
        assert!(
            reply.headers.get("retry-after").is_some(),
            "{:?}",
            reply.headers
        );
        assert!(reply.message().contains("queue"), "{}", reply.text);
    }
    for reply in &done {
        reply.expect(200, "dispatched");
    }
    assert_eq!(
        branches(&fake).len(),
        done.len(),
        "a refused row left no claim"
    );
    assert_eq!(fake.requests_for(Op::DeleteRef).len(), 0);
    app.shutdown().await;
}
