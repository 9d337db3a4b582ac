//! `rowbranch doctor` with a token in place of the App (`[github] token_env`): for each route's
//! repository, that the token reaches it and may write it (the probe of
//! `forge::github::access`, which changes nothing), and the two workflows on its default
//! branch — the work workflow, which must let `github-actions[bot]` start the work (the actor
//! of a dispatch sent with a workflow's `GITHUB_TOKEN`), and the drain workflow, which GitHub
//! must still run: a scheduled workflow of a public repository is disabled after 60 days
//! without activity. No App to check: no key, no installation, no manifest. It runs the same
//! with a personal access token on a laptop and with `GITHUB_TOKEN` inside the job.

use std::sync::Arc;

use super::{no_answer, one_line, work_workflow_checks, Bot, Check};
use crate::config::{Config, GithubSettings, Route};
use crate::forge::github::{self, GithubForge, WorkflowState};
use crate::forge::{Forge, ForgeError, WriteAccess};
use crate::identity::{RefName, RepoName};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::templates::actions::{ACTIONS_BOT, DRAIN_WORKFLOW_FILE};

/// The drain workflow, found by the file name `rowbranch init --host actions` gives it.
const DRAIN_WORKFLOW: &str = DRAIN_WORKFLOW_FILE;

/// How to turn a disabled workflow back on.
const ENABLE: &str = "re-enable it: the Actions tab → the workflow → Enable workflow, or `gh \
     workflow enable rowbranch-drain.yml`";

pub(super) async fn checks(config: &Config, settings: &GithubSettings, out: &mut Vec<Check>) {
    let Some(token) = settings.token() else {
        return;
    };
    out.push(Check::pass(format!(
        "GitHub token from {} ([github] token_env): no App to check",
        token.variable()
    )));
    let forge = match GithubForge::new(settings, Shutdown::new(), Arc::new(Metrics::new())) {
        Ok(forge) => forge,
        Err(e) => {
            out.push(Check::fail(
                e.to_string(),
                "check api_url (GITHUB_API_URL): https://api.github.com, or https://HOST/api/v3",
            ));
            return;
        }
    };
    let bot = Bot {
        slug: ACTIONS_BOT.to_owned(),
        called: "GITHUB_TOKEN's bot",
    };
    let mut repos: Vec<&RepoName> = Vec::new();
    for route in &config.routes {
        if !repos.contains(&&route.repo) {
            repos.push(&route.repo);
        }
    }
    for repo in repos {
        let routes: Vec<&Route> = config
            .routes
            .iter()
            .map(|route| &**route)
            .filter(|route| route.repo == *repo)
            .collect();
        if !repo_checks(&forge, settings, repo, &routes, &bot, out).await {
            return;
        }
    }
}

/// The checks of one repository; false when GitHub did not answer, so that the next
/// repository's would only say so again.
async fn repo_checks(
    forge: &GithubForge,
    settings: &GithubSettings,
    repo: &RepoName,
    routes: &[&Route],
    bot: &Bot,
    out: &mut Vec<Check>,
) -> bool {
    let variable = settings
        .token()
        .map_or("the token's variable", |t| t.variable());
    let base = match forge.base(repo).await {
        Ok(base) => {
            out.push(Check::pass(format!(
                "{repo}: the token reads it: default branch {} at {}",
                base.branch,
                base.sha.short()
            )));
            base
        }
        Err(ForgeError::Unavailable { message, .. }) => {
            out.push(no_answer(&settings.api_url, &message));
            return false;
        }
        Err(e) => {
            out.push(Check::fail(
                format!("{repo}: cannot read the default branch with the token: {e}"),
                format!(
                    "set {variable} to a token that can read and write {repo} (in the drain \
                     workflow, GITHUB_TOKEN reaches its own repository alone); an empty \
                     repository needs a first commit"
                ),
            ));
            return true;
        }
    };
    out.push(match forge.write_access(repo).await {
        Ok(WriteAccess::Granted) => Check::pass(format!(
            "{repo}: the token may write it (GitHub answered \"Reference already exists\" to the \
             probe, a create of {}'s own ref, which changes nothing)",
            base.branch
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
    });
    let files = match github::workflows(forge, repo, &base.branch).await {
        Ok(files) => files,
        Err(e) => {
            out.push(Check::fail(
                format!("{repo}: cannot read .github/workflows: {e}"),
                "the token needs contents read on the repository; see the message for anything \
                 else",
            ));
            return true;
        }
    };
    for route in routes {
        work_workflow_checks(repo, &base.branch, &files, route, Some(bot), out);
    }
    drain_workflow_checks(forge, repo, &base.branch, &files, out).await;
    true
}

/// The drain workflow is on the default branch, and GitHub runs it.
async fn drain_workflow_checks(
    forge: &GithubForge,
    repo: &RepoName,
    branch: &RefName,
    files: &[(String, String)],
    out: &mut Vec<Check>,
) {
    let path = format!(".github/workflows/{DRAIN_WORKFLOW}");
    if !files.iter().any(|(found, _)| *found == path) {
        out.push(Check::fail(
            format!("{repo}: {path} is not on {branch}: nothing drains the queue"),
            format!(
                "copy {DRAIN_WORKFLOW} (`rowbranch init --host actions` writes it) to \
                 .github/workflows/ and commit it to {branch}: scheduled workflows run from the \
                 default branch alone"
            ),
        ));
        return;
    }
    out.push(Check::pass(format!("{repo}: {path} is on {branch}")));
    out.push(
        match github::workflow_state(forge, repo, DRAIN_WORKFLOW).await {
            Ok(WorkflowState::Found { state, .. }) if state == "active" => Check::pass(format!(
                "{repo}: {DRAIN_WORKFLOW} is active: GitHub runs its schedule"
            )),
            Ok(WorkflowState::Found { state, .. }) if state == "disabled_inactivity" => {
                Check::fail(
                    format!(
                "{repo}: {DRAIN_WORKFLOW} is disabled_inactivity: GitHub disabled it after 60 \
                 days without activity in the repository, so neither its schedule nor a kick \
                 runs it, and rows wait in the queue"
            ),
                    ENABLE,
                )
            }
            Ok(WorkflowState::Found { state, .. }) => Check::fail(
                format!(
                    "{repo}: {DRAIN_WORKFLOW} is {state}, not active: GitHub does not run it, and \
                 rows wait in the queue"
                ),
                ENABLE,
            ),
            Ok(WorkflowState::Missing) => Check::fail(
                format!(
                    "{repo}: GitHub knows no workflow {DRAIN_WORKFLOW}, though the file is on \
                 {branch}"
                ),
                format!(
                    "check the file in the Actions tab (a workflow that does not parse is not \
                 registered); `actionlint .github/workflows/{DRAIN_WORKFLOW}` names what is wrong"
                ),
            ),
            Ok(WorkflowState::NotPermitted { needs }) => Check::fail(
                format!(
                    "{repo}: the token cannot read whether GitHub runs {DRAIN_WORKFLOW}: it lacks \
                 {needs} (GitHub's X-Accepted-GitHub-Permissions)"
                ),
                "give the token actions read (in the workflow, `permissions: actions: read`; a \
             fine-grained personal access token: Actions: read-only)",
            ),
            Err(e) => Check::fail(
                format!(
                    "{repo}: cannot read whether GitHub runs {DRAIN_WORKFLOW}: {}",
                    one_line(&e.to_string())
                ),
                "see the message; the token needs actions read on the repository",
            ),
        },
    );
}
