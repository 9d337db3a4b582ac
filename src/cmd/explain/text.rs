//! The report for a person: one section per source, a line per fact, times with their age.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::plural;
use super::report::{Part, Report};
use crate::db::queue::RowMessage;

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
            "ok" => part
                .items
                .iter()
                .for_each(|item| self.line(label, &show(item))),
            _ => self.line(label, part.detail.as_deref().unwrap_or(part.status)),
        }
    }
}

pub fn render(report: &Report, now: DateTime<Utc>) -> String {
    let mut out = Lines(String::new());
    let route = &report.route;
    let _ = writeln!(
        out.0,
        "row {} of {} → {} (intake {})\n",
        report.id, route.table, route.repo, route.intake
    );

    let row = &report.row;
    let status = match (row.status, row.created_at) {
        ("found", Some(created)) => format!("found, created {}", when(created, now)),
        ("missing", _) => format!("no such row: {}", row.detail.as_deref().unwrap_or("")),
        ("not_read", _) => format!("not read: {}", row.detail.as_deref().unwrap_or("")),
        (other, _) => format!("{other}: {}", row.detail.as_deref().unwrap_or("")),
    };
    out.line("table", &status);
    if let Some(record) = &row.record {
        let json = serde_json::to_string(record).unwrap_or_default();
        out.line("", &cut(&json, RECORD_CHARS));
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
    let base = forge
        .base
        .as_ref()
        .map_or("its base", |b| b.branch.as_str());
    let heading = match &forge.base {
        Some(b) => format!(", default branch {} at {}", b.branch, short(&b.sha)),
        None => String::new(),
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
            let line = format!("{} at {}: {state}", branch.name, short(&branch.sha));
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
    let reads = format!(
        "read {} time{}",
        m.read_ct,
        plural(m.read_ct.unsigned_abs().into())
    );
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

/// A commit's first 12 digits, for people.
fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
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
