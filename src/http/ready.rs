//! `GET /readyz`'s check of the forge: at most one in flight, shared by every probe. A probe
//! that comes while a check is under way gets the last answer, or waits for that one check when
//! there is no answer yet; an answer is reused for [`READINESS_TTL`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt, Shared};
use tokio::time::Instant;

use crate::forge::Forge;

/// How long a readiness answer is reused.
const READINESS_TTL: Duration = Duration::from_secs(10);

type Check = Shared<BoxFuture<'static, Result<(), NotReady>>>;

/// Why the forge is not ready, as its check found: the text `/readyz` shows. A text, so that
/// one answer can be shared by every probe that waits for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotReady(String);

#[derive(Default)]
pub struct Readiness {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    last: Option<(Instant, Result<(), NotReady>)>,
    pending: Option<Check>,
}

impl Readiness {
    /// Whether the forge answers with valid credentials.
    pub async fn check(&self, forge: &Arc<dyn Forge>) -> Result<(), NotReady> {
        let pending = {
            let mut state = self.state.lock().expect("readiness lock poisoned");
            if let Some((at, result)) = &state.last {
                if at.elapsed() < READINESS_TTL {
                    return result.clone();
                }
            }
            let pending = match &state.pending {
                Some(pending) => pending.clone(),
                None => {
                    let pending = self.start(Arc::clone(forge));
                    state.pending = Some(pending.clone());
                    pending
                }
            };
            match &state.last {
                Some((_, stale)) => return stale.clone(),
                None => pending,
            }
        };
        pending.await
    }

    /// One check, spawned, so that it finishes (and records its answer) even when every probe
    /// that waited for it has gone.
    fn start(&self, forge: Arc<dyn Forge>) -> Check {
        let state = Arc::clone(&self.state);
        let task = tokio::spawn(async move {
            let result = forge.ready().await.map_err(|e| NotReady(e.to_string()));
            let mut state = state.lock().expect("readiness lock poisoned");
            state.last = Some((Instant::now(), result.clone()));
            state.pending = None;
            result
        });
        async move {
            task.await
                .unwrap_or_else(|e| Err(NotReady(format!("the readiness check failed: {e}"))))
        }
        .boxed()
        .shared()
    }
}
