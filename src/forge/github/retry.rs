//! One retry policy for every GitHub call: connection errors, timeouts, 5xx, 429 and rate-limit
//! 403s are tried again with exponential backoff and full jitter, honouring `retry-after` and
//! `x-ratelimit-reset`, within a time budget; every other answer is final.
//! (https://docs.github.com/rest/using-the-rest-api/best-practices-for-using-the-rest-api#handle-rate-limit-errors-appropriately)

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::forge::ForgeError;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// The first backoff step; each retry doubles it, up to [`MAX_STEP`].
const FIRST_STEP: Duration = Duration::from_millis(200);
const MAX_STEP: Duration = Duration::from_secs(8);
/// GitHub: after a secondary rate limit without `retry-after`, wait at least a minute.
const SECONDARY_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// Why an attempt did not succeed, as far as retrying is concerned.
#[derive(Debug)]
pub enum Setback {
    /// Worth another try. `ambiguous`: the request may have been applied (a timeout, a lost
    /// connection, a 5xx), so a later "already exists" may be our own doing.
    Retry {
        message: String,
        after: Option<Duration>,
        ambiguous: bool,
        cause: Cause,
    },
    /// Final: retrying cannot help.
    Fail(ForgeError),
}

impl Setback {
    /// Final: GitHub refused, for the reason `message` gives.
    pub fn refused(message: impl Into<String>) -> Setback {
        Setback::Fail(ForgeError::refused(message))
    }

    /// Final: a bug, here or there.
    pub fn bug(what: impl std::fmt::Display) -> Setback {
        Setback::Fail(ForgeError::Other(anyhow::anyhow!("{what}")))
    }

    /// The same setback, but known not to have been applied (a read, or a step before the write).
    pub fn not_applied(mut self) -> Setback {
        if let Setback::Retry { ambiguous, .. } = &mut self {
            *ambiguous = false;
        }
        self
    }
}

/// A setback seen outside the retry loop (a one-off read): a retryable one is "unavailable".
impl From<Setback> for ForgeError {
    fn from(setback: Setback) -> ForgeError {
        match setback {
            Setback::Fail(e) => e,
            Setback::Retry { message, after, .. } => ForgeError::Unavailable {
                message,
                retry_after: after,
            },
        }
    }
}

/// One attempt's result: `?` passes a setback up to the retry loop.
pub type Attempt<T> = Result<T, Setback>;

/// Why an attempt is worth another: `rowbranch_github_retries_total{cause}` counts by it.
pub use crate::metrics::RetryCause as Cause;

/// The retry loop's budget, the shutdown whose grace cuts it short, and where retries count.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub budget: Duration,
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
    /// GitHub's host (`api.github.com`), for the message of an operation given up.
    pub host: String,
}

impl RetryPolicy {
    /// Runs `attempt` until it is done, fails for good, or the budget would be exceeded. The
    /// closure learns whether an earlier attempt was ambiguous.
    ///
    /// `what` names the operation in the debug line of each retry; the error of an operation
    /// given up does not repeat it (the caller says what it was doing) but says the cause of
    /// the last attempt, GitHub's host, and how many attempts were made over how long.
    pub async fn run<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T, ForgeError>
    where
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        self.run_noting(what, attempt).await.map_err(|(e, _)| e)
    }

    /// [`run`](Self::run), and on failure whether any attempt may have been applied.
    ///
    /// The budget starts at the first failure: time spent waiting for a turn to write, before
    /// anything went wrong, is not retrying. Once the shutdown begins the budget ends with the
    /// grace, and a wait under way is cut short when it would outlast it.
    pub async fn run_noting<T, F, Fut>(
        &self,
        what: &str,
        mut attempt: F,
    ) -> Result<T, (ForgeError, bool)>
    where
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        let started = Instant::now();
        let mut first_failure: Option<Instant> = None;
        let mut ambiguous_before = false;
        for n in 0u32.. {
            let (message, after, ambiguous, cause) = match attempt(ambiguous_before).await {
                Ok(value) => return Ok(value),
                Err(Setback::Fail(e)) => return Err((e, ambiguous_before)),
                Err(Setback::Retry {
                    message,
                    after,
                    ambiguous,
                    cause,
                }) => (message, after, ambiguous, cause),
            };
            ambiguous_before |= ambiguous;
            let since = *first_failure.get_or_insert_with(Instant::now);
            // Full jitter: a uniform wait between zero and the exponential step.
            let step = FIRST_STEP.saturating_mul(1 << n.min(16)).min(MAX_STEP);
            let jitter = || Duration::from_millis(rand::random_range(0..=step.as_millis() as u64));
            let wait = after.unwrap_or_else(jitter);
            let wake = Instant::now() + wait;
            let give_up = || {
                let error = ForgeError::Unavailable {
                    message: format!(
                        "{message} (GitHub at {}; {} attempts in {:.1} s)",
                        self.host,
                        n + 1,
                        started.elapsed().as_secs_f64()
                    ),
                    retry_after: Some(wait.max(Duration::from_secs(1))),
                };
                Err((error, ambiguous_before))
            };
            if message.starts_with(super::client::UNRESOLVED) {
                return give_up();
            }
            loop {
                // The budget from the first failure, or the end of the shutdown's grace.
                let limit = since + self.budget;
                if wake > self.shutdown.deadline().map_or(limit, |end| limit.min(end)) {
                    return give_up();
                }
                tokio::select! {
                    () = tokio::time::sleep_until(wake) => break,
                    // The limit moves once the shutdown begins: look again.
                    () = self.shutdown.begun(), if !self.shutdown.is_draining() => {}
                }
            }
            self.metrics.github_retry(cause);
            tracing::debug!(what, host = %self.host, attempt = n + 1,
                wait_ms = wait.as_millis() as u64, %message, "retried");
        }
        unreachable!("the loop only ends by returning")
    }
}

