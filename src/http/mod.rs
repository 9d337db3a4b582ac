//! The HTTP server: `POST /webhook` and the probes. [`serve`] serves an [`App`] on a listener
//! until a stop signal; [`router`] is the same routes without a socket. `startup` builds the
//! `App` from the parts it owns and says how many connections to serve. Every resource a sender
//! can hold is bounded: connections (that number), the time to send headers and then the body
//! (`read_timeout_ms` each), the body's size, and the time to shut down (`shutdown_grace`).

mod answer;
mod conn;
mod github;
mod listen;
mod login;
mod pages;
mod ready;
mod status;
mod unverified;

pub use answer::{Answer, RowRef};
pub use listen::{connection_cap, listen, ListenError};

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ForgeSettings};
use crate::db::status::RowState;
use crate::db::Reachability;
use crate::event::RowEvent;
use crate::metrics::{Metrics, CONTENT_TYPE};
use crate::pipeline::{Ignored, Pipeline, Routes, Start};
use crate::reason::Reason;
use crate::webhook::auth::{self, WebhookSecrets};
use crate::webhook::payload;
use login::Logins;
use ready::Readiness;
use status::{delivery_id, Decision, Decisions, OncePerMinute};
use tracing::{field, Instrument, Span};
use unverified::{Unread, Unverified, UNVERIFIED_BYTES};

/// Everything a request needs.
pub struct App {
    config: Arc<Config>,
    /// The config's routes with their payload templates compiled.
    routes: Arc<Routes>,
    pipeline: Arc<Pipeline>,
    metrics: Arc<Metrics>,
    /// Set by `--insecure-no-auth`: accept deliveries without credentials when no secret is set.
    insecure_no_auth: bool,
    readiness: Readiness,
    decisions: Decisions,
    /// The deliveries refused before their row is known, logged at most once a minute.
    refusals: OncePerMinute<(Reason, Option<&'static str>)>,
    unknown_paths: OncePerMinute<()>,
    /// Wrong status page passwords, counted to slow a guesser down.
    logins: Logins,
    /// Whether the queue's database answers, as the consumer last found (for `/readyz`).
    database: Arc<Reachability>,
    /// The bodies read before they can be authenticated, within one budget of bytes.
    unverified: Unverified,
    /// `POST /github`'s secret and connection.
    hook: github::Hook,
}

impl App {
    pub fn new(
        config: Arc<Config>,
        routes: Arc<Routes>,
        pipeline: Arc<Pipeline>,
        metrics: Arc<Metrics>,
        database: Arc<Reachability>,
        insecure_no_auth: bool,
    ) -> Arc<App> {
        let unverified = Unverified::new(UNVERIFIED_BYTES, config.webhook.max_body_bytes);
        Arc::new(App {
            routes,
            pipeline,
            metrics,
            insecure_no_auth,
            readiness: Readiness::default(),
            decisions: Decisions::default(),
            refusals: OncePerMinute::default(),
            unknown_paths: OncePerMinute::default(),
            unverified,
            logins: Logins::default(),
            database,
            hook: github::Hook::new(&config),
            config,
        })
    }

    /// Counts, logs (in the delivery's span, the current one) and remembers a delivery's
    /// answer, given `took` after it began; `decision` holds what the delivery named.
    fn record(&self, decision: Decision, answer: &Answer, took: Duration) {
        // Each field of the span is recorded once (a text log would show it twice): what the
        // delivery did not name is recorded here, `none` for the route and the answer's row's
        // id, or empty.
        let (route_named, id_named) = (!decision.route.is_empty(), decision.id.is_some());
        let decision = decision.answered(answer);
        let span = Span::current();
        if !route_named {
            span.record("route", field::display(&decision.route));
        }
        if !id_named {
            span.record("id", decision.id.as_deref().unwrap_or(""));
        }
        self.metrics.delivery(&decision.route, answer.labels());
        // A refusal before the row is one of many alike, which anyone can send: its line is
        // kept to one a minute.
        match answer.reason() {
            Some(reason) if reason.is_before_the_row() => {
                self.refusals.refused(reason, decision.kind, answer)
            }
            Some(Reason::MissingColumn) => status::log(answer, Some(self.recovery()), took),
            _ => status::log(answer, None, took),
        }
        self.decisions.push(decision);
    }

