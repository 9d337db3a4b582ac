//! One message's life in this process: its row run through the pipeline, its [`Fate`] decided,
//! a dispatch again when one is owed, then the statement that settles it once no renewal of it
//! is under way — its lease checked and renewed first, in the same way as a renewal, so a
//! message another reader holds now is left to it; kept for the read loop to make again once
//! the database is back when the connection is what failed — and the one count and log line
//! of how it was settled.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::value::RawValue;

use super::Consumer;
use crate::db;
use crate::db::queue::{self, Message};
use crate::forge::ForgeError;
use crate::forge::Listing;
use crate::identity::BranchName;
use crate::pipeline::{at_base, Outcome, Plan, RunError, Start, ALREADY_RAN};
use crate::queue::holds::{Begin, Job};
use crate::queue::settle::{backoff, Fate};
use crate::reason::Reason;

impl Consumer {
    /// Runs one message's row (or not, when its job says its fate already) and settles the
    /// message; runs it again when this process read the message again meanwhile.
    pub(super) async fn handle(self: Arc<Self>, job: Job) {
        let pgmq = &self.settings.pgmq;
        let (msg_id, token) = (job.message.id, job.token);
        loop {
            let fate = match &job.plan {
                Ok(plan) => self.run_row(&job.message, plan).await,
                Err(fate) => fate.clone(),
            };
            let Some((read_ct, lost)) = self.holds.standing(msg_id, token) else {
                return;
            };
            let fate = match (
                fate.decided(read_ct, pgmq.backoff_base, pgmq.backoff_cap),
                &job.plan,
            ) {
                // Another reader holds the message now: the dispatch again is its to make.
                (Fate::AtBase(_), _) if lost => Fate::LeaseLost,
                // Made while the loop still renews the lease; then the archive checks it once more.
                (Fate::AtBase(branch), Ok(plan)) => {
                    match self.redispatch(plan, branch, job.message.enqueued_at).await {
                        Ok(fate) => fate,
                        Err(e) => {
                            tracing::warn!(msg_id, error = format!("{e:#}"), "could not dispatch the row again; the message is tried again later");
                            Fate::Later(backoff(read_ct, pgmq.backoff_base, pgmq.backoff_cap))
                        }
                    }
                }
                (fate, _) => fate,
            };
            if fate == Fate::Release {
                // A release comes at shutdown: after the loop's last read, which would otherwise
                // read the message again (its read_ct one more) and hide it for a lease.
                self.reading_stopped.cancelled().await;
            }
            let begin = self
                .holds
                .begin_settle(msg_id, token, read_ct, fate.lets_go());
            let lost = match begin.await {
                Begin::Gone => return,
                // Read again by this process while its run went on, after the decision: the
                // decision is made again on a run of the new read.
                Begin::ReadAgain => continue,
                Begin::Settle { lost } => lost,
            };
            let Some(fate) = self.settle(&job, read_ct, lost, &fate).await else {
                let id = job.id.as_deref().unwrap_or_default();
                tracing::warn!(msg_id, route = %job.route, id, "a queue message's settle waits for the database");
                self.holds.keep(job, fate);
                return;
            };
            if !self.settled(&job, read_ct, &fate) {
                return;
            }
        }
    }

    /// Makes the settles kept for the database's return, each under the read its message is
    /// held under now (raised if this process read it again meanwhile); when the database
    /// does not take one, it and the rest stay kept.
    pub(super) async fn settle_kept(&self) {
        let mut kept = self.holds.take_kept().into_iter();
        while let Some((job, fate)) = kept.next() {
            let Some((read_ct, _)) = self.holds.standing(job.message.id, job.token) else {
                continue;
            };
            let Some(made) = self.settle(&job, read_ct, false, &fate).await else {
                self.holds.keep(job, fate);
                kept.for_each(|(job, fate)| self.holds.keep(job, fate));
                return;
            };
            // Never read again during the statement: the read loop, the one reader, makes it.
            self.settled(&job, read_ct, &made);
        }
    }

    /// The hold's end after its settle's statement under read `read_ct`, and the one count and
    /// log line of the message settled as `fate`; `true` when it was read again during the
    /// statement, to be run again ([`Holds::settled`](crate::queue::holds::Holds::settled)).
    fn settled(&self, job: &Job, read_ct: i32, fate: &Fate) -> bool {
        let (msg_id, route) = (job.message.id, job.route.as_str());
        let again = self.holds.settled(msg_id, job.token, read_ct);
        let id = job.id.as_deref().unwrap_or_default();
        let result = fate.label();
        self.pipeline.metrics().pgmq_message(route, result);
        self.progress.count(fate);
        match fate {
            Fate::DeadLetter { reason, letter_id } => tracing::error!(msg_id, read_ct, %route,
                id, reason = reason.as_str(), dead_letter_id = letter_id,
                "queue message dead-lettered: `rowbranch queue redrive --id <dead_letter_id>` brings it back"),
            Fate::LeaseLost => tracing::warn!(msg_id, read_ct, %route, id,
                "queue message's lease was lost: another reader settles it"),
            fate => {
                tracing::info!(msg_id, read_ct, %route, id, result = result.as_str(), ?fate,
                "queue message")
            }
        }
        again
    }

