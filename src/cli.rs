//! The command line, as clap parses it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{
    Insecure, RunWhen, DEFAULT_MAX_TURNS, DEFAULT_PATH, DEFAULT_WORK_TIMEOUT_MINUTES,
    MAX_WORK_TIMEOUT_MINUTES,
};

/// What `rowbranch --version` prints after the name: the version and the commit it was built
/// from (`unknown` when the build could not tell; see build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("ROWBRANCH_COMMIT"),
    ")"
);

/// One database row, one branch, one piece of work.
///
/// rowbranch receives Supabase database webhooks, claims one branch per row on the forge
/// (GitHub, or a local git repository) and dispatches the work to a workflow.
#[derive(Debug, Parser)]
#[command(name = "rowbranch", version = VERSION, about, long_about)]
pub struct Cli {
    /// How log lines are written to stderr: `text`, or `json` (one object a line). Chosen
    /// before the config is read, so a config error is a JSON line too. `RUST_LOG` sets the
    /// level (`info` by default).
    #[arg(
        long,
        global = true,
        value_enum,
        env = "ROWBRANCH_LOG_FORMAT",
        default_value = "text",
        value_name = "FORMAT"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

// Parsed once per process: the size of the largest variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the webhook receiver.
    Serve(ServeArgs),
    /// Show the whole path on a local git repository: no accounts, no config.
    Demo,
    /// Show what a webhook body would do (route, id, branch, payload) without touching a forge.
    ///
    /// Exits 0 when the body would be dispatched or ignored, 1 when the webhook would refuse it.
    Preview(PreviewArgs),
    /// Check the setup: config, secret, App credentials, installation, permissions, workflow.
    ///
    /// One line per check, with the fix for each failure. Exits 1 if any check fails.
    Doctor(DoctorArgs),
    /// Write the setup files for one repository and table: rowbranch.toml, the workflow, the
    /// Supabase SQL, the App manifest and a page that creates the App, and print what is left.
    ///
    /// `init --manifest-code CODE` then finishes creating the App: it fetches the App's id and
    /// private key from GitHub and writes them. `init --host actions` writes the setup that
    /// runs rowbranch in the repository's own GitHub Actions instead: no App, no server.
    Init(InitArgs),
    /// Sweep the tables: finish the rows whose webhook was lost, re-dispatch dead claims.
    ///
    /// Reads rows from DATABASE_URL; exits 1 if any row failed.
    Reconcile(ReconcileArgs),
    /// Run a row again on purpose (a closed pull request blocks it otherwise): on its branch if
    /// free, else on the next free `{branch}-redo-N`.
    Redo(RedoArgs),
    /// The queue of the routes with `intake = "pgmq"` (reads DATABASE_URL).
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Read the queue until nothing is left to start, then exit: serve's consumer alone, with
    /// no port, for a scheduled job (GitHub Actions).
    ///
    /// It stops reading once the last read found nothing and it holds nothing, the hourly
    /// budget is spent, GitHub turns a row away, or --max-time less the grace has passed;
    /// then it releases what it has not started, gives the runs under way the grace, and prints
    /// one summary line. SIGINT or SIGTERM stops it the same way, with a grace of at most 5 s.
    /// Exits 0 when it stopped cleanly (drained, out of time, the hourly budget or GitHub's
    /// rate limit reached with rows left for the next run), 1 when it could not work (the
    /// database or GitHub unreachable, the setup wrong: the message says what to fix), 2 for
    /// usage.
    Drain(DrainArgs),
    /// What happened to one row, from the sources of truth: the row in its table, its branch,
    /// its branches, pull requests and workflow runs on the forge, its queue message, and what
    /// `reconcile` and `redo` would do with it now. Reads only; writes nothing anywhere.
    ///
    /// Exits 0 when it could answer (a row the table does not have included), 1 when a source
    /// could not be reached (the message says which), 2 for usage.
    Explain(ExplainArgs),
    /// Print the effective config: what `serve` would run, the environment laid over it and
    /// every default written out, as TOML rowbranch reads back.
    ///
    /// Paths are made absolute and a payload template file is carried inline, so the output
    /// can be carried whole in ROWBRANCH_CONFIG. Secrets are never printed; standard error
    /// says which are set.
    Config(ConfigArg),
    /// Ask a running `serve` for /healthz: exit 0 when it answers 200, 1 otherwise (with the
    /// reason on standard error), within 3 seconds. The container image's health check.
    ///
    /// Without --url it asks where `serve` listens: ROWBRANCH_LISTEN, else 0.0.0.0:PORT, else
    /// the config's `listen`, with 0.0.0.0 and :: asked on 127.0.0.1 and ::1. It needs no
    /// secret and no valid config: of the config it reads `listen` alone.
    Healthcheck(HealthcheckArgs),
}

