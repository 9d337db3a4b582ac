//! What GitHub sends: the fields rowbranch reads of each answer (serde ignores the rest). Plain
//! data: the requests that fetch them are the client's.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::forge::Sha;
use crate::identity::RepoName;

/// An installation's permissions: each one's name and level (`contents` → `write`).
pub type Permissions = BTreeMap<String, String>;

/// `GET /repos/{o}/{r}`.
#[derive(Deserialize)]
pub struct Repo {
    pub default_branch: String,
}

/// A git reference (`GET …/git/ref/…`, and each entry of `…/git/matching-refs/…`).
#[derive(Deserialize)]
pub struct Ref {
    #[serde(rename = "ref")]
    pub name: String,
    pub object: RefObject,
}

#[derive(Deserialize)]
pub struct RefObject {
    pub sha: Sha,
}

/// A pull request of `GET /repos/{o}/{r}/pulls`. The fields after `head` are only shown
/// (`explain`), so an answer without them still reads.
#[derive(Deserialize)]
pub struct Pull {
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub head: PullHead,
    #[serde(default)]
    pub number: u64,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub merged_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default)]
    pub html_url: String,
}

#[derive(Deserialize)]
pub struct PullHead {
    #[serde(rename = "ref")]
    pub name: String,
    /// `OWNER:BRANCH`; absent when the head's repository (a fork) was deleted.
    pub label: Option<String>,
}

impl PullHead {
    /// Whether the head is a branch of `repo`'s own account: a fork's branch of the same name
    /// is another branch, and a head without a label is a deleted fork's.
    pub fn is_in(&self, repo: &RepoName) -> bool {
        self.label.as_deref().is_some_and(|label| {
            label
                .split_once(':')
                .is_some_and(|(owner, _)| owner.eq_ignore_ascii_case(repo.owner()))
        })
    }
}

/// `GET /repos/{o}/{r}/compare/{base}...{head}`.
#[derive(Deserialize)]
pub struct Comparison {
    pub ahead_by: u64,
}

/// `GET /repos/{o}/{r}/actions/runs`: one page.
#[derive(Deserialize)]
pub struct WorkflowRuns {
    pub workflow_runs: Vec<WorkflowRun>,
}

/// A run of that listing: the fields `explain` shows.
#[derive(Deserialize)]
pub struct WorkflowRun {
    pub id: u64,
    #[serde(default)]
    pub run_number: u64,
    pub name: Option<String>,
    #[serde(default)]
    pub display_title: String,
    pub status: Option<String>,
    pub conclusion: Option<String>,
    #[serde(default)]
    pub event: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    #[serde(default)]
    pub html_url: String,
}

/// `GET /repos/{o}/{r}/actions/workflows/{id}`: whether GitHub runs it.
#[derive(Deserialize)]
pub struct Workflow {
    pub state: String,
    #[serde(default)]
    pub html_url: String,
}

/// `GET /repos/{o}/{r}/installation`.
#[derive(Deserialize)]
pub struct InstallationFound {
    pub id: u64,
    #[serde(default)]
    pub permissions: Permissions,
}

/// The App, as `GET /app` describes it.
#[derive(Debug, Deserialize)]
pub struct AppInfo {
    pub id: u64,
    pub slug: Option<String>,
    pub name: String,
}

/// An entry of a directory listing (`GET …/contents/{dir}`).
#[derive(Deserialize)]
pub struct ContentEntry {
    pub path: String,
    #[serde(rename = "type")]
    pub kind: String,
}

/// A file's content (`GET …/contents/{path}`), base64 wrapped every 60 characters.
#[derive(Deserialize)]
pub struct ContentFile {
    pub content: String,
}

/// An account, as `GET /users/{username}` describes it.
#[derive(Debug, Deserialize)]
pub struct Account {
    /// `User`, `Organization`, or `Bot` for an App's bot user.
    #[serde(rename = "type")]
    pub kind: String,
}

/// What GitHub hands back when an App is created from a manifest.
#[derive(Deserialize)]
pub struct ManifestApp {
    pub id: u64,
    pub slug: Option<String>,
    pub name: String,
    pub pem: String,
}

impl std::fmt::Debug for ManifestApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ManifestApp({}, id {})", self.name, self.id)
    }
}
