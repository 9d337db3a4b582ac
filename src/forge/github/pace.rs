//! Paced writes: one installation's writes (create ref, dispatch, delete ref) go out one at a
//! time through a token bucket and a rolling hourly cap. A single row goes at once; a burst
//! becomes a queue, not a ban. How many rows may wait is bounded where they are accepted (the
//! pipeline), not here. Once the shutdown begins, a row waiting to claim gives up, and a row
//! that holds a claim writes without waiting for the pace: it owes its dispatch or release.
//! (https://docs.github.com/rest/using-the-rest-api/best-practices-for-using-the-rest-api#avoid-concurrent-requests)

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use scopeguard::{guard, ScopeGuard};
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;

use crate::config::PaceSettings;
use crate::forge::ForgeError;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

const HOUR: Duration = Duration::from_secs(3600);

/// Lets one write out at a time, at the pace; and bounds the requests open at once.
pub struct Pacer {
    /// Requests open at GitHub at once for this installation, reads and writes together.
    pub requests: Semaphore,
    pace: PaceSettings,
    shutdown: Shutdown,
    /// Counts the writes waiting or under way (`rowbranch_write_queue_depth`), and the tokens
    /// the credentials it paces mint.
    pub metrics: Arc<Metrics>,
    /// Taken by a row's first write before it queues for the bucket, so at most one new row
    /// stands in the bucket's queue: the writes of rows that hold a claim go before the rest.
    new_rows: Mutex<()>,
    /// Held from the wait for a turn until the write is answered: one write at a time.
    bucket: Mutex<Bucket>,
}

/// The pace as a schedule (GCRA, the token bucket kept as one instant): a write may go once
/// `due` is at most `burst - 1` intervals ahead, and each write moves it an interval on.
struct Bucket {
    due: Instant,
    /// When each write of the last hour went out.
    sent: VecDeque<Instant>,
}

impl Pacer {
    pub fn new(
        pace: PaceSettings,
        max_requests: usize,
        shutdown: Shutdown,
        metrics: Arc<Metrics>,
    ) -> Pacer {
        Pacer {
            requests: Semaphore::new(max_requests),
            shutdown,
            metrics,
            new_rows: Mutex::new(()),
            bucket: Mutex::new(Bucket {
                due: Instant::now(),
                sent: VecDeque::new(),
            }),
            pace,
        }
    }

    /// Runs a write when it is its turn, one at a time. A row's first write (`claim`) waits
    /// behind at most one other new row, at the pace; once the shutdown has begun, one still
    /// waiting gives up (`ShuttingDown`), and one whose write went out is answered. A write of a
    /// row that holds a claim (its dispatch, or its release) goes ahead of rows still waiting to
    /// claim and is never refused; once the shutdown has begun it skips the pace and the hourly
    /// cap, though still one write at a time.
    pub async fn write<T, Fut>(
        &self,
        claim: bool,
        send: impl FnOnce() -> Fut,
    ) -> Result<T, ForgeError>
    where
        Fut: Future<Output = T>,
    {
        let _queued = in_queue(&self.metrics);
        let waited = async {
            let _first_in_line = match claim {
                true => Some(self.new_rows.lock().await),
                false => None,
            };
            let mut bucket = self.bucket.lock().await;
            tokio::select! {
                biased;
                () = self.shutdown.begun(), if !claim => bucket.count_write(&self.pace),
                () = bucket.wait_for_turn(&self.pace) => {}
            }
            bucket
        };
        let _turn = tokio::select! {
            biased;
            () = self.shutdown.begun(), if claim => return Err(ForgeError::ShuttingDown),
            bucket = waited => bucket,
        };
        Ok(send().await)
    }
}

/// A write in the queue, counted until it leaves it however it ends (done, or dropped).
fn in_queue<'a>(metrics: &'a Metrics) -> ScopeGuard<&'a Metrics, impl FnOnce(&'a Metrics)> {
    metrics.write_queue(true);
    guard(metrics, |metrics| metrics.write_queue(false))
}

impl Bucket {
    /// Waits until the bucket and the hourly cap allow a write, then counts it. Cancel-safe:
    /// nothing changes until the turn is taken.
    async fn wait_for_turn(&mut self, pace: &PaceSettings) {
        loop {
            let now = Instant::now();
            while self
                .sent
                .front()
                .is_some_and(|t| now.duration_since(*t) >= HOUR)
            {
                self.sent.pop_front();
            }
            // At the cap, the oldest write of the hour must leave it first.
            let oldest =
                (self.sent.front()).filter(|_| self.sent.len() >= pace.hourly_max as usize);
            let hourly_wait = oldest.map_or(Duration::ZERO, |t| {
                (*t + HOUR).saturating_duration_since(now)
            });
            let ahead = pace.interval * pace.burst.saturating_sub(1);
            let token_wait = self.due.saturating_duration_since(now + ahead);
            match hourly_wait.max(token_wait) {
                wait if !wait.is_zero() => tokio::time::sleep(wait).await,
                _ => return self.count_write(pace),
            }
        }
    }