    /// What brings back a row refused because the route does not fit its table, once the
    /// config is fixed: the sender does not send it again (pg_net never retries), but the
    /// sweep finds every row without a branch.
    fn recovery(&self) -> String {
        let window = self.config.reconcile.window;
        let since = match window.as_secs() {
            secs if secs % 3600 == 0 => format!("{}h", secs / 3600),
            _ => humantime::format_duration(window).to_string(),
        };
        let source = &self.config.source;
        let config = if source != Path::new("rowbranch.toml") && source.is_file() {
            format!(" --config {}", source.display())
        } else {
            String::new()
        };
        format!(
            "fix the route in the config, restart, then run `rowbranch reconcile{config} --since \
             {since}` within {since} (or with a wider --since): it runs this row, which its \
             sender does not send again"
        )
    }
}

pub fn router(app: Arc<App>) -> Router {
    let webhook = if app.config.takes_webhooks() {
        post(webhook)
    } else {
        post(no_webhook)
    };
    let router = Router::new()
        .route("/", get(pages::home))
        .route("/webhook", webhook);
    // The App's events, on GitHub alone: the local forge has no App, and `/github` is then a
    // path like any other it does not serve.
    let router = match app.config.forge {
        ForgeSettings::Github(_) => router.route("/github", post(github::github)),
        ForgeSettings::Local(_) => router,
    };
    router
        .route("/healthz", get(healthz))
        .route("/readyz", get(ready::readyz))
        .route("/metrics", get(metrics))
        .fallback(status::unknown_path)
        .with_state(app)
}

/// Serves at most `cap` connections at once until `stop` resolves; then stops
/// accepting and closes idle connections, and returns the tasks of the connections still in a
/// request, for the caller's shutdown grace.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    cap: usize,
    stop: impl Future<Output = ()> + Send + 'static,
) -> TaskTracker {
    let router = router(Arc::clone(&app));
    conn::serve(listener, router, &app.config.webhook, cap, stop).await
}

async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], app.metrics.render()).into_response()
}

/// `POST /webhook` when every route reads the queue.
async fn no_webhook() -> Response {
    not_found(
        "no route takes webhook deliveries here: every route reads the queue (intake = \"pgmq\")",
    )
}

/// A 404 with the body every error has, for what this server does not serve.
fn not_found(message: &str) -> Response {
    Answer::refused(Reason::NotConfigured, message).response(false)
}

/// A delivery through its one door: its content type, size and credentials checked, its body
/// read and parsed into the typed event, as [`Delivered`]'s extractor does; then one task of its
/// own, spawned once the body is read, so that nothing the client does (hanging up, say) can
/// stop the decision, the run, or its record. Its log line takes what the delivery named from
/// the span the extractor opened.
async fn webhook(State(app): State<Arc<App>>, delivery: Delivered) -> Response {
    let Delivered { span, start, event } = delivery;
    let answer = match event {
        Ok(event) => {
            let decided = tokio::spawn(decide(app, start, event).instrument(span));
            decided.await.unwrap_or_else(|_| Answer::internal())
        }
        Err(answer) => {
            span.in_scope(|| app.record(Decision::default(), &answer, start.elapsed()));
            answer
        }
    };
    answer.response(false)
}

/// A delivery as its extractor read it: the typed event, or the answer it was refused with.
struct Delivered {
    /// The delivery's span: its `webhook-id` (or one made up here) from the start, and its
    /// route, table, id and column as they become known.
    span: Span,
    start: Instant,
    event: Result<RowEvent, Answer>,
}

impl FromRequest<Arc<App>> for Delivered {
    /// A refusal is an answer like any other, counted and logged by the handler.
    type Rejection = Infallible;

