//! What becomes of a queue message: its [`Fate`], from how its row's run ended, through the
//! decision — a pure function of that and how often the message was read, so the whole table
//! can be tested — to the statement that settles it and the label it is counted under.

use std::time::Duration;

use crate::identity::BranchName;
use crate::metrics::MessageResult;
use crate::reason::Reason;

/// A message's fate, from its run to its settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Archived: this process claimed the branch and dispatched.
    Dispatched,
    /// Archived: the row is handled — a pull request from its branch, its branch ahead of its
    /// base, or (read once) another claimant's branch at its base.
    Handled,
    /// Archived: an event the route does not take.
    Ignored,
    /// The row's branch (this one) is at its base: another claimant holds it (`claim_taken`),
    /// or a branch exists with nothing on it (`branch_exists`, `ahead_by` = 0). Read once, the
    /// other claimant is alive and owes the dispatch (a claim that never dispatches is the
    /// sweep's dead claim); read again, an earlier holder of the message may have died between
    /// its claim and its dispatch, so it is dispatched again, then archived.
    AtBase(BranchName),
    /// Archived after the row was dispatched again.
    Redispatched,
    /// To the dead-letter queue with why (`no_route`, `malformed`, `bad_id`, `missing_column`,
    /// `payload_refused`), and archived, in one statement; then the dead letter's id.
    DeadLetter {
        reason: Reason,
        letter_id: Option<i64>,
    },
    /// Worth another try: GitHub unavailable, a 5xx, a bug, the pipeline full; with GitHub's
    /// `Retry-After` when it gave one. Decided into [`Fate::Later`].
    Retry(Option<Duration>),
    /// Left in the queue, visible again after this long.
    Later(Duration),
    /// Never started (the process is shutting down): visible again at once, if this process
    /// still holds it.
    Release,
    /// Another reader holds it now, or it is gone: left to that reader.
    LeaseLost,
}

impl Fate {
    /// Refused for good, with why.
    pub fn dead(reason: Reason) -> Fate {
        Fate::DeadLetter {
            reason,
            letter_id: None,
        }
    }

    /// The decision on a message read `read_ct` times. A message read for the first time never
    /// dispatches twice; read again, it dispatches at most once more per read: so a message
    /// read `read_ct` times causes at most `read_ct − 1` extra dispatches. It is never
    /// dead-lettered for retrying.
    pub fn decided(self, read_ct: i32, base: Duration, cap: Duration) -> Fate {
        match self {
            Fate::AtBase(_) if read_ct <= 1 => Fate::Handled,
            Fate::Retry(Some(after)) => Fate::Later(after.min(cap)),
            Fate::Retry(None) => Fate::Later(backoff(read_ct, base, cap)),
            other => other,
        }
    }

    /// Whether its statement makes the message visible to other readers.
    pub fn lets_go(&self) -> bool {
        matches!(self, Fate::Later(_) | Fate::Release)
    }

    /// Its `rowbranch_pgmq_messages_total` result, once settled.
    pub fn label(&self) -> MessageResult {
        match self {
            Fate::Dispatched | Fate::Handled | Fate::Ignored => MessageResult::Archived,
            Fate::AtBase(_) | Fate::Redispatched => MessageResult::Redispatched,
            Fate::DeadLetter { .. } => MessageResult::Dead,
            Fate::Retry(_) | Fate::Later(_) => MessageResult::Retried,
            Fate::Release => MessageResult::Released,
            Fate::LeaseLost => MessageResult::LeaseLost,
        }
    }
}

/// The backoff of a message read `read_ct` times: `base × 2^(read_ct − 1)`, at most `cap`.
pub fn backoff(read_ct: i32, base: Duration, cap: Duration) -> Duration {
    let doublings = u32::try_from(read_ct.saturating_sub(1))
        .unwrap_or(0)
        .min(20);
    base.saturating_mul(1 << doublings).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{BranchPrefix, RowId};

    const BASE: Duration = Duration::from_secs(5);
    const CAP: Duration = Duration::from_secs(300);

    fn at_base() -> Fate {
        let prefix = BranchPrefix::parse("feedback").unwrap();
        let id = RowId::parse(&serde_json::json!(7)).unwrap();
        Fate::AtBase(BranchName::new(&prefix, &id, None))
    }

    #[test]
    fn each_run_end_settles_its_message() {
        let later = |secs| Fate::Later(Duration::from_secs(secs));
        let dead = Fate::dead;
        // One case a line: the table is easier to scan than rustfmt's layout.
        #[rustfmt::skip]
        let cases = [
            (Fate::Dispatched, 1, Fate::Dispatched),
            (Fate::Dispatched, 3, Fate::Dispatched),
            (Fate::Handled, 1, Fate::Handled),
            (Fate::Handled, 5, Fate::Handled),
            (at_base(), 1, Fate::Handled),
            (at_base(), 2, at_base()),
            (at_base(), 9, at_base()),
            (Fate::Ignored, 1, Fate::Ignored),
            (dead(Reason::NoRoute), 1, dead(Reason::NoRoute)),
            (dead(Reason::Malformed), 1, dead(Reason::Malformed)),
            (dead(Reason::BadId), 4, dead(Reason::BadId)),
            (dead(Reason::MissingColumn), 1, dead(Reason::MissingColumn)),
            (dead(Reason::PayloadRefused), 1, dead(Reason::PayloadRefused)),
            (Fate::Retry(None), 1, later(5)),
            (Fate::Retry(None), 2, later(10)),
            (Fate::Retry(None), 4, later(40)),
            (Fate::Retry(None), 50, Fate::Later(CAP)),
            (Fate::Retry(Some(Duration::from_secs(60))), 1, later(60)),
            (Fate::Retry(Some(Duration::from_secs(3600))), 1, Fate::Later(CAP)),
            (Fate::Release, 1, Fate::Release),
            // Put off over its hourly budget: exactly as long as that says.
            (later(1800), 1, later(1800)),
        ];
        for (fate, read_ct, expected) in cases {
            assert_eq!(
                fate.clone().decided(read_ct, BASE, CAP),
                expected,
                "{fate:?} read {read_ct} times"
            );
        }
    }

    #[test]
    fn a_message_is_never_dead_lettered_for_retrying() {
        for read_ct in 1..200 {
            assert!(matches!(
                Fate::Retry(None).decided(read_ct, BASE, CAP),
                Fate::Later(_)
            ));
        }
    }

    #[test]
    fn a_message_dispatches_again_at_most_once_per_read_after_the_first() {
        for read_ct in 1..20 {
            let extra: i32 = (1..=read_ct)
                .map(|n| i32::from(matches!(at_base().decided(n, BASE, CAP), Fate::AtBase(_))))
                .sum();
            assert!(
                extra < read_ct,
                "{extra} extra dispatches in {read_ct} reads"
            );
        }
    }

    #[test]
    fn each_fate_counts_under_its_result_and_only_a_retry_or_a_release_lets_go() {
        assert_eq!(Fate::dead(Reason::BadId).label(), MessageResult::Dead);
        assert_eq!(Fate::Redispatched.label(), MessageResult::Redispatched);
        assert_eq!(Fate::Ignored.label(), MessageResult::Archived);
        assert_eq!(Fate::Later(CAP).label(), MessageResult::Retried);
        assert!(Fate::Release.lets_go() && Fate::Later(Duration::ZERO).lets_go());
        assert!(!Fate::Handled.lets_go() && !Fate::Redispatched.lets_go());
    }
}
