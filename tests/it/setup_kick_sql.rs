//! `templates/supabase-kick.sql` run in a real PostgreSQL beside the real queue's trigger
//! (`supabase-queue.sql` on pgmq): how often it asks GitHub to run the drain workflow, what the
//! request holds, what it never holds up, and where the token is not.
//!
//! Needs `DATABASE_URL` and pgmq's template (`eval "$(scripts/test-postgres.sh)"`), and runs
//! each test in a database of its own. Vault and pg_net are the stand-ins of
//! `support::supabase`: `net.http_post` queues each request in `net.http_request_queue` in the
//! caller's transaction, as the real one does, and the tests read that table as pg_net's worker
//! would.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use rowbranch::cli::HostArg;
use rowbranch::cmd::init::actions::ActionsSetup;
use rowbranch::cmd::init::setup::{render, SetupContext};
use serde_json::{json, Value};
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::support::db::{
    admin_config, connect, db_message, ident, scalar, Install, Template, TestDb,
};
use crate::support::or_skip;
use crate::support::random::random_hex;
use crate::support::setup::{
    actions_example, apply, create_table, insert_row, queue_context, refusal, try_insert,
};
use crate::support::supabase::STAND_IN;

const URL: &str =
    "https://api.github.com/repos/acme/app/actions/workflows/rowbranch-drain.yml/dispatches";

/// The kick for `schema.table` and the queue `rowbranch`, on the branch `trunk`.
fn context(schema: &str, table: &str) -> SetupContext {
    SetupContext {
        host: HostArg::Actions,
        actions: Some(ActionsSetup {
            kick: true,
            default_branch: "trunk".into(),
            ..actions_example()
        }),
        ..queue_context(schema, table, "rowbranch", "rowbranch_dead")
    }
}

fn kick_sql(ctx: &SetupContext) -> String {
    render("supabase-kick.sql", ctx)
        .unwrap_or_else(|e| panic!("supabase-kick.sql does not render: {e:#}"))
}

/// A fine-grained token's shape, made up for the test.
fn token() -> String {
    format!("github_pat_{}", random_hex(20))
}

/// A database with pgmq, the stand-ins, `public.feedbacks` with the queue's trigger and the
/// kick's, and `token` in Vault (when given).
async fn kicking(token: Option<&str>) -> Option<TestDb> {
    let db = TestDb::create(Template::Pgmq(Install::Sql)).await?;
    db.execute(STAND_IN).await;
    create_table(&db, "public", "feedbacks").await;
    let ctx = context("public", "feedbacks");
    apply(&db, &ctx).await;
    if let Some(token) = token {
        store_token(&db, token).await;
    }
    db.batch_execute(&kick_sql(&ctx))
        .await
        .unwrap_or_else(|e| panic!("supabase-kick.sql failed: {}", db_message(&e)));
    Some(db)
}

async fn store_token(db: &Client, token: &str) {
    db.execute(
        "select vault.create_secret($1, 'rowbranch_kick_token', 'rowbranch: starts the drain')",
        &[&token],
    )
    .await
    .expect("could not store the token in Vault");
}

/// One request of pg_net's queue.
#[derive(Debug)]
struct Request {
    method: String,
    url: String,
    headers: Value,
    body: Value,
    timeout_ms: i32,
}

async fn requests(db: &Client) -> Vec<Request> {
    let rows = db
        .query(
            "select method, url, headers, convert_from(body, 'UTF8'), timeout_milliseconds
             from net.http_request_queue order by id",
            &[],
        )
        .await
        .expect("could not read pg_net's queue");
    rows.iter()
        .map(|row| Request {
            method: row.get(0),
            url: row.get(1),
            headers: row.get(2),
            body: serde_json::from_str(row.get(3)).expect("a JSON body"),
            timeout_ms: row.get(4),
        })
        .collect()
}

async fn kicks(db: &Client) -> usize {
    requests(db).await.len()
}

