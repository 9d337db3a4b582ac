//! Who may do what with the queue: the roles that insert, the function's owner, anyone else.

use super::*;

#[tokio::test]
async fn a_role_with_insert_on_the_table_and_no_rights_on_pgmq_inserts_and_is_queued() {
    for db in each_install().await {
        let (schema, table) = ("app", "feedbacks");
        let c = &db.client;
        create_table(c, schema, table).await;
        apply(c, &context(schema, table, "rowbranch", "rowbranch_dead")).await;
        // Like Supabase's anon and authenticated: INSERT on the table, nothing on pgmq.
        let anon = db.role("anon");
        c.batch_execute(&format!(
            "create role {r} nologin;
             grant usage on schema {s} to {r};
             grant insert on {s}.{t} to {r};",
            r = ident(&anon),
            s = ident(schema),
            t = ident(table),
        ))
        .await
        .unwrap();
        let role_lit = literal(&anon);
        assert!(
            !truth(
                c,
                &format!("select has_schema_privilege({role_lit}, 'pgmq', 'USAGE')")
            )
            .await
        );

        c.batch_execute(&format!("set role {}", ident(&anon)))
            .await
            .unwrap();
        let inserted = try_insert(c, schema, table, 9, "From the browser").await;
        let reads = c.batch_execute("select * from pgmq.q_rowbranch").await;
        let sends = c
            .batch_execute("select pgmq.send('rowbranch'::text, '{}'::jsonb, 0::integer)")
            .await;
        c.batch_execute("reset role").await.unwrap();

        inserted.unwrap_or_else(|e| panic!("the role without pgmq rights could not insert: {e}"));
        let reads = reads.expect_err("the inserting role read the queue");
        assert!(
            db_message(&reads).contains("permission denied"),
            "{}",
            db_message(&reads)
        );
        let sends = sends.expect_err("the inserting role wrote the queue directly");
        assert!(
            db_message(&sends).contains("permission denied"),
            "{}",
            db_message(&sends)
        );
        let queued = messages(c, "rowbranch").await;
        assert_eq!(queued.len(), 1, "{queued:#?}");
        expect_insert(&queued[0], schema, table, 9, "From the browser");
    }
}

#[tokio::test]
async fn no_other_role_can_attach_the_function_to_write_the_queue() {
    for db in each_install_queueing().await {
        let c = &db.client;
        let other = db.role("other");
        c.batch_execute(&format!(
            "create role {r} nologin;
             create schema {s} authorization {r};
             create table {s}.t (id int);
             alter table {s}.t owner to {r};",
            r = ident(&other),
            s = ident(&other),
        ))
        .await
        .unwrap();
        let attach = format!(
            "create trigger sneaky after insert on {}.t for each row
             execute function rowbranch.enqueue('rowbranch')",
            ident(&other)
        );
        c.batch_execute(&format!("set role {}", ident(&other)))
            .await
            .unwrap();
        let without_usage = c.batch_execute(&attach).await;
        c.batch_execute("reset role").await.unwrap();
        let without_usage = without_usage.expect_err("another role attached rowbranch.enqueue()");
        assert!(
            db_message(&without_usage).contains("permission denied for schema rowbranch"),
            "{}",
            db_message(&without_usage)
        );

        // Even given the schema, the function is not executable by PUBLIC.
        c.batch_execute(&format!(
            "grant usage on schema rowbranch to {}",
            ident(&other)
        ))
        .await
        .unwrap();
        c.batch_execute(&format!("set role {}", ident(&other)))
            .await
            .unwrap();
        let without_execute = c.batch_execute(&attach).await;
        c.batch_execute("reset role").await.unwrap();
        let without_execute =
            without_execute.expect_err("another role attached rowbranch.enqueue()");
        assert!(
            db_message(&without_execute)
                .contains("permission denied for function rowbranch.enqueue"),
            "{}",
            db_message(&without_execute)
        );
        assert!(messages(c, "rowbranch").await.is_empty());
    }
}

#[tokio::test]
async fn the_function_is_security_definer_with_an_empty_search_path_on_an_after_row_trigger() {
    for db in each_install_queueing().await {
        let c = &db.client;
        let row = c
            .query_one(
                "select p.prosecdef, p.proconfig, l.lanname::text,
                        p.proacl is not null
                          and not exists (select 1 from aclexplode(p.proacl) a where a.grantee = 0)
                 from pg_proc p join pg_language l on l.oid = p.prolang
                 where p.oid = to_regproc('rowbranch.enqueue')",
                &[],
            )
            .await
            .expect("rowbranch.enqueue() is missing");
        let (definer, config, language, not_public): (bool, Vec<String>, String, bool) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        assert!(definer, "rowbranch.enqueue() is not SECURITY DEFINER");
        assert_eq!(config, vec!["search_path=\"\"".to_owned()]);
        assert_eq!(language, "plpgsql");
        assert!(not_public, "PUBLIC may execute rowbranch.enqueue()");

        let triggers = queue_triggers(c, "public", "feedbacks").await;
        assert_eq!(triggers.len(), 1, "{triggers:?}");
        let (name, argument, tgtype, enabled) = &triggers[0];
        assert_eq!(name, "rowbranch_queue_rowbranch");
        assert_eq!(
            argument, "rowbranch\\000",
            "the queue is the trigger's one argument"
        );
        // pg_trigger.tgtype: 1 row, 2 before, 4 insert, 8 delete, 16 update, 64 instead.
        assert_eq!(*tgtype, 1 | 4, "an AFTER INSERT FOR EACH ROW trigger");
        assert_eq!(enabled, "O", "the trigger is enabled");
    }
}

