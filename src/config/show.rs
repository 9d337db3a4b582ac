//! The effective config as TOML (`rowbranch config`): the config's own keys with the
//! environment laid over them, every default written out, paths made absolute and a payload
//! template file carried inline, each key marked with where it came from when that is not the
//! config itself. What it prints is a config rowbranch reads back to the same settings, so it
//! is also the text to carry whole in `ROWBRANCH_CONFIG`. Secrets live in the environment
//! alone and are never printed: [`Shown::secrets`] says only whether each is set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::env::{self, Overlay};
use super::file::RawConfig;
use super::{Config, ConfigError, ForgeSettings, GithubAuth, Invalid, Source};

/// What `rowbranch config` prints.
pub struct Shown {
    /// The effective config, TOML that [`Config::parse`] takes back.
    pub toml: String,
    /// Each secret variable, and whether it is set: a word, never its value.
    pub secrets: Vec<(String, &'static str)>,
}

/// A key's origin, when it is not the config's own text.
#[derive(Clone, Copy)]
enum Origin {
    Default,
    Variable(&'static str),
}

/// Where each key came from, by table (`""` for the top level, `routes.N` for a route) and key.
#[derive(Default)]
struct Origins {
    keys: BTreeMap<(String, String), Origin>,
    /// Lines said of a table's keys that are not printed (a secret, a key that is off).
    notes: BTreeMap<String, Vec<String>>,
}

impl Origins {
    fn set(&mut self, table: &str, key: &str, origin: Origin) {
        self.keys.insert((table.to_owned(), key.to_owned()), origin);
    }

    fn note(&mut self, table: &str, note: String) {
        self.notes.entry(table.to_owned()).or_default().push(note);
    }
}

pub(super) fn show(path: &Path, overlay: &Overlay) -> Result<Shown, ConfigError> {
    let source = Source::find(path, overlay)?;
    // Validated first, exactly as the commands do: a config that does not load prints why.
    let config = match &source {
        Source::Text { text, path } => Config::from_text(text, path, overlay)?,
        Source::Environment => Config::from_overlay(overlay)?,
    };
    let (name, anchor, raw, own) = match &source {
        Source::Text { text, path } => {
            let raw: RawConfig = toml::from_str(text).expect("the config parsed once already");
            let own: toml::Table = toml::from_str(text).expect("the config parsed once already");
            (path.display().to_string(), path.clone(), raw, Some(own))
        }
        Source::Environment => {
            let raw = overlay
                .route
                .file(overlay)
                .expect("the route from the environment was made once already");
            (
                env::SOURCE_NAME.to_owned(),
                PathBuf::from(env::SOURCE),
                raw,
                None,
            )
        }
    };
    let dir = anchor.parent().unwrap_or(Path::new("."));
    let (raw, origins) = effective(raw, own.as_ref(), overlay, dir, &config)
        .map_err(|e| ConfigError::new(&name, e))?;
    Ok(Shown {
        toml: write(raw, &origins, &name),
        secrets: secrets(overlay, &config),
    })
}

/// `raw` with the environment laid over it and each key's origin.
fn effective(
    mut raw: RawConfig,
    own: Option<&toml::Table>,
    overlay: &Overlay,
    dir: &Path,
    config: &Config,
) -> Result<(RawConfig, Origins), Invalid> {
    let mut origins = Origins::default();
    mark_defaults(&raw, own, overlay, &mut origins);
    if let Some(listen) = &overlay.listen {
        raw.listen = listen.clone();
        origins.set("", "listen", Origin::Variable(env::LISTEN));
    } else if let Some(port) = &overlay.port {
        raw.listen = format!("0.0.0.0:{port}");
        origins.set("", "listen", Origin::Variable(env::PORT));
    }
    // Left out, it follows DATABASE_URL: said, not written, so that the text read back in
    // another environment follows that one's.
    if raw.reconcile_every.is_none() {
        let note = match config.reconcile.every {
            Some(every) => format!(
                "reconcile_every: {} (the default, as {} is set)",
                humantime::format_duration(every),
                env::DATABASE_URL
            ),
            None => format!("reconcile_every: off ({} is not set)", env::DATABASE_URL),
        };
        origins.note("", note);
    }
    // The App's id and API as validated: the variables win over the file.
    if let ForgeSettings::Github(github) = &config.forge {
        if let GithubAuth::App { app_id, .. } = &github.auth {
            raw.github.app_id = Some(*app_id);
        }
        raw.github.api_url = github.api_url.clone();
    }
    if let Some(token) = config.forge.token() {
        origins.note(
            "github",
            format!("the token: {} (never printed)", token.variable()),
        );
    }
    if overlay.github_app_id.is_some() {
        origins.set("github", "app_id", Origin::Variable(env::GITHUB_APP_ID));
    }
    if overlay.github_api_url.is_some() {
        origins.set("github", "api_url", Origin::Variable(env::GITHUB_API_URL));
    }
    if overlay.github_app_private_key.is_some() {
        raw.github.private_key_path = None;
        origins.note(
            "github",
            format!(
                "the private key: {}, which wins over private_key_path (never printed)",
                env::GITHUB_APP_PRIVATE_KEY
            ),
        );
    } else if let Some(key) = &raw.github.private_key_path {
        raw.github.private_key_path = Some(absolute(dir, key));
    }
    if let Some(path) = &raw.forge.path {
        raw.forge.path = Some(absolute(dir, path));
    }
    // The queue's own dead-letter queue, as validation named it.
    if raw.pgmq.dead_letter.is_none() {
        raw.pgmq.dead_letter = Some(config.pgmq.dead_letter.to_string());
        origins.set("pgmq", "dead_letter", Origin::Default);
    }
    for (i, route) in raw.routes.iter_mut().enumerate() {
        let table = format!("routes.{i}");
        match route.payload_template.take() {
            Some(file) => {
                let file = absolute(dir, &file);
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    invalid!(
                        "[[routes]] number {}: payload_template: cannot read {file}: {e}",
                        i + 1
                    )
                })?;
                route.payload_template_inline = Some(text);
                origins.note(
                    &table,
                    format!("payload_template_inline: the text of {file}"),
                );
            }
            None if route.payload_template_inline.is_none() => {
                origins.note(&table, "payload_template: the built-in template".to_owned());
            }
            None => {}
        }
    }
    Ok((raw, origins))
}

