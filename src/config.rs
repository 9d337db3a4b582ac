//! Configuration: the TOML file plus environment variables, validated once into a typed
//! [`Config`]. This is the only module that reads the environment.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::forge::RepoName;
use crate::identity::BranchPrefix;
use crate::templates::PayloadTemplate;
use crate::webhook::auth::WebhookSecrets;

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
    fn new(file: &Path, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.display().to_string(),
            message: message.into(),
        }
    }
}

/// Reads one environment variable; injected so tests and the demo need not touch the process's.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, for the binary.
pub fn process_env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

#[derive(Debug)]
pub struct Config {
    /// The file this came from, for messages.
    pub source: PathBuf,
    pub listen: SocketAddr,
    pub reconcile: ReconcileConfig,
    pub forge: ForgeConfig,
    pub webhook: WebhookConfig,
    pub routes: Vec<Arc<Route>>,
    /// `DATABASE_URL`: where `reconcile` and `redo` read the rows. Environment only.
    pub database_url: Option<DatabaseUrl>,
}

/// A database connection string; it carries a password, so it never prints.
#[derive(Clone)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(<redacted>)")
    }
}

#[derive(Debug, Clone)]
pub struct ReconcileConfig {
    /// A sweep on a schedule inside `serve`; off when `None`.
    pub every: Option<Duration>,
    pub window: Duration,
    pub stale_claim_after: Duration,
}

#[derive(Debug)]
pub enum ForgeConfig {
    Local {
        path: PathBuf,
        on_dispatch: Option<String>,
    },
    Github(GithubConfig),
}

#[derive(Debug)]
pub struct GithubConfig {
    pub app_id: u64,
    /// Where the key comes from; read when the GitHub forge starts.
    pub private_key: PrivateKeySource,
    pub api_url: String,
    pub write_interval: Duration,
    pub write_burst: u32,
    pub write_hourly_max: u32,
    pub queue_capacity: usize,
    pub retry_budget: Duration,
    /// How long the default branch's head is reused for new claims.
    pub base_cache: Duration,
}

/// The App's private key: PEM text from the environment, or a file. Never printed.
pub enum PrivateKeySource {
    Pem(String),
    File(PathBuf),
}

impl std::fmt::Debug for PrivateKeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrivateKeySource::Pem(_) => f.write_str("Pem(<redacted>)"),
            PrivateKeySource::File(path) => write!(f, "File({})", path.display()),
        }
    }
}

#[derive(Debug)]
pub struct WebhookConfig {
    /// `None` only when no secret is set; `serve` then needs `--insecure-no-auth`.
    pub secrets: Option<WebhookSecrets>,
    pub respond_within: Duration,
    pub max_body_bytes: usize,
}

/// The kinds of database event a route can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Insert,
    Update,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Insert => "INSERT",
            EventKind::Update => "UPDATE",
        }
    }
}

/// One table wired to one repository.
#[derive(Debug)]
pub struct Route {
    pub table: String,
    pub schema: String,
    pub repo: RepoName,
    pub events: Vec<EventKind>,
    pub id_column: String,
    pub text_column: Option<String>,
    pub branch_prefix: BranchPrefix,
    pub slug_max_len: usize,
    pub event_type: String,
    pub payload_template: PayloadTemplate,
    pub created_column: String,
}