    #[allow(clippy::result_large_err)]
    async fn from_request(request: Request, app: &Arc<App>) -> Result<Delivered, Infallible> {
        let start = Instant::now();
        let (parts, body) = request.into_parts();
        // At error level, so that it is there for every line of the delivery's.
        let span = tracing::error_span!(
            "delivery",
            delivery = %delivery_id(&parts.headers),
            route = field::Empty,
            table = field::Empty,
            id = field::Empty,
            column = field::Empty,
        );
        let webhook = &app.config.webhook;
        let max = webhook.max_body_bytes;
        let door = Door {
            secrets: webhook.secrets.as_ref(),
            open: app.insecure_no_auth || auth::carries_credentials(&parts.headers),
            max,
            content_type: "Content-Type must be application/json",
            unauthorized: "missing or wrong credentials",
            too_large: format!("the body is larger than max_body_bytes ({max} bytes)"),
        };
        let malformed = |e: payload::ShapeError| Answer::refused(Reason::Malformed, e.to_string());
        let read = read_verified(&parts.headers, body, app, door).await;
        let event = read.and_then(|bytes| payload::parse(&bytes).map_err(malformed));
        Ok(Delivered { span, start, event })
    }
}

/// What a door (`/webhook`, `/github`) takes, and how it words its refusals.
struct Door<'a> {
    /// What credentials are judged by; without, a request is taken when `open`, else refused
    /// as `missing`.
    secrets: Option<&'a WebhookSecrets>,
    open: bool,
    /// The largest body taken, in bytes.
    max: usize,
    content_type: &'static str,
    unauthorized: &'static str,
    too_large: String,
}

/// SPEC §3's order, for both doors: the content type, the declared size and the credentials as
/// far as the headers can tell — from the headers alone, so that credentials the body cannot
/// make right are refused unread — then the body, within `read_timeout_ms` and the door's
/// size, and the signature the headers left to it. The credentials are judged once: what the
/// head decided, the body check uses.
// A refusal is one per request, moved a few times: its size costs nothing.
#[allow(clippy::result_large_err)]
async fn read_verified(
    headers: &HeaderMap,
    body: Body,
    app: &App,
    door: Door<'_>,
) -> Result<Bytes, Answer> {
    let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let mime = value(header::CONTENT_TYPE).and_then(|v| v.split(';').next());
    if !mime.is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json")) {
        return Err(Answer::refused(Reason::ContentType, door.content_type));
    }
    // A body its `Content-Length` says is too long is refused before a byte of it is read.
    let declared = value(header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > door.max as u64) {
        return Err(Answer::refused(Reason::TooLarge, door.too_large));
    }
    let unauthorized = |kind| Answer::Refused {
        reason: Reason::Unauthorized,
        message: door.unauthorized.to_owned(),
        retry_after: None,
        kind: Some(kind),
    };
    let pending = match door.secrets {
        Some(secrets) => {
            let head = secrets.judge_head(headers, SystemTime::now());
            let pending = head.map_err(|why| unauthorized(why.kind()))?;
            pending.map(|pending| (secrets, pending))
        }
        None if door.open => None,
        None => return Err(unauthorized("missing")),
    };
    // A body whose credentials it must prove itself is read within the budget of such bodies.
    let read = async {
        match pending {
            Some(_) => app.unverified.read(body, door.max).await,
            None => match Limited::new(body, door.max).collect().await {
                Ok(collected) => Ok(collected.to_bytes()),
                Err(e) if e.is::<LengthLimitError>() => Err(Unread::TooLarge),
                Err(_) => Err(Unread::Broken),
            },
        }
    };
    let timeout = app.config.webhook.read_timeout;
    let refused = |reason, message: &str| Err(Answer::refused(reason, message));
    let bytes = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(Unread::TooLarge)) => return Err(Answer::refused(Reason::TooLarge, door.too_large)),
        Ok(Err(Unread::Broken)) => {
            return refused(Reason::Malformed, "the body was cut off before its end")
        }
        Ok(Err(Unread::Cut)) => {
            return refused(
                Reason::TimedOut,
                "the body was not read whole: bodies whose signature is not yet checked held \
                 the server's budget for them, and this one had been reading longest",
            )
        }
        Err(_) => {
            let millis = timeout.as_millis();
            let message = format!("the body did not arrive within read_timeout_ms ({millis} ms)");
            return refused(Reason::TimedOut, &message);
        }
    };
    if let Some((secrets, pending)) = pending {
        (pending.verify(secrets, &bytes)).map_err(|why| unauthorized(why.kind()))?;
    }
    Ok(bytes)
}

