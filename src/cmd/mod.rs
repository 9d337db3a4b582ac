//! One module per command, [`run`] to run the one asked for, and how a command fails.

pub mod config;
pub mod demo;
pub mod doctor;
pub mod drain;
pub mod explain;
pub mod healthcheck;
pub mod init;
pub mod preview;
pub mod queue;
pub mod reconcile;
pub mod redo;
pub mod serve;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};

use crate::cli::{Cli, Command};
use crate::config::{Config, ConfigError};
use crate::db::{Database, Error as DbError, Misfit};
use crate::forge::{Forge, OpenError};
use crate::http::ListenError;
use crate::pipeline::{CompiledRoute, RouteError, Routes};
use crate::startup::{self, Shared, StartupError};

/// Why a command failed, and so which exit code it ends with.
#[derive(Debug)]
pub enum Failure {
    /// Bad usage or configuration: exit 2.
    Usage(anyhow::Error),
    /// Something went wrong while running: exit 1.
    Runtime(anyhow::Error),
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Runtime(_) => 1,
        }
    }

    pub fn error(&self) -> &anyhow::Error {
        match self {
            Failure::Usage(e) | Failure::Runtime(e) => e,
        }
    }
}

/// The plural's `s`, for `n` of a thing.
fn plural(n: u64) -> &'static str {
    match n {
        1 => "",
        _ => "s",
    }
}

/// A usage failure that says `message`.
fn usage(message: impl std::fmt::Display) -> Failure {
    Failure::Usage(anyhow!(message.to_string()))
}

/// A duration flag's value: more than zero and less than a hundred years, else a usage failure
/// that gives `examples`.
fn duration_flag(flag: &str, text: &str, examples: &str) -> Result<Duration, Failure> {
    let duration = humantime::parse_duration(text).ok();
    duration
        .filter(|d| !d.is_zero() && d.as_secs() < 100 * 365 * 86_400)
        .ok_or_else(|| {
            usage(format!(
                "{flag} {text}: write a duration above zero and under 100 years, such as {examples}"
            ))
        })
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Runtime(e)
    }
}

/// The config's faults: a config that does not load, a route that does not compile, a forge
/// that cannot be opened (a key, a path, a URL).
macro_rules! usage_from {
    ($($error:ty),*) => {$(
        impl From<$error> for Failure {
            fn from(e: $error) -> Failure {
                Failure::Usage(e.into())
            }
        }
    )*};
}
usage_from!(ConfigError, RouteError, OpenError);

impl From<StartupError> for Failure {
    /// What the config names or lacks is usage; what the machine refuses (a port, the
    /// open-files limit) is a runtime failure.
    fn from(e: StartupError) -> Failure {
        match e {
            StartupError::Forge(_)
            | StartupError::Routes(_)
            | StartupError::NoQueueRoute(_)
            | StartupError::NoDatabaseUrl
            | StartupError::Listen(ListenError::Resolve { .. }) => Failure::Usage(e.into()),
            _ => Failure::Runtime(e.into()),
        }
    }
}

/// Runs one command.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Demo => demo::run().await,
        Command::Preview(args) => preview::run(args).await,
        Command::Doctor(args) => doctor::run(args).await,
        Command::Init(args) => init::run(args).await,
        Command::Reconcile(args) => reconcile::run(args).await,
        Command::Redo(args) => redo::run(args).await,
        Command::Queue(args) => queue::run(args).await,
        Command::Drain(args) => drain::run(args).await,
        Command::Config(args) => config::run(args),
        Command::Healthcheck(args) => healthcheck::run(args).await,
        Command::Explain(args) => explain::run(args).await,
    }
}

/// The route of `table` (`table` or `schema.table`), for a command that acts on one row; a
/// table without a route is a usage error that lists the routes there are.
fn route_for(config: &Config, table: &str) -> Result<CompiledRoute, Failure> {
    let routes = Routes::compile(config)?;
    routes.for_table(table).cloned().ok_or_else(|| {
        let tables: Vec<String> = config.routes.iter().map(|r| r.table_name()).collect();
        usage(format!(
            "no route for table {table}: the routes are {}",
            tables.join(", ")
        ))
    })
}

/// The config's forge, and what a pipeline over it shares with it.
async fn forge(config: &Config) -> Result<(Arc<dyn Forge>, Shared), Failure> {
    let shared = Shared::default();
    Ok((startup::forge(config, &shared).await?, shared))
}

/// Connects to `DATABASE_URL`'s database when awaited; without `DATABASE_URL`, at once a usage
/// error that says `why` the command needs it.
fn database(
    config: &Config,
    why: &str,
) -> Result<impl Future<Output = Result<Database, Failure>>, Failure> {
    let url = (config.database_url.clone())
        .ok_or_else(|| usage(format!("DATABASE_URL is not set: {why}")))?;
    Ok(async move {
        let rows = Database::connect(url.expose()).await;
        Ok(rows.context("connecting to DATABASE_URL")?)
    })
}

/// How long `serve` and `drain` give the database at start to say whether the routes fit their tables.
const TABLE_CHECK_WITHIN: Duration = Duration::from_secs(10);

/// Checks each route against its table in `DATABASE_URL`'s database, before any row is read: a
/// route that names a column its table lacks would refuse every row (`missing_column`), so
/// `serve` and `drain` do not start with one (exit 2); a table the database does not have —
/// mistyped, or another database — would dead-letter every message and miss every row, so they
/// stop on that too (exit 1), naming the tables the schema has. A database that does not answer
/// is logged at warn and they start: webhooks need none, and the queue's consumer waits for it.
/// `sweeps`: whether a sweep reads the created column too. Without `DATABASE_URL`, nothing to
/// check.
async fn check_tables(config: &Config, sweeps: bool) -> Result<(), Failure> {
    let Some(url) = &config.database_url else {
        return Ok(());
    };
    let checked = tokio::time::timeout(TABLE_CHECK_WITHIN, async {
        let rows = Database::connect(url.expose()).await?;
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
        let (failure, what): (fn(anyhow::Error) -> Failure, _) = match &e {
            DbError::Table(Misfit::NoTable(_)) => (
                Failure::Runtime,
                "names a table DATABASE_URL's database does not have",
            ),
            DbError::Table(_) => (Failure::Usage, "does not fit its table"),
            _ => {
                tracing::warn!(route = %table, error = %format!("{e:#}"), "could not check the route against its table");
                continue;
            }
        };
        return Err(failure(
            anyhow::Error::new(e).context(format!("the route for {table} {what}")),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_flag_takes_a_duration_above_zero_and_under_a_hundred_years() {
        let read = |text| duration_flag("--max-time", text, "4m or 90s");
        assert_eq!(read("4m").ok(), Some(Duration::from_secs(240)));
        for text in ["0s", "900000h", "soon"] {
            let Err(Failure::Usage(e)) = read(text) else {
                panic!("{text} was taken");
            };
            assert_eq!(
                e.to_string(),
                format!("--max-time {text}: write a duration above zero and under 100 years, such as 4m or 90s")
            );
        }
    }
}
