//! The HTTP server: `POST /webhook` and the probes. [`serve`] serves an [`App`] on a listener
//! until a stop signal; [`router`] is the same routes without a socket. `startup` builds the
//! `App` from the parts it owns and says how many connections to serve. Every resource a sender
//! can hold is bounded: connections (that number), the time to send headers and then the body
//! (`read_timeout_ms` each), the body's size, and the time to shut down (`shutdown_grace`).

mod answer;
mod conn;
mod listen;
mod login;
mod pages;
mod ready;
mod status;

pub use answer::{Answer, RowRef};
pub use listen::{listen, Connections, ListenError};

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::db::Reachability;
use crate::metrics::{Metrics, CONTENT_TYPE};
use crate::pipeline::{Pipeline, PlanError, Planned, Routes};
use crate::reason::Reason;
use crate::shutdown::Shutdown;
use crate::webhook::{auth, payload};
use login::Logins;
use ready::Readiness;
use status::{delivery_id, Decision, Decisions, Refusals, Seen};

/// Everything a request needs.
pub struct App {
    config: Arc<Config>,
    /// The config's routes with their payload templates compiled.
    routes: Arc<Routes>,
    pipeline: Arc<Pipeline>,
    metrics: Arc<Metrics>,
    /// Begun when `serve` stops accepting; the pipeline and the forge see the same one.
    shutdown: Shutdown,
    /// Set by `--insecure-no-auth`: accept deliveries without credentials when no secret is set.
    insecure_no_auth: bool,
    readiness: Readiness,
    decisions: Decisions,
    refusals: Refusals,
    /// Wrong status page passwords, counted to slow a guesser down.
    logins: Logins,
    /// The forge's web address, for the status page's links to branches.
    web_url: Option<String>,
    /// Whether the queue's database answers, as the consumer last found (for `/readyz`).
    database: Arc<Reachability>,
}

impl App {
    pub fn new(
        config: Arc<Config>,
        routes: Arc<Routes>,
        pipeline: Arc<Pipeline>,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
        database: Arc<Reachability>,
        insecure_no_auth: bool,
    ) -> Arc<App> {
        Arc::new(App {
            web_url: config.forge.web_url(),
            config,
            routes,
            pipeline,
            metrics,
            shutdown,
            insecure_no_auth,
            readiness: Readiness::default(),
            decisions: Decisions::default(),
            refusals: Refusals::default(),
            logins: Logins::default(),
            database,
        })
    }

    /// Counts, logs and remembers a delivery's answer.
    fn record(&self, mut decision: Decision) {
        self.metrics.delivery(
            &decision.route,
            decision.http_status,
            decision.outcome,
            decision.counted_reason,
        );
        if decision.reason == Some(Reason::MissingColumn) {
            decision.fix = Some(self.recovery());
        }
        self.refusals.refused(&decision);
        decision.log();
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
    Router::new()
        .route("/", get(pages::home))
        .route("/webhook", webhook)
        .route("/healthz", get(healthz))
        .route("/readyz", get(ready::readyz))
        .route("/metrics", get(metrics))
        .fallback(status::unknown_path)
        .with_state(app)
}

/// Serves at most `connections.cap` connections at once until `stop` resolves; then stops
/// accepting, closes idle connections, begins the shutdown and gives in-flight requests and
/// runs `shutdown_grace` to finish. What is still running when the grace ends is logged by id,
/// and left.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    connections: Connections,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let router = router(Arc::clone(&app));
    let connections = conn::serve(listener, router, &app.config.webhook, connections, stop).await;
    app.shutdown.begin(app.config.shutdown_grace);
    let deadline = app.shutdown.deadline().expect("the shutdown has begun");
    let finished = tokio::time::timeout_at(deadline, async {
        connections.shutdown().await;
        app.pipeline.drain().await;
    })
    .await;
    if finished.is_err() {
        let left = app.pipeline.report_unfinished();
        tracing::warn!(rows = left, "the shutdown grace ran out");
    }
}

async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], app.metrics.render()).into_response()
}

/// `POST /webhook` when every route reads the queue.
async fn no_webhook() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({
            "outcome": "error",
            "message": "no route takes webhook deliveries here: every route reads the queue (intake = \"pgmq\")"
        })),
    )
        .into_response()
}

/// Reads a delivery, then hands it to a task of its own: once the body is read, nothing the
/// client does (hanging up, say) can stop the decision, the run, or its record.
async fn webhook(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let start = Instant::now();
    let delivery = delivery_id(&headers);
    let mut seen = Seen::default();
    match read(&app, &headers, body, &mut seen).await {
        Err(refused) => {
            app.record(Decision::new(delivery, seen, &refused, start.elapsed()));
            refused.into_response()
        }
        Ok(bytes) => {
            let app = Arc::clone(&app);
            let decided = tokio::spawn(async move {
                let answer = decide(&app, headers, bytes, &mut seen).await;
                app.record(Decision::new(delivery, seen, &answer, start.elapsed()));
                answer
            });
            decided.await.unwrap_or(Answer::Internal).into_response()
        }
    }
}

