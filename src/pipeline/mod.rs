//! The pipeline: a pure [`Routes::plan`] of what a row needs, one [`execute`] that does it, and
//! [`Pipeline`], which runs rows in the background with one run per row at a time, admits at
//! most `queue_capacity` rows at once holding at most `queue_bytes` between them, and knows
//! which rows are left when the shutdown's grace runs out.

mod execute;
mod plan;

pub use execute::{claim_and_dispatch, execute, DuplicateReason, Outcome, RunError, RunWatch};
pub use plan::{CompiledRoute, Ignored, Plan, PlanError, Planned, RouteError, Routes, RUN_BYTES};

#[cfg(test)]
pub(crate) use plan::test_routes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::Intake;
use crate::forge::{Base, Forge};
use crate::identity::{BranchPrefix, RepoName, RowId};
use crate::metrics::{Metrics, RunResult};
use crate::reason::Reason;
use crate::shutdown::Shutdown;

/// A run of one row that any number of deliveries can await.
pub type Run = Shared<BoxFuture<'static, Result<Outcome, RunError>>>;

/// Rows are one and the same when repository, prefix and id agree (SPEC §4).
type RowKey = (RepoName, BranchPrefix, RowId);

/// How many rows may be accepted and not yet finished, how many bytes they may hold between
/// them, and what to tell a sender beyond that.
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    pub capacity: usize,
    /// What the rows admitted and not yet finished may hold, in bytes (`queue_bytes`): each
    /// row counts what its plan keeps ([`Plan::held_bytes`]) and what its caller keeps beside
    /// it. A row is always admitted when none waits, however large.
    pub bytes: usize,
    /// About how long `capacity` rows take to drain: what a sender refused for their count is
    /// asked to wait.
    pub retry_after: Duration,
    /// About how long one row takes to drain: a sender refused for the bytes is asked to wait
    /// that long for each row waiting (at least 1 s, at most `retry_after`).
    pub per_row: Duration,
}

/// Runs rows on a forge. Runs are spawned, so they finish even when every caller has gone.
pub struct Pipeline {
    forge: Arc<dyn Forge>,
    /// Runs under way, so that concurrent deliveries of a row share one (single flight); their
    /// number is the number of rows admitted and not yet finished, and they count their bytes.
    runs: Mutex<Runs>,
    /// Woken when a run ends: there may be room for a row that waits for it (the sweep's).
    ended: Notify,
    tasks: TaskTracker,
    admission: Admission,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct Runs {
    map: HashMap<RowKey, Entry>,
    /// What the runs in `map` hold, in bytes: the sum of their entries' `bytes`.
    bytes: usize,
}

struct Entry {
    run: Run,
    watch: Arc<RunWatch>,
    /// What the row holds while it waits and runs, as counted at its admission.
    bytes: usize,
}

/// A delivery's place in a run.
pub struct Submission {
    /// True when the run was already under way: this delivery did not start it.
    pub joined: bool,
    pub run: Run,
}

/// The pipeline is full: `queue_capacity` rows are admitted and not yet finished, or the rows
/// admitted hold so many bytes that this one would take them past `queue_bytes`.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub enum Full {
    #[error("{capacity} rows are waiting already (queue_capacity)")]
    Rows {
        capacity: usize,
        retry_after: Duration,
    },
    #[error(
        "the {rows} rows waiting hold {held} bytes already, and this row's {row} more would \
         pass queue_bytes ({budget})"
    )]
    Bytes {
        rows: usize,
        held: usize,
        row: usize,
        budget: usize,
        retry_after: Duration,
    },
}

impl Full {
    /// How long a sender is asked to wait.
    pub fn retry_after(&self) -> Duration {
        match self {
            Full::Rows { retry_after, .. } | Full::Bytes { retry_after, .. } => *retry_after,
        }
    }

    /// Why, as answers and log lines name it: `queue_full` or `queue_bytes_full`.
    pub fn reason(&self) -> Reason {
        match self {
            Full::Rows { .. } => Reason::QueueFull,
            Full::Bytes { .. } => Reason::QueueBytesFull,
        }
    }
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
            runs: Mutex::new(Runs::default()),
            ended: Notify::new(),
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

    fn runs(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.runs.lock().expect("runs lock poisoned")
    }

