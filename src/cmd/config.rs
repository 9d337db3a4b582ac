//! `rowbranch config`: prints the effective config (SPEC §2, "What runs"): TOML on standard
//! output, which secrets are set on standard error, so that the output can be piped whole into
//! `ROWBRANCH_CONFIG`.

use std::io::Write;

use anyhow::Context;

use super::Failure;
use crate::cli::ConfigArg;
use crate::config::{process_env, Config};

pub fn run(args: ConfigArg) -> Result<(), Failure> {
    let shown = Config::show(&args.config, &process_env)?;
    std::io::stdout()
        .lock()
        .write_all(shown.toml.as_bytes())
        .context("cannot write to standard output")?;
    let mut err = std::io::stderr().lock();
    // Only whether each is set: the values stay in the environment.
    let _ = writeln!(err, "secrets, from the environment and never printed:");
    for (name, state) in shown.secrets {
        let _ = writeln!(err, "  {name:<26} {state}");
    }
    Ok(())
}
