//! The row hears back (SPEC §2, `status_column` and `pull_request_column`): rowbranch writes the
//! row's state into the row itself, keyed by its id.
//!
//! Each write is one `UPDATE` of those columns alone, whose `WHERE` leaves the row alone when it
//! is already in that state or a later one ([`RowState::over`]), so a repeated event, an event
//! out of order or a second replica updates nothing. An UPDATE that matches no row is read back:
//! a row that is there, and not in a later state, is hidden from the UPDATE by row level
//! security (`not_visible`), which is counted and logged, not taken for "already there".
//!
//! Writes go through [`StatusWriter`]: one task with one connection, fed by a bounded channel,
//! so that a run never waits for the database and a database that is down costs a counted,
//! logged write, never a row. A state lost so is written again by the next event or sweep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::shape::Shape;
use super::{query, quote_ident, Database, Link, Result};
use crate::config::{Redacted, Route};
use crate::metrics::{Metrics, StatusResult};

pub use crate::event::RowState;

impl RowState {
    /// The states a write of `self` may replace, besides NULL and any value rowbranch does not
    /// know (a column default such as `'new'` counts as before `waiting`). `None`: every state
    /// but `self` (and, for a pull request, the same link).
    fn over(self) -> Option<&'static [RowState]> {
        use RowState::*;
        Some(match self {
            Waiting => &[],
            Dispatched | Refused => &[Waiting],
            Failed => &[Waiting, Dispatched],
            PrOpen => &[Waiting, Dispatched, Failed, Closed, Refused],
            Closed => &[Waiting, Dispatched, Failed, PrOpen, Refused],
            Merged => return None,
        })
    }
}

