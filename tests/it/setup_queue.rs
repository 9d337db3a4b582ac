//! `templates/supabase-queue.sql` run in a real PostgreSQL with the real pgmq: what it installs,
//! what an INSERT puts into the queue, who may do what, and how it comes out again.
//!
//! pgmq comes from `scripts/test-postgres.sh`, installed twice (the pinned SQL run as plain SQL,
//! and as an extension) into the template databases it exports as `PGMQ_SQL_TEMPLATE` and
//! `PGMQ_EXTENSION_TEMPLATE`. Every test runs once for each, in a database of its own created
//! from that template and dropped after it, with roles named after that database (roles belong
//! to the whole server) and dropped with it. Without a template (or `DATABASE_URL`) a test says
//! why and passes, except under `CI=true`, where it fails.
//!
//! Who may do what is in `privileges`, the quoting in `quoting`, and the check of
//! `src/db/signatures-1.4.4.txt` against this pgmq in `signatures`.

use std::collections::BTreeSet;

use rowbranch::cmd::init::setup::{render, SetupContext};
use serde_json::Value;
use tokio_postgres::Client;

use crate::support::db::{column, db_message, ident, literal, scalar, Install, Template, TestDb};
use crate::support::or_skip;
use crate::support::setup::{
    apply, create_table, insert_row, queue_context as context, queue_sql as render_sql, try_apply,
    try_insert,
};

mod privileges;
mod quoting;
mod signatures;

/// A database of the test's own for each way pgmq is installed (none for one whose template is
/// missing).
async fn each_install() -> Vec<TestDb> {
    let mut databases = Vec::new();
    for install in Install::BOTH {
        databases.extend(TestDb::create(Template::Pgmq(install)).await);
    }
    databases
}

/// [`each_install`], each with `public.feedbacks` queueing to `rowbranch` (supabase-queue.sql
/// applied, dead letters to `rowbranch_dead`).
async fn each_install_queueing() -> Vec<TestDb> {
    let databases = each_install().await;
    for db in &databases {
        create_table(&db.client, "public", "feedbacks").await;
        let ctx = context("public", "feedbacks", "rowbranch", "rowbranch_dead");
        apply(&db.client, &ctx).await;
    }
    databases
}

/// The messages in `queue`, oldest first, read from its table with the 1.4.4 columns.
async fn messages(client: &Client, queue: &str) -> Vec<Value> {
    client
        .query(
            &format!(
                "select message from pgmq.{} order by msg_id",
                ident(&format!("q_{queue}"))
            ),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("could not read the queue {queue}: {}", db_message(&e)))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

async fn count(client: &Client, sql: &str) -> i64 {
    scalar(client, sql).await
}

async fn truth(client: &Client, sql: &str) -> bool {
    scalar(client, sql).await
}

/// The triggers of `schema.table` that call rowbranch.enqueue(): (name, argument, tgtype,
/// tgenabled).
async fn queue_triggers(
    client: &Client,
    schema: &str,
    table: &str,
) -> Vec<(String, String, i16, String)> {
    client
        .query(
            "select t.tgname::text, encode(t.tgargs, 'escape'), t.tgtype, t.tgenabled::text
             from pg_trigger t
             join pg_class c on c.oid = t.tgrelid
             join pg_namespace n on n.oid = c.relnamespace
             where n.nspname = $1 and c.relname = $2
               and t.tgfoid = to_regproc('rowbranch.enqueue')
             order by 1",
            &[&schema, &table],
        )
        .await
        .expect("could not list the triggers")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect()
}

/// Everything the file installs and may change, as one value: equal before and after a second
/// run means the run changed nothing.
async fn state(client: &Client, queue: &str) -> Value {
    let sql = format!(
        "select jsonb_build_object(
            'extensions', (select jsonb_agg(extname::text order by extname) from pg_extension),
            'queues', (select jsonb_agg(to_jsonb(q) order by q.queue_name) from pgmq.list_queues() q),
            'pgmq tables', (
                select jsonb_agg(jsonb_build_array(relname::text, relpersistence::text, relacl::text)
                                 order by relname)
                from pg_class
                where relnamespace = 'pgmq'::regnamespace and relkind in ('r', 'p')),
            'schemas', (
                select jsonb_agg(jsonb_build_array(nspname::text, nspacl::text) order by nspname)
                from pg_namespace where nspname in ('pgmq', 'rowbranch')),
            'functions', (
                select jsonb_agg(jsonb_build_array(
                    proname::text, prosecdef, proconfig, proacl::text,
                    pg_get_userbyid(proowner)::text, md5(prosrc)) order by proname)
                from pg_proc where pronamespace = to_regnamespace('rowbranch')),
            'triggers', (
                select jsonb_agg(jsonb_build_array(
                    tgrelid::regclass::text, tgname::text, tgtype, tgenabled::text,
                    encode(tgargs, 'escape'), tgfoid::regproc::text) order by tgrelid, tgname)
                from pg_trigger where not tgisinternal),
            'messages', (select jsonb_agg(message order by msg_id) from pgmq.{queue_table})
        )",
        queue_table = ident(&format!("q_{queue}"))
    );
    client
        .query_one(&sql, &[])
        .await
        .unwrap_or_else(|e| panic!("could not read the state: {}", db_message(&e)))
        .get(0)
}

