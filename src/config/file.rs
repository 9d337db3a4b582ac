//! The config file's shape (SPEC §2): every key a table takes, and — in the `Default` beside
//! each table — what a key left out holds. Serde fills a missing key from that `Default`, so
//! each default is declared once, here; `validate` turns the tables into settings, and
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
#[derive(Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawConfig {
    /// `HOST:PORT` that `serve` listens on; `ROWBRANCH_LISTEN`, or `PORT`, wins over it.
    pub listen: String,
    /// On SIGTERM or SIGINT, how long in-flight requests and claimed rows get to finish.
    pub shutdown_grace: String,
    /// `GET /`'s live page of the last decisions.
    pub status_page: bool,
    /// `serve` sweeps on this schedule, or not at all with `"off"`. Left out, it sweeps every
    /// [`DEFAULT_RECONCILE_EVERY`] when `DATABASE_URL` is set (`None` here).
    pub reconcile_every: Option<String>,
    /// How far back a scheduled sweep looks.
    pub reconcile_window: String,
    /// A claimed branch still at its base after this long is a dead claim (SPEC §6).
    pub stale_claim_after: String,
    pub forge: RawForge,
    pub github: RawGithub,
    pub webhook: RawWebhook,
    pub pgmq: RawPgmq,
    pub routes: Vec<RawRoute>,
}

impl Default for RawConfig {
    fn default() -> RawConfig {
        RawConfig {
            listen: "127.0.0.1:8080".into(),
            shutdown_grace: "20s".into(),
            status_page: false,
            reconcile_every: None,
            reconcile_window: "48h".into(),
            stale_claim_after: "1h".into(),
            forge: RawForge::default(),
            github: RawGithub::default(),
            webhook: RawWebhook::default(),
            pgmq: RawPgmq::default(),
            routes: Vec::new(),
        }
    }
}

/// `[forge]`: which forge; `path` and `on_dispatch` belong to the local one.
#[derive(Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawForge {
    /// `"github"` for a GitHub App, `"local"` for a git repository on this machine.
    pub kind: String,
    /// The local forge's git repository; required with `kind = "local"`.
    pub path: Option<String>,
    /// Run for each dispatch of the local forge, the payload on its stdin.
    pub on_dispatch: Option<String>,
}

impl Default for RawForge {
    fn default() -> RawForge {
        RawForge {
            kind: "github".into(),
            path: None,
            on_dispatch: None,
        }
    }
}

/// `[github]`: the App (or a token), and the pace and limits of its requests.
#[derive(Deserialize, Serialize)]
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
    pub api_url: String,
    /// Sustained pace of one installation's writes: one per interval.
    pub write_interval_ms: u64,
    /// Writes allowed back to back before the pace applies.
    pub write_burst: u32,
    /// Writes per rolling hour: GitHub allows about 500 content-creating requests an hour.
    /// When `None`, [`APP_WRITE_HOURLY_MAX`], or with `token_env` [`TOKEN_WRITE_HOURLY_MAX`].
    pub write_hourly_max: Option<u32>,
    /// Rows accepted and not yet finished; beyond it, deliveries get 503 with `Retry-After`.
    pub queue_capacity: usize,
    /// What those rows may hold, in bytes; beyond it, deliveries get 503 with `Retry-After`.
    pub queue_bytes: usize,
    /// How long one GitHub operation may go on retrying.
    pub retry_budget_ms: u64,
    /// How long a read of the default branch's head is reused for new claims.
    pub base_cache_ms: u64,
    /// GitHub requests open at once per installation, reads and writes together.
    pub max_concurrent_requests: usize,
}

impl Default for RawGithub {
    fn default() -> RawGithub {
        RawGithub {
            app_id: None,
            private_key_path: None,
            token_env: None,
            api_url: "https://api.github.com".into(),
            write_interval_ms: 1000,
            write_burst: 10,
            write_hourly_max: None,
            queue_capacity: 10_000,
            queue_bytes: super::DEFAULT_QUEUE_BYTES,
            retry_budget_ms: 30_000,
            base_cache_ms: 10_000,
            max_concurrent_requests: 16,
        }
    }
}

