//! `rowbranch doctor` for a route that reads the queue: the binary as a user runs it, over a
//! local forge, against a real PostgreSQL with pgmq set up by `templates/supabase-queue.sql`,
//! and each way that setup comes undone, with the fix doctor gives tried where it is a grant.
//!
//! A test has a database of its own (`support::db::TestDb`, from the template where pgmq is an
//! extension, as on Supabase), and queues and roles named after it. Without `DATABASE_URL`
//! and that template such a test says why and passes, except under `CI=true`, where it fails.
//! The tests of an unset or unreachable `DATABASE_URL` need no database and always run.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::str::FromStr;

use rowbranch::cmd::init::setup::SetupContext;
use rowbranch::forge::local::create_repository;
use tempfile::TempDir;
use tokio::process::Command;
use tokio_postgres::config::Host;

use crate::support::app::FEEDBACK_ROUTE;
use crate::support::db::{db_message, ident, literal, Install, Template, TestDb};
use crate::support::or_skip;
use crate::support::setup::{apply, create_table, queue_context as context, try_insert};

/// A config with one queue route for `public.feedbacks`, over a fresh local repository.
struct Doctor {
    dir: TempDir,
    queue: String,
    dead: String,
}

impl Doctor {
    /// The route takes `events` (`["INSERT"]`, `["INSERT", "UPDATE"]`); the queues are named
    /// after `tag`.
    async fn new(tag: &str, events: &[&str]) -> Doctor {
        let dir = tempfile::tempdir().expect("no temporary directory");
        let repo = dir.path().join("repo.git");
        create_repository(&repo)
            .await
            .expect("could not create the repository");
        let (queue, dead) = (format!("q{tag}"), format!("q{tag}_dead"));
        let events: Vec<String> = events.iter().map(|e| format!("\"{e}\"")).collect();
        let config = format!(
            "[forge]\nkind = \"local\"\npath = {repo:?}\n\n\
             [pgmq]\nqueue = \"{queue}\"\ndead_letter = \"{dead}\"\n\
             {FEEDBACK_ROUTE}intake = \"pgmq\"\nevents = [{}]\n",
            events.join(", "),
            repo = repo.to_str().expect("a UTF-8 temporary path"),
        );
        std::fs::write(dir.path().join("rowbranch.toml"), config).expect("could not write it");
        Doctor { dir, queue, dead }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("rowbranch.toml")
    }

    /// `rowbranch doctor --config …` with `DATABASE_URL` set to `database_url`, or unset.
    async fn run(&self, database_url: Option<&str>) -> Report {
        self.command(&["doctor"], database_url).await
    }

