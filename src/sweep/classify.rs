//! The sweep's decision for one row, made from what it reads once per route: the forge's
//! branches, pull requests and runs, and for a queue route what the queue holds. `reconcile`
//! acts on it; `explain` prints it. From the same listings, the state the row's work shows
//! ([`Known::shown`]), which the sweep writes back.

use std::collections::BTreeMap;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::{Failed, QueueView};
use crate::db::status::RowState;
use crate::db::Row;
use crate::forge::{Base, Branch, Forge, PullRequest, Sha, WorkflowRun};
use crate::identity::{redo_rank, BranchName, BranchPrefix, RowId};
use crate::metrics::RowVerdict;
use crate::pipeline::{at_base, CompiledRoute, Plan};

/// What the sweep knows of a route before it looks at a row. The forge's listing is keyed by
/// what follows `{prefix}/`, so that the keys that start with an id are contiguous and
/// [`RowId::owns_tail`] picks the row's own.
#[derive(Debug)]
pub struct Known {
    branches: BTreeMap<String, Branch>,
    /// The pull requests, by their head's tail and number.
    pulls: BTreeMap<(String, u64), PullRequest>,
    /// The newest run each branch's tail is named in: when it was created, whether it has
    /// completed.
    runs: BTreeMap<String, (DateTime<Utc>, bool)>,
    /// A queue route's view of its queue.
    pub queue: Option<QueueView>,
    /// A row created before then has had time for its work to start.
    stale_before: DateTime<Utc>,
    /// The default branch, read once, when a suspect first needs it.
    pub base: OnceCell<Base>,
}

impl Known {
    /// From the listings of the prefix's branches, of the pull requests and of the runs
    /// (newest first or not); names outside the prefix are left out.
    pub fn new(
        prefix: &BranchPrefix,
        branches: Vec<Branch>,
        pulls: Vec<PullRequest>,
        runs: &[WorkflowRun],
        queue: Option<QueueView>,
        stale_before: DateTime<Utc>,
    ) -> Known {
        let tail = |name: &str| prefix.tail(name).map(str::to_owned);
        let mut newest = BTreeMap::new();
        for run in runs {
            let completed = run.status.as_deref() == Some("completed");
            for branch in run.branches(prefix).filter_map(tail) {
                let seen = newest.entry(branch).or_insert((run.created_at, completed));
                if run.created_at > seen.0 {
                    *seen = (run.created_at, completed);
                }
            }
        }
        Known {
            branches: (branches.into_iter())
                .filter_map(|b| Some((tail(b.name.as_str())?, b)))
                .collect(),
            pulls: (pulls.into_iter())
                .filter_map(|p| Some(((tail(&p.head)?, p.number), p)))
                .collect(),
            runs: newest,
            queue,
            stale_before,
            base: OnceCell::new(),
        }
    }

