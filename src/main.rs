use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use rowbranch::cli::{Cli, Command};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo prints its own story; its server's routine lines would only interleave.
    let default_level = match cli.command {
        Command::Demo(_) => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(rowbranch::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {:#}", failure.error());
            ExitCode::from(failure.exit_code())
        }
    }
}
