//! The GitHub forge: rowbranch as a GitHub App, or with a token (`[github] token_env`), through
//! octocrab. Reads go straight out (and the reads of one row run concurrently); writes go
//! through the installation's pacer (the token's, with a token); every call runs inside the
//! one retry policy.

mod client;
mod jwt;
mod pace;
mod retry;
mod setup;

pub use jwt::KeyError;
pub use setup::{
    account_type, app_hook, app_info, convert_manifest, installation_permissions, workflow_state,
    workflows, AppHook, AppInfo,
};

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use octocrab::models::pulls::PullRequest as PullListed;
use octocrab::params::repos::Reference;
use octocrab::{GitHubError, Octocrab, Page};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;

use self::client::{encode_path, missing_permission, said, unexpected, Auth, Refusal};
use self::retry::{Attempt, Cause, RetryPolicy, Setback};
use super::{
    Base, Branch, Claim, Denial, Forge, ForgeError, Listing, OpenError, PullRequest, Sha,
    WorkflowRun, WriteAccess,
};
use crate::config::GithubSettings;
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
    bases: Mutex<HashMap<RepoName, BaseSlot>>,
}

/// A repository's default branch and head, when the branch's name was read, and when the head.
type BaseSlot = Arc<Mutex<Option<(Base, Instant, Instant)>>>;

/// A ref as GitHub gives it: its full name and the commit it points at (a branch's always
/// points at one).
#[derive(Deserialize)]
struct GitRef {
    #[serde(rename = "ref")]
    name: String,
    object: GitObject,
}

#[derive(Deserialize)]
struct GitObject {
    sha: Sha,
}

