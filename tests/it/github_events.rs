//! `POST /github` (SPEC §3): the App's signed `pull_request` and `workflow_run` events move a
//! row past `dispatched`, against a real PostgreSQL table and the fake GitHub; what is not a
//! route's row, or not signed with `GITHUB_WEBHOOK_SECRET`, writes nothing.

use std::time::{Duration, Instant};

use fake_github::{FakeGithub, PullState, TEST_APP_PRIVATE_KEY_PEM};
use rowbranch::config::Config;
use rowbranch::startup::{Application, Listen};
use rowbranch::webhook::auth::hub_signature_256;
use serde_json::{json, Value};

use crate::support::db::TestSchema;
use crate::support::github::{fake, REPO};
use crate::support::http::{raw_http, send_whole, Reply};
use crate::support::or_skip;
use crate::support::random::random_secret;
use crate::support::server::{serve_env, Server};
use crate::support::wait::eventually;

/// The App's webhook secret, as GitHub's settings page would hold it: spaces are part of it.
const HOOK_SECRET: &str = "the App's webhook secret 0123456789";

/// A table whose rows 7 and 8 were dispatched, with the two columns rowbranch writes.
async fn feedbacks() -> Option<TestSchema> {
    let schema = TestSchema::create("hooks_").await?;
    schema
        .execute(&format!(
            "create table {} (id bigint primary key, message text,
               rowbranch_status text, pull_request_url text,
               created_at timestamptz not null default now());
             insert into {0} (id, message, rowbranch_status) values
               (7, 'Add dark mode', 'dispatched'), (8, 'Fix the footer', 'dispatched');
             create table {} (id bigint primary key, message text,
               created_at timestamptz not null default now());",
            schema.table("feedbacks"),
            schema.table("ideas")
        ))
        .await;
    Some(schema)
}

/// rowbranch on the fake GitHub, its route writing back into `table`; with the App's webhook
/// secret when `hook_secret` is given.
async fn app(fake: &FakeGithub, table: &TestSchema, hook_secret: Option<&str>) -> Server {
    app_with(fake, table, hook_secret, "").await
}

/// [`app`] with these lines in `[webhook]`.
async fn app_with(
    fake: &FakeGithub,
    table: &TestSchema,
    hook_secret: Option<&str>,
    webhook: &str,
) -> Server {
    let text = format!(
        "listen = \"127.0.0.1:0\"\nreconcile_every = \"off\"\n\n[webhook]\n{webhook}\n\n\
         [github]\napp_id = {}\n\
         api_url = \"{}\"\n\n[[routes]]\ntable = \"feedbacks\"\nschema = \"{}\"\nrepo = \"{REPO}\"\n\
         branch_prefix = \"feedback\"\nevent_type = \"feedback\"\n\
         status_column = \"rowbranch_status\"\npull_request_column = \"pull_request_url\"\n\n\
         [[routes]]\ntable = \"ideas\"\nschema = \"{2}\"\nrepo = \"{REPO}\"\n\
         branch_prefix = \"idea\"\nevent_type = \"idea\"\n",
        fake.app_id(),
        fake.url(),
        table.name
    );
    let secret = random_secret();
    let env = |key: &str| match key {
        "ROWBRANCH_WEBHOOK_SECRET" => Some(secret.clone()),
        "GITHUB_APP_PRIVATE_KEY" => Some(TEST_APP_PRIVATE_KEY_PEM.to_owned()),
        "DATABASE_URL" => Some(table.url.clone()),
        "GITHUB_WEBHOOK_SECRET" => hook_secret.map(str::to_owned),
        _ => None,
    };
    let config = Config::parse(&text, std::path::Path::new("rowbranch.toml"), &env)
        .unwrap_or_else(|e| panic!("the test config does not parse: {e}"));
    let application = Application::build(config, serve_env(Listen::Config))
        .await
        .expect("the GitHub forge opens and the routes compile");
    Server::run(application, secret, Duration::from_secs(30))
}

/// POSTs `event` named `name` to /github, signed with `secret`.
async fn send(server: &Server, name: &str, event: &Value, secret: &str) -> Reply {
    let body = event.to_string();
    let signature = hub_signature_256(secret, body.as_bytes());
    let headers = [
        ("content-type", "application/json"),
        ("x-github-event", name),
        ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ("x-hub-signature-256", signature.as_str()),
    ];
    server.post_to("/github", body, &headers).await
}

