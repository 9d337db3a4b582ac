//! The sweep's decision for one row, made from what it reads once per route: the forge's
//! branches and pull request heads, and for a queue route what the queue holds. `reconcile`
//! acts on it; `explain` prints it.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::{Failed, QueueView};
use crate::db::Row;
use crate::forge::{Base, Branch, Forge, Sha};
use crate::identity::{BranchName, BranchPrefix, RowId};
use crate::metrics::RowVerdict;
use crate::pipeline::{at_base, CompiledRoute, Plan};

/// What the sweep knows of a route before it looks at a row. The forge's listing is keyed by
/// what follows `{prefix}/`, so that the keys that start with an id are contiguous and
/// [`RowId::owns_tail`] picks the row's own.
#[derive(Debug)]
pub struct Known {
    branches: BTreeMap<String, Branch>,
    pulls: BTreeSet<String>,
    /// A queue route's view of its queue.
    pub queue: Option<QueueView>,
    /// A row created before then has had time for its work to start.
    stale_before: DateTime<Utc>,
    /// The default branch, read once, when a suspect first needs it.
    pub base: OnceCell<Base>,
}

impl Known {
    /// From the listing of the prefix's branches and the heads of the pull requests; names
    /// outside the prefix are left out.
    pub fn new(
        prefix: &BranchPrefix,
        branches: Vec<Branch>,
        pull_heads: Vec<BranchName>,
        queue: Option<QueueView>,
        stale_before: DateTime<Utc>,
    ) -> Known {
        Known {
            branches: branches
                .into_iter()
                .filter_map(|b| Some((prefix.tail(b.name.as_str())?.to_owned(), b)))
                .collect(),
            pulls: pull_heads
                .iter()
                .filter_map(|head| prefix.tail(head.as_str()).map(str::to_owned))
                .collect(),
            queue,
            stale_before,
            base: OnceCell::new(),
        }
    }

    /// Every branch of row `id`.
    fn branches_of(&self, id: &RowId) -> Vec<&Branch> {
        self.branches
            .range(id.as_str().to_owned()..)
            .take_while(|(tail, _)| tail.starts_with(id.as_str()))
            .filter(|(tail, _)| id.owns_tail(tail))
            .map(|(_, branch)| branch)
            .collect()
    }

    /// Whether a pull request came from a branch of row `id`.
    fn has_pull(&self, id: &RowId) -> bool {
        self.pulls
            .range(id.as_str().to_owned()..)
            .take_while(|tail| tail.starts_with(id.as_str()))
            .any(|tail| id.owns_tail(tail))
    }

    /// What the sweep makes of `row`, reading only: a queue route's row still in the queue is
    /// the consumer's; else [`classify`] decides, and a suspect's compare with its base tells
    /// a dead claim (at its base) from a handled row (ahead of it). Fails only when the default
    /// branch cannot be read, which stops the route.
    pub async fn decide(
        &mut self,
        forge: &dyn Forge,
        route: &CompiledRoute,
        mut row: Row,
    ) -> anyhow::Result<Verdict> {
        if let Some(queue) = &mut self.queue {
            if queue.in_queue(&route.route, &mut row) {
                return Ok(Verdict::InQueue);
            }
        }
        let (plan, claimed_at) = match classify(self, route, row) {
            Verdict::Suspect { plan, claimed_at } => (plan, claimed_at),
            verdict => return Ok(verdict),
        };
        let read = forge.base(&plan.route.repo);
        let base = self.base.get_or_try_init(|| read).await;
        let base = base.context("reading the default branch")?;
        // A compare that fails (the branch deleted since the listing) fails this row only.
        Ok(match at_base(forge, &plan, base).await {
            Ok(true) => Verdict::DeadClaim {
                claimed: Base {
                    branch: base.branch.clone(),
                    sha: claimed_at,
                },
                plan,
            },
            Ok(false) => Verdict::Handled,
            Err(e) => Verdict::Failed(Failed {
                id: plan.id.to_string(),
                error: format!("comparing {} with {}: {e}", plan.branch, base.branch),
            }),
        })
    }
}

/// What the sweep makes of one row: [`Known::decide`] gives the first six, and acting on a
/// run or a dead claim settles it as one of the last two.
#[derive(Debug)]
pub enum Verdict {
    /// A branch of the row exists and says nothing is missing.
    Handled,
    /// No branch, but a pull request from one: the work was merged or closed, and is not redone.
    MergedBefore,
    /// A dead claim: the row's one branch, still at its base, no pull request, the row older
    /// than `stale_claim_after`. `claimed` is the base it was claimed at.
    DeadClaim { plan: Plan, claimed: Base },
    /// Neither branch nor pull request: the row's webhook was lost; run the pipeline.
    Run(Plan),
    /// The row cannot be planned (its id is the raw value of its id column), or its run failed.
    Failed(Failed),
    /// A queue route's row whose message is still in the queue: the consumer's.
    InQueue,
    /// [`classify`]'s dead claim before the compare: the plan names the branch as it is.
    Suspect { plan: Plan, claimed_at: Sha },
    /// Run, and dispatched.
    Dispatched,
    /// A dead claim, dispatched again on its branch.
    Redispatched(BranchName),
    /// A row a scheduled sweep leaves: created before its route's `sweep_from`.
    BeforeSweepFrom,
}

