//! What the server remembers of its deliveries, for people: the last decisions (for `GET /`)
//! and the line each gets in the log. A delivery refused before any row is known (its content
//! type, size, credentials, shape) is logged at warn at most once a minute for each reason, since
//! anyone who can reach the port can send those; every other answer gets a line of its own, at
//! error when a row was refused for good.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};

use super::answer::Answer;
use crate::metrics::NO_ROUTE;
use crate::reason::Reason;
use crate::templates::pages::DecisionView;

/// How many decisions the status page shows.
const KEPT: usize = 200;
/// How often a kind of refusal before the row is logged, at most.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// What a delivery named, as far as it was read before its answer: the route it found, and
/// the table, id and column as they came (each cut short, its control characters escaped).
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The route's `schema.table`, once one takes the table.
    pub route: Option<String>,
    /// The body's `schema.table`.
    pub table: Option<String>,
    pub id: Option<String>,
    pub column: Option<String>,
    /// Why the credentials were refused (`missing`, `wrong_secret`, ...), for a 401.
    pub kind: Option<&'static str>,
}

impl Seen {
    /// The body's schema and table, as it named them: two names of at most 63 bytes each in
    /// PostgreSQL, so longer is cut.
    pub fn table(&mut self, schema: &str, table: &str) {
        let named = printable(&format!("{schema}.{table}"));
        self.table = Some(match named.char_indices().nth(TABLE_LIMIT) {
            Some((cut, _)) => format!("{}…", &named[..cut]),
            None => named,
        });
    }
}

/// The longest `schema.table` a log line quotes as it came.
const TABLE_LIMIT: usize = 128;

/// `text` with its control characters escaped, so that what a sender wrote stays on its line of
/// a text log.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// One delivery's decision, as the status page and the log show it.
#[derive(Debug, Clone)]
pub struct Decision {
    pub at: SystemTime,
    /// The `webhook-id` the sender gave, or one made up here.
    pub delivery: String,
    /// The route's `schema.table`, or `none`.
    pub route: String,
    /// The body's `schema.table`, as it came.
    pub table: Option<String>,
    pub id: Option<String>,
    /// The column at fault, for a refused row.
    pub column: Option<String>,
    pub branch: Option<String>,
    pub repo: Option<String>,
    pub http_status: u16,
    pub outcome: &'static str,
    pub reason: Option<Reason>,
    /// The body's `reason` (empty when it has none), which the deliveries counter counts by.
    pub counted_reason: &'static str,
    pub kind: Option<&'static str>,
    /// The answer's message, for an answer other than 2xx.
    pub detail: Option<String>,
    /// What brings a refused row back once its cause is fixed.
    pub fix: Option<String>,
    pub took: Duration,
}

impl Decision {
    pub fn new(delivery: String, seen: Seen, answer: &Answer, took: Duration) -> Decision {
        let row = answer.row();
        let http_status = answer.status().as_u16();
        Decision {
            at: SystemTime::now(),
            delivery,
            route: seen.route.unwrap_or_else(|| NO_ROUTE.to_owned()),
            table: seen.table,
            id: row.map(|r| r.id.to_string()).or(seen.id),
            column: seen.column,
            branch: row.map(|r| r.branch.to_string()),
            repo: row.map(|r| r.repo.to_string()),
            http_status,
            outcome: answer.outcome(),
            reason: answer.reason(),
            counted_reason: answer.body_reason().map_or("", Reason::as_str),
            kind: seen.kind,
            detail: (!answer.status().is_success()).then(|| printable(&answer.message())),
            fix: None,
            took,
        }
    }

    /// Whether its line is one of many alike, kept to one a minute.
    fn is_before_the_row(&self) -> bool {
        self.reason.is_some_and(Reason::is_before_the_row)
    }

    /// The decision's line: at info for an answer of 2xx, at warn for one that asks to retry,
    /// at error for a row refused for good or a bug. Never the row's text. A refusal before
    /// the row is known is left to [`Refusals`].
    pub fn log(&self) {
        if self.is_before_the_row() {
            return;
        }
        macro_rules! line {
            ($level:ident) => {
                tracing::$level!(
                    delivery = %self.delivery,
                    route = %self.route,
                    table = self.table.as_deref(),
                    id = self.id.as_deref().unwrap_or(""),
                    column = self.column.as_deref(),
                    branch = self.branch.as_deref().unwrap_or(""),
                    http_status = self.http_status,
                    outcome = self.outcome,
                    reason = self.reason.map_or("", Reason::as_str),
                    detail = self.detail.as_deref(),
                    fix = self.fix.as_deref(),
                    duration_ms = self.took.as_millis() as u64,
                    "delivery"
                )
            };
        }
        match self.http_status {
            200..=299 => line!(info),
            503 => line!(warn),
            _ => line!(error),
        }
    }

