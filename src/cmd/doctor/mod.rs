//! `rowbranch doctor`: checks the setup end to end, one line per check, with the fix for each
//! failure (and for an advice, `!`). Exits 1 if any check fails, 2 if the config itself does
//! not load.
//!
//! `rowbranch doctor`'s checks: config, secrets, the forge — with GitHub, the App's credentials
//! or a token's, and for each route's repository what rowbranch needs there ([`github`]) — and
//! with `DATABASE_URL`, that a server on another machine is reached with its certificate
//! checked, the queue's setup ([`queue`]) and its optional kick ([`kick`]), that
//! each route fits its table and that row level security lets the role see its rows
//! ([`tables`]), and that only the table's owner may write what a route's yes rests on
//! ([`writers`]); and advice when webhook routes have no scheduled sweep. What it reads
//! back from a workflow is in [`workflow`].

use std::future::Future;

use anyhow::anyhow;
use futures_util::future::OptionFuture;
use tracing::instrument::WithSubscriber;

use super::Failure;
use crate::cli::DoctorArgs;
use crate::config::env::secret_from_init;
use crate::config::{process_env, Config, ForgeSettings, Intake, Route};
use crate::db::Database;
use crate::forge::local::LocalForge;
use crate::forge::{Base, Forge};

mod github;
mod kick;
mod queue;
mod tables;
pub mod workflow;
mod writers;

pub async fn run(args: DoctorArgs) -> Result<(), Failure> {
    let config = match Config::load(&args.config.config, &process_env) {
        Ok(config) => config,
        Err(e) => {
            let (ok, what, fix) = (false, e.to_string(), None);
            Check { ok, what, fix }.print(args.json);
            return Err(Failure::Usage(anyhow!("the config does not load")));
        }
    };
    // Each check is printed as it finishes: a slow one (GitHub far away) shows what came before.
    let mut report = Checks {
        checks: Vec::new(),
        json: args.json,
    };
    quietly(checks(&config, &mut report)).await;
    let all = report.checks.len();
    let failed = report.checks.iter().filter(|c| !c.ok).count();
    if failed > 0 {
        return Err(Failure::Runtime(anyhow!("{failed} of {all} checks failed")));
    }
    if !args.json {
        println!("all {all} checks pass");
    }
    Ok(())
}

// The names `rowbranch init` writes into the setup and doctor looks for there.

/// The `app_id` the config carries until `rowbranch init --manifest-code` sets the real one.
pub const PLACEHOLDER_APP_ID: u64 = 123456;

/// The drain workflow's file name in `.github/workflows/`, which the kick dispatches it by.
pub const DRAIN_WORKFLOW_FILE: &str = "rowbranch-drain.yml";

/// The bot a dispatch sent with an Actions job's `GITHUB_TOKEN` runs the work workflow as,
/// `github-actions[bot]`: the work workflow's `allowed_bots` names it.
pub const ACTIONS_BOT: &str = "github-actions";

/// The Vault secret that holds the kick's token, and the kick's trigger on the route's table
/// (`rowbranch_kick_{queue}`).
pub const KICK_SECRET: &str = "rowbranch_kick_token";
pub const KICK_TRIGGER_PREFIX: &str = "rowbranch_kick_";

/// Runs `work` without log lines (the retries' and the libraries'), unless `RUST_LOG` asks for
/// logs: the report a command prints is its
/// output, and a log line in the middle of it only repeats a failure the report states.
pub async fn quietly<F: Future>(work: F) -> F::Output {
    if process_env("RUST_LOG").is_some() {
        work.await
    } else {
        work.with_subscriber(tracing::subscriber::NoSubscriber::default())
            .await
    }
}

/// One line of the report.
#[derive(Debug)]
pub struct Check {
    pub ok: bool,
    pub what: String,
    /// How to fix it, for a failed check.
    pub fix: Option<String>,
}

impl Check {
    fn pass(what: impl Into<String>) -> Check {
        let (ok, what, fix) = (true, what.into(), None);
        Check { ok, what, fix }
    }

    /// Passed, with advice: something only an optional feature needs is missing.
    fn advise(what: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::fail(what, fix).advice()
    }

    /// This failure as advice: it passes, its fix shown.
    fn advice(self) -> Check {
        Check { ok: true, ..self }
    }

    fn fail(what: impl Into<String>, fix: impl Into<String>) -> Check {
        let (ok, what, fix) = (false, what.into(), Some(fix.into()));
        Check { ok, what, fix }
    }