/// Marks each key the config's own text leaves out as a default, and for the route from the
/// environment, each key a variable set.
fn mark_defaults(
    raw: &RawConfig,
    own: Option<&toml::Table>,
    overlay: &Overlay,
    origins: &mut Origins,
) {
    let empty = toml::Table::new();
    let own = own.unwrap_or(&empty);
    let written = toml::Table::try_from(raw).expect("the config's shape serializes");
    for (key, value) in &written {
        match value {
            toml::Value::Table(table) => {
                let given = own
                    .get(key)
                    .and_then(toml::Value::as_table)
                    .unwrap_or(&empty);
                for inner in table.keys() {
                    if !given.contains_key(inner) {
                        origins.set(key, inner, Origin::Default);
                    }
                }
            }
            toml::Value::Array(_) => {
                let given = own.get(key).and_then(toml::Value::as_array);
                for (i, route) in raw.routes.iter().enumerate() {
                    let route_table =
                        toml::Table::try_from(route).expect("a route's shape serializes");
                    let given = given
                        .and_then(|routes| routes.get(i))
                        .and_then(toml::Value::as_table)
                        .unwrap_or(&empty);
                    for inner in route_table.keys() {
                        if !given.contains_key(inner) {
                            origins.set(&format!("routes.{i}"), inner, Origin::Default);
                        }
                    }
                }
            }
            _ => {
                if !own.contains_key(key) {
                    origins.set("", key, Origin::Default);
                }
            }
        }
    }
    for variable in overlay.route.set() {
        let (table, key) = match variable {
            env::PGMQ_QUEUE => ("pgmq", "queue"),
            env::REPO => ("routes.0", "repo"),
            env::TABLE => ("routes.0", "table"),
            env::SCHEMA => ("routes.0", "schema"),
            env::ID_COLUMN => ("routes.0", "id_column"),
            env::TEXT_COLUMN => ("routes.0", "text_column"),
            env::BRANCH_PREFIX => ("routes.0", "branch_prefix"),
            env::EVENT_TYPE => ("routes.0", "event_type"),
            env::INTAKE => ("routes.0", "intake"),
            _ => continue,
        };
        origins.set(table, key, Origin::Variable(variable));
    }
}

