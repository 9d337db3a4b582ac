//! The sweep: the table is the ground truth. Reads the rows created in a window, lists the
//! route's branches and pull requests once, and runs the pipeline for every row that has
//! neither; finds dead claims (a branch still at its base, no pull request, older than
//! `stale_claim_after`) and dispatches them again. Safe to run at any time, from anywhere:
//! every step is idempotent, and the claim is the lock.
//!
//! For a route that writes its rows' states back, it also lists the route's runs once and
//! writes the state each row's work shows where the row does not hold it yet: so a lost event
//! (a webhook from GitHub never sent, or rowbranch without the App) is repaired by the next
//! sweep, at three listings a route, never a request a row.

mod classify;

pub use classify::{Known, Verdict};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::stream::{self, StreamExt};
use serde::Serialize;

use crate::config::{Config, Intake, PgmqSettings, Route};
use crate::db::status::StatusWrite;
use crate::db::{self, queue, Database, Misfit, Row, Visibility};
use crate::forge::Listing;
use crate::identity::{BranchName, RowId};
use crate::metrics::{Metrics, SweepResult};
use crate::pipeline::{id_text, CompiledRoute, Outcome, Pipeline, Routes, Start, ALREADY_RAN};
use crate::reason::Reason;

/// How a sweep runs.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// How far back rows are read.
    pub window: Duration,
    pub stale_claim_after: Duration,
    /// Show what would be done; write nothing.
    pub dry_run: bool,
    /// Rows run through the pipeline at once (the forge paces its writes anyway).
    pub concurrency: usize,
    /// Rows read per page.
    pub page_size: usize,
    /// The queue the `pgmq` routes read: their rows still in it are left to the consumer.
    pub pgmq: PgmqSettings,
    /// A sweep nobody asked for row by row (`serve`'s, `drain --sweep`): it starts no work on
    /// a row created before its route's `sweep_from`, and sweeps no route without one. An
    /// operator's `reconcile` takes every row of its window.
    pub scheduled: bool,
    /// Write the rows' states back and nothing else: no row is run, no dead claim dispatched
    /// (a `drain` with a token, which has no App to hear GitHub's events). Routes that write
    /// nothing back are left alone.
    pub states_only: bool,
}

impl SweepOptions {
    /// The config's window and claims, writing, four rows at once, read by the thousand.
    pub fn of(config: &Config) -> SweepOptions {
        SweepOptions {
            window: config.reconcile.window,
            stale_claim_after: config.reconcile.stale_claim_after,
            dry_run: false,
            concurrency: 4,
            page_size: 1000,
            pgmq: config.pgmq.clone(),
            scheduled: false,
            states_only: false,
        }
    }
}

/// What a sweep did for one route.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RouteSummary {
    /// `schema.table → owner/name`.
    pub route: String,
    pub rows_seen: u64,
    pub already_handled: u64,
    pub merged_before: u64,
    pub dispatched_now: u64,
    pub dead_claims_redispatched: u64,
    pub failed: u64,
    /// The ids of the rows that failed, with why.
    pub failures: Vec<Failed>,
    /// With `--dry-run`: the ids that would be dispatched.
    pub would_dispatch: Vec<RowId>,
    /// The dead claims found (re-dispatched unless `--dry-run`).
    pub dead_claims: Vec<BranchName>,
    /// Claims at their base whose work already ran (a run of the work workflow names them):
    /// not dispatched again; `rowbranch redo` runs them on purpose.
    pub already_ran: Vec<BranchName>,
    /// A queue route's rows whose message is still in the queue: the consumer's.
    pub in_queue: u64,
    /// Rows a scheduled sweep left because they were created before the route's
    /// `sweep_from`: the table's past, which only an operator's `reconcile --since` runs.
    pub before_sweep_from: u64,
    /// A queue route's rows, newer than `archive_retention`, with no message in the queue or
    /// its archive: the trigger is missing or disabled, or the rows came another way (they are
    /// swept like any other).
    pub not_queued: Vec<String>,
    /// Why the route's sweep stopped early, if it did (a missing table, the forge down).
    pub error: Option<String>,
    /// When it stopped because the route does not fit its table: `missing_column`, the reason
    /// a webhook's answer and a dead letter give for the same mistake.
    pub reason: Option<&'static str>,
    /// When row level security lets the sweep see only some of the rows: which policies.
    pub warning: Option<String>,
    /// States written back into rows (`status_column`, `pull_request_column`) because the
    /// row's work showed one the row did not hold: sent to the writer, whose
    /// `rowbranch_status_writes_total` counts how each ended.
    pub states_written: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failed {
    pub id: String,
    pub error: String,
}