    /// Its line, with its fix below; or, for `--json`, one object.
    fn print(&self, json: bool) {
        // `!`: passed, with advice for something only an optional feature needs.
        let (mark, status) = match (self.ok, &self.fix) {
            (false, _) => ("✗", "fail"),
            (true, Some(_)) => ("!", "advice"),
            (true, None) => ("✓", "pass"),
        };
        if json {
            let line = serde_json::json!({"status": status, "what": self.what, "fix": self.fix});
            println!("{line}");
            return;
        }
        println!("{mark} {}", self.what);
        if let Some(fix) = &self.fix {
            // A fix of several lines (grants, one statement a line) is indented under its first.
            println!("    fix: {}", fix.replace('\n', "\n      "));
        }
    }
}

/// The checks made so far, each printed as it is added (as text, or as JSON).
pub struct Checks {
    pub checks: Vec<Check>,
    pub json: bool,
}

impl Checks {
    fn push(&mut self, check: Check) {
        check.print(self.json);
        self.checks.push(check);
    }

    fn extend(&mut self, checks: impl IntoIterator<Item = Check>) {
        checks.into_iter().for_each(|check| self.push(check));
    }
}

/// Runs every check that applies to `config` into `out` (under [`quietly`]: the report is the
/// output).
pub async fn checks(config: &Config, out: &mut Checks) {
    out.push(Check::pass(format!(
        "config {} parses",
        config.source.display()
    )));
    // Only webhook routes need the secret: the queue is read with DATABASE_URL.
    if config.takes_webhooks() {
        out.push(match &config.webhook.secrets {
            Some(s) if !s.can_authenticate_any() => Check::advise(
                format!("webhook secret set, but [webhook] accept = {} takes none of its secrets: every delivery is refused", s.accept_list()),
                "\"standard-webhooks\" takes a whsec_ secret (supabase-vault.sql signs with it), \"bearer\" one that does not start with whsec_ (supabase.sql sends it): list the scheme the trigger uses, or set ROWBRANCH_WEBHOOK_SECRET to its secret",
            ),
            Some(s) => Check::pass(format!("webhook secret set ({} secret{})", s.len(), if s.len() == 1 { "" } else { "s" })),
            None => Check::fail(
                "webhook secret is not set",
                secret_from_init(&config.source).unwrap_or_else(|| {
                    "set ROWBRANCH_WEBHOOK_SECRET to a random string of 24+ characters (e.g. `openssl rand -hex 32`) and put the same in the Supabase trigger".to_owned()
                }),
            ),
        });
    }
    out.extend(no_sweep(config));
    match &config.forge {
        ForgeSettings::Local(local) => match LocalForge::open(local).await {
            Ok(forge) => {
                let path = local.path.display();
                out.push(Check::pass(format!("local repository {path} opens")));
                for repo in config.routes.iter().map(|route| &route.repo) {
                    out.push(match forge.base(repo).await {
                        Ok(Base { branch, sha }) => {
                            let sha = sha.short();
                            Check::pass(format!("{repo}: default branch {branch} at {sha}"))
                        }
                        Err(e) => Check::fail(
                            format!("{repo}: {e}"),
                            "make a first commit on the repository's HEAD branch",
                        ),
                    });
                }
            }
            Err(e) => out.push(Check::fail(
                format!("{e:#}"),
                "point [forge] path at a git repository",
            )),
        },
        ForgeSettings::Github(settings) => {
            let ended = github::checks(config, settings, out).await;
            out.extend(ended.err());
        }
    }
    // One connection for every check that reads the database.
    let connect = (config.database_url.as_ref()).map(|url| Database::connect(url.expose()));
    let database = OptionFuture::from(connect).await;
    out.extend(tables::transit(config));
    let queue = config.reads_the_queue();
    let database = match database {
        Some(Ok(database)) => database,
        None if queue => return out.push(Check::fail(
            "a route reads the queue but DATABASE_URL is not set",
            "set DATABASE_URL to the database that holds the queue (on Supabase: Connect, \
             Session pooler, with the password of a role that may read the queue)",
        )),
        Some(Err(e)) if queue => return out.push(Check::fail(
            format!("DATABASE_URL does not connect: {e}"),
            "check the host, port, user and password of DATABASE_URL (and sslmode)",
        )),
        Some(Err(e)) => return out.push(Check::advise(
            format!("DATABASE_URL does not connect, so the routes' tables cannot be checked: {e:#}"),
            "check the host, port, user and password of DATABASE_URL (and sslmode): reconcile and redo read the rows with it",
        )),
        None => return,
    };
    if queue {
        queue::checks(config, &database, out).await;
        if config.forge.token().is_some() {
            kick::checks(config, &database, out).await;
        }
    }
    tables::checks(config, &database, out).await;
    for route in &config.routes {
        out.extend(queue::webhook_trigger(database.client(), route).await);
    }
}

