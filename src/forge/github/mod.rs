//! The GitHub forge: rowbranch as a GitHub App, or with a token (`[github] token_env`). Reads go
//! straight out (and the reads of one row run concurrently); writes go through the
//! installation's pacer (the token's, with a token); every call runs inside the one retry
//! policy.

mod access;
mod client;
mod jwt;
mod pace;
mod retry;
mod setup;
mod transport;
mod wire;

pub use client::KeyError;
pub use setup::{
    account_type, app_info, convert_manifest, installation_permissions, workflow_state, workflows,
    WorkflowState,
};
pub use transport::{ACCEPT_VALUE, API_VERSION, USER_AGENT_VALUE};
pub use wire::{AppInfo, ManifestApp};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::Method;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;

use self::client::{
    empty_repository, encode_path, token_client, Apps, Auth, Installation, Limits, Operation,
};
use self::retry::{Attempt, Cause, RetryPolicy, Stop};
use super::{
    Base, Branch, Claim, Forge, ForgeError, Listing, OpenError, PullRequest, Sha, WorkflowRun,
    WriteAccess,
};
use crate::config::{GithubAuth, GithubSettings, PrivateKeySource};
use crate::identity::{BranchName, BranchPrefix, EventType, RefName, RepoName, RowId};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// The host of `api_url`, with its port if it has one (`api.github.com`, `ghe.example.com`);
/// the URL itself when it has none.
fn host(api_url: &str) -> String {
    api_url
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| uri.authority().map(|a| a.as_str().to_owned()))
        .unwrap_or_else(|| api_url.to_owned())
}

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