    /// As the status page shows it; `web_url` is the forge's, for links to branches.
    pub fn view(&self, web_url: Option<&str>) -> DecisionView {
        let branch_url = match (web_url, &self.repo, &self.branch) {
            (Some(web), Some(repo), Some(branch)) => Some(format!("{web}/{repo}/tree/{branch}")),
            _ => None,
        };
        let reason = match (self.reason, self.kind) {
            (Some(reason), Some(kind)) => format!("{reason} ({kind})"),
            (Some(reason), None) => reason.to_string(),
            (None, _) => String::new(),
        };
        DecisionView {
            at: DateTime::<Utc>::from(self.at).to_rfc3339_opts(SecondsFormat::Secs, true),
            route: self.route.clone(),
            table: self.table.clone().unwrap_or_default(),
            id: self.id.clone().unwrap_or_default(),
            column: self.column.clone().unwrap_or_default(),
            branch: self.branch.clone().unwrap_or_default(),
            branch_url,
            status: self.http_status,
            outcome: self.outcome,
            reason,
        }
    }
}

/// The last [`KEPT`] decisions.
#[derive(Default)]
pub struct Decisions {
    kept: Mutex<VecDeque<Decision>>,
}

impl Decisions {
    pub fn push(&self, decision: Decision) {
        let mut kept = self.kept.lock().expect("decisions lock poisoned");
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(decision);
    }

    /// Newest first.
    pub fn newest_first(&self) -> Vec<Decision> {
        let kept = self.kept.lock().expect("decisions lock poisoned");
        kept.iter().rev().cloned().collect()
    }
}

/// Logs the deliveries refused before a row is known, at warn, at most once a
/// [`REFUSAL_LOG_EVERY`] for each reason (for refused credentials, each kind), saying how many
/// went unlogged since. Never a header's value.
#[derive(Default)]
pub struct Refusals {
    /// For each reason (and a refused credential's kind): when it was last logged, and how
    /// many went unlogged since.
    last: Mutex<HashMap<RefusalKey, (Instant, u64)>>,
}

/// A reason, and for a 401 the credential's kind.
type RefusalKey = (Reason, Option<&'static str>);

impl Refusals {
    pub fn refused(&self, decision: &Decision) {
        let Some(reason) = decision.reason.filter(|r| r.is_before_the_row()) else {
            return;
        };
        let key = (reason, decision.kind);
        let mut last = self.last.lock().expect("refusals lock poisoned");
        let now = Instant::now();
        match last.get_mut(&key) {
            Some((at, quiet)) if now.duration_since(*at) < REFUSAL_LOG_EVERY => *quiet += 1,
            entry => {
                let quiet = entry.map_or(0, |(_, quiet)| *quiet);
                let (reason, http_status) = (reason.as_str(), decision.http_status);
                let (delivery, table) = (&decision.delivery, decision.table.as_deref());
                match decision.kind {
                    Some(kind) => tracing::warn!(
                        reason,
                        kind,
                        http_status,
                        delivery,
                        unlogged_since_the_last = quiet,
                        "refused a delivery's credentials (is ROWBRANCH_WEBHOOK_SECRET the trigger's secret?)"
                    ),
                    None => tracing::warn!(
                        reason,
                        http_status,
                        delivery,
                        table,
                        detail = decision.detail.as_deref(),
                        unlogged_since_the_last = quiet,
                        "refused a delivery before reading its row"
                    ),
                }
                last.insert(key, (now, 0));
            }
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
            decisions.push(Decision::new(
                format!("d{n}"),
                Seen::default(),
                &Answer::refused(Reason::Unauthorized, "missing or wrong credentials"),
                Duration::ZERO,
            ));
        }
        let kept = decisions.newest_first();
        assert_eq!(kept.len(), 200);
        assert_eq!(kept[0].delivery, "d249");
        assert_eq!(kept[199].delivery, "d50");
    }

    #[test]
    fn a_table_as_it_came_stays_on_one_line_and_short() {
        let mut seen = Seen::default();
        seen.table("public", "feed\nbacks");
        assert_eq!(seen.table.as_deref(), Some("public.feed\\nbacks"));
        seen.table("public", &"t".repeat(500));
        let table = seen.table.unwrap();
        assert!(
            table.ends_with('…') && table.chars().count() == TABLE_LIMIT + 1,
            "{table}"
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
}
