//! `docs/spec.md` §2 against the code. The keys come from the file's shape itself (its
//! defaults, serialized), the variables from [`env::ROUTE`]: each has a row in its
//! table and each row a key; a default the spec writes as a TOML value is the code's default,
//! and one written in words ("required", "off", `"{queue}_dead"`…) is checked by what it
//! resolves to.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::env::{self, Overlay};
use super::file::{RawConfig, RawRoute};
use super::{Config, ConfigError, ForgeSettings, Intake, Source, TEST_LOCAL_CONFIG};

const SPEC: &str = include_str!("../../docs/spec.md");

/// The least a github config needs; each required key is left out of it in turn.
const GITHUB: &str = r#"
    [github]
    app_id = 123456
    private_key_path = "app.pem"
    [[routes]]
    table = "feedbacks"
    repo = "acme/app"
    branch_prefix = "feedback"
    event_type = "feedback"
"#;

/// One row of a table: the key, its default cell, and its env cell where the table has one.
struct SpecRow {
    key: String,
    default: String,
    env: Option<String>,
}

/// The text of §2.
fn section() -> &'static str {
    let start = SPEC.find("\n## 2. ").expect("spec.md has a §2");
    let rest = &SPEC[start + 1..];
    &rest[..rest.find("\n## 3. ").expect("spec.md has a §3")]
}

/// §2's tables by their heading, e.g. "`[github]`"; the local forge's bullets (`- \`path =
/// …\``) count as rows of "`[forge]`", with "optional" or "required" as their default.
fn spec_tables() -> BTreeMap<String, Vec<SpecRow>> {
    let mut tables: BTreeMap<String, Vec<SpecRow>> = BTreeMap::new();
    for part in section().split("\n### ").skip(1) {
        let (heading, body) = part.split_once('\n').unwrap();
        let heading = match heading.trim() {
            "The local forge" => "`[forge]`",
            heading => heading,
        };
        let rows = tables.entry(heading.to_owned()).or_default();
        let mut columns: Vec<String> = Vec::new();
        for line in body.lines() {
            if let Some(bullet) = line.strip_prefix("- `") {
                let key = &bullet[..bullet.find(" =").expect("a bullet `key = …`")];
                rows.push(SpecRow {
                    key: key.to_owned(),
                    default: if line.contains("(optional)") {
                        "optional"
                    } else {
                        "required"
                    }
                    .to_owned(),
                    env: None,
                });
                continue;
            }
            if !line.starts_with('|') || line.starts_with("|---") {
                continue;
            }
            let cells: Vec<String> = line
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect();
            if columns.is_empty() {
                columns = cells;
                continue;
            }
            let cell = |name: &str| {
                let i = columns.iter().position(|c| c == name)?;
                Some(cells[i].clone())
            };
            rows.push(SpecRow {
                key: cells[0].trim_matches('`').to_owned(),
                default: cell("default").expect("every table has a default column"),
                env: cell("env"),
            });
        }
    }
    tables.retain(|_, rows| !rows.is_empty());
    tables
}

/// The file's keys by the heading of their table, each with its default (null for none),
/// from the file's shape: "Top level", then "`[name]`" per table, "`[[name]]`" per array.
fn code_tables() -> BTreeMap<String, BTreeMap<String, Value>> {
    let file = RawConfig {
        routes: vec![RawRoute::default()],
        ..RawConfig::default()
    };
    let Value::Object(file) = serde_json::to_value(file).unwrap() else {
        panic!("the file is a table");
    };
    let mut tables = BTreeMap::new();
    let mut top = BTreeMap::new();
    for (key, value) in file {
        match value {
            Value::Object(table) => {
                tables.insert(format!("`[{key}]`"), table.into_iter().collect());
            }
            Value::Array(mut items) => {
                let Some(Value::Object(table)) = items.pop() else {
                    panic!("{key} is an array of tables");
                };
                tables.insert(format!("`[[{key}]]`"), table.into_iter().collect());
            }
            value => {
                top.insert(key, value);
            }
        }
    }
    tables.insert("Top level".to_owned(), top);
    tables
}

/// The config of the route from the environment `env` describes.
fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    Source::Environment.validate(&Overlay::read(env), None)
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/rowbranch/rowbranch.toml"), &|_| None)
}

/// The first `code` span of a cell.
fn first_code(cell: &str) -> Option<&str> {
    let start = cell.find('`')? + 1;
    let len = cell[start..].find('`')?;
    Some(&cell[start..start + len])
}

