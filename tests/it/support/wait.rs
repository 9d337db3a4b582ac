//! Waiting for background work: poll until a condition holds, for a bounded time, and say what
//! was awaited when it never came. Tests wait for events, never for a fixed time.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a test waits for background work before it gives up.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// Polls `check` until it returns `Some`, for at most [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(what, PATIENCE, check).await
}

/// Polls `check` until it returns `Some`, for at most `limit`.
pub async fn eventually_within<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until `pipeline` has no row under way, for at most [`PATIENCE`] × 8 (a paced burst
/// takes a while).
pub async fn drained(pipeline: &rowbranch::pipeline::Pipeline) {
    let deadline = Instant::now() + PATIENCE * 8;
    while pipeline.in_flight() > 0 {
        assert!(
            Instant::now() < deadline,
            "{} rows still under way after {:?}",
            pipeline.in_flight(),
            PATIENCE * 8
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
