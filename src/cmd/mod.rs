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

use crate::cli::{Cli, Command};
use crate::config::Config;
use crate::config::ConfigError;
use crate::http::ListenError;
use crate::pipeline::CompiledRoute;
use crate::startup::StartupError;

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

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Runtime(e)
    }
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Failure {
        Failure::Usage(e.into())
    }
}

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
    let routes = crate::pipeline::Routes::compile(config).map_err(|e| Failure::Usage(e.into()))?;
    routes.for_table(table).cloned().ok_or_else(|| {
        let tables: Vec<String> = config.routes.iter().map(|r| r.table_name()).collect();
        Failure::Usage(anyhow::anyhow!(
            "no route for table {table}: the routes are {}",
            tables.join(", ")
        ))
    })
}
