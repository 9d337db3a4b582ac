//! What an operator sees: `/metrics` following a 202 to its end, JSON log lines with their
//! fields, refused credentials at warn (once a minute a kind, never the secret), the status
//! page in a real browser, and the page GitHub's manifest flow lands on.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use fake_github::{Fault, Op};

use crate::support::app::{spawn_app, Options, GATED_DISPATCH};
use crate::support::child::{self, Start};
use crate::support::github::{fake, spawn, GithubOptions};
use crate::support::http::insert;
use crate::support::local::dir_with_repository;
use crate::support::random::random_secret;
use crate::support::wait::eventually;
/// The value of the series `line` names (its whole label set), or `None`.
fn series(text: &str, line: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn metrics_follow_a_202_to_its_end_and_count_each_answer_in_its_series() {
    let app = spawn_app(
        Options::default()
            .respond_within_ms(300)
            .on_dispatch(GATED_DISPATCH),
    )
    .await;
    // Row 1: answered 202 while its dispatch is held; then it goes.
    app.post_insert(json!(1), "Held")
        .await
        .expect(202, "accepted");
    app.open_gate();
    app.wait_for_dispatches(1).await;
    // Row 2 dispatched at once, then a duplicate of it.
    app.dispatched(json!(2), "At once").await;
    app.duplicate(json!(2), "At once", "branch_exists").await;
    let text = eventually("the 202's run to be counted", || async {
        let text = app.get("/metrics").await.text;
        (series(
            &text,
            r#"rowbranch_runs_total{route="public.feedbacks",result="dispatched"}"#,
        ) == Some(2.0))
        .then_some(text)
    })
    .await;
    for (line, value) in [
        (
            r#"rowbranch_deliveries_total{route="public.feedbacks",status="202",outcome="accepted",reason=""}"#,
            1.0,
        ),
        (
            r#"rowbranch_deliveries_total{route="public.feedbacks",status="200",outcome="dispatched",reason=""}"#,
            1.0,
        ),
        (
            r#"rowbranch_deliveries_total{route="public.feedbacks",status="200",outcome="duplicate",reason="branch_exists"}"#,
            1.0,
        ),
        (
            r#"rowbranch_runs_total{route="public.feedbacks",result="dispatched"}"#,
            2.0,
        ),
        (
            r#"rowbranch_runs_total{route="public.feedbacks",result="duplicate"}"#,
            1.0,
        ),
        (
            r#"rowbranch_run_duration_seconds_count{route="public.feedbacks"}"#,
            3.0,
        ),
        ("rowbranch_runs_in_flight", 0.0),
    ] {
        assert_eq!(series(&text, line), Some(value), "{line} in:\n{text}");
    }
    for line in [
        "rowbranch_installation_tokens_minted_total 0",
        "rowbranch_write_queue_depth 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
    }
    assert!(
        !text.contains("feedback/"),
        "no branch is a label value:\n{text}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_requests_retries_tokens_and_the_rate_limit_are_counted() {
    let fake = fake().await;
    fake.inject(Op::CreateRef, Fault::Status(502), 1);
    let app = spawn(&fake, GithubOptions::default()).await;
    app.dispatched(json!(7), "Counted").await;
    let text = app.get("/metrics").await.text;
    for (line, value) in [
        (
            r#"rowbranch_github_requests_total{operation="create_ref",status="502"}"#,
            1.0,
        ),
        (
            r#"rowbranch_github_requests_total{operation="create_ref",status="201"}"#,
            1.0,
        ),
        (
            r#"rowbranch_github_requests_total{operation="dispatch",status="204"}"#,
            1.0,
        ),
        (
            r#"rowbranch_github_requests_total{operation="get_installation",status="200"}"#,
            1.0,
        ),
        (
            r#"rowbranch_github_request_duration_seconds_count{operation="dispatch"}"#,
            1.0,
        ),
        (
            r#"rowbranch_github_retries_total{cause="server_error"}"#,
            1.0,
        ),
        ("rowbranch_installation_tokens_minted_total", 1.0),
        ("rowbranch_write_queue_depth", 0.0),
    ] {
        assert_eq!(series(&text, line), Some(value), "{line} in:\n{text}");
    }
    let remaining = series(
        &text,
        r#"rowbranch_github_rate_limit_remaining{resource="core"}"#,
    );
    assert!(remaining.is_some_and(|r| r > 4000.0), "{text}");
    app.shutdown().await;
}

/// `serve` on a local repository, logging in `format`; and its webhook secret.
async fn logging_server(format: &str) -> (child::Served, String) {
    let secret = random_secret();
    let start = Start {
        config: &child::local_config(""),
        env: vec![("ROWBRANCH_LOG_FORMAT", format.into())],
        nofile: None,
        secret: secret.clone(),
    };
    (
        child::serve(dir_with_repository().await, start).await,
        secret,
    )
}

#[tokio::test]
async fn json_logs_are_only_json_and_carry_the_decision_and_the_run() {
    let (mut served, secret) = logging_server("json").await;
    let client = reqwest::Client::new();
    let send = |auth: String, id: u64| {
        client
            .post(format!("{}/webhook", served.url))
            .header("content-type", "application/json")
            .header("authorization", auth)
            .header("webhook-id", format!("msg_{id}"))
            .body(insert(json!(id), "A secret text that never reaches the log").to_string())
            .send()
    };
    assert_eq!(
        send(format!("Bearer {secret}"), 42).await.unwrap().status(),
        200
    );
    for id in 1..=3 {
        let wrong = send("Bearer a-wrong-secret-of-enough-length-00".into(), id);
        assert_eq!(wrong.await.unwrap().status(), 401);
    }
    eventually("the run's end in the log", || async {
        served.log().contains("run ended").then_some(())
    })
    .await;
    served.stops_cleanly(Duration::from_secs(30)).await;
    let log = served.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    // Every line opens with its time and level, a delivery's (its span's fields lifted to the
    // top) as any other.
    for line in log.lines() {
        assert!(line.starts_with(r#"{"timestamp":"#), "{line}");
        assert!(line.contains(r#"","level":""#), "{line}");
    }
    let delivery = lines
        .iter()
        .find(|l| l["message"] == "delivery" && l["id"] == "42")
        .unwrap_or_else(|| panic!("no delivery line for row 42: {log}"));
    for (field, expected) in [
        ("delivery", json!("msg_42")),
        ("route", json!("public.feedbacks")),
        (
            "branch",
            json!("feedback/42-a-secret-text-that-never-reaches-the-log"),
        ),
        ("http_status", json!(200)),
        ("outcome", json!("dispatched")),
        ("reason", json!("")),
        ("level", json!("INFO")),
    ] {
        assert_eq!(delivery[field], expected, "{field} of {delivery}");
    }
    assert!(delivery["duration_ms"].is_u64(), "{delivery}");
    let run_end = lines
        .iter()
        .find(|l| l["message"] == "the row's run ended")
        .unwrap_or_else(|| panic!("no run end: {log}"));
    assert_eq!(run_end["result"], "dispatched");
    assert_eq!(run_end["span"]["id"], "42", "the run's span: {run_end}");
    assert_eq!(run_end["span"]["repo"], "acme/app");
    assert!(run_end["span"]["branch"]
        .as_str()
        .unwrap()
        .starts_with("feedback/42-"));
    // Three refusals of one kind within a minute: one line, with its kind.
    let refusals: Vec<&Value> = lines
        .iter()
        .filter(|l| l["level"] == "WARN" && l["kind"] == "wrong_secret")
        .collect();
    assert_eq!(refusals.len(), 1, "{log}");
    for (leak, what) in [
        (secret.as_str(), "the secret"),
        ("a-wrong-secret", "a sent credential"),
        ("never reaches the log", "the row's text"),
    ] {
        assert!(!log.contains(leak), "{what} is in the log");
    }
}

#[tokio::test]
async fn a_text_delivery_line_names_its_fields_once_and_only_those_it_has() {
    let (mut served, secret) = logging_server("text").await;
    let client = reqwest::Client::new();
    let send = |id: &str, body: String| {
        client
            .post(format!("{}/webhook", served.url))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {secret}"))
            .header("webhook-id", id)
            .body(body)
            .send()
    };
    // An id no branch can be named from, at fault in a column; a record that is no object.
    let bad_id = insert(json!(["not", "an", "id"]), "Bad id").to_string();
    assert_eq!(send("msg_bad_id", bad_id).await.unwrap().status(), 422);
    let mut shapeless = insert(json!(7), "No object");
    shapeless["record"] = json!("a row as text");
    let status = send("msg_shapeless", shapeless.to_string())
        .await
        .unwrap()
        .status();
    assert!(status.is_client_error(), "{status}");
    served.stops_cleanly(Duration::from_secs(30)).await;
    let log = served.log();
    let line = |id: &str| {
        let line = (log.lines()).find(|l| l.contains("delivery{") && l.contains(id));
        line.unwrap_or_else(|| panic!("no delivery line for {id}: {log}"))
    };
    // The shapeless body is refused before its table is read: it names no table either.
    for (id, named) in [("msg_bad_id", 1), ("msg_shapeless", 0)] {
        let line = line(id);
        for field in ["delivery=", "route=", "id="] {
            assert_eq!(line.matches(field).count(), 1, "{field} in {line}");
        }
        for field in ["table=", "column="] {
            assert_eq!(line.matches(field).count(), named, "{field} in {line}");
        }
        // The span's fields, one space apart, no space left where a field was not recorded.
        let span = line
            .split_once("delivery{")
            .and_then(|(_, rest)| rest.split_once("}:"));
        let (fields, _) = span.unwrap_or_else(|| panic!("no span in {line}"));
        assert!(!fields.contains("  ") && !fields.ends_with(' '), "{line}");
    }
}

#[tokio::test]
async fn a_config_error_is_a_json_line_too() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(["serve", "--config", "missing.toml", "--log-format", "json"])
        .current_dir(dir.path())
        .env_remove("ROWBRANCH_REPO")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.trim().is_empty());
    for line in stderr.lines() {
        let line: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(line["level"], "ERROR");
        assert!(
            line["error"].as_str().unwrap().contains("missing.toml"),
            "{line}"
        );
    }
}

#[tokio::test]
async fn the_manifest_code_page_answers_before_any_password_and_the_status_page_asks_for_one() {
    let app = spawn_app(
        Options::default()
            .top("status_page = true")
            .env("ROWBRANCH_STATUS_PASSWORD", "a-status-page-password"),
    )
    .await;
    let code = app.get("/?code=a1b2c3d4").await;
    assert_eq!(code.status, 200);
    assert!(
        code.text
            .contains("rowbranch init --manifest-code a1b2c3d4"),
        "{}",
        code.text
    );
    let page = app.get("/").await;
    assert_eq!(page.status, 401);
    assert!(page.headers["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Basic"));
    let client = reqwest::Client::new();
    let page = client
        .get(format!("{}/", app.url))
        .basic_auth("anyone", Some("a-status-page-password"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("No deliveries yet"));
    app.shutdown().await;

    // Off: the code page still answers; the status page does not exist.
    let off = spawn_app(Options::default()).await;
    assert_eq!(off.get("/").await.status, 404);
    let code = off.get("/?code=x_y-z").await;
    assert!(code.text.contains("rowbranch init --manifest-code x_y-z"));
    off.shutdown().await;
}

/// Debian's Chromium, where the machine has it.
fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

#[tokio::test]
async fn the_status_page_lists_the_latest_deliveries_in_a_real_browser() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var("CI").ok().as_deref() != Some("true"),
            "CI needs Debian's chromium for the status page test"
        );
        eprintln!("skipped: no chromium (apt-get install chromium)");
        return;
    };
    let app = spawn_app(Options::default().top("status_page = true")).await;
    app.dispatched(json!(42), "Add dark mode").await;
    app.duplicate(json!(42), "Add dark mode", "branch_exists")
        .await;
    app.post_insert(json!("a b"), "Bad id")
        .await
        .expect(422, "error");
    let profile = tempfile::tempdir().unwrap();
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ];
    let run = |extra: Vec<String>| {
        let mut command = Command::new(&browser);
        command
            .args(flags)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("{}/", app.url))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        tokio::time::timeout(Duration::from_secs(60), command.output())
    };
    let dom = run(vec!["--dump-dom".into()]).await.unwrap().unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("feedback/42-add-dark-mode"), "{dom}");
    assert!(dom.contains("branch_exists"), "{dom}");
    assert!(dom.contains("422"), "{dom}");
    assert!(
        !dom.contains("Add dark mode"),
        "the row's text is never on the page: {dom}"
    );
    // The newest first: the refusal of "a b" above the dispatch of 42.
    let (refused, dispatched) = (dom.find("422").unwrap(), dom.find(">dispatched<").unwrap());
    assert!(refused < dispatched, "{dom}");
    let taken = run(vec![
        format!("--screenshot={}", shot.display()),
        "--window-size=1200,700".into(),
        "--hide-scrollbars".into(),
    ])
    .await
    .unwrap()
    .unwrap();
    assert!(taken.status.success(), "{}", child::stderr(&taken));
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 1000,
        "a screenshot at {}",
        shot.display()
    );
    println!("status page screenshot: {}", shot.display());
    app.shutdown().await;
}