impl GithubForge {
    /// Builds the forge for the routed repositories. Reads the App's private key (with a
    /// token, nothing); makes no request. Once `shutdown` begins, rows waiting to claim give up
    /// and claimed rows' writes skip the pace, within the grace.
    pub fn new(
        settings: &GithubSettings,
        shutdown: Shutdown,
        metrics: Arc<Metrics>,
    ) -> Result<GithubForge, OpenError> {
        let limits = Limits {
            pace: settings.pace,
            max_concurrent_requests: settings.max_concurrent_requests,
            shutdown: shutdown.clone(),
            metrics: Arc::clone(&metrics),
        };
        let auth = match &settings.auth {
            GithubAuth::App { app_id, key } => {
                let pem = match key {
                    PrivateKeySource::Pem(pem) => pem.clone(),
                    PrivateKeySource::File(path) => {
                        std::fs::read_to_string(path).map_err(|cause| OpenError::KeyUnreadable {
                            path: path.clone(),
                            cause,
                        })?
                    }
                };
                Auth::App(Box::new(Apps::new(
                    *app_id,
                    &pem,
                    &settings.api_url,
                    limits,
                )?))
            }
            GithubAuth::Token(token) => {
                Auth::Token(Arc::new(token_client(token, &settings.api_url, limits)?))
            }
        };
        Ok(GithubForge {
            auth,
            retry: RetryPolicy {
                budget: settings.retry_budget,
                shutdown,
                metrics,
                host: host(&settings.api_url),
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
        Fut: std::future::Future<Output = Attempt<T>>,
    {
        self.retry
            .run(what, |_| async {
                let installation = self.auth.installation(repo).await?;
                f(installation).await.map_err(Stop::not_applied)
            })
            .await
    }

    /// The default branch's name, read from the repository.
    /// (https://docs.github.com/rest/repos/repos#get-a-repository)
    async fn default_branch(installation: &Installation, repo: &RepoName) -> Attempt<RefName> {
        let reply = installation
            .send(
                Operation::GetRepo,
                Method::GET,
                &format!("/repos/{repo}"),
                None::<&()>,
            )
            .await?;
        match reply.status.as_u16() {
            200 => {
                let name = reply.json::<wire::Repo>()?.default_branch;
                RefName::parse(&name).map_err(|e| {
                    Stop::Fail(ForgeError::Refused {
                        message: format!("the default branch of {repo}: {e}"),
                    })
                })
            }
            404 => Err(installation.not_found(repo, &reply)),
            _ => reply.unexpected(),
        }
    }

    /// The commit a branch points at, or `None`.
    /// (https://docs.github.com/rest/git/refs#get-a-reference)
    async fn branch_sha(
        installation: &Installation,
        repo: &RepoName,
        branch: &str,
    ) -> Attempt<Option<Sha>> {
        let path = format!("/repos/{repo}/git/ref/heads/{}", encode_path(branch));
        let reply = installation
            .send(Operation::GetRef, Method::GET, &path, None::<&()>)
            .await?;
        match reply.status.as_u16() {
            200 => Ok(Some(reply.json::<wire::Ref>()?.object.sha)),
            404 => Ok(None),
            409 => Err(empty_repository(repo)),
            _ => reply.unexpected(),
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

    /// Every branch of a matching-refs listing, every page GitHub sends.
    /// (https://docs.github.com/rest/git/refs#list-matching-references)
    async fn matching_refs(
        &self,
        what: &str,
        repo: &RepoName,
        prefix: &BranchPrefix,
        first: &str,
    ) -> Result<Vec<Branch>, ForgeError> {
        self.read(what, repo, |installation| async move {
            let mut found = Vec::new();
            client::pages(
                &installation,
                Operation::MatchingRefs,
                repo,
                first,
                |refs: Vec<wire::Ref>| {
                    found.extend(refs.into_iter().filter_map(|r| {
                        let name = r.name.strip_prefix("refs/heads/")?;
                        Some(Branch {
                            name: BranchName::listed(prefix, name)?,
                            sha: r.object.sha,
                        })
                    }));
                    true
                },
            )
            .await?;
            Ok(found)
        })
        .await
    }
}

#[async_trait]
impl Forge for GithubForge {
    /// `GET /repos/{o}/{r}/git/matching-refs/heads/{prefix}/{id}`, every page GitHub sends.
    /// (https://docs.github.com/rest/git/refs#list-matching-references)
    async fn row_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
    ) -> Result<Vec<BranchName>, ForgeError> {
        let path = format!("/repos/{repo}/git/matching-refs/heads/{prefix}/{id}");
        let refs = self
            .matching_refs("listing the row's branches", repo, prefix, &path)
            .await?;
        Ok(refs
            .iter()
            .filter_map(|b| BranchName::existing(prefix, id, b.name.as_str()))
            .collect())
    }

    /// `GET /repos/{o}/{r}/pulls?head=OWNER:BRANCH&state=all`; without `OWNER:` GitHub ignores
    /// the filter, so the head is compared here too.
    /// (https://docs.github.com/rest/pulls/pulls#list-pull-requests)
    async fn has_pull_request(
        &self,
        repo: &RepoName,
        branch: &BranchName,
    ) -> Result<bool, ForgeError> {
        self.read(
            "looking up pull requests",
            repo,
            |installation| async move {
                let path = format!(
                    "/repos/{repo}/pulls?head={}:{branch}&state=all&per_page=100",
                    repo.owner()
                );
                let reply = installation
                    .send(Operation::ListPulls, Method::GET, &path, None::<&()>)
                    .await?;
                match reply.status.as_u16() {
                    200 => {}
                    404 => return Err(installation.not_found(repo, &reply)),
                    _ => return reply.unexpected(),
                }
                let pulls: Vec<wire::Pull> = reply.json()?;
                let owner_label = format!("{}:{branch}", repo.owner());
                Ok(pulls.iter().any(|p| {
                    p.head.name == branch.as_str()
                        && p.head
                            .label
                            .as_deref()
                            .is_none_or(|l| l.eq_ignore_ascii_case(&owner_label))
                }))
            },
        )
        .await
    }

    /// The default branch and its head, cached briefly.
    async fn base(&self, repo: &RepoName) -> Result<Base, ForgeError> {
        let slot = Arc::clone(self.bases.lock().await.entry(repo.clone()).or_default());
        // Held across the read: the rows of a burst wait for one read of the head, not one each.
        let mut slot = slot.lock().await;
        let cached = slot
            .as_ref()
            .map(|c| (c.base.clone(), c.branch_read, c.head_read));
        if let Some((base, _, head_read)) = &cached {
            if head_read.elapsed() < self.head_ttl {
                return Ok(base.clone());
            }
        }
        let known_branch = cached
            .as_ref()
            .filter(|(_, branch_read, _)| branch_read.elapsed() < DEFAULT_BRANCH_TTL)
            .map(|(base, branch_read, _)| (base.branch.clone(), *branch_read));
        let (base, branch_read) = self
            .read("reading the default branch", repo, |installation| {
                let known_branch = known_branch.clone();
                async move {
                    let (branch, branch_read) = match known_branch {
                        Some(known) => known,
                        None => (Self::default_branch(&installation, repo).await?, Instant::now()),
                    };
                    match Self::branch_sha(&installation, repo, branch.as_str()).await? {
                        Some(sha) => Ok((Base { branch, sha }, branch_read)),
                        None => Err(Stop::Fail(ForgeError::Refused {
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
        let body = json!({ "ref": format!("refs/heads/{branch}"), "sha": sha.as_str() });
        let claimed = self
            .retry
            .run_noting("claiming the branch", |ambiguous_before| {
                let body = &body;
                async move {
                    let installation = self.auth.installation(repo).await?;
                    let path = format!("/repos/{repo}/git/refs");
                    let post = || async {
                        installation.ensure_token().await?;
                        installation
                            .send(Operation::CreateRef, Method::POST, &path, Some(body))
                            .await
                    };
                    // After a lost answer the branch may be ours: that claim is never refused
                    // for a full queue.
                    let reply = if ambiguous_before {
                        installation.writes.write(post).await?
                    } else {
                        installation.writes.first_write(post).await??
                    };
                    // A lost answer before means a branch found now may be ours.
                    let taken = if ambiguous_before {
                        Claim::Ambiguous
                    } else {
                        Claim::Exists
                    };
                    match reply.status.as_u16() {
                        201 => Ok(Claim::Created),
                        422 if reply.message().contains("already exists") => Ok(taken),
                        // Not "exists" (e.g. "Reference update failed"): whether this request
                        // created the ref cannot be told, so a ref found now counts as ours too.
                        422 => match Self::branch_sha(&installation, repo, branch.as_str())
                            .await
                            .map_err(Stop::not_applied)?
                        {
                            Some(_) => Ok(Claim::Ambiguous),
                            None => Err(Stop::Retry {
                                message: format!(
                                    "GitHub answered 422 ({}) and the ref is not there",
                                    reply.message()
                                ),
                                after: None,
                                ambiguous: false,
                                cause: Cause::NotThereYet,
                            }),
                        },
                        409 => Err(empty_repository(repo)),
                        _ => self.unexpected_write(repo, &reply),
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
    /// any other refusal is the App's setup, fixed by a person and then safe to retry.
    /// (https://docs.github.com/rest/repos/repos#create-a-repository-dispatch-event)
    async fn dispatch(
        &self,
        repo: &RepoName,
        event_type: &EventType,
        payload: &Value,
    ) -> Result<(), ForgeError> {
        let body = json!({ "event_type": event_type.as_str(), "client_payload": payload });
        self.retry
            .run("dispatching", |_| {
                let body = &body;
                async move {
                    let installation = self.auth.installation(repo).await?;
                    let path = format!("/repos/{repo}/dispatches");
                    let reply = installation
                        .writes
                        .write(|| async {
                            installation.ensure_token().await?;
                            installation
                                .send(Operation::Dispatch, Method::POST, &path, Some(body))
                                .await
                        })
                        .await?;
                    match reply.status.as_u16() {
                        200..=299 => Ok(()),
                        422 => Err(Stop::Fail(ForgeError::Refused {
                            message: format!("GitHub refused the dispatch: {}", reply.message()),
                        })),
                        _ => match self.unexpected_write::<()>(repo, &reply) {
                            Err(Stop::Fail(ForgeError::Refused { message })) => {
                                let message = match &self.auth {
                                    Auth::App(_) => format!(
                                        "{message}: does the App have contents write on {repo}?"
                                    ),
                                    // It says what the token lacks already.
                                    Auth::Token(_) => message,
                                };
                                Err(Stop::Fail(ForgeError::Unavailable {
                                    message,
                                    retry_after: Some(Duration::from_secs(60)),
                                }))
                            }
                            other => other,
                        },
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
        self.retry
            .run("releasing the claim", |_| async move {
                let installation = self.auth.installation(repo).await?;
                match Self::branch_sha(&installation, repo, branch.as_str()).await? {
                    None => return Ok(()),
                    Some(now) if now != *sha => {
                        return Err(Stop::Fail(ForgeError::Refused {
                            message: format!(
                            "{branch} moved to {now} since it was claimed at {sha}: left as it is"
                        ),
                        }))
                    }
                    Some(_) => {}
                }
                let path = format!("/repos/{repo}/git/refs/heads/{branch}");
                let reply = installation
                    .writes
                    .write(|| async {
                        installation.ensure_token().await?;
                        installation
                            .send(Operation::DeleteRef, Method::DELETE, &path, None::<&()>)
                            .await
                    })
                    .await?;
                match reply.status.as_u16() {
                    204 | 200 => Ok(()),
                    422 if reply.message().contains("does not exist") => Ok(()),
                    _ => self.unexpected_write(repo, &reply),
                }
            })
            .await
    }

    /// `GET /repos/{o}/{r}/git/matching-refs/heads/{prefix}/`, every page.
    /// (https://docs.github.com/rest/git/refs#list-matching-references)
    async fn prefix_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
    ) -> Result<Vec<Branch>, ForgeError> {
        let path = format!("/repos/{repo}/git/matching-refs/heads/{prefix}/");
        self.matching_refs("listing the prefix's branches", repo, prefix, &path)
            .await
    }

    /// `GET /repos/{o}/{r}/pulls?state=all&sort=created&direction=desc`, page by page until
    /// the pull requests are older than `since`. Only heads in the repository's own account
    /// count: a fork's branch of the same name is another branch.
    /// (https://docs.github.com/rest/pulls/pulls#list-pull-requests)
    async fn pull_request_heads(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<BranchName>, ForgeError> {
        self.read("listing pull requests", repo, |installation| async move {
            let first =
                format!("/repos/{repo}/pulls?state=all&sort=created&direction=desc&per_page=100");
            let mut heads = Vec::new();
            client::pages(
                &installation,
                Operation::ListPulls,
                repo,
                &first,
                |pulls: Vec<wire::Pull>| {
                    let older = pulls.last().is_some_and(|p| p.created_at < since);
                    heads.extend(
                        pulls
                            .into_iter()
                            .filter(|p| p.created_at >= since && p.head.is_in(repo))
                            .filter_map(|p| BranchName::listed(prefix, &p.head.name)),
                    );
                    !older
                },
            )
            .await?;
            Ok(heads)
        })
        .await
    }

    /// `GET /repos/{o}/{r}/compare/{base}...{branch}`: its `ahead_by`.
    /// (https://docs.github.com/rest/commits/commits#compare-two-commits)
    async fn ahead_by(
        &self,
        repo: &RepoName,
        base: &Base,
        branch: &BranchName,
    ) -> Result<u64, ForgeError> {
        self.read("comparing with the base", repo, |installation| async move {
            let path = format!(
                "/repos/{repo}/compare/{}...{}",
                encode_path(base.branch.as_str()),
                encode_path(branch.as_str())
            );
            let reply = installation
                .send(Operation::Compare, Method::GET, &path, None::<&()>)
                .await?;
            match reply.status.as_u16() {
                200 => Ok(reply.json::<wire::Comparison>()?.ahead_by),
                404 => Err(installation.not_found(repo, &reply)),
                _ => reply.unexpected(),
            }
        })
        .await
    }

    /// `GET /repos/{o}/{r}/git/matching-refs/heads/{prefix}/{id}`, with each branch's commit.
    /// (https://docs.github.com/rest/git/refs#list-matching-references)
    async fn row_branch_heads(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
    ) -> Result<Vec<Branch>, ForgeError> {
        let path = format!("/repos/{repo}/git/matching-refs/heads/{prefix}/{id}");
        let refs = self
            .matching_refs("listing the row's branches", repo, prefix, &path)
            .await?;
        Ok(refs
            .into_iter()
            .filter(|b| prefix.owns(id, b.name.as_str()))
            .collect())
    }

    /// `GET /repos/{o}/{r}/pulls?state=all&sort=created&direction=desc`, page by page until
    /// the pull requests are older than `since`: a branch deleted once its pull request merged
    /// is found too. Only heads in the repository's own account count.
    /// (https://docs.github.com/rest/pulls/pulls#list-pull-requests)
    async fn row_pull_requests(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<PullRequest>, ForgeError> {
        self.read("listing pull requests", repo, |installation| async move {
            let first =
                format!("/repos/{repo}/pulls?state=all&sort=created&direction=desc&per_page=100");
            let mut found = Vec::new();
            let refused = client::permitted_pages(
                &installation,
                Operation::ListPulls,
                repo,
                &first,
                |pulls: Vec<wire::Pull>| {
                    let older = pulls.last().is_some_and(|p| p.created_at < since);
                    found.extend(
                        pulls
                            .into_iter()
                            .filter(|p| {
                                p.created_at >= since
                                    && p.head.is_in(repo)
                                    && prefix.owns(id, &p.head.name)
                            })
                            .map(|p| PullRequest {
                                number: p.number,
                                head: p.head.name,
                                state: p.state,
                                merged: p.merged_at.is_some(),
                                merged_at: p.merged_at,
                                created_at: p.created_at,
                                url: p.html_url,
                            }),
                    );
                    !older
                },
            )
            .await?;
            Ok(match refused {
                Some(needs) => Listing::NotPermitted { needs },
                None => Listing::Found(found),
            })
        })
        .await
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
        self.read("listing workflow runs", repo, |installation| async move {
            let first =
                format!("/repos/{repo}/actions/runs?event=repository_dispatch&per_page=100");
            let mut found = Vec::new();
            let refused = client::permitted_pages(
                &installation,
                Operation::ListRuns,
                repo,
                &first,
                |page: wire::WorkflowRuns| {
                    let runs = page.workflow_runs;
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
            Ok(match refused {
                Some(needs) => Listing::NotPermitted { needs },
                None => Listing::Found(found),
            })
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
        let (reply, asked) = match &self.auth {
            Auth::App(apps) => (
                apps.send_app(Operation::GetApp, Method::GET, "/app", None::<&()>)
                    .await,
                "GET /app",
            ),
            Auth::Token(token) => (
                token
                    .send(
                        Operation::RateLimit,
                        Method::GET,
                        "/rate_limit",
                        None::<&()>,
                    )
                    .await,
                "GET /rate_limit with the token",
            ),
        };
        let reply = reply.map_err(|stop| match ForgeError::from(stop) {
            ForgeError::Unavailable {
                message,
                retry_after,
            } => ForgeError::Unavailable {
                message: format!("GitHub at {host}: {message}"),
                retry_after,
            },
            other => other,
        })?;
        match reply.status.as_u16() {
            200 => Ok(()),
            status => Err(ForgeError::Refused {
                message: format!(
                    "GitHub at {host}: {asked} answered {status}: {}",
                    reply.message()
                ),
            }),
        }
    }

    /// The write access probe ([`access`]).
    async fn write_access(&self, repo: &RepoName) -> Result<WriteAccess, ForgeError> {
        self.probe_write(repo).await
    }
}
