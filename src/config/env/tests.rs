//! The route from the environment: each variable read, each refusal named by its variable, and
//! [`Config::load`] choosing between it and a file.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::*;
use crate::config::{Config, ConfigError, ForgeSettings, GithubAuth, PrivateKeySource};
use crate::event::EventKind;

const SECRET: &str = "a-webhook-secret-of-32-characters";

/// The least the route needs: the repository and the App.
fn least() -> HashMap<&'static str, String> {
    HashMap::from([
        (REPO, "acme/app".to_owned()),
        ("GITHUB_APP_ID", "123456".to_owned()),
        (
            "GITHUB_APP_PRIVATE_KEY",
            "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----".to_owned(),
        ),
    ])
}

/// The config of the route from the environment `vars` describe.
fn build(vars: &HashMap<&'static str, String>) -> Result<Config, ConfigError> {
    let env = |key: &str| vars.get(key).cloned();
    crate::config::Source::Environment.validate(&Overlay::read(&env), None)
}

#[test]
fn the_repository_and_the_app_make_a_route_with_the_documented_defaults() {
    let config = build(&least()).unwrap();
    assert_eq!(config.routes.len(), 1);
    let route = &config.routes[0];
    assert_eq!(route.table_name(), "public.feedbacks", "the default table");
    assert_eq!(route.repo.to_string(), "acme/app");
    assert_eq!(route.id_column, "id");
    assert_eq!(route.text_column.as_deref(), Some("message"));
    assert_eq!(route.branch_prefix.to_string(), "feedback");
    assert_eq!(route.event_type.to_string(), "feedback");
    assert_eq!(route.events, vec![EventKind::Insert]);
    assert_eq!(route.payload_template, None);
    // Every other key as in a file that leaves it out.
    assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.webhook.respond_within, Duration::from_millis(800));
    assert_eq!(config.reconcile.every, None);
    let ForgeSettings::Github(github) = &config.forge else {
        panic!("a route from the environment goes to GitHub");
    };
    let GithubAuth::App { app_id, key } = &github.auth else {
        panic!("the App");
    };
    assert_eq!(*app_id, 123456);
    assert!(matches!(key, PrivateKeySource::Pem(_)));
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
        (
            "ROWBRANCH_SWEEP_FROM",
            "2026-12-05T21:04:00+00:00".to_owned(),
        ),
        ("PORT", "9000".to_owned()),
        (
            "GITHUB_API_URL",
            "https://ghe.example.com/api/v3".to_owned(),
        ),
        ("ROWBRANCH_WEBHOOK_SECRET", SECRET.to_owned()),
        ("DATABASE_URL", "postgres://u:p@localhost/db".to_owned()),
    ]);
    let config = build(&vars).unwrap();
    assert_eq!(config.routes.len(), 1);
    let route = &config.routes[0];
    assert_eq!(route.table_name(), "app.wishes", "the route's own table");
    assert_eq!(route.id_column, "wish_id");
    assert_eq!(route.text_column.as_deref(), Some("title"));
    assert_eq!(route.branch_prefix.to_string(), "wish");
    assert_eq!(route.event_type.to_string(), "wish-made");
    assert_eq!(
        route.sweep_from.map(|from| from.to_rfc3339()).as_deref(),
        Some("2026-12-05T21:04:00+00:00")
    );
    assert_eq!(config.listen.to_string(), "0.0.0.0:9000");
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
        ("ROWBRANCH_SWEEP_FROM", "yesterday"),
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
fn the_intake_and_the_queue_are_named_by_their_variables_too() {
    for (name, value, problem) in [
        (
            "ROWBRANCH_INTAKE",
            "kafka",
            "intake = \"kafka\" is not an intake",
        ),
        ("ROWBRANCH_PGMQ_QUEUE", "Rows", "is not a queue name"),
        (
            "ROWBRANCH_PGMQ_QUEUE",
            &"q".repeat(45),
            "set [pgmq] dead_letter",
        ),
        ("ROWBRANCH_TABLE", " ", "`table` is missing"),
    ] {
        let mut vars = least();
        vars.insert(name, value.to_owned());
        let err = build(&vars).unwrap_err().to_string();
        let named = format!("the config from the environment: {name}: ");
        assert!(err.starts_with(&named), "{name}: {err}");
        assert!(err.contains(problem), "{name}: {err}");
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rowbranch.toml");
    std::fs::write(&path, crate::config::TEST_LOCAL_CONFIG).unwrap();
    let vars = HashMap::from([
        (REPO, "acme/app".to_owned()),
        ("ROWBRANCH_TABLE", "wishes".to_owned()),
    ]);
    let err = Config::load(&path, &|key: &str| vars.get(key).cloned())
        .unwrap_err()
        .to_string();
    assert!(err.starts_with(&format!("{}: ", path.display())), "{err}");
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
    let unbounded = crate::config::Intake::Pgmq {
        max_rows_per_hour: None,
    };
    assert_eq!(config.routes[0].intake, unbounded);
    assert_eq!(config.pgmq.queue, "feedback_rows");
    assert!(!config.takes_webhooks());
    vars.insert("ROWBRANCH_INTAKE", "kafka".to_owned());
    let err = build(&vars).unwrap_err().to_string();
    assert!(err.contains("\"kafka\" is not an intake"), "{err}");
}

#[test]
fn variables_names_every_variable_the_config_reads_and_no_other() {
    let asked = RefCell::new(Vec::new());
    Overlay::read(&|key: &str| {
        asked.borrow_mut().push(key.to_owned());
        None
    });
    assert_eq!(asked.into_inner(), variables().collect::<Vec<_>>());
}

#[test]
fn the_route_variables_set_are_listed_in_their_order() {
    let all = Overlay::read(&|key: &str| Some(format!("{key}-value")));
    let route = ROUTE.map(|(name, ..)| name);
    assert_eq!(all.route_variables(), route);
    for name in route {
        assert!(variables().any(|read| read == name), "{name}");
    }
}
