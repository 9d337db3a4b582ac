//! `rowbranch serve`: the webhook receiver.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};

use super::Failure;
use crate::cli::ServeArgs;
use crate::config::env::secret_from_init;
use crate::config::{process_env, Config, ForgeSettings, GithubAuth, PrivateKeySource, StatusPage};
use crate::db::{Database, Error as DbError, Misfit};
use crate::startup::{Application, Launch};

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
        let set = secret_from_init(&config.source).unwrap_or_else(|| {
            "set ROWBRANCH_WEBHOOK_SECRET (at least 24 characters; several separated by spaces \
             to rotate)"
                .to_owned()
        });
        return Err(Failure::Usage(anyhow!(
            "no webhook secret: {set}; or pass --insecure-no-auth to accept deliveries without \
             credentials (never on a public address)"
        )));
    }
    warn_if_key_exposed(&config);
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
    if let Some(url) = &config.database_url {
        check_tables(&config, url.expose()).await?;
    }
    let grace = config.shutdown_grace;
    let routes = config.routes.len();
    let token = config.forge.token().is_some();
    let env = Launch {
        insecure_no_auth: args.insecure_no_auth,
        ..Launch::process()
    };
    // Nothing here talks to GitHub: the port answers at once. With a token, which no start
    // has proved (an App's installation says what it may do; a token says nothing), one
    // probe per repository first: a token that cannot write would fail every row.
    let application = Application::build(config, env).await?;
    if token {
        application.check_write_access().await?;
    }
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

/// Says once, at start, when the App's private key file is open to group or others, as ssh says
/// of a private key: whoever can read it can act as the App on every repository it is installed
/// on. A key that cannot be read at all is the forge's error, not this warning.
fn warn_if_key_exposed(config: &Config) {
    let ForgeSettings::Github(github) = &config.forge else {
        return;
    };
    let GithubAuth::App {
        key: PrivateKeySource::File(path),
        ..
    } = &github.auth
    else {
        return;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(metadata) = std::fs::metadata(path) else {
            return;
        };
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = %format!("{mode:04o}"),
                fix = %format!("chmod 600 {}", path.display()),
                "the GitHub App private key file is accessible by group or others: whoever can read it can act as the App"
            );
        }
    }
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

/// How long `serve` gives the database at start to say whether the routes fit their tables.
const TABLE_CHECK_WITHIN: Duration = Duration::from_secs(10);

/// Checks each route against its table in `DATABASE_URL`'s database: a route that names a column
/// its table lacks would refuse every row (`missing_column`), so `serve` does not start with
/// one (exit 2). A table the database does not have is logged at error, and a database that
/// does not answer at warn, and `serve` starts: webhooks need neither, and the queue's
/// consumer waits for the database.
async fn check_tables(config: &Config, url: &str) -> Result<(), Failure> {
    let sweeps = config.reconcile.every.is_some();
    let checked = tokio::time::timeout(TABLE_CHECK_WITHIN, async {
        let rows = Database::connect(url).await?;
        let mut checked = Vec::new();
        for route in &config.routes {
            checked.push((route, rows.check_columns(route, sweeps).await));
        }
        Ok::<_, DbError>(checked)
    })
    .await;
    let checked = match checked {
        Ok(Ok(checked)) => checked,
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "could not check the routes against their tables (DATABASE_URL); starting anyway");
            return Ok(());
        }
        Err(_) => {
            tracing::warn!(within_s = TABLE_CHECK_WITHIN.as_secs(), "the database did not answer in time to check the routes against their tables (DATABASE_URL); starting anyway");
            return Ok(());
        }
    };
    for (route, result) in checked {
        let Err(e) = result else { continue };
        let table = route.table_name();
        match &e {
            DbError::Table(Misfit::NoTable(_)) => tracing::error!(
                route = %table,
                error = %format!("{e:#}"),
                "the route's table is not in DATABASE_URL's database: reconcile and redo cannot read its rows"
            ),
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
