//! Every answer `/webhook` and `/github` give, and the one mapping from answer to HTTP (SPEC
//! §3's tables).

use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::db::status::RowState;
use crate::identity::{BranchName, RepoName, RowId};
use crate::metrics::AnswerLabels;
use crate::pipeline::{Ignored, Outcome, RunError};
use crate::reason::Reason;

/// How long a sender is asked to wait when the row was left at shutdown: about as long as a
/// restart takes.
const ABANDONED_RETRY_AFTER: Duration = Duration::from_secs(30);

/// Which row an answer is about.
#[derive(Debug, Clone)]
pub struct RowRef {
    pub id: RowId,
    pub branch: BranchName,
    pub repo: RepoName,
}

/// What `/webhook` and `/github` answer.
#[derive(Debug)]
pub enum Answer {
    Dispatched(RowRef),
    Duplicate(RowRef, Reason),
    /// Nothing done, for `reason`; about `row` when an App event's branch named one.
    Ignored {
        reason: Reason,
        message: String,
        row: Option<RowRef>,
    },
    /// An App event's state handed to the status writer, with its pull request's link.
    Noted {
        row: RowRef,
        state: RowState,
        pull_request: Option<String>,
        message: String,
    },
    /// Still working when `respond_within_ms` ran out.
    Accepted(RowRef, Duration),
    /// Not done, for `reason`, which gives the status ([`Answer::status`]); `retry_after` for
    /// a 503, which is safe to retry; `kind` for a 401, why the credentials were refused
    /// (`missing`, `wrong_secret`, ...), which the log and the status page name, never the body.
    Refused {
        reason: Reason,
        message: String,
        retry_after: Option<Duration>,
        kind: Option<&'static str>,
    },
}

impl Answer {
    /// A refusal that sending the same again will not mend.
    pub fn refused(reason: Reason, message: impl Into<String>) -> Answer {
        Answer::Refused {
            reason,
            message: message.into(),
            retry_after: None,
            kind: None,
        }
    }

    /// Nothing done, for `reason`, and no row named.
    pub fn ignored(reason: Reason, message: impl Into<String>) -> Answer {
        Answer::Ignored {
            reason,
            message: message.into(),
            row: None,
        }
    }

    /// A 503, safe to retry after `retry_after`: `unavailable` (the forge), `queue_full`,
    /// `queue_bytes_full` or `abandoned`.
    pub fn unavailable(reason: Reason, message: &str, retry_after: Duration) -> Answer {
        let secs = retry_after.as_secs().max(1);
        let (what, nothing) = match reason {
            Reason::QueueBytesFull => (
                "the rows waiting hold as much memory as they may",
                "nothing is claimed",
            ),
            _ => ("the forge is unavailable", "nothing is left claimed"),
        };
        let message = format!("{what} ({message}); {nothing}; retry after {secs} s");
        Answer::Refused {
            reason,
            message,
            retry_after: Some(retry_after),
            kind: None,
        }
    }

    /// A bug: the log holds the error chain, and the caller learns nothing more.
    pub fn internal() -> Answer {
        Answer::refused(Reason::Internal, "internal error")
    }

    /// The answer for a finished run of `row`.
    pub fn from_run(row: RowRef, result: Result<Outcome, RunError>) -> Answer {
        match result {
            Ok(Outcome::Dispatched { branch, .. }) => Answer::Dispatched(RowRef { branch, ..row }),
            Ok(Outcome::Duplicate { reason, branch }) => {
                Answer::Duplicate(RowRef { branch, ..row }, reason)
            }
            Err(RunError::Unavailable {
                message,
                retry_after,
                fallback,
            }) => Answer::unavailable(
                Reason::Unavailable,
                &message,
                retry_after.unwrap_or(fallback),
            ),
            Err(RunError::Refused(message)) => Answer::refused(Reason::PayloadRefused, message),
            Err(e @ RunError::Abandoned) => {
                Answer::unavailable(Reason::Abandoned, &e.to_string(), ABANDONED_RETRY_AFTER)
            }
            // Logged with its chain where the run ended.
            Err(RunError::Internal(_)) => Answer::internal(),
        }
    }

