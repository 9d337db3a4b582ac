//! From a loaded config to running parts: the forge its settings name, the routes with their
//! payload templates compiled, the pipeline, the server, and the jobs that run beside the
//! server in `serve` (a first look at each repository, the scheduled sweep). The commands call
//! these; nothing below calls up.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::{Config, ForgeSettings};
use crate::forge::{self, Forge};
use crate::http::{self, App};
use crate::metrics::Metrics;
use crate::pgmq::{Consumer, ConsumerSettings};
use crate::pipeline::{Admission, Pipeline, Routes};
use crate::reconcile::{self, SweepOptions};
use crate::rows::Rows;
use crate::shutdown::Shutdown;

/// How long after start the first scheduled sweep runs.
const FIRST_SWEEP_AFTER: Duration = Duration::from_secs(10);

/// The config's routes with their payload templates read and compiled; an error names the file.
pub fn routes(config: &Config) -> anyhow::Result<Routes> {
    Routes::compile(&config.routes).with_context(|| config.source.display().to_string())
}

/// What the parts of one process share: its shutdown and its metrics.
#[derive(Clone, Default)]
pub struct Shared {
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
}

/// The forge the config names, for its routes, its waits bounded by the shutdown's grace.
/// Makes no request.
pub async fn forge(config: &Config, shared: &Shared) -> anyhow::Result<Arc<dyn Forge>> {
    forge::open(
        &config.forge,
        shared.shutdown.clone(),
        Arc::clone(&shared.metrics),
    )
    .await
}

/// A pipeline over `forge` that admits the config's `queue_capacity` rows at once.
pub fn pipeline(config: &Config, forge: Arc<dyn Forge>, shared: &Shared) -> Arc<Pipeline> {
    Pipeline::new(
        forge,
        admission(&config.forge),
        shared.shutdown.clone(),
        Arc::clone(&shared.metrics),
    )
}

/// How many rows wait at most, and how long a sender refused beyond that is asked to wait:
/// about as long as the rows admitted take to drain at the pace.
fn admission(settings: &ForgeSettings) -> Admission {
    let capacity = settings.queue_capacity();
    let retry_after = match settings {
        ForgeSettings::Github(github) => github
            .pace
            .interval
            .saturating_mul(u32::try_from(capacity).unwrap_or(u32::MAX))
            .clamp(Duration::from_secs(1), Duration::from_secs(3600)),
        ForgeSettings::Local(_) => Duration::from_secs(10),
    };
    Admission {
        capacity,
        retry_after,
    }
}

/// The server's state over `forge`: the routes compiled and a pipeline of its own.
pub fn app(
    config: Config,
    forge: Arc<dyn Forge>,
    shared: Shared,
    insecure_no_auth: bool,
) -> anyhow::Result<Arc<App>> {
    let routes = Arc::new(routes(&config)?);
    let pipeline = pipeline(&config, forge, &shared);
    Ok(App::new(
        Arc::new(config),
        routes,
        pipeline,
        shared.shutdown,
        insecure_no_auth,
    ))
}

/// Serves `app` on `listener` until `stop`, with the jobs that run beside the server: a first
/// look at each route's repository (in the background, so that the port answers at once even
/// when GitHub is slow or down) and the scheduled sweep (when the config asks for one). Then
/// shuts down within `shutdown_grace` (see [`http::serve`]).
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let warm_up = tokio::spawn(warm_up(Arc::clone(&app)));
    let sweeps = tokio::spawn(scheduled_reconcile(Arc::clone(&app)));
    let consumer = consumer(&app).map(|c| tokio::spawn(c.run()));
    // The jobs stop first, so that they start no run once the server drains its runs; the
    // consumer stops reading by itself once the shutdown begins.
    let (stop_warm_up, stop_sweeps) = (warm_up.abort_handle(), sweeps.abort_handle());
    let stop = async move {
        stop.await;
        stop_warm_up.abort();
        stop_sweeps.abort();
    };
    let served = http::serve(listener, Arc::clone(&app), stop).await;
    if let Some(consumer) = consumer {
        // It settles the messages of the runs that ended; past the grace, what is left is
        // read again once its lease lapses.
        let deadline = app
            .shutdown
            .deadline()
            .unwrap_or_else(tokio::time::Instant::now);
        let _ = tokio::time::timeout_at(deadline + Duration::from_secs(1), consumer).await;
    }
    served
}

/// The queue's consumer, when a route reads the queue and `DATABASE_URL` is set.
fn consumer(app: &Arc<App>) -> Option<Arc<Consumer>> {
    let config = &app.config;
    let url = config
        .database_url
        .clone()
        .filter(|_| config.reads_the_queue())?;
    let settings = ConsumerSettings {
        url,
        pgmq: config.pgmq.clone(),
        queue_capacity: config.forge.queue_capacity(),
        window_rows: window_rows(config),
    };
    Some(Consumer::new(
        settings,
        Arc::clone(&app.routes),
        Arc::clone(&app.pipeline),
        app.shutdown.clone(),
        Arc::clone(&app.database),
    ))
}

/// How many rows this process can start within one visibility window at its pace: two writes
/// a row (claim and dispatch), out of the burst and one write per interval, within the hourly
/// cap. The local forge has no pace: `queue_capacity`.
pub fn window_rows(config: &Config) -> usize {
    let ForgeSettings::Github(github) = &config.forge else {
        return config.forge.queue_capacity();
    };
    let window = config.pgmq.visibility_timeout;
    let pace = &github.pace;
    let paced = if pace.interval.is_zero() {
        u64::MAX
    } else {
        (window.as_millis() / pace.interval.as_millis().max(1)) as u64
    };
    let writes = paced
        .saturating_add(u64::from(pace.burst))
        .min(u64::from(pace.hourly_max));
    usize::try_from(writes / 2).unwrap_or(usize::MAX).max(1)
}

/// Reads each route's default branch once: a repository that cannot take claims yet (the App
/// not installed, an empty repository) is worth saying at start, not at the first row.
async fn warm_up(app: Arc<App>) {
    for route in &app.config.routes {
        if let Err(e) = app.pipeline.forge().base(&route.repo).await {
            tracing::warn!(repo = %route.repo, error = %e, "the forge cannot take claims for this route yet");
        }
    }
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
        pgmq: config.pgmq.clone(),
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
