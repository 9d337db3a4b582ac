//! `rowbranch reconcile`: sweep the tables and finish the rows whose webhook was lost.

use std::io::IsTerminal;

use anyhow::{anyhow, Context};

use super::Failure;
use crate::cli::ReconcileArgs;
use crate::config::{process_env, Config};
use crate::pipeline::Routes;
use crate::startup;
use crate::sweep::{self, RouteSummary, SweepOptions};

pub async fn run(args: ReconcileArgs) -> Result<(), Failure> {
    let config = Config::load(&args.config.config, &process_env)?;
    let rows = super::database(
        &config,
        "reconcile reads the rows from PostgreSQL (e.g. Supabase's connection string, Project \
         Settings → Database)",
    )?;
    let window = match &args.since {
        Some(since) => super::duration_flag("--since", since, "1h, 24h or 7d")?,
        None => config.reconcile.window,
    };
    let routes = Routes::compile(&config)?;
    let (forge, shared) = super::forge(&config).await?;
    let rows = rows.await?;
    let pipeline = startup::pipeline(&config, forge, &shared);
    let options = SweepOptions {
        window,
        dry_run: args.dry_run,
        concurrency: 8,
        ..SweepOptions::of(&config)
    };
    let terminal = std::io::stderr().is_terminal() && !args.json;
    let show = |s: &RouteSummary| {
        if terminal {
            let skipped = s.already_handled + s.merged_before;
            eprint!(
                "\r  rows read {}, dispatched {}, skipped {skipped}   ",
                s.rows_seen, s.dispatched_now
            );
        }
    };
    let summaries = sweep::run(&routes, &rows, &pipeline, &options, &show).await;
    pipeline.drain().await;
    if terminal {
        eprintln!();
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summaries).context("summary to JSON")?
        );
    } else {
        print!("{}", sweep::table(&summaries, args.dry_run));
    }
    match RouteSummary::trouble(&summaries) {
        Some(trouble) => Err(Failure::Runtime(anyhow!("{trouble}"))),
        None => Ok(()),
    }
}
