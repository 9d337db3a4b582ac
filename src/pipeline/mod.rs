//! The pipeline: a pure [`Routes::plan`] of what a row needs, one [`execute`] that does it, and
//! [`Pipeline`], which runs rows in the background with one run per row at a time, admits at
//! most `queue_capacity` rows at once, and knows which rows are left when the shutdown's grace
//! runs out.

mod execute;
mod plan;

pub use execute::{claim_and_dispatch, execute, DuplicateReason, Outcome, RunError, RunWatch};
pub use plan::{CompiledRoute, Ignored, Plan, PlanError, Planned, RouteError, Routes};

#[cfg(test)]
pub(crate) use plan::test_routes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt, Shared};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::Intake;
use crate::forge::{Base, Forge};
use crate::identity::{BranchPrefix, RepoName, RowId};
use crate::metrics::{Metrics, RunResult};
use crate::shutdown::Shutdown;

/// A run of one row that any number of deliveries can await.
pub type Run = Shared<BoxFuture<'static, Result<Outcome, RunError>>>;

/// Rows are one and the same when repository, prefix and id agree (SPEC §4).
type RowKey = (RepoName, BranchPrefix, RowId);

/// How many rows may be accepted and not yet finished, and what to tell a sender beyond that.
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    pub capacity: usize,
    /// About how long the rows admitted take to drain.
    pub retry_after: Duration,
}

/// Runs rows on a forge. Runs are spawned, so they finish even when every caller has gone.
pub struct Pipeline {
    forge: Arc<dyn Forge>,
    /// Runs under way, so that concurrent deliveries of a row share one (single flight); their
    /// number is the number of rows admitted and not yet finished.
    runs: Mutex<HashMap<RowKey, Entry>>,
    tasks: TaskTracker,
    admission: Admission,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
}

struct Entry {
    run: Run,
    watch: Arc<RunWatch>,
}

/// A delivery's place in a run.
pub struct Submission {
    /// True when the run was already under way: this delivery did not start it.
    pub joined: bool,
    pub run: Run,
}

/// The pipeline is full: `capacity` rows are admitted and not yet finished.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("{capacity} rows are waiting already (queue_capacity)")]
pub struct Full {
    pub capacity: usize,
    pub retry_after: Duration,
}

impl Submission {
    /// The run's result as this delivery reports it: a delivery that joined another's run
    /// answers `in_flight`, since only the one that claimed may say `dispatched`.
    pub async fn outcome(self) -> Result<Outcome, RunError> {
        let joined = self.joined;
        self.run.await.map(|outcome| match outcome {
            Outcome::Dispatched { branch, .. } | Outcome::Duplicate { branch, .. } if joined => {
                Outcome::Duplicate {
                    reason: DuplicateReason::InFlight,
                    branch,
                }
            }
            other => other,
        })
    }
}

impl Pipeline {
    pub fn new(
        forge: Arc<dyn Forge>,
        admission: Admission,
        shutdown: Shutdown,
        metrics: Arc<Metrics>,
    ) -> Arc<Pipeline> {
        Arc::new(Pipeline {
            forge,
            runs: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            admission,
            shutdown,
            metrics,
        })
    }

    pub fn forge(&self) -> &Arc<dyn Forge> {
        &self.forge
    }

