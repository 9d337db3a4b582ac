//! What `reconcile` and `redo` would do with the row now, by their own rules: reconcile's
//! `classify` after the queue's, and redo's `free_branch`. Pure: made from what was read.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::plural;
use super::report::{Forecast, Report};
use crate::cmd::redo::free_branch;
use crate::config::{Config, Route};
use crate::db::Row;
use crate::forge::{Branch, Sha};
use crate::identity::BranchName;
use crate::pipeline::CompiledRoute;
use crate::sweep::{self, classify, Known, Verdict};

/// What the forecasts are made from: the report's sources, read.
pub(super) struct Facts<'a> {
    pub(super) config: &'a Config,
    pub(super) compiled: &'a CompiledRoute,
    pub(super) report: &'a Report,
    pub(super) now: DateTime<Utc>,
}

impl Facts<'_> {
    fn route(&self) -> &Route {
        &self.compiled.route
    }

    /// The row, or the forecast for want of it.
    fn row(&self, command: &str) -> Result<Row, Forecast> {
        if let Some(row) = self.report.row.row() {
            return Ok(row);
        }
        let (verdict, says) = match (self.report.row.status, command) {
            ("not_read", _) => (
                "unknown",
                "unknown: it reads the row from DATABASE_URL, which is not set",
            ),
            ("missing", "redo") => (
                "cannot",
                "cannot: it reads the row from the table, which has no such row",
            ),
            ("missing", _) => (
                "no_row",
                "nothing: the sweep reads the table's rows, and it has no such row",
            ),
            _ => ("unknown", "unknown: the database could not be read"),
        };
        Err(Forecast::new(verdict, says))
    }

    /// Whether the forge told what the commands read there, or the forecast for want of it.
    fn forge_read(&self) -> Result<(), Forecast> {
        match self.report.forge.status {
            "ok" => Ok(()),
            _ => Err(Forecast::new(
                "unknown",
                "unknown: the forge could not be read",
            )),
        }
    }

    /// `redo`: its branch if free, else the next free `{branch}-redo-N`.
    pub(super) fn redo(&self) -> Forecast {
        let plan = match (self.row("redo"), &self.report.identity.plan) {
            (Err(forecast), _) => return forecast,
            (Ok(_), None) => return Forecast::new("cannot", "cannot: the row's id is not usable"),
            (Ok(_), Some(plan)) => plan,
        };
        if let Err(forecast) = self.forge_read() {
            return forecast;
        }
        let prefix = &self.route().branch_prefix;
        let taken: Vec<BranchName> = self
            .report
            .forge
            .branches
            .iter()
            .filter_map(|b| BranchName::existing(prefix, &plan.id, &b.name))
            .collect();
        let branch = free_branch(&plan.branch, &taken);
        let why = match branch == plan.branch {
            true => String::new(),
            false => format!(" ({} is taken)", plan.branch),
        };
        let says = format!(
            "claim {branch} and dispatch `{}`{why}; redo asks first unless given --yes",
            self.route().event_type
        );
        Forecast::new("would_dispatch", says).on(branch)
    }

    /// `reconcile`, by the sweep's own rules: the queue first for a queue route, then
    /// `classify` on the row's branches and pull requests, and a compare for a suspect.
    pub(super) fn reconcile(&self) -> Forecast {
        let row = match self
            .row("reconcile")
            .and_then(|row| self.forge_read().map(|()| row))
        {
            Ok(row) => row,
            Err(forecast) => return forecast,
        };
        let pulls = &self.report.forge.pull_requests;
        if !matches!(pulls.status, "ok" | "not_kept") {
            return Forecast::new(
                "unknown",
                format!(
                    "unknown: the sweep lists pull requests, and here they are {}",
                    pulls.detail.as_deref().unwrap_or("not read")
                ),
            );
        }
        let window = self.config.reconcile.window;
        let in_window = row.created_at >= self.now - since(window);
        let hours = (self.now - row.created_at).num_hours() + 1;
        let mut forecast = self.sweep(row);
        forecast.in_window = Some(in_window);
        if !in_window {
            forecast.says += &format!(
                "; but the row is older than reconcile_window ({}), so a sweep reads it only with `reconcile --since {hours}h`",
                duration(window)
            );
        }
        forecast
    }

    fn sweep(&self, mut row: Row) -> Forecast {
        let route = self.route();
        let mut note = String::new();
        if let Some(queue) = &self.report.queue {
            let placed = |place| queue.messages.iter().filter(move |m| m.place == place);
            if queue.status != "ok" {
                return Forecast::new("unknown", "unknown: the queue could not be read");
            }
            if let Some(held) = placed("queue").next() {
                return Forecast::new(
                    "in_queue",
                    format!(
                        "nothing: its message {} is still in the queue, which is the consumer's",
                        held.msg_id
                    ),
                );
            }
            match placed("archive").filter_map(|m| m.archived_at).max() {
                // Its work started when its message was archived, not when it was created.
                Some(at) => row.created_at = row.created_at.max(at),
                None if row.created_at >= self.now - sweep::UNSEEN_MARGIN => {
                    return Forecast::new(
                        "in_queue",
                        "nothing yet: the row is less than a minute old and its message may not be committed yet; the next sweep decides",
                    )
                }
                None => {
                    note = "; it has no message in the queue or its archive (is the queue's trigger installed and enabled?)".to_owned();
                }
            }
            if let Some(dead) = placed("dead_letter").next() {
                note += &format!(
                    "; its message is a dead letter ({}): `rowbranch queue redrive --id {}` runs it through the consumer instead",
                    dead.reason.as_deref().unwrap_or("no reason given"),
                    dead.msg_id
                );
            }
        }
        let prefix = &route.branch_prefix;
        let branches = self.report.forge.branches.iter().filter_map(|b| {
            Some(Branch {
                name: BranchName::listed(prefix, &b.name)?,
                sha: Sha::new(b.sha.clone()),
            })
        });
        let pulls = &self.report.forge.pull_requests.items;
        let heads = pulls
            .iter()
            .filter_map(|p| BranchName::listed(prefix, &p.head));
        let known = Known::new(prefix, branches.collect(), heads.collect());
        let stale_after = self.config.reconcile.stale_claim_after;
        let stale_before = self.now - since(stale_after);
        let base = self
            .report
            .forge
            .base
            .as_ref()
            .map_or("its base", |b| b.branch.as_str());
        let ahead = |n: u64| {
            format!(
                "nothing: its branch is {n} commit{} ahead of {base}",
                plural(n)
            )
        };
        let mut forecast = match classify(&known, self.compiled, row.clone(), stale_before) {
            Verdict::Handled if !pulls.is_empty() => {
                Forecast::new("handled", "nothing: a pull request came from a branch of the row")
            }
            Verdict::Handled => Forecast::new(
                "handled",
                match self.report.forge.branches.as_slice() {
                    [only] if row.created_at >= stale_before && only.ahead_by == Some(0) => format!(
                        "nothing yet: its branch is at its base, but the row is younger than stale_claim_after ({}); a later sweep dispatches again if it stays there",
                        duration(stale_after)
                    ),
                    [only] => only.ahead_by.map_or("nothing: it has a branch".to_owned(), ahead),
                    many => format!(
                        "nothing: the row has {} branches (redone on purpose), none taken for a lost claim",
                        many.len()
                    ),
                },
            ),
            Verdict::MergedBefore => Forecast::new(
                "merged_before",
                "nothing: a pull request came from a branch of the row, which is gone: merged or closed work is not redone",
            ),
            Verdict::Suspect { plan, claimed_at } => {
                let branch = self.report.forge.branches.iter().find(|b| b.name == plan.branch.as_str());
                match branch.and_then(|b| b.ahead_by) {
                    Some(0) => Forecast::new(
                        "dead_claim",
                        format!(
                            "dispatch `{}` again on {}: a dead claim (at its base {}, no pull request, the row older than stale_claim_after, {})",
                            route.event_type,
                            plan.branch,
                            claimed_at.short(),
                            duration(stale_after)
                        ),
                    )
                    .on(&plan.branch),
                    Some(n) => Forecast::new("handled", ahead(n)),
                    None => Forecast::new(
                        "unknown",
                        "unknown: the compare with the default branch failed",
                    ),
                }
            }
            Verdict::Run(plan) => Forecast::new(
                "would_dispatch",
                format!(
                    "claim {} and dispatch `{}`: the row has neither a branch nor a pull request",
                    plan.branch, route.event_type
                ),
            )
            .on(&plan.branch),
            Verdict::Failed(failed) => {
                Forecast::new("failed", format!("the row fails: {}", failed.error))
            }
            // What applying a verdict settles it as; `classify` gives none of these.
            _ => Forecast::new("unknown", "unknown: the sweep settles a row so only by acting on it"),
        };
        forecast.says += &note;
        forecast
    }
}

fn since(d: Duration) -> chrono::Duration {
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
