//! The GitHub forge: rowbranch as a GitHub App, or with a token (`[github] token_env`), through
//! octocrab. Reads go straight out (and the reads of one row run concurrently); writes go
//! through the installation's pacer (the token's, with a token); every call runs inside the
//! one retry policy.

mod access;
mod client;
mod jwt;
mod pace;
mod retry;
mod setup;

pub use jwt::KeyError;
pub use setup::{
    account_type, app_info, convert_manifest, installation_permissions, workflow_state, workflows,
    AppInfo, ManifestApp, WorkflowState,
};

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use octocrab::models::repos::{Object, Ref};
use octocrab::params::repos::Reference;
use octocrab::params::{Direction, State};
use octocrab::{Octocrab, Page};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;

use self::client::{
    empty_repository, encode_path, token_client, unexpected, AppClient, Auth, Installation, Limits,
    Refusal,
};
use self::retry::{Attempt, Cause, RetryPolicy, Setback};
use super::{
    Base, Branch, Claim, Forge, ForgeError, Listing, OpenError, PullRequest, Sha, WorkflowRun,
    WriteAccess,
};
use crate::config::{GithubAuth, GithubSettings, PrivateKeySource};
use crate::identity::{BranchName, BranchPrefix, EventType, RefName, RepoName, RowId};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// How long the default branch's name is trusted (it rarely changes).
const DEFAULT_BRANCH_TTL: Duration = Duration::from_secs(600);

/// rowbranch on GitHub.
pub struct GithubForge {
    auth: Auth,
    retry: RetryPolicy,
    /// How long a default branch's head is reused before it is read again.
    head_ttl: Duration,
    /// Each repository's default branch and head, behind a lock of its own.
    bases: Mutex<HashMap<RepoName, Arc<Mutex<Option<CachedBase>>>>>,
}

struct CachedBase {
    base: Base,
    branch_read: Instant,
    head_read: Instant,
}

/// A run of `GET /repos/{o}/{r}/actions/runs`: the fields `explain` shows (octocrab's model
/// has no `display_title`, the title a row's run is told by).
#[derive(Deserialize)]
struct RunListed {
    id: u64,
    #[serde(default)]
    run_number: u64,
    name: Option<String>,
    #[serde(default)]
    display_title: String,
    status: Option<String>,
    conclusion: Option<String>,
    #[serde(default)]
    event: String,
    created_at: chrono::DateTime<chrono::Utc>,
    #[serde(default)]
    html_url: String,
}

impl GithubForge {
    /// Builds the forge for the routed repositories. Reads the App's private key (with a
    /// token, nothing); makes no request. Once `shutdown` begins, rows waiting to claim give up
    /// and claimed rows' writes skip the pace, within the grace.
    pub fn new(
        settings: &GithubSettings,
        shutdown: Shutdown,
        metrics: Arc<Metrics>,
    ) -> Result<GithubForge, OpenError> {
        let key = match &settings.auth {
            GithubAuth::App { app_id, key } => Some(jwt::AppKey::new(
                *app_id,
                &match key {
                    PrivateKeySource::Pem(pem) => pem.clone(),
                    PrivateKeySource::File(path) => {
                        std::fs::read_to_string(path).map_err(|cause| OpenError::KeyUnreadable {
                            path: path.clone(),
                            cause,
                        })?
                    }
                },
            )?),
            GithubAuth::Token(_) => None,
        };
        let gh = client::octocrab(&settings.api_url, Arc::clone(&metrics))?;
        let limits = Limits {
            pace: settings.pace,
            max_concurrent_requests: settings.max_concurrent_requests,
            shutdown: shutdown.clone(),
            metrics: Arc::clone(&metrics),
        };
        let auth = match (&settings.auth, key) {
            (GithubAuth::Token(token), _) => {
                Auth::Token(Arc::new(token_client(token, &gh, &limits)?))
            }
            (_, key) => Auth::App(Arc::new(AppClient::new(
                key.expect("an App has a key"),
                gh,
                limits,
            ))),
        };
        let host = settings.api_url.parse::<http::Uri>().ok();
        Ok(GithubForge {
            auth,
            retry: RetryPolicy {
                budget: settings.retry_budget,
                shutdown,
                metrics,
                // The host of `api_url`, with its port if it has one, for messages.
                host: host
                    .as_ref()
                    .and_then(|uri| uri.authority())
                    .map_or_else(|| settings.api_url.clone(), |a| a.as_str().to_owned()),
            },
            head_ttl: settings.base_cache,
            bases: Mutex::new(HashMap::new()),
        })
    }

