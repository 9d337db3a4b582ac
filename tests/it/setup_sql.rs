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

use std::future::Future;
use std::str::FromStr;

use rowbranch::templates::setup::{render, SetupContext};
use serde_json::{json, Value};
use tokio_postgres::{Client, Config, NoTls};

use crate::helpers::{random_secret, spawn_app, Options};

/// What `supabase.sql` renders in place of a missing secret.
const PLACEHOLDER: &str = "REPLACE_WITH_ROWBRANCH_WEBHOOK_SECRET";

/// The stand-in for what enabling Database Webhooks creates.
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
            'old_record', null
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

/// `DATABASE_URL`, or `None` after saying why the test is skipped; under `CI=true`, a panic.
pub(crate) fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let hint =
                "run `eval \"$(scripts/test-postgres.sh)\"` first to start a throwaway PostgreSQL";
            if std::env::var("CI").is_ok_and(|ci| ci == "true") {
                panic!(
                    "DATABASE_URL is not set, and CI=true: the Supabase SQL tests must run; {hint}"
                );
            }
            eprintln!("skipping the Supabase SQL test: DATABASE_URL is not set; {hint}");
            None
        }
    }
}

pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("no randomness");
    hex::encode(buf)
}

pub(crate) use crate::helpers::ident;

pub(crate) async fn connect(config: &Config) -> Client {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("could not connect to the test PostgreSQL (DATABASE_URL): {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Runs `test` with a client of a new database that has the stand-in, then drops the database,
/// whether the test passed or not (`drop database … with (force)`: PostgreSQL 13 or later). Does
/// nothing (but say why) without `DATABASE_URL`.
async fn with_database<F, Fut>(test: F)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    with_database_having(STAND_IN.to_owned(), test).await;
}

/// [`with_database`] with another stand-in, run before the test.
pub(crate) async fn with_database_having<F, Fut>(stand_in: String, test: F)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(url) = database_url() else {
        return;
    };
    let admin_config = Config::from_str(&url)
        .unwrap_or_else(|e| panic!("DATABASE_URL is not a PostgreSQL connection string: {e}"));
    let admin = connect(&admin_config).await;
    let name = format!("rowbranch_sql_{}", random_hex(8));
    admin
        .batch_execute(&format!("create database {}", ident(&name)))
        .await
        .unwrap_or_else(|e| panic!("could not create the test database {name}: {e}"));

    let mut config = admin_config.clone();
    config.dbname(&name);
    // The test runs as a task of its own, so that a panic comes back here as an error, and its
    // client (its connection) is gone by the time the database is dropped.
    let outcome = tokio::spawn(async move {
        let client = connect(&config).await;
        client
            .batch_execute(&stand_in)
            .await
            .unwrap_or_else(|e| panic!("could not create the stand-in: {e}"));
        test(client).await;
    })
    .await;

    let dropped = admin
        .batch_execute(&format!("drop database {} with (force)", ident(&name)))
        .await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
    dropped.unwrap_or_else(|e| panic!("could not drop the test database {name}: {e}"));
}

pub(crate) fn context(schema: &str, table: &str, url: &str, secret: Option<&str>) -> SetupContext {
    SetupContext {
        schema: schema.to_owned(),
        table: table.to_owned(),
        url: url.to_owned(),
        webhook_secret: secret.map(str::to_owned),
        ..SetupContext::example()
    }
}

fn render_sql(ctx: &SetupContext) -> String {
    render("supabase.sql", ctx).unwrap_or_else(|e| panic!("supabase.sql does not render: {e}"))
}

/// Creates `schema.table` as the tests' stand-in for a feedback table.
pub(crate) async fn create_table(client: &Client, schema: &str, table: &str) {
    let sql = format!(
        "create schema if not exists {schema};
         create table {schema}.{table} (
             id bigint primary key,
             message text,
             created_at timestamptz not null default now()
         );",
        schema = ident(schema),
        table = ident(table),
    );
    client
        .batch_execute(&sql)
        .await
        .unwrap_or_else(|e| panic!("could not create {schema}.{table}: {e}"));
}

