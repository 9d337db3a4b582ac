//! The environment's part of the config (SPEC §2). Every variable the config takes is named
//! here and read once, into an [`Overlay`] that validation lays over the file: the secrets,
//! which never live in the file, and the values a platform sets (`PORT`, `GITHUB_API_URL`).
//!
//! With no config file, `ROWBRANCH_REPO` and its companions stand in for the file's single
//! `[[routes]]` table (SPEC §2 "One route from the environment"): [`RouteVariables::file`]
//! writes them into the file's shape, which is then validated as any file is.

use std::path::Path;

use super::file::{RawConfig, RawRoute};
use super::Invalid;
use crate::identity::{BranchPrefix, EventType, RepoName};

/// `HOST:PORT` to listen on; wins over `PORT` and the file's `listen`.
pub const LISTEN: &str = "ROWBRANCH_LISTEN";
/// A port to listen on, on every interface, as container platforms set it.
pub const PORT: &str = "PORT";
pub const GITHUB_APP_ID: &str = "GITHUB_APP_ID";
/// The App's private key, the PEM text; wins over `[github] private_key_path`.
pub const GITHUB_APP_PRIVATE_KEY: &str = "GITHUB_APP_PRIVATE_KEY";
pub const GITHUB_API_URL: &str = "GITHUB_API_URL";
/// The webhook secrets, separated by spaces; never read from the file.
pub const WEBHOOK_SECRET: &str = "ROWBRANCH_WEBHOOK_SECRET";
pub const STATUS_PASSWORD: &str = "ROWBRANCH_STATUS_PASSWORD";
/// Where `reconcile`, `redo`, the sweep and the queue read; environment only, as it holds a
/// password.
pub const DATABASE_URL: &str = "DATABASE_URL";

/// The whole config as TOML text, for platforms that take only environment variables and
/// secrets: used when there is no file at `--config`'s path (SPEC §2).
pub const CONFIG: &str = "ROWBRANCH_CONFIG";

/// The variable whose presence (with no config file) selects the route from the environment.
pub const REPO: &str = "ROWBRANCH_REPO";
pub const TABLE: &str = "ROWBRANCH_TABLE";
pub const SCHEMA: &str = "ROWBRANCH_SCHEMA";
pub const ID_COLUMN: &str = "ROWBRANCH_ID_COLUMN";
pub const TEXT_COLUMN: &str = "ROWBRANCH_TEXT_COLUMN";
pub const BRANCH_PREFIX: &str = "ROWBRANCH_BRANCH_PREFIX";
pub const EVENT_TYPE: &str = "ROWBRANCH_EVENT_TYPE";
pub const INTAKE: &str = "ROWBRANCH_INTAKE";
/// The `[pgmq]` `queue`; every other `[pgmq]` key keeps its default.
pub const PGMQ_QUEUE: &str = "ROWBRANCH_PGMQ_QUEUE";

/// The keys a file's route must name, which the route from the environment defaults instead:
/// a table, its branches and its dispatches all called after feedback.
const TABLE_DEFAULT: &str = "feedbacks";
const BRANCH_PREFIX_DEFAULT: &str = "feedback";
const EVENT_TYPE_DEFAULT: &str = "feedback";

/// The variables of the route from the environment, in the order messages list them.
pub const ROUTE_VARIABLES: [&str; 9] = [
    REPO,
    TABLE,
    SCHEMA,
    ID_COLUMN,
    TEXT_COLUMN,
    BRANCH_PREFIX,
    EVENT_TYPE,
    INTAKE,
    PGMQ_QUEUE,
];

/// Every variable the config reads: what `serve --help` lists.
pub const VARIABLES: [&str; 18] = [
    CONFIG,
    LISTEN,
    PORT,
    GITHUB_APP_ID,
    GITHUB_APP_PRIVATE_KEY,
    GITHUB_API_URL,
    WEBHOOK_SECRET,
    STATUS_PASSWORD,
    DATABASE_URL,
    REPO,
    TABLE,
    SCHEMA,
    ID_COLUMN,
    TEXT_COLUMN,
    BRANCH_PREFIX,
    EVENT_TYPE,
    INTAKE,
    PGMQ_QUEUE,
];

