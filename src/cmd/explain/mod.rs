//! `rowbranch explain --table T --id ID`: one row, end to end, from the sources of truth — the
//! row in its table, its branches, pull requests and workflow runs on the forge, its queue
//! message — and what `reconcile` and `redo` would do with it now, by their own rules
//! (reconcile's `classify`, redo's choice of branch). Reads only: no claim, no dispatch, no
//! `pgmq.read` (which would count a read); a source that cannot be reached is said, and the
//! rest is still told.

mod report;
mod text;

use std::time::Duration;

use anyhow::{anyhow, Context};
use chrono::{DateTime, Utc};
use serde_json::Value;

use self::report::{
    BaseView, BranchView, ForgeView, Identity, Part, QueueView, Report, RouteView, RowView,
    Unreachable, Verdict, VERSION,
};
use super::redo::free_branch;
use super::Failure;
use crate::cli::ExplainArgs;
use crate::config::{process_env, Config, ForgeSettings, Intake, Route};
use crate::doctor::quietly;
use crate::forge::{Branch, Forge, ForgeError, Listing, Sha};
use crate::identity::{BranchName, RowId};
use crate::pgmq::queue;
use crate::pipeline::{CompiledRoute, Plan};
use crate::reconcile::{self, classify, Known};
use crate::rows::{Row, Rows};
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
    let routes = startup::routes(&config).map_err(Failure::Usage)?;
    let compiled = routes.for_table(&args.table).cloned().ok_or_else(|| {
        let tables: Vec<String> = config.routes.iter().map(|r| r.table_name()).collect();
        Failure::Usage(anyhow!(
            "no route for table {}: the routes are {}",
            args.table,
            tables.join(", ")
        ))
    })?;
    let shared = startup::Shared::default();
    let forge = startup::forge(&config, &shared)
        .await
        .map_err(Failure::Usage)?;
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
        Intake::Pgmq => {
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

/// Reads the row as `redo` does (the id bound in the id column's own type), and the id as the
/// column types it, for naming a row that is not there. The connection is kept for the queue.
async fn read_row(config: &Config, route: &Route, id: &str) -> (Option<Rows>, Lookup) {
    let Some(url) = &config.database_url else {
        return (None, Lookup::NotRead);
    };
    let rows = match Rows::connect(url.expose()).await {
        Ok(rows) => rows,
        Err(e) => {
            let error = format!("connecting to DATABASE_URL: {e:#}");
            return (None, Lookup::Unreachable(error));
        }
    };
    let table = route.table_name();
    let lookup = match rows.typed_id(route, id).await {
        Err(e) => Lookup::Unreachable(format!("{e:#}")),
        Ok(None) => Lookup::Missing {
            typed: None,
            detail: format!(
                "{id:?} is no value of the type of {table}'s `{}` column, so no row has it",
                route.id_column
            ),
        },
        Ok(Some(typed)) => match rows.by_id(route, id).await {
            Ok(Some(row)) => Lookup::Found(row),
            Ok(None) => Lookup::Missing {
                typed: Some(typed),
                detail: format!("{table} has no row with {} = {id}", route.id_column),
            },
            Err(e) => Lookup::Unreachable(format!("{e:#}")),
        },
    };
    (Some(rows), lookup)
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

/// The forge's reads, at once: the row's branches, the default branch, its pull requests and
/// its workflow runs; then a compare of each branch with the default branch.
async fn read_forge(
    config: &Config,
    route: &Route,
    forge: &dyn Forge,
    id: Option<&RowId>,
    since: DateTime<Utc>,
    unreachable: &mut Vec<Unreachable>,
) -> ForgeView {
    let kind = match config.forge {
        ForgeSettings::Github(_) => "github",
        ForgeSettings::Local(_) => "local",
    };
    let Some(id) = id else {
        let why = "no branch can be named for this id";
        return ForgeView {
            kind,
            status: "skipped",
            detail: Some(why.to_owned()),
            base: None,
            branches: Vec::new(),
            pull_requests: Part::skipped(why),
            runs: Part::skipped(why),
        };
    };
    let (repo, prefix) = (&route.repo, &route.branch_prefix);
    let (branches, base, pulls, runs) = tokio::join!(
        forge.row_branch_heads(repo, prefix, id),
        forge.base(repo),
        forge.row_pull_requests(repo, prefix, id, since),
        forge.row_workflow_runs(repo, prefix, id, since),
    );
    let mut view = ForgeView {
        kind,
        status: "ok",
        detail: None,
        base: None,
        branches: Vec::new(),
        pull_requests: part(pulls, since, "pull requests", unreachable),
        runs: part(runs, since, "workflow runs", unreachable),
    };
    let mut failed = |view: &mut ForgeView, error: String| {
        view.status = "unreachable";
        view.detail.get_or_insert_with(|| error.clone());
        unreachable.push(Unreachable {
            source: "forge",
            error,
        });
    };
    let base = match base {
        Ok(base) => Some(base),
        Err(e) => {
            failed(&mut view, labelled("reading the default branch", &e));
            None
        }
    };
    match branches {
        Ok(branches) => {
            for branch in branches {
                let ahead_by = match (&base, BranchName::existing(prefix, id, &branch.name)) {
                    (Some(base), Some(name)) => match forge.ahead_by(repo, base, &name).await {
                        Ok(ahead) => Some(ahead),
                        Err(e) => {
                            let what = format!("comparing {} with {}", branch.name, base.branch);
                            failed(&mut view, labelled(&what, &e));
                            None
                        }
                    },
                    _ => None,
                };
                view.branches.push(BranchView {
                    name: branch.name,
                    sha: branch.sha.to_string(),
                    ahead_by,
                });
            }
        }
        Err(e) => failed(&mut view, labelled("listing the row's branches", &e)),
    }
    view.base = base.map(|b| BaseView {
        branch: b.branch,
        sha: b.sha.to_string(),
    });
    view
}

/// A listing as the report shows it; a failure counts the forge as unreachable.
fn part<T>(
    listed: Result<Listing<T>, ForgeError>,
    since: DateTime<Utc>,
    what: &str,
    unreachable: &mut Vec<Unreachable>,
) -> Part<T> {
    let (status, detail, items) = match listed {
        Ok(Listing::Found(items)) => ("ok", None, items),
        Ok(Listing::NotKept) => (
            "not_kept",
            Some(format!("the local forge has no {what}")),
            Vec::new(),
        ),
        Ok(Listing::NotPermitted { needs }) => (
            "not_permitted",
            Some(format!(
                "not permitted (the App needs {}; approve it in the installation's settings)",
                permission_words(&needs)
            )),
            Vec::new(),
        ),
        Err(e) => {
            let error = labelled(&format!("listing {what}"), &e);
            unreachable.push(Unreachable {
                source: "forge",
                error: error.clone(),
            });
            ("unreachable", Some(error), Vec::new())
        }
    };
    Part {
        status,
        detail,
        since: Some(since),
        items,
    }
}

/// A forge error with what was being done, unless it says so already (a retried GitHub read
/// does).
fn labelled(what: &str, e: &ForgeError) -> String {
    let message = e.to_string();
    if message.starts_with(what) {
        message
    } else {
        format!("{what}: {message}")
    }
}

/// GitHub's `X-Accepted-GitHub-Permissions` (`actions=read`; alternatives after `;`) as its
/// settings page names the first set: `Actions: read`.
fn permission_words(needs: &str) -> String {
    let first = needs.split(';').next().unwrap_or(needs);
    first
        .split(',')
        .filter_map(|p| {
            let (name, level) = p.trim().split_once('=')?;
            let name = name.replace('_', " ");
            let mut chars = name.chars();
            let name = match chars.next() {
                Some(c) => c.to_uppercase().chain(chars).collect::<String>(),
                None => return None,
            };
            Some(format!("{name}: {level}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The row's messages in the queue, its archive and the dead letters, by plain SELECTs.
async fn read_queue(
    config: &Config,
    route: &Route,
    rows: Option<&Rows>,
    lookup: &Lookup,
    unreachable: &mut Vec<Unreachable>,
) -> QueueView {
    let mut view = QueueView {
        status: "skipped",
        detail: None,
        queue: config.pgmq.queue.to_string(),
        dead_letter: config.pgmq.dead_letter.to_string(),
        messages: Vec::new(),
    };
    let id_value = match lookup {
        Lookup::Found(row) => row.record.get(&route.id_column).cloned(),
        Lookup::Missing { typed, .. } => typed.clone(),
        Lookup::NotRead | Lookup::Unreachable(_) => None,
    };
    let (Some(rows), Some(id)) = (rows, id_value.as_ref().and_then(reconcile::id_text)) else {
        view.detail = Some(match lookup {
            Lookup::NotRead => "DATABASE_URL is not set".to_owned(),
            Lookup::Unreachable(_) => "the database could not be read".to_owned(),
            _ => "the id is no value the queue's messages could hold".to_owned(),
        });
        return view;
    };
    let read = queue::row_messages(
        rows.client(),
        config.pgmq.queue.as_str(),
        config.pgmq.dead_letter.as_str(),
        &route.schema,
        &route.table,
        &route.id_column,
        &id,
    )
    .await;
    match read {
        Ok(messages) => {
            view.status = "ok";
            view.messages = messages;
        }
        Err(e) => {
            let error = format!(
                "reading the queue {}: {}",
                config.pgmq.queue,
                crate::rows::describe(&e)
            );
            view.status = "unreachable";
            view.detail = Some(error.clone());
            unreachable.push(Unreachable {
                source: "queue",
                error,
            });
        }
    }
    view
}

/// What the verdicts are made from.
struct Facts<'a> {
    config: &'a Config,
    compiled: &'a CompiledRoute,
    lookup: &'a Lookup,
    plan: Option<&'a Plan>,
    forge: &'a ForgeView,
    queue: Option<&'a QueueView>,
    now: DateTime<Utc>,
}

impl Facts<'_> {
    fn route(&self) -> &Route {
        &self.compiled.route
    }

    /// The row, or the verdict for want of it.
    fn row(&self, command: &str) -> Result<&Row, Verdict> {
        match self.lookup {
            Lookup::Found(row) => Ok(row),
            Lookup::NotRead => Err(Verdict::new(
                "unknown",
                "unknown: it reads the row from DATABASE_URL, which is not set",
            )),
            Lookup::Unreachable(_) => Err(Verdict::new(
                "unknown",
                "unknown: the database could not be read",
            )),
            Lookup::Missing { .. } if command == "redo" => Err(Verdict::new(
                "cannot",
                "cannot: it reads the row from the table, which has no such row",
            )),
            Lookup::Missing { .. } => Err(Verdict::new(
                "no_row",
                "nothing: the sweep reads the table's rows, and it has no such row",
            )),
        }
    }

    /// What the forge knows, or the verdict for want of it.
    fn forge_read(&self) -> Result<(), Verdict> {
        if self.forge.status != "ok" {
            return Err(Verdict::new(
                "unknown",
                "unknown: the forge could not be read",
            ));
        }
        Ok(())
    }

    /// `redo`: its branch if free, else the next free `{branch}-redo-N`.
    fn redo(&self) -> Verdict {
        if let Err(verdict) = self.row("redo") {
            return verdict;
        }
        let Some(plan) = self.plan else {
            return Verdict::new("cannot", "cannot: the row's id is not usable");
        };
        if let Err(verdict) = self.forge_read() {
            return verdict;
        }
        let prefix = &self.route().branch_prefix;
        let taken: Vec<BranchName> = self
            .forge
            .branches
            .iter()
            .filter_map(|b| BranchName::existing(prefix, &plan.id, &b.name))
            .collect();
        let branch = free_branch(&plan.branch, &taken);
        let why = if branch == plan.branch {
            String::new()
        } else {
            format!(" ({} is taken)", plan.branch)
        };
        Verdict::new(
            "would_dispatch",
            format!(
                "claim {branch} and dispatch `{}`{why}; redo asks first unless given --yes",
                self.route().event_type
            ),
        )
        .on(branch.to_string())
    }

    /// `reconcile`, by the sweep's own rules: the queue first for a queue route, then
    /// `classify` on the row's branches and pull requests, and a compare for a suspect.
    fn reconcile(&self) -> Verdict {
        let row = match self.row("reconcile") {
            Ok(row) => row,
            Err(verdict) => return verdict,
        };
        if let Err(verdict) = self.forge_read() {
            return verdict;
        }
        let pulls = &self.forge.pull_requests;
        if !matches!(pulls.status, "ok" | "not_kept") {
            return Verdict::new(
                "unknown",
                format!(
                    "unknown: the sweep lists pull requests, and here they are {}",
                    pulls.detail.as_deref().unwrap_or("not read")
                ),
            );
        }
        let window = self.config.reconcile.window;
        let in_window =
            row.created_at >= self.now - chrono::Duration::from_std(window).unwrap_or_default();
        let mut verdict = self.sweep(row.clone());
        verdict.in_window = Some(in_window);
        if !in_window {
            let hours = (self.now - row.created_at).num_hours() + 1;
            verdict.says += &format!(
                "; but the row is older than reconcile_window ({}), so a sweep reads it only with `reconcile --since {hours}h`",
                duration(window)
            );
        }
        verdict
    }

    fn sweep(&self, mut row: Row) -> Verdict {
        let route = self.route();
        let mut note = String::new();
        if let Some(queue) = self.queue {
            if queue.status != "ok" {
                return Verdict::new("unknown", "unknown: the queue could not be read");
            }
            if let Some(held) = queue.messages.iter().find(|m| m.place == "queue") {
                return Verdict::new(
                    "in_queue",
                    format!(
                        "nothing: its message {} is still in the queue, which is the consumer's",
                        held.msg_id
                    ),
                );
            }
            let archived = queue
                .messages
                .iter()
                .filter(|m| m.place == "archive")
                .filter_map(|m| m.archived_at)
                .max();
            match archived {
                // Its work started when its message was archived, not when it was created.
                Some(at) => row.created_at = row.created_at.max(at),
                None if row.created_at >= self.now - reconcile::UNSEEN_MARGIN => {
                    return Verdict::new(
                        "in_queue",
                        "nothing yet: the row is less than a minute old and its message may not be committed yet; the next sweep decides",
                    )
                }
                None => {
                    note = "; it has no message in the queue or its archive (is the queue's trigger installed and enabled?)".to_owned();
                }
            }
        }
        let branches: Vec<Branch> = self
            .forge
            .branches
            .iter()
            .map(|b| Branch {
                name: b.name.clone(),
                sha: Sha::new(b.sha.clone()),
            })
            .collect();
        let heads = self
            .forge
            .pull_requests
            .items
            .iter()
            .map(|p| p.head.clone())
            .collect();
        let known = Known::new(&route.branch_prefix, branches, heads);
        let stale_after = self.config.reconcile.stale_claim_after;
        let stale_before = self.now - chrono::Duration::from_std(stale_after).unwrap_or_default();
        let base = self
            .forge
            .base
            .as_ref()
            .map_or("its base", |b| b.branch.as_str());
        let mut verdict = match classify(&known, self.compiled, row.clone(), stale_before) {
            reconcile::Verdict::Handled => Verdict::new("handled", self.handled(&row, stale_before, stale_after, base)),
            reconcile::Verdict::MergedBefore => Verdict::new(
                "merged_before",
                "nothing: a pull request came from a branch of the row, which is gone: merged or closed work is not redone",
            ),
            reconcile::Verdict::Suspect { plan, claimed_at } => {
                let ahead = self
                    .forge
                    .branches
                    .iter()
                    .find(|b| b.name == plan.branch.as_str())
                    .and_then(|b| b.ahead_by);
                match ahead {
                    Some(0) => Verdict::new(
                        "dead_claim",
                        format!(
                            "dispatch `{}` again on {}: a dead claim (at its base {}, no pull request, the row older than stale_claim_after, {})",
                            route.event_type,
                            plan.branch,
                            claimed_at.short(),
                            duration(stale_after)
                        ),
                    )
                    .on(plan.branch.to_string()),
                    Some(n) => Verdict::new(
                        "handled",
                        format!("nothing: its branch is {n} commit{} ahead of {base}", plural(n)),
                    ),
                    None => Verdict::new(
                        "unknown",
                        "unknown: the compare with the default branch failed",
                    ),
                }
            }
            reconcile::Verdict::Run(plan) => Verdict::new(
                "would_dispatch",
                format!(
                    "claim {} and dispatch `{}`: the row has neither a branch nor a pull request",
                    plan.branch, route.event_type
                ),
            )
            .on(plan.branch.to_string()),
            reconcile::Verdict::Failed { error, .. } => {
                Verdict::new("failed", format!("the row fails: {error}"))
            }
        };
        if let Some(dead) = self
            .queue
            .and_then(|q| q.messages.iter().find(|m| m.place == "dead_letter"))
        {
            note += &format!(
                "; its message is a dead letter ({}): `rowbranch queue redrive --id {}` runs it through the consumer instead",
                dead.reason.as_deref().unwrap_or("no reason given"),
                dead.msg_id
            );
        }
        verdict.says += &note;
        verdict
    }

    /// Why `classify` finds the row handled, in words.
    fn handled(
        &self,
        row: &Row,
        stale_before: DateTime<Utc>,
        stale_after: Duration,
        base: &str,
    ) -> String {
        let branches = &self.forge.branches;
        if !self.forge.pull_requests.items.is_empty() {
            return "nothing: a pull request came from a branch of the row".to_owned();
        }
        match branches.as_slice() {
            [only] if row.created_at >= stale_before && only.ahead_by == Some(0) => format!(
                "nothing yet: its branch is at its base, but the row is younger than stale_claim_after ({}); a later sweep dispatches again if it stays there",
                duration(stale_after)
            ),
            [only] => match only.ahead_by {
                Some(n) => format!("nothing: its branch is {n} commit{} ahead of {base}", plural(n)),
                None => "nothing: it has a branch".to_owned(),
            },
            many => format!(
                "nothing: the row has {} branches (redone on purpose), none taken for a lost claim",
                many.len()
            ),
        }
    }
}

/// A duration as the config writes one: `48h`, `90m`, `20s`.
fn duration(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::permission_words;

    #[test]
    fn a_permission_reads_as_the_settings_page_names_it() {
        assert_eq!(permission_words("actions=read"), "Actions: read");
        assert_eq!(
            permission_words("pull_requests=read,contents=read; issues=read"),
            "Pull requests: read, Contents: read"
        );
    }
}