/// Inserts rows `ids` into `public.feedbacks` in one statement.
async fn insert_many(db: &Client, ids: std::ops::RangeInclusive<i64>) {
    db.execute(
        "insert into public.feedbacks (id, message)
         select g, 'row ' || g from generate_series($1::bigint, $2::bigint) as g",
        &[ids.start(), ids.end()],
    )
    .await
    .unwrap_or_else(|e| panic!("the insert failed: {}", db_message(&e)));
}

/// Another session on the test's database.
async fn session(db: &TestDb) -> Client {
    connect(&admin_config(&db.url)).await
}

/// A session that keeps the notices (warnings) the server sends it.
async fn noticing_session(db: &TestDb) -> (Client, Arc<Mutex<Vec<String>>>) {
    let (client, mut connection) = admin_config(&db.url)
        .connect(NoTls)
        .await
        .expect("could not connect to the test database");
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&notices);
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notice(notice) = message {
                sink.lock().unwrap().push(notice.message().to_owned());
            }
        }
    });
    (client, notices)
}

/// The kicks sent so far, once row `id` of `public.feedbacks` is inserted with `message`.
async fn kicks_after_inserting(db: &TestDb, id: i64, message: &str) -> usize {
    insert_row(db, "public", "feedbacks", id, message).await;
    kicks(db).await
}

/// Takes away pg_net's `net.http_post`, as a project that disables the extension does.
async fn remove_pg_net(db: &TestDb) {
    db.execute("drop function net.http_post(text, jsonb, jsonb, jsonb, integer)")
        .await;
}

/// Some notice the session was sent says `says`.
#[track_caller]
fn assert_noticed(notices: &Mutex<Vec<String>>, says: &str) {
    let notices = notices.lock().unwrap();
    assert!(
        notices.iter().any(|n| n.contains(says)),
        "no notice says {says:?}: {notices:?}"
    );
}

/// Ends the kick's 30 seconds as if they had passed.
async fn thirty_seconds_pass(db: &Client) {
    db.batch_execute("update rowbranch.kicks set kicked_at = kicked_at - interval '31 seconds'")
        .await
        .expect("could not move the last kick back");
}

#[tokio::test]
async fn a_bulk_insert_of_50_rows_kicks_once_and_queues_every_row() {
    let token = token();
    let db = or_skip!(kicking(Some(&token)).await);
    insert_many(&db, 1..=50).await;

    let queued: i64 = scalar(&db, "select count(*) from pgmq.q_rowbranch").await;
    assert_eq!(queued, 50, "every row is in the queue");
    let requests = requests(&db).await;
    assert_eq!(
        requests.len(),
        1,
        "one kick for the statement: {requests:#?}"
    );
    let kick = &requests[0];
    assert_eq!(kick.method, "POST");
    assert_eq!(kick.url, URL);
    assert_eq!(kick.body, json!({"ref": "trunk"}));
    assert_eq!(kick.timeout_ms, 5000);
    assert_eq!(
        kick.headers,
        json!({
            "Content-Type": "application/json",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "rowbranch-kick",
            "Authorization": format!("Bearer {token}"),
        })
    );
}

#[tokio::test]
async fn two_sessions_inserting_at_once_kick_once_and_neither_waits() {
    let db = or_skip!(kicking(Some(&token())).await);
    let (first, second) = (session(&db).await, session(&db).await);

    // Both transactions open at once: the first kicks and holds the lock until it commits; the
    // second finds the lock taken and goes on without waiting.
    first.batch_execute("begin").await.unwrap();
    second.batch_execute("begin").await.unwrap();
    insert_row(&first, "public", "feedbacks", 1, "first").await;
    tokio::time::timeout(
        Duration::from_secs(5),
        insert_row(&second, "public", "feedbacks", 2, "second"),
    )
    .await
    .expect("the second insert waited for the first transaction");
    second.batch_execute("commit").await.unwrap();
    first.batch_execute("commit").await.unwrap();
    assert_eq!(kicks(&db).await, 1);

    // And two sessions racing, ten single-row inserts each.
    let race = |client: Client, from: i64| async move {
        for id in from..from + 10 {
            insert_row(&client, "public", "feedbacks", id, "racing").await;
        }
    };
    tokio::time::timeout(
        Duration::from_secs(15),
        futures_util::future::join(race(first, 100), race(second, 200)),
    )
    .await
    .expect("the racing inserts finished");
    let saved: i64 = scalar(&db, "select count(*) from public.feedbacks").await;
    assert_eq!(saved, 22);
    assert_eq!(kicks(&db).await, 1, "all within the same 30 seconds");
}