    /// GitHub's host, for messages: `api.github.com`, or a GitHub Enterprise Server's.
    pub fn host(&self) -> &str {
        &self.retry.host
    }

    /// A read: retried as one unit with the installation lookup it needs.
    async fn read<T, F, Fut>(&self, what: &str, repo: &RepoName, f: F) -> Result<T, ForgeError>
    where
        F: Fn(Arc<Installation>) -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        self.retry
            .run(what, |_| async {
                let installation = self.auth.installation(repo).await?;
                f(installation).await.map_err(Setback::not_applied)
            })
            .await
    }

    /// The commit a branch points at, or `None`.
    /// (https://docs.github.com/rest/git/refs#get-a-reference)
    async fn branch_sha(
        installation: &Installation,
        repo: &RepoName,
        branch: &str,
    ) -> Attempt<Option<Sha>> {
        let reference = Reference::Branch(encode_path(branch));
        let found = installation
            .run(|gh| {
                let reference = &reference;
                async move { gh.repos(repo.owner(), repo.name()).get_ref(reference).await }
            })
            .await?;
        match found {
            Ok(found) => Ok(commit(found)),
            Err(refusal) => match refusal.status_code.as_u16() {
                404 => Ok(None),
                409 => Err(empty_repository(repo)),
                _ => unexpected(&refusal),
            },
        }
    }

    /// One look at whether `branch` exists, for deciding after a claim gave up; `None` when
    /// GitHub does not say.
    async fn branch_exists(&self, repo: &RepoName, branch: &BranchName) -> Option<bool> {
        let installation = self.auth.installation(repo).await.ok()?;
        Self::branch_sha(&installation, repo, branch.as_str())
            .await
            .ok()
            .map(|sha| sha.is_some())
    }

    /// One request of a read, retried as one unit with the installation lookup it needs; its
    /// refusal is the repository's (404), an empty one's (409), or a retry decision.
    async fn read_one<T, F, Fut>(
        &self,
        what: &str,
        repo: &RepoName,
        request: F,
    ) -> Result<T, ForgeError>
    where
        F: Fn(Octocrab) -> Fut,
        Fut: Future<Output = octocrab::Result<T>>,
    {
        self.read(what, repo, |installation| {
            let request = &request;
            async move {
                let answer = installation.run(request).await?;
                answer.map_err(|refusal| read_refused(&installation, repo, &refusal))
            }
        })
        .await
    }

    /// `GET /repos/{o}/{r}/git/matching-refs/heads/{under}`: every branch whose name starts
    /// with `under`, in one answer (GitHub does not page it).
    /// (https://docs.github.com/rest/git/refs#list-matching-references)
    async fn matching_refs(
        &self,
        what: &str,
        repo: &RepoName,
        prefix: &BranchPrefix,
        under: &str,
    ) -> Result<Vec<Branch>, ForgeError> {
        let refs = self
            .read_one(what, repo, |gh| async move {
                let listing = gh.repos(repo.owner(), repo.name());
                listing.list_matching_refs(format!("heads/{under}")).await
            })
            .await?;
        Ok(refs
            .into_iter()
            .filter_map(|r| {
                let name = BranchName::listed(prefix, r.ref_field.strip_prefix("refs/heads/")?)?;
                Some(Branch {
                    name,
                    sha: commit(r)?,
                })
            })
            .collect())
    }

    /// The pull requests (any state) from a branch under `prefix` in the repository's own
    /// account (a fork's branch of the same name is another branch) created at or after
    /// `since`: `GET /repos/{o}/{r}/pulls?state=all&sort=created&direction=desc`, page by page
    /// until they are older. A branch deleted once its pull request merged is found too.
    /// (https://docs.github.com/rest/pulls/pulls#list-pull-requests)
    async fn pull_requests_since(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<PullRequest>, ForgeError> {
        self.read("listing pull requests", repo, |installation| async move {
            let first = |gh: Octocrab| async move {
                let pulls = gh.pulls(repo.owner(), repo.name());
                let list = pulls
                    .list()
                    .state(State::All)
                    .direction(Direction::Descending);
                let list = list.sort(octocrab::params::pulls::Sort::Created);
                list.per_page(100).send().await
            };
            let mut found = Vec::new();
            let read = pages(&installation, first, |pulls| {
                let older = pulls.last().is_some_and(|p| p.created_at < Some(since));
                found.extend(pulls.into_iter().filter_map(|p| {
                    let created_at = p.created_at.filter(|at| *at >= since)?;
                    let owner = p.head.label.as_deref().and_then(|l| l.split_once(':'));
                    let own = owner.is_some_and(|(o, _)| o.eq_ignore_ascii_case(repo.owner()));
                    (own && prefix.tail(&p.head.ref_field).is_some()).then(|| PullRequest {
                        number: p.number,
                        state: match p.state {
                            Some(octocrab::models::IssueState::Open) => "open",
                            _ => "closed",
                        }
                        .to_owned(),
                        merged: p.merged_at.is_some(),
                        merged_at: p.merged_at,
                        created_at,
                        url: p.html_url.map(String::from).unwrap_or_default(),
                        head: p.head.ref_field,
                    })
                }));
                !older
            })
            .await?;
            listing(&installation, repo, read, found)
        })
        .await
    }
}

