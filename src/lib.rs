//! rowbranch: one database row, one branch, one piece of work — however many times the row's
//! webhook arrives. See `docs/design.md` for the flow and its guarantees.

// The modules from the bottom layer up; docs/design.md shows the layers, and a test keeps a
// module from naming one above it.
pub mod event;
pub mod identity;
pub mod metrics;
pub mod shutdown;
pub mod webhook;

pub mod config;

pub mod forge;
pub mod rows;
pub mod templates;

pub mod pipeline;

pub mod doctor;
pub mod http;
pub mod pgmq;
pub mod reconcile;

pub mod startup;

pub mod cli;
pub mod cmd;

use cli::{Cli, Command};

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

impl From<config::ConfigError> for Failure {
    fn from(e: config::ConfigError) -> Failure {
        Failure::Usage(e.into())
    }
}

/// Runs one command.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Serve(args) => cmd::serve::run(args).await,
        Command::Demo(args) => cmd::demo::run(args).await,
        Command::Preview(args) => cmd::preview::run(args).await,
        Command::Doctor(args) => cmd::doctor::run(args).await,
        Command::Init(args) => cmd::init::run(args).await,
        Command::Reconcile(args) => cmd::reconcile::run(args).await,
        Command::Redo(args) => cmd::redo::run(args).await,
        Command::Queue(args) => cmd::queue::run(args).await,
    }
}
