//! The environment's part of the config (SPEC §2). Every variable the config takes is named
//! here and read once, into an [`Overlay`] that validation lays over the file: the secrets,
//! which never live in the file, and the values a platform sets (`PORT`, `GITHUB_API_URL`).
//!
//! With no config file, `ROWBRANCH_REPO` and its companions stand in for the file's single
//! `[[routes]]` table (SPEC §2 "One route from the environment"): [`Overlay::file`] writes them
//! into the file's shape, which is then validated as any file is.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use super::file::RawConfig;
use super::{ConfigError, ListenOrigin};

/// `HOST:PORT` to listen on; wins over `PORT` and the file's `listen`.
pub const LISTEN: &str = "ROWBRANCH_LISTEN";
/// A port to listen on, on every interface, as container platforms set it.
pub const PORT: &str = "PORT";
pub const GITHUB_APP_ID: &str = "GITHUB_APP_ID";
/// The App's private key, the PEM text; wins over `[github] private_key_path`.
pub const GITHUB_APP_PRIVATE_KEY: &str = "GITHUB_APP_PRIVATE_KEY";
pub const GITHUB_API_URL: &str = "GITHUB_API_URL";
/// The App's webhook secret, which GitHub signs the App's events with (`POST /github`); never
/// read from the file.
pub const GITHUB_WEBHOOK_SECRET: &str = "GITHUB_WEBHOOK_SECRET";
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

/// The variables of the route from the environment, in the order messages list them, each with
/// the key of the file it stands for, as `(variable, table, key)`: the route's own, and the
/// `[pgmq]` `queue` (every other `[pgmq]` key keeps its default).
pub const ROUTE: [(&str, &str, &str); 10] = [
    (REPO, "routes", "repo"),
    ("ROWBRANCH_TABLE", "routes", "table"),
    ("ROWBRANCH_SCHEMA", "routes", "schema"),
    ("ROWBRANCH_ID_COLUMN", "routes", "id_column"),
    ("ROWBRANCH_TEXT_COLUMN", "routes", "text_column"),
    ("ROWBRANCH_BRANCH_PREFIX", "routes", "branch_prefix"),
    ("ROWBRANCH_EVENT_TYPE", "routes", "event_type"),
    ("ROWBRANCH_INTAKE", "routes", "intake"),
    ("ROWBRANCH_PGMQ_QUEUE", "pgmq", "queue"),
    ("ROWBRANCH_SWEEP_FROM", "routes", "sweep_from"),
];

/// The variables the config reads besides the route's, in the order it reads them.
const SETTINGS: [&str; 10] = [
    CONFIG,
    LISTEN,
    PORT,
    GITHUB_APP_ID,
    GITHUB_APP_PRIVATE_KEY,
    GITHUB_API_URL,
    GITHUB_WEBHOOK_SECRET,
    WEBHOOK_SECRET,
    STATUS_PASSWORD,
    DATABASE_URL,
];

/// Every variable the config reads, in the order it reads them: what `serve --help` lists.
pub fn variables() -> impl Iterator<Item = &'static str> {
    SETTINGS.into_iter().chain(ROUTE.map(|(name, ..)| name))
}

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

/// What the environment says, each of [`variables`] read once. It holds secrets, so
/// it has no `Debug`.
pub(super) struct Overlay<'a> {
    set: BTreeMap<&'static str, String>,
    /// Reads the variable the file names (`[github] token_env`), which is known only once the
    /// file is read.
    pub named: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Overlay<'a> {
    pub fn read(env: &'a dyn Fn(&str) -> Option<String>) -> Overlay<'a> {
        let set = variables()
            .filter_map(|name| Some((name, env(name)?)))
            .collect();
        Overlay { set, named: env }
    }

    /// The value of `variable`, one of [`variables`], when it is set.
    pub fn get(&self, variable: &str) -> Option<&str> {
        self.set.get(variable).map(String::as_str)
    }

    /// The route's variables that are set, in the order of [`ROUTE`].
    pub fn route_variables(&self) -> Vec<&'static str> {
        let set = ROUTE.map(|(name, ..)| name).into_iter();
        set.filter(|name| self.set.contains_key(name)).collect()
    }

    /// Where `serve` listens, as written, and the setting that chose it: `ROWBRANCH_LISTEN`,
    /// else `PORT` on every interface, else `file` (the file's `listen`). The one place this
    /// order is kept: validation and `rowbranch healthcheck` both ask it.
    pub fn listen(&self, file: String) -> (String, ListenOrigin) {
        match (self.get(LISTEN), self.get(PORT)) {
            (Some(address), _) => (address.to_owned(), ListenOrigin::Listen),
            (None, Some(port)) => (format!("0.0.0.0:{port}"), ListenOrigin::Port),
            (None, None) => (file, ListenOrigin::File),
        }
    }

    /// The file the route's variables stand in for: one `[[routes]]` table and `[pgmq] queue`,
    /// each key [`ROUTE`] pairs with a variable set to its value, every other key at its
    /// default. Its values are validated as a file's are, and a bad one is named by its
    /// variable ([`by_variable`]).
    pub fn file(&self) -> Result<RawConfig, ConfigError> {
        ensure!(self.get(REPO).is_some(), "{REPO} is not set");
        for name in [GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY] {
            ensure!(
                self.get(name).is_some(),
                "{name} is not set: a route from the environment goes to GitHub as a GitHub \
                 App, whose id ({GITHUB_APP_ID}, on the App's settings page) and private key \
                 ({GITHUB_APP_PRIVATE_KEY}, the PEM text) it needs"
            );
        }
        // The keys a file's route must name are defaulted here: a table, its branches and its
        // dispatches all called after feedback.
        let route =
            json!({ "table": "feedbacks", "branch_prefix": "feedback", "event_type": "feedback" });
        let mut file = json!({ "routes": route, "pgmq": {} });
        for (variable, table, key) in ROUTE {
            if let Some(value) = self.get(variable) {
                file[table][key] = value.into();
            }
        }
        // The one route is the file's one `[[routes]]` table.
        file["routes"] = json!([file["routes"].take()]);
        serde_json::from_value(file).map_err(|e| invalid!("{e}"))
    }
}

/// A refusal of the route from the environment, named by the variable that set the key it is
/// in, when it is in one (SPEC §2: an error in a value names its variable).
pub(super) fn by_variable(problem: ConfigError) -> ConfigError {
    let Some((table, key, bare)) = &problem.1 else {
        return problem;
    };
    let setter = ROUTE
        .into_iter()
        .find(|&(_, t, k)| (t, k) == (*table, *key));
    match setter {
        Some((variable, ..)) => invalid!("{variable}: {bare}"),
        None => problem,
    }
}

#[cfg(test)]
mod tests;
