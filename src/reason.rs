//! Why a delivery or a queue message ended as it did, when it was not simply done: one closed
//! set of machine-readable reasons, each with the one string that answers, log lines, the status
//! page, dead letters, the sweep's summary and metric labels write for it.

/// A closed set of names: an enum whose every value has the one text that answers, log lines,
/// the config file and metric labels write for it, with `ALL`, `as_str`, `parse` (that text,
/// exactly) and `Display`.
macro_rules! named_set {
    ($(#[$meta:meta])* pub enum $name:ident {
        $($(#[$variant_meta:meta])* $variant:ident => $text:literal,)+
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value whose text is `text`, exactly.
            pub fn parse(text: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|value| value.as_str() == text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use named_set;

named_set! {
    /// A reason, from a fixed set (SPEC §3 and §5).
    pub enum Reason {
        // A duplicate (200): the row is handled, or being handled.
        /// A branch of the row exists.
        BranchExists => "branch_exists",
        /// A pull request from the row's branch exists, in any state.
        PullRequest => "pull_request",
        /// Another delivery claimed the branch first.
        ClaimTaken => "claim_taken",
        /// Joined a run of the row already under way in this process.
        InFlight => "in_flight",

        // Ignored (200): no work for rowbranch here.
        /// No route for the schema and table.
        NoRoute => "no_route",
        /// An event type the route does not take.
        Event => "event",
        /// A webhook delivery for a route that reads the queue.
        PgmqIntake => "pgmq_intake",
        /// A queue message for a route that takes webhooks.
        WebhookIntake => "webhook_intake",
        /// The row does not pass its route's gate (`run_when`): held until an UPDATE makes it.
        NotReady => "not_ready",
        /// An UPDATE of a row that passed the gate before it: the event that made it pass ran it.
        PassedBefore => "passed_before",

        // Refused before a row is known.
        /// Not `application/json` (415).
        ContentType => "content_type",
        /// A body larger than `max_body_bytes` (413).
        TooLarge => "too_large",
        /// Missing or wrong credentials (401).
        Unauthorized => "unauthorized",
        /// The body did not arrive within `read_timeout_ms` (408).
        TimedOut => "timed_out",
        /// Not JSON, or not the Supabase shape (400; a queue message's dead letter).
        Malformed => "malformed",

        // Refused with the row in hand.
        /// The row's id is not usable: null, an object, unsafe characters (422).
        BadId => "bad_id",
        /// The record lacks a column the route names: the route does not fit the table (422).
        MissingColumn => "missing_column",
        /// GitHub refused the dispatch, or the payload cannot be sent (422).
        PayloadRefused => "payload_refused",
        /// The forge is unavailable or rate limited past the retry budget (503).
        Unavailable => "unavailable",
        /// `queue_capacity` rows are waiting already (503).
        QueueFull => "queue_full",
        /// The rows waiting hold `queue_bytes` already, or would with this one (503).
        QueueBytesFull => "queue_bytes_full",
        /// The process began shutting down before the row was claimed (503).
        Abandoned => "abandoned",
        /// A bug; the log holds the error chain (500).
        Internal => "internal",

        // `POST /github`, the App's own events (SPEC §3); its refusals before the event is read
        // are the ones above (`content_type`, `too_large`, `unauthorized`, `timed_out`,
        // `malformed`), and so are `event`, `pull_request` and `unavailable`.
        /// `GITHUB_WEBHOOK_SECRET` is not set: the endpoint is off (404).
        NotConfigured => "not_configured",
        /// An action of the event that says nothing of a row's state (`labeled`, `requested`).
        Action => "action",
        /// A `workflow_run` that is not the work of a row: not started by `repository_dispatch`,
        /// or its title is not `rowbranch: {branch}`.
        NotWork => "not_work",
        /// No route names the repository.
        Repository => "repository",
        /// The pull request's head is in another repository than the route's: a fork.
        Fork => "fork",
        /// No route's `branch_prefix` owns the branch.
        Branch => "branch",
        /// The route writes neither `status_column` nor `pull_request_column`.
        NotWritten => "not_written",
        /// No row of the route's table has the branch's id (any more).
        NoRow => "no_row",
        /// The branch is older than the row's latest `-redo-N`: `redo` started the row anew.
        Superseded => "superseded",
    }
}

impl Reason {
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