impl RouteSummary {
    /// Counts one row, here and in `rowbranch_reconcile_rows_total{route,verdict}`, and warns
    /// of a row whose branch has already run.
    fn count(&mut self, verdict: Verdict, metrics: &Metrics, table: &str) {
        metrics.reconcile_row(table, verdict.label());
        self.rows_seen += 1;
        match verdict {
            Verdict::Handled => self.already_handled += 1,
            Verdict::MergedBefore => self.merged_before += 1,
            Verdict::Run(plan) => self.would_dispatch.push(plan.id),
            Verdict::Dispatched => self.dispatched_now += 1,
            // A dead claim is a branch of a handled row, whatever became of it.
            Verdict::DeadClaim { plan, .. } | Verdict::Suspect { plan, .. } => {
                self.already_handled += 1;
                self.dead_claims.push(plan.branch);
            }
            Verdict::Redispatched(branch) => {
                self.already_handled += 1;
                self.dead_claims.push(branch);
                self.dead_claims_redispatched += 1;
            }
            Verdict::Failed(failed) => {
                self.failed += 1;
                self.failures.push(failed);
            }
            Verdict::InQueue => self.in_queue += 1,
            Verdict::BeforeSweepFrom => self.before_sweep_from += 1,
            Verdict::AlreadyRan(branch) => {
                tracing::warn!(route = %table, %branch, "{ALREADY_RAN}");
                self.already_handled += 1;
                self.already_ran.push(branch);
            }
        }
    }

    /// Why the sweep of `summaries` counts as failed, if it does.
    pub fn trouble(summaries: &[RouteSummary]) -> Option<String> {
        let failed: u64 = summaries.iter().map(|s| s.failed).sum();
        let stopped = summaries.iter().filter(|s| s.error.is_some()).count();
        (failed > 0 || stopped > 0)
            .then(|| format!("{failed} rows failed; {stopped} routes stopped early"))
    }
}

/// Sweeps every route. One route's trouble (a missing table, the forge down) is reported in
/// its summary and does not keep the others from being swept.
pub async fn run(
    routes: &Routes,
    rows: &Database,
    pipeline: &Arc<Pipeline>,
    options: &SweepOptions,
    progress: &(dyn Fn(&RouteSummary) + Sync),
) -> Vec<RouteSummary> {
    let mut summaries = Vec::new();
    for route in routes.iter() {
        if options.states_only && !route.route.writes_back() {
            continue;
        }
        let mut summary = RouteSummary {
            route: format!("{} → {}", route.route.table_name(), route.route.repo),
            ..RouteSummary::default()
        };
        if options.scheduled && route.route.sweep_from.is_none() {
            summary.warning = Some(NO_SWEEP_FROM.to_owned());
            summaries.push(summary);
            continue;
        }
        let swept = sweep_route(route, rows, pipeline, options, progress, &mut summary).await;
        if let Err(e) = &swept {
            summary.error = Some(format!("{e:#}"));
            // A route that does not fit its table: the adapter's one error says so.
            let misfit = |cause: &(dyn std::error::Error + 'static)| {
                let table = cause.downcast_ref();
                matches!(table, Some(db::Error::Table(Misfit::MissingColumn(_))))
            };
            summary.reason = (e.chain().any(misfit)).then(|| Reason::MissingColumn.as_str());
        }
        // A scheduled sweep's rows left for being older than `sweep_from`.
        if summary.before_sweep_from > 0 {
            tracing::info!(
                route = %summary.route,
                rows = summary.before_sweep_from,
                "the sweep left {} rows created before sweep_from; `rowbranch reconcile --since` \
                 runs the table's past on purpose",
                summary.before_sweep_from
            );
        }
        if !options.states_only {
            pipeline.metrics().reconcile_run(if swept.is_ok() {
                SweepResult::Ok
            } else {
                SweepResult::Failed
            });
        }
        summaries.push(summary);
    }
    summaries
}

