//! Why a delivery or a queue message ended as it did, when it was not simply done: one closed
//! set of machine-readable reasons, each with the one string that answers, log lines, the status
//! page, dead letters, the sweep's summary and metric labels write for it.

use std::fmt;

/// A reason, from a fixed set (SPEC §3 and §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    // A duplicate (200): the row is handled, or being handled.
    /// A branch of the row exists.
    BranchExists,
    /// A pull request from the row's branch exists, in any state.
    PullRequest,
    /// Another delivery claimed the branch first.
    ClaimTaken,
    /// Joined a run of the row already under way in this process.
    InFlight,

    // Ignored (200): no work for rowbranch here.
    /// No route for the schema and table.
    NoRoute,
    /// An event type the route does not take.
    Event,
    /// A webhook delivery for a route that reads the queue.
    PgmqIntake,
    /// A queue message for a route that takes webhooks.
    WebhookIntake,

    // Refused before a row is known.
    /// Not `application/json` (415).
    ContentType,
    /// A body larger than `max_body_bytes` (413).
    TooLarge,
    /// Missing or wrong credentials (401).
    Unauthorized,
    /// The body did not arrive within `read_timeout_ms` (408).
    TimedOut,
    /// Not JSON, or not the Supabase shape (400; a queue message's dead letter).
    Malformed,

    // Refused with the row in hand.
    /// The row's id is not usable: null, an object, unsafe characters (422).
    BadId,
    /// The record lacks a column the route names: the route does not fit the table (422).
    MissingColumn,
    /// GitHub refused the dispatch, or the payload cannot be sent (422).
    PayloadRefused,
    /// The forge is unavailable or rate limited past the retry budget (503).
    Unavailable,
    /// `queue_capacity` rows are waiting already (503).
    QueueFull,
    /// The rows waiting hold `queue_bytes` already, or would with this one (503).
    QueueBytesFull,
    /// The process began shutting down before the row was claimed (503).
    Abandoned,
    /// A bug; the log holds the error chain (500).
    Internal,
}

impl Reason {
    /// Every reason, in the order above.
    pub const ALL: [Reason; 21] = [
        Reason::BranchExists,
        Reason::PullRequest,
        Reason::ClaimTaken,
        Reason::InFlight,
        Reason::NoRoute,
        Reason::Event,
        Reason::PgmqIntake,
        Reason::WebhookIntake,
        Reason::ContentType,
        Reason::TooLarge,
        Reason::Unauthorized,
        Reason::TimedOut,
        Reason::Malformed,
        Reason::BadId,
        Reason::MissingColumn,
        Reason::PayloadRefused,
        Reason::Unavailable,
        Reason::QueueFull,
        Reason::QueueBytesFull,
        Reason::Abandoned,
        Reason::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BranchExists => "branch_exists",
            Reason::PullRequest => "pull_request",
            Reason::ClaimTaken => "claim_taken",
            Reason::InFlight => "in_flight",
            Reason::NoRoute => "no_route",
            Reason::Event => "event",
            Reason::PgmqIntake => "pgmq_intake",
            Reason::WebhookIntake => "webhook_intake",
            Reason::ContentType => "content_type",
            Reason::TooLarge => "too_large",
            Reason::Unauthorized => "unauthorized",
            Reason::TimedOut => "timed_out",
            Reason::Malformed => "malformed",
            Reason::BadId => "bad_id",
            Reason::MissingColumn => "missing_column",
            Reason::PayloadRefused => "payload_refused",
            Reason::Unavailable => "unavailable",
            Reason::QueueFull => "queue_full",
            Reason::QueueBytesFull => "queue_bytes_full",
            Reason::Abandoned => "abandoned",
            Reason::Internal => "internal",
        }
    }

    /// Whether it turns a delivery away before any row is known (its content type, size,
    /// credentials or shape): such refusals are logged at most once a minute per reason, since
    /// anyone who can reach the port can make them.
    pub fn is_before_the_row(self) -> bool {
        matches!(
            self,
            Reason::ContentType
                | Reason::TooLarge
                | Reason::Unauthorized
                | Reason::TimedOut
                | Reason::Malformed
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn each_reason_has_its_own_snake_case_name() {
        let names: BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
        for name in names {
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}"
            );
        }
    }

    #[test]
    fn all_lists_every_reason_once_in_order() {
        let mut sorted = Reason::ALL.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, Reason::ALL.to_vec());
    }
}
