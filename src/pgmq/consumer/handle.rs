//! One message's life in this process: its row run through the pipeline, the decision
//! (`settle`), a dispatch again when one is owed, the settle's statement once no renewal of it
//! is under way, and the one count and log line of how it was settled.

use std::sync::Arc;

use super::statement::{Settled, Statement};
use super::Consumer;
use crate::config::Intake;
use crate::db::queue::Message;
use crate::forge::ForgeError;
use crate::metrics::NO_ROUTE;
use crate::pgmq::holds::{Begin, Rerun, Standing, Token};
use crate::pgmq::settle::{backoff, settle, DeadReason, RunEnd, Settle};
use crate::pipeline::{DuplicateReason, Ignored, Outcome, Plan, Planned, RunError};
use crate::webhook::payload;

impl Consumer {
    /// Runs one message's row and settles the message.
    pub(super) async fn handle(self: Arc<Self>, message: Message, token: Token) {
        let (route, row_id, end, plan) = self.run_row(&message).await;
        let Some(Standing { read_ct, lost }) = self.holds.standing(message.id, token) else {
            return;
        };
        let statement = self.decide(&end, read_ct, lost, plan, &message).await;
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
            Some(statement) => self.apply(&message, read_ct, lost, statement, &route).await,
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
        self.start(message, rerun.token);
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
            Err(RunError::Unavailable { retry_after, .. }) => RunEnd::Retry(retry_after),
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
            Err(ForgeError::Unavailable { retry_after, .. }) => RunEnd::Retry(retry_after),
            Err(_) => RunEnd::Retry(None),
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
}