    /// `rowbranch ARGS --config …` with `DATABASE_URL` set to `database_url`, or unset.
    async fn command(&self, args: &[&str], database_url: Option<&str>) -> Report {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rowbranch"));
        command
            .args(args)
            .arg("--config")
            .arg(self.config())
            .env_remove("RUST_LOG")
            .kill_on_drop(true);
        match database_url {
            Some(url) => command.env("DATABASE_URL", url),
            None => command.env_remove("DATABASE_URL"),
        };
        let out = command.output().await.expect("could not run rowbranch");
        Report {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs supabase-queue.sql again for a route on `events`, after which every check passes.
    async fn passes_after_setup_sql(&self, db: &TestDb, url: &str, events: &[&str]) {
        apply(&db.client, &setup(self, events)).await;
        self.run(Some(url)).await.all_pass();
    }

    /// Hands rowbranch.enqueue() to a role of the test's own that is no superuser, and runs
    /// supabase-queue.sql again to give it what it needs; the role.
    async fn owner_not_superuser(&self, db: &TestDb) -> String {
        let owner = db.role("owner");
        run_sql(
            db,
            &format!(
                "create role {o} nologin; alter function rowbranch.enqueue() owner to {o}",
                o = ident(&owner)
            ),
        )
        .await;
        apply(&db.client, &setup(self, &["INSERT"])).await;
        owner
    }

    /// The trigger as doctor names it.
    fn trigger(&self) -> String {
        format!(
            "\"public\".\"feedbacks\": trigger rowbranch_queue_{0} (rowbranch_queue_{0})",
            self.queue
        )
    }
}

/// What doctor printed, and how it exited.
struct Report {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// One check of the report: `✓ what` or `✗ what` and its `    fix: …` line, with the lines
/// indented under it (a grant each).
struct Line {
    ok: bool,
    what: String,
    fix: Option<String>,
}

impl Report {
    fn lines(&self) -> Vec<Line> {
        let mut lines: Vec<Line> = Vec::new();
        for text in self.stdout.lines() {
            if let Some(what) = text.strip_prefix("✓ ") {
                lines.push(Line {
                    ok: true,
                    what: what.to_owned(),
                    fix: None,
                });
            } else if let Some(what) = text.strip_prefix("✗ ") {
                lines.push(Line {
                    ok: false,
                    what: what.to_owned(),
                    fix: None,
                });
            } else if let Some(fix) = text.strip_prefix("    fix: ") {
                let last = lines
                    .last_mut()
                    .unwrap_or_else(|| panic!("a fix first:\n{self}"));
                last.fix = Some(fix.to_owned());
            } else if let Some(more) = text.strip_prefix("      ") {
                let fix = lines.last_mut().and_then(|l| l.fix.as_mut());
                let fix = fix.unwrap_or_else(|| panic!("a fix first:\n{self}"));
                fix.push('\n');
                fix.push_str(more);
            }
        }
        lines
    }

    /// The one check whose text holds `what`.
    #[track_caller]
    fn line(&self, what: &str) -> Line {
        let mut found: Vec<Line> = self
            .lines()
            .into_iter()
            .filter(|l| l.what.contains(what))
            .collect();
        assert_eq!(found.len(), 1, "one check of {what:?} in:\n{self}");
        found.remove(0)
    }

    /// The passed check whose text holds `what`: its text.
    #[track_caller]
    fn passed(&self, what: &str) -> String {
        let line = self.line(what);
        assert!(line.ok, "{what:?} failed:\n{self}");
        line.what
    }

    /// The failed check whose text holds `what`: its text and its fix.
    #[track_caller]
    fn failed(&self, what: &str) -> (String, String) {
        let line = self.line(what);
        assert!(!line.ok, "{what:?} passed:\n{self}");
        let fix = line
            .fix
            .unwrap_or_else(|| panic!("{what:?} has no fix:\n{self}"));
        (line.what, fix)
    }

    /// Exit 1 with one failed check, the one whose text holds `what`: its text and its fix.
    #[track_caller]
    fn fails_only(&self, what: &str) -> (String, String) {
        self.fails(1);
        self.failed(what)
    }

    #[track_caller]
    fn has_none(&self, what: &str) {
        assert!(
            !self.lines().iter().any(|l| l.what.contains(what)),
            "a check of {what:?} in:\n{self}"
        );
    }

    /// Exit 0, every check passed, and the summary says how many.
    #[track_caller]
    fn all_pass(&self) {
        let lines = self.lines();
        assert_eq!(self.code, Some(0), "doctor failed:\n{self}");
        assert!(lines.iter().all(|l| l.ok), "a check failed:\n{self}");
        let summary = format!("all {} checks pass", lines.len());
        assert!(self.stdout.contains(&summary), "no {summary:?}:\n{self}");
    }

    /// Exit 1, and exactly `n` checks failed.
    #[track_caller]
    fn fails(&self, n: usize) {
        assert_eq!(
            self.code,
            Some(1),
            "doctor did not fail as a check does:\n{self}"
        );
        let failed = self.lines().iter().filter(|l| !l.ok).count();
        assert_eq!(failed, n, "failed checks:\n{self}");
        assert!(
            self.stderr
                .contains(&format!("{n} of {} checks failed", self.lines().len())),
            "{self}"
        );
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `DATABASE_URL` (which `set_up` made sure of), parsed.
fn admin() -> tokio_postgres::Config {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    tokio_postgres::Config::from_str(&url).expect("DATABASE_URL parses")
}

/// `text` as a libpq key=value value.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A connection string for database `dbname` on `DATABASE_URL`'s server, as `DATABASE_URL`'s
/// user or as `login` (user, password), without TLS as the other tests connect.
fn url(dbname: &str, login: Option<(&str, &str)>) -> String {
    let admin = admin();
    let hosts: Vec<String> = admin
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = admin.get_ports().iter().map(u16::to_string).collect();
    let admin_password = admin
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    let (user, password) = match login {
        Some((user, password)) => (user.to_owned(), Some(password.to_owned())),
        None => (
            admin
                .get_user()
                .expect("DATABASE_URL names a user")
                .to_owned(),
            admin_password,
        ),
    };
    let mut pairs = vec![
        format!("host={}", quoted(&hosts.join(","))),
        format!("user={}", quoted(&user)),
        format!("dbname={}", quoted(dbname)),
        "sslmode=disable".to_owned(),
    ];
    if !ports.is_empty() {
        pairs.push(format!("port={}", quoted(&ports.join(","))));
    }
    if let Some(password) = password {
        pairs.push(format!("password={}", quoted(&password)));
    }
    pairs.join(" ")
}

async fn run_sql(db: &TestDb, sql: &str) {
    db.client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", db_message(&e)));
}

/// A database of the test's own (from the template where pgmq is an extension, as on
/// Supabase) with `public.feedbacks` and supabase-queue.sql applied for triggers on
/// `sql_events`; a config whose route takes `route_events`; and the connection string as
/// `DATABASE_URL`'s user. `None` without the database.
async fn set_up(sql_events: &[&str], route_events: &[&str]) -> Option<(TestDb, Doctor, String)> {
    let db = TestDb::create(Template::Pgmq(Install::Extension)).await?;
    create_table(&db.client, "public", "feedbacks").await;
    let doctor = Doctor::new(&db.tag, route_events).await;
    apply(&db.client, &setup(&doctor, sql_events)).await;
    let url = url(&db.name, None);
    Some((db, doctor, url))
}

fn setup(doctor: &Doctor, events: &[&str]) -> SetupContext {
    SetupContext {
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        ..context("public", "feedbacks", &doctor.queue, &doctor.dead)
    }
}

/// The lines `grant … to ROLE;` of a fix, each naming `role`, as one script.
#[track_caller]
fn grants_in(fix: &str, role: &str) -> String {
    let grants: Vec<&str> = fix.lines().filter(|l| l.starts_with("grant ")).collect();
    assert!(!grants.is_empty(), "no grant line in the fix: {fix}");
    for grant in &grants {
        assert!(
            grant.ends_with(&format!(" to {role};")),
            "{grant:?} in: {fix}"
        );
    }
    grants.join("\n")
}

/// A role that logs in with a password of its own, named after the test's database.
async fn login_role(db: &TestDb, name: &str) -> (String, String) {
    let role = db.role(name);
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).expect("no randomness");
    let password = hex::encode(bytes);
    run_sql(
        db,
        &format!(
            "create role {} login password {}",
            ident(&role),
            literal(&password)
        ),
    )
    .await;
    (role, password)
}

#[tokio::test]
async fn after_the_setup_sql_every_queue_check_passes_naming_the_trigger_and_its_owner() {
    let (_db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let report = doctor.run(Some(&url)).await;
    report.all_pass();
    let owner = admin().get_user().expect("a user").to_owned();
    let (queue, dead) = (&doctor.queue, &doctor.dead);
    report.passed("DATABASE_URL connects");
    report.passed(&format!("queue {queue} exists, logged"));
    report.passed(&format!("queue {dead} exists, logged"));
    let trigger = report.passed(&doctor.trigger());
    assert!(
        trigger.ends_with(&format!("sends each row, as {owner}")),
        "{report}"
    );
    report.passed(&format!(
        "rowbranch.enqueue()'s owner {owner} may send to {queue}"
    ));
    report.passed(&format!(
        "DATABASE_URL's role may read, archive and dead-letter {queue} and {dead}"
    ));
    let exposed = report.passed("anon, authenticated and PUBLIC hold no rights");
    assert!(!exposed.contains("pgmq_public"), "{report}");
}

#[tokio::test]
async fn a_disabled_trigger_fails_until_the_setup_sql_runs_again() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let trigger = ident(&format!("rowbranch_queue_{}", doctor.queue));
    // Disabled, and enabled for replication only (which an ordinary session never is).
    for how in ["disable trigger", "enable replica trigger"] {
        run_sql(
            &db,
            &format!("alter table public.feedbacks {how} {trigger}"),
        )
        .await;
        let report = doctor.run(Some(&url)).await;
        let (what, fix) = report.fails_only(&doctor.trigger());
        assert!(what.ends_with(" is disabled"), "{how}: {report}");
        assert!(fix.contains("run supabase-queue.sql"), "{report}");
    }

    doctor.passes_after_setup_sql(&db, &url, &["INSERT"]).await;
}

#[tokio::test]
async fn a_missing_trigger_fails_and_the_checks_after_it_still_run() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let trigger = ident(&format!("rowbranch_queue_{}", doctor.queue));
    run_sql(&db, &format!("drop trigger {trigger} on public.feedbacks")).await;
    let report = doctor.run(Some(&url)).await;
    let (what, fix) = report.fails_only(&format!(
        "\"public\".\"feedbacks\": trigger rowbranch_queue_{}",
        doctor.queue
    ));
    assert!(
        what.ends_with(" is missing: its rows never reach the queue"),
        "{report}"
    );
    assert!(fix.contains("run supabase-queue.sql"), "{report}");
    report.passed("DATABASE_URL's role may read, archive and dead-letter");
    report.passed("anon, authenticated and PUBLIC hold no rights");

    doctor.passes_after_setup_sql(&db, &url, &["INSERT"]).await;
}

#[tokio::test]
async fn a_route_that_takes_updates_fails_on_a_trigger_fired_only_on_insert() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT", "UPDATE"]).await);
    let report = doctor.run(Some(&url)).await;
    let (what, fix) = report.fails_only(&doctor.trigger());
    assert!(what.ends_with(" is not fired on UPDATE"), "{report}");
    assert!(fix.contains("run supabase-queue.sql"), "{report}");

    doctor
        .passes_after_setup_sql(&db, &url, &["INSERT", "UPDATE"])
        .await;
}

#[tokio::test]
async fn a_dropped_dead_letter_queue_fails_and_stops_the_queue_checks() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    run_sql(
        &db,
        &format!("select pgmq.drop_queue({}::text)", literal(&doctor.dead)),
    )
    .await;
    let report = doctor.run(Some(&url)).await;
    report.fails(1);
    report.passed(&format!("queue {} exists, logged", doctor.queue));
    let (_, fix) = report.failed(&format!("queue {} does not exist", doctor.dead));
    assert!(fix.contains("run supabase-queue.sql"), "{report}");
    // Without both queues the trigger and the rights are not worth checking.
    report.has_none("\"public\".\"feedbacks\"");
    report.has_none("rowbranch.enqueue()");
    report.has_none("DATABASE_URL's role");

    doctor.passes_after_setup_sql(&db, &url, &["INSERT"]).await;
}

#[tokio::test]
async fn an_unlogged_dead_letter_queue_fails_until_remade_as_the_fix_says() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let dead = literal(&doctor.dead);
    run_sql(
        &db,
        &format!("select pgmq.drop_queue({dead}::text); select pgmq.create_unlogged({dead}::text)"),
    )
    .await;
    let report = doctor.run(Some(&url)).await;
    let (_, fix) = report.fails_only(&format!(
        "queue {} is unlogged: a crash of the database empties it",
        doctor.dead
    ));
    assert!(
        fix.contains("drop_queue") && fix.contains("run supabase-queue.sql"),
        "{report}"
    );
    // An unlogged queue is still a queue: the checks after it run.
    report.passed(&doctor.trigger());

