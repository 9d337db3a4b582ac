//! The one executor: check, claim, dispatch, and roll the claim back on a definite failure; or,
//! for a redo, claim a branch of its own; or, for a dead claim, dispatch again. Every caller
//! reaches it through [`super::Pipeline::submit`], single flight included.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::plan::Plan;
use crate::forge::{Base, Claim, Forge, ForgeError};
use crate::identity::BranchName;
use crate::reason::Reason;
use crate::shutdown::Shutdown;

/// How long a caller is asked to wait when the forge gave no hint.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(10);
/// How long a caller is asked to wait when the forge's state needs a person to fix it.
const REFUSED_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How a row's run ended, when it ended well.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// This run claimed the branch and the dispatch was accepted.
    Dispatched { branch: BranchName, base: Base },
    /// The row was handled already, or is being handled: `reason` is one of the four a
    /// duplicate has (SPEC §3): `BranchExists`, `PullRequest`, `ClaimTaken`, `InFlight`.
    Duplicate { reason: Reason, branch: BranchName },
}

/// How a row's run failed. Cloned to every delivery that joined the run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunError {
    /// The forge is unavailable or rate limited; nothing is left claimed; safe to retry.
    /// `retry_after` is the forge's own hint (GitHub's `Retry-After`), when it gave one;
    /// `fallback` what to ask a caller to wait otherwise.
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after: Option<Duration>,
        fallback: Duration,
    },
    /// The payload cannot be sent as it is (our limits or the forge's); retrying will not help.
    #[error("{0}")]
    Refused(String),
    /// A bug, here or in the forge; the chain is logged, the caller learns nothing more.
    #[error("{0:#}")]
    Internal(Arc<anyhow::Error>),
    /// The process began shutting down before the row's claim: nothing is claimed; safe to
    /// send again.
    #[error("rowbranch is shutting down and did not claim the row; send it again")]
    Abandoned,
}

/// What a run tells the pipeline while it is under way: the branch it claimed and has not yet
/// dispatched or released (which it owes a dispatch or a release), for the log at shutdown.
pub type Claimed = Mutex<Option<BranchName>>;

fn set(claimed: &Claimed, branch: Option<BranchName>) {
    *claimed.lock().expect("claim lock poisoned") = branch;
}

impl RunError {
    pub fn from_forge(err: ForgeError, during: &str) -> RunError {
        let (message, retry_after, fallback) = match err {
            ForgeError::Unavailable {
                message,
                retry_after,
            } => (message, retry_after, DEFAULT_RETRY_AFTER),
            // Outside a dispatch, a refusal is the forge's state (an empty repository, a
            // conflicting ref), not the payload's: the row can go once that is fixed.
            ForgeError::Refused { message } => (message, None, REFUSED_RETRY_AFTER),
            ForgeError::Other(e) => {
                return RunError::Internal(Arc::new(e.context(during.to_owned())))
            }
            ForgeError::ShuttingDown => return RunError::Abandoned,
        };
        RunError::Unavailable {
            message: format!("{during}: {message}"),
            retry_after,
            fallback,
        }
    }
}

/// How a row's run starts: what the executor does with its plan.
#[derive(Debug, Clone)]
pub enum Start {
    /// A row as it comes (a webhook, a queue message, the sweep): the three reads, then the
    /// claim and the dispatch (SPEC §5).
    New,
    /// `redo`: past "handled", claim `plan.branch` (a free one) at the current base and
    /// dispatch.
    Redo,
    /// A dead claim ([`at_base`]): dispatch again on `plan.branch` as it is, with this base in
    /// the payload. The workflow's concurrency group and guard absorb a second dispatch of a
    /// row that had one.
    Redispatch(Base),
}

/// The dead-claim rule: a row's branch still at its base — nothing pushed on it — may be a
/// claim whose dispatch was never made (its claimer died between the two), and is dispatched
/// again; a branch ahead of its base is handled. The sweep asks it of an old lone branch, the
/// queue of a message read again whose row has a branch.
pub async fn at_base(forge: &dyn Forge, plan: &Plan, base: &Base) -> Result<bool, ForgeError> {
    Ok(forge.ahead_by(&plan.route.repo, base, &plan.branch).await? == 0)
}

/// What is said of a claim at its base that a run of the work workflow names (queued, running
/// or finished): its work ran and pushed nothing, so dispatching it again would pay for the
/// run again, at every sweep and every read (SPEC §6).
pub const ALREADY_RAN: &str = "a claim at its base whose work already ran (a run of the work workflow names it) and pushed nothing: not dispatched again; `rowbranch redo` runs the row on purpose";

