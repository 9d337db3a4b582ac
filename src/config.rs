//! Configuration: the TOML file plus the environment variables the contract names (SPEC §2),
//! validated once into a typed [`Config`] of plain settings that the forge, the row reader and
//! the server are each built from. The environment comes in through an injected [`Env`], so
//! tests and the demo need not touch the process's. Parsing is pure: [`Config::load`] reads the
//! file, [`Config::parse`] only checks text. With no file and `ROWBRANCH_REPO` set, `load` builds
//! the one route of [`env_route`] instead.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;

use crate::event::EventKind;
use crate::identity::{BranchPrefix, EventType, RepoName};
use crate::webhook::auth::WebhookSecrets;

pub mod env_route;

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
    fn new(file: &Path, error: &anyhow::Error) -> ConfigError {
        ConfigError {
            file: file.display().to_string(),
            message: format!("{error:#}"),
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
    /// On SIGTERM or SIGINT: how long in-flight requests and claimed rows get to finish.
    pub shutdown_grace: Duration,
    /// `GET /`'s live page of the last decisions; off when `None`.
    pub status_page: Option<StatusPage>,
    pub reconcile: ReconcileSettings,
    pub forge: ForgeSettings,
    pub webhook: WebhookSettings,
    /// The queue the `pgmq` routes read; the defaults when the file has no `[pgmq]`.
    pub pgmq: PgmqSettings,
    pub routes: Vec<Arc<Route>>,
    /// `DATABASE_URL`: where `reconcile` and `redo` read the rows. Environment only.
    pub database_url: Option<DatabaseUrl>,
}

/// The status page's settings.
#[derive(Debug, Clone)]
pub struct StatusPage {
    /// `ROWBRANCH_STATUS_PASSWORD`: asked for with HTTP basic authentication (any user name).
    pub password: Option<Password>,
}

/// A password; it never prints.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<redacted>)")
    }
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
pub struct ReconcileSettings {
    /// A sweep on a schedule inside `serve`; off when `None`.
    pub every: Option<Duration>,
    pub window: Duration,
    pub stale_claim_after: Duration,
}

/// Which forge, and what it is built from.
#[derive(Debug)]
pub enum ForgeSettings {
    Local(LocalSettings),
    Github(GithubSettings),
}

/// Rows accepted and not yet finished, at most, when the forge sets no other bound: the local
/// forge has no pace to wait on, so its rows never queue for long.
const LOCAL_QUEUE_CAPACITY: usize = 10_000;

impl ForgeSettings {
    /// The forge's web address, for links to branches: `https://github.com` for the public
    /// API, `https://HOST` for GitHub Enterprise's `https://HOST/api/v3`; none for a local
    /// repository.
    pub fn web_url(&self) -> Option<String> {
        let ForgeSettings::Github(github) = self else {
            return None;
        };
        let api = github.api_url.as_str();
        Some(match api.strip_suffix("/api/v3") {
            Some(host) => host.to_owned(),
            None if api == "https://api.github.com" => "https://github.com".to_owned(),
            None => api.to_owned(),
        })
    }

    /// How many rows may be accepted and not yet finished; beyond it, deliveries get 503.
    pub fn queue_capacity(&self) -> usize {
        match self {
            ForgeSettings::Local(_) => LOCAL_QUEUE_CAPACITY,
            ForgeSettings::Github(github) => github.queue_capacity,
        }
    }
}

/// A git repository on this machine as the forge.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    pub path: PathBuf,
    /// Run for each dispatch, the payload on its stdin; a non-zero exit fails the dispatch.
    pub on_dispatch: Option<String>,
}

/// rowbranch as a GitHub App: everything the GitHub forge is built from.
#[derive(Debug)]
pub struct GithubSettings {
    pub app_id: u64,
    /// Where the key comes from; read when the GitHub forge starts.
    pub key: PrivateKeySource,
    pub api_url: String,
    pub pace: PaceSettings,
    /// Rows accepted and not yet finished; beyond it, deliveries get 503 with `Retry-After`.
    pub queue_capacity: usize,
    /// GitHub requests open at once per installation, reads and writes together.
    pub max_concurrent_requests: usize,
    /// How long one GitHub operation may keep retrying.
    pub retry_budget: Duration,
    /// How long the default branch's head is reused for new claims.
    pub base_cache: Duration,
}