    /// Runs the row and says what its run means for the message: the run's own result, not a
    /// joined delivery's `in_flight`.
    async fn run_row(&self, message: &Message, plan: &Plan) -> Fate {
        if self.shutdown.is_draining() {
            return Fate::Release;
        }
        // The message and this copy of the plan are kept beside the run: they count too.
        let beside = message.body.capacity() + plan.held_bytes();
        let Ok(submission) = self.pipeline.submit(plan.clone(), Start::New, beside) else {
            return Fate::Retry(None);
        };
        let branch = match submission.run.await {
            Ok(Outcome::Dispatched { .. }) => return Fate::Dispatched,
            Ok(Outcome::Duplicate {
                reason: Reason::PullRequest,
                ..
            }) => return Fate::Handled,
            Ok(Outcome::Duplicate {
                reason: Reason::ClaimTaken | Reason::InFlight,
                branch,
            }) => return Fate::AtBase(branch),
            // `BranchExists`, the one other reason a run gives a duplicate.
            Ok(Outcome::Duplicate { branch, .. }) => branch,
            Err(RunError::Unavailable {
                retry_after,
                message,
                ..
            }) => return self.turned_away(message, retry_after),
            Err(RunError::Internal(_)) => return Fate::Retry(None),
            Err(RunError::Refused(_)) => return Fate::dead(Reason::PayloadRefused),
            Err(RunError::Abandoned) => return Fate::Release,
        };
        // Its branch exists: handled when it is ahead of its base, at its base otherwise
        // (asked only now).
        let forge = self.pipeline.forge().as_ref();
        let plan = plan.clone().on_branch(branch);
        let at = async { at_base(forge, &plan, &forge.base(&plan.route.repo).await?).await };
        match at.await {
            Ok(true) => Fate::AtBase(plan.branch),
            Ok(false) => Fate::Handled,
            Err(ForgeError::Unavailable {
                retry_after,
                message,
            }) => self.turned_away(message, retry_after),
            Err(_) => Fate::Retry(None),
        }
    }

    /// A run the forge turned away past its retries: worth another try, and a drain stops
    /// there.
    fn turned_away(&self, message: String, retry_after: Option<Duration>) -> Fate {
        self.progress.forge_failed(super::ForgeTrouble {
            rate_limited: rate_limited(&message),
            message,
        });
        Fate::Retry(retry_after)
    }

    /// Dispatches the row again on `branch` as it is, from the current base — unless a run of
    /// the work workflow names the branch (queued, running or finished, since the row was
    /// queued): then its work ran and pushed nothing, and it is reported and archived, never
    /// paid for again (SPEC §6's dead-claim rule; `redo` runs it on purpose). Without the
    /// right to list runs the rule is as it was: dispatched again.
    async fn redispatch(
        &self,
        plan: &Plan,
        branch: BranchName,
        queued: chrono::DateTime<chrono::Utc>,
    ) -> anyhow::Result<Fate> {
        let plan = plan.clone().on_branch(branch);
        let forge = self.pipeline.forge();
        let (repo, prefix) = (&plan.route.repo, &plan.route.branch_prefix);
        let runs = forge
            .row_workflow_runs(repo, prefix, &plan.id, queued)
            .await;
        if let Ok(Listing::Found(runs)) = runs {
            if runs
                .iter()
                .any(|run| run.branches(prefix).any(|b| b == plan.branch.as_str()))
            {
                tracing::warn!(route = %plan.route.table_name(), branch = %plan.branch, "{ALREADY_RAN}");
                return Ok(Fate::Handled);
            }
        }
        let base = forge.base(repo).await;
        let base = base.context("reading the default branch")?;
        let submission = self.pipeline.submit(plan, Start::Redispatch(base), 0)?;
        submission.run.await?;
        Ok(Fate::Redispatched)
    }