impl Verdict {
    /// Its name in `rowbranch_reconcile_rows_total{verdict}` and in `explain`'s forecast: a
    /// run is a row that would be dispatched until it is.
    pub fn label(&self) -> RowVerdict {
        match self {
            Verdict::Handled => RowVerdict::Handled,
            Verdict::MergedBefore => RowVerdict::MergedBefore,
            Verdict::Run(_) => RowVerdict::WouldDispatch,
            Verdict::Dispatched => RowVerdict::Dispatched,
            Verdict::DeadClaim { .. } | Verdict::Suspect { .. } | Verdict::Redispatched(_) => {
                RowVerdict::DeadClaim
            }
            Verdict::Failed(_) => RowVerdict::Failed,
            Verdict::InQueue => RowVerdict::InQueue,
            Verdict::BeforeSweepFrom => RowVerdict::BeforeSweepFrom,
        }
    }
}

/// Decides what `row` of `route` needs by the forge's listing alone. A row with several
/// branches was redone on purpose, so none of them is taken for a lost claim.
fn classify(known: &Known, route: &CompiledRoute, row: Row) -> Verdict {
    let raw_id = row
        .record
        .get(&route.route.id_column)
        .cloned()
        .unwrap_or(Value::Null);
    let plan = match route.plan_row(&row.record) {
        Ok(plan) => plan,
        Err(e) => {
            return Verdict::Failed(Failed {
                id: raw_id.to_string(),
                error: e.to_string(),
            })
        }
    };
    let pull = known.has_pull(&plan.id);
    match known.branches_of(&plan.id).as_slice() {
        [] if pull => Verdict::MergedBefore,
        [] => Verdict::Run(plan),
        [only] if !pull && row.created_at < known.stale_before => {
            let prefix = &route.route.branch_prefix;
            match BranchName::existing(prefix, &plan.id, only.name.as_str()) {
                Some(branch) => Verdict::Suspect {
                    claimed_at: only.sha.clone(),
                    plan: plan.on_branch(branch),
                },
                // `branches_of` keeps only the row's own: unreachable, and harmless.
                None => Verdict::Handled,
            }
        }
        _ => Verdict::Handled,
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;
    use serde_json::json;

    use super::*;

    fn route() -> CompiledRoute {
        crate::pipeline::test_routes()
            .iter()
            .next()
            .expect("the test config has a route")
            .clone()
    }

    /// The forge's listing, and an hour for `stale_claim_after`: a branch outside the prefix
    /// is not in it.
    fn known(branches: &[&str], pulls: &[&str]) -> Known {
        let prefix = &route().route.branch_prefix;
        let listed = |name: &&str| BranchName::listed(prefix, name);
        Known::new(
            prefix,
            branches
                .iter()
                .filter_map(|name| {
                    Some(Branch {
                        name: listed(name)?,
                        sha: Sha::new(format!("sha-of-{name}")),
                    })
                })
                .collect(),
            pulls.iter().filter_map(listed).collect(),
            None,
            Utc::now() - Duration::hours(1),
        )
    }

    /// The verdict's name, the branch it names (if any) and its sha.
    fn verdict(known: &Known, id: serde_json::Value, age_hours: i64) -> String {
        let now = Utc::now();
        let row = Row {
            record: json!({"id": id, "message": "Add dark mode"})
                .as_object()
                .unwrap()
                .clone(),
            created_at: now - Duration::hours(age_hours),
        };
        match classify(known, &route(), row) {
            Verdict::Handled => "handled".into(),
            Verdict::MergedBefore => "merged before".into(),
            Verdict::Suspect { plan, claimed_at } => {
                format!("suspect {} at {claimed_at}", plan.branch)
            }
            Verdict::Run(plan) => format!("run {}", plan.branch),
            Verdict::Failed(failed) => format!("failed {}", failed.id),
            settled => format!("{settled:?}"),
        }
    }

    #[test]
    fn each_row_gets_its_verdict() {
        let forge = known(
            &[
                "feedback/42-old-text",
                "feedback/420-other-row",
                "feedback/7",
                "feedback/7-redo-1",
                "feedback/9-x",
                "elsewhere/5",
            ],
            &[
                "feedback/8-merged",
                "feedback/9-x",
                "feedback/10-gone",
                "other/11",
            ],
        );
        // One case a line: the table is easier to scan than rustfmt's layout.
        #[rustfmt::skip]
        let cases = [
            (json!(42), 3, "suspect feedback/42-old-text at sha-of-feedback/42-old-text"),
            (json!(42), 0, "handled"),
            (json!(420), 3, "suspect feedback/420-other-row at sha-of-feedback/420-other-row"),
            (json!(4), 3, "run feedback/4-add-dark-mode"),
            (json!(7), 3, "handled"),
            (json!(8), 3, "merged before"),
            (json!(9), 3, "handled"),
            (json!(10), 3, "merged before"),
            (json!(11), 3, "run feedback/11-add-dark-mode"),
            (json!(5), 3, "run feedback/5-add-dark-mode"),
            (json!("a b"), 3, "failed \"a b\""),
        ];
        for (id, age, expected) in cases {
            assert_eq!(
                verdict(&forge, id.clone(), age),
                expected,
                "row {id}, {age} h old"
            );
        }
    }

    #[test]
    fn a_row_without_an_id_fails_with_null() {
        let now = Utc::now();
        let row = Row {
            record: json!({"message": "x"}).as_object().unwrap().clone(),
            created_at: now,
        };
        let Verdict::Failed(Failed { id, error }) = classify(&known(&[], &[]), &route(), row)
        else {
            panic!("a row without an id cannot be planned");
        };
        assert_eq!(id, "null");
        assert!(error.contains("`id`"), "{error}");
    }
}