#[tokio::test]
async fn no_second_kick_within_30_seconds_and_one_after() {
    let db = or_skip!(kicking(Some(&token())).await);
    insert_row(&db, "public", "feedbacks", 1, "one").await;
    insert_row(&db, "public", "feedbacks", 2, "two").await;
    insert_many(&db, 3..=9).await;
    assert_eq!(kicks(&db).await, 1);

    thirty_seconds_pass(&db).await;
    assert_eq!(kicks_after_inserting(&db, 10, "ten").await, 2);
    assert_eq!(kicks_after_inserting(&db, 11, "eleven").await, 2);
}

#[tokio::test]
async fn a_rolled_back_insert_sends_nothing_and_holds_back_no_later_kick() {
    let db = or_skip!(kicking(Some(&token())).await);
    db.batch_execute("begin").await.unwrap();
    insert_many(&db, 1..=5).await;
    assert_eq!(kicks(&db).await, 1, "queued in the inserting transaction");
    db.batch_execute("rollback").await.unwrap();
    assert_eq!(kicks(&db).await, 0, "a rollback sends nothing");
    let kept: i64 = scalar(&db, "select count(*) from rowbranch.kicks").await;
    assert_eq!(kept, 0, "nor keeps the kick's time");

    assert_eq!(kicks_after_inserting(&db, 6, "committed").await, 1);
}

#[tokio::test]
async fn a_statement_that_inserts_no_row_kicks_nothing() {
    let db = or_skip!(kicking(Some(&token())).await);
    db.execute("insert into public.feedbacks (id, message) select 1, 'x' where false")
        .await;
    assert_eq!(kicks(&db).await, 0);
}

#[tokio::test]
async fn without_the_token_in_vault_an_insert_warns_and_succeeds() {
    let db = or_skip!(kicking(None).await);
    let (client, notices) = noticing_session(&db).await;
    try_insert(&client, "public", "feedbacks", 1, "saved all the same")
        .await
        .expect("the insert succeeds without the token");
    let saved: i64 = scalar(&db, "select count(*) from public.feedbacks").await;
    assert_eq!(saved, 1);
    let queued: i64 = scalar(&db, "select count(*) from pgmq.q_rowbranch").await;
    assert_eq!(
        queued, 1,
        "the row is in the queue: the schedule will drain it"
    );
    assert_eq!(kicks(&db).await, 0);
    assert_noticed(&notices, "rowbranch_kick_token");

    // Once the token is there, the next insert kicks.
    store_token(&db, &token()).await;
    assert_eq!(kicks_after_inserting(&db, 2, "kicks").await, 1);
}

#[tokio::test]
async fn without_pg_net_an_insert_still_succeeds_and_the_file_says_what_to_enable() {
    let db = or_skip!(kicking(Some(&token())).await);
    // pg_net removed after the kick was installed: the kick warns, the row is inserted.
    remove_pg_net(&db).await;
    let (client, notices) = noticing_session(&db).await;
    try_insert(&client, "public", "feedbacks", 1, "saved")
        .await
        .expect("the insert succeeds without pg_net");
    assert_noticed(&notices, "was not queued");
    let kept: i64 = scalar(&db, "select count(*) from rowbranch.kicks").await;
    assert_eq!(kept, 0, "a kick that was not queued leaves no time behind");

    let refused = refusal(&db, &kick_sql(&context("public", "feedbacks"))).await;
    assert!(
        refused.contains("Integrations → Database Webhooks → Enable"),
        "{refused}"
    );
}