/// The route, found once, and the id — in that order, so nothing is written before the id is
/// valid — then the run, awaited for at most `respond_within_ms`; then the answer counted,
/// logged and remembered. What the delivery names is recorded on its span (the current one) as
/// it becomes known, and kept for the status page.
async fn decide(app: Arc<App>, start: Instant, event: RowEvent) -> Answer {
    let span = Span::current();
    let table = status::table(&event.schema, &event.table);
    span.record("table", &table);
    let mut decision = Decision {
        table: Some(table),
        ..Decision::default()
    };
    let answer = match app.routes.route(false, &event) {
        // A 200 would pass for a success in pg_net's log: a trigger on a table no route takes
        // is a setup to fix.
        Err(Ignored::NoRoute { table }) => Answer::refused(
            Reason::NoRoute,
            format!(
                "no route takes table {table}: add a [[routes]] table for it to the config, or \
                 drop the trigger that posts its rows here"
            ),
        ),
        Err(ignored) => {
            if let Some(route) = ignored.route() {
                decision.route = route.table_name();
                span.record("route", field::display(&decision.route));
            }
            if let Ignored::NotReady {
                route,
                id: Some(id),
                ..
            } = &ignored
            {
                span.record("id", id.as_str());
                decision.id = Some(id.to_string());
                app.pipeline
                    .note(route, id.as_str(), RowState::Waiting, false);
            }
            Answer::from(ignored)
        }
        Ok(compiled) => {
            decision.route = compiled.route.table_name();
            span.record("route", field::display(&decision.route));
            match compiled.plan_json(&event.record) {
                Ok(plan) => {
                    span.record("id", plan.id.as_str());
                    decision.id = Some(plan.id.to_string());
                    // The body is not needed past here: a waiting row keeps only its plan.
                    drop(event);
                    admit(&app, plan).await
                }
                Err(e) => {
                    let (column, id) = e.column_and_id().unzip();
                    (decision.column, decision.id) = (column.map(str::to_owned), id.flatten());
                    // Only what is there: a text log still spaces a field recorded empty.
                    if let Some(id) = &decision.id {
                        span.record("id", id.as_str());
                    }
                    if let Some(column) = &decision.column {
                        span.record("column", column.as_str());
                    }
                    if let Some(id) = e.refused_id() {
                        app.pipeline
                            .note(&compiled.route, id, RowState::Refused, false);
                    }
                    // 400 for JSON at fault, 422 otherwise: the reason says which.
                    Answer::refused(e.reason(), e.to_string())
                }
            }
        }
    };
    app.record(decision, &answer, start.elapsed());
    answer
}

/// The run of a planned row: admitted (or refused as full), then awaited.
async fn admit(app: &App, plan: crate::pipeline::Plan) -> Answer {
    let webhook = &app.config.webhook;
    let row = RowRef {
        id: plan.id.clone(),
        branch: plan.branch.clone(),
        repo: plan.route.repo.clone(),
    };
    let submission = match app.pipeline.submit(plan, Start::New, 0) {
        Ok(submission) => submission,
        Err(full) => return Answer::unavailable(full.reason, &full.to_string(), full.retry_after),
    };
    // The run is spawned: when the wait ends early it carries on.
    match tokio::time::timeout(webhook.respond_within, submission.outcome()).await {
        Ok(result) => Answer::from_run(row, result),
        Err(_) => Answer::Accepted(row, webhook.respond_within),
    }
}
