//! Paced writes: one installation's writes (create ref, dispatch, delete ref) go out one at a
//! time through a token bucket and a rolling hourly cap, behind a bounded queue. A single row
//! goes at once; a burst becomes a queue, not a ban.
//! (https://docs.github.com/rest/using-the-rest-api/best-practices-for-using-the-rest-api#avoid-concurrent-requests)

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::PaceSettings;
use crate::forge::ForgeError;

const HOUR: Duration = Duration::from_secs(3600);

/// Lets one write out at a time, at the pace.
pub struct Pacer {
    pace: PaceSettings,
    /// Writes waiting or under way.
    queued: AtomicUsize,
    /// Taken by a row's first write before it queues for the bucket, so at most one new row
    /// stands in the bucket's queue: the writes of rows that hold a claim go before the rest.
    new_rows: Mutex<()>,
    /// Held from the wait for a turn until the write is answered: one write at a time.
    bucket: Mutex<Bucket>,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
    /// When each write of the last hour went out.
    sent: VecDeque<Instant>,
}

impl Pacer {
    pub fn new(pace: PaceSettings) -> Pacer {
        Pacer {
            queued: AtomicUsize::new(0),
            new_rows: Mutex::new(()),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(pace.burst),
                refilled: Instant::now(),
                sent: VecDeque::new(),
            }),
            pace,
        }
    }

    /// Runs a row's first write (its claim) when it is its turn, or refuses at once when the
    /// queue is full, with a `retry_after` of about how long the queue takes to drain.
    pub async fn first_write<T, Fut>(&self, send: impl FnOnce() -> Fut) -> Result<T, ForgeError>
    where
        Fut: Future<Output = T>,
    {
        if self.queued.load(Ordering::SeqCst) >= self.pace.queue_capacity {
            let drain = self
                .pace
                .interval
                .saturating_mul(self.pace.queue_capacity as u32)
                .clamp(Duration::from_secs(1), HOUR);
            return Err(ForgeError::Unavailable {
                message: format!(
                    "the write queue is full ({} writes waiting)",
                    self.pace.queue_capacity
                ),
                retry_after: Some(drain),
            });
        }
        self.queued.fetch_add(1, Ordering::SeqCst);
        let _done = Dequeue(&self.queued);
        let _first_in_line = self.new_rows.lock().await;
        Ok(self.take_turn(send).await)
    }

    /// Runs a write of a row that holds a claim (its dispatch, or its release) when it is its
    /// turn, ahead of rows still waiting to claim. Never refused.
    pub async fn write<T, Fut>(&self, send: impl FnOnce() -> Fut) -> T
    where
        Fut: Future<Output = T>,
    {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let _done = Dequeue(&self.queued);
        self.take_turn(send).await
    }

    async fn take_turn<T, Fut>(&self, send: impl FnOnce() -> Fut) -> T
    where
        Fut: Future<Output = T>,
    {
        let mut bucket = self.bucket.lock().await;
        bucket.wait_for_turn(&self.pace).await;
        send().await
    }
}

/// Counts a write out of the queue however its future ends (done, or dropped).
struct Dequeue<'a>(&'a AtomicUsize);

impl Drop for Dequeue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Bucket {
    async fn wait_for_turn(&mut self, pace: &PaceSettings) {
        loop {
            let now = Instant::now();
            self.refill(pace, now);
            while self
                .sent
                .front()
                .is_some_and(|t| now.duration_since(*t) >= HOUR)
            {
                self.sent.pop_front();
            }
            let hourly_wait = if self.sent.len() >= pace.hourly_max as usize {
                self.sent
                    .front()
                    .map(|t| (*t + HOUR).saturating_duration_since(now))
            } else {
                None
            };
            let token_wait = if self.tokens >= 1.0 {
                None
            } else {
                Some(pace.interval.mul_f64(1.0 - self.tokens))
            };
            match hourly_wait.max(token_wait) {
                Some(wait) if !wait.is_zero() => tokio::time::sleep(wait).await,
                _ => {
                    self.tokens -= 1.0;
                    self.sent.push_back(now);
                    return;
                }
            }
        }
    }

