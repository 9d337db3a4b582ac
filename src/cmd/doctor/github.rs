//! `rowbranch doctor` with GitHub: the credentials — the App's key, its JWT and its bot's name,
//! or a token in its place (`[github] token_env`), which has no App to check — then, for each
//! route's repository, what rowbranch needs there: the App's installation and its permissions,
//! or that the token may write (the probe of `Forge::write_access`, which changes nothing);
//! the default branch; a workflow on it that takes the route's dispatch, lets the bot that sends
//! it start the work and bounds each run within the route's `max_turns` and
//! `work_timeout_minutes`; and with a token, the drain workflow, which GitHub must still run (a
//! scheduled workflow of a public repository is disabled after 60 days without activity). With
//! a token it runs the same with a personal token on a laptop and with `GITHUB_TOKEN` in a job.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::workflow::{allows_bot, bot_login, claude_steps, listens_for, Bound, ClaudeStep};
use super::{one_line, Check, ACTIONS_BOT, DRAIN_WORKFLOW_FILE, PLACEHOLDER_APP_ID};
use crate::config::{Config, GithubAuth, GithubSettings, PrivateKeySource, Route};
use crate::forge::github::{self, GithubForge};
use crate::forge::{Forge, ForgeError, Listing, OpenError, WriteAccess};
use crate::identity::{RefName, RepoName};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// The bot that sends the dispatches, which the work workflow must let start the work: the
/// App's (`{slug}[bot]`), or with a token the one of a workflow's `GITHUB_TOKEN`.
struct Bot {
    slug: String,
    /// How messages call it: "the App's bot".
    called: &'static str,
}

