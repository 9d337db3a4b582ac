//! Configuration (SPEC §2): the TOML file plus the environment variables the contract names,
//! validated once into a typed [`Config`] of plain settings that the forge, the row reader and
//! the server are each built from. Three steps, one module each:
//!
//! - `file`: the file's shape, each key with its default;
//! - [`env`]: every environment variable the config takes, read once through an injected
//!   [`Env`] (so tests and the demo need not touch the process's), and the route that
//!   `ROWBRANCH_REPO` writes into the file's shape in place of a file;
//! - `validate`: the two together into the settings of `settings`, re-exported here.
//!
//! [`Config::load`] reads the file (or `ROWBRANCH_CONFIG`, or the route from the environment:
//! one of them, never two); [`Config::parse`] only checks text; [`Config::show`] writes the
//! effective config back out as TOML (`show`).
//!
//! A new key is a field of its table in `file` with its default in the `Default` beside it, a
//! row in `docs/spec.md` §2 (`spec_tables` fails until both agree), and the field of the
//! settings it lands in, filled (and bounded, if it has bounds) in `validate`.

use std::fmt;
use std::path::{Path, PathBuf};

/// An [`Invalid`] from `format!` arguments.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::config::Invalid(format!($($arg)*))
    };
}

pub mod env;
mod file;
mod settings;
mod show;
#[cfg(test)]
mod spec_tables;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod token_tests;
mod validate;

pub use settings::{
    AccessToken, Config, DatabaseUrl, ForgeSettings, GithubAuth, GithubSettings, Intake,
    ListenAddress, ListenHost, ListenOrigin, LocalSettings, PaceSettings, Password,
    PayloadTemplateSource, PgmqSettings, PrivateKeySource, ReconcileSettings, Route, StatusPage,
    WebhookSettings, DEFAULT_MAX_TURNS, DEFAULT_QUEUE_BYTES, DEFAULT_RECONCILE_EVERY,
    DEFAULT_WORK_TIMEOUT_MINUTES, MAX_WORK_TIMEOUT_MINUTES, MIN_QUEUE_BYTES,
};

pub use show::Shown;

use env::Overlay;

/// Where `serve`, `preview` and the other commands look when `--config` is not given.
pub const DEFAULT_PATH: &str = "rowbranch.toml";

/// A configuration problem: names the file, the key where it can, and how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    file: String,
    message: String,
}

impl ConfigError {
    fn new(file: impl fmt::Display, problem: Invalid) -> ConfigError {
        ConfigError {
            file: file.to_string(),
            message: problem.0,
        }
    }
}

/// Why a config was refused, worded for whoever writes it; [`ConfigError`] names the file.
#[derive(Debug)]
struct Invalid(String);

impl Invalid {
    /// This problem, inside `context`: `[[routes]] number 2: …`.
    fn within(self, context: impl fmt::Display) -> Invalid {
        Invalid(format!("{context}: {}", self.0))
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
    fn find(path: &Path, overlay: &Overlay) -> Result<Source, ConfigError> {
        let route_variables = overlay.route.set();
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let refused = if overlay.config.is_some() {
                    Some(env::config_and_file())
                } else if !route_variables.is_empty() {
                    Some(env::conflict(&route_variables))
                } else {
                    None
                };
                match refused {
                    Some(problem) => Err(ConfigError::new(path.display(), problem)),
                    None => Ok(Source::Text {
                        text,
                        path: path.to_owned(),
                    }),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match (&overlay.config, route_variables.first()) {
                    (Some(_), Some(_)) => Err(ConfigError::new(
                        env::CONFIG,
                        env::config_and_route(&route_variables),
                    )),
                    (Some(text), None) => Ok(Source::Text {
                        text: text.clone(),
                        path: PathBuf::from(env::CONFIG),
                    }),
                    (None, Some(&env::REPO)) => Ok(Source::Environment),
                    (None, Some(_)) => Err(ConfigError::new(
                        path.display(),
                        env::repo_missing(&route_variables),
                    )),
                    (None, None) => Err(ConfigError::new(
                        path.display(),
                        invalid!(
                            "cannot read the config file: {e} (pass --config FILE, or run \
                             `rowbranch init` to write one; or set {} to the config's text, or \
                             {} to configure one route from the environment)",
                            env::CONFIG,
                            env::REPO
                        ),
                    )),
                }
            }
            Err(e) => Err(ConfigError::new(
                path.display(),
                invalid!("cannot read the config file: {e}"),
            )),
        }
    }
}