/// Sorts an answer that is not a success into "retry" (with how long GitHub asks us to wait)
/// or "final". `message` is GitHub's `message` field.
pub fn classify(status: StatusCode, headers: &HeaderMap, message: &str) -> Setback {
    let retry_after = header_secs(headers, "retry-after").map(Duration::from_secs);
    let remaining = header_secs(headers, "x-ratelimit-remaining");
    // How long until the epoch second of the reset (at least one second: clocks differ).
    let reset_in = header_secs(headers, "x-ratelimit-reset").map(|reset| {
        let now = UNIX_EPOCH.elapsed().unwrap_or_default().as_secs();
        Duration::from_secs(reset.saturating_sub(now).max(1))
    });
    let rate_limited = |after: Option<Duration>| Setback::Retry {
        message: format!("rate limited ({status}): {message}"),
        after,
        ambiguous: false,
        cause: Cause::RateLimited,
    };
    match status.as_u16() {
        // The reset is when the primary limit refills: it says how long to wait only when
        // that limit is what ran out.
        429 => rate_limited(Some(
            retry_after
                .or(reset_in.filter(|_| remaining == Some(0)))
                .unwrap_or(SECONDARY_LIMIT_WAIT),
        )),
        403 if retry_after.is_some() => rate_limited(retry_after),
        403 if remaining == Some(0) => rate_limited(Some(reset_in.unwrap_or(SECONDARY_LIMIT_WAIT))),
        403 if message.to_ascii_lowercase().contains("rate limit") => {
            rate_limited(Some(SECONDARY_LIMIT_WAIT))
        }
        500..=599 => Setback::Retry {
            message: format!("GitHub answered {status}"),
            after: retry_after,
            ambiguous: true,
            cause: Cause::ServerError,
        },
        _ => Setback::refused(format!("GitHub answered {status}: {message}")),
    }
}