/// The pace of one installation's writes (SPEC §5).
#[derive(Debug, Clone, Copy)]
pub struct PaceSettings {
    /// Sustained: one write per interval.
    pub interval: Duration,
    /// Writes allowed back to back before the interval applies.
    pub burst: u32,
    /// Writes in any rolling hour.
    pub hourly_max: u32,
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
pub struct WebhookSettings {
    /// `None` only when no secret is set; `serve` then needs `--insecure-no-auth`.
    pub secrets: Option<WebhookSecrets>,
    pub respond_within: Duration,
    pub max_body_bytes: usize,
    /// The headers, and then the whole body, must each arrive within this.
    pub read_timeout: Duration,
    /// Connections open at once, at most (the open-files limit may lower it).
    pub max_connections: usize,
}

/// One table wired to one repository.
#[derive(Debug)]
pub struct Route {
    pub table: String,
    pub schema: String,
    pub repo: RepoName,
    /// `INSERT` and/or `UPDATE`; never `DELETE` (a row that is gone has no work).
    pub events: Vec<EventKind>,
    pub id_column: String,
    pub text_column: Option<String>,
    pub branch_prefix: BranchPrefix,
    pub slug_max_len: usize,
    pub event_type: EventType,
    /// The payload template's file; the built-in template when `None`. Read and compiled when
    /// the pipeline's routes are built, not here.
    pub payload_template: Option<PathBuf>,
    pub created_column: String,
    /// Where the route's rows come from: webhook deliveries, or the queue.
    pub intake: Intake,
}

/// Where a route's rows come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Intake {
    /// `POST /webhook`: a Supabase Database Webhook (pg_net).
    Webhook,
    /// The `[pgmq]` queue that the INSERT's own transaction fills.
    Pgmq,
}

impl Intake {
    pub fn as_str(self) -> &'static str {
        match self {
            Intake::Webhook => "webhook",
            Intake::Pgmq => "pgmq",
        }
    }
}

/// The queue a `pgmq` route reads (SPEC §2, `[pgmq]`).
#[derive(Debug, Clone)]
pub struct PgmqSettings {
    /// The queue's name, as pgmq stores it (`pgmq.q_{queue}`).
    pub queue: String,
    /// Where messages refused for good go, with why.
    pub dead_letter: String,
    /// Messages read at once, at most.
    pub batch: usize,
    /// How long to wait before reading again when the queue was empty.
    pub poll_interval: Duration,
    /// How long a message read is hidden from other readers; renewed while it is worked on.
    pub visibility_timeout: Duration,
    /// Archived messages older than this are deleted.
    pub archive_retention: Duration,
    /// A retried message waits `backoff_base × 2^(reads − 1)`, at most `backoff_cap`.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
}

impl Default for PgmqSettings {
    fn default() -> PgmqSettings {
        PgmqSettings {
            queue: "rowbranch".into(),
            dead_letter: "rowbranch_dead".into(),
            batch: 50,
            poll_interval: Duration::from_millis(1000),
            visibility_timeout: Duration::from_secs(60),
            archive_retention: Duration::from_secs(7 * 24 * 3600),
            backoff_base: Duration::from_millis(5000),
            backoff_cap: Duration::from_millis(300_000),
        }
    }
}

/// Whether `name` can be a pgmq queue: pgmq prefixes it (`q_`, `a_`), lowercases it and keeps
/// table names within PostgreSQL's 63 bytes; rowbranch takes only names that come back as
/// they went in.
/// (https://github.com/pgmq/pgmq, `pgmq.format_table_name` and `pgmq.validate_queue_name`)
pub fn is_queue_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.len() <= 47
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl Route {
    /// `schema.table`, for messages.
    pub fn table_name(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }
}