#[derive(Debug, Args)]
pub struct HealthcheckArgs {
    /// The address to ask instead, plain HTTP, e.g. http://127.0.0.1:8080 (a URL without a
    /// path asks its /healthz).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    #[command(flatten)]
    pub config: ConfigArg,
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Move dead letters back to the queue, to be run again: every one (`--all`) or one by its
    /// message id (`--id N`, as the dead-letter queue numbers it).
    Redrive(RedriveArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["all", "id"])))]
pub struct RedriveArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Every dead letter.
    #[arg(long)]
    pub all: bool,
    /// The dead letter with this message id.
    #[arg(long, value_name = "N")]
    pub id: Option<i64>,
}

#[derive(Debug, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The longest the whole run takes, its grace included: the reading stops at DURATION less
    /// the grace (shutdown_grace, or half of DURATION when that is shorter).
    #[arg(long, value_name = "DURATION", default_value = "4m")]
    pub max_time: String,
    /// Once the queue is drained, sweep the tables for rows that never reached it (the sweep
    /// of `reconcile`, over reconcile_window), before exiting.
    #[arg(long)]
    pub sweep: bool,
}

#[derive(Debug, Args)]
pub struct ConfigArg {
    /// The config file.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_PATH)]
    pub config: PathBuf,
}

/// What `serve --help` says of the environment; `tests/it/cli.rs` checks that it names every
/// variable the config reads.
const SERVE_ENVIRONMENT: &str = "\
Environment (each wins over the config file):
  ROWBRANCH_CONFIG           the whole config's TOML text, when there is no config file
  ROWBRANCH_WEBHOOK_SECRET   the webhook secret, or several separated by spaces (a signing
                             key and a bearer secret, or to rotate); required unless
                             --insecure-no-auth
  ROWBRANCH_LISTEN           HOST:PORT to listen on, e.g. 0.0.0.0:8080 or localhost:8080;
                             wins over PORT
  PORT                       listen on 0.0.0.0:PORT
  GITHUB_APP_ID              the GitHub App's id ([github] app_id)
  GITHUB_APP_PRIVATE_KEY     the App's private key, the PEM text (wins over private_key_path)
  (the one [github] token_env names, e.g. GITHUB_TOKEN)
                             a token used in place of the App, for routes on the queue
  GITHUB_API_URL             GitHub's API ([github] api_url), e.g. https://HOST/api/v3
  GITHUB_WEBHOOK_SECRET      the App's webhook secret, which signs its events to POST /github
                             (pull requests and runs, for status_column); 404 there without it
  ROWBRANCH_STATUS_PASSWORD  the status page's password (status_page = true), 16 characters or
                             more; required unless --insecure-public-status
  DATABASE_URL               PostgreSQL: the queue (intake = \"pgmq\") and the scheduled
                             sweep (reconcile_every)
  RUST_LOG                   the log level, e.g. info or rowbranch=debug

With no config file, ROWBRANCH_REPO makes one route from the environment:
  ROWBRANCH_REPO             the repository, OWNER/NAME (required)
  ROWBRANCH_TABLE            the table (feedbacks)
  ROWBRANCH_SCHEMA           its schema (public)
  ROWBRANCH_ID_COLUMN        the id column (id)
  ROWBRANCH_TEXT_COLUMN      the slug's column (message)
  ROWBRANCH_BRANCH_PREFIX    the branches' prefix (feedback)
  ROWBRANCH_EVENT_TYPE       the dispatch's event type (feedback)
  ROWBRANCH_INTAKE           webhook (default) or pgmq
  ROWBRANCH_PGMQ_QUEUE       the queue, for intake pgmq (rowbranch)
  ROWBRANCH_SWEEP_FROM       the scheduled sweep's start, RFC 3339 (none: no scheduled sweep)";

#[derive(Debug, Args)]
#[command(after_help = SERVE_ENVIRONMENT)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub insecure: Insecure,
}

