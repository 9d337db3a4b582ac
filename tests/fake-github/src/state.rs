//! The fake's world: repositories with a commit graph, refs, files, pull requests and
//! workflows; the App, its installations and tokens; the plain tokens a test registers;
//! rate-limit buckets; the logs.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime};

use rand::distr::Alphanumeric;
use rand::RngExt;
use serde_json::Value;

use crate::faults::{Fault, FaultEntry, Op};

/// Permissions every new installation gets: what rowbranch needs.
pub(crate) const DEFAULT_PERMISSIONS: [(&str, &str); 4] = [
    ("actions", "read"),
    ("contents", "write"),
    ("metadata", "read"),
    ("pull_requests", "read"),
];

pub(crate) fn random_sha() -> String {
    let bytes: [u8; 20] = rand::rng().random();
    hex::encode(bytes)
}

pub(crate) fn random_token() -> String {
    let tail: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(36)
        .map(char::from)
        .collect();
    format!("ghs_{tail}")
}

/// The level of a permission value, for comparisons (`none` < `read` < `write` < `admin`).
pub(crate) fn level(value: &str) -> u8 {
    match value {
        "read" => 1,
        "write" => 2,
        "admin" => 3,
        _ => 0,
    }
}

/// The lookup key of a repository: GitHub matches owner and name case-insensitively.
pub(crate) fn repo_key(full_name: &str) -> String {
    full_name.to_ascii_lowercase()
}

/// One commit of the fake's graph.
#[derive(Clone, Debug)]
pub struct Commit {
    pub parents: Vec<String>,
    /// Every file in the tree at this commit: path → content.
    pub files: BTreeMap<String, Vec<u8>>,
    pub message: String,
    pub time: SystemTime,
    /// 1 for a root commit, else one more than the highest parent.
    pub generation: u64,
}

/// State of a pull request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullState {
    Open,
    Closed,
}

impl PullState {
    pub fn as_str(self) -> &'static str {
        match self {
            PullState::Open => "open",
            PullState::Closed => "closed",
        }
    }
}

/// A pull request of the fake (head always in the same repository).
#[derive(Clone, Debug)]
pub struct Pull {
    pub number: u64,
    pub id: u64,
    pub state: PullState,
    pub head_ref: String,
    pub head_sha: String,
    pub base_ref: String,
    pub base_sha: String,
    pub title: String,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
    pub closed_at: Option<SystemTime>,
    pub merged_at: Option<SystemTime>,
}

/// A workflow run of the fake, as a test added it: GitHub starts the runs, the fake only keeps
/// them. Like every `repository_dispatch` run, it runs on the default branch.
#[derive(Clone, Debug)]
pub struct WorkflowRun {
    /// Above 2^31, as github.com's run ids are.
    pub id: u64,
    pub run_number: u64,
    /// The workflow's name.
    pub name: String,
    /// The `run-name` the workflow sets (or the event's title).
    pub display_title: String,
    /// `queued`, `in_progress`, `completed`, `waiting`, `requested` or `pending`.
    pub status: String,
    /// Set once `completed`: `success`, `failure`, `cancelled`, …
    pub conclusion: Option<String>,
    pub event: String,
    pub head_branch: String,
    pub head_sha: String,
    pub path: String,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
}

/// A `repository_dispatch` the fake accepted.
#[derive(Clone, Debug)]
pub struct DispatchRecord {
    pub event_type: String,
    /// The payload as sent (`{}` when the request had none).
    pub client_payload: Value,
    /// The installation whose token sent it.
    pub installation_id: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct Repo {
    pub id: u64,
    pub owner: String,
    pub name: String,
    pub default_branch: String,
    /// Full ref name (`refs/heads/main`) → sha.
    pub refs: BTreeMap<String, String>,
    pub commits: HashMap<String, Commit>,
    pub pulls: Vec<Pull>,
    pub dispatches: Vec<DispatchRecord>,
    /// Workflow runs, oldest first.
    pub runs: Vec<WorkflowRun>,
    /// The `state` of each workflow (by file name, `rowbranch-drain.yml`) that is not `active`.
    pub workflow_states: BTreeMap<String, String>,
    pub next_number: u64,
    pub created_at: SystemTime,
}

impl Repo {
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    pub fn is_empty(&self) -> bool {
        self.commits.is_empty()
    }

