//! What becomes of a queue message once its row's run has ended: a pure function of how the
//! run ended and how often the message has been read, so the whole table can be tested.

use std::time::Duration;

use crate::pipeline::PlanError;
use crate::reason::Reason;

/// Why a message goes to the dead-letter queue: its dead letter's `reason`, one of the
/// [`Reason`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadReason {
    /// No route reads its table from the queue.
    NoRoute,
    /// Not a row's event.
    Malformed,
    /// Its row has no usable id.
    BadId,
    /// Its row lacks a column the route names: the route does not fit the table. Redriven
    /// once the config is fixed, it runs.
    MissingColumn,
    /// GitHub refused the dispatch's payload (a 422).
    PayloadRefused,
}

impl DeadReason {
    /// As the dead letter and the log line say it.
    pub fn as_str(self) -> &'static str {
        Reason::from(self).as_str()
    }

    /// Why a row its route cannot plan is refused.
    pub fn of(e: &PlanError) -> DeadReason {
        match e.reason() {
            Reason::MissingColumn => DeadReason::MissingColumn,
            Reason::BadId => DeadReason::BadId,
            _ => DeadReason::Malformed,
        }
    }
}

impl From<DeadReason> for Reason {
    fn from(reason: DeadReason) -> Reason {
        match reason {
            DeadReason::NoRoute => Reason::NoRoute,
            DeadReason::Malformed => Reason::Malformed,
            DeadReason::BadId => Reason::BadId,
            DeadReason::MissingColumn => Reason::MissingColumn,
            DeadReason::PayloadRefused => Reason::PayloadRefused,
        }
    }
}

/// How a message's run ended, as far as the message is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// This run claimed the branch and dispatched.
    Dispatched,
    /// The row is handled: a pull request from its branch, or its branch ahead of its base.
    Handled,
    /// The row's branch is at its base: another claimant holds it (`claim_taken`), or a
    /// branch exists with nothing on it (`branch_exists`, `ahead_by` = 0).
    AtBase,
    /// An event the route does not take.
    IgnoredEvent,
    /// No route reads this table from the queue.
    NoRoute,
    /// Refused for good, with why (`Malformed`, `BadId`, `MissingColumn`, `PayloadRefused`).
    Refused(DeadReason),
    /// Worth another try: GitHub unavailable, a 5xx, a bug, the pipeline full. GitHub's
    /// `Retry-After` when it gave one.
    Retry(Option<Duration>),
    /// Never started: the process is shutting down.
    NotStarted,
    /// Not run: its route's hourly budget is spent; left in the queue until a row of it comes
    /// back, this long.
    PutOff(Duration),
}

/// What to do with the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    Archive,
    /// Dispatch again on the branch as it is, then archive: an earlier holder of the message
    /// may have died between its claim and its dispatch.
    Redispatch,
    /// To the dead-letter queue with the reason, and archived, in one statement.
    DeadLetter(DeadReason),
    /// Left in the queue, visible again after this long.
    Retry(Duration),
    /// Made visible again at once (only if this process still holds it).
    Release,
}

/// The backoff of a message read `read_ct` times: `base × 2^(read_ct − 1)`, at most `cap`.
pub fn backoff(read_ct: i32, base: Duration, cap: Duration) -> Duration {
    let doublings = u32::try_from(read_ct.saturating_sub(1))
        .unwrap_or(0)
        .min(20);
    base.saturating_mul(1 << doublings).min(cap)
}

