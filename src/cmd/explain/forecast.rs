//! What `reconcile` and `redo` would do with the row now, by their own code: the sweep's
//! [`Known::decide`] on what was read (reading only, as it does: a suspect's compare), and
//! redo's `free_branch`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::OnceCell;

use super::report::{Forecast, Report};
use crate::cmd::plural;
use crate::cmd::redo::free_branch;
use crate::config::Config;
use crate::db::Row;
use crate::forge::Forge;
use crate::identity::BranchName;
use crate::pipeline::{id_text, CompiledRoute};
use crate::sweep::{Known, QueueView, Verdict};

/// The row, or the forecast for want of it or of the forge.
fn read(report: &Report, command: &str) -> Result<Row, Forecast> {
    let row = &report.row;
    let found = (row.record.clone().zip(row.created_at))
        .map(|(record, created_at)| Row { record, created_at });
    let (verdict, says) = match (found, row.status, command) {
        (Some(_), ..) if report.forge.status == "unreachable" => {
            ("unknown", "unknown: the forge could not be read")
        }
        (Some(row), ..) => return Ok(row),
        (None, "not_read", _) => (
            "unknown",
            "unknown: it reads the row from DATABASE_URL, which is not set",
        ),
        (None, "missing", "redo") => (
            "cannot",
            "cannot: it reads the row from the table, which has no such row",
        ),
        (None, "missing", _) => (
            "no_row",
            "nothing: the sweep reads the table's rows, and it has no such row",
        ),
        _ => ("unknown", "unknown: the database could not be read"),
    };
    Err(Forecast::new(verdict, says))
}

/// `redo`: its branch if free, else the next free `{branch}-redo-N`.
pub(super) fn redo(report: &Report, compiled: &CompiledRoute) -> Forecast {
    if let Err(forecast) = read(report, "redo") {
        return forecast;
    }
    // The row was read: its identity is the planner's.
    let Some(planned) = &report.identity.branch else {
        return Forecast::new("cannot", "cannot: the row's id is not usable");
    };
    let taken: Vec<BranchName> = (report.forge.branches.iter())
        .map(|b| b.branch.name.clone())
        .collect();
    let branch = free_branch(planned, &taken);
    let why = (&branch != planned).then(|| format!(" ({planned} is taken)"));
    let says = format!(
        "claim {branch} and dispatch `{}`{}; redo asks first unless given --yes",
        compiled.route.event_type,
        why.unwrap_or_default()
    );
    Forecast {
        branch: Some(branch.to_string()),
        ..Forecast::new("would_dispatch", says)
    }
}

