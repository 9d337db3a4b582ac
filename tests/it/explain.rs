//! `rowbranch explain`, as an operator runs it: the binary against a real PostgreSQL and the
//! fake GitHub, or a local git repository. Each test is one row's story — handled, a dead
//! claim, never seen, not in the table, dead-lettered in the queue, on an installation that has
//! not approved Actions: read, a source that cannot be reached — and each holds explain to
//! reading only: the fake sees no write, and the queue's messages keep their read counts and
//! visibility. Without `DATABASE_URL` (and, for the queue, `PGMQ_SQL_TEMPLATE`) a test that
//! needs them says why and passes, except under `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use fake_github::{FakeGithub, Fault, Op, PullState, TEST_APP_PRIVATE_KEY_PEM};
use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::db::{Install, Template, TestDb, TestSchema};
use crate::support::github::{fake as github, INSTALLATION, REPO};
use crate::support::local::write_local_config;
use crate::support::or_skip;
use crate::support::random::random_hex;
use crate::support::setup::{apply, queue_context};

/// A fresh schema with a `feedbacks` table, dropped at the end of the test.
async fn feedbacks() -> Option<TestSchema> {
    let schema = TestSchema::create("explain_").await?;
    schema
        .execute(&format!(
            "create table {} (id bigint primary key, message text, \
             created_at timestamptz not null default now())",
            schema.table("feedbacks")
        ))
        .await;
    Some(schema)
}

/// Row `id` of `schema`'s feedbacks with `text`, created `age` ago.
async fn insert(schema: &TestSchema, id: i64, text: &str, age: Duration) {
    let sql = format!(
        "insert into {} (id, message, created_at) values ($1, $2, now() - make_interval(secs => $3))",
        schema.table("feedbacks")
    );
    schema
        .client
        .execute(&sql, &[&id, &text, &age.as_secs_f64()])
        .await
        .unwrap();
}

fn hours(n: u64) -> Duration {
    Duration::from_secs(n * 3600)
}