    run_sql(&db, &format!("select pgmq.drop_queue({dead}::text)")).await;
    doctor.passes_after_setup_sql(&db, &url, &["INSERT"]).await;
}

#[tokio::test]
async fn rights_of_anon_and_public_on_the_queue_fail_and_the_advised_revoke_clears_them() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    // anon is a role of the whole server: made once, never dropped; its grants here go
    // with this database. authenticated is not made: the revoke must not need it. And
    // Supabase's pgmq_public, a function of which anon may execute. And a role of this
    // test's own that anon is a member of, with a right on the dead letters: inherited.
    let q = format!("pgmq.q_{}", doctor.queue);
    let dead_q = format!("pgmq.q_{}", doctor.dead);
    let via = format!("rb_via_{}", doctor.queue);
    run_sql(
        &db,
        &format!(
            "do $$ begin create role anon nologin;
             exception when duplicate_object or unique_violation then null; end $$;
             grant select on {q} to anon;
             grant insert on {q} to public;
             create role {via} nologin;
             grant select on {dead_q} to {via};
             grant {via} to anon;
             create schema pgmq_public;
             create function pgmq_public.pop() returns int language sql as 'select 1';"
        ),
    )
    .await;
    let report = doctor.run(Some(&url)).await;
    let (what, fix) = report.fails_only("the queue is open to the Data API's roles");
    for part in [
        // Its own SELECT, and PUBLIC's INSERT, which every role has.
        format!("anon has INSERT, SELECT on {q}"),
        format!("PUBLIC has INSERT on {q}"),
        format!("anon has SELECT on {dead_q}"),
        "pgmq_public lets them call pgmq".to_owned(),
    ] {
        assert!(what.contains(&part), "no {part:?}: {report}");
    }
    assert!(fix.contains("inherits from another role"), "{report}");
    let revoke = fix
        .split_once("; and leave")
        .map(|(revoke, _)| revoke)
        .unwrap_or_else(|| panic!("no revoke in the fix: {report}"));
    assert!(revoke.starts_with("revoke all on "), "{report}");
    let from: BTreeSet<&str> = revoke
        .rsplit_once(" from ")
        .map(|(_, roles)| roles.split(", ").collect())
        .unwrap_or_default();
    assert_eq!(
        from,
        BTreeSet::from(["anon", "public"]),
        "the revoke names the roles that hold rights: {report}"
    );

    run_sql(&db, revoke).await;
    let report = doctor.run(Some(&url)).await;
    let (what, _) = report.fails_only("the queue is open to the Data API's roles");
    assert!(
        what.contains(&format!("anon has SELECT on {dead_q}")) && !what.contains("PUBLIC"),
        "the inherited right is still there: {report}"
    );
    run_sql(
        &db,
        &format!("revoke select on {dead_q} from {via}; revoke {via} from anon; drop role {via};"),
    )
    .await;
    let report = doctor.run(Some(&url)).await;
    report.all_pass();
    let exposed = report.passed("anon, authenticated and PUBLIC hold no rights");
    assert!(exposed.contains("pgmq_public"), "{report}");
}