async fn sweep_route(
    compiled: &CompiledRoute,
    rows: &Database,
    pipeline: &Arc<Pipeline>,
    options: &SweepOptions,
    progress: &(dyn Fn(&RouteSummary) + Sync),
    summary: &mut RouteSummary,
) -> anyhow::Result<()> {
    let route = &compiled.route;
    let forge = pipeline.forge();
    rows.check_columns(route, true).await?;
    // A role that row level security hides the rows from reads none, without an error: that
    // would pass for an empty table.
    match rows.visibility(route).await? {
        Visibility::Blind(blind) => return Err(blind.into()),
        Visibility::Filtered(filtered) => {
            tracing::warn!(route = %route.table_name(), warning = %filtered,
                "row level security hides some rows from the sweep");
            summary.warning = Some(filtered.to_string());
        }
        Visibility::Off | Visibility::Every(_) => {}
    }
    let now = chrono::Utc::now();
    let since = now - chrono::Duration::from_std(options.window).context("window too long")?;
    let stale_before = now
        - chrono::Duration::from_std(options.stale_claim_after)
            .context("stale_claim_after too long")?;
    let (repo, prefix) = (&route.repo, &route.branch_prefix);
    // A gated route's scheduled sweep also takes, at any age, the rows that pass and have not
    // started (an approval whose delivery was lost): those created from a `sweep_from` before
    // the window whose state says they never started (NULL, `waiting`, or a value rowbranch
    // does not know). Read first, so that the listings reach back to the oldest of them.
    // Without a status column nothing tells such a row from one long finished, and the window
    // alone is read.
    let wanted = options.scheduled && !options.states_only && route.run_when.is_some();
    let from = route.sweep_from.filter(|from| wanted && *from < since);
    let mut older = (from.zip(route.status_column.as_deref()))
        .map(|(from, status)| rows.unstarted(route, status, from, since, options.page_size));
    let mut held = match &mut older {
        Some(pages) => pages.next_page().await?,
        None => Vec::new(),
    };
    let listed_since = held.first().map_or(since, |row| row.created_at.min(since));
    let branches = forge
        .prefix_branches(repo, prefix)
        .await
        .context("listing branches")?;
    // The runs before the pull requests: a run seen completed had opened its pull request
    // (if any) before the pull requests were listed, so it is never taken for a failure.
    // Every route's: the dead-claim rule reads them too. Without the permission to read them
    // (Actions: read) the sweep goes on, writing no `failed`, and says so.
    let listed = forge.workflow_runs(repo, prefix, listed_since).await;
    let listed = match listed.context("listing workflow runs")? {
        Listing::Found(runs) => runs,
        Listing::NotKept => Vec::new(),
        Listing::NotPermitted { needs } => {
            let warning = format!(
                "GitHub does not let rowbranch list workflow runs (it needs {needs}): a claim \
                 whose work ran and pushed nothing is taken for a dead claim and dispatched again, \
                 and no row is marked failed; grant it (the App's Actions: read, or the job's \
                 `actions: read`)"
            );
            tracing::warn!(route = %route.table_name(), "{warning}");
            summary.warning.get_or_insert(warning);
            Vec::new()
        }
    };
    let pulls = forge.pull_requests(repo, prefix, listed_since).await;
    let pulls = match pulls.context("listing pull requests")? {
        Listing::Found(pulls) => pulls,
        Listing::NotKept => Vec::new(),
        Listing::NotPermitted { needs } => anyhow::bail!(
            "listing pull requests: GitHub does not let rowbranch list pull requests: it needs {needs}"
        ),
    };
    let queue = match route.intake {
        Intake::Pgmq { .. } if !options.states_only => {
            let pgmq = &options.pgmq;
            let ids = queue::message_ids(rows.client(), &pgmq.queue, route, since)
                .await
                .with_context(|| format!("reading the queue {} and its archive", pgmq.queue))?;
            Some(QueueView::new(ids, pgmq)?)
        }
        _ => None,
    };
    let mut known = Known::new(prefix, branches, pulls, &listed, queue, stale_before);
    drop(listed);
    let from = route.sweep_from.filter(|_| options.scheduled);
    // The older rows first, then the window's; a pager done answers empty pages.
    let mut newer = rows.since(route, since, options.page_size);
    loop {
        let mut page = std::mem::take(&mut held);
        if let (true, Some(older)) = (page.is_empty(), &mut older) {
            page = older.next_page().await?;
        }
        if page.is_empty() {
            page = newer.next_page().await?;
        }
        if page.is_empty() {
            if let Some(queue) = known.queue.filter(|q| !q.not_queued.is_empty()) {
                tracing::warn!(route = %route.table_name(), rows = queue.not_queued.len(),
                    "rows with no message in the queue or its archive: is the queue's trigger installed and enabled?");
                summary.not_queued = queue.not_queued;
            }
            return Ok(());
        }
        if !options.dry_run {
            let written = page
                .iter()
                .filter_map(|row| write_shown(pipeline, &known, route, row));
            summary.states_written += written.count() as u64;
        }
        if options.states_only {
            summary.rows_seen += page.len() as u64;
            progress(summary);
            continue;
        }
        let (table, metrics) = (route.table_name(), pipeline.metrics());
        // With `--dry-run` a verdict is counted as it stands: a run is a row that would be
        // dispatched, a dead claim one that would be dispatched again.
        let mut to_run = Vec::new();
        for row in page {
            let created = row.created_at;
            match known.decide(forge.as_ref(), compiled, row).await? {
                // The table's past: nobody asked for these rows to run. Claims already made
                // (dead claims) are rowbranch's own and go on as before.
                Verdict::Run(_) if from.is_some_and(|from| created < from) => {
                    summary.count(Verdict::BeforeSweepFrom, metrics, &table)
                }
                Verdict::Run(plan) if !options.dry_run => to_run.push((plan, Start::New)),
                Verdict::DeadClaim { plan, claimed } if !options.dry_run => {
                    to_run.push((plan, Start::Redispatch(claimed)))
                }
                verdict => summary.count(verdict, metrics, &table),
            }
        }
        // A row waits for room in the pipeline rather than fail for want of it: the sweep is
        // what brings back the rows a full pipeline refused, and it has no sender to ask to
        // come back.
        let ran = stream::iter(to_run).map(|(plan, start)| async move {
            let (id, branch) = (plan.id.to_string(), plan.branch.clone());
            let again = matches!(start, Start::Redispatch(_));
            let run = pipeline.submit_waiting(plan, start).await;
            match run.outcome().await {
                Ok(_) if again => Verdict::Redispatched(branch),
                Ok(Outcome::Dispatched { .. }) => Verdict::Dispatched,
                // Handled meanwhile (a webhook, another sweep): counted as handled.
                Ok(Outcome::Duplicate { .. }) => Verdict::Handled,
                Err(e) => Verdict::failed(id, e),
            }
        });
        let mut ran = ran.buffer_unordered(options.concurrency.max(1));
        while let Some(verdict) = ran.next().await {
            summary.count(verdict, metrics, &table);
        }
        progress(summary);
    }
}

