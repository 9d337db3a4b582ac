//! The consumer: reads the queue, runs each message's row through the same pipeline as a
//! webhook's, and settles the message by how the run ended (`settle`): archived, dead-lettered,
//! or left for later. A message leaves the queue only when its work is settled; while a run is
//! under way its message stays hidden from other readers by a lease renewed every third of the
//! visibility timeout. Here: the read loop, the renewal loop, the samples, and [`Progress`],
//! what a drain watches; `handle` is one message's life and the statement that settles it,
//! what is held is in `queue::holds`, and the hourly budgets in `queue::budget`. How and why
//! this loses nothing is in docs/design.md ("The queue").

mod handle;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::budget::{Budgets, Spent};
use super::holds::{HoldId, Holds, Job};
use super::settle::Fate;
use crate::config::{PgmqSettings, Redacted};
use crate::db::queue::{self, Message};
use crate::db::status::RowState;
use crate::db::{self, Database, Link, Reachability};
use crate::identity::QueueName;
use crate::metrics::NO_ROUTE;
use crate::pipeline::{Ignored, Pipeline, Routes};
use crate::reason::Reason;
use crate::shutdown::Shutdown;
use crate::webhook::payload;

/// About how many bytes of messages one read may bring in, so that a queue of big rows is read
/// a few at a time.
const BATCH_BYTES: usize = 4 << 20;
/// The size a message is taken to have before any has been read: large, so that the first
/// read of a queue of big rows brings in a few of them, not a whole batch.
const FIRST_GUESS_BYTES: usize = 256 << 10;
/// How often the queues' depth and age are sampled for the metrics.
const SAMPLE_EVERY: Duration = Duration::from_secs(15);
/// How often archived messages past `archive_retention` are deleted.
const FORGET_EVERY: Duration = Duration::from_secs(3600);
/// The longest wait between attempts to reach the database.
const RECONNECT_CAP: Duration = Duration::from_secs(30);
/// The longest wait before looking again at an hourly budget that is spent: another process
/// may release what it held.
const SPENT_RECHECK: Duration = Duration::from_secs(30);
/// How much later than its lease a message over its budget is put off at least: so that it
/// is no lease, and does not count as held (`db::queue::hour_use`).
const PUT_OFF_MARGIN: Duration = Duration::from_secs(2);

/// What the consumer is built from.
pub struct ConsumerSettings {
    pub url: Redacted,
    pub pgmq: PgmqSettings,
    /// Rows accepted and not yet finished, at most (`queue_capacity`): held messages count.
    pub queue_capacity: usize,
    /// Rows this process can start within one visibility window, at its pace: no more are
    /// held at once, so that none waits for its turn past its lease.
    pub window_rows: usize,
    /// The hourly bounds on the rows that start, counted from the queue's archive.
    pub budgets: Budgets,
}

pub struct Consumer {
    settings: ConsumerSettings,
    routes: Arc<Routes>,
    pipeline: Arc<Pipeline>,
    shutdown: Shutdown,
    /// The one connection, made again when it ends.
    link: Link,
    /// Woken when a connection is made anew (by a renewal, say): the read loop, waiting out
    /// its backoff, makes the kept settles at once.
    reconnected: tokio::sync::Notify,
    /// The messages held: the consumer's state, behind one lock that no await holds.
    holds: Holds,
    handlers: TaskTracker,
    /// Cancelled once the loop has stopped reading: a release waits for it, so that no read
    /// still under way on the connection takes the message again (counting a read of it).
    reading_stopped: CancellationToken,
    /// What it has done and where its reading stands, for a drain.
    progress: Progress,
}

impl Consumer {
    pub fn new(
        settings: ConsumerSettings,
        routes: Arc<Routes>,
        pipeline: Arc<Pipeline>,
        shutdown: Shutdown,
        reachability: Arc<Reachability>,
    ) -> Arc<Consumer> {
        Arc::new(Consumer {
            // The read loop backs off by itself.
            link: Link::new(settings.url.clone(), Duration::ZERO, reachability),
            settings,
            routes,
            pipeline,
            shutdown,
            reconnected: tokio::sync::Notify::new(),
            holds: Holds::new(FIRST_GUESS_BYTES),
            handlers: TaskTracker::new(),
            reading_stopped: CancellationToken::new(),
            progress: Progress::default(),
        })
    }

