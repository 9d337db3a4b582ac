//! `templates/supabase-vault.sql` run in a real PostgreSQL: the secret it keeps in Vault, the
//! signed request it queues, and that rowbranch accepts exactly the bytes pg_net would send.
//!
//! Needs `DATABASE_URL`, as `setup_sql` does, and runs each test in a database of its own.
//! Supabase's `vault` and `net` schemas are replaced by stand-ins shaped as supabase/vault 0.3
//! and supabase/pg_net 0.20.5 define them: `net.http_post` checks the content type and queues
//! `convert_to(body::text, 'UTF8')` as the real one does
//! (https://github.com/supabase/pg_net/blob/v0.20.5/sql/pg_net.sql), and the test reads the
//! queue the way pg_net's worker does (headers as `key: value` from `jsonb_each_text`, the body's
//! bytes as they are) and posts that request to a real rowbranch. pgcrypto is the real one, in
//! a schema of its own as on Supabase.

use std::time::{SystemTime, UNIX_EPOCH};

use rowbranch::cmd::init::setup::render;
use serde_json::Value;
use tokio_postgres::Client;

use crate::support::app::{spawn_app, Options};
use crate::support::db::{ident, rows, Template, TestDb};
use crate::support::or_skip;
use crate::support::random::{random_hex, random_whsec};
use crate::support::setup::{
    apply_both_ways, create_table, insert_row, refusal, table_exists, webhook_context as context,
    webhook_triggers as rowbranch_triggers,
};
use crate::support::sign::standard_webhooks_signature;
use crate::support::supabase::STAND_IN;

const PLACEHOLDER: &str = "REPLACE_WITH_ROWBRANCH_WEBHOOK_SECRET";

/// A database of the test's own with `stand_in` in it, and a table `public.feedbacks`.
async fn with_feedbacks(stand_in: &str) -> Option<TestDb> {
    let db = TestDb::create(Template::Plain).await?;
    db.execute(stand_in).await;
    create_table(&db, "public", "feedbacks").await;
    Some(db)
}

/// Only the Vault part of the stand-in: a project without pg_net.
fn stand_in_without_pg_net() -> String {
    let end = STAND_IN.find("-- pg_net's queue").unwrap();
    STAND_IN[..end].to_owned()
}

/// One request of pg_net's queue, read as its worker reads it.
#[derive(Debug)]
struct Queued {
    url: String,
    timeout_ms: i32,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Queued {
    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }
}

async fn queued(db: &Client) -> Vec<Queued> {
    let sql = "select q.url, q.timeout_milliseconds,
                      array(select key || ': ' || value from jsonb_each_text(q.headers)),
                      q.body
               from net.http_request_queue q order by q.id";
    let mut requests = Vec::new();
    for row in rows(db, sql).await {
        let headers: Vec<String> = row.get(2);
        let headers = headers.iter().map(|h| {
            let (name, value) = h.split_once(": ").expect("key: value");
            (name.to_owned(), value.to_owned())
        });
        requests.push(Queued {
            url: row.get(0),
            timeout_ms: row.get(1),
            headers: headers.collect(),
            body: row.get(3),
        });
    }
    requests
}

/// supabase-vault.sql for `public.feedbacks`.
fn feedbacks_sql(url: &str, secret: Option<&str>) -> String {
    render_sql("public", "feedbacks", url, secret)
}

