//! The plain settings a config validates into: what the forge, the row reader, the server and
//! the queue consumer are each built from, so that none of them sees the whole config. Every
//! value here has been checked; the file's defaults live in `file`, not here.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::event::EventKind;
use crate::identity::{BranchPrefix, EventType, QueueName, RepoName};
use crate::webhook::auth::WebhookSecrets;

/// Everything one run of rowbranch is configured with, checked.
#[derive(Debug)]
pub struct Config {
    /// The file this came from, for messages.
    pub source: PathBuf,
    pub listen: ListenAddress,
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
    pub database_url: Option<Redacted>,
}

impl Config {
    /// Whether any route takes webhook deliveries (else `POST /webhook` is not served, and no
    /// webhook secret is needed).
    pub fn takes_webhooks(&self) -> bool {
        self.routes.iter().any(|r| r.takes_webhooks())
    }

    /// Whether any route reads the queue.
    pub fn reads_the_queue(&self) -> bool {
        self.routes.iter().any(|r| r.reads_the_queue())
    }
}

/// Where `serve` listens, as the config says: an address, or a host name that `serve`
/// resolves when it starts (`localhost:8080`); and the setting that said so, which the
/// messages about it name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddress {
    pub host: ListenHost,
    pub port: u16,
    pub origin: ListenOrigin,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenHost {
    Ip(IpAddr),
    /// A host name, resolved when `serve` starts.
    Name(String),
}

crate::reason::named_set! {
    /// Which setting chose the listen address: `ROWBRANCH_LISTEN`, else `PORT`, else the file;
    /// its text is the setting's name.
    pub enum ListenOrigin {
        /// `ROWBRANCH_LISTEN`.
        Listen => "ROWBRANCH_LISTEN",
        /// `PORT`, on every interface.
        Port => "PORT",
        /// The file's `listen`.
        File => "listen",
    }
}

/// `HOST:PORT`, an IPv6 address in brackets: as it is written in the config.
impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            ListenHost::Ip(ip) => SocketAddr::new(*ip, self.port).fmt(f),
            ListenHost::Name(name) => write!(f, "{name}:{}", self.port),
        }
    }
}

/// The status page's settings.
#[derive(Debug, Clone)]
pub struct StatusPage {
    /// `ROWBRANCH_STATUS_PASSWORD`: asked for with HTTP basic authentication (any user name).
    /// `None` only under `serve --insecure-public-status`.
    pub password: Option<Redacted>,
}

/// A value that must never print: a password, a connection string (it carries one), a token,
/// a private key. Its `Debug` says only that it is hidden; `expose` is the one way to read it.
#[derive(Clone)]
pub struct Redacted(pub(super) String);

impl Redacted {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
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
    /// GitHub's settings; none for a local repository.
    pub fn github(&self) -> Option<&GithubSettings> {
        match self {
            ForgeSettings::Github(github) => Some(github),
            ForgeSettings::Local(_) => None,
        }
    }

    /// The forge's web address, for links to branches: `https://github.com` for the public
    /// API, `https://HOST` for GitHub Enterprise's `https://HOST/api/v3`; none for a local
    /// repository.
    pub fn web_url(&self) -> Option<String> {
        let api = self.github()?.api_url.as_str();
        Some(match api.strip_suffix("/api/v3") {
            Some(host) => host.to_owned(),
            None if api == "https://api.github.com" => "https://github.com".to_owned(),
            None => api.to_owned(),
        })
    }

    /// The token GitHub is reached with, when it is a token rather than the App.
    pub fn token(&self) -> Option<&AccessToken> {
        self.github()?.token()
    }

    /// `GITHUB_WEBHOOK_SECRET`, which `POST /github` needs; the local forge has no App.
    pub fn github_webhook_secret(&self) -> Option<&Redacted> {
        self.github()?.webhook_secret.as_ref()
    }

    /// How many rows may be accepted and not yet finished; beyond it, deliveries get 503.
    pub fn queue_capacity(&self) -> usize {
        self.github()
            .map_or(LOCAL_QUEUE_CAPACITY, |github| github.queue_capacity)
    }

    /// What those rows may hold between them, in bytes; beyond it, deliveries get 503. The
    /// local forge takes the default.
    pub fn queue_bytes(&self) -> usize {
        self.github()
            .map_or(DEFAULT_QUEUE_BYTES, |github| github.queue_bytes)
    }
}

