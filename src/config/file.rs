//! The config file's shape (SPEC §2): every key a table takes, and — in the `#[default]` above
//! each key — what a key left out holds. Serde fills a missing key from that default, so each
//! default is declared once, beside its key; `validate` turns the tables into settings, and
//! `docs/spec.md` §2 documents each key (its `spec_tests` hold the two in step).
//!
//! Values stay as written — durations as text, names as strings — so that validation can quote
//! a bad one with its key. `None` marks a key with no default: required, or off.
//!
//! The struct names show in serde's messages for a value of the wrong type ("expected struct
//! RawForge"), which is why they keep them. Serialized, the shape is what `rowbranch config`
//! prints (`show`), and what the spec's tables are checked against.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

/// `[github] write_hourly_max` for the App: GitHub allows about 500 content-creating requests an
/// hour (SPEC §2).
pub(super) const APP_WRITE_HOURLY_MAX: u32 = 450;

/// `[github] write_hourly_max` for a plain token (`GITHUB_TOKEN`, which GitHub allows 1,000
/// requests an hour per repository): a new row costs about four requests (two reads, the
/// claim, the dispatch), so 200 rows an hour — 400 writes — spend 800 and leave 200 for
/// duplicates' reads and compares and the sweep (SPEC §2).
pub(super) const TOKEN_WRITE_HOURLY_MAX: u32 = 400;

/// How often `serve` sweeps when `reconcile_every` is left out and `DATABASE_URL` is set: a
/// row a sender never sent again (pg_net never retries) waits at most this long.
pub(super) const DEFAULT_RECONCILE_EVERY: Duration = Duration::from_secs(6 * 3600);

/// The least `queue_bytes` may be: a few big rows.
pub(super) const MIN_QUEUE_BYTES: usize = 1 << 20;

/// The whole file.
#[derive(Deserialize, Serialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawConfig {
    /// `HOST:PORT` that `serve` listens on; `ROWBRANCH_LISTEN`, or `PORT`, wins over it.
    #[default = "127.0.0.1:8080"]
    pub listen: String,
    /// On SIGTERM or SIGINT, how long in-flight requests and claimed rows get to finish.
    #[default = "20s"]
    pub shutdown_grace: String,
    /// `GET /`'s live page of the last decisions.
    pub status_page: bool,
    /// `serve` sweeps on this schedule, or not at all with `"off"`. Left out, it sweeps every
    /// [`DEFAULT_RECONCILE_EVERY`] when `DATABASE_URL` is set (`None` here).
    pub reconcile_every: Option<String>,
    /// How far back a scheduled sweep looks.
    #[default = "48h"]
    pub reconcile_window: String,
    /// A claimed branch still at its base after this long is a dead claim (SPEC §6).
    #[default = "1h"]
    pub stale_claim_after: String,
    pub forge: RawForge,
    pub github: RawGithub,
    pub webhook: RawWebhook,
    pub pgmq: RawPgmq,
    pub routes: Vec<RawRoute>,
}

/// `[forge]`: which forge; `path` and `on_dispatch` belong to the local one.
#[derive(Deserialize, Serialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawForge {
    /// `"github"` for a GitHub App, `"local"` for a git repository on this machine.
    #[default = "github"]
    pub kind: String,
    /// The local forge's git repository; required with `kind = "local"`.
    pub path: Option<String>,
    /// Run for each dispatch of the local forge, the payload on its stdin.
    pub on_dispatch: Option<String>,
}

/// `[github]`: the App (or a token), and the pace and limits of its requests.
#[derive(Deserialize, Serialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawGithub {
    /// The App's id; required, here or in `GITHUB_APP_ID`, unless `token_env` is set.
    pub app_id: Option<u64>,
    /// The App's private key file; a key is required, here or in `GITHUB_APP_PRIVATE_KEY`,
    /// unless `token_env` is set.
    pub private_key_path: Option<String>,
    /// The environment variable that holds a token to use as given, in place of the App
    /// (`"GITHUB_TOKEN"` in a workflow); the App when `None`.
    pub token_env: Option<String>,
    /// GitHub's API: `https://HOST/api/v3` for GitHub Enterprise Server.
    #[default = "https://api.github.com"]
    pub api_url: String,
    /// Sustained pace of one installation's writes: one per interval.
    #[default = 1000]
    pub write_interval_ms: u64,
    /// Writes allowed back to back before the pace applies.
    #[default = 10]
    pub write_burst: u32,
    /// Writes per rolling hour: GitHub allows about 500 content-creating requests an hour.
    /// When `None`, [`APP_WRITE_HOURLY_MAX`], or with `token_env` [`TOKEN_WRITE_HOURLY_MAX`].
    pub write_hourly_max: Option<u32>,
    /// Rows accepted and not yet finished; beyond it, deliveries get 503 with `Retry-After`.
    #[default = 10_000]
    pub queue_capacity: usize,
    /// What those rows may hold, in bytes; beyond it, deliveries get 503 with `Retry-After`.
    #[default(super::DEFAULT_QUEUE_BYTES)]
    pub queue_bytes: usize,
    /// How long one GitHub operation may go on retrying.
    #[default = 30_000]
    pub retry_budget_ms: u64,
    /// How long a read of the default branch's head is reused for new claims.
    #[default = 10_000]
    pub base_cache_ms: u64,
    /// GitHub requests open at once per installation, reads and writes together.
    #[default = 16]
    pub max_concurrent_requests: usize,
}