    /// What it has done, and where its reading stands.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// How many messages the queue holds now, visible or not (a plain count, which reads none).
    pub async fn depth(&self) -> db::Result<i64> {
        let db = self.db().await?;
        queue::depth(db.client(), self.queue()).await
    }

    fn queue(&self) -> &QueueName {
        &self.settings.pgmq.queue
    }

    fn vt_seconds(&self) -> i32 {
        i32::try_from(self.settings.pgmq.visibility_timeout.as_secs()).unwrap_or(i32::MAX)
    }

    /// The connection, made when there is none (or it ended).
    async fn db(&self) -> db::Result<Arc<Database>> {
        let (database, again) = self.link.get().await?;
        if again {
            self.reconnected.notify_waiters();
            tracing::info!(
                queue = self.queue().as_str(),
                "connected to the database again"
            );
        }
        Ok(database)
    }

    /// Reads and runs the queue until the shutdown begins; then stops reading, lets the runs
    /// under way settle their messages within the grace, and releases the rest.
    pub async fn run(self: Arc<Self>) {
        tokio::spawn(Arc::clone(&self).renew_leases());
        let samples = tokio::spawn(Arc::clone(&self).sample());
        let mut failures = 0u32;
        while !self.shutdown.is_draining() {
            // A settle the database did not take is made as soon as it is back: at the latest
            // here, before the next read.
            self.settle_kept().await;
            let room = self.room();
            if room == 0 {
                self.wait(self.settings.pgmq.poll_interval).await;
                continue;
            }
            match self.read(room).await {
                Ok((messages, mut left)) => {
                    if failures > 0 {
                        tracing::info!(queue = self.queue().as_str(), "reading the queue again");
                    }
                    failures = 0;
                    let nothing_held = self.holds.count() == 0;
                    let poll = self.settings.pgmq.poll_interval;
                    if let Some(spent) = left.spent() {
                        let wait = spent.frees_in.unwrap_or(poll).clamp(poll, SPENT_RECHECK);
                        self.progress
                            .read(nothing_held.then_some(Idle::BudgetSpent(spent)));
                        self.wait(wait).await;
                    } else if messages.is_empty() {
                        self.progress.read(nothing_held.then_some(Idle::Drained));
                        self.wait(poll).await;
                    } else {
                        self.progress.read(None);
                        for message in messages {
                            self.take(message, &mut left);
                        }
                    }
                }
                Err(error) => {
                    failures += 1;
                    let wait = reconnect_wait(failures);
                    self.progress.database_failed(DatabaseTrouble {
                        message: error.to_string(),
                        code: error.code().map(|c| c.code().to_owned()),
                        attempts: failures,
                    });
                    // Said once, then again only now and then: an outage is one event.
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::warn!(queue = self.queue().as_str(), error = %error, attempts = failures,
                            retry_in_ms = wait.as_millis() as u64,
                            "cannot read the queue; the rows wait in it");
                    }
                    self.wait(wait).await;
                }
            }
        }
        // Stop reading; what was read and not started is released by its handler, now that no
        // read can take it again.
        self.reading_stopped.cancel();
        self.handlers.close();
        if let Some(deadline) = self.shutdown.deadline() {
            let _ = tokio::time::timeout_at(deadline, self.handlers.wait()).await;
        }
        // The last settles: those kept, and those the runs of the grace kept.
        self.settle_kept().await;
        samples.abort();
    }

    /// One read of at most `room` messages, and what the hourly budgets have left for them; when
    /// they have nothing left, no read (and [`Budgets::spent`] says which).
    async fn read(&self, room: usize) -> db::Result<(Vec<Message>, Budgets)> {
        let (db, budgets) = (self.db().await?, &self.settings.budgets);
        let read = async {
            let left = match budgets.any() {
                true => budgets
                    .left(&queue::hour_use(db.client(), self.queue(), self.vt_seconds()).await?),
                false => budgets.clone(),
            };
            let room = match left.rows() {
                Some(0) => return Ok((Vec::new(), left)),
                Some(rows) => room.min(usize::try_from(rows).unwrap_or(usize::MAX)),
                None => room,
            };
            let qty = i32::try_from(room).unwrap_or(i32::MAX);
            let messages = queue::read(db.client(), self.queue(), self.vt_seconds(), qty).await?;
            Ok((messages, left))
        };
        let read = read.await;
        if let Err(e) = &read {
            // A failed statement, unlike a failed connection, may leave a connection behind.
            self.link.failed(e).await;
        }
        read
    }

    /// Sleeps for `wait`, or less when a message is settled, the database is back, or the
    /// shutdown begins.
    async fn wait(&self, wait: Duration) {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = self.holds.freed() => {}
            () = self.reconnected.notified() => {}
            () = self.shutdown.begun() => {}
        }
    }

    /// How many messages to read now: within `batch`, within `queue_capacity` (held messages
    /// count, and rows from webhooks), within what this process can start in one visibility
    /// window, and within [`BATCH_BYTES`] and the bytes `queue_bytes` leaves free, at the size
    /// messages have had. A message read is held twice over while its row waits (its text, and
    /// its plan, which the pipeline counts), so it is reckoned at twice its size; when nothing
    /// is under way one is read whatever its size, as the pipeline admits one.
    fn room(&self) -> usize {
        let held = self.holds.count();
        let busy = held.max(self.pipeline.in_flight());
        let message = self.holds.average_bytes().max(1).saturating_mul(2);
        let bytes = BATCH_BYTES.min(self.pipeline.bytes_free());
        let by_bytes = match bytes / message {
            0 if busy == 0 => 1,
            n => n,
        };
        self.settings
            .pgmq
            .batch
            .min(self.settings.queue_capacity.saturating_sub(busy))
            .min(self.settings.window_rows.saturating_sub(held))
            .min(by_bytes)
    }

    /// Holds a message read and starts its handler; a message held already (read again after
    /// its lease lapsed, a database outage, say) is adopted, not run twice.
    fn take(self: &Arc<Self>, message: Message, left: &mut Budgets) {
        match self.holds.take(&message) {
            Some(token) => self.start(self.job(message, token, left)),
            None => tracing::info!(
                msg_id = message.id,
                read_ct = message.read_ct,
                "read again a message held already: adopted, not run twice"
            ),
        }
    }

    /// The message's body parsed once (the same typed event a webhook's body gives), its route
    /// found once, and its row planned; or its fate, when it needs no run. A new message whose
    /// route's hourly budget is spent is put off until a row of the budget comes back, and at
    /// least past a lease (only a queue shared by several routes reads such a message: with
    /// one, a read takes no more than the budget allows).
    fn job(&self, message: Message, token: HoldId, left: &mut Budgets) -> Job {
        let msg_id = message.id;
        let mut job = Job {
            message,
            token,
            route: NO_ROUTE.to_owned(),
            id: None,
            plan: Err(Fate::dead(Reason::NoRoute)),
        };
        let event = match payload::parse(job.message.body.as_bytes()) {
            Ok(event) => event,
            Err(e) => {
                tracing::error!(msg_id, error = %e, "a queue message is not a row's event");
                job.plan = Err(Fate::dead(Reason::Malformed));
                return job;
            }
        };
        let compiled = match self.routes.route(true, &event) {
            Ok(compiled) => compiled,
            Err(Ignored::Event { route, .. }) => {
                job.route = route.table_name();
                tracing::warn!(msg_id, route = %job.route, "a queue message of an event the route does not take");
                job.plan = Err(Fate::Ignored);
                return job;
            }
            // The trigger `init --run-when` writes sends only rows that pass as they pass; an
            // older trigger may send others, which the UPDATE that approves them sends again.
            Err(held @ (Ignored::NotReady { .. } | Ignored::PassedBefore { .. })) => {
                job.route = held.route().map(|r| r.table_name()).unwrap_or_default();
                tracing::info!(msg_id, route = %job.route, reason = %held.reason(), "{held}; archived");
                job.plan = Err(Fate::Ignored);
                return job;
            }
            Err(_) => return job,
        };
        job.route = compiled.route.table_name();
        job.plan = match left.admit(&event.schema, &event.table) {
            Err(spent) => {
                let least = self.settings.pgmq.visibility_timeout + PUT_OFF_MARGIN;
                let wait = spent.frees_in.unwrap_or(least).max(least);
                tracing::info!(msg_id, budget = %spent.setting, wait_s = wait.as_secs(),
                    "the hourly budget is spent: the message waits in the queue");
                Err(Fate::Later(wait))
            }
            Ok(()) => compiled.plan_json(&event.record).map_err(|e| {
                tracing::error!(msg_id, route = %job.route, error = %e, "a queue message's row cannot be planned");
                if let Some(id) = e.refused_id() {
                    self.pipeline.note(&compiled.route, id, RowState::Refused, false);
                }
                job.id = e.column_and_id().and_then(|(_, id)| id);
                Fate::dead(e.reason())
            }),
        };
        if let Ok(plan) = &job.plan {
            job.id = Some(plan.id.to_string());
        }
        job
    }

    /// Starts the handler of a held message. A handler that panics lets its hold go (the lease
    /// lapses, and the message is read again), so that it never holds a place for ever.
    fn start(self: &Arc<Self>, job: Job) {
        let this = Arc::clone(self);
        let (id, token) = (job.message.id, job.token);
        self.handlers.spawn(async move {
            let run = tokio::spawn(Arc::clone(&this).handle(job));
            if let Err(e) = run.await {
                tracing::error!(msg_id = id, error = %e, "a queue message's handler failed; the message is read again when its lease lapses");
                this.holds.unhold(id, token);
            }
        });
    }

    /// Renews every held message's lease every third of the visibility timeout, in one
    /// statement; a renewal that finds a message gone, or read again by another (another
    /// `read_ct`), marks it lost. Its messages stay marked from the list to the answer, so a
    /// settle of one of them waits for the answer rather than race it. It ends once the reading
    /// has stopped and every handler has ended, never in the middle of a renewal.
    async fn renew_leases(self: Arc<Self>) {
        let every = self.settings.pgmq.visibility_timeout / 3;
        loop {
            tokio::time::sleep(every).await;
            if self.handlers.is_closed() && self.handlers.is_empty() {
                return;
            }
            // Over when dropped, however this stops.
            let renewal = self.holds.begin_renewal();
            if renewal.leases.is_empty() {
                continue;
            }
            let Ok(db) = self.db().await else {
                continue;
            };
            let vt = self.vt_seconds();
            let renewed = queue::renew(db.client(), self.queue(), &renewal.leases, vt).await;
            match renewed {
                Ok(renewed) => renewal.answered(&renewed),
                Err(e) => {
                    drop(renewal);
                    self.link.failed(&e).await;
                }
            }
        }
    }

    /// Samples the queues' depth and age for the metrics, and deletes old archived messages.
    async fn sample(self: Arc<Self>) {
        let mut forgot: Option<Instant> = None;
        loop {
            if let Ok(db) = self.db().await {
                for name in [self.queue(), &self.settings.pgmq.dead_letter] {
                    if let Ok((depth, age)) = queue::metrics(db.client(), name).await {
                        self.pipeline
                            .metrics()
                            .pgmq_queue(name.as_str(), depth, age);
                    }
                }
                if forgot.is_none_or(|at| at.elapsed() >= FORGET_EVERY) && self.forget_old().await {
                    forgot = Some(Instant::now());
                }
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }

    /// Deletes the archived messages past `archive_retention`, from both archives (each holds
    /// whole rows: the queue's, and that of the dead letters redriven). A process that runs
    /// for a while does it hourly; a drain, once before it exits. Whether both went.
    pub async fn forget_old(&self) -> bool {
        let Ok(db) = self.db().await else {
            return false;
        };
        let retention = self.settings.pgmq.archive_retention.as_secs_f64();
        let mut all = true;
        for name in [self.queue(), &self.settings.pgmq.dead_letter] {
            match queue::forget_archived(db.client(), name, retention).await {
                Ok(gone) if gone > 0 => tracing::info!(
                    queue = name.as_str(),
                    messages = gone,
                    "deleted archived messages past archive_retention"
                ),
                Ok(_) => {}
                Err(e) => {
                    all = false;
                    tracing::warn!(queue = name.as_str(), error = %e, "could not delete old archived messages");
                }
            }
        }
        all
    }
}

// What the consumer has done and where its reading stands, for a run that ends once the queue
// is drained (`rowbranch drain`): the rows it dispatched, found handled and dead-lettered, and
// whether its last read found nothing while it held nothing, its hourly budget is spent, GitHub
// stopped it, or the database cannot be read. `serve` keeps reading whatever it says.

/// The messages settled so far, by what they count as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub dispatched: u64,
    pub duplicates: u64,
    pub dead_lettered: u64,
}