fn render_sql(schema: &str, table: &str, url: &str, secret: Option<&str>) -> String {
    render("supabase-vault.sql", &context(schema, table, url, secret))
        .unwrap_or_else(|e| panic!("supabase-vault.sql does not render: {e}"))
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Checks what the trigger queued against what rowbranch must be able to verify.
#[track_caller]
fn expect_signed(request: &Queued, url: &str, secret: &str) {
    assert_eq!(request.url, format!("{url}/webhook"));
    assert_eq!(request.timeout_ms, 5000);
    assert_eq!(request.header("Content-Type"), "application/json");
    let id = request.header("webhook-id");
    assert!(id.starts_with("msg_") && !id.contains('.'), "{id}");
    let sent: i64 = request.header("webhook-timestamp").parse().unwrap();
    assert!(
        (now_secs() - sent).abs() < 30,
        "a current timestamp: {sent}"
    );
    // The signature is over the queued bytes, with the secret's key.
    let expected = standard_webhooks_signature(secret, id, sent, &request.body);
    assert_eq!(request.header("webhook-signature"), expected);
    // And the secret itself travels nowhere.
    let key = secret.trim_start_matches("whsec_");
    for (name, value) in &request.headers {
        assert!(
            !value.contains(key),
            "the secret's key is in the {name} header"
        );
    }
    assert!(!String::from_utf8_lossy(&request.body).contains(key));
}

#[tokio::test]
async fn the_vault_trigger_signs_each_insert_and_rowbranch_accepts_exactly_those_bytes() {
    let secret = random_whsec();
    let app = spawn_app(Options::default().secret_env(&secret)).await;
    let url = app.url.clone();
    let text = "Add \"dark\" mode\\ to <b>everything</b>\nété 日本語 🎉 & more";
    let role = format!("rowbranch_inserter_{}", random_hex(4));
    let Some(db) = with_feedbacks(STAND_IN).await else {
        app.shutdown().await;
        return;
    };
    let sql = feedbacks_sql(&url, Some(&secret));
    db.batch_execute(&sql)
        .await
        .expect("supabase-vault.sql failed");
    db.batch_execute(&sql)
        .await
        .expect("supabase-vault.sql failed when run a second time");
    assert_eq!(rowbranch_triggers(&db, "public", "feedbacks").await, 1);

    // A role that may insert and may read nothing of Vault: its row is signed all the same.
    db.batch_execute(&format!(
        "create role {r} nologin;
             grant usage on schema public to {r};
             grant insert on public.feedbacks to {r};",
        r = ident(&role)
    ))
    .await
    .expect("could not create the inserting role");
    db.batch_execute(&format!("set role {}", ident(&role)))
        .await
        .unwrap();
    let denied = db
        .query("select decrypted_secret from vault.decrypted_secrets", &[])
        .await;
    assert!(denied.is_err(), "the inserting role read Vault");
    let called = db.query("select rowbranch.signed_webhook()", &[]).await;
    assert!(called.is_err(), "the trigger function was called directly");
    insert_row(&db, "public", "feedbacks", 7, text).await;
    db.batch_execute("reset role").await.unwrap();
    db.batch_execute(&format!(
        "drop owned by {r}; drop role {r};",
        r = ident(&role)
    ))
    .await
    .expect("could not drop the inserting role");

    let requests = queued(&db).await;
    assert_eq!(requests.len(), 1, "one INSERT, one request: {requests:#?}");
    expect_signed(&requests[0], &url, &secret);
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["type"], "INSERT");
    assert_eq!(body["schema"], "public");
    assert_eq!(body["table"], "feedbacks");
    assert_eq!(body["record"]["id"], 7);
    assert_eq!(body["record"]["message"], text);
    assert_eq!(body["old_record"], Value::Null);
    let request = requests.into_iter().next().expect("one request");

    // Sent as pg_net sends it: those headers, those bytes.
    let headers: Vec<(&str, &str)> = request
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let reply = app.post_raw(request.body.clone(), &headers).await;
    reply.expect(200, "dispatched");
    assert!(
        reply.body["branch"]
            .as_str()
            .is_some_and(|b| b.starts_with("feedback/7-add-dark-mode-to-b-everything")),
        "{}",
        reply.text
    );
    app.expect_dispatches(1).await;

    // The same request again, within the five minutes: the row is handled, nothing more.
    let again = app.post_raw(request.body.clone(), &headers).await;
    again.expect_duplicate("branch_exists");
    // One byte of the body changed: the signature no longer fits.
    let mut forged = request.body.clone();
    let at = forged.iter().position(|b| *b == b'7').unwrap();
    forged[at] = b'8';
    app.post_raw(forged, &headers).await.expect(401, "error");
    app.expect_dispatches(1).await;
    app.shutdown().await;
}

