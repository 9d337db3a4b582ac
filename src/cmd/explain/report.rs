//! What `explain` found out about one row: plain data, printed as text or, with `--json`, as
//! the shape docs/spec.md §1 documents. Every key is always there (`null` when it does not
//! apply), so a script reads the same shape whatever the row's story.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::db::queue::RowMessage;
use crate::db::Row;
use crate::forge::{PullRequest, WorkflowRun};
use crate::identity::RowId;
use crate::pipeline::Plan;

/// One row, end to end.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The version of the JSON shape: raised when a key changes meaning or goes away (new keys
    /// may be added without it).
    pub version: u32,
    /// The id as given on the command line.
    pub id: String,
    pub route: RouteSection,
    pub row: RowSection,
    pub identity: Identity,
    pub forge: ForgeSection,
    /// Only for a route with `intake = "pgmq"`.
    pub queue: Option<QueueSection>,
    pub reconcile: Forecast,
    pub redo: Forecast,
    /// The sources that could not be reached, each with why; empty when every source answered
    /// (the command then exits 0).
    pub unreachable: Vec<SourceError>,
}

/// The route the table names.
#[derive(Debug, Serialize)]
pub struct RouteSection {
    /// `schema.table`.
    pub table: String,
    pub repo: String,
    pub intake: &'static str,
    pub id_column: String,
    pub text_column: Option<String>,
    pub branch_prefix: String,
    pub event_type: String,
}

/// The row as the table holds it.
#[derive(Debug, Default, Serialize)]
pub struct RowSection {
    /// `found`, `missing` (the table has no such row), `not_read` (no `DATABASE_URL`) or
    /// `unreachable`.
    pub status: &'static str,
    /// Why, when it was not found.
    pub detail: Option<String>,
    pub created_at: Option<DateTime<Utc>>,
    /// The whole row, as `to_jsonb` gives it (the shape a webhook carries).
    pub record: Option<Map<String, Value>>,
    /// A missing row's id as the id column types it, when the id is one of its values.
    #[serde(skip)]
    pub typed_id: Option<Value>,
}

impl RowSection {
    /// A row that was not found, and why.
    pub fn not(status: &'static str, detail: String) -> RowSection {
        let detail = Some(detail);
        RowSection {
            status,
            detail,
            ..RowSection::default()
        }
    }

    /// The row, when it was found.
    pub fn row(&self) -> Option<Row> {
        Some(Row {
            record: self.record.clone()?,
            created_at: self.created_at?,
        })
    }
}

/// The row's identity and branch, as the planner derives them now.
#[derive(Debug, Default, Serialize)]
pub struct Identity {
    #[serde(serialize_with = "as_text")]
    pub id: Option<RowId>,
    /// The branch the pipeline would claim for the row now.
    pub branch: Option<String>,
    /// `row` (its id and text), or `id` (the id alone, without the row: no slug).
    pub derived_from: Option<&'static str>,
    /// Why no branch can be named.
    pub error: Option<String>,
    /// The planner's plan, when the row was read.
    #[serde(skip)]
    pub plan: Option<Plan>,
}

/// The id as its text, as the branch names it.
fn as_text<S: serde::Serializer>(id: &Option<RowId>, to: S) -> Result<S::Ok, S::Error> {
    match id {
        Some(id) => to.collect_str(id),
        None => to.serialize_none(),
    }
}

/// The forge's side: the row's branches, pull requests and workflow runs.
#[derive(Debug, Serialize)]
pub struct ForgeSection {
    /// `github` or `local`.
    pub kind: &'static str,
    /// `ok`, `unreachable`, or `skipped` (no id to look for).
    pub status: &'static str,
    pub detail: Option<String>,
    /// The default branch and its head.
    pub base: Option<BaseView>,
    /// Every branch of the row (the id-prefix match of SPEC §4).
    pub branches: Vec<BranchView>,
    pub pull_requests: Part<PullRequest>,
    pub runs: Part<WorkflowRun>,
}

#[derive(Debug, Serialize)]
pub struct BaseView {
    pub branch: String,
    pub sha: String,
}

/// One branch of the row.
#[derive(Debug, Serialize)]
pub struct BranchView {
    pub name: String,
    /// The commit it points at: the claimed commit while the branch is at its base.
    pub sha: String,
    /// Commits the branch has that the default branch has not (GitHub's compare); `null` when
    /// the compare failed.
    pub ahead_by: Option<u64>,
}

/// A listing the forge may not keep, or may not let the App read.
#[derive(Debug, Serialize)]
pub struct Part<T> {
    /// `ok`; `not_kept` (the local forge has none); `not_permitted` (the App lacks the
    /// permission: `detail` says which); `unreachable`; or `skipped`.
    pub status: &'static str,
    pub detail: Option<String>,
    /// The listing looked back to then.
    pub since: Option<DateTime<Utc>>,
    pub items: Vec<T>,
}

impl<T> Part<T> {
    pub fn skipped(why: &str) -> Part<T> {
        Part {
            status: "skipped",
            detail: Some(why.to_owned()),
            since: None,
            items: Vec::new(),
        }
    }
}

/// The row's messages in the queue (`intake = "pgmq"`).
#[derive(Debug, Serialize)]
pub struct QueueSection {
    /// `ok`, `unreachable`, or `skipped` (no database to read).
    pub status: &'static str,
    pub detail: Option<String>,
    pub queue: String,
    pub dead_letter: String,
    /// Oldest first.
    pub messages: Vec<RowMessage>,
}

/// What `reconcile` or `redo` would do with the row now.
#[derive(Debug, Default, Serialize)]
pub struct Forecast {
    /// reconcile: `handled`, `merged_before`, `dead_claim` (it would dispatch again),
    /// `would_dispatch`, `in_queue` (left to the consumer), `failed`, `no_row`, `unknown`.
    /// redo: `would_dispatch`, `cannot`, `unknown`.
    pub verdict: &'static str,
    /// The branch it would dispatch on, if it would.
    pub branch: Option<String>,
    /// reconcile: whether the row is within `reconcile_window`, so that a sweep without
    /// `--since` reads it at all.
    pub in_window: Option<bool>,
    /// In words.
    pub says: String,
}

impl Forecast {
    pub fn new(verdict: &'static str, says: impl Into<String>) -> Forecast {
        let says = says.into();
        Forecast {
            verdict,
            says,
            ..Forecast::default()
        }
    }

    pub fn on(mut self, branch: impl ToString) -> Forecast {
        self.branch = Some(branch.to_string());
        self
    }
}

/// A source that could not be reached.
#[derive(Debug, Serialize)]
pub struct SourceError {
    /// `database`, `forge` or `queue`.
    pub source: &'static str,
    pub error: String,
}
