//! What `explain` found out about one row: plain data, which is the JSON of `--json` (the
//! shape docs/spec.md §1 documents), and its text for a person: one section per source, a line
//! per fact, times with their age. Every key is always there (`null` when it does not apply),
//! so a script reads the same shape whatever the row's story.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::cmd::plural;
use crate::db::queue::RowMessage;
use crate::forge::{Base, Branch, PullRequest, WorkflowRun};
use crate::identity::{BranchName, RowId};

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
    /// The route's gate, as the config writes it (`status = "approved"`); `None` without one.
    pub run_when: Option<String>,
    /// The columns rowbranch writes the row's state and pull request's link into.
    pub status_column: Option<String>,
    pub pull_request_column: Option<String>,
}

/// The row as the table holds it.
#[derive(Debug, Default, Serialize)]
pub struct RowSection {
    /// `found`, `missing` (the table has no such row), `not_read` (no `DATABASE_URL`),
    /// `misfit` (the route names a column the table lacks) or `unreachable`.
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
        RowSection {
            status,
            detail: Some(detail),
            ..RowSection::default()
        }
    }
}

/// The row's identity and branch, as the planner derives them now.
#[derive(Debug, Default, Serialize)]
pub struct Identity {
    pub id: Option<RowId>,
    /// The branch the pipeline would claim for the row now.
    pub branch: Option<BranchName>,
    /// `row` (its id and text), or `id` (the id alone, without the row: no slug).
    pub derived_from: Option<&'static str>,
    /// Why no branch can be named.
    pub error: Option<String>,
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
    pub base: Option<Base>,
    /// Every branch of the row (the id-prefix match of SPEC §4).
    pub branches: Vec<BranchView>,
    pub pull_requests: Part<PullRequest>,
    pub runs: Part<WorkflowRun>,
    /// Every read that failed, in words: `detail` is the first.
    #[serde(skip)]
    pub errors: Vec<String>,
}

/// One branch of the row, and the commit it points at: the claimed commit while the branch is
/// at its base.
#[derive(Debug, Serialize)]
pub struct BranchView {
    #[serde(flatten)]
    pub branch: Branch,
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
    /// `already_ran` (a claim at its base whose work ran: not dispatched again),
    /// `would_dispatch`, `in_queue` (left to the consumer), `not_ready` (held at the route's
    /// gate), `failed`, `no_row`, `unknown`.
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
        Forecast {
            verdict,
            says: says.into(),
            ..Forecast::default()
        }
    }
}

/// A source that could not be reached.
#[derive(Debug, Serialize)]
pub struct SourceError {
    /// `database`, `forge` or `queue`.
    pub source: &'static str,
    pub error: String,
}

/// How much of the row's JSON the text shows (`--json` has all of it).
const RECORD_CHARS: usize = 300;

/// The text, one line a fact under its label.
struct Lines(String);

impl Lines {
    fn line(&mut self, label: &str, text: &str) {
        let _ = writeln!(self.0, "{label:<12}{text}");
    }

    /// Each item of a listing, or why there are none.
    fn listing<T>(&mut self, label: &str, part: &Part<T>, what: &str, show: impl Fn(&T) -> String) {
        match part.status {
            "ok" if part.items.is_empty() => {
                let since = part.since.map_or_else(String::new, |t| {
                    format!(" since {}", t.format("%Y-%m-%d %H:%M UTC"))
                });
                self.line(label, &format!("no {what} of the row{since}"));
            }
            "ok" => (part.items.iter()).for_each(|item| self.line(label, &show(item))),
            _ => self.line(label, part.detail.as_deref().unwrap_or(part.status)),
        }
    }
}

