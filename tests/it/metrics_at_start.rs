//! `/metrics` right after start, before any row: every counter at 0 for the label sets its run
//! can produce (docs/operating.md, the label sets at start), the build and the process, and no
//! gauge whose 0 would be a claim. Then what the server counts lands on those series: no
//! delivery, run or GitHub answer of an ordinary day makes a series that was not there.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::alerts::have_promtool;
use crate::support::app::{spawn_app, Options, FEEDBACK_ROUTE};
use crate::support::child::{self, Served, Start};
use crate::support::github::{fake, spawn, GithubOptions};
use crate::support::http::{free_port, insert};
use crate::support::local::dir_with_repository;
use crate::support::random::random_secret;
use crate::support::tools::output_text;

/// The answers counted for a webhook route, as `status,outcome,reason`.
const ROUTE_ANSWERS: [&str; 18] = [
    "200,dispatched,",
    "200,duplicate,branch_exists",
    "200,duplicate,pull_request",
    "200,duplicate,claim_taken",
    "200,duplicate,in_flight",
    "200,ignored,event",
    "200,ignored,not_ready",
    "200,ignored,passed_before",
    "202,accepted,",
    "400,error,malformed",
    "422,error,bad_id",
    "422,error,missing_column",
    "422,error,payload_refused",
    "500,error,internal",
    "503,error,unavailable",
    "503,error,queue_full",
    "503,error,queue_bytes_full",
    "503,error,abandoned",
];

/// The answers counted under `route="none"`.
const UNROUTED_ANSWERS: [&str; 6] = [
    "400,error,malformed",
    "401,error,unauthorized",
    "408,error,timed_out",
    "413,error,too_large",
    "415,error,content_type",
    "422,error,no_route",
];

const RUN_RESULTS: [&str; 6] = [
    "dispatched",
    "duplicate",
    "failed_unavailable",
    "failed_refused",
    "failed_internal",
    "abandoned",
];

const MESSAGE_RESULTS: [&str; 6] = [
    "archived",
    "dead",
    "retried",
    "redispatched",
    "lease_lost",
    "released",
];

/// `rowbranch_github_requests_total` at start: each operation `serve` makes, with the status
/// of its success and `error`.
const GITHUB_REQUESTS: [(&str, &str); 21] = [
    ("get_app", "200"),
    ("get_app", "error"),
    ("get_installation", "200"),
    ("get_installation", "error"),
    ("get_repo", "200"),
    ("get_repo", "error"),
    ("get_ref", "200"),
    ("get_ref", "404"),
    ("get_ref", "error"),
    ("matching_refs", "200"),
    ("matching_refs", "error"),
    ("create_ref", "201"),
    ("create_ref", "error"),
    ("delete_ref", "204"),
    ("delete_ref", "error"),
    ("dispatch", "204"),
    ("dispatch", "error"),
    ("list_pulls", "200"),
    ("list_pulls", "error"),
    ("compare", "200"),
    ("compare", "error"),
];

const RETRY_CAUSES: [&str; 4] = ["rate_limited", "server_error", "no_answer", "not_there_yet"];

/// The series of `family` in `text`: each one's labels (`{…}`, or empty) and value.
fn series(text: &str, family: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(family)?;
            let (labels, value) = rest.rsplit_once(' ')?;
            (labels.is_empty() || labels.starts_with('{'))
                .then(|| (labels.to_owned(), value.parse().expect("a number")))
        })
        .collect()
}

/// The label sets of `family` in `text`.
fn label_sets(text: &str, family: &str) -> BTreeSet<String> {
    series(text, family).into_keys().collect()
}

fn deliveries(route: &str, answers: &[&str]) -> BTreeSet<String> {
    answers
        .iter()
        .map(|answer| {
            let mut parts = answer.split(',');
            let (status, outcome, reason) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            format!(
                r#"{{route="{route}",status="{status}",outcome="{outcome}",reason="{reason}"}}"#
            )
        })
        .collect()
}