/// `reconcile`: the sweep's own decision on the row's branches, pull requests and queue
/// messages as read, and whether a sweep reads the row at all.
pub(super) async fn reconcile(
    config: &Config,
    compiled: &CompiledRoute,
    forge: &dyn Forge,
    report: &Report,
    now: DateTime<Utc>,
) -> Forecast {
    let row = match read(report, "reconcile") {
        Ok(row) => row,
        Err(forecast) => return forecast,
    };
    let route = &compiled.route;
    // The sweep reads only rows that pass the gate.
    let held = (route.run_when.as_ref()).filter(|gate| !gate.passes(row.record.get(&gate.column)));
    if let Some(gate) = held {
        let holds =
            (row.record.get(&gate.column)).map_or("no such column".into(), |v| v.to_string());
        let says = format!(
            "nothing: the row is held at the gate (run_when is {gate}, the row holds {holds}); the sweep leaves it, and the UPDATE that makes it pass runs it"
        );
        return Forecast::new("not_ready", says);
    }
    let pulls = &report.forge.pull_requests;
    if !matches!(pulls.status, "ok" | "not_kept") {
        let why = pulls.detail.as_deref().unwrap_or("not read");
        let says = format!("unknown: the sweep lists pull requests, and here they are {why}");
        return Forecast::new("unknown", says);
    }
    // The runs tell a claim whose work ran from a dead one: unread, the sweep would stop.
    let runs = &report.forge.runs;
    if !matches!(runs.status, "ok" | "not_kept" | "not_permitted") {
        let why = runs.detail.as_deref().unwrap_or("not read");
        let says = format!("unknown: the sweep lists workflow runs, and here they are {why}");
        return Forecast::new("unknown", says);
    }
    let queue = match &report.queue {
        None => None,
        Some(queue) if queue.status != "ok" => {
            return Forecast::new("unknown", "unknown: the queue could not be read")
        }
        // The queue's say on this one row, as the sweep reads it for all of them.
        Some(queue) => {
            let id = row.record.get(&route.id_column).and_then(id_text);
            let id = id.unwrap_or_default();
            let ids = (queue.messages.iter())
                .filter(|m| matches!(m.place, "queue" | "archive"))
                .map(|m| (id.clone(), m.place == "queue", m.archived_at));
            match QueueView::new(ids.collect(), &config.pgmq) {
                Ok(view) => Some(view),
                Err(e) => return Forecast::new("unknown", format!("unknown: {e:#}")),
            }
        }
    };
    let prefix = &route.branch_prefix;
    let branches = report.forge.branches.iter().map(|b| b.branch.clone());
    let stale_after = config.reconcile.stale_claim_after;
    let stale_before = now - since(stale_after);
    let mut known = Known::new(
        prefix,
        branches.collect(),
        pulls.items.clone(),
        &runs.items,
        queue,
        stale_before,
    );
    known.base = OnceCell::new_with(report.forge.base.clone());
    let base = (known.base.get()).map_or("its base".to_owned(), |b| b.branch.to_string());

    let verdict = match known.decide(forge, compiled, row.clone()).await {
        Ok(verdict) => verdict,
        Err(e) => return Forecast::new("unknown", format!("unknown: {e:#}")),
    };
    let event = &route.event_type;
    let says = match &verdict {
        Verdict::InQueue => "nothing: its message is in the queue (or, the row less than a minute old, may be there unseen yet), which is the consumer's".to_owned(),
        Verdict::Handled => match report.forge.branches.as_slice() {
            _ if !pulls.items.is_empty() => {
                "nothing: a pull request came from a branch of the row".to_owned()
            }
            [only] => match only.ahead_by {
                Some(0) => format!(
                    "nothing yet: its branch is at its base, but the row is younger than stale_claim_after ({}); a later sweep dispatches again if it stays there",
                    duration(stale_after)
                ),
                Some(n) => format!("nothing: its branch is {n} commit{} ahead of {base}", plural(n)),
                None => "nothing: it has a branch".to_owned(),
            },
            many => format!(
                "nothing: the row has {} branches (redone on purpose), none taken for a lost claim",
                many.len()
            ),
        },
        Verdict::MergedBefore => "nothing: a pull request came from a branch of the row, which is gone: merged or closed work is not redone".to_owned(),
        Verdict::DeadClaim { plan, claimed } => format!(
            "dispatch `{event}` again on {}: a dead claim (at its base {}, no pull request, the row older than stale_claim_after, {})",
            plan.branch,
            claimed.sha.short(),
            duration(stale_after)
        ),
        Verdict::Run(plan) => format!(
            "claim {} and dispatch `{event}`: the row has neither a branch nor a pull request",
            plan.branch
        ),
        Verdict::Failed(failed) => format!("the row fails: {}", failed.error),
        Verdict::AlreadyRan(branch) => format!(
            "nothing: {branch} is at its base, but a run of the work workflow names it: its work ran and pushed nothing, so it is not dispatched again (`rowbranch redo` runs the row on purpose)"
        ),
        // What acting on a row settles it as; deciding gives none of these.
        _ => return Forecast::new("unknown", "unknown: the sweep settles a row so only by acting on it"),
    };
    let mut forecast = Forecast::new(verdict.label().as_str(), says);
    forecast.branch = match &verdict {
        Verdict::Run(plan) | Verdict::DeadClaim { plan, .. } => Some(plan.branch.to_string()),
        Verdict::AlreadyRan(branch) => Some(branch.to_string()),
        _ => None,
    };
    if known.queue.is_some_and(|q| !q.not_queued.is_empty()) {
        forecast.says += "; it has no message in the queue or its archive (is the queue's trigger installed and enabled?)";
    }
    let mut dead = (report.queue.iter()).flat_map(|q| &q.messages);
    if let Some(dead) = dead.find(|m| m.place == "dead_letter") {
        forecast.says += &format!(
            "; its message is a dead letter ({}): `rowbranch queue redrive --id {}` runs it through the consumer instead",
            dead.reason.as_deref().unwrap_or("no reason given"),
            dead.msg_id
        );
    }
    let window = config.reconcile.window;
    let in_window = row.created_at >= now - since(window);
    forecast.in_window = Some(in_window);
    if !in_window {
        let hours = (now - row.created_at).num_hours() + 1;
        forecast.says += &format!(
            "; but the row is older than reconcile_window ({}), so a sweep reads it only with `reconcile --since {hours}h`",
            duration(window)
        );
    }
    forecast
}

pub(super) fn since(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or_default()
}

/// A duration as the config writes one: `48h`, `90m`, `20s`.
fn duration(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