#[tokio::test]
async fn a_role_without_rights_on_pgmq_is_told_the_grants_that_make_doctor_pass() {
    let (db, doctor, admin_url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let (role, password) = login_role(&db, "reader").await;
    let url = url(&db.name, Some((&role, &password)));
    let (queue, dead) = (&doctor.queue, &doctor.dead);

    // Every grant it lacks, in one run: pgmq's, and the route's table's.
    let report = doctor.run(Some(&url)).await;
    report.fails(3);
    report.passed("DATABASE_URL connects");
    let (what, _) = report.failed("pgmq.list_queues() fails");
    assert!(
        what.contains("permission denied for schema pgmq"),
        "{report}"
    );
    // The catalog tells any role about the trigger and its owner.
    report.passed(&doctor.trigger());
    report.passed("anon, authenticated and PUBLIC hold no rights");
    let (what, fix) = report.failed("DATABASE_URL's role lacks");
    for right in [
        "USAGE on pgmq".to_owned(),
        "SELECT on pgmq.meta".to_owned(),
        format!("SELECT on pgmq.\"q_{queue}\""),
        format!("UPDATE on pgmq.\"q_{queue}\""),
        format!("DELETE on pgmq.\"a_{queue}\""),
        format!("INSERT on pgmq.\"q_{dead}\""),
        format!("SELECT on pgmq.\"q_{queue}_msg_id_seq\""),
    ] {
        assert!(what.contains(&right), "no {right:?}: {report}");
    }
    // One line a grant, naming the role.
    for line in [
        format!("grant usage on schema pgmq to {role};"),
        format!("grant select on pgmq.meta to {role};"),
        format!("grant select, insert, update, delete on pgmq.\"q_{queue}\" to {role};"),
        format!("grant select on sequence pgmq.\"q_{queue}_msg_id_seq\" to {role};"),
    ] {
        assert!(fix.lines().any(|l| l == line), "no {line:?}: {report}");
    }
    let (what, table_fix) = report.failed("the role in DATABASE_URL may not read public.feedbacks");
    assert!(
        what.contains("permission denied for table feedbacks"),
        "{report}"
    );
    let grant = format!("grant select on public.feedbacks to {role};");
    assert!(table_fix.lines().any(|l| l == grant), "{report}");
    run_sql(&db, &grants_in(&fix, &role)).await;
    run_sql(&db, &grants_in(&table_fix, &role)).await;

    let report = doctor.run(Some(&url)).await;
    report.all_pass();
    report.passed(&format!("queue {queue} exists, logged"));
    report.passed(&format!("queue {dead} exists, logged"));
    report.passed(&format!(
        "DATABASE_URL's role may read, archive and dead-letter {queue} and {dead}"
    ));
    // With exactly the grants doctor named, the commands that read the table run as the role.
    let reconcile = doctor
        .command(&["reconcile", "--dry-run"], Some(&url))
        .await;
    assert_eq!(reconcile.code, Some(0), "{reconcile}");
    // The same report as rowbranch's own role as for the owner of it all.
    doctor.run(Some(&admin_url)).await.all_pass();
}

#[tokio::test]
async fn a_role_without_select_on_the_table_fails_with_the_grant_that_lets_reconcile_run() {
    let (db, doctor, admin_url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let (role, password) = login_role(&db, "sweeper").await;
    let url = url(&db.name, Some((&role, &password)));
    // Everything the queue needs, as the queue's check says, and nothing on the table.
    let report = doctor.run(Some(&url)).await;
    let (_, fix) = report.failed("DATABASE_URL's role lacks");
    run_sql(&db, &grants_in(&fix, &role)).await;

    let report = doctor.run(Some(&url)).await;
    let (what, fix) = report.fails_only("the role in DATABASE_URL may not read public.feedbacks");
    assert!(
        what.contains("permission denied for table feedbacks"),
        "{report}"
    );
    assert_eq!(
        grants_in(&fix, &role),
        format!("grant select on public.feedbacks to {role};"),
        "{report}"
    );
    let reconcile = doctor
        .command(&["reconcile", "--dry-run"], Some(&url))
        .await;
    assert_ne!(reconcile.code, Some(0), "{reconcile}");
    assert!(
        reconcile
            .to_string()
            .contains("permission denied for table feedbacks"),
        "{reconcile}"
    );

    run_sql(&db, &grants_in(&fix, &role)).await;
    doctor.run(Some(&url)).await.all_pass();
    let reconcile = doctor
        .command(&["reconcile", "--dry-run"], Some(&url))
        .await;
    assert_eq!(reconcile.code, Some(0), "{reconcile}");
    doctor.run(Some(&admin_url)).await.all_pass();
}

#[tokio::test]
async fn an_owner_of_the_function_without_insert_on_the_queue_fails_naming_it() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let owner = doctor.owner_not_superuser(&db).await;
    let queue = &doctor.queue;
    let report = doctor.run(Some(&url)).await;
    report.all_pass();
    let trigger = report.passed(&doctor.trigger());
    assert!(trigger.ends_with(&format!(", as {owner}")), "{report}");
    report.passed(&format!(
        "rowbranch.enqueue()'s owner {owner} may send to {queue}"
    ));

    run_sql(
        &db,
        &format!("revoke insert on pgmq.q_{queue} from {}", ident(&owner)),
    )
    .await;
    let report = doctor.run(Some(&url)).await;
    let (what, fix) = report.fails_only(&format!("rowbranch.enqueue()'s owner {owner}"));
    assert_eq!(
        what,
        format!(
            "rowbranch.enqueue()'s owner {owner} lacks INSERT on pgmq.\"q_{queue}\": every \
             INSERT on \"public\".\"feedbacks\" fails"
        ),
        "{report}"
    );
    assert!(fix.contains("run supabase-queue.sql"), "{report}");
    // As it says: the table takes no row.
    let refused = try_insert(&db.client, "public", "feedbacks", 1, "Lost")
        .await
        .expect_err("an INSERT went through without the owner's right to send");
    assert!(refused.contains("permission denied"), "{refused}");

    doctor.passes_after_setup_sql(&db, &url, &["INSERT"]).await;
}

#[tokio::test]
async fn without_database_url_doctor_fails_and_says_to_set_it() {
    let doctor = Doctor::new("unset", &["INSERT"]).await;
    // Set to nothing is not set either.
    for url in [None, Some("")] {
        let report = doctor.run(url).await;
        report.fails(1);
        report.passed("local repository");
        let (_, fix) = report.failed("a route reads the queue but DATABASE_URL is not set");
        assert!(fix.starts_with("set DATABASE_URL"), "{report}");
        report.has_none("DATABASE_URL connects");
    }
}

#[tokio::test]
async fn a_database_url_at_a_closed_port_fails_to_connect_without_showing_the_password() {
    let doctor = Doctor::new("closed", &["INSERT"]).await;
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("could not bind");
        listener.local_addr().expect("no local address").port()
    };
    let password = "s3cret-never-printed";
    let url = format!("postgres://rowbranch:{password}@127.0.0.1:{port}/rowbranch?sslmode=disable");
    let report = doctor.run(Some(&url)).await;
    let (what, fix) = report.fails_only("DATABASE_URL does not connect");
    assert!(what.contains(&format!("127.0.0.1:{port}")), "{report}");
    assert!(fix.contains("host, port, user and password"), "{report}");
    report.has_none("exists, logged");
    assert!(!report.to_string().contains(password), "{report}");
}

