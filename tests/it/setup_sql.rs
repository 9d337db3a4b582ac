//! `templates/supabase.sql` run in a real PostgreSQL: the trigger it installs, what it sends,
//! and that no name, URL or secret can break out of its quoting.
//!
//! Needs `DATABASE_URL` (`eval "$(scripts/test-postgres.sh)"` starts a throwaway server); without
//! it these tests say why and pass, except under `CI=true`, where they fail.
//!
//! Supabase's `supabase_functions.http_request()` is replaced by a stand-in that reads its
//! arguments the way Supabase's does (headers and params as JSON, the timeout as an integer, so
//! a malformed argument fails the INSERT as it would there) and records them, with the payload
//! Supabase would send, in a table. The SQL names that schema literally, so each test gets a
//! database of its own, created for it and dropped after it: tests running at once never see
//! each other's stand-in, calls or tables, and nothing is created in the `DATABASE_URL` database.

use rowbranch::cmd::init::setup::{render, SetupContext};
use serde_json::{json, Value};
use tokio_postgres::Client;

use crate::support::app::{spawn_app, Options, GATED_ROUTE};
use crate::support::db::{rows, Template, TestDb};
use crate::support::or_skip;
use crate::support::random::{random_secret, random_whsec};
use crate::support::setup::{
    apply_both_ways, create_table, insert_row, refusal, table_exists, webhook_context as context,
    webhook_triggers as rowbranch_triggers,
};

/// What `supabase.sql` renders in place of a missing secret.
const PLACEHOLDER: &str = "REPLACE_WITH_ROWBRANCH_WEBHOOK_SECRET";

/// The stand-in for what enabling Database Webhooks creates. Its payload is Supabase's:
/// `jsonb_build_object('old_record', OLD, 'record', NEW, 'type', TG_OP, …)`
/// (https://github.com/supabase/supabase/blob/0bf7caa30ceea38f99eec768d3b54abcfa0601ba/docker/volumes/db/webhooks.sql),
/// where OLD is NULL for an INSERT.
const STAND_IN: &str = r#"
create schema supabase_functions;

create table supabase_functions.calls (
    n          bigserial primary key,
    args       jsonb   not null,
    url        text    not null,
    method     text    not null,
    headers    jsonb   not null,
    params     jsonb   not null,
    timeout_ms integer not null,
    payload    jsonb   not null
);

create function supabase_functions.http_request() returns trigger
language plpgsql as $stand_in$
begin
    if TG_NARGS <> 5 then
        raise exception 'http_request() takes 5 arguments, got %', TG_NARGS;
    end if;
    insert into supabase_functions.calls (args, url, method, headers, params, timeout_ms, payload)
    values (
        to_jsonb(TG_ARGV),
        TG_ARGV[0],
        TG_ARGV[1],
        TG_ARGV[2]::jsonb,
        TG_ARGV[3]::jsonb,
        TG_ARGV[4]::integer,
        jsonb_build_object(
            'type', TG_OP,
            'table', TG_TABLE_NAME,
            'schema', TG_TABLE_SCHEMA,
            'record', to_jsonb(NEW),
            'old_record', to_jsonb(OLD)
        )
    );
    return NEW;
end
$stand_in$;
"#;

/// One recorded `http_request()` call.
#[derive(Debug)]
struct Call {
    args: Value,
    url: String,
    method: String,
    headers: Value,
    params: Value,
    timeout_ms: i32,
    payload: Value,
}

/// A database of the test's own with the stand-in in it.
async fn with_stand_in() -> Option<TestDb> {
    let db = TestDb::create(Template::Plain).await?;
    db.execute(STAND_IN).await;
    Some(db)
}

fn render_sql(ctx: &SetupContext) -> String {
    render("supabase.sql", ctx).unwrap_or_else(|e| panic!("supabase.sql does not render: {e}"))
}