/// Checks one message against the webhook body for an INSERT of (id, message) into schema.table.
#[track_caller]
fn expect_insert(message: &Value, schema: &str, table: &str, id: i64, text: &str) {
    let keys: BTreeSet<&str> = message
        .as_object()
        .unwrap_or_else(|| panic!("the message is not an object: {message}"))
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["type", "table", "schema", "record", "old_record"]),
        "{message}"
    );
    assert_eq!(message["type"], "INSERT", "{message}");
    assert_eq!(message["schema"], schema, "{message}");
    assert_eq!(message["table"], table, "{message}");
    assert_eq!(message["old_record"], Value::Null, "{message}");
    let record = message["record"]
        .as_object()
        .unwrap_or_else(|| panic!("the record is not an object: {message}"));
    assert_eq!(
        record.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        BTreeSet::from(["id", "message", "created_at"]),
        "the record holds the row's columns: {message}"
    );
    assert_eq!(record["id"], id, "{message}");
    assert_eq!(record["message"], text, "{message}");
    assert!(record["created_at"].is_string(), "{message}");
}

#[tokio::test]
async fn an_insert_queues_one_message_with_the_webhook_body_and_a_rolled_back_one_none() {
    for db in each_install().await {
        let c = &db.client;
        let (schema, table) = ("my \"app\"", "feed backs");
        create_table(c, schema, table).await;
        let ctx = context(schema, table, "rowbranch", "rowbranch_dead");
        apply(c, &ctx).await;
        assert!(messages(c, "rowbranch").await.is_empty());
        assert!(messages(c, "rowbranch_dead").await.is_empty());

        insert_row(c, schema, table, 42, "Add dark mode").await;
        let queued = messages(c, "rowbranch").await;
        assert_eq!(queued.len(), 1, "one INSERT, one message: {queued:#?}");
        expect_insert(&queued[0], schema, table, 42, "Add dark mode");
        assert!(
            messages(c, "rowbranch_dead").await.is_empty(),
            "nothing goes to the dead-letter queue"
        );

        // In the inserting transaction the message is there; rolled back, it never was.
        c.batch_execute("begin").await.unwrap();
        insert_row(c, schema, table, 43, "Never mind").await;
        assert_eq!(messages(c, "rowbranch").await.len(), 2);
        c.batch_execute("rollback").await.unwrap();
        let queued = messages(c, "rowbranch").await;
        assert_eq!(
            queued.len(),
            1,
            "a rolled-back INSERT queues nothing: {queued:#?}"
        );
        assert_eq!(queued[0]["record"]["id"], 42);

        // A statement of several rows queues each once.
        c.batch_execute(&format!(
            "insert into {}.{} (id, message) select g, 'row ' || g from generate_series(100, 149) g",
            ident(schema),
            ident(table)
        ))
        .await
        .unwrap();
        let queued = messages(c, "rowbranch").await;
        assert_eq!(queued.len(), 51, "{queued:#?}");
        let ids: BTreeSet<i64> = queued[1..]
            .iter()
            .map(|m| m["record"]["id"].as_i64().unwrap())
            .collect();
        assert_eq!(ids, (100..150).collect::<BTreeSet<i64>>());
    }
}

#[tokio::test]
async fn applied_twice_it_ends_in_the_same_state_and_keeps_what_is_queued() {
    for db in each_install().await {
        let c = &db.client;
        let queue = format!("q{}", db.tag);
        let dead = format!("q{}_dead", db.tag);
        create_table(c, "public", "feedbacks").await;
        let ctx = context("public", "feedbacks", &queue, &dead);
        apply(c, &ctx).await;
        insert_row(c, "public", "feedbacks", 1, "Hi").await;
        let first = state(c, &queue).await;
        assert_eq!(
            first["messages"].as_array().map(Vec::len),
            Some(1),
            "{first:#}"
        );
        assert_eq!(
            first["queues"].as_array().map(Vec::len),
            Some(2),
            "{first:#}"
        );
        assert_eq!(
            first["triggers"].as_array().map(Vec::len),
            Some(1),
            "{first:#}"
        );

        apply(c, &ctx).await;
        assert_eq!(
            state(c, &queue).await,
            first,
            "a second run changed something"
        );

        // pgmq was there already: as plain SQL, the file must not have tried create extension.
        let extension = truth(
            c,
            "select exists (select 1 from pg_extension where extname = 'pgmq')",
        )
        .await;
        assert_eq!(extension, db.install == Some(Install::Extension));
    }
}

