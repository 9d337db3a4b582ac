//! `rowbranch redo --table T --id ID`: run a row again on purpose, past "already handled": on
//! its own branch if that is free, else on the next free `{branch}-redo-N`.

use std::io::{IsTerminal, Write};

use anyhow::{anyhow, Context};

use super::Failure;
use crate::cli::RedoArgs;
use crate::config::{process_env, Config};
use crate::identity::BranchName;
use crate::pipeline::{Outcome, Start};
use crate::startup;

pub async fn run(args: RedoArgs) -> Result<(), Failure> {
    let config = Config::load(&args.config.config, &process_env)?;
    let compiled = super::route_for(&config, &args.table)?;
    let rows = super::database(&config, "redo reads the row from PostgreSQL")?.await?;
    let route = &compiled.route;
    let Some(row) = rows
        .by_id(route, &args.id)
        .await
        .map_err(anyhow::Error::new)?
    else {
        let (table, column) = (route.table_name(), &route.id_column);
        // Row level security may hide it: say so rather than that it is not there.
        let unseen = rows.visibility(route).await.ok().and_then(|v| v.unseen());
        let unseen = unseen.map_or(String::new(), |why| {
            format!(" that DATABASE_URL's role can see: {why}")
        });
        let missing = anyhow!("{table} has no row with {column} = {}{unseen}", args.id);
        return Err(missing.into());
    };
    let plan = compiled.plan_row(&row.record).context("planning the row")?;
    let (forge, shared) = super::forge(&config).await?;
    let taken = forge
        .row_branches(&route.repo, &route.branch_prefix, &plan.id)
        .await
        .context("listing the row's branches")?;
    let branch = free_branch(&plan.branch, &taken);
    let table = route.table_name();
    println!("row {} of {table} → {branch} in {}", plan.id, route.repo);
    if !taken.is_empty() {
        let names: Vec<&str> = taken.iter().map(BranchName::as_str).collect();
        println!("  taken already: {}", names.join(", "));
    }
    if !args.yes
        && !confirm(&format!(
            "claim {branch} and dispatch `{}`?",
            route.event_type
        ))?
    {
        println!("nothing done");
        return Ok(());
    }
    let plan = plan.on_branch(branch);
    let id = plan.id.clone();
    let pipeline = startup::pipeline(&config, forge, &shared);
    let run = pipeline
        .submit(plan, Start::Redo, 0)
        .map_err(|full| Failure::Runtime(full.into()))?;
    let outcome = run.outcome().await;
    // The row's state, written back where the route asks it, before the process ends.
    pipeline.drain().await;
    match outcome {
        Ok(Outcome::Dispatched { branch, base }) => {
            println!("claimed {branch} at {} and dispatched", base.sha.short());
            Ok(())
        }
        Ok(Outcome::Duplicate { branch, .. }) => Err(Failure::Runtime(anyhow!(
            "{branch} was claimed by someone else meanwhile: run redo again"
        ))),
        Err(e) => Err(Failure::Runtime(
            anyhow::Error::new(e).context(format!("running {id}")),
        )),
    }
}

/// The row's branch if nothing has it, else the first `{branch}-redo-N` that is free.
pub fn free_branch(branch: &BranchName, taken: &[BranchName]) -> BranchName {
    if !taken.contains(branch) {
        return branch.clone();
    }
    (1..)
        .map(|n| branch.redo(n))
        .find(|b| !taken.contains(b))
        .expect("some redo number is free")
}

/// Asks on the terminal; without one, `--yes` is needed.
fn confirm(question: &str) -> Result<bool, Failure> {
    if !std::io::stdin().is_terminal() {
        return Err(super::usage(
            "no terminal to ask on: pass --yes to redo without asking",
        ));
    }
    print!("{question} [y/N] ");
    std::io::stdout().flush().ok();
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .context("reading the answer")?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
