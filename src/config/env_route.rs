//! One route from the environment alone (SPEC §2 "One route from the environment"): where
//! writing a config file is a chore — a container platform, a unit file — `ROWBRANCH_REPO` and
//! its companions stand in for the file's single `[[routes]]` table, and everything else takes
//! the file's defaults and the environment variables the file route reads too.

use std::path::Path;

use anyhow::{anyhow, bail, Context};

use super::{Config, ConfigError, Env, RawConfig, RawPgmq, RawRoute};
use crate::identity::{BranchPrefix, EventType, RepoName};

/// The variable whose presence (with no config file) selects this route.
pub const REPO: &str = "ROWBRANCH_REPO";

/// Every variable that describes the route, with its default; `None` marks the required one.
pub const VARIABLES: [(&str, Option<&str>); 7] = [
    (REPO, None),
    ("ROWBRANCH_TABLE", Some("feedbacks")),
    ("ROWBRANCH_SCHEMA", Some("public")),
    ("ROWBRANCH_ID_COLUMN", Some("id")),
    ("ROWBRANCH_TEXT_COLUMN", Some("message")),
    ("ROWBRANCH_BRANCH_PREFIX", Some("feedback")),
    ("ROWBRANCH_EVENT_TYPE", Some("feedback")),
];

/// The route's intake (`webhook`, the default, or `pgmq`) and, for `pgmq`, the queue's name
/// (default `rowbranch`).
pub const QUEUE_VARIABLES: [&str; 2] = ["ROWBRANCH_INTAKE", "ROWBRANCH_PGMQ_QUEUE"];

/// What [`Config::source`] says for a config built here.
pub const SOURCE: &str = "from the environment (ROWBRANCH_REPO)";

/// The route variables that are set, in the order of [`VARIABLES`].
pub fn set_variables(env: Env) -> Vec<&'static str> {
    VARIABLES
        .iter()
        .map(|(name, _)| *name)
        .chain(QUEUE_VARIABLES)
        .filter(|name| env(name).is_some())
        .collect()
}

/// The refusal for a config file at `path` while route variables are set too: one of the two
/// has to go, and the message says which is which.
pub fn conflict(path: &Path, set: &[&str]) -> ConfigError {
    let names = set.join(", ");
    ConfigError::new(
        path,
        &anyhow!(
            "{names} configure a route from the environment, and this file configures the \
             routes too: to use the file, unset {names}; to use the environment, remove the \
             file (or move it away from where --config points)"
        ),
    )
}

/// The refusal for route variables without `ROWBRANCH_REPO` and without a file.
pub fn repo_missing(path: &Path, set: &[&str]) -> ConfigError {
    ConfigError::new(
        path,
        &anyhow!(
            "there is no config file here, and {} is set but {REPO} is not: set {REPO}=owner/name \
             to configure the route from the environment, or write the config file",
            set.join(", ")
        ),
    )
}

impl Config {
    /// The config of one route built from `env` alone, with every other key at its default.
    /// Reads no file.
    pub fn from_env(env: Env) -> Result<Config, ConfigError> {
        from_env(env).map_err(|e| ConfigError {
            file: "the config from the environment".to_owned(),
            message: format!("{e:#}"),
        })
    }
}