/// A `pull_request` event of `action` from `branch`, its head in `head_repo`.
fn pull_request(action: &str, branch: &str, merged: bool, head_repo: &str) -> Value {
    json!({
        "action": action,
        "number": 12,
        "pull_request": {
            "number": 12,
            "html_url": format!("https://github.com/{REPO}/pull/12"),
            "state": if action == "closed" { "closed" } else { "open" },
            "merged": merged,
            "head": { "ref": branch, "sha": "0123456789abcdef0123456789abcdef01234567",
                      "repo": { "full_name": head_repo } },
            "base": { "ref": "main", "repo": { "full_name": REPO } },
        },
        "repository": { "full_name": REPO },
        "installation": { "id": 77 },
    })
}

/// A completed `workflow_run` started by `event`, titled `title`.
fn workflow_run(action: &str, event: &str, title: &str) -> Value {
    json!({
        "action": action,
        "workflow_run": {
            "id": 30433642, "event": event, "display_title": title, "head_branch": "main",
            "status": "completed", "conclusion": "failure",
        },
        "repository": { "full_name": REPO },
    })
}

/// Row `id`'s state and link as rowbranch wrote them.
async fn row(table: &TestSchema, id: i64) -> (Option<String>, Option<String>) {
    let sql = format!(
        "select rowbranch_status, pull_request_url from {} where id = $1",
        table.table("feedbacks")
    );
    let found = table.client.query_one(&sql, &[&id]).await.unwrap();
    (found.get(0), found.get(1))
}

async fn becomes(table: &TestSchema, id: i64, state: &str) {
    eventually(&format!("row {id} to be {state}"), || async {
        (row(table, id).await.0.as_deref() == Some(state)).then_some(())
    })
    .await;
}

/// Waits until every write handed to the writer before now is done: the writer takes them in
/// order, so once row 8 holds `marker` (a pull request's link), the ones before it are made.
async fn settled(server: &Server, table: &TestSchema, marker: u32) {
    let mut opened = pull_request("opened", "feedback/8-fix-the-footer", false, REPO);
    let link = format!("https://github.com/{REPO}/pull/{marker}");
    opened["pull_request"]["html_url"] = json!(link);
    send(server, "pull_request", &opened, HOOK_SECRET)
        .await
        .expect(200, "pr_open");
    eventually("the marker write", || async {
        (row(table, 8).await.1.as_deref() == Some(link.as_str())).then_some(())
    })
    .await;
}

/// The label sets of `rowbranch_github_events_total` the server shows.
async fn event_series(server: &Server) -> std::collections::BTreeSet<String> {
    let metrics = server.get("/metrics").await.text;
    (metrics.lines())
        .filter_map(|l| l.strip_prefix("rowbranch_github_events_total"))
        .filter_map(|l| Some(l.rsplit_once(' ')?.0.to_owned()))
        .collect()
}

