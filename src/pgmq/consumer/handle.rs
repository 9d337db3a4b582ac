//! One message's life in this process: its row run through the pipeline, its [`Fate`] decided,
//! a dispatch again when one is owed, the settle's statement once no renewal of it is under
//! way, and the one count and log line of how it was settled.

use std::sync::Arc;

use super::{Consumer, MessageRow};
use crate::db::queue::Message;
use crate::forge::ForgeError;
use crate::identity::BranchName;
use crate::pgmq::holds::{Begin, HoldId, HoldNow, Rerun};
use crate::pgmq::settle::{backoff, Fate};
use crate::pipeline::{at_base, DuplicateReason, Outcome, Plan, RunError, Start};
use crate::reason::Reason;

impl Consumer {
    /// Runs one message's row (or not, when its job says its fate already) and settles the
    /// message.
    pub(super) async fn handle(self: Arc<Self>, message: Message, token: HoldId, job: MessageRow) {
        let fate = match &job.plan {
            Ok(plan) => self.run_row(&message, plan).await,
            Err(fate) => fate.clone(),
        };
        let Some(HoldNow { read_ct, lost }) = self.holds.standing(message.id, token) else {
            return;
        };
        let pgmq = &self.settings.pgmq;
        let fate = match fate.decided(read_ct, pgmq.backoff_base, pgmq.backoff_cap) {
            // Another reader holds the message now: the dispatch again is its to make.
            Fate::AtBase(_) if lost => Fate::LeaseLost,
            // Made while the loop still renews the lease; then the archive checks it once more.
            Fate::AtBase(branch) => match self.redispatch(&job, branch).await {
                Ok(()) => Fate::Redispatched,
                Err(e) => {
                    tracing::warn!(msg_id = message.id, error = %e, "could not dispatch the row again; the message is tried again later");
                    Fate::Later(backoff(read_ct, pgmq.backoff_base, pgmq.backoff_cap))
                }
            },
            fate => fate,
        };
        if fate == Fate::Release {
            // A release comes at shutdown: after the loop's last read, which would otherwise
            // read the message again (its read_ct one more) and hide it for a lease.
            self.reading_stopped.cancelled().await;
        }
        let begin = self
            .holds
            .begin_settle(message.id, token, read_ct, fate.lets_go());
        let lost = match begin.await {
            Begin::Gone => return,
            Begin::ReadAgain(rerun) => {
                // Read again by this process while its run went on, after the decision: the
                // decision is made again on a run of the new read.
                self.rerun(message, rerun, job);
                return;
            }
            Begin::Settle { lost } => lost,
        };
        let (route, id) = (job.route.clone(), job.id.clone().unwrap_or_default());
        let made = self.apply(&message, read_ct, lost, fate, &route).await;
        if let Some(rerun) = self.holds.settled(message.id, token, read_ct) {
            self.rerun(message.clone(), rerun, job);
        }
        let Some(fate) = made else {
            tracing::warn!(msg_id = message.id, %route, "a queue message's settle waits for the database");
            return;
        };
        let result = fate.label();
        self.pipeline.metrics().pgmq_message(&route, result);
        self.progress.count(&fate);
        let msg_id = message.id;
        match fate {
            Fate::DeadLetter { reason, letter_id } => tracing::error!(msg_id, read_ct, %route,
                id, reason = reason.as_str(), dead_letter_id = letter_id,
                "queue message dead-lettered: `rowbranch queue redrive --id <dead_letter_id>` brings it back"),
            Fate::LeaseLost => tracing::warn!(msg_id, read_ct, %route, id,
                "queue message's lease was lost: another reader settles it"),
            fate => tracing::info!(msg_id, read_ct, %route, id, result = result.as_str(), ?fate,
                "queue message"),
        }
    }

