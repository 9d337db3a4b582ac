//! `rowbranch config`'s text read back, its marks, its secrets; and `ROWBRANCH_CONFIG`, the
//! same text carried in one variable, chosen against a file and the route's variables.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tempfile::TempDir;

use crate::config::{env, Config, PayloadTemplateSource};

const SECRET: &str = "a-webhook-secret-of-32-characters-long";
const KEY: &str =
    "-----BEGIN RSA PRIVATE KEY-----\nnot-a-key-but-secret\n-----END RSA PRIVATE KEY-----";
const TEMPLATE: &str = "{\n  \"id\": {{ id }},\n  \"who\": {{ record.author | tojson }}\n}\n";

/// A config that sets a little of everything, with a template file beside it.
const FILE: &str = r#"
listen = "0.0.0.0:9000"
status_page = true
reconcile_every = "6h"

[github]
app_id = 42
private_key_path = "app.pem"
write_burst = 3

[pgmq]
queue = "rows"

[[routes]]
table = "tickets"
schema = "support"
repo = "acme/app"
text_column = "body"
branch_prefix = "ticket"
event_type = "ticket"
payload_template = "payload.json.j2"

[[routes]]
table = "notes"
repo = "acme/other"
text_column = ""
branch_prefix = "note"
event_type = "note"
intake = "pgmq"
"#;

fn setup(config: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("rowbranch.toml");
    std::fs::write(&path, config).unwrap();
    std::fs::write(dir.path().join("payload.json.j2"), TEMPLATE).unwrap();
    (dir, path)
}

fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn show(path: &Path, vars: &HashMap<String, String>) -> String {
    Config::show(path, &|key: &str| vars.get(key).cloned())
        .unwrap_or_else(|e| panic!("{e}"))
        .toml
}

/// The settings, with the source's name left out and a template file read into its text: what
/// must be the same whichever way the config arrived.
fn settings(mut config: Config) -> String {
    config.source = PathBuf::new();
    for route in &mut config.routes {
        let route = Arc::get_mut(route).expect("a route held once");
        if let Some(PayloadTemplateSource::File(path)) = &route.payload_template {
            let text = std::fs::read_to_string(path).unwrap();
            route.payload_template = Some(PayloadTemplateSource::Inline(text));
        }
    }
    format!("{config:?}")
}