    pub fn branch_sha(&self, branch: &str) -> Option<&str> {
        self.refs
            .get(&format!("refs/heads/{branch}"))
            .map(String::as_str)
    }

    /// Adds a commit with these parents and files; returns its (random) sha.
    pub(crate) fn new_commit(
        &mut self,
        parents: Vec<String>,
        files: BTreeMap<String, Vec<u8>>,
        message: &str,
    ) -> String {
        let generation = parents
            .iter()
            .filter_map(|p| self.commits.get(p))
            .map(|c| c.generation)
            .max()
            .unwrap_or(0)
            + 1;
        let sha = random_sha();
        self.commits.insert(
            sha.clone(),
            Commit {
                parents,
                files,
                message: message.to_owned(),
                time: SystemTime::now(),
                generation,
            },
        );
        sha
    }

    /// Resolves a branch name, `heads/x`, `refs/heads/x`, `refs/tags/x`, a full sha or a
    /// unique sha prefix of at least 7 characters.
    pub(crate) fn resolve(&self, spec: &str) -> Option<String> {
        if spec.is_empty() {
            return None;
        }
        if let Some(sha) = self.branch_sha(spec) {
            return Some(sha.to_owned());
        }
        if let Some(sha) = self.refs.get(spec) {
            return Some(sha.clone());
        }
        if let Some(sha) = self.refs.get(&format!("refs/{spec}")) {
            return Some(sha.clone());
        }
        let lower = spec.to_ascii_lowercase();
        if self.commits.contains_key(&lower) {
            return Some(lower);
        }
        if lower.len() >= 7 && lower.bytes().all(|b| b.is_ascii_hexdigit()) {
            let mut found = self.commits.keys().filter(|k| k.starts_with(&lower));
            if let (Some(one), None) = (found.next(), found.next()) {
                return Some(one.clone());
            }
        }
        None
    }

    /// Every commit reachable from `sha`, itself included.
    pub(crate) fn ancestors(&self, sha: &str) -> HashSet<String> {
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([sha.to_owned()]);
        while let Some(s) = queue.pop_front() {
            if !seen.insert(s.clone()) {
                continue;
            }
            if let Some(c) = self.commits.get(&s) {
                queue.extend(c.parents.iter().cloned());
            }
        }
        seen
    }

    pub(crate) fn files_at(&self, sha: &str) -> Option<&BTreeMap<String, Vec<u8>>> {
        self.commits.get(sha).map(|c| &c.files)
    }
}

/// An installation of the App.
#[derive(Clone, Debug)]
pub struct Installation {
    pub id: u64,
    /// The account (user or organization) it is installed on.
    pub account: String,
    /// Permission name → `read` / `write` / `admin`.
    pub permissions: BTreeMap<String, String>,
    /// `repository_selection: "all"`: every repository of the account.
    pub all_repositories: bool,
    /// The selected repositories (repo keys), when not `all_repositories`.
    pub repositories: BTreeSet<String>,
    pub created_at: SystemTime,
}

impl Installation {
    pub fn covers(&self, repo: &Repo) -> bool {
        if self.all_repositories {
            repo.owner.eq_ignore_ascii_case(&self.account)
        } else {
            self.repositories.contains(&repo_key(&repo.full_name()))
        }
    }

    pub fn selection(&self) -> &'static str {
        if self.all_repositories {
            "all"
        } else {
            "selected"
        }
    }
}

/// An installation access token the fake minted.
#[derive(Clone, Debug)]
pub struct Token {
    pub token: String,
    pub installation_id: u64,
    /// The repositories (repo keys, `owner/name` lower-cased) the token was narrowed to.
    pub repositories: Option<BTreeSet<String>>,
    pub permissions: BTreeMap<String, String>,
    pub expires_at: SystemTime,
    pub minted_at: SystemTime,
}

