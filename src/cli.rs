//! The command line, as clap parses it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::DEFAULT_PATH;

/// One database row, one branch, one piece of work.
///
/// rowbranch receives Supabase database webhooks, claims one branch per row on the forge
/// (GitHub, or a local git repository) and dispatches the work to a workflow.
#[derive(Debug, Parser)]
#[command(name = "rowbranch", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the webhook receiver.
    Serve(ServeArgs),
    /// Show the whole path on a local git repository: no accounts, no config.
    Demo(DemoArgs),
    /// Show what a webhook body would do (route, id, branch, payload) without touching a forge.
    ///
    /// Exits 0 when the body would be dispatched or ignored, 1 when the webhook would refuse it.
    Preview(PreviewArgs),
    /// Check the setup: config, secret, App credentials, installation, permissions, workflow.
    ///
    /// One line per check, with the fix for each failure. Exits 1 if any check fails.
    Doctor(DoctorArgs),
}

#[derive(Debug, Args)]
pub struct ConfigArg {
    /// The config file.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_PATH)]
    pub config: PathBuf,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Accept deliveries without credentials when ROWBRANCH_WEBHOOK_SECRET is not set.
    /// Anyone who can reach the port can then create branches: never on a public address.
    #[arg(long)]
    pub insecure_no_auth: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {}

#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// A webhook body, as Supabase would post it.
    #[arg(value_name = "FILE.json")]
    pub file: PathBuf,
    #[command(flatten)]
    pub config: ConfigArg,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub config: ConfigArg,
}