pub(crate) async fn insert_row(client: &Client, schema: &str, table: &str, id: i64, message: &str) {
    let sql = format!(
        "insert into {}.{} (id, message) values ($1, $2)",
        ident(schema),
        ident(table)
    );
    client
        .execute(&sql, &[&id, &message])
        .await
        .unwrap_or_else(|e| panic!("the insert into {schema}.{table} failed: {e}"));
}

async fn calls(client: &Client) -> Vec<Call> {
    client
        .query(
            "select args, url, method, headers, params, timeout_ms, payload
             from supabase_functions.calls order by n",
            &[],
        )
        .await
        .expect("could not read the recorded calls")
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

/// How many triggers named `rowbranch_webhook` `schema.table` has.
pub(crate) async fn rowbranch_triggers(client: &Client, schema: &str, table: &str) -> i64 {
    client
        .query_one(
            "select count(*) from pg_trigger t
             join pg_class c on c.oid = t.tgrelid
             join pg_namespace n on n.oid = c.relnamespace
             where t.tgname = 'rowbranch_webhook' and n.nspname = $1 and c.relname = $2",
            &[&schema, &table],
        )
        .await
        .expect("could not look the trigger up")
        .get(0)
}

pub(crate) async fn table_exists(client: &Client, schema: &str, table: &str) -> bool {
    client
        .query_one(
            "select to_regclass($1) is not null",
            &[&format!("{}.{}", ident(schema), ident(table))],
        )
        .await
        .expect("could not look the table up")
        .get(0)
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
    with_database(|client| async move {
        let (schema, table) = ("app", "feedbacks");
        create_table(&client, schema, table).await;
        let secret = random_secret();
        let url = "https://hooks.example.com";
        let sql = render_sql(&context(schema, table, url, Some(&secret)));

        client
            .batch_execute(&sql)
            .await
            .expect("supabase.sql failed");
        client
            .batch_execute(&sql)
            .await
            .expect("supabase.sql failed when run a second time");
        assert_eq!(rowbranch_triggers(&client, schema, table).await, 1);
        assert!(
            calls(&client).await.is_empty(),
            "nothing is sent before an insert"
        );

        insert_row(&client, schema, table, 42, "Add dark mode").await;

        let payload = expect_one_call(&calls(&client).await, url, &secret);
        assert_eq!(payload["type"], "INSERT");
        assert_eq!(payload["schema"], schema);
        assert_eq!(payload["table"], table);
        assert_eq!(payload["record"]["id"], 42);
        assert_eq!(payload["record"]["message"], "Add dark mode");
        assert!(payload["record"]["created_at"].is_string(), "{payload}");
        assert_eq!(payload["old_record"], Value::Null);

        insert_row(&client, schema, table, 43, "Export as CSV").await;
        let all = calls(&client).await;
        assert_eq!(all.len(), 2, "each insert once: {all:#?}");
        assert_eq!(all[1].payload["record"]["id"], 43);
    })
    .await;
}

#[tokio::test]
async fn schema_and_table_names_that_need_quoting_work_as_spelled() {
    with_database(|client| async move {
        create_table(&client, "app", "sentinel").await;
        let secret = random_secret();
        let url = "https://hooks.example.com";
        let names = [
            ("my-app", "Feedback Items"),
            ("We\"ird", "x\"; drop table app.sentinel; -- select 1 \"y"),
            ("public", "Feedbacks"),
        ];
        for (n, (schema, table)) in names.into_iter().enumerate() {
            create_table(&client, schema, table).await;
            let sql = render_sql(&context(schema, table, url, Some(&secret)));
            client
                .batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("supabase.sql failed for {schema:?}.{table:?}: {e}"));
            assert_eq!(
                rowbranch_triggers(&client, schema, table).await,
                1,
                "{schema:?}.{table:?}"
            );
            insert_row(&client, schema, table, 7, "Hello").await;
            let calls = calls(&client).await;
            assert_eq!(calls.len(), n + 1, "{calls:#?}");
            let payload = &calls[n].payload;
            assert_eq!(payload["schema"], schema);
            assert_eq!(payload["table"], table);
            assert_eq!(payload["record"]["id"], 7);
        }
        assert!(table_exists(&client, "app", "sentinel").await);
        // The unquoted spelling is another table, which has no trigger.
        assert_eq!(rowbranch_triggers(&client, "public", "feedbacks").await, 0);
    })
    .await;
}

