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
    let (queue, dead_letter) = (&config.pgmq.queue, &config.pgmq.dead_letter);
    // `--all` and `--id` exclude each other: without an id, every dead letter.
    let moved = (queue::redrive(rows.client(), queue, dead_letter, args.id).await)
        .with_context(|| format!("moving dead letters from {dead_letter} to {queue}"))?;
    let s = super::plural(moved);
    println!("moved {moved} dead letter{s} from {dead_letter} back to {queue}");
    match args.id {
        Some(id) if moved == 0 => Err(anyhow!("{dead_letter} has no message with id {id}").into()),
        _ => Ok(()),
    }
}
