//! The pipeline: a pure [`plan`] of what a row needs, one [`execute`] that does it, and
//! [`Pipeline`], which runs rows in the background with one run per row at a time.

mod execute;
mod plan;

pub use execute::{claim_and_dispatch, execute, DuplicateReason, Outcome, RunError};
pub use plan::{CompiledRoute, Plan, PlanError, Planned, Routes};

#[cfg(test)]
pub(crate) use plan::test_routes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use tokio_util::task::TaskTracker;

use crate::forge::Forge;
use crate::identity::{BranchPrefix, RepoName, RowId};

/// A run of one row that any number of deliveries can await.
pub type Run = Shared<BoxFuture<'static, Result<Outcome, RunError>>>;

/// Rows are one and the same when repository, prefix and id agree (SPEC §4).
type RowKey = (RepoName, BranchPrefix, RowId);

/// Runs rows on a forge. Runs are spawned, so they finish even when every caller has gone.
pub struct Pipeline {
    forge: Arc<dyn Forge>,
    /// Runs under way, so that concurrent deliveries of a row share one (single flight).
    runs: Mutex<HashMap<RowKey, Run>>,
    tasks: TaskTracker,
}

/// A delivery's place in a run.
pub struct Submission {
    /// True when the run was already under way: this delivery did not start it.
    pub joined: bool,
    pub run: Run,
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
    pub fn new(forge: Arc<dyn Forge>) -> Arc<Pipeline> {
        Arc::new(Pipeline {
            forge,
            runs: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
        })
    }

    pub fn forge(&self) -> &Arc<dyn Forge> {
        &self.forge
    }

    /// Starts a run of `plan`, or joins the one under way for the same row.
    pub fn submit(self: &Arc<Self>, plan: Plan) -> Submission {
        let key = (
            plan.route.repo.clone(),
            plan.route.branch_prefix.clone(),
            plan.id.clone(),
        );
        // Held until the run is registered, so the run cannot unregister itself before that.
        let mut runs = self.runs.lock().expect("runs lock poisoned");
        if let Some(run) = runs.get(&key) {
            return Submission {
                joined: true,
                run: run.clone(),
            };
        }
        let this = Arc::clone(self);
        let done_key = key.clone();
        let task = self.tasks.spawn(async move {
            // Unregistered on drop, so a run that panics does not stay "under way" forever.
            let _done = Unregister(Arc::clone(&this), done_key);
            let result = execute(this.forge.as_ref(), &plan).await;
            if let Err(e) = &result {
                // The one log line for a failed run; every delivery that awaited it gets its answer.
                tracing::error!(id = %plan.id, branch = %plan.branch, repo = %plan.route.repo,
                    error = %e, "the row's run failed");
            }
            result
        });
        let run = async move {
            task.await.unwrap_or_else(|e| {
                Err(RunError::Internal(Arc::new(anyhow::anyhow!(
                    "the run of a row panicked: {e}"
                ))))
            })
        }
        .boxed()
        .shared();
        runs.insert(key, run.clone());
        Submission { joined: false, run }
    }

    /// Waits for every run under way; new runs can no longer be tracked after this.
    pub async fn drain(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}

struct Unregister(Arc<Pipeline>, RowKey);

impl Drop for Unregister {
    fn drop(&mut self) {
        if let Ok(mut runs) = self.0.runs.lock() {
            runs.remove(&self.1);
        }
    }
}