/// Every call recorded so far, oldest first.
async fn calls(db: &Client) -> Vec<Call> {
    let sql = "select args, url, method, headers, params, timeout_ms, payload
               from supabase_functions.calls order by n";
    rows(db, sql)
        .await
        .iter()
        .map(|row| Call {
            args: row.get(0),
            url: row.get(1),
            method: row.get(2),
            headers: row.get(3),
            params: row.get(4),
            timeout_ms: row.get(5),
            payload: row.get(6),
        })
        .collect()
}

/// The one call an insert recorded, checked against what the trigger must send.
#[track_caller]
fn expect_one_call(calls: &[Call], url: &str, secret: &str) -> Value {
    assert_eq!(calls.len(), 1, "one INSERT, one webhook: {calls:#?}");
    let call = &calls[0];
    assert_eq!(call.url, format!("{url}/webhook"), "{call:#?}");
    assert_eq!(call.method, "POST", "{call:#?}");
    assert_eq!(
        call.headers,
        json!({
            "Content-Type": "application/json",
            "Authorization": format!("Bearer {secret}"),
        }),
        "{call:#?}"
    );
    assert_eq!(call.params, json!({}), "{call:#?}");
    assert_eq!(call.timeout_ms, 5000, "{call:#?}");
    assert_eq!(call.args[4], json!("5000"), "{call:#?}");
    call.payload.clone()
}

#[tokio::test]
async fn the_trigger_posts_each_insert_once_with_the_secret_and_a_5000_ms_timeout() {
    let db = or_skip!(with_stand_in().await);
    let (schema, table) = ("app", "feedbacks");
    create_table(&db, schema, table).await;
    let secret = random_secret();
    let url = "https://hooks.example.com";
    let sql = render_sql(&context(schema, table, url, Some(&secret)));

    db.batch_execute(&sql).await.expect("supabase.sql failed");
    db.batch_execute(&sql)
        .await
        .expect("supabase.sql failed when run a second time");
    assert_eq!(rowbranch_triggers(&db, schema, table).await, 1);
    assert!(
        calls(&db).await.is_empty(),
        "nothing is sent before an insert"
    );

    insert_row(&db, schema, table, 42, "Add dark mode").await;

    let payload = expect_one_call(&calls(&db).await, url, &secret);
    assert_eq!(payload["type"], "INSERT");
    assert_eq!(payload["schema"], schema);
    assert_eq!(payload["table"], table);
    assert_eq!(payload["record"]["id"], 42);
    assert_eq!(payload["record"]["message"], "Add dark mode");
    assert!(payload["record"]["created_at"].is_string(), "{payload}");
    assert_eq!(payload["old_record"], Value::Null);

    insert_row(&db, schema, table, 43, "Export as CSV").await;
    let all = calls(&db).await;
    assert_eq!(all.len(), 2, "each insert once: {all:#?}");
    assert_eq!(all[1].payload["record"]["id"], 43);
}

#[tokio::test]
async fn schema_and_table_names_that_need_quoting_work_as_spelled() {
    let db = or_skip!(with_stand_in().await);
    create_table(&db, "app", "sentinel").await;
    let secret = random_secret();
    let url = "https://hooks.example.com";
    let names = [
        ("my-app", "Feedback Items"),
        ("We\"ird", "x\"; drop table app.sentinel; -- select 1 \"y"),
        ("public", "Feedbacks"),
    ];
    for (n, (schema, table)) in names.into_iter().enumerate() {
        create_table(&db, schema, table).await;
        let sql = render_sql(&context(schema, table, url, Some(&secret)));
        db.batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("supabase.sql failed for {schema:?}.{table:?}: {e}"));
        assert_eq!(
            rowbranch_triggers(&db, schema, table).await,
            1,
            "{schema:?}.{table:?}"
        );
        insert_row(&db, schema, table, 7, "Hello").await;
        let calls = calls(&db).await;
        assert_eq!(calls.len(), n + 1, "{calls:#?}");
        let payload = &calls[n].payload;
        assert_eq!(payload["schema"], schema);
        assert_eq!(payload["table"], table);
        assert_eq!(payload["record"]["id"], 7);
    }
    assert!(table_exists(&db, "app", "sentinel").await);
    // The unquoted spelling is another table, which has no trigger.
    assert_eq!(rowbranch_triggers(&db, "public", "feedbacks").await, 0);
}