// ---- The file as written -------------------------------------------------------------------

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    reconcile_every: Option<String>,
    reconcile_window: Option<String>,
    stale_claim_after: Option<String>,
    forge: Option<RawForge>,
    github: Option<RawGithub>,
    webhook: Option<RawWebhook>,
    #[serde(default)]
    routes: Vec<RawRoute>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawForge {
    kind: Option<String>,
    path: Option<String>,
    on_dispatch: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawGithub {
    app_id: Option<u64>,
    private_key_path: Option<String>,
    api_url: Option<String>,
    write_interval_ms: Option<u64>,
    write_burst: Option<u32>,
    write_hourly_max: Option<u32>,
    queue_capacity: Option<usize>,
    retry_budget_ms: Option<u64>,
    base_cache_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    /// Present only to refuse it with a better message than "unknown key".
    secret: Option<toml::Value>,
    respond_within_ms: Option<u64>,
    max_body_bytes: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    table: Option<String>,
    schema: Option<String>,
    repo: Option<String>,
    events: Option<Vec<String>>,
    id_column: Option<String>,
    text_column: Option<String>,
    branch_prefix: Option<String>,
    slug_max_len: Option<usize>,
    event_type: Option<String>,
    payload_template: Option<String>,
    created_column: Option<String>,
}

// ---- Loading -------------------------------------------------------------------------------

impl Config {
    /// Reads and validates the file at `path`, with `env` layered on top.
    pub fn load(path: &Path, env: Env) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::NotFound {
                " (pass --config FILE, or write one: templates/rowbranch.toml is an example)"
            } else {
                ""
            };
            ConfigError::new(path, format!("cannot read the config file: {e}{hint}"))
        })?;
        Config::parse(&text, path, env)
    }

    /// Validates `text` as if read from `path` (relative paths are relative to its folder).
    pub fn parse(text: &str, path: &Path, env: Env) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text)
            .map_err(|e| ConfigError::new(path, e.to_string().trim_end().to_owned()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let err = |message: String| ConfigError::new(path, message);

        let listen = listen_address(raw.listen.as_deref(), env).map_err(err)?;
        let reconcile = ReconcileConfig {
            every: raw
                .reconcile_every
                .as_deref()
                .map(|v| duration("reconcile_every", v))
                .transpose()
                .map_err(err)?,
            window: duration(
                "reconcile_window",
                raw.reconcile_window.as_deref().unwrap_or("48h"),
            )
            .map_err(err)?,
            stale_claim_after: duration(
                "stale_claim_after",
                raw.stale_claim_after.as_deref().unwrap_or("1h"),
            )
            .map_err(err)?,
        };
        let forge = forge(raw.forge.unwrap_or_default(), raw.github, dir, env).map_err(err)?;
        let webhook = webhook(raw.webhook.unwrap_or_default(), env).map_err(err)?;
        if raw.routes.is_empty() {
            return Err(err(
                "no [[routes]]: add one that names the table and the repository, e.g.\n\n[[routes]]\ntable = \"feedbacks\"\nrepo = \"owner/name\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\"".into(),
            ));
        }
        let mut routes = Vec::with_capacity(raw.routes.len());
        let mut seen = HashSet::new();
        for (i, raw_route) in raw.routes.into_iter().enumerate() {
            let route = route(raw_route, dir)
                .map_err(|m| err(format!("[[routes]] number {}: {m}", i + 1)))?;
            if !seen.insert((route.schema.clone(), route.table.clone())) {
                return Err(err(format!(
                    "[[routes]] number {}: table {}.{} has a route already; one table takes one route",
                    i + 1,
                    route.schema,
                    route.table
                )));
            }
            routes.push(Arc::new(route));
        }
        Ok(Config {
            source: path.to_path_buf(),
            listen,
            reconcile,
            forge,
            webhook,
            routes,
            database_url: env("DATABASE_URL").map(DatabaseUrl),
        })
    }

    /// The route whose table is `table` (`schema.table` or a bare table name), for `redo`.
    pub fn route_for_table(&self, table: &str) -> Option<&Arc<Route>> {
        self.routes.iter().find(|r| match table.split_once('.') {
            Some((schema, name)) => r.schema == schema && r.table == name,
            None => r.table == table,
        })
    }

    /// The route for a table, if one takes it.
    pub fn route(&self, schema: &str, table: &str) -> Option<&Arc<Route>> {
        self.routes
            .iter()
            .find(|r| r.schema == schema && r.table == table)
    }
}

fn listen_address(file: Option<&str>, env: Env) -> Result<SocketAddr, String> {
    if let Some(addr) = env("ROWBRANCH_LISTEN") {
        return addr.parse().map_err(|_| {
            format!(
                "ROWBRANCH_LISTEN=`{addr}` is not an address: use HOST:PORT, e.g. 127.0.0.1:8080"
            )
        });
    }
    if let Some(port) = env("PORT") {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("PORT=`{port}` is not a port number (0-65535)"))?;
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    let addr = file.unwrap_or("127.0.0.1:8080");
    addr.parse().map_err(|_| {
        format!("listen = `{addr}` is not an address: use HOST:PORT, e.g. 127.0.0.1:8080")
    })
}

fn duration(key: &str, value: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(value).map_err(|e| {
        format!("{key} = \"{value}\" is not a duration ({e}): write e.g. \"30m\", \"6h\" or \"2d\"")
    })?;
    if d.is_zero() {
        return Err(format!("{key} must be longer than zero"));
    }
    Ok(d)
}