/// A token a test registered (`add_token`), used as given: a workflow's `GITHUB_TOKEN` (an
/// installation token of GitHub's own Actions App, for the workflow's repository) or a
/// fine-grained personal access token (`github_pat_…`). It reaches its repositories with its
/// permissions, and has a rate-limit bucket of its own.
#[derive(Clone, Debug)]
pub struct PlainToken {
    /// Its number in the fake: its bucket and the request log name it by this.
    pub id: u64,
    pub token: String,
    /// The repositories (repo keys) it reaches.
    pub repositories: BTreeSet<String>,
    /// Permission name → `read` / `write`; `metadata: read` always.
    pub permissions: BTreeMap<String, String>,
}

impl PlainToken {
    /// What GitHub says when the token lacks an endpoint's permission: a fine-grained personal
    /// access token is not an integration.
    pub(crate) fn not_accessible(&self) -> &'static str {
        if self.token.starts_with("github_pat_") {
            "Resource not accessible by personal access token"
        } else {
            "Resource not accessible by integration"
        }
    }
}

/// How a request authenticated, as recorded in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    /// Not looked at (unexpected request) or not yet checked.
    NotChecked,
    /// No `Authorization` header.
    Anonymous,
    /// A valid App JWT.
    Jwt,
    /// A valid installation token.
    Token { installation_id: u64 },
    /// A plain token a test registered, by its [`PlainToken::id`].
    Plain { token_id: u64 },
    /// Refused with 401; the message GitHub would give.
    Rejected(String),
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    pub method: String,
    /// The path as received (percent-encoding kept), without the query.
    pub path: String,
    /// The operation, or `None` for an unexpected request.
    pub op: Option<Op>,
    pub auth: Auth,
    /// The status answered; `None` while in flight or when the connection was dropped.
    pub status: Option<u16>,
    /// The connection was closed on purpose without an answer.
    pub dropped: bool,
    /// The injected fault this request consumed.
    pub fault: Option<Fault>,
    /// Arrival time on std's clock.
    pub at: std::time::Instant,
    /// Arrival time on tokio's clock (follows a paused test clock).
    pub at_tokio: tokio::time::Instant,
    /// The request's headers as received, names in lower case, except `authorization` (whose
    /// credential `auth` describes).
    pub headers: Vec<(String, String)>,
}

