//! Every refusal says why. A route whose column the row lacks is refused (422 `missing_column`)
//! with nothing claimed, and `serve`, `doctor` and `reconcile` refuse such a route against its
//! table; every answer other than 2xx is logged with its reason, the table, the id and the
//! column as they came, and `http_status` (never a top-level `status`, which log services read
//! as the line's severity); refusals before a row is known are logged once a minute per reason.

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::app::{spawn_app, Options, FEEDBACK_ROUTE};
use crate::support::child::{self, Start};
use crate::support::db::TestSchema;
use crate::support::http::insert;
use crate::support::local::dir_with_repository;
use crate::support::or_skip;
use crate::support::random::random_secret;
use crate::support::tools::assert_says;

/// An INSERT into `public.{table}` of `record`, as Supabase's webhook posts it.
fn insert_of(table: &str, record: Value) -> Value {
    json!({"type": "INSERT", "table": table, "schema": "public", "record": record, "old_record": null})
}

/// A row of a table whose columns are `title` and `body`: no `message`.
fn titled(id: Value) -> Value {
    insert_of(
        "feedbacks",
        json!({"id": id, "title": "Button broken", "body": "Clicking Save does nothing",
               "created_at": "2026-12-02T09:30:00.000000+00:00"}),
    )
}

#[tokio::test]
async fn a_row_without_the_routes_text_column_is_a_422_missing_column_and_nothing_is_claimed() {
    let app = spawn_app(Options::default()).await;
    let reply = app.post_json(&titled(json!(42))).await;
    reply.expect(422, "error");
    assert_eq!(reply.reason(), "missing_column", "{}", reply.text);
    for part in [
        "`message`",
        "public.feedbacks",
        "body, created_at, id, title",
        "text_column",
    ] {
        assert!(reply.message().contains(part), "{part:?}: {}", reply.text);
    }
    assert!(app.branches().await.is_empty(), "nothing was claimed");
    assert!(app.dispatches().is_empty());

    // Null and empty text still give a branch without a slug.
    for (id, text) in [(43, Value::Null), (44, json!(""))] {
        let body = insert_of("feedbacks", json!({"id": id, "message": text}));
        app.post_json(&body).await.expect(200, "dispatched");
    }
    assert_eq!(app.branches().await, ["feedback/43", "feedback/44"]);

    let metrics = app.get("/metrics").await.text;
    let line = r#"rowbranch_deliveries_total{route="public.feedbacks",status="422",outcome="error",reason="missing_column"} 1"#;
    assert!(
        metrics.lines().any(|l| l == line),
        "no {line} in:\n{metrics}"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_route_without_a_text_column_takes_rows_with_none() {
    let app = spawn_app(
        Options::default()
            .routes(&FEEDBACK_ROUTE.replace("text_column = \"message\"", "text_column = \"\"")),
    )
    .await;
    let reply = app.post_json(&titled(json!(5))).await;
    reply.expect(200, "dispatched");
    assert_eq!(reply.body["branch"], "feedback/5");
    app.shutdown().await;
}

/// The JSON lines of a log.
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The status page's password: `serve` takes none shorter than 16 characters.
const STATUS_PASSWORD: &str = "a-status-page-password";

#[tokio::test]
async fn every_answer_other_than_2xx_is_logged_with_its_reason_and_what_it_named() {
    let dir = dir_with_repository().await;
    let secret = random_secret();
    let config = format!(
        "listen = \"127.0.0.1:0\"\nstatus_page = true\n\n[forge]\nkind = \"local\"\npath = \"repo.git\"\n\n\
         [webhook]\nmax_body_bytes = 2048\n{FEEDBACK_ROUTE}"
    );
    let mut served = child::serve(
        Arc::clone(&dir),
        Start {
            config: &config,
            env: vec![
                ("ROWBRANCH_LOG_FORMAT", "json".into()),
                ("ROWBRANCH_STATUS_PASSWORD", STATUS_PASSWORD.into()),
            ],
            nofile: None,
            secret: secret.clone(),
        },
    )
    .await;
    let client = reqwest::Client::new();
    let post = |body: String, content_type: &'static str, auth: String| {
        client
            .post(format!("{}/webhook", served.url))
            .header("content-type", content_type)
            .header("authorization", auth)
            .body(body)
            .send()
    };
    let bearer = format!("Bearer {secret}");
    let status = |response: reqwest::Result<reqwest::Response>| response.unwrap().status().as_u16();
    let json = "application/json";
    assert_eq!(
        status(post(titled(json!(42)).to_string(), json, bearer.clone()).await),
        422
    );
    assert_eq!(
        status(post(insert(json!("a b"), "Hi").to_string(), json, bearer.clone()).await),
        422
    );
    let comment = insert_of("comments", json!({"id": 9, "message": "Nice"}));
    let unrouted = post(comment.to_string(), json, bearer.clone())
        .await
        .unwrap();
    assert_eq!(unrouted.status().as_u16(), 422);
    let body: Value = serde_json::from_str(&unrouted.text().await.unwrap()).unwrap();
    assert_eq!(body["outcome"], "error", "{body}");
    assert_eq!(body["reason"], "no_route", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("public.comments"), "{body}");
    assert_eq!(
        status(post(insert(json!(7), "Fine").to_string(), json, bearer.clone()).await),
        200
    );
    for _ in 0..3 {
        let body = insert(json!(8), "Plain").to_string();
        assert_eq!(status(post(body, "text/plain", bearer.clone()).await), 415);
        assert_eq!(
            status(post("not json".into(), json, bearer.clone()).await),
            400
        );
        assert_eq!(
            status(post(" ".repeat(4096), json, bearer.clone()).await),
            413
        );
        let wrong = "Bearer a-wrong-secret-of-enough-length-00".to_owned();
        assert_eq!(status(post("{}".into(), json, wrong).await), 401);
    }
    let missing = client
        .post(format!("{}/webhook", served.url))
        .header("content-type", json)
        .body("{}")
        .send();
    assert_eq!(status(missing.await), 401);

    // The status page shows the same.
    let page = client.get(format!("{}/", served.url));
    let page = page.basic_auth("anyone", Some(STATUS_PASSWORD));
    let page = page.send().await.unwrap();
    let page = page.text().await.unwrap();
    for shown in [
        "missing_column",
        ">message<",
        "bad_id",
        "public.comments",
        "no_route",
        "content_type",
        "malformed",
        "too_large",
        "unauthorized (wrong_secret)",
        "unauthorized (missing)",
    ] {
        assert!(
            page.contains(shown),
            "{shown:?} not on the status page:\n{page}"
        );
    }

    served.signal(rustix::process::Signal::TERM);
    assert_eq!(served.exit_code(Duration::from_secs(30)).await, Some(0));
    let log = served.log();
    let lines = json_lines(&log);
    for line in &lines {
        assert!(
            line.get("status").is_none(),
            "a top-level `status` is read as the severity: {line}"
        );
        if let Some(code) = line["http_status"].as_u64() {
            if !(200..300).contains(&code) {
                let reason = line["reason"].as_str().unwrap_or("");
                assert!(!reason.is_empty(), "a refusal without its reason: {line}");
            }
        }
    }
    let find = |what: &str, pick: &dyn Fn(&Value) -> bool| -> Value {
        let found: Vec<&Value> = lines.iter().filter(|l| pick(l)).collect();
        assert_eq!(found.len(), 1, "{what}: {found:?} in\n{log}");
        found[0].clone()
    };

    let line = find("missing column", &|l| l["reason"] == "missing_column");
    assert_eq!(line["level"], "ERROR", "{line}");
    assert_eq!(line["message"], "delivery", "{line}");
    for (field, expected) in [
        ("http_status", json!(422)),
        ("outcome", json!("error")),
        ("id", json!("42")),
        ("column", json!("message")),
        ("table", json!("public.feedbacks")),
        ("route", json!("public.feedbacks")),
    ] {
        assert_eq!(line[field], expected, "{field} of {line}");
    }
    let detail = line["detail"].as_str().unwrap();
    assert!(detail.contains("body, created_at, id, title"), "{line}");
    let fix = line["fix"].as_str().unwrap();
    assert!(fix.contains("`rowbranch reconcile"), "{line}");
    assert!(fix.contains("--since 48h`"), "{line}");
    assert!(
        !log.contains("Button broken"),
        "the row's text is in the log"
    );

    let line = find("bad id", &|l| l["reason"] == "bad_id");
    assert_eq!(line["level"], "ERROR", "{line}");
    assert_eq!(line["http_status"], 422, "{line}");
    assert_eq!(line["id"], "\"a b\"", "the id as it came: {line}");
    assert_eq!(line["column"], "id", "{line}");

    let line = find("unrouted", &|l| l["reason"] == "no_route");
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["table"], "public.comments", "{line}");
    assert_eq!(line["route"], "none", "{line}");
    assert_eq!(line["http_status"], 422, "{line}");

    // Before a row is known, one line a minute per reason, each saying which.
    for (reason, code) in [
        ("content_type", 415),
        ("malformed", 400),
        ("too_large", 413),
    ] {
        let line = find(reason, &|l| l["reason"] == reason);
        assert_eq!(line["level"], "WARN", "{line}");
        assert_eq!(line["http_status"], code, "{line}");
        assert!(line["detail"].is_string(), "{line}");
    }
    for kind in ["wrong_secret", "missing"] {
        let line = find(kind, &|l| {
            l["reason"] == "unauthorized" && l["kind"] == kind
        });
        assert_eq!(line["level"], "WARN", "{line}");
        assert_eq!(line["http_status"], 401, "{line}");
    }
    assert!(!log.contains(&secret), "the secret is in the log");
    assert!(
        !log.contains("a-wrong-secret"),
        "a sent credential is in the log"
    );
}