// ---- The file as written -------------------------------------------------------------------

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    shutdown_grace: Option<String>,
    status_page: Option<bool>,
    reconcile_every: Option<String>,
    reconcile_window: Option<String>,
    stale_claim_after: Option<String>,
    forge: Option<RawForge>,
    github: Option<RawGithub>,
    webhook: Option<RawWebhook>,
    pgmq: Option<RawPgmq>,
    #[serde(default)]
    routes: Vec<RawRoute>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPgmq {
    queue: Option<String>,
    dead_letter: Option<String>,
    batch: Option<usize>,
    poll_interval_ms: Option<u64>,
    visibility_timeout_s: Option<u64>,
    archive_retention: Option<String>,
    backoff_base_ms: Option<u64>,
    backoff_cap_ms: Option<u64>,
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
    max_concurrent_requests: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    /// Present only to refuse it with a better message than "unknown key".
    secret: Option<toml::Value>,
    respond_within_ms: Option<u64>,
    max_body_bytes: Option<usize>,
    read_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
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
    intake: Option<String>,
}

// ---- Loading -------------------------------------------------------------------------------

impl Config {
    /// Reads and validates the file at `path`, with `env` layered on top; when there is no file
    /// there and `ROWBRANCH_REPO` is set, the one route of [`env_route`] from `env` alone. A
    /// file and the route's variables together are refused, naming both.
    pub fn load(path: &Path, env: Env) -> Result<Config, ConfigError> {
        let route_variables = env_route::set_variables(env);
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return match route_variables.first() {
                    Some(&env_route::REPO) => Config::from_env(env),
                    Some(_) => Err(env_route::repo_missing(path, &route_variables)),
                    None => Err(ConfigError::new(
                        path,
                        &anyhow!(
                            "cannot read the config file: {e} (pass --config FILE, or run \
                             `rowbranch init` to write one; or set {} to configure one route \
                             from the environment)",
                            env_route::REPO
                        ),
                    )),
                };
            }
            Err(e) => {
                return Err(ConfigError::new(
                    path,
                    &anyhow!("cannot read the config file: {e}"),
                ))
            }
        };
        if !route_variables.is_empty() {
            return Err(env_route::conflict(path, &route_variables));
        }
        Config::parse(&text, path, env)
    }

    /// Validates `text` as if read from `path` (relative paths are relative to its folder).
    /// Reads no file.
    pub fn parse(text: &str, path: &Path, env: Env) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text)
            .map_err(|e| ConfigError::new(path, &anyhow!("{}", e.to_string().trim_end())))?;
        Config::from_raw(raw, path, env).map_err(|e| ConfigError::new(path, &e))
    }

    fn from_raw(raw: RawConfig, path: &Path, env: Env) -> anyhow::Result<Config> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let listen = listen_address(raw.listen.as_deref(), env)?;
        let shutdown_grace = duration(
            "shutdown_grace",
            raw.shutdown_grace.as_deref().unwrap_or("20s"),
        )?;
        let reconcile = ReconcileSettings {
            every: raw
                .reconcile_every
                .as_deref()
                .map(|v| duration("reconcile_every", v))
                .transpose()?,
            window: duration(
                "reconcile_window",
                raw.reconcile_window.as_deref().unwrap_or("48h"),
            )?,
            stale_claim_after: duration(
                "stale_claim_after",
                raw.stale_claim_after.as_deref().unwrap_or("1h"),
            )?,
        };
        let forge = forge(raw.forge.unwrap_or_default(), raw.github, dir, env)?;
        let webhook = webhook(raw.webhook.unwrap_or_default(), env)?;
        let pgmq = pgmq(raw.pgmq.unwrap_or_default())?;
        if raw.routes.is_empty() {
            bail!(
                "no [[routes]]: add one that names the table and the repository, e.g.\n\n[[routes]]\ntable = \"feedbacks\"\nrepo = \"owner/name\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\""
            );
        }
        let mut routes = Vec::with_capacity(raw.routes.len());
        let mut seen = HashSet::new();
        for (i, raw_route) in raw.routes.into_iter().enumerate() {
            let number = i + 1;
            let route =
                route(raw_route, dir).with_context(|| format!("[[routes]] number {number}"))?;
            if !seen.insert((route.schema.clone(), route.table.clone())) {
                bail!(
                    "[[routes]] number {number}: table {} has a route already; one table takes one route",
                    route.table_name()
                );
            }
            routes.push(Arc::new(route));
        }
        Ok(Config {
            source: path.to_path_buf(),
            listen,
            shutdown_grace,
            status_page: raw.status_page.unwrap_or(false).then(|| StatusPage {
                password: env("ROWBRANCH_STATUS_PASSWORD").map(Password),
            }),
            reconcile,
            forge,
            webhook,
            pgmq,
            routes,
            database_url: env("DATABASE_URL").map(DatabaseUrl),
        })
    }

    /// Whether any route takes webhook deliveries (else `POST /webhook` is not served, and no
    /// webhook secret is needed).
    pub fn takes_webhooks(&self) -> bool {
        self.routes.iter().any(|r| r.intake == Intake::Webhook)
    }

    /// Whether any route reads the queue.
    pub fn reads_the_queue(&self) -> bool {
        self.routes.iter().any(|r| r.intake == Intake::Pgmq)
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

fn listen_address(file: Option<&str>, env: Env) -> anyhow::Result<SocketAddr> {
    if let Some(addr) = env("ROWBRANCH_LISTEN") {
        return addr.parse().map_err(|_| {
            anyhow!(
                "ROWBRANCH_LISTEN=`{addr}` is not an address: use HOST:PORT, e.g. 127.0.0.1:8080"
            )
        });
    }
    if let Some(port) = env("PORT") {
        let port: u16 = port
            .parse()
            .map_err(|_| anyhow!("PORT=`{port}` is not a port number (0-65535)"))?;
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    let addr = file.unwrap_or("127.0.0.1:8080");
    addr.parse().map_err(|_| {
        anyhow!("listen = `{addr}` is not an address: use HOST:PORT, e.g. 127.0.0.1:8080")
    })
}

fn duration(key: &str, value: &str) -> anyhow::Result<Duration> {
    let d = humantime::parse_duration(value).map_err(|e| {
        anyhow!("{key} = \"{value}\" is not a duration ({e}): write e.g. \"30m\", \"6h\" or \"2d\"")
    })?;
    if d.is_zero() {
        bail!("{key} must be longer than zero");
    }
    Ok(d)
}

fn forge(
    raw: RawForge,
    github: Option<RawGithub>,
    dir: &Path,
    env: Env,
) -> anyhow::Result<ForgeSettings> {
    match raw.kind.as_deref().unwrap_or("github") {
        "local" => {
            let path = raw.path.context(
                "[forge] kind = \"local\" needs path = \"…\", the git repository to use as the forge",
            )?;
            Ok(ForgeSettings::Local(LocalSettings {
                path: dir.join(path),
                on_dispatch: raw.on_dispatch.filter(|c| !c.trim().is_empty()),
            }))
        }
        "github" => {
            if raw.path.is_some() || raw.on_dispatch.is_some() {
                bail!("[forge] path and on_dispatch belong to kind = \"local\"; remove them or set kind = \"local\"");
            }
            github_settings(github.unwrap_or_default(), dir, env).map(ForgeSettings::Github)
        }
        other => bail!("[forge] kind = \"{other}\" is not a forge: use \"github\" or \"local\""),
    }
}

fn github_settings(raw: RawGithub, dir: &Path, env: Env) -> anyhow::Result<GithubSettings> {
    let app_id = match env("GITHUB_APP_ID") {
        Some(v) => v.parse().map_err(|_| {
            anyhow!("GITHUB_APP_ID=`{v}` is not a number: use the App ID from the App's settings page")
        })?,
        None => raw.app_id.context(
            "[github] app_id is missing: set it (the App ID from the App's settings page) or set GITHUB_APP_ID",
        )?,
    };
    let key = match (env("GITHUB_APP_PRIVATE_KEY"), raw.private_key_path) {
        (Some(pem), _) => PrivateKeySource::Pem(pem),
        (None, Some(path)) => PrivateKeySource::File(dir.join(path)),
        (None, None) => bail!(
            "no GitHub App private key: set [github] private_key_path or GITHUB_APP_PRIVATE_KEY (the PEM text)"
        ),
    };
    let api_url = env("GITHUB_API_URL")
        .or(raw.api_url)
        .unwrap_or_else(|| "https://api.github.com".into());
    if !(api_url.starts_with("https://") || api_url.starts_with("http://")) {
        bail!(
            "api_url = `{api_url}` is not an http(s) URL: use https://api.github.com or https://HOST/api/v3"
        );
    }
    let positive = |key: &str, v: u64| {
        if v == 0 {
            Err(anyhow!("[github] {key} must be at least 1"))
        } else {
            Ok(v)
        }
    };
    Ok(GithubSettings {
        app_id,
        key,
        api_url: api_url.trim_end_matches('/').to_owned(),
        pace: PaceSettings {
            interval: Duration::from_millis(raw.write_interval_ms.unwrap_or(1000)),
            burst: positive("write_burst", raw.write_burst.unwrap_or(10).into())? as u32,
            hourly_max: positive(
                "write_hourly_max",
                raw.write_hourly_max.unwrap_or(450).into(),
            )? as u32,
        },
        queue_capacity: positive(
            "queue_capacity",
            raw.queue_capacity.unwrap_or(10_000) as u64,
        )? as usize,
        max_concurrent_requests: positive(
            "max_concurrent_requests",
            raw.max_concurrent_requests.unwrap_or(16) as u64,
        )? as usize,
        retry_budget: Duration::from_millis(raw.retry_budget_ms.unwrap_or(30_000)),
        base_cache: Duration::from_millis(raw.base_cache_ms.unwrap_or(10_000)),
    })
}

fn webhook(raw: RawWebhook, env: Env) -> anyhow::Result<WebhookSettings> {
    if raw.secret.is_some() {
        bail!("[webhook] secret: the secret is never read from the file; set ROWBRANCH_WEBHOOK_SECRET instead");
    }
    let secrets = env("ROWBRANCH_WEBHOOK_SECRET")
        .map(|raw| WebhookSecrets::parse(&raw))
        .transpose()
        .context("ROWBRANCH_WEBHOOK_SECRET")?;
    let max_body_bytes = raw.max_body_bytes.unwrap_or(262_144);
    if max_body_bytes < 1024 {
        bail!("[webhook] max_body_bytes must be at least 1024");
    }
    let read_timeout = Duration::from_millis(raw.read_timeout_ms.unwrap_or(10_000));
    if read_timeout < Duration::from_millis(100) {
        bail!("[webhook] read_timeout_ms must be at least 100: a sender needs time to send");
    }
    let max_connections = raw.max_connections.unwrap_or(512);
    if max_connections == 0 {
        bail!("[webhook] max_connections must be at least 1");
    }
    Ok(WebhookSettings {
        secrets,
        respond_within: Duration::from_millis(raw.respond_within_ms.unwrap_or(800)),
        max_body_bytes,
        read_timeout,
        max_connections,
    })
}

fn route(raw: RawRoute, dir: &Path) -> anyhow::Result<Route> {
    let required = |value: Option<String>, key: &str, example: &str| {
        value
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| anyhow!("`{key}` is missing: e.g. {key} = \"{example}\""))
    };
    let table = required(raw.table, "table", "feedbacks")?;
    let repo = required(raw.repo, "repo", "owner/name")?;
    let repo = RepoName::parse(&repo).context("repo")?;
    let prefix = required(raw.branch_prefix, "branch_prefix", "feedback")?;
    let branch_prefix =
        BranchPrefix::parse(&prefix).with_context(|| format!("branch_prefix = \"{prefix}\""))?;
    let slug_max_len = raw.slug_max_len.unwrap_or(40);
    if slug_max_len > 100 {
        bail!(
            "slug_max_len = {slug_max_len} is too long: branch names stay readable (and within \
             git's limits) at 100 or less; 0 means no slug"
        );
    }
    let event_type = required(raw.event_type, "event_type", "feedback")?;
    let event_type = EventType::parse(&event_type).context("event_type")?;
    let events = raw
        .events
        .unwrap_or_else(|| vec!["INSERT".into()])
        .iter()
        .map(|e| match EventKind::parse(&e.to_ascii_uppercase()) {
            Some(kind @ (EventKind::Insert | EventKind::Update)) => Ok(kind),
            _ => Err(anyhow!(
                "events: `{e}` is not an event a route can take: use \"INSERT\" and/or \"UPDATE\""
            )),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if events.is_empty() {
        bail!("events is empty: the route would take nothing; use [\"INSERT\"]");
    }
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
        payload_template: raw.payload_template.map(|p| dir.join(p)),
        created_column: raw.created_column.unwrap_or_else(|| "created_at".into()),
        intake: match raw.intake.as_deref().unwrap_or("webhook") {
            "webhook" => Intake::Webhook,
            "pgmq" => Intake::Pgmq,
            other => bail!(
                "intake = \"{other}\" is not an intake: use \"webhook\" (Supabase's Database \
                 Webhooks, the default) or \"pgmq\" (a Supabase Queue the INSERT fills)"
            ),
        },
    })
}

fn pgmq(raw: RawPgmq) -> anyhow::Result<PgmqSettings> {
    let defaults = PgmqSettings::default();
    let queue = raw.queue.unwrap_or(defaults.queue);
    // The queue's own `{queue}_dead` unless named: what `init --queue` creates, and with the
    // default queue, the default `rowbranch_dead`.
    let named = raw.dead_letter.is_some();
    let dead_letter = raw.dead_letter.unwrap_or_else(|| format!("{queue}_dead"));
    if is_queue_name(&queue) && !named && !is_queue_name(&dead_letter) {
        bail!(
            "[pgmq] queue = \"{queue}\" leaves no room for its dead-letter queue's default name \
             (\"{queue}_dead\" is over 47 characters): set [pgmq] dead_letter, or use a shorter queue name"
        );
    }
    for (key, name) in [("queue", &queue), ("dead_letter", &dead_letter)] {
        if !is_queue_name(name) {
            bail!(
                "[pgmq] {key} = \"{}\" is not a queue name rowbranch takes: use 1 to 47 of \
                 a-z, 0-9 and _, not starting with a digit (pgmq prefixes and lowercases it)",
                crate::identity::excerpt(name)
            );
        }
    }
    if queue == dead_letter {
        bail!("[pgmq] queue and dead_letter are both \"{queue}\": give the dead letters a queue of their own, e.g. \"{queue}_dead\"");
    }
    let batch = raw.batch.unwrap_or(defaults.batch);
    if batch == 0 || batch > 1000 {
        bail!("[pgmq] batch = {batch}: read 1 to 1000 messages at once");
    }
    let visibility_timeout = raw
        .visibility_timeout_s
        .map_or(defaults.visibility_timeout, Duration::from_secs);
    if visibility_timeout < Duration::from_secs(10) {
        bail!(
            "[pgmq] visibility_timeout_s must be at least 10: a message is renewed every third \
             of it, and a shorter lease would be lost to a slow round trip"
        );
    }
    let backoff_base = raw
        .backoff_base_ms
        .map_or(defaults.backoff_base, Duration::from_millis);
    let backoff_cap = raw
        .backoff_cap_ms
        .map_or(defaults.backoff_cap, Duration::from_millis);
    if backoff_base.is_zero() || backoff_cap < backoff_base {
        bail!(
            "[pgmq] backoff_base_ms must be at least 1 and backoff_cap_ms at least backoff_base_ms"
        );
    }
    Ok(PgmqSettings {
        queue,
        dead_letter,
        batch,
        poll_interval: raw
            .poll_interval_ms
            .map_or(defaults.poll_interval, Duration::from_millis)
            .max(Duration::from_millis(10)),
        visibility_timeout,
        archive_retention: match raw.archive_retention.as_deref() {
            Some(value) => duration("[pgmq] archive_retention", value)?,
            None => defaults.archive_retention,
        },
        backoff_base,
        backoff_cap,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A GitHub route with the least the github forge needs.
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
    const SECRET: &str = "a-webhook-secret-of-32-characters";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/rowbranch/rowbranch.toml"), &no_env)
    }

    const LOCAL: &str = TEST_LOCAL_CONFIG;

    #[test]
    fn a_minimal_github_config_gets_the_documented_defaults() {
        let config = parse(GITHUB).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.reconcile.every, None);
        assert_eq!(config.reconcile.window, Duration::from_secs(48 * 3600));
        let ForgeSettings::Github(github) = &config.forge else {
            panic!("the default forge is github");
        };
        assert_eq!(github.app_id, 123456);
        assert_eq!(github.pace.burst, 10);
        assert_eq!(github.pace.hourly_max, 450);
        assert_eq!(github.retry_budget, Duration::from_secs(30));
        assert!(
            matches!(&github.key, PrivateKeySource::File(p) if p == Path::new("/etc/rowbranch/app.pem"))
        );
        let route = &config.routes[0];
        assert_eq!(route.slug_max_len, 40);
        assert_eq!(route.events, vec![EventKind::Insert]);
        assert_eq!(route.payload_template, None);
        assert_eq!(config.webhook.respond_within, Duration::from_millis(800));
        assert_eq!(config.webhook.read_timeout, Duration::from_secs(10));
        assert_eq!(config.webhook.max_connections, 512);
        assert_eq!(github.max_concurrent_requests, 16);
        assert_eq!(github.queue_capacity, 10_000);
        assert_eq!(config.shutdown_grace, Duration::from_secs(20));
    }

    #[test]
    fn a_minimal_local_config_gets_the_defaults() {
        let config = parse(LOCAL).unwrap();
        let ForgeSettings::Local(LocalSettings { path, on_dispatch }) = &config.forge else {
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
                    "branch_prefix = \"feedback\"",
                    "branch_prefix = \"feed back\"",
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
        let config = Config::parse(GITHUB, Path::new("rowbranch.toml"), &env).unwrap();
        assert_eq!(config.listen, "127.0.0.1:9999".parse().unwrap());
        let ForgeSettings::Github(github) = &config.forge else {
            panic!("github forge expected");
        };
        assert_eq!(github.app_id, 42);
        assert!(matches!(github.key, PrivateKeySource::Pem(_)));
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
    fn a_payload_template_is_named_relative_to_the_config_and_not_read() {
        let config = parse(&format!("{LOCAL}\npayload_template = \"payload.json.j2\"")).unwrap();
        assert_eq!(
            config.routes[0].payload_template.as_deref(),
            Some(Path::new("/etc/rowbranch/payload.json.j2"))
        );
    }

    #[test]
    fn an_empty_text_column_means_no_slug() {
        let config = parse(&format!("{LOCAL}\ntext_column = \"\"")).unwrap();
        assert_eq!(config.routes[0].text_column, None);
    }

    #[test]
    fn a_pgmq_route_reads_the_queue_of_the_pgmq_table() {
        let config = parse(&format!("{LOCAL}\nintake = \"pgmq\"")).unwrap();
        assert_eq!(config.routes[0].intake, Intake::Pgmq);
        assert!(config.reads_the_queue() && !config.takes_webhooks());
        assert_eq!(config.pgmq.queue, "rowbranch");
        assert_eq!(config.pgmq.dead_letter, "rowbranch_dead");
        assert_eq!(config.pgmq.visibility_timeout, Duration::from_secs(60));
        assert_eq!(
            config.pgmq.archive_retention,
            Duration::from_secs(7 * 86_400)
        );
        let text =
            format!("[pgmq]\nqueue = \"rows_q\"\nbatch = 10\narchive_retention = \"2d\"\n{LOCAL}");
        let config = parse(&text).unwrap();
        assert_eq!(config.pgmq.queue, "rows_q");
        assert_eq!(
            config.pgmq.dead_letter, "rows_q_dead",
            "the queue's own by default"
        );
        assert_eq!(config.pgmq.batch, 10);
        assert_eq!(
            config.pgmq.archive_retention,
            Duration::from_secs(2 * 86_400)
        );
        assert!(parse(LOCAL).unwrap().takes_webhooks());
    }

    #[test]
    fn queue_names_are_checked_as_pgmq_would_store_them() {
        for (pgmq, expected) in [
            ("queue = \"Rows\"", "not a queue name"),
            ("queue = \"9rows\"", "not a queue name"),
            (
                &format!("queue = \"{}\"", "q".repeat(48)),
                "not a queue name",
            ),
            ("dead_letter = \"a-b\"", "not a queue name"),
            (
                &format!("queue = \"{}\"", "q".repeat(45)),
                "set [pgmq] dead_letter",
            ),
            ("queue = \"x\"\ndead_letter = \"x\"", "both \"x\""),
            ("batch = 0", "batch"),
            ("visibility_timeout_s = 3", "at least 10"),
        ] {
            let err = parse(&format!("[pgmq]\n{pgmq}\n{LOCAL}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{pgmq}: {err}");
        }
        assert!(is_queue_name(&"q".repeat(47)) && is_queue_name("_a1"));
        let err = parse(&format!("{LOCAL}\nintake = \"kafka\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an intake"), "{err}");
    }
}
