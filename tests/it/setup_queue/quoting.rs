//! No name can break out of its quoting: names of any printable characters, drawn at random
//! too, with `standard_conforming_strings` either way (a control character is refused before
//! rendering, by `SetupContext::check`); no value in a comment or a dollar-quoted body; and only
//! the three event keywords in the trigger.

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

use super::*;

#[tokio::test]
async fn names_of_any_printable_characters_stay_inside_their_quotes() {
    for db in each_install().await {
        let c = &db.client;
        create_table(c, "app", "sentinel").await;
        let mut names = vec![
            ("my \"app\"".to_owned(), "feed backs".to_owned()),
            (
                "We\"ird $enqueue$ $grants$".to_owned(),
                "x\"; drop table app.sentinel; -- select 1 \"y".to_owned(),
            ),
            (
                "o'neil\\".to_owned(),
                "E'\\'; drop table app.sentinel; --".to_owned(),
            ),
        ];
        // And names of printable characters, drawn at random.
        let strategy = "[a-zA-Z0-9 _\"'\\\\;$\\-é€]{1,20}";
        let mut runner = TestRunner::default();
        for n in 0..6 {
            let mut draw = || {
                let value = strategy.new_tree(&mut runner).expect("a name").current();
                format!("{value}{n}")
            };
            names.push((draw(), draw()));
        }
        for (n, (schema, table)) in names.iter().enumerate() {
            create_table(c, schema, table).await;
            let ctx = context(schema, table, "rowbranch", "rowbranch_dead");
            // E'' literals read the same whichever way standard_conforming_strings is set.
            let conforming = if n % 2 == 0 { "on" } else { "off" };
            c.batch_execute(&format!("set standard_conforming_strings = {conforming}"))
                .await
                .unwrap();
            apply(c, &ctx).await;
            insert_row(c, schema, table, n as i64, "Hello").await;
            let queued = messages(c, "rowbranch").await;
            assert_eq!(queued.len(), n + 1, "{schema:?}.{table:?}: {queued:#?}");
            expect_insert(&queued[n], schema, table, n as i64, "Hello");
            assert_eq!(
                queue_triggers(c, schema, table).await.len(),
                1,
                "{schema:?}.{table:?}"
            );
        }
        c.batch_execute("set standard_conforming_strings = on")
            .await
            .unwrap();
        assert!(truth(c, "select to_regclass('app.sentinel') is not null").await);
    }
}

#[test]
fn no_value_lands_in_a_comment_or_a_dollar_quoted_body() {
    let ctx = SetupContext {
        schema: "MARK-schema".into(),
        table: "MARK-table".into(),
        queue: "zzmarkq".into(),
        dead_letter: "zzmarkd".into(),
        ..crate::support::setup::example()
    };
    let sql = render_sql(&ctx);
    assert!(sql.starts_with("-- rowbranch:"), "{sql}");
    for line in sql.lines().filter(|l| l.trim_start().starts_with("--")) {
        assert!(
            !line.contains("MARK") && !line.contains("zzmark"),
            "a value in a comment: {line:?}\n{sql}"
        );
    }
    for tag in ["$pgmq$", "$queues$", "$enqueue$", "$grants$"] {
        let parts: Vec<&str> = sql.split(tag).collect();
        assert_eq!(parts.len(), 3, "{tag} opens and closes one body\n{sql}");
        assert!(
            !parts[1].contains("MARK") && !parts[1].contains("zzmark"),
            "a value inside {tag}…{tag}:\n{}",
            parts[1]
        );
    }
    assert!(
        sql.contains("E'zzmarkq'") && sql.contains("E'zzmarkd'"),
        "{sql}"
    );
    assert!(sql.contains("\"rowbranch_queue_zzmarkq\""), "{sql}");
    let broken = SetupContext {
        table: "two\nlines".into(),
        ..ctx
    };
    assert!(
        render("supabase-queue.sql", &broken).is_err(),
        "a line break in a name was rendered"
    );
    assert!(
        sql.contains("after insert on \"MARK-schema\".\"MARK-table\""),
        "{sql}"
    );
}

#[test]
fn the_trigger_fires_on_the_route_s_events_and_nothing_else_renders() {
    let with = |events: &[&str]| SetupContext {
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        ..crate::support::setup::example()
    };
    let all = render_sql(&with(&["INSERT", "UPDATE", "DELETE"]));
    assert!(
        all.contains("after insert or update or delete on \"public\".\"feedbacks\""),
        "{all}"
    );
    for refused in [
        &[][..],
        &["TRUNCATE"][..],
        &["INSERT", "insert; drop table x"][..],
    ] {
        assert!(
            render("supabase-queue.sql", &with(refused)).is_err(),
            "rendered with events {refused:?}"
        );
    }
}