/// The file `rowbranch init` writes beside the config it writes, holding the webhook secrets
/// that its SQL files carry too, the signing key and the bearer secret
/// (`ROWBRANCH_WEBHOOK_SECRET="…"`, read with `set -a; . FILE`; systemd, Docker Compose and
/// `fly secrets import` take the double-quoted value too).
pub const ENV_FILE: &str = "rowbranch.env";

/// How to set the webhook secret when `rowbranch init` wrote one beside the config at
/// `config_path`: from that file, so that rowbranch keeps the secret the SQL files (the
/// trigger) already use. `None` when there is no such file, or no file at all (the route
/// from the environment, or `ROWBRANCH_CONFIG`'s text): then a new secret is the advice.
pub fn secret_from_init(config_path: &Path) -> Option<String> {
    if config_path == Path::new(SOURCE) || config_path == Path::new(CONFIG) {
        return None;
    }
    let dir = config_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file = dir.join(ENV_FILE);
    file.is_file().then(|| {
        let file = file.display();
        format!(
            "set {WEBHOOK_SECRET} from {file} (init wrote it and the SQL files use it): \
             `set -a; . {file}; set +a` in the shell that runs rowbranch, or its value in the \
             platform's secrets; a new secret would be out of step with the trigger"
        )
    })
}

/// What [`Config::source`](super::Config::source) says for the route from the environment.
pub const SOURCE: &str = "from the environment (ROWBRANCH_REPO)";

/// Whom a message about the route from the environment names, in place of a file.
pub(super) const SOURCE_NAME: &str = "the config from the environment";

/// What the environment says, each variable read once. It holds secrets, so it has no `Debug`.
pub(super) struct Overlay<'a> {
    /// `ROWBRANCH_CONFIG`: a config's whole text, in place of a file.
    pub config: Option<String>,
    pub listen: Option<String>,
    pub port: Option<String>,
    pub github_app_id: Option<String>,
    pub github_app_private_key: Option<String>,
    pub github_api_url: Option<String>,
    pub webhook_secret: Option<String>,
    pub status_password: Option<String>,
    pub database_url: Option<String>,
    pub route: RouteVariables,
    /// Reads the variable the file names (`[github] token_env`), which is known only once the
    /// file is read.
    pub named: super::Env<'a>,
}

/// The route from the environment, as set: `None` for each variable that is not.
pub(super) struct RouteVariables {
    repo: Option<String>,
    table: Option<String>,
    schema: Option<String>,
    id_column: Option<String>,
    text_column: Option<String>,
    branch_prefix: Option<String>,
    event_type: Option<String>,
    intake: Option<String>,
    pgmq_queue: Option<String>,
}

impl<'a> Overlay<'a> {
    pub fn read(env: super::Env<'a>) -> Overlay<'a> {
        Overlay {
            config: env(CONFIG),
            listen: env(LISTEN),
            port: env(PORT),
            github_app_id: env(GITHUB_APP_ID),
            github_app_private_key: env(GITHUB_APP_PRIVATE_KEY),
            github_api_url: env(GITHUB_API_URL),
            webhook_secret: env(WEBHOOK_SECRET),
            status_password: env(STATUS_PASSWORD),
            database_url: env(DATABASE_URL),
            route: RouteVariables {
                repo: env(REPO),
                table: env(TABLE),
                schema: env(SCHEMA),
                id_column: env(ID_COLUMN),
                text_column: env(TEXT_COLUMN),
                branch_prefix: env(BRANCH_PREFIX),
                event_type: env(EVENT_TYPE),
                intake: env(INTAKE),
                pgmq_queue: env(PGMQ_QUEUE),
            },
            named: env,
        }
    }
}

impl RouteVariables {
    /// The variables that are set, in the order of [`ROUTE_VARIABLES`].
    pub fn set(&self) -> Vec<&'static str> {
        let values = [
            &self.repo,
            &self.table,
            &self.schema,
            &self.id_column,
            &self.text_column,
            &self.branch_prefix,
            &self.event_type,
            &self.intake,
            &self.pgmq_queue,
        ];
        ROUTE_VARIABLES
            .into_iter()
            .zip(values)
            .filter_map(|(name, value)| value.as_ref().map(|_| name))
            .collect()
    }

