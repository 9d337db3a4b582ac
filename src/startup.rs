//! From a loaded config to running parts: the forge its settings name, the routes with their
//! payload templates compiled, the pipeline, the server, and the jobs that run beside the
//! server in `serve` (the scheduled sweep). The commands call these; nothing below calls up.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::forge::{self, Forge};
use crate::http::{self, App};
use crate::pipeline::{Pipeline, Routes};
use crate::reconcile::{self, SweepOptions};
use crate::rows::Rows;

/// How long after start the first scheduled sweep runs.
const FIRST_SWEEP_AFTER: Duration = Duration::from_secs(10);

/// The config's routes with their payload templates read and compiled; an error names the file.
pub fn routes(config: &Config) -> anyhow::Result<Routes> {
    Routes::compile(&config.routes).with_context(|| config.source.display().to_string())
}

/// The forge the config names, for its routes. Makes no request.
pub async fn forge(config: &Config) -> anyhow::Result<Arc<dyn Forge>> {
    forge::open(&config.forge).await
}

/// The server's state over `forge`: the routes compiled and a pipeline of its own.
pub fn app(
    config: Config,
    forge: Arc<dyn Forge>,
    insecure_no_auth: bool,
) -> anyhow::Result<Arc<App>> {
    let routes = Arc::new(routes(&config)?);
    Ok(App::new(
        Arc::new(config),
        routes,
        Pipeline::new(forge),
        insecure_no_auth,
    ))
}

/// Serves `app` on `listener` until `shutdown`, with the scheduled sweep beside it (when the
/// config asks for one); waits for every run under way before it returns.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sweeps = tokio::spawn(scheduled_reconcile(Arc::clone(&app)));
    // The sweep stops first, so it starts no run after the server has drained its runs.
    let stop_sweeps = sweeps.abort_handle();
    let shutdown = async move {
        shutdown.await;
        stop_sweeps.abort();
    };
    http::serve(listener, app, shutdown).await
}

/// The sweep `serve` runs every `reconcile_every`, one run at a time, sharing the server's
/// pipeline so that a sweep and a webhook of the same row share one run.
async fn scheduled_reconcile(app: Arc<App>) {
    let config = &app.config;
    let (Some(every), Some(url)) = (config.reconcile.every, config.database_url.clone()) else {
        return;
    };
    let options = SweepOptions {
        window: config.reconcile.window,
        stale_claim_after: config.reconcile.stale_claim_after,
        dry_run: false,
        concurrency: 4,
        page_size: 1000,
    };
    // The first sweep comes shortly after start, then one every interval; a sweep that runs
    // long delays the next rather than overlapping it.
    let mut next = tokio::time::Instant::now() + FIRST_SWEEP_AFTER;
    loop {
        tokio::time::sleep_until(next).await;
        next = tokio::time::Instant::now() + every;
        let rows = match Rows::connect(url.expose()).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "the scheduled sweep failed");
                continue;
            }
        };
        let summaries =
            reconcile::sweep(&app.routes, &rows, &app.pipeline, &options, &|_| {}).await;
        for s in summaries {
            if let Some(error) = &s.error {
                tracing::error!(route = %s.route, %error, "the scheduled sweep stopped early");
            }
            tracing::info!(route = %s.route, rows = s.rows_seen, handled = s.already_handled,
                merged = s.merged_before, dispatched = s.dispatched_now,
                dead_claims = s.dead_claims_redispatched, failed = s.failed, "scheduled sweep");
            for f in s.failures {
                tracing::error!(id = %f.id, error = %f.error, "the sweep could not finish a row");
            }
        }
    }
}