fn by_route(route: &str, results: &[&str]) -> BTreeSet<String> {
    results
        .iter()
        .map(|result| format!(r#"{{route="{route}",result="{result}"}}"#))
        .collect()
}

/// Each series of `family` in `text` is at 0.
fn all_zero(text: &str, family: &str) {
    for (labels, value) in series(text, family) {
        assert_eq!(value, 0.0, "{family}{labels} in:\n{text}");
    }
}

/// The families in `text` whose name starts with `prefix`.
fn families(text: &str, prefix: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|name| name.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// `family` has the label sets `expected` and `rowbranch_runs_total` those of the feedbacks
/// route, every series of both at zero.
fn counted_from_zero(text: &str, family: &str, expected: &BTreeSet<String>) {
    assert_eq!(label_sets(text, family), *expected);
    assert_eq!(
        label_sets(text, "rowbranch_runs_total"),
        by_route("public.feedbacks", &RUN_RESULTS)
    );
    for family in [family, "rowbranch_runs_total"] {
        all_zero(text, family);
    }
}

/// No family of `text` begins with any of `prefixes`.
fn no_families(text: &str, prefixes: &[&str]) {
    for prefix in prefixes {
        assert_eq!(families(text, prefix), BTreeSet::new(), "{text}");
    }
}

/// What every serving process shows: the build, the process, in a form promtool takes.
fn check_every_process_series(text: &str) {
    check_build_info(text);
    check_process(text);
    promtool_check_metrics(text);
}

/// The build's series: its version and the commit `rowbranch --version` names.
fn check_build_info(text: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .arg("--version")
        .output()
        .expect("rowbranch --version runs");
    let version = String::from_utf8_lossy(&out.stdout);
    let commit = version
        .split("(commit ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no commit in {version}"));
    let line = format!(
        r#"rowbranch_build_info{{version="{}",commit="{commit}"}} 1"#,
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
}

/// The process's series, read from `/proc`: started a moment ago, with memory and files open.
fn check_process(text: &str) {
    let value = |name: &str| {
        series(text, name)
            .remove("")
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value("process_start_time_seconds");
    assert!(
        started <= now + 1.0 && started > now - 600.0,
        "{started} vs {now}"
    );
    assert!(value("process_resident_memory_bytes") > 1e6, "{text}");
    let open = value("process_open_fds");
    assert!(open >= 3.0 && open <= value("process_max_fds"), "{text}");
    assert!(value("process_cpu_seconds_total") >= 0.0, "{text}");
}

/// `promtool check metrics` finds nothing to say of `text` (names, help, types).
fn promtool_check_metrics(text: &str) {
    if !have_promtool() {
        return;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && output_text(&out).trim().is_empty(),
        "promtool check metrics:\n{}\n{text}",
        output_text(&out)
    );
}

/// A `DATABASE_URL` nothing answers at: the consumer runs, and never samples a queue.
fn unreachable_database() -> String {
    format!(
        "postgres://rowbranch:secret-password@127.0.0.1:{}/rows",
        free_port()
    )
}

async fn scrape(served: &Served) -> String {
    reqwest::get(format!("{}/metrics", served.url))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("a metrics body")
}

#[tokio::test]
async fn serve_on_the_local_forge_shows_a_webhook_routes_counters_at_zero_before_any_row() {
    let served = child::serve_local("", None, &random_secret()).await;
    let text = scrape(&served).await;
    let mut expected = deliveries("public.feedbacks", &ROUTE_ANSWERS);
    expected.extend(deliveries("none", &UNROUTED_ANSWERS));
    counted_from_zero(&text, "rowbranch_deliveries_total", &expected);
    for line in [
        "rowbranch_installation_tokens_minted_total 0",
        "rowbranch_write_queue_depth 0",
        "rowbranch_runs_in_flight 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
    }
    // The local forge asks nothing of GitHub; no queue, no scheduled sweep.
    no_families(
        &text,
        &[
            "rowbranch_github_",
            "rowbranch_pgmq_",
            "rowbranch_reconcile_",
        ],
    );
    check_every_process_series(&text);
}

#[tokio::test]
async fn serve_with_every_route_on_the_queue_counts_messages_and_no_deliveries() {
    let only_queue = format!(
        "listen = \"127.0.0.1:0\"\n[forge]\nkind = \"local\"\npath = \"repo.git\"\n{FEEDBACK_ROUTE}intake = \"pgmq\"\n",
    );
    let served = child::serve(
        dir_with_repository().await,
        Start {
            config: &only_queue,
            env: vec![("DATABASE_URL", unreachable_database())],
            nofile: None,
            secret: random_secret(),
        },
    )
    .await;
    let text = scrape(&served).await;
    let mut expected = by_route("public.feedbacks", &MESSAGE_RESULTS);
    expected.extend(by_route("none", &["dead", "lease_lost"]));
    counted_from_zero(&text, "rowbranch_pgmq_messages_total", &expected);
    // `/webhook` answers 404 here: no delivery is counted. The queue's depth is not known yet.
    no_families(
        &text,
        &[
            "rowbranch_deliveries_total",
            "rowbranch_pgmq_queue_depth",
            "rowbranch_pgmq_oldest_message_age_seconds",
        ],
    );
    check_every_process_series(&text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_github_each_operation_starts_at_zero_and_the_rate_limit_appears_once_answered() {
    let fake = fake().await;
    let app = spawn(&fake, GithubOptions::default()).await;
    let text = app.get("/metrics").await.text;
    let expected: BTreeSet<String> = GITHUB_REQUESTS
        .iter()
        .map(|(operation, status)| format!(r#"{{operation="{operation}",status="{status}"}}"#))
        .collect();
    assert_eq!(
        label_sets(&text, "rowbranch_github_requests_total"),
        expected
    );
    let causes: BTreeSet<String> = RETRY_CAUSES
        .iter()
        .map(|cause| format!(r#"{{cause="{cause}"}}"#))
        .collect();
    assert_eq!(label_sets(&text, "rowbranch_github_retries_total"), causes);
    // Without GITHUB_WEBHOOK_SECRET, POST /github answers 404 alone.
    let events = deliveries("none", &["404,error,not_configured"]);
    assert_eq!(label_sets(&text, "rowbranch_github_events_total"), events);
    for family in [
        "rowbranch_github_requests_total",
        "rowbranch_github_retries_total",
        "rowbranch_github_events_total",
    ] {
        all_zero(&text, family);
    }
    assert!(
        !text.contains("rowbranch_github_rate_limit_remaining"),
        "the rate limit left is not known before GitHub answers:\n{text}"
    );

    // A row dispatched, then a duplicate of it: every answer lands on a series from the start.
    app.dispatched(json!(7), "Counted").await;
    app.duplicate(json!(7), "Counted", "branch_exists").await;
    let after = app.get("/metrics").await.text;
    assert_eq!(
        label_sets(&after, "rowbranch_github_requests_total"),
        expected,
        "{after}"
    );
    let requests = series(&after, "rowbranch_github_requests_total");
    assert_eq!(requests[r#"{operation="create_ref",status="201"}"#], 1.0);
    assert_eq!(requests[r#"{operation="dispatch",status="204"}"#], 1.0);
    let remaining = series(&after, "rowbranch_github_rate_limit_remaining");
    assert!(
        remaining
            .get(r#"{resource="core"}"#)
            .is_some_and(|r| *r > 0.0),
        "{after}"
    );
    app.shutdown().await;
}

/// A route for `public.ideas` that reads the queue, beside the webhook's `feedbacks`.
const IDEAS_FROM_THE_QUEUE: &str = "\n[[routes]]\ntable = \"ideas\"\nrepo = \"acme/app\"\n\
     branch_prefix = \"idea\"\nevent_type = \"idea\"\nintake = \"pgmq\"\n";

#[tokio::test]
async fn every_answer_of_the_webhook_lands_on_a_series_there_from_the_start() {
    let app = spawn_app(
        Options::default()
            .routes(&format!("{FEEDBACK_ROUTE}{IDEAS_FROM_THE_QUEUE}"))
            .max_body_bytes(1024)
            .env("DATABASE_URL", &unreachable_database()),
    )
    .await;
    let text = app.get("/metrics").await.text;
    let mut expected = deliveries("public.feedbacks", &ROUTE_ANSWERS);
    expected.extend(deliveries("none", &UNROUTED_ANSWERS));
    expected.extend(deliveries("public.ideas", &["200,ignored,pgmq_intake"]));
    assert_eq!(label_sets(&text, "rowbranch_deliveries_total"), expected);
    let mut messages = by_route("public.ideas", &MESSAGE_RESULTS);
    messages.extend(by_route("none", &["dead", "lease_lost"]));
    assert_eq!(label_sets(&text, "rowbranch_pgmq_messages_total"), messages);
    let mut runs = by_route("public.feedbacks", &RUN_RESULTS);
    runs.extend(by_route("public.ideas", &RUN_RESULTS));
    assert_eq!(label_sets(&text, "rowbranch_runs_total"), runs);

    // One of each answer a test can provoke without a slow body or a broken forge.
    app.dispatched(json!(1), "One").await;
    app.duplicate(json!(1), "One", "branch_exists").await;
    let mut update = insert(json!(2), "Two");
    update["type"] = "UPDATE".into();
    update["old_record"] = update["record"].clone();
    app.post_json(&update).await.expect(200, "ignored");
    let mut other = insert(json!(3), "Three");
    other["table"] = "others".into();
    app.post_json(&other).await.expect(422, "error");
    let mut idea = insert(json!(4), "Four");
    idea["table"] = "ideas".into();
    app.post_json(&idea).await.expect(200, "ignored");
    app.post_insert(json!("a b"), "Bad id")
        .await
        .expect(422, "error");
    let mut not_an_object = insert(json!(5), "Five");
    not_an_object["record"] = json!([1, 2]);
    app.post_json(&not_an_object).await.expect(400, "error");
    app.post_bytes("{not json").await.expect(400, "error");
    app.post_raw("{}", &[("content-type", "application/json")])
        .await
        .expect(401, "error");
    app.post_raw("{}", &[("content-type", "text/plain")])
        .await
        .expect(415, "error");
    app.post_bytes(vec![b' '; 2048]).await.expect(413, "error");

    let after = app.get("/metrics").await.text;
    assert_eq!(
        label_sets(&after, "rowbranch_deliveries_total"),
        expected,
        "{after}"
    );
    let counted: f64 = series(&after, "rowbranch_deliveries_total").values().sum();
    assert_eq!(counted, 11.0, "{after}");
    assert_eq!(label_sets(&after, "rowbranch_runs_total"), runs, "{after}");
    app.shutdown().await;
}