/// rowbranch's states but those `skip` names, as an SQL list of text literals.
pub(super) fn states_but(skip: impl Fn(&RowState) -> bool) -> String {
    let kept = RowState::ALL.iter().filter(|s| !skip(s));
    kept.map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One state to write into one row.
#[derive(Debug, Clone)]
pub struct StatusWrite {
    pub route: Arc<Route>,
    /// The row's id, as text.
    pub id: String,
    pub state: RowState,
    /// The pull request's `html_url`, with [`RowState::PrOpen`], `Merged` and `Closed`.
    pub pull_request: Option<String>,
    /// `redo`: the row starts anew, whatever state it was in (and its pull request's link is
    /// cleared).
    pub anew: bool,
    /// Whether `pr_open` may replace `closed` (a pull request reopened, or found open); not for
    /// a pull request's first `opened`, which can arrive after its `closed`.
    pub reopens: bool,
}

impl StatusWrite {
    /// The states this write may replace ([`RowState::over`]), less `closed` for a pull
    /// request's first `opened` ([`StatusWrite::reopens`]); `None`: every state but its own.
    fn over(&self) -> Option<Vec<RowState>> {
        let reopened = |s: &&RowState| self.reopens || **s != RowState::Closed;
        (self.state.over()).map(|over| over.iter().filter(reopened).copied().collect())
    }

    /// Whether a row whose columns hold `status` and `link` would take this write: the
    /// `WHERE` of [`Database::write_status`] asked of values read already, so that a sweep
    /// sends only the writes that change a row (and counts them).
    pub fn changes(&self, status: Option<&str>, link: Option<&str>) -> bool {
        let route = &self.route;
        let new_link = self
            .pull_request
            .as_deref()
            .filter(|_| route.pull_request_column.is_some());
        let other_link = new_link.is_some_and(|new| link != Some(new));
        if route.status_column.is_none() {
            return other_link;
        }
        let known = status.and_then(RowState::parse);
        let allowed = match self.over() {
            _ if self.anew => true,
            Some(over) => known.is_none_or(|s| over.contains(&s)),
            None => known != Some(self.state),
        };
        let relinked = known == Some(self.state)
            || (self.state == RowState::PrOpen && known == Some(RowState::Closed));
        allowed || (relinked && other_link)
    }
}

impl Database {
    /// Writes `write` into its row, as the module says.
    async fn write_status(&self, shape: &Shape, write: &StatusWrite) -> Result<StatusResult> {
        let route = &write.route;
        let status = route.status_column.as_deref().map(quote_ident);
        // The link is written with a pull request, and cleared by `redo`.
        let link = (route.pull_request_column.as_deref())
            .filter(|_| write.pull_request.is_some() || write.anew)
            .map(quote_ident);
        let link_value = write.pull_request.as_deref().filter(|_| !write.anew);
        let sets: Vec<String> = [(&status, 2), (&link, 3)]
            .into_iter()
            .filter_map(|(column, n)| Some(format!("{} = ${n}::text", column.as_ref()?)))
            .collect();
        if sets.is_empty() {
            return Ok(StatusResult::Already);
        }
        // Where the row may take the state: rowbranch's own states that come before it (or any
        // other value), never the state itself (with the same link) nor a later one.
        let over = write.over();
        let allowed = |column: &str| match &over {
            _ if write.anew => "true".to_owned(),
            Some(over) => format!(
                "coalesce({column}, '') not in ({})",
                states_but(|s| over.contains(s))
            ),
            None => format!("{column} is distinct from $2::text"),
        };
        let when = match (&status, &link) {
            // Another pull request than the one the row names: a new one from the same branch
            // (after a closed one, too), never a late event of the one it has.
            (Some(status), Some(link)) if write.pull_request.is_some() => format!(
                "({} or ({status} in ($2::text, {}) and {link} is distinct from $3::text))",
                allowed(status),
                match write.state {
                    RowState::PrOpen => "'closed'",
                    _ => "$2::text",
                }
            ),
            (Some(status), _) => allowed(status),
            (None, Some(link)) => format!("{link} is distinct from $3::text"),
            (None, None) => unreachable!("no column to write"),
        };
        let row = shape.is_id();
        let sql = format!(
            "update {} set {} where {row} and {when}",
            shape.relation,
            sets.join(", ")
        );
        let state = write.state.as_str();
        let args: [&dyn super::Arg; 3] = [&write.id.as_str(), &state, &link_value];
        let updated = query(&self.client, &format!("{sql} returning 1"), &args)
            .await
            .map_err(|e| shape.query_error(e))?;
        if !updated.is_empty() {
            return Ok(StatusResult::Written);
        }
        // Nothing matched: the row is gone, in that state or later, or hidden from the UPDATE.
        let sql = format!("select {when} from {} where {row}", shape.relation);
        let found = query(&self.client, &sql, &args)
            .await
            .map_err(|e| shape.query_error(e))?;
        Ok(match found.first().map(|r| r.get::<_, Option<bool>>(0)) {
            None => StatusResult::NoRow,
            Some(Some(true)) => StatusResult::NotVisible,
            Some(_) => StatusResult::Already,
        })
    }

    /// The first of `ids` (texts, each a possible id) that a row of the route's table has, by
    /// its index: how a branch names its row when the id may hold `-` (a UUID, a text id), so
    /// that only the table can tell `{id}-{slug}` apart. Each is bound in the id column's own
    /// type; one that is no value of it (`42-add` for a bigint id) names no row.
    pub async fn first_row_of(&self, route: &Route, ids: &[&str]) -> Result<Option<usize>> {
        let shape = Shape::read(&self.client, route, false).await?;
        let sql = format!(
            "select 1 from {} where {} limit 1",
            shape.relation,
            shape.is_id()
        );
        for (at, id) in ids.iter().enumerate() {
            match query(&self.client, &sql, &[id]).await {
                Ok(found) if !found.is_empty() => return Ok(Some(at)),
                Ok(_) => {}
                Err(e) if super::error::data_error(&e) => {}
                Err(e) => return Err(shape.query_error(e)),
            }
        }
        Ok(None)
    }
}

/// How many writes may wait for the database; beyond it a write is dropped, counted and logged
/// (the next event or sweep writes the state again).
const WAITING_WRITES: usize = 1024;

/// After a failed connection, how long the writer waits before it connects again; the writes
/// that come meanwhile fail at once.
const RECONNECT_AFTER: Duration = Duration::from_secs(5);

/// The longest one write (or its table's lookup) may take: a connection that stops answering
/// (a pooler's failover that leaves it half-open) would otherwise hold every later write, and
/// the commands that wait for the writes at their end.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The one task that writes rows' states, and the way to it.
pub struct StatusWriter {
    /// The way to the task, and the task: taken when it finishes.
    running: Mutex<Option<(mpsc::Sender<StatusWrite>, JoinHandle<()>)>>,
    metrics: Arc<Metrics>,
}

impl StatusWriter {
    /// Starts the writer on `database_url` (connected at the first write).
    pub fn start(database_url: Redacted, metrics: Arc<Metrics>) -> StatusWriter {
        let (sender, receiver) = mpsc::channel(WAITING_WRITES);
        let task = tokio::spawn(write_all(database_url, receiver, Arc::clone(&metrics)));
        StatusWriter {
            running: Mutex::new(Some((sender, task))),
            metrics,
        }
    }

    /// Hands `write` to the writer, or counts and logs it as failed when the writer is full or
    /// has finished.
    pub fn send(&self, write: StatusWrite) {
        let refused = match &*self.running.lock().expect("status writer lock poisoned") {
            Some((sender, _)) => sender.try_send(write).err().map(|e| match e {
                mpsc::error::TrySendError::Full(w) => (w, "too many writes wait for the database"),
                mpsc::error::TrySendError::Closed(w) => (w, "the writer has finished"),
            }),
            None => Some((write, "the writer has finished")),
        };
        if let Some((write, why)) = refused {
            failed(&self.metrics, &write, why);
        }
    }

    /// Lets the writes that wait finish; then the writer ends. Bounded by whoever awaits it
    /// (the shutdown's grace).
    pub async fn finish(&self) {
        let running = self
            .running
            .lock()
            .expect("status writer lock poisoned")
            .take();
        if let Some((sender, task)) = running {
            drop(sender);
            let _ = task.await;
        }
    }
}

fn failed(metrics: &Metrics, write: &StatusWrite, why: &str) {
    metrics.status_written(&write.route.table_name(), StatusResult::Failed);
    tracing::warn!(route = %write.route.table_name(), id = %write.id, state = %write.state,
        error = why, "the row's state was not written; the next event or sweep writes it");
}

/// `work`, within [`WRITE_TIMEOUT`]; its error as text. A connection that stopped answering
/// (half-open) is forgotten: made again next time.
async fn within<T>(
    link: &Link,
    work: impl std::future::Future<Output = Result<T>>,
) -> std::result::Result<T, String> {
    match timeout(WRITE_TIMEOUT, work).await {
        Ok(done) => done.map_err(|e| e.to_string()),
        Err(_) => {
            link.forget().await;
            Err("the database did not answer within 10 s".to_owned())
        }
    }
}

async fn write_all(
    database_url: Redacted,
    mut receiver: mpsc::Receiver<StatusWrite>,
    metrics: Arc<Metrics>,
) {
    let link = Link::new(database_url, RECONNECT_AFTER, Arc::default());
    let mut shapes: HashMap<String, Shape> = HashMap::new();
    while let Some(write) = receiver.recv().await {
        let table = write.route.table_name();
        let written = async {
            let (db, _) = link.get().await.map_err(|e| e.to_string())?;
            if !shapes.contains_key(&table) {
                let shape = within(&link, Shape::read(db.client(), &write.route, false)).await?;
                shapes.insert(table.clone(), shape);
            }
            let written = within(&link, db.write_status(&shapes[&table], &write)).await;
            if written.is_err() {
                // The shape may be stale (a column renamed): read it again next time.
                shapes.remove(&table);
            }
            written
        };
        let written = match written.await {
            Ok(written) => written,
            Err(why) => {
                failed(&metrics, &write, &why);
                continue;
            }
        };
        metrics.status_written(&table, written);
        match written {
            StatusResult::NotVisible => {
                tracing::warn!(route = %table, id = %write.id, state = %write.state,
                "the row's state was not written: row level security hides the row from DATABASE_URL's role for UPDATE; `rowbranch doctor` gives the policy")
            }
            StatusResult::NoRow => {
                tracing::info!(route = %table, id = %write.id, state = %write.state,
                "no row has this id any more: no state written")
            }
            _ => {
                tracing::debug!(route = %table, id = %write.id, state = %write.state, result = written.as_str(), "row state")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{RowState, StatusWrite};
    use crate::config::{Config, TEST_LOCAL_CONFIG};

    /// A write of `state` (with a link) for the test route, writing the columns `columns` adds.
    fn write(columns: &str, state: RowState, link: Option<&str>) -> StatusWrite {
        let text = format!("{TEST_LOCAL_CONFIG}{columns}");
        let env = |key: &str| (key == "DATABASE_URL").then(|| "postgres://localhost/x".to_owned());
        let mut config = Config::parse(&text, std::path::Path::new("rowbranch.toml"), &env)
            .unwrap_or_else(|e| panic!("{e}"));
        StatusWrite {
            route: config.routes.remove(0),
            id: "7".to_owned(),
            state,
            pull_request: link.map(str::to_owned),
            anew: false,
            reopens: true,
        }
    }

    #[test]
    fn a_write_changes_a_row_only_where_the_update_would() {
        let both = "status_column = \"state\"\npull_request_column = \"link\"\n";
        let (a, b) = (Some("https://x/pull/1"), Some("https://x/pull/2"));
        #[rustfmt::skip]
        let cases = [
            (both, RowState::PrOpen, a, None, None, true),
            (both, RowState::PrOpen, a, Some("new"), None, true),
            (both, RowState::PrOpen, a, Some("dispatched"), None, true),
            (both, RowState::PrOpen, a, Some("pr_open"), a, false),
            // The same state with another pull request: the link is written.
            (both, RowState::PrOpen, b, Some("pr_open"), a, true),
            (both, RowState::PrOpen, a, Some("merged"), a, false),
            (both, RowState::Merged, a, Some("pr_open"), a, true),
            (both, RowState::Merged, a, Some("merged"), a, false),
            (both, RowState::Closed, a, Some("pr_open"), a, true),
            (both, RowState::PrOpen, a, Some("closed"), a, true),
            (both, RowState::Failed, None, Some("dispatched"), None, true),
            (both, RowState::Failed, None, Some("failed"), None, false),
            (both, RowState::Failed, None, Some("pr_open"), a, false),
            (both, RowState::Failed, None, Some("closed"), a, false),
            // A link alone: written when it is another.
            ("pull_request_column = \"link\"\n", RowState::Merged, a, None, None, true),
            ("pull_request_column = \"link\"\n", RowState::Merged, a, None, a, false),
            ("pull_request_column = \"link\"\n", RowState::Failed, None, None, None, false),
            ("status_column = \"state\"\n", RowState::PrOpen, a, Some("pr_open"), None, false),
        ];
        for (columns, state, link, held, held_link, changes) in cases {
            let write = write(columns, state, link);
            assert_eq!(
                write.changes(held, held_link),
                changes,
                "{state} {link:?} over {held:?} {held_link:?} ({columns:?})"
            );
        }
    }

    #[test]
    fn a_pull_requests_first_opened_leaves_a_closed_row_and_a_reopening_does_not() {
        let both = "status_column = \"state\"\npull_request_column = \"link\"\n";
        let link = Some("https://x/pull/1");
        let mut opened = write(both, RowState::PrOpen, link);
        assert!(opened.changes(Some("closed"), link), "reopened");
        opened.reopens = false;
        assert!(!opened.changes(Some("closed"), link), "a late opened");
        // Another pull request from the same branch after the closed one: a new one.
        assert!(
            opened.changes(Some("closed"), Some("https://x/pull/0")),
            "a new pull request"
        );
        assert!(opened.changes(Some("dispatched"), None));
        assert!(opened.changes(Some("failed"), None));
    }
}