/// How a request waits for its turn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// A read: at once.
    Read,
    /// A row's first write (its claim): at the pace, and given up once the shutdown begins.
    Claim,
    /// A write a row that holds a claim owes (its dispatch or release): ahead of rows still
    /// waiting to claim, and never refused.
    Owed,
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
        let gh = client::octocrab(&settings.api_url, Arc::clone(&metrics))?;
        // The host of `api_url`, with its port if it has one, for messages.
        let uri = settings.api_url.parse::<http::Uri>().ok();
        let host = uri.and_then(|uri| Some(uri.authority()?.to_string()));
        Ok(GithubForge {
            auth: Auth::new(settings, gh, shutdown.clone(), Arc::clone(&metrics))?,
            retry: RetryPolicy {
                budget: settings.retry_budget,
                shutdown,
                metrics,
                host: host.unwrap_or_default(),
            },
            head_ttl: settings.base_cache,
            bases: Mutex::new(HashMap::new()),
        })
    }

    /// One request for `repo` with its installation's client, in its turn: what GitHub
    /// answered (the value, or its refusal), or a setback when there was no answer to read.
    async fn send<T, F, Fut>(
        &self,
        repo: &RepoName,
        turn: Turn,
        request: F,
    ) -> Attempt<Result<T, Refusal>>
    where
        F: Fn(Octocrab) -> Fut,
        Fut: Future<Output = octocrab::Result<T>>,
    {
        let installation = self.auth.installation(repo).await?;
        let run = || installation.run(&request);
        match turn {
            Turn::Read => run().await.map_err(Setback::not_applied),
            _ => (installation.writes.write(turn == Turn::Claim, run).await)
                .map_err(Setback::Fail)?,
        }
    }

    /// A refusal the caller does not read further: the repository missing or out of the
    /// credentials' reach (404), an empty one (409), with a token a write it lacks the
    /// permission for (saying which), or as the retry policy sorts it. A read's refusal is never
    /// ambiguous: it changed nothing, so the claim that looks its ref up after a 422 stays a
    /// first claim, and a branch found taken later is another delivery's.
    fn refused(&self, repo: &RepoName, refusal: &GitHubError, turn: Turn) -> Setback {
        let reach = match self.auth.is_app() {
            true => "is the App installed on it?",
            false => {
                "may the token see it? (a workflow's GITHUB_TOKEN sees its own repository alone)"
            }
        };
        match refusal.status_code.as_u16() {
            404 => Setback::refused(format!(
                "GitHub answered 404 for {repo} ({}): does the repository exist, and {reach}",
                said(refusal)
            )),
            409 => Setback::refused(format!(
                "{repo} is empty: push a first commit to its default branch"
            )),
            _ if !self.auth.is_app() && turn != Turn::Read => match self.denied(repo, refusal) {
                Some(denial) => Setback::refused(denial.to_string()),
                None => unexpected(refusal),
            },
            _ if turn == Turn::Read => unexpected(refusal).not_applied(),
            _ => unexpected(refusal),
        }
    }

    /// A read: one request, retried as one unit with the installation lookup it needs.
    async fn read<T, F, Fut>(
        &self,
        what: &str,
        repo: &RepoName,
        request: F,
    ) -> Result<T, ForgeError>
    where
        F: Fn(Octocrab) -> Fut,
        Fut: Future<Output = octocrab::Result<T>>,
    {
        self.retry
            .run(what, |_| async {
                let answer = self.send(repo, Turn::Read, &request).await?;
                answer.map_err(|refusal| self.refused(repo, &refusal, Turn::Read))
            })
            .await
    }

    /// The commit a branch points at, or `None`: one request, not retried.
    /// (https://docs.github.com/rest/git/refs#get-a-reference)
    async fn branch_sha(&self, repo: &RepoName, branch: &str) -> Attempt<Option<Sha>> {
        let path = &format!("/repos/{repo}/git/ref/heads/{}", encode_path(branch));
        let found = self.send(repo, Turn::Read, |gh| async move {
            gh.get::<GitRef, _, ()>(path, None).await
        });
        match found.await? {
            Ok(found) => Ok(Some(found.object.sha)),
            Err(refusal) if refusal.status_code == http::StatusCode::NOT_FOUND => Ok(None),
            Err(refusal) => Err(self.refused(repo, &refusal, Turn::Read)),
        }
    }

    /// `GET /repos/{o}/{r}/git/matching-refs/heads/{prefix}/{id}`: every branch under `prefix`
    /// (of row `id`, with one), in one answer (GitHub does not page it).
    /// (https://docs.github.com/rest/git/refs#list-matching-references)
    async fn matching_refs(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: Option<&RowId>,
    ) -> Result<Vec<Branch>, ForgeError> {
        let under = id.map(RowId::to_string).unwrap_or_default();
        let path = &format!("/repos/{repo}/git/matching-refs/heads/{prefix}/{under}");
        let listed = |gh: Octocrab| async move { gh.get::<Vec<GitRef>, _, ()>(path, None).await };
        let what = match id {
            Some(_) => "listing the row's branches",
            None => "listing the prefix's branches",
        };
        let refs = self.read(what, repo, listed).await?;
        let branch = |r: GitRef| {
            let name = BranchName::listed(prefix, r.name.strip_prefix("refs/heads/")?)?;
            // `{prefix}/4` matches `{prefix}/42` too.
            id.is_none_or(|id| prefix.owns(id, name.as_str()))
                .then_some(())?;
            Some(Branch {
                name,
                sha: r.object.sha,
            })
        };
        Ok(refs.into_iter().filter_map(branch).collect())
    }

    /// A listing read from `first` page by page, each page's items kept by `take` until it
    /// says to stop; retried as one unit. Only the next link's path and query are followed:
    /// octocrab sends credentials with a relative path alone, and on GitHub Enterprise Server
    /// an absolute one would go without them. A 403 naming the permission the credentials
    /// lack (`actions=read`) is the answer, not a failure.
    async fn pages<T: DeserializeOwned, U>(
        &self,
        what: &str,
        repo: &RepoName,
        first: &str,
        take: impl Fn(Vec<T>, &mut Vec<U>) -> bool,
    ) -> Result<Listing<U>, ForgeError> {
        self.retry
            .run(what, |_| async {
                let (mut found, mut next) = (Vec::new(), Some(first.to_owned()));
                while let Some(path) = next.take() {
                    let path = &path;
                    let page = self.send(repo, Turn::Read, |gh| async move {
                        gh.get::<Page<T>, _, ()>(path, None).await
                    });
                    let mut page = match page.await? {
                        Ok(page) => page,
                        Err(refusal) => match missing_permission(&refusal) {
                            Some(needs) => return Ok(Listing::NotPermitted { needs }),
                            None => return Err(self.refused(repo, &refusal, Turn::Read)),
                        },
                    };
                    let link = page.next.as_ref().and_then(|uri| uri.path_and_query());
                    let link = link.map(|pq| pq.as_str().to_owned());
                    if take(page.take_items(), &mut found) {
                        next = link;
                    }
                }
                Ok(Listing::Found(found))
            })
            .await
    }

    /// What a write's refusal says when GitHub refused it for a permission rowbranch lacks: a
    /// 403 that is not a rate limit. `None` for any other answer.
    fn denied(&self, repo: &RepoName, refusal: &GitHubError) -> Option<Denial> {
        if refusal.status_code.as_u16() != 403 {
            return None;
        }
        let app = self.auth.is_app();
        let who = if app { "the App" } else { "the token" };
        let Some(needs) = missing_permission(refusal) else {
            // A rate limit, said the way rate limits are: retried.
            if matches!(unexpected(refusal), Setback::Retry { .. }) {
                return None;
            }
            return Some(Denial {
                problem: format!(
                    "{who} cannot write {repo}: GitHub answered {} ({}) without naming a \
                     permission",
                    refusal.status_code,
                    said(refusal)
                ),
                fix: format!("it needs contents write on {repo}"),
            });
        };
        let (key, settings) = permission_names(&needs);
        Some(Denial {
            problem: format!(
                "{who} cannot write {repo}: it lacks {needs} (GitHub's \
                 X-Accepted-GitHub-Permissions)"
            ),
            fix: match app {
                true => format!(
                    "in the App's settings grant {settings}, then accept the new permissions on \
                     the installation"
                ),
                false => format!(
                    "in the workflow, give the job {key} (a fine-grained personal access token \
                     needs {settings} on {repo})"
                ),
            },
        })
    }
}