fn from_env(env: Env) -> anyhow::Result<Config> {
    let value = |name: &str, default: Option<&str>| {
        env(name)
            .or_else(|| default.map(str::to_owned))
            .ok_or_else(|| anyhow!("{name} is not set"))
    };
    let [repo, table, schema, id_column, text_column, branch_prefix, event_type] =
        VARIABLES.map(|(name, default)| value(name, default));
    let (repo, branch_prefix, event_type) = (repo?, branch_prefix?, event_type?);
    // Checked here as well as by the route itself, so that a bad value is named by its
    // variable rather than by the file's key.
    RepoName::parse(&repo).with_context(|| format!("{REPO}=`{repo}`"))?;
    BranchPrefix::parse(&branch_prefix)
        .with_context(|| format!("ROWBRANCH_BRANCH_PREFIX=`{branch_prefix}`"))?;
    EventType::parse(&event_type)
        .with_context(|| format!("ROWBRANCH_EVENT_TYPE=`{event_type}`"))?;
    for name in ["GITHUB_APP_ID", "GITHUB_APP_PRIVATE_KEY"] {
        if env(name).is_none() {
            bail!(
                "{name} is not set: a route from the environment goes to GitHub as a GitHub App, \
                 whose id (GITHUB_APP_ID, on the App's settings page) and private key \
                 (GITHUB_APP_PRIVATE_KEY, the PEM text) it needs"
            );
        }
    }
    let raw = RawConfig {
        routes: vec![RawRoute {
            table: Some(table?),
            schema: Some(schema?),
            repo: Some(repo),
            events: None,
            id_column: Some(id_column?),
            text_column: Some(text_column?),
            branch_prefix: Some(branch_prefix),
            slug_max_len: None,
            event_type: Some(event_type),
            payload_template: None,
            created_column: None,
            intake: env("ROWBRANCH_INTAKE"),
        }],
        pgmq: env("ROWBRANCH_PGMQ_QUEUE").map(|queue| RawPgmq {
            queue: Some(queue),
            ..RawPgmq::default()
        }),
        ..RawConfig::default()
    };
    Config::from_raw(raw, Path::new(SOURCE), env)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;
    use crate::config::{ForgeSettings, PrivateKeySource};
    use crate::event::EventKind;

    const SECRET: &str = "a-webhook-secret-of-32-characters";

    /// The least the route needs: the repository and the App.
    fn least() -> HashMap<&'static str, String> {
        HashMap::from([
            (REPO, "acme/app".to_owned()),
            ("GITHUB_APP_ID", "123456".to_owned()),
            (
                "GITHUB_APP_PRIVATE_KEY",
                "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----"
                    .to_owned(),
            ),
        ])
    }

    fn build(vars: &HashMap<&'static str, String>) -> Result<Config, ConfigError> {
        Config::from_env(&|key: &str| vars.get(key).cloned())
    }

    #[test]
    fn the_repository_and_the_app_make_a_route_with_the_documented_defaults() {
        let config = build(&least()).unwrap();
        assert_eq!(config.routes.len(), 1);
        let route = config
            .route("public", "feedbacks")
            .expect("the default table");
        assert_eq!(route.repo.to_string(), "acme/app");
        assert_eq!(route.id_column, "id");
        assert_eq!(route.text_column.as_deref(), Some("message"));
        assert_eq!(route.branch_prefix.to_string(), "feedback");
        assert_eq!(route.event_type.to_string(), "feedback");
        assert_eq!(route.events, vec![EventKind::Insert]);
        assert_eq!(route.payload_template, None);
        // Every other key as in a file that leaves it out.
        assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.webhook.respond_within, Duration::from_millis(800));
        assert_eq!(config.reconcile.every, None);
        let ForgeSettings::Github(github) = &config.forge else {
            panic!("a route from the environment goes to GitHub");
        };
        assert_eq!(github.app_id, 123456);
        assert!(matches!(github.key, PrivateKeySource::Pem(_)));
        assert_eq!(github.api_url, "https://api.github.com");
        assert_eq!(config.source, Path::new(SOURCE));
        assert!(!format!("{config:?}").contains("not a key"));
    }

    #[test]
    fn each_variable_sets_its_part_of_the_route() {
        let mut vars = least();
        vars.extend([
            ("ROWBRANCH_TABLE", "wishes".to_owned()),
            ("ROWBRANCH_SCHEMA", "app".to_owned()),
            ("ROWBRANCH_ID_COLUMN", "wish_id".to_owned()),
            ("ROWBRANCH_TEXT_COLUMN", "title".to_owned()),
            ("ROWBRANCH_BRANCH_PREFIX", "wish".to_owned()),
            ("ROWBRANCH_EVENT_TYPE", "wish-made".to_owned()),
            ("PORT", "9000".to_owned()),
            (
                "GITHUB_API_URL",
                "https://ghe.example.com/api/v3".to_owned(),
            ),
            ("ROWBRANCH_WEBHOOK_SECRET", SECRET.to_owned()),
            ("DATABASE_URL", "postgres://u:p@localhost/db".to_owned()),
        ]);
        let config = build(&vars).unwrap();
        assert!(config.route("public", "feedbacks").is_none());
        let route = config
            .route("app", "wishes")
            .expect("the route's own table");
        assert_eq!(route.id_column, "wish_id");
        assert_eq!(route.text_column.as_deref(), Some("title"));
        assert_eq!(route.branch_prefix.to_string(), "wish");
        assert_eq!(route.event_type.to_string(), "wish-made");
        assert_eq!(config.listen, "0.0.0.0:9000".parse().unwrap());
        let ForgeSettings::Github(github) = &config.forge else {
            panic!("github expected");
        };
        assert_eq!(github.api_url, "https://ghe.example.com/api/v3");
        assert!(config.webhook.secrets.is_some());
        assert!(config.database_url.is_some());
    }

    #[test]
    fn a_bad_value_is_named_by_its_variable() {
        for (name, value) in [
            (REPO, "acme"),
            ("ROWBRANCH_BRANCH_PREFIX", "feed back"),
            ("ROWBRANCH_EVENT_TYPE", &"e".repeat(101)),
            ("GITHUB_APP_ID", "one"),
            ("PORT", "http"),
        ] {
            let mut vars = least();
            vars.insert(name, value.to_owned());
            let err = build(&vars).unwrap_err().to_string();
            assert!(err.contains(name), "{name}: {err}");
            assert!(
                err.starts_with("the config from the environment: "),
                "{err}"
            );
        }
    }

    #[test]
    fn a_missing_app_id_or_key_says_which_variable_to_set() {
        for name in ["GITHUB_APP_ID", "GITHUB_APP_PRIVATE_KEY"] {
            let mut vars = least();
            vars.remove(name);
            let err = build(&vars).unwrap_err().to_string();
            assert!(err.contains(&format!("{name} is not set")), "{err}");
        }
    }

    #[test]
    fn a_short_webhook_secret_is_refused_without_being_echoed() {
        let mut vars = least();
        vars.insert("ROWBRANCH_WEBHOOK_SECRET", "hunter2".to_owned());
        let err = build(&vars).unwrap_err().to_string();
        assert!(err.contains("ROWBRANCH_WEBHOOK_SECRET"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn load_takes_the_environment_only_when_there_is_no_file_and_the_repository_is_set() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rowbranch.toml");
        let vars = least();
        let env = |key: &str| vars.get(key).cloned();

        let config = Config::load(&path, &env).unwrap();
        assert_eq!(config.source, Path::new(SOURCE));
        assert_eq!(config.routes[0].repo.to_string(), "acme/app");

        // Without ROWBRANCH_REPO, a missing file is the usual error, with this way out named.
        let err = Config::load(&path, &|_| None).unwrap_err().to_string();
        assert!(err.contains("cannot read the config file"), "{err}");
        assert!(err.contains(REPO), "{err}");

        // Another route variable alone is not enough, and says what is missing.
        let table = |key: &str| (key == "ROWBRANCH_TABLE").then(|| "wishes".to_owned());
        let err = Config::load(&path, &table).unwrap_err().to_string();
        assert!(
            err.contains("ROWBRANCH_TABLE is set but ROWBRANCH_REPO is not"),
            "{err}"
        );

        // A file and the variables together: refused, naming the file and the variable.
        std::fs::write(&path, crate::config::TEST_LOCAL_CONFIG).unwrap();
        let err = Config::load(&path, &env).unwrap_err().to_string();
        assert!(err.contains(&*path.to_string_lossy()), "{err}");
        assert!(err.contains("unset ROWBRANCH_REPO"), "{err}");
        // The file alone still loads.
        let config = Config::load(&path, &|_| None).unwrap();
        assert_eq!(config.source, path);
    }

    #[test]
    fn the_conflict_names_the_variables_to_unset_and_the_file_to_remove() {
        let vars = HashMap::from([
            (REPO, "acme/app".to_owned()),
            ("ROWBRANCH_TABLE", "wishes".to_owned()),
        ]);
        let set = set_variables(&|key: &str| vars.get(key).cloned());
        assert_eq!(set, [REPO, "ROWBRANCH_TABLE"]);
        let err = conflict(Path::new("/etc/rowbranch/rowbranch.toml"), &set).to_string();
        assert!(err.starts_with("/etc/rowbranch/rowbranch.toml: "), "{err}");
        assert!(
            err.contains("unset ROWBRANCH_REPO, ROWBRANCH_TABLE"),
            "{err}"
        );
        assert!(err.contains("remove the file"), "{err}");
    }

    #[test]
    fn the_intake_and_the_queue_come_from_the_environment_too() {
        let mut vars = least();
        vars.extend([
            ("ROWBRANCH_INTAKE", "pgmq".to_owned()),
            ("ROWBRANCH_PGMQ_QUEUE", "feedback_rows".to_owned()),
        ]);
        let config = build(&vars).unwrap();
        assert_eq!(config.routes[0].intake, crate::config::Intake::Pgmq);
        assert_eq!(config.pgmq.queue, "feedback_rows");
        assert!(!config.takes_webhooks());
        vars.insert("ROWBRANCH_INTAKE", "kafka".to_owned());
        let err = build(&vars).unwrap_err().to_string();
        assert!(err.contains("\"kafka\" is not an intake"), "{err}");
    }
}
