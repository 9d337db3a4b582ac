//! `POST /github`: the GitHub App's own events, which move a row past `dispatched` (SPEC §3,
//! "POST /github"). A pull request opened or reopened from a row's branch is `pr_open` with its
//! link, closed is `merged` or `closed`; the work's run (`workflow_run`, completed) that left no
//! pull request is `failed`. Every write goes to the status writer, whose `WHERE` leaves a row
//! already there or later alone, so a repeated or late event changes nothing.
//!
//! The door is [`github`]'s, in the order of `/webhook`'s: the secret, the content
//! type, the declared size and the signature's form from the headers alone — refused unread —
//! then the body (at most [`MAX_BODY_BYTES`], within `read_timeout_ms`), verified before it is
//! parsed. GitHub signs with `X-Hub-Signature-256` under the App's webhook secret
//! (`GITHUB_WEBHOOK_SECRET`), checked by the same code as `/webhook`'s `hub-signature` scheme.
//!
//! An event counts for a row only when the branch it names is a route's: in the route's
//! repository (a fork can name a head `feedback/7-x` too), under its prefix, for a row the
//! table still has, and no older than the row's latest `-redo-N`.

// An event's answer is one per request, moved a few times: its size costs nothing.
#![allow(clippy::result_large_err)]

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::response::Response;
use futures_util::FutureExt;
use serde::Deserialize;
use serde_json::json;

use super::answer::{Answer, RowRef};
use super::status::{quoted, OncePerMinute};
use super::App;
use crate::config::{Config, Route};
use crate::db::status::{RowState, StatusWrite};
use crate::db::Link;
use crate::identity::{redo_rank, BranchName, RowId};
use crate::metrics::NO_ROUTE;
use crate::reason::Reason;
use crate::webhook::auth::WebhookSecrets;

/// The most of a body read: GitHub caps a delivery's payload at 25 MB, but the events rowbranch
/// reads are a few dozen KB, and a pull request's body (its description) is the only part that
/// grows.
const MAX_BODY_BYTES: usize = 1 << 20;

/// How long the table may take to say which row a branch names: GitHub gives a delivery 10 s.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(8);

/// What the work workflow's `run-name` starts with (templates/workflow.yml), followed by the
/// row's branch: a `repository_dispatch` run is on the default branch, so its title is the only
/// place that names the row.
const RUN_TITLE: &str = "rowbranch: ";

/// What `POST /github` keeps between events.
pub(super) struct Hook {
    /// `GITHUB_WEBHOOK_SECRET`, under `X-Hub-Signature-256` alone; the endpoint is off without.
    secrets: Option<WebhookSecrets>,
    /// One connection to the routes' database (with `DATABASE_URL`), opened at the first event
    /// that needs it (and again after it fails): events come a few per row, one is plenty.
    database: Option<Link>,
    /// Lines that anyone who reaches the port can cause, at most one a minute each.
    quiet: OncePerMinute<Reason>,
}

impl Hook {
    pub(super) fn new(config: &Config) -> Hook {
        let secret = config.forge.github_webhook_secret();
        Hook {
            secrets: secret.map(|s| WebhookSecrets::github(s.expose())),
            database: (config.database_url.clone())
                .map(|url| Link::new(url, Duration::ZERO, Arc::default())),
            quiet: OncePerMinute::default(),
        }
    }
}