/// A git repository on this machine as the forge.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    pub path: PathBuf,
    /// Run for each dispatch, the payload on its stdin; a non-zero exit fails the dispatch.
    pub on_dispatch: Option<String>,
}

/// rowbranch on GitHub: everything the GitHub forge is built from.
#[derive(Debug)]
pub struct GithubSettings {
    /// As a GitHub App, or with a token.
    pub auth: GithubAuth,
    pub api_url: String,
    pub pace: PaceSettings,
    /// Rows accepted and not yet finished; beyond it, deliveries get 503 with `Retry-After`.
    pub queue_capacity: usize,
    /// What those rows may hold between them, in bytes; beyond it, 503 with `Retry-After`.
    pub queue_bytes: usize,
    /// GitHub requests open at once per installation (or for the token), reads and writes
    /// together.
    pub max_concurrent_requests: usize,
    /// How long one GitHub operation may keep retrying.
    pub retry_budget: Duration,
    /// How long the default branch's head is reused for new claims.
    pub base_cache: Duration,
    /// `GITHUB_WEBHOOK_SECRET`: the secret GitHub signs the App's events with
    /// (`X-Hub-Signature-256`); `POST /github` answers 404 without it.
    pub webhook_secret: Option<Redacted>,
}

impl GithubSettings {
    /// The token, when rowbranch authenticates with one rather than as the App.
    pub fn token(&self) -> Option<&AccessToken> {
        match &self.auth {
            GithubAuth::Token(token) => Some(token),
            GithubAuth::App { .. } => None,
        }
    }
}

/// How rowbranch authenticates to GitHub.
#[derive(Debug)]
pub enum GithubAuth {
    /// As a GitHub App: a JWT from its id and private key, then an installation token for each
    /// repository. The default, and the only way for webhook routes.
    App {
        app_id: u64,
        /// Where the key comes from; read when the GitHub forge starts.
        key: PrivateKeySource,
    },
    /// With a token used as given (`[github] token_env`): a workflow's `GITHUB_TOKEN`, or a
    /// fine-grained personal access token. No JWT, no installation lookup.
    Token(AccessToken),
}

/// A token from the environment: the variable it came from, which messages name, and its
/// value, which never prints.
#[derive(Debug, Clone)]
pub struct AccessToken {
    pub(super) variable: String,
    pub(super) value: Redacted,
}

impl AccessToken {
    /// The environment variable the token came from (`GITHUB_TOKEN`).
    pub fn variable(&self) -> &str {
        &self.variable
    }

    pub fn expose(&self) -> &str {
        self.value.expose()
    }
}

/// The pace of one installation's writes, or the token's (SPEC §5).
#[derive(Debug, Clone, Copy)]
pub struct PaceSettings {
    /// Sustained: one write per interval.
    pub interval: Duration,
    /// Writes allowed back to back before the interval applies.
    pub burst: u32,
    /// Writes in any rolling hour.
    pub hourly_max: u32,
}

/// The App's private key: PEM text from the environment, or a file.
#[derive(Debug)]
pub enum PrivateKeySource {
    Pem(Redacted),
    File(PathBuf),
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
    /// The payload template, a file or the config's own text; the built-in template when
    /// `None`. Read and compiled when the pipeline's routes are built, not here.
    pub payload_template: Option<PayloadTemplateSource>,
    pub created_column: String,
    /// Where the route's rows come from: webhook deliveries, or the queue with its bound.
    pub intake: Intake,
    /// The most turns Claude may take in one run of the route's workflow (its `--max-turns`);
    /// `doctor` holds the committed workflow to it.
    pub max_turns: u32,
    /// The most minutes the workflow's work job may run (its `timeout-minutes`); `doctor`
    /// holds the committed workflow to it.
    pub work_timeout_minutes: u32,
    /// The scheduled sweep (`serve`'s, `drain --sweep`) never starts work on a row created
    /// before this; without it the route has no scheduled sweep. `reconcile` ignores it.
    pub sweep_from: Option<chrono::DateTime<chrono::Utc>>,
    /// The gate: a row runs only once it passes (SPEC §2, `run_when`); every row runs when
    /// `None`.
    pub run_when: Option<RunWhen>,
    /// The text column rowbranch writes the row's state into (SPEC §2, `status_column`).
    pub status_column: Option<String>,
    /// The text column rowbranch writes the row's pull request's `html_url` into.
    pub pull_request_column: Option<String>,
}