#[tokio::test]
async fn the_token_is_in_no_function_body_trigger_or_file() {
    let token = token();
    let db = or_skip!(kicking(Some(&token)).await);
    let sql = kick_sql(&context("public", "feedbacks"));
    assert!(!sql.contains(&token));
    for line in sql.lines().filter(|l| l.contains("github_pat_")) {
        assert!(
            line.trim_start().starts_with("--"),
            "only the header's example names a token: {line}"
        );
    }

    let definitions: String = scalar(
        &db,
        "select pg_get_functiondef('rowbranch.kick()'::regprocedure)
             || (select string_agg(pg_get_triggerdef(oid), ' ') from pg_trigger
                 where tgname = 'rowbranch_kick_rowbranch')",
    )
    .await;
    assert!(definitions.contains(URL), "{definitions}");
    assert!(definitions.contains("FOR EACH STATEMENT"), "{definitions}");
    assert!(!definitions.contains(&token), "{definitions}");
    assert!(!definitions.contains("github_pat_"), "{definitions}");

    // Inserting roles read nothing of Vault, and cannot call the function themselves.
    let role = db.role("inserter");
    db.batch_execute(&format!(
        "create role {r} nologin;
         grant usage on schema public to {r};
         grant insert on public.feedbacks to {r};
         set role {r};",
        r = ident(&role)
    ))
    .await
    .unwrap();
    insert_row(&db, "public", "feedbacks", 1, "as another role").await;
    let kicks_table = db.query("select * from rowbranch.kicks", &[]).await;
    assert!(kicks_table.is_err(), "the kicks' table is rowbranch's own");
    db.batch_execute("reset role").await.unwrap();
    assert_eq!(kicks(&db).await, 1, "a row inserted by any role kicks");
}

#[tokio::test]
async fn running_it_again_keeps_one_trigger_and_the_last_kick() {
    let db = or_skip!(kicking(Some(&token())).await);
    insert_row(&db, "public", "feedbacks", 1, "one").await;
    db.batch_execute(&kick_sql(&context("public", "feedbacks")))
        .await
        .expect("the second run");
    let triggers: i64 = scalar(
        &db,
        "select count(*) from pg_trigger where tgname = 'rowbranch_kick_rowbranch'",
    )
    .await;
    assert_eq!(triggers, 1);
    assert_eq!(
        kicks_after_inserting(&db, 2, "two").await,
        1,
        "still within the 30 seconds"
    );
}

#[tokio::test]
async fn names_that_need_quoting_work_as_spelled() {
    let db = or_skip!(TestDb::create(Template::Pgmq(Install::Sql)).await);
    db.execute(STAND_IN).await;
    let (schema, table) = ("We\"ird", "x'; drop table public.t; -- \"y");
    create_table(&db, schema, table).await;
    let ctx = context(schema, table);
    apply(&db, &ctx).await;
    store_token(&db, &token()).await;
    let sql = kick_sql(&ctx);
    for conforming in ["off", "on"] {
        db.batch_execute(&format!("set standard_conforming_strings = {conforming}"))
            .await
            .unwrap();
        db.batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{conforming}: {}", db_message(&e)));
    }
    insert_row(&db, schema, table, 1, "Hello").await;
    assert_eq!(kicks(&db).await, 1);
}

#[tokio::test]
async fn a_repeatable_read_transaction_that_cannot_see_the_last_kick_still_inserts() {
    let db = or_skip!(kicking(Some(&token())).await);
    let (late, notices) = noticing_session(&db).await;
    // Its snapshot is taken before the kick below commits, so it reads no last kick, and its
    // own would collide with the one it cannot see.
    late.batch_execute("begin isolation level repeatable read; select 1")
        .await
        .unwrap();
    insert_row(&db, "public", "feedbacks", 1, "kicks").await;
    try_insert(&late, "public", "feedbacks", 2, "saved all the same")
        .await
        .expect("the insert succeeds");
    late.batch_execute("commit").await.unwrap();
    let saved: i64 = scalar(&db, "select count(*) from public.feedbacks").await;
    assert_eq!(saved, 2);
    assert_eq!(kicks(&db).await, 1);
    assert_noticed(&notices, "was not queued");
}