/// `POST /github`: the door — only `X-Hub-Signature-256` is taken: a missing or malformed one,
/// or any other kind of credential alone, is refused before a byte of the body is read; a
/// well-formed one is read within the budget every body not yet verified shares (SPEC §3) —
/// then the event decided in a task of its own, so that a client that hangs up stops neither
/// the decision nor its record. A refusal is an answer like any other, counted and logged.
pub(super) async fn github(State(app): State<Arc<App>>, request: Request) -> Response {
    let start = Instant::now();
    let (parts, body) = request.into_parts();
    let text = |name: &str| {
        let value = parts.headers.get(name).and_then(|v| v.to_str().ok());
        value.map(|v| quoted(v, 100))
    };
    // `X-GitHub-Delivery`, or one made up here.
    let delivery =
        text("x-github-delivery").unwrap_or_else(|| format!("d_{:016x}", rand::random::<u64>()));
    let name = text("x-github-event").unwrap_or_default();
    let door = super::Door {
        secrets: app.hook.secrets.as_ref(),
        open: false,
        max: MAX_BODY_BYTES,
        content_type: "Content-Type must be application/json: set the App's webhook content \
                       type to application/json",
        unauthorized: "missing or wrong signature",
        too_large: format!("the body is larger than {MAX_BODY_BYTES} bytes"),
    };
    let read = match door.secrets {
        None => Err(Answer::refused(
            Reason::NotConfigured,
            "POST /github takes the GitHub App's events once GITHUB_WEBHOOK_SECRET is set to the \
             App's webhook secret (docs/operating.md, \"The App's events\")",
        )),
        Some(_) => super::read_verified(&parts.headers, body, &app, door).await,
    };
    let decided = tokio::spawn(async move {
        let (route, answer) = match read {
            // A bug is answered and counted like any answer; the panic's own line says what.
            Ok(body) => AssertUnwindSafe(decide(&app, &name, &body))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| (None, Answer::internal())),
            Err(refused) => (None, refused),
        };
        record(
            &app,
            &delivery,
            &name,
            route.as_deref(),
            &answer,
            start.elapsed(),
        );
        answer
    });
    let answer = decided.await.unwrap_or_else(|_| Answer::internal());
    // Every refusal's reason too (SPEC §3, "POST /github").
    answer.response(true)
}

/// Counts and logs an answer about `route`: one line each, but a refusal before the event is
/// read (which anyone who reaches the port can cause) at most once a minute for each reason.
fn record(
    app: &App,
    delivery: &str,
    event: &str,
    route: Option<&Route>,
    answer: &Answer,
    took: Duration,
) {
    let route = route.map(Route::table_name);
    let route = route.as_deref().unwrap_or(NO_ROUTE);
    app.metrics.github_event(route, answer.labels());
    let (http_status, outcome, reason) = answer.labels();
    let (id, branch) = match answer.row() {
        Some(row) => (row.id.as_str(), row.branch.as_str()),
        None => ("", ""),
    };
    macro_rules! line {
        ($level:ident, $unlogged:expr, $what:literal) => {
            tracing::$level!(
                delivery,
                event,
                route,
                id,
                branch,
                http_status,
                outcome,
                reason,
                detail = answer.message(),
                unlogged_since_the_last = $unlogged,
                duration_ms = took.as_millis() as u64,
                $what
            )
        };
    }
    match answer.reason() {
        Some(before) if before.is_before_the_row() || before == Reason::NotConfigured => {
            if let Some(quiet) = app.hook.quiet.due(before, Instant::now()) {
                line!(warn, quiet, "refused a GitHub event before reading it");
            }
        }
        _ if answer.status().is_success() => line!(info, 0, "GitHub event"),
        _ if http_status == 503 => line!(warn, 0, "GitHub event"),
        _ => line!(error, 0, "GitHub event"),
    }
}

/// A repository as events name it (`repository.full_name`, `head.repo.full_name`).
#[derive(Deserialize)]
struct EventRepository {
    full_name: String,
}

/// What rowbranch reads of a `pull_request` event.
#[derive(Deserialize)]
struct PullRequestEvent {
    action: String,
    pull_request: PullRequestBody,
    repository: EventRepository,
}

#[derive(Deserialize)]
struct PullRequestBody {
    html_url: String,
    #[serde(default)]
    merged: bool,
    head: PullRequestHead,
}

