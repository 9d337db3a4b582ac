//! `rowbranch serve`: the webhook receiver.

use anyhow::{anyhow, Context};
use tokio::net::TcpListener;

use crate::cli::ServeArgs;
use crate::config::{process_env, Config};
use crate::{startup, Failure};

pub async fn run(args: ServeArgs) -> Result<(), Failure> {
    let config = Config::load(&args.config.config, &process_env)?;
    if config.webhook.secrets.is_none() && !args.insecure_no_auth {
        return Err(Failure::Usage(anyhow!(
            "no webhook secret: set ROWBRANCH_WEBHOOK_SECRET (at least 24 characters; several \
             separated by spaces to rotate), or pass --insecure-no-auth to accept deliveries \
             without credentials (never on a public address)"
        )));
    }
    if config.reconcile.every.is_some() && config.database_url.is_none() {
        tracing::warn!("reconcile_every is set but DATABASE_URL is not: no scheduled sweep");
    }
    let forge = startup::forge(&config).await.map_err(Failure::Usage)?;
    // A repository that cannot take claims yet is worth saying at start, not at the first row.
    for route in &config.routes {
        if let Err(e) = forge.base(&route.repo).await {
            tracing::warn!(repo = %route.repo, error = %e, "the forge cannot take claims for this route yet");
        }
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("could not listen on {}", config.listen))?;
    let addr = listener.local_addr().context("no local address")?;
    tracing::info!(%addr, routes = config.routes.len(), "listening; POST /webhook");
    let app = startup::app(config, forge, args.insecure_no_auth).map_err(Failure::Usage)?;
    startup::serve(listener, app, shutdown_signal())
        .await
        .context("the server stopped")?;
    tracing::info!("stopped; every run under way has finished");
    Ok(())
}

/// Ctrl-C or SIGTERM: stop taking deliveries, finish the runs under way.
async fn shutdown_signal() {
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
    tracing::info!("shutting down: finishing the runs under way");
}