/// Where the reading stands, and what it has settled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Standing {
    /// Why the consumer has nothing to start now, once it has not; `None` while it reads.
    pub idle: Option<Idle>,
    /// The first run that GitHub (or the local forge) turned away past its retries: a rate
    /// limit, or the forge unreachable or refusing. Kept once seen.
    pub forge: Option<ForgeTrouble>,
    /// The last failure to read the queue, until a read succeeds again.
    pub database: Option<DatabaseTrouble>,
    /// Whether any read of the queue has succeeded.
    pub read_once: bool,
    pub counts: Counts,
}

/// Why nothing starts now.
#[derive(Debug, Clone, PartialEq)]
pub enum Idle {
    /// The last read found no visible message, and this process holds none.
    Drained,
    /// Every route's hourly budget is spent, and this process holds nothing.
    BudgetSpent(Spent),
}

/// A run the forge turned away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeTrouble {
    /// GitHub's rate limit (primary or secondary): rows wait for it to refill.
    pub rate_limited: bool,
    pub message: String,
}

/// A failed read of the queue (or of its budgets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseTrouble {
    pub message: String,
    /// The server's SQLSTATE, when it answered with an error.
    pub code: Option<String>,
    /// Failures in a row.
    pub attempts: u32,
}

/// The standing, shared by the consumer's tasks and whoever watches.
#[derive(Debug, Default)]
pub struct Progress(watch::Sender<Standing>);