    /// Runs a held message again, under its new read and a new token (so that nothing the
    /// earlier handler does to its own hold reaches this one).
    fn rerun(self: &Arc<Self>, message: Message, rerun: Rerun, job: MessageRow) {
        let message = Message {
            read_ct: rerun.read_ct,
            ..message
        };
        self.start(message, rerun.token, job);
    }

    /// Runs the row and says what its run means for the message: the run's own result, not a
    /// joined delivery's `in_flight`.
    async fn run_row(&self, message: &Message, plan: &Plan) -> Fate {
        if self.shutdown.is_draining() {
            return Fate::Release;
        }
        // The message and this copy of the plan are kept beside the run: they count too.
        let beside = message.body.capacity() + plan.held_bytes();
        let Ok(submission) = self
            .pipeline
            .submit_beside(plan.clone(), Start::New, beside)
        else {
            return Fate::Retry(None);
        };
        match submission.run.await {
            Ok(Outcome::Dispatched { .. }) => Fate::Dispatched,
            Ok(Outcome::Duplicate {
                reason: DuplicateReason::PullRequest,
                ..
            }) => Fate::Handled,
            Ok(Outcome::Duplicate {
                reason: DuplicateReason::ClaimTaken | DuplicateReason::InFlight,
                branch,
            }) => Fate::AtBase(branch),
            // Handled when it is ahead of its base, at its base otherwise (asked only now).
            Ok(Outcome::Duplicate {
                reason: DuplicateReason::BranchExists,
                branch,
            }) => {
                let forge = self.pipeline.forge().as_ref();
                let plan = plan.clone().on_branch(branch);
                let at = match forge.base(&plan.route.repo).await {
                    Ok(base) => at_base(forge, &plan, &base).await,
                    Err(e) => Err(e),
                };
                match at {
                    Ok(true) => Fate::AtBase(plan.branch),
                    Ok(false) => Fate::Handled,
                    Err(ForgeError::Unavailable {
                        retry_after,
                        message,
                    }) => {
                        self.forge_failed(message);
                        Fate::Retry(retry_after)
                    }
                    Err(_) => Fate::Retry(None),
                }
            }
            Err(RunError::Unavailable {
                retry_after,
                message,
                ..
            }) => {
                self.forge_failed(message);
                Fate::Retry(retry_after)
            }
            Err(RunError::Internal(_)) => Fate::Retry(None),
            Err(RunError::Refused(_)) => Fate::dead(Reason::PayloadRefused),
            Err(RunError::Abandoned) => Fate::Release,
        }
    }

    /// Notes a run the forge turned away past its retries, for a drain: it stops there.
    fn forge_failed(&self, message: String) {
        self.progress.forge_failed(super::progress::ForgeTrouble {
            rate_limited: rate_limited(&message),
            message,
        });
    }

    /// Dispatches the row again on `branch` as it is, from the current base.
    async fn redispatch(&self, job: &MessageRow, branch: BranchName) -> Result<(), RunError> {
        let Ok(plan) = &job.plan else {
            return Err(RunError::Internal(Arc::new(anyhow::anyhow!(
                "a message with no plan to dispatch again"
            ))));
        };
        let plan = plan.clone().on_branch(branch);
        let base = self
            .pipeline
            .forge()
            .base(&plan.route.repo)
            .await
            .map_err(|e| RunError::from_forge(e, "reading the default branch"))?;
        match self.pipeline.submit(plan, Start::Redispatch(base)) {
            Ok(submission) => submission.run.await.map(drop),
            Err(full) => Err(RunError::full(full.to_string(), full.retry_after())),
        }
    }
}

/// Whether a forge's refusal is GitHub's rate limit: the retry policy words every rate-limited
/// answer it gives up on as `rate limited (STATUS): …` (src/forge/github/retry.rs, `classify`),
/// and the pipeline puts what it was doing before it.
fn rate_limited(message: &str) -> bool {
    message.contains("rate limited (")
}

#[cfg(test)]
mod tests {
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
}
