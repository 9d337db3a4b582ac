//! The status page's password, as a guesser meets it: a wrong password is logged (at warn, at
//! most once a minute, never the password) and counted, and after [`MAX_FAILURES`] in a minute
//! every login is answered 429 until that minute is over. Counted for the whole process, not
//! per peer: behind a proxy every peer is the proxy. The one who knows the password waits out
//! the minute with everyone else; a guesser gets ten guesses a minute, not thousands a second.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::status::OncePerMinute;
use crate::webhook::auth;

/// How long failures are counted together, and how long a lock lasts at most.
const WINDOW: Duration = Duration::from_secs(60);
/// Wrong passwords allowed in a [`WINDOW`]; beyond them, 429 until it ends.
pub const MAX_FAILURES: u32 = 10;

/// The process's count of wrong passwords.
#[derive(Default)]
pub struct Logins {
    /// When the current minute of failures began, and how many it has had.
    window: Mutex<Option<(Instant, u32)>>,
    logged: OncePerMinute<()>,
}

impl Logins {
    /// Judges a request for the status page, whose password is `password`, at `now`: `None`
    /// when the page may be shown, else the answer — 401 asking for the password, or 429 while
    /// the minute is locked (to every request then, even with the right password, or a guess
    /// would learn it was right).
    pub fn refusal(&self, headers: &HeaderMap, password: &str, now: Instant) -> Option<Response> {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        if window.is_some_and(|(began, _)| now.duration_since(began) >= WINDOW) {
            *window = None;
        }
        if let Some((began, _)) = window.filter(|&(_, failures)| failures >= MAX_FAILURES) {
            let secs = (WINDOW - now.duration_since(began)).as_secs_f64().ceil();
            let secs = secs.max(1.0) as u64;
            let message = format!(
                "too many wrong passwords for the status page within a minute: retry after {secs} s"
            );
            let retry_after = [(header::RETRY_AFTER, secs.to_string())];
            return Some((StatusCode::TOO_MANY_REQUESTS, retry_after, message).into_response());
        }
        if auth::basic_password_matches(headers, password) {
            return None;
        }
        // A browser's first request carries no password, before it asks for one: not a guess.
        if headers.contains_key(header::AUTHORIZATION) {
            let (began, failures) = window.get_or_insert((now, 0));
            *failures += 1;
            if let Some(quiet) = self.logged.due((), now) {
                tracing::warn!(
                    failures_this_minute = *failures,
                    unlogged_since_the_last = quiet,
                    "a wrong password for the status page (ROWBRANCH_STATUS_PASSWORD)"
                );
            }
            if *failures == MAX_FAILURES {
                let left = WINDOW - now.duration_since(*began);
                tracing::warn!(
                    failures = *failures,
                    locked_for_s = left.as_secs().max(1),
                    "{MAX_FAILURES} wrong status page passwords within a minute: every login is \
                     answered 429 until the minute is over"
                );
            }
        }
        let ask = [(header::WWW_AUTHENTICATE, "Basic realm=\"rowbranch\"")];
        let message = "the status page needs its password (ROWBRANCH_STATUS_PASSWORD)";
        Some((StatusCode::UNAUTHORIZED, ask, message).into_response())
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    const PASSWORD: &str = "the-right-password";

    /// A request for the page with `password`, or with none.
    fn carrying(password: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(password) = password {
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("u:{password}"));
            headers.insert(
                header::AUTHORIZATION,
                format!("Basic {basic}").parse().unwrap(),
            );
        }
        headers
    }

    /// The status of the answer to `password` at `now` (200: the page is shown), and its
    /// Retry-After.
    fn judge(logins: &Logins, password: Option<&str>, now: Instant) -> (u16, Option<String>) {
        match logins.refusal(&carrying(password), PASSWORD, now) {
            None => (200, None),
            Some(refused) => (
                refused.status().as_u16(),
                (refused.headers().get(header::RETRY_AFTER))
                    .map(|v| v.to_str().unwrap().to_owned()),
            ),
        }
    }

    #[test]
    fn ten_wrong_passwords_in_a_minute_lock_every_login_for_the_rest_of_it() {
        let logins = Logins::default();
        let start = Instant::now();
        for n in 0..MAX_FAILURES {
            let at = start + Duration::from_secs(u64::from(n));
            assert_eq!(judge(&logins, Some("wrong"), at), (401, None), "{n}");
        }
        let at = start + Duration::from_secs(20);
        for attempt in [Some("wrong"), Some(PASSWORD), None] {
            assert_eq!(
                judge(&logins, attempt, at),
                (429, Some("40".to_owned())),
                "{attempt:?}"
            );
        }
        // The lock does not grow with the guesses it turns away, and ends with the minute.
        let later = start + WINDOW;
        assert_eq!(judge(&logins, Some(PASSWORD), later), (200, None));
        assert_eq!(judge(&logins, Some("wrong"), later), (401, None));
    }

    #[test]
    fn nine_wrong_passwords_lock_nothing_and_requests_without_one_are_not_counted() {
        let logins = Logins::default();
        let now = Instant::now();
        for _ in 0..MAX_FAILURES - 1 {
            judge(&logins, Some("wrong"), now);
        }
        for _ in 0..100 {
            assert_eq!(judge(&logins, None, now), (401, None));
        }
        assert_eq!(judge(&logins, Some(PASSWORD), now), (200, None));
        // Failures of an earlier minute do not count toward this one.
        let next = now + WINDOW;
        for _ in 0..MAX_FAILURES - 1 {
            assert_eq!(judge(&logins, Some("wrong"), next), (401, None));
        }
        assert_eq!(judge(&logins, Some(PASSWORD), next), (200, None));
    }
}
