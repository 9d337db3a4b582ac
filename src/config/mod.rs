//! Configuration (SPEC §2): the TOML file plus the environment variables the contract names,
//! validated once — cross-field rules, and the rules `serve` adds, included — into a typed
//! [`Config`] of plain settings that the forge, the row reader and the server are each built
//! from. Three steps, one module each:
//!
//! - `file`: the file's shape, each key with its default;
//! - [`env`]: every environment variable the config takes, read once, and the route that
//!   `ROWBRANCH_REPO` writes into the file's shape in place of a file;
//! - `validate`: the two together into the settings of `settings`, re-exported here.
//!
//! [`Config::load`] reads the file (or `ROWBRANCH_CONFIG`, or the route from the environment:
//! one of them, never two); [`Config::parse`] only checks text; [`Config::show`] writes the
//! effective config back out as TOML (`show`). The environment comes in as a function that
//! reads one variable, so that tests and the demo need not touch the process's.
//!
//! A new key is a field of its table in `file` with its default in the `Default` beside it, a
//! row in `docs/spec.md` §2 (`spec_tests` fails until both agree), and the field of the
//! settings it lands in, filled (and bounded, if it has bounds) in `validate`.

use std::fmt;
use std::path::{Path, PathBuf};

/// A [`ConfigError`] from `format!` arguments.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::config::ConfigError(format!($($arg)*), None)
    };
}

/// Refuses with a [`ConfigError`] from `format!` arguments unless `$cond` holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(invalid!($($arg)*));
        }
    };
}

pub mod env;
mod file;
mod settings;
mod show;
#[cfg(test)]
mod spec_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod token_tests;
mod validate;

pub use settings::{
    AccessToken, Config, ForgeSettings, GithubAuth, GithubSettings, Intake, ListenAddress,
    ListenHost, ListenOrigin, LocalSettings, PaceSettings, PayloadTemplateSource, PgmqSettings,
    PrivateKeySource, ReconcileSettings, Redacted, Route, RunWhen, StatusPage, WebhookSettings,
    DEFAULT_MAX_TURNS, DEFAULT_QUEUE_BYTES, DEFAULT_WORK_TIMEOUT_MINUTES, MAX_WORK_TIMEOUT_MINUTES,
};
pub use show::Shown;
pub use validate::{sweep_from_now, Insecure};

use env::Overlay;

/// Where `serve`, `preview` and the other commands look when `--config` is not given.
pub const DEFAULT_PATH: &str = "rowbranch.toml";

/// A configuration problem, worded for whoever writes the config: names the file, the key
/// where it can, and how to fix it. A problem in the value of a key the route from the
/// environment can set carries that key, as `(table, key)` of [`env::ROUTE`], so that the
/// route from the environment names the variable instead.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String, Option<(&'static str, &'static str, String)>);

impl ConfigError {
    /// This problem, inside `context`: `[[routes]] number 2: …`, or the file.
    fn within(self, context: impl fmt::Display) -> ConfigError {
        ConfigError(format!("{context}: {}", self.0), self.1)
    }

    /// This problem, in the value of `key` in `[table]` (`routes` for a route's own keys).
    /// The problem's own words are kept beside, for the variable that set the key to stand in
    /// front of them instead of the file's place (`[[routes]] number 1`).
    fn in_key(self, table: &'static str, key: &'static str) -> ConfigError {
        let bare = self.0.clone();
        ConfigError(self.0, Some((table, key, bare)))
    }
}

/// Where a config comes from, before it is validated: one of three, never two.
enum Source {
    /// TOML text: the file's at `--config`, or `ROWBRANCH_CONFIG`'s. `path` names it in
    /// messages, and its folder anchors relative paths (the working directory for the
    /// variable's).
    Text { text: String, path: PathBuf },
    /// The one route that `ROWBRANCH_REPO` and its companions describe.
    Environment,
}

impl Source {
    /// The file at `path`, else `ROWBRANCH_CONFIG`, else the route's variables; two of them
    /// together are refused, naming both and how to keep one.
    fn find(path: &Path, overlay: &Overlay) -> Result<Source, ConfigError> {
        let route = overlay.route_variables();
        let names = route.join(", ");
        let config = overlay.get(env::CONFIG);
        let problem = match (std::fs::read_to_string(path), config, route.first()) {
            (Ok(_), Some(_), _) => invalid!(
                "{} holds a config, and this file is one too: rowbranch takes one config. To use \
                 the file, unset {0}; to use the variable, remove the file (or move it away from \
                 where --config points)",
                env::CONFIG
            ),
            (Ok(_), None, Some(_)) => invalid!(
                "{names} configure a route from the environment, and this file configures the \
                 routes too: to use the file, unset {names}; to use the environment, remove the \
                 file (or move it away from where --config points)"
            ),
            (Ok(text), None, None) => {
                let path = path.to_owned();
                return Ok(Source::Text { text, path });
            }
            (Err(e), ..) if e.kind() != std::io::ErrorKind::NotFound => {
                invalid!("cannot read the config file: {e}")
            }
            (Err(_), Some(_), Some(_)) => {
                let problem = invalid!(
                    "{} holds a config, and {names} configure a route from the environment too: \
                     rowbranch takes one config. Unset {names}, and put the route in {0}'s \
                     [[routes]]",
                    env::CONFIG
                );
                return Err(problem.within(env::CONFIG));
            }
            (Err(_), Some(text), None) => {
                let (text, path) = (text.to_owned(), PathBuf::from(env::CONFIG));
                return Ok(Source::Text { text, path });
            }
            (Err(_), None, Some(&env::REPO)) => return Ok(Source::Environment),
            (Err(_), None, Some(_)) => invalid!(
                "there is no config file here, and {names} is set but {} is not: set {0}=owner/name \
                 to configure the route from the environment, or write the config file",
                env::REPO
            ),
            (Err(e), None, None) => invalid!(
                "cannot read the config file: {e} (pass --config FILE, or run `rowbranch init` to \
                 write one; or set {} to the config's text, or {} to configure one route from the \
                 environment)",
                env::CONFIG,
                env::REPO
            ),
        };
        Err(problem.within(path.display()))
    }