    /// SPEC §3's tables: a refusal's status follows from its reason, at `/webhook` and
    /// `/github` alike.
    pub fn status(&self) -> StatusCode {
        match self {
            Answer::Accepted(..) => StatusCode::ACCEPTED,
            Answer::Refused { reason, .. } => match reason {
                Reason::NotConfigured => StatusCode::NOT_FOUND,
                Reason::ContentType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Reason::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                Reason::Unauthorized => StatusCode::UNAUTHORIZED,
                Reason::TimedOut => StatusCode::REQUEST_TIMEOUT,
                Reason::Malformed => StatusCode::BAD_REQUEST,
                Reason::BadId
                | Reason::MissingColumn
                | Reason::PayloadRefused
                | Reason::NoRoute => StatusCode::UNPROCESSABLE_ENTITY,
                Reason::Unavailable
                | Reason::QueueFull
                | Reason::QueueBytesFull
                | Reason::Abandoned => StatusCode::SERVICE_UNAVAILABLE,
                // `internal`; a duplicate's or an ignored event's reason is no refusal's.
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            _ => StatusCode::OK,
        }
    }

    /// Why the delivery was not simply dispatched (or accepted): what the log line and the
    /// status page say.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Answer::Dispatched(_) | Answer::Accepted(..) | Answer::Noted { .. } => None,
            Answer::Duplicate(_, reason)
            | Answer::Ignored { reason, .. }
            | Answer::Refused { reason, .. } => Some(*reason),
        }
    }

    /// The series of `rowbranch_deliveries_total` (or `rowbranch_github_events_total`) it is
    /// counted in: its status, its outcome and its reason, the one its log line gives (empty
    /// when it has none).
    pub fn labels(&self) -> AnswerLabels {
        let reason = self.reason().map_or("", Reason::as_str);
        (self.status().as_u16(), self.outcome(), reason)
    }

    /// The row the answer is about, when it names one.
    pub fn row(&self) -> Option<&RowRef> {
        match self {
            Answer::Dispatched(row)
            | Answer::Duplicate(row, _)
            | Answer::Accepted(row, _)
            | Answer::Noted { row, .. } => Some(row),
            Answer::Ignored { row, .. } => row.as_ref(),
            Answer::Refused { .. } => None,
        }
    }

    /// The body's `outcome`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Answer::Dispatched(_) => "dispatched",
            Answer::Duplicate(..) => "duplicate",
            Answer::Ignored { .. } => "ignored",
            Answer::Noted { state, .. } => state.as_str(),
            Answer::Accepted(..) => "accepted",
            Answer::Refused { .. } => "error",
        }
    }

    /// The body's `message`.
    pub fn message(&self) -> String {
        match self {
            Answer::Dispatched(row) => format!(
                "claimed {} in {} and dispatched the work for row {}",
                row.branch, row.repo, row.id
            ),
            Answer::Duplicate(row, reason) => {
                let why = match reason {
                    Reason::PullRequest => format!("a pull request from {} exists", row.branch),
                    Reason::ClaimTaken => format!("another delivery claimed {} first", row.branch),
                    Reason::InFlight => {
                        "another delivery of it is being handled right now".to_owned()
                    }
                    // `BranchExists`, the one other reason a run gives a duplicate.
                    _ => format!("its branch {} exists", row.branch),
                };
                format!("row {} is already handled: {why}", row.id)
            }
            Answer::Accepted(row, waited) => format!(
                "row {} is still being handled after {} ms; the work goes on in the background",
                row.id,
                waited.as_millis()
            ),
            Answer::Ignored { message, .. }
            | Answer::Noted { message, .. }
            | Answer::Refused { message, .. } => message.clone(),
        }
    }

    /// The answer as HTTP: the JSON body every answer has — its outcome and message, its row,
    /// and its reason — with `Retry-After` for a 503 that asks to retry. `/github`'s body names
    /// `every_reason`; `/webhook`'s only a duplicate's, an ignored event's, and of the refusals
    /// the two its sender's operator must act on: `missing_column` (the route does not fit the
    /// table) and `no_route` (no route takes the table). Its other refusals say why in their
    /// message.
    pub fn response(self, every_reason: bool) -> Response {
        let mut body = json!({ "outcome": self.outcome(), "message": self.message() });
        if let Some(row) = self.row() {
            body["id"] = json!(row.id.as_str());
            body["branch"] = json!(row.branch.as_str());
            body["repo"] = json!(row.repo.to_string());
        }
        let hidden = |reason: &Reason| {
            !every_reason && !matches!(reason, Reason::MissingColumn | Reason::NoRoute)
        };
        let reason = match &self {
            Answer::Refused { reason, .. } if hidden(reason) => None,
            _ => self.reason(),
        };
        if let Some(reason) = reason {
            body["reason"] = json!(reason.as_str());
        }
        if let Answer::Noted {
            pull_request: Some(link),
            ..
        } = &self
        {
            body["pull_request"] = json!(link);
        }
        let retry_after = match &self {
            Answer::Refused { retry_after, .. } => *retry_after,
            _ => None,
        };
        let retry_after = retry_after.map(|after| [(header::RETRY_AFTER, after.as_secs().max(1))]);
        (self.status(), retry_after, Json(body)).into_response()
    }
}