impl RequestRecord {
    /// The first value of header `name` (any case), if the request had it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name` (any case), in the order received.
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A content-changing request to a repository endpoint (POST/PUT/PATCH/DELETE under
    /// `/repos/` or `/repositories/`).
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
            && (self.path.contains("/repos/") || self.path.contains("/repositories/"))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RateKey {
    Anonymous,
    App,
    Installation(u64),
    /// A plain token, by its id: GitHub counts a `GITHUB_TOKEN`'s requests per repository,
    /// and one reaches one repository.
    Plain(u64),
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    pub limit: u64,
    pub remaining: u64,
    pub reset: i64,
}

/// What one request's rate-limit headers say.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RateSnapshot {
    pub limit: u64,
    pub remaining: u64,
    pub reset: i64,
}

/// Everything the fake knows, behind the handle's mutex.
pub struct State {
    /// The base URL handed to clients (`http://127.0.0.1:PORT` plus any path prefix).
    pub base_url: String,
    /// The path prefix every request must start with (`""`, or e.g. `/api/v3`).
    pub path_prefix: String,
    pub app_id: u64,
    /// Also accepted as a JWT's `iss`.
    pub client_id: String,
    /// Repo key → repository.
    pub repos: BTreeMap<String, Repo>,
    pub installations: BTreeMap<u64, Installation>,
    pub tokens: HashMap<String, Token>,
    /// The plain tokens, by their text.
    pub plain_tokens: HashMap<String, PlainToken>,
    pub token_ttl: Duration,
    pub token_mints: usize,
    /// Requests an hour for installations, plain tokens and the App.
    pub rate_limit: u64,
    pub(crate) buckets: HashMap<RateKey, Bucket>,
    pub(crate) faults: Vec<FaultEntry>,
    pub log: Vec<RequestRecord>,
    /// `METHOD /path?query` of every unexpected request.
    pub unexpected: Vec<String>,
    pub next_repo_id: u64,
    pub next_pull_id: u64,
    pub next_run_id: u64,
    /// Codes GitHub would hand back after "create an App from a manifest", each with the name
    /// and slug the App was created under (the person creating it may rename it); each works once.
    pub manifest_codes: BTreeMap<String, (String, String)>,
    /// The App's name and slug, as `GET /app` and the manifest conversion give them. Its bot
    /// user is `{app_slug}[bot]`.
    pub app_name: String,
    pub app_slug: String,
    /// The App's webhook, as `GET /app/hook/config` gives it.
    pub hook: HookConfig,
    /// Accounts by lower-cased login, for `GET /users/{username}`. The owner of a repository
    /// that is not listed here is an organization, as the fake's answers have always said.
    pub accounts: BTreeMap<String, Account>,
    /// How long every request of an operation waits before it is handled (a slow GitHub).
    pub standing_delays: HashMap<Op, Duration>,
    /// Requests being handled now, and the most at once, by credential.
    pub in_flight: InFlight,
}

/// A GitHub account: a `User` or an `Organization` (the App's bot, of type `Bot`, is implied
/// by the App's slug).
#[derive(Clone, Debug)]
pub struct Account {
    pub login: String,
    /// `User` or `Organization`, as GitHub's `type` spells it.
    pub kind: String,
}

/// Requests being handled at once: installation-token requests (what GitHub bounds per
/// installation) and all requests.
#[derive(Debug, Default, Clone, Copy)]
pub struct InFlight {
    pub tokens: usize,
    pub max_tokens: usize,
    pub all: usize,
    pub max_all: usize,
}

impl State {
    pub(crate) fn new(base_url: String, path_prefix: String) -> State {
        State {
            base_url,
            path_prefix,
            app_id: 4242,
            client_id: "Iv23liRowbranchTest00".to_owned(),
            repos: BTreeMap::new(),
            installations: BTreeMap::new(),
            tokens: HashMap::new(),
            plain_tokens: HashMap::new(),
            token_ttl: Duration::from_secs(3600),
            token_mints: 0,
            rate_limit: 5000,
            buckets: HashMap::new(),
            faults: Vec::new(),
            log: Vec::new(),
            manifest_codes: BTreeMap::new(),
            app_name: "rowbranch test".to_owned(),
            app_slug: "rowbranch-test".to_owned(),
            hook: HookConfig::default(),
            accounts: BTreeMap::new(),
            standing_delays: HashMap::new(),
            in_flight: InFlight::default(),
            unexpected: Vec::new(),
            next_repo_id: 700_001,
            next_pull_id: 2_000_000_001,
            next_run_id: 10_000_000_001,
        }
    }

    /// The `type` of the account `login`: as added, else `Organization`.
    pub fn account_kind(&self, login: &str) -> &str {
        self.accounts
            .get(&login.to_ascii_lowercase())
            .map_or("Organization", |a| a.kind.as_str())
    }

    /// The account `GET /users/{username}` finds: one added, the App's bot, or the owner of a
    /// repository; GitHub matches logins case-insensitively.
    pub(crate) fn find_account(&self, username: &str) -> Option<Account> {
        let bot = format!("{}[bot]", self.app_slug);
        if username.eq_ignore_ascii_case(&bot) {
            return Some(Account {
                login: bot,
                kind: "Bot".to_owned(),
            });
        }
        if let Some(account) = self.accounts.get(&username.to_ascii_lowercase()) {
            return Some(account.clone());
        }
        self.repos
            .values()
            .find(|r| r.owner.eq_ignore_ascii_case(username))
            .map(|r| Account {
                login: r.owner.clone(),
                kind: "Organization".to_owned(),
            })
    }

    pub fn repo(&self, full_name: &str) -> Option<&Repo> {
        self.repos.get(&repo_key(full_name))
    }

    /// The repository, or a panic naming it (for the test-side API).
    pub(crate) fn repo_or_panic(&mut self, full_name: &str) -> &mut Repo {
        let known: Vec<String> = self.repos.values().map(Repo::full_name).collect();
        match self.repos.get_mut(&repo_key(full_name)) {
            Some(r) => r,
            None => panic!("fake GitHub: no repository {full_name} (known: {known:?})"),
        }
    }

    /// The installation that covers this repository, if the App is installed there.
    pub fn installation_for(&self, key: &str) -> Option<&Installation> {
        let repo = self.repos.get(key)?;
        self.installations.values().find(|i| i.covers(repo))
    }