/// Reads one environment variable; injected so tests and the demo need not touch the process's.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, for the binary. An empty variable counts as unset.
pub fn process_env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

impl Config {
    /// Reads and validates the file at `path`, with `env` laid over it. When there is no file
    /// there, the config is `ROWBRANCH_CONFIG`'s text, or else, when `ROWBRANCH_REPO` is set,
    /// the route from the environment alone ([`Config::from_env`]). Two of these together are
    /// refused, naming both.
    pub fn load(path: &Path, env: Env) -> Result<Config, ConfigError> {
        let overlay = Overlay::read(env);
        match Source::find(path, &overlay)? {
            Source::Text { text, path } => Config::from_text(&text, &path, &overlay),
            Source::Environment => Config::from_overlay(&overlay),
        }
    }

    /// What `rowbranch config` prints: the config [`Config::load`] would load, with the
    /// environment laid over it and every default written out, as TOML that
    /// [`Config::parse`] takes back; secrets only as set or not.
    pub fn show(path: &Path, env: Env) -> Result<Shown, ConfigError> {
        show::show(path, &Overlay::read(env))
    }

    /// Validates `text` as if read from `path` (relative paths are relative to its folder).
    /// Reads no file.
    pub fn parse(text: &str, path: &Path, env: Env) -> Result<Config, ConfigError> {
        Config::from_text(text, path, &Overlay::read(env))
    }

    /// The config of the one route the environment describes (SPEC §2 "One route from the
    /// environment"), with every other key at its default. Reads no file.
    pub fn from_env(env: Env) -> Result<Config, ConfigError> {
        Config::from_overlay(&Overlay::read(env))
    }

    fn from_text(text: &str, path: &Path, overlay: &Overlay) -> Result<Config, ConfigError> {
        let raw: file::RawConfig = toml::from_str(text).map_err(|e| {
            ConfigError::new(path.display(), Invalid(e.to_string().trim_end().to_owned()))
        })?;
        validate::config(raw, overlay, path).map_err(|e| ConfigError::new(path.display(), e))
    }

    fn from_overlay(overlay: &Overlay) -> Result<Config, ConfigError> {
        overlay
            .route
            .file(overlay)
            .and_then(|raw| validate::config(raw, overlay, Path::new(env::SOURCE)))
            .map_err(|e| ConfigError::new(env::SOURCE_NAME, e))
    }
}

/// Where `serve` listens, as written, and the setting that says so: what `rowbranch
/// healthcheck` asks. Found the way `serve` finds it — `ROWBRANCH_LISTEN`, else `PORT`, else
/// the config's `listen`, else the default — without validating anything: of the config (the
/// file at `path`, or `ROWBRANCH_CONFIG`) only `listen` is read, and a config that does not
/// parse counts as one without it.
pub struct ListenSetting {
    /// `HOST:PORT`, unchecked.
    pub address: String,
    /// `ROWBRANCH_LISTEN`, `PORT`, `listen in FILE` or `the default`.
    pub from: String,
}

impl ListenSetting {
    pub fn find(path: &Path, env: Env) -> ListenSetting {
        let overlay = Overlay::read(env);
        if let Some(address) = overlay.listen {
            return ListenSetting {
                address,
                from: env::LISTEN.to_owned(),
            };
        }
        if let Some(port) = overlay.port {
            return ListenSetting {
                address: format!("0.0.0.0:{port}"),
                from: env::PORT.to_owned(),
            };
        }
        let (text, name) = match std::fs::read_to_string(path) {
            Ok(text) => (Some(text), path.display().to_string()),
            Err(_) => (overlay.config, env::CONFIG.to_owned()),
        };
        let written = text
            .and_then(|text| text.parse::<toml::Table>().ok())
            .and_then(|table| table.get("listen")?.as_str().map(str::to_owned));
        match written {
            Some(address) => ListenSetting {
                address,
                from: format!("listen in {name}"),
            },
            None => ListenSetting {
                address: file::RawConfig::default().listen,
                from: "the default".to_owned(),
            },
        }
    }
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
