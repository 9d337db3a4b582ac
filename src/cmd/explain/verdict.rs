//! What `reconcile` and `redo` would do with the row now, by their own rules: reconcile's
//! `classify` after the queue's, and redo's `free_branch`. Pure: made from what was read.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::report::{ForgeView, QueueView, Verdict};
use super::Lookup;
use crate::cmd::redo::free_branch;
use crate::config::{Config, Route};
use crate::db::Row;
use crate::forge::{Branch, Sha};
use crate::identity::BranchName;
use crate::pipeline::{CompiledRoute, Plan};
use crate::reconcile::{self, classify, Known};

/// What the verdicts are made from.
pub(super) struct Facts<'a> {
    pub(super) config: &'a Config,
    pub(super) compiled: &'a CompiledRoute,
    pub(super) lookup: &'a Lookup,
    pub(super) plan: Option<&'a Plan>,
    pub(super) forge: &'a ForgeView,
    pub(super) queue: Option<&'a QueueView>,
    pub(super) now: DateTime<Utc>,
}

impl Facts<'_> {
    fn route(&self) -> &Route {
        &self.compiled.route
    }

    /// The row, or the verdict for want of it.
    fn row(&self, command: &str) -> Result<&Row, Verdict> {
        match self.lookup {
            Lookup::Found(row) => Ok(row),
            Lookup::NotRead => Err(Verdict::new(
                "unknown",
                "unknown: it reads the row from DATABASE_URL, which is not set",
            )),
            Lookup::Unreachable(_) => Err(Verdict::new(
                "unknown",
                "unknown: the database could not be read",
            )),
            Lookup::Missing { .. } if command == "redo" => Err(Verdict::new(
                "cannot",
                "cannot: it reads the row from the table, which has no such row",
            )),
            Lookup::Missing { .. } => Err(Verdict::new(
                "no_row",
                "nothing: the sweep reads the table's rows, and it has no such row",
            )),
        }
    }

    /// What the forge knows, or the verdict for want of it.
    fn forge_read(&self) -> Result<(), Verdict> {
        if self.forge.status != "ok" {
            return Err(Verdict::new(
                "unknown",
                "unknown: the forge could not be read",
            ));
        }
        Ok(())
    }

    /// `redo`: its branch if free, else the next free `{branch}-redo-N`.
    pub(super) fn redo(&self) -> Verdict {
        if let Err(verdict) = self.row("redo") {
            return verdict;
        }
        let Some(plan) = self.plan else {
            return Verdict::new("cannot", "cannot: the row's id is not usable");
        };
        if let Err(verdict) = self.forge_read() {
            return verdict;
        }
        let prefix = &self.route().branch_prefix;
        let taken: Vec<BranchName> = self
            .forge
            .branches
            .iter()
            .filter_map(|b| BranchName::existing(prefix, &plan.id, &b.name))
            .collect();
        let branch = free_branch(&plan.branch, &taken);
        let why = if branch == plan.branch {
            String::new()
        } else {
            format!(" ({} is taken)", plan.branch)
        };
        Verdict::new(
            "would_dispatch",
            format!(
                "claim {branch} and dispatch `{}`{why}; redo asks first unless given --yes",
                self.route().event_type
            ),
        )
        .on(branch.to_string())
    }

    /// `reconcile`, by the sweep's own rules: the queue first for a queue route, then
    /// `classify` on the row's branches and pull requests, and a compare for a suspect.
    pub(super) fn reconcile(&self) -> Verdict {
        let row = match self.row("reconcile") {
            Ok(row) => row,
            Err(verdict) => return verdict,
        };
        if let Err(verdict) = self.forge_read() {
            return verdict;
        }
        let pulls = &self.forge.pull_requests;
        if !matches!(pulls.status, "ok" | "not_kept") {
            return Verdict::new(
                "unknown",
                format!(
                    "unknown: the sweep lists pull requests, and here they are {}",
                    pulls.detail.as_deref().unwrap_or("not read")
                ),
            );
        }
        let window = self.config.reconcile.window;
        let in_window =
            row.created_at >= self.now - chrono::Duration::from_std(window).unwrap_or_default();
        let mut verdict = self.sweep(row.clone());
        verdict.in_window = Some(in_window);
        if !in_window {
            let hours = (self.now - row.created_at).num_hours() + 1;
            verdict.says += &format!(
                "; but the row is older than reconcile_window ({}), so a sweep reads it only with `reconcile --since {hours}h`",
                duration(window)
            );
        }
        verdict
    }

    fn sweep(&self, mut row: Row) -> Verdict {
        let route = self.route();
        let mut note = String::new();
        if let Some(queue) = self.queue {
            if queue.status != "ok" {
                return Verdict::new("unknown", "unknown: the queue could not be read");
            }
            if let Some(held) = queue.messages.iter().find(|m| m.place == "queue") {
                return Verdict::new(
                    "in_queue",
                    format!(
                        "nothing: its message {} is still in the queue, which is the consumer's",
                        held.msg_id
                    ),
                );
            }
            let archived = queue
                .messages
                .iter()
                .filter(|m| m.place == "archive")
                .filter_map(|m| m.archived_at)
                .max();
            match archived {
                // Its work started when its message was archived, not when it was created.
                Some(at) => row.created_at = row.created_at.max(at),
                None if row.created_at >= self.now - reconcile::UNSEEN_MARGIN => {
                    return Verdict::new(
                        "in_queue",
                        "nothing yet: the row is less than a minute old and its message may not be committed yet; the next sweep decides",
                    )
                }
                None => {
                    note = "; it has no message in the queue or its archive (is the queue's trigger installed and enabled?)".to_owned();
                }
            }
        }
        let branches: Vec<Branch> = self
            .forge
            .branches
            .iter()
            .filter_map(|b| {
                Some(Branch {
                    name: BranchName::listed(&route.branch_prefix, &b.name)?,
                    sha: Sha::new(b.sha.clone()),
                })
            })
            .collect();
        let heads = self
            .forge
            .pull_requests
            .items
            .iter()
            .filter_map(|p| BranchName::listed(&route.branch_prefix, &p.head))
            .collect();
        let known = Known::new(&route.branch_prefix, branches, heads);
        let stale_after = self.config.reconcile.stale_claim_after;
        let stale_before = self.now - chrono::Duration::from_std(stale_after).unwrap_or_default();
        let base = self
            .forge
            .base
            .as_ref()
            .map_or("its base", |b| b.branch.as_str());
        let mut verdict = match classify(&known, self.compiled, row.clone(), stale_before) {
            reconcile::Verdict::Handled => Verdict::new("handled", self.handled(&row, stale_before, stale_after, base)),
            reconcile::Verdict::MergedBefore => Verdict::new(
                "merged_before",
                "nothing: a pull request came from a branch of the row, which is gone: merged or closed work is not redone",
            ),
            reconcile::Verdict::Suspect { plan, claimed_at } => {
                let ahead = self
                    .forge
                    .branches
                    .iter()
                    .find(|b| b.name == plan.branch.as_str())
                    .and_then(|b| b.ahead_by);
                match ahead {
                    Some(0) => Verdict::new(
                        "dead_claim",
                        format!(
                            "dispatch `{}` again on {}: a dead claim (at its base {}, no pull request, the row older than stale_claim_after, {})",
                            route.event_type,
                            plan.branch,
                            claimed_at.short(),
                            duration(stale_after)
                        ),
                    )
                    .on(plan.branch.to_string()),
                    Some(n) => Verdict::new(
                        "handled",
                        format!("nothing: its branch is {n} commit{} ahead of {base}", plural(n)),
                    ),
                    None => Verdict::new(
                        "unknown",
                        "unknown: the compare with the default branch failed",
                    ),
                }
            }
            reconcile::Verdict::Run(plan) => Verdict::new(
                "would_dispatch",
                format!(
                    "claim {} and dispatch `{}`: the row has neither a branch nor a pull request",
                    plan.branch, route.event_type
                ),
            )
            .on(plan.branch.to_string()),
            reconcile::Verdict::Failed { error, .. } => {
                Verdict::new("failed", format!("the row fails: {error}"))
            }
        };
        if let Some(dead) = self
            .queue
            .and_then(|q| q.messages.iter().find(|m| m.place == "dead_letter"))
        {
            note += &format!(
                "; its message is a dead letter ({}): `rowbranch queue redrive --id {}` runs it through the consumer instead",
                dead.reason.as_deref().unwrap_or("no reason given"),
                dead.msg_id
            );
        }
        verdict.says += &note;
        verdict
    }

    /// Why `classify` finds the row handled, in words.
    fn handled(
        &self,
        row: &Row,
        stale_before: DateTime<Utc>,
        stale_after: Duration,
        base: &str,
    ) -> String {
        let branches = &self.forge.branches;
        if !self.forge.pull_requests.items.is_empty() {
            return "nothing: a pull request came from a branch of the row".to_owned();
        }
        match branches.as_slice() {
            [only] if row.created_at >= stale_before && only.ahead_by == Some(0) => format!(
                "nothing yet: its branch is at its base, but the row is younger than stale_claim_after ({}); a later sweep dispatches again if it stays there",
                duration(stale_after)
            ),
            [only] => match only.ahead_by {
                Some(n) => format!("nothing: its branch is {n} commit{} ahead of {base}", plural(n)),
                None => "nothing: it has a branch".to_owned(),
            },
            many => format!(
                "nothing: the row has {} branches (redone on purpose), none taken for a lost claim",
                many.len()
            ),
        }
    }
}

/// A duration as the config writes one: `48h`, `90m`, `20s`.
fn duration(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