#[tokio::test]
async fn without_pgmq_it_creates_the_extension_when_the_server_has_it() {
    // The extension's files are on the server whenever its template exists.
    let db = or_skip!(TestDb::create(Template::WithoutPgmq(Install::Extension)).await);
    let c = &db.client;
    assert!(!truth(c, "select to_regnamespace('pgmq') is not null").await);
    create_table(c, "public", "feedbacks").await;
    apply(
        c,
        &context("public", "feedbacks", "rowbranch", "rowbranch_dead"),
    )
    .await;
    assert!(
        truth(
            c,
            "select exists (select 1 from pg_extension where extname = 'pgmq')"
        )
        .await
    );
    insert_row(c, "public", "feedbacks", 7, "Hello").await;
    expect_insert(
        &messages(c, "rowbranch").await[0],
        "public",
        "feedbacks",
        7,
        "Hello",
    );
}

#[tokio::test]
async fn the_route_s_update_and_delete_events_send_the_old_and_new_rows() {
    for db in each_install().await {
        let c = &db.client;
        create_table(c, "public", "feedbacks").await;
        let ctx = SetupContext {
            events: vec!["INSERT".into(), "UPDATE".into(), "DELETE".into()],
            ..context("public", "feedbacks", "rowbranch", "rowbranch_dead")
        };
        apply(c, &ctx).await;
        let triggers = queue_triggers(c, "public", "feedbacks").await;
        assert_eq!(triggers.len(), 1, "{triggers:?}");
        assert_eq!(
            triggers[0].2,
            1 | 4 | 8 | 16,
            "AFTER INSERT OR UPDATE OR DELETE FOR EACH ROW"
        );
        insert_row(c, "public", "feedbacks", 1, "First").await;
        c.batch_execute("update public.feedbacks set message = 'Second' where id = 1")
            .await
            .unwrap();
        c.batch_execute("delete from public.feedbacks where id = 1")
            .await
            .unwrap();
        let queued = messages(c, "rowbranch").await;
        assert_eq!(queued.len(), 3, "{queued:#?}");
        expect_insert(&queued[0], "public", "feedbacks", 1, "First");
        assert_eq!(queued[1]["type"], "UPDATE");
        assert_eq!(queued[1]["record"]["message"], "Second");
        assert_eq!(queued[1]["old_record"]["message"], "First");
        assert_eq!(queued[2]["type"], "DELETE");
        assert_eq!(queued[2]["record"], Value::Null);
        assert_eq!(queued[2]["old_record"]["message"], "Second");
    }
}

#[tokio::test]
async fn the_queues_are_logged_and_an_unlogged_one_is_refused() {
    for db in each_install().await {
        let c = &db.client;
        create_table(c, "public", "feedbacks").await;
        let (queue, dead) = (format!("q{}", db.tag), format!("q{}_dead", db.tag));
        apply(c, &context("public", "feedbacks", &queue, &dead)).await;
        for name in [&queue, &dead] {
            for prefix in ["q_", "a_"] {
                let persistence: String = c
                    .query_one(
                        "select relpersistence::text from pg_class where oid = to_regclass($1)",
                        &[&format!("pgmq.{}", ident(&format!("{prefix}{name}")))],
                    )
                    .await
                    .unwrap_or_else(|e| panic!("no table pgmq.{prefix}{name}: {e}"))
                    .get(0);
                assert_eq!(persistence, "p", "pgmq.{prefix}{name} is not logged");
            }
            let unlogged: bool = c
                .query_one(
                    "select is_unlogged from pgmq.list_queues() where queue_name = $1",
                    &[name],
                )
                .await
                .unwrap()
                .get(0);
            assert!(!unlogged, "{name}");
        }

        // A queue of that name made unlogged beforehand is refused, and nothing is installed.
        create_table(c, "public", "other").await;
        let lossy = format!("l{}", db.tag);
        c.query("select pgmq.create_unlogged($1::text)", &[&lossy])
            .await
            .unwrap();
        let refused = try_apply(c, &context("public", "other", &lossy, &dead))
            .await
            .expect_err("an unlogged queue was accepted");
        assert!(refused.contains("unlogged"), "{refused}");
        assert!(queue_triggers(c, "public", "other").await.is_empty());
    }
}