/// Writes back the state `known` shows for `row`, when the row does not hold it already and
/// would take it (the writer's rule, [`StatusWrite::changes`]); `Some` when it sent a write.
fn write_shown(pipeline: &Pipeline, known: &Known, route: &Arc<Route>, row: &Row) -> Option<()> {
    let raw = row.record.get(&route.id_column);
    let raw = raw.filter(|_| route.writes_back())?;
    let (id, id_text) = (RowId::parse(raw).ok()?, id_text(raw)?);
    let (state, pull_request) = known.shown(&id)?;
    let write = StatusWrite {
        route: Arc::clone(route),
        id: id_text,
        state,
        pull_request,
        anew: false,
        // GitHub's pull request as it is now: open after closed is a reopening.
        reopens: true,
    };
    let held = |column: &Option<String>| row.record.get(column.as_ref()?)?.as_str();
    let changes = write.changes(held(&route.status_column), held(&route.pull_request_column));
    changes.then(|| pipeline.write_state(write))
}

/// How long before the queue was read a row may have been created and still have committed
/// after it (`created_at` is the INSERT's time, its message appears at its commit): such a row
/// with no message seen is left to the consumer, not run or reported as never queued.
const UNSEEN_MARGIN: chrono::Duration = chrono::Duration::seconds(60);