#[derive(Deserialize)]
struct PullRequestHead {
    #[serde(rename = "ref")]
    branch: String,
    /// `null` when the head's repository (a fork) was deleted.
    repo: Option<EventRepository>,
}

/// What rowbranch reads of a `workflow_run` event.
#[derive(Deserialize)]
struct WorkflowRunEvent {
    action: String,
    workflow_run: RunBody,
    repository: EventRepository,
}

#[derive(Deserialize)]
struct RunBody {
    event: String,
    #[serde(default)]
    display_title: String,
    conclusion: Option<String>,
}

/// What an App event says: the state it hands the writer for the row its branch names.
struct Said {
    state: RowState,
    /// The branch's repository (`None` when a fork's was deleted), and the repository the
    /// event is about.
    head: Option<String>,
    base: String,
    branch: String,
    /// A pull request's `html_url`, written with `pr_open`, `merged` and `closed`.
    pull_request: Option<String>,
    /// Whether the state is written over a `closed` row.
    reopens: bool,
    /// What the message says after the state (a run's conclusion).
    why: String,
}

/// The event's answer, from its name and its verified body, and the route its branch belongs
/// to, once known.
async fn decide(app: &App, name: &str, body: &[u8]) -> (Option<Arc<Route>>, Answer) {
    fn read<E: serde::de::DeserializeOwned>(name: &str, body: &[u8]) -> Result<E, Answer> {
        serde_json::from_slice(body).map_err(|e| {
            let message = format!("not a {name} event as GitHub sends it: {e}");
            Answer::refused(Reason::Malformed, message)
        })
    }
    let said = match name {
        "pull_request" => read(name, body).and_then(pull_request),
        "workflow_run" => read(name, body).and_then(workflow_run),
        other => Err(Answer::ignored(
            Reason::Event,
            format!(
                "rowbranch reads pull_request and workflow_run events, not `{}`",
                quoted(other, 40)
            ),
        )),
    };
    match said.and_then(|said| Ok((route_of(app, &said)?, said))) {
        Ok((route, said)) => (Some(Arc::clone(route)), write(app, route, said).await),
        Err(answer) => (None, answer),
    }
}

/// opened and reopened: `pr_open`; closed: `merged` or `closed`; with the pull request's link.
fn pull_request(event: PullRequestEvent) -> Result<Said, Answer> {
    let pull = event.pull_request;
    let state = match (event.action.as_str(), pull.merged) {
        ("opened" | "reopened", _) => RowState::PrOpen,
        ("closed", true) => RowState::Merged,
        ("closed", false) => RowState::Closed,
        (other, _) => {
            return Err(Answer::ignored(
                Reason::Action,
                format!(
                    "a pull request `{}` says nothing of a row's state: rowbranch reads opened, \
                     reopened and closed",
                    quoted(other, 40)
                ),
            ))
        }
    };
    Ok(Said {
        state,
        // The head's repository, not the base's: a fork's pull request into the route's
        // repository can name a head of the route's prefix, and is no row's.
        head: pull.head.repo.map(|r| r.full_name),
        base: event.repository.full_name,
        branch: pull.head.branch,
        pull_request: Some(pull.html_url),
        // `pr_open` for a pull request just opened leaves a `closed` row as it is: that
        // `opened` is older news than the `closed` before it (only `reopened` reopens).
        reopens: event.action != "opened",
        why: String::new(),
    })
}

