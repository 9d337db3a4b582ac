//! The forge: where branches are claimed and work is dispatched. One trait, two homes:
//! a local git repository (`local`) and, in time, GitHub.

pub mod github;
pub mod local;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::config::{Config, ForgeConfig};
use crate::identity::{BranchName, BranchPrefix, RowId};

/// `owner/name` of a repository, checked once so every call can trust it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepoName {
    owner: String,
    name: String,
}

impl RepoName {
    /// Parses `owner/name`; the message says what is wrong.
    pub fn parse(raw: &str) -> Result<RepoName, String> {
        let Some((owner, name)) = raw.split_once('/') else {
            return Err(format!("`{raw}` is not of the form owner/name"));
        };
        let owner_ok = !owner.is_empty()
            && owner.len() <= 39
            && owner.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        let name_ok = !name.is_empty()
            && name.len() <= 100
            && name != "."
            && name != ".."
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !owner_ok {
            return Err(format!(
                "`{owner}` is not a valid owner: use letters, digits and `-`, up to 39 characters"
            ));
        }
        if !name_ok {
            return Err(format!(
                "`{name}` is not a valid repository name: use letters, digits, `-`, `_` and `.`"
            ));
        }
        Ok(RepoName {
            owner: owner.to_owned(),
            name: name.to_owned(),
        })
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// The branch a claim starts from: the repository's default branch and its head commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    pub branch: String,
    pub sha: String,
}

/// A pull request whose head is a row's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub number: u64,
    pub head_ref: String,
    pub state: String,
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
    /// Anything else: a bug here or there. Logged with its chain, answered opaquely.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// The operations the pipeline needs from a forge. Each is one request on GitHub.
#[async_trait]
pub trait Forge: Send + Sync {
    /// Branches (short names) that belong to row `id` under `prefix`: `{prefix}/{id}` or
    /// `{prefix}/{id}-…`, whatever the slug.
    async fn row_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
    ) -> Result<Vec<String>, ForgeError>;

    /// A pull request in any state whose head is `branch`, if there is one.
    async fn pull_request_for(
        &self,
        repo: &RepoName,
        branch: &BranchName,
    ) -> Result<Option<PullRequest>, ForgeError>;

    /// The default branch and its head commit: where a claim starts.
    async fn base(&self, repo: &RepoName) -> Result<Base, ForgeError>;

    /// Creates `branch` at `sha` if, and only if, it does not exist yet.
    async fn claim(
        &self,
        repo: &RepoName,
        branch: &BranchName,
        sha: &str,
    ) -> Result<Claim, ForgeError>;

    /// Starts the work: GitHub's `repository_dispatch`, or the local forge's command.
    async fn dispatch(
        &self,
        repo: &RepoName,
        event_type: &str,
        payload: &Value,
    ) -> Result<(), ForgeError>;

    /// Deletes `branch` if it still points at `sha`, undoing a claim whose dispatch failed.
    async fn release(
        &self,
        repo: &RepoName,
        branch: &BranchName,
        sha: &str,
    ) -> Result<(), ForgeError>;

    /// Every branch under `{prefix}/`, with the commit it points at: the sweep's one listing.
    async fn prefix_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
    ) -> Result<Vec<(String, String)>, ForgeError>;

    /// The head branches of pull requests (any state) created at or after `since`.
    async fn pull_request_heads(
        &self,
        repo: &RepoName,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<String>, ForgeError>;

    /// How many commits `branch` has that `base` has not.
    async fn ahead_by(&self, repo: &RepoName, base: &str, branch: &str) -> Result<u64, ForgeError>;

    /// Whether the forge can be reached with valid credentials (`GET /readyz`).
    async fn ready(&self) -> Result<(), ForgeError> {
        Ok(())
    }
}

/// Opens the forge the config names, for the routed repositories.
pub async fn open(config: &Config) -> anyhow::Result<Arc<dyn Forge>> {
    match &config.forge {
        ForgeConfig::Local { path, on_dispatch } => {
            let forge = local::LocalForge::open(path, on_dispatch.clone()).await?;
            Ok(Arc::new(forge))
        }
        ForgeConfig::Github(github) => Ok(Arc::new(github::GithubForge::new(github)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repo_name_needs_an_owner_and_a_name() {
        assert!(RepoName::parse("acme/app").is_ok());
        assert!(RepoName::parse("acme").is_err());
        assert!(RepoName::parse("/app").is_err());
        assert!(RepoName::parse("acme/").is_err());
        assert!(RepoName::parse("acme/a/b").is_err());
        assert!(RepoName::parse("ac me/app").is_err());
        assert_eq!(
            RepoName::parse("acme/my.app_2").unwrap().to_string(),
            "acme/my.app_2"
        );
    }
}
