//! `rowbranch explain --table T --id ID`: one row, end to end, from the sources of truth — the
//! row in its table, its branches, pull requests and workflow runs on the forge, its queue
//! message — and what `reconcile` and `redo` would do with it now, by their own rules
//! (reconcile's `classify`, redo's choice of branch). Reads only: no claim, no dispatch, no
//! `pgmq.read` (which would count a read); a source that cannot be reached is said, and the
//! rest is still told. [`read`] asks the sources, [`verdict`] applies the commands' rules,
//! [`report`] is what comes out, [`text`] prints it for a person.

mod read;
mod report;
mod text;
mod verdict;

use std::time::Duration;

use anyhow::{anyhow, Context};
use chrono::Utc;
use serde_json::Value;

use self::read::{read_forge, read_queue, read_row};
use self::report::{Identity, Report, RouteView, RowView, Unreachable, VERSION};
use self::verdict::Facts;
use super::Failure;
use crate::cli::ExplainArgs;
use crate::config::{process_env, Config, ForgeSettings, Intake, Route};
use crate::db::Row;
use crate::doctor::quietly;
use crate::forge::Forge;
use crate::identity::{BranchName, RowId};
use crate::pipeline::{CompiledRoute, Plan};
use crate::startup;

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
    let shared = startup::Shared::default();
    let forge = startup::forge(&config, &shared)
        .await
        .map_err(|e| Failure::Usage(e.into()))?;
    let report = quietly(explain(&config, &compiled, forge.as_ref(), &args.id)).await;
    if args.json {
        let json = serde_json::to_string_pretty(&report).context("the report to JSON")?;
        println!("{json}");
    } else {
        print!("{}", text::render(&report, Utc::now()));
    }
    if report.unreachable.is_empty() {
        return Ok(());
    }
    let mut sources: Vec<String> = Vec::new();
    for u in &report.unreachable {
        let source = format!("the {}", u.source);
        if !sources.contains(&source) {
            sources.push(source);
        }
    }
    Err(Failure::Runtime(anyhow!(
        "could not reach {}; what they could not tell is left out",
        sources.join(", ")
    )))
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
    let mut unreachable = Vec::new();
    let (rows, lookup) = read_row(config, route, id).await;
    if let Lookup::Unreachable(error) = &lookup {
        unreachable.push(Unreachable {
            source: "database",
            error: error.clone(),
        });
    }
    let derived = derive(compiled, &lookup, id);
    let since = match &lookup {
        Lookup::Found(row) => row.created_at - CLOCK_SLACK,
        _ => now - chrono::Duration::from_std(config.reconcile.window).unwrap_or_default(),
    };
    let forge_view = read_forge(
        config,
        route,
        forge,
        derived.id.as_ref(),
        since,
        &mut unreachable,
    )
    .await;
    let queue_view = match route.intake {
        Intake::Pgmq { .. } => {
            Some(read_queue(config, route, rows.as_ref(), &lookup, &mut unreachable).await)
        }
        Intake::Webhook => None,
    };
    let facts = Facts {
        config,
        compiled,
        lookup: &lookup,
        plan: derived.plan.as_ref(),
        forge: &forge_view,
        queue: queue_view.as_ref(),
        now,
    };
    Report {
        version: VERSION,
        id: id.to_owned(),
        route: route_view(route),
        reconcile: facts.reconcile(),
        redo: facts.redo(),
        row: row_view(&lookup),
        identity: derived.view,
        forge: forge_view,
        queue: queue_view,
        unreachable,
    }
}

/// What the table said of the row.
enum Lookup {
    /// `DATABASE_URL` is not set.
    NotRead,
    Unreachable(String),
    /// No such row; `typed` is the id as the id column types it, when it is one of its values.
    Missing {
        typed: Option<Value>,
        detail: String,
    },
    Found(Row),
}

fn row_view(lookup: &Lookup) -> RowView {
    let (status, detail) = match lookup {
        Lookup::NotRead => (
            "not_read",
            Some("DATABASE_URL is not set; what follows is what the id alone tells".to_owned()),
        ),
        Lookup::Unreachable(error) => ("unreachable", Some(error.clone())),
        Lookup::Missing { detail, .. } => ("missing", Some(detail.clone())),
        Lookup::Found(_) => ("found", None),
    };
    let row = match lookup {
        Lookup::Found(row) => Some(row),
        _ => None,
    };
    RowView {
        status,
        detail,
        created_at: row.map(|r| r.created_at),
        record: row.map(|r| r.record.clone()),
    }
}

fn route_view(route: &Route) -> RouteView {
    RouteView {
        table: route.table_name(),
        repo: route.repo.to_string(),
        intake: route.intake.as_str(),
        id_column: route.id_column.clone(),
        text_column: route.text_column.clone(),
        branch_prefix: route.branch_prefix.to_string(),
        event_type: route.event_type.to_string(),
    }
}

/// The row's identity: from the row itself when the table has it (the planner's branch, slug
/// and all), else from the id alone (no text, so no slug: the branches are found by the id).
struct Derived {
    id: Option<RowId>,
    plan: Option<Plan>,
    view: Identity,
}

fn derive(compiled: &CompiledRoute, lookup: &Lookup, id: &str) -> Derived {
    let failed = |error: String| Derived {
        id: None,
        plan: None,
        view: Identity {
            id: None,
            branch: None,
            derived_from: None,
            error: Some(error),
        },
    };
    let value = match lookup {
        Lookup::Found(row) => {
            return match compiled.plan_row(&row.record) {
                Ok(plan) => Derived {
                    id: Some(plan.id.clone()),
                    view: Identity {
                        id: Some(plan.id.to_string()),
                        branch: Some(plan.branch.to_string()),
                        derived_from: Some("row"),
                        error: None,
                    },
                    plan: Some(plan),
                },
                Err(e) => failed(e.to_string()),
            }
        }
        Lookup::Missing {
            typed: Some(typed), ..
        } => typed.clone(),
        _ => Value::String(id.to_owned()),
    };
    match RowId::parse(&value) {
        Ok(row_id) => Derived {
            view: Identity {
                id: Some(row_id.to_string()),
                branch: Some(
                    BranchName::new(&compiled.route.branch_prefix, &row_id, None).to_string(),
                ),
                derived_from: Some("id"),
                error: None,
            },
            id: Some(row_id),
            plan: None,
        },
        Err(e) => failed(e.to_string()),
    }
}