#[tokio::test]
async fn a_quote_or_backslash_in_the_url_or_secret_stays_inside_its_literal() {
    with_database(|client| async move {
        let (schema, table) = ("public", "feedbacks");
        create_table(&client, schema, table).await;
        create_table(&client, "app", "sentinel").await;
        let secret = format!(
            "{}'); drop table app.sentinel; --\\' \"quoted\" \\\"}} é {}",
            random_secret(),
            random_secret()
        );
        let url = "https://hooks.example.com/o'neil\\'); drop table app.sentinel; --";
        let sql = render_sql(&context(schema, table, url, Some(&secret)));

        // E'' literals read the same whichever way standard_conforming_strings is set.
        client
            .batch_execute("set standard_conforming_strings = off")
            .await
            .expect("could not turn standard_conforming_strings off");
        client
            .batch_execute(&sql)
            .await
            .expect("supabase.sql failed with standard_conforming_strings off");
        client
            .batch_execute("set standard_conforming_strings = on")
            .await
            .expect("could not turn standard_conforming_strings on");
        client
            .batch_execute(&sql)
            .await
            .expect("supabase.sql failed with standard_conforming_strings on");

        insert_row(&client, schema, table, 1, "Hi").await;
        expect_one_call(&calls(&client).await, url, &secret);
        assert!(table_exists(&client, "app", "sentinel").await);
    })
    .await;
}

#[tokio::test]
async fn without_a_secret_the_placeholder_is_refused_until_replaced() {
    with_database(|client| async move {
        let (schema, table) = ("public", "feedbacks");
        create_table(&client, schema, table).await;
        let url = "https://hooks.example.com";
        let sql = render_sql(&context(schema, table, url, None));
        assert!(sql.contains(PLACEHOLDER), "{sql}");

        let error = client
            .batch_execute(&sql)
            .await
            .expect_err("a trigger sending the placeholder was installed");
        let message = error
            .as_db_error()
            .map(|e| e.message().to_owned())
            .unwrap_or_else(|| error.to_string());
        assert!(message.contains("placeholder"), "{message}");
        // A script sent in one piece stops at the error, inside its transaction.
        client.batch_execute("rollback").await.expect("rollback");
        assert_eq!(rowbranch_triggers(&client, schema, table).await, 0);

        // What the user does: put the secret in its place, everywhere it appears.
        let secret = random_secret();
        client
            .batch_execute(&sql.replace(PLACEHOLDER, &secret))
            .await
            .expect("supabase.sql failed once the placeholder was replaced");
        assert_eq!(rowbranch_triggers(&client, schema, table).await, 1);
        insert_row(&client, schema, table, 5, "Hi").await;
        expect_one_call(&calls(&client).await, url, &secret);
    })
    .await;
}

#[tokio::test]
async fn a_delivery_the_trigger_makes_is_dispatched_by_rowbranch() {
    let app = spawn_app(Options::default()).await;
    let (url, secret) = (app.url.clone(), app.secret.clone());
    let sent = std::sync::Arc::new(std::sync::Mutex::new(None));
    let record = sent.clone();
    with_database(|client| async move {
        create_table(&client, "public", "feedbacks").await;
        let sql = render_sql(&context("public", "feedbacks", &url, Some(&secret)));
        client
            .batch_execute(&sql)
            .await
            .expect("supabase.sql failed");
        insert_row(&client, "public", "feedbacks", 7, "Add dark mode").await;
        let calls = calls(&client).await;
        let payload = expect_one_call(&calls, &url, &secret);
        *record.lock().unwrap() = Some((calls[0].headers.clone(), payload));
    })
    .await;
    let Some((headers, payload)) = sent.lock().unwrap().take() else {
        // Skipped: no DATABASE_URL.
        app.shutdown().await;
        return;
    };

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
