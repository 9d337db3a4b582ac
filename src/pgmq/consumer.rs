//! The consumer: reads the queue, runs each message's row through the same pipeline as a
//! webhook's, and settles the message by how the run ended (`settle`): archived, dead-lettered,
//! or left for later. A message leaves the queue only when its work is settled; while a run is
//! under way its message stays hidden from other readers by a lease renewed every third of the
//! visibility timeout. How and why this loses nothing is in docs/design.md ("The queue").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;

use super::queue::{self, Message};
use super::settle::{settle, RunEnd, Settle};
use crate::config::{DatabaseUrl, Intake, PgmqSettings};
use crate::forge::ForgeError;
use crate::metrics::NO_ROUTE;
use crate::pipeline::{
    DuplicateReason, Ignored, Outcome, Pipeline, Plan, Planned, Routes, RunError,
};
use crate::rows::{describe, Reachability, Rows};
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

/// What the consumer is built from.
pub struct ConsumerSettings {
    pub url: DatabaseUrl,
    pub pgmq: PgmqSettings,
    /// Rows accepted and not yet finished, at most (`queue_capacity`): held messages count.
    pub queue_capacity: usize,
    /// Rows this process can start within one visibility window, at its pace: no more are
    /// held at once, so that none waits for its turn past its lease.
    pub window_rows: usize,
}

/// A message this process holds.
struct Held {
    /// Which hold this is: a message released and read again is a new hold, with a new token,
    /// while one read again during its run (adopted) keeps its token.
    token: u64,
    read_ct: i32,
    /// Its lease was found lost: another reader holds it, or it is gone.
    lost: bool,
    /// Its final statement is being made: the lease is renewed by it, not by the loop.
    settling: bool,
}

/// A settle the database did not take (the connection went): made again after reconnecting.
#[derive(Clone)]
struct Unsettled {
    id: i64,
    /// The read it is settled under: checked (and renewed) before the statement, so a
    /// message another reader took meanwhile is left to it.
    read_ct: i32,
    route: String,
    /// `None`: archive; `Some`: dead-letter with this letter.
    letter: Option<String>,
    /// What it counts as once made: `archived`, `redispatched` or `dead`.
    result: &'static str,
}

/// Where a settle stands when it begins.
enum Begin {
    /// The hold is gone (its handler panicked and let it go): nothing to settle.
    Gone,
    /// The message was read again by this process since the decision, under this `read_ct`.
    ReadAgain(i32),
    /// Settle it; `lost`: its lease was found lost.
    Settle { lost: bool },
}

