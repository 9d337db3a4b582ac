//! `rowbranch doctor`: checks the setup end to end, one line per check, with the fix for each
//! failure (and for an advice, `!`). Exits 1 if any check fails, 2 if the config itself does
//! not load.

use anyhow::anyhow;

use super::Failure;
use crate::cli::DoctorArgs;
use crate::config::{process_env, Config};
use crate::doctor::{checks, quietly};

pub async fn run(args: DoctorArgs) -> Result<(), Failure> {
    let config = match Config::load(&args.config.config, &process_env) {
        Ok(config) => config,
        Err(e) => {
            println!("✗ {e}");
            return Err(Failure::Usage(anyhow!("the config does not load")));
        }
    };
    let checks = quietly(checks(&config)).await;
    let failed = checks.iter().filter(|c| !c.ok).count();
    for check in &checks {
        // `!`: passed, with advice for something only an optional feature needs.
        let mark = match (check.ok, &check.fix) {
            (false, _) => "✗",
            (true, Some(_)) => "!",
            (true, None) => "✓",
        };
        println!("{mark} {}", check.what);
        if let Some(fix) = &check.fix {
            println!("    fix: {fix}");
        }
    }
    if failed > 0 {
        return Err(Failure::Runtime(anyhow!(
            "{failed} of {} checks failed",
            checks.len()
        )));
    }
    println!("all {} checks pass", checks.len());
    Ok(())
}