#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// A webhook body, as Supabase would post it.
    #[arg(value_name = "FILE.json")]
    pub file: PathBuf,
    #[command(flatten)]
    pub config: ConfigArg,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The folder to write to (default: the current folder; with --host actions, setup).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The repository the work happens in.
    #[arg(
        long,
        value_name = "OWNER/NAME",
        required_unless_present = "manifest_code"
    )]
    pub repo: Option<String>,
    /// Where Supabase reaches rowbranch (the trigger posts to URL/webhook), and where GitHub
    /// sends the browser once the App is created. Required for the webhook intake; with
    /// `--intake pgmq` nothing reaches rowbranch from outside, and the default is
    /// http://127.0.0.1:8080.
    #[arg(long, value_name = "PUBLIC_URL")]
    pub url: Option<String>,
    /// Where the rows come from: `webhook` (the default), a Supabase Database Webhook posting
    /// to URL/webhook (writes supabase-vault.sql and supabase.sql); or `pgmq`, a Supabase Queue
    /// that each INSERT's own transaction fills and rowbranch reads over DATABASE_URL (writes
    /// supabase-queue.sql). --host actions reads the queue.
    #[arg(long, value_enum, conflicts_with = "manifest_code")]
    pub intake: Option<IntakeArg>,
    /// Where rowbranch runs: `server`, `rowbranch serve` always on, as a GitHub App (the
    /// default); or `actions`, `rowbranch drain` in the repository's own GitHub Actions with
    /// the job's token, from the queue: writes rowbranch-drain.yml and no App. The drain job
    /// gets rowbranch from a release's archive checked against its SHA-256 (--release-url,
    /// --release-sha256), or builds it on every run (--install-from-git).
    #[arg(
        long,
        value_enum,
        default_value = "server",
        conflicts_with = "manifest_code"
    )]
    pub host: HostArg,
    /// With --host actions: how often the drain workflow's schedule runs (5m to 1d, a divisor
    /// of an hour or of a day; default 1h). The schedule is the insurance; --kick is the
    /// latency.
    #[arg(long, value_name = "DURATION")]
    pub every: Option<String>,
    /// With --host actions: also write supabase-kick.sql, a trigger that asks GitHub to run
    /// the drain workflow as soon as rows are inserted (at most once in 30 seconds).
    #[arg(long)]
    pub kick: bool,
    /// With --kick: the repository's default branch, which the kick runs the drain workflow
    /// on (default main).
    #[arg(long, value_name = "BRANCH")]
    pub default_branch: Option<String>,
    /// With --host actions, where there is no release to download: build rowbranch in the
    /// drain job from this git repository, an https URL (cargo install --locked --git URL
    /// --rev COMMIT), on every run and with no cache: 10 to 30 of the runner's minutes a run.
    #[arg(long, value_name = "URL", conflicts_with_all = ["release_url", "release_sha256"])]
    pub install_from_git: Option<String>,
    /// With --install-from-git: the commit to build, 7 to 40 hexadecimal digits (default: the
    /// commit this rowbranch was built from, as --version shows it).
    #[arg(long, value_name = "COMMIT", requires = "install_from_git")]
    pub rev: Option<String>,
    /// With --host actions, the way to install rowbranch: download it in the drain job from
    /// this release archive (https, a .tar.gz for x86_64 Linux), checked against
    /// --release-sha256 before it runs.
    #[arg(long, value_name = "URL", requires = "release_sha256")]
    pub release_url: Option<String>,
    /// The archive's SHA-256, 64 hexadecimal digits: its line in the release's SHA256SUMS.
    #[arg(long, value_name = "HEX", requires = "release_url")]
    pub release_sha256: Option<String>,
    /// With `--intake pgmq`: the queue's name; the dead letters go to NAME_dead.
    #[arg(long, value_name = "NAME", default_value = "rowbranch")]
    pub queue: String,
    /// The GitHub App's name (default rowbranch-OWNER; at most 34 characters). GitHub lets you
    /// change it when it creates the App; --manifest-code then uses the name GitHub gave it.
    #[arg(long, value_name = "NAME")]
    pub app_name: Option<String>,
    /// Whether the repository's owner is a user or an organization, when GitHub cannot be
    /// asked; by default init asks GitHub (GET /users/OWNER). The App is created on that
    /// account, the only one a private App can be installed on.
    #[arg(long, value_name = "TYPE", value_enum)]
    pub owner_type: Option<OwnerType>,
    /// The table's schema, as PostgreSQL spells it.
    #[arg(long, default_value = "public")]
    pub schema: String,
    /// The table whose inserted rows each get a branch, as PostgreSQL spells it.
    #[arg(long, default_value = "feedbacks")]
    pub table: String,
    /// The column that holds the row's id (its primary key), the row's identity in its branch name.
    #[arg(long, default_value = "id")]
    pub id_column: String,
    /// The column whose text becomes the branch's slug and the work's description ("" for
    /// none).
    #[arg(long, default_value = "message")]
    pub text_column: String,
    /// The first part of every branch name: PREFIX/ID-SLUG.
    #[arg(long, default_value = "feedback")]
    pub branch_prefix: String,
    /// The repository_dispatch event type the workflow listens to.
    #[arg(long, default_value = "feedback")]
    pub event_type: String,
    /// The most turns Claude takes in one run: the workflow's --max-turns, and the route's
    /// max_turns, which doctor holds the committed workflow to.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_TURNS,
        value_parser = clap::value_parser!(u32).range(1..),
        conflicts_with = "manifest_code"
    )]
    pub max_turns: u32,
    /// The most minutes the workflow's work job runs (1 to 360): its timeout-minutes, and the
    /// route's work_timeout_minutes, which doctor holds the committed workflow to.
    #[arg(
        long,
        value_name = "MINUTES",
        default_value_t = DEFAULT_WORK_TIMEOUT_MINUTES,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WORK_TIMEOUT_MINUTES)),
        conflicts_with = "manifest_code"
    )]
    pub work_timeout_minutes: u32,
    /// Hold each row until COLUMN holds VALUE (e.g. status=approved): the route's run_when, its
    /// events INSERT and UPDATE, and triggers that fire on the UPDATE of COLUMN. VALUE is a
    /// boolean (true, false), a number, or else text; quoted ("true", "1") it is always text.
    #[arg(long, value_name = "COLUMN=VALUE", value_parser = run_when, conflicts_with = "manifest_code")]
    pub run_when: Option<RunWhen>,
    /// A host Claude's commands may reach besides api.anthropic.com (repeatable): the registry
    /// a build downloads from, e.g. index.crates.io; `*.example.com` takes its subdomains.
    /// Written into the sandbox settings of the workflow's claude-code-action step.
    #[arg(long, value_name = "HOST", conflicts_with = "manifest_code")]
    pub allow_host: Vec<String>,
    /// A path the workflow's finish job never pushes a change to, besides its own list of CI,
    /// deploy, editor and agent settings (repeatable): from the repository's root, compared
    /// without case, a folder with everything in it.
    #[arg(long, value_name = "PATH", conflicts_with = "manifest_code")]
    pub refuse_path: Vec<String>,
    /// Write over the files a previous run wrote here, applying the flags given and keeping
    /// what is deployed from them: the App's id and its bot, the webhook secrets of
    /// rowbranch.env and the SQL files, the route's sweep_from. Says which files changed.
    #[arg(long)]
    pub force: bool,
    /// On a re-run (--force): make new webhook secrets instead of keeping rowbranch.env's. The triggers
    /// installed in Supabase and the running rowbranch hold the old ones until the SQL is run
    /// again and ROWBRANCH_WEBHOOK_SECRET is updated.
    #[arg(long, conflicts_with = "manifest_code")]
    pub rotate_secrets: bool,
    /// Finish creating the GitHub App with the code GitHub handed back: write its key and id,
    /// and the name GitHub gave its bot into workflow.yml.
    #[arg(long, value_name = "CODE", conflicts_with_all = ["repo", "url", "owner_type"])]
    pub manifest_code: Option<String>,
    /// GitHub's API, for the owner's type and --manifest-code (default https://api.github.com,
    /// or GITHUB_API_URL).
    #[arg(long, value_name = "URL")]
    pub api_url: Option<String>,
}

