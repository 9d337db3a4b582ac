//! A stateful forge for tests: the real local git forge underneath, with faults injected per
//! operation, delays, a record of pull requests (which a bare repository cannot have) and a count
//! of every call. Whatever the test did not ask for is loud: an injected fault that never fired,
//! or a failure of the real forge nobody expected, fails the test at [`FaultyForge::verify`].

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::anyhow;
use async_trait::async_trait;
use rowbranch::forge::local::LocalForge;
use rowbranch::forge::{Base, Branch, Claim, Forge, ForgeError, Listing, PullRequest, Sha};
use rowbranch::identity::{BranchName, BranchPrefix, EventType, RepoName, RowId};
use serde_json::Value;

/// The operations of the [`Forge`] trait, one per method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    RowBranches,
    HasPullRequest,
    Base,
    Claim,
    Dispatch,
    Release,
}

/// A failure to inject, as the pipeline would meet it from GitHub.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Unreachable or rate limited: retry later.
    Unavailable { retry_after: Option<Duration> },
    /// Understood and refused.
    Refused,
    /// Anything else: a bug somewhere.
    Other,
}

impl Fault {
    fn error(&self, op: Op) -> ForgeError {
        match self {
            Fault::Unavailable { retry_after } => ForgeError::Unavailable {
                message: format!("injected: {op:?} unavailable"),
                retry_after: *retry_after,
            },
            Fault::Refused => ForgeError::Refused {
                message: format!("injected: {op:?} refused"),
            },
            Fault::Other => ForgeError::Other(anyhow!(
                "injected: {op:?} broke; secret detail /srv/rowbranch/state"
            )),
        }
    }
}

/// The text [`Fault::Other`] carries, which must never reach an HTTP answer.
pub const OTHER_DETAIL: &str = "secret detail";

#[derive(Default)]
struct State {
    faults: HashMap<Op, VecDeque<Fault>>,
    delays: HashMap<Op, Duration>,
    calls: HashMap<Op, usize>,
    /// The head branches of the pull requests recorded, in any state.
    pulls: Vec<String>,
    /// Claims to lose to a writer that creates the ref just before the real claim.
    claims_to_lose: usize,
    /// Failures of the real forge that no test asked for.
    surprises: Vec<String>,
    inner_failures_expected: bool,
}

pub struct FaultyForge {
    inner: LocalForge,
    state: Mutex<State>,
}

impl FaultyForge {
    pub fn new(inner: LocalForge) -> FaultyForge {
        FaultyForge {
            inner,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("faulty forge state poisoned")
    }

    /// The next `times` calls of `op` fail with `fault` (after any delay).
    pub fn fail_next(&self, op: Op, times: usize, fault: Fault) {
        let mut state = self.state();
        let queue = state.faults.entry(op).or_default();
        queue.extend(std::iter::repeat_n(fault, times));
    }

    /// Every later call of `op` waits `by` before it does anything.
    pub fn delay(&self, op: Op, by: Duration) {
        self.state().delays.insert(op, by);
    }

    /// How often `op` was called since the start or the last [`FaultyForge::reset_counts`].
    pub fn calls(&self, op: Op) -> usize {
        self.state().calls.get(&op).copied().unwrap_or(0)
    }

    /// Calls that write: claims, dispatches and releases.
    pub fn writes(&self) -> usize {
        self.calls(Op::Claim) + self.calls(Op::Dispatch) + self.calls(Op::Release)
    }

    pub fn reset_counts(&self) {
        self.state().calls.clear();
    }

    /// Records a pull request, in any state, whose head was `head_ref` (its branch need not
    /// exist any more).
    pub fn add_pull_request(&self, head_ref: &str) {
        self.state().pulls.push(head_ref.to_owned());
    }

    /// The next claim finds its ref created by another writer an instant before: the race
    /// between the check and the claim, made deterministic.
    pub fn lose_next_claim(&self) {
        self.state().claims_to_lose += 1;
    }

    /// The real forge is expected to fail in this test (e.g. a failing `on_dispatch`).
    pub fn expect_inner_failures(&self) {
        self.state().inner_failures_expected = true;
    }

    /// Panics if an injected fault never fired, a lost claim never happened, or the real forge
    /// failed where nobody expected it.
    pub fn verify(&self) {
        let state = self.state();
        let unfired: Vec<String> = state
            .faults
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(op, q)| format!("{} × {op:?}", q.len()))
            .collect();
        assert!(
            unfired.is_empty(),
            "injected faults that never fired: {unfired:?}"
        );
        assert_eq!(
            state.claims_to_lose, 0,
            "a claim was to be lost but no claim came"
        );
        assert!(
            state.surprises.is_empty(),
            "the real forge failed unexpectedly: {:#?}",
            state.surprises
        );
    }