impl From<Ignored> for Answer {
    fn from(why: Ignored) -> Answer {
        Answer::ignored(why.reason(), format!("ignored: {why}"))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::config::{Config, Route};
    use crate::event::EventKind;
    use crate::identity::BranchPrefix;
    use crate::metrics::{QUEUE_ROUTE_ANSWERS, ROUTE_ANSWERS, UNROUTED_ANSWERS};

    /// The test config's one route, reading its rows by `intake`.
    fn route(intake: &str) -> Arc<Route> {
        let text = format!(
            "{}    intake = \"{intake}\"\n",
            crate::config::TEST_LOCAL_CONFIG
        );
        let config = Config::parse(&text, Path::new("rowbranch.toml"), &|_| None)
            .expect("the test config parses");
        Arc::clone(&config.routes[0])
    }

    fn row() -> RowRef {
        let id = RowId::parse(&json!(42)).unwrap();
        let prefix = BranchPrefix::parse("feedback").unwrap();
        RowRef {
            branch: BranchName::new(&prefix, &id, None),
            id,
            repo: RepoName::parse("acme/app").unwrap(),
        }
    }

    /// One answer of each kind the webhook gives, and each reason.
    fn every_answer() -> Vec<Answer> {
        let second = Duration::from_secs(1);
        let ignored = [
            Ignored::Event {
                route: route("webhook"),
                kind: EventKind::Update,
            },
            // A webhook delivery of a queue route's table; the other way round (`webhook_intake`)
            // is a queue message's, never an answer.
            Ignored::OtherIntake {
                route: route("pgmq"),
            },
            Ignored::NotReady {
                route: route("webhook"),
                why: "held".into(),
                id: None,
            },
            Ignored::PassedBefore {
                route: route("webhook"),
                gate: "status = true".into(),
            },
        ];
        for why in &ignored {
            // A kind of ignored delivery not listed above stops this from compiling.
            match why {
                Ignored::NoRoute { .. }
                | Ignored::Event { .. }
                | Ignored::OtherIntake { .. }
                | Ignored::NotReady { .. }
                | Ignored::PassedBefore { .. } => {}
            }
        }
        let mut answers: Vec<Answer> = ignored.into_iter().map(Answer::from).collect();
        answers.extend([
            Answer::Dispatched(row()),
            Answer::Accepted(row(), second),
            Answer::internal(),
        ]);
        for reason in [
            Reason::ContentType,
            Reason::TooLarge,
            Reason::Unauthorized,
            Reason::TimedOut,
            Reason::Malformed,
            Reason::BadId,
            Reason::MissingColumn,
            Reason::PayloadRefused,
            Reason::NoRoute,
        ] {
            answers.push(Answer::refused(reason, "refused"));
        }
        for reason in [
            Reason::Unavailable,
            Reason::QueueFull,
            Reason::QueueBytesFull,
            Reason::Abandoned,
        ] {
            answers.push(Answer::unavailable(reason, "down", second));
        }
        for reason in [
            Reason::BranchExists,
            Reason::PullRequest,
            Reason::ClaimTaken,
            Reason::InFlight,
        ] {
            answers.push(Answer::Duplicate(row(), reason));
        }
        for answer in &answers {
            // A kind of answer not listed above stops this from compiling.
            match answer {
                Answer::Dispatched(_)
                | Answer::Duplicate(..)
                | Answer::Ignored { .. }
                | Answer::Accepted(..)
                | Answer::Refused { .. } => {}
                // `/github`'s alone: its own test counts it.
                Answer::Noted { .. } => {}
            }
        }
        answers
    }

    #[test]
    fn every_answer_is_counted_in_a_series_that_exists_from_the_start() {
        let at_start: Vec<&AnswerLabels> = ROUTE_ANSWERS
            .iter()
            .chain(UNROUTED_ANSWERS)
            .chain(QUEUE_ROUTE_ANSWERS)
            .collect();
        let answers = every_answer();
        for answer in &answers {
            let labels = answer.labels();
            assert!(
                at_start.contains(&&labels),
                "{answer:?} is counted as {labels:?}, which src/metrics.rs does not list"
            );
        }
        // And nothing is listed that no answer gives.
        for listed in at_start {
            assert!(
                answers.iter().any(|a| a.labels() == *listed),
                "src/metrics.rs lists {listed:?}, which no answer gives"
            );
        }
    }
}