#[tokio::test]
async fn a_request_to_an_unknown_path_is_answered_404_counted_and_logged_once_a_minute() {
    let secret = random_secret();
    let served = child::serve_local("", None, &secret).await;
    let client = reqwest::Client::new();
    // A long path, then twice what `init --url …/webhook` used to make the trigger post to.
    let long = format!("/webhook/{}", "a".repeat(300));
    for path in [long.as_str(), "/webhook/webhook", "/webhook/webhook"] {
        let reply = client
            .post(format!("{}{path}?secret=never-logged", served.url))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {secret}"))
            .body(insert(json!(1), "Lost").to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), 404, "{path}");
        // Sent with its length, as every answer is, not in chunks.
        assert!(reply.headers().contains_key("content-length"), "{path}");
        let body: Value = serde_json::from_str(&reply.text().await.unwrap()).unwrap();
        assert!(
            body["message"].as_str().unwrap().contains("POST /webhook"),
            "{body}"
        );
    }
    let metrics = reqwest::get(format!("{}/metrics", served.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        series(&metrics, "rowbranch_unknown_path_requests_total"),
        Some(3.0),
        "{metrics}"
    );
    let log = served.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("does not serve"))
        .collect();
    assert_eq!(lines.len(), 1, "one line a minute: {log}");
    // The path, cut to 200 bytes.
    let cut = format!("/webhook/{}…", "a".repeat(191));
    assert!(lines[0].contains(&cut), "{log}");
    assert!(!lines[0].contains(&"a".repeat(192)), "{log}");
    assert!(
        !log.contains("never-logged") && !log.contains(&secret),
        "{log}"
    );
    assert!(served.branches().await.is_empty(), "nothing ran");
}
