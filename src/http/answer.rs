//! Every answer the webhook gives, and the one mapping from answer to HTTP (SPEC §3's table).

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::identity::{BranchName, RepoName, RowId};
use crate::pipeline::{DuplicateReason, Ignored, Outcome, RunError};
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

/// What the webhook answers.
#[derive(Debug)]
pub enum Answer {
    Dispatched(RowRef),
    Duplicate(RowRef, DuplicateReason),
    Ignored(Ignored),
    /// Still working when `respond_within_ms` ran out.
    Accepted(RowRef, Duration),
    BadRequest(String),
    /// The body did not arrive within `read_timeout_ms`; the connection is closed.
    TimedOut(Duration),
    Unauthorized,
    TooLarge(usize),
    UnsupportedMediaType,
    /// The row cannot be run as it is: `bad_id`, `missing_column` or `payload_refused`.
    Unprocessable {
        reason: Reason,
        message: String,
    },
    Internal,
    /// Safe to retry: `unavailable` (the forge), `queue_full`, `queue_bytes_full` or
    /// `abandoned`.
    Unavailable {
        reason: Reason,
        message: String,
        retry_after: Duration,
    },
}

impl Answer {
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
            }) => Answer::Unavailable {
                reason: Reason::Unavailable,
                message,
                retry_after: retry_after.unwrap_or(fallback),
            },
            Err(RunError::Refused(message)) => Answer::Unprocessable {
                reason: Reason::PayloadRefused,
                message,
            },
            Err(e @ RunError::Abandoned) => Answer::Unavailable {
                reason: Reason::Abandoned,
                message: e.to_string(),
                retry_after: ABANDONED_RETRY_AFTER,
            },
            // Logged with its chain where the run ended; the caller learns nothing more.
            Err(RunError::Internal(_)) => Answer::Internal,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Answer::Dispatched(_) | Answer::Duplicate(..) | Answer::Ignored(_) => StatusCode::OK,
            Answer::Accepted(..) => StatusCode::ACCEPTED,
            Answer::BadRequest(_) => StatusCode::BAD_REQUEST,
            Answer::TimedOut(_) => StatusCode::REQUEST_TIMEOUT,
            Answer::Unauthorized => StatusCode::UNAUTHORIZED,
            Answer::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Answer::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Answer::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Answer::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Answer::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Why the delivery was not simply dispatched (or accepted): what the log line and the
    /// status page say.
    pub fn reason(&self) -> Option<Reason> {
        Some(match self {
            Answer::Dispatched(_) | Answer::Accepted(..) => return None,
            Answer::Duplicate(_, reason) => Reason::from(*reason),
            Answer::Ignored(why) => why.reason(),
            Answer::BadRequest(_) => Reason::Malformed,
            Answer::TimedOut(_) => Reason::TimedOut,
            Answer::Unauthorized => Reason::Unauthorized,
            Answer::TooLarge(_) => Reason::TooLarge,
            Answer::UnsupportedMediaType => Reason::ContentType,
            Answer::Unprocessable { reason, .. } | Answer::Unavailable { reason, .. } => *reason,
            Answer::Internal => Reason::Internal,
        })
    }

    /// The body's `reason`, which `rowbranch_deliveries_total` counts by too: a duplicate's, an
    /// ignored event's, and `missing_column`, the one refusal its sender's operator must act on
    /// (the route does not fit the table). The other refusals say why in their message, and in
    /// the log.
    pub fn body_reason(&self) -> Option<Reason> {
        match self {
            Answer::Duplicate(..) | Answer::Ignored(_) => self.reason(),
            Answer::Unprocessable {
                reason: reason @ Reason::MissingColumn,
                ..
            } => Some(*reason),
            _ => None,
        }
    }

    /// The row the answer is about, when it names one.
    pub fn row(&self) -> Option<&RowRef> {
        match self {
            Answer::Dispatched(row) | Answer::Duplicate(row, _) | Answer::Accepted(row, _) => {
                Some(row)
            }
            _ => None,
        }
    }

    /// The body's `outcome`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Answer::Dispatched(_) => "dispatched",
            Answer::Duplicate(..) => "duplicate",
            Answer::Ignored(_) => "ignored",
            Answer::Accepted(..) => "accepted",
            _ => "error",
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
                    DuplicateReason::BranchExists => format!("its branch {} exists", row.branch),
                    DuplicateReason::PullRequest => {
                        format!("a pull request from {} exists", row.branch)
                    }
                    DuplicateReason::ClaimTaken => {
                        format!("another delivery claimed {} first", row.branch)
                    }
                    DuplicateReason::InFlight => {
                        "another delivery of it is being handled right now".to_owned()
                    }
                };
                format!("row {} is already handled: {why}", row.id)
            }
            Answer::Ignored(why) => format!("ignored: {why}"),
            Answer::Accepted(row, waited) => format!(
                "row {} is still being handled after {} ms; the work goes on in the background",
                row.id,
                waited.as_millis()
            ),
            Answer::BadRequest(why) | Answer::Unprocessable { message: why, .. } => why.clone(),
            Answer::TimedOut(limit) => format!(
                "the body did not arrive within read_timeout_ms ({} ms)",
                limit.as_millis()
            ),
            Answer::Unauthorized => "missing or wrong credentials".into(),
            Answer::TooLarge(max) => {
                format!("the body is larger than max_body_bytes ({max} bytes)")
            }
            Answer::UnsupportedMediaType => "Content-Type must be application/json".into(),
            Answer::Internal => "internal error".into(),
            Answer::Unavailable {
                reason: Reason::QueueBytesFull,
                message,
                retry_after,
            } => format!(
                "the rows waiting hold as much memory as they may ({message}); nothing is \
                 claimed; retry after {} s",
                retry_after.as_secs().max(1)
            ),
            Answer::Unavailable {
                message,
                retry_after,
                ..
            } => format!(
                "the forge is unavailable ({message}); nothing is left claimed; retry after {} s",
                retry_after.as_secs().max(1)
            ),
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut body = Map::new();
        body.insert("outcome".into(), json!(self.outcome()));
        body.insert("message".into(), json!(self.message()));
        if let Answer::Dispatched(row) | Answer::Duplicate(row, _) | Answer::Accepted(row, _) =
            &self
        {
            body.insert("id".into(), json!(row.id.as_str()));
            body.insert("branch".into(), json!(row.branch.as_str()));
            body.insert("repo".into(), json!(row.repo.to_string()));
        }
        if let Some(reason) = self.body_reason() {
            body.insert("reason".into(), json!(reason.as_str()));
        }
        let mut response = (self.status(), Json(Value::Object(body))).into_response();
        if let Answer::Unavailable { retry_after, .. } = &self {
            let secs = retry_after.as_secs().max(1);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
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
    use crate::metrics::{AnswerLabels, QUEUE_ROUTE_ANSWERS, ROUTE_ANSWERS, UNROUTED_ANSWERS};

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
        let mut answers = vec![
            Answer::Dispatched(row()),
            Answer::Ignored(Ignored::NoRoute {
                table: "public.other".into(),
            }),
            Answer::Ignored(Ignored::Event {
                route: route("webhook"),
                kind: EventKind::Update,
            }),
            // A webhook delivery of a queue route's table; the other way round (`webhook_intake`)
            // is a queue message's, never an answer.
            Answer::Ignored(Ignored::OtherIntake {
                route: route("pgmq"),
            }),
            Answer::Accepted(row(), second),
            Answer::BadRequest("not JSON".into()),
            Answer::TimedOut(second),
            Answer::Unauthorized,
            Answer::TooLarge(1),
            Answer::UnsupportedMediaType,
            Answer::Internal,
        ];
        for reason in [Reason::BadId, Reason::MissingColumn, Reason::PayloadRefused] {
            answers.push(Answer::Unprocessable {
                reason,
                message: "refused".into(),
            });
        }
        for reason in [
            Reason::Unavailable,
            Reason::QueueFull,
            Reason::QueueBytesFull,
            Reason::Abandoned,
        ] {
            answers.push(Answer::Unavailable {
                reason,
                message: "down".into(),
                retry_after: second,
            });
        }
        for reason in [
            DuplicateReason::BranchExists,
            DuplicateReason::PullRequest,
            DuplicateReason::ClaimTaken,
            DuplicateReason::InFlight,
        ] {
            // A reason not listed above stops this from compiling.
            match reason {
                DuplicateReason::BranchExists
                | DuplicateReason::PullRequest
                | DuplicateReason::ClaimTaken
                | DuplicateReason::InFlight => {}
            }
            answers.push(Answer::Duplicate(row(), reason));
        }
        for answer in &answers {
            // A kind of answer not listed above stops this from compiling.
            match answer {
                Answer::Dispatched(_)
                | Answer::Duplicate(..)
                | Answer::Ignored(Ignored::NoRoute { .. })
                | Answer::Ignored(Ignored::Event { .. })
                | Answer::Ignored(Ignored::OtherIntake { .. })
                | Answer::Accepted(..)
                | Answer::BadRequest(_)
                | Answer::TimedOut(_)
                | Answer::Unauthorized
                | Answer::TooLarge(_)
                | Answer::UnsupportedMediaType
                | Answer::Unprocessable { .. }
                | Answer::Internal
                | Answer::Unavailable { .. } => {}
            }
        }
        answers
    }

    /// The reason `rowbranch_deliveries_total` counts an answer by.
    fn counted(answer: &Answer) -> &'static str {
        answer.body_reason().map_or("", Reason::as_str)
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
            let labels = (answer.status().as_u16(), answer.outcome(), counted(answer));
            assert!(
                at_start.contains(&&labels),
                "{answer:?} is counted as {labels:?}, which src/metrics.rs does not list"
            );
        }
        // And nothing is listed that no answer gives.
        for listed in at_start {
            assert!(
                answers
                    .iter()
                    .any(|a| (a.status().as_u16(), a.outcome(), counted(a)) == *listed),
                "src/metrics.rs lists {listed:?}, which no answer gives"
            );
        }
    }
}
