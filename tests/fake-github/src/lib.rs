//! A stateful fake of GitHub's REST API, for rowbranch's tests: its integration tests run
//! the real server and binary against it instead of api.github.com.
//!
//! `FakeGithub::start().await` runs a real HTTP server on `127.0.0.1:0` in the current tokio
//! runtime; `url()` is the client's `api_url`. It checks App JWTs with the test-only key,
//! mints installation tokens, accepts plain tokens a test registers (`add_token`: a workflow's
//! `GITHUB_TOKEN`, a fine-grained personal access token), keeps repositories (commit graph,
//! refs, files, pull requests, workflows) and answers as GitHub documents, quirks included. Anything it does not know is answered
//! 501 and recorded: call `assert_no_unexpected()` at the end of a test. Faults are injected
//! per operation with `inject`. The fake's own tests (`tests/api.rs`) hold it to GitHub's
//! documented behaviour.

mod auth;
mod conn;
mod faults;
mod reply;
mod routes;
mod shapes;
mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use serde_json::json;

pub use auth::{sign_jwt_with, sign_test_jwt, TEST_APP_PRIVATE_KEY_PEM, TEST_APP_PUBLIC_KEY_PEM};
pub use faults::{Fault, Op};

/// The webhook secret the manifest conversion hands back for the App it creates (GitHub makes
/// one for an App whose manifest has a webhook): a space inside, as a person's may have.
pub const TEST_APP_WEBHOOK_SECRET: &str = "test-only webhook secret 0123456789";

// The types `with_state` and the inspection methods hand out.
pub use state::{
    Account, Auth, Commit, DispatchRecord, HookConfig, InFlight, Installation, PlainToken, Pull,
    PullState, Repo, RequestRecord, State, Token, WorkflowRun,
};

use conn::{ConnKill, KillableListener};
use faults::FaultEntry;
use state::{random_sha, random_token, repo_key, Shared, DEFAULT_PERMISSIONS};

