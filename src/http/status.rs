//! What the server remembers of its deliveries, for people: the last decisions (for `GET /`)
//! and the line each gets in the log. A delivery refused before any row is known (its content
//! type, size, credentials, shape) is logged at warn at most once a minute for each reason, since
//! anyone who can reach the port can send those; every other answer gets a line of its own, at
//! error when a row was refused for good.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{Method, Uri};
use axum::response::Response;
use chrono::{SecondsFormat, Utc};
use serde::Serialize;

use super::answer::Answer;
use super::App;
use crate::metrics::NO_ROUTE;
use crate::reason::Reason;

/// How many decisions the status page shows.
const KEPT: usize = 200;
/// How often a kind of refusal before the row is logged, at most.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// The longest `schema.table` a log line quotes as it came, in bytes.
const TABLE_LIMIT: usize = 128;

/// `text` as a log line quotes it: its control characters escaped, so that what a sender wrote
/// stays on its line of a text log, and cut to `limit` bytes.
pub(super) fn quoted(text: &str, limit: usize) -> String {
    let escape = |c: char| match c.is_control() {
        true => c.escape_default().to_string(),
        false => c.to_string(),
    };
    let mut text: String = text.chars().map(escape).collect();
    if text.len() > limit {
        let cut = (0..=limit).rev().find(|&i| text.is_char_boundary(i));
        text.truncate(cut.unwrap_or(0));
        text.push('…');
    }
    text
}

/// One delivery's decision as the status page shows it (what its template names: never the
/// row's text, never a secret). The delivery's log line takes the same from its span.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Decision {
    /// When it was decided, RFC 3339 in UTC to the second.
    pub at: String,
    /// The route's `schema.table`, or `none`.
    pub route: String,
    /// The body's `schema.table`, as it came ([`table`]).
    pub table: Option<String>,
    pub id: Option<String>,
    /// The column at fault, for a refused row.
    pub column: Option<String>,
    pub branch: Option<String>,
    pub repo: Option<String>,
    pub http_status: u16,
    pub outcome: &'static str,
    /// Why it was not simply dispatched, as the log says it: empty for no reason.
    pub reason: &'static str,
    /// Why the credentials were refused (`missing`, `wrong_secret`, ...), for a 401.
    pub kind: Option<&'static str>,
}

/// The body's schema and table, as it named them: two names of at most 63 bytes each in
/// PostgreSQL, so longer is cut.
pub fn table(schema: &str, table: &str) -> String {
    quoted(&format!("{schema}.{table}"), TABLE_LIMIT)
}

impl Decision {
    /// The decision, with what its answer says; the answer's row, when it has one, names the id.
    pub fn answered(mut self, answer: &Answer) -> Decision {
        self.at = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
        if self.route.is_empty() {
            self.route = NO_ROUTE.to_owned();
        }
        if let Some(row) = answer.row() {
            self.id = Some(row.id.to_string());
            self.branch = Some(row.branch.to_string());
            self.repo = Some(row.repo.to_string());
        }
        if let Answer::Refused { kind, .. } = answer {
            self.kind = *kind;
        }
        (self.http_status, self.outcome, self.reason) = answer.labels();
        self
    }
}

/// A delivery's line, in its span (which names the delivery, its route, table, id and column):
/// at info for an answer of 2xx, at warn for one that asks to retry, at error for a row refused
/// for good or a bug. Never the row's text. (A refusal before the row is known is
/// [`OncePerMinute::refused`] to log.)
pub fn log(answer: &Answer, fix: Option<String>, took: Duration) {
    let branch = answer
        .row()
        .map_or(String::new(), |row| row.branch.to_string());
    let detail = (!answer.status().is_success()).then(|| quoted(&answer.message(), usize::MAX));
    let (http_status, outcome, reason) = answer.labels();
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                branch,
                http_status,
                outcome,
                reason,
                detail,
                fix,
                duration_ms = took.as_millis() as u64,
                "delivery"
            )
        };
    }
    match (http_status, answer.reason()) {
        (200..=299, _) => line!(info),
        (503, _) | (_, Some(Reason::NoRoute)) => line!(warn),
        _ => line!(error),
    }
}

/// The last [`KEPT`] decisions.
#[derive(Default)]
pub struct Decisions {
    kept: Mutex<VecDeque<Decision>>,
}

impl Decisions {
    pub fn push(&self, decision: Decision) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(decision);
    }

    /// Newest first.
    pub fn newest_first(&self) -> Vec<Decision> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter().rev().cloned().collect()
    }
}