/// completed: `failed`, written when GitHub lists no pull request from the row's branches
/// ([`write`]; the writer writes it only over `waiting` or `dispatched`).
fn workflow_run(event: WorkflowRunEvent) -> Result<Said, Answer> {
    if event.action != "completed" {
        return Err(Answer::ignored(
            Reason::Action,
            format!(
                "a workflow run `{}` has not ended: rowbranch reads completed",
                quoted(&event.action, 40)
            ),
        ));
    }
    let run = event.workflow_run;
    let branch = run.display_title.strip_prefix(RUN_TITLE).map(str::trim);
    let (true, Some(branch)) = (run.event == "repository_dispatch", branch) else {
        return Err(Answer::ignored(
            Reason::NotWork,
            format!(
                "not the work of a row: a run of the work workflow is started by \
                 repository_dispatch and titled `{RUN_TITLE}BRANCH` (its run-name); this one \
                 was started by `{}` and is titled `{}`",
                quoted(&run.event, 40),
                quoted(&run.display_title, 100)
            ),
        ));
    };
    let concluded = run.conclusion.as_deref().unwrap_or("without a conclusion");
    Ok(Said {
        state: RowState::Failed,
        head: Some(event.repository.full_name.clone()),
        base: event.repository.full_name,
        branch: branch.to_owned(),
        pull_request: None,
        reopens: true,
        why: format!(
            " (its run concluded {}, and GitHub lists no pull request from its branches)",
            quoted(concluded, 40)
        ),
    })
}

/// The route whose repository is the event's head and whose prefix owns its branch; the base
/// (the repository the event is about) tells a fork from a repository no route names.
fn route_of<'a>(app: &'a App, said: &Said) -> Result<&'a Arc<Route>, Answer> {
    // GitHub's names are the same whatever their case.
    let names = |route: &Arc<Route>, repo: &str| route.repo.to_string().eq_ignore_ascii_case(repo);
    let (routes, head) = (&app.config.routes, said.head.as_deref());
    let theirs = routes.iter().filter(|r| head.is_some_and(|h| names(r, h)));
    if theirs.clone().next().is_none() {
        let head = head.map_or("a deleted repository".to_owned(), |h| quoted(h, 140));
        return Err(match routes.iter().any(|r| names(r, &said.base)) {
            true => Answer::ignored(
                Reason::Fork,
                format!(
                    "its branch is in {head}, not in the route's repository: a fork's is no row's"
                ),
            ),
            false => Answer::ignored(
                Reason::Repository,
                format!("no route names the repository {head}"),
            ),
        });
    }
    // The longest prefix that owns the branch: `bot/feedback` before `bot`.
    let owns = |route: &&Arc<Route>| {
        (route.branch_prefix.tail(&said.branch)).is_some_and(|t| !t.is_empty())
    };
    let owner = theirs
        .filter(owns)
        .max_by_key(|route| route.branch_prefix.as_str().len());
    let Some(route) = owner else {
        return Err(Answer::ignored(
            Reason::Branch,
            format!(
                "no route's branch_prefix owns the branch `{}`",
                quoted(&said.branch, 140)
            ),
        ));
    };
    // Counted under no route: only the routes that write back have series of their own.
    if !route.writes_back() {
        return Err(Answer::ignored(
            Reason::NotWritten,
            format!(
                "route {} writes no status_column or pull_request_column",
                route.table_name()
            ),
        ));
    }
    Ok(route)
}