/// The report for a person.
pub fn render(report: &Report, now: DateTime<Utc>) -> String {
    let mut out = Lines(String::new());
    let route = &report.route;
    let gate = (route.run_when.as_ref()).map_or(String::new(), |gate| format!(", run_when {gate}"));
    let _ = writeln!(
        out.0,
        "row {} of {} → {} (intake {}{gate})\n",
        report.id, route.table, route.repo, route.intake
    );

    let row = &report.row;
    let detail = row.detail.as_deref().unwrap_or("");
    let status = match (row.status, row.created_at) {
        ("found", Some(created)) => format!("found, created {}", when(created, now)),
        ("missing", _) => format!("no such row: {detail}"),
        // `not_read` and `unreachable`, in words.
        (other, _) => format!("{}: {detail}", other.replace('_', " ")),
    };
    out.line("table", &status);
    if let Some(record) = &row.record {
        let json = serde_json::to_string(record).unwrap_or_default();
        out.line("", &cut(&json, RECORD_CHARS));
        // What rowbranch wrote back onto the row.
        let written = [&route.status_column, &route.pull_request_column];
        let written: Vec<String> = (written.into_iter().flatten())
            .map(|column| format!("{column} = {}", record.get(column).unwrap_or(&Value::Null)))
            .collect();
        if !written.is_empty() {
            out.line("state", &written.join(", "));
        }
    }
    let identity = &report.identity;
    let branch = match (&identity.branch, identity.derived_from) {
        (Some(branch), Some("row")) => format!("{branch} (from the row's id and text)"),
        (Some(branch), _) => format!("{branch} (from the id alone: without the row's text there is no slug; its branches are found by the id)"),
        (None, _) => format!("none: {}", identity.error.as_deref().unwrap_or("no id")),
    };
    out.line("branch", &branch);
    out.0.push('\n');

    let forge = &report.forge;
    let (base, heading) = match &forge.base {
        Some(b) => (
            b.branch.as_str(),
            format!(", default branch {} at {}", b.branch, b.sha.short()),
        ),
        None => ("its base", String::new()),
    };
    out.line("forge", &format!("{}: {}{heading}", forge.kind, route.repo));
    if let Some(detail) = &forge.detail {
        out.line("", &format!("{}: {detail}", forge.status));
    }
    if forge.status != "skipped" {
        if forge.branches.is_empty() && forge.status == "ok" {
            out.line("  branch", "none of the row's");
        }
        for branch in &forge.branches {
            let state = match branch.ahead_by {
                Some(0) => format!("0 commits ahead of {base} (claimed; no work pushed)"),
                Some(n) => format!("{n} commit{} ahead of {base}", plural(n)),
                None => "not compared".to_owned(),
            };
            let Branch { name, sha } = &branch.branch;
            let line = format!("{name} at {}: {state}", sha.short());
            out.line("  branch", &line);
        }
        out.listing("  pull", &forge.pull_requests, "pull requests", |p| {
            let state = match (p.merged, p.merged_at) {
                (true, Some(at)) => format!("merged {}", when(at, now)),
                (true, None) => "merged".to_owned(),
                (false, _) => p.state.clone(),
            };
            format!("#{} {state} from {}  {}", p.number, p.head, p.url)
        });
        out.listing("  run", &forge.runs, "workflow runs", |r| {
            let state = match (&r.status, &r.conclusion) {
                (Some(status), Some(conclusion)) => format!("{status}, {conclusion}"),
                (Some(status), None) => status.clone(),
                (None, _) => "status unknown".to_owned(),
            };
            let started = when(r.created_at, now);
            format!(
                "#{} {state}, started {started}  {}  \"{}\"",
                r.run_number, r.url, r.title
            )
        });
    }
    out.0.push('\n');

    if let Some(queue) = &report.queue {
        let names = format!("{} (dead letters: {})", queue.queue, queue.dead_letter);
        out.line("queue", &names);
        if let Some(detail) = &queue.detail {
            out.line("", &format!("{}: {detail}", queue.status));
        } else if queue.messages.is_empty() {
            out.line(
                "  message",
                "none in the queue, its archive or the dead letters",
            );
        }
        for m in &queue.messages {
            out.line("  message", &message(m, now));
        }
        out.0.push('\n');
    }

    out.0.push_str("now\n");
    out.line("  reconcile", &report.reconcile.says);
    out.line("  redo", &report.redo.says);
    if !report.unreachable.is_empty() {
        out.0.push('\n');
        for u in report.first_errors() {
            let _ = writeln!(out.0, "could not reach the {}: {}", u.source, u.error);
        }
    }
    out.0
}

/// Where a message of the row is, and what became of it.
fn message(m: &RowMessage, now: DateTime<Utc>) -> String {
    let reads = m.read_ct;
    let reads = format!("read {reads} time{}", plural(reads.unsigned_abs().into()));
    let sent = when(m.enqueued_at, now);
    match m.place {
        "queue" => {
            let visible = match m.visible_at {
                Some(at) if at > now => format!("held by a reader until {}", when(at, now)),
                _ => "visible to readers".to_owned(),
            };
            format!(
                "{} waiting in the queue, {reads}, sent {sent}; {visible}",
                m.msg_id
            )
        }
        "archive" => {
            let archived = m
                .archived_at
                .map_or_else(|| "?".to_owned(), |at| when(at, now));
            format!("{} archived {archived}, {reads}, sent {sent}", m.msg_id)
        }
        place => {
            let of = m
                .original_msg_id
                .map_or_else(String::new, |id| format!(" (of message {id})"));
            let reason = m.reason.as_deref().unwrap_or("no reason given");
            let letter = format!("dead letter {}{of}: {reason}", m.msg_id);
            match (place, m.archived_at) {
                ("dead_letter_archive", Some(at)) => {
                    format!("{letter}, redriven or removed {}", when(at, now))
                }
                _ => format!(
                    "{letter}, since {sent}; `rowbranch queue redrive --id {}` runs it again once the cause is fixed",
                    m.msg_id
                ),
            }
        }
    }
}

/// A time and how long ago it was.
fn when(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let at = t.format("%Y-%m-%d %H:%M:%S UTC");
    let secs = (now - t).num_seconds();
    if secs < 0 {
        return format!("{at} (in {})", span(-secs));
    }
    format!("{at} ({} ago)", span(secs))
}

fn span(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86_400),
    }
}

/// At most `max` characters, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, Utc};

    use super::{cut, when};

    #[test]
    fn a_time_says_how_long_ago() {
        let now = Utc::now();
        assert!(when(now - Duration::seconds(30), now).ends_with("(30 s ago)"));
        assert!(when(now - Duration::hours(3), now).ends_with("(3 h ago)"));
        assert!(when(now - Duration::days(9), now).ends_with("(9 days ago)"));
        assert_eq!(cut("abcdef", 3), "abc…");
        assert_eq!(cut("abc", 3), "abc");
    }
}
