//! Asking the sources: the row from its table, the forge's reads of the row, and its queue
//! messages. Each failure is recorded as a source that could not be reached, and the rest is
//! still read.

use std::time::Duration;

use anyhow::anyhow;
use chrono::{DateTime, Utc};

use super::report::{BranchView, ForgeSection, Part, QueueSection, RowSection};
use crate::config::{Config, Route};
use crate::db::{queue, Database, Visibility};
use crate::forge::github::first_set;
use crate::forge::{Forge, ForgeError, Listing};
use crate::identity::RowId;
use crate::pipeline::id_text;

/// How long the database may take to accept the connection: a host that drops packets would
/// otherwise hold the terminal for the system's TCP timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Reads the row as `redo` does (the id bound in the id column's own type), and the id as the
/// column types it, for naming a row that is not there. The connection is kept for the queue.
pub(super) async fn row(
    config: &Config,
    route: &Route,
    id: &str,
) -> (Option<Database>, RowSection) {
    let Some(url) = &config.database_url else {
        let why = "DATABASE_URL is not set; what follows is what the id alone tells";
        return (None, RowSection::not("not_read", why.to_owned()));
    };
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, Database::connect(url.expose()));
    let connected = (connect.await)
        .map_err(|_| anyhow!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))
        .and_then(|rows| Ok(rows?));
    let rows = match connected {
        Ok(rows) => rows,
        Err(e) => {
            let error = format!("connecting to DATABASE_URL: {e:#}");
            return (None, RowSection::not("unreachable", error));
        }
    };
    // A route that does not fit its table (a column it names is not there) is read fine and
    // answers plainly: the database is reached, the config is what is wrong.
    let section = find(&rows, route, id).await.unwrap_or_else(|e| {
        let status = match e.downcast_ref() {
            Some(crate::db::Error::Table(_)) => "misfit",
            _ => "unreachable",
        };
        RowSection::not(status, format!("{e:#}"))
    });
    (Some(rows), section)
}

/// The row, or why it is missing; an error when whether it is there cannot be told.
async fn find(rows: &Database, route: &Route, id: &str) -> anyhow::Result<RowSection> {
    let (table, column) = (route.table_name(), &route.id_column);
    let Some(typed) = rows.typed_id(route, id).await? else {
        let why = format!(
            "{id:?} is no value of the type of {table}'s `{column}` column, so no row has it"
        );
        return Ok(RowSection::not("missing", why));
    };
    if let Some(row) = rows.by_id(route, id).await? {
        return Ok(RowSection {
            status: "found",
            created_at: Some(row.created_at),
            record: Some(row.record),
            ..RowSection::default()
        });
    }
    // No row with the id, as far as DATABASE_URL's role can see: row level security that
    // hides every row from it leaves the table unread (whether the row is there cannot be
    // told), and one that hides some is said beside "no row".
    let detail = format!("{table} has no row with {column} = {id}");
    let detail = match rows.visibility(route).await {
        Ok(Visibility::Blind(blind)) => return Err(anyhow!("{blind}")),
        Ok(Visibility::Filtered(filtered)) => {
            format!("{detail} that DATABASE_URL's role can see: {filtered}")
        }
        _ => detail,
    };
    Ok(RowSection {
        typed_id: Some(typed),
        ..RowSection::not("missing", detail)
    })
}

