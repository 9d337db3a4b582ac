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
//! [`Config::load`] reads the file; [`Config::parse`] only checks text.
//!
//! A new key is a field of its table in `file` with its default in the `Default` beside it, a
//! row in `docs/spec.md` §2 (`spec_tables` fails until both agree), and the field of the
//! settings it lands in, filled (and bounded, if it has bounds) in `validate`.

use std::fmt;
use std::path::Path;

/// An [`Invalid`] from `format!` arguments.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::config::Invalid(format!($($arg)*))
    };
}

pub mod env;
mod file;
mod settings;
#[cfg(test)]
mod spec_tables;
#[cfg(test)]
mod tests;
mod validate;

pub use settings::{
    Config, DatabaseUrl, ForgeSettings, GithubSettings, Intake, ListenAddress, ListenHost,
    ListenSetting, LocalSettings, PaceSettings, Password, PgmqSettings, PrivateKeySource,
    ReconcileSettings, Route, StatusPage, WebhookSettings,
};

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

/// Reads one environment variable; injected so tests and the demo need not touch the process's.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, for the binary. An empty variable counts as unset.
pub fn process_env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

impl Config {
    /// Reads and validates the file at `path`, with `env` laid over it; when there is no file
    /// there and `ROWBRANCH_REPO` is set, the route from the environment alone
    /// ([`Config::from_env`]). A file and the route's variables together are refused, naming
    /// both.
    pub fn load(path: &Path, env: Env) -> Result<Config, ConfigError> {
        let overlay = Overlay::read(env);
        let route_variables = overlay.route.set();
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return match route_variables.first() {
                    Some(&env::REPO) => Config::from_overlay(&overlay),
                    Some(_) => Err(ConfigError::new(
                        path.display(),
                        env::repo_missing(&route_variables),
                    )),
                    None => Err(ConfigError::new(
                        path.display(),
                        invalid!(
                            "cannot read the config file: {e} (pass --config FILE, or run \
                             `rowbranch init` to write one; or set {} to configure one route \
                             from the environment)",
                            env::REPO
                        ),
                    )),
                };
            }
            Err(e) => {
                return Err(ConfigError::new(
                    path.display(),
                    invalid!("cannot read the config file: {e}"),
                ))
            }
        };
        if !route_variables.is_empty() {
            return Err(ConfigError::new(
                path.display(),
                env::conflict(&route_variables),
            ));
        }
        Config::from_text(&text, path, &overlay)
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