fn load(path: &Path, vars: &HashMap<String, String>) -> Config {
    Config::load(path, &|key: &str| vars.get(key).cloned()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_printed_config_loads_back_to_the_same_settings_from_a_file_or_the_variable() {
    let (dir, path) = setup(FILE);
    let env = vars(&[
        (env::WEBHOOK_SECRET, SECRET),
        (env::PORT, "8080"),
        (env::GITHUB_APP_ID, "77"),
    ]);
    let printed = show(&path, &env);
    let original = settings(load(&path, &env));

    // Written to a file elsewhere, or carried in ROWBRANCH_CONFIG with no file at all.
    let elsewhere = TempDir::new().unwrap();
    let copy = elsewhere.path().join("effective.toml");
    std::fs::write(&copy, &printed).unwrap();
    assert_eq!(settings(load(&copy, &env)), original, "{printed}");
    let mut carried = env.clone();
    carried.insert(env::CONFIG.to_owned(), printed.clone());
    let absent = elsewhere.path().join("rowbranch.toml");
    assert_eq!(settings(load(&absent, &carried)), original, "{printed}");
    // And printing it again prints the same config.
    let again: toml::Table = show(&absent, &carried).parse().unwrap();
    assert_eq!(again, printed.parse::<toml::Table>().unwrap());
    drop(dir);
}

#[test]
fn each_key_says_where_it_came_from_and_every_default_is_written_out() {
    let (dir, path) = setup(FILE);
    let env = vars(&[(env::PORT, "8080"), (env::GITHUB_APP_ID, "77")]);
    let printed = show(&path, &env);
    let lines: Vec<&str> = printed.lines().collect();
    for expected in [
        "listen = \"0.0.0.0:8080\"  # env PORT",
        "app_id = 77  # env GITHUB_APP_ID",
        "write_burst = 3",
        "write_interval_ms = 1000  # default",
        "queue = \"rows\"",
        "dead_letter = \"rows_dead\"  # default",
        "status_page = true",
        "shutdown_grace = \"20s\"  # default",
        "created_column = \"created_at\"  # default",
        "# payload_template: the built-in template",
    ] {
        assert!(
            lines.contains(&expected),
            "no line {expected:?} in\n{printed}"
        );
    }
    let key = dir.path().join("app.pem");
    assert!(
        printed.contains(&format!("private_key_path = \"{}\"", key.display())),
        "the key's path, absolute:\n{printed}"
    );
    // The template travels as its text, not as a path.
    assert!(!printed.contains("payload_template = "), "{printed}");
    let table: toml::Table = printed.parse().unwrap();
    assert_eq!(
        table["routes"][0]["payload_template_inline"].as_str(),
        Some(TEMPLATE)
    );
    assert_eq!(table["routes"][1]["text_column"].as_str(), Some(""));
}

#[test]
fn secrets_are_never_printed_only_whether_they_are_set() {
    let (_dir, path) = setup(FILE);
    let env = vars(&[
        (env::WEBHOOK_SECRET, SECRET),
        (env::GITHUB_APP_PRIVATE_KEY, KEY),
        (env::DATABASE_URL, "postgres://u:hunter2-password@db/x"),
        (env::STATUS_PASSWORD, "status-password-7"),
        (env::GITHUB_WEBHOOK_SECRET, "the apps hook secret"),
    ]);
    let shown = Config::show(&path, &|key: &str| env.get(key).cloned()).unwrap();
    for secret in [
        SECRET,
        "not-a-key-but-secret",
        "hunter2-password",
        "status-password-7",
        "the apps hook secret",
    ] {
        assert!(!shown.toml.contains(secret), "{}", shown.toml);
    }
    // A key from the environment wins over the path, which is then not printed.
    assert!(!shown.toml.contains("private_key_path ="), "{}", shown.toml);
    assert!(
        shown.toml.contains("GITHUB_APP_PRIVATE_KEY"),
        "{}",
        shown.toml
    );
    let secrets: Vec<(&str, &str)> = shown
        .secrets
        .iter()
        .map(|(name, state)| (name.as_str(), *state))
        .collect();
    assert_eq!(
        secrets,
        [
            (env::WEBHOOK_SECRET, "set"),
            (env::GITHUB_APP_PRIVATE_KEY, "set"),
            (env::GITHUB_WEBHOOK_SECRET, "set"),
            (env::DATABASE_URL, "set"),
            (env::STATUS_PASSWORD, "set"),
        ]
    );
}

#[test]
fn the_route_from_the_environment_prints_as_the_config_it_stands_for() {
    let env = vars(&[
        (env::REPO, "acme/app"),
        ("ROWBRANCH_TABLE", "tickets"),
        ("ROWBRANCH_TEXT_COLUMN", "body"),
        (env::GITHUB_APP_ID, "1"),
        (env::GITHUB_APP_PRIVATE_KEY, KEY),
    ]);
    let dir = TempDir::new().unwrap();
    let absent = dir.path().join("rowbranch.toml");
    let printed = show(&absent, &env);
    for expected in [
        "table = \"tickets\"  # env ROWBRANCH_TABLE",
        "text_column = \"body\"  # env ROWBRANCH_TEXT_COLUMN",
        "branch_prefix = \"feedback\"  # default",
    ] {
        assert!(
            printed.lines().any(|l| l == expected),
            "{expected}:\n{printed}"
        );
    }
    let from_env = settings(load(&absent, &env));
    let mut carried = vars(&[
        (env::GITHUB_APP_PRIVATE_KEY, KEY),
        (env::GITHUB_APP_ID, "1"),
    ]);
    carried.insert(env::CONFIG.to_owned(), printed);
    assert_eq!(settings(load(&absent, &carried)), from_env);
}

#[test]
fn a_template_that_a_literal_string_cannot_hold_is_escaped_and_still_travels() {
    for template in [
        "{\"a\": \"'''\"}\n",
        "{\"a\": \"it's\"}\n{# '#}'",
        "{\"a\":\r\t1}",
    ] {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("rowbranch.toml");
        std::fs::write(
            &path,
            format!(
                "{}\npayload_template = \"p.j2\"\n",
                crate::config::TEST_LOCAL_CONFIG
            ),
        )
        .unwrap();
        std::fs::write(dir.path().join("p.j2"), template).unwrap();
        let printed = show(&path, &HashMap::new());
        let table: toml::Table = printed.parse().unwrap_or_else(|e| panic!("{e}\n{printed}"));
        assert_eq!(
            table["routes"][0]["payload_template_inline"].as_str(),
            Some(template)
        );
    }
}

#[test]
fn a_line_break_in_another_value_stays_inside_its_string() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("rowbranch.toml");
    let config = crate::config::TEST_LOCAL_CONFIG.replace(
        "path = \"repo.git\"",
        "path = \"repo.git\"\non_dispatch = \"\"\"\necho one\nqueue = x\n\"\"\"",
    );
    std::fs::write(&path, config).unwrap();
    let printed = show(&path, &HashMap::new());
    let table: toml::Table = printed.parse().unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(
        table["forge"]["on_dispatch"].as_str(),
        Some("echo one\nqueue = x\n")
    );
}

#[test]
fn a_config_that_does_not_load_is_refused_as_the_commands_refuse_it() {
    let (_dir, path) = setup("listen = 8080\n");
    let err = Config::show(&path, &|_| None).err().unwrap().to_string();
    assert!(err.contains("rowbranch.toml"), "{err}");
    let (_dir, path) = setup(&FILE.replace("payload.json.j2", "missing.j2"));
    let err = Config::show(&path, &|_| None).err().unwrap().to_string();
    assert!(err.contains("missing.j2"), "{err}");
}

#[test]
fn rowbranch_config_is_the_config_when_no_file_is_there_and_never_beside_one() {
    let (_dir, path) = setup(FILE);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("payload_template = \"payload.json.j2\"", "");
    let env = vars(&[(env::CONFIG, &text)]);
    let elsewhere = TempDir::new().unwrap();
    let absent = elsewhere.path().join("rowbranch.toml");
    let config = load(&absent, &env);
    assert_eq!(config.source, Path::new(env::CONFIG));
    assert_eq!(config.routes[0].table, "tickets");

    // Beside a file, refused, naming both.
    let err = Config::load(&path, &|key: &str| env.get(key).cloned())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rowbranch.toml") && err.contains("unset ROWBRANCH_CONFIG"),
        "{err}"
    );
    // Beside the route's variables, refused, naming them.
    let mut both = env.clone();
    both.insert(env::REPO.to_owned(), "acme/app".to_owned());
    let err = Config::load(&absent, &|key: &str| both.get(key).cloned())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ROWBRANCH_CONFIG") && err.contains("Unset ROWBRANCH_REPO"),
        "{err}"
    );
    // Its errors name it.
    let bad = vars(&[(env::CONFIG, "listen = 1\n")]);
    let err = Config::load(&absent, &|key: &str| bad.get(key).cloned())
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("ROWBRANCH_CONFIG: "), "{err}");
}