#[tokio::test]
async fn the_webhook_trigger_is_dropped_and_other_triggers_are_left() {
    for db in each_install().await {
        let c = &db.client;
        create_table(c, "public", "feedbacks").await;
        c.batch_execute(
            "create function public.stand_in() returns trigger language plpgsql
               as $f$ begin return null; end $f$;
             create trigger rowbranch_webhook after insert on public.feedbacks
               for each row execute function public.stand_in();
             create trigger audit after insert on public.feedbacks
               for each row execute function public.stand_in();",
        )
        .await
        .unwrap();
        apply(
            c,
            &context("public", "feedbacks", "rowbranch", "rowbranch_dead"),
        )
        .await;
        let names: Vec<String> = column(
            c,
            "select tgname::text from pg_trigger
             where tgrelid = 'public.feedbacks'::regclass and not tgisinternal order by 1",
        )
        .await;
        assert_eq!(names, ["audit", "rowbranch_queue_rowbranch"]);
    }
}

#[tokio::test]
async fn two_deployments_with_their_own_queues_do_not_collide() {
    for db in each_install().await {
        let c = &db.client;
        let (a, b) = (format!("a{}", db.tag), format!("b{}", db.tag));
        let (a_dead, b_dead) = (format!("{a}_dead"), format!("{b}_dead"));
        create_table(c, "public", "shared").await;
        create_table(c, "public", "only_b").await;
        apply(c, &context("public", "shared", &a, &a_dead)).await;
        apply(c, &context("public", "shared", &b, &b_dead)).await;
        apply(c, &context("public", "only_b", &b, &b_dead)).await;
        // Running the first one again leaves the second alone.
        apply(c, &context("public", "shared", &a, &a_dead)).await;
        assert_eq!(queue_triggers(c, "public", "shared").await.len(), 2);

        insert_row(c, "public", "shared", 1, "For both").await;
        insert_row(c, "public", "only_b", 2, "For b").await;
        let (in_a, in_b) = (messages(c, &a).await, messages(c, &b).await);
        assert_eq!(in_a.len(), 1, "{in_a:#?}");
        expect_insert(&in_a[0], "public", "shared", 1, "For both");
        assert_eq!(in_b.len(), 2, "{in_b:#?}");
        expect_insert(&in_b[0], "public", "shared", 1, "For both");
        expect_insert(&in_b[1], "public", "only_b", 2, "For b");
        assert!(messages(c, &a_dead).await.is_empty() && messages(c, &b_dead).await.is_empty());
    }
}

/// The removal the file documents, with the names put in where it says.
fn removal(sql: &str, schema: &str, table: &str, queue: &str, dead_letter: &str) -> String {
    let lines: Vec<&str> = sql
        .lines()
        .filter_map(|line| line.strip_prefix("--   "))
        .collect();
    let begin = lines
        .iter()
        .position(|l| *l == "begin;")
        .expect("a begin; in the removal");
    let commit = lines
        .iter()
        .position(|l| *l == "commit;")
        .expect("a commit; in the removal");
    let mut steps: Vec<&str> = lines[begin..=commit].to_vec();
    steps.extend(
        lines
            .iter()
            .copied()
            .filter(|l| l.starts_with("select pgmq.drop_queue(")),
    );
    assert_eq!(steps.len(), 7, "the removal's statements: {steps:#?}");
    let script = steps
        .join("\n")
        .replace(
            "\"SCHEMA\".\"TABLE\"",
            &format!("{}.{}", ident(schema), ident(table)),
        )
        .replace(
            "\"rowbranch_queue_QUEUE\"",
            &ident(&format!("rowbranch_queue_{queue}")),
        )
        .replace("'DEAD_LETTER'", &literal(dead_letter))
        .replace("'QUEUE'", &literal(queue));
    for placeholder in ["QUEUE", "SCHEMA", "TABLE", "DEAD_LETTER"] {
        assert!(
            !script.contains(placeholder),
            "{placeholder} left in:\n{script}"
        );
    }
    script
}

