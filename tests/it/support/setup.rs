//! The setup files of `templates/` as a test uses them: the SQL rendered for a table, a queue or
//! a URL and applied to a test's database, the stand-in feedback table it is applied to, and the
//! manifest the App's page posts.

use rowbranch::cli::{HostArg, OwnerType};
use rowbranch::cmd::init::actions::{ActionsSetup, Every, Install};
use rowbranch::cmd::init::setup::{render, SetupContext};
use rowbranch::config::{Intake, DEFAULT_MAX_TURNS, DEFAULT_WORK_TIMEOUT_MINUTES};
use tokio_postgres::Client;

use super::db::{db_message, ident};

/// Example values for every file, the drain's too: the webhook setup of `public.feedbacks` for
/// `acme/app`, its secrets left to the placeholders.
pub fn example() -> SetupContext {
    SetupContext {
        repo: "acme/app".into(),
        owner: "acme".into(),
        owner_kind: OwnerType::Organization,
        url: "https://hooks.example.com".into(),
        app_name: "rowbranch-acme".into(),
        app_slug: "rowbranch-acme".into(),
        app_id: None,
        schema: "public".into(),
        table: "feedbacks".into(),
        id_column: "id".into(),
        text_column: "message".into(),
        branch_prefix: "feedback".into(),
        event_type: "feedback".into(),
        webhook_secret: None,
        bearer_secret: None,
        intake: Intake::Webhook,
        host: HostArg::Server,
        actions: Some(actions_example()),
        events: vec!["INSERT".into()],
        queue: "rowbranch".into(),
        dead_letter: "rowbranch_dead".into(),
        max_turns: DEFAULT_MAX_TURNS,
        work_timeout_minutes: DEFAULT_WORK_TIMEOUT_MINUTES,
        sweep_from: "2026-12-05T21:04:00+00:00".into(),
        run_when: None,
        allow_hosts: Vec::new(),
        refuse_paths: Vec::new(),
    }
}

/// Example values for the drain workflow and the kick: hourly, built from git, no kick.
pub fn actions_example() -> ActionsSetup {
    ActionsSetup {
        every: Every::HOURLY,
        install: Install::Git {
            url: "https://github.com/acme/rowbranch".into(),
            rev: "0123456789abcdef0123456789abcdef01234567".into(),
        },
        kick: false,
        default_branch: "main".into(),
        api_url: "https://api.github.com".into(),
    }
}

/// What `supabase-queue.sql` is rendered with: `schema.table` sends to `queue`, and what cannot
/// be run goes to `dead_letter`.
pub fn queue_context(schema: &str, table: &str, queue: &str, dead_letter: &str) -> SetupContext {
    SetupContext {
        schema: schema.to_owned(),
        table: table.to_owned(),
        queue: queue.to_owned(),
        dead_letter: dead_letter.to_owned(),
        ..example()
    }
}

/// What `supabase.sql` and `supabase-vault.sql` are rendered with: `schema.table` posts to
/// `url`, with `secret` (the bearer secret of the one, the signing key of the other) or the
/// placeholder.
pub fn webhook_context(schema: &str, table: &str, url: &str, secret: Option<&str>) -> SetupContext {
    SetupContext {
        schema: schema.to_owned(),
        table: table.to_owned(),
        url: url.to_owned(),
        webhook_secret: secret.map(str::to_owned),
        bearer_secret: secret.map(str::to_owned),
        ..example()
    }
}

/// `supabase-queue.sql` for `ctx`.
pub fn queue_sql(ctx: &SetupContext) -> String {
    render("supabase-queue.sql", ctx)
        .unwrap_or_else(|e| panic!("supabase-queue.sql does not render: {e:#}"))
}

/// Runs `supabase-queue.sql`; on failure, rolls its transaction back and returns the message.
pub async fn try_apply(client: &Client, ctx: &SetupContext) -> Result<(), String> {
    match client.batch_execute(&queue_sql(ctx)).await {
        Ok(()) => Ok(()),
        Err(e) => {
            // A script sent in one piece stops at the error, inside its transaction.
            client.batch_execute("rollback").await.expect("rollback");
            Err(db_message(&e))
        }
    }
}

/// Runs a script that must stop with an error, and rolls its transaction back (a script sent in
/// one piece stops at the error, inside it); the database's message.
pub async fn refusal(client: &Client, sql: &str) -> String {
    let error = client
        .batch_execute(sql)
        .await
        .expect_err("the script was expected to stop");
    client.batch_execute("rollback").await.expect("rollback");
    match error.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => error.to_string(),
    }
}

/// Runs `supabase-queue.sql`, which must succeed.
pub async fn apply(client: &Client, ctx: &SetupContext) {
    if let Err(message) = try_apply(client, ctx).await {
        panic!(
            "supabase-queue.sql failed for {:?}.{:?} → {:?}: {message}",
            ctx.schema, ctx.table, ctx.queue
        );
    }
}

/// Runs a rendered file with `standard_conforming_strings` off, then on: its `E''` literals must
/// read the same either way.
pub async fn apply_both_ways(client: &Client, sql: &str) {
    for conforming in ["off", "on"] {
        let setting = format!("set standard_conforming_strings = {conforming}");
        client
            .batch_execute(&setting)
            .await
            .unwrap_or_else(|e| panic!("{setting}: {e}"));
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("with standard_conforming_strings {conforming}: {e}"));
    }
}

/// Creates `schema.table` as the tests' stand-in for a feedback table.
pub async fn create_table(client: &Client, schema: &str, table: &str) {
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
        .unwrap_or_else(|e| panic!("could not create {schema}.{table}: {}", db_message(&e)));
}

pub async fn try_insert(
    client: &Client,
    schema: &str,
    table: &str,
    id: i64,
    message: &str,
) -> Result<(), String> {
    let sql = format!(
        "insert into {}.{} (id, message) values ($1, $2)",
        ident(schema),
        ident(table)
    );
    client
        .execute(&sql, &[&id, &message])
        .await
        .map(drop)
        .map_err(|e| db_message(&e))
}

pub async fn insert_row(client: &Client, schema: &str, table: &str, id: i64, message: &str) {
    if let Err(e) = try_insert(client, schema, table, id, message).await {
        panic!("the insert into {schema}.{table} failed: {e}");
    }
}

/// How many triggers named `rowbranch_webhook` `schema.table` has.
pub async fn webhook_triggers(client: &Client, schema: &str, table: &str) -> i64 {
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

pub async fn table_exists(client: &Client, schema: &str, table: &str) -> bool {
    client
        .query_one(
            "select to_regclass($1) is not null",
            &[&format!("{}.{}", ident(schema), ident(table))],
        )
        .await
        .expect("could not look the table up")
        .get(0)
}

/// The manifest `create-app.html` posts to GitHub: its form field's value, unescaped.
pub fn posted_manifest(page: &str) -> String {
    let (_, rest) = page
        .split_once("name=\"manifest\" value=\"")
        .expect("the page has a manifest field");
    let value = &rest[..rest.find('"').expect("the field's value ends")];
    value
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#x2f;", "/")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}