/// A running fake GitHub. Dropping it stops accepting connections.
pub struct FakeGithub {
    shared: Arc<Shared>,
    url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeGithub {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeGithub {
    /// Sets the App's webhook, as its settings page would (`GET /app/hook/config` answers it).
    pub fn set_hook_config(&self, hook: HookConfig) {
        self.shared.with(|s| s.hook = hook);
    }

    /// A code that `POST /app-manifests/{code}/conversions` accepts once, for the App as it is.
    pub fn add_manifest_code(&self, code: &str) {
        self.with_state(|s| {
            let naming = (s.app_name.clone(), s.app_slug.clone());
            s.manifest_codes.insert(code.to_owned(), naming);
        });
    }

    /// A code for an App that the person creating it renamed on GitHub's page (as they may,
    /// and must when the name is taken): its conversion, and from then on `GET /app`, give
    /// this name and slug.
    pub fn add_manifest_code_for_app(&self, code: &str, name: &str, slug: &str) {
        self.with_state(|s| {
            s.manifest_codes
                .insert(code.to_owned(), (name.to_owned(), slug.to_owned()));
        });
    }

    /// The App's slug: its bot user is `{slug}[bot]`.
    pub fn app_slug(&self) -> String {
        self.shared.with(|s| s.app_slug.clone())
    }

    // ----- accounts -----

    /// Adds (or retypes) the account `login`: `kind` is `User` or `Organization`, as
    /// `GET /users/{username}` gives it. A repository's owner not added here is an organization.
    pub fn add_account(&self, login: &str, kind: &str) {
        assert!(
            kind == "User" || kind == "Organization",
            "fake GitHub: an account is a User or an Organization, not {kind}"
        );
        self.with_state(|s| {
            s.accounts.insert(
                login.to_ascii_lowercase(),
                Account {
                    login: login.to_owned(),
                    kind: kind.to_owned(),
                },
            );
        });
    }

    /// Starts the fake on `127.0.0.1:0`, serving at the root (like `https://api.github.com`).
    pub async fn start() -> FakeGithub {
        FakeGithub::start_with_path_prefix("").await
    }

    /// Starts the fake serving under a path prefix, like GitHub Enterprise Server's `/api/v3`;
    /// a request outside the prefix is unexpected.
    pub async fn start_with_path_prefix(prefix: &str) -> FakeGithub {
        let prefix = prefix.trim_end_matches('/').to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake GitHub: binding 127.0.0.1:0");
        let addr = listener.local_addr().expect("fake GitHub: local address");
        let url = format!("http://{addr}{prefix}");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(url.clone(), prefix)),
        });
        let app = Router::new()
            .fallback(routes::handle)
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let service = app.into_make_service_with_connect_info::<ConnKill>();
            let _ = axum::serve(KillableListener::new(listener), service).await;
        });
        FakeGithub {
            shared,
            url,
            server,
        }
    }

    /// The base URL, e.g. `http://127.0.0.1:40123` (no trailing slash).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Runs `f` on the whole state, locked (for what the helpers below do not cover).
    pub fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        self.shared.with(f)
    }

    // ----- the App -----

    /// The App id JWTs must carry as `iss` (default 4242).
    pub fn app_id(&self) -> u64 {
        self.shared.with(|s| s.app_id)
    }

    pub fn set_app_id(&self, id: u64) {
        self.shared.with(|s| s.app_id = id);
    }

    /// The App's client id, which GitHub also accepts as `iss`.
    pub fn client_id(&self) -> String {
        self.shared.with(|s| s.client_id.clone())
    }

    /// A valid App JWT for this fake, signed with the test-only key
    /// (`iat` 60 s ago, `exp` 9 minutes ahead, like rowbranch's).
    pub fn app_jwt(&self) -> String {
        let now = auth::epoch_secs(SystemTime::now());
        sign_test_jwt(&json!({"iat": now - 60, "exp": now + 540, "iss": self.app_id()}))
    }

    // ----- repositories -----

    /// Adds a private repository `owner/name` with default branch `main` holding one commit
    /// (a `README.md`); returns that commit's sha. Panics if it exists. Every repository of
    /// the fake is private: a request without credentials gets 404.
    pub fn add_repo(&self, full_name: &str) -> String {
        self.shared
            .with(|s| s.add_repo(full_name, true))
            .expect("a first commit")
    }

    /// Adds a repository with no commits and no refs (GitHub's "empty repository").
    pub fn add_empty_repo(&self, full_name: &str) {
        self.shared.with(|s| s.add_repo(full_name, false));
    }

    /// Makes `branch` the default branch: what `GET /repos/{o}/{r}` reports, what contents
    /// are read from without `?ref=`, where `add_workflow` commits and pull requests point,
    /// and the one branch that cannot be deleted.
    pub fn set_default_branch(&self, repo: &str, branch: &str) {
        self.shared
            .with(|s| s.repo_or_panic(repo).default_branch = branch.to_owned());
    }

    // ----- installations -----

    /// Installs the App on this repository under `installation_id` (creating the installation
    /// on the repository's owner with contents:write, metadata:read, pull_requests:read,
    /// actions:read, and
    /// `repository_selection: "selected"`), or adds the repository to it.
    pub fn install(&self, repo: &str, installation_id: u64) {
        self.shared.with(|s| {
            let owner = s.repo_or_panic(repo).owner.clone();
            let inst = s
                .installations
                .entry(installation_id)
                .or_insert_with(|| new_installation(installation_id, &owner, false));
            inst.repositories.insert(repo_key(repo));
        });
    }

    /// Installs the App on every repository of `owner`, present and future
    /// (`repository_selection: "all"`).
    pub fn install_on_all_repositories(&self, owner: &str, installation_id: u64) {
        self.shared.with(|s| {
            s.installations.insert(
                installation_id,
                new_installation(installation_id, owner, true),
            );
        });
    }

    /// Removes the installation; its tokens stop working (404 on its repositories).
    pub fn uninstall(&self, installation_id: u64) {
        self.shared.with(|s| {
            s.installations.remove(&installation_id);
        });
    }

    /// Replaces an installation's permissions, e.g. `&[("contents", "read")]`; `metadata:
    /// read` is always added. Tokens minted afterwards carry them (earlier ones keep theirs).
    pub fn set_installation_permissions(&self, installation_id: u64, permissions: &[(&str, &str)]) {
        self.shared.with(|s| {
            let inst = s
                .installations
                .get_mut(&installation_id)
                .unwrap_or_else(|| panic!("fake GitHub: no installation {installation_id}"));
            inst.permissions = permissions
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            inst.permissions
                .entry("metadata".to_owned())
                .or_insert_with(|| "read".to_owned());
        });
    }

    // ----- tokens -----

    /// Lifetime of tokens minted from now on (default one hour).
    pub fn set_token_ttl(&self, ttl: Duration) {
        self.shared.with(|s| s.token_ttl = ttl);
    }

    /// Makes every existing token expired: their next use gets 401 Bad credentials.
    pub fn expire_tokens(&self) {
        let past = SystemTime::now() - Duration::from_secs(1);
        self.shared.with(|s| {
            for t in s.tokens.values_mut() {
                t.expires_at = past;
            }
        });
    }

    /// How many tokens were minted through `POST /app/installations/{id}/access_tokens`.
    pub fn token_mints(&self) -> usize {
        self.shared.with(|s| s.token_mints)
    }

    /// Every token (minted or issued), oldest first.
    pub fn tokens(&self) -> Vec<Token> {
        let mut all: Vec<Token> = self.shared.with(|s| s.tokens.values().cloned().collect());
        all.sort_by_key(|t| t.minted_at);
        all
    }

    /// Makes a token directly, without a request (not counted in `token_mints`);
    /// `repositories` are names under the installation's account.
    pub fn issue_token(&self, installation_id: u64, repositories: Option<&[&str]>) -> String {
        self.shared.with(|s| {
            let inst = s
                .installations
                .get(&installation_id)
                .unwrap_or_else(|| panic!("fake GitHub: no installation {installation_id}"))
                .clone();
            let narrowed = repositories.map(|names| {
                names
                    .iter()
                    .map(|n| repo_key(&format!("{}/{n}", inst.account)))
                    .collect::<BTreeSet<_>>()
            });
            let token = random_token();
            let now = SystemTime::now();
            s.tokens.insert(
                token.clone(),
                Token {
                    token: token.clone(),
                    installation_id,
                    repositories: narrowed,
                    permissions: inst.permissions.clone(),
                    expires_at: now + s.token_ttl,
                    minted_at: now,
                },
            );
            token
        })
    }

    /// Registers a plain token that reaches `repo` with `permissions`, e.g. `&[("contents",
    /// "write"), ("pull_requests", "read"), ("actions", "read")]` (`metadata: read` is always
    /// added): a workflow's `GITHUB_TOKEN` as its `permissions:` key grants, or a fine-grained
    /// personal access token (one starting `github_pat_` is refused as GitHub refuses those:
    /// "…by personal access token"). It does not expire; it has a rate-limit bucket of its own
    /// (`set_rate_limit`). Registering it again adds `repo` and replaces its permissions.
    pub fn add_token(&self, token: &str, repo: &str, permissions: &[(&str, &str)]) {
        self.shared.with(|s| {
            let key = s.repo_or_panic(repo).full_name().to_ascii_lowercase();
            let next = s.plain_tokens.len() as u64 + 1;
            let entry = s
                .plain_tokens
                .entry(token.to_owned())
                .or_insert_with(|| PlainToken {
                    id: next,
                    token: token.to_owned(),
                    repositories: BTreeSet::new(),
                    permissions: BTreeMap::new(),
                });
            entry.repositories.insert(key);
            entry.permissions = permissions
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            entry
                .permissions
                .entry("metadata".to_owned())
                .or_insert_with(|| "read".to_owned());
        });
    }

    // ----- commits and branches -----

    /// The sha a branch points at.
    pub fn branch_sha(&self, repo: &str, branch: &str) -> Option<String> {
        self.shared.with(|s| {
            s.repo(repo)
                .and_then(|r| r.branch_sha(branch).map(str::to_owned))
        })
    }

    /// Branch names (without `refs/heads/`), sorted.
    pub fn refs(&self, repo: &str) -> Vec<String> {
        self.shared.with(|s| {
            s.repo_or_panic(repo)
                .refs
                .keys()
                .filter_map(|r| r.strip_prefix("refs/heads/"))
                .map(str::to_owned)
                .collect()
        })
    }

    /// Creates (or moves) a branch to `from` (a branch name or a sha); returns the sha.
    pub fn create_branch(&self, repo: &str, branch: &str, from: &str) -> String {
        self.shared.with(|s| {
            let r = s.repo_or_panic(repo);
            let sha = r
                .resolve(from)
                .unwrap_or_else(|| panic!("fake GitHub: {from} is not a branch or commit"));
            r.refs.insert(format!("refs/heads/{branch}"), sha.clone());
            sha
        })
    }

    /// Deletes a branch without a request (e.g. someone else deleted it).
    pub fn delete_branch(&self, repo: &str, branch: &str) {
        self.shared.with(|s| {
            s.repo_or_panic(repo)
                .refs
                .remove(&format!("refs/heads/{branch}"));
        });
    }

    /// Adds a commit on top of `branch` (same files) and moves the branch; returns its sha.
    pub fn push_commit(&self, repo: &str, branch: &str) -> String {
        self.shared.with(|s| {
            let r = s.repo_or_panic(repo);
            let parent = r
                .branch_sha(branch)
                .unwrap_or_else(|| panic!("fake GitHub: no branch {branch} in {repo}"))
                .to_owned();
            let files = r.files_at(&parent).cloned().unwrap_or_default();
            let n = r.commits.len() + 1;
            let sha = r.new_commit(vec![parent], files, &format!("Commit {n} on {branch}"));
            r.refs.insert(format!("refs/heads/{branch}"), sha.clone());
            sha
        })
    }

    /// Commits a file on `branch` (created on an empty repository); returns the commit sha.
    fn put_file(&self, repo: &str, branch: &str, path: &str, content: impl AsRef<[u8]>) -> String {
        let path = path.trim_matches('/').to_owned();
        let content = content.as_ref().to_vec();
        self.shared.with(|s| {
            let r = s.repo_or_panic(repo);
            let parent = r.branch_sha(branch).map(str::to_owned);
            if parent.is_none() && !r.is_empty() {
                panic!("fake GitHub: no branch {branch} in {repo}");
            }
            let mut files = parent
                .as_deref()
                .and_then(|p| r.files_at(p).cloned())
                .unwrap_or_default();
            files.insert(path.clone(), content);
            let sha = r.new_commit(
                parent.into_iter().collect(),
                files,
                &format!("Update {path}"),
            );
            r.refs.insert(format!("refs/heads/{branch}"), sha.clone());
            sha
        })
    }

    /// Commits a workflow file on the default branch; a bare file name goes under
    /// `.github/workflows/`. Returns the commit sha.
    pub fn add_workflow(&self, repo: &str, path: &str, yaml: &str) -> String {
        let path = if path.contains('/') {
            path.to_owned()
        } else {
            format!(".github/workflows/{path}")
        };
        let branch = self
            .shared
            .with(|s| s.repo_or_panic(repo).default_branch.clone());
        self.put_file(repo, &branch, &path, yaml)
    }

    // ----- pull requests -----

    /// Adds a pull request from `head_ref` into the default branch; the head branch need not
    /// exist (a merged pull request whose branch was deleted). `merged` needs `Closed`.
    /// Returns its number.
    pub fn add_pull(&self, repo: &str, head_ref: &str, state: PullState, merged: bool) -> u64 {
        assert!(
            !(merged && state == PullState::Open),
            "fake GitHub: a merged pull request is closed"
        );
        self.shared.with(|s| {
            let id = s.next_pull_id;
            s.next_pull_id += 1;
            let r = s.repo_or_panic(repo);
            let number = r.next_number;
            r.next_number += 1;
            // Creation times strictly increase (at least a second apart), so "newest first"
            // is well defined even for pull requests added in the same instant.
            let created = created_after(r.pulls.iter().map(|p| p.created_at));
            let head_sha = r
                .branch_sha(head_ref)
                .map(str::to_owned)
                .unwrap_or_else(random_sha);
            let base_ref = r.default_branch.clone();
            let base_sha = r.branch_sha(&base_ref).unwrap_or_default().to_owned();
            let closed = (state == PullState::Closed).then_some(created);
            r.pulls.push(Pull {
                number,
                id,
                state,
                head_ref: head_ref.to_owned(),
                head_sha,
                base_ref,
                base_sha,
                title: format!("Work on {head_ref}"),
                created_at: created,
                updated_at: created,
                closed_at: closed,
                merged_at: merged.then_some(created),
            });
            number
        })
    }

    /// Changes a pull request's state (e.g. merges it).
    pub fn set_pull_state(&self, repo: &str, number: u64, state: PullState, merged: bool) {
        assert!(
            !(merged && state == PullState::Open),
            "fake GitHub: a merged pull request is closed"
        );
        self.shared.with(|s| {
            let p = s
                .repo_or_panic(repo)
                .pulls
                .iter_mut()
                .find(|p| p.number == number)
                .unwrap_or_else(|| panic!("fake GitHub: no pull request #{number}"));
            let now = SystemTime::now().max(p.created_at);
            p.state = state;
            p.updated_at = now;
            p.closed_at = (state == PullState::Closed).then_some(now);
            p.merged_at = merged.then_some(now);
        });
    }

    /// The repository's pull requests, in the order they were added.
    pub fn pulls(&self, repo: &str) -> Vec<Pull> {
        self.shared.with(|s| s.repo_or_panic(repo).pulls.clone())
    }

    // ----- workflow runs -----

    /// Adds a `repository_dispatch` run of the workflow `rowbranch`, titled `display_title`
    /// (what the workflow's `run-name` makes it), on the default branch at its head, as GitHub
    /// runs a dispatched workflow. `status` is `queued`, `in_progress`, `completed`, `waiting`,
    /// `requested` or `pending`; `conclusion` is set only once `completed`. Returns its id.
    pub fn add_workflow_run(
        &self,
        repo: &str,
        display_title: &str,
        status: &str,
        conclusion: Option<&str>,
    ) -> u64 {
        self.add_workflow_run_for(
            repo,
            "repository_dispatch",
            display_title,
            status,
            conclusion,
        )
    }

    /// [`add_workflow_run`](Self::add_workflow_run) for another event (`push`, `schedule`, …).
    pub fn add_workflow_run_for(
        &self,
        repo: &str,
        event: &str,
        display_title: &str,
        status: &str,
        conclusion: Option<&str>,
    ) -> u64 {
        assert!(
            [
                "queued",
                "in_progress",
                "completed",
                "waiting",
                "requested",
                "pending"
            ]
            .contains(&status),
            "fake GitHub: a run's status is not {status}"
        );
        assert_eq!(
            conclusion.is_some(),
            status == "completed",
            "fake GitHub: a run has a conclusion once, and only once, it is completed"
        );
        self.shared.with(|s| {
            let id = s.next_run_id;
            s.next_run_id += 1;
            let r = s.repo_or_panic(repo);
            // Creation times strictly increase, so "newest first" is well defined.
            let created = created_after(r.runs.iter().map(|run| run.created_at));
            let head_branch = r.default_branch.clone();
            let head_sha = r.branch_sha(&head_branch).unwrap_or_default().to_owned();
            let run_number = r.runs.len() as u64 + 1;
            r.runs.push(WorkflowRun {
                id,
                run_number,
                name: "rowbranch".to_owned(),
                display_title: display_title.to_owned(),
                status: status.to_owned(),
                conclusion: conclusion.map(str::to_owned),
                event: event.to_owned(),
                head_branch,
                head_sha,
                path: ".github/workflows/rowbranch.yml".to_owned(),
                created_at: created,
                updated_at: created,
            });
            id
        })
    }

    /// Sets the `state` GitHub gives the workflow `file` (`rowbranch-drain.yml`):
    /// `disabled_inactivity` (a public repository's scheduled workflow after 60 days without
    /// activity), `disabled_manually`, `disabled_fork`, `deleted`, or `active` (the default).
    pub fn set_workflow_state(&self, repo: &str, file: &str, state: &str) {
        self.shared.with(|s| {
            let r = s.repo_or_panic(repo);
            if state == "active" {
                r.workflow_states.remove(file);
            } else {
                r.workflow_states.insert(file.to_owned(), state.to_owned());
            }
        });
    }

    /// The repository's workflow runs, oldest first.
    pub fn workflow_runs(&self, repo: &str) -> Vec<WorkflowRun> {
        self.shared.with(|s| s.repo_or_panic(repo).runs.clone())
    }

    // ----- inspection -----

    /// The dispatches the repository accepted, in order.
    pub fn dispatches(&self, repo: &str) -> Vec<DispatchRecord> {
        self.shared
            .with(|s| s.repo_or_panic(repo).dispatches.clone())
    }

    /// How many dispatches the repository accepted: [`FakeGithub::dispatches`]'s length,
    /// without copying thousands of payloads under the lock on every look.
    pub fn dispatch_count(&self, repo: &str) -> usize {
        self.shared.with(|s| s.repo_or_panic(repo).dispatches.len())
    }

    /// Every request received, in arrival order (unexpected ones included).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.with(|s| s.log.clone())
    }

    /// The requests of one operation.
    pub fn requests_for(&self, op: Op) -> Vec<RequestRecord> {
        self.shared
            .with(|s| s.log.iter().filter(|r| r.op == Some(op)).cloned().collect())
    }

    /// POST/PUT/PATCH/DELETE requests to repository endpoints, whatever their answer.
    pub fn writes(&self) -> Vec<RequestRecord> {
        self.shared
            .with(|s| s.log.iter().filter(|r| r.is_write()).cloned().collect())
    }

    /// Requests that authenticated with a valid App JWT.
    pub fn jwt_requests(&self) -> Vec<RequestRecord> {
        self.shared.with(|s| {
            s.log
                .iter()
                .filter(|r| r.auth == Auth::Jwt)
                .cloned()
                .collect()
        })
    }

    /// `METHOD /path?query` of each unexpected request.
    pub fn unexpected(&self) -> Vec<String> {
        self.shared.with(|s| s.unexpected.clone())
    }

    /// Panics listing the unexpected requests, if there were any.
    pub fn assert_no_unexpected(&self) {
        let unexpected = self.unexpected();
        assert!(
            unexpected.is_empty(),
            "fake GitHub received {} unexpected request(s):\n  {}",
            unexpected.len(),
            unexpected.join("\n  ")
        );
    }

    // ----- faults and limits -----

    /// Makes the next `times` requests of `op` (that pass authentication) suffer `fault`.
    /// Faults queued for one operation are used in the order they were injected.
    pub fn inject(&self, op: Op, fault: Fault, times: usize) {
        if times == 0 {
            return;
        }
        self.shared.with(|s| {
            s.faults.push(FaultEntry {
                op,
                fault,
                remaining: times,
            })
        });
    }

    pub fn clear_faults(&self) {
        self.shared.with(|s| s.faults.clear());
    }

    /// Uses of injected faults not yet consumed.
    pub fn pending_faults(&self) -> usize {
        self.shared
            .with(|s| s.faults.iter().map(|f| f.remaining).sum())
    }

    /// Makes every request of each of `ops` wait `delay` before it is handled (and answered),
    /// until changed: a slow GitHub. `Duration::ZERO` takes the delay away.
    pub fn slow_down(&self, ops: &[Op], delay: Duration) {
        self.shared.with(|s| {
            for op in ops {
                if delay.is_zero() {
                    s.standing_delays.remove(op);
                } else {
                    s.standing_delays.insert(*op, delay);
                }
            }
        });
    }

    /// Requests being handled now, and the most at once so far.
    pub fn in_flight(&self) -> InFlight {
        self.shared.with(|s| s.in_flight)
    }

    /// How many requests have been answered so far.
    pub fn answered(&self) -> usize {
        self.shared
            .with(|s| s.log.iter().filter(|r| r.status.is_some()).count())
    }

    /// Requests an hour allowed per installation, per plain token (a `GITHUB_TOKEN` has 1,000)
    /// and for the App; default 5,000. When a bucket runs out, requests get GitHub's 403
    /// primary-rate-limit answer until the reset.
    pub fn set_rate_limit(&self, per_hour: u64) {
        self.shared.with(|s| s.rate_limit = per_hour);
    }
}

fn new_installation(id: u64, account: &str, all: bool) -> Installation {
    let permissions: BTreeMap<String, String> = DEFAULT_PERMISSIONS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Installation {
        id,
        account: account.to_owned(),
        permissions,
        all_repositories: all,
        repositories: BTreeSet::new(),
        created_at: SystemTime::now(),
    }
}

/// A creation time a second or more after each of `earlier`, and not before now: creation
/// times that strictly increase keep "newest first" well defined.
fn created_after(earlier: impl Iterator<Item = SystemTime>) -> SystemTime {
    earlier
        .map(|at| at + Duration::from_secs(1))
        .max()
        .map_or_else(SystemTime::now, |next| next.max(SystemTime::now()))
}
