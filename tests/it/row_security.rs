//! Row level security on a routed table, against a real PostgreSQL: a role it hides every row
//! from reads an empty table without an error, so `reconcile` must fail (not report 0 rows),
//! `serve`'s scheduled sweep must count the route's run as failed, `doctor` must fail with the policy that fixes it, and `redo` and `explain` must say why a
//! row is not found. A `using (true)` policy, the table's owner and a BYPASSRLS role see every
//! row; a conditional policy is a warning, and the sweep sees what it lets through.

use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;

use crate::support::app::{spawn_app, Options, FEEDBACK_ROUTE};
use crate::support::child;
use crate::support::db::{admin_config, ident, literal, Template, TestDb};
use crate::support::local::dir_with_repository;
use crate::support::or_skip;
use crate::support::random::{random_hex, random_secret};
use crate::support::tools::output_text;
use crate::support::wait::eventually_within;

/// A database with `public.feedbacks` holding rows 1 and 2, and a login role `name` that may
/// SELECT from it (as docs/queue.md's role is granted): the role's `DATABASE_URL`.
struct Table {
    db: TestDb,
    role: String,
    url: String,
    dir: Arc<TempDir>,
}

impl Table {
    async fn new(name: &str, attributes: &str) -> Option<Table> {
        let db = TestDb::create(Template::Plain).await?;
        let role = db.role(name);
        let password = random_hex(12);
        db.execute(&format!(
            "create table public.feedbacks (id bigint primary key, message text not null,
               created_at timestamptz not null default now());
             insert into public.feedbacks (id, message) values (1, 'Dark mode'), (2, 'Faster');
             create role {role} login password {password} {attributes};
             grant usage on schema public to {role};
             grant select on public.feedbacks to {role};",
            role = ident(&role),
            password = literal(&password),
        ))
        .await;
        let admin = admin_config(&db.url);
        let host = match &admin.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        };
        let port = admin.get_ports().first().copied().unwrap_or(5432);
        let url = format!(
            "host='{host}' port={port} user='{role}' password='{password}' dbname='{}' sslmode=disable",
            db.name
        );
        let dir = dir_with_repository().await;
        let config = format!("[forge]\nkind = \"local\"\npath = \"repo.git\"\n{FEEDBACK_ROUTE}");
        std::fs::write(dir.path().join("rowbranch.toml"), config).unwrap();
        Some(Table { db, role, url, dir })
    }

    /// `rowbranch ARGS` as the role.
    async fn run(&self, args: &[&str]) -> Output {
        let mut command = child::rowbranch(self.dir.path());
        command
            .env("DATABASE_URL", &self.url)
            .env("ROWBRANCH_WEBHOOK_SECRET", random_secret())
            .args(args);
        child::run(&mut command).await
    }

    async fn dry_run(&self) -> Output {
        self.run(&["reconcile", "--dry-run", "--json"]).await
    }

    async fn doctor(&self) -> Output {
        self.run(&["doctor"]).await
    }

    /// The policy the fix names, for this role.
    fn policy(&self) -> String {
        format!(
            "create policy rowbranch_read on public.feedbacks for select to {} using (true);",
            self.role
        )
    }
}

/// The sweep's summary of the one route.
fn summary_of(out: &Output) -> serde_json::Value {
    let all: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("--json is JSON: {}", output_text(out)));
    all[0].clone()
}

/// The doctor's line about row level security, `✓`/`!`/`✗` and its fix.
fn doctor_line(out: &Output) -> String {
    let text = child::stdout(out);
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("row level security"))
        .unwrap_or_else(|| panic!("no row level security line:\n{text}"));
    let mut line = lines[at].to_owned();
    if let Some(fix) = lines.get(at + 1).filter(|l| l.starts_with("    fix: ")) {
        line = format!("{line}\n{fix}");
    }
    line
}