#[tokio::test]
async fn a_quote_or_backslash_in_the_url_or_secret_stays_inside_its_literal() {
    let db = or_skip!(with_stand_in().await);
    let (schema, table) = ("public", "feedbacks");
    create_table(&db, schema, table).await;
    create_table(&db, "app", "sentinel").await;
    let secret = format!(
        "{}'); drop table app.sentinel; --\\' \"quoted\" \\\"}} é {}",
        random_secret(),
        random_secret()
    );
    let url = "https://hooks.example.com/o'neil\\'); drop table app.sentinel; --";
    let sql = render_sql(&context(schema, table, url, Some(&secret)));

    apply_both_ways(&db, &sql).await;

    insert_row(&db, schema, table, 1, "Hi").await;
    expect_one_call(&calls(&db).await, url, &secret);
    assert!(table_exists(&db, "app", "sentinel").await);
}

#[tokio::test]
async fn without_a_secret_the_placeholder_is_refused_until_replaced() {
    let db = or_skip!(with_stand_in().await);
    let (schema, table) = ("public", "feedbacks");
    create_table(&db, schema, table).await;
    let url = "https://hooks.example.com";
    let sql = render_sql(&context(schema, table, url, None));
    assert!(sql.contains(PLACEHOLDER), "{sql}");

    // A trigger sending the placeholder is not installed.
    let message = refusal(&db, &sql).await;
    assert!(message.contains("placeholder"), "{message}");
    assert_eq!(rowbranch_triggers(&db, schema, table).await, 0);

    // What the user does: put the secret in its place, everywhere it appears.
    let secret = random_secret();
    db.batch_execute(&sql.replace(PLACEHOLDER, &secret))
        .await
        .expect("supabase.sql failed once the placeholder was replaced");
    assert_eq!(rowbranch_triggers(&db, schema, table).await, 1);
    insert_row(&db, schema, table, 5, "Hi").await;
    expect_one_call(&calls(&db).await, url, &secret);
}

/// The header is readable in the database, so a signing key put there would make the signed
/// setup's key a bearer token: refused, as rowbranch refuses it.
#[tokio::test]
async fn a_whsec_secret_in_place_of_the_placeholder_is_refused() {
    let db = or_skip!(with_stand_in().await);
    create_table(&db, "public", "feedbacks").await;
    let sql = render_sql(&context("public", "feedbacks", "https://h.example", None));
    let message = refusal(&db, &sql.replace(PLACEHOLDER, &random_whsec())).await;
    assert!(message.contains("whsec_"), "{message}");
    assert_eq!(rowbranch_triggers(&db, "public", "feedbacks").await, 0);
}

#[tokio::test]
async fn a_delivery_the_trigger_makes_is_dispatched_by_rowbranch() {
    let app = spawn_app(Options::default()).await;
    let (url, secret) = (app.url.clone(), app.secret.clone());
    let Some(db) = with_stand_in().await else {
        app.shutdown().await;
        return;
    };
    create_table(&db, "public", "feedbacks").await;
    let sql = render_sql(&context("public", "feedbacks", &url, Some(&secret)));
    db.batch_execute(&sql).await.expect("supabase.sql failed");
    insert_row(&db, "public", "feedbacks", 7, "Add dark mode").await;
    let calls = calls(&db).await;
    let payload = expect_one_call(&calls, &url, &secret);
    let headers = &calls[0].headers;

    // Sent as pg_net would: the recorded headers, the payload as the body.
    let headers: Vec<(String, String)> = headers
        .as_object()
        .expect("the headers are a JSON object")
        .iter()
        .map(|(name, value)| (name.clone(), value.as_str().unwrap_or_default().to_owned()))
        .collect();
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let reply = app.post_raw(payload.to_string(), &headers).await;
    reply.expect(200, "dispatched");
    assert_eq!(
        reply.body["branch"], "feedback/7-add-dark-mode",
        "{}",
        reply.text
    );
    app.expect_dispatches(1).await;
    app.shutdown().await;
}