/// The forge's reads, at once: the row's branches, the default branch, its pull requests and
/// its workflow runs; then a compare of each branch with the default branch.
pub(super) async fn forge(
    config: &Config,
    route: &Route,
    forge: &dyn Forge,
    id: Option<&RowId>,
    since: DateTime<Utc>,
) -> ForgeSection {
    let kind = config.forge.github().map_or("local", |_| "github");
    let why = "no branch can be named for this id";
    let mut section = ForgeSection {
        kind,
        status: "skipped",
        detail: Some(why.to_owned()),
        base: None,
        branches: Vec::new(),
        pull_requests: Part::skipped(why),
        runs: Part::skipped(why),
        errors: Vec::new(),
    };
    let Some(id) = id else {
        return section;
    };
    let (repo, prefix) = (&route.repo, &route.branch_prefix);
    let (branches, base, pulls, runs) = tokio::join!(
        forge.row_branch_heads(repo, prefix, id),
        forge.base(repo),
        forge.row_pull_requests(repo, prefix, id, since),
        forge.row_workflow_runs(repo, prefix, id, since),
    );
    let errors = &mut section.errors;
    (section.status, section.detail) = ("ok", None);
    section.pull_requests = part(pulls, since, "pull requests");
    section.runs = part(runs, since, "workflow runs");
    let base = base
        .map_err(|e| errors.push(labelled("reading the default branch", &e)))
        .ok();
    let branches = (branches.map_err(|e| errors.push(labelled("listing the row's branches", &e))))
        .unwrap_or_default();
    for branch in branches {
        let ahead_by = match &base {
            Some(base) => (forge.ahead_by(repo, base, &branch.name).await)
                .map_err(|e| {
                    let what = format!("comparing {} with {}", branch.name, base.branch);
                    errors.push(labelled(&what, &e));
                })
                .ok(),
            None => None,
        };
        section.branches.push(BranchView { branch, ahead_by });
    }
    section.base = base;
    if let Some(first) = section.errors.first() {
        section.status = "unreachable";
        section.detail = Some(first.clone());
    }
    section
}

/// A listing as the report shows it; a failure counts the forge as unreachable.
fn part<T>(listed: Result<Listing<T>, ForgeError>, since: DateTime<Utc>, what: &str) -> Part<T> {
    let (status, detail, items) = match listed {
        Ok(Listing::Found(items)) => ("ok", None, items),
        Ok(Listing::NotKept) => (
            "not_kept",
            Some(format!("the local forge has no {what}")),
            vec![],
        ),
        Ok(Listing::NotPermitted { needs }) => {
            let detail = format!(
                "not permitted (the App needs {}; approve it in the installation's settings)",
                permission_words(&needs)
            );
            ("not_permitted", Some(detail), vec![])
        }
        Err(e) => {
            let error = labelled(&format!("listing {what}"), &e);
            ("unreachable", Some(error), vec![])
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
    let words: Vec<String> = first_set(needs)
        .filter_map(|(name, level)| {
            let mut name = name.replace('_', " ");
            name.get_mut(..1)?.make_ascii_uppercase();
            Some(format!("{name}: {level}"))
        })
        .collect();
    words.join(", ")
}

/// The row's messages in the queue, its archive and the dead letters, by plain SELECTs.
pub(super) async fn queue(
    config: &Config,
    route: &Route,
    rows: Option<&Database>,
    row: &RowSection,
) -> QueueSection {
    let pgmq = &config.pgmq;
    let mut section = QueueSection {
        status: "skipped",
        detail: None,
        queue: pgmq.queue.to_string(),
        dead_letter: pgmq.dead_letter.to_string(),
        messages: Vec::new(),
    };
    let id_value = match &row.record {
        Some(record) => record.get(&route.id_column),
        None => row.typed_id.as_ref(),
    };
    let (Some(rows), Some(id)) = (rows, id_value.and_then(id_text)) else {
        section.detail = Some(match row.status {
            "not_read" => "DATABASE_URL is not set".to_owned(),
            "unreachable" => "the database could not be read".to_owned(),
            _ => "the id is no value the queue's messages could hold".to_owned(),
        });
        return section;
    };
    let read = queue::row_messages(rows.client(), pgmq, route, &id);
    (section.status, section.detail, section.messages) = match read.await {
        Ok(messages) => ("ok", None, messages),
        Err(e) => {
            let error = format!("reading the queue {}: {e}", pgmq.queue);
            ("unreachable", Some(error), Vec::new())
        }
    };
    section
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