/// `rowbranch.toml` in `dir` for the fake and the feedback route on `schema`.
fn github_config(dir: &Path, api_url: &str, app_id: u64, schema: &str) -> PathBuf {
    let text = format!(
        "[github]\napp_id = {app_id}\napi_url = \"{api_url}\"\nretry_budget_ms = 500\n\n\
         [[routes]]\ntable = \"feedbacks\"\nschema = \"{schema}\"\nrepo = \"{REPO}\"\n\
         text_column = \"message\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\"\n"
    );
    let path = dir.join("rowbranch.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// What one run of the command gave.
struct Explained {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Explained {
    /// The `--json` report of a run that exited 0.
    #[track_caller]
    fn answered(&self) -> Value {
        assert_eq!(self.code, 0, "{self}");
        self.json()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("--json printed no JSON ({e}):\n{self}"))
    }
}

impl std::fmt::Display for Explained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `rowbranch explain --table feedbacks --id ID [--json]`, with `DATABASE_URL` as given.
async fn explain(config: &Path, database_url: Option<&str>, id: &str, json: bool) -> Explained {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rowbranch"));
    command
        .arg("explain")
        .arg("--config")
        .arg(config)
        .args(["--table", "feedbacks", "--id", id])
        .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM)
        .env_remove("GITHUB_APP_ID")
        .env_remove("GITHUB_API_URL")
        .env_remove("RUST_LOG");
    if json {
        command.arg("--json");
    }
    match database_url {
        Some(url) => command.env("DATABASE_URL", url),
        None => command.env_remove("DATABASE_URL"),
    };
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().await.expect("the binary runs");
    Explained {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// The `--json` report of row `id`, after its text has been checked to say each of `says`.
async fn explained(config: &Path, database_url: &str, id: &str, says: &[&str]) -> Value {
    contains_all(&explain(config, Some(database_url), id, false).await, says);
    explain(config, Some(database_url), id, true)
        .await
        .answered()
}

/// Explain wrote nothing to the fake, and asked it nothing it did not expect.
#[track_caller]
fn assert_read_only(fake: &FakeGithub) {
    assert!(
        fake.writes().is_empty(),
        "explain wrote: {:?}",
        fake.writes()
    );
    fake.assert_no_unexpected();
}

#[track_caller]
fn contains_all(text: &Explained, expected: &[&str]) {
    for line in expected {
        assert!(text.stdout.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[tokio::test]
async fn a_handled_row_shows_its_branch_ahead_its_merged_pull_request_and_its_run() {
    let table = or_skip!(feedbacks().await);
    insert(&table, 42, "Add dark mode", hours(2)).await;
    let fake = github().await;
    let branch = "feedback/42-add-dark-mode";
    fake.create_branch(REPO, branch, "main");
    let head = fake.push_commit(REPO, branch);
    let pull = fake.add_pull(REPO, branch, PullState::Closed, true);
    let run = fake.add_workflow_run(
        REPO,
        &format!("rowbranch: {branch}"),
        "completed",
        Some("success"),
    );
    // Row 420's, whose id starts the same, and a push run titled like row 42's: neither is row
    // 42's (the id-prefix rule; dispatched runs only).
    fake.create_branch(REPO, "feedback/420-other-row", "main");
    fake.add_pull(REPO, "feedback/420-other-row", PullState::Open, false);
    fake.add_workflow_run(REPO, "rowbranch: feedback/420-other-row", "queued", None);
    fake.add_workflow_run_for(
        REPO,
        "push",
        &format!("rowbranch: {branch}"),
        "queued",
        None,
    );
    let dir = tempfile::tempdir().unwrap();
    let config = github_config(dir.path(), &fake.url(), fake.app_id(), &table.name);

    let report = explain(&config, Some(&table.url), "42", true)
        .await
        .answered();
    assert_eq!(report["version"], 1);
    assert_eq!(report["id"], "42");
    assert_eq!(
        report["route"]["table"],
        format!("{}.feedbacks", table.name)
    );
    assert_eq!(report["route"]["intake"], "webhook");
    assert_eq!(report["row"]["status"], "found");
    assert_eq!(report["row"]["record"]["id"], 42);
    assert_eq!(report["row"]["record"]["message"], "Add dark mode");
    assert_eq!(report["identity"]["branch"], branch);
    assert_eq!(report["identity"]["derived_from"], "row");
    let forge = &report["forge"];
    assert_eq!(forge["kind"], "github");
    assert_eq!(forge["status"], "ok");
    assert_eq!(forge["base"]["branch"], "main");
    assert_eq!(
        forge["branches"],
        json!([{"name": branch, "sha": head, "ahead_by": 1}])
    );
    let pulls = &forge["pull_requests"];
    assert_eq!(pulls["status"], "ok");
    assert_eq!(pulls["items"].as_array().unwrap().len(), 1, "{pulls}");
    assert_eq!(pulls["items"][0]["number"], pull);
    assert_eq!(pulls["items"][0]["merged"], true);
    assert_eq!(pulls["items"][0]["head"], branch);
    let runs = &forge["runs"];
    assert_eq!(runs["status"], "ok");
    assert_eq!(runs["items"].as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs["items"][0]["id"], run);
    assert_eq!(runs["items"][0]["status"], "completed");
    assert_eq!(runs["items"][0]["conclusion"], "success");
    assert_eq!(
        runs["items"][0]["url"],
        format!("https://github.com/{REPO}/actions/runs/{run}")
    );
    assert_eq!(report["queue"], Value::Null);
    assert_eq!(report["reconcile"]["verdict"], "handled");
    assert_eq!(report["reconcile"]["in_window"], true);
    assert_eq!(report["redo"]["verdict"], "would_dispatch");
    assert_eq!(report["redo"]["branch"], format!("{branch}-redo-1"));
    assert_eq!(report["unreachable"], json!([]));

    let text = explain(&config, Some(&table.url), "42", false).await;
    assert_eq!(text.code, 0, "{text}");
    contains_all(
        &text,
        &[
            &format!("row 42 of {}.feedbacks → acme/app (intake webhook)", table.name),
            "table       found, created ",
            "branch      feedback/42-add-dark-mode (from the row's id and text)",
            "forge       github: acme/app, default branch main at ",
            ": 1 commit ahead of main",
            &format!("  pull      #{pull} merged "),
            "  run       #1 completed, success, started ",
            &format!("https://github.com/acme/app/actions/runs/{run}"),
            "  reconcile nothing: a pull request came from a branch of the row",
            "  redo      claim feedback/42-add-dark-mode-redo-1 and dispatch `feedback` (feedback/42-add-dark-mode is taken)",
        ],
    );
    assert!(!text.stdout.contains("feedback/420"), "{text}");
    assert_read_only(&fake);
}

#[tokio::test]
async fn a_dead_claim_and_a_never_seen_row_say_what_reconcile_and_redo_would_do() {
    let table = or_skip!(feedbacks().await);
    insert(&table, 43, "Fix login", hours(3)).await;
    insert(&table, 44, "Export CSV", hours(2)).await;
    let fake = github().await;
    let claimed = fake.create_branch(REPO, "feedback/43-fix-login", "main");
    let dir = tempfile::tempdir().unwrap();
    let config = github_config(dir.path(), &fake.url(), fake.app_id(), &table.name);

    let report = explained(
        &config,
        &table.url,
        "43",
        &[
            ": 0 commits ahead of main (claimed; no work pushed)",
            "no workflow runs of the row since ",
            "  reconcile dispatch `feedback` again on feedback/43-fix-login: a dead claim",
        ],
    )
    .await;
    assert_eq!(
        report["forge"]["branches"],
        json!([{"name": "feedback/43-fix-login", "sha": claimed, "ahead_by": 0}])
    );
    assert_eq!(report["forge"]["pull_requests"]["items"], json!([]));
    assert_eq!(report["forge"]["runs"]["status"], "ok");
    assert_eq!(report["forge"]["runs"]["items"], json!([]));
    assert_eq!(report["reconcile"]["verdict"], "dead_claim");
    assert_eq!(report["reconcile"]["branch"], "feedback/43-fix-login");
    assert_eq!(report["redo"]["branch"], "feedback/43-fix-login-redo-1");

    let report = explained(
        &config,
        &table.url,
        "44",
        &[
            "  branch    none of the row's",
            "  reconcile claim feedback/44-export-csv and dispatch `feedback`: the row has neither a branch nor a pull request",
        ],
    )
    .await;
    assert_eq!(report["identity"]["branch"], "feedback/44-export-csv");
    assert_eq!(report["forge"]["branches"], json!([]));
    assert_eq!(report["reconcile"]["verdict"], "would_dispatch");
    assert_eq!(report["reconcile"]["branch"], "feedback/44-export-csv");
    assert_eq!(report["redo"]["verdict"], "would_dispatch");
    assert_eq!(report["redo"]["branch"], "feedback/44-export-csv");

    // A claim at its base that a run of the work workflow names ran and pushed nothing: the
    // sweep reports it and never dispatches it again, and explain says the same.
    insert(&table, 46, "Ran nothing", hours(2)).await;
    fake.create_branch(REPO, "feedback/46-ran-nothing", "main");
    fake.add_workflow_run(
        REPO,
        "rowbranch: feedback/46-ran-nothing",
        "completed",
        Some("success"),
    );
    let report = explained(
        &config,
        &table.url,
        "46",
        &["  reconcile nothing: feedback/46-ran-nothing is at its base, but a run of the work workflow names it"],
    )
    .await;
    assert_eq!(report["reconcile"]["verdict"], "already_ran");
    assert_eq!(report["reconcile"]["branch"], "feedback/46-ran-nothing");

    // Runs that cannot be read cannot tell it from a dead claim: the sweep would stop there.
    fake.inject(Op::ListRuns, Fault::Status(503), 1_000_000);
    let out = explain(&config, Some(&table.url), "46", true).await;
    assert_eq!(out.code, 1, "{out}");
    let report = out.json();
    assert_eq!(report["forge"]["runs"]["status"], "unreachable", "{out}");
    assert_eq!(report["reconcile"]["verdict"], "unknown", "{out}");
    let says = report["reconcile"]["says"].as_str().unwrap_or_default();
    assert!(
        says.starts_with("unknown: the sweep lists workflow runs"),
        "{out}"
    );
    assert_read_only(&fake);
}

#[tokio::test]
async fn a_row_the_table_does_not_have_is_an_answer_named_from_its_id() {
    let table = or_skip!(feedbacks().await);
    let fake = github().await;
    // The row was deleted after its work: its branch is still there.
    fake.create_branch(REPO, "feedback/999-gone", "main");
    fake.push_commit(REPO, "feedback/999-gone");
    let dir = tempfile::tempdir().unwrap();
    let config = github_config(dir.path(), &fake.url(), fake.app_id(), &table.name);

    // `0999` typed as the bigint column types it is 999.
    let out = explain(&config, Some(&table.url), "0999", true).await;
    let report = out.answered();
    assert_eq!(report["row"]["status"], "missing");
    let detail = report["row"]["detail"].as_str().unwrap();
    assert!(detail.contains("has no row with id = 0999"), "{out}");
    assert_eq!(report["identity"]["id"], "999");
    assert_eq!(report["identity"]["branch"], "feedback/999");
    assert_eq!(report["identity"]["derived_from"], "id");
    assert_eq!(report["forge"]["branches"][0]["name"], "feedback/999-gone");
    assert_eq!(report["reconcile"]["verdict"], "no_row");
    assert_eq!(report["redo"]["verdict"], "cannot");

    let text = explain(&config, Some(&table.url), "abc", false).await;
    assert_eq!(text.code, 0, "{text}");
    contains_all(
        &text,
        &[
            "table       no such row: \"abc\" is no value of the type of",
            "  redo      cannot: it reads the row from the table, which has no such row",
        ],
    );
    assert_read_only(&fake);
}

/// A table without the route's created column is reached, and the answer says what is wrong
/// with the route, not that the database could not be reached.
#[tokio::test]
async fn a_table_without_the_created_column_is_a_misfit_not_an_unreachable_database() {
    let table = or_skip!(feedbacks().await);
    table
        .execute(&format!(
            "alter table {} drop column created_at",
            table.table("feedbacks")
        ))
        .await;
    let fake = github().await;
    let dir = tempfile::tempdir().unwrap();
    let config = github_config(dir.path(), &fake.url(), fake.app_id(), &table.name);
    let out = explain(&config, Some(&table.url), "1", true).await;
    assert_eq!(out.code, 1, "{out}");
    let report: Value = serde_json::from_str(&out.stdout).expect("the report");
    assert_eq!(report["row"]["status"], "misfit", "{out}");
    let detail = report["row"]["detail"].as_str().unwrap();
    assert!(detail.contains("created_at"), "{out}");
    assert!(out.stderr.contains("does not fit its table"), "{out}");
    assert!(!out.stderr.contains("could not reach"), "{out}");
}

#[tokio::test]
async fn without_actions_read_the_runs_are_not_permitted_and_the_rest_is_told() {
    let table = or_skip!(feedbacks().await);
    insert(&table, 45, "Dark mode", hours(2)).await;
    let fake = github().await;
    fake.set_installation_permissions(
        INSTALLATION,
        &[("contents", "write"), ("pull_requests", "read")],
    );
    fake.create_branch(REPO, "feedback/45-dark-mode", "main");
    fake.push_commit(REPO, "feedback/45-dark-mode");
    fake.add_workflow_run(REPO, "rowbranch: feedback/45-dark-mode", "queued", None);
    let dir = tempfile::tempdir().unwrap();
    let config = github_config(dir.path(), &fake.url(), fake.app_id(), &table.name);

    let out = explain(&config, Some(&table.url), "45", true).await;
    assert_eq!(out.code, 0, "not permitted is an answer:\n{out}");
    let report = out.json();
    let runs = &report["forge"]["runs"];
    assert_eq!(runs["status"], "not_permitted");
    let says =
        "not permitted (the App needs Actions: read; approve it in the installation's settings)";
    assert_eq!(runs["detail"], says);
    assert_eq!(runs["items"], json!([]));
    assert_eq!(report["forge"]["branches"][0]["ahead_by"], 1);
    assert_eq!(report["reconcile"]["verdict"], "handled");
    assert_eq!(report["unreachable"], json!([]));
    let text = explain(&config, Some(&table.url), "45", false).await;
    contains_all(&text, &[&format!("  run       {says}")]);
    assert_read_only(&fake);
}

#[tokio::test]
async fn a_source_that_cannot_be_reached_is_named_and_the_rest_is_told() {
    let fake = github().await;
    fake.create_branch(REPO, "feedback/46-x", "main");
    let dir = tempfile::tempdir().unwrap();
    let config = github_config(dir.path(), &fake.url(), fake.app_id(), "public");
    // Nothing listens on port 1.
    let nowhere = "postgres://postgres@127.0.0.1:1/rowbranch?connect_timeout=2";
    let out = explain(&config, Some(nowhere), "46", true).await;
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stderr.contains("could not reach the database"), "{out}");
    let report = out.json();
    assert_eq!(report["row"]["status"], "unreachable");
    assert_eq!(report["unreachable"][0]["source"], "database");
    assert_eq!(report["identity"]["derived_from"], "id");
    assert_eq!(report["forge"]["branches"][0]["name"], "feedback/46-x");
    assert_eq!(report["reconcile"]["verdict"], "unknown");

    // GitHub away, and no DATABASE_URL: the row is not read, which is no failure; the forge is.
    let down = github_config(dir.path(), "http://127.0.0.1:1", fake.app_id(), "public");
    let out = explain(&down, None, "46", false).await;
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stderr.contains("could not reach the forge"), "{out}");
    contains_all(
        &out,
        &[
            "table       not read: DATABASE_URL is not set",
            "branch      feedback/46 (from the id alone",
            "could not reach the forge: ",
        ],
    );

    // Usage: a table no route takes.
    let out = Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(["explain", "--table", "comments", "--id", "1", "--config"])
        .arg(&config)
        .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no route for table comments"));
    assert_read_only(&fake);
}

/// A bare repository with one commit in `dir`, and `branch` at it.
async fn local_repository(dir: &Path, branch: &str) -> String {
    let repo = dir.join("repo.git");
    let base = rowbranch::forge::local::create_repository(&repo)
        .await
        .expect("a repository");
    let sha = base.sha.to_string();
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["update-ref", &format!("refs/heads/{branch}"), &sha])
        .output()
        .expect("git runs");
    assert!(out.status.success(), "{out:?}");
    sha
}

#[tokio::test]
async fn on_the_local_forge_without_a_database_the_id_alone_finds_the_branches() {
    let dir = tempfile::tempdir().unwrap();
    let sha = local_repository(dir.path(), "feedback/7-add-search").await;
    let config = write_local_config(dir.path());
    let report = explain(&config, None, "7", true).await.answered();
    assert_eq!(report["row"]["status"], "not_read");
    assert_eq!(report["identity"]["branch"], "feedback/7");
    assert_eq!(report["forge"]["kind"], "local");
    assert_eq!(
        report["forge"]["branches"],
        json!([{"name": "feedback/7-add-search", "sha": sha, "ahead_by": 0}])
    );
    assert_eq!(report["forge"]["pull_requests"]["status"], "not_kept");
    assert_eq!(report["forge"]["runs"]["status"], "not_kept");
    assert_eq!(
        report["forge"]["runs"]["detail"],
        "the local forge has no workflow runs"
    );
    assert_eq!(report["reconcile"]["verdict"], "unknown");
    assert_eq!(report["redo"]["verdict"], "unknown");
    let text = explain(&config, None, "7", false).await;
    contains_all(
        &text,
        &[
            "  pull      the local forge has no pull requests",
            "  run       the local forge has no workflow runs",
            "  reconcile unknown: it reads the row from DATABASE_URL, which is not set",
        ],
    );
    assert!(
        !dir.path().join("dispatches.jsonl").exists(),
        "explain dispatched"
    );
}

/// Every message of the queue, its archive and the dead letters, with its read count and
/// visibility: what a `pgmq.read` would change.
async fn reads(db: &TestDb, queue: &str, dead: &str) -> Vec<(String, i64, i32, String)> {
    let mut all = Vec::new();
    for table in [
        format!("q_{queue}"),
        format!("a_{queue}"),
        format!("q_{dead}"),
    ] {
        let sql = format!("select msg_id, read_ct, vt::text from pgmq.\"{table}\" order by msg_id");
        let rows = db.query(&sql, &[]).await.unwrap();
        all.extend(
            rows.iter()
                .map(|r| (table.clone(), r.get(0), r.get(1), r.get(2))),
        );
    }
    all
}

#[tokio::test]
async fn a_queue_row_shows_its_dead_letter_and_a_waiting_one_its_message_unread() {
    let db = or_skip!(TestDb::create(Template::Pgmq(Install::Sql)).await);
    let queue = format!("rbx_{}", random_hex(4));
    let dead = format!("{queue}_dead");
    db.execute(
        "create table public.feedbacks (id bigint primary key, message text, \
         created_at timestamptz not null default now())",
    )
    .await;
    apply(&db, &queue_context("public", "feedbacks", &queue, &dead)).await;
    db.execute("insert into public.feedbacks (id, message) values (5, 'Too long'), (6, 'Waiting')")
        .await;
    let first: i64 = db
        .client
        .query_one(
            &format!(
                "select msg_id from pgmq.\"q_{}\" where message -> 'record' ->> 'id' = '5'",
                queue
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let body: String = db
        .client
        .query_one(
            &format!(
                "select message::text from pgmq.\"q_{}\" where msg_id = $1",
                queue
            ),
            &[&first],
        )
        .await
        .unwrap()
        .get(0);
    // As the consumer dead-letters a row GitHub refused: archived and sent on, in one statement.
    let letter = json!({
        "reason": "payload_refused",
        "msg_id": first,
        "message": serde_json::from_str::<Value>(&body).unwrap(),
    });
    let names = |name: &str| rowbranch::identity::QueueName::parse(name).unwrap();
    let dead_id = rowbranch::db::queue::dead_letter(
        &db.client,
        &names(&queue),
        &names(&dead),
        first,
        &letter.to_string(),
    )
    .await
    .unwrap()
    .expect("dead-lettered");

    let dir = tempfile::tempdir().unwrap();
    rowbranch::forge::local::create_repository(&dir.path().join("repo.git"))
        .await
        .expect("a repository");
    let config = dir.path().join("rowbranch.toml");
    std::fs::write(
        &config,
        format!(
            "[forge]\nkind = \"local\"\npath = \"repo.git\"\n\n[pgmq]\nqueue = \"{}\"\n\
             dead_letter = \"{}\"\n\n[[routes]]\ntable = \"feedbacks\"\nrepo = \"acme/app\"\n\
             branch_prefix = \"feedback\"\nevent_type = \"feedback\"\nintake = \"pgmq\"\n",
            queue, dead
        ),
    )
    .unwrap();
    let before = reads(&db, &queue, &dead).await;
    assert_eq!(before.len(), 3, "{before:?}");

    let out = explain(&config, Some(&db.url), "5", true).await;
    let report = out.answered();
    let section = &report["queue"];
    assert_eq!(section["status"], "ok", "{out}");
    assert_eq!(section["queue"], queue.as_str());
    assert_eq!(section["dead_letter"], dead.as_str());
    let messages = section["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{out}");
    assert_eq!(messages[0]["place"], "archive");
    assert_eq!(messages[0]["msg_id"], first);
    assert_eq!(messages[0]["read_ct"], 0);
    assert!(messages[0]["archived_at"].is_string(), "{out}");
    assert_eq!(messages[1]["place"], "dead_letter");
    assert_eq!(messages[1]["msg_id"], dead_id);
    assert_eq!(messages[1]["reason"], "payload_refused");
    assert_eq!(messages[1]["original_msg_id"], first);
    let text = explain(&config, Some(&db.url), "5", false).await;
    contains_all(
        &text,
        &[
            &format!("  message   {first} archived "),
            &format!(
                "  message   dead letter {dead_id} (of message {first}): payload_refused, since "
            ),
            &format!(
                "`rowbranch queue redrive --id {dead_id}` runs it again once the cause is fixed"
            ),
        ],
    );

    let report = explain(&config, Some(&db.url), "6", true).await.answered();
    assert_eq!(report["queue"]["messages"][0]["place"], "queue");
    assert_eq!(report["queue"]["messages"][0]["read_ct"], 0);
    assert_eq!(report["reconcile"]["verdict"], "in_queue");

    assert_eq!(
        reads(&db, &queue, &dead).await,
        before,
        "explain read the queue as a consumer would"
    );
    assert!(
        !dir.path().join("dispatches.jsonl").exists(),
        "explain dispatched"
    );
}

#[tokio::test]
async fn doctor_advises_actions_read_for_explain_and_still_passes_without_it() {
    let fake = github().await;
    fake.add_workflow(
        REPO,
        "rowbranch.yml",
        "on:\n  repository_dispatch:\n    types: [feedback]\njobs: {}\n",
    );
    fake.set_installation_permissions(
        INSTALLATION,
        &[("contents", "write"), ("pull_requests", "read")],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = github_config(dir.path(), &fake.url(), fake.app_id(), "public");
    let out = Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(["doctor", "--config"])
        .arg(&config)
        .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM)
        .env(
            "ROWBRANCH_WEBHOOK_SECRET",
            "a-webhook-secret-of-24-characters-or-more",
        )
        .env_remove("GITHUB_APP_ID")
        .env_remove("GITHUB_API_URL")
        .env_remove("RUST_LOG")
        // The App's permissions are the point here, not a table in the test's database.
        .env_remove("DATABASE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(
            "! acme/app: actions is not granted: `rowbranch explain` cannot list the row's workflow runs, a claim whose run pushed nothing is taken for a dead claim and dispatched (and paid for) again, and no row is marked failed\n    fix: in the App's settings grant Actions: read, then accept the new permissions on the installation"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains('✗'), "{stdout}");
}

#[tokio::test]
async fn a_row_held_at_the_gate_says_so_and_one_that_passes_would_run() {
    let table = or_skip!(feedbacks().await);
    let feedbacks = table.table("feedbacks");
    table
        .execute(&format!(
            "alter table {feedbacks} add column status text, add column rowbranch_status text default 'waiting'"
        ))
        .await;
    insert(&table, 51, "Held", hours(1)).await;
    insert(&table, 52, "Approved", hours(1)).await;
    table
        .execute(&format!(
            "update {feedbacks} set status = 'approved' where id = 52"
        ))
        .await;
    let fake = github().await;
    let dir = tempfile::tempdir().unwrap();
    let config = github_config(dir.path(), &fake.url(), fake.app_id(), &table.name);
    let gated = std::fs::read_to_string(&config).unwrap()
        + "events = [\"INSERT\", \"UPDATE\"]\nrun_when = { column = \"status\", equals = \"approved\" }\n\
           status_column = \"rowbranch_status\"\n";
    std::fs::write(&config, gated).unwrap();

    let report = explained(
        &config,
        &table.url,
        "51",
        &[
            r#"(intake webhook, run_when status = "approved")"#,
            "  reconcile nothing: the row is held at the gate (run_when is status = \"approved\", the row holds null)",
            "state       rowbranch_status = \"waiting\"",
        ],
    )
    .await;
    assert_eq!(report["route"]["run_when"], r#"status = "approved""#);
    assert_eq!(report["route"]["status_column"], "rowbranch_status");
    assert_eq!(report["reconcile"]["verdict"], "not_ready");
    let report = explain(&config, Some(&table.url), "52", true)
        .await
        .answered();
    assert_eq!(report["reconcile"]["verdict"], "would_dispatch");
    assert_read_only(&fake);
}
