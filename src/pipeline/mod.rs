//! The pipeline: a pure plan of what a row needs ([`Routes::route`], then
//! [`CompiledRoute::plan_json`]), one executor that does it, and [`Pipeline`], its one door:
//! [`Pipeline::submit`] runs rows in the background with one run per row at a time, admits at
//! most `queue_capacity` rows at once holding at most `queue_bytes` between them, and knows
//! which rows are left when the shutdown's grace runs out. The webhook, the queue, the sweep,
//! `redo` and `demo` all come in through it.

mod execute;
mod plan;
pub mod template;

pub use execute::{at_base, Outcome, RunError, Start, ALREADY_RAN};
pub use plan::{id_text, CompiledRoute, Ignored, Plan, PlanError, RouteError, Routes, RUN_BYTES};

#[cfg(test)]
pub(crate) use plan::test_routes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use scopeguard::guard;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use execute::{execute, Claimed};

use crate::config::{ForgeSettings, Intake, Route};
use crate::db::status::{RowState, StatusWrite, StatusWriter};
use crate::forge::Forge;
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
    /// row holds a permit of what its plan keeps ([`Plan::held_bytes`]) and what its caller
    /// keeps beside it. A row larger than the whole bound takes all of it: it runs when none
    /// waits.
    pub bytes: usize,
    /// About how long `capacity` rows take to drain: what a sender refused for their count is
    /// asked to wait.
    pub retry_after: Duration,
    /// About how long one row takes to drain: a sender refused for the bytes is asked to wait
    /// that long for each row waiting (at least 1 s, at most `retry_after`).
    pub per_row: Duration,
}

impl Admission {
    /// How many rows wait at most, what they may hold, and how long a sender refused beyond that
    /// is asked to wait: about as long as the rows admitted take to drain at the pace.
    pub fn for_forge(settings: &ForgeSettings) -> Admission {
        let capacity = settings.queue_capacity();
        let (retry_after, per_row) = match settings {
            ForgeSettings::Github(github) => (
                github
                    .pace
                    .interval
                    .saturating_mul(u32::try_from(capacity).unwrap_or(u32::MAX))
                    .clamp(Duration::from_secs(1), Duration::from_secs(3600)),
                github.pace.interval,
            ),
            ForgeSettings::Local(_) => (Duration::from_secs(10), Duration::ZERO),
        };
        Admission {
            capacity,
            bytes: settings.queue_bytes(),
            retry_after,
            per_row,
        }
    }
}

/// Runs rows on a forge. Runs are spawned, so they finish even when every caller has gone.
pub struct Pipeline {
    forge: Arc<dyn Forge>,
    /// Runs under way, so that concurrent deliveries of a row share one (single flight).
    runs: Mutex<HashMap<RowKey, Entry>>,
    /// `queue_capacity` permits: a run holds one from its admission to its end.
    rows: Arc<Semaphore>,
    /// `queue_bytes` permits, one a byte: a run holds its row's size from its admission to its
    /// end.
    bytes: Arc<Semaphore>,
    tasks: TaskTracker,
    admission: Admission,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
    /// Where the rows' states go, for routes that write them back.
    statuses: Option<StatusWriter>,
}

struct Entry {
    run: Run,
    claimed: Arc<Claimed>,
    /// Its place among `queue_capacity` rows and its bytes, given back when the run ends.
    _room: Room,
}

/// A row's place in the pipeline: one of the rows, and its bytes.
type Room = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// A delivery's place in a run.
pub struct Submission {
    /// True when the run was already under way: this delivery did not start it.
    pub joined: bool,
    pub run: Run,
}