/// `text` less its line `key = …`.
fn without(text: &str, key: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let kept: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.trim_start().starts_with(&format!("{key} =")))
        .collect();
    assert_eq!(
        kept.len() + 1,
        lines.len(),
        "{key} is once in the base config"
    );
    kept.join("\n")
}

/// Checks a default the spec writes in words, for a key whose default in the file is none.
fn check_worded_default(table: &str, key: &str, default: &str) {
    let worded = default.split(" (").next().unwrap();
    match (worded, table, key) {
        ("required" | "none; a key is required", "`[github]`" | "`[[routes]]`", _) => {
            let err = parse(&without(GITHUB, key)).unwrap_err().to_string();
            assert!(
                err.contains(key),
                "leaving out {key} is refused, naming it: {err}"
            );
        }
        ("required", "`[forge]`", "path") => {
            let err = parse(&without(TEST_LOCAL_CONFIG, key))
                .unwrap_err()
                .to_string();
            assert!(err.contains("needs path"), "{err}");
        }
        ("optional", "`[forge]`", "on_dispatch") => {
            let config = parse(TEST_LOCAL_CONFIG).unwrap();
            let ForgeSettings::Local(local) = &config.forge else {
                panic!("the local forge");
            };
            assert_eq!(local.on_dispatch, None);
        }
        ("off: the App", "`[github]`", "token_env") => {
            let config = parse(GITHUB).unwrap();
            assert!(config.forge.token().is_none(), "the App, without token_env");
        }
        ("`\"6h\"` with `DATABASE_URL` set, else off", "Top level", "reconcile_every") => {
            assert_eq!(parse(GITHUB).unwrap().reconcile.every, None);
            let with_url = Config::parse(
                GITHUB,
                Path::new("/etc/rowbranch/rowbranch.toml"),
                &|key: &str| (key == "DATABASE_URL").then(|| "postgres://u@db/x".to_owned()),
            )
            .unwrap();
            assert_eq!(
                with_url.reconcile.every,
                Some(std::time::Duration::from_secs(6 * 3600))
            );
        }
        ("`450`", "`[github]`", "write_hourly_max") => {
            // "(with `token_env`: `400`)": token_tests.rs parses a token's config.
            let ForgeSettings::Github(github) = parse(GITHUB).unwrap().forge else {
                panic!("the github forge");
            };
            assert_eq!(github.pace.hourly_max, 450);
            assert!(default.contains(&format!("`{}`", super::file::TOKEN_WRITE_HOURLY_MAX)));
        }
        ("none", "`[[routes]]`", "sweep_from") => {
            assert_eq!(parse(GITHUB).unwrap().routes[0].sweep_from, None);
            let from = parse(&format!(
                "{GITHUB}sweep_from = \"2026-12-05T21:04:00+01:00\"\n"
            ));
            assert_eq!(
                from.unwrap().routes[0].sweep_from.unwrap().to_rfc3339(),
                "2026-12-05T20:04:00+00:00"
            );
        }
        ("none", "`[[routes]]`", "status_column" | "pull_request_column") => {
            let route = &parse(GITHUB).unwrap().routes[0];
            assert!(!route.writes_back(), "{key}");
        }
        ("none: every row runs", "`[[routes]]`", "run_when") => {
            assert_eq!(parse(GITHUB).unwrap().routes[0].run_when, None);
        }
        ("off", "`[[routes]]`", "max_rows_per_hour") => {
            let queue = parse(&format!("{GITHUB}intake = \"pgmq\"\n")).unwrap();
            let off = Intake::Pgmq {
                max_rows_per_hour: None,
            };
            assert_eq!(queue.routes[0].intake, off);
        }
        (
            "the built-in template",
            "`[[routes]]`",
            "payload_template" | "payload_template_inline",
        ) => {
            assert_eq!(parse(GITHUB).unwrap().routes[0].payload_template, None);
        }
        ("`\"{queue}_dead\"`", "`[pgmq]`", "dead_letter") => {
            // "(so `"rowbranch_dead"`)": the default queue's, and any other queue's own.
            let example = first_code(default.split(" (").nth(1).unwrap()).unwrap();
            let config = parse(GITHUB).unwrap();
            assert_eq!(format!("{:?}", config.pgmq.dead_letter.as_str()), example);
            let config = parse(&format!("[pgmq]\nqueue = \"rows_q\"\n{GITHUB}")).unwrap();
            assert_eq!(config.pgmq.dead_letter, "rows_q_dead");
        }
        _ => panic!(
            "{table} {key}: the default {default:?} is neither the code's default as a TOML \
             value nor a worded default this test knows how to check"
        ),
    }
}