/// The deliveries refused before a row is known, keyed by the reason, and for a 401 the
/// credential's kind: each logged at warn at most once a [`REFUSAL_LOG_EVERY`], saying how many
/// went unlogged since. Never a header's value.
impl OncePerMinute<(Reason, Option<&'static str>)> {
    /// A delivery refused for `reason` before its row was known, logged in its span (which
    /// names the delivery and, once read, its table).
    pub fn refused(&self, reason: Reason, kind: Option<&'static str>, answer: &Answer) {
        let Some(quiet) = self.due((reason, kind), Instant::now()) else {
            return;
        };
        let what = match kind {
            Some(_) => "refused a delivery's credentials (is ROWBRANCH_WEBHOOK_SECRET the trigger's secret?)",
            None => "refused a delivery before reading its row",
        };
        tracing::warn!(
            reason = reason.as_str(),
            kind,
            http_status = answer.status().as_u16(),
            detail = quoted(&answer.message(), usize::MAX),
            unlogged_since_the_last = quiet,
            "{what}"
        );
    }
}

/// The longest path a log line quotes as it came, in bytes.
const PATH_LIMIT: usize = 200;

/// Any path the server does not serve: 404, counted, and logged at warn at most once a minute
/// (anyone who can reach the port can send any), the path escaped and cut short — so that a
/// sender posting to the wrong URL (`…/webhook/webhook`, say) shows in the log, on `/metrics`
/// and on the status page.
pub(super) async fn unknown_path(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
) -> Response {
    app.metrics.unknown_path();
    if let Some(quiet) = app.unknown_paths.due((), Instant::now()) {
        let path = quoted(uri.path(), PATH_LIMIT);
        tracing::warn!(
            %method,
            path,
            http_status = 404,
            unlogged_since_the_last = quiet,
            "a request to a path rowbranch does not serve (deliveries go to POST /webhook)"
        );
    }
    super::not_found("no such path: rowbranch takes deliveries at POST /webhook")
}

/// Lines logged at most once a [`REFUSAL_LOG_EVERY`] for each key, since anyone who can reach
/// the port can make them: when each was last logged, and how many went unlogged since.
pub struct OncePerMinute<K>(Mutex<HashMap<K, (Instant, u64)>>);

impl<K> Default for OncePerMinute<K> {
    fn default() -> Self {
        OncePerMinute(Mutex::default())
    }
}

impl<K: Hash + Eq> OncePerMinute<K> {
    /// When a line for `key` is due at `now`: how many went unlogged since the last one.
    pub fn due(&self, key: K, now: Instant) -> Option<u64> {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match last.get_mut(&key) {
            Some((at, quiet)) if now.duration_since(*at) < REFUSAL_LOG_EVERY => {
                *quiet += 1;
                None
            }
            _ => Some(last.insert(key, (now, 0)).map_or(0, |(_, quiet)| quiet)),
        }
    }
}

/// A delivery's id: the `webhook-id` (or Svix's `svix-id`) it carries, else a fresh one.
pub fn delivery_id(headers: &http::HeaderMap) -> String {
    headers
        .get("webhook-id")
        .or_else(|| headers.get("svix-id"))
        .and_then(|v| v.to_str().ok())
        .filter(|id| !id.is_empty() && id.len() <= 100)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("d_{:016x}", rand::random::<u64>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decisions_keep_the_newest_200() {
        let decisions = Decisions::default();
        for n in 0..250 {
            let decision = Decision {
                id: Some(format!("d{n}")),
                ..Decision::default()
            };
            let refused = Answer::refused(Reason::Unauthorized, "missing or wrong credentials");
            decisions.push(decision.answered(&refused));
        }
        let kept = decisions.newest_first();
        assert_eq!(kept.len(), 200);
        assert_eq!(kept[0].id.as_deref(), Some("d249"));
        assert_eq!(kept[199].id.as_deref(), Some("d50"));
    }

    #[test]
    fn a_table_as_it_came_stays_on_one_line_and_short() {
        assert_eq!(table("public", "feed\nbacks"), "public.feed\\nbacks");
        let long = table("public", &"t".repeat(500));
        assert!(
            long.ends_with('…') && long.chars().count() == TABLE_LIMIT + 1,
            "{long}"
        );
    }

    #[test]
    fn a_delivery_id_is_the_senders_or_a_new_one() {
        let mut headers = http::HeaderMap::new();
        assert!(delivery_id(&headers).starts_with("d_"));
        assert_ne!(delivery_id(&headers), delivery_id(&headers));
        headers.insert(
            "webhook-id",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk".parse().unwrap(),
        );
        assert_eq!(delivery_id(&headers), "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk");
    }

    #[test]
    fn a_line_is_due_once_a_minute_for_each_key_with_the_count_it_left_out() {
        let logged = OncePerMinute::default();
        let start = Instant::now();
        assert_eq!(logged.due("a", start), Some(0));
        assert_eq!(logged.due("b", start), Some(0));
        for n in 1..=3 {
            assert_eq!(logged.due("a", start + Duration::from_secs(n)), None);
        }
        assert_eq!(logged.due("a", start + REFUSAL_LOG_EVERY), Some(3));
    }
}