    /// The pull requests from a branch of row `id`, with their head's tail.
    fn pulls_of<'a>(&'a self, id: &'a RowId) -> impl Iterator<Item = (&'a str, &'a PullRequest)> {
        let row = self.pulls.range((id.as_str().to_owned(), 0)..);
        let row = row.take_while(|((tail, _), _)| tail.starts_with(id.as_str()));
        row.filter(|((tail, _), _)| id.owns_tail(tail))
            .map(|((tail, _), pull)| (tail.as_str(), pull))
    }

    /// Whether a pull request came from a branch of row `id`.
    fn has_pull(&self, id: &RowId) -> bool {
        self.pulls_of(id).next().is_some()
    }

    /// What the listings show of row `id`'s work, as the state to write (SPEC §6): of the
    /// pull requests from its current branches (its latest redo's, [`redo_rank`]) a merged one,
    /// else an open one, else a closed one, with its page; else, when no pull request came
    /// from any of its branches and a current one is still there, `failed` if the newest run
    /// named in its current branches has completed. `None` when they show nothing (no branch,
    /// or work under way).
    ///
    /// A closed pull request whose head name now points at another commit is left out: the
    /// name was claimed again (a redo on a deleted branch's name) and the work there is new.
    pub fn shown(&self, id: &RowId) -> Option<(RowState, Option<String>)> {
        let runs: Vec<_> = of_row(&self.runs, id).collect();
        let names = (of_row(&self.branches, id).map(|(tail, _)| tail))
            .chain(self.pulls_of(id).map(|(tail, _)| tail))
            .chain(runs.iter().map(|(tail, _)| *tail));
        let current = names.map(redo_rank).max()?;
        let is_current = |tail: &str| redo_rank(tail) == current;
        let counted = self.pulls_of(id).filter(|(tail, pull)| {
            let branch = self.branches.get(*tail);
            is_current(tail)
                && (pull.state == "open" || branch.is_none_or(|b| b.sha == pull.head_sha))
        });
        let standing = |pull: &PullRequest| match (pull.merged, pull.state.as_str()) {
            (true, _) => (RowState::Merged, 2),
            (false, "open") => (RowState::PrOpen, 1),
            _ => (RowState::Closed, 0),
        };
        let best = counted.max_by_key(|(_, pull)| (standing(pull).1, pull.created_at));
        if let Some((_, pull)) = best {
            let url = Some(pull.url.clone()).filter(|url| !url.is_empty());
            return Some((standing(pull).0, url));
        }
        let newest = (runs.into_iter())
            .filter(|(tail, _)| is_current(tail))
            .map(|(_, run)| run)
            .max_by_key(|run| run.0);
        // A row whose branches are all gone is run again by the sweep: not failed.
        let claimed = of_row(&self.branches, id).any(|(tail, _)| is_current(tail));
        let failed = claimed && !self.has_pull(id) && newest.is_some_and(|run| run.1);
        failed.then_some((RowState::Failed, None))
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
        if (self.queue.as_mut()).is_some_and(|queue| queue.in_queue(&route.route, &mut row)) {
            return Ok(Verdict::InQueue);
        }
        let (plan, claimed_at) = match classify(self, route, row) {
            Verdict::Suspect { plan, claimed_at } => (plan, claimed_at),
            verdict => return Ok(verdict),
        };
        let read = forge.base(&plan.route.repo);
        let base = self.base.get_or_try_init(|| read).await;
        let base = base.context("reading the default branch")?;
        // Whether a run of the work workflow (queued, running or finished) names the branch.
        let tail = plan.route.branch_prefix.tail(plan.branch.as_str());
        let ran = tail.is_some_and(|tail| self.runs.contains_key(tail));
        // A compare that fails (the branch deleted since the listing) fails this row only.
        Ok(match at_base(forge, &plan, base).await {
            // Not a lost dispatch but work that ran and pushed nothing: dispatching it again
            // would pay for the run again, and again at every sweep (SPEC §6).
            Ok(true) if ran => Verdict::AlreadyRan(plan.branch),
            Ok(true) => Verdict::DeadClaim {
                claimed: Base {
                    branch: base.branch.clone(),
                    sha: claimed_at,
                },
                plan,
            },
            Ok(false) => Verdict::Handled,
            Err(e) => {
                let error = format!("comparing {} with {}: {e}", plan.branch, base.branch);
                Verdict::failed(&plan.id, error)
            }
        })
    }
}

/// The entries of `map`, keyed by a branch's tail, that belong to row `id`: those keys that
/// start with the id are contiguous, and [`RowId::owns_tail`] picks the row's own.
fn of_row<'a, V>(
    map: &'a BTreeMap<String, V>,
    id: &'a RowId,
) -> impl Iterator<Item = (&'a str, &'a V)> {
    let row = map.range(id.as_str().to_owned()..);
    let row = row.take_while(|(tail, _)| tail.starts_with(id.as_str()));
    row.filter(|(tail, _)| id.owns_tail(tail))
        .map(|(tail, value)| (tail.as_str(), value))
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
    /// A claim at its base that a run of the work workflow names: its work ran and pushed
    /// nothing. Reported, never dispatched again; `redo` runs it on purpose.
    AlreadyRan(BranchName),
}

impl Verdict {
    /// Row `id` failed, for the reason `error`.
    pub fn failed(id: impl ToString, error: impl ToString) -> Verdict {
        let (id, error) = (id.to_string(), error.to_string());
        Verdict::Failed(Failed { id, error })
    }

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
            Verdict::AlreadyRan(_) => RowVerdict::AlreadyRan,
        }
    }
}