    /// Where the runs, and everything built on this pipeline, count.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Rows admitted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.runs.lock().expect("runs lock poisoned").len()
    }

    /// Starts a run of `plan`, or joins the one under way for the same row. A new row beyond
    /// `queue_capacity` is refused: the count and the admission are one step under one lock.
    pub fn submit(self: &Arc<Self>, plan: Plan) -> Result<Submission, Full> {
        let key = (
            plan.route.repo.clone(),
            plan.route.branch_prefix.clone(),
            plan.id.clone(),
        );
        // Held until the run is registered, so the run cannot unregister itself before that.
        let mut runs = self.runs.lock().expect("runs lock poisoned");
        if let Some(entry) = runs.get(&key) {
            return Ok(Submission {
                joined: true,
                run: entry.run.clone(),
            });
        }
        if runs.len() >= self.admission.capacity {
            return Err(Full {
                capacity: self.admission.capacity,
                retry_after: self.admission.retry_after,
            });
        }
        let watch = Arc::new(RunWatch::new(self.shutdown.clone()));
        let this = Arc::clone(self);
        let done_key = key.clone();
        let run_watch = Arc::clone(&watch);
        let span = tracing::info_span!("run", id = %plan.id, branch = %plan.branch, repo = %plan.route.repo);
        let task = self.tasks.spawn(
            async move {
                // Unregistered on drop, so a run that panics does not stay "under way" forever,
                // and counted then as `failed_internal`.
                let mut done = Unregister {
                    pipeline: Arc::clone(&this),
                    key: done_key,
                    route: plan.route.table_name(),
                    start: std::time::Instant::now(),
                    counted: false,
                };
                let result = execute(this.forge.as_ref(), &plan, &run_watch).await;
                let took = done.start.elapsed();
                let ended = run_result(&result);
                this.metrics.run_ended(&done.route, ended, took);
                done.counted = true;
                match &result {
                    Err(RunError::Abandoned) => tracing::error!(
                        "abandoned at shutdown before its claim; a redelivery or the sweep will run the row"
                    ),
                    // The one log line for a failed run, whatever its retries were; every
                    // delivery that awaited it gets its answer.
                    Err(e) => tracing::error!(result = ended.as_str(), error = %e,
                        next = %next_step(&plan, e),
                        duration_ms = took.as_millis() as u64, "the row's run failed"),
                    Ok(_) => tracing::info!(result = ended.as_str(),
                        duration_ms = took.as_millis() as u64, "the row's run ended"),
                }
                result
            }
            .instrument(span),
        );
        let run = async move {
            task.await.unwrap_or_else(|e| {
                Err(RunError::Internal(Arc::new(anyhow::anyhow!(
                    "the run of a row panicked: {e}"
                ))))
            })
        }
        .boxed()
        .shared();
        runs.insert(
            key,
            Entry {
                run: run.clone(),
                watch,
            },
        );
        self.metrics.runs_in_flight(runs.len());
        Ok(Submission { joined: false, run })
    }

    /// Dispatches `plan` again on the branch it already has (`plan.branch`), with `base` as
    /// the payload's base: a claim whose dispatch may never have been made (a dead claim, found
    /// by the sweep or by a queue message read again). The workflow's concurrency group and
    /// guard absorb a second dispatch of a row that had one.
    pub async fn redispatch(&self, plan: &Plan, base: &Base) -> Result<(), RunError> {
        let payload = plan
            .client_payload(base)
            .map_err(|e| RunError::Refused(e.to_string()))?;
        self.forge
            .dispatch(
                &plan.route.repo,
                &plan.route.event_type,
                &serde_json::Value::Object(payload),
            )
            .await
            .map_err(|e| RunError::from_forge(e, "dispatching a claimed row again"))?;
        tracing::info!(id = %plan.id, branch = %plan.branch, "dispatched a claimed row again");
        Ok(())
    }

    /// Waits for every run under way; new runs can no longer be tracked after this.
    pub async fn drain(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Logs each run still under way, at error level with its id (and, for a claim left open,
    /// its branch), for when the process stops before they end.
    pub fn report_unfinished(&self) -> usize {
        let runs = self.runs.lock().expect("runs lock poisoned");
        for ((repo, _, id), entry) in runs.iter() {
            match entry.watch.claimed() {
                Some(branch) => tracing::error!(%id, %branch, %repo,
                    "stopped with the claim open and no dispatch; the sweep re-dispatches it as a dead claim"),
                None => tracing::error!(%id, %repo,
                    "stopped before the row was claimed; a redelivery or the sweep will run it"),
            }
        }
        runs.len()
    }
}

/// What becomes of a row whose run failed, for its log line. A webhook is not sent again
/// (pg_net never retries), so a row GitHub could not take waits for the sweep; the queue reads
/// its message again after a backoff, and dead-letters a refusal.
fn next_step(plan: &Plan, error: &RunError) -> String {
    let refused = matches!(error, RunError::Refused(_));
    match (plan.route.intake, refused) {
        (Intake::Webhook, false) => "left for the sweep: run `rowbranch reconcile`".to_owned(),
        (Intake::Webhook, true) => format!(
            "refused until the cause is fixed; then `rowbranch redo --table {} --id {}`",
            plan.route.table_name(),
            plan.id
        ),
        (Intake::Pgmq, false) => {
            "retry when the queue reads the message again, after its backoff".to_owned()
        }
        (Intake::Pgmq, true) => {
            "dead-lettered; `rowbranch queue redrive` once the cause is fixed".to_owned()
        }
    }
}

/// How a run ended, as `rowbranch_runs_total{result}` names it.
fn run_result(result: &Result<Outcome, RunError>) -> RunResult {
    match result {
        Ok(Outcome::Dispatched { .. }) => RunResult::Dispatched,
        Ok(Outcome::Duplicate { .. }) => RunResult::Duplicate,
        Err(RunError::Unavailable { .. }) => RunResult::FailedUnavailable,
        Err(RunError::Refused(_)) => RunResult::FailedRefused,
        Err(RunError::Internal(_)) => RunResult::FailedInternal,
        Err(RunError::Abandoned) => RunResult::Abandoned,
    }
}

struct Unregister {
    pipeline: Arc<Pipeline>,
    key: RowKey,
    route: String,
    start: std::time::Instant,
    /// The run's end is in `rowbranch_runs_total`; when it is not at drop, the run panicked.
    counted: bool,
}

impl Drop for Unregister {
    fn drop(&mut self) {
        let metrics = &self.pipeline.metrics;
        if !self.counted {
            metrics.run_ended(&self.route, RunResult::FailedInternal, self.start.elapsed());
        }
        if let Ok(mut runs) = self.pipeline.runs.lock() {
            runs.remove(&self.key);
            metrics.runs_in_flight(runs.len());
        }
    }
}
