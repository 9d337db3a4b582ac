//! `rowbranch doctor` with GitHub: the credentials — the App's key, its JWT and its bot's name,
//! or a token in its place (`[github] token_env`), which has no App to check — then, for each
//! route's repository, what rowbranch needs there: the App's installation and its permissions,
//! or that the token may write (the probe of `Forge::write_access`, which changes nothing);
//! the default branch; a workflow on it that takes the route's dispatch, lets the bot that sends
//! it start the work and bounds each run within the route's `max_turns` and
//! `work_timeout_minutes` (and names the commands Claude may run: no catch-all Bash rule); and with a token, the drain workflow, which GitHub must still run (a
//! scheduled workflow of a public repository is disabled after 60 days without activity). With
//! a token it runs the same with a personal token on a laptop and with `GITHUB_TOKEN` in a job.

use std::path::Path;
use std::sync::Arc;

use super::workflow::{allows_bot, bot_login, claude_steps, listens_for, Bound, ClaudeStep};
use super::{Check, Checks, ACTIONS_BOT, DRAIN_WORKFLOW_FILE, PLACEHOLDER_APP_ID};
use crate::config::{Config, GithubAuth, GithubSettings, PrivateKeySource, Route};
use crate::forge::github::{self, GithubForge};
use crate::forge::{Base, Forge, ForgeError, Listing, OpenError, WriteAccess};
use crate::identity::{RefName, RepoName};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// What to do about a key that does not sign, whatever is wrong with it.
const KEY_FIX: &str = "set [github] private_key_path to the App's private key file (or GITHUB_APP_PRIVATE_KEY to its text): the App's settings page → Private keys → Generate a private key gives a PEM that starts with -----BEGIN RSA PRIVATE KEY----- (or -----BEGIN PRIVATE KEY-----)";