    /// The file these variables stand in for: one `[[routes]]` table and `[pgmq] queue`, every
    /// other key at its default. A bad value is named here by its variable, before the route's
    /// own validation would name it by the file's key.
    pub fn file(&self, overlay: &Overlay) -> Result<RawConfig, Invalid> {
        let or = |value: &Option<String>, default: &str| value.clone().unwrap_or(default.into());
        let repo = self
            .repo
            .clone()
            .ok_or_else(|| invalid!("{REPO} is not set"))?;
        let branch_prefix = or(&self.branch_prefix, BRANCH_PREFIX_DEFAULT);
        let event_type = or(&self.event_type, EVENT_TYPE_DEFAULT);
        RepoName::parse(&repo).map_err(|e| invalid!("{REPO}=`{repo}`: {e}"))?;
        BranchPrefix::parse(&branch_prefix)
            .map_err(|e| invalid!("{BRANCH_PREFIX}=`{branch_prefix}`: {e}"))?;
        EventType::parse(&event_type).map_err(|e| invalid!("{EVENT_TYPE}=`{event_type}`: {e}"))?;
        for (name, value) in [
            (GITHUB_APP_ID, &overlay.github_app_id),
            (GITHUB_APP_PRIVATE_KEY, &overlay.github_app_private_key),
        ] {
            if value.is_none() {
                return Err(invalid!(
                    "{name} is not set: a route from the environment goes to GitHub as a GitHub \
                     App, whose id ({GITHUB_APP_ID}, on the App's settings page) and private key \
                     ({GITHUB_APP_PRIVATE_KEY}, the PEM text) it needs"
                ));
            }
        }
        // The rest keep the file's defaults unless set.
        let defaults = RawRoute::default();
        let route = RawRoute {
            table: Some(or(&self.table, TABLE_DEFAULT)),
            schema: or(&self.schema, &defaults.schema),
            repo: Some(repo),
            id_column: or(&self.id_column, &defaults.id_column),
            text_column: or(&self.text_column, &defaults.text_column),
            branch_prefix: Some(branch_prefix),
            event_type: Some(event_type),
            intake: or(&self.intake, &defaults.intake),
            ..defaults
        };
        let mut file = RawConfig::default();
        if let Some(queue) = &self.pgmq_queue {
            file.pgmq.queue = queue.clone();
        }
        file.routes.push(route);
        Ok(file)
    }
}

/// The refusal for a config file while route variables are set too: one of the two has to
/// go, and the message says which is which.
pub(super) fn conflict(set: &[&str]) -> Invalid {
    let names = set.join(", ");
    invalid!(
        "{names} configure a route from the environment, and this file configures the routes \
         too: to use the file, unset {names}; to use the environment, remove the file (or move \
         it away from where --config points)"
    )
}

/// The refusal for `ROWBRANCH_CONFIG` while a file is at `--config`'s path too.
pub(super) fn config_and_file() -> Invalid {
    invalid!(
        "{CONFIG} holds a config, and this file is one too: rowbranch takes one config. To use \
         the file, unset {CONFIG}; to use the variable, remove the file (or move it away from \
         where --config points)"
    )
}

/// The refusal for `ROWBRANCH_CONFIG` together with the route variables.
pub(super) fn config_and_route(set: &[&str]) -> Invalid {
    let names = set.join(", ");
    invalid!(
        "{CONFIG} holds a config, and {names} configure a route from the environment too: \
         rowbranch takes one config. Unset {names}, and put the route in {CONFIG}'s [[routes]]"
    )
}

/// The refusal for route variables without `ROWBRANCH_REPO` and without a file.
pub(super) fn repo_missing(set: &[&str]) -> Invalid {
    invalid!(
        "there is no config file here, and {} is set but {REPO} is not: set {REPO}=owner/name to \
         configure the route from the environment, or write the config file",
        set.join(", ")
    )
}

#[cfg(test)]
mod tests;