/// The state handed to the status writer (which leaves a row already there or later alone;
/// for a pull request just `opened`, a `closed` row too), for the row of `route`'s table the
/// branch names — unless the row was redone since, or a run's branches have a pull request.
async fn write(app: &App, route: &Arc<Route>, said: Said) -> Answer {
    let tail = route.branch_prefix.tail(&said.branch).unwrap_or_default();
    let id = match which_row(app, route, tail).await {
        Ok(Some(id)) => id,
        Ok(None) => {
            return Answer::ignored(
                Reason::NoRow,
                format!(
                    "no row of {} has the id the branch `{}` names: nothing is written",
                    route.table_name(),
                    quoted(&said.branch, 140)
                ),
            )
        }
        Err(why) => return unavailable(route, &why),
    };
    let branch = BranchName::existing(&route.branch_prefix, &id, &said.branch)
        .expect("the id is one of the branch's own prefixes");
    let row = RowRef {
        id,
        branch,
        repo: route.repo.clone(),
    };
    let forge = app.pipeline.forge();
    let listed = forge.row_branches(&route.repo, &route.branch_prefix, &row.id);
    let branches = match listed.await {
        Ok(branches) => branches,
        Err(e) => return unavailable(route, &format!("listing the row's branches: {e}")),
    };
    // `redo` starts the row anew on `{branch}-redo-N`: an event of an older branch is late news.
    // Ranked as the sweep ranks them (a slug may itself end in `-redo-5`).
    let latest = branches.iter().map(|b| redo_rank(b.as_str())).max();
    if let Some(latest) = latest.filter(|&latest| latest > redo_rank(row.branch.as_str())) {
        return Answer::Ignored {
            reason: Reason::Superseded,
            message: format!(
                "the row was redone since (its latest branch ends in -redo-{}): an event of an \
                 older branch writes nothing",
                latest.1
            ),
            row: Some(row),
        };
    }
    // A run's `failed`: the branch it names may be gone (deleted after its pull request
    // closed), so it is asked too.
    if said.state == RowState::Failed {
        let mut asked = branches;
        if !asked.contains(&row.branch) {
            asked.push(row.branch.clone());
        }
        for branch in &asked {
            match forge.has_pull_request(&route.repo, branch).await {
                Ok(false) => {}
                Ok(true) => {
                    return Answer::Ignored {
                        reason: Reason::PullRequest,
                        message: format!(
                            "a pull request from {branch} exists: its own events say the row's \
                             state"
                        ),
                        row: Some(row),
                    }
                }
                Err(e) => {
                    return unavailable(route, &format!("listing {branch}'s pull requests: {e}"))
                }
            }
        }
    }
    app.pipeline.write_state(StatusWrite {
        route: Arc::clone(route),
        id: row.id.as_str().to_owned(),
        state: said.state,
        pull_request: said.pull_request.clone(),
        anew: false,
        reopens: said.reopens,
    });
    let message = format!(
        "row {} of {} is {}{}, unless it is in that state or a later one already",
        row.id,
        route.table_name(),
        said.state,
        said.why
    );
    Answer::Noted {
        row,
        state: said.state,
        pull_request: said.pull_request,
        message,
    }
}

/// The ids a branch's tail (`{id}` or `{id}-{slug}`) may name, longest first: the whole tail,
/// then each part before a `-`. An integer id is the first part; a UUID holds four `-` itself,
/// so only the table can say which is a row's.
fn candidate_ids(tail: &str) -> Vec<RowId> {
    let cuts = tail.rmatch_indices('-').map(|(at, _)| &tail[..at]);
    let mut ids: Vec<RowId> = std::iter::once(tail)
        .chain(cuts)
        .filter_map(|text| RowId::parse(&json!(text)).ok())
        .collect();
    ids.dedup();
    ids
}

/// The row of `route`'s table that the tail names: the longest of its [`candidate_ids`] that a
/// row has (of `abc` and `abc-def`, both rows, `abc-def-x` is taken for `abc-def`'s: SPEC §4).
async fn which_row(app: &App, route: &Route, tail: &str) -> Result<Option<RowId>, String> {
    let Some(link) = &app.hook.database else {
        return Err("DATABASE_URL is not set: the row cannot be found".to_owned());
    };
    let candidates = candidate_ids(tail);
    let texts: Vec<&str> = candidates.iter().map(RowId::as_str).collect();
    let stalled = || {
        let secs = LOOKUP_TIMEOUT.as_secs();
        format!("the database did not answer within {secs} s")
    };
    // The connection and the statement share one budget. The connection is dropped after an
    // error or a silence, so that the next event opens a fresh one.
    let deadline = tokio::time::Instant::now() + LOOKUP_TIMEOUT;
    let connected = tokio::time::timeout_at(deadline, link.get()).await;
    let (database, _) = connected
        .map_err(|_| stalled())?
        .map_err(|e| format!("{e:#}"))?;
    let query = database.first_row_of(route, &texts);
    let found = match tokio::time::timeout_at(deadline, query).await {
        Ok(found) => found.map_err(|e| format!("{e:#}")),
        Err(_) => Err(stalled()),
    };
    if found.is_err() {
        link.forget().await;
    }
    Ok(found?.map(|at| candidates[at].clone()))
}