/// Content type, declared size and the credentials as far as the headers can tell — from the
/// headers alone — then the body, within `read_timeout_ms` and `max_body_bytes`. Why the
/// credentials were refused, when they were, goes into `seen`.
async fn read(
    app: &App,
    headers: &HeaderMap,
    body: Body,
    seen: &mut Seen,
) -> Result<Bytes, Answer> {
    let webhook = &app.config.webhook;
    if !is_json(headers) {
        return Err(Answer::UnsupportedMediaType);
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > webhook.max_body_bytes as u64) {
        return Err(Answer::TooLarge(webhook.max_body_bytes));
    }
    // Credentials the body cannot make right are refused unread: none at all, a wrong bearer
    // token, a malformed or stale signature, a scheme not accepted. A signature that may
    // match waits for the body, and `decide` has the last word.
    let refusal = match &webhook.secrets {
        Some(secrets) => match secrets.judge_head(headers, SystemTime::now()) {
            auth::Head::Refused(why) => Some(why.kind()),
            auth::Head::Valid | auth::Head::NeedsBody => None,
        },
        None if app.insecure_no_auth => None,
        None => (!auth::carries_credentials(headers)).then_some("missing"),
    };
    if let Some(kind) = refusal {
        seen.kind = Some(kind);
        return Err(Answer::Unauthorized);
    }
    match tokio::time::timeout(webhook.read_timeout, to_bytes(body, webhook.max_body_bytes)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if is_too_large(&e) => Err(Answer::TooLarge(webhook.max_body_bytes)),
        Ok(Err(_)) => Err(Answer::BadRequest(
            "the body was cut off before its end".into(),
        )),
        Err(_) => Err(Answer::TimedOut(webhook.read_timeout)),
    }
}

fn is_too_large(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// Credentials, shape, route, id — in that order, so nothing is parsed before it is
/// authenticated and nothing is written before the id is valid — then the run, awaited for at
/// most `respond_within_ms`. What it learns of the delivery on the way goes into `seen`.
async fn decide(app: &App, headers: HeaderMap, bytes: Bytes, seen: &mut Seen) -> Answer {
    let webhook = &app.config.webhook;
    if let Some(secrets) = &webhook.secrets {
        if let Err(why) = secrets.verify(&headers, &bytes, SystemTime::now()) {
            seen.kind = Some(why.kind());
            return Answer::Unauthorized;
        }
    }
    let event = match payload::parse(&bytes) {
        Ok(event) => event,
        Err(e) => return Answer::BadRequest(e.to_string()),
    };
    // The body is not needed past here: a waiting row keeps only its plan.
    drop(bytes);
    seen.table(&event.schema, &event.table);
    seen.route = app
        .routes
        .find(&event.schema, &event.table)
        .map(|r| r.route.table_name());
    let plan = match app.routes.plan(event) {
        Ok(Planned::Run(plan)) => plan,
        Ok(Planned::Ignored(why)) => return Answer::Ignored(why),
        Err(e) => return refused(e, seen),
    };
    seen.id = Some(plan.id.to_string());
    admit(app, plan).await
}

/// The answer to a row its route cannot plan: 400 for JSON at fault, 422 otherwise.
fn refused(e: PlanError, seen: &mut Seen) -> Answer {
    seen.id = e.row_id();
    seen.column = e.column().map(str::to_owned);
    if e.is_malformed() {
        return Answer::BadRequest(e.to_string());
    }
    Answer::Unprocessable {
        reason: e.reason(),
        message: e.to_string(),
    }
}

/// The run of a planned row: admitted (or refused as full), then awaited.
async fn admit(app: &App, plan: crate::pipeline::Plan) -> Answer {
    let webhook = &app.config.webhook;
    let row = RowRef {
        id: plan.id.clone(),
        branch: plan.branch.clone(),
        repo: plan.route.repo.clone(),
    };
    let submission = match app.pipeline.submit(plan) {
        Ok(submission) => submission,
        Err(full) => {
            return Answer::Unavailable {
                reason: full.reason(),
                message: full.to_string(),
                retry_after: full.retry_after(),
            }
        }
    };
    // The run is spawned: when the wait ends early it carries on.
    match tokio::time::timeout(webhook.respond_within, submission.outcome()).await {
        Ok(result) => Answer::from_run(row, result),
        Err(_) => Answer::Accepted(row, webhook.respond_within),
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}
