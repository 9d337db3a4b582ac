//! The fake's workflow runs, held to GitHub's documented `GET /repos/{o}/{r}/actions/runs`:
//! `{total_count, workflow_runs}` newest first, a dispatched run on the default branch with its
//! `run-name` as `display_title`, the `event` filter, `per_page`/`page` with a `Link` header,
//! and Actions: read asked of a token.
//! (https://docs.github.com/rest/actions/workflow-runs#list-workflow-runs-for-a-repository)

use fake_github::FakeGithub;
use serde_json::{json, Value};

const REPO: &str = "acme/widgets";
const INSTALLATION: u64 = 77;

async fn fake() -> FakeGithub {
    let fake = FakeGithub::start().await;
    fake.add_repo(REPO);
    fake.install(REPO, INSTALLATION);
    fake
}

/// A GET with a fresh installation token: status, `Link` header, body.
async fn get(fake: &FakeGithub, path_and_query: &str) -> (u16, Option<String>, Value) {
    let token = fake.issue_token(INSTALLATION, None);
    let url = if path_and_query.starts_with("http") {
        path_and_query.to_owned()
    } else {
        format!("{}{path_and_query}", fake.url())
    };
    let response = reqwest::Client::new()
        .get(url)
        // Without one the fake, like GitHub, answers 403.
        .header("user-agent", "fake-github-tests")
        .header("accept", "application/vnd.github+json")
        .header("authorization", format!("token {token}"))
        .send()
        .await
        .expect("the fake answers");
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let link = header("link");
    let accepted = header("x-accepted-github-permissions");
    let bytes = response.bytes().await.expect("a body");
    let mut body: Value = serde_json::from_slice(&bytes).expect("a JSON body");
    if let Some(accepted) = accepted {
        body["x-accepted-github-permissions"] = json!(accepted);
    }
    (status, link, body)
}

/// The `rel="next"` URL of a `Link` header.
fn next(link: Option<&str>) -> Option<String> {
    link?.split(',').find_map(|part| {
        let (url, rel) = part.split_once(';')?;
        rel.contains("rel=\"next\"")
            .then(|| url.trim().trim_matches(['<', '>']).to_owned())
    })
}