/// What the queue knows of a `pgmq` route's rows, loaded once per sweep: the ids whose message
/// is still in the queue (visible or held), and those archived since the window's start with
/// when. One statement reads both, so a message moving from the queue to the archive meanwhile
/// is seen in one of them. The archive lookup is one range scan of its `archived_at` index
/// (pgmq creates it), reading the id out of each archived message's jsonb: on a large archive
/// a scan of the window's messages, not a lookup per row.
#[derive(Debug)]
pub struct QueueView {
    queued: HashSet<String>,
    archived: HashMap<String, chrono::DateTime<chrono::Utc>>,
    /// Rows created since then are expected to have a message (queued or archived).
    expected_since: chrono::DateTime<chrono::Utc>,
    /// Rows created since then may have committed after the queue was read: their message is
    /// in the queue now, unseen by this view, so they are left to the consumer.
    unseen_since: chrono::DateTime<chrono::Utc>,
    /// The ids of the rows expected to have a message that have none.
    pub not_queued: Vec<String>,
}

impl QueueView {
    /// From the ids with a message, each with whether one is still in the queue and when the
    /// last was archived, read just now.
    pub fn new(
        ids: Vec<(String, bool, Option<chrono::DateTime<chrono::Utc>>)>,
        pgmq: &PgmqSettings,
    ) -> anyhow::Result<QueueView> {
        let loaded_at = chrono::Utc::now();
        let retention = chrono::Duration::from_std(pgmq.archive_retention)
            .context("archive_retention too long")?;
        Ok(QueueView {
            queued: ids.iter().filter(|m| m.1).map(|m| m.0.clone()).collect(),
            archived: ids
                .into_iter()
                .filter_map(|(id, _, at)| Some((id, at?)))
                .collect(),
            expected_since: loaded_at - retention,
            unseen_since: loaded_at - UNSEEN_MARGIN,
            not_queued: Vec::new(),
        })
    }

    /// Whether the row's message is in the queue (or may be, unseen): the consumer's. An
    /// archived row's age counts from its message's archive (when its work started), so that a
    /// backlog in the queue never looks like dead claims.
    fn in_queue(&mut self, route: &Route, row: &mut Row) -> bool {
        let Some(id) = row.record.get(&route.id_column).and_then(id_text) else {
            return false;
        };
        if let Some(archived_at) = self.archived.get(&id) {
            row.created_at = row.created_at.max(*archived_at);
            return self.queued.contains(&id);
        }
        if self.queued.contains(&id) || row.created_at >= self.unseen_since {
            return true;
        }
        if row.created_at >= self.expected_since {
            self.not_queued.push(id);
        }
        false
    }
}

/// How long after start the first scheduled sweep runs.
const FIRST_SWEEP_AFTER: Duration = Duration::from_secs(10);
/// Rows the scheduled sweep reads at once: a page is held whole, rows and plans, beside what
/// `serve` holds already (with rows of 48 KiB, about 5 MB of text, twice over while decoded).
/// `rowbranch reconcile`, a process of its own, reads 1,000.
const SWEEP_PAGE_ROWS: usize = 100;

/// What a scheduled sweep's summary says of a route it left alone.
const NO_SWEEP_FROM: &str = "no sweep_from: the scheduled sweep leaves the route alone";

