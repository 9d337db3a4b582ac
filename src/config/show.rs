//! The effective config as TOML (`rowbranch config`): the config's own keys with the
//! environment laid over them, every default written out, paths made absolute and a payload
//! template file carried inline, each key marked with where it came from when that is not the
//! config itself. What it prints is a config rowbranch reads back to the same settings, so it
//! is also the text to carry whole in `ROWBRANCH_CONFIG`. Secrets live in the environment
//! alone and are never printed: [`Shown::secrets`] says only whether each is set.

use std::path::Path;

use toml_edit::{DocumentMut, Item, Table};

use super::env::{self, Overlay};
use super::file::RawConfig;
use super::{Config, ConfigError, ForgeSettings, GithubAuth, ListenOrigin, Source};

/// What `rowbranch config` prints.
pub struct Shown {
    /// The effective config, TOML that [`Config::parse`] takes back.
    pub toml: String,
    /// Each secret variable, and whether it is set: a word, never its value.
    pub secrets: Vec<(String, &'static str)>,
}

/// `source`'s config, which validated as `config`, written out.
pub(super) fn show(source: &Source, env: &Overlay, config: &Config) -> Result<Shown, ConfigError> {
    let (mut raw, own, name) = match source {
        Source::Text { text, path } => {
            let raw: RawConfig = toml::from_str(text).expect("the config parsed once already");
            let own: toml::Table = toml::from_str(text).expect("the config parsed once already");
            (raw, own, path.display().to_string())
        }
        Source::Environment => {
            let raw = env
                .file()
                .expect("the route from the environment was made once already");
            (raw, toml::Table::new(), env::SOURCE_NAME.to_owned())
        }
    };
    let dir = config.source.parent().unwrap_or(Path::new("."));
    let absolute = |path: &str| {
        let joined = dir.join(path);
        std::path::absolute(&joined)
            .unwrap_or(joined)
            .display()
            .to_string()
    };
    // The values validation took from the environment, or worked out.
    raw.listen = config.listen.to_string();
    let mut notes = Vec::new();
    if raw.reconcile_every.is_none() {
        // Left out, it follows DATABASE_URL: said, not written, so that the text read back in
        // another environment follows that one's.
        notes.push(match config.reconcile.every {
            Some(every) => format!(
                "reconcile_every: {} (the default, as {} is set)",
                humantime::format_duration(every),
                env::DATABASE_URL
            ),
            None => format!("reconcile_every: off ({} is not set)", env::DATABASE_URL),
        });
    }
    if let ForgeSettings::Github(github) = &config.forge {
        match &github.auth {
            GithubAuth::App { app_id, .. } => raw.github.app_id = Some(*app_id),
            GithubAuth::Token(token) => {
                notes.push(format!("the token: {} (never printed)", token.variable()))
            }
        }
        raw.github.api_url = github.api_url.clone();
        // Its default depends on the credentials.
        raw.github.write_hourly_max = Some(github.pace.hourly_max);
    }
    if env.get(env::GITHUB_APP_PRIVATE_KEY).is_some() {
        raw.github.private_key_path = None;
        notes.push(format!(
            "the private key: {}, which wins over private_key_path (never printed)",
            env::GITHUB_APP_PRIVATE_KEY
        ));
    }
    raw.github.private_key_path = raw.github.private_key_path.as_deref().map(absolute);
    raw.forge.path = raw.forge.path.as_deref().map(absolute);
    raw.pgmq.dead_letter = Some(config.pgmq.dead_letter.to_string());
    // Each route's template as its text, and where that came from.
    let mut templates = Vec::new();
    for (number, route) in (1..).zip(&mut raw.routes) {
        templates.push(match route.payload_template.take() {
            Some(file) => {
                let file = absolute(&file);
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    let problem = format!("payload_template: cannot read {file}: {e}");
                    ConfigError::new(&name, invalid!("[[routes]] number {number}: {problem}"))
                })?;
                route.payload_template_inline = Some(text);
                Some(format!("the text of {file}"))
            }
            None => None,
        });
    }
    let mut doc: DocumentMut = toml::to_string(&raw)
        .expect("the config's shape serializes")
        .parse()
        .expect("toml writes TOML");
    mark(doc.as_table_mut(), &own, "", &origins(env, config));
    if let Some(Item::ArrayOfTables(routes)) = doc.get_mut("routes") {
        for (route, file) in routes.iter_mut().zip(templates) {
            match (route.get_mut("payload_template_inline"), file) {
                (Some(Item::Value(text)), Some(file)) => {
                    text.decor_mut().set_suffix(format!("  # {file}"));
                }
                (None, _) => {
                    let builtin = "\n# payload_template: the built-in template\n";
                    route.decor_mut().set_prefix(builtin);
                }
                _ => {}
            }
        }
    }
    let notes: String = notes.iter().map(|note| format!("# {note}\n")).collect();
    Ok(Shown {
        toml: format!(
            "# The effective config (`rowbranch config`): {name}, the environment laid over it,\n\
             # every default written out, paths made absolute, a payload template file carried\n\
             # inline. Secrets are never printed.\n{notes}\n{}\n",
            doc.to_string().trim_end()
        ),
        secrets: secrets(env, config),
    })
}