fn forge(
    raw: RawForge,
    github: Option<RawGithub>,
    dir: &Path,
    env: Env,
) -> Result<ForgeConfig, String> {
    match raw.kind.as_deref().unwrap_or("github") {
        "local" => {
            let path = raw.path.ok_or(
                "[forge] kind = \"local\" needs path = \"…\", the git repository to use as the forge",
            )?;
            Ok(ForgeConfig::Local {
                path: dir.join(path),
                on_dispatch: raw.on_dispatch.filter(|c| !c.trim().is_empty()),
            })
        }
        "github" => {
            if raw.path.is_some() || raw.on_dispatch.is_some() {
                return Err("[forge] path and on_dispatch belong to kind = \"local\"; remove them or set kind = \"local\"".into());
            }
            github_config(github.unwrap_or_default(), dir, env).map(ForgeConfig::Github)
        }
        other => Err(format!(
            "[forge] kind = \"{other}\" is not a forge: use \"github\" or \"local\""
        )),
    }
}

fn github_config(raw: RawGithub, dir: &Path, env: Env) -> Result<GithubConfig, String> {
    let app_id = match env("GITHUB_APP_ID") {
        Some(v) => v
            .parse()
            .map_err(|_| format!("GITHUB_APP_ID=`{v}` is not a number: use the App ID from the App's settings page"))?,
        None => raw.app_id.ok_or(
            "[github] app_id is missing: set it (the App ID from the App's settings page) or set GITHUB_APP_ID",
        )?,
    };
    let private_key = match (env("GITHUB_APP_PRIVATE_KEY"), raw.private_key_path) {
        (Some(pem), _) => PrivateKeySource::Pem(pem),
        (None, Some(path)) => PrivateKeySource::File(dir.join(path)),
        (None, None) => {
            return Err("no GitHub App private key: set [github] private_key_path or GITHUB_APP_PRIVATE_KEY (the PEM text)".into())
        }
    };
    let api_url = env("GITHUB_API_URL")
        .or(raw.api_url)
        .unwrap_or_else(|| "https://api.github.com".into());
    if !(api_url.starts_with("https://") || api_url.starts_with("http://")) {
        return Err(format!(
            "api_url = `{api_url}` is not an http(s) URL: use https://api.github.com or https://HOST/api/v3"
        ));
    }
    let positive = |key: &str, v: u64| {
        if v == 0 {
            Err(format!("[github] {key} must be at least 1"))
        } else {
            Ok(v)
        }
    };
    Ok(GithubConfig {
        app_id,
        private_key,
        api_url: api_url.trim_end_matches('/').to_owned(),
        write_interval: Duration::from_millis(raw.write_interval_ms.unwrap_or(1000)),
        write_burst: positive("write_burst", raw.write_burst.unwrap_or(10).into())? as u32,
        write_hourly_max: positive(
            "write_hourly_max",
            raw.write_hourly_max.unwrap_or(450).into(),
        )? as u32,
        queue_capacity: positive(
            "queue_capacity",
            raw.queue_capacity.unwrap_or(10_000) as u64,
        )? as usize,
        retry_budget: Duration::from_millis(raw.retry_budget_ms.unwrap_or(30_000)),
        base_cache: Duration::from_millis(raw.base_cache_ms.unwrap_or(10_000)),
    })
}

fn webhook(raw: RawWebhook, env: Env) -> Result<WebhookConfig, String> {
    if raw.secret.is_some() {
        return Err("[webhook] secret: the secret is never read from the file; set ROWBRANCH_WEBHOOK_SECRET instead".into());
    }
    let secrets = env("ROWBRANCH_WEBHOOK_SECRET")
        .map(|raw| WebhookSecrets::parse(&raw))
        .transpose()
        .map_err(|e| format!("ROWBRANCH_WEBHOOK_SECRET: {e}"))?;
    let max_body_bytes = raw.max_body_bytes.unwrap_or(262_144);
    if max_body_bytes < 1024 {
        return Err("[webhook] max_body_bytes must be at least 1024".into());
    }
    Ok(WebhookConfig {
        secrets,
        respond_within: Duration::from_millis(raw.respond_within_ms.unwrap_or(800)),
        max_body_bytes,
    })
}