    /// The file's shape this source holds: its text's, or the one the route's variables write.
    fn raw(&self, overlay: &Overlay) -> Result<file::RawConfig, ConfigError> {
        match self {
            Source::Text { text, .. } => {
                toml::from_str(text).map_err(|e| invalid!("{}", e.to_string().trim_end()))
            }
            Source::Environment => overlay.file(),
        }
    }

    /// What messages about this source name: the file, `ROWBRANCH_CONFIG`, or the environment;
    /// and the path its relative paths are relative to.
    fn names(&self) -> (String, &Path) {
        match self {
            Source::Text { path, .. } => (path.display().to_string(), path),
            Source::Environment => (env::SOURCE_NAME.to_owned(), Path::new(env::SOURCE)),
        }
    }

    /// The config this source holds, with the environment laid over it; with `serve`, the
    /// rules it adds too.
    fn validate(&self, overlay: &Overlay, serve: Option<Insecure>) -> Result<Config, ConfigError> {
        let (name, path) = self.names();
        self.raw(overlay)
            .and_then(|raw| validate::config(raw, overlay, path, serve))
            .map_err(|e| match self {
                Source::Text { .. } => e.within(name),
                Source::Environment => env::by_variable(e).within(name),
            })
    }
}

/// The process environment, for the binary. An empty variable counts as unset.
pub fn process_env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

impl Config {
    /// Reads and validates the file at `path`, with `env` laid over it. When there is no file
    /// there, the config is `ROWBRANCH_CONFIG`'s text, or else, when `ROWBRANCH_REPO` is set,
    /// the route from the environment alone (SPEC §2 "One route from the environment"). Two of
    /// these together are refused, naming both.
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let overlay = Overlay::read(env);
        Source::find(path, &overlay)?.validate(&overlay, None)
    }

    /// [`Config::load`] for `serve`, with the rules it adds: the secrets and the database its
    /// parts need, unless `insecure` lets it do without (SPEC §2, §3).
    pub fn load_for_serve(
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
        insecure: Insecure,
    ) -> Result<Config, ConfigError> {
        let overlay = Overlay::read(env);
        Source::find(path, &overlay)?.validate(&overlay, Some(insecure))
    }

    /// What `rowbranch config` prints: the config [`Config::load`] would load, with the
    /// environment laid over it and every default written out, as TOML that
    /// [`Config::parse`] takes back; secrets only as set or not.
    pub fn show(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Shown, ConfigError> {
        let overlay = Overlay::read(env);
        let source = Source::find(path, &overlay)?;
        // Validated first, exactly as the commands do: a config that does not load says why.
        let config = source.validate(&overlay, None)?;
        show::show(&source, &overlay, &config)
    }

    /// Validates `text` as if read from `path` (relative paths are relative to its folder).
    /// Reads no file.
    pub fn parse(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let (text, path) = (text.to_owned(), path.to_owned());
        Source::Text { text, path }.validate(&Overlay::read(env), None)
    }
}

/// Where `serve` listens, as written, and the setting that chose it (`ROWBRANCH_LISTEN`,
/// `PORT`, `listen in FILE` or `the default`): what `rowbranch healthcheck` asks. Found by the
/// lookup `serve`'s config makes, without validating anything: of the config (the file at
/// `path`, or `ROWBRANCH_CONFIG`) only `listen` is read, and a config that does not parse
/// counts as one without it.
pub fn listen_as_written(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> (String, String) {
    let overlay = Overlay::read(env);
    let (text, name) = match std::fs::read_to_string(path) {
        Ok(text) => (Some(text), path.display().to_string()),
        Err(_) => (
            overlay.get(env::CONFIG).map(str::to_owned),
            env::CONFIG.to_owned(),
        ),
    };
    let written = text
        .and_then(|text| text.parse::<toml::Table>().ok())
        .and_then(|table| table.get("listen")?.as_str().map(str::to_owned));
    let default = file::RawConfig::default().listen;
    let (address, origin) = overlay.listen(written.clone().unwrap_or(default));
    let from = match (origin, written) {
        (ListenOrigin::File, Some(_)) => format!("listen in {name}"),
        (ListenOrigin::File, None) => "the default".to_owned(),
        (origin, _) => origin.to_string(),
    };
    (address, from)
}

/// One local route, `public.feedbacks` → `acme/app` with branches `feedback/…`: the config the
/// unit tests of this module and of those built on it start from.
#[cfg(test)]
pub(crate) const TEST_LOCAL_CONFIG: &str = r#"
    [forge]
    kind = "local"
    path = "repo.git"
    [[routes]]
    table = "feedbacks"
    repo = "acme/app"
    branch_prefix = "feedback"
    event_type = "feedback"
"#;