#[tokio::test]
async fn a_before_trigger_or_one_with_more_arguments_fails_since_every_insert_would() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let trigger = ident(&format!("rowbranch_queue_{}", doctor.queue));
    let queue = literal(&doctor.queue);
    for (shape, expected) in [
        ("before insert", "BEFORE, not AFTER, so every INSERT fails"),
        (
            "after insert",
            "given 2 arguments, not the queue's name alone, so every INSERT fails",
        ),
    ] {
        let extra = if shape.starts_with("after") {
            ", 'x'"
        } else {
            ""
        };
        run_sql(
            &db,
            &format!(
                "drop trigger {trigger} on public.feedbacks; \
                 create trigger {trigger} {shape} on public.feedbacks for each row \
                 execute function rowbranch.enqueue({queue}{extra})"
            ),
        )
        .await;
        let report = doctor.run(Some(&url)).await;
        let (what, fix) = report.fails_only(&doctor.trigger());
        assert!(what.ends_with(expected), "{shape}: {report}");
        assert!(fix.contains("run supabase-queue.sql"), "{report}");
        // As it says: the table takes no row.
        try_insert(&db.client, "public", "feedbacks", 1, "Lost")
            .await
            .expect_err("the function refuses to run from this trigger");
    }
    doctor.passes_after_setup_sql(&db, &url, &["INSERT"]).await;
}