/// Decides what `row` of `route` needs by the forge's listing alone. A row with several
/// branches was redone on purpose, so none of them is taken for a lost claim.
fn classify(known: &Known, route: &CompiledRoute, row: Row) -> Verdict {
    let plan = match route.plan_row(&row.record) {
        Ok(plan) => plan,
        // Named by the raw value of its id column, `null` when it has none.
        Err(e) => {
            let raw_id = row.record.get(&route.route.id_column);
            return Verdict::failed(raw_id.unwrap_or(&Value::Null), e);
        }
    };
    let pull = known.has_pull(&plan.id);
    let branches: Vec<&Branch> = of_row(&known.branches, &plan.id).map(|(_, b)| b).collect();
    match branches.as_slice() {
        [] if pull => Verdict::MergedBefore,
        [] => Verdict::Run(plan),
        [only] if !pull && row.created_at < known.stale_before => {
            let prefix = &route.route.branch_prefix;
            match BranchName::existing(prefix, &plan.id, only.name.as_str()) {
                Some(branch) => Verdict::Suspect {
                    claimed_at: only.sha.clone(),
                    plan: plan.on_branch(branch),
                },
                // `of_row` keeps only the row's own: unreachable, and harmless.
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
        let merged = pulls
            .iter()
            .map(|head| pull(head, "closed", true))
            .collect();
        known_with(branches, merged, &[])
    }

    /// The listings as given, and an hour for `stale_claim_after`.
    fn known_with(branches: &[&str], pulls: Vec<PullRequest>, runs: &[WorkflowRun]) -> Known {
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
            pulls,
            runs,
            None,
            Utc::now() - Duration::hours(1),
        )
    }

    /// A pull request from `head`, its head at the branch's commit as [`known_with`] lists it.
    fn pull(head: &str, state: &str, merged: bool) -> PullRequest {
        static NUMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let number = NUMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        PullRequest {
            number,
            head: head.to_owned(),
            state: state.to_owned(),
            merged,
            merged_at: None,
            created_at: Utc::now() + Duration::seconds(number as i64),
            url: format!("https://github.com/acme/app/pull/{number}"),
            head_sha: Sha::new(format!("sha-of-{head}")),
        }
    }

    /// A `repository_dispatch` run titled for `branch`, created `minutes_ago`.
    fn run(branch: &str, status: &str, minutes_ago: i64) -> WorkflowRun {
        WorkflowRun {
            id: 1,
            run_number: 1,
            name: None,
            title: format!("rowbranch: {branch}"),
            status: Some(status.to_owned()),
            conclusion: None,
            event: "repository_dispatch".into(),
            created_at: Utc::now() - Duration::minutes(minutes_ago),
            url: String::new(),
        }
    }

    #[test]
    fn the_state_shown_is_the_current_branchs_pull_request_or_its_runs_end() {
        let id = |n: u64| RowId::parse(&json!(n)).unwrap();
        let shown = |known: &Known, n: u64| {
            known.shown(&id(n)).map(|(state, url)| {
                let number = url.map(|u| u.rsplit('/').next().unwrap().to_owned());
                format!("{state} {}", number.unwrap_or_default())
            })
        };
        let (open, merged, closed) = (
            pull("feedback/1-x", "open", false),
            pull("feedback/2-x", "closed", true),
            pull("feedback/3-x", "closed", false),
        );
        let numbers = [open.number, merged.number, closed.number];
        // Row 4: an old closed pull request, and its redo's open one: the redo's counts.
        let (old, redone) = (
            pull("feedback/4-x", "closed", false),
            pull("feedback/4-x-redo-1", "open", false),
        );
        // Row 5: a merged pull request from before a redo still under way: not the row's state.
        let superseded = pull("feedback/5-x", "closed", true);
        // Row 6: a merged pull request whose deleted branch's name was claimed again since.
        let mut reclaimed = pull("feedback/6-x", "closed", true);
        reclaimed.head_sha = Sha::new("the-old-work");
        let redone_number = redone.number;
        let known = known_with(
            &[
                "feedback/1-x",
                "feedback/5-x-redo-1",
                "feedback/6-x",
                "feedback/7-x",
                "feedback/8-x",
            ],
            vec![open, merged, closed, old, redone, superseded, reclaimed],
            &[
                run("feedback/7-x", "completed", 5),
                run("feedback/8-x", "completed", 9),
                run("feedback/8-x", "in_progress", 1),
                run("feedback/9-x", "completed", 3),
                run("feedback/90-x", "completed", 3),
                run("feedback/2-x", "completed", 30),
            ],
        );
        let expected = [
            (1, Some(format!("pr_open {}", numbers[0]))),
            (2, Some(format!("merged {}", numbers[1]))),
            (3, Some(format!("closed {}", numbers[2]))),
            (4, Some(format!("pr_open {redone_number}"))),
            (5, None),
            (6, None),
            (7, Some("failed ".to_owned())),
            // Run again since, and that run is under way.
            (8, None),
            // Its branch deleted, its run ended, no pull request: the sweep runs it again.
            (9, None),
            (10, None),
        ];
        for (n, state) in expected {
            assert_eq!(shown(&known, n), state, "row {n}");
        }
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