/// `path` relative to `dir` (the config's folder), made absolute against the working directory.
fn absolute(dir: &Path, path: &str) -> String {
    let joined = dir.join(path);
    std::path::absolute(&joined)
        .unwrap_or(joined)
        .display()
        .to_string()
}

/// The TOML text: a header, then the tables in the file's order, each key that is not the
/// config's own marked, each table's notes after its keys, and a route's inline template last
/// in its route, as a block that keeps its lines.
fn write(mut raw: RawConfig, origins: &Origins, source: &str) -> String {
    let templates: Vec<Option<String>> = raw
        .routes
        .iter_mut()
        .map(|route| route.payload_template_inline.take())
        .collect();
    // One `key = value` a line: `toml` writes a string's line breaks as escapes.
    let text = toml::to_string(&raw).expect("the config's shape serializes");
    let mut out = format!(
        "# The effective config (`rowbranch config`): {source}, the environment laid over it,\n\
         # every default written out, paths made absolute, a payload template file carried\n\
         # inline. Secrets are never printed.\n\n"
    );
    let mut table = String::new();
    let mut routes = 0;
    let close = |out: &mut String, table: &str| {
        for note in origins.notes.get(table).into_iter().flatten() {
            out.push_str(&format!("# {note}\n"));
        }
        if let Some(i) = table.strip_prefix("routes.") {
            let i: usize = i.parse().expect("a route's number");
            if let Some(template) = &templates[i] {
                out.push_str(&format!(
                    "payload_template_inline = {}\n",
                    multiline(template)
                ));
            }
        }
    };
    for line in text.lines() {
        let header = if line == "[[routes]]" {
            routes += 1;
            Some(format!("routes.{}", routes - 1))
        } else {
            line.strip_prefix('[')
                .and_then(|l| l.strip_suffix(']'))
                .map(str::to_owned)
        };
        if let Some(next) = header {
            close(&mut out, &table);
            table = next;
            out.push('\n');
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let key = line.split_once(" = ").map(|(key, _)| key.trim().to_owned());
        match key.and_then(|key| origins.keys.get(&(table.clone(), key))) {
            Some(Origin::Default) => out.push_str(&format!("{line}  # default\n")),
            Some(Origin::Variable(name)) => out.push_str(&format!("{line}  # env {name}\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    close(&mut out, &table);
    out
}

/// A TOML string for a template: a multi-line literal string, which keeps the text as it is
/// written, when the text allows one; otherwise a basic string with escapes.
fn multiline(text: &str) -> String {
    let literal_ok = !text.contains("'''")
        && !text.ends_with('\'')
        && text
            .chars()
            .all(|c| !c.is_control() || matches!(c, '\n' | '\t'));
    if literal_ok {
        // The newline right after the opening quotes is not part of the string.
        format!("'''\n{text}'''")
    } else {
        toml::Value::String(text.to_owned()).to_string()
    }
}

/// Whether each secret is set; never its value. The token's variable, with a token, is set:
/// a config without it does not load.
fn secrets(overlay: &Overlay, config: &Config) -> Vec<(String, &'static str)> {
    let state = |value: &Option<String>| if value.is_some() { "set" } else { "not set" };
    let mut all: Vec<(String, &'static str)> = [
        (env::WEBHOOK_SECRET, state(&overlay.webhook_secret)),
        (
            env::GITHUB_APP_PRIVATE_KEY,
            state(&overlay.github_app_private_key),
        ),
        (env::DATABASE_URL, state(&overlay.database_url)),
        (env::STATUS_PASSWORD, state(&overlay.status_password)),
    ]
    .into_iter()
    .map(|(name, state)| (name.to_owned(), state))
    .collect();
    if let Some(token) = config.forge.token() {
        all.push((token.variable().to_owned(), "set"));
    }
    all
}

#[cfg(test)]
mod tests;
