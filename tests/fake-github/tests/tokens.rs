//! The fake's plain tokens (`add_token`), held to what GitHub documents for a workflow's
//! `GITHUB_TOKEN` and fine-grained tokens: the token reaches its repositories alone, with its
//! permissions; a missing one is a 403 "Resource not accessible by integration" (or "… by
//! personal access token") with `X-Accepted-GitHub-Permissions`; creating a ref that exists is
//! a 422 only for a token that may write; each token has a rate-limit bucket of its own, which
//! `GET /rate_limit` reports without counting; and a workflow's `state` is read with Actions:
//! read. (https://docs.github.com/rest/using-the-rest-api/troubleshooting-the-rest-api#resource-not-accessible,
//! https://docs.github.com/rest/actions/workflows#get-a-workflow,
//! https://docs.github.com/rest/rate-limit/rate-limit)

use fake_github::{Auth, FakeGithub, Op};
use serde_json::{json, Value};

mod common;
use common::Answer;

const REPO: &str = "acme/widgets";
const OTHER_REPO: &str = "acme/gadgets";
const TOKEN: &str = "ghs_workflowtokenforwidgets0000000000";
/// What the drain workflow's job is given.
const DRAIN_PERMISSIONS: [(&str, &str); 3] = [
    ("contents", "write"),
    ("pull_requests", "read"),
    ("actions", "read"),
];

async fn fake() -> FakeGithub {
    let fake = FakeGithub::start().await;
    fake.add_repo(REPO);
    fake.add_repo(OTHER_REPO);
    fake
}

