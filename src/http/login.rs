//! The status page's password, as a guesser meets it: a wrong password is logged (at warn, at
//! most once a minute, never the password) and counted, and after [`MAX_FAILURES`] in a minute
//! every login is answered 429 until that minute is over. Counted for the whole process, not
//! per peer: behind a proxy every peer is the proxy. The one who knows the password waits out
//! the minute with everyone else; a guesser gets ten guesses a minute, not thousands a second.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long failures are counted together, and how long a lock lasts at most.
const WINDOW: Duration = Duration::from_secs(60);
/// Wrong passwords allowed in a [`WINDOW`]; beyond them, 429 until it ends.
pub const MAX_FAILURES: u32 = 10;

/// What a request to the status page carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// No credentials: a browser's first request, before it asks for the password. Not a guess.
    None,
    Wrong,
    Right,
}

/// How to answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Show the page.
    Allowed,
    /// 401, asking for the password.
    Refused,
    /// 429: too many wrong passwords this minute; retry after this long.
    Locked(Duration),
}

/// The process's count of wrong passwords.
#[derive(Default)]
pub struct Logins {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// When the current minute of failures began, and how many it has had.
    window: Option<(Instant, u32)>,
    /// When a wrong password was last logged, and how many went unlogged since.
    logged: Option<(Instant, u64)>,
}

impl Logins {
    /// Judges one request at `now`: while the minute is locked, every request (even with the
    /// right password, or a guess would learn it was right) is answered 429.
    pub fn judge(&self, attempt: Attempt, now: Instant) -> Verdict {
        let mut state = self.state.lock().expect("logins lock poisoned");
        if let Some((began, _)) = state.window {
            if now.duration_since(began) >= WINDOW {
                state.window = None;
            }
        }
        if let Some((began, failures)) = state.window {
            if failures >= MAX_FAILURES {
                return Verdict::Locked(WINDOW - now.duration_since(began));
            }
        }
        match attempt {
            Attempt::Right => Verdict::Allowed,
            Attempt::None => Verdict::Refused,
            Attempt::Wrong => {
                let (began, failures) = state.window.get_or_insert((now, 0));
                *failures += 1;
                let (began, failures) = (*began, *failures);
                state.log_failure(now, failures);
                if failures == MAX_FAILURES {
                    let left = WINDOW - now.duration_since(began);
                    tracing::warn!(
                        failures,
                        locked_for_s = left.as_secs().max(1),
                        "{MAX_FAILURES} wrong status page passwords within a minute: every login is \
                         answered 429 until the minute is over"
                    );
                }
                Verdict::Refused
            }
        }
    }
}

impl State {
    /// Logs a wrong password, unless one was logged less than a minute ago.
    fn log_failure(&mut self, now: Instant, failures: u32) {
        match &mut self.logged {
            Some((at, quiet)) if now.duration_since(*at) < WINDOW => *quiet += 1,
            logged => {
                let quiet = logged.map_or(0, |(_, quiet)| quiet);
                tracing::warn!(
                    failures_this_minute = failures,
                    unlogged_since_the_last = quiet,
                    "a wrong password for the status page (ROWBRANCH_STATUS_PASSWORD)"
                );
                *logged = Some((now, 0));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_wrong_passwords_in_a_minute_lock_every_login_for_the_rest_of_it() {
        let logins = Logins::default();
        let start = Instant::now();
        for n in 0..MAX_FAILURES {
            let at = start + Duration::from_secs(u64::from(n));
            assert_eq!(logins.judge(Attempt::Wrong, at), Verdict::Refused, "{n}");
        }
        let at = start + Duration::from_secs(20);
        for attempt in [Attempt::Wrong, Attempt::Right, Attempt::None] {
            assert_eq!(
                logins.judge(attempt, at),
                Verdict::Locked(Duration::from_secs(40)),
                "{attempt:?}"
            );
        }
        // The lock does not grow with the guesses it turns away, and ends with the minute.
        let later = start + WINDOW;
        assert_eq!(logins.judge(Attempt::Right, later), Verdict::Allowed);
        assert_eq!(logins.judge(Attempt::Wrong, later), Verdict::Refused);
    }

    #[test]
    fn nine_wrong_passwords_lock_nothing_and_requests_without_one_are_not_counted() {
        let logins = Logins::default();
        let now = Instant::now();
        for _ in 0..MAX_FAILURES - 1 {
            logins.judge(Attempt::Wrong, now);
        }
        for _ in 0..100 {
            assert_eq!(logins.judge(Attempt::None, now), Verdict::Refused);
        }
        assert_eq!(logins.judge(Attempt::Right, now), Verdict::Allowed);
        // Failures of an earlier minute do not count toward this one.
        let next = now + WINDOW;
        for _ in 0..MAX_FAILURES - 1 {
            assert_eq!(logins.judge(Attempt::Wrong, next), Verdict::Refused);
        }
        assert_eq!(logins.judge(Attempt::Right, next), Verdict::Allowed);
    }
}