fn header_secs(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::SystemTime;

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    fn after(a: Setback) -> Option<Duration> {
        match a {
            Setback::Retry { after, .. } => after,
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn a_secondary_rate_limit_waits_what_retry_after_says() {
        let h = headers(&[("retry-after", "2".into())]);
        assert_eq!(
            after(classify(StatusCode::FORBIDDEN, &h, "secondary rate limit")),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn an_exhausted_primary_limit_waits_for_the_reset() {
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 30;
        let h = headers(&[
            ("x-ratelimit-remaining", "0".into()),
            ("x-ratelimit-reset", reset.to_string()),
        ]);
        let wait = after(classify(
            StatusCode::FORBIDDEN,
            &h,
            "API rate limit exceeded",
        ))
        .unwrap();
        assert!(
            wait >= Duration::from_secs(28) && wait <= Duration::from_secs(31),
            "{wait:?}"
        );
    }

    #[test]
    fn a_secondary_limit_without_a_hint_waits_a_minute() {
        let a = classify(
            StatusCode::FORBIDDEN,
            &HeaderMap::new(),
            "You have exceeded a secondary rate limit",
        );
        assert_eq!(after(a), Some(SECONDARY_LIMIT_WAIT));
        assert_eq!(
            after(classify(
                StatusCode::TOO_MANY_REQUESTS,
                &HeaderMap::new(),
                ""
            )),
            Some(SECONDARY_LIMIT_WAIT)
        );
    }

    #[test]
    fn a_429_waits_for_the_reset_only_when_the_primary_limit_ran_out() {
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3000;
        let h = headers(&[
            ("x-ratelimit-remaining", "4000".into()),
            ("x-ratelimit-reset", reset.to_string()),
        ]);
        assert_eq!(
            after(classify(StatusCode::TOO_MANY_REQUESTS, &h, "")),
            Some(SECONDARY_LIMIT_WAIT)
        );
    }

    #[test]
    fn a_5xx_is_retried_and_may_have_been_applied() {
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, &HeaderMap::new(), ""),
            Setback::Retry {
                ambiguous: true,
                ..
            }
        ));
    }

    #[test]
    fn other_4xx_are_final() {
        for status in [400, 401, 403, 404, 409, 422] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(
                matches!(
                    classify(
                        status,
                        &HeaderMap::new(),
                        "Resource not accessible by integration"
                    ),
                    Setback::Fail(_)
                ),
                "{status}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_the_budget_with_a_retry_after() {
        let tries = AtomicU32::new(0);
        let policy = RetryPolicy {
            budget: Duration::from_secs(5),
            shutdown: Shutdown::new(),
            metrics: Arc::new(Metrics::new()),
            host: "api.github.com".into(),
        };
        let result: Result<(), _> = policy
            .run("op", |_| async {
                tries.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(Setback::Retry {
                    message: "502".into(),
                    after: Some(Duration::from_secs(2)),
                    ambiguous: true,
                    cause: Cause::ServerError,
                })
            })
            .await;
        assert_eq!(
            tries.load(Ordering::SeqCst),
            3,
            "at 0 s, 2 s and 4 s; a fourth would end past 5 s"
        );
        let Err(ForgeError::Unavailable {
            message,
            retry_after: Some(_),
        }) = result
        else {
            panic!("expected unavailable with a retry-after, got {result:?}");
        };
        // The caller names the operation; the message says the cause once, where, and how
        // many attempts over how long.
        assert_eq!(
            message,
            "502 (GitHub at api.github.com; 3 attempts in 4.0 s)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_learns_that_an_earlier_one_was_ambiguous() {
        let policy = RetryPolicy {
            budget: Duration::from_secs(30),
            shutdown: Shutdown::new(),
            metrics: Arc::new(Metrics::new()),
            host: "api.github.com".into(),
        };
        let seen = policy
            .run("op", |ambiguous_before| async move {
                if ambiguous_before {
                    Ok(true)
                } else {
                    Err(Setback::Retry {
                        message: "timeout".into(),
                        after: None,
                        ambiguous: true,
                        cause: Cause::ServerError,
                    })
                }
            })
            .await
            .unwrap();
        assert!(seen);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_of_retry_after_is_honoured() {
        let policy = RetryPolicy {
            budget: Duration::from_secs(30),
            shutdown: Shutdown::new(),
            metrics: Arc::new(Metrics::new()),
            host: "api.github.com".into(),
        };
        let start = Instant::now();
        let n = AtomicU32::new(0);
        policy
            .run("op", |_| async {
                if n.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(Setback::Retry {
                        message: "limited".into(),
                        after: Some(Duration::from_secs(2)),
                        ambiguous: false,
                        cause: Cause::ServerError,
                    })
                } else {
                    Ok(())
                }
            })
            .await
            .unwrap();
        assert!(start.elapsed() >= Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn the_shutdown_cuts_a_wait_that_would_outlast_the_grace() {
        let shutdown = Shutdown::new();
        let policy = RetryPolicy {
            budget: Duration::from_secs(300),
            shutdown: shutdown.clone(),
            metrics: Arc::new(Metrics::new()),
            host: "api.github.com".into(),
        };
        let tries = AtomicU32::new(0);
        let run = policy.run("dispatching", |_| {
            tries.fetch_add(1, Ordering::SeqCst);
            async {
                Err::<(), _>(Setback::Retry {
                    message: "rate limited".into(),
                    after: Some(Duration::from_secs(60)),
                    ambiguous: false,
                    cause: Cause::ServerError,
                })
            }
        });
        let begin = async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            shutdown.begin(Duration::from_secs(5));
        };
        let start = Instant::now();
        let (result, ()) = tokio::join!(run, begin);
        assert!(
            matches!(result, Err(ForgeError::Unavailable { .. })),
            "{result:?}"
        );
        assert_eq!(tries.load(Ordering::SeqCst), 1);
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(10),
            "given up when the grace began"
        );
    }
}