#[tokio::test]
async fn an_owner_of_the_function_that_may_not_execute_pgmq_send_fails_with_the_grant_to_make() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let owner = doctor.owner_not_superuser(&db).await;
    run_sql(
        &db,
        "revoke execute on all functions in schema pgmq from public",
    )
    .await;
    let report = doctor.run(Some(&url)).await;
    let (what, fix) = report.fails_only(&format!("rowbranch.enqueue()'s owner {owner}"));
    assert!(what.contains("EXECUTE on send"), "{report}");
    try_insert(&db.client, "public", "feedbacks", 1, "Lost")
        .await
        .expect_err("the owner may not send");
    let grant = fix
        .split("as pgmq's owner: ")
        .nth(1)
        .and_then(|rest| rest.split(" (").next())
        .expect("the fix names the grant");
    run_sql(&db, grant).await;
    doctor.run(Some(&url)).await.all_pass();
    try_insert(&db.client, "public", "feedbacks", 2, "Kept")
        .await
        .expect("the grant the fix names is enough to send");
}

#[tokio::test]
async fn a_gated_route_needs_the_trigger_of_the_approving_update_too() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT", "UPDATE"]).await);
    run_sql(&db, "alter table public.feedbacks add column status text").await;
    let config = std::fs::read_to_string(doctor.config()).unwrap()
        + "run_when = { column = \"status\", equals = \"approved\" }\n";
    std::fs::write(doctor.config(), config).unwrap();
    let report = doctor.run(Some(&url)).await;
    let (what, fix) = report.fails_only(&doctor.trigger());
    assert!(what.ends_with(" is not fired on UPDATE"), "{report}");
    assert!(fix.contains("run supabase-queue.sql"), "{report}");

    // The SQL `init --run-when` writes: two triggers, which together fire on both.
    let gated = SetupContext {
        run_when: Some(rowbranch::config::RunWhen {
            column: "status".into(),
            equals: "approved".into(),
        }),
        ..setup(&doctor, &["INSERT", "UPDATE"])
    };
    apply(&db.client, &gated).await;
    let report = doctor.run(Some(&url)).await;
    report.passed(&format!(
        "\"public\".\"feedbacks\": trigger rowbranch_queue_{0} (rowbranch_queue_{0}, rowbranch_ready_{0}) sends each row",
        doctor.queue
    ));
}

