//! `rowbranch serve`: the webhook receiver.

use std::sync::Arc;

use anyhow::Context;

use super::Failure;
use crate::cli::ServeArgs;
use crate::config::{process_env, Config};
use crate::startup::{Application, Launch};

pub async fn run(args: ServeArgs) -> Result<(), Failure> {
    let config = Config::load_for_serve(&args.config.config, &process_env, args.insecure)?;
    // What the config cannot say without the database: whether the routes fit their tables.
    super::check_tables(&config, config.reconcile.every.is_some()).await?;
    let grace = config.shutdown_grace;
    let routes = config.routes.len();
    let webhooks = config.takes_webhooks();
    let queue = config
        .reads_the_queue()
        .then(|| config.pgmq.queue.to_string());
    let env = Launch {
        insecure_no_auth: args.insecure.no_auth,
        ..Launch::process()
    };
    // Nothing here talks to GitHub: the port answers at once. With a token, which no start
    // has proved (an App's installation says what it may do; a token says nothing), one
    // probe per repository first: a token that cannot write would fail every row.
    let application = Application::build(config, env).await?;
    application.check_write_access().await?;
    let addr = application.addr().expect("serve listens");
    // What this process does, said once: a queue-only setup answers 404 at /webhook, so saying
    // "POST /webhook" there would send a reader to the wrong place.
    match webhooks {
        true => tracing::info!(%addr, routes, "listening; POST /webhook"),
        false => {
            tracing::info!(%addr, routes, "listening (/healthz, /metrics); no route takes webhooks")
        }
    }
    if let Some(queue) = queue {
        tracing::info!(%queue, "the consumer reads the queue");
    }
    let pipeline = Arc::clone(application.pipeline());
    let stop = async move {
        first_signal(0, move || pipeline.report_unfinished()).await;
        tracing::info!(
            grace_s = grace.as_secs_f64(),
            "shutting down: no new connections; claimed rows get the grace to dispatch"
        );
    };
    application.run(stop).await.context("the server stopped")?;
    tracing::info!("stopped");
    Ok(())
}

/// Waits for the first signal; a second one then exits the process at once, with `code`, after
/// `last`.
pub(super) async fn first_signal<T>(code: i32, last: impl FnOnce() -> T + Send + 'static) {
    signal().await;
    tokio::spawn(async move {
        signal().await;
        tracing::warn!("a second signal: exiting now");
        last();
        std::process::exit(code);
    });
}

/// Ctrl-C (SIGINT) or SIGTERM; a SIGTERM handler that cannot be set up leaves Ctrl-C alone.
async fn signal() {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    #[cfg(unix)]
    let term = async { term.as_mut()?.recv().await };
    #[cfg(not(unix))]
    let term = std::future::pending::<Option<()>>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        Some(()) = term => {},
    }
}