/// Runs one row as `start` says: for a new row, steps 1 and 2 (SPEC §5) and the base, then the
/// claim and the dispatch.
pub(super) async fn execute(
    forge: &dyn Forge,
    plan: &Plan,
    start: Start,
    shutdown: &Shutdown,
    claimed: &Claimed,
) -> Result<Outcome, RunError> {
    let repo = &plan.route.repo;
    let read_base = |base: Result<Base, ForgeError>| {
        base.map_err(|e| RunError::from_forge(e, "reading the default branch"))
    };
    // A row not yet claimed once the shutdown has begun is left for a redelivery or the sweep:
    // its reads would only wait for GitHub slots that the claimed rows' dispatches need within
    // the grace.
    let abandon_if_draining = || match shutdown.is_draining() {
        true => Err(RunError::Abandoned),
        false => Ok(()),
    };
    let base = match start {
        Start::Redispatch(base) => {
            let during = "dispatching a claimed row again";
            let sent = (dispatch(forge, plan, base, claimed, during).await)
                .inspect(|_| tracing::info!("dispatched a claimed row again"));
            set(claimed, None);
            return sent;
        }
        Start::Redo => read_base(forge.base(repo).await)?,
        Start::New => {
            abandon_if_draining()?;
            // Steps 1 and 2, and the base for step 3: three reads, one round trip.
            let (branches, pull, base) = tokio::join!(
                forge.row_branches(repo, &plan.route.branch_prefix, &plan.id),
                forge.has_pull_request(repo, &plan.branch),
                forge.base(repo),
            );
            let branches =
                branches.map_err(|e| RunError::from_forge(e, "listing the row's branches"))?;
            if let Some(branch) = branches.into_iter().min() {
                return Ok(Outcome::Duplicate {
                    reason: Reason::BranchExists,
                    branch,
                });
            }
            if pull.map_err(|e| RunError::from_forge(e, "looking up pull requests"))? {
                return Ok(Outcome::Duplicate {
                    reason: Reason::PullRequest,
                    branch: plan.branch.clone(),
                });
            }
            read_base(base)?
        }
    };
    // Steps 3 to 5: claim the branch, dispatch, and release the claim if the dispatch
    // definitely failed.
    // Rendered before the claim: a payload that cannot be sent must not leave a branch behind.
    // Then let go, and rendered again once claimed: a row waits for its turn to claim holding
    // its text once (in its plan), not twice.
    plan.render(base.branch.as_str(), base.sha.as_str())
        .map_err(|e| RunError::Refused(e.to_string()))?;
    // The grace is for rows that hold a claim.
    abandon_if_draining()?;
    let claim = forge
        .claim(repo, &plan.branch, &base.sha)
        .await
        .map_err(|e| RunError::from_forge(e, "claiming the branch"))?;
    if claim == Claim::Exists {
        return Ok(Outcome::Duplicate {
            reason: Reason::ClaimTaken,
            branch: plan.branch.clone(),
        });
    }
    if claim == Claim::Ambiguous {
        // At least once beats at most once: the workflow's guard makes a second run a no-op.
        // The run's span names the row.
        tracing::warn!("claim answer was ambiguous; dispatching anyway");
    }
    // The same rendering as before the claim, which succeeded.
    let sent = dispatch(forge, plan, base.clone(), claimed, "dispatching").await;
    // Only a claim that is certainly ours is released: an ambiguous one may be another
    // delivery's, already dispatched. The sweep finds what is left as a dead claim.
    if sent.is_err() && claim == Claim::Created {
        if let Err(e) = forge.release(repo, &plan.branch, &base.sha).await {
            tracing::error!(id = %plan.id, branch = %plan.branch, error = %e,
                "the dispatch failed and the claim could not be released; reconcile will find it as a dead claim");
        }
    }
    set(claimed, None);
    sent
}

/// Steps 4 and 5, for a claim this run holds (or a dead claim, held already): the branch is
/// owed a dispatch until it is made. A payload the forge refuses is the payload's fault.
async fn dispatch(
    forge: &dyn Forge,
    plan: &Plan,
    base: Base,
    claimed: &Claimed,
    during: &str,
) -> Result<Outcome, RunError> {
    set(claimed, Some(plan.branch.clone()));
    let payload = plan
        .render(base.branch.as_str(), base.sha.as_str())
        .map_err(|e| RunError::Refused(e.to_string()))?;
    let route = &plan.route;
    match forge
        .dispatch(&route.repo, &route.event_type, &Value::Object(payload))
        .await
    {
        Ok(()) => Ok(Outcome::Dispatched {
            branch: plan.branch.clone(),
            base,
        }),
        Err(ForgeError::Refused { message }) => Err(RunError::Refused(format!(
            "the forge refused the dispatch: {message}"
        ))),
        Err(e) => Err(RunError::from_forge(e, during)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_forge_passes_on_its_own_hint_and_nothing_else() {
        let unavailable = |retry_after| ForgeError::Unavailable {
            message: "503".into(),
            retry_after,
        };
        let hinted = RunError::from_forge(unavailable(Some(Duration::from_secs(3))), "reading");
        let unhinted = RunError::from_forge(unavailable(None), "reading");
        let refused = RunError::from_forge(
            ForgeError::Refused {
                message: "empty".into(),
            },
            "claiming",
        );
        // GitHub's hint is the hint; without one, a queue backs off its own way and a webhook's
        // sender is told the fallback.
        for (error, hint, fallback) in [
            (hinted, Some(Duration::from_secs(3)), DEFAULT_RETRY_AFTER),
            (unhinted, None, DEFAULT_RETRY_AFTER),
            (refused, None, REFUSED_RETRY_AFTER),
        ] {
            match error {
                RunError::Unavailable {
                    retry_after,
                    fallback: given,
                    ..
                } => assert_eq!((retry_after, given), (hint, fallback)),
                other => panic!("{other:?}"),
            }
        }
    }
}
