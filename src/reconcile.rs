//! The sweep: the table is the ground truth. Reads the rows created in a window, lists the
//! route's branches and pull requests once, and runs the pipeline for every row that has
//! neither; finds dead claims (a branch still at its base, no pull request, older than
//! `stale_claim_after`) and dispatches them again. Safe to run at any time, from anywhere:
//! every step is idempotent, and the claim is the lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use serde_json::Value;

use crate::config::{Config, Route};
use crate::forge::Base;
use crate::identity::{BranchName, RowId};
use crate::pipeline::{plan_row, Outcome, Pipeline, Plan};
use crate::rows::Rows;

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
    pub would_dispatch: Vec<String>,
    /// The dead claims found (re-dispatched unless `--dry-run`).
    pub dead_claims: Vec<String>,
    /// Why the route's sweep stopped early, if it did (a missing table, the forge down).
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failed {
    pub id: String,
    pub error: String,
}

/// Counts so far, for a progress line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub rows_read: u64,
    pub dispatched: u64,
    pub skipped: u64,
}

/// Sweeps every route of `config`.
pub async fn sweep(
    config: &Config,
    rows: &Rows,
    pipeline: &Arc<Pipeline>,
    options: &SweepOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<Vec<RouteSummary>> {
    let mut summaries = Vec::new();
    // One route's trouble does not keep the others from being swept.
    for route in &config.routes {
        let mut summary = RouteSummary {
            route: format!("{}.{} → {}", route.schema, route.table, route.repo),
            ..RouteSummary::default()
        };
        if let Err(e) = sweep_route(route, rows, pipeline, options, progress, &mut summary).await {
            summary.error = Some(format!("{e:#}"));
        }
        summaries.push(summary);
    }
    Ok(summaries)
}

/// What the forge already has for a route: branch tails (after `{prefix}/`) and pull request
/// heads, matched by id prefix as SPEC §4 says.
struct Known {
    branches: BTreeMap<String, (String, String)>,
    pulls: BTreeSet<String>,
}

impl Known {
    /// The first entry of `keys` that belongs to `id`: `{id}` or `{id}-…`, never `{id}0…`.
    fn owner<'a, I>(keys: I, id: &str) -> Option<&'a String>
    where
        I: Iterator<Item = &'a String>,
    {
        keys.take_while(|k| k.starts_with(id))
            .find(|k| k.len() == id.len() || k[id.len()..].starts_with('-'))
    }

    /// Every branch of row `id`, as (name, sha).
    fn branches(&self, id: &RowId) -> Vec<&(String, String)> {
        let id = id.as_str();
        self.branches
            .range(id.to_owned()..)
            .take_while(|(k, _)| k.starts_with(id))
            .filter(|(k, _)| k.len() == id.len() || k[id.len()..].starts_with('-'))
            .map(|(_, branch)| branch)
            .collect()
    }

    fn pull(&self, id: &RowId) -> bool {
        let id = id.as_str();
        Self::owner(self.pulls.range(id.to_owned()..), id).is_some()
    }
}

async fn sweep_route(
    route: &Arc<Route>,
    rows: &Rows,
    pipeline: &Arc<Pipeline>,
    options: &SweepOptions,
    progress: &(dyn Fn(Progress) + Sync),
    summary: &mut RouteSummary,
) -> anyhow::Result<()> {
    let forge = pipeline.forge();
    let repo = &route.repo;
    let prefix = format!("{}/", route.branch_prefix);
    rows.check(route).await?;
    let now = chrono::Utc::now();
    let since = now - chrono::Duration::from_std(options.window).context("window too long")?;
    let stale_before = now
        - chrono::Duration::from_std(options.stale_claim_after)
            .context("stale_claim_after too long")?;
    let tail = |name: &str| name.strip_prefix(&prefix).map(str::to_owned);
    let known = Known {
        branches: forge
            .prefix_branches(repo, &route.branch_prefix)
            .await
            .context("listing branches")?
            .into_iter()
            .filter_map(|(name, sha)| Some((tail(&name)?, (name, sha))))
            .collect(),
        pulls: forge
            .pull_request_heads(repo, since)
            .await
            .context("listing pull requests")?
            .iter()
            .filter_map(|head| tail(head))
            .collect(),
    };
    let mut base: Option<Base> = None;
    let mut counts = Progress::default();
    let mut pages = rows.since(route, since, options.page_size);
    loop {
        let page = pages.next_page().await?;
        if page.is_empty() {
            break;
        }
        let mut to_run = Vec::new();
        for row in page {
            summary.rows_seen += 1;
            counts.rows_read += 1;
            let raw_id = row
                .record
                .get(&route.id_column)
                .cloned()
                .unwrap_or(Value::Null);
            let plan = match plan_row(route, row.record) {
                Ok(plan) => plan,
                Err(e) => {
                    summary.failed += 1;
                    summary.failures.push(Failed {
                        id: raw_id.to_string(),
                        error: e.to_string(),
                    });
                    continue;
                }
            };
            let owned = known.branches(&plan.id);
            if let Some((name, sha)) = owned.first().copied() {
                summary.already_handled += 1;
                counts.skipped += 1;
                // A row with several branches was redone on purpose: none of them is a lost
                // claim. One branch, no pull request, old enough: look closer.
                if owned.len() == 1 && !known.pull(&plan.id) && row.created_at < stale_before {
                    if base.is_none() {
                        base = Some(
                            forge
                                .base(repo)
                                .await
                                .context("reading the default branch")?,
                        );
                    }
                    let base = base.as_ref().expect("just read");
                    let ahead = match forge.ahead_by(repo, &base.branch, name).await {
                        Ok(ahead) => ahead,
                        // Deleted since the listing, or the forge stumbled: this row only.
                        Err(e) => {
                            summary.failed += 1;
                            summary.failures.push(Failed {
                                id: plan.id.to_string(),
                                error: format!("comparing {name} with {}: {e}", base.branch),
                            });
                            continue;
                        }
                    };
                    if ahead == 0 {
                        summary.dead_claims.push(name.clone());
                        if !options.dry_run {
                            match redispatch(pipeline, plan, name, sha, base).await {
                                Ok(()) => summary.dead_claims_redispatched += 1,
                                Err((id, error)) => {
                                    summary.failed += 1;
                                    summary.failures.push(Failed { id, error });
                                }
                            }
                        }
                    }
                }
            } else if known.pull(&plan.id) {
                summary.merged_before += 1;
                counts.skipped += 1;
            } else {
                to_run.push(plan);
            }
        }
        if options.dry_run {
            summary
                .would_dispatch
                .extend(to_run.iter().map(|p| p.id.to_string()));
        } else {
            let results: Vec<_> = stream::iter(to_run)
                .map(|plan| {
                    let id = plan.id.to_string();
                    let run = pipeline.submit(plan);
                    async move { (id, run.outcome().await) }
                })
                .buffer_unordered(options.concurrency.max(1))
                .collect()
                .await;
            for (id, result) in results {
                match result {
                    Ok(Outcome::Dispatched { .. }) => {
                        summary.dispatched_now += 1;
                        counts.dispatched += 1;
                    }
                    // Handled meanwhile (a webhook, another sweep): counted as handled.
                    Ok(Outcome::Duplicate { .. }) => {
                        summary.already_handled += 1;
                        counts.skipped += 1;
                    }
                    Err(e) => {
                        summary.failed += 1;
                        summary.failures.push(Failed {
                            id,
                            error: e.to_string(),
                        });
                    }
                }
            }
        }
        progress(counts);
    }
    Ok(())
}

/// Dispatches a dead claim again, on the branch it already has.
async fn redispatch(
    pipeline: &Arc<Pipeline>,
    plan: Plan,
    name: &str,
    sha: &str,
    base: &Base,
) -> Result<(), (String, String)> {
    let id = plan.id.to_string();
    let fail = |e: String| (id.clone(), e);
    let branch = BranchName::existing(&plan.route.branch_prefix, &plan.id, name)
        .ok_or_else(|| fail(format!("{name} does not belong to row {id}")))?;
    let plan = Plan { branch, ..plan };
    let claimed_at = Base {
        branch: base.branch.clone(),
        sha: sha.to_owned(),
    };
    let payload = plan
        .client_payload(&claimed_at)
        .map_err(|e| fail(e.to_string()))?;
    pipeline
        .forge()
        .dispatch(
            &plan.route.repo,
            &plan.route.event_type,
            &Value::Object(payload),
        )
        .await
        .map_err(|e| fail(e.to_string()))?;
    tracing::info!(id = %plan.id, branch = %plan.branch, "re-dispatched a dead claim");
    Ok(())
}

/// The summary as a table, for a terminal.
pub fn table(summaries: &[RouteSummary], dry_run: bool) -> String {
    let mut out = format!(
        "{:<36} {:>8} {:>8} {:>8} {:>10} {:>11} {:>7}\n",
        "route",
        "rows",
        "handled",
        "merged",
        if dry_run { "would run" } else { "dispatched" },
        "dead claims",
        "failed"
    );
    for s in summaries {
        let runs = if dry_run {
            s.would_dispatch.len() as u64
        } else {
            s.dispatched_now
        };
        let dead = if dry_run {
            s.dead_claims.len() as u64
        } else {
            s.dead_claims_redispatched
        };
        out += &format!(
            "{:<36} {:>8} {:>8} {:>8} {:>10} {:>11} {:>7}\n",
            s.route, s.rows_seen, s.already_handled, s.merged_before, runs, dead, s.failed
        );
        if let Some(error) = &s.error {
            out += &format!("  error: {error}\n");
        }
        for f in &s.failures {
            out += &format!("  failed: row {}: {}\n", f.id, f.error);
        }
        if dry_run && !s.would_dispatch.is_empty() {
            out += &format!("  would dispatch: {}\n", s.would_dispatch.join(", "));
        }
        if !s.dead_claims.is_empty() {
            let verb = if dry_run {
                "would re-dispatch"
            } else {
                "re-dispatched"
            };
            out += &format!("  dead claims {verb}: {}\n", s.dead_claims.join(", "));
        }
    }
    out
}