#[tokio::test]
async fn the_documented_removal_leaves_no_trigger_function_or_queue_behind() {
    let (schema, table) = ("my \"app\"", "feed backs");
    for db in each_install().await {
        let c = &db.client;
        create_table(c, schema, table).await;
        let (queue, dead) = (format!("q{}", db.tag), format!("q{}_dead", db.tag));
        let ctx = context(schema, table, &queue, &dead);
        apply(c, &ctx).await;
        insert_row(c, schema, table, 1, "Queued").await;

        c.batch_execute(&removal(&render_sql(&ctx), schema, table, &queue, &dead))
            .await
            .unwrap_or_else(|e| panic!("the documented removal failed: {}", db_message(&e)));

        assert!(queue_triggers(c, schema, table).await.is_empty());
        assert!(truth(c, "select to_regproc('rowbranch.enqueue') is null").await);
        assert!(truth(c, "select to_regnamespace('rowbranch') is null").await);
        let left = count(
            c,
            &format!(
                "select count(*) from pgmq.list_queues() where queue_name in ({}, {})",
                literal(&queue),
                literal(&dead)
            ),
        )
        .await;
        assert_eq!(left, 0, "a queue is left");
        for prefix in ["q_", "a_"] {
            for name in [&queue, &dead] {
                let sql = format!("select to_regclass('pgmq.{prefix}{name}') is null");
                assert!(truth(c, &sql).await, "{sql}");
            }
        }
        let others = count(
            c,
            &format!(
                "select count(*) from pg_trigger where not tgisinternal and tgrelid = '{}.{}'::regclass",
                ident(schema).replace('\'', "''"),
                ident(table).replace('\'', "''")
            ),
        )
        .await;
        assert_eq!(others, 0);
        // The table works as before, and pgmq is still there.
        insert_row(c, schema, table, 2, "After").await;
        assert!(truth(c, "select to_regnamespace('pgmq') is not null").await);
    }
}

#[tokio::test]
async fn a_gated_route_s_triggers_send_a_row_as_it_passes_and_nothing_else() {
    for db in each_install().await {
        let c = &db.client;
        create_table(c, "public", "feedbacks").await;
        c.batch_execute("alter table public.feedbacks add column status text")
            .await
            .unwrap();
        let ctx = SetupContext {
            events: vec!["INSERT".into(), "UPDATE".into()],
            run_when: Some(rowbranch::config::RunWhen {
                column: "status".into(),
                equals: "it's approved".into(),
            }),
            ..context("public", "feedbacks", "rowbranch", "rowbranch_dead")
        };
        apply(c, &ctx).await;
        let approved = "'it''s approved'";
        for sql in [
            // Held, then approved: sent once, by the UPDATE.
            "insert into public.feedbacks (id, message, status) values (1, 'One', 'new')"
                .to_owned(),
            format!("update public.feedbacks set status = {approved} where id = 1"),
            // Written again, and another column changed: nothing.
            format!("update public.feedbacks set status = {approved} where id = 1"),
            "update public.feedbacks set message = 'One, edited' where id = 1".to_owned(),
            // Inserted approved: sent by the INSERT; no status at all: nothing.
            format!(
                "insert into public.feedbacks (id, message, status) values (2, 'Two', {approved})"
            ),
            "insert into public.feedbacks (id, message) values (3, 'Three')".to_owned(),
            // Unapproved and approved again: sent again (the branch makes it a no-op).
            "update public.feedbacks set status = 'new' where id = 2".to_owned(),
            format!("update public.feedbacks set status = {approved} where id = 2"),
        ] {
            c.batch_execute(&sql).await.unwrap();
        }
        let queued = messages(c, "rowbranch").await;
        let sent: Vec<(String, i64)> = (queued.iter())
            .map(|m| {
                (
                    m["type"].as_str().unwrap().to_owned(),
                    m["record"]["id"].as_i64().unwrap(),
                )
            })
            .collect();
        let expected = [("UPDATE", 1), ("INSERT", 2), ("UPDATE", 2)];
        let expected: Vec<(String, i64)> =
            expected.iter().map(|(k, i)| (k.to_string(), *i)).collect();
        assert_eq!(sent, expected);
        // What the trigger sends, rowbranch runs: each passes the gate as the consumer reads it.
        let config =
            "[forge]\nkind = \"local\"\npath = \"r.git\"\n[[routes]]\ntable = \"feedbacks\"\n\
            repo = \"acme/app\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\"\n\
            intake = \"pgmq\"\nevents = [\"INSERT\", \"UPDATE\"]\n\
            run_when = { column = \"status\", equals = \"it's approved\" }\n";
        let config =
            rowbranch::config::Config::parse(config, std::path::Path::new("r.toml"), &|_| None)
                .unwrap();
        let routes = rowbranch::pipeline::Routes::compile(&config).unwrap();
        for message in &queued {
            let event = rowbranch::webhook::payload::parse(message.to_string().as_bytes()).unwrap();
            assert!(routes.route(true, &event).is_ok(), "{message}");
        }
    }
}