/// Advice when webhook routes have no scheduled sweep: a webhook row that was refused (a full
/// queue, GitHub down past the retry budget) or never arrived is sent again by nobody — pg_net
/// never retries — so without a sweep it is never run.
fn no_sweep(config: &Config) -> Option<Check> {
    if config.reconcile.every.is_some() && config.database_url.is_some() {
        return unstarted(config);
    }
    if !config.takes_webhooks() || config.reconcile.every.is_some() {
        return None;
    }
    let routes = tables(config, |r| r.intake == Intake::Webhook);
    let what = format!(
        "no scheduled sweep for the webhook route{} of {}: a row refused (503) or never \
         delivered is never run, since its sender does not send it again",
        if routes.len() == 1 { "" } else { "s" },
        routes.join(", ")
    );
    let fix = match &config.database_url {
        None => "set DATABASE_URL in serve's environment (a role that may SELECT the routed \
                 tables, docs/queue.md \"The sweep's role\"): serve then sweeps every 6h, or as \
                 reconcile_every says; or run `rowbranch reconcile` from cron"
            .to_owned(),
        Some(_) => format!(
            "take reconcile_every = \"off\" out of {} (serve then sweeps every 6h), or set it \
             to a duration; or run `rowbranch reconcile` from cron",
            config.source.display()
        ),
    };
    Some(Check::advise(what, fix))
}

/// A failure when the scheduled sweep is on and a route has no `sweep_from`: the sweep leaves
/// that route alone (where it starts is the user's to say, not a guess).
fn unstarted(config: &Config) -> Option<Check> {
    let routes = tables(config, |r| r.sweep_from.is_none());
    if routes.is_empty() {
        return None;
    }
    Some(Check::fail(
        format!(
            "the scheduled sweep leaves {} alone: no sweep_from",
            routes.join(", ")
        ),
        format!(
            "add sweep_from = \"{}\" (now) to the route in {} (or set ROWBRANCH_SWEEP_FROM): \
             rows created before it are never swept, `rowbranch reconcile --since` runs those",
            crate::config::sweep_from_now(),
            config.source.display()
        ),
    ))
}

/// The tables of the routes `which` picks, for a check's text.
fn tables(config: &Config, which: impl Fn(&Route) -> bool) -> Vec<String> {
    let routes = config.routes.iter().filter(|r| which(r));
    routes.map(|r| r.table_name()).collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::no_sweep;
    use crate::config::{Config, TEST_LOCAL_CONFIG};

    #[test]
    fn webhook_routes_without_a_sweep_get_advice_and_with_one_none() {
        let parse = |text: &str, url: Option<&str>| {
            Config::parse(
                text,
                Path::new("/etc/rowbranch/rowbranch.toml"),
                &|key: &str| {
                    (key == "DATABASE_URL")
                        .then(|| url.map(str::to_owned))
                        .flatten()
                },
            )
            .unwrap()
        };
        let advice = no_sweep(&parse(TEST_LOCAL_CONFIG, None)).expect("advice");
        assert!(advice.ok, "advice, not a failure");
        assert!(
            advice.what.contains("no scheduled sweep"),
            "{}",
            advice.what
        );
        assert!(advice.fix.unwrap().contains("DATABASE_URL"));
        let off = format!("reconcile_every = \"off\"\n{TEST_LOCAL_CONFIG}");
        let advice = no_sweep(&parse(&off, Some("postgres://u@db/x"))).expect("advice");
        assert!(advice.fix.unwrap().contains("reconcile_every"));
        let url = Some("postgres://u@db/x");
        let unstarted = no_sweep(&parse(TEST_LOCAL_CONFIG, url)).expect("a failure");
        assert!(!unstarted.ok && unstarted.what.contains("no sweep_from"));
        assert!(unstarted.fix.unwrap().contains("sweep_from = \"20"));
        let from = format!("{TEST_LOCAL_CONFIG}sweep_from = \"2026-12-05T21:04:00+00:00\"\n");
        assert!(no_sweep(&parse(&from, url)).is_none());
    }
}