    /// Rows admitted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.runs().map.len()
    }

    /// What the rows admitted and not yet finished hold, in bytes, as counted at admission.
    pub fn held_bytes(&self) -> usize {
        self.runs().bytes
    }

    /// How many more bytes rows may hold before `queue_bytes` refuses the next one.
    pub fn bytes_free(&self) -> usize {
        self.admission.bytes.saturating_sub(self.runs().bytes)
    }

    /// Starts a run of `plan`, or joins the one under way for the same row. A new row beyond
    /// `queue_capacity`, or one whose bytes would take the rows waiting past `queue_bytes`, is
    /// refused: the count and the admission are one step under one lock.
    pub fn submit(self: &Arc<Self>, plan: Plan) -> Result<Submission, Full> {
        self.submit_beside(plan, 0)
    }

    /// [`Pipeline::submit`] for a caller that keeps `beside` bytes of its own for as long as
    /// the run goes on (the queue's consumer keeps the message, and a copy of the plan): they
    /// count against `queue_bytes` with the plan's own.
    pub fn submit_beside(self: &Arc<Self>, plan: Plan, beside: usize) -> Result<Submission, Full> {
        let key = (
            plan.route.repo.clone(),
            plan.route.branch_prefix.clone(),
            plan.id.clone(),
        );
        let bytes = plan.held_bytes().saturating_add(beside);
        // Held until the run is registered, so the run cannot unregister itself before that.
        let mut runs = self.runs();
        if let Some(entry) = runs.map.get(&key) {
            return Ok(Submission {
                joined: true,
                run: entry.run.clone(),
            });
        }
        if runs.map.len() >= self.admission.capacity {
            return Err(Full::Rows {
                capacity: self.admission.capacity,
                retry_after: self.admission.retry_after,
            });
        }
        // The first row always goes, so that no row is too large to run ever.
        if !runs.map.is_empty() && runs.bytes.saturating_add(bytes) > self.admission.bytes {
            let rows = runs.map.len();
            let drain = self
                .admission
                .per_row
                .saturating_mul(u32::try_from(rows).unwrap_or(u32::MAX));
            return Err(Full::Bytes {
                rows,
                held: runs.bytes,
                row: bytes,
                budget: self.admission.bytes,
                retry_after: drain.clamp(
                    Duration::from_secs(1),
                    self.admission.retry_after.max(Duration::from_secs(1)),
                ),
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
        runs.map.insert(
            key,
            Entry {
                run: run.clone(),
                watch,
                bytes,
            },
        );
        runs.bytes += bytes;
        self.metrics.runs_in_flight(runs.map.len());
        Ok(Submission { joined: false, run })
    }

    /// Waits until a row of `plan`'s size (with `beside` bytes of its caller's) would be
    /// admitted now, or none is under way: for a caller with no sender to answer 503 to, which
    /// may wait its turn instead (the sweep). Another caller may still take the room first.
    pub async fn room_for(&self, plan: &Plan, beside: usize) {
        let bytes = plan.held_bytes().saturating_add(beside);
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before the look, so that a run ending in between still wakes it.
            ended.as_mut().enable();
            {
                let runs = self.runs();
                let rows_room = runs.map.len() < self.admission.capacity;
                let bytes_room = runs.bytes.saturating_add(bytes) <= self.admission.bytes;
                if runs.map.is_empty() || (rows_room && bytes_room) {
                    return;
                }
            }
            ended.await;
        }
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
        let runs = self.runs();
        for ((repo, _, id), entry) in runs.map.iter() {
            match entry.watch.claimed() {
                Some(branch) => tracing::error!(%id, %branch, %repo,
                    "stopped with the claim open and no dispatch; the sweep re-dispatches it as a dead claim"),
                None => tracing::error!(%id, %repo,
                    "stopped before the row was claimed; a redelivery or the sweep will run it"),
            }
        }
        runs.map.len()
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
        (Intake::Pgmq { .. }, false) => {
            "retry when the queue reads the message again, after its backoff".to_owned()
        }
        (Intake::Pgmq { .. }, true) => {
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
            if let Some(entry) = runs.map.remove(&self.key) {
                runs.bytes -= entry.bytes;
            }
            metrics.runs_in_flight(runs.map.len());
        }
        self.pipeline.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::value::RawValue;
    use serde_json::{json, Value};
    use tokio::sync::Semaphore;

    use super::*;
    use crate::forge::{Branch, Claim, ForgeError, Sha};
    use crate::identity::{BranchName, BranchPrefix, EventType, RepoName, RowId};

    /// A forge whose reads wait for a permit, then fail: the rows it is given stay under way
    /// until the test lets them go.
    struct Gated(Semaphore);

    fn unavailable() -> ForgeError {
        ForgeError::Unavailable {
            message: "gated".into(),
            retry_after: None,
        }
    }

    #[async_trait]
    impl Forge for Gated {
        async fn row_branches(
            &self,
            _: &RepoName,
            _: &BranchPrefix,
            _: &RowId,
        ) -> Result<Vec<BranchName>, ForgeError> {
            let _ = self.0.acquire().await;
            Err(unavailable())
        }
        async fn has_pull_request(&self, _: &RepoName, _: &BranchName) -> Result<bool, ForgeError> {
            Ok(false)
        }
        async fn base(&self, _: &RepoName) -> Result<Base, ForgeError> {
            Err(unavailable())
        }
        async fn claim(&self, _: &RepoName, _: &BranchName, _: &Sha) -> Result<Claim, ForgeError> {
            Err(unavailable())
        }
        async fn dispatch(&self, _: &RepoName, _: &EventType, _: &Value) -> Result<(), ForgeError> {
            Err(unavailable())
        }
        async fn release(&self, _: &RepoName, _: &BranchName, _: &Sha) -> Result<(), ForgeError> {
            Err(unavailable())
        }
        async fn prefix_branches(
            &self,
            _: &RepoName,
            _: &BranchPrefix,
        ) -> Result<Vec<Branch>, ForgeError> {
            Err(unavailable())
        }
        async fn pull_request_heads(
            &self,
            _: &RepoName,
            _: &BranchPrefix,
            _: chrono::DateTime<chrono::Utc>,
        ) -> Result<Vec<BranchName>, ForgeError> {
            Err(unavailable())
        }
        async fn ahead_by(
            &self,
            _: &RepoName,
            _: &Base,
            _: &BranchName,
        ) -> Result<u64, ForgeError> {
            Err(unavailable())
        }
    }

    /// The test route's plan of row `id` with `text_bytes` of text.
    fn plan(id: u64, text_bytes: usize) -> Plan {
        let record = json!({"id": id, "message": "x".repeat(text_bytes)}).to_string();
        let raw = RawValue::from_string(record).unwrap();
        test_routes()
            .iter()
            .next()
            .unwrap()
            .plan_json(&raw)
            .unwrap()
    }

    fn gated(bytes: usize) -> (Arc<Pipeline>, Arc<Gated>) {
        let forge = Arc::new(Gated(Semaphore::new(0)));
        let admission = Admission {
            capacity: 100,
            bytes,
            retry_after: Duration::from_secs(60),
            per_row: Duration::from_secs(2),
        };
        let pipeline = Pipeline::new(
            Arc::clone(&forge) as Arc<dyn Forge>,
            admission,
            Shutdown::default(),
            Arc::new(Metrics::default()),
        );
        (pipeline, forge)
    }

    #[tokio::test]
    async fn rows_are_admitted_by_what_they_hold_and_give_it_back_when_they_end() {
        let one = plan(1, 40_000).held_bytes();
        assert!(one > 40_000 + RUN_BYTES, "{one}");
        // Room for three such rows, not four.
        let (pipeline, forge) = gated(one * 3 + one / 2);
        for id in 1..=3 {
            pipeline.submit(plan(id, 40_000)).unwrap();
        }
        // A redelivery joins its row's run and costs nothing.
        assert!(pipeline.submit(plan(2, 40_000)).unwrap().joined);
        let full = pipeline.submit(plan(4, 40_000)).err().expect("refused");
        assert_eq!(full.reason(), Reason::QueueBytesFull);
        // Two seconds a row waiting.
        assert_eq!(full.retry_after(), Duration::from_secs(6));
        assert!(full.to_string().contains("queue_bytes"), "{full}");
        // A small row still fits.
        pipeline.submit(plan(5, 10)).unwrap();
        assert_eq!(pipeline.in_flight(), 4);
        assert_eq!(pipeline.held_bytes(), one * 3 + plan(5, 10).held_bytes());
        // The runs end: their bytes are free again.
        forge.0.add_permits(100);
        pipeline.drain().await;
        assert_eq!((pipeline.in_flight(), pipeline.held_bytes()), (0, 0));
    }

    #[tokio::test]
    async fn a_row_larger_than_the_bound_runs_when_none_waits() {
        let (pipeline, forge) = gated(1 << 10);
        pipeline.submit(plan(1, 40_000)).unwrap();
        let full = pipeline.submit(plan(2, 10)).err().expect("refused");
        assert_eq!(full.reason(), Reason::QueueBytesFull);
        // The sweep's way: it waits for room rather than be refused.
        let waiting = {
            let pipeline = Arc::clone(&pipeline);
            tokio::spawn(async move {
                let second = plan(2, 10);
                pipeline.room_for(&second, 0).await;
                pipeline.submit(second).is_ok()
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        forge.0.add_permits(1);
        assert!(waiting.await.unwrap(), "admitted once the first run ended");
        forge.0.add_permits(100);
        pipeline.drain().await;
    }
}
