//! The operations the fake knows, the faults a test can inject into them, and the
//! GitHub-like answers those faults give.

use std::time::Duration;

use serde_json::json;

use crate::reply::Reply;

/// One REST operation of the fake: the unit of fault injection and of the request log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `GET /app` (JWT).
    GetApp,
    /// `GET /repos/{o}/{r}/installation` (JWT).
    GetInstallation,
    /// `POST /app/installations/{id}/access_tokens` (JWT).
    MintToken,
    /// `GET /repos/{o}/{r}`.
    GetRepo,
    /// `GET /repos/{o}/{r}/git/ref/{ref}`.
    GetRef,
    /// `GET /repos/{o}/{r}/git/matching-refs/{prefix}`.
    MatchingRefs,
    /// `POST /repos/{o}/{r}/git/refs`.
    CreateRef,
    /// `DELETE /repos/{o}/{r}/git/refs/{ref}`.
    DeleteRef,
    /// `POST /repos/{o}/{r}/dispatches`.
    Dispatch,
    /// `GET /repos/{o}/{r}/pulls`.
    ListPulls,
    /// `GET /repos/{o}/{r}/compare/{base}...{head}`.
    Compare,
    /// `GET /repos/{o}/{r}/contents/{path}`.
    GetContents,
    /// `GET /repos/{o}/{r}/actions/runs`.
    ListRuns,
    /// `GET /repos/{o}/{r}/actions/workflows/{workflow_id}`.
    GetWorkflow,
    /// `GET /rate_limit` (any credential, or none; not counted against the limit).
    RateLimit,
    /// `POST /app-manifests/{code}/conversions` (no authentication).
    ManifestConversion,
    /// `GET /users/{username}` (no authentication needed).
    GetUser,
    /// `GET /app/hook/config` (JWT): the App's webhook.
    GetHookConfig,
}

impl Op {
    /// Every operation the fake knows.
    pub const ALL: [Op; 17] = [
        Op::GetApp,
        Op::GetHookConfig,
        Op::GetInstallation,
        Op::MintToken,
        Op::GetRepo,
        Op::GetRef,
        Op::MatchingRefs,
        Op::CreateRef,
        Op::DeleteRef,
        Op::Dispatch,
        Op::ListPulls,
        Op::Compare,
        Op::GetContents,
        Op::ListRuns,
        Op::GetWorkflow,
        Op::RateLimit,
        Op::ManifestConversion,
    ];

    /// The reads rowbranch makes for each row (its branches, its pull request, the base).
    pub const ROW_READS: [Op; 4] = [Op::GetRepo, Op::GetRef, Op::MatchingRefs, Op::ListPulls];

    /// Whether the operation authenticates with the App's JWT (else an installation token).
    pub fn needs_jwt(self) -> bool {
        matches!(
            self,
            Op::GetApp | Op::GetInstallation | Op::MintToken | Op::GetHookConfig
        )
    }

    /// The installation permission (and level) GitHub asks of a token for this operation.
    pub(crate) fn permission(self) -> Option<(&'static str, &'static str)> {
        match self {
            Op::GetApp
            | Op::GetHookConfig
            | Op::GetInstallation
            | Op::MintToken
            | Op::ManifestConversion
            | Op::GetUser
            | Op::RateLimit => None,
            Op::GetRepo => Some(("metadata", "read")),
            Op::GetRef | Op::MatchingRefs | Op::Compare | Op::GetContents => {
                Some(("contents", "read"))
            }
            Op::CreateRef | Op::DeleteRef | Op::Dispatch => Some(("contents", "write")),
            Op::ListPulls => Some(("pull_requests", "read")),
            Op::ListRuns | Op::GetWorkflow => Some(("actions", "read")),
        }
    }

    /// The `documentation_url` GitHub puts in this operation's error bodies.
    pub(crate) fn doc_url(self) -> &'static str {
        match self {
            Op::GetApp => "https://docs.github.com/rest/apps/apps#get-the-authenticated-app",
            Op::GetInstallation => {
                "https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app"
            }
            Op::MintToken => {
                "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"
            }
            Op::GetRepo => "https://docs.github.com/rest/repos/repos#get-a-repository",
            Op::GetRef => "https://docs.github.com/rest/git/refs#get-a-reference",
            Op::MatchingRefs => "https://docs.github.com/rest/git/refs#list-matching-references",
            Op::CreateRef => "https://docs.github.com/rest/git/refs#create-a-reference",
            Op::DeleteRef => "https://docs.github.com/rest/git/refs#delete-a-reference",
            Op::Dispatch => {
                "https://docs.github.com/rest/repos/repos#create-a-repository-dispatch-event"
            }
            Op::ListPulls => "https://docs.github.com/rest/pulls/pulls#list-pull-requests",
            Op::Compare => "https://docs.github.com/rest/commits/commits#compare-two-commits",
            Op::GetContents => "https://docs.github.com/rest/repos/contents#get-repository-content",
            Op::ListRuns => {
                "https://docs.github.com/rest/actions/workflow-runs#list-workflow-runs-for-a-repository"
            }
            Op::GetWorkflow => "https://docs.github.com/rest/actions/workflows#get-a-workflow",
            Op::RateLimit => {
                "https://docs.github.com/rest/rate-limit/rate-limit#get-rate-limit-status-for-the-authenticated-user"
            }
            Op::ManifestConversion => {
                "https://docs.github.com/rest/apps/apps#create-a-github-app-from-a-manifest"
            }
            Op::GetUser => "https://docs.github.com/rest/users/users#get-a-user",
            Op::GetHookConfig => {
                "https://docs.github.com/rest/apps/webhooks#get-a-webhook-configuration-for-an-app"
            }
        }
    }
}

