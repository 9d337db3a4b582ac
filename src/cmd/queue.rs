//! `rowbranch queue redrive`: dead letters back to the queue, to be run again (after the cause
//! is fixed: a route added, a payload template mended).

use anyhow::{anyhow, Context};

use super::Failure;
use crate::cli::QueueCommand;
use crate::config::{process_env, Config};
use crate::db::queue;

pub async fn run(command: QueueCommand) -> Result<(), Failure> {
    let QueueCommand::Redrive(args) = command;
    let config = Config::load(&args.config.config, &process_env)?;
    let rows = super::database(&config, "the queue is in the database it names")?.await?;
    let pgmq = &config.pgmq;
    let only = if args.all { None } else { args.id };
    let moved = queue::redrive(rows.client(), &pgmq.queue, &pgmq.dead_letter, only)
        .await
        .with_context(|| {
            format!(
                "moving dead letters from {} to {}",
                pgmq.dead_letter, pgmq.queue
            )
        })?;
    println!(
        "moved {moved} dead letter{} from {} back to {}",
        if moved == 1 { "" } else { "s" },
        pgmq.dead_letter,
        pgmq.queue
    );
    if moved == 0 && only.is_some() {
        return Err(Failure::Runtime(anyhow!(
            "{} has no message with id {}",
            pgmq.dead_letter,
            only.unwrap_or_default()
        )));
    }
    Ok(())
}