const BRANCH: &str = "feedback/7-add-dark-mode";
const LINK: &str = "https://github.com/acme/app/pull/12";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_requests_events_move_its_row_repeated_and_out_of_order_alike() {
    let table = or_skip!(feedbacks().await);
    let fake = fake().await;
    fake.create_branch(REPO, BRANCH, "main");
    let server = app(&fake, &table, Some(HOOK_SECRET)).await;
    // The pull request from the row's branch, `action` (and `merged`) as GitHub sends it.
    let pull = |action: &str, merged: bool| {
        let event = pull_request(action, BRANCH, merged, REPO);
        let server = &server;
        async move { send(server, "pull_request", &event, HOOK_SECRET).await }
    };

    let reply = pull("opened", false).await;
    reply.expect(200, "pr_open");
    assert_eq!(reply.body["pull_request"], LINK, "{}", reply.text);
    assert_eq!(reply.body["id"], "7", "{}", reply.text);
    assert_eq!(reply.body["branch"], BRANCH, "{}", reply.text);
    becomes(&table, 7, "pr_open").await;
    assert_eq!(row(&table, 7).await.1.as_deref(), Some(LINK));
    // The same event again: answered alike, and the row is left as it is.
    pull("opened", false).await.expect(200, "pr_open");

    pull("closed", false).await.expect(200, "closed");
    becomes(&table, 7, "closed").await;
    // A late `opened` (GitHub sends no order) leaves it closed; only `reopened` opens it again.
    pull("opened", false).await.expect(200, "pr_open");
    settled(&server, &table, 101).await;
    assert_eq!(row(&table, 7).await.0.as_deref(), Some("closed"));
    pull("reopened", false).await.expect(200, "pr_open");
    becomes(&table, 7, "pr_open").await;

    pull("closed", true).await.expect(200, "merged");
    becomes(&table, 7, "merged").await;
    // `merged` is last: whatever comes after, in whatever order, leaves it.
    for (action, merged) in [("opened", false), ("reopened", false), ("closed", false)] {
        pull(action, merged).await.expect(
            200,
            if action == "closed" {
                "closed"
            } else {
                "pr_open"
            },
        );
    }
    // An action that says nothing of a state is ignored.
    let labeled = pull("labeled", false).await;
    labeled.expect(200, "ignored");
    assert_eq!(labeled.reason(), "action", "{}", labeled.text);
    settled(&server, &table, 102).await;
    assert_eq!(
        row(&table, 7).await,
        (Some("merged".into()), Some(LINK.into()))
    );

    let metrics = server.get("/metrics").await.text;
    let route = format!("route=\"{}.feedbacks\"", table.name);
    for (outcome, at_least) in [("pr_open", 4.0), ("closed", 2.0), ("merged", 1.0)] {
        let series = format!(
            "rowbranch_github_events_total{{{route},status=\"200\",outcome=\"{outcome}\",reason=\"\"}} "
        );
        let count: f64 = (metrics.lines())
            .find_map(|l| l.strip_prefix(&series))
            .unwrap_or_else(|| panic!("no {series} in:\n{metrics}"))
            .parse()
            .unwrap();
        assert!(count >= at_least, "{series}{count}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_left_no_pull_request_fails_its_row_and_one_that_left_one_does_not() {
    let table = or_skip!(feedbacks().await);
    let fake = fake().await;
    fake.create_branch(REPO, BRANCH, "main");
    fake.create_branch(REPO, "feedback/8-fix-the-footer", "main");
    fake.add_pull(REPO, "feedback/8-fix-the-footer", PullState::Open, false);
    let server = app(&fake, &table, Some(HOOK_SECRET)).await;

    let title = format!("rowbranch: {BRANCH}");
    let reply = send(
        &server,
        "workflow_run",
        &workflow_run("completed", "repository_dispatch", &title),
        HOOK_SECRET,
    )
    .await;
    reply.expect(200, "failed");
    becomes(&table, 7, "failed").await;
    // A pull request that comes later still counts: failed → pr_open.
    send(
        &server,
        "pull_request",
        &pull_request("opened", BRANCH, false, REPO),
        HOOK_SECRET,
    )
    .await
    .expect(200, "pr_open");
    becomes(&table, 7, "pr_open").await;

    // Row 8's run left a pull request (its own event says its state): nothing written.
    let eight = workflow_run(
        "completed",
        "repository_dispatch",
        "rowbranch: feedback/8-fix-the-footer",
    );
    let reply = send(&server, "workflow_run", &eight, HOOK_SECRET).await;
    reply.expect(200, "ignored");
    assert_eq!(reply.reason(), "pull_request", "{}", reply.text);
    // Runs that are not a row's work, or not over.
    for (run, reason) in [
        (workflow_run("completed", "push", &title), "not_work"),
        (
            workflow_run("completed", "repository_dispatch", "CI"),
            "not_work",
        ),
        (
            workflow_run("requested", "repository_dispatch", &title),
            "action",
        ),
    ] {
        let reply = send(&server, "workflow_run", &run, HOOK_SECRET).await;
        reply.expect(200, "ignored");
        assert_eq!(reply.reason(), reason, "{}", reply.text);
    }
    assert_eq!(row(&table, 8).await, (Some("dispatched".into()), None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_no_routes_row_is_ignored_and_writes_nothing() {
    let table = or_skip!(feedbacks().await);
    let fake = fake().await;
    fake.create_branch(REPO, "feedback/7-add-dark-mode", "main");
    fake.create_branch(REPO, "feedback/7-add-dark-mode-redo-1", "main");
    let server = app(&fake, &table, Some(HOOK_SECRET)).await;
    let at_start = event_series(&server).await;
    table
        .execute(&format!(
            "insert into {} (id, message, rowbranch_status) values (9, 'Gone soon', 'dispatched');
             delete from {0} where id = 9;",
            table.table("feedbacks")
        ))
        .await;

    let cases = [
        // A fork's pull request into the route's repository, its head named like a row's.
        (
            pull_request("opened", "feedback/7-x", false, "stranger/app"),
            "fork",
        ),
        (
            {
                let mut other = pull_request("opened", "feedback/7-x", false, "acme/other");
                other["repository"]["full_name"] = json!("acme/other");
                other
            },
            "repository",
        ),
        (pull_request("opened", "other/7-x", false, REPO), "branch"),
        // The ideas route's branch: a route that writes no state back.
        (
            pull_request("opened", "idea/7-x", false, REPO),
            "not_written",
        ),
        (
            pull_request("opened", "feedback/9-gone-soon", false, REPO),
            "no_row",
        ),
        (
            pull_request("opened", "feedback/77-no-such-row", false, REPO),
            "no_row",
        ),
        // The row was redone: its first branch's news is old.
        (pull_request("closed", BRANCH, false, REPO), "superseded"),
    ];
    for (event, reason) in cases {
        let reply = send(&server, "pull_request", &event, HOOK_SECRET).await;
        reply.expect(200, "ignored");
        assert_eq!(reply.reason(), reason, "{}", reply.text);
    }
    for name in ["ping", "installation", "push"] {
        let reply = send(
            &server,
            name,
            &json!({"zen": "Keep it logically awesome."}),
            HOOK_SECRET,
        )
        .await;
        reply.expect(200, "ignored");
        assert_eq!(reply.reason(), "event", "{}", reply.text);
    }
    // The redo's own branch counts.
    send(
        &server,
        "pull_request",
        &pull_request("opened", "feedback/7-add-dark-mode-redo-1", false, REPO),
        HOOK_SECRET,
    )
    .await
    .expect(200, "pr_open");
    becomes(&table, 7, "pr_open").await;
    settled(&server, &table, 103).await;
    let count = format!(
        "select count(*) from {} where id = 9",
        table.table("feedbacks")
    );
    let none: i64 = table.client.query_one(&count, &[]).await.unwrap().get(0);
    assert_eq!(none, 0, "a row that no longer exists is not written back");
    // Each answer landed on a series there from the start.
    assert_eq!(event_series(&server).await, at_start);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_not_signed_with_the_apps_secret_is_refused_and_writes_nothing() {
    let table = or_skip!(feedbacks().await);
    let fake = fake().await;
    fake.create_branch(REPO, BRANCH, "main");
    let server = app(&fake, &table, Some(HOOK_SECRET)).await;
    // From the start, every answer's series at 0: none's 14 and the route's 8 (operating.md).
    let metrics = server.get("/metrics").await.text;
    let at_start: Vec<&str> = (metrics.lines())
        .filter(|l| l.starts_with("rowbranch_github_events_total{"))
        .collect();
    assert_eq!(at_start.len(), 14 + 8, "{metrics}");
    assert!(at_start.iter().all(|l| l.ends_with(" 0")), "{metrics}");
    let opened = pull_request("opened", BRANCH, false, REPO);
    let body = opened.to_string();

    // A near miss (one hex digit off), and a signature under POST /webhook's secret.
    let right = hub_signature_256(HOOK_SECRET, body.as_bytes());
    let last = right.chars().last().unwrap();
    let near_miss = format!(
        "{}{}",
        &right[..right.len() - 1],
        if last == '0' { '1' } else { '0' }
    );
    let webhooks = hub_signature_256(&server.secret, body.as_bytes());
    for signature in [near_miss.as_str(), webhooks.as_str(), "sha256=abc", ""] {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("x-github-event", "pull_request"),
        ];
        if !signature.is_empty() {
            headers.push(("x-hub-signature-256", signature));
        }
        let reply = server.post_to("/github", body.clone(), &headers).await;
        reply.expect(401, "error");
        assert_eq!(reply.body["reason"], "unauthorized", "{}", reply.text);
    }
    // Without a signature the body is never waited for: refused long before read_timeout_ms.
    let addr = server.url.trim_start_matches("http://").parse().unwrap();
    let head = "POST /github HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                X-GitHub-Event: pull_request\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n";
    let start = Instant::now();
    let answer = raw_http(addr, head.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // Larger than 1 MiB, refused from its Content-Length; and not JSON.
    let big = head
        .replace(
            "Content-Length: 5000",
            &format!("Content-Length: {}", (1 << 20) + 1),
        )
        .replace(
            "Connection",
            &format!("X-Hub-Signature-256: {right}\r\nConnection"),
        );
    let answer = raw_http(addr, big.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let form = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("x-github-event", "pull_request"),
        ("x-hub-signature-256", right.as_str()),
    ];
    server
        .post_to("/github", "payload=%7B%7D", &form)
        .await
        .expect(415, "error");

    // Nothing was written: a later write lands while row 7 is as it was.
    settled(&server, &table, 104).await;
    assert_eq!(row(&table, 7).await, (Some("dispatched".into()), None));
    let metrics = server.get("/metrics").await.text;
    let series = "rowbranch_github_events_total{route=\"none\",status=\"401\",outcome=\"error\",reason=\"unauthorized\"} ";
    let count: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .unwrap_or_else(|| panic!("{metrics}"))
        .parse()
        .unwrap();
    assert_eq!(count, 5.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_apps_secret_github_is_404_and_counted() {
    let table = or_skip!(feedbacks().await);
    let fake = fake().await;
    let server = app(&fake, &table, None).await;
    let event = pull_request("opened", BRANCH, false, REPO);
    let reply = send(&server, "pull_request", &event, HOOK_SECRET).await;
    reply.expect(404, "error");
    assert!(
        reply.message().contains("GITHUB_WEBHOOK_SECRET"),
        "{}",
        reply.text
    );
    assert_eq!(reply.body["reason"], "not_configured", "{}", reply.text);
    let metrics = server.get("/metrics").await.text;
    let series = "rowbranch_github_events_total{route=\"none\",status=\"404\",outcome=\"error\",reason=\"not_configured\"} 1";
    assert!(metrics.lines().any(|l| l == series), "{metrics}");
    assert_eq!(row(&table, 7).await, (Some("dispatched".into()), None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uuid_id_is_found_by_its_prefixes_against_the_table() {
    let schema = or_skip!(TestSchema::create("hooks_uuid_").await);
    let id = "3f2504e0-4f89-11d3-9a0c-0305e82c3301";
    schema
        .execute(&format!(
            "create table {} (id uuid primary key, message text, rowbranch_status text,
               pull_request_url text, created_at timestamptz not null default now());
             insert into {0} (id, message, rowbranch_status) values ('{id}', 'Fix login', 'dispatched');
             create table {} (id bigint primary key, message text,
               created_at timestamptz not null default now());",
            schema.table("feedbacks"),
            schema.table("ideas")
        ))
        .await;
    let fake = fake().await;
    let server = app(&fake, &schema, Some(HOOK_SECRET)).await;
    let branch = format!("feedback/{id}-fix-login");
    fake.create_branch(REPO, &branch, "main");
    let reply = send(
        &server,
        "pull_request",
        &pull_request("opened", &branch, false, REPO),
        HOOK_SECRET,
    )
    .await;
    reply.expect(200, "pr_open");
    assert_eq!(reply.body["id"], id, "{}", reply.text);
    let sql = format!(
        "select rowbranch_status, pull_request_url from {} where id = '{id}'",
        schema.table("feedbacks")
    );
    eventually("the uuid row to be pr_open", || async {
        let found = schema.client.query_one(&sql, &[]).await.unwrap();
        let state: Option<String> = found.get(0);
        (state.as_deref() == Some("pr_open")).then_some(())
    })
    .await;
    // A uuid no row has, with a slug: no row, nothing written.
    let other = "feedback/00000000-0000-0000-0000-000000000000-fix-login";
    let reply = send(
        &server,
        "pull_request",
        &pull_request("opened", other, false, REPO),
        HOOK_SECRET,
    )
    .await;
    assert_eq!(reply.reason(), "no_row", "{}", reply.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_under_false_signatures_cut_each_other_and_the_app_s_event_is_read() {
    use tokio::io::AsyncWriteExt;

    let table = or_skip!(feedbacks().await);
    let fake = fake().await;
    fake.create_branch(REPO, BRANCH, "main");
    let server = app_with(&fake, &table, Some(HOOK_SECRET), "").await;
    let addr = server.url.trim_start_matches("http://").parse().unwrap();
    // Twelve senders of a well-formed false signature, each 800,000 bytes into a body of
    // 1,000,000: 9.6 MB between them, past the budget every body not yet verified shares.
    let signature = format!("sha256={}", "ab".repeat(32));
    let head = format!(
        "POST /github HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         X-GitHub-Event: pull_request\r\nX-Hub-Signature-256: {signature}\r\n\
         Content-Length: 1000000\r\n\r\n"
    );
    let mut held = Vec::new();
    for _ in 0..12 {
        let mut stream = send_whole(addr, head.as_bytes()).await;
        stream.write_all(&vec![b' '; 800_000]).await.unwrap();
        held.push(stream);
    }
    let opened = pull_request("opened", BRANCH, false, REPO);
    let started = std::time::Instant::now();
    let reply = send(&server, "pull_request", &opened, HOOK_SECRET).await;
    reply.expect(200, "pr_open");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    becomes(&table, 7, "pr_open").await;
    drop(held);
}
