//! The sweep against a real PostgreSQL and the fake GitHub: the table is the ground truth, and
//! a second run, or two at once, writes nothing more.

use std::ops::RangeInclusive;
use std::path::Path;
use std::time::{Duration, Instant};

use fake_github::{FakeGithub, PullState, TEST_APP_PRIVATE_KEY_PEM};
use rowbranch::config::Config;
use rowbranch::db::Database;
use rowbranch::startup;
use rowbranch::sweep::{run as sweep, RouteSummary, SweepOptions};
use tokio::process::Command;

use crate::support::app::SWEEP_FROM_LINE;
use crate::support::child;
use crate::support::db::{database_url, TestSchema};
use crate::support::github::{dispatched_branches, fake, GithubOptions, REPO};
use crate::support::or_skip;
use crate::support::random::random_secret;
use crate::support::tools::output_text;

/// How long ago a row was created: within the sweep's hour, or before it.
const A_MINUTE: Duration = Duration::from_secs(60);
const TWO_HOURS: Duration = Duration::from_secs(2 * 3600);

/// A fresh schema with a `feedbacks` table, dropped when the test ends, holding `rows`: each
/// range of ids with its text, created that long ago. `None` (after saying why) without
/// `DATABASE_URL`.
async fn feedbacks(rows: &[(RangeInclusive<i64>, &str, Duration)]) -> Option<TestSchema> {
    let schema = TestSchema::create("reconcile_").await?;
    schema
        .execute(&format!(
            "create table {}.feedbacks (id bigint primary key, message text,
               created_at timestamptz not null default now());",
            schema.name
        ))
        .await;
    for (ids, text, age) in rows {
        insert(&schema, ids.clone(), text, *age).await;
    }
    Some(schema)
}

/// Rows `ids`, each created `age` ago.
async fn insert(table: &TestSchema, ids: RangeInclusive<i64>, text: &str, age: Duration) {
    let sql = format!(
        "insert into {}.feedbacks (id, message, created_at)
         select g, $1, now() - make_interval(secs => $2) from generate_series($3::bigint, $4::bigint) g",
        table.name
    );
    table
        .client
        .execute(&sql, &[&text, &age.as_secs_f64(), ids.start(), ids.end()])
        .await
        .unwrap();
}

fn config(fake: &FakeGithub, schema: &str, url: &str) -> Config {
    config_with(fake, schema, url, SWEEP_FROM_LINE)
}

/// [`config`], with `sweep_from`'s line in its route replaced by `route`.
fn config_with(fake: &FakeGithub, schema: &str, url: &str, route: &str) -> Config {
    let text = GithubOptions {
        write_interval_ms: 5,
        ..GithubOptions::default()
    }
    .config_text(fake)
    .replace(
        "[[routes]]\n",
        &format!("[[routes]]\nschema = \"{schema}\"\n"),
    )
    .replace(SWEEP_FROM_LINE, route);
    let secret = random_secret();
    let url = url.to_owned();
    let env = move |key: &str| match key {
        "ROWBRANCH_WEBHOOK_SECRET" => Some(secret.clone()),
        "GITHUB_APP_PRIVATE_KEY" => Some(TEST_APP_PRIVATE_KEY_PEM.to_owned()),
        "DATABASE_URL" => Some(url.clone()),
        _ => None,
    };
    Config::parse(&text, std::path::Path::new("rowbranch.toml"), &env).unwrap()
}

fn options() -> SweepOptions {
    SweepOptions {
        window: Duration::from_secs(3600),
        stale_claim_after: Duration::from_secs(3600),
        dry_run: false,
        concurrency: 4,
        page_size: 3,
        pgmq: crate::support::child::default_pgmq(),
        scheduled: false,
        states_only: false,
    }
}

async fn run(config: &Config, options: &SweepOptions) -> RouteSummary {
    let rows = Database::connect(config.database_url.as_ref().unwrap().expose())
        .await
        .unwrap();
    let shared = startup::Shared::default();
    let forge = startup::forge(config, &shared).await.unwrap();
    let pipeline = startup::pipeline(config, forge, &shared);
    let routes = rowbranch::pipeline::Routes::compile(config).unwrap();
    let mut summaries = sweep(&routes, &rows, &pipeline, options, &|_| {}).await;
    pipeline.drain().await;
    summaries.remove(0)
}

/// The binary in `dir`, with `DATABASE_URL` at `url` and the App's key, as a user runs it.
fn rowbranch_on(dir: &Path, url: &str) -> Command {
    let mut command = child::rowbranch(dir);
    command
        .env("DATABASE_URL", url)
        .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM);
    command
}