impl Progress {
    /// The standing now and as it changes (a count alone wakes no watcher).
    pub fn watch(&self) -> watch::Receiver<Standing> {
        self.0.subscribe()
    }

    pub fn counts(&self) -> Counts {
        self.0.borrow().counts
    }

    /// Counts a message settled as `fate`: its row dispatched (or dispatched again) by this
    /// process, handled already (or another claimant's), or dead-lettered; an ignored event,
    /// a retry, a release or a lost lease counts for nothing.
    fn count(&self, fate: &Fate) {
        self.0.send_if_modified(|s| {
            match fate {
                Fate::Dispatched | Fate::Redispatched => s.counts.dispatched += 1,
                Fate::Handled => s.counts.duplicates += 1,
                Fate::DeadLetter { .. } => s.counts.dead_lettered += 1,
                _ => {}
            }
            false
        });
    }

    /// A read succeeded: `idle` says whether anything may start.
    fn read(&self, idle: Option<Idle>) {
        self.0.send_if_modified(|s| {
            let changed = s.idle != idle || s.database.is_some() || !s.read_once;
            s.idle = idle;
            s.database = None;
            s.read_once = true;
            changed
        });
    }

    fn database_failed(&self, trouble: DatabaseTrouble) {
        self.0.send_modify(|s| s.database = Some(trouble));
    }