/// A schema of the test's own with a `feedbacks` table of `title` and `body`, no `message`.
async fn titled_table() -> Option<TestSchema> {
    let schema = TestSchema::create("refusals_").await?;
    schema
        .execute(&format!(
            "create table {t} (id bigint primary key, title text, body text,
               created_at timestamptz not null default now());
             insert into {t} (id, title, body) values (1, 'Button broken', 'x');",
            t = schema.table("feedbacks")
        ))
        .await;
    Some(schema)
}

/// A local-forge config in `dir` of one route for `schema.feedbacks`, its text in `message`.
fn config_for(dir: &Path, schema: &str) -> std::path::PathBuf {
    let path = dir.join("rowbranch.toml");
    let route = FEEDBACK_ROUTE.replace(
        "[[routes]]\n",
        &format!("[[routes]]\nschema = \"{schema}\"\n"),
    );
    let text = format!("[forge]\nkind = \"local\"\npath = \"repo.git\"\n{route}");
    std::fs::write(&path, text).unwrap();
    path
}

/// `rowbranch ARGS --config CONFIG` with `DATABASE_URL`, and a webhook secret.
async fn rowbranch(args: &[&str], config: &Path, url: &str) -> Output {
    let mut command = child::rowbranch(config.parent().unwrap());
    command
        .args(args)
        .arg("--config")
        .arg(config)
        .env("DATABASE_URL", url)
        .env("ROWBRANCH_WEBHOOK_SECRET", random_secret())
        .env("ROWBRANCH_LISTEN", "127.0.0.1:0");
    child::run(&mut command).await
}