/// A route's gate: a row is ready once `column` holds `equals`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunWhen {
    pub column: String,
    /// A JSON scalar: a string, a boolean or a number.
    pub equals: serde_json::Value,
}

impl RunWhen {
    /// Whether a column's value (`None`: the row has no such column) passes. Numbers are equal
    /// when their values are (`1` and `1.0`), as PostgreSQL compares them.
    pub fn passes(&self, value: Option<&serde_json::Value>) -> bool {
        use serde_json::Value::Number;
        match (value, &self.equals) {
            // Whole numbers exactly (past 2^53 an f64 would round two of them together).
            (Some(Number(a)), Number(b)) if a.is_i64() && b.is_i64() => a.as_i64() == b.as_i64(),
            (Some(Number(a)), Number(b)) if a.is_u64() && b.is_u64() => a.as_u64() == b.as_u64(),
            (Some(Number(a)), Number(b)) => a.as_f64() == b.as_f64(),
            (Some(value), equals) => value == equals,
            (None, _) => false,
        }
    }
}

impl std::fmt::Display for RunWhen {
    /// `status = "approved"`, as messages name the gate.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {}", self.column, self.equals)
    }
}

impl Route {
    /// `schema.table`, for messages.
    pub fn table_name(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// Whether the route's rows come as webhook deliveries.
    pub fn takes_webhooks(&self) -> bool {
        self.intake == Intake::Webhook
    }

    /// Whether the route's rows come from the queue.
    pub fn reads_the_queue(&self) -> bool {
        !self.takes_webhooks()
    }

    /// Whether rowbranch writes the row's state back into it.
    pub fn writes_back(&self) -> bool {
        self.status_column.is_some() || self.pull_request_column.is_some()
    }
}

/// What the rows waiting may hold between them when the file does not set `queue_bytes`:
/// sized for the smallest machine docs/deploy.md runs rowbranch on (256 MB), with the
/// connections' buffers at their worst beside them (SPEC §2 gives the sum).
pub const DEFAULT_QUEUE_BYTES: usize = 32 << 20;

/// The route's `max_turns` when the file does not set it, and `init --max-turns`'s default.
pub const DEFAULT_MAX_TURNS: u32 = 30;

/// The route's `work_timeout_minutes` when the file does not set it, and `init
/// --work-timeout-minutes`'s default.
pub const DEFAULT_WORK_TIMEOUT_MINUTES: u32 = 30;

/// The longest a job may run on a GitHub-hosted runner, and so the most `timeout-minutes` can
/// bound (https://docs.github.com/en/actions/reference/limits).
pub const MAX_WORK_TIMEOUT_MINUTES: u32 = 360;

/// Where a route's payload template comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadTemplateSource {
    /// `payload_template`: a file, relative to the config's folder.
    File(PathBuf),
    /// `payload_template_inline`: the template's text, carried in the config itself.
    Inline(String),
}

/// Where a route's rows come from, with what only that intake may have: a bound on the rows
/// an hour belongs to the queue, where rows over it wait; a webhook row turned away would be
/// lost until a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// `POST /webhook`: a Supabase Database Webhook (pg_net).
    Webhook,
    /// The `[pgmq]` queue that the INSERT's own transaction fills.
    Pgmq {
        /// The most rows of the route that start work in any hour, counted from the queue's
        /// archive so that every process reading the queue shares it; off when `None`.
        max_rows_per_hour: Option<u32>,
    },
}

impl Intake {
    /// The name the file writes, `intake = "…"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Intake::Webhook => "webhook",
            Intake::Pgmq { .. } => "pgmq",
        }
    }
}

/// As its name, for the setup files' templates.
impl serde::Serialize for Intake {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The queue a `pgmq` route reads (SPEC §2, `[pgmq]`).
#[derive(Debug, Clone)]
pub struct PgmqSettings {
    /// The queue's name, as pgmq stores it (`pgmq.q_{queue}`).
    pub queue: QueueName,
    /// Where messages refused for good go, with why; never `queue`.
    pub dead_letter: QueueName,
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