/// The keys the environment set, as `(table, key, variable)`: `""` is the top level and
/// `routes` the route from the environment.
fn origins(env: &Overlay, config: &Config) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut set = vec![
        ("github", "app_id", env::GITHUB_APP_ID),
        ("github", "api_url", env::GITHUB_API_URL),
        ("pgmq", "queue", env::PGMQ_QUEUE),
        ("routes", "repo", env::REPO),
        ("routes", "table", env::TABLE),
        ("routes", "schema", env::SCHEMA),
        ("routes", "id_column", env::ID_COLUMN),
        ("routes", "text_column", env::TEXT_COLUMN),
        ("routes", "branch_prefix", env::BRANCH_PREFIX),
        ("routes", "event_type", env::EVENT_TYPE),
        ("routes", "intake", env::INTAKE),
    ];
    set.retain(|(_, _, variable)| env.get(variable).is_some());
    match config.listen.origin {
        ListenOrigin::Listen => set.push(("", "listen", env::LISTEN)),
        ListenOrigin::Port => set.push(("", "listen", env::PORT)),
        ListenOrigin::File => {}
    }
    set
}

/// Marks each key of `table` (`name` in the file) that the environment set `# env NAME`, and
/// each one the config's own text (`own`) leaves out `# default`; and so on in its tables.
fn mark(table: &mut Table, own: &toml::Table, name: &str, env: &[(&str, &str, &str)]) {
    let empty = toml::Table::new();
    let own_table = |key: &str| {
        own.get(key)
            .and_then(toml::Value::as_table)
            .unwrap_or(&empty)
    };
    for (key, item) in table.iter_mut() {
        let key = key.get();
        match item {
            Item::Table(inner) => mark(inner, own_table(key), key, env),
            Item::ArrayOfTables(array) => {
                let own = own.get(key).and_then(toml::Value::as_array);
                for (i, inner) in array.iter_mut().enumerate() {
                    let own = own.and_then(|own| own.get(i)?.as_table());
                    mark(inner, own.unwrap_or(&empty), key, env);
                }
            }
            Item::Value(value) => {
                let variable = env.iter().find(|(t, k, _)| *t == name && *k == key);
                let origin = match variable {
                    Some((_, _, variable)) => format!("env {variable}"),
                    None if own.contains_key(key) => continue,
                    None => "default".to_owned(),
                };
                value.decor_mut().set_suffix(format!("  # {origin}"));
            }
            Item::None => {}
        }
    }
}

/// Whether each secret is set; never its value. The token's variable, with a token, is set:
/// a config without it does not load.
fn secrets(env: &Overlay, config: &Config) -> Vec<(String, &'static str)> {
    let variables = [
        env::WEBHOOK_SECRET,
        env::GITHUB_APP_PRIVATE_KEY,
        env::DATABASE_URL,
        env::STATUS_PASSWORD,
    ];
    let set = |name: &str| env.get(name).is_some();
    let token = config.forge.token().map(|token| token.variable());
    (variables.into_iter().map(|name| (name, set(name))))
        .chain(token.map(|name| (name, true)))
        .map(|(name, set)| (name.to_owned(), if set { "set" } else { "not set" }))
        .collect()
}

#[cfg(test)]
mod tests;