/// The pipeline is full: `queue_capacity` rows are admitted and not yet finished
/// (`queue_full`), or the rows admitted hold so many bytes that this one would take them past
/// `queue_bytes` (`queue_bytes_full`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Full {
    /// Why, as answers and log lines name it.
    pub reason: Reason,
    message: String,
    /// How long a sender is asked to wait.
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
                    reason: Reason::InFlight,
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
        statuses: Option<StatusWriter>,
    ) -> Arc<Pipeline> {
        Arc::new(Pipeline {
            forge,
            runs: Mutex::new(HashMap::new()),
            rows: Arc::new(Semaphore::new(bound(admission.capacity))),
            bytes: Arc::new(Semaphore::new(bound(admission.bytes))),
            tasks: TaskTracker::new(),
            admission,
            shutdown,
            metrics,
            statuses,
        })
    }

    /// Writes `state` into row `id` of `route`, when the route writes its rows' states back
    /// (SPEC §2, `status_column`); `anew` (a redo) writes it over any state. It never waits:
    /// a state that cannot be written is counted and logged.
    pub fn note(&self, route: &Arc<Route>, id: &str, state: RowState, anew: bool) {
        self.write_state(StatusWrite {
            route: Arc::clone(route),
            id: id.to_owned(),
            state,
            pull_request: None,
            anew,
            reopens: true,
        });
    }

    /// Hands `write` to the status writer, when its route writes its rows' states back.
    pub fn write_state(&self, write: StatusWrite) {
        if let Some(statuses) = self.statuses.as_ref().filter(|_| write.route.writes_back()) {
            statuses.send(write);
        }
    }

    pub fn forge(&self) -> &Arc<dyn Forge> {
        &self.forge
    }

    /// Where the runs, and everything built on this pipeline, count.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<RowKey, Entry>> {
        self.runs.lock().expect("runs lock poisoned")
    }

    /// Rows admitted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.runs().len()
    }

    /// What the rows admitted and not yet finished hold, in bytes, as counted at admission.
    pub fn held_bytes(&self) -> usize {
        bound(self.admission.bytes) - self.bytes.available_permits()
    }

    /// How many more bytes rows may hold before `queue_bytes` refuses the next one.
    pub fn bytes_free(&self) -> usize {
        self.bytes.available_permits()
    }

    /// The permits a row of `bytes` takes: at most the whole bound.
    fn permits(&self, bytes: usize) -> u32 {
        bytes.min(bound(self.admission.bytes)) as u32
    }

    /// Starts a run of `plan` as `start` says, or joins the one under way for the same row. A
    /// new row beyond `queue_capacity`, or one whose bytes would take the rows waiting past
    /// `queue_bytes`, is refused, with the `Retry-After` SPEC §3 gives. `beside` is what the
    /// caller keeps of its own for as long as the run goes on (the queue's consumer keeps the
    /// message, and a copy of the plan): it counts against `queue_bytes` with the plan's own.
    pub fn submit(
        self: &Arc<Self>,
        plan: Plan,
        start: Start,
        beside: usize,
    ) -> Result<Submission, Full> {
        let bytes = plan.held_bytes().saturating_add(beside);
        // Held until the run is registered, so that a redelivery finds it.
        let mut runs = self.runs();
        if let Some(joined) = joined(&runs, &plan) {
            return Ok(joined);
        }
        let Ok(row) = Arc::clone(&self.rows).try_acquire_owned() else {
            return Err(Full {
                reason: Reason::QueueFull,
                message: format!(
                    "{} rows are waiting already (queue_capacity)",
                    self.admission.capacity
                ),
                retry_after: self.admission.retry_after,
            });
        };
        let Ok(held) = Arc::clone(&self.bytes).try_acquire_many_owned(self.permits(bytes)) else {
            let rows = runs.len();
            let drain = self
                .admission
                .per_row
                .saturating_mul(u32::try_from(rows).unwrap_or(u32::MAX));
            return Err(Full {
                reason: Reason::QueueBytesFull,
                message: format!(
                    "the {rows} rows waiting hold {} bytes already, and this row's {bytes} more \
                     would pass queue_bytes ({})",
                    self.held_bytes(),
                    self.admission.bytes
                ),
                retry_after: drain.clamp(
                    Duration::from_secs(1),
                    self.admission.retry_after.max(Duration::from_secs(1)),
                ),
            });
        };
        Ok(self.start(&mut runs, plan, start, (row, held)))
    }

    /// [`Pipeline::submit`] for a caller with no sender to answer 503 to, which waits its turn
    /// instead (the sweep: it is what brings back the rows a full pipeline refused).
    pub async fn submit_waiting(self: &Arc<Self>, plan: Plan, start: Start) -> Submission {
        let bytes = self.permits(plan.held_bytes());
        let room = async {
            let row = Arc::clone(&self.rows).acquire_owned().await?;
            let bytes = Arc::clone(&self.bytes).acquire_many_owned(bytes).await?;
            Ok::<_, tokio::sync::AcquireError>((row, bytes))
        };
        let room = room
            .await
            .expect("the pipeline's semaphores are never closed");
        let mut runs = self.runs();
        match joined(&runs, &plan) {
            Some(joined) => joined,
            None => self.start(&mut runs, plan, start, room),
        }
    }

    /// Spawns the run of an admitted row and registers it.
    fn start(
        self: &Arc<Self>,
        runs: &mut HashMap<RowKey, Entry>,
        plan: Plan,
        start: Start,
        room: Room,
    ) -> Submission {
        let key = key(&plan);
        let claimed = Arc::new(Claimed::default());
        let this = Arc::clone(self);
        let done_key = key.clone();
        let run_claimed = Arc::clone(&claimed);
        let span = tracing::info_span!("run", id = %plan.id, branch = %plan.branch, repo = %plan.route.repo);
        let task = self.tasks.spawn(
            async move {
                let (started, route) = (Instant::now(), plan.route.table_name());
                // Counted and unregistered however the run ends, so a run that panics does not
                // stay "under way" forever, and is counted as `failed_internal`. Its entry's
                // room goes with it: its place and its bytes are free again.
                let mut ended = guard(RunResult::FailedInternal, |ended| {
                    let metrics = &this.metrics;
                    metrics.run_ended(&route, ended, started.elapsed());
                    if let Ok(mut runs) = this.runs.lock() {
                        runs.remove(&done_key);
                        metrics.runs_in_flight(runs.len());
                    }
                });
                let anew = matches!(start, Start::Redo);
                let result =
                    execute(this.forge.as_ref(), &plan, start, &this.shutdown, &run_claimed).await;
                let took = started.elapsed().as_millis() as u64;
                *ended = run_result(&result);
                if let Ok(Outcome::Dispatched { .. }) = &result {
                    this.note(&plan.route, plan.id.as_str(), RowState::Dispatched, anew);
                }
                match &result {
                    Err(RunError::Abandoned) => tracing::error!(
                        "abandoned at shutdown before its claim; a redelivery or the sweep will run the row"
                    ),
                    // The one log line for a failed run, whatever its retries were; every
                    // delivery that awaited it gets its answer.
                    Err(e) => tracing::error!(result = ended.as_str(), error = %e,
                        next = %next_step(&plan, e), duration_ms = took, "the row's run failed"),
                    Ok(_) => tracing::info!(result = ended.as_str(), duration_ms = took,
                        "the row's run ended"),
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
                claimed,
                _room: room,
            },
        );
        self.metrics.runs_in_flight(runs.len());
        Submission { joined: false, run }
    }

    /// Waits for every run under way; new runs can no longer be tracked after this.
    pub async fn drain(&self) {
        self.tasks.close();
        self.tasks.wait().await;
        if let Some(statuses) = &self.statuses {
            statuses.finish().await;
        }
    }

    /// Logs each run still under way, at error level with its id (and, for a claim left open,
    /// its branch), for when the process stops before they end.
    pub fn report_unfinished(&self) -> usize {
        let runs = self.runs();
        for ((repo, _, id), entry) in runs.iter() {
            match entry.claimed.lock().expect("claim lock poisoned").clone() {
                Some(branch) => tracing::error!(%id, %branch, %repo,
                    "stopped with the claim open and no dispatch; the sweep re-dispatches it as a dead claim"),
                None => tracing::error!(%id, %repo,
                    "stopped before the row was claimed; a redelivery or the sweep will run it"),
            }
        }
        runs.len()
    }
}

