//! The HTTP server: `POST /webhook` and the probes. [`router`] for tests, [`serve`] for the
//! binary, with shutdown injected.

mod answer;
mod metrics;

pub use answer::{Answer, RowRef};

use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::{to_bytes, Body};
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::pipeline::{Pipeline, Planned, Routes};
use crate::webhook::payload;
use metrics::Metrics;

/// Everything a request needs.
pub struct App {
    pub config: Arc<Config>,
    /// The config's routes with their payload templates compiled.
    pub routes: Arc<Routes>,
    pub pipeline: Arc<Pipeline>,
    /// Set by `--insecure-no-auth`: accept deliveries without credentials when no secret is set.
    insecure_no_auth: bool,
    metrics: Metrics,
    /// The last readiness answer and when it was had: probes come often, GitHub is asked seldom.
    readiness: tokio::sync::Mutex<Option<(tokio::time::Instant, Result<(), String>)>>,
}

impl App {
    pub fn new(
        config: Arc<Config>,
        routes: Arc<Routes>,
        pipeline: Arc<Pipeline>,
        insecure_no_auth: bool,
    ) -> Arc<App> {
        Arc::new(App {
            config,
            routes,
            pipeline,
            insecure_no_auth,
            metrics: Metrics::default(),
            readiness: tokio::sync::Mutex::new(None),
        })
    }
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/webhook", post(webhook))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(app)
}

/// Serves until `shutdown` resolves, then waits for every run under way to finish.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(Arc::clone(&app)))
        .with_graceful_shutdown(shutdown)
        .await?;
    app.pipeline.drain().await;
    Ok(())
}

async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// How long a readiness answer is reused.
const READINESS_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// Ready when the config is loaded (it is, or there would be no server) and the forge answers
/// with valid credentials.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let cached = match &*app.readiness.lock().await {
        Some((at, result)) if at.elapsed() < READINESS_TTL => Some(result.clone()),
        _ => None,
    };
    // Asked without holding the lock: a slow GitHub must not queue every probe behind it.
    let result = match cached {
        Some(result) => result,
        None => {
            let result = app
                .pipeline
                .forge()
                .ready()
                .await
                .map_err(|e| e.to_string());
            *app.readiness.lock().await = Some((tokio::time::Instant::now(), result.clone()));
            result
        }
    };
    match result {
        Ok(()) => Json(json!({ "status": "ready" })).into_response(),
        Err(message) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "not ready", "message": message })),
        )
            .into_response(),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

async fn webhook(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let answer = receive(&app, &headers, body).await;
    app.metrics.count(&answer);
    answer.into_response()
}

/// Content type, size, credentials, shape, route, id — in that order, so nothing is parsed
/// before it is authenticated and nothing is written before the id is valid — then the run.
async fn receive(app: &App, headers: &HeaderMap, body: Body) -> Answer {
    let webhook = &app.config.webhook;
    if !is_json(headers) {
        return Answer::UnsupportedMediaType;
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > webhook.max_body_bytes as u64) {
        return Answer::TooLarge(webhook.max_body_bytes);
    }
    let Ok(bytes) = to_bytes(body, webhook.max_body_bytes).await else {
        return Answer::TooLarge(webhook.max_body_bytes);
    };
    match &webhook.secrets {
        Some(secrets) => {
            if let Err(why) = secrets.verify(headers, &bytes, SystemTime::now()) {
                tracing::debug!(reason = %why, "refused a delivery");
                return Answer::Unauthorized;
            }
        }
        None if app.insecure_no_auth => {}
        None => return Answer::Unauthorized,
    }
    let event = match payload::parse(&bytes) {
        Ok(event) => event,
        Err(e) => return Answer::BadRequest(e.to_string()),
    };
    let plan = match app.routes.plan(event) {
        Ok(Planned::Run(plan)) => plan,
        Ok(Planned::Ignored(why)) => return Answer::Ignored(why),
        Err(e) => return Answer::Unprocessable(e.to_string()),
    };
    let row = RowRef {
        id: plan.id.clone(),
        branch: plan.branch.clone(),
        repo: plan.route.repo.clone(),
    };
    let submission = app.pipeline.submit(plan);
    // The run is spawned: when the wait ends early, or the client goes, it carries on.
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