/// `init --intake`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IntakeArg {
    Webhook,
    Pgmq,
}

/// `init --host`; the setup files name it in lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HostArg {
    Server,
    Actions,
}

/// The kind of account that owns a repository; the setup files name it in lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerType {
    User,
    Organization,
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// How far back to look (default: reconcile_window, 48h).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Show what would be done; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RedoArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The route's table (`table` or `schema.table`).
    #[arg(long, value_name = "TABLE")]
    pub table: String,
    /// The row's id.
    #[arg(long, value_name = "ID")]
    pub id: String,
    /// Do not ask before acting.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The route's table (`table` or `schema.table`).
    #[arg(long, value_name = "TABLE")]
    pub table: String,
    /// The row's id, as its id column holds it.
    #[arg(long, value_name = "ID")]
    pub id: String,
    /// Print the answer as JSON (its shape is in docs/spec.md §1).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// One JSON object a line, one per check: `status` (`pass`, `advice` or `fail`), `what`,
    /// `fix`.
    #[arg(long)]
    pub json: bool,
}

/// `init --run-when COLUMN=VALUE`.
fn run_when(text: &str) -> Result<RunWhen, String> {
    let Some((column, value)) = text.split_once('=') else {
        return Err(
            "give the column and the value that lets a row run, e.g. status=approved".into(),
        );
    };
    let column = column.trim();
    if column.is_empty() || value.is_empty() {
        return Err(format!(
            "{text:?} lacks a column or a value: e.g. status=approved"
        ));
    }
    let equals = match value {
        "true" | "false" => serde_json::Value::Bool(value == "true"),
        _ if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') => {
            serde_json::Value::from(&value[1..value.len() - 1])
        }
        _ => match serde_json::from_str::<serde_json::Number>(value) {
            // TOML holds a 64-bit signed integer or a float; a larger whole number would not
            // read back as the same value.
            Ok(number) if number.is_u64() && number.as_i64().is_none() => {
                return Err(format!(
                    "{value} is larger than the config can hold: quote it (\"{value}\") to compare it as text"
                ))
            }
            Ok(number) => serde_json::Value::Number(number),
            Err(_) => serde_json::Value::from(value),
        },
    };
    Ok(RunWhen {
        column: column.to_owned(),
        equals,
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn every_command_and_option_says_what_it_is_for() {
        let cli = Cli::command();
        let mut missing = Vec::new();
        for command in cli.get_subcommands() {
            if command.get_about().is_none() {
                missing.push(command.get_name().to_owned());
            }
            for arg in command.get_arguments() {
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{} {}", command.get_name(), arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "without a description: {missing:?}");
    }
}
