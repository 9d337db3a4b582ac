//! The row hears back (SPEC §2, `status_column` and `pull_request_column`): the states rowbranch
//! writes into the row, against a real PostgreSQL, through the server as a sender reaches it.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, Options, TestApp};
use crate::support::db::TestSchema;
use crate::support::or_skip;
use crate::support::wait::eventually;

/// A table with a gate column, the two columns rowbranch writes, and row 7 in it.
async fn feedbacks() -> Option<TestSchema> {
    let schema = TestSchema::create("status_").await?;
    schema
        .execute(&format!(
            "create table {} (id bigint primary key, message text, status text default 'new',
               rowbranch_status text default 'new', pull_request_url text,
               created_at timestamptz not null default now());
             insert into {0} (id, message) values (7, 'Add dark mode');",
            schema.table("feedbacks")
        ))
        .await;
    Some(schema)
}

async fn app(table: &TestSchema, extra: &str) -> TestApp {
    let routes = format!(
        r#"
[[routes]]
table = "feedbacks"
schema = "{}"
repo = "acme/app"
events = ["INSERT", "UPDATE"]
branch_prefix = "feedback"
event_type = "feedback"
status_column = "rowbranch_status"
pull_request_column = "pull_request_url"
{extra}
"#,
        table.name
    );
    let options = Options::default()
        .routes(&routes)
        .top("reconcile_every = \"off\"")
        .env("DATABASE_URL", &table.url);
    spawn_app(options).await
}

/// The row's two columns as rowbranch wrote them.
async fn written(table: &TestSchema) -> (Option<String>, Option<String>) {
    let sql = format!(
        "select rowbranch_status, pull_request_url from {} where id = 7",
        table.table("feedbacks")
    );
    let row = table.client.query_one(&sql, &[]).await.unwrap();
    (row.get(0), row.get(1))
}

async fn becomes(table: &TestSchema, state: &str) {
    eventually(&format!("the row's state to be {state}"), || async {
        (written(table).await.0.as_deref() == Some(state)).then_some(())
    })
    .await;
}

/// A delivery of row 7 of `table`, its `status` before and after.
fn event(table: &TestSchema, kind: &str, old: Option<Value>, status: &str, mine: &str) -> Value {
    let row = |status: &Value| {
        json!({ "id": 7, "message": "Add dark mode", "status": status,
                "rowbranch_status": mine, "pull_request_url": null,
                "created_at": "2026-12-02T09:30:00.000000+00:00" })
    };
    json!({
        "type": kind, "schema": table.name, "table": "feedbacks",
        "record": row(&json!(status)),
        "old_record": old.map(|old| row(&old)),
    })
}

#[tokio::test]
async fn a_gated_row_is_waiting_then_dispatched_and_the_echo_of_that_write_changes_nothing() {
    let table = or_skip!(feedbacks().await);
    let app = app(
        &table,
        r#"run_when = { column = "status", equals = "approved" }"#,
    )
    .await;
    // A column default rowbranch does not know counts as before `waiting`.
    app.post_json(&event(&table, "INSERT", None, "new", "new"))
        .await
        .expect(200, "ignored");
    becomes(&table, "waiting").await;
    // A repeat writes nothing.
    app.post_json(&event(&table, "INSERT", None, "new", "waiting"))
        .await
        .expect(200, "ignored");

    app.post_json(&event(
        &table,
        "UPDATE",
        Some(json!("new")),
        "approved",
        "waiting",
    ))
    .await
    .expect(200, "dispatched");
    becomes(&table, "dispatched").await;
    assert_eq!(written(&table).await.1, None, "no pull request yet");
    // rowbranch's own write comes back as an UPDATE: ignored, and nothing is written.
    let echo = event(
        &table,
        "UPDATE",
        Some(json!("approved")),
        "approved",
        "dispatched",
    );
    let reply = app.post_json(&echo).await;
    assert_eq!(reply.reason(), "passed_before", "{}", reply.text);
    // A late `waiting` (a held delivery that arrives last) leaves a later state alone.
    app.post_json(&event(
        &table,
        "UPDATE",
        Some(json!("approved")),
        "new",
        "dispatched",
    ))
    .await
    .expect(200, "ignored");

    let metrics = app.get("/metrics").await.text;
    let route = format!("route=\"{}.feedbacks\"", table.name);
    let count = |result: &str| {
        let series = format!("rowbranch_status_writes_total{{{route},result=\"{result}\"}}");
        (metrics.lines())
            .find_map(|l| l.strip_prefix(&series))
            .map(|n| n.trim().to_owned())
            .unwrap_or_else(|| panic!("no {series} in:\n{metrics}"))
    };
    eventually("the writes to be counted", || async {
        let metrics = app.get("/metrics").await.text;
        let line = format!("rowbranch_status_writes_total{{{route},result=\"already\"}} 2");
        metrics.contains(&line).then_some(())
    })
    .await;
    assert_eq!(count("written"), "2", "{metrics}");
    assert_eq!(count("failed"), "0", "{metrics}");
    assert_eq!(written(&table).await.0.as_deref(), Some("dispatched"));
    app.shutdown().await;
}

#[tokio::test]
async fn a_row_whose_text_column_is_missing_is_refused_in_its_state() {
    let table = or_skip!(feedbacks().await);
    let app = app(&table, "text_column = \"body\"").await;
    let _ = app
        .post_json(&event(&table, "INSERT", None, "new", "new"))
        .await;
    becomes(&table, "refused").await;
    app.shutdown().await;
}
