//! Asking the sources: the row from its table, the forge's reads of the row, and its queue
//! messages. Each failure is recorded as a source that could not be reached, and the rest is
//! still read.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::report::{BaseView, BranchView, ForgeView, Part, QueueView, Unreachable};
use super::Lookup;
use crate::config::{Config, ForgeSettings, Route};
use crate::db::queue;
use crate::db::{Database, Visibility};
use crate::forge::{Forge, ForgeError, Listing};
use crate::identity::{BranchName, RowId};
use crate::reconcile;

/// How long the database may take to accept the connection: a host that drops packets would
/// otherwise hold the terminal for the system's TCP timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Reads the row as `redo` does (the id bound in the id column's own type), and the id as the
/// column types it, for naming a row that is not there. The connection is kept for the queue.
pub(super) async fn read_row(
    config: &Config,
    route: &Route,
    id: &str,
) -> (Option<Database>, Lookup) {
    let Some(url) = &config.database_url else {
        return (None, Lookup::NotRead);
    };
    let rows = match tokio::time::timeout(CONNECT_TIMEOUT, Database::connect(url.expose())).await {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => {
            let error = format!("connecting to DATABASE_URL: {e:#}");
            return (None, Lookup::Unreachable(error));
        }
        Err(_) => {
            let error = format!(
                "connecting to DATABASE_URL: no answer within {} s",
                CONNECT_TIMEOUT.as_secs()
            );
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
            Ok(None) => missing(&rows, route, typed, id).await,
            Err(e) => Lookup::Unreachable(format!("{e:#}")),
        },
    };
    (Some(rows), lookup)
}

/// No row with the id, as far as DATABASE_URL's role can see: row level security that hides
/// every row from it leaves the table unread (whether the row is there cannot be told), and one
/// that hides some is said beside "no row".
async fn missing(rows: &Database, route: &Route, typed: serde_json::Value, id: &str) -> Lookup {
    let table = route.table_name();
    let detail = format!("{table} has no row with {} = {id}", route.id_column);
    match rows.visibility(route).await {
        Ok(Visibility::Blind(blind)) => Lookup::Unreachable(blind.to_string()),
        Ok(Visibility::Filtered(filtered)) => Lookup::Missing {
            typed: Some(typed),
            detail: format!("{detail} that DATABASE_URL's role can see: {filtered}"),
        },
        _ => Lookup::Missing {
            typed: Some(typed),
            detail,
        },
    }
}

/// The forge's reads, at once: the row's branches, the default branch, its pull requests and
/// its workflow runs; then a compare of each branch with the default branch.
pub(super) async fn read_forge(
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
                let ahead_by = match (
                    &base,
                    BranchName::existing(prefix, id, branch.name.as_str()),
                ) {
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
                    name: branch.name.to_string(),
                    sha: branch.sha.to_string(),
                    ahead_by,
                });
            }
        }
        Err(e) => failed(&mut view, labelled("listing the row's branches", &e)),
    }
    view.base = base.map(|b| BaseView {
        branch: b.branch.to_string(),
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
pub(super) async fn read_queue(
    config: &Config,
    route: &Route,
    rows: Option<&Database>,
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
        &config.pgmq.queue,
        &config.pgmq.dead_letter,
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
            let error = format!("reading the queue {}: {}", config.pgmq.queue, e.describe());
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
