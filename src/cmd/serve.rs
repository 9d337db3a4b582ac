//! `rowbranch serve`: the webhook receiver.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::Failure;
use crate::cli::ServeArgs;
use crate::config::{process_env, Config};
use crate::db::{Database, Error as DbError, Misfit};
use crate::startup::{Application, Launch};

pub async fn run(args: ServeArgs) -> Result<(), Failure> {
    let config = Config::load_for_serve(&args.config.config, &process_env, args.insecure)?;
    // What the config cannot say without the database: whether the routes fit their tables.
    if let Some(url) = &config.database_url {
        check_tables(&config, url.expose(), config.reconcile.every.is_some()).await?;
    }
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
        signal().await;
        tracing::info!(
            grace_s = grace.as_secs_f64(),
            "shutting down: no new connections; claimed rows get the grace to dispatch"
        );
        tokio::spawn(async move {
            signal().await;
            tracing::warn!("a second signal: exiting now");
            pipeline.report_unfinished();
            std::process::exit(0);
        });
    };
    application.run(stop).await.context("the server stopped")?;
    tracing::info!("stopped");
    Ok(())
}

/// How long `serve` gives the database at start to say whether the routes fit their tables.
const TABLE_CHECK_WITHIN: Duration = Duration::from_secs(10);

/// Checks each route against its table in `DATABASE_URL`'s database, before any row is read: a
/// route that names a column its table lacks would refuse every row (`missing_column`), so
/// `serve` and `drain` do not start with one (exit 2); a table the database does not have —
/// mistyped, or another database — would dead-letter every message and miss every row, so they
/// stop on that too (exit 1), naming the tables the schema has. A database that does not answer
/// is logged at warn and they start: webhooks need none, and the queue's consumer waits for it.
/// `sweeps`: whether a sweep reads the created column too.
pub(super) async fn check_tables(config: &Config, url: &str, sweeps: bool) -> Result<(), Failure> {
    let checked = tokio::time::timeout(TABLE_CHECK_WITHIN, async {
        let rows = Database::connect(url).await?;
        let mut checked = Vec::new();
        for route in &config.routes {
            checked.push((route, rows.check_columns(route, sweeps).await));
        }
        Ok::<_, DbError>(checked)
    })
    .await
    .map_err(|_| format!("no answer within {} s", TABLE_CHECK_WITHIN.as_secs()))
    .and_then(|checked| checked.map_err(|e| format!("{e:#}")));
    if let Err(error) = &checked {
        tracing::warn!(%error, "could not check the routes against their tables (DATABASE_URL); starting anyway");
    }
    for (route, result) in checked.unwrap_or_default() {
        let Err(e) = result else { continue };
        let table = route.table_name();
        match &e {
            DbError::Table(Misfit::NoTable(_)) => {
                return Err(Failure::Runtime(anyhow::Error::new(e).context(format!(
                    "the route for {table} names a table DATABASE_URL's database does not have"
                ))))
            }
            DbError::Table(_) => {
                return Err(Failure::Usage(
                    anyhow::Error::new(e)
                        .context(format!("the route for {table} does not fit its table")),
                ))
            }
            _ => {
                tracing::warn!(route = %table, error = %format!("{e:#}"), "could not check the route against its table")
            }
        }
    }
    Ok(())
}

/// Ctrl-C (SIGINT) or SIGTERM.
pub(super) async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
