//! `rowbranch serve`: the webhook receiver.

use std::sync::Arc;

use anyhow::{anyhow, Context};

use super::Failure;
use crate::cli::ServeArgs;
use crate::config::{process_env, Config, StatusPage};
use crate::startup::{Application, Env};

/// The shortest status page password `serve` takes: 16 characters of hex are 64 bits, which
/// ten guesses a minute (see `http::login`) would not exhaust in the age of the universe.
const MIN_STATUS_PASSWORD_CHARS: usize = 16;

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
    if let Some(secrets) = config
        .webhook
        .secrets
        .as_ref()
        .filter(|s| !s.can_authenticate_any())
    {
        if config.takes_webhooks() {
            tracing::warn!(
                "[webhook] accept = {} takes none of the secrets in ROWBRANCH_WEBHOOK_SECRET: \
                 every delivery will be refused (\"bearer\" takes a secret that does not start \
                 with whsec_, \"standard-webhooks\" one that does)",
                secrets.accept_list()
            );
        }
    }
    if let Some(page) = &config.status_page {
        status_page_password(page, args.insecure_public_status)?;
    }
    if config.reconcile.every.is_some() && config.database_url.is_none() {
        tracing::warn!("reconcile_every is set but DATABASE_URL is not: no scheduled sweep");
    }
    let grace = config.shutdown_grace;
    let routes = config.routes.len();
    let env = Env {
        insecure_no_auth: args.insecure_no_auth,
        ..Env::process()
    };
    // Nothing here talks to GitHub: the port answers at once.
    let application = Application::build(config, env).await?;
    let addr = application.addr().expect("serve listens");
    tracing::info!(%addr, routes, "listening; POST /webhook");
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

/// Refuses a status page anyone could read, or whose password a guesser could find: none, or
/// one under [`MIN_STATUS_PASSWORD_CHARS`] characters, unless `--insecure-public-status`.
fn status_page_password(page: &StatusPage, insecure: bool) -> Result<(), Failure> {
    let chars = page.password.as_ref().map(|p| p.expose().chars().count());
    let problem = match chars {
        None => {
            "ROWBRANCH_STATUS_PASSWORD is not set (or empty), so the status page would be public"
                .to_owned()
        }
        Some(n) if n < MIN_STATUS_PASSWORD_CHARS => format!(
            "ROWBRANCH_STATUS_PASSWORD has {n} characters, fewer than the \
             {MIN_STATUS_PASSWORD_CHARS} required"
        ),
        Some(_) => return Ok(()),
    };
    if insecure {
        tracing::warn!(
            "{problem}: served anyway (--insecure-public-status); the page shows row ids and branch names"
        );
        return Ok(());
    }
    Err(Failure::Usage(anyhow!(
        "status_page = true, but {problem}: the page shows row ids and branch names made from the \
         rows' text. Set ROWBRANCH_STATUS_PASSWORD to a random password of \
         {MIN_STATUS_PASSWORD_CHARS} or more characters (e.g. `openssl rand -hex 16`), turn the \
         page off, or pass --insecure-public-status (never on a public address)"
    )))
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
