//! The forge: where branches are claimed and work is dispatched. One trait, two homes: GitHub,
//! as a GitHub App or with a token (`github`), and a git repository on this machine (`local`).

pub mod github;
pub mod local;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::config::ForgeSettings;
use crate::identity::{BranchName, BranchPrefix, EventType, RefName, RepoName, RowId};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// A commit id as the forge names it (40 hex digits on GitHub and in git).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Sha(String);

impl Sha {
    pub fn new(hex: impl Into<String>) -> Sha {
        Sha(hex.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 digits, for people. Cut at the 12th character, not byte: a forge's answer
    /// is not checked to be hex.
    pub fn short(&self) -> &str {
        match self.0.char_indices().nth(12) {
            Some((end, _)) => &self.0[..end],
            None => &self.0,
        }
    }
}

impl fmt::Display for Sha {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The branch a claim starts from: the repository's default branch and its head commit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Base {
    pub branch: RefName,
    pub sha: Sha,
}

/// A branch under a route's prefix and the commit it points at, as a listing gives them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Branch {
    pub name: BranchName,
    pub sha: Sha,
}

/// A pull request, as `explain` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PullRequest {
    pub number: u64,
    /// The head branch's short name.
    pub head: String,
    /// `open` or `closed`, as GitHub says.
    pub state: String,
    pub merged: bool,
    pub merged_at: Option<chrono::DateTime<chrono::Utc>>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Its page, for people.
    pub url: String,
    /// The head branch's commit: a closed pull request whose branch name was claimed again
    /// since (a redo on a deleted branch's name) points elsewhere, and is not the new work's.
    #[serde(skip)]
    pub head_sha: Sha,
}

/// A workflow run, as `explain` shows it and as GitHub lists it (`GET …/actions/runs`, whose
/// `display_title` octocrab's model lacks). A run that `repository_dispatch` started runs on
/// the default branch: the row's branch is only in its title (the workflow's `run-name`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkflowRun {
    /// GitHub's run id (above 2^31 on github.com).
    pub id: u64,
    #[serde(default)]
    pub run_number: u64,
    /// The workflow's name.
    pub name: Option<String>,
    /// GitHub's `display_title`: the `run-name` the workflow sets.
    #[serde(default, rename(deserialize = "display_title"))]
    pub title: String,
    /// `queued`, `in_progress`, `completed`, …
    pub status: Option<String>,
    /// Once completed: `success`, `failure`, `cancelled`, …
    pub conclusion: Option<String>,
    #[serde(default)]
    pub event: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Its page, for people.
    #[serde(default, rename(deserialize = "html_url"))]
    pub url: String,
}

impl WorkflowRun {
    /// Whether the run's title names a branch of row `id`: any word of it that the prefix
    /// owns for the row (`rowbranch: feedback/42-add-dark-mode`, a redo's branch too), by the
    /// one rule of SPEC §4, so `feedback/420-x` is not row 42's.
    pub fn names_row(&self, prefix: &BranchPrefix, id: &RowId) -> bool {
        self.branches(prefix).any(|branch| prefix.owns(id, branch))
    }

    /// The branch under `prefix` the title names, as the work workflow's `run-name` writes it
    /// (`rowbranch: {branch}`, templates/workflow.yml): another workflow's run that mentions a
    /// branch is not the row's work.
    pub fn branches<'a>(&'a self, prefix: &'a BranchPrefix) -> impl Iterator<Item = &'a str> {
        let named = self.title.strip_prefix("rowbranch: ").map(str::trim);
        named
            .filter(|branch| prefix.tail(branch).is_some())
            .into_iter()
    }
}

/// What a forge can show of something it may not keep, or may not let the App read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing<T> {
    /// What the forge has (perhaps nothing).
    Found(Vec<T>),
    /// The forge keeps no such thing: the local forge has no pull requests and no runs.
    NotKept,
    /// The App may not read it: what GitHub says the request needs
    /// (`X-Accepted-GitHub-Permissions`, e.g. `actions=read`).
    NotPermitted { needs: String },
}

/// Whether the forge's credentials may write a repository, as far as the forge can tell
/// without writing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteAccess {
    /// The forge's answer says they may.
    Granted,
    /// They may not.
    Denied(Denial),
    /// The forge's answer does not say (why not): the first write will.
    Untold { why: String },
}

/// Credentials that may not write a repository: what they lack, and how to fix it. Written
/// whole, `{problem}; {fix}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}; {fix}")]
pub struct Denial {
    /// `the token cannot write acme/app: it lacks contents=write (…)`.
    pub problem: String,
    /// `in the workflow, give the job …`.
    pub fix: String,
}