/// `[webhook]`: how deliveries are read and answered.
#[derive(Deserialize, Serialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawWebhook {
    /// Taken only to be refused with a better message than "unknown key": the secret comes from
    /// `ROWBRANCH_WEBHOOK_SECRET` alone. Not a setting, so not serialized.
    #[serde(skip_serializing)]
    pub secret: Option<toml::Value>,
    /// Answer by then; unfinished work carries on in the background (202).
    #[default = 800]
    pub respond_within_ms: u64,
    /// Larger bodies are refused (413).
    #[default = 262_144]
    pub max_body_bytes: usize,
    /// The headers, and then the whole body, must each arrive within this.
    #[default = 10_000]
    pub read_timeout_ms: u64,
    /// Connections open at once, at most (the open-files limit may lower it).
    #[default = 512]
    pub max_connections: usize,
    /// The schemes a delivery may authenticate with: `"bearer"`, `"standard-webhooks"`,
    /// `"hub-signature"`. All three by default, so that a setup written before the key existed
    /// keeps working; `init` writes only the one its trigger uses.
    #[default(vec![
        "bearer".into(),
        "standard-webhooks".into(),
        "hub-signature".into(),
    ])]
    pub accept: Vec<String>,
}

/// `[pgmq]`: the queue the `intake = "pgmq"` routes read. SPEC §2 says why each default is
/// what it is.
#[derive(Deserialize, Serialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawPgmq {
    /// The queue the trigger sends each row to (`pgmq.q_{queue}`).
    #[default = "rowbranch"]
    pub queue: String,
    /// Where messages refused for good go; the queue's own `{queue}_dead` when `None`, which is
    /// what `init --queue` creates.
    pub dead_letter: Option<String>,
    /// Messages read at once, at most.
    #[default = 50]
    pub batch: usize,
    /// The wait before reading again after an empty read.
    #[default = 1000]
    pub poll_interval_ms: u64,
    /// How long a message read stays hidden from other readers; renewed while it is worked on.
    #[default = 60]
    pub visibility_timeout_s: u64,
    /// Archived messages older than this are deleted.
    #[default = "7d"]
    pub archive_retention: String,
    /// A retried message waits `backoff_base_ms × 2^(reads − 1)`, at most `backoff_cap_ms`.
    #[default = 5000]
    pub backoff_base_ms: u64,
    #[default = 300_000]
    pub backoff_cap_ms: u64,
}

/// One `[[routes]]` table: one table wired to one repository. The environment's single route
/// (`ROWBRANCH_REPO`) is one of these too.
#[derive(Deserialize, Serialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawRoute {
    /// The table the route takes; required.
    pub table: Option<String>,
    #[default = "public"]
    pub schema: String,
    /// The repository (`owner/name`) that gets the branches and dispatches; required.
    pub repo: Option<String>,
    /// `INSERT` and/or `UPDATE`.
    #[default(vec!["INSERT".into()])]
    pub events: Vec<String>,
    /// The column that holds the row's id.
    #[default = "id"]
    pub id_column: String,
    /// The column the slug is made from; an empty string means no slug.
    #[default = "message"]
    pub text_column: String,
    /// The first part of every branch name; required.
    pub branch_prefix: Option<String>,
    /// Longest slug, in characters; 0 means no slug.
    #[default = 40]
    pub slug_max_len: usize,
    /// The `repository_dispatch` event type; required.
    pub event_type: Option<String>,
    /// A template file for `client_payload`; the built-in template when neither this nor
    /// `payload_template_inline` is set.
    pub payload_template: Option<String>,
    /// The template itself, for a config carried whole in one variable (`ROWBRANCH_CONFIG`),
    /// where no file can travel beside it.
    pub payload_template_inline: Option<String>,
    /// The rows' creation time, read by reconcile.
    #[default = "created_at"]
    pub created_column: String,
    /// `"webhook"` (`POST /webhook`) or `"pgmq"` (the `[pgmq]` queue).
    #[default = "webhook"]
    pub intake: String,
    /// The most turns Claude may take in one run of the workflow.
    #[default(super::DEFAULT_MAX_TURNS)]
    pub max_turns: u32,
    /// The most minutes the workflow's work job may run.
    #[default(super::DEFAULT_WORK_TIMEOUT_MINUTES)]
    pub work_timeout_minutes: u32,
    /// The most rows of the route that start work in any hour, counted from the queue's
    /// archive; off when `None`. Only for `intake = "pgmq"`: validation makes it part of the
    /// queue's [`Intake`](super::Intake).
    pub max_rows_per_hour: Option<u32>,
    /// The instant the scheduled sweep starts from (RFC 3339): it never starts work on a row
    /// created before it. No scheduled sweep for the route when `None`.
    pub sweep_from: Option<String>,
    /// The gate: a row runs once this column holds this value; every row runs when `None`.
    pub run_when: Option<RawRunWhen>,
    /// A text column rowbranch writes the row's state into (`waiting`, `dispatched`, ...).
    pub status_column: Option<String>,
    /// A text column rowbranch writes the row's pull request's link into.
    pub pull_request_column: Option<String>,
}

/// A route's `run_when = { column = "status", equals = "approved" }`.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRunWhen {
    pub column: String,
    /// A string, a boolean or a number, as the column holds it.
    pub equals: toml::Value,
}