fn ids(summary: &serde_json::Value) -> Vec<String> {
    summary["would_dispatch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_role_with_select_and_no_policy_makes_reconcile_and_doctor_fail_with_the_policy() {
    let table = or_skip!(Table::new("reader", "").await);
    table
        .db
        .execute("alter table public.feedbacks enable row level security")
        .await;

    let out = table.dry_run().await;
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let summary = summary_of(&out);
    assert_eq!(summary["rows_seen"], 0);
    let error = summary["error"].as_str().unwrap();
    assert!(error.contains("no policy lets role"), "{error}");
    assert!(error.contains(&table.policy()), "{error}");
    for args in [&["reconcile", "--dry-run"][..], &["reconcile"]] {
        let text = table.run(args).await;
        assert_eq!(text.status.code(), Some(1), "{args:?}");
        assert!(
            child::stdout(&text).contains(&table.policy()),
            "{args:?}: {}",
            output_text(&text)
        );
    }

    let doctor = table.doctor().await;
    assert_eq!(doctor.status.code(), Some(1), "{}", output_text(&doctor));
    let line = doctor_line(&doctor);
    assert!(
        line.starts_with("✗ row level security is on for table public.feedbacks"),
        "{line}"
    );
    assert!(line.contains(&format!("fix: {}", table.policy())), "{line}");

    // The fix, as the doctor gives it, run as the table's owner.
    table.db.execute(&table.policy()).await;
    let out = table.dry_run().await;
    assert!(out.status.success(), "{}", output_text(&out));
    let summary = summary_of(&out);
    assert_eq!(summary["rows_seen"], 2);
    assert_eq!(ids(&summary), ["1", "2"]);
    assert!(summary["warning"].is_null(), "{summary}");
    let doctor = table.doctor().await;
    assert!(doctor.status.success(), "{}", output_text(&doctor));
    assert!(
        doctor_line(&doctor).starts_with("✓ "),
        "{}",
        doctor_line(&doctor)
    );
}

/// `serve`'s scheduled sweep meets the same: the route's run counts as failed, not as a sweep
/// of an empty table.
#[tokio::test]
async fn a_scheduled_sweep_that_cannot_see_counts_as_failed() {
    let table = or_skip!(Table::new("reader", "").await);
    table
        .db
        .execute("alter table public.feedbacks enable row level security")
        .await;
    let app = spawn_app(
        Options::default()
            .top("reconcile_every = \"1h\"")
            .env("DATABASE_URL", &table.url),
    )
    .await;
    // The first sweep comes 10 s after start.
    let failed = r#"rowbranch_reconcile_runs_total{result="failed"} 1"#;
    let metrics = eventually_within(
        "a failed scheduled sweep",
        Duration::from_secs(40),
        || async {
            let text = app.get("/metrics").await.text;
            text.contains(failed).then_some(text)
        },
    )
    .await;
    assert!(
        !metrics.contains(r#"rowbranch_reconcile_runs_total{result="ok"} 1"#),
        "{metrics}"
    );
    assert!(app.dispatches().is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn redo_and_explain_say_that_the_role_cannot_see_the_row() {
    let table = or_skip!(Table::new("reader", "").await);
    table
        .db
        .execute("alter table public.feedbacks enable row level security")
        .await;

    let redo = table
        .run(&["redo", "--table", "feedbacks", "--id", "1", "--yes"])
        .await;
    assert_eq!(redo.status.code(), Some(1), "{}", output_text(&redo));
    let said = child::stderr(&redo);
    assert!(
        said.contains("has no row with id = 1 that DATABASE_URL's role can see"),
        "{said}"
    );
    assert!(said.contains(&table.policy()), "{said}");

    let explain = table
        .run(&["explain", "--table", "feedbacks", "--id", "1", "--json"])
        .await;
    assert_eq!(explain.status.code(), Some(1), "{}", output_text(&explain));
    let report: serde_json::Value = serde_json::from_slice(&explain.stdout).unwrap();
    assert_eq!(report["row"]["status"], "unreachable", "{report}");
    let error = report["unreachable"][0]["error"].as_str().unwrap();
    assert!(error.contains(&table.policy()), "{error}");
    assert_eq!(report["reconcile"]["verdict"], "unknown");
}

#[tokio::test]
async fn a_conditional_policy_is_a_warning_and_the_sweep_sees_the_rows_it_lets_through() {
    let table = or_skip!(Table::new("reader", "").await);
    table
        .db
        .execute(&format!(
            "alter table public.feedbacks enable row level security;
             create policy only_later on public.feedbacks for select to {} using (id > 1);",
            ident(&table.role)
        ))
        .await;

    let out = table.dry_run().await;
    assert!(out.status.success(), "{}", output_text(&out));
    let summary = summary_of(&out);
    assert_eq!(summary["rows_seen"], 1);
    assert_eq!(ids(&summary), ["2"]);
    let warning = summary["warning"].as_str().unwrap();
    assert!(
        warning.contains("only_later: using ((id > 1))"),
        "{warning}"
    );
    assert!(
        warning.contains("the sweep sees only the rows the policy lets it see"),
        "{warning}"
    );
    let text = table.run(&["reconcile", "--dry-run"]).await;
    assert!(
        child::stdout(&text).contains("  warning: row level security"),
        "{}",
        output_text(&text)
    );

    let doctor = table.doctor().await;
    assert!(doctor.status.success(), "{}", output_text(&doctor));
    let line = doctor_line(&doctor);
    assert!(
        line.starts_with("! row level security is on for table public.feedbacks"),
        "{line}"
    );
    assert!(line.contains(&table.policy()), "{line}");

    // A row the policy hides is "no row" with the reason beside it.
    let redo = table
        .run(&["redo", "--table", "feedbacks", "--id", "1", "--yes"])
        .await;
    assert_eq!(redo.status.code(), Some(1));
    assert!(
        child::stderr(&redo).contains("only_later: using ((id > 1))"),
        "{}",
        output_text(&redo)
    );
    let explain = table
        .run(&["explain", "--table", "feedbacks", "--id", "1", "--json"])
        .await;
    assert!(explain.status.success(), "{}", output_text(&explain));
    let report: serde_json::Value = serde_json::from_slice(&explain.stdout).unwrap();
    assert_eq!(report["row"]["status"], "missing");
    assert!(
        report["row"]["detail"]
            .as_str()
            .unwrap()
            .contains("only_later"),
        "{report}"
    );
}

#[tokio::test]
async fn forced_row_level_security_binds_the_owner_and_is_detected() {
    let table = or_skip!(Table::new("owner", "").await);
    table
        .db
        .execute(&format!(
            "alter table public.feedbacks owner to {};
             alter table public.feedbacks enable row level security;",
            ident(&table.role)
        ))
        .await;
    // Enabled but not forced: the owner reads every row.
    let out = table.dry_run().await;
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(summary_of(&out)["rows_seen"], 2);
    let doctor = table.doctor().await;
    assert!(
        doctor_line(&doctor).contains("owns the table"),
        "{}",
        doctor_line(&doctor)
    );

    table
        .db
        .execute("alter table public.feedbacks force row level security")
        .await;
    let out = table.dry_run().await;
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let error = summary_of(&out)["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("forced on table public.feedbacks, which binds its owner"),
        "{error}"
    );
    assert!(error.contains(&table.policy()), "{error}");
    let doctor = table.doctor().await;
    assert_eq!(doctor.status.code(), Some(1), "{}", output_text(&doctor));
    assert!(
        doctor_line(&doctor).starts_with("✗ "),
        "{}",
        doctor_line(&doctor)
    );
}

#[tokio::test]
async fn a_bypassrls_role_sees_every_row() {
    let table = or_skip!(Table::new("bypass", "bypassrls").await);
    table
        .db
        .execute("alter table public.feedbacks enable row level security, force row level security")
        .await;
    let out = table.dry_run().await;
    assert!(out.status.success(), "{}", output_text(&out));
    let summary = summary_of(&out);
    assert_eq!(summary["rows_seen"], 2);
    assert!(summary["warning"].is_null(), "{summary}");
    let doctor = table.doctor().await;
    assert!(doctor.status.success(), "{}", output_text(&doctor));
    let line = doctor_line(&doctor);
    assert!(
        line.starts_with("✓ ") && line.contains("bypasses"),
        "{line}"
    );
}

/// docs/queue.md's role, with row level security off: nothing to say, every row seen.
#[tokio::test]
async fn without_row_level_security_doctor_says_nothing_of_it() {
    let table = or_skip!(Table::new("reader", "").await);
    let out = table.dry_run().await;
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(summary_of(&out)["rows_seen"], 2);
    let doctor = table.doctor().await;
    assert!(doctor.status.success(), "{}", output_text(&doctor));
    assert!(!child::stdout(&doctor).contains("row level security"));
}

/// The sweep's role of a webhook route without SELECT on the table: `doctor` fails with the one
/// grant to make, as runnable SQL naming the role, and `reconcile` fails as it said; once the
/// grant is made, `doctor`'s check passes and `reconcile --dry-run` runs as the role.
#[tokio::test]
async fn a_role_without_select_fails_doctor_with_the_grant_after_which_reconcile_runs() {
    let table = or_skip!(Table::new("unread", "").await);
    let role = ident(&table.role);
    table
        .db
        .execute(&format!("revoke select on public.feedbacks from {role}"))
        .await;

    let out = table.doctor().await;
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let text = child::stdout(&out);
    assert!(
        text.contains("✗ the role in DATABASE_URL may not read public.feedbacks: ERROR: permission denied for table feedbacks"),
        "{text}"
    );
    // The role's name needs no quotes, so the grant names it bare, as the fix's SQL does.
    let grant = format!("grant select on public.feedbacks to {};", table.role);
    let grants: Vec<&str> = (text.lines().map(str::trim))
        .filter(|l| l.starts_with("grant "))
        .collect();
    assert_eq!(grants, [grant.as_str()], "{text}");
    let out = table.dry_run().await;
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("permission denied for table feedbacks"),
        "{}",
        output_text(&out)
    );

    table.db.execute(&grant).await;
    let text = child::stdout(&table.doctor().await);
    assert!(
        text.contains("✓ public.feedbacks has the route's columns: id, message, created_at, readable by the role in DATABASE_URL"),
        "{text}"
    );
    let out = table.dry_run().await;
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(summary_of(&out)["rows_seen"], 2);
    let out = table
        .run(&["explain", "--table", "feedbacks", "--id", "1"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
}

#[tokio::test]
async fn writing_states_back_needs_update_on_the_columns_and_a_policy_which_the_fixes_give() {
    let table = or_skip!(Table::new("writer", "").await);
    table
        .db
        .execute(&format!(
            "alter table public.feedbacks add column rowbranch_status text;
             alter table public.feedbacks enable row level security;
             create policy reads on public.feedbacks for select to {} using (true);",
            ident(&table.role)
        ))
        .await;
    let config = format!(
        "[forge]\nkind = \"local\"\npath = \"repo.git\"\n{FEEDBACK_ROUTE}status_column = \"rowbranch_status\"\n"
    );
    std::fs::write(table.dir.path().join("rowbranch.toml"), config).unwrap();
    // The role's line, `✗ …` and the SQL of its fix, run as printed.
    let failed = |out: &Output, what: &str| -> String {
        let text = child::stdout(out);
        let lines: Vec<&str> = text.lines().collect();
        let at = (lines.iter())
            .position(|l| l.starts_with('✗') && l.contains(what))
            .unwrap_or_else(|| panic!("no failed line of {what:?}:\n{}", output_text(out)));
        let sql: Vec<&str> = (lines[at + 1..].iter())
            .take_while(|l| l.starts_with("    "))
            .filter(|l| !l.trim_start().starts_with("fix:"))
            .map(|l| l.trim())
            .collect();
        assert!(!sql.is_empty(), "no SQL under: {}", lines[at]);
        sql.join("\n")
    };
    let out = table.doctor().await;
    let grant = failed(
        &out,
        "may not UPDATE rowbranch_status: no state is written back",
    );
    assert_eq!(
        grant,
        format!(
            "grant update (\"rowbranch_status\") on \"public\".\"feedbacks\" to {};",
            table.role
        )
    );
    table.db.execute(&grant).await;
    let out = table.doctor().await;
    let policy = failed(&out, "no policy lets role");
    assert!(
        policy.starts_with(
            "create policy rowbranch_write on \"public\".\"feedbacks\" for update to "
        ),
        "{policy}"
    );
    table.db.execute(&policy).await;
    let out = table.doctor().await;
    let text = child::stdout(&out);
    assert!(
        text.contains("may write rowbranch_status back"),
        "{}",
        output_text(&out)
    );
}
