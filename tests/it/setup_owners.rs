//! The SQL `init` writes trusts only what rowbranch's setup made: `supabase-queue.sql`,
//! `supabase-kick.sql` and `supabase-vault.sql` install nothing when the schema `rowbranch`, or a
//! table in it, belongs to a role other than the one running them and `postgres`. A role that
//! could create the schema first would keep it — a trigger of its own on `rowbranch.kicks` then
//! runs inside the kick's `SECURITY DEFINER` function, as its owner, who reads Vault. The error
//! names the object and its owner.
//!
//! Run on the real PostgreSQL with pgmq's template and the Vault and pg_net stand-ins of
//! `support::supabase`, each test in a database of its own, with roles named after it.

use rowbranch::cli::HostArg;
use rowbranch::cmd::init::actions::ActionsSetup;
use rowbranch::cmd::init::setup::{render, SetupContext};

use crate::support::db::{ident, scalar, Install, Template, TestDb};
use crate::support::random::random_whsec;
use crate::support::setup::{
    actions_example, create_table, queue_context, refusal, webhook_context,
};
use crate::support::supabase::STAND_IN;

/// The three scripts for `public.feedbacks`, by name.
fn scripts() -> Vec<(&'static str, String)> {
    let queue = queue_context("public", "feedbacks", "rowbranch", "rowbranch_dead");
    let kick = SetupContext {
        host: HostArg::Actions,
        actions: Some(ActionsSetup {
            kick: true,
            ..actions_example()
        }),
        ..queue.clone()
    };
    let secret = random_whsec();
    let vault = webhook_context(
        "public",
        "feedbacks",
        "https://h.example.com",
        Some(&secret),
    );
    [
        ("supabase-queue.sql", queue),
        ("supabase-kick.sql", kick),
        ("supabase-vault.sql", vault),
    ]
    .into_iter()
    .map(|(name, ctx)| {
        let sql = render(name, &ctx).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        (name, sql)
    })
    .collect()
}

/// A database with pgmq, the stand-ins, `public.feedbacks`, and the role `intruder` that can
/// log in nowhere and owns whatever `arrange` gives it.
async fn arranged(arrange: &str) -> Option<(TestDb, String)> {
    let db = TestDb::create(Template::Pgmq(Install::Sql)).await?;
    db.execute(STAND_IN).await;
    create_table(&db, "public", "feedbacks").await;
    let intruder = db.role("intruder");
    db.execute(&format!("create role {} nologin", ident(&intruder)))
        .await;
    db.execute(&arrange.replace("INTRUDER", &ident(&intruder)))
        .await;
    Some((db, intruder))
}

/// Nothing of rowbranch's is on `public.feedbacks` or in the schema `rowbranch` but what
/// `arrange` put there, and pgmq holds no queue.
async fn assert_nothing_installed(db: &TestDb, name: &str) {
    let triggers: i64 = scalar(
        db,
        "select count(*) from pg_trigger where tgrelid = 'public.feedbacks'::regclass and not tgisinternal",
    )
    .await;
    assert_eq!(triggers, 0, "{name} left a trigger");
    let functions: i64 = scalar(
        db,
        "select count(*) from pg_proc where pronamespace = to_regnamespace('rowbranch')",
    )
    .await;
    assert_eq!(functions, 0, "{name} left a function");
    let queues: i64 = scalar(db, "select count(*) from pgmq.list_queues()").await;
    assert_eq!(queues, 0, "{name} made a queue");
}

#[tokio::test]
async fn a_schema_rowbranch_another_role_made_first_stops_each_script_and_is_named() {
    for (name, sql) in scripts() {
        let Some((db, intruder)) = arranged("create schema rowbranch authorization INTRUDER").await
        else {
            return;
        };
        let message = refusal(&db, &sql).await;
        let expected = format!(
            "{name}: schema rowbranch belongs to the role {intruder}, not to postgres, which runs this file, so rowbranch's setup did not make it: nothing was installed"
        );
        assert_eq!(message, expected);
        assert_nothing_installed(&db, name).await;
    }
}

#[tokio::test]
async fn a_table_another_role_made_in_rowbranchs_schema_stops_each_script_and_is_named() {
    // The schema is the setup's own; the kicks table and a trigger on it are not.
    let arrange = "create schema rowbranch;
        create table rowbranch.kicks (queue text primary key, kicked_at timestamptz not null);
        create function public.copy_secrets() returns trigger language plpgsql
          as $$ begin return new; end $$;
        create trigger steal after insert on rowbranch.kicks
          for each row execute function public.copy_secrets();
        alter table rowbranch.kicks owner to INTRUDER;";
    for (name, sql) in scripts() {
        let Some((db, intruder)) = arranged(arrange).await else {
            return;
        };
        let message = refusal(&db, &sql).await;
        assert!(
            message.starts_with(&format!(
                "{name}: table rowbranch.kicks belongs to the role {intruder}, not to postgres, which runs this file"
            )),
            "{message}"
        );
        assert!(message.ends_with("nothing was installed"), "{message}");
        assert_nothing_installed(&db, name).await;
    }
}

#[tokio::test]
async fn a_schema_of_the_role_running_the_script_is_its_own() {
    // A superuser that is not postgres runs each script into the schema it made itself.
    for (name, sql) in scripts() {
        let Some((db, _)) = arranged("create schema rowbranch authorization INTRUDER").await else {
            return;
        };
        let runner = db.role("runner");
        db.execute(&format!(
            "create role {r} superuser nologin; alter schema rowbranch owner to {r}; set role {r}",
            r = ident(&runner)
        ))
        .await;
        db.batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{name} as the schema's owner: {e}"));
        let triggers: i64 = scalar(
            &db,
            "select count(*) from pg_trigger where tgrelid = 'public.feedbacks'::regclass and not tgisinternal",
        )
        .await;
        assert!(triggers >= 1, "{name} installed its trigger");
        db.execute("reset role").await;
    }
}