#[test]
fn every_key_of_the_file_has_a_row_and_every_row_a_key() {
    let spec = spec_tables();
    let code = code_tables();
    for (table, keys) in &code {
        let rows = spec
            .get(table)
            .unwrap_or_else(|| panic!("spec.md §2 has no table {table}"));
        let documented: BTreeSet<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        let accepted: BTreeSet<&str> = keys.keys().map(String::as_str).collect();
        assert_eq!(
            documented, accepted,
            "{table}: the spec's rows, then the code's keys"
        );
        assert_eq!(rows.len(), documented.len(), "{table}: a key has two rows");
    }
    let env_table = "One route from the environment";
    for table in spec.keys() {
        assert!(
            code.contains_key(table) || table == env_table,
            "spec.md §2's table {table} is no table of the file"
        );
    }
}

#[test]
fn every_default_in_the_spec_is_the_codes() {
    let spec = spec_tables();
    for (table, keys) in code_tables() {
        for row in &spec[&table] {
            let code = &keys[&row.key];
            if code.is_null() {
                check_worded_default(&table, &row.key, &row.default);
                continue;
            }
            let literal = first_code(&row.default)
                .unwrap_or_else(|| panic!("{table} {}: no default in backticks", row.key));
            let written: toml::Table = toml::from_str(&format!("v = {literal}"))
                .unwrap_or_else(|e| panic!("{table} {}: `{literal}` is not TOML: {e}", row.key));
            assert_eq!(
                serde_json::to_value(&written["v"]).unwrap(),
                *code,
                "{table} {}: the spec's default, then the code's",
                row.key
            );
        }
    }
}

#[test]
fn every_variable_the_spec_names_is_one_the_config_reads() {
    for (table, rows) in spec_tables() {
        for row in rows {
            let Some(cell) = row.env else { continue };
            for span in cell.split('`').skip(1).step_by(2) {
                let name = span.split('=').next().unwrap();
                if name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                    assert!(
                        env::variables().any(|read| read == name),
                        "{table} {}: {name}",
                        row.key
                    );
                }
            }
        }
    }
    for name in env::variables() {
        assert!(
            section().contains(&format!("`{name}`")),
            "§2 does not name {name}"
        );
    }
}

#[test]
fn the_route_from_the_environment_has_the_rows_and_defaults_of_the_spec() {
    let rows = &spec_tables()["One route from the environment"];
    let documented: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(documented, env::ROUTE.map(|(name, ..)| name));

    let least = |name: &str| match name {
        env::REPO => Some("acme/app".to_owned()),
        env::GITHUB_APP_ID => Some("1".to_owned()),
        env::GITHUB_APP_PRIVATE_KEY => Some("-----BEGIN RSA PRIVATE KEY-----".to_owned()),
        _ => None,
    };
    let config = from_env(&least).unwrap();
    let route = &config.routes[0];
    for row in rows {
        if row.default == "required" {
            let without = |name: &str| least(name).filter(|_| name != row.key);
            let err = from_env(&without).unwrap_err().to_string();
            assert!(err.contains(&format!("{} is not set", row.key)), "{err}");
            continue;
        }
        let resolved = match row.key.as_str() {
            "ROWBRANCH_TABLE" => route.table.clone(),
            "ROWBRANCH_SCHEMA" => route.schema.clone(),
            "ROWBRANCH_ID_COLUMN" => route.id_column.clone(),
            "ROWBRANCH_TEXT_COLUMN" => route.text_column.clone().unwrap_or_default(),
            "ROWBRANCH_BRANCH_PREFIX" => route.branch_prefix.to_string(),
            "ROWBRANCH_EVENT_TYPE" => route.event_type.to_string(),
            "ROWBRANCH_INTAKE" => route.intake.as_str().to_owned(),
            "ROWBRANCH_PGMQ_QUEUE" => config.pgmq.queue.to_string(),
            "ROWBRANCH_SWEEP_FROM" => {
                assert_eq!(route.sweep_from, None, "{}", row.key);
                continue;
            }
            other => panic!("{other}: which part of the route does it set?"),
        };
        assert_eq!(
            Some(resolved.as_str()),
            first_code(&row.default),
            "{}",
            row.key
        );
    }
}