/// The commit a ref points at (a branch's always is one).
fn commit(reference: Ref) -> Option<Sha> {
    match reference.object {
        Object::Commit { sha, .. } | Object::Tag { sha, .. } => Some(Sha::new(sha)),
        _ => None,
    }
}

/// A read's refusal: 404 is the repository (or the credentials' reach), 409 an empty one.
fn read_refused(installation: &Installation, repo: &RepoName, refusal: &Refusal) -> Setback {
    match refusal.status_code.as_u16() {
        404 => installation.not_found(repo, refusal),
        409 => empty_repository(repo),
        _ => unexpected::<()>(refusal).unwrap_err(),
    }
}

/// Reads a listing page by page: the first page, then each `rel="next"` while `take` says to
/// go on. Only the next link's path and query are followed: octocrab sends credentials with a
/// relative path alone, and on GitHub Enterprise Server an absolute one would go without them.
async fn pages<T, F, Fut>(
    installation: &Installation,
    first: F,
    mut take: impl FnMut(Vec<T>) -> bool,
) -> Attempt<Result<(), Refusal>>
where
    T: DeserializeOwned,
    F: Fn(Octocrab) -> Fut,
    Fut: Future<Output = octocrab::Result<Page<T>>>,
{
    let mut page = installation.run(first).await?;
    loop {
        let mut listed = match page {
            Ok(listed) => listed,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let next = listed.next.as_ref().and_then(|uri| uri.path_and_query());
        let next = next.map(|pq| pq.as_str().to_owned());
        let go_on = take(listed.take_items());
        match next {
            Some(next) if go_on => {
                let next = &next;
                page = installation
                    .run(|gh| async move { gh.get::<Page<T>, _, ()>(next, None).await })
                    .await?;
            }
            _ => return Ok(Ok(())),
        }
    }
}

/// A listing the credentials may not be permitted to read: a 403 naming the permission is
/// the answer (`actions=read`), not a failure.
fn listing<T>(
    installation: &Installation,
    repo: &RepoName,
    read: Result<(), Refusal>,
    found: Vec<T>,
) -> Attempt<Listing<T>> {
    match read {
        Ok(()) => Ok(Listing::Found(found)),
        Err(refusal) => match client::missing_permission(&refusal) {
            Some(needs) => Ok(Listing::NotPermitted { needs }),
            None => Err(read_refused(installation, repo, &refusal)),
        },
    }
}

#[async_trait]
impl Forge for GithubForge {
    /// The row's branches, from [`Forge::row_branch_heads`].
    async fn row_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
    ) -> Result<Vec<BranchName>, ForgeError> {
        let heads = self.row_branch_heads(repo, prefix, id).await?;
        Ok(heads.into_iter().map(|b| b.name).collect())
    }

    /// `GET /repos/{o}/{r}/pulls?head=OWNER:BRANCH&state=all`; without `OWNER:` GitHub ignores
    /// the filter, so the head is compared here too.
    /// (https://docs.github.com/rest/pulls/pulls#list-pull-requests)
    async fn has_pull_request(
        &self,
        repo: &RepoName,
        branch: &BranchName,
    ) -> Result<bool, ForgeError> {
        let owner_label = &format!("{}:{branch}", repo.owner());
        let pulls = self
            .read_one("looking up pull requests", repo, |gh| async move {
                let pulls = gh.pulls(repo.owner(), repo.name());
                let list = pulls.list().state(State::All).head(owner_label);
                list.per_page(100).send().await
            })
            .await?;
        Ok(pulls.items.iter().any(|p| {
            p.head.ref_field == branch.as_str()
                && (p.head.label.as_deref()).is_none_or(|l| l.eq_ignore_ascii_case(owner_label))
        }))
    }

    /// The default branch (`GET /repos/{o}/{r}`) and its head, cached briefly.
    /// (https://docs.github.com/rest/repos/repos#get-a-repository)
    async fn base(&self, repo: &RepoName) -> Result<Base, ForgeError> {
        let slot = Arc::clone(self.bases.lock().await.entry(repo.clone()).or_default());
        // Held across the read: the rows of a burst wait for one read of the head, not one each.
        let mut slot = slot.lock().await;
        if let Some(cached) = slot
            .as_ref()
            .filter(|c| c.head_read.elapsed() < self.head_ttl)
        {
            return Ok(cached.base.clone());
        }
        let known_branch = slot
            .as_ref()
            .filter(|c| c.branch_read.elapsed() < DEFAULT_BRANCH_TTL)
            .map(|c| (c.base.branch.clone(), c.branch_read));
        let (base, branch_read) = self
            .read("reading the default branch", repo, |installation| {
                let known_branch = known_branch.clone();
                async move {
                    let (branch, branch_read) = match known_branch {
                        Some(known) => known,
                        None => {
                            let found = installation
                                .run(|gh| async move { gh.repos(repo.owner(), repo.name()).get().await })
                                .await?
                                .map_err(|refusal| read_refused(&installation, repo, &refusal))?;
                            let name = found.default_branch.unwrap_or_default();
                            let branch = RefName::parse(&name).map_err(|e| ForgeError::Refused {
                                message: format!("the default branch of {repo}: {e}"),
                            })?;
                            (branch, Instant::now())
                        }
                    };
                    match Self::branch_sha(&installation, repo, branch.as_str()).await? {
                        Some(sha) => Ok((Base { branch, sha }, branch_read)),
                        None => Err(Setback::Fail(ForgeError::Refused {
                            message: format!("the default branch `{branch}` of {repo} does not exist: push a first commit"),
                        })),
                    }
                }
            })
            .await?;
        *slot = Some(CachedBase {
            base: base.clone(),
            branch_read,
            head_read: Instant::now(),
        });
        Ok(base)
    }

    /// `POST /repos/{o}/{r}/git/refs`: 201 is ours; 422 "Reference already exists" is another
    /// delivery's, unless an earlier attempt's answer was lost; any other 422 is looked up.
    /// (https://docs.github.com/rest/git/refs#create-a-reference)
    async fn claim(
        &self,
        repo: &RepoName,
        branch: &BranchName,
        sha: &Sha,
    ) -> Result<Claim, ForgeError> {
        let reference = Reference::Branch(branch.as_str().to_owned());
        let claimed = self
            .retry
            .run_noting("claiming the branch", |ambiguous_before| {
                let reference = &reference;
                async move {
                    let installation = self.auth.installation(repo).await?;
                    let post = || {
                        installation.run(|gh| async move {
                            let repos = gh.repos(repo.owner(), repo.name());
                            repos.create_ref(reference, sha.as_str()).await
                        })
                    };
                    // After a lost answer the branch may be ours: that claim is never refused
                    // for a full queue, and a branch found now may be ours.
                    let (created, taken) = if ambiguous_before {
                        (installation.writes.write(post).await?, Claim::Ambiguous)
                    } else {
                        (installation.writes.first_write(post).await??, Claim::Exists)
                    };
                    let Err(refusal) = created else {
                        return Ok(Claim::Created);
                    };
                    match refusal.status_code.as_u16() {
                        422 if refusal.message.contains("already exists") => Ok(taken),
                        // Not "exists" (e.g. "Reference update failed"): whether this request
                        // created the ref cannot be told, so a ref found now counts as ours too.
                        422 => match Self::branch_sha(&installation, repo, branch.as_str())
                            .await
                            .map_err(Setback::not_applied)?
                        {
                            Some(_) => Ok(Claim::Ambiguous),
                            None => Err(Setback::Retry {
                                message: format!(
                                    "GitHub answered 422 ({}) and the ref is not there",
                                    client::said(&refusal)
                                ),
                                after: None,
                                ambiguous: false,
                                cause: Cause::NotThereYet,
                            }),
                        },
                        409 => Err(empty_repository(repo)),
                        _ => self.unexpected_write(repo, &refusal),
                    }
                }
            })
            .await;
        match claimed {
            Ok(claim) => Ok(claim),
            // Given up after an answer was lost: if the branch is there it may be ours, and at
            // least once beats at most once.
            Err((error, true)) => match self.branch_exists(repo, branch).await {
                Some(true) => Ok(Claim::Ambiguous),
                _ => Err(error),
            },
            Err((error, false)) => Err(error),
        }
    }

    /// `POST /repos/{o}/{r}/dispatches`: 204, no body, no run id. A 422 is the payload's fault;
    /// any other refusal is the App's setup, fixed by a person and then safe to retry. Sent
    /// through the raw route: octocrab's typed dispatch takes another success for a failure.
    /// (https://docs.github.com/rest/repos/repos#create-a-repository-dispatch-event)
    async fn dispatch(
        &self,
        repo: &RepoName,
        event_type: &EventType,
        payload: &Value,
    ) -> Result<(), ForgeError> {
        let body = json!({ "event_type": event_type.as_str(), "client_payload": payload });
        let path = format!("/repos/{repo}/dispatches");
        self.retry
            .run("dispatching", |_| {
                let (body, path) = (&body, &path);
                async move {
                    let installation = self.auth.installation(repo).await?;
                    let sent = installation
                        .writes
                        .write(|| {
                            installation.run(|gh| async move {
                                let answer = gh._post(path.as_str(), Some(body)).await?;
                                octocrab::map_github_error(answer).await.map(drop)
                            })
                        })
                        .await?;
                    let Err(refusal) = sent else { return Ok(()) };
                    if refusal.status_code.as_u16() == 422 {
                        return Err(Setback::Fail(ForgeError::Refused {
                            message: format!(
                                "GitHub refused the dispatch: {}",
                                client::said(&refusal)
                            ),
                        }));
                    }
                    match self.unexpected_write::<()>(repo, &refusal) {
                        Err(Setback::Fail(ForgeError::Refused { message })) => {
                            let message = match &self.auth {
                                Auth::App(_) => format!(
                                    "{message}: does the App have contents write on {repo}?"
                                ),
                                // It says what the token lacks already.
                                Auth::Token(_) => message,
                            };
                            Err(Setback::Fail(ForgeError::Unavailable {
                                message,
                                retry_after: Some(Duration::from_secs(60)),
                            }))
                        }
                        other => other,
                    }
                }
            })
            .await
    }

    /// Deletes the branch if it still points at `sha`: a read, then
    /// `DELETE /repos/{o}/{r}/git/refs/heads/{branch}`; "Reference does not exist" is done.
    /// (https://docs.github.com/rest/git/refs#delete-a-reference)
    async fn release(
        &self,
        repo: &RepoName,
        branch: &BranchName,
        sha: &Sha,
    ) -> Result<(), ForgeError> {
        let reference = Reference::Branch(encode_path(branch.as_str()));
        self.retry
            .run("releasing the claim", |_| {
                let reference = &reference;
                async move {
                    let installation = self.auth.installation(repo).await?;
                    match Self::branch_sha(&installation, repo, branch.as_str()).await? {
                        None => return Ok(()),
                        Some(now) if now != *sha => {
                            return Err(Setback::Fail(ForgeError::Refused {
                                message: format!("{branch} moved to {now} since it was claimed at {sha}: left as it is"),
                            }))
                        }
                        Some(_) => {}
                    }
                    let deleted = installation
                        .writes
                        .write(|| {
                            installation.run(|gh| async move {
                                    gh.repos(repo.owner(), repo.name()).delete_ref(reference).await
                                })
                        })
                        .await?;
                    match deleted {
                        Ok(()) => Ok(()),
                        Err(refusal)
                            if refusal.status_code.as_u16() == 422
                                && refusal.message.contains("does not exist") =>
                        {
                            Ok(())
                        }
                        Err(refusal) => self.unexpected_write(repo, &refusal),
                    }
                }
            })
            .await
    }

    /// `GET /repos/{o}/{r}/git/matching-refs/heads/{prefix}/`.
    async fn prefix_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
    ) -> Result<Vec<Branch>, ForgeError> {
        self.matching_refs(
            "listing the prefix's branches",
            repo,
            prefix,
            &format!("{prefix}/"),
        )
        .await
    }

    /// The heads of [`GithubForge::pull_requests_since`]; a missing permission is a refusal.
    async fn pull_request_heads(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<BranchName>, ForgeError> {
        match self.pull_requests_since(repo, prefix, since).await? {
            Listing::Found(pulls) => Ok(pulls
                .iter()
                .filter_map(|p| BranchName::listed(prefix, &p.head))
                .collect()),
            Listing::NotPermitted { needs } => Err(ForgeError::Refused {
                message: format!(
                    "GitHub does not let rowbranch list pull requests: it needs {needs}"
                ),
            }),
            Listing::NotKept => Ok(Vec::new()),
        }
    }

    /// `GET /repos/{o}/{r}/compare/{base}...{branch}`: its `ahead_by`.
    /// (https://docs.github.com/rest/commits/commits#compare-two-commits)
    async fn ahead_by(
        &self,
        repo: &RepoName,
        base: &Base,
        branch: &BranchName,
    ) -> Result<u64, ForgeError> {
        let (base, head) = (
            &encode_path(base.branch.as_str()),
            &encode_path(branch.as_str()),
        );
        let compared = self
            .read_one("comparing with the base", repo, |gh| async move {
                let repos = gh.repos(repo.owner(), repo.name());
                repos.compare_commits(base, head).send().await
            })
            .await?;
        Ok(compared.ahead_by as u64)
    }

    /// `GET /repos/{o}/{r}/git/matching-refs/heads/{prefix}/{id}`, with each branch's commit.
    async fn row_branch_heads(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
    ) -> Result<Vec<Branch>, ForgeError> {
        let refs = self
            .matching_refs(
                "listing the row's branches",
                repo,
                prefix,
                &format!("{prefix}/{id}"),
            )
            .await?;
        Ok(refs
            .into_iter()
            .filter(|b| prefix.owns(id, b.name.as_str()))
            .collect())
    }

    /// The row's among [`GithubForge::pull_requests_since`].
    async fn row_pull_requests(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<PullRequest>, ForgeError> {
        Ok(match self.pull_requests_since(repo, prefix, since).await? {
            Listing::Found(pulls) => Listing::Found(
                pulls
                    .into_iter()
                    .filter(|p| prefix.owns(id, &p.head))
                    .collect(),
            ),
            other => other,
        })
    }

    /// `GET /repos/{o}/{r}/actions/runs?event=repository_dispatch`, newest first, page by page
    /// until the runs are older than `since` (GitHub gives at most 1,000 with a filter). A
    /// dispatched run runs on the default branch, so the row's runs are told by their title,
    /// the workflow's `run-name`. Needs the App's Actions: read; without it the answer is
    /// "not permitted", not a failure.
    /// (https://docs.github.com/rest/actions/workflow-runs#list-workflow-runs-for-a-repository)
    async fn row_workflow_runs(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<WorkflowRun>, ForgeError> {
        let first = format!("/repos/{repo}/actions/runs?event=repository_dispatch&per_page=100");
        self.read("listing workflow runs", repo, |installation| {
            let first = &first;
            async move {
                let mut found = Vec::new();
                let read = pages(
                    &installation,
                    |gh| async move { gh.get::<Page<RunListed>, _, ()>(first, None).await },
                    |runs| {
                        let older = runs.last().is_none_or(|r| r.created_at < since);
                        found.extend(
                            runs.into_iter()
                                .filter(|r| r.created_at >= since)
                                .map(|r| WorkflowRun {
                                    id: r.id,
                                    run_number: r.run_number,
                                    name: r.name,
                                    title: r.display_title,
                                    status: r.status,
                                    conclusion: r.conclusion,
                                    event: r.event,
                                    created_at: r.created_at,
                                    url: r.html_url,
                                })
                                .filter(|r| r.names_row(prefix, id)),
                        );
                        !older
                    },
                )
                .await?;
                listing(&installation, repo, read, found)
            }
        })
        .await
    }

    /// `GET /app` with the App's JWT: are the credentials good and GitHub reachable? With a
    /// token, `GET /rate_limit`, which its rate limit does not count: `/readyz` may be asked
    /// often, and a workflow's token has 1,000 requests an hour.
    /// (https://docs.github.com/rest/apps/apps#get-the-authenticated-app,
    /// https://docs.github.com/rest/rate-limit/rate-limit#get-rate-limit-status-for-the-authenticated-user)
    async fn ready(&self) -> Result<(), ForgeError> {
        let host = self.host();
        let asked = |gh: Octocrab, path: &'static str| async move {
            octocrab::map_github_error(gh._get(path).await?)
                .await
                .map(drop)
        };
        let (answer, what) = match &self.auth {
            Auth::App(app) => (app.jwt.run(|gh| asked(gh, "/app")).await, "GET /app"),
            Auth::Token(token) => (
                token.run(|gh| asked(gh, "/rate_limit")).await,
                "GET /rate_limit with the token",
            ),
        };
        match answer.map_err(ForgeError::from) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(refusal)) => Err(ForgeError::Refused {
                message: format!(
                    "GitHub at {host}: {what} answered {}: {}",
                    refusal.status_code.as_u16(),
                    client::said(&refusal)
                ),
            }),
            Err(ForgeError::Unavailable {
                message,
                retry_after,
            }) => Err(ForgeError::Unavailable {
                message: format!("GitHub at {host}: {message}"),
                retry_after,
            }),
            Err(other) => Err(other),
        }
    }

    /// The write access probe ([`access`]).
    async fn write_access(&self, repo: &RepoName) -> Result<WriteAccess, ForgeError> {
        self.probe_write(repo).await
    }
}