    /// Settles the message as `fate`, decided on read `read_ct`: the fate as made, the same or
    /// [`Fate::LeaseLost`]. The lease is checked and renewed first, in the same statement as a
    /// renewal, so a message another reader holds now is left to it, whatever this run did;
    /// then the archive or the dead letter. When the connection is what failed, `None` for an
    /// archive or a dead letter, to be kept and made again once the database is back; a retry
    /// or a release needs nothing more, since the message's lease lapses by itself. Any other
    /// error (a privilege, a missing queue) is logged with its SQLSTATE, and the message is
    /// read again when its lease lapses.
    async fn settle(&self, job: &Job, read_ct: i32, lost: bool, fate: &Fate) -> Option<Fate> {
        let (message, route) = (&job.message, &job.route);
        if *fate == Fate::LeaseLost {
            return Some(Fate::LeaseLost);
        }
        let db = match self.db().await {
            Ok(db) => db,
            // A lease found lost is another reader's to settle, whenever the database is back.
            Err(_) if lost => return Some(Fate::LeaseLost),
            Err(_) => return fate.lets_go().then(|| fate.clone()),
        };
        let client = db.client();
        let vt = match fate {
            Fate::Later(after) => whole_seconds(*after),
            Fate::Release => 0,
            _ => self.vt_seconds(),
        };
        let made = async {
            let held = [(message.id, read_ct)];
            if queue::renew(client, self.queue(), &held, vt)
                .await?
                .is_empty()
            {
                return Ok(Fate::LeaseLost);
            }
            Ok::<_, db::Error>(match fate {
                // The renewal was the statement.
                Fate::Later(_) | Fate::Release => fate.clone(),
                Fate::DeadLetter { reason, .. } => {
                    let dead = &self.settings.pgmq.dead_letter;
                    let letter = letter(*reason, message);
                    match queue::dead_letter(client, self.queue(), dead, message.id, &letter)
                        .await?
                    {
                        Some(id) => Fate::DeadLetter {
                            reason: *reason,
                            letter_id: Some(id),
                        },
                        // Not there to archive, just after its lease was renewed: deleted by another.
                        None => Fate::LeaseLost,
                    }
                }
                // An archive that finds the message gone was made already (its answer was lost).
                _ => {
                    queue::archive(client, self.queue(), message.id).await?;
                    fate.clone()
                }
            })
        };
        let e = match made.await {
            Ok(made) => return Some(made),
            Err(e) => e,
        };
        self.link.failed(&e).await;
        if !e.transient() {
            tracing::error!(msg_id = message.id, %route, code = e.code().map(|c| c.code()),
                error = %e, "a queue message's settle failed; it is read again when its lease lapses");
            return Some(Fate::Later(self.settings.pgmq.visibility_timeout));
        }
        fate.lets_go().then(|| fate.clone())
    }
}

/// The dead letter: why, which message, and the message itself — its JSON as it came, copied
/// as text (never read into a `Value`: jsonb keeps numbers serde_json has none for), or the
/// body as a JSON string when it is not JSON.
fn letter(reason: Reason, message: &Message) -> String {
    #[derive(serde::Serialize)]
    struct Letter<'a> {
        reason: &'a str,
        msg_id: i64,
        message: Box<RawValue>,
    }
    let body = RawValue::from_string(message.body.clone())
        .or_else(|_| serde_json::value::to_raw_value(&message.body));
    serde_json::to_string(&Letter {
        reason: reason.as_str(),
        msg_id: message.id,
        message: body.expect("text always serializes"),
    })
    .expect("text, a number and JSON text always serialize")
}

/// A wait in whole seconds, at least one: pgmq's visibility is set in seconds, and a backoff
/// rounded down to none would read the message again at once.
fn whole_seconds(wait: Duration) -> i32 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

/// Whether a forge's refusal is GitHub's rate limit: the retry policy words every rate-limited
/// answer it gives up on as `rate limited (STATUS): …` (src/forge/github/retry.rs, `classify`),
/// and the pipeline puts what it was doing before it.
fn rate_limited(message: &str) -> bool {
    message.contains("rate limited (")
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn a_rate_limit_is_told_from_other_refusals() {
        assert!(rate_limited(
            "claiming the branch: rate limited (403 Forbidden): API rate limit exceeded for \
             installation ID 77. (GitHub at api.github.com; 1 attempts in 0.0 s)"
        ));
        assert!(!rate_limited(
            "claiming the branch: GitHub answered 503 Service Unavailable (GitHub at \
             api.github.com; 4 attempts in 30.1 s)"
        ));
        assert!(!rate_limited(
            "claiming the branch: GitHub answered 403 Forbidden: Resource not accessible by \
             integration"
        ));
    }

    #[test]
    fn a_dead_letter_carries_why_which_and_what() {
        let message = Message {
            id: 7,
            read_ct: 1,
            enqueued_at: chrono::Utc::now(),
            body: r#"{"type":"INSERT","record":{"id":"a b"}}"#.into(),
        };
        let letter: Value = serde_json::from_str(&letter(Reason::BadId, &message)).unwrap();
        assert_eq!(letter["reason"], "bad_id");
        assert_eq!(letter["msg_id"], 7);
        assert_eq!(letter["message"]["record"]["id"], "a b");
    }

    #[test]
    fn a_dead_letter_keeps_a_message_serde_json_cannot_read_as_it_came() {
        // jsonb keeps a numeric of 1e400 whole; serde_json has no number for it.
        let huge = format!("1{}", "0".repeat(400));
        let body = format!(r#"{{"type":"INSERT","record":{{"id":{huge}}}}}"#);
        let message = Message {
            id: 8,
            read_ct: 1,
            enqueued_at: chrono::Utc::now(),
            body: body.clone(),
        };
        let letter = letter(Reason::BadId, &message);
        assert!(letter.contains(&format!(r#""message":{body}"#)), "{letter}");
        assert!(
            letter.starts_with(r#"{"reason":"bad_id","msg_id":8,"#),
            "{letter}"
        );
    }

    #[test]
    fn a_visibility_is_whole_seconds_and_never_none() {
        assert_eq!(whole_seconds(Duration::from_millis(100)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::from_secs(5)), 5);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_secs(u64::MAX)), i32::MAX);
    }
}
