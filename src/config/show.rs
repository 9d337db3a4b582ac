//! The effective config as TOML (`rowbranch config`): the config's own keys with the
//! environment laid over them, every default written out, paths made absolute and a payload
//! template file carried inline, each key marked with where it came from when that is not the
//! config itself. What it prints is a config rowbranch reads back to the same settings, so it
//! is also the text to carry whole in `ROWBRANCH_CONFIG`. Secrets live in the environment
//! alone and are never printed: [`Shown::secrets`] says only whether each is set.

use std::path::Path;

use toml_edit::{DocumentMut, Item, Table};

use super::env::{self, Overlay};
use super::{
    Config, ConfigError, ForgeSettings, GithubAuth, ListenOrigin, PayloadTemplateSource,
    PrivateKeySource, Source,
};

/// What `rowbranch config` prints.
pub struct Shown {
    /// The effective config, TOML that [`Config::parse`] takes back.
    pub toml: String,
    /// Each secret variable, and whether it is set: a word, never its value.
    pub secrets: Vec<(String, &'static str)>,
}

/// `source`'s config, which validated as `config`, written out.
pub(super) fn show(source: &Source, env: &Overlay, config: &Config) -> Result<Shown, ConfigError> {
    let parsed = "the config was read once already";
    let mut raw = source.raw(env).expect(parsed);
    let own: toml::Table = match source {
        Source::Text { text, .. } => toml::from_str(text).expect(parsed),
        Source::Environment => toml::Table::new(),
    };
    let (name, _) = source.names();
    let absolute = |path: &Path| {
        let absolute = std::path::absolute(path);
        absolute.as_deref().unwrap_or(path).display().to_string()
    };
    // What validation took from the environment or worked out, and the paths it resolved.
    raw.listen = config.listen.to_string();
    raw.pgmq.dead_letter = Some(config.pgmq.dead_letter.to_string());
    let mut notes = Vec::new();
    if raw.reconcile_every.is_none() {
        // Left out, it follows DATABASE_URL: said, not written, so that the text read back in
        // another environment follows that one's.
        let every = config.reconcile.every.map(humantime::format_duration);
        notes.push(match every {
            Some(every) => {
                format!("reconcile_every: {every} (the default, as DATABASE_URL is set)")
            }
            None => "reconcile_every: off (DATABASE_URL is not set)".to_owned(),
        });
    }
    match &config.forge {
        ForgeSettings::Local(local) => raw.forge.path = Some(absolute(&local.path)),
        ForgeSettings::Github(github) => {
            raw.github.api_url = github.api_url.clone();
            // Its default depends on the credentials.
            raw.github.write_hourly_max = Some(github.pace.hourly_max);
            match &github.auth {
                GithubAuth::App { app_id, key } => {
                    raw.github.app_id = Some(*app_id);
                    raw.github.private_key_path = match key {
                        PrivateKeySource::File(path) => Some(absolute(path)),
                        PrivateKeySource::Pem(_) => {
                            notes.push(format!(
                                "the private key: {}, which wins over private_key_path (never \
                                 printed)",
                                env::GITHUB_APP_PRIVATE_KEY
                            ));
                            None
                        }
                    };
                }
                GithubAuth::Token(token) => {
                    notes.push(format!("the token: {} (never printed)", token.variable()));
                }
            }
        }
    }
    let mut doc: DocumentMut = toml::to_string(&raw)
        .expect("the config's shape serializes")
        .parse()
        .expect("toml writes TOML");
    mark(doc.as_table_mut(), &own, "", &origins(env, config));
    // Each route's template travels as its text, with where it came from.
    let routes = doc.get_mut("routes").and_then(Item::as_array_of_tables_mut);
    for (number, route) in routes
        .into_iter()
        .flat_map(|routes| (1..).zip(routes.iter_mut()))
    {
        match &config.routes[number - 1].payload_template {
            Some(PayloadTemplateSource::File(file)) => {
                let file = absolute(file);
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    let problem = format!("payload_template: cannot read {file}: {e}");
                    invalid!("[[routes]] number {number}: {problem}").within(&name)
                })?;
                route.remove("payload_template");
                let mut text = toml_edit::Value::from(text);
                text.decor_mut()
                    .set_suffix(format!("  # the text of {file}"));
                route.insert("payload_template_inline", Item::Value(text));
            }
            Some(PayloadTemplateSource::Inline(_)) => {}
            None => route
                .decor_mut()
                .set_prefix("\n# payload_template: the built-in template\n"),
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

/// The keys the environment set, as `(variable, table, key)`: `""` is the top level and
/// `routes` the route from the environment.
fn origins(env: &Overlay, config: &Config) -> Vec<(&'static str, &'static str, &'static str)> {
    let github = [
        (env::GITHUB_APP_ID, "github", "app_id"),
        (env::GITHUB_API_URL, "github", "api_url"),
    ];
    let mut set: Vec<_> = github.into_iter().chain(env::ROUTE).collect();
    set.retain(|(variable, ..)| env.get(variable).is_some());
    if config.listen.origin != ListenOrigin::File {
        set.push((config.listen.origin.as_str(), "", "listen"));
    }
    set
}

/// Marks each key of `table` (`name` in the file) that the environment set `# env NAME`, and
/// each one the config's own text (`own`) leaves out `# default`; and so on in its tables.
fn mark(table: &mut Table, own: &toml::Table, name: &str, env: &[(&str, &str, &str)]) {
    let empty = toml::Table::new();
    for (key, item) in table.iter_mut() {
        let key = key.get();
        let own = own.get(key);
        match item {
            Item::Table(inner) => {
                let own = own.and_then(toml::Value::as_table);
                mark(inner, own.unwrap_or(&empty), key, env);
            }
            Item::ArrayOfTables(array) => {
                let own = own.and_then(toml::Value::as_array);
                for (i, inner) in array.iter_mut().enumerate() {
                    let own = own.and_then(|own| own.get(i)?.as_table());
                    mark(inner, own.unwrap_or(&empty), key, env);
                }
            }
            Item::Value(value) => {
                let variable = env.iter().find(|(_, t, k)| *t == name && *k == key);
                let origin = match variable {
                    Some((variable, ..)) => format!("env {variable}"),
                    None if own.is_some() => continue,
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
        env::GITHUB_WEBHOOK_SECRET,
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