#[tokio::test]
async fn a_gated_webhook_route_needs_its_trigger_to_fire_on_update() {
    let (db, doctor, url) = or_skip!(set_up(&["INSERT"], &["INSERT"]).await);
    let repo = doctor.dir.path().join("repo.git");
    let config = format!(
        "[forge]\nkind = \"local\"\npath = {repo:?}\n{FEEDBACK_ROUTE}events = [\"INSERT\", \"UPDATE\"]\n\
         run_when = {{ column = \"status\", equals = \"approved\" }}\n"
    );
    std::fs::write(doctor.config(), config).unwrap();
    let posts = |events: &str| {
        format!(
            "alter table public.feedbacks add column if not exists status text;
             create or replace function public.posts() returns trigger language plpgsql
               as $f$ begin return null; end $f$;
             drop trigger if exists rowbranch_webhook on public.feedbacks;
             create trigger rowbranch_webhook after {events} on public.feedbacks
               for each row execute function public.posts();"
        )
    };
    let table = "\"public\".\"feedbacks\": trigger rowbranch_webhook";
    run_sql(&db, &posts("insert")).await;
    let report = doctor.run(Some(&url)).await;
    let (what, fix) = report.failed(&format!("{table} does not fire on UPDATE"));
    assert!(
        what.contains(r#"(status = "approved") never reaches rowbranch"#),
        "{report}"
    );
    assert!(fix.contains("init --run-when status="), "{report}");

    run_sql(&db, &posts("insert or update of status")).await;
    let report = doctor.run(Some(&url)).await;
    report.passed(&format!("{table} fires on UPDATE"));
}