    pub(crate) fn add_repo(&mut self, full_name: &str, with_commit: bool) -> Option<String> {
        let (owner, name) = full_name
            .split_once('/')
            .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
            .unwrap_or_else(|| panic!("fake GitHub: `{full_name}` is not owner/name"));
        let key = repo_key(full_name);
        assert!(
            !self.repos.contains_key(&key),
            "fake GitHub: repository {full_name} already exists"
        );
        let id = self.next_repo_id;
        self.next_repo_id += 1;
        let mut repo = Repo {
            id,
            owner: owner.to_owned(),
            name: name.to_owned(),
            default_branch: "main".to_owned(),
            refs: BTreeMap::new(),
            commits: HashMap::new(),
            pulls: Vec::new(),
            dispatches: Vec::new(),
            runs: Vec::new(),
            workflow_states: BTreeMap::new(),
            next_number: 1,
            created_at: SystemTime::now(),
        };
        let sha = with_commit.then(|| {
            let mut files = BTreeMap::new();
            files.insert("README.md".to_owned(), format!("# {name}\n").into_bytes());
            let sha = repo.new_commit(Vec::new(), files, "Initial commit");
            repo.refs.insert("refs/heads/main".to_owned(), sha.clone());
            sha
        });
        self.repos.insert(key, repo);
        sha
    }

    /// Takes one use of the first fault queued for this operation.
    pub(crate) fn take_fault(&mut self, op: Op) -> Option<Fault> {
        let i = self
            .faults
            .iter()
            .position(|f| f.op == op && f.remaining > 0)?;
        let entry = &mut self.faults[i];
        entry.remaining -= 1;
        let fault = entry.fault.clone();
        if entry.remaining == 0 {
            self.faults.remove(i);
        }
        Some(fault)
    }

    /// The bucket's numbers without counting a request: what `GET /rate_limit` says.
    pub(crate) fn peek_rate(&mut self, key: RateKey, now: i64) -> RateSnapshot {
        let bucket = self.bucket(key, now);
        RateSnapshot {
            limit: bucket.limit,
            remaining: bucket.remaining,
            reset: bucket.reset,
        }
    }

    /// The bucket of `key`, full again once its hour is over (or its limit changed).
    fn bucket(&mut self, key: RateKey, now: i64) -> &mut Bucket {
        let limit = match key {
            RateKey::Anonymous => 60,
            _ => self.rate_limit,
        };
        let bucket = self.buckets.entry(key).or_insert(Bucket {
            limit,
            remaining: limit,
            reset: now + 3600,
        });
        if now >= bucket.reset || bucket.limit != limit {
            *bucket = Bucket {
                limit,
                remaining: limit,
                reset: now + 3600,
            };
        }
        bucket
    }

    /// Counts one request against a bucket. Returns the headers' numbers and whether the
    /// bucket was already empty (then GitHub refuses the request).
    pub(crate) fn take_rate(&mut self, key: RateKey, now: i64) -> (RateSnapshot, bool) {
        let bucket = self.bucket(key, now);
        let exhausted = bucket.remaining == 0;
        bucket.remaining = bucket.remaining.saturating_sub(1);
        (
            RateSnapshot {
                limit: bucket.limit,
                remaining: bucket.remaining,
                reset: bucket.reset,
            },
            exhausted && key != RateKey::Anonymous,
        )
    }
}

/// The state and its lock, shared by the handle and the server.
pub(crate) struct Shared {
    pub state: std::sync::Mutex<State>,
}

impl Shared {
    /// Runs `f` with the state locked (never held across an `.await`).
    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }
}

/// The App's webhook: where GitHub sends its events, how, and whether it signs them. An App
/// made without a webhook has an empty URL.
#[derive(Clone, Debug)]
pub struct HookConfig {
    pub url: String,
    /// `json` or `form`.
    pub content_type: String,
    /// Whether a secret is set (GitHub never shows it).
    pub secret: bool,
    pub insecure_ssl: bool,
}

impl Default for HookConfig {
    fn default() -> HookConfig {
        HookConfig {
            url: String::new(),
            content_type: "form".to_owned(),
            secret: false,
            insecure_ssl: false,
        }
    }
}