    fn forge_failed(&self, trouble: ForgeTrouble) {
        self.0.send_if_modified(|s| {
            let first = s.forge.is_none();
            if first {
                s.forge = Some(trouble);
            }
            first
        });
    }
}

/// How long to wait before reaching for the database again after `failures` failures.
fn reconnect_wait(failures: u32) -> Duration {
    Duration::from_millis(500)
        .saturating_mul(1 << failures.min(6))
        .min(RECONNECT_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnecting_backs_off_to_a_cap() {
        assert_eq!(reconnect_wait(1), Duration::from_secs(1));
        assert_eq!(reconnect_wait(2), Duration::from_secs(2));
        assert_eq!(reconnect_wait(40), RECONNECT_CAP);
    }

    #[test]
    fn each_settle_counts_as_the_summary_says() {
        let progress = Progress::default();
        for fate in [
            Fate::Dispatched,
            Fate::Redispatched,
            Fate::Handled,
            Fate::dead(Reason::BadId),
            Fate::Ignored,
            Fate::Later(Duration::from_secs(5)),
            Fate::Release,
            Fate::LeaseLost,
        ] {
            progress.count(&fate);
        }
        assert_eq!(
            progress.counts(),
            Counts {
                dispatched: 2,
                duplicates: 1,
                dead_lettered: 1
            }
        );
    }
}