#[tokio::test]
async fn running_it_again_updates_the_one_secret_and_the_database_keeps_no_secret_in_the_clear() {
    let db = or_skip!(with_feedbacks(STAND_IN).await);
    let url = "https://hooks.example.com";
    let (first, second) = (random_whsec(), random_whsec());
    let sql = feedbacks_sql(url, Some(&first));
    assert_eq!(
        sql.matches(&first).count(),
        2,
        "only in the two Vault statements"
    );
    db.batch_execute(&sql).await.expect("the first run");
    db.batch_execute(&feedbacks_sql(url, Some(&second)))
        .await
        .expect("the second run");

    let stored = db
        .query(
            "select decrypted_secret from vault.decrypted_secrets
             where name = 'rowbranch_webhook_secret'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(stored.len(), 1, "one secret of that name");
    assert_eq!(stored[0].get::<_, String>(0), second);

    // Neither secret is in the function, the trigger or the catalogs' text.
    let definitions: String = db
        .query_one(
            "select pg_get_functiondef('rowbranch.signed_webhook()'::regprocedure)
                 || (select string_agg(pg_get_triggerdef(oid), ' ')
                     from pg_trigger where tgname = 'rowbranch_webhook')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        definitions.contains(&format!("{url}/webhook")),
        "{definitions}"
    );
    for secret in [&first, &second] {
        assert!(!definitions.contains(secret.as_str()), "{definitions}");
        assert!(!definitions.contains(secret.trim_start_matches("whsec_")));
    }

    insert_row(&db, "public", "feedbacks", 1, "Hi").await;
    let requests = queued(&db).await;
    assert_eq!(requests.len(), 1);
    expect_signed(&requests[0], url, &second);
}

#[tokio::test]
async fn a_placeholder_or_a_secret_that_is_not_whsec_is_refused_and_nothing_is_installed() {
    let db = or_skip!(with_feedbacks(STAND_IN).await);
    let url = "https://hooks.example.com";
    let without = feedbacks_sql(url, None);
    assert!(without.contains(PLACEHOLDER));
    let refused = refusal(&db, &without).await;
    assert!(refused.contains("placeholder"), "{refused}");

    let plain = feedbacks_sql(url, Some(&"x".repeat(40)));
    let refused = refusal(&db, &plain).await;
    assert!(refused.contains("whsec_"), "{refused}");

    let not_base64 = feedbacks_sql(url, Some("whsec_not base64 at all!"));
    let refused = refusal(&db, &not_base64).await;
    assert!(refused.contains("not base64"), "{refused}");

    assert_eq!(rowbranch_triggers(&db, "public", "feedbacks").await, 0);
    let secrets: i64 = db
        .query_one("select count(*) from vault.secrets", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(secrets, 0, "the transaction left nothing behind");

    // What the user does: the secret in the placeholder's place.
    let secret = random_whsec();
    db.batch_execute(&without.replace(PLACEHOLDER, &secret))
        .await
        .expect("supabase-vault.sql failed once the placeholder was replaced");
    insert_row(&db, "public", "feedbacks", 2, "Hi").await;
    expect_signed(&queued(&db).await[0], url, &secret);
}

#[tokio::test]
async fn without_pg_net_the_script_says_to_turn_database_webhooks_on() {
    let db = or_skip!(with_feedbacks(&stand_in_without_pg_net()).await);
    let sql = feedbacks_sql("https://h.example", Some(&random_whsec()));
    let refused = refusal(&db, &sql).await;
    assert!(
        refused.contains("Integrations → Database Webhooks → Enable"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_secret_gone_from_vault_never_fails_an_insert() {
    let db = or_skip!(with_feedbacks(STAND_IN).await);
    let sql = feedbacks_sql("https://h.example", Some(&random_whsec()));
    db.batch_execute(&sql)
        .await
        .expect("supabase-vault.sql failed");
    db.batch_execute("delete from vault.secrets where name = 'rowbranch_webhook_secret'")
        .await
        .unwrap();
    insert_row(&db, "public", "feedbacks", 3, "Still saved").await;
    assert!(queued(&db).await.is_empty(), "nothing unsigned is queued");
    let saved: i64 = db
        .query_one("select count(*) from public.feedbacks", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(saved, 1);
}

#[tokio::test]
async fn names_and_urls_that_need_quoting_work_as_spelled() {
    let db = or_skip!(with_feedbacks(STAND_IN).await);
    create_table(&db, "app", "sentinel").await;
    let secret = random_whsec();
    let url = "https://hooks.example.com/o'neil\\'); drop table app.sentinel; --";
    let (schema, table) = ("We\"ird", "x\"; drop table app.sentinel; -- select 1 \"y");
    create_table(&db, schema, table).await;
    let sql = render_sql(schema, table, url, Some(&secret));
    apply_both_ways(&db, &sql).await;
    assert_eq!(rowbranch_triggers(&db, schema, table).await, 1);
    insert_row(&db, schema, table, 9, "Hello").await;
    let requests = queued(&db).await;
    assert_eq!(requests.len(), 1);
    expect_signed(&requests[0], url, &secret);
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["schema"], schema);
    assert_eq!(body["table"], table);
    assert!(table_exists(&db, "app", "sentinel").await);
}

#[test]
fn no_value_lands_in_a_comment_and_the_secret_only_in_the_vault_statements() {
    let secret = format!("whsec_{}", "MARKsecret".repeat(4));
    let sql = render_sql(
        "MARK-schema",
        "MARK-table",
        "https://MARK.example",
        Some(&secret),
    );
    for line in sql.lines().filter(|l| l.trim_start().starts_with("--")) {
        assert!(!line.contains("MARK"), "a value in a comment: {line:?}");
    }
    let holding: Vec<&str> = sql.lines().filter(|l| l.contains(&secret)).collect();
    assert_eq!(holding.len(), 2, "{holding:?}");
    let function =
        &sql[sql.find("create or replace function").unwrap()..sql.find("$function$;").unwrap()];
    assert!(
        !function.contains("MARK"),
        "the function's body holds no value"
    );
}