    fn refill(&mut self, pace: &PaceSettings, now: Instant) {
        let elapsed = now.duration_since(self.refilled);
        self.refilled = now;
        if pace.interval.is_zero() {
            self.tokens = f64::from(pace.burst);
            return;
        }
        let earned = elapsed.as_secs_f64() / pace.interval.as_secs_f64();
        self.tokens = (self.tokens + earned).min(f64::from(pace.burst));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn pace(burst: u32, hourly_max: u32, queue_capacity: usize) -> PaceSettings {
        PaceSettings {
            interval: Duration::from_secs(1),
            burst,
            hourly_max,
            queue_capacity,
        }
    }

    async fn times(pacer: Arc<Pacer>, n: usize) -> Vec<Duration> {
        let start = Instant::now();
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let pacer = Arc::clone(&pacer);
                tokio::spawn(async move { pacer.write(|| async { start.elapsed() }).await })
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
        let sent = times(Arc::new(Pacer::new(pace(3, 450, 100))), 6).await;
        let secs: Vec<u64> = sent.iter().map(|d| d.as_secs()).collect();
        assert_eq!(secs, vec![0, 0, 0, 1, 2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_hourly_cap_holds_a_write_until_the_oldest_is_an_hour_old() {
        let sent = times(Arc::new(Pacer::new(pace(10, 4, 100))), 5).await;
        assert_eq!(sent[3].as_secs(), 0);
        assert_eq!(sent[4].as_secs(), 3600);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_refuses_a_new_row_at_once_but_never_a_held_claims_write() {
        let pacer = Arc::new(Pacer::new(pace(1, 450, 2)));
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let pacer = Arc::clone(&pacer);
            tokio::spawn(async move { pacer.first_write(|| async { hold.await.ok() }).await })
        };
        tokio::task::yield_now().await;
        let second = {
            let pacer = Arc::clone(&pacer);
            tokio::spawn(async move { pacer.first_write(|| async {}).await })
        };
        tokio::task::yield_now().await;
        let third = pacer.first_write(|| async {}).await;
        assert!(matches!(
            third,
            Err(ForgeError::Unavailable {
                retry_after: Some(_),
                ..
            })
        ));
        let held = {
            let pacer = Arc::clone(&pacer);
            tokio::spawn(async move { pacer.write(|| async { 7 }).await })
        };
        release.send(()).unwrap();
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        assert_eq!(held.await.unwrap(), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn a_claimed_rows_write_goes_before_rows_still_waiting_to_claim() {
        let pacer = Arc::new(Pacer::new(pace(1, 450, 100)));
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for n in 0..4 {
            let (pacer, order) = (Arc::clone(&pacer), Arc::clone(&order));
            handles.push(tokio::spawn(async move {
                let note = || async move { order.lock().unwrap().push(format!("claim {n}")) };
                pacer.first_write(note).await.unwrap();
            }));
            tokio::task::yield_now().await;
        }
        let held = {
            let (pacer, order) = (Arc::clone(&pacer), Arc::clone(&order));
            tokio::spawn(async move {
                pacer
                    .write(|| async move { order.lock().unwrap().push("dispatch".to_owned()) })
                    .await
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
        let pacer = Arc::new(Pacer::new(pace(10, 450, 100)));
        let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handles: Vec<_> = (0..5)
            .map(|_| {
                let (pacer, busy) = (Arc::clone(&pacer), Arc::clone(&busy));
                tokio::spawn(async move {
                    pacer
                        .write(|| async {
                            assert!(!busy.swap(true, std::sync::atomic::Ordering::SeqCst));
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            busy.store(false, std::sync::atomic::Ordering::SeqCst);
                        })
                        .await
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
    }
}