#[test]
fn the_rendered_sql_holds_the_secret_or_a_placeholder_and_its_check() {
    let secret = random_secret();
    let with = render_sql(&context(
        "public",
        "feedbacks",
        "https://h.example",
        Some(&secret),
    ));
    assert_eq!(with.matches(&secret).count(), 1, "{with}");
    assert!(!with.contains(PLACEHOLDER), "{with}");
    assert!(!with.contains("do $check$"), "{with}");
    assert!(with.starts_with("-- rowbranch:"), "{with}");
    assert!(with.contains("E'https://h.example/webhook'"), "{with}");
    assert!(with.contains("'5000'"), "{with}");

    let without = render_sql(&context("public", "feedbacks", "https://h.example", None));
    assert!(
        without.contains(&format!("Bearer {PLACEHOLDER}")),
        "{without}"
    );
    assert!(without.contains("do $check$"), "{without}");

    // No value lands in a comment, where a newline in it would end the comment.
    let tricky = render_sql(&context(
        "MARK-schema",
        "MARK-table",
        "https://MARK.example",
        Some("MARK-secret"),
    ));
    for line in tricky.lines().filter(|l| l.trim_start().starts_with("--")) {
        assert!(
            !line.contains("MARK"),
            "a value in a comment: {line:?}\n{tricky}"
        );
    }
}

#[tokio::test]
async fn a_gated_trigger_posts_the_insert_and_the_column_s_updates_and_rowbranch_runs_the_approval_once(
) {
    let app = spawn_app(Options::default().routes(GATED_ROUTE)).await;
    let (url, secret) = (app.url.clone(), app.secret.clone());
    let Some(db) = with_stand_in().await else {
        app.shutdown().await;
        return;
    };
    create_table(&db, "public", "feedbacks").await;
    db.batch_execute("alter table public.feedbacks add column status text")
        .await
        .unwrap();
    let ctx = SetupContext {
        run_when: Some(rowbranch::config::RunWhen {
            column: "status".into(),
            equals: "approved".into(),
        }),
        ..context("public", "feedbacks", &url, Some(&secret))
    };
    db.batch_execute(&render_sql(&ctx))
        .await
        .expect("supabase.sql failed");
    for sql in [
        "insert into public.feedbacks (id, message, status) values (7, 'Add dark mode', 'new')",
        "update public.feedbacks set status = 'approved' where id = 7",
        // Not the gate's column: the trigger does not fire.
        "update public.feedbacks set message = 'Add a dark mode' where id = 7",
        "update public.feedbacks set status = 'approved' where id = 7",
    ] {
        db.batch_execute(sql).await.unwrap();
    }
    let calls = calls(&db).await;
    let mut answers = Vec::new();
    for call in &calls {
        let headers: Vec<(String, String)> = (call.headers.as_object().unwrap().iter())
            .map(|(name, value)| (name.clone(), value.as_str().unwrap().to_owned()))
            .collect();
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let reply = app.post_raw(call.payload.to_string(), &headers).await;
        answers.push(format!("{} {}", reply.outcome(), reply.reason()));
    }
    assert_eq!(
        answers,
        ["ignored not_ready", "dispatched ", "ignored passed_before"]
    );
    assert_eq!(app.expect_dispatches(1).await.len(), 1);
    app.shutdown().await;
}