fn text_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[tokio::test]
async fn serve_doctor_and_reconcile_refuse_a_route_naming_a_column_its_table_lacks() {
    let table = or_skip!(titled_table().await);
    let dir = dir_with_repository().await;
    let config = config_for(dir.path(), &table.name);
    let name = format!("{}.feedbacks", table.name);

    let out = rowbranch(&["serve"], &config, &table.url).await;
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    for part in [
        "no column \"message\"".to_owned(),
        name.clone(),
        "id, title, body, created_at".to_owned(),
        "text_column".to_owned(),
    ] {
        assert!(
            text_of(&out).contains(&part),
            "{part:?} in: {}",
            text_of(&out)
        );
    }

    let out = rowbranch(&["doctor"], &config, &table.url).await;
    assert_eq!(out.status.code(), Some(1), "{}", text_of(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed = stdout
        .lines()
        .find(|l| l.starts_with('✗') && l.contains(&name))
        .unwrap_or_else(|| panic!("no failed check for {name}: {stdout}"));
    assert!(failed.contains("no column \"message\""), "{stdout}");

    let out = rowbranch(&["reconcile", "--json"], &config, &table.url).await;
    assert_eq!(out.status.code(), Some(1), "{}", text_of(&out));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary[0]["reason"], "missing_column", "{summary}");
    assert!(
        summary[0]["error"]
            .as_str()
            .unwrap()
            .contains("\"message\""),
        "{summary}"
    );
    let out = rowbranch(&["reconcile"], &config, &table.url).await;
    assert_eq!(out.status.code(), Some(1), "{}", text_of(&out));
    assert!(
        text_of(&out).contains("refused (missing_column)"),
        "{}",
        text_of(&out)
    );

    // With text_column naming a column it has, the route fits: doctor says so.
    let fitting = std::fs::read_to_string(&config)
        .unwrap()
        .replace("text_column = \"message\"", "text_column = \"title\"");
    std::fs::write(&config, fitting).unwrap();
    let out = rowbranch(&["doctor"], &config, &table.url).await;
    let says = format!("✓ {name} has the route's columns: id, title, created_at");
    assert_says(&String::from_utf8_lossy(&out.stdout), &[&says]);
}

#[tokio::test]
async fn serve_and_doctor_stop_on_a_table_the_database_does_not_have_naming_the_tables_it_has() {
    let table = or_skip!(titled_table().await);
    let dir = dir_with_repository().await;
    // `feedback` for `feedbacks`: the mistake a first hour makes.
    let config = config_for(dir.path(), &table.name);
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("table = \"feedbacks\"", "table = \"feedback\"");
    std::fs::write(&config, text).unwrap();
    let out = rowbranch(&["serve"], &config, &table.url).await;
    let said = text_of(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("table {}.feedback does not exist", table.name))
            && said.contains(&format!("the tables of schema {}: feedbacks", table.name)),
        "{said}"
    );
    let out = rowbranch(&["doctor"], &config, &table.url).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("✗ table {}.feedback does not exist", table.name)),
        "{stdout}"
    );
}

