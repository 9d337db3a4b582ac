//! `GET /readyz`: whether the forge answers with valid credentials and, with routes that read
//! the queue, whether the database does. The forge's check is at most one in flight, shared by
//! every probe: a probe that comes while a check is under way gets the last answer, or waits
//! for that one check when there is no answer yet; an answer is reused for [`READINESS_TTL`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::future::{BoxFuture, FutureExt, Shared};
use serde_json::json;
use tokio::time::Instant;

use super::App;
use crate::forge::Forge;

/// How long a readiness answer is reused.
const READINESS_TTL: Duration = Duration::from_secs(10);

/// The forge's check under way, which every probe that waits for it shares. Why the forge is
/// not ready is the text `/readyz` shows, so that one answer can be shared by every probe.
type PendingCheck = Shared<BoxFuture<'static, Result<(), String>>>;

/// The forge's readiness: the last answer, and the check under way.
#[derive(Default)]
pub struct Readiness(Arc<Mutex<Checked>>);

#[derive(Default)]
struct Checked {
    last: Option<(Instant, Result<(), String>)>,
    pending: Option<PendingCheck>,
}

impl Readiness {
    /// Whether the forge answers with valid credentials.
    pub async fn check(&self, forge: &Arc<dyn Forge>) -> Result<(), String> {
        let pending = {
            let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((at, fresh)) = &state.last {
                if at.elapsed() < READINESS_TTL {
                    return fresh.clone();
                }
            }
            let pending = (state.pending)
                .get_or_insert_with(|| check(Arc::clone(&self.0), Arc::clone(forge)))
                .clone();
            match &state.last {
                Some((_, stale)) => return stale.clone(),
                None => pending,
            }
        };
        pending.await
    }
}

/// One check, spawned, so that it finishes (and records its answer in `state`) even when every
/// probe that waited for it has gone.
fn check(state: Arc<Mutex<Checked>>, forge: Arc<dyn Forge>) -> PendingCheck {
    let task = tokio::spawn(async move {
        let result = forge.ready().await.map_err(|e| e.to_string());
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.last = Some((Instant::now(), result.clone()));
        state.pending = None;
        result
    });
    let answer = async move {
        task.await
            .unwrap_or_else(|e| Err(format!("the readiness check failed: {e}")))
    };
    answer.boxed().shared()
}

/// Ready when the config is loaded (it is, or there would be no server) and the forge answers
/// with valid credentials. An unreachable database makes the server not ready only when no
/// route takes webhooks (the webhook routes work on without it).
pub(super) async fn readyz(State(app): State<Arc<App>>) -> Response {
    let github = app.readiness.check(app.pipeline.forge()).await;
    let mut body = json!({ "github": said(&github) });
    let mut ready = github.is_ok();
    if app.config.reads_the_queue() {
        let database = (app.database.last()).unwrap_or_else(|| Err("not reached yet".to_owned()));
        body["database"] = json!(said(&database));
        ready &= database.is_ok() || app.config.takes_webhooks();
    }
    // Each part's field says its cause, once; the status says which way it went.
    body["status"] = json!(if ready { "ready" } else { "not ready" });
    let status = match ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(body)).into_response()
}

/// A part's field in the body: `ok`, or why not.
fn said(part: &Result<(), impl std::fmt::Display>) -> String {
    part.as_ref()
        .map_or_else(ToString::to_string, |()| "ok".to_owned())
}