/// Says, at the start of a scheduled sweep, which routes it leaves alone for want of a
/// `sweep_from`, with the line that gives each one: from now on. A guessed start would either
/// run the table's whole past or forget the rows inserted while rowbranch was down.
pub fn say_unstarted(routes: &Routes) {
    for route in (routes.iter().map(|r| &r.route)).filter(|r| r.sweep_from.is_none()) {
        tracing::warn!(
            route = %route.table_name(),
            "no scheduled sweep for {}: the route has no sweep_from. Add to its [[routes]]: \
             sweep_from = \"{}\" (or set ROWBRANCH_SWEEP_FROM for a route from the \
             environment); rows created before it are never swept, `rowbranch reconcile \
             --since` runs those",
            route.table_name(),
            crate::config::sweep_from_now()
        );
    }
}

/// The sweep `serve` runs every `reconcile_every`, one run at a time, sharing the server's
/// pipeline so that a sweep and a webhook of the same row share one run.
pub async fn every(config: Arc<Config>, routes: Arc<Routes>, pipeline: Arc<Pipeline>) {
    let (Some(every), Some(url)) = (config.reconcile.every, config.database_url.clone()) else {
        return;
    };
    say_unstarted(&routes);
    if routes.iter().all(|r| r.route.sweep_from.is_none()) {
        return;
    }
    let options = SweepOptions {
        page_size: SWEEP_PAGE_ROWS,
        scheduled: true,
        ..SweepOptions::of(&config)
    };
    // The first sweep comes shortly after start, then one every interval; a sweep that runs
    // long delays the next rather than overlapping it.
    let mut next = tokio::time::Instant::now() + FIRST_SWEEP_AFTER;
    loop {
        tokio::time::sleep_until(next).await;
        next = tokio::time::Instant::now() + every;
        let summaries = match Database::connect(url.expose()).await {
            Ok(rows) => run(&routes, &rows, &pipeline, &options, &|_| {}).await,
            Err(e) => {
                tracing::error!(error = e.to_string(), "the scheduled sweep failed");
                continue;
            }
        };
        for s in summaries {
            if let Some(error) = &s.error {
                tracing::error!(route = %s.route, %error, "the scheduled sweep stopped early");
            }
            if s.warning.as_deref() == Some(NO_SWEEP_FROM) {
                continue;
            }
            tracing::info!(route = %s.route, rows = s.rows_seen, handled = s.already_handled,
                merged = s.merged_before, dispatched = s.dispatched_now,
                dead_claims = s.dead_claims_redispatched, failed = s.failed,
                before_sweep_from = s.before_sweep_from, states_written = s.states_written,
                "scheduled sweep");
            for f in s.failures {
                tracing::error!(id = %f.id, error = %f.error, "the sweep could not finish a row");
            }
        }
    }
}

/// The summary as a table, for a terminal.
pub fn table(summaries: &[RouteSummary], dry_run: bool) -> String {
    let (runs_column, dead_line) = match dry_run {
        true => ("would run", "dead claims would re-dispatch"),
        false => ("dispatched", "dead claims re-dispatched"),
    };
    let mut out = format!(
        "{:<36} {:>8} {:>8} {:>8} {:>10} {:>11} {:>7}\n",
        "route", "rows", "handled", "merged", runs_column, "dead claims", "failed"
    );
    for s in summaries {
        // Only a dry run would dispatch, and only a real one dispatches; a dead claim whose
        // dispatch failed is counted failed, not listed.
        let runs = s.dispatched_now + s.would_dispatch.len() as u64;
        let dead = s.dead_claims.len();
        out += &format!(
            "{:<36} {:>8} {:>8} {:>8} {:>10} {:>11} {:>7}\n",
            s.route, s.rows_seen, s.already_handled, s.merged_before, runs, dead, s.failed
        );
        match (&s.error, s.reason) {
            (Some(error), Some(reason)) => out += &format!("  refused ({reason}): {error}\n"),
            (Some(error), None) => out += &format!("  error: {error}\n"),
            (None, _) => {}
        }
        if let Some(warning) = &s.warning {
            out += &format!("  warning: {warning}\n");
        }
        for f in &s.failures {
            out += &format!("  failed: row {}: {}\n", f.id, f.error);
        }
        let count = |n: u64| if n > 0 { n.to_string() } else { String::new() };
        // The lines under the route, each where it has something to say.
        let lines = [
            ("would dispatch", joined(&s.would_dispatch)),
            (dead_line, joined(&s.dead_claims)),
            (
                "claimed, their work ran and pushed nothing, not dispatched again (`rowbranch redo` runs one on purpose)",
                joined(&s.already_ran),
            ),
            ("still in the queue (the consumer's)", count(s.in_queue)),
            ("states written back", count(s.states_written)),
            (
                "no message in the queue or its archive (is the queue's trigger installed and enabled?)",
                joined(&s.not_queued),
            ),
        ];
        for (what, said) in lines.iter().filter(|(_, said)| !said.is_empty()) {
            out += &format!("  {what}: {said}\n");
        }
    }
    out
}

