//! One message's life in this process: its row run through the pipeline, the decision
//! (`settle`), a dispatch again when one is owed, the settle's statement once no renewal of it
//! is under way, and the one count and log line of how it was settled.

use std::sync::Arc;
use std::time::Duration;

use super::progress::{Counted, ForgeTrouble};
use super::statement::{Settled, Statement};
use super::Consumer;
use crate::db::queue::Message;
use crate::forge::ForgeError;
use crate::metrics::NO_ROUTE;
use crate::pgmq::holds::{Begin, Rerun, Standing, Token};
use crate::pgmq::settle::{backoff, settle, DeadReason, RunEnd, Settle};
use crate::pipeline::{DuplicateReason, Ignored, Outcome, Plan, Planned, RunError};
use crate::webhook::payload;

impl Consumer {
    /// Runs one message's row and settles the message; `put_off`: leaves it in the queue for
    /// this long instead of running it.
    pub(super) async fn handle(
        self: Arc<Self>,
        message: Message,
        token: Token,
        put_off: Option<Duration>,
    ) {
        let (route, row_id, end, plan) = match put_off {
            Some(wait) => (
                route_of(&self.routes, &message),
                None,
                RunEnd::PutOff(wait),
                None,
            ),
            None => self.run_row(&message).await,
        };
        let Some(Standing { read_ct, lost }) = self.holds.standing(message.id, token) else {
            return;
        };
        let statement = self.decide(&end, read_ct, lost, plan, &message).await;
        if matches!(statement, Some(Statement::Release)) {
            // A release comes at shutdown: after the loop's last read, which would otherwise
            // read the message again (its read_ct one more) and hide it for a lease.
            self.reading_stopped.cancelled().await;
        }
        let counted = statement.as_ref().and_then(|s| counted(&end, s));
        let lets_go = statement.as_ref().is_some_and(Statement::lets_go);
        let begin = self.holds.begin_settle(message.id, token, read_ct, lets_go);
        let lost = match begin.await {
            Begin::Gone => return,
            Begin::ReadAgain(rerun) => {
                // Read again by this process while its run went on, after the decision: the
                // decision is made again on a run of the new read.
                self.rerun(&message, rerun);
                return;
            }
            Begin::Settle { lost } => lost,
        };
        let settled = match &statement {
            Some(statement) => {
                self.apply(&message, read_ct, lost, statement, &route, counted)
                    .await
            }
            None => Settled::LeaseLost,
        };
        if let Some(rerun) = self.holds.settled(message.id, token, read_ct) {
            self.rerun(&message, rerun);
        }
        let Some(result) = settled.result() else {
            tracing::warn!(msg_id = message.id, %route, "a queue message's settle waits for the database");
            return;
        };
        self.pipeline.metrics().pgmq_message(&route, result);
        if let (Some(counted), Settled::Archived | Settled::Redispatched | Settled::Dead { .. }) =
            (counted, &settled)
        {
            self.progress.count(counted);
        }
        let id = row_id.as_deref().unwrap_or("");
        let msg_id = message.id;
        match settled {
            Settled::Dead {
                reason,
                dead_letter_id,
            } => tracing::error!(msg_id, read_ct, %route,
                id, reason = reason.as_str(), dead_letter_id,
                "queue message dead-lettered: `rowbranch queue redrive --id <dead_letter_id>` brings it back"),
            Settled::LeaseLost => tracing::warn!(msg_id, read_ct, %route, id,
                "queue message's lease was lost: another reader settles it"),
            _ => tracing::info!(msg_id, read_ct, %route, id, result = result.as_str(), ?end,
                "queue message"),
        }
    }

    /// Runs a held message again, under its new read and a new token (so that nothing the
    /// earlier handler does to its own hold reaches this one).
    fn rerun(self: &Arc<Self>, message: &Message, rerun: Rerun) {
        let message = Message {
            read_ct: rerun.read_ct,
            ..message.clone()
        };
        self.start(message, rerun.token, None);
    }

    /// The statement that settles the message, decided on read `read_ct`, once any dispatch
    /// again owed is made; `None`: another reader holds the message now, and the dispatch again
    /// is its to make.
    async fn decide(
        &self,
        end: &RunEnd,
        read_ct: i32,
        lost: bool,
        plan: Option<Plan>,
        message: &Message,
    ) -> Option<Statement> {
        let pgmq = &self.settings.pgmq;
        let statement = match settle(end, read_ct, pgmq.backoff_base, pgmq.backoff_cap) {
            Settle::Archive => Statement::Archive,
            Settle::DeadLetter(reason) => Statement::DeadLetter(reason),
            Settle::Retry(after) => Statement::Retry(after),
            Settle::Release => Statement::Release,
            Settle::Redispatch if lost => return None,
            // Made while the loop still renews the lease; then the archive checks it once more.
            Settle::Redispatch => match self.redispatch(plan, message).await {
                Ok(()) => Statement::ArchiveRedispatched,
                Err(e) => {
                    tracing::warn!(msg_id = message.id, error = %e, "could not dispatch the row again; the message is tried again later");
                    Statement::Retry(backoff(read_ct, pgmq.backoff_base, pgmq.backoff_cap))
                }
            },
        };
        Some(statement)
    }