/// 503: the database or GitHub could not answer; a later event or the sweep writes the state.
fn unavailable(route: &Route, why: &str) -> Answer {
    // The detail (a host, a role, a statement) stays in the log: the answer is shown in the
    // App's delivery log to whoever administers the App.
    tracing::warn!(route = %route.table_name(), error = why, "an App event could not be decided");
    let message = "the routes' table or GitHub could not be read; nothing is written: the row's \
                   next event or the sweep writes its state (rowbranch's log says why)";
    Answer::refused(Reason::Unavailable, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{
        AnswerLabels, GITHUB_EVENT_ANSWERS, GITHUB_EVENT_OFF, GITHUB_EVENT_ROUTE_ANSWERS,
    };

    #[test]
    fn a_tails_ids_are_tried_longest_first_and_only_as_ids() {
        let texts = |tail: &str| -> Vec<String> {
            candidate_ids(tail)
                .iter()
                .map(|id| id.to_string())
                .collect()
        };
        assert_eq!(texts("42"), ["42"]);
        assert_eq!(
            texts("42-add-dark-mode"),
            ["42-add-dark-mode", "42-add-dark", "42-add", "42"]
        );
        let uuid = "3f2504e0-4f89-11d3-9a0c-0305e82c3301";
        let found = texts(&format!("{uuid}-x-redo-2"));
        assert_eq!(found[2], format!("{uuid}-x"));
        assert_eq!(found[3], uuid);
        assert_eq!(found.last().unwrap(), "3f2504e0");
        // What no id can be (a leading `-`, `..`) is not asked for.
        assert!(texts("-x").is_empty());
        assert!(texts("a..b-c").is_empty());
    }

    #[test]
    fn each_refusal_has_its_status_and_every_answer_is_counted_in_a_series_there_from_the_start() {
        let statuses = [
            (Reason::NotConfigured, 404),
            (Reason::ContentType, 415),
            (Reason::TooLarge, 413),
            (Reason::Unauthorized, 401),
            (Reason::TimedOut, 408),
            (Reason::Malformed, 400),
            (Reason::Unavailable, 503),
            (Reason::Internal, 500),
        ];
        let mut labels: Vec<AnswerLabels> = statuses
            .iter()
            .map(|&(reason, status)| {
                let answer = Answer::refused(reason, "refused");
                assert_eq!(answer.status().as_u16(), status, "{reason}");
                answer.labels()
            })
            .collect();
        for reason in [
            Reason::Event,
            Reason::Action,
            Reason::NotWork,
            Reason::Repository,
            Reason::Fork,
            Reason::Branch,
            Reason::NotWritten,
            Reason::NoRow,
            Reason::Superseded,
            Reason::PullRequest,
        ] {
            labels.push(Answer::ignored(reason, "ignored").labels());
        }
        for state in [
            RowState::PrOpen,
            RowState::Merged,
            RowState::Closed,
            RowState::Failed,
        ] {
            labels.push((200, state.as_str(), ""));
        }
        let at_start: Vec<&AnswerLabels> = (GITHUB_EVENT_ANSWERS.iter())
            .chain(GITHUB_EVENT_ROUTE_ANSWERS)
            .chain([&GITHUB_EVENT_OFF])
            .collect();
        for label in &labels {
            assert!(
                at_start.contains(&label),
                "{label:?} is not listed in src/metrics.rs"
            );
        }
        for listed in at_start {
            assert!(
                labels.contains(listed),
                "src/metrics.rs lists {listed:?}, which no answer gives"
            );
        }
    }
}