/// How many ids a line of the summary table names; `--json` has them all.
const SHOWN: usize = 10;

/// Names or ids, `, `-separated: the first [`SHOWN`] and how many more, so that a sweep of
/// 20,000 rows prints a line, not a page.
fn joined(items: &[impl std::fmt::Display]) -> String {
    let shown: Vec<String> = items.iter().take(SHOWN).map(ToString::to_string).collect();
    match items.len().saturating_sub(SHOWN) {
        0 => shown.join(", "),
        more => format!(
            "{} and {more} more (all of them with --json)",
            shown.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{joined, table, RouteSummary};
    use crate::identity::{BranchName, BranchPrefix, RowId};

    #[test]
    fn the_table_says_under_a_route_only_what_it_has() {
        let prefix = BranchPrefix::parse("feedback").unwrap();
        let branch = |name: &str| BranchName::listed(&prefix, name).unwrap();
        let summary = RouteSummary {
            route: "public.feedbacks → acme/app".into(),
            rows_seen: 5,
            would_dispatch: vec![
                RowId::parse(&json!(1)).unwrap(),
                RowId::parse(&json!(2)).unwrap(),
            ],
            dead_claims: vec![branch("feedback/3-x")],
            already_ran: vec![branch("feedback/4-x")],
            in_queue: 3,
            not_queued: vec!["9".into()],
            ..RouteSummary::default()
        };
        let lines: Vec<String> = table(std::slice::from_ref(&summary), true)
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            lines[2..],
            [
                "  would dispatch: 1, 2",
                "  dead claims would re-dispatch: feedback/3-x",
                "  claimed, their work ran and pushed nothing, not dispatched again (`rowbranch redo` runs one on purpose): feedback/4-x",
                "  still in the queue (the consumer's): 3",
                "  no message in the queue or its archive (is the queue's trigger installed and enabled?): 9",
            ]
        );
        let done = RouteSummary {
            would_dispatch: Vec::new(),
            in_queue: 0,
            states_written: 2,
            ..summary
        };
        let columns = |runs: &str| {
            format!(
                "{:<36} {:>8} {:>8} {:>8} {:>10} {:>11} {:>7}",
                "route", "rows", "handled", "merged", runs, "dead claims", "failed"
            )
        };
        assert_eq!(lines[0], columns("would run"));
        let text = table(&[done], false);
        assert!(text.starts_with(&(columns("dispatched") + "\n")), "{text}");
        assert!(
            text.contains("\n  dead claims re-dispatched: feedback/3-x\n"),
            "{text}"
        );
        assert!(text.contains("\n  states written back: 2\n"), "{text}");
        assert!(
            !text.contains("would dispatch") && !text.contains("still in"),
            "{text}"
        );
    }

    #[test]
    fn a_summary_line_names_ten_ids_and_counts_the_rest() {
        let few: Vec<u32> = (1..=10).collect();
        assert_eq!(joined(&few), "1, 2, 3, 4, 5, 6, 7, 8, 9, 10");
        let many: Vec<u32> = (1..=20_000).collect();
        assert_eq!(
            joined(&many),
            "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 19990 more (all of them with --json)"
        );
        assert_eq!(joined(&Vec::<u32>::new()), "");
    }
}
