//! `rowbranch serve`: the webhook receiver.

use std::sync::Arc;

use anyhow::{anyhow, Context};
use tokio::net::{TcpListener, TcpSocket};

use super::Failure;
use crate::cli::ServeArgs;
use crate::config::{process_env, Config};
use crate::startup;

pub async fn run(args: ServeArgs) -> Result<(), Failure> {
    let config = Config::load(&args.config.config, &process_env)?;
    if config.reads_the_queue() && config.database_url.is_none() {
        return Err(Failure::Usage(anyhow!(
            "a route reads the queue (intake = \"pgmq\") but DATABASE_URL is not set: set it to \
             the database's connection string (Supabase: Project Settings → Database → \
             Connection string; sslmode=verify-full with the project's CA)"
        )));
    }
    if config.takes_webhooks() && config.webhook.secrets.is_none() && !args.insecure_no_auth {
        return Err(Failure::Usage(anyhow!(
            "no webhook secret: set ROWBRANCH_WEBHOOK_SECRET (at least 24 characters; several \
             separated by spaces to rotate), or pass --insecure-no-auth to accept deliveries \
             without credentials (never on a public address)"
        )));
    }
    if config.reconcile.every.is_some() && config.database_url.is_none() {
        tracing::warn!("reconcile_every is set but DATABASE_URL is not: no scheduled sweep");
    }
    let shared = startup::Shared::default();
    let grace = config.shutdown_grace;
    let forge = startup::forge(&config, &shared)
        .await
        .map_err(Failure::Usage)?;
    // Listening comes first: nothing here talks to GitHub, so the port answers at once.
    let listener =
        listen(config.listen).with_context(|| format!("could not listen on {}", config.listen))?;
    let addr = listener.local_addr().context("no local address")?;
    tracing::info!(%addr, routes = config.routes.len(), "listening; POST /webhook");
    let app = startup::app(config, forge, shared, args.insecure_no_auth).map_err(Failure::Usage)?;
    let pipeline = Arc::clone(&app.pipeline);
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
    startup::serve(listener, app, stop)
        .await
        .context("the server stopped")?;
    tracing::info!("stopped");
    Ok(())
}

/// Connections beyond the connection cap wait in the listen backlog; `TcpListener::bind`
/// would ask for 128, a flood of idle sockets fills that, and then a delivery cannot even
/// connect until they are cut.
const LISTEN_BACKLOG: u32 = 1024;

fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does: a restart need not wait out the old sockets' TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Ctrl-C (SIGINT) or SIGTERM.
async fn signal() {
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