/// The `.rs` files under `dir`.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of each tracing macro call in `text`: from its name to its closing parenthesis.
fn tracing_calls(text: &str) -> Vec<&str> {
    let mut calls = Vec::new();
    for name in [
        "trace!(", "debug!(", "info!(", "warn!(", "error!(", "span!(",
    ] {
        for (at, _) in text.match_indices(name) {
            let mut depth = 0;
            for (i, c) in text[at..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            calls.push(&text[at..at + i + 1]);
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    calls
}

/// Whether a macro call has a field named `status`: `status = …`, `%status`, `?status`, or the
/// shorthand `status` alone between commas.
fn names_a_status_field(call: &str) -> bool {
    let bytes = call.as_bytes();
    call.match_indices("status").any(|(at, _)| {
        let before = call[..at].trim_end().chars().last();
        let after = call[at + "status".len()..].trim_start();
        let glued = at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let field_start = matches!(before, Some('(' | ',' | '%' | '?'));
        let field_end = (after.starts_with('=') && !after.starts_with("=="))
            || after.starts_with(',')
            || after.starts_with(')');
        !glued && field_start && field_end
    })
}

#[test]
fn no_log_line_has_a_field_named_status() {
    assert!(names_a_status_field("tracing::info!(status = 200, \"x\")"));
    assert!(names_a_status_field("warn!(id, %status, \"x\")"));
    assert!(!names_a_status_field(
        "info!(http_status = self.status, \"x\")"
    ));
    assert!(!names_a_status_field(
        "warn!(exit_status = %out.status, \"x\")"
    ));
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for call in tracing_calls(&text) {
            if names_a_status_field(call) {
                found.push(format!("{}: {call}", file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "log services read a top-level `status` as the line's severity: name it http_status \
         (or what it is the status of):\n{}",
        found.join("\n")
    );
}