/// A fault injected into an [`Op`]. It acts on a request only once the request has passed
/// authentication (a rejected credential is answered as usual and does not use up a fault).
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Answer with this status and GitHub's body for it, without applying the request
    /// (500 `{"message":"Server Error"}`, 502/504 an HTML page as from GitHub's load balancer,
    /// 503 `{"message":"Service Unavailable"}`, 401/403/404/409/422 GitHub's usual bodies).
    Status(u16),
    /// Apply the request's effect, then answer with [`Fault::Status`]'s answer for this code.
    AppliedThen(u16),
    /// Apply the request's effect, then close the connection without sending any answer.
    DropAfterApply,
    /// Close the connection without applying the request or answering (a request lost on the way).
    DropBeforeApply,
    /// Wait this long (on tokio's clock, holding no lock), then handle the request normally.
    Delay(Duration),
    /// Apply the request's effect at once, then wait this long before answering.
    DelayAfterApply(Duration),
    /// 403 with GitHub's secondary-rate-limit message and `retry-after`.
    SecondaryRateLimit { retry_after_secs: u64 },
    /// 403 "API rate limit exceeded for installation ID …" with `x-ratelimit-remaining: 0`
    /// and `x-ratelimit-reset` this many seconds ahead.
    PrimaryRateLimit { reset_in_secs: u64 },
    /// 429 with the secondary-rate-limit message and `retry-after`.
    TooManyRequests { retry_after_secs: u64 },
    /// 422 with this message (e.g. `Reference update failed`), not applied.
    Unprocessable(String),
}

/// A fault waiting in the queue of an operation.
#[derive(Clone, Debug)]
pub(crate) struct FaultEntry {
    pub op: Op,
    pub fault: Fault,
    pub remaining: usize,
}

pub(crate) const SECONDARY_MESSAGE: &str = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID 0000:0000:0000000:0000000:00000000.";
pub(crate) const RATE_LIMIT_DOC: &str =
    "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api";

/// The answer GitHub gives with this status when something went wrong on its side, or the
/// usual body for a client-error status.
pub(crate) fn status_reply(code: u16, op: Op) -> Reply {
    match code {
        500 => Reply::json(500, json!({"message": "Server Error"})),
        502 => Reply::html(
            502,
            "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>github.com</center>\r\n</body>\r\n</html>\r\n",
        ),
        503 => Reply::json(503, json!({"message": "Service Unavailable"})),
        504 => Reply::html(
            504,
            "<html>\r\n<head><title>504 Gateway Time-out</title></head>\r\n<body>\r\n<center><h1>504 Gateway Time-out</h1></center>\r\n<hr><center>github.com</center>\r\n</body>\r\n</html>\r\n",
        ),
        401 => Reply::error(401, "Bad credentials", "https://docs.github.com/rest"),
        403 => Reply::error(403, "Resource not accessible by integration", op.doc_url()),
        404 => Reply::error(404, "Not Found", op.doc_url()),
        409 => Reply::error(409, "Conflict", op.doc_url()),
        422 => Reply::error(422, "Validation Failed", op.doc_url()),
        other => {
            let reason = axum::http::StatusCode::from_u16(other)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Error");
            Reply::json(other, json!({"message": reason}))
        }
    }
}

pub(crate) fn secondary_reply(status: u16, retry_after_secs: u64) -> Reply {
    Reply::error(status, SECONDARY_MESSAGE, RATE_LIMIT_DOC)
        .with_header("retry-after", retry_after_secs.to_string())
}

/// The message of a primary rate-limit refusal for this bucket.
pub(crate) fn primary_message(who: &str) -> String {
    format!(
        "API rate limit exceeded for {who}. If you reach out to GitHub Support for help, please include the request ID 0000:0000:0000000:0000000:00000000."
    )
}