    /// Parses and plans the message as a webhook body, runs the row, and says how the run
    /// ended; also the route's name, the row's id and the plan (for a dispatch again).
    async fn run_row(&self, message: &Message) -> (String, Option<String>, RunEnd, Option<Plan>) {
        let event = match payload::parse(message.body.as_bytes()) {
            Ok(event) => event,
            Err(e) => {
                tracing::error!(msg_id = message.id, error = %e, "a queue message is not a row's event");
                return (
                    NO_ROUTE.into(),
                    None,
                    RunEnd::Refused(DeadReason::Malformed),
                    None,
                );
            }
        };
        let route = route_name(&self.routes, &event.schema, &event.table);
        let plan = match self.routes.plan_from(true, event) {
            Ok(Planned::Run(plan)) => plan,
            Ok(Planned::Ignored(Ignored::Event { .. })) => {
                tracing::warn!(msg_id = message.id, %route, "a queue message of an event the route does not take");
                return (route, None, RunEnd::IgnoredEvent, None);
            }
            Ok(Planned::Ignored(_)) => return (route, None, RunEnd::NoRoute, None),
            Err(e) => {
                tracing::error!(msg_id = message.id, %route, error = %e, "a queue message's row cannot be planned");
                return (route, e.row_id(), RunEnd::Refused(DeadReason::of(&e)), None);
            }
        };
        let id = Some(plan.id.to_string());
        if self.shutdown.is_draining() {
            return (route, id, RunEnd::NotStarted, None);
        }
        // The message and this copy of the plan are kept beside the run: they count too.
        let beside = message.body.capacity() + plan.held_bytes();
        let Ok(submission) = self.pipeline.submit_beside(plan.clone(), beside) else {
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
            Err(RunError::Unavailable {
                retry_after,
                message,
                ..
            }) => {
                self.forge_failed(message);
                RunEnd::Retry(retry_after)
            }
            Err(RunError::Internal(_)) => RunEnd::Retry(None),
            Err(RunError::Refused(_)) => RunEnd::Refused(DeadReason::PayloadRefused),
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
            Err(ForgeError::Unavailable {
                retry_after,
                message,
            }) => {
                self.forge_failed(message);
                RunEnd::Retry(retry_after)
            }
            Err(_) => RunEnd::Retry(None),
        }
    }

    /// Notes a run the forge turned away past its retries, for a drain: it stops there.
    fn forge_failed(&self, message: String) {
        self.progress.forge_failed(ForgeTrouble {
            rate_limited: rate_limited(&message),
            message,
        });
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
}

/// The route's name for a message's metrics and log line: `schema.table` of the route that reads
/// its table from the queue, else `NO_ROUTE`.
fn route_name(routes: &crate::pipeline::Routes, schema: &str, table: &str) -> String {
    routes
        .find(schema, table)
        .filter(|r| r.route.reads_the_queue())
        .map_or_else(|| NO_ROUTE.to_owned(), |r| r.route.table_name())
}

/// [`route_name`] of a message not yet parsed (one put off over its budget).
fn route_of(routes: &crate::pipeline::Routes, message: &Message) -> String {
    match super::event_table(&message.body) {
        Some((schema, table)) => route_name(routes, &schema, &table),
        None => NO_ROUTE.to_owned(),
    }
}

/// What a message settled by `statement` after `end` counts as in a drain's summary.
fn counted(end: &RunEnd, statement: &Statement) -> Option<Counted> {
    match (statement, end) {
        (Statement::Archive, RunEnd::Dispatched) | (Statement::ArchiveRedispatched, _) => {
            Some(Counted::Dispatched)
        }
        (Statement::Archive, RunEnd::Handled | RunEnd::AtBase) => Some(Counted::Duplicate),
        (Statement::DeadLetter(_), _) => Some(Counted::DeadLettered),
        _ => None,
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
    use std::time::Duration;

    use super::*;
    use crate::pgmq::settle::DeadReason;

    #[test]
    fn each_settle_counts_as_the_summary_says() {
        let archive = Statement::Archive;
        assert_eq!(
            counted(&RunEnd::Dispatched, &archive),
            Some(Counted::Dispatched)
        );
        assert_eq!(
            counted(&RunEnd::Handled, &archive),
            Some(Counted::Duplicate)
        );
        assert_eq!(counted(&RunEnd::AtBase, &archive), Some(Counted::Duplicate));
        assert_eq!(counted(&RunEnd::IgnoredEvent, &archive), None);
        assert_eq!(
            counted(&RunEnd::AtBase, &Statement::ArchiveRedispatched),
            Some(Counted::Dispatched)
        );
        assert_eq!(
            counted(
                &RunEnd::Refused(DeadReason::BadId),
                &Statement::DeadLetter(DeadReason::BadId)
            ),
            Some(Counted::DeadLettered)
        );
        let retry = Statement::Retry(Duration::from_secs(5));
        assert_eq!(counted(&RunEnd::Retry(None), &retry), None);
        assert_eq!(counted(&RunEnd::NotStarted, &Statement::Release), None);
    }

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