#[async_trait]
impl Forge for GithubForge {
    /// `GET /repos/{o}/{r}/pulls?head=OWNER:BRANCH&state=all`; without `OWNER:` GitHub ignores
    /// the filter, so the head is compared here too.
    /// (https://docs.github.com/rest/pulls/pulls#list-pull-requests)
    async fn has_pull_request(
        &self,
        repo: &RepoName,
        branch: &BranchName,
    ) -> Result<bool, ForgeError> {
        let owner_label = &format!("{}:{branch}", repo.owner());
        let path = &format!("/repos/{repo}/pulls?state=all&head={owner_label}&per_page=100");
        let listed =
            |gh: Octocrab| async move { gh.get::<Vec<PullListed>, _, ()>(path, None).await };
        let pulls = self.read("looking up pull requests", repo, listed).await?;
        Ok(pulls.iter().any(|p| {
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
        if let Some((base, ..)) = slot.as_ref().filter(|c| c.2.elapsed() < self.head_ttl) {
            return Ok(base.clone());
        }
        let known = slot.as_ref().filter(|c| c.1.elapsed() < DEFAULT_BRANCH_TTL);
        let (branch, branch_read) = match known.map(|c| (c.0.branch.clone(), c.1)) {
            Some(known) => known,
            None => {
                let path = &format!("/repos/{repo}");
                let read = |gh: Octocrab| async move { gh.get::<Value, _, ()>(path, None).await };
                let found = self.read("reading the default branch", repo, read).await?;
                let name = found["default_branch"].as_str().unwrap_or_default();
                let branch = RefName::parse(name).map_err(|e| {
                    ForgeError::refused(format!("the default branch of {repo}: {e}"))
                })?;
                (branch, Instant::now())
            }
        };
        let sha = (self.retry.run("reading the default branch", |_| async {
            let sha = self.branch_sha(repo, branch.as_str()).await?;
            sha.ok_or_else(|| {
                Setback::refused(format!(
                    "the default branch `{branch}` of {repo} does not exist: push a first commit"
                ))
            })
        }))
        .await?;
        let base = Base { branch, sha };
        *slot = Some((base.clone(), branch_read, Instant::now()));
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
        let reference = &Reference::Branch(branch.as_str().to_owned());
        let claimed = (self.retry)
            .run_noting("claiming the branch", |ambiguous_before| async move {
                // After a lost answer the branch may be ours: that claim is never refused for
                // a full queue, and a branch found now may be ours.
                let (turn, taken) = match ambiguous_before {
                    true => (Turn::Owed, Claim::Ambiguous),
                    false => (Turn::Claim, Claim::Exists),
                };
                let created = self.send(repo, turn, |gh| async move {
                    let repos = gh.repos(repo.owner(), repo.name());
                    repos.create_ref(reference, sha.as_str()).await
                });
                let Err(refusal) = created.await? else {
                    return Ok(Claim::Created);
                };
                match refusal.status_code.as_u16() {
                    422 if refusal.message.contains("already exists") => Ok(taken),
                    // Not "exists" (e.g. "Reference update failed"): whether this request
                    // created the ref cannot be told, so a ref found now counts as ours too.
                    422 => match self.branch_sha(repo, branch.as_str()).await? {
                        Some(_) => Ok(Claim::Ambiguous),
                        None => Err(Setback::Retry {
                            message: format!(
                                "GitHub answered 422 ({}) and the ref is not there",
                                said(&refusal)
                            ),
                            after: None,
                            ambiguous: false,
                            cause: Cause::NotThereYet,
                        }),
                    },
                    _ => Err(self.refused(repo, &refusal, turn)),
                }
            })
            .await;
        match claimed {
            // Given up after an answer was lost: if the branch is there it may be ours, and at
            // least once beats at most once.
            Err((error, true)) => match self.branch_sha(repo, branch.as_str()).await {
                Ok(Some(_)) => Ok(Claim::Ambiguous),
                _ => Err(error),
            },
            other => other.map_err(|(error, _)| error),
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
        let body = &json!({ "event_type": event_type.as_str(), "client_payload": payload });
        let path = &format!("/repos/{repo}/dispatches");
        self.retry
            .run("dispatching", |_| async move {
                let sent = self.send(repo, Turn::Owed, |gh| async move {
                    let answer = gh._post(path.as_str(), Some(body)).await?;
                    octocrab::map_github_error(answer).await.map(drop)
                });
                let Err(refusal) = sent.await? else {
                    return Ok(());
                };
                if refusal.status_code.as_u16() == 422 {
                    let message = format!("GitHub refused the dispatch: {}", said(&refusal));
                    return Err(Setback::refused(message));
                }
                match self.refused(repo, &refusal, Turn::Owed) {
                    Setback::Fail(ForgeError::Refused { message }) => {
                        let message = match self.auth.is_app() {
                            true => {
                                format!("{message}: does the App have contents write on {repo}?")
                            }
                            // It says what the token lacks already.
                            false => message,
                        };
                        Err(Setback::Fail(ForgeError::Unavailable {
                            message,
                            retry_after: Some(Duration::from_secs(60)),
                        }))
                    }
                    other => Err(other),
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
        let reference = &Reference::Branch(encode_path(branch.as_str()));
        self.retry
            .run("releasing the claim", |_| async move {
                match self.branch_sha(repo, branch.as_str()).await? {
                    None => return Ok(()),
                    Some(now) if now != *sha => {
                        return Err(Setback::refused(format!(
                            "{branch} moved to {now} since it was claimed at {sha}: left as it is"
                        )))
                    }
                    Some(_) => {}
                }
                let deleted = self.send(repo, Turn::Owed, |gh| async move {
                    gh.repos(repo.owner(), repo.name())
                        .delete_ref(reference)
                        .await
                });
                match deleted.await? {
                    Err(refusal)
                        if !(refusal.status_code.as_u16() == 422
                            && refusal.message.contains("does not exist")) =>
                    {
                        Err(self.refused(repo, &refusal, Turn::Owed))
                    }
                    _ => Ok(()),
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
        self.matching_refs(repo, prefix, None).await
    }

    /// `GET /repos/{o}/{r}/compare/{base}...{branch}`: its `ahead_by`.
    /// (https://docs.github.com/rest/commits/commits#compare-two-commits)
    async fn ahead_by(
        &self,
        repo: &RepoName,
        base: &Base,
        branch: &BranchName,
    ) -> Result<u64, ForgeError> {
        let base = &encode_path(base.branch.as_str());
        let head = &encode_path(branch.as_str());
        let compared = self
            .read("comparing with the base", repo, |gh| async move {
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
        self.matching_refs(repo, prefix, Some(id)).await
    }

    /// `GET /repos/{o}/{r}/pulls?state=all&sort=created&direction=desc`, page by page until
    /// they are older than `since`. A branch deleted once its pull request merged is found too.
    /// (https://docs.github.com/rest/pulls/pulls#list-pull-requests)
    async fn pull_requests(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<PullRequest>, ForgeError> {
        let first =
            format!("/repos/{repo}/pulls?state=all&sort=created&direction=desc&per_page=100");
        let take = |pulls: Vec<PullListed>, found: &mut Vec<PullRequest>| {
            let older = pulls.last().is_some_and(|p| p.created_at < Some(since));
            found.extend(pulls.into_iter().filter_map(|p| {
                let created_at = p.created_at.filter(|at| *at >= since)?;
                let owner = p.head.label.as_deref().and_then(|l| l.split_once(':'));
                let own = owner.is_some_and(|(o, _)| o.eq_ignore_ascii_case(repo.owner()));
                prefix.tail(&p.head.ref_field)?;
                own.then(|| PullRequest {
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
                    head_sha: Sha::new(p.head.sha),
                    head: p.head.ref_field,
                })
            }));
            !older
        };
        self.pages("listing pull requests", repo, &first, take)
            .await
    }

    /// `GET /repos/{o}/{r}/actions/runs?event=repository_dispatch`, newest first, page by page
    /// until the runs are older than `since` (GitHub gives at most 1,000 with a filter). A
    /// dispatched run runs on the default branch, so the route's runs are told by their title,
    /// the workflow's `run-name`. Needs the App's Actions: read; without it the answer is
    /// "not permitted", not a failure.
    /// (https://docs.github.com/rest/actions/workflow-runs#list-workflow-runs-for-a-repository)
    async fn workflow_runs(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<WorkflowRun>, ForgeError> {
        // A dispatched run has no pull requests of its own to list: `exclude_pull_requests`
        // only makes the pages smaller.
        let first = format!(
            "/repos/{repo}/actions/runs?event=repository_dispatch&exclude_pull_requests=true&per_page=100"
        );
        let take = |runs: Vec<WorkflowRun>, found: &mut Vec<WorkflowRun>| {
            let older = runs.last().is_none_or(|r| r.created_at < since);
            let recent = runs.into_iter().filter(|r| r.created_at >= since);
            found.extend(recent.filter(|r| r.branches(prefix).next().is_some()));
            !older
        };
        self.pages("listing workflow runs", repo, &first, take)
            .await
    }

    /// `GET /app` with the App's JWT: are the credentials good and GitHub reachable? With a
    /// token, `GET /rate_limit`, which its rate limit does not count: `/readyz` may be asked
    /// often, and a workflow's token has 1,000 requests an hour.
    /// (https://docs.github.com/rest/apps/apps#get-the-authenticated-app,
    /// https://docs.github.com/rest/rate-limit/rate-limit#get-rate-limit-status-for-the-authenticated-user)
    async fn ready(&self) -> Result<(), ForgeError> {
        let host = &self.retry.host;
        // Asked with the credentials that are no repository's: the App's JWT, or the token.
        let (path, what) = match self.auth.is_app() {
            true => ("/app", "GET /app"),
            false => ("/rate_limit", "GET /rate_limit with the token"),
        };
        let asked = self.auth.own.run(|gh| async move {
            let answer = gh._get(path).await?;
            octocrab::map_github_error(answer).await.map(drop)
        });
        match asked.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(refusal)) => Err(ForgeError::refused(format!(
                "GitHub at {host}: {what} answered {}: {}",
                refusal.status_code.as_u16(),
                said(&refusal)
            ))),
            Err(Setback::Retry { message, after, .. }) => Err(ForgeError::Unavailable {
                message: format!("GitHub at {host}: {message}"),
                retry_after: after,
            }),
            Err(Setback::Fail(e)) => Err(e),
        }
    }

    /// Whether rowbranch may write a repository: asked once at start without changing anything,
    /// and said again, the same way, by a write GitHub refuses for a missing permission.
    ///
    /// GitHub tells no installation token what it may do — and a workflow's `GITHUB_TOKEN` is an
    /// installation token: `GET /repos/{o}/{r}`'s `permissions` describe a user's access, not the
    /// token's. So the probe is a write GitHub refuses whatever the token may do: it creates the
    /// default branch's own ref at the head it points at already (`POST /repos/{o}/{r}/git/refs`).
    /// A token that may write is told 422 "Reference already exists", and nothing is created; one
    /// that may not is told 403 "Resource not accessible by integration" with
    /// `X-Accepted-GitHub-Permissions: contents=write`, the permission the endpoint needs.
    ///
    /// That GitHub checks the permission before it looks at the request's body is what its docs
    /// imply — "Resource not accessible" means "your token has insufficient permissions", and the
    /// header lists what the endpoint needs, not what this request would — but do not state. So
    /// the probe trusts only those two answers; anything else leaves the question untold, and the
    /// first write answers it with the same message.
    /// (https://docs.github.com/rest/git/refs#create-a-reference,
    /// https://docs.github.com/rest/using-the-rest-api/troubleshooting-the-rest-api#resource-not-accessible)
    async fn write_access(&self, repo: &RepoName) -> Result<WriteAccess, ForgeError> {
        let base = &self.base(repo).await?;
        let reference = &Reference::Branch(base.branch.as_str().to_owned());
        self.retry
            .run("checking write access", |_| async move {
                // A write like any other: paced, and given up once the shutdown begins.
                let created = self.send(repo, Turn::Claim, |gh| async move {
                    let repos = gh.repos(repo.owner(), repo.name());
                    repos.create_ref(reference, base.sha.as_str()).await
                });
                // 201: the default branch cannot have been missing, it was read just now.
                let Err(refusal) = created.await? else {
                    return Ok(WriteAccess::Granted);
                };
                match refusal.status_code.as_u16() {
                    422 if refusal.message.contains("already exists") => Ok(WriteAccess::Granted),
                    // Not a denial: a rate limit, retried as any.
                    403 => (self.denied(repo, &refusal).map(WriteAccess::Denied))
                        .ok_or_else(|| unexpected(&refusal)),
                    400 | 422 => Ok(WriteAccess::Untold {
                        why: format!(
                            "GitHub answered the probe (creating {}'s own ref, which exists) {} \
                             ({}), which does not say",
                            base.branch,
                            refusal.status_code,
                            said(&refusal)
                        ),
                    }),
                    _ => Err(self.refused(repo, &refusal, Turn::Read)),
                }
            })
            .await
    }
}

/// The first set of permissions an `X-Accepted-GitHub-Permissions` value accepts
/// (`pull_requests=write,contents=read; issues=write`: the sets are alternatives), as
/// `(name, level)` pairs.
pub(crate) fn first_set(accepted: &str) -> impl Iterator<Item = (&str, &str)> {
    let first = accepted.split(';').next().unwrap_or_default();
    first.split(',').filter_map(|pair| {
        let (name, level) = pair.trim().split_once('=')?;
        Some((name.trim(), level.trim()))
    })
}

/// The [`first_set`] of permissions as a workflow's `permissions:` key writes them
/// (`permissions: contents: write`, the names with `-` for `_`) and as GitHub's settings pages
/// name them (`Contents: read and write`).
fn permission_names(accepted: &str) -> (String, String) {
    let (mut keys, mut names) = (Vec::new(), Vec::new());
    for (name, level) in first_set(accepted) {
        keys.push(format!("{}: {level}", name.replace('_', "-")));
        let mut words = name.replace('_', " ");
        if let Some(first) = words.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        let level = match level {
            "write" => "read and write",
            "read" => "read-only",
            other => other,
        };
        names.push(format!("{words}: {level}"));
    }
    let key = match keys.as_slice() {
        [one] => format!("`permissions: {one}`"),
        many => format!("`permissions:` with `{}`", many.join("`, `")),
    };
    (key, names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permission_reads_as_a_workflow_writes_it_and_as_the_settings_page_names_it() {
        let (key, settings) = permission_names("contents=write");
        assert_eq!(key, "`permissions: contents: write`");
        assert_eq!(settings, "Contents: read and write");
        let (key, _) = permission_names("pull_requests=write,contents=read; issues=write");
        assert_eq!(
            key,
            "`permissions:` with `pull-requests: write`, `contents: read`"
        );
        let (_, settings) = permission_names("pull_requests=read, actions=read");
        assert_eq!(settings, "Pull requests: read-only, Actions: read-only");
    }
}