/// `[webhook]`: how deliveries are read and answered.
#[derive(Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawWebhook {
    /// Taken only to be refused with a better message than "unknown key": the secret comes from
    /// `ROWBRANCH_WEBHOOK_SECRET` alone. Not a setting, so not serialized.
    #[serde(skip_serializing)]
    pub secret: Option<toml::Value>,
    /// Answer by then; unfinished work carries on in the background (202).
    pub respond_within_ms: u64,
    /// Larger bodies are refused (413).
    pub max_body_bytes: usize,
    /// The headers, and then the whole body, must each arrive within this.
    pub read_timeout_ms: u64,
    /// Connections open at once, at most (the open-files limit may lower it).
    pub max_connections: usize,
    /// The schemes a delivery may authenticate with: `"bearer"`, `"standard-webhooks"`,
    /// `"hub-signature"`. All three by default, so that a setup written before the key existed
    /// keeps working; `init` writes only the one its trigger uses.
    pub accept: Vec<String>,
}

impl Default for RawWebhook {
    fn default() -> RawWebhook {
        RawWebhook {
            secret: None,
            respond_within_ms: 800,
            max_body_bytes: 262_144,
            read_timeout_ms: 10_000,
            max_connections: 512,
            accept: vec![
                "bearer".into(),
                "standard-webhooks".into(),
                "hub-signature".into(),
            ],
        }
    }
}

/// `[pgmq]`: the queue the `intake = "pgmq"` routes read. SPEC §2 says why each default is
/// what it is.
#[derive(Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawPgmq {
    /// The queue the trigger sends each row to (`pgmq.q_{queue}`).
    pub queue: String,
    /// Where messages refused for good go; the queue's own `{queue}_dead` when `None`, which is
    /// what `init --queue` creates.
    pub dead_letter: Option<String>,
    /// Messages read at once, at most.
    pub batch: usize,
    /// The wait before reading again after an empty read.
    pub poll_interval_ms: u64,
    /// How long a message read stays hidden from other readers; renewed while it is worked on.
    pub visibility_timeout_s: u64,
    /// Archived messages older than this are deleted.
    pub archive_retention: String,
    /// A retried message waits `backoff_base_ms × 2^(reads − 1)`, at most `backoff_cap_ms`.
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
}

impl Default for RawPgmq {
    fn default() -> RawPgmq {
        RawPgmq {
            queue: "rowbranch".into(),
            dead_letter: None,
            batch: 50,
            poll_interval_ms: 1000,
            visibility_timeout_s: 60,
            archive_retention: "7d".into(),
            backoff_base_ms: 5000,
            backoff_cap_ms: 300_000,
        }
    }
}

/// One `[[routes]]` table: one table wired to one repository. The environment's single route
/// (`ROWBRANCH_REPO`) is one of these too.
#[derive(Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawRoute {
    /// The table the route takes; required.
    pub table: Option<String>,
    pub schema: String,
    /// The repository (`owner/name`) that gets the branches and dispatches; required.
    pub repo: Option<String>,
    /// `INSERT` and/or `UPDATE`.
    pub events: Vec<String>,
    /// The column that holds the row's id.
    pub id_column: String,
    /// The column the slug is made from; an empty string means no slug.
    pub text_column: String,
    /// The first part of every branch name; required.
    pub branch_prefix: Option<String>,
    /// Longest slug, in characters; 0 means no slug.
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
    pub created_column: String,
    /// `"webhook"` (`POST /webhook`) or `"pgmq"` (the `[pgmq]` queue).
    pub intake: String,
    /// The most turns Claude may take in one run of the workflow.
    pub max_turns: u32,
    /// The most minutes the workflow's work job may run.
    pub work_timeout_minutes: u32,
    /// The most rows of the route that start work in any hour, counted from the queue's
    /// archive; off when `None`. Only for `intake = "pgmq"`: validation makes it part of the
    /// queue's [`Intake`](super::Intake).
    pub max_rows_per_hour: Option<u32>,
}

impl Default for RawRoute {
    fn default() -> RawRoute {
        RawRoute {
            table: None,
            schema: "public".into(),
            repo: None,
            events: vec!["INSERT".into()],
            id_column: "id".into(),
            text_column: "message".into(),
            branch_prefix: None,
            slug_max_len: 40,
            event_type: None,
            payload_template: None,
            payload_template_inline: None,
            created_column: "created_at".into(),
            intake: "webhook".into(),
            max_turns: super::DEFAULT_MAX_TURNS,
            work_timeout_minutes: super::DEFAULT_WORK_TIMEOUT_MINUTES,
            max_rows_per_hour: None,
        }
    }
}