pub(super) async fn checks(config: &Config, settings: &GithubSettings, out: &mut Vec<Check>) {
    let token = settings.token().map(|token| token.variable());
    match (&settings.auth, token) {
        (GithubAuth::App { app_id, key }, _) => {
            if let Some(unfinished) = app_not_created(*app_id, key, &config.source) {
                return out.push(unfinished);
            }
        }
        (GithubAuth::Token(_), Some(variable)) => out.push(Check::pass(format!(
            "GitHub token from {variable} ([github] token_env): no App to check"
        ))),
        (GithubAuth::Token(_), None) => return,
    }
    let forge = match GithubForge::new(settings, Shutdown::new(), Arc::new(Metrics::new())) {
        Ok(forge) => forge,
        Err(e) if token.is_some() => {
            return out.push(Check::fail(
                e.to_string(),
                "check api_url (GITHUB_API_URL): https://api.github.com, or https://HOST/api/v3",
            ))
        }
        Err(e) => {
            let what = match &e {
                OpenError::Key(key) => key.problem.clone(),
                other => other.to_string(),
            };
            return out.push(Check::fail(
                what,
                "set [github] private_key_path to the App's private key file (or GITHUB_APP_PRIVATE_KEY to its text): the App's settings page → Private keys → Generate a private key gives a PEM that starts with -----BEGIN RSA PRIVATE KEY----- (or -----BEGIN PRIVATE KEY-----)",
            ));
        }
    };
    let bot = match token {
        Some(_) => Some(Bot {
            slug: ACTIONS_BOT.to_owned(),
            called: "GITHUB_TOKEN's bot",
        }),
        None => {
            out.push(Check::pass(
                "GitHub App private key parses and signs the App's JWT",
            ));
            let app =
                match github::app_info(&forge).await {
                    Ok(app) => app,
                    Err(ForgeError::Unavailable { message, .. }) => {
                        return out.push(no_answer(&settings.api_url, &message))
                    }
                    Err(e) => return out.push(Check::fail(
                        format!("GitHub refused the App's JWT at {}: {e}", settings.api_url),
                        "check app_id (GITHUB_APP_ID), the private key, and this machine's clock",
                    )),
                };
            out.push(Check::pass(format!(
                "GitHub accepts the App's JWT: {} (id {})",
                app.slug.as_deref().unwrap_or(&app.name),
                app.id
            )));
            app.slug.map(|slug| Bot {
                slug,
                called: "the App's bot",
            })
        }
    };
    // Each repository once, with its routes, in the config's order.
    let mut repos: Vec<(&RepoName, Vec<&Route>)> = Vec::new();
    for route in &config.routes {
        match repos.iter_mut().find(|(repo, _)| **repo == route.repo) {
            Some((_, routes)) => routes.push(route),
            None => repos.push((&route.repo, vec![route])),
        }
    }
    for (repo, routes) in repos {
        if !repo_checks(&forge, settings, repo, &routes, bot.as_ref(), out).await {
            return;
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

/// A failed check when the App was never created from the manifest: the config still has
/// `init`'s placeholder id, or the key file `--manifest-code` writes is missing.
fn app_not_created(app_id: u64, key: &PrivateKeySource, config: &Path) -> Option<Check> {
    let dir = config
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
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

/// The checks of one repository and its routes; false when GitHub did not answer, so that the
/// next repository's would only say so again.
async fn repo_checks(
    forge: &GithubForge,
    settings: &GithubSettings,
    repo: &RepoName,
    routes: &[&Route],
    bot: Option<&Bot>,
    out: &mut Vec<Check>,
) -> bool {
    let token = settings.token().map(|token| token.variable());
    if token.is_none() && !installation_checks(forge, repo, out).await {
        return true;
    }
    let base = match forge.base(repo).await {
        Ok(base) => base,
        Err(ForgeError::Unavailable { message, .. }) => {
            out.push(no_answer(&settings.api_url, &message));
            return false;
        }
        Err(e) => {
            out.push(match token {
                Some(variable) => Check::fail(
                    format!("{repo}: cannot read the default branch with the token: {e}"),
                    format!(
                        "set {variable} to a token that can read and write {repo} (in the drain \
                         workflow, GITHUB_TOKEN reaches its own repository alone); an empty \
                         repository needs a first commit"
                    ),
                ),
                None => Check::fail(
                    format!("{repo}: cannot read the default branch: {e}"),
                    "an empty repository needs a first commit; a token GitHub refuses needs the App installed on this repository",
                ),
            });
            return true;
        }
    };
    let reads = token.map_or("", |_| "the token reads it: ");
    out.push(Check::pass(format!(
        "{repo}: {reads}default branch {} at {}",
        base.branch,
        base.sha.short()
    )));
    if token.is_some() {
        out.push(write_check(forge, repo, &base.branch).await);
    }
    let files = match github::workflows(forge, repo, &base.branch).await {
        Ok(files) => files,
        Err(e) => {
            let who = token.map_or("the App", |_| "the token");
            out.push(Check::fail(
                format!("{repo}: cannot read .github/workflows: {e}"),
                format!("{who} needs contents read on the repository; see the message for anything else"),
            ));
            return true;
        }
    };
    for route in routes {
        work_workflow_checks(repo, &base.branch, &files, route, bot, out);
    }
    if token.is_some() {
        drain_workflow_checks(forge, repo, &base.branch, &files, out).await;
    }
    true
}

/// The App is installed on `repo` with the permissions rowbranch needs; false when it is not.
async fn installation_checks(forge: &GithubForge, repo: &RepoName, out: &mut Vec<Check>) -> bool {
    let granted = match github::installation_permissions(forge, repo).await {
        Ok(granted) => granted,
        Err(e) => {
            out.push(Check::fail(
                format!("{repo}: {e}"),
                format!("install the App on {repo} (the App's page, Install App)"),
            ));
            return false;
        }
    };
    out.push(Check::pass(format!("{repo}: the App is installed")));
    for (name, enough) in [
        ("contents", &["write"][..]),
        ("pull_requests", &["read", "write"]),
    ] {
        out.push(permission(repo, &granted, name, enough));
    }
    // Only `explain` reads workflow runs: without it the rows still run, so this advises.
    out.push(match granted.get("actions").map(String::as_str) {
        Some(level @ ("read" | "write")) => Check::pass(format!("{repo}: actions: {level}")),
        other => Check::advise(
            format!(
                "{repo}: actions is {}: `rowbranch explain` cannot list the row's workflow runs",
                other.unwrap_or("not granted")
            ),
            "in the App's settings grant Actions: read, then accept the new permissions on the installation",
        ),
    });
    true
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

/// Whether the token may write `repo`, by the probe that changes nothing.
async fn write_check(forge: &GithubForge, repo: &RepoName, branch: &RefName) -> Check {
    match forge.write_access(repo).await {
        Ok(WriteAccess::Granted) => Check::pass(format!(
            "{repo}: the token may write it (GitHub answered \"Reference already exists\" to the \
             probe, a create of {branch}'s own ref, which changes nothing)"
        )),
        Ok(WriteAccess::Denied(denial)) => Check::fail(denial.problem, denial.fix),
        Ok(WriteAccess::Untold { why }) => Check::advise(
            format!("{repo}: cannot tell whether the token may write it: {why}"),
            "the first claim will say; the drain workflow's job needs `permissions: contents: \
             write`",
        ),
        Err(e) => Check::fail(
            format!(
                "{repo}: the write probe failed: {}",
                one_line(&e.to_string())
            ),
            "see the message; the token needs contents write on the repository",
        ),
    }
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
    let event_type = &route.event_type;
    let mut listening = files
        .iter()
        .filter(|(_, text)| listens_for(text, event_type.as_str()))
        .peekable();
    if listening.peek().is_none() {
        out.push(Check::fail(
            format!("{repo}: no workflow on {branch} listens to repository_dispatch `{event_type}`"),
            format!("commit a workflow with `on: repository_dispatch: types: [{event_type}]` to {branch} (`rowbranch init` writes one)"),
        ));
        return;
    }
    for (path, text) in listening {
        let at = format!("{repo}: {path}");
        out.push(Check::pass(format!(
            "{at} runs on repository_dispatch `{event_type}`"
        )));
        let steps = claude_steps(text).unwrap_or_default();
        if steps.is_empty() {
            out.push(Check::pass(format!(
                "{at} runs no claude-code-action step: no allowed_bots to check"
            )));
            continue;
        }
        out.push(bot_check(repo, path, branch, &steps, bot));
        for limit in [&TURNS, &MINUTES] {
            out.push(bound_check(&at, branch, limit, &steps, (limit.most)(route)));
        }
    }
}

/// Whether the workflow's claude-code-action steps let the bot start a run, the way the action
/// compares names: otherwise it refuses every dispatch rowbranch sends ("Workflow initiated by
/// non-human actor") and the run only marks the row done.
fn bot_check(
    repo: &RepoName,
    path: &str,
    branch: &RefName,
    steps: &[ClaudeStep],
    bot: Option<&Bot>,
) -> Check {
    let at = format!("{repo}: {path}");
    let Some(Bot { slug, called }) = bot else {
        return Check::fail(
            format!("{repo}: GitHub did not give the App's slug, so {path}'s allowed_bots cannot be checked"),
            "make sure allowed_bots names the App's bot, NAME[bot] (the App's page shows its name)",
        );
    };
    let bot = bot_login(slug);
    if let Some(step) = steps.iter().find(|s| s.is_expression()) {
        return Check::pass(format!(
            "{at}: allowed_bots in job {} is an expression, which only GitHub evaluates: it must let {bot} start the work",
            step.job
        ));
    }
    match steps.iter().find(|s| !allows_bot(&s.allowed_bots, slug)) {
        None => Check::pass(format!(
            "{at} lets {called} {bot} start the work (allowed_bots)"
        )),
        Some(step) => Check::fail(
            format!(
                "{at} does not let {called} {bot} start the work: allowed_bots is {:?} in job {}, so claude-code-action refuses every run (\"Workflow initiated by non-human actor\")",
                step.allowed_bots, step.job
            ),
            format!(
                "set `allowed_bots: \"{bot}\"` in that step and commit it to {branch} (the action compares without case and with or without [bot]; \"*\" allows every bot)"
            ),
        ),
    }
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
    /// The route's value.
    most: fn(&Route) -> u32,
    /// Where it goes, for the fix: `{value}` and `{job}` are filled in.
    fix: &'static str,
}

const TURNS: Limit = Limit {
    setting: "--max-turns",
    key: "max_turns",
    unit: "turns",
    unbounded: "claude-code-action then lets Claude take as many turns as it likes",
    of: |step| &step.max_turns,
    most: |route| route.max_turns,
    fix: "put `--max-turns {value}` in the claude_args of that step (job {job})",
};

const MINUTES: Limit = Limit {
    setting: "timeout-minutes",
    key: "work_timeout_minutes",
    unit: "minutes",
    unbounded: "GitHub then lets the job run for 360 minutes",
    of: |step| &step.job_timeout_minutes,
    most: |route| route.work_timeout_minutes,
    fix: "set `timeout-minutes: {value}` on job {job}",
};

/// Whether every claude-code-action step of the workflow is bounded by `limit` at most as
/// much as the route says (`most`): a bound that is missing, unreadable or larger fails — the
/// route states what one row may cost — and a smaller one passes, saying so.
fn bound_check(
    at: &str,
    branch: &RefName,
    limit: &Limit,
    steps: &[ClaudeStep],
    most: u32,
) -> Check {
    let Limit {
        setting, key, unit, ..
    } = limit;
    let fix = |job: &str| {
        let fix = limit.fix.replace("{value}", &most.to_string());
        format!("{} and commit it to {branch}", fix.replace("{job}", job))
    };
    let mut largest = 0;
    for step in steps {
        let job = &step.job;
        let problem = match (limit.of)(step) {
            Bound::Set(n) if *n <= u64::from(most) => {
                largest = largest.max(*n);
                continue;
            }
            Bound::Set(n) => {
                return Check::fail(
                    format!("{at} allows {n} {unit} a run ({setting} in job {job}), more than the route's {key} = {most}"),
                    format!("{}, or raise {key} in the route to {n}", fix(job)),
                )
            }
            Bound::Missing => format!("{at} sets no {setting} in job {job}: {}, while the route's {key} = {most}", limit.unbounded),
            Bound::Unreadable(text) => format!("{at}: {setting} in job {job} is {text:?}, not a number rowbranch can hold to the route's {key} = {most}"),
        };
        return Check::fail(problem, fix(job));
    }
    Check::pass(match largest == u64::from(most) {
        true => format!("{at} bounds a run to {most} {unit} ({setting}, the route's {key})"),
        false => format!(
            "{at} bounds a run to {largest} {unit} ({setting}), within the route's {key} = {most}"
        ),
    })
}

/// The drain workflow is on the default branch, and GitHub runs it.
async fn drain_workflow_checks(
    forge: &GithubForge,
    repo: &RepoName,
    branch: &RefName,
    files: &[(String, String)],
    out: &mut Vec<Check>,
) {
    const FILE: &str = DRAIN_WORKFLOW_FILE;
    let path = format!(".github/workflows/{FILE}");
    if !files.iter().any(|(found, _)| *found == path) {
        out.push(Check::fail(
            format!("{repo}: {path} is not on {branch}: nothing drains the queue"),
            format!(
                "copy {FILE} (`rowbranch init --host actions` writes it) to .github/workflows/ \
                 and commit it to {branch}: scheduled workflows run from the default branch alone"
            ),
        ));
        return;
    }
    out.push(Check::pass(format!("{repo}: {path} is on {branch}")));
    let enable = format!(
        "re-enable it: the Actions tab → the workflow → Enable workflow, or `gh workflow enable \
         {FILE}`"
    );
    out.push(match github::workflow_state(forge, repo, FILE).await {
        Ok(Listing::Found(states)) if !states.is_empty() => match states[0].as_str() {
            "active" => Check::pass(format!(
                "{repo}: {FILE} is active: GitHub runs its schedule"
            )),
            "disabled_inactivity" => Check::fail(
                format!(
                    "{repo}: {FILE} is disabled_inactivity: GitHub disabled it after 60 days \
                     without activity in the repository, so neither its schedule nor a kick runs \
                     it, and rows wait in the queue"
                ),
                enable,
            ),
            state => Check::fail(
                format!(
                    "{repo}: {FILE} is {state}, not active: GitHub does not run it, and rows \
                     wait in the queue"
                ),
                enable,
            ),
        },
        Ok(Listing::NotPermitted { needs }) => Check::fail(
            format!(
                "{repo}: the token cannot read whether GitHub runs {FILE}: it lacks {needs} \
                 (GitHub's X-Accepted-GitHub-Permissions)"
            ),
            "give the token actions read (in the workflow, `permissions: actions: read`; a \
             fine-grained personal access token: Actions: read-only)",
        ),
        // GitHub knows no workflow by that file name (only the local forge keeps none at all).
        Ok(Listing::Found(_) | Listing::NotKept) => Check::fail(
            format!("{repo}: GitHub knows no workflow {FILE}, though the file is on {branch}"),
            format!(
                "check the file in the Actions tab (a workflow that does not parse is not \
                 registered); `actionlint .github/workflows/{FILE}` names what is wrong"
            ),
        ),
        Err(e) => Check::fail(
            format!(
                "{repo}: cannot read whether GitHub runs {FILE}: {}",
                one_line(&e.to_string())
            ),
            "see the message; the token needs actions read on the repository",
        ),
    });
}