#[tokio::test]
async fn a_dispatched_run_is_listed_on_the_default_branch_with_its_run_name_as_title() {
    let fake = fake().await;
    let main = fake.branch_sha(REPO, "main").expect("main");
    let id = fake.add_workflow_run(
        REPO,
        "rowbranch: feedback/42-add-dark-mode",
        "completed",
        Some("success"),
    );
    assert!(id > u64::from(u32::MAX) / 2, "run ids are above 2^31: {id}");
    let (status, link, body) = get(&fake, &format!("/repos/{REPO}/actions/runs")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(link, None, "one page");
    assert_eq!(body["total_count"], 1);
    let run = &body["workflow_runs"][0];
    assert_eq!(run["id"], id);
    assert_eq!(run["name"], "rowbranch");
    assert_eq!(run["display_title"], "rowbranch: feedback/42-add-dark-mode");
    assert_eq!(run["status"], "completed");
    assert_eq!(run["conclusion"], "success");
    assert_eq!(run["event"], "repository_dispatch");
    assert_eq!(run["head_branch"], "main");
    assert_eq!(run["head_sha"], main.as_str());
    assert_eq!(run["run_number"], 1);
    assert_eq!(
        run["html_url"],
        format!("https://github.com/{REPO}/actions/runs/{id}")
    );
    let created = run["created_at"].as_str().expect("created_at");
    assert!(
        chrono_like(created),
        "created_at is RFC 3339 in UTC: {created}"
    );
    assert_eq!(run["actor"]["login"], "rowbranch-test[bot]");

    // Running: no conclusion yet.
    fake.add_workflow_run(REPO, "rowbranch: feedback/43", "in_progress", None);
    let (_, _, body) = get(&fake, &format!("/repos/{REPO}/actions/runs")).await;
    assert_eq!(body["workflow_runs"][0]["status"], "in_progress");
    assert_eq!(body["workflow_runs"][0]["conclusion"], Value::Null);
    assert_eq!(body["workflow_runs"][0]["run_number"], 2);
    fake.assert_no_unexpected();
}

/// `2026-05-01T12:00:00Z`.
fn chrono_like(text: &str) -> bool {
    text.len() == 20 && text.ends_with('Z') && text.as_bytes()[10] == b'T'
}

#[tokio::test]
async fn runs_are_newest_first_filtered_by_event_and_paged_as_github_pages() {
    let fake = fake().await;
    for n in 1..=5 {
        fake.add_workflow_run(REPO, &format!("rowbranch: feedback/{n}"), "queued", None);
        if n % 2 == 0 {
            fake.add_workflow_run_for(REPO, "push", "CI", "completed", Some("failure"));
        }
    }
    let (_, _, all) = get(&fake, &format!("/repos/{REPO}/actions/runs")).await;
    assert_eq!(all["total_count"], 7, "without a filter, every event");

    let first = format!("/repos/{REPO}/actions/runs?event=repository_dispatch&per_page=2");
    let mut url = first;
    let mut titles = Vec::new();
    let mut pages = 0;
    loop {
        let (status, link, body) = get(&fake, &url).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["total_count"], 5, "the count of the filtered runs");
        pages += 1;
        for run in body["workflow_runs"].as_array().expect("runs") {
            assert_eq!(run["event"], "repository_dispatch");
            titles.push(run["display_title"].as_str().unwrap().to_owned());
        }
        match next(link.as_deref()) {
            Some(next) => {
                assert!(next.contains("page="), "{next}");
                assert!(next.contains("event=repository_dispatch"), "{next}");
                url = next;
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (1..=5)
        .rev()
        .map(|n| format!("rowbranch: feedback/{n}"))
        .collect();
    assert_eq!(titles, expected, "newest first");

    // `per_page` defaults to 30 and stops at 100; a page past the end is empty.
    let (_, _, body) = get(
        &fake,
        &format!("/repos/{REPO}/actions/runs?event=repository_dispatch&per_page=500&page=2"),
    )
    .await;
    assert_eq!(body["workflow_runs"], json!([]));
    let (_, _, body) = get(&fake, &format!("/repos/{REPO}/actions/runs?event=push")).await;
    assert_eq!(body["total_count"], 2);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn listing_runs_asks_for_actions_read() {
    let fake = fake().await;
    fake.add_workflow_run(REPO, "rowbranch: feedback/1", "queued", None);
    fake.set_installation_permissions(
        INSTALLATION,
        &[("contents", "write"), ("pull_requests", "read")],
    );
    let (status, _, body) = get(&fake, &format!("/repos/{REPO}/actions/runs")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["message"], "Resource not accessible by integration");
    assert_eq!(body["x-accepted-github-permissions"], "actions=read");

    fake.set_installation_permissions(INSTALLATION, &[("actions", "read")]);
    let (status, _, _) = get(&fake, &format!("/repos/{REPO}/actions/runs")).await;
    assert_eq!(status, 200);

    // A repository the App is not installed on is hidden: 404.
    fake.add_repo("acme/other");
    let (status, _, _) = get(&fake, "/repos/acme/other/actions/runs").await;
    assert_eq!(status, 404);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn octocrab_reads_the_runs_in_githubs_shape() {
    let fake = fake().await;
    fake.add_workflow_run(
        REPO,
        "rowbranch: feedback/7-x",
        "completed",
        Some("failure"),
    );
    let gh = octocrab::Octocrab::builder()
        .base_uri(fake.url())
        .expect("uri")
        .user_access_token(fake.issue_token(INSTALLATION, None))
        .build()
        .expect("installation client");
    let page = gh
        .workflows("acme", "widgets")
        .list_all_runs()
        .event("repository_dispatch")
        .per_page(100)
        .send()
        .await
        .expect("octocrab deserializes the fake's runs");
    assert_eq!(page.total_count, Some(1));
    let run = &page.items[0];
    assert_eq!(run.event, "repository_dispatch");
    assert_eq!(run.head_branch, "main");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    fake.assert_no_unexpected();
}