fn route(raw: RawRoute, dir: &Path) -> Result<Route, String> {
    let required = |value: Option<String>, key: &str, example: &str| {
        value
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| format!("`{key}` is missing: e.g. {key} = \"{example}\""))
    };
    let table = required(raw.table, "table", "feedbacks")?;
    let repo = required(raw.repo, "repo", "owner/name")?;
    let repo = RepoName::parse(&repo).map_err(|e| format!("repo: {e}"))?;
    let prefix = required(raw.branch_prefix, "branch_prefix", "feedback")?;
    let branch_prefix =
        BranchPrefix::parse(&prefix).map_err(|e| format!("branch_prefix = \"{prefix}\": {e}"))?;
    let slug_max_len = raw.slug_max_len.unwrap_or(40);
    if slug_max_len > 100 {
        return Err(format!(
            "slug_max_len = {slug_max_len} is too long: branch names stay readable (and within \
             git's limits) at 100 or less; 0 means no slug"
        ));
    }
    let event_type = required(raw.event_type, "event_type", "feedback")?;
    if event_type.chars().count() > 100 {
        return Err("event_type is longer than 100 characters, which GitHub refuses".into());
    }
    let events = raw
        .events
        .unwrap_or_else(|| vec!["INSERT".into()])
        .iter()
        .map(|e| match e.to_ascii_uppercase().as_str() {
            "INSERT" => Ok(EventKind::Insert),
            "UPDATE" => Ok(EventKind::Update),
            _ => Err(format!(
                "events: `{e}` is not an event a route can take: use \"INSERT\" and/or \"UPDATE\""
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if events.is_empty() {
        return Err("events is empty: the route would take nothing; use [\"INSERT\"]".into());
    }
    let payload_template = match raw.payload_template {
        Some(p) => PayloadTemplate::from_file(&dir.join(p))
            .map_err(|e| format!("payload_template: {e}"))?,
        None => PayloadTemplate::builtin(),
    };
    Ok(Route {
        table,
        schema: raw.schema.unwrap_or_else(|| "public".into()),
        repo,
        events,
        id_column: raw.id_column.unwrap_or_else(|| "id".into()),
        // Unset means the documented default; an empty string means "no slug".
        text_column: match raw.text_column {
            None => Some("message".into()),
            Some(c) if c.trim().is_empty() => None,
            Some(c) => Some(c),
        },
        branch_prefix,
        slug_max_len,
        event_type,
        payload_template,
        created_column: raw.created_column.unwrap_or_else(|| "created_at".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> String {
        crate::templates::setup::render(
            "rowbranch.toml",
            &crate::templates::setup::SetupContext::example(),
        )
        .unwrap()
    }
    const SECRET: &str = "a-webhook-secret-of-32-characters";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/rowbranch/rowbranch.toml"), &no_env)
    }

    const LOCAL: &str = r#"
        [forge]
        kind = "local"
        path = "repo.git"
        [[routes]]
        table = "feedbacks"
        repo = "acme/app"
        branch_prefix = "feedback"
        event_type = "feedback"
    "#;

    #[test]
    fn the_shipped_example_parses_with_the_documented_defaults() {
        let config = parse(&example()).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.reconcile.every, None);
        assert_eq!(config.reconcile.window, Duration::from_secs(48 * 3600));
        let ForgeConfig::Github(github) = &config.forge else {
            panic!("the example uses the github forge");
        };
        assert_eq!(github.app_id, 123456);
        assert_eq!(github.write_burst, 10);
        assert!(
            matches!(&github.private_key, PrivateKeySource::File(p) if p == Path::new("/etc/rowbranch/app.pem"))
        );
        let route = &config.routes[0];
        assert_eq!(route.slug_max_len, 40);
        assert_eq!(route.events, vec![EventKind::Insert]);
        assert_eq!(config.webhook.respond_within, Duration::from_millis(800));
    }

    #[test]
    fn a_minimal_local_config_gets_the_defaults() {
        let config = parse(LOCAL).unwrap();
        let ForgeConfig::Local { path, on_dispatch } = &config.forge else {
            panic!("local forge expected");
        };
        assert_eq!(path, Path::new("/etc/rowbranch/repo.git"));
        assert!(on_dispatch.is_none());
        let route = config.route("public", "feedbacks").unwrap();
        assert_eq!(route.id_column, "id");
        assert_eq!(route.text_column.as_deref(), Some("message"));
        assert_eq!(route.created_column, "created_at");
        assert!(config.route("public", "comments").is_none());
    }

    #[test]
    fn an_unknown_key_is_named_with_the_file() {
        let err = parse(&LOCAL.replace("event_type", "evnt_type"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/etc/rowbranch/rowbranch.toml"), "{err}");
        assert!(err.contains("evnt_type"), "{err}");
    }

    #[test]
    fn a_secret_in_the_file_is_refused_with_the_variable_to_use() {
        let err = parse(&format!("[webhook]\nsecret = \"x\"\n{LOCAL}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("ROWBRANCH_WEBHOOK_SECRET"), "{err}");
    }

    #[test]
    fn each_missing_required_route_key_is_named() {
        for key in ["table", "repo", "branch_prefix", "event_type"] {
            let text: String = LOCAL
                .lines()
                .filter(|l| !l.trim_start().starts_with(&format!("{key} =")))
                .collect::<Vec<_>>()
                .join("\n");
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}` is missing")), "{key}: {err}");
        }
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        let cases = [
            (LOCAL.replace("acme/app", "acme"), "owner/name"),
            (
                LOCAL.replace(
                    "\"feedback\"\n        event",
                    "\"feed back\"\n        event",
                ),
                "branch_prefix",
            ),
            (
                format!("reconcile_every = \"soon\"\n{LOCAL}"),
                "reconcile_every",
            ),
            (format!("listen = \"localhost\"\n{LOCAL}"), "HOST:PORT"),
            (
                LOCAL.replace("kind = \"local\"", "kind = \"gitlab\""),
                "\"gitlab\" is not a forge",
            ),
            (format!("{LOCAL}\nevents = [\"DELETE\"]"), "DELETE"),
            (format!("{LOCAL}\nslug_max_len = 500"), "slug_max_len"),
            (
                LOCAL.replace(
                    "event_type = \"feedback\"",
                    &format!("event_type = \"{}\"", "e".repeat(101)),
                ),
                "100 characters",
            ),
            (
                "[forge]\nkind = \"local\"\npath = \"r.git\"".to_owned(),
                "no [[routes]]",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(expected), "expected {expected:?} in: {err}");
        }
    }

    #[test]
    fn two_routes_for_one_table_are_refused() {
        let route = LOCAL.split("[[routes]]").nth(1).unwrap();
        let err = parse(&format!("{LOCAL}\n[[routes]]{route}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("one table takes one route"), "{err}");
    }

    #[test]
    fn the_environment_beats_the_file() {
        let env = |key: &str| match key {
            "ROWBRANCH_LISTEN" => Some("127.0.0.1:9999".to_owned()),
            "PORT" => Some("7000".to_owned()),
            "GITHUB_APP_ID" => Some("42".to_owned()),
            "GITHUB_APP_PRIVATE_KEY" => Some("-----BEGIN PRIVATE KEY-----".to_owned()),
            "GITHUB_API_URL" => Some("https://ghe.example.com/api/v3/".to_owned()),
            "ROWBRANCH_WEBHOOK_SECRET" => Some(SECRET.to_owned()),
            _ => None,
        };
        let config = Config::parse(&example(), Path::new("rowbranch.toml"), &env).unwrap();
        assert_eq!(config.listen, "127.0.0.1:9999".parse().unwrap());
        let ForgeConfig::Github(github) = &config.forge else {
            panic!("github forge expected");
        };
        assert_eq!(github.app_id, 42);
        assert!(matches!(github.private_key, PrivateKeySource::Pem(_)));
        assert_eq!(github.api_url, "https://ghe.example.com/api/v3");
        assert!(!format!("{config:?}").contains("BEGIN PRIVATE KEY"));
        assert!(config.webhook.secrets.is_some());
    }

    #[test]
    fn port_alone_listens_on_every_interface() {
        let env = |key: &str| (key == "PORT").then(|| "7000".to_owned());
        let config = Config::parse(LOCAL, Path::new("rowbranch.toml"), &env).unwrap();
        assert_eq!(config.listen, "0.0.0.0:7000".parse().unwrap());
    }

    #[test]
    fn a_short_webhook_secret_is_a_config_error() {
        let env = |key: &str| (key == "ROWBRANCH_WEBHOOK_SECRET").then(|| "short".to_owned());
        let err = Config::parse(LOCAL, Path::new("rowbranch.toml"), &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("ROWBRANCH_WEBHOOK_SECRET"), "{err}");
        assert!(
            !err.contains("short\""),
            "the secret must not be echoed: {err}"
        );
    }

    #[test]
    fn an_empty_text_column_means_no_slug() {
        let config = parse(&format!("{LOCAL}\ntext_column = \"\"")).unwrap();
        assert_eq!(config.routes[0].text_column, None);
    }
}