/// The checks with GitHub; a failed check that ends them when the rest could not pass.
pub(super) async fn checks(
    config: &Config,
    settings: &GithubSettings,
    out: &mut Checks,
) -> Result<(), Check> {
    let token = settings.token().map(|token| token.variable());
    match &settings.auth {
        GithubAuth::App { app_id, key } => app_created(*app_id, key, &config.source)?,
        GithubAuth::Token(token) => out.push(Check::pass(format!(
            "GitHub token from {} ([github] token_env): no App to check",
            token.variable()
        ))),
    }
    let forge = GithubForge::new(settings, Shutdown::new(), Arc::new(Metrics::new()));
    let forge = forge.map_err(|e| match e {
        e if token.is_some() => Check::fail(
            e.to_string(),
            "check api_url (GITHUB_API_URL): https://api.github.com, or https://HOST/api/v3",
        ),
        OpenError::Key(key) => Check::fail(key.problem, KEY_FIX),
        other => Check::fail(other.to_string(), KEY_FIX),
    })?;
    // The bot that sends the dispatches, which the work workflow must let start the work, and
    // how messages call it: the App's (`{slug}[bot]`), or with a token a job's `GITHUB_TOKEN`'s.
    let bot = match token {
        Some(_) => Some((ACTIONS_BOT.to_owned(), "GITHUB_TOKEN's bot")),
        None => {
            out.push(Check::pass(
                "GitHub App private key parses and signs the App's JWT",
            ));
            let app = github::app_info(&forge).await.map_err(|e| match e {
                ForgeError::Unavailable { message, .. } => no_answer(&settings.api_url, &message),
                e => Check::fail(
                    format!("GitHub refused the App's JWT at {}: {e}", settings.api_url),
                    "check app_id (GITHUB_APP_ID), the private key, and this machine's clock",
                ),
            })?;
            let (name, id) = (app.slug.as_deref().unwrap_or(&app.name), app.id);
            out.push(Check::pass(format!(
                "GitHub accepts the App's JWT: {name} (id {id})"
            )));
            out.push(hook_check(&forge, settings, config).await);
            app.slug.map(|slug| (slug, "the App's bot"))
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
        match repo_checks(&forge, settings, repo, &routes, bot.as_ref(), out).await {
            Ok(true) => {}
            Ok(false) => break,
            Err(check) => out.push(check),
        }
    }
    Ok(())
}

/// How to point the App's webhook at rowbranch (docs/operating.md, "The App's events").
const HOOK_FIX: &str = "on the App's settings page (General → Webhook): tick Active, set the Webhook URL to https://YOUR-HOST/github, and a Webhook secret, the same in GITHUB_WEBHOOK_SECRET; then (Permissions & events) subscribe to Pull request and Workflow run";

/// The App's webhook (`GET /app/hook/config`): it sends the App's events to rowbranch's
/// `POST /github` as JSON, signed, and rowbranch has the secret. GitHub's answer does not say
/// whether the webhook is active: one whose URL is `…/github` is taken as meant to be on.
async fn hook_check(forge: &GithubForge, settings: &GithubSettings, config: &Config) -> Check {
    let writes_back = config.routes.iter().any(|route| route.writes_back());
    let hook = match github::app_hook(forge).await {
        Ok(Some(hook)) if !hook.url.is_empty() => hook,
        Ok(_) if writes_back => {
            return Check::advise(
                "the App has no webhook: a row's state past dispatched (pr_open, merged, closed, \
                 failed) comes from the sweep alone",
                HOOK_FIX,
            )
        }
        Ok(_) => return Check::pass("the App has no webhook (no route writes its rows' states)"),
        Err(e) => {
            return Check::advise(
                format!(
                    "cannot read the App's webhook (GET /app/hook/config): {}",
                    one_line(e)
                ),
                "see the message; the later states of a row come from the sweep meanwhile",
            )
        }
    };
    let url = &hook.url;
    if !url.trim_end_matches('/').ends_with("/github") {
        let what = format!("the App's webhook goes to {url}, not to rowbranch's POST /github");
        return match writes_back {
            true => Check::fail(what, HOOK_FIX),
            false => Check::advise(
                format!("{what}; if it is active, rowbranch refuses each event there"),
                HOOK_FIX,
            ),
        };
    }
    if hook.content_type != "json" {
        return Check::fail(
            format!(
                "the App's webhook sends its events as {}, which POST /github refuses (415)",
                hook.content_type
            ),
            "on the App's settings page (Webhook) set the content type to application/json",
        );
    }
    if !hook.signs() {
        return Check::fail(
            "the App's webhook has no secret: GitHub sends its events unsigned, and POST /github \
             refuses each (401)",
            "set a Webhook secret on the App's settings page, and the same in GITHUB_WEBHOOK_SECRET",
        );
    }
    if settings.webhook_secret.is_none() {
        return Check::fail(
            format!(
                "the App's webhook sends its events to {url}, and GITHUB_WEBHOOK_SECRET is not \
                 set: POST /github answers each 404"
            ),
            "set GITHUB_WEBHOOK_SECRET to the App's webhook secret (`init --manifest-code` wrote \
             it into rowbranch.env; or set a new one on the App's settings page, and the same \
             here)",
        );
    }
    let what = format!(
        "the App's webhook sends its events to {url} as JSON, signed, and GITHUB_WEBHOOK_SECRET \
         is set"
    );
    match hook.insecure() {
        true => Check::advise(
            format!("{what}; but GitHub does not check {url}'s certificate (SSL verification off)"),
            "on the App's settings page (Webhook) turn SSL verification on",
        ),
        false => Check::pass(what),
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
fn one_line(text: impl std::fmt::Display) -> String {
    let text = text.to_string();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A failed check when the App was never created from the manifest: the config still has
/// `init`'s placeholder id, or the key file `--manifest-code` writes is missing.
fn app_created(app_id: u64, key: &PrivateKeySource, config: &Path) -> Result<(), Check> {
    let dir = config
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let finish = format!(
        "create the App: open {0}/create-app.html, press the button, then run `rowbranch init --dir {0} --manifest-code CODE` with the code GitHub hands back; it sets app_id and writes the key",
        dir.display()
    );
    if app_id == PLACEHOLDER_APP_ID {
        return Err(Check::fail(
            format!(
                "app_id is {PLACEHOLDER_APP_ID}, the placeholder `rowbranch init` writes: the GitHub App is not created yet"
            ),
            finish,
        ));
    }
    match key {
        PrivateKeySource::File(path) if !path.exists() => Err(Check::fail(
            format!(
                "the GitHub App private key {} does not exist",
                path.display()
            ),
            format!("{finish}; or set GITHUB_APP_PRIVATE_KEY to the key's text"),
        )),
        _ => Ok(()),
    }
}

/// The checks of one repository and its routes: `Err` with the failure after which the rest of
/// its cannot be checked; `Ok(false)` when GitHub did not answer, so that the next
/// repository's would only say so again.
async fn repo_checks(
    forge: &GithubForge,
    settings: &GithubSettings,
    repo: &RepoName,
    routes: &[&Route],
    bot: Option<&(String, &str)>,
    out: &mut Checks,
) -> Result<bool, Check> {
    let token = settings.token().map(|token| token.variable());
    if token.is_none() {
        out.extend(installation_checks(forge, repo).await?);
    }
    let Base { branch, sha } = match forge.base(repo).await {
        Ok(base) => base,
        Err(ForgeError::Unavailable { message, .. }) => {
            out.push(no_answer(&settings.api_url, &message));
            return Ok(false);
        }
        Err(e) => {
            return Err(match token {
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
            })
        }
    };
    let (reads, sha) = (token.map_or("", |_| "the token reads it: "), sha.short());
    out.push(Check::pass(format!(
        "{repo}: {reads}default branch {branch} at {sha}"
    )));
    if token.is_some() {
        out.push(write_check(forge, repo, &branch).await);
    }
    let files = github::workflows(forge, repo, &branch).await;
    let files = files.map_err(|e| {
        let who = token.map_or("the App", |_| "the token");
        Check::fail(
            format!("{repo}: cannot read .github/workflows: {e}"),
            format!(
                "{who} needs contents read on the repository; see the message for anything else"
            ),
        )
    })?;
    for route in routes {
        work_workflow_checks(repo, &branch, &files, route, bot, out);
    }
    if token.is_some() {
        drain_workflow_checks(forge, repo, &branch, &files, out).await;
    }
    Ok(true)
}

/// The permissions rowbranch needs of the App on a repository: the levels that are enough, and
/// what a missing one costs — none for one the rows need (a failure), the loss for one only a
/// command needs (advice) — and what the fix grants.
const PERMISSIONS: [(&str, &[&str], Option<&str>, &str); 3] = [
    ("contents", &["write"], None, "contents: write"),
    (
        "pull_requests",
        &["read", "write"],
        None,
        "pull_requests: read",
    ),
    (
        "actions",
        &["read", "write"],
        Some("`rowbranch explain` cannot list the row's workflow runs, a claim whose run pushed nothing is taken for a dead claim and dispatched (and paid for) again, and no row is marked failed"),
        "Actions: read",
    ),
];

/// The App is installed on `repo`, and what it may do there.
async fn installation_checks(forge: &GithubForge, repo: &RepoName) -> Result<Vec<Check>, Check> {
    let granted = github::installation_permissions(forge, repo).await;
    let granted = granted.map_err(|e| {
        Check::fail(
            format!("{repo}: {e}"),
            format!("install the App on {repo} (the App's page, Install App)"),
        )
    })?;
    let mut out = vec![Check::pass(format!("{repo}: the App is installed"))];
    for (name, enough, loss, grant) in PERMISSIONS {
        let level = granted.get(name).map(String::as_str);
        let fix = format!(
            "in the App's settings grant {grant}, then accept the new permissions on the installation"
        );
        let is = level.unwrap_or("not granted");
        out.push(match (level, loss) {
            (Some(level), _) if enough.contains(&level) => {
                Check::pass(format!("{repo}: {name}: {level}"))
            }
            (_, None) => Check::fail(format!("{repo}: {name} is {is}, needs {}", enough[0]), fix),
            (_, Some(loss)) => Check::advise(format!("{repo}: {name} is {is}: {loss}"), fix),
        });
    }
    Ok(out)
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
            format!("{repo}: the write probe failed: {}", one_line(e)),
            "see the message; the token needs contents write on the repository",
        ),
    }
}

/// The route's work workflow among `files` (the default branch's workflows): one listens to
/// its dispatch, lets `bot` (its slug, and how messages call it) start the work, and bounds
/// each run as the route says.
fn work_workflow_checks(
    repo: &RepoName,
    branch: &RefName,
    files: &[(String, String)],
    route: &Route,
    bot: Option<&(String, &str)>,
    out: &mut Checks,
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
        let catch_all = steps
            .iter()
            .find_map(|s| Some((&s.job, s.catch_all_bash.as_ref()?)));
        if let Some((job, rule)) = catch_all {
            out.push(Check::fail(
                format!("{at} lets Claude run any command: `{rule}` in the --allowedTools of job {job}"),
                format!("name the git commands the work needs instead, as `rowbranch init` writes them (Bash(git add:*),Bash(git commit:*),Bash(git status:*),Bash(git diff:*),Bash(git log:*)), and commit it to {branch}"),
            ));
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
    bot: Option<&(String, &str)>,
) -> Check {
    let at = format!("{repo}: {path}");
    let Some((slug, called)) = bot else {
        return Check::fail(
            format!("{repo}: GitHub did not give the App's slug, so {path}'s allowed_bots cannot be checked"),
            "make sure allowed_bots names the App's bot, NAME[bot] (the App's page shows its name)",
        );
    };
    let bot = bot_login(slug);
    // A `${{ }}` expression, which only GitHub can evaluate.
    if let Some(step) = steps.iter().find(|s| s.allowed_bots.contains("${{")) {
        return Check::pass(format!(
            "{at}: allowed_bots in job {} is an expression, which only GitHub evaluates: it must let {bot} start the work",
            step.job
        ));
    }
    match steps.iter().find(|s| !allows_bot(&s.allowed_bots, slug)) {
        None => Check::pass(format!("{at} lets {called} {bot} start the work (allowed_bots)")),
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
    /// Where to put the route's value in a job, for the fix.
    fix: fn(u32, &str) -> String,
}

const TURNS: Limit = Limit {
    setting: "--max-turns",
    key: "max_turns",
    unit: "turns",
    unbounded: "claude-code-action then lets Claude take as many turns as it likes",
    of: |step| &step.max_turns,
    most: |route| route.max_turns,
    fix: |value, job| {
        format!("put `--max-turns {value}` in the claude_args of that step (job {job})")
    },
};

const MINUTES: Limit = Limit {
    setting: "timeout-minutes",
    key: "work_timeout_minutes",
    unit: "minutes",
    unbounded: "GitHub then lets the job run for 360 minutes",
    of: |step| &step.job_timeout_minutes,
    most: |route| route.work_timeout_minutes,
    fix: |value, job| format!("set `timeout-minutes: {value}` on job {job}"),
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
    let fix = |job: &str| format!("{} and commit it to {branch}", (limit.fix)(most, job));
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
    out: &mut Checks,
) {
    const FILE: &str = DRAIN_WORKFLOW_FILE;
    let path = format!(".github/workflows/{FILE}");
    if !files.iter().any(|(found, _)| *found == path) {
        return out.push(Check::fail(
            format!("{repo}: {path} is not on {branch}: nothing drains the queue"),
            format!(
                "copy {FILE} (`rowbranch init --host actions` writes it) to .github/workflows/ \
                 and commit it to {branch}: scheduled workflows run from the default branch alone"
            ),
        ));
    }
    out.push(Check::pass(format!("{repo}: {path} is on {branch}")));
    out.push(match github::workflow_state(forge, repo, FILE).await {
        Ok(Listing::Found(states)) if states.first().is_some_and(|s| s == "active") => Check::pass(
            format!("{repo}: {FILE} is active: GitHub runs its schedule"),
        ),
        Ok(Listing::Found(states)) if !states.is_empty() => {
            let why = match states[0].as_str() {
                "disabled_inactivity" => {
                    ": GitHub disabled it after 60 days without activity in the repository, so \
                     neither its schedule nor a kick runs it, and rows wait in the queue"
                }
                _ => ", not active: GitHub does not run it, and rows wait in the queue",
            };
            Check::fail(
                format!("{repo}: {FILE} is {}{why}", states[0]),
                format!(
                    "re-enable it: the Actions tab → the workflow → Enable workflow, or `gh \
                     workflow enable {FILE}`"
                ),
            )
        }
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
                one_line(e)
            ),
            "see the message; the token needs actions read on the repository",
        ),
    });
}
