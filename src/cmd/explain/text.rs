//! The report for a person: one section per source, a line per fact, times with their age.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::report::{Part, Report, Verdict};

/// How much of the row's JSON the text shows (`--json` has all of it).
const RECORD_CHARS: usize = 300;

pub fn render(report: &Report, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let route = &report.route;
    let _ = writeln!(
        out,
        "row {} of {} → {} (intake {})",
        report.id, route.table, route.repo, route.intake
    );
    out.push('\n');

    let row = &report.row;
    match (row.status, row.created_at) {
        ("found", Some(created)) => line(
            &mut out,
            "table",
            &format!("found, created {}", when(created, now)),
        ),
        (status, _) => line(
            &mut out,
            "table",
            &format!(
                "{}: {}",
                match status {
                    "missing" => "no such row",
                    "not_read" => "not read",
                    other => other,
                },
                row.detail.as_deref().unwrap_or("")
            ),
        ),
    }
    if let Some(record) = &row.record {
        let json = serde_json::to_string(record).unwrap_or_default();
        line(&mut out, "", &cut(&json, RECORD_CHARS));
    }
    let identity = &report.identity;
    match (&identity.branch, identity.derived_from) {
        (Some(branch), Some("row")) => line(&mut out, "branch", &format!("{branch} (from the row's id and text)")),
        (Some(branch), _) => line(
            &mut out,
            "branch",
            &format!("{branch} (from the id alone: without the row's text there is no slug; its branches are found by the id)"),
        ),
        (None, _) => line(
            &mut out,
            "branch",
            &format!("none: {}", identity.error.as_deref().unwrap_or("no id")),
        ),
    }
    out.push('\n');

    let forge = &report.forge;
    let heading = match &forge.base {
        Some(base) => format!(
            "{}: {}, default branch {} at {}",
            forge.kind,
            route.repo,
            base.branch,
            short(&base.sha)
        ),
        None => format!("{}: {}", forge.kind, route.repo),
    };
    line(&mut out, "forge", &heading);
    if let Some(detail) = &forge.detail {
        line(&mut out, "", &format!("{}: {detail}", forge.status));
    }
    if forge.status != "skipped" {
        if forge.branches.is_empty() && forge.status == "ok" {
            line(&mut out, "  branch", "none of the row's");
        }
        let base = forge
            .base
            .as_ref()
            .map_or("its base", |b| b.branch.as_str());
        for branch in &forge.branches {
            let state = match branch.ahead_by {
                Some(0) => format!("0 commits ahead of {base} (claimed; no work pushed)"),
                Some(n) => format!(
                    "{n} commit{} ahead of {base}",
                    if n == 1 { "" } else { "s" }
                ),
                None => "not compared".to_owned(),
            };
            line(
                &mut out,
                "  branch",
                &format!("{} at {}: {state}", branch.name, short(&branch.sha)),
            );
        }
        listing(
            &mut out,
            "  pull",
            &forge.pull_requests,
            "pull requests",
            |p| {
                let state = if p.merged {
                    match p.merged_at {
                        Some(at) => format!("merged {}", when(at, now)),
                        None => "merged".to_owned(),
                    }
                } else {
                    p.state.clone()
                };
                format!("#{} {state} from {}  {}", p.number, p.head, p.url)
            },
        );
        listing(&mut out, "  run", &forge.runs, "workflow runs", |r| {
            let state = match (&r.status, &r.conclusion) {
                (Some(status), Some(conclusion)) => format!("{status}, {conclusion}"),
                (Some(status), None) => status.clone(),
                (None, _) => "status unknown".to_owned(),
            };
            format!(
                "#{} {state}, started {}  {}  \"{}\"",
                r.run_number,
                when(r.created_at, now),
                r.url,
                r.title
            )
        });
    }
    out.push('\n');

    if let Some(queue) = &report.queue {
        line(
            &mut out,
            "queue",
            &format!("{} (dead letters: {})", queue.queue, queue.dead_letter),
        );
        if let Some(detail) = &queue.detail {
            line(&mut out, "", &format!("{}: {detail}", queue.status));
        } else if queue.messages.is_empty() {
            line(
                &mut out,
                "  message",
                "none in the queue, its archive or the dead letters",
            );
        }
        for m in &queue.messages {
            let reads = format!(
                "read {} time{}",
                m.read_ct,
                if m.read_ct == 1 { "" } else { "s" }
            );
            let text = match m.place {
                "queue" => {
                    let visible = match m.visible_at {
                        Some(at) if at > now => format!("held by a reader until {}", when(at, now)),
                        _ => "visible to readers".to_owned(),
                    };
                    format!(
                        "{} waiting in the queue, {reads}, sent {}; {visible}",
                        m.msg_id,
                        when(m.enqueued_at, now)
                    )
                }
                "archive" => format!(
                    "{} archived {}, {reads}, sent {}",
                    m.msg_id,
                    m.archived_at
                        .map_or_else(|| "?".to_owned(), |at| when(at, now)),
                    when(m.enqueued_at, now)
                ),
                place => {
                    let letter = format!(
                        "dead letter {}{}: {}",
                        m.msg_id,
                        m.original_msg_id
                            .map_or_else(String::new, |id| format!(" (of message {id})")),
                        m.reason.as_deref().unwrap_or("no reason given"),
                    );
                    match (place, m.archived_at) {
                        ("dead_letter_archive", Some(at)) => {
                            format!("{letter}, redriven or removed {}", when(at, now))
                        }
                        _ => format!(
                            "{letter}, since {}; `rowbranch queue redrive --id {}` runs it again once the cause is fixed",
                            when(m.enqueued_at, now),
                            m.msg_id
                        ),
                    }
                }
            };
            line(&mut out, "  message", &text);
        }
        out.push('\n');
    }

    out.push_str("now\n");
    verdict(&mut out, "  reconcile", &report.reconcile);
    verdict(&mut out, "  redo", &report.redo);

    if !report.unreachable.is_empty() {
        out.push('\n');
        // One line a source, its first error: the sections above say the rest.
        let mut said: Vec<&str> = Vec::new();
        for u in &report.unreachable {
            if !said.contains(&u.source) {
                said.push(u.source);
                let _ = writeln!(out, "could not reach the {}: {}", u.source, u.error);
            }
        }
    }
    out
}

fn line(out: &mut String, label: &str, text: &str) {
    let _ = writeln!(out, "{label:<12}{text}");
}

fn listing<T>(
    out: &mut String,
    label: &str,
    part: &Part<T>,
    what: &str,
    show: impl Fn(&T) -> String,
) {
    match part.status {
        "ok" if part.items.is_empty() => {
            let since = part.since.map_or_else(String::new, |t| {
                format!(" since {}", t.format("%Y-%m-%d %H:%M UTC"))
            });
            line(out, label, &format!("no {what} of the row{since}"));
        }
        "ok" => {
            for item in &part.items {
                line(out, label, &show(item));
            }
        }
        _ => line(out, label, part.detail.as_deref().unwrap_or(part.status)),
    }
}

fn verdict(out: &mut String, label: &str, verdict: &Verdict) {
    line(out, label, &verdict.says);
}

/// A time and how long ago it was.
fn when(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let at = t.format("%Y-%m-%d %H:%M:%S UTC");
    let secs = (now - t).num_seconds();
    let ago = match secs {
        s if s < 0 => return format!("{at} (in {})", span(-s)),
        s => span(s),
    };
    format!("{at} ({ago} ago)")
}

fn span(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86_400),
    }
}

fn short(sha: &str) -> &str {
    match sha.char_indices().nth(12) {
        Some((end, _)) => &sha[..end],
        None => sha,
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