/// Branches for rows `ids` that the workflow finished (one commit ahead of base).
fn finished(fake: &FakeGithub, ids: std::ops::RangeInclusive<i64>) {
    for id in ids {
        let branch = format!("feedback/{id}-earlier");
        fake.create_branch(REPO, &branch, "main");
        fake.push_commit(REPO, &branch);
    }
}

fn dispatched_ids(fake: &FakeGithub) -> Vec<String> {
    let mut ids: Vec<String> = fake
        .dispatches(REPO)
        .iter()
        .map(|d| d.client_payload["id"].as_str().unwrap_or("").to_owned())
        .collect();
    ids.sort_by_key(|id| id.parse::<i64>().unwrap_or(0));
    ids
}

#[tokio::test]
async fn rows_without_a_branch_or_pull_request_are_dispatched_once() {
    let table = or_skip!(feedbacks(&[(1..=10, "Make it faster", A_MINUTE)]).await);
    let fake = fake().await;
    finished(&fake, 1..=4);
    fake.add_pull(REPO, "feedback/5-old-text", PullState::Closed, true);
    let config = config(&fake, &table.name, &table.url);

    let summary = run(&config, &options()).await;
    assert_eq!(summary.rows_seen, 10);
    assert_eq!(summary.already_handled, 4);
    assert_eq!(summary.merged_before, 1);
    assert_eq!(summary.dispatched_now, 5);
    assert_eq!(summary.failed, 0, "{:?}", summary.failures);
    assert_eq!(dispatched_ids(&fake), ["6", "7", "8", "9", "10"]);

    let writes = fake.writes().len();
    let again = run(&config, &options()).await;
    assert_eq!(again.dispatched_now, 0);
    assert_eq!(again.already_handled, 9);
    assert_eq!(fake.writes().len(), writes, "a second run writes nothing");
    fake.assert_no_unexpected();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweeps_at_once_dispatch_no_row_twice() {
    let table = or_skip!(feedbacks(&[(1..=12, "Concurrent", A_MINUTE)]).await);
    let fake = fake().await;
    let config = config(&fake, &table.name, &table.url);
    let opts = options();
    let (a, b) = tokio::join!(run(&config, &opts), run(&config, &opts));
    assert_eq!(a.dispatched_now + b.dispatched_now, 12, "{a:?} {b:?}");
    let mut branches = dispatched_branches(&fake);
    assert_eq!(branches.len(), 12);
    branches.dedup();
    assert_eq!(branches.len(), 12, "no row twice");
}

#[tokio::test]
async fn a_stale_claim_is_dispatched_again_and_a_finished_row_is_not() {
    let table = or_skip!(
        feedbacks(&[
            (20..=20, "Lost dispatch", TWO_HOURS),
            (21..=21, "Finished work", TWO_HOURS),
            (22..=22, "Young claim", A_MINUTE)
        ])
        .await
    );
    let fake = fake().await;
    fake.create_branch(REPO, "feedback/20-lost-dispatch", "main");
    finished(&fake, 21..=21);
    fake.create_branch(REPO, "feedback/22-young-claim", "main");
    let config = config(&fake, &table.name, &table.url);
    let options = SweepOptions {
        window: Duration::from_secs(3 * 3600),
        ..options()
    };

    let dry = run(
        &config,
        &SweepOptions {
            dry_run: true,
            ..options.clone()
        },
    )
    .await;
    assert_eq!(dry.dead_claims, ["feedback/20-lost-dispatch"]);
    assert!(fake.dispatches(REPO).is_empty(), "a dry run writes nothing");

    let summary = run(&config, &options).await;
    assert_eq!(summary.dead_claims_redispatched, 1, "{summary:?}");
    assert_eq!(summary.dispatched_now, 0);
    assert_eq!(dispatched_branches(&fake), ["feedback/20-lost-dispatch"]);
}

#[tokio::test]
async fn a_merged_row_whose_text_was_edited_is_not_dispatched() {
    let table = or_skip!(feedbacks(&[(7..=7, "A completely new text", A_MINUTE)]).await);
    let fake = fake().await;
    fake.add_pull(REPO, "feedback/7-the-old-text", PullState::Closed, true);
    let config = config(&fake, &table.name, &table.url);
    let summary = run(&config, &options()).await;
    assert_eq!(summary.merged_before, 1);
    assert!(fake.dispatches(REPO).is_empty());
}

#[tokio::test]
async fn a_dry_run_lists_what_it_would_dispatch_and_writes_nothing() {
    let table = or_skip!(feedbacks(&[(1..=5, "Dry", A_MINUTE)]).await);
    let fake = fake().await;
    finished(&fake, 1..=2);
    let config = config(&fake, &table.name, &table.url);
    let summary = run(
        &config,
        &SweepOptions {
            dry_run: true,
            ..options()
        },
    )
    .await;
    assert_eq!(summary.would_dispatch, ["3", "4", "5"]);
    assert!(fake.writes().is_empty());
}

#[tokio::test]
async fn a_missing_table_is_an_error_that_names_it() {
    let url = or_skip!(database_url());
    let fake = fake().await;
    let config = config(&fake, "no_such_schema", &url);
    let rows = Database::connect(&url).await.unwrap();
    let shared = startup::Shared::default();
    let forge = startup::forge(&config, &shared).await.unwrap();
    let pipeline = startup::pipeline(&config, forge, &shared);
    let routes = rowbranch::pipeline::Routes::compile(&config).unwrap();
    let summaries = sweep(&routes, &rows, &pipeline, &options(), &|_| {}).await;
    let text = summaries[0]
        .error
        .clone()
        .expect("the route's sweep stopped");
    assert!(
        text.contains("no_such_schema") && text.contains("feedbacks"),
        "{text}"
    );
}

/// The binary's `redo`: a merged row is claimed and dispatched again; a second redo takes
/// `-redo-1`.
#[tokio::test]
async fn redo_claims_a_merged_row_again_and_then_the_next_redo_branch() {
    let table = or_skip!(feedbacks(&[(5..=5, "Fix login", A_MINUTE)]).await);
    let fake = fake().await;
    fake.add_pull(REPO, "feedback/5-fix-login", PullState::Closed, true);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rowbranch.toml");
    let text = GithubOptions::default().config_text(&fake).replace(
        "[[routes]]\n",
        &format!("[[routes]]\nschema = \"{}\"\n", table.name),
    );
    std::fs::write(&path, text).unwrap();
    let redo = |yes: bool| {
        let mut command = rowbranch_on(dir.path(), &table.url);
        command.args(["redo", "--table", "feedbacks", "--id", "5", "--config"]);
        command.arg(&path);
        if yes {
            command.arg("--yes");
        }
        async move { child::run(&mut command).await }
    };
    let asked = redo(false).await;
    assert_eq!(
        asked.status.code(),
        Some(2),
        "without a terminal, --yes is needed"
    );
    assert!(fake.writes().is_empty());

    let first = redo(true).await;
    assert!(first.status.success(), "{}", output_text(&first));
    let out = child::stdout(&first);
    assert!(out.contains("feedback/5-fix-login"), "{out}");
    let second = redo(true).await;
    let out = child::stdout(&second);
    assert!(second.status.success(), "{out}");
    assert!(out.contains("feedback/5-fix-login-redo-1"), "{out}");
    assert_eq!(
        dispatched_branches(&fake),
        ["feedback/5-fix-login", "feedback/5-fix-login-redo-1"]
    );
}

/// A measurement, not a check of speed: sweeps 200,000 rows with `--dry-run` against a local
/// forge seeded with branches for half of them, and prints the time and peak memory.
/// Run: `cargo test --release --test it sweep_of_200k -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a benchmark: run it on purpose"]
async fn sweep_of_200k_rows_dry_run_measured() {
    let table = or_skip!(feedbacks(&[(1..=200_000, "Row", A_MINUTE)]).await);
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo.git");
    let base = rowbranch::forge::local::create_repository(&repo)
        .await
        .unwrap();
    let refs: String = (1..=100_000)
        .map(|id| format!("create refs/heads/feedback/{id}-row {}\n", base.sha))
        .collect();
    let mut child = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["update-ref", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(refs.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    let text = format!(
        "[forge]\nkind = \"local\"\npath = \"{}\"\n[[routes]]\nschema = \"{}\"\ntable = \"feedbacks\"\nrepo = \"acme/app\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\"\n",
        repo.display(),
        table.name
    );
    let env = |key: &str| (key == "DATABASE_URL").then(|| table.url.clone());
    let config = Config::parse(&text, &dir.path().join("rowbranch.toml"), &env).unwrap();
    let started = Instant::now();
    let summary = run(
        &config,
        &SweepOptions {
            dry_run: true,
            page_size: 1000,
            ..options()
        },
    )
    .await;
    let took = started.elapsed();
    assert_eq!(summary.rows_seen, 200_000);
    assert_eq!(summary.already_handled, 100_000);
    assert_eq!(summary.would_dispatch.len(), 100_000);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or("VmHWM: ?");
    println!("swept 200000 rows (100000 branches) in {took:?}; peak resident {peak}");
}

/// The binary, as the "done when" says: `reconcile --since 1h` dispatches exactly the
/// rows without a branch or pull request, once; a second run writes nothing; `--json` is the
/// summary for scripts.
#[tokio::test]
async fn the_reconcile_command_dispatches_once_and_then_writes_nothing() {
    let table = or_skip!(
        feedbacks(&[
            (1..=6, "From the table", A_MINUTE),
            (7..=7, "Too old for the window", TWO_HOURS)
        ])
        .await
    );
    let fake = fake().await;
    finished(&fake, 1..=2);
    fake.add_pull(REPO, "feedback/3-merged", PullState::Closed, true);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rowbranch.toml");
    let text = GithubOptions {
        write_interval_ms: 5,
        ..GithubOptions::default()
    }
    .config_text(&fake)
    .replace(
        "[[routes]]\n",
        &format!("[[routes]]\nschema = \"{}\"\n", table.name),
    );
    std::fs::write(&path, text).unwrap();
    let reconcile = |json: bool| {
        let mut command = rowbranch_on(dir.path(), &table.url);
        command
            .args(["reconcile", "--since", "1h", "--config"])
            .arg(&path);
        if json {
            command.arg("--json");
        }
        async move { child::run(&mut command).await }
    };
    let first = reconcile(false).await;
    assert!(first.status.success(), "{}", output_text(&first));
    let out = child::stdout(&first);
    assert!(out.contains("dispatched"), "a summary table: {out}");
    assert_eq!(dispatched_ids(&fake), ["4", "5", "6"]);

    let writes = fake.writes().len();
    let second = reconcile(true).await;
    assert!(second.status.success());
    let summary: serde_json::Value =
        serde_json::from_slice(&second.stdout).expect("--json is JSON");
    assert_eq!(summary[0]["rows_seen"], 6);
    assert_eq!(summary[0]["dispatched_now"], 0);
    assert_eq!(summary[0]["already_handled"], 5);
    assert_eq!(summary[0]["merged_before"], 1);
    assert_eq!(fake.writes().len(), writes, "the second run writes nothing");
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_row_redone_on_purpose_is_not_taken_for_a_dead_claim() {
    let table = or_skip!(feedbacks(&[(30..=30, "Redone", TWO_HOURS)]).await);
    let fake = fake().await;
    fake.create_branch(REPO, "feedback/30-redone", "main");
    fake.create_branch(REPO, "feedback/30-redone-redo-1", "main");
    let config = config(&fake, &table.name, &table.url);
    let options = SweepOptions {
        window: Duration::from_secs(3 * 3600),
        ..options()
    };
    let summary = run(&config, &options).await;
    assert!(summary.dead_claims.is_empty(), "{summary:?}");
    assert!(fake.dispatches(REPO).is_empty());
}

#[tokio::test]
async fn a_scheduled_sweep_starts_no_row_from_before_sweep_from_but_keeps_its_claims() {
    let half_an_hour_ago = chrono::Utc::now() - chrono::Duration::minutes(30);
    let table = or_skip!(
        feedbacks(&[
            (1..=30, "From the table's past", TWO_HOURS),
            (31..=32, "Since rowbranch started", A_MINUTE)
        ])
        .await
    );
    let fake = fake().await;
    // A claim rowbranch made before sweep_from whose dispatch was lost: still its own.
    fake.create_branch(REPO, "feedback/5-from-the-table-s-past", "main");
    let from = format!("sweep_from = \"{}\"\n", half_an_hour_ago.to_rfc3339());
    let config = config_with(&fake, &table.name, &table.url, &from);
    let scheduled = SweepOptions {
        window: Duration::from_secs(3 * 3600),
        scheduled: true,
        ..options()
    };

    let summary = run(&config, &scheduled).await;
    assert_eq!(summary.before_sweep_from, 29, "{summary:?}");
    assert_eq!(summary.dispatched_now, 2, "{summary:?}");
    assert_eq!(summary.dead_claims_redispatched, 1, "{summary:?}");
    assert_eq!(dispatched_ids(&fake), ["5", "31", "32"]);

    // An operator's reconcile is not bound by it.
    let operator = run(
        &config,
        &SweepOptions {
            scheduled: false,
            ..scheduled.clone()
        },
    )
    .await;
    assert_eq!(operator.dispatched_now, 29, "{operator:?}");
}

#[tokio::test]
async fn a_scheduled_sweep_leaves_a_route_without_sweep_from_alone() {
    let table = or_skip!(feedbacks(&[(1..=3, "Old wish", A_MINUTE)]).await);
    let fake = fake().await;
    let config = config_with(&fake, &table.name, &table.url, "");
    let scheduled = SweepOptions {
        scheduled: true,
        ..options()
    };
    let summary = run(&config, &scheduled).await;
    assert_eq!(summary.rows_seen, 0, "{summary:?}");
    assert!(
        summary
            .warning
            .as_deref()
            .is_some_and(|w| w.contains("no sweep_from")),
        "{summary:?}"
    );
    assert!(fake.dispatches(REPO).is_empty());
}

#[tokio::test]
async fn the_sweep_of_a_gated_route_takes_only_rows_that_pass() {
    let table = or_skip!(feedbacks(&[(1..=6, "Gated", A_MINUTE)]).await);
    table
        .execute(&format!(
            "alter table {0}.feedbacks add column status text, add column score numeric;
             update {0}.feedbacks set status = 'approved' where id in (2, 4);
             update {0}.feedbacks set status = 'new' where id = 3;
             update {0}.feedbacks set score = 1.0 where id in (5, 6);",
            table.name
        ))
        .await;
    let fake = fake().await;
    let gate = "events = [\"INSERT\", \"UPDATE\"]\nrun_when = { column = \"status\", equals = \"approved\" }\n";
    let config = config_with(&fake, &table.name, &table.url, gate);
    let summary = run(&config, &options()).await;
    assert_eq!(summary.rows_seen, 2, "{summary:?}");
    assert_eq!(dispatched_ids(&fake), ["2", "4"]);

    // A number passes by its value, as a webhook's does: 1 is 1.0.
    let scores = crate::support::github::fake().await;
    let gate = "events = [\"INSERT\", \"UPDATE\"]\nrun_when = { column = \"score\", equals = 1 }\n";
    let config = config_with(&scores, &table.name, &table.url, gate);
    run(&config, &options()).await;
    assert_eq!(dispatched_ids(&scores), ["5", "6"]);

    // A gate on a column the table lacks is named, with the key to fix.
    let gate =
        "events = [\"INSERT\", \"UPDATE\"]\nrun_when = { column = \"approved\", equals = true }\n";
    let config = config_with(&fake, &table.name, &table.url, gate);
    let rows = Database::connect(&table.url).await.unwrap();
    let err = rows
        .check_columns(&config.routes[0], true)
        .await
        .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("no column \"approved\"") && err.contains("`run_when`"),
        "{err}"
    );
}

#[tokio::test]
async fn a_claim_whose_work_already_ran_is_reported_and_never_paid_for_again() {
    let table = or_skip!(
        feedbacks(&[
            (30..=30, "Ran and pushed nothing", TWO_HOURS),
            (31..=31, "Still queued", TWO_HOURS),
            (32..=32, "Lost dispatch", TWO_HOURS),
        ])
        .await
    );
    let fake = fake().await;
    for branch in [
        "feedback/30-ran-and-pushed-nothing",
        "feedback/31-still-queued",
        "feedback/32-lost-dispatch",
    ] {
        fake.create_branch(REPO, branch, "main");
    }
    // A finished run and a queued one name their branches; none names the third.
    let title = |branch: &str| format!("rowbranch: {branch}");
    fake.add_workflow_run(
        REPO,
        &title("feedback/30-ran-and-pushed-nothing"),
        "completed",
        Some("success"),
    );
    fake.add_workflow_run(REPO, &title("feedback/31-still-queued"), "queued", None);
    let config = config(&fake, &table.name, &table.url);
    let options = SweepOptions {
        window: Duration::from_secs(3 * 3600),
        ..options()
    };
    for _ in 0..2 {
        let summary = run(&config, &options).await;
        assert_eq!(
            summary.already_ran,
            [
                "feedback/30-ran-and-pushed-nothing",
                "feedback/31-still-queued"
            ],
            "{summary:?}"
        );
        assert_eq!(summary.failed, 0, "{summary:?}");
    }
    // Only the claim no run names was dispatched again, once per sweep.
    assert_eq!(
        dispatched_branches(&fake),
        ["feedback/32-lost-dispatch", "feedback/32-lost-dispatch"]
    );
}