/// What a claim (an atomic create-if-absent of a branch) found out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This call created the branch.
    Created,
    /// The branch existed already: another delivery holds the claim.
    Exists,
    /// The branch exists, but whether this call created it cannot be told (a lost answer).
    Ambiguous,
}

/// Why a forge call failed, as far as the caller needs to branch on it.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The forge cannot be reached or asks us to slow down; the same call may succeed later.
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The forge understood the request and refused it; sending it again will not help.
    #[error("{message}")]
    Refused { message: String },
    /// The process is shutting down and this row had not claimed yet: it is left for a
    /// redelivery or the sweep.
    #[error("rowbranch is shutting down; the row was not claimed")]
    ShuttingDown,
    /// Anything else: a bug here or there. Logged with its chain, answered opaquely. The message
    /// is the whole chain, so it is no source as well (that would print it twice).
    #[error("{0:#}")]
    Other(anyhow::Error),
}

impl ForgeError {
    pub fn refused(message: impl Into<String>) -> ForgeError {
        ForgeError::Refused {
            message: message.into(),
        }
    }
}

impl From<anyhow::Error> for ForgeError {
    fn from(e: anyhow::Error) -> ForgeError {
        ForgeError::Other(e)
    }
}

/// The operations the pipeline needs from a forge. Each is one request on GitHub. What a
/// forge keeps no pull requests or runs for (the local one) has none of them, by default.
#[async_trait]
pub trait Forge: Send + Sync {
    /// Branches (short names) that belong to row `id` under `prefix`: `{prefix}/{id}` or
    /// `{prefix}/{id}-…`, whatever the slug.
    async fn row_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
    ) -> Result<Vec<BranchName>, ForgeError> {
        let heads = self.row_branch_heads(repo, prefix, id).await?;
        Ok(heads.into_iter().map(|b| b.name).collect())
    }

    /// Whether a pull request in any state has `branch` as its head.
    async fn has_pull_request(
        &self,
        _repo: &RepoName,
        _branch: &BranchName,
    ) -> Result<bool, ForgeError> {
        Ok(false)
    }

    /// The default branch and its head commit: where a claim starts.
    async fn base(&self, repo: &RepoName) -> Result<Base, ForgeError>;

    /// Creates `branch` at `sha` if, and only if, it does not exist yet.
    async fn claim(
        &self,
        repo: &RepoName,
        branch: &BranchName,
        sha: &Sha,
    ) -> Result<Claim, ForgeError>;

    /// Starts the work: GitHub's `repository_dispatch`, or the local forge's command.
    async fn dispatch(
        &self,
        repo: &RepoName,
        event_type: &EventType,
        payload: &Value,
    ) -> Result<(), ForgeError>;

    /// Deletes `branch` if it still points at `sha`, undoing a claim whose dispatch failed.
    async fn release(
        &self,
        repo: &RepoName,
        branch: &BranchName,
        sha: &Sha,
    ) -> Result<(), ForgeError>;

    /// Every branch under `{prefix}/`, with the commit it points at: the sweep's one listing.
    async fn prefix_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
    ) -> Result<Vec<Branch>, ForgeError>;

    /// The pull requests (any state) from a branch under `prefix` in the repository's own
    /// account (a fork's branch of the same name is another branch), created at or after
    /// `since`.
    async fn pull_requests(
        &self,
        _repo: &RepoName,
        _prefix: &BranchPrefix,
        _since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<PullRequest>, ForgeError> {
        Ok(Listing::NotKept)
    }

    /// How many commits `branch` has that the base branch has not.
    async fn ahead_by(
        &self,
        repo: &RepoName,
        base: &Base,
        branch: &BranchName,
    ) -> Result<u64, ForgeError>;

    /// The branches of row `id` under `prefix`, with the commit each points at, for
    /// `explain`. By default from the prefix's listing; a forge that can ask for the row's own
    /// (GitHub's matching refs) does.
    async fn row_branch_heads(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
    ) -> Result<Vec<Branch>, ForgeError> {
        let all = self.prefix_branches(repo, prefix).await?;
        Ok(all
            .into_iter()
            .filter(|b| prefix.owns(id, b.name.as_str()))
            .collect())
    }

    /// The row's among [`Forge::pull_requests`], for `explain`.
    async fn row_pull_requests(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<PullRequest>, ForgeError> {
        let mut listed = self.pull_requests(repo, prefix, since).await?;
        if let Listing::Found(pulls) = &mut listed {
            pulls.retain(|p| prefix.owns(id, &p.head));
        }
        Ok(listed)
    }

    /// The `repository_dispatch` workflow runs whose title names a branch under `prefix`
    /// ([`WorkflowRun::branches`]), created at or after `since`, newest first: the sweep's one
    /// listing of a route's runs.
    async fn workflow_runs(
        &self,
        _repo: &RepoName,
        _prefix: &BranchPrefix,
        _since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<WorkflowRun>, ForgeError> {
        Ok(Listing::NotKept)
    }

    /// The row's among [`Forge::workflow_runs`] ([`WorkflowRun::names_row`]), for `explain`.
    async fn row_workflow_runs(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<WorkflowRun>, ForgeError> {
        let mut listed = self.workflow_runs(repo, prefix, since).await?;
        if let Listing::Found(runs) = &mut listed {
            runs.retain(|r| r.names_row(prefix, id));
        }
        Ok(listed)
    }

    /// Whether the forge can be reached with valid credentials (`GET /readyz`).
    async fn ready(&self) -> Result<(), ForgeError> {
        Ok(())
    }

    /// Whether the forge's credentials may write `repo` (claim, dispatch, release), asked
    /// without changing anything: at start, so that a setup that cannot work says so before
    /// the first row. A forge that writes whatever it is asked (the local one) may.
    async fn write_access(&self, _repo: &RepoName) -> Result<WriteAccess, ForgeError> {
        Ok(WriteAccess::Granted)
    }
}

/// Why the forge the config names could not be opened; each message says what to fix. The
/// causes are part of the message (a cause's text, not a source), so it reads whole wherever
/// it is shown.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The local forge's path is not a git repository.
    #[error(
        "{} is not a git repository: create one with `git init --bare {}` and make a first commit",
        path.display(),
        path.display()
    )]
    NotARepository { path: PathBuf },
    /// The key does not parse, or cannot sign the App's JWT.
    #[error(transparent)]
    Key(#[from] github::KeyError),
    /// The GitHub client cannot be built: the key file unreadable, `api_url` no URL or plain
    /// HTTP beyond loopback, no TLS roots, a token no header can carry. The whole sentence.
    #[error("{0}")]
    Github(String),
}

/// Opens the forge the settings name; its waits and retries end with `shutdown`'s grace, and
/// its requests count in `metrics`.
pub async fn open(
    settings: &ForgeSettings,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
) -> Result<Arc<dyn Forge>, OpenError> {
    match settings {
        ForgeSettings::Local(local) => Ok(Arc::new(local::LocalForge::open(local).await?)),
        ForgeSettings::Github(github) => Ok(Arc::new(github::GithubForge::new(
            github, shutdown, metrics,
        )?)),
    }
}

#[cfg(test)]
mod tests {
    use super::{ForgeError, Sha, WorkflowRun};
    use crate::identity::{BranchPrefix, RowId};

    #[test]
    fn an_other_error_shows_its_whole_chain_once() {
        let e = ForgeError::from(anyhow::anyhow!("the body did not parse").context("reading refs"));
        assert_eq!(e.to_string(), "reading refs: the body did not parse");
        assert!(std::error::Error::source(&e).is_none());
        let wrapped = anyhow::Error::new(e).context("claiming");
        assert_eq!(
            format!("{wrapped:#}"),
            "claiming: reading refs: the body did not parse"
        );
    }

    #[test]
    fn a_run_is_the_rows_when_its_title_names_one_of_its_branches() {
        let prefix = BranchPrefix::parse("feedback").unwrap();
        let id = RowId::parse(&serde_json::json!(42)).unwrap();
        let run = |title: &str| WorkflowRun {
            id: 1,
            run_number: 1,
            name: None,
            title: title.into(),
            status: None,
            conclusion: None,
            event: "repository_dispatch".into(),
            created_at: chrono::Utc::now(),
            url: String::new(),
        };
        for (title, ours) in [
            ("rowbranch: feedback/42-add-dark-mode", true),
            ("rowbranch: feedback/42", true),
            ("rowbranch: feedback/42-add-dark-mode-redo-1", true),
            // Another workflow's run that mentions the branch is not the row's work.
            ("Work on \"feedback/42-x\", again", false),
            ("deploy feedback/42-x", false),
            ("rowbranch: feedback/420-other-row", false),
            ("rowbranch: feedback/4", false),
            ("rowbranch: other/42-x", false),
            ("rowbranch: ", false),
        ] {
            assert_eq!(run(title).names_row(&prefix, &id), ours, "{title}");
        }
    }

    #[test]
    fn a_short_sha_is_its_first_twelve_characters() {
        assert_eq!(
            Sha::new("0123456789abcdef0123456789abcdef01234567").short(),
            "0123456789ab"
        );
        assert_eq!(Sha::new("abc").short(), "abc");
        assert_eq!(Sha::new("").short(), "");
        // A character across byte 12 is kept whole, not cut in two.
        assert_eq!(Sha::new("0123456789aé0123").short(), "0123456789aé");
        assert_eq!(Sha::new("ééééééééééééé").short(), "éééééééééééé");
    }
}