/// `method` of `path` with `token`, as a workflow's step would send it.
async fn send(
    fake: &FakeGithub,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Answer {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", fake.url()))
        // Without one the fake, like GitHub, answers 403.
        .header("user-agent", "fake-github-tests")
        .header("accept", "application/vnd.github+json")
        .header("authorization", format!("Bearer {token}"));
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.expect("the fake answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.expect("a body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON body")
    };
    Answer {
        status,
        headers,
        body,
    }
}

async fn get(fake: &FakeGithub, token: &str, path: &str) -> Answer {
    send(fake, token, "GET", path, None).await
}

/// The probe rowbranch makes: `main`'s own ref created again at its head.
async fn create_main(fake: &FakeGithub, token: &str) -> Answer {
    let sha = fake.branch_sha(REPO, "main").expect("main");
    let body = json!({"ref": "refs/heads/main", "sha": sha});
    send(
        fake,
        token,
        "POST",
        &format!("/repos/{REPO}/git/refs"),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn a_token_with_the_drains_permissions_reads_claims_and_dispatches_in_its_repository() {
    let fake = fake().await;
    fake.add_token(TOKEN, REPO, &DRAIN_PERMISSIONS);
    let repo = get(&fake, TOKEN, &format!("/repos/{REPO}")).await;
    assert_eq!(repo.status, 200, "{}", repo.body);
    assert_eq!(repo.body["default_branch"], "main");
    let sha = fake.branch_sha(REPO, "main").unwrap();
    let claim = json!({"ref": "refs/heads/feedback/1-x", "sha": sha});
    let created = send(
        &fake,
        TOKEN,
        "POST",
        &format!("/repos/{REPO}/git/refs"),
        Some(claim),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let dispatch = json!({"event_type": "feedback", "client_payload": {"id": 1}});
    let sent = send(
        &fake,
        TOKEN,
        "POST",
        &format!("/repos/{REPO}/dispatches"),
        Some(dispatch),
    )
    .await;
    assert_eq!(sent.status, 204);
    assert_eq!(fake.dispatches(REPO).len(), 1);
    assert_eq!(fake.dispatches(REPO)[0].installation_id, None);
    assert_eq!(
        get(&fake, TOKEN, &format!("/repos/{REPO}/pulls"))
            .await
            .status,
        200
    );
    assert_eq!(
        get(&fake, TOKEN, &format!("/repos/{REPO}/actions/runs"))
            .await
            .status,
        200
    );
    // Recorded as the token, by its number; never as an installation.
    let log = fake.requests();
    assert!(
        log.iter().all(|r| matches!(r.auth, Auth::Plain { .. })),
        "{log:?}"
    );
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn another_repository_is_not_found_for_the_token() {
    let fake = fake().await;
    fake.add_token(TOKEN, REPO, &DRAIN_PERMISSIONS);
    let answer = get(
        &fake,
        TOKEN,
        &format!("/repos/{OTHER_REPO}/git/ref/heads/main"),
    )
    .await;
    assert_eq!(answer.status, 404);
    assert_eq!(answer.message(), "Not Found");
    // An unknown token is bad credentials, as any.
    let unknown = get(&fake, "ghs_nobody", &format!("/repos/{REPO}")).await;
    assert_eq!(unknown.status, 401);
    assert_eq!(unknown.message(), "Bad credentials");
}

#[tokio::test]
async fn a_token_without_contents_write_is_refused_with_the_permission_it_lacks() {
    let fake = fake().await;
    fake.add_token(TOKEN, REPO, &[("contents", "read"), ("actions", "read")]);
    let answer = create_main(&fake, TOKEN).await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert_eq!(answer.message(), "Resource not accessible by integration");
    assert_eq!(
        answer.header("x-accepted-github-permissions"),
        Some("contents=write")
    );
    // Not a rate limit: requests are left.
    let remaining: u64 = answer
        .header("x-ratelimit-remaining")
        .unwrap()
        .parse()
        .unwrap();
    assert!(remaining > 0);
    let dispatch = json!({"event_type": "feedback"});
    let sent = send(
        &fake,
        TOKEN,
        "POST",
        &format!("/repos/{REPO}/dispatches"),
        Some(dispatch),
    )
    .await;
    assert_eq!(sent.status, 403);
    assert_eq!(
        sent.header("x-accepted-github-permissions"),
        Some("contents=write")
    );
    let pulls = get(&fake, TOKEN, &format!("/repos/{REPO}/pulls")).await;
    assert_eq!(
        pulls.header("x-accepted-github-permissions"),
        Some("pull_requests=read")
    );
    assert!(fake.dispatches(REPO).is_empty());
    assert_eq!(fake.refs(REPO), vec!["main"]);
}

#[tokio::test]
async fn a_fine_grained_personal_access_token_is_refused_as_one() {
    let fake = fake().await;
    let pat = "github_pat_11AAAAAAA0readonly";
    fake.add_token(pat, REPO, &[("contents", "read")]);
    let answer = create_main(&fake, pat).await;
    assert_eq!(answer.status, 403);
    assert_eq!(
        answer.message(),
        "Resource not accessible by personal access token"
    );
    assert_eq!(
        answer.header("x-accepted-github-permissions"),
        Some("contents=write")
    );
}

#[tokio::test]
async fn creating_the_default_branchs_own_ref_is_422_for_a_token_that_may_write_and_changes_nothing(
) {
    let fake = fake().await;
    fake.add_token(TOKEN, REPO, &DRAIN_PERMISSIONS);
    let before = fake.branch_sha(REPO, "main");
    let answer = create_main(&fake, TOKEN).await;
    assert_eq!(answer.status, 422, "{}", answer.body);
    assert_eq!(answer.message(), "Reference already exists");
    assert_eq!(fake.refs(REPO), vec!["main"]);
    assert_eq!(fake.branch_sha(REPO, "main"), before);
}

#[tokio::test]
async fn each_token_has_its_own_bucket_and_rate_limit_reads_it_without_counting() {
    let fake = fake().await;
    fake.set_rate_limit(3);
    fake.add_token(TOKEN, REPO, &DRAIN_PERMISSIONS);
    let other = "ghs_workflowtokenforgadgets000000000";
    fake.add_token(other, OTHER_REPO, &DRAIN_PERMISSIONS);
    let path = format!("/repos/{REPO}");
    for remaining in ["2", "1", "0"] {
        let answer = get(&fake, TOKEN, &path).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("x-ratelimit-remaining"), Some(remaining));
    }
    let limited = get(&fake, TOKEN, &path).await;
    assert_eq!(limited.status, 403);
    assert!(
        limited.message().starts_with("API rate limit exceeded"),
        "{}",
        limited.message()
    );
    // Asked twice: the same, uncounted.
    for _ in 0..2 {
        let rate = get(&fake, TOKEN, "/rate_limit").await;
        assert_eq!(rate.status, 200);
        assert_eq!(rate.body["resources"]["core"]["remaining"], 0);
        assert_eq!(rate.body["resources"]["core"]["limit"], 3);
    }
    // The other token's bucket is full.
    let theirs = get(&fake, other, &format!("/repos/{OTHER_REPO}")).await;
    assert_eq!(theirs.status, 200);
    assert_eq!(theirs.header("x-ratelimit-remaining"), Some("2"));
    assert_eq!(fake.requests_for(Op::RateLimit).len(), 2);
}

#[tokio::test]
async fn a_workflow_is_found_by_file_name_with_its_state_and_needs_actions_read() {
    let fake = fake().await;
    fake.add_token(TOKEN, REPO, &DRAIN_PERMISSIONS);
    let path = format!("/repos/{REPO}/actions/workflows/rowbranch-drain.yml");
    assert_eq!(
        get(&fake, TOKEN, &path).await.status,
        404,
        "no such file yet"
    );
    fake.add_workflow(
        REPO,
        "rowbranch-drain.yml",
        "name: rowbranch drain\non:\n  schedule:\n    - cron: '17 * * * *'\n",
    );
    let found = get(&fake, TOKEN, &path).await;
    assert_eq!(found.status, 200, "{}", found.body);
    assert_eq!(found.body["state"], "active");
    assert_eq!(found.body["name"], "rowbranch drain");
    assert_eq!(found.body["path"], ".github/workflows/rowbranch-drain.yml");
    assert!(found.body["id"].as_u64().is_some());

    fake.set_workflow_state(REPO, "rowbranch-drain.yml", "disabled_inactivity");
    assert_eq!(
        get(&fake, TOKEN, &path).await.body["state"],
        "disabled_inactivity"
    );
    fake.set_workflow_state(REPO, "rowbranch-drain.yml", "active");
    assert_eq!(get(&fake, TOKEN, &path).await.body["state"], "active");

    let narrow = "ghs_noactionsread000000000000000000";
    fake.add_token(narrow, REPO, &[("contents", "write")]);
    let refused = get(&fake, narrow, &path).await;
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.header("x-accepted-github-permissions"),
        Some("actions=read")
    );
    fake.assert_no_unexpected();
}
