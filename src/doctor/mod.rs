//! `rowbranch doctor`'s checks: config, secrets, the App's credentials, and for each route the
//! installation, its permissions, the default branch, a workflow that takes the dispatch, that
//! the workflow lets the App's bot start the work, that it bounds each run within the
//! route's `max_turns` and `work_timeout_minutes` and names the commands Claude may run; with `DATABASE_URL`, that each route fits its
//! table, that row level security lets the role see its rows, that a server on another
//! machine is reached with its certificate checked, and advice when webhook routes have no
//! scheduled sweep. With a token in place of the App, `token` checks what that mode needs
//! instead of the App, and `kick` the optional trigger that starts the drain workflow.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::instrument::WithSubscriber;
use yaml_rust2::{Yaml, YamlLoader};

use crate::config::env::secret_from_init;
use crate::config::{
    process_env, Config, ForgeSettings, GithubAuth, Intake, PrivateKeySource, Route,
};
use crate::forge::github::{self, GithubForge};
use crate::forge::local::LocalForge;
use crate::forge::{Forge, ForgeError, OpenError};
use crate::identity::{RefName, RepoName};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::templates::setup::PLACEHOLDER_APP_ID;
use crate::templates::workflow::{allows_bot, bot_login, claude_steps, Bound, ClaudeStep};