    /// Counts a write: the one whose turn came, or one that did not wait for it (during the
    /// shutdown's grace).
    fn count_write(&mut self, pace: &PaceSettings) {
        let now = Instant::now();
        self.due = self.due.max(now) + pace.interval;
        self.sent.push_back(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(burst: u32, hourly_max: u32) -> PaceSettings {
        PaceSettings {
            interval: Duration::from_secs(1),
            burst,
            hourly_max,
        }
    }

    fn pacer(burst: u32, hourly_max: u32) -> Arc<Pacer> {
        Arc::new(Pacer::new(
            pace(burst, hourly_max),
            10,
            Shutdown::new(),
            Arc::new(Metrics::new()),
        ))
    }

    async fn times(pacer: Arc<Pacer>, n: usize) -> Vec<Duration> {
        let start = Instant::now();
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let pacer = Arc::clone(&pacer);
                tokio::spawn(async move {
                    pacer
                        .write(false, || async { start.elapsed() })
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out.sort();
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_one_per_interval() {
        let sent = times(pacer(3, 450), 6).await;
        let secs: Vec<u64> = sent.iter().map(|d| d.as_secs()).collect();
        assert_eq!(secs, vec![0, 0, 0, 1, 2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_hourly_cap_holds_a_write_until_the_oldest_is_an_hour_old() {
        let sent = times(pacer(10, 4), 5).await;
        assert_eq!(sent[3].as_secs(), 0);
        assert_eq!(sent[4].as_secs(), 3600);
    }

    #[tokio::test(start_paused = true)]
    async fn once_the_shutdown_begins_claims_give_up_and_claimed_rows_skip_the_cap() {
        let shutdown = Shutdown::new();
        let pacer = Arc::new(Pacer::new(
            pace(1, 2),
            10,
            shutdown.clone(),
            Arc::new(Metrics::new()),
        ));
        pacer.write(false, || async {}).await.unwrap();
        pacer.write(false, || async {}).await.unwrap();
        // The hourly cap is spent: a claim and a claimed row's dispatch wait for an hour.
        let claim = {
            let pacer = Arc::clone(&pacer);
            tokio::spawn(async move { pacer.write(true, || async { "claimed" }).await })
        };
        let dispatch = {
            let pacer = Arc::clone(&pacer);
            tokio::spawn(async move { pacer.write(false, || async { "dispatched" }).await })
        };
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!claim.is_finished() && !dispatch.is_finished());
        let begun = Instant::now();
        shutdown.begin(Duration::from_secs(20));
        assert!(matches!(
            claim.await.unwrap(),
            Err(ForgeError::ShuttingDown)
        ));
        assert_eq!(dispatch.await.unwrap().unwrap(), "dispatched");
        assert_eq!(
            begun.elapsed(),
            Duration::ZERO,
            "neither waited for the cap"
        );
        // After it began, a new claim gives up at once.
        assert!(matches!(
            pacer.write(true, || async {}).await,
            Err(ForgeError::ShuttingDown)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_claimed_rows_write_goes_before_rows_still_waiting_to_claim() {
        let pacer = pacer(1, 450);
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for n in 0..4 {
            let (pacer, order) = (Arc::clone(&pacer), Arc::clone(&order));
            handles.push(tokio::spawn(async move {
                let note = || async move { order.lock().unwrap().push(format!("claim {n}")) };
                pacer.write(true, note).await.unwrap();
            }));
            tokio::task::yield_now().await;
        }
        let held = {
            let (pacer, order) = (Arc::clone(&pacer), Arc::clone(&order));
            tokio::spawn(async move {
                let note = || async move { order.lock().unwrap().push("dispatch".to_owned()) };
                pacer.write(false, note).await.unwrap()
            })
        };
        held.await.unwrap();
        for h in handles {
            h.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        let dispatch = order.iter().position(|w| w == "dispatch").unwrap();
        assert!(
            dispatch <= 2,
            "the dispatch waited behind new rows: {order:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn writes_go_out_one_at_a_time() {
        let pacer = pacer(10, 450);
        let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handles: Vec<_> = (0..5)
            .map(|_| {
                let (pacer, busy) = (Arc::clone(&pacer), Arc::clone(&busy));
                tokio::spawn(async move {
                    pacer
                        .write(false, || async {
                            assert!(!busy.swap(true, std::sync::atomic::Ordering::SeqCst));
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            busy.store(false, std::sync::atomic::Ordering::SeqCst);
                        })
                        .await
                        .unwrap()
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
    }
}