/// The decision. A message read for the first time never dispatches twice; read again, it
/// dispatches at most once more per read: so a message read `read_ct` times causes at most
/// `read_ct − 1` extra dispatches.
pub fn settle(end: &RunEnd, read_ct: i32, base: Duration, cap: Duration) -> Settle {
    match end {
        RunEnd::Dispatched | RunEnd::Handled | RunEnd::IgnoredEvent => Settle::Archive,
        // Read once: the other claimant is alive (a webhook, the sweep, redo, another replica)
        // and owes the dispatch; a claim that never dispatches is the sweep's dead claim.
        RunEnd::AtBase if read_ct <= 1 => Settle::Archive,
        RunEnd::AtBase => Settle::Redispatch,
        RunEnd::NoRoute => Settle::DeadLetter(DeadReason::NoRoute),
        RunEnd::Refused(reason) => Settle::DeadLetter(*reason),
        RunEnd::Retry(Some(after)) => Settle::Retry((*after).min(cap)),
        RunEnd::Retry(None) => Settle::Retry(backoff(read_ct, base, cap)),
        RunEnd::NotStarted => Settle::Release,
        RunEnd::PutOff(wait) => Settle::Retry(*wait),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_secs(5);
    const CAP: Duration = Duration::from_secs(300);

    #[test]
    fn each_run_end_settles_its_message() {
        let s = |end: RunEnd, read_ct| settle(&end, read_ct, BASE, CAP);
        // One case a line: the table is easier to scan than rustfmt's layout.
        #[rustfmt::skip]
        let cases = [
            (RunEnd::Dispatched, 1, Settle::Archive),
            (RunEnd::Dispatched, 3, Settle::Archive),
            (RunEnd::Handled, 1, Settle::Archive),
            (RunEnd::Handled, 5, Settle::Archive),
            (RunEnd::AtBase, 1, Settle::Archive),
            (RunEnd::AtBase, 2, Settle::Redispatch),
            (RunEnd::AtBase, 9, Settle::Redispatch),
            (RunEnd::IgnoredEvent, 1, Settle::Archive),
            (RunEnd::NoRoute, 1, Settle::DeadLetter(DeadReason::NoRoute)),
            (RunEnd::Refused(DeadReason::Malformed), 1, Settle::DeadLetter(DeadReason::Malformed)),
            (RunEnd::Refused(DeadReason::BadId), 4, Settle::DeadLetter(DeadReason::BadId)),
            (RunEnd::Refused(DeadReason::MissingColumn), 1, Settle::DeadLetter(DeadReason::MissingColumn)),
            (RunEnd::Refused(DeadReason::PayloadRefused), 1, Settle::DeadLetter(DeadReason::PayloadRefused)),
            (RunEnd::Retry(None), 1, Settle::Retry(Duration::from_secs(5))),
            (RunEnd::Retry(None), 2, Settle::Retry(Duration::from_secs(10))),
            (RunEnd::Retry(None), 4, Settle::Retry(Duration::from_secs(40))),
            (RunEnd::Retry(None), 50, Settle::Retry(CAP)),
            (RunEnd::Retry(Some(Duration::from_secs(60))), 1, Settle::Retry(Duration::from_secs(60))),
            (RunEnd::Retry(Some(Duration::from_secs(3600))), 1, Settle::Retry(CAP)),
            (RunEnd::NotStarted, 1, Settle::Release),
            (RunEnd::PutOff(Duration::from_secs(1800)), 1, Settle::Retry(Duration::from_secs(1800))),
        ];
        for (end, read_ct, expected) in cases {
            assert_eq!(
                s(end.clone(), read_ct),
                expected,
                "{end:?} read {read_ct} times"
            );
        }
    }

    #[test]
    fn a_message_is_never_dead_lettered_for_retrying() {
        for read_ct in 1..200 {
            assert!(matches!(
                settle(&RunEnd::Retry(None), read_ct, BASE, CAP),
                Settle::Retry(_)
            ));
        }
    }

    #[test]
    fn a_message_dispatches_again_at_most_once_per_read_after_the_first() {
        for read_ct in 1..20 {
            let extra: i32 = (1..=read_ct)
                .map(|n| i32::from(settle(&RunEnd::AtBase, n, BASE, CAP) == Settle::Redispatch))
                .sum();
            assert!(
                extra < read_ct,
                "{extra} extra dispatches in {read_ct} reads"
            );
        }
    }
}