#[tokio::test]
async fn the_function_s_owner_gets_exactly_what_sending_needs() {
    for db in each_install_queueing().await {
        let c = &db.client;
        let ctx = context("public", "feedbacks", "rowbranch", "rowbranch_dead");
        // A less privileged owner than the one that ran the file (a superuser here).
        let owner = db.role("owner");
        c.batch_execute(&format!(
            "create role {o} nologin; alter function rowbranch.enqueue() owner to {o};",
            o = ident(&owner)
        ))
        .await
        .unwrap();
        let refused = try_insert(c, "public", "feedbacks", 1, "Before the grants")
            .await
            .expect_err("the owner sent without any right on pgmq");
        assert!(refused.contains("permission denied"), "{refused}");

        apply(c, &ctx).await;
        insert_row(c, "public", "feedbacks", 2, "After the grants").await;
        let queued = messages(c, "rowbranch").await;
        assert_eq!(queued.len(), 1, "{queued:#?}");
        expect_insert(&queued[0], "public", "feedbacks", 2, "After the grants");

        let o = literal(&owner);
        for (what, expected) in [
            ("has_schema_privilege(OWNER, 'pgmq', 'USAGE')", true),
            (
                "has_table_privilege(OWNER, 'pgmq.q_rowbranch', 'INSERT')",
                true,
            ),
            (
                "has_column_privilege(OWNER, 'pgmq.q_rowbranch', 'msg_id', 'SELECT')",
                true,
            ),
            (
                "has_column_privilege(OWNER, 'pgmq.q_rowbranch', 'message', 'SELECT')",
                false,
            ),
            (
                "has_table_privilege(OWNER, 'pgmq.q_rowbranch', 'SELECT')",
                false,
            ),
            (
                "has_table_privilege(OWNER, 'pgmq.q_rowbranch', 'UPDATE')",
                false,
            ),
            (
                "has_table_privilege(OWNER, 'pgmq.q_rowbranch', 'DELETE')",
                false,
            ),
            (
                "has_table_privilege(OWNER, 'pgmq.a_rowbranch', 'INSERT')",
                false,
            ),
            (
                "has_table_privilege(OWNER, 'pgmq.q_rowbranch_dead', 'INSERT')",
                false,
            ),
            ("has_schema_privilege(OWNER, 'pgmq', 'CREATE')", false),
        ] {
            let sql = format!("select {}", what.replace("OWNER", &o));
            assert_eq!(truth(c, &sql).await, expected, "{what}");
        }
    }
}

#[tokio::test]
async fn only_its_owners_and_pg_monitor_can_read_the_queue() {
    for db in each_install_queueing().await {
        let c = &db.client;
        let plain = db.role("plain");
        c.batch_execute(&format!("create role {} nologin", ident(&plain)))
            .await
            .unwrap();
        let p = literal(&plain);
        for table in ["q_rowbranch", "a_rowbranch", "q_rowbranch_dead"] {
            // pgmq's default privileges, for tables its installing role creates.
            let monitor =
                format!("select has_table_privilege('pg_monitor', 'pgmq.{table}', 'SELECT')");
            assert!(truth(c, &monitor).await, "{monitor}");
            for privilege in ["SELECT", "INSERT", "UPDATE", "DELETE"] {
                let sql = format!("select has_table_privilege({p}, 'pgmq.{table}', '{privilege}')");
                assert!(!truth(c, &sql).await, "{sql}");
            }
        }
        assert!(
            !truth(
                c,
                &format!("select has_schema_privilege({p}, 'rowbranch', 'USAGE')")
            )
            .await
        );
    }
}

#[tokio::test]
async fn a_dropped_queue_makes_every_insert_fail_as_the_file_says() {
    for db in each_install_queueing().await {
        let c = &db.client;
        c.batch_execute("select pgmq.drop_queue('rowbranch'::text)")
            .await
            .unwrap();
        let failed = try_insert(c, "public", "feedbacks", 1, "Lost?").await;
        assert!(
            failed.as_ref().is_err_and(|e| e.contains("does not exist")),
            "an INSERT with its queue dropped: {failed:?}"
        );
        assert_eq!(count(c, "select count(*) from public.feedbacks").await, 0);
    }
}
