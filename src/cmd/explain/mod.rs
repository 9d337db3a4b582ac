//! `rowbranch explain --table T --id ID`: one row, end to end, from the sources of truth — the
//! row in its table, its branches, pull requests and workflow runs on the forge, its queue
//! message — and what `reconcile` and `redo` would do with it now, by their own rules
//! (the sweep's own decision, redo's choice of branch). Reads only: no claim, no dispatch, no
//! `pgmq.read` (which would count a read); a source that cannot be reached is said, and the
//! rest is still told. [`read`] asks the sources, [`forecast`] asks the commands' code,
//! [`report`] is what comes out, as JSON or as text.

mod forecast;
mod read;
mod report;

use std::time::Duration;

use anyhow::{anyhow, Context};
use chrono::Utc;
use serde_json::Value;

use self::report::{Forecast, Identity, Report, RouteSection, RowSection, SourceError};
use super::Failure;
use crate::cli::ExplainArgs;
use crate::cmd::doctor::quietly;
use crate::config::{process_env, Config, ForgeSettings, Intake};
use crate::forge::Forge;
use crate::identity::{BranchName, RowId};
use crate::pipeline::CompiledRoute;

/// How long one GitHub read may go on retrying: someone is waiting at a terminal.
const RETRY_BUDGET: Duration = Duration::from_secs(10);

/// A row's pull requests and runs come after it; this much earlier covers a database clock and
/// GitHub's that disagree.
const CLOCK_SLACK: chrono::Duration = chrono::Duration::hours(1);

pub async fn run(args: ExplainArgs) -> Result<(), Failure> {
    let mut config = Config::load(&args.config.config, &process_env)?;
    if let ForgeSettings::Github(github) = &mut config.forge {
        github.retry_budget = github.retry_budget.min(RETRY_BUDGET);
    }
    let compiled = super::route_for(&config, &args.table)?;
    let (forge, _shared) = super::forge(&config).await?;
    let report = quietly(explain(&config, &compiled, forge.as_ref(), &args.id)).await;
    if args.json {
        let json = serde_json::to_string_pretty(&report).context("the report to JSON")?;
        println!("{json}");
    } else {
        print!("{}", report::render(&report, Utc::now()));
    }
    let sources: Vec<String> = (report.first_errors().iter())
        .map(|u| format!("the {}", u.source))
        .collect();
    let failed = match (report.row.status, sources.is_empty()) {
        ("misfit", _) => anyhow!(
            "the route does not fit its table: {}",
            report.row.detail.as_deref().unwrap_or_default()
        ),
        (_, true) => return Ok(()),
        _ => anyhow!(
            "could not reach {}; what they could not tell is left out",
            sources.join(", ")
        ),
    };
    Err(Failure::Runtime(failed))
}

/// Everything the sources say of row `id` of the route, and what the commands would do.
pub async fn explain(
    config: &Config,
    compiled: &CompiledRoute,
    forge: &dyn Forge,
    id: &str,
) -> Report {
    let route = &compiled.route;
    let now = Utc::now();
    let (database, row) = read::row(config, route, id).await;
    let identity = identity(compiled, &row, id);
    let since = match row.created_at {
        Some(created_at) => created_at - CLOCK_SLACK,
        None => now - forecast::since(config.reconcile.window),
    };
    let forge_section = read::forge(config, route, forge, identity.id.as_ref(), since).await;
    let queue = match route.intake {
        Intake::Pgmq { .. } => Some(read::queue(config, route, database.as_ref(), &row).await),
        Intake::Webhook => None,
    };
    // Each source's failures, in the order they were read.
    let failed =
        |status: &str, detail: &Option<String>| detail.clone().filter(|_| status == "unreachable");
    let (pulls, runs) = (&forge_section.pull_requests, &forge_section.runs);
    let database = failed(row.status, &row.detail).map(|e| ("database", e));
    let forge_errors = (failed(pulls.status, &pulls.detail).into_iter())
        .chain(failed(runs.status, &runs.detail))
        .chain(forge_section.errors.iter().cloned())
        .map(|e| ("forge", e));
    let queue_error = (queue.iter())
        .filter_map(|q| failed(q.status, &q.detail))
        .map(|e| ("queue", e));
    let unreachable = (database.into_iter().chain(forge_errors).chain(queue_error))
        .map(|(source, error)| SourceError { source, error })
        .collect();
    let mut report = Report {
        version: 1,
        id: id.to_owned(),
        route: RouteSection {
            table: route.table_name(),
            repo: route.repo.to_string(),
            intake: route.intake.as_str(),
            id_column: route.id_column.clone(),
            text_column: route.text_column.clone(),
            branch_prefix: route.branch_prefix.to_string(),
            event_type: route.event_type.to_string(),
            run_when: route.run_when.as_ref().map(ToString::to_string),
            status_column: route.status_column.clone(),
            pull_request_column: route.pull_request_column.clone(),
        },
        reconcile: Forecast::default(),
        redo: Forecast::default(),
        row,
        identity,
        forge: forge_section,
        queue,
        unreachable,
    };
    report.redo = forecast::redo(&report, compiled);
    report.reconcile = forecast::reconcile(config, compiled, forge, &report, now).await;
    report
}

impl Report {
    /// The first error of each source that could not be reached: the sections say the rest.
    fn first_errors(&self) -> Vec<&SourceError> {
        let mut first: Vec<&SourceError> = self.unreachable.iter().collect();
        // `explain` lists each source's errors together.
        first.dedup_by_key(|u| u.source);
        first
    }
}

/// The row's identity: from the row itself when the table has it (the planner's branch, slug
/// and all), else from the id alone (no text, so no slug: the branches are found by the id).
fn identity(compiled: &CompiledRoute, row: &RowSection, id: &str) -> Identity {
    let named = match &row.record {
        Some(record) => (compiled.plan_row(record))
            .map(|plan| (plan.branch, plan.id, "row"))
            .map_err(|e| e.to_string()),
        None => {
            let value = row.typed_id.clone().unwrap_or(Value::String(id.to_owned()));
            let prefix = &compiled.route.branch_prefix;
            (RowId::parse(&value))
                .map(|id| (BranchName::new(prefix, &id, None), id, "id"))
                .map_err(|e| e.to_string())
        }
    };
    match named {
        Ok((branch, id, derived_from)) => Identity {
            id: Some(id),
            branch: Some(branch),
            derived_from: Some(derived_from),
            error: None,
        },
        Err(e) => Identity {
            error: Some(e),
            ..Identity::default()
        },
    }
}