mod kick;
mod queue;
mod row_security;
mod tables;
mod token;
mod transit;

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
    pub(super) fn pass(what: impl Into<String>) -> Check {
        Check {
            ok: true,
            what: what.into(),
            fix: None,
        }
    }

    /// Passed, with advice: something only an optional feature needs is missing.
    pub(super) fn advise(what: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            ok: true,
            what: what.into(),
            fix: Some(fix.into()),
        }
    }

    pub(super) fn fail(what: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            ok: false,
            what: what.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Runs every check that applies to `config`.
pub async fn checks(config: &Config) -> Vec<Check> {
    quietly(all_checks(config)).await
}

async fn all_checks(config: &Config) -> Vec<Check> {
    let mut out = vec![Check::pass(format!(
        "config {} parses",
        config.source.display()
    ))];
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
    if let Some(advice) = no_sweep(config) {
        out.push(advice);
    }
    forge_checks(config, &mut out).await;
    transit::checks(config, &mut out);
    if config.reads_the_queue() {
        queue::checks(config, &mut out).await;
        if config.forge.token().is_some() {
            kick::checks(config, &mut out).await;
        }
    }
    tables::checks(config, &mut out).await;
    out
}

/// Advice when webhook routes have no scheduled sweep: a webhook row that was refused (a full
/// queue, GitHub down past the retry budget) or never arrived is sent again by nobody — pg_net
/// never retries — so without a sweep it is never run.
fn no_sweep(config: &Config) -> Option<Check> {
    if !config.takes_webhooks() || config.reconcile.every.is_some() {
        return None;
    }
    let routes: Vec<String> = config
        .routes
        .iter()
        .filter(|r| r.intake == Intake::Webhook)
        .map(|r| r.table_name())
        .collect();
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

async fn forge_checks(config: &Config, out: &mut Vec<Check>) {
    match &config.forge {
        ForgeSettings::Local(local) => match LocalForge::open(local).await {
            Ok(forge) => {
                out.push(Check::pass(format!(
                    "local repository {} opens",
                    local.path.display()
                )));
                for route in &config.routes {
                    out.push(match forge.base(&route.repo).await {
                        Ok(base) => Check::pass(format!(
                            "{}: default branch {} at {}",
                            route.repo,
                            base.branch,
                            base.sha.short()
                        )),
                        Err(e) => Check::fail(
                            format!("{}: {e}", route.repo),
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
            let GithubAuth::App { app_id, key } = &settings.auth else {
                return token::checks(config, settings, out).await;
            };
            if let Some(unfinished) = app_not_created(*app_id, key, &config.source) {
                out.push(unfinished);
                return;
            }
            let forge = match GithubForge::new(settings, Shutdown::new(), Arc::new(Metrics::new()))
            {
                Ok(forge) => {
                    out.push(Check::pass(
                        "GitHub App private key parses and signs the App's JWT",
                    ));
                    forge
                }
                Err(e) => {
                    let what = match &e {
                        OpenError::Key(key) => key.problem.clone(),
                        other => other.to_string(),
                    };
                    out.push(Check::fail(
                        what,
                        "set [github] private_key_path to the App's private key file (or GITHUB_APP_PRIVATE_KEY to its text): the App's settings page → Private keys → Generate a private key gives a PEM that starts with -----BEGIN RSA PRIVATE KEY----- (or -----BEGIN PRIVATE KEY-----)",
                    ));
                    return;
                }
            };
            let app_slug = match github::app_info(&forge).await {
                Ok(app) => {
                    out.push(Check::pass(format!(
                        "GitHub accepts the App's JWT: {} (id {})",
                        app.slug.as_deref().unwrap_or(&app.name),
                        app.id
                    )));
                    app.slug
                }
                Err(ForgeError::Unavailable { message, .. }) => {
                    out.push(no_answer(&settings.api_url, &message));
                    return;
                }
                Err(e) => {
                    out.push(Check::fail(
                        format!("GitHub refused the App's JWT at {}: {e}", settings.api_url),
                        "check app_id (GITHUB_APP_ID), the private key, and this machine's clock",
                    ));
                    return;
                }
            };
            let bot = app_slug.map(|slug| Bot {
                slug,
                called: "the App's bot",
            });
            for route in &config.routes {
                route_checks(&forge, bot.as_ref(), route, out).await;
            }
        }
    }
}

/// GitHub at `api_url` did not answer (`message` says how): no check that asks it can pass.
fn no_answer(api_url: &str, message: &str) -> Check {
    Check::fail(
        format!("GitHub at {api_url} did not answer: {}", one_line(message)),
        "check api_url (GITHUB_API_URL) and that this machine can reach it",
    )
}

/// `text` on one line, so that a check stays one line of the report.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A failed check when the App was never created from the manifest: the config still has
/// `init`'s placeholder id, or the key file `--manifest-code` writes is missing.
fn app_not_created(app_id: u64, key: &PrivateKeySource, config: &Path) -> Option<Check> {
    let dir = config
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let finish = format!(
        "create the App: open {0}/create-app.html, press the button, then run `rowbranch init --dir {0} --manifest-code CODE` with the code GitHub hands back; it sets app_id and writes the key",
        dir.display()
    );
    if app_id == PLACEHOLDER_APP_ID {
        return Some(Check::fail(
            format!(
                "app_id is {PLACEHOLDER_APP_ID}, the placeholder `rowbranch init` writes: the GitHub App is not created yet"
            ),
            finish,
        ));
    }
    match key {
        PrivateKeySource::File(path) if !path.exists() => Some(Check::fail(
            format!(
                "the GitHub App private key {} does not exist",
                path.display()
            ),
            format!("{finish}; or set GITHUB_APP_PRIVATE_KEY to the key's text"),
        )),
        _ => None,
    }
}

/// The bot that sends the dispatches, which the work workflow must let start the work: the
/// App's (`{slug}[bot]`), or with a token the one of a workflow's `GITHUB_TOKEN`.
pub(super) struct Bot {
    pub slug: String,
    /// How messages call it: "the App's bot".
    pub called: &'static str,
}

async fn route_checks(forge: &GithubForge, bot: Option<&Bot>, route: &Route, out: &mut Vec<Check>) {
    let repo = &route.repo;
    let permissions = match github::installation_permissions(forge, repo).await {
        Ok(p) => {
            out.push(Check::pass(format!("{repo}: the App is installed")));
            p
        }
        Err(e) => {
            out.push(Check::fail(
                format!("{repo}: {e}"),
                format!("install the App on {repo} (the App's page, Install App)"),
            ));
            return;
        }
    };
    out.push(permission(repo, &permissions, "contents", &["write"]));
    out.push(permission(
        repo,
        &permissions,
        "pull_requests",
        &["read", "write"],
    ));
    // Only `explain` reads workflow runs: without it the rows still run, so this advises.
    out.push(match permissions.get("actions").map(String::as_str) {
        Some(level @ ("read" | "write")) => Check::pass(format!("{repo}: actions: {level}")),
        other => Check::advise(
            format!(
                "{repo}: actions is {}: `rowbranch explain` cannot list the row's workflow runs",
                other.unwrap_or("not granted")
            ),
            "in the App's settings grant Actions: read, then accept the new permissions on the installation",
        ),
    });
    let base = match forge.base(repo).await {
        Ok(base) => {
            out.push(Check::pass(format!(
                "{repo}: default branch {} at {}",
                base.branch,
                base.sha.short()
            )));
            base
        }
        Err(e) => {
            out.push(Check::fail(
                format!("{repo}: cannot read the default branch: {e}"),
                "an empty repository needs a first commit; a token GitHub refuses needs the App installed on this repository",
            ));
            return;
        }
    };
    let files = match github::workflows(forge, repo, &base.branch).await {
        Ok(files) => files,
        Err(e) => {
            out.push(Check::fail(
                format!("{repo}: cannot read .github/workflows: {e}"),
                "the App needs contents read on the repository; see the message for anything else",
            ));
            return;
        }
    };
    work_workflow_checks(repo, &base.branch, &files, route, bot, out);
}

/// The route's work workflow among `files` (the default branch's workflows): one listens to
/// its dispatch, lets `bot` start the work, and bounds each run as the route says.
fn work_workflow_checks(
    repo: &RepoName,
    branch: &RefName,
    files: &[(String, String)],
    route: &Route,
    bot: Option<&Bot>,
    out: &mut Vec<Check>,
) {
    let listening: Vec<&(String, String)> = files
        .iter()
        .filter(|(_, text)| listens_for(text, route.event_type.as_str()))
        .collect();
    if listening.is_empty() {
        out.push(Check::fail(
            format!("{repo}: no workflow on {} listens to repository_dispatch `{}`", branch, route.event_type),
            format!("commit a workflow with `on: repository_dispatch: types: [{}]` to {} (`rowbranch init` writes one)", route.event_type, branch),
        ));
        return;
    }
    for (path, text) in listening {
        out.push(Check::pass(format!(
            "{repo}: {path} runs on repository_dispatch `{}`",
            route.event_type
        )));
        out.push(bot_check(repo, branch, path, text, bot));
        let steps = claude_steps(text).unwrap_or_default();
        if !steps.is_empty() {
            let at = Place { repo, branch, path };
            out.push(bound_check(&at, &TURNS, &steps, route.max_turns));
            out.push(bound_check(
                &at,
                &MINUTES,
                &steps,
                route.work_timeout_minutes,
            ));
            let catch_all = steps
                .iter()
                .find_map(|s| Some((&s.job, s.catch_all_bash.as_ref()?)));
            if let Some((job, rule)) = catch_all {
                out.push(Check::fail(
                    format!("{repo}: {path} lets Claude run any command: `{rule}` in the --allowedTools of job {job}"),
                    format!("name the git commands the work needs instead, as `rowbranch init` writes them (Bash(git add:*),Bash(git commit:*),Bash(git status:*),Bash(git diff:*),Bash(git log:*)), and commit it to {branch}"),
                ));
            }
        }
    }
}

/// Where a workflow is: its repository, the branch it was read from, its path.
struct Place<'a> {
    repo: &'a RepoName,
    branch: &'a RefName,
    path: &'a str,
}

/// One bound a run of the workflow must have, and the route's key that says how much.
struct Limit {
    /// What the workflow sets, as its reader writes it.
    setting: &'static str,
    /// The route's key.
    key: &'static str,
    /// What it counts.
    unit: &'static str,
    /// What happens without it.
    unbounded: &'static str,
    /// The step's value.
    of: fn(&ClaudeStep) -> &Bound,
    /// Where it goes, for the fix: `{value}` and `{job}` are filled in.
    fix: &'static str,
}

const TURNS: Limit = Limit {
    setting: "--max-turns",
    key: "max_turns",
    unit: "turns",
    unbounded: "claude-code-action then lets Claude take as many turns as it likes",
    of: |step| &step.max_turns,
    fix: "put `--max-turns {value}` in the claude_args of that step (job {job})",
};

const MINUTES: Limit = Limit {
    setting: "timeout-minutes",
    key: "work_timeout_minutes",
    unit: "minutes",
    unbounded: "GitHub then lets the job run for 360 minutes",
    of: |step| &step.job_timeout_minutes,
    fix: "set `timeout-minutes: {value}` on job {job}",
};

/// Whether every claude-code-action step of the workflow is bounded by `limit` at most as
/// much as the route says (`most`): a bound that is missing, unreadable or larger fails — the
/// route states what one row may cost — and a smaller one passes, saying so.
fn bound_check(at: &Place, limit: &Limit, steps: &[ClaudeStep], most: u32) -> Check {
    let Place { repo, branch, path } = at;
    let Limit {
        setting, key, unit, ..
    } = limit;
    let fix = |job: &str| {
        format!(
            "{} and commit it to {branch}",
            limit
                .fix
                .replace("{value}", &most.to_string())
                .replace("{job}", job)
        )
    };
    let mut largest = 0;
    for step in steps {
        let job = &step.job;
        match (limit.of)(step) {
            Bound::Set(n) if *n <= u64::from(most) => largest = largest.max(*n),
            Bound::Set(n) => {
                return Check::fail(
                    format!("{repo}: {path} allows {n} {unit} a run ({setting} in job {job}), more than the route's {key} = {most}"),
                    format!("{}, or raise {key} in the route to {n}", fix(job)),
                )
            }
            Bound::Missing => {
                return Check::fail(
                    format!("{repo}: {path} sets no {setting} in job {job}: {}, while the route's {key} = {most}", limit.unbounded),
                    fix(job),
                )
            }
            Bound::Unreadable(text) => {
                return Check::fail(
                    format!("{repo}: {path}: {setting} in job {job} is {text:?}, not a number rowbranch can hold to the route's {key} = {most}"),
                    fix(job),
                )
            }
        }
    }
    if largest == u64::from(most) {
        Check::pass(format!(
            "{repo}: {path} bounds a run to {most} {unit} ({setting}, the route's {key})"
        ))
    } else {
        Check::pass(format!(
            "{repo}: {path} bounds a run to {largest} {unit} ({setting}), within the route's {key} = {most}"
        ))
    }
}

/// Whether the workflow's claude-code-action steps let the App's bot start a run, the way the
/// action compares names: otherwise it refuses every dispatch rowbranch sends ("Workflow
/// initiated by non-human actor") and the run only marks the row done.
fn bot_check(
    repo: &RepoName,
    branch: &RefName,
    path: &str,
    workflow: &str,
    bot: Option<&Bot>,
) -> Check {
    let steps = claude_steps(workflow).unwrap_or_default();
    if steps.is_empty() {
        return Check::pass(format!(
            "{repo}: {path} runs no claude-code-action step: no allowed_bots to check"
        ));
    }
    let Some(Bot { slug, called }) = bot else {
        return Check::fail(
            format!("{repo}: GitHub did not give the App's slug, so {path}'s allowed_bots cannot be checked"),
            "make sure allowed_bots names the App's bot, NAME[bot] (the App's page shows its name)",
        );
    };
    let bot = bot_login(slug);
    if let Some(step) = steps.iter().find(|s| s.is_expression()) {
        return Check::pass(format!(
            "{repo}: {path}: allowed_bots in job {} is an expression, which only GitHub evaluates: it must let {bot} start the work",
            step.job
        ));
    }
    match steps.iter().find(|s| !allows_bot(&s.allowed_bots, slug)) {
        None => Check::pass(format!(
            "{repo}: {path} lets {called} {bot} start the work (allowed_bots)"
        )),
        Some(step) => Check::fail(
            format!(
                "{repo}: {path} does not let {called} {bot} start the work: allowed_bots is {:?} in job {}, so claude-code-action refuses every run (\"Workflow initiated by non-human actor\")",
                step.allowed_bots, step.job
            ),
            format!(
                "set `allowed_bots: \"{bot}\"` in that step and commit it to {branch} (the action compares without case and with or without [bot]; \"*\" allows every bot)"
            ),
        ),
    }
}

fn permission(
    repo: &RepoName,
    granted: &BTreeMap<String, String>,
    name: &str,
    enough: &[&str],
) -> Check {
    match granted.get(name) {
        Some(level) if enough.contains(&level.as_str()) => Check::pass(format!("{repo}: {name}: {level}")),
        other => Check::fail(
            format!("{repo}: {name} is {}, needs {}", other.map_or("not granted", String::as_str), enough[0]),
            format!("in the App's settings grant {name}: {}, then accept the new permissions on the installation", enough[0]),
        ),
    }
}

/// Whether a workflow's `on:` takes `repository_dispatch` of `event_type`: a bare
/// `repository_dispatch` (in a string or a list) takes every type; a mapping takes the listed
/// `types`, or every type when it lists none.
pub fn listens_for(workflow: &str, event_type: &str) -> bool {
    let Ok(docs) = YamlLoader::load_from_str(workflow) else {
        return false;
    };
    let Some(on) = docs.first().map(|doc| &doc["on"]) else {
        return false;
    };
    match on {
        Yaml::String(s) => s == "repository_dispatch",
        Yaml::Array(items) => items
            .iter()
            .any(|i| i.as_str() == Some("repository_dispatch")),
        Yaml::Hash(events) => match events.get(&Yaml::String("repository_dispatch".into())) {
            None => false,
            Some(Yaml::Null) => true,
            Some(spec) => match &spec["types"] {
                Yaml::BadValue | Yaml::Null => true,
                Yaml::String(t) => t == event_type,
                Yaml::Array(types) => types.iter().any(|t| t.as_str() == Some(event_type)),
                _ => false,
            },
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{listens_for, no_sweep};
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
        assert!(no_sweep(&parse(TEST_LOCAL_CONFIG, Some("postgres://u@db/x"))).is_none());
    }

    #[test]
    fn a_workflow_listens_by_string_list_or_types() {
        assert!(listens_for("on: repository_dispatch\njobs: {}", "feedback"));
        assert!(listens_for("on: [push, repository_dispatch]", "feedback"));
        assert!(listens_for("on:\n  repository_dispatch:\n", "feedback"));
        assert!(listens_for(
            "on:\n  repository_dispatch:\n    types: [feedback]\n",
            "feedback"
        ));
        assert!(listens_for(
            "\"on\":\n  repository_dispatch:\n    types:\n      - other\n      - feedback\n",
            "feedback"
        ));
    }

    #[test]
    fn a_workflow_for_other_events_or_types_does_not() {
        assert!(!listens_for("on: push", "feedback"));
        assert!(!listens_for(
            "on:\n  repository_dispatch:\n    types: [other]\n",
            "feedback"
        ));
        assert!(!listens_for("on: {workflow_dispatch: {}}", "feedback"));
        assert!(!listens_for(": not yaml : [", "feedback"));
        assert!(!listens_for("jobs: {}", "feedback"));
    }
}