/// The statement that settles a message, once any dispatch again has been made.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Statement {
    /// Archived, counting as this result (`archived`, `redispatched`).
    Archive(&'static str),
    DeadLetter(&'static str),
    /// Visible again after this long (whole seconds: pgmq's visibility is in seconds).
    Retry(Duration),
    /// Visible again at once.
    Release,
}

impl Statement {
    /// Whether it makes the message visible to other readers.
    fn lets_go(&self) -> bool {
        matches!(self, Statement::Retry(_) | Statement::Release)
    }
}

pub struct Consumer {
    settings: ConsumerSettings,
    routes: Arc<Routes>,
    pipeline: Arc<Pipeline>,
    shutdown: Shutdown,
    reachability: Arc<Reachability>,
    db: tokio::sync::Mutex<Option<Arc<Rows>>>,
    held: Mutex<HashMap<i64, Held>>,
    /// Taken shared by a settle from its start to the end of its statement, and alone by the
    /// renewal loop from the list it renews to the answer: so a renewal never lands after a
    /// retry's or a release's statement and hides the message again for a whole lease.
    leases: tokio::sync::RwLock<()>,
    /// The next hold's token.
    holds: AtomicU64,
    unsettled: Mutex<Vec<Unsettled>>,
    /// Woken when a held message is settled: there may be room to read again.
    freed: Notify,
    /// A running estimate of a message's size, for sizing reads by bytes.
    average_bytes: AtomicUsize,
    /// Connections opened so far: any after the first is a reconnection.
    connections: AtomicUsize,
    handlers: TaskTracker,
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
            settings,
            routes,
            pipeline,
            shutdown,
            reachability,
            db: tokio::sync::Mutex::new(None),
            held: Mutex::new(HashMap::new()),
            leases: tokio::sync::RwLock::new(()),
            holds: AtomicU64::new(0),
            unsettled: Mutex::new(Vec::new()),
            freed: Notify::new(),
            average_bytes: AtomicUsize::new(FIRST_GUESS_BYTES),
            connections: AtomicUsize::new(0),
            handlers: TaskTracker::new(),
        })
    }

    fn queue(&self) -> &str {
        &self.settings.pgmq.queue
    }

    fn vt_seconds(&self) -> i32 {
        i32::try_from(self.settings.pgmq.visibility_timeout.as_secs()).unwrap_or(i32::MAX)
    }

    /// The connection, made when there is none (or it ended).
    async fn db(&self) -> anyhow::Result<Arc<Rows>> {
        let mut db = self.db.lock().await;
        if let Some(rows) = db.as_ref().filter(|rows| !rows.is_closed()) {
            return Ok(Arc::clone(rows));
        }
        *db = None;
        match Rows::connect(self.settings.url.expose()).await {
            Ok(rows) => {
                let rows = Arc::new(rows);
                *db = Some(Arc::clone(&rows));
                self.reachability.set(Ok(()));
                if self.connections.fetch_add(1, Ordering::Relaxed) > 0 {
                    tracing::info!(queue = self.queue(), "connected to the database again");
                }
                Ok(rows)
            }
            Err(e) => {
                self.reachability.set(Err(format!("{e:#}")));
                Err(e)
            }
        }
    }

    /// Forgets the connection after a failed statement, if the connection is what failed.
    async fn failed(&self, e: &tokio_postgres::Error) {
        let mut db = self.db.lock().await;
        if db.as_ref().is_some_and(|rows| rows.is_closed()) || e.is_closed() {
            *db = None;
            self.reachability
                .set(Err(format!("the database connection ended: {e}")));
        }
    }

    /// Reads and runs the queue until the shutdown begins; then stops reading, lets the runs
    /// under way settle their messages within the grace, and releases the rest.
    pub async fn run(self: Arc<Self>) {
        let renewals = tokio::spawn(Arc::clone(&self).renew_leases());
        let samples = tokio::spawn(Arc::clone(&self).sample());
        let mut failures = 0u32;
        while !self.shutdown.is_draining() {
            let room = self.room();
            if room == 0 {
                self.wait(self.settings.pgmq.poll_interval).await;
                continue;
            }
            let read = match self.db().await {
                Ok(db) => {
                    self.settle_unsettled(&db).await;
                    let qty = i32::try_from(room).unwrap_or(i32::MAX);
                    queue::read(db.client(), self.queue(), self.vt_seconds(), qty)
                        .await
                        .map_err(|e| (Some(e), String::new()))
                }
                Err(e) => Err((None, format!("{e:#}"))),
            };
            match read {
                Ok(messages) => {
                    if failures > 0 {
                        tracing::info!(queue = self.queue(), "reading the queue again");
                    }
                    failures = 0;
                    if messages.is_empty() {
                        self.wait(self.settings.pgmq.poll_interval).await;
                    }
                    for message in messages {
                        self.take(message);
                    }
                }
                Err((error, detail)) => {
                    if let Some(e) = &error {
                        self.failed(e).await;
                    }
                    failures += 1;
                    let wait = reconnect_wait(failures);
                    let detail = error.map_or(detail, |e| e.to_string());
                    // Said once, then again only now and then: an outage is one event.
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::warn!(queue = self.queue(), error = %detail, attempts = failures,
                            retry_in_ms = wait.as_millis() as u64,
                            "cannot read the queue; the rows wait in it");
                    }
                    self.wait(wait).await;
                }
            }
        }
        // Stop reading; what was read and not started is released by its handler.
        self.handlers.close();
        if let Some(deadline) = self.shutdown.deadline() {
            let _ = tokio::time::timeout_at(deadline, self.handlers.wait()).await;
        }
        if let Ok(db) = self.db().await {
            self.settle_unsettled(&db).await;
        }
        renewals.abort();
        samples.abort();
    }

    /// Sleeps for `wait`, or less when a message is settled or the shutdown begins.
    async fn wait(&self, wait: Duration) {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = self.freed.notified() => {}
            () = self.shutdown.begun() => {}
        }
    }

    /// How many messages to read now: within `batch`, within `queue_capacity` (held messages
    /// count, and rows from webhooks), within what this process can start in one visibility
    /// window, and within [`BATCH_BYTES`] at the size messages have had.
    fn room(&self) -> usize {
        let held = self.held.lock().expect("held lock poisoned").len();
        let busy = held.max(self.pipeline.in_flight());
        let by_bytes = (BATCH_BYTES / self.average_bytes.load(Ordering::Relaxed).max(1)).max(1);
        self.settings
            .pgmq
            .batch
            .min(self.settings.queue_capacity.saturating_sub(busy))
            .min(self.settings.window_rows.saturating_sub(held))
            .min(by_bytes)
    }

    /// Holds a message read and starts its handler; a message held already (read again after
    /// its lease lapsed, a database outage, say) is adopted, not run twice.
    fn take(self: &Arc<Self>, message: Message) {
        let size = message.body.len();
        let average = self.average_bytes.load(Ordering::Relaxed);
        self.average_bytes
            .store((average * 7 + size) / 8 + 1, Ordering::Relaxed);
        {
            let mut unsettled = self.unsettled.lock().expect("unsettled lock poisoned");
            if let Some(item) = unsettled.iter_mut().find(|u| u.id == message.id) {
                // Its work is done; only its archive waits for the database, now under this
                // read.
                item.read_ct = message.read_ct;
                return;
            }
        }
        let token = {
            let mut held = self.held.lock().expect("held lock poisoned");
            if let Some(known) = held.get_mut(&message.id) {
                tracing::info!(
                    msg_id = message.id,
                    read_ct = message.read_ct,
                    "read again a message held already: adopted, not run twice"
                );
                known.read_ct = message.read_ct;
                known.lost = false;
                return;
            }
            let token = self.holds.fetch_add(1, Ordering::Relaxed);
            held.insert(
                message.id,
                Held {
                    token,
                    read_ct: message.read_ct,
                    lost: false,
                    settling: false,
                },
            );
            token
        };
        self.start(message, token);
    }

    /// Starts the handler of a held message. A handler that panics lets its hold go (the lease
    /// lapses, and the message is read again), so that it never holds a place for ever.
    fn start(self: &Arc<Self>, message: Message, token: u64) {
        let this = Arc::clone(self);
        let id = message.id;
        self.handlers.spawn(async move {
            let run = tokio::spawn(Arc::clone(&this).handle(message, token));
            if let Err(e) = run.await {
                tracing::error!(msg_id = id, error = %e, "a queue message's handler failed; the message is read again when its lease lapses");
                this.unhold(id, token);
                this.freed.notify_waiters();
            }
        });
    }

    /// Forgets hold `token` of message `id`; a newer hold of it is left alone.
    fn unhold(&self, id: i64, token: u64) {
        let mut held = self.held.lock().expect("held lock poisoned");
        if held.get(&id).is_some_and(|h| h.token == token) {
            held.remove(&id);
        }
    }

    /// Runs one message's row and settles the message.
    async fn handle(self: Arc<Self>, message: Message, token: u64) {
        let (route, row_id, end, plan) = self.run_row(&message).await;
        let pgmq = &self.settings.pgmq;
        let backoff =
            |read_ct| super::settle::backoff(read_ct, pgmq.backoff_base, pgmq.backoff_cap);
        let Some((read_ct, lost)) = self.hold_state(message.id, token) else {
            return;
        };
        // `None`: another reader holds the message now; the dispatch again is its to make.
        let statement = match settle(&end, read_ct, pgmq.backoff_base, pgmq.backoff_cap) {
            Settle::Archive => Some(Statement::Archive("archived")),
            Settle::DeadLetter(reason) => Some(Statement::DeadLetter(reason)),
            Settle::Retry(after) => Some(Statement::Retry(after)),
            Settle::Release => Some(Statement::Release),
            Settle::Redispatch if lost => None,
            // Made while the loop still renews the lease; then the archive checks it once more.
            Settle::Redispatch => Some(match self.redispatch(plan, &message).await {
                Ok(()) => Statement::Archive("redispatched"),
                Err(e) => {
                    tracing::warn!(msg_id = message.id, error = %e, "could not dispatch the row again; the message is tried again later");
                    Statement::Retry(backoff(read_ct))
                }
            }),
        };
        let lets_go = statement.as_ref().is_some_and(Statement::lets_go);
        let leases = self.leases.read().await;
        let lost = match self.begin_settle(message.id, token, read_ct, lets_go) {
            Begin::Gone => {
                self.freed.notify_waiters();
                return;
            }
            Begin::ReadAgain(read_ct) => {
                drop(leases);
                // Read again by this process while its run went on, after the decision: the
                // decision is made again on a run of the new read.
                self.rerun(&message, read_ct);
                return;
            }
            Begin::Settle { lost } => lost,
        };
        let (result, dead_letter) = match &statement {
            Some(statement) => self.apply(&message, read_ct, lost, statement, &route).await,
            None => ("lease_lost", None),
        };
        drop(leases);
        self.settled(&message, token, read_ct);
        if result == "deferred" {
            tracing::warn!(msg_id = message.id, %route, "a queue message's settle waits for the database");
            return;
        }
        self.pipeline.metrics().pgmq_message(&route, result);
        let reason = match &statement {
            Some(Statement::DeadLetter(reason)) => reason,
            _ => "",
        };
        let id = row_id.as_deref().unwrap_or("");
        match result {
            "dead" => tracing::error!(msg_id = message.id, read_ct, %route, id, reason,
                dead_letter_id = dead_letter,
                "queue message dead-lettered: `rowbranch queue redrive --id <dead_letter_id>` brings it back"),
            "lease_lost" => tracing::warn!(msg_id = message.id, read_ct, %route, id,
                "queue message's lease was lost: another reader settles it"),
            _ => tracing::info!(msg_id = message.id, read_ct, %route, id, result, ?end,
                "queue message"),
        }
    }

    /// The hold's `read_ct` now (an adoption may have raised it) and whether its lease was
    /// found lost; `None` when the hold is gone.
    fn hold_state(&self, id: i64, token: u64) -> Option<(i32, bool)> {
        let held = self.held.lock().expect("held lock poisoned");
        held.get(&id)
            .filter(|h| h.token == token)
            .map(|h| (h.read_ct, h.lost))
    }

    /// Begins the hold's settle, decided on read `read_ct`: marks it settling (its statement
    /// renews its lease, not the loop), and lets it go at once when the statement makes the
    /// message visible again (`lets_go`: a read of it after that is a new hold). One step
    /// under the lock, so that no read of the message falls between the check and the change.
    fn begin_settle(&self, id: i64, token: u64, read_ct: i32, lets_go: bool) -> Begin {
        let mut held = self.held.lock().expect("held lock poisoned");
        let Some(entry) = held.get_mut(&id).filter(|h| h.token == token) else {
            return Begin::Gone;
        };
        if entry.read_ct != read_ct {
            return Begin::ReadAgain(entry.read_ct);
        }
        entry.settling = true;
        let lost = entry.lost;
        if lets_go {
            held.remove(&id);
        }
        Begin::Settle { lost }
    }

    /// The hold's end, after its statement. A message read again while that statement was being
    /// made (its lease lapsed meanwhile) is held by this process under the new read with no
    /// handler: it is run again, which finds its row handled or dispatches it.
    fn settled(self: &Arc<Self>, message: &Message, token: u64, settled_read: i32) {
        let again = {
            let mut held = self.held.lock().expect("held lock poisoned");
            match held.get(&message.id) {
                Some(h) if h.token == token && h.read_ct != settled_read => Some(h.read_ct),
                Some(h) if h.token == token => {
                    held.remove(&message.id);
                    None
                }
                _ => None,
            }
        };
        self.freed.notify_waiters();
        if let Some(read_ct) = again {
            self.rerun(message, read_ct);
        }
    }

    /// Runs a held message again, under its new read and a new token (so that nothing the
    /// earlier handler does to its own hold reaches this one).
    fn rerun(self: &Arc<Self>, message: &Message, read_ct: i32) {
        let token = self.holds.fetch_add(1, Ordering::Relaxed);
        {
            let mut held = self.held.lock().expect("held lock poisoned");
            let Some(entry) = held.get_mut(&message.id) else {
                return;
            };
            entry.token = token;
            entry.read_ct = read_ct;
            entry.settling = false;
            entry.lost = false;
        }
        let message = Message {
            read_ct,
            ..message.clone()
        };
        self.start(message, token);
    }

    /// Parses and plans the message as a webhook body, runs the row, and says how the run
    /// ended; also the route's name, the row's id and the plan (for a dispatch again).
    async fn run_row(&self, message: &Message) -> (String, Option<String>, RunEnd, Option<Plan>) {
        let event = match payload::parse(message.body.as_bytes()) {
            Ok(event) => event,
            Err(e) => {
                tracing::error!(msg_id = message.id, error = %e, "a queue message is not a row's event");
                return (NO_ROUTE.into(), None, RunEnd::Refused("malformed"), None);
            }
        };
        let route = self
            .routes
            .find(&event.schema, &event.table)
            .filter(|r| r.route.intake == Intake::Pgmq)
            .map_or_else(|| NO_ROUTE.to_owned(), |r| r.route.table_name());
        let plan = match self.routes.plan_from(Intake::Pgmq, event) {
            Ok(Planned::Run(plan)) => plan,
            Ok(Planned::Ignored(Ignored::Event { .. })) => {
                tracing::warn!(msg_id = message.id, %route, "a queue message of an event the route does not take");
                return (route, None, RunEnd::IgnoredEvent, None);
            }
            Ok(Planned::Ignored(_)) => return (route, None, RunEnd::NoRoute, None),
            Err(e) => {
                tracing::error!(msg_id = message.id, %route, error = %e, "a queue message's row cannot be planned");
                return (route, e.row_id(), RunEnd::Refused(e.reason().as_str()), None);
            }
        };
        let id = Some(plan.id.to_string());
        if self.shutdown.is_draining() {
            return (route, id, RunEnd::NotStarted, None);
        }
        let Ok(submission) = self.pipeline.submit(plan.clone()) else {
            return (route, id, RunEnd::Retry(None), None);
        };
        // The run's own result, not a joined delivery's `in_flight`: what it says decides.
        let end = match submission.run.await {
            Ok(Outcome::Dispatched { .. }) => RunEnd::Dispatched,
            Ok(Outcome::Duplicate {
                reason: DuplicateReason::PullRequest,
                ..
            }) => RunEnd::Handled,
            Ok(Outcome::Duplicate {
                reason: DuplicateReason::ClaimTaken | DuplicateReason::InFlight,
                branch,
            }) => return (route, id, RunEnd::AtBase, Some(plan.on_branch(branch))),
            Ok(Outcome::Duplicate {
                reason: DuplicateReason::BranchExists,
                branch,
            }) => {
                let end = self.at_base_or_handled(&plan, &branch).await;
                return (route, id, end, Some(plan.on_branch(branch)));
            }
            Err(RunError::Unavailable { retry_after, .. }) => RunEnd::Retry(retry_after),
            Err(RunError::Internal(_)) => RunEnd::Retry(None),
            Err(RunError::Refused(_)) => RunEnd::Refused("payload_refused"),
            Err(RunError::Abandoned) => RunEnd::NotStarted,
        };
        (route, id, end, None)
    }

    /// A branch that exists: handled when it is ahead of its base, at its base otherwise (asked
    /// only now, with one compare).
    async fn at_base_or_handled(
        &self,
        plan: &Plan,
        branch: &crate::identity::BranchName,
    ) -> RunEnd {
        let forge = self.pipeline.forge();
        let repo = &plan.route.repo;
        let ahead = match forge.base(repo).await {
            Ok(base) => forge.ahead_by(repo, &base, branch).await,
            Err(e) => Err(e),
        };
        match ahead {
            Ok(0) => RunEnd::AtBase,
            Ok(_) => RunEnd::Handled,
            Err(ForgeError::Unavailable { retry_after, .. }) => RunEnd::Retry(retry_after),
            Err(_) => RunEnd::Retry(None),
        }
    }

    /// Makes the settle's statement; returns the `rowbranch_pgmq_messages_total` result and,
    /// for a dead letter, its id in the dead-letter queue. The lease is checked and renewed in
    /// the same statement first: a message another reader holds now is left to it, whatever
    /// this run did.
    async fn apply(
        &self,
        message: &Message,
        read_ct: i32,
        lost: bool,
        statement: &Statement,
        route: &str,
    ) -> (&'static str, Option<i64>) {
        let db = match self.db().await {
            Ok(db) => db,
            // A lease found lost is another reader's to settle, whenever the database is back.
            Err(_) if lost => return ("lease_lost", None),
            Err(_) => return (self.defer(message, read_ct, statement, route), None),
        };
        let client = db.client();
        let vt = match statement {
            Statement::Retry(after) => whole_seconds(*after),
            Statement::Release => 0,
            _ => self.vt_seconds(),
        };
        match queue::renew(client, self.queue(), &[(message.id, read_ct)], vt).await {
            Ok(found) if !found.is_empty() => {}
            Ok(_) => return ("lease_lost", None),
            Err(e) => {
                return (
                    self.statement_failed(&e, message, read_ct, statement, route)
                        .await,
                    None,
                )
            }
        }
        let settled = match statement {
            Statement::Retry(_) => return ("retried", None),
            Statement::Release => return ("released", None),
            Statement::Archive(result) => queue::archive(client, self.queue(), message.id)
                .await
                .map(|_| (*result, None)),
            Statement::DeadLetter(reason) => queue::dead_letter(
                client,
                self.queue(),
                &self.settings.pgmq.dead_letter,
                message.id,
                &letter(reason, message),
            )
            .await
            // Not there to archive, just after its lease was renewed: deleted by another.
            .map(|dead| (if dead.is_some() { "dead" } else { "lease_lost" }, dead)),
        };
        match settled {
            Ok(settled) => settled,
            Err(e) => (
                self.statement_failed(&e, message, read_ct, statement, route)
                    .await,
                None,
            ),
        }
    }

    /// A statement that failed: when the connection is what failed, an archive or a dead letter
    /// is kept for after reconnecting; any other error (a privilege, a missing queue) is
    /// logged with its SQLSTATE and the message is read again when its lease lapses.
    async fn statement_failed(
        &self,
        e: &tokio_postgres::Error,
        message: &Message,
        read_ct: i32,
        statement: &Statement,
        route: &str,
    ) -> &'static str {
        self.failed(e).await;
        if transient(e) {
            return self.defer(message, read_ct, statement, route);
        }
        tracing::error!(msg_id = message.id, %route, code = e.code().map(|c| c.code()),
            error = %describe(e), "a queue message's settle failed; it is read again when its lease lapses");
        "retried"
    }

    /// Keeps an archive or a dead letter the database did not take, for after reconnecting; a
    /// retry or a release needs nothing: the message's lease lapses by itself.
    fn defer(
        &self,
        message: &Message,
        read_ct: i32,
        statement: &Statement,
        route: &str,
    ) -> &'static str {
        let (letter, result) = match statement {
            Statement::Archive(result) => (None, *result),
            Statement::DeadLetter(reason) => (Some(letter(reason, message)), "dead"),
            Statement::Retry(_) => return "retried",
            Statement::Release => return "released",
        };
        self.unsettled
            .lock()
            .expect("unsettled lock poisoned")
            .push(Unsettled {
                id: message.id,
                read_ct,
                route: route.to_owned(),
                letter,
                result,
            });
        "deferred"
    }

    /// Makes the statements kept for after a reconnect, each once its lease is checked (and
    /// renewed) under the read it was kept with: a message another reader took meanwhile is
    /// left to it. An archive of a message archived already answers false, and a dead letter
    /// is sent only with its archive: done, either way, and nothing twice.
    async fn settle_unsettled(&self, db: &Rows) {
        let pending = std::mem::take(&mut *self.unsettled.lock().expect("unsettled lock poisoned"));
        for item in pending {
            let client = db.client();
            let done = match queue::renew(
                client,
                self.queue(),
                &[(item.id, item.read_ct)],
                self.vt_seconds(),
            )
            .await
            {
                Ok(found) if found.is_empty() => Ok(false),
                Ok(_) => match &item.letter {
                    None => queue::archive(client, self.queue(), item.id)
                        .await
                        .map(|_| true),
                    Some(letter) => queue::dead_letter(
                        client,
                        self.queue(),
                        &self.settings.pgmq.dead_letter,
                        item.id,
                        letter,
                    )
                    .await
                    .map(|_| true),
                },
                Err(e) => Err(e),
            };
            match done {
                Ok(made) => {
                    let result = if made { item.result } else { "lease_lost" };
                    self.pipeline.metrics().pgmq_message(&item.route, result);
                    tracing::info!(
                        msg_id = item.id,
                        result,
                        "settled a queue message after reconnecting"
                    );
                }
                Err(e) if transient(&e) => {
                    self.failed(&e).await;
                    self.unsettled
                        .lock()
                        .expect("unsettled lock poisoned")
                        .push(item);
                }
                Err(e) => tracing::error!(msg_id = item.id, code = e.code().map(|c| c.code()),
                    error = %describe(&e), "a queue message's settle failed again; it is read again when its lease lapses"),
            }
        }
    }

    /// Dispatches the row again on its branch as it is, from the current base.
    async fn redispatch(&self, plan: Option<Plan>, message: &Message) -> Result<(), RunError> {
        let Some(plan) = plan else {
            return Err(RunError::Internal(Arc::new(anyhow::anyhow!(
                "message {} has no plan to dispatch again",
                message.id
            ))));
        };
        let base = self
            .pipeline
            .forge()
            .base(&plan.route.repo)
            .await
            .map_err(|e| RunError::from_forge(e, "reading the default branch"))?;
        self.pipeline.redispatch(&plan, &base).await
    }

    /// Renews every held message's lease every third of the visibility timeout; a renewal that
    /// finds a message gone, or read again by another (another `read_ct`), marks it lost.
    async fn renew_leases(self: Arc<Self>) {
        let every = self.settings.pgmq.visibility_timeout / 3;
        loop {
            tokio::time::sleep(every).await;
            let _alone = self.leases.write().await;
            let ids: Vec<(i64, i32)> = {
                let held = self.held.lock().expect("held lock poisoned");
                held.iter()
                    .filter(|(_, h)| !h.lost && !h.settling)
                    .map(|(id, h)| (*id, h.read_ct))
                    .collect()
            };
            if ids.is_empty() {
                continue;
            }
            let Ok(db) = self.db().await else { continue };
            match queue::renew(db.client(), self.queue(), &ids, self.vt_seconds()).await {
                Ok(found) => {
                    let found: HashMap<i64, i32> = found.into_iter().collect();
                    let mut held = self.held.lock().expect("held lock poisoned");
                    for (id, read_ct) in ids {
                        if found.get(&id) != Some(&read_ct) {
                            // Still the same read? An adoption meanwhile is renewed next time.
                            if let Some(entry) = held.get_mut(&id).filter(|h| h.read_ct == read_ct)
                            {
                                entry.lost = true;
                            }
                        }
                    }
                }
                Err(e) => self.failed(&e).await,
            }
        }
    }

    /// Samples the queues' depth and age for the metrics, and deletes old archived messages.
    async fn sample(self: Arc<Self>) {
        let mut forgot: Option<Instant> = None;
        loop {
            if let Ok(db) = self.db().await {
                for name in [self.queue(), self.settings.pgmq.dead_letter.as_str()] {
                    if let Ok((depth, age)) = queue::metrics(db.client(), name).await {
                        self.pipeline.metrics().pgmq_queue(name, depth, age);
                    }
                }
                if forgot.is_none_or(|at| at.elapsed() >= FORGET_EVERY) {
                    // Both archives hold whole rows: the queue's, and the dead letters redriven.
                    let retention = self.settings.pgmq.archive_retention.as_secs_f64();
                    let mut all = true;
                    for name in [self.queue(), self.settings.pgmq.dead_letter.as_str()] {
                        match queue::forget_archived(db.client(), name, retention).await {
                            Ok(gone) if gone > 0 => tracing::info!(
                                queue = name,
                                messages = gone,
                                "deleted archived messages past archive_retention"
                            ),
                            Ok(_) => {}
                            Err(e) => {
                                all = false;
                                tracing::warn!(queue = name, error = %e, "could not delete old archived messages");
                            }
                        }
                    }
                    if all {
                        forgot = Some(Instant::now());
                    }
                }
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }
}

/// The dead letter: why, which message, and the message itself.
fn letter(reason: &str, message: &Message) -> String {
    let original: Value =
        serde_json::from_str(&message.body).unwrap_or(Value::String(message.body.clone()));
    json!({"reason": reason, "msg_id": message.id, "message": original}).to_string()
}

/// A wait in whole seconds, at least one: pgmq's visibility is set in seconds, and a backoff
/// rounded down to none would read the message again at once.
fn whole_seconds(wait: Duration) -> i32 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

/// Whether a statement failed for a passing reason, worth making again as it is: the
/// connection closed or the server ended the session (SQLSTATE classes 08 and 57), a deadlock
/// or a serialization failure (40), the server short of resources (53), a lock not available
/// (55P03) — rather than for what it asked (a privilege, a missing queue).
fn transient(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    let Some(code) = e.code() else {
        return true;
    };
    let code = code.code();
    ["08", "57", "40", "53"]
        .iter()
        .any(|class| code.starts_with(class))
        || code == "55P03"
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
    fn a_dead_letter_carries_why_which_and_what() {
        let message = Message {
            id: 7,
            read_ct: 1,
            enqueued_at: chrono::Utc::now(),
            body: r#"{"type":"INSERT","record":{"id":"a b"}}"#.into(),
        };
        let letter: Value = serde_json::from_str(&letter("bad_id", &message)).unwrap();
        assert_eq!(letter["reason"], "bad_id");
        assert_eq!(letter["msg_id"], 7);
        assert_eq!(letter["message"]["record"]["id"], "a b");
    }

    #[test]
    fn a_visibility_is_whole_seconds_and_never_none() {
        assert_eq!(whole_seconds(Duration::from_millis(100)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::from_secs(5)), 5);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_secs(u64::MAX)), i32::MAX);
    }

    #[test]
    fn reconnecting_backs_off_to_a_cap() {
        assert_eq!(reconnect_wait(1), Duration::from_secs(1));
        assert_eq!(reconnect_wait(2), Duration::from_secs(2));
        assert_eq!(reconnect_wait(40), RECONNECT_CAP);
    }
}