/// A semaphore's permits for `n`: at least one, at most what a semaphore holds.
fn bound(n: usize) -> usize {
    n.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize))
}

fn key(plan: &Plan) -> RowKey {
    (
        plan.route.repo.clone(),
        plan.route.branch_prefix.clone(),
        plan.id.clone(),
    )
}

/// The run under way of `plan`'s row, joined.
fn joined(runs: &HashMap<RowKey, Entry>, plan: &Plan) -> Option<Submission> {
    runs.get(&key(plan)).map(|entry| Submission {
        joined: true,
        run: entry.run.clone(),
    })
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

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::value::RawValue;
    use serde_json::{json, Value};
    use tokio::sync::Semaphore;

    use super::*;
    use crate::forge::{Base, Branch, Claim, ForgeError, Listing, PullRequest, Sha};
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
        async fn pull_requests(
            &self,
            _: &RepoName,
            _: &BranchPrefix,
            _: chrono::DateTime<chrono::Utc>,
        ) -> Result<Listing<PullRequest>, ForgeError> {
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
            None,
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
            pipeline.submit(plan(id, 40_000), Start::New, 0).unwrap();
        }
        // A redelivery joins its row's run and costs nothing.
        assert!(
            pipeline
                .submit(plan(2, 40_000), Start::New, 0)
                .unwrap()
                .joined
        );
        let full = pipeline
            .submit(plan(4, 40_000), Start::New, 0)
            .err()
            .expect("refused");
        assert_eq!(full.reason, Reason::QueueBytesFull);
        // Two seconds a row waiting.
        assert_eq!(full.retry_after, Duration::from_secs(6));
        assert!(full.to_string().contains("queue_bytes"), "{full}");
        // A small row still fits.
        pipeline.submit(plan(5, 10), Start::New, 0).unwrap();
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
        pipeline.submit(plan(1, 40_000), Start::New, 0).unwrap();
        let full = pipeline
            .submit(plan(2, 10), Start::New, 0)
            .err()
            .expect("refused");
        assert_eq!(full.reason, Reason::QueueBytesFull);
        // The sweep's way: it waits for room rather than be refused.
        let waiting = {
            let pipeline = Arc::clone(&pipeline);
            tokio::spawn(async move {
                !pipeline
                    .submit_waiting(plan(2, 10), Start::New)
                    .await
                    .joined
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
