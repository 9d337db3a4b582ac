//! `rowbranch reconcile`: sweep the tables and finish the rows whose webhook was lost.

use std::io::IsTerminal;
use std::sync::Arc;

use anyhow::{anyhow, Context};

use crate::cli::ReconcileArgs;
use crate::config::{process_env, Config};
use crate::pipeline::Pipeline;
use crate::reconcile::{self, Progress, SweepOptions};
use crate::rows::Rows;
use crate::{forge, Failure};

pub async fn run(args: ReconcileArgs) -> Result<(), Failure> {
    let config = Config::load(&args.config.config, &process_env)?;
    let url = config.database_url.clone().ok_or_else(|| {
        Failure::Usage(anyhow!(
            "DATABASE_URL is not set: reconcile reads the rows from PostgreSQL (e.g. Supabase's \
             connection string, Project Settings → Database)"
        ))
    })?;
    let window = match &args.since {
        Some(since) => humantime::parse_duration(since)
            .ok()
            .filter(|d| !d.is_zero() && d.as_secs() < 100 * 365 * 86_400)
            .ok_or_else(|| {
                Failure::Usage(anyhow!(
                    "--since {since}: write a duration such as 1h, 24h or 7d"
                ))
            })?,
        None => config.reconcile.window,
    };
    let forge = forge::open(&config).await.map_err(Failure::Usage)?;
    let rows = Rows::connect(url.expose())
        .await
        .context("connecting to DATABASE_URL")?;
    let pipeline = Pipeline::new(forge);
    let options = SweepOptions {
        window,
        stale_claim_after: config.reconcile.stale_claim_after,
        dry_run: args.dry_run,
        concurrency: 8,
        page_size: 1000,
    };
    let terminal = std::io::stderr().is_terminal() && !args.json;
    let show = |p: Progress| {
        if terminal {
            eprint!(
                "\r  rows read {}, dispatched {}, skipped {}   ",
                p.rows_read, p.dispatched, p.skipped
            );
        }
    };
    let summaries = reconcile::sweep(&config, &rows, &pipeline, &options, &show).await?;
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
        print!("{}", reconcile::table(&summaries, args.dry_run));
    }
    let failed: u64 = summaries.iter().map(|s| s.failed).sum();
    let stopped = summaries.iter().filter(|s| s.error.is_some()).count();
    if failed > 0 || stopped > 0 {
        return Err(Failure::Runtime(anyhow!(
            "{failed} rows failed; {stopped} routes stopped early"
        )));
    }
    Ok(())
}

/// The sweep `serve` runs every `reconcile_every`, one run at a time, sharing its pipeline so
/// a sweep and a webhook of the same row share one run.
pub async fn scheduled(config: Arc<Config>, pipeline: Arc<Pipeline>) {
    let (Some(every), Some(url)) = (config.reconcile.every, config.database_url.clone()) else {
        return;
    };
    let options = SweepOptions {
        window: config.reconcile.window,
        stale_claim_after: config.reconcile.stale_claim_after,
        dry_run: false,
        concurrency: 4,
        page_size: 1000,
    };
    // The first sweep comes shortly after start, then one every interval; a sweep that runs
    // long delays the next rather than overlapping it.
    let mut next = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        tokio::time::sleep_until(next).await;
        next = tokio::time::Instant::now() + every;
        let result = async {
            let rows = Rows::connect(url.expose()).await?;
            reconcile::sweep(&config, &rows, &pipeline, &options, &|_| {}).await
        }
        .await;
        match result {
            Ok(summaries) => {
                for s in summaries {
                    if let Some(error) = &s.error {
                        tracing::error!(route = %s.route, %error, "the scheduled sweep stopped early");
                    }
                    tracing::info!(route = %s.route, rows = s.rows_seen, handled = s.already_handled,
                        merged = s.merged_before, dispatched = s.dispatched_now,
                        dead_claims = s.dead_claims_redispatched, failed = s.failed, "scheduled sweep");
                    for f in s.failures {
                        tracing::error!(id = %f.id, error = %f.error, "the sweep could not finish a row");
                    }
                }
            }
            Err(e) => tracing::error!(error = format!("{e:#}"), "the scheduled sweep failed"),
        }
    }
}