    /// Counts the call, waits its delay, and hands out its injected fault, if any.
    async fn enter(&self, op: Op) -> Result<(), ForgeError> {
        let (delay, fault) = {
            let mut state = self.state();
            *state.calls.entry(op).or_default() += 1;
            let fault = state.faults.get_mut(&op).and_then(VecDeque::pop_front);
            (state.delays.get(&op).copied(), fault)
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        match fault {
            Some(fault) => Err(fault.error(op)),
            None => Ok(()),
        }
    }

    /// Passes the real forge's result on, noting a failure nobody expected.
    fn observe<T>(&self, op: Op, result: Result<T, ForgeError>) -> Result<T, ForgeError> {
        if let Err(e) = &result {
            let mut state = self.state();
            if !state.inner_failures_expected {
                eprintln!("faulty forge: the real forge failed unexpectedly in {op:?}: {e:#}");
                state.surprises.push(format!("{op:?}: {e:#}"));
            }
        }
        result
    }
}

#[async_trait]
impl Forge for FaultyForge {
    async fn row_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
        id: &RowId,
    ) -> Result<Vec<BranchName>, ForgeError> {
        self.enter(Op::RowBranches).await?;
        let result = self.inner.row_branches(repo, prefix, id).await;
        self.observe(Op::RowBranches, result)
    }

    async fn has_pull_request(
        &self,
        _repo: &RepoName,
        branch: &BranchName,
    ) -> Result<bool, ForgeError> {
        self.enter(Op::HasPullRequest).await?;
        // GitHub's `head=OWNER:BRANCH` filter, compared exactly as the pipeline must.
        Ok(self
            .state()
            .pulls
            .iter()
            .any(|head| head == branch.as_str()))
    }

    async fn base(&self, repo: &RepoName) -> Result<Base, ForgeError> {
        self.enter(Op::Base).await?;
        let result = self.inner.base(repo).await;
        self.observe(Op::Base, result)
    }

    async fn claim(
        &self,
        repo: &RepoName,
        branch: &BranchName,
        sha: &Sha,
    ) -> Result<Claim, ForgeError> {
        self.enter(Op::Claim).await?;
        let lose = {
            let mut state = self.state();
            let lose = state.claims_to_lose > 0;
            state.claims_to_lose = state.claims_to_lose.saturating_sub(1);
            lose
        };
        if lose {
            let other = self.inner.claim(repo, branch, sha).await;
            assert!(
                matches!(other, Ok(Claim::Created)),
                "the other writer's claim of {branch} did not create it: {other:?}"
            );
        }
        let result = self.inner.claim(repo, branch, sha).await;
        self.observe(Op::Claim, result)
    }

    async fn dispatch(
        &self,
        repo: &RepoName,
        event_type: &EventType,
        payload: &Value,
    ) -> Result<(), ForgeError> {
        self.enter(Op::Dispatch).await?;
        let result = self.inner.dispatch(repo, event_type, payload).await;
        self.observe(Op::Dispatch, result)
    }

    async fn release(
        &self,
        repo: &RepoName,
        branch: &BranchName,
        sha: &Sha,
    ) -> Result<(), ForgeError> {
        self.enter(Op::Release).await?;
        let result = self.inner.release(repo, branch, sha).await;
        self.observe(Op::Release, result)
    }

    // The sweep's reads pass straight through: no test injects faults into them.
    async fn prefix_branches(
        &self,
        repo: &RepoName,
        prefix: &BranchPrefix,
    ) -> Result<Vec<Branch>, ForgeError> {
        self.inner.prefix_branches(repo, prefix).await
    }

    async fn pull_requests(
        &self,
        _repo: &RepoName,
        prefix: &BranchPrefix,
        _since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Listing<PullRequest>, ForgeError> {
        let now = chrono::Utc::now();
        let state = self.state();
        let listed = state
            .pulls
            .iter()
            .enumerate()
            .filter(|(_, head)| prefix.tail(head).is_some());
        Ok(Listing::Found(
            listed
                .map(|(n, head)| PullRequest {
                    number: n as u64 + 1,
                    head: head.clone(),
                    state: "closed".to_owned(),
                    merged: true,
                    merged_at: Some(now),
                    created_at: now,
                    url: String::new(),
                    head_sha: Sha::new(""),
                })
                .collect(),
        ))
    }

    async fn ahead_by(
        &self,
        repo: &RepoName,
        base: &Base,
        branch: &BranchName,
    ) -> Result<u64, ForgeError> {
        self.inner.ahead_by(repo, base, branch).await
    }
}
