//! `rowbranch drain` as a schedule runs it: the binary as a child process, again and again, on a
//! real pgmq queue in a real PostgreSQL filled by the trigger of `templates/supabase-queue.sql`,
//! on the local forge (a git repository, with an `on_dispatch` the test controls) and on the
//! fake GitHub. Runs are killed, overlap, run out of time, are cancelled with SIGINT, meet
//! GitHub's rate limit and the hourly budget; every row still ends with one branch, and the
//! dispatches a kill can add are bounded by the messages it left in flight.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_github::{FakeGithub, Fault, Op, TEST_APP_PRIVATE_KEY_PEM};
use rustix::process::{Pid, Signal};
use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::github_token::{
    fake_with_token, token_config, CANNOT_WRITE, DRAIN_PERMISSIONS, READ_ONLY, TOKEN,
};
use crate::support::app::{FEEDBACK_ROUTE, SWEEP_FROM_LINE};
use crate::support::child::{rowbranch, stderr, stdout};
use crate::support::db::Install;
use crate::support::github::{self, GithubOptions, REPO};
use crate::support::local::{branches, dir_with_repository, dispatches};
use crate::support::or_skip;
use crate::support::queue::{
    all_ids, local_config, payload_id, per_row, QueueDb, BLOCKING_DISPATCH,
};
use crate::support::wait::eventually_within;

/// The summary line's numbers: dispatched, duplicates, dead-lettered, left in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Summary {
    dispatched: u64,
    duplicates: u64,
    dead_lettered: u64,
    left: u64,
}

/// How a run of `drain` ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Ran {
    /// The summary line, which every run that got as far as reading prints.
    fn summary(&self) -> Summary {
        let line = self
            .stdout
            .lines()
            .find(|l| l.starts_with("drain: "))
            .unwrap_or_else(|| panic!("no summary line:\n{}\n{}", self.stdout, self.stderr));
        let numbers: Vec<u64> = line
            .trim_start_matches("drain: ")
            .split(", ")
            .take(4)
            .map(|part| {
                part.split(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("not a number in {line:?}"))
            })
            .collect();
        assert!(
            line.ends_with(" s") && line.contains(" left in the queue, "),
            "{line}"
        );
        Summary {
            dispatched: numbers[0],
            duplicates: numbers[1],
            dead_lettered: numbers[2],
            left: numbers[3],
        }
    }

    /// Checks it exited 0; its summary.
    fn clean(&self) -> Summary {
        assert_eq!(self.code, Some(0), "{}\n{}", self.stdout, self.stderr);
        self.summary()
    }
}

/// `rowbranch drain --config rowbranch.toml ARGS` in `dir`, reading `db`, with `env` besides; in
/// a process group of its own, so that a test can kill it with its `on_dispatch` commands.
fn command(dir: &Path, db: &QueueDb, env: &[(&str, String)], args: &[&str]) -> Command {
    let mut command = rowbranch(dir);
    command
        .args(["drain", "--config", "rowbranch.toml"])
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "info")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    command
}

/// Runs a drain to its end, for at most two minutes.
async fn drain(dir: &Path, db: &QueueDb, env: &[(&str, String)], args: &[&str]) -> Ran {
    let started = Instant::now();
    let child = command(dir, db, env, args)
        .spawn()
        .expect("could not start rowbranch drain");
    finish(child, started).await
}

/// Waits for a drain started at `started` to end; how it ended.
async fn finish(child: Child, started: Instant) -> Ran {
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the drain did not end in time")
        .expect("could not wait for the drain");
    Ran {
        code: out.status.code(),
        stdout: stdout(&out),
        stderr: stderr(&out),
        took: started.elapsed(),
    }
}

fn signal_group(child: &Child, signal: Signal) {
    let pid = Pid::from_raw(child.id().expect("the drain runs") as i32).expect("a pid");
    rustix::process::kill_process_group(pid, signal).expect("could not signal the drain");
}

/// Writes `config` as `dir`'s rowbranch.toml.
fn write_config(dir: &Path, config: &str) {
    std::fs::write(dir.join("rowbranch.toml"), config).expect("could not write the config");
}

/// Messages in the queue: (read_ct, visible now), by message id.
async fn waiting(db: &QueueDb) -> Vec<(i32, bool)> {
    db.client
        .query(
            &format!(
                "select read_ct, vt <= clock_timestamp() from pgmq.\"q_{}\" order by msg_id",
                db.queue
            ),
            &[],
        )
        .await
        .expect("could not read the queue")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Drains again and again until the queue is empty (a killed run's messages come back once
/// their lease lapses); the runs' summaries.
async fn drain_until_empty(dir: &Path, db: &QueueDb, limit: Duration) -> Vec<Summary> {
    let deadline = Instant::now() + limit;
    let mut runs = Vec::new();
    loop {
        let run = drain(dir, db, &[], &["--max-time", "60s"]).await;
        runs.push(run.clean());
        if db.depth().await == 0 {
            return runs;
        }
        assert!(
            Instant::now() < deadline,
            "the queue is not empty after {limit:?}: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The fake GitHub's config for `db`'s queue: `options`, the route reading the queue, `route`'s
/// lines added to it, and `pgmq`'s to `[pgmq]`.
fn fake_config(fake: &FakeGithub, options: &GithubOptions, db: &QueueDb, pgmq: &str) -> String {
    format!(
        "{}intake = \"pgmq\"\n\n[pgmq]\nqueue = \"{}\"\ndead_letter = \"{}\"\npoll_interval_ms = 50\n\
         backoff_base_ms = 100\nbackoff_cap_ms = 400\n{pgmq}\n",
        options.config_text(fake),
        db.queue,
        db.dead
    )
}

/// A directory with [`fake_config`]'s rowbranch.toml in it.
fn fake_dir(fake: &FakeGithub, options: &GithubOptions, db: &QueueDb, pgmq: &str) -> TempDir {
    let dir = TempDir::new().unwrap();
    write_config(dir.path(), &fake_config(fake, options, db, pgmq));
    dir
}

/// The App's key, as the drain on the fake GitHub needs it.
fn app_key() -> Vec<(&'static str, String)> {
    vec![(
        "GITHUB_APP_PRIVATE_KEY",
        TEST_APP_PRIVATE_KEY_PEM.to_owned(),
    )]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_queue_exits_0_at_once_and_says_so() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    write_config(dir.path(), &local_config(&db, "repo.git", "", ""));
    let run = drain(dir.path(), &db, &[], &[]).await;
    let summary = run.clean();
    assert_eq!(
        summary,
        Summary {
            dispatched: 0,
            duplicates: 0,
            dead_lettered: 0,
            left: 0
        }
    );
    eprintln!("an empty queue: {:?} from start to exit", run.took);
    assert!(
        run.took < Duration::from_secs(2),
        "an empty queue took {:?}",
        run.took
    );
    assert!(
        run.stderr.contains("the queue is drained"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successive_drains_one_killed_mid_batch_give_one_branch_per_row_and_an_extra_dispatch_only_for_what_it_held(
) {
    let db = or_skip!(QueueDb::new(Install::Sql).await);
    let dir = dir_with_repository().await;
    std::fs::write(dir.path().join("on-dispatch.sh"), BLOCKING_DISPATCH).unwrap();
    let attempts = dir.path().join("attempts.jsonl");
    write_config(
        dir.path(),
        &local_config(
            &db,
            "repo.git",
            "on_dispatch = \"sh on-dispatch.sh\"",
            "visibility_timeout_s = 10\nbatch = 20",
        ),
    );
    db.insert(1..=300).await;
    let ids = all_ids(1..=300);

    // The first run is killed once 60 rows have dispatched and the rows after them are
    // claimed and dispatching.
    std::fs::write(dir.path().join("limit"), "60").unwrap();
    let killed = command(dir.path(), &db, &[], &["--max-time", "60s"])
        .spawn()
        .expect("could not start rowbranch drain");
    eventually_within(
        "a dispatch blocked past the limit",
        Duration::from_secs(60),
        || async { (dispatches(&attempts).len() > 60).then_some(()) },
    )
    .await;
    signal_group(&killed, Signal::KILL);
    let ran = finish(killed, Instant::now()).await;
    assert_eq!(ran.code, None, "killed");
    let held: i64 = db
        .client
        .query_one(
            &format!(
                "select count(*) from pgmq.\"q_{}\" where vt > clock_timestamp()",
                db.queue
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // In flight at the kill: a dispatch started, the message not archived.
    let archived = db.archived().await;
    let in_flight = per_row(&attempts)
        .keys()
        .filter(|id| !archived.contains_key(*id))
        .count();
    eprintln!(
        "killed with {} dispatches started, {in_flight} of them in flight, and {held} \
         messages held",
        dispatches(&attempts).len()
    );

    std::fs::remove_file(dir.path().join("limit")).unwrap();
    let runs = drain_until_empty(dir.path(), &db, Duration::from_secs(120)).await;
    eprintln!("then {} runs: {runs:?}", runs.len());
    let names = branches(&dir.path().join("repo.git")).await;
    let branch_ids: BTreeSet<String> = names
        .iter()
        .map(|b| {
            b.trim_start_matches("feedback/")
                .split('-')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(names.len(), 300, "one branch per row");
    assert_eq!(branch_ids, ids);
    let tried = per_row(&attempts);
    assert_eq!(tried.keys().cloned().collect::<BTreeSet<_>>(), ids);
    let extra: usize = tried.values().map(|n| n - 1).sum();
    eprintln!("{extra} dispatches beyond one per row");
    assert!(
        extra <= in_flight,
        "{extra} dispatches beyond one per row, with {in_flight} in flight at the kill"
    );
    assert!(tried.values().all(|n| *n <= 2), "{tried:?}");
    assert!(db.dead_letters().await.is_empty());
    let summed: u64 = runs.iter().map(|s| s.dispatched + s.duplicates).sum();
    assert!(
        summed >= 300 - 60,
        "every row after the kill is counted: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_drains_started_together_give_one_branch_and_one_dispatch_per_row() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let first = dir_with_repository().await;
    let second = Arc::new(TempDir::new().unwrap());
    let repo = first.path().join("repo.git");
    let config = local_config(&db, repo.to_str().unwrap(), "", "batch = 10");
    write_config(first.path(), &config);
    write_config(second.path(), &config);
    db.insert(1..=300).await;
    let started = Instant::now();
    let a = command(first.path(), &db, &[], &["--max-time", "90s"])
        .spawn()
        .unwrap();
    let b = command(second.path(), &db, &[], &["--max-time", "90s"])
        .spawn()
        .unwrap();
    let (a, b) = tokio::join!(finish(a, started), finish(b, started));
    let (a, b) = (a.clean(), b.clean());
    eprintln!("first: {a:?}, second: {b:?}");
    assert_eq!(a.dispatched + b.dispatched, 300);
    assert_eq!(a.duplicates + b.duplicates, 0);
    assert_eq!(db.depth().await, 0);
    let seen = per_row(&first.path().join("dispatches.jsonl"));
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        all_ids(1..=300)
    );
    assert!(
        seen.values().all(|n| *n == 1),
        "one dispatch per row: {seen:?}"
    );
    assert_eq!(branches(&repo).await.len(), 300);
    assert!(
        db.archived().await.values().all(|read_ct| *read_ct == 1),
        "each message read once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_time_is_kept_with_a_backlog_left_visible_and_the_next_run_finishes_it() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let fake = github::fake().await;
    // Two writes a row, one every 200 ms: a row every 0.4 s.
    let options = GithubOptions {
        write_interval_ms: 200,
        write_burst: 1,
        extra_top: "shutdown_grace = \"1s\"\n".into(),
        ..GithubOptions::default()
    };
    let dir = fake_dir(&fake, &options, &db, "visibility_timeout_s = 60");
    db.insert(1..=30).await;

    let run = drain(dir.path(), &db, &app_key(), &["--max-time", "4s"]).await;
    let first = run.clean();
    eprintln!("--max-time 4s: {:?}, {first:?}", run.took);
    assert!(
        run.took < Duration::from_millis(5500),
        "--max-time 4s took {:?}",
        run.took
    );
    assert!(
        first.dispatched > 0 && first.dispatched < 30,
        "some rows, not all: {first:?}"
    );
    assert_eq!(first.left, 30 - first.dispatched);
    assert_eq!(fake.dispatches(REPO).len() as u64, first.dispatched);
    // What was read and not started was released: visible at once, read once.
    let left = waiting(&db).await;
    assert_eq!(left.len() as u64, first.left);
    assert!(
        left.iter()
            .all(|(read_ct, visible)| *read_ct <= 1 && *visible),
        "{left:?}\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("--max-time is reached"),
        "{}",
        run.stderr
    );

    let run = drain(dir.path(), &db, &app_key(), &["--max-time", "60s"]).await;
    let second = run.clean();
    assert_eq!(first.dispatched + second.dispatched, 30, "{second:?}");
    assert_eq!(second.left, 0);
    let dispatched: Vec<String> = fake
        .dispatches(REPO)
        .iter()
        .map(|d| payload_id(&d.client_payload))
        .collect();
    assert_eq!(dispatched.len(), 30, "one dispatch per row");
    assert_eq!(
        dispatched.into_iter().collect::<BTreeSet<_>>(),
        all_ids(1..=30)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_mid_batch_releases_what_has_not_started_settles_the_rest_and_exits_within_the_grace(
) {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let fake = github::fake().await;
    // Two writes at once, then one a minute: two rows claim, and their dispatches and the
    // three other rows' claims wait on the pace. The config's grace is long; a signal's is 5 s.
    let options = GithubOptions {
        write_interval_ms: 60_000,
        write_burst: 2,
        extra_top: "shutdown_grace = \"30s\"\n".into(),
        ..GithubOptions::default()
    };
    let dir = fake_dir(&fake, &options, &db, "visibility_timeout_s = 600");
    db.insert(1..=5).await;
    let child = command(dir.path(), &db, &app_key(), &["--max-time", "5m"])
        .spawn()
        .unwrap();
    let claims = || {
        fake.refs(REPO)
            .iter()
            .filter(|r| r.contains("feedback/"))
            .count()
    };
    eventually_within("two claims, five held", Duration::from_secs(30), || async {
        let held = waiting(&db)
            .await
            .iter()
            .filter(|(n, visible)| *n == 1 && !visible)
            .count();
        (claims() == 2 && held == 5).then_some(())
    })
    .await;
    assert!(
        fake.dispatches(REPO).is_empty(),
        "the dispatches wait on the pace"
    );
    let signalled = Instant::now();
    signal_group(&child, Signal::INT);
    let run = finish(child, signalled).await;
    let summary = run.clean();
    eprintln!("exited {:?} after SIGINT", run.took);
    assert!(
        run.took < Duration::from_secs(5),
        "exited {:?} after SIGINT",
        run.took
    );
    // The claimed rows dispatched without waiting for the pace; the others were released.
    assert_eq!(summary.dispatched, 2, "{}", run.stderr);
    assert_eq!(fake.dispatches(REPO).len(), 2);
    assert_eq!(summary.left, 3);
    assert_eq!(
        waiting(&db).await,
        vec![(1, true); 3],
        "released: visible at once"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        waiting(&db).await,
        vec![(1, true); 3],
        "read once: nothing reads them after the exit"
    );
    assert_eq!(claims(), 2, "no claim is left without its dispatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rows_per_hour_is_shared_by_successive_drains_and_the_rows_over_it_wait_visible() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    let config = format!(
        "{}max_rows_per_hour = 60\n",
        local_config(&db, "repo.git", "", "batch = 50")
    );
    write_config(dir.path(), &config);
    db.insert(1..=100).await;

    let run = drain(dir.path(), &db, &[], &[]).await;
    let first = run.clean();
    assert_eq!(first.dispatched, 60, "{}", run.stderr);
    assert_eq!(first.left, 40);
    assert!(
        run.stderr.contains("the hourly budget is spent"),
        "{}",
        run.stderr
    );
    // The next run finds the hour spent in the archive: it starts nothing.
    let run = drain(dir.path(), &db, &[], &[]).await;
    let second = run.clean();
    assert_eq!(second.dispatched, 0);
    assert_eq!(second.left, 40);

    assert_eq!(per_row(&dir.path().join("dispatches.jsonl")).len(), 60);
    assert_eq!(branches(&dir.path().join("repo.git")).await.len(), 60);
    assert_eq!(
        waiting(&db).await,
        vec![(0, true); 40],
        "never read: visible, none dropped"
    );
    assert!(db.dead_letters().await.is_empty());

    // An hour later (the archive's clock moved back), the next run takes the rest.
    db.execute(&format!(
        "update pgmq.\"a_{}\" set archived_at = archived_at - interval '61 minutes'",
        db.queue
    ))
    .await;
    let run = drain(dir.path(), &db, &[], &[]).await;
    let third = run.clean();
    assert_eq!(third.dispatched, 40, "{}", run.stderr);
    assert_eq!(third.left, 0);
    let seen = per_row(&dir.path().join("dispatches.jsonl"));
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        all_ids(1..=100)
    );
    assert!(seen.values().all(|n| *n == 1), "one dispatch per row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sweep_the_rows_that_never_reached_the_queue_are_dispatched_before_the_exit() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    write_config(dir.path(), &local_config(&db, "repo.git", "", ""));
    db.insert(1..=5).await;
    // Three rows inserted while the queue's trigger was off, five minutes ago.
    db.execute(
        "alter table public.feedbacks disable trigger user; \
         insert into public.feedbacks (id, message, created_at) \
           select n, 'Row ' || n, now() - interval '5 minutes' from generate_series(6, 8) as n; \
         alter table public.feedbacks enable trigger user",
    )
    .await;
    let run = drain(dir.path(), &db, &[], &["--sweep"]).await;
    let summary = run.clean();
    assert_eq!(summary.dispatched, 5, "the queue's rows: {}", run.stderr);
    assert_eq!(summary.left, 0);
    let (table, line) = run.stdout.split_once("drain: ").expect("the summary line");
    assert!(
        table.contains("dispatched") && table.contains("public.feedbacks"),
        "the sweep's table comes first:\n{}",
        run.stdout
    );
    assert!(line.starts_with("5 dispatched"), "{line}");
    let seen = per_row(&dir.path().join("dispatches.jsonl"));
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        all_ids(1..=8)
    );
    assert!(
        seen.values().all(|n| *n == 1),
        "one dispatch per row: {seen:?}"
    );
}

/// A route naming a table the database does not have (`feedback` for `feedbacks`) would
/// dead-letter every message: the run stops before it reads one, naming the tables there are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mistyped_table_stops_the_run_before_a_message_is_read() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    let config = local_config(&db, "repo.git", "", "")
        .replace("table = \"feedbacks\"", "table = \"feedback\"");
    write_config(dir.path(), &config);
    db.insert(1..=3).await;
    let run = drain(dir.path(), &db, &[], &[]).await;
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("table public.feedback does not exist")
            && run
                .stderr
                .contains("the tables of schema public: feedbacks"),
        "{}",
        run.stderr
    );
    assert_eq!(db.depth().await, 3, "every message still in the queue");
    assert!(db.dead_letters().await.is_empty());
}

/// A table's past is not work: without `sweep_from` the sweep starts nothing, and says what
/// line would give it a start; with it, rows older than it are left and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sweep_rows_from_before_sweep_from_are_left_and_without_it_nothing_is_swept() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    db.execute(
        "alter table public.feedbacks disable trigger user; \
         insert into public.feedbacks (id, message, created_at) \
           select n, 'Row ' || n, now() - interval '2 hours' from generate_series(1, 3) as n; \
         alter table public.feedbacks enable trigger user",
    )
    .await;
    let config = local_config(&db, "repo.git", "", "").replace(SWEEP_FROM_LINE, "");
    write_config(dir.path(), &config);
    let run = drain(dir.path(), &db, &[], &["--sweep"]).await;
    run.clean();
    assert!(
        run.stderr.contains("no sweep_from") && run.stderr.contains("sweep_from = \"20"),
        "{}",
        run.stderr
    );
    assert!(
        !dir.path().join("dispatches.jsonl").exists(),
        "nothing swept"
    );

    let from = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    write_config(dir.path(), &format!("{config}sweep_from = \"{from}\"\n"));
    let run = drain(dir.path(), &db, &[], &["--sweep"]).await;
    run.clean();
    assert!(
        run.stderr.contains("left 3 rows created before sweep_from")
            && run.stderr.contains("reconcile --since"),
        "{}",
        run.stderr
    );
    assert!(
        !dir.path().join("dispatches.jsonl").exists(),
        "the past is not work"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_deletes_the_archive_past_archive_retention() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    write_config(
        dir.path(),
        &local_config(&db, "repo.git", "", "archive_retention = \"1h\""),
    );
    db.insert(1..=6).await;
    assert_eq!(drain(dir.path(), &db, &[], &[]).await.clean().dispatched, 6);
    assert_eq!(
        db.archived().await.len(),
        6,
        "kept within archive_retention"
    );
    // Four of them archived two hours ago: the next run, on an empty queue, deletes them.
    db.execute(&format!(
        "update pgmq.\"a_{}\" set archived_at = archived_at - interval '2 hours' \
         where msg_id <= 4",
        db.queue
    ))
    .await;
    drain(dir.path(), &db, &[], &[]).await.clean();
    assert_eq!(
        db.archived().await.len(),
        2,
        "the four past archive_retention are gone"
    );
}

#[tokio::test]
async fn a_webhook_route_with_max_rows_per_hour_is_refused_at_start() {
    let dir = TempDir::new().unwrap();
    write_config(
        dir.path(),
        "[forge]\nkind = \"local\"\npath = \"repo.git\"\n\n[[routes]]\ntable = \"feedbacks\"\n\
         repo = \"acme/app\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\"\n\
         max_rows_per_hour = 60\n",
    );
    for command in ["drain", "serve"] {
        let out = rowbranch(dir.path())
            .args([command, "--config", "rowbranch.toml"])
            .env("ROWBRANCH_WEBHOOK_SECRET", "s".repeat(32))
            .output()
            .await
            .unwrap();
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {text}");
        assert!(
            text.contains("max_rows_per_hour is set on a route with intake = \"webhook\"")
                && text.contains("lost until a sweep"),
            "{command}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn githubs_rate_limit_stops_the_drain_cleanly_with_the_rows_left_for_the_next_run() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let fake = github::fake().await;
    // A few rows' requests, then GitHub's 403 primary rate limit until the hour's reset.
    fake.set_rate_limit(20);
    let dir = TempDir::new().unwrap();
    let options = GithubOptions::default();
    write_config(
        dir.path(),
        &fake_config(&fake, &options, &db, "visibility_timeout_s = 60"),
    );
    db.insert(1..=10).await;
    let run = drain(dir.path(), &db, &app_key(), &[]).await;
    let summary = run.clean();
    assert!(
        run.stderr.contains("GitHub's rate limit is reached"),
        "{}",
        run.stderr
    );
    assert!(summary.dispatched < 10, "{summary:?}");
    assert_eq!(summary.dispatched, fake.dispatches(REPO).len() as u64);
    assert_eq!(summary.left, 10 - summary.dispatched);
    assert!(db.dead_letters().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_unreachable_exits_1_with_the_rows_left_in_the_queue() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let fake = github::fake().await;
    for op in Op::ROW_READS {
        fake.inject(op, Fault::Status(503), 1_000_000);
    }
    let options = GithubOptions {
        retry_budget_ms: 200,
        ..GithubOptions::default()
    };
    let dir = fake_dir(&fake, &options, &db, "visibility_timeout_s = 60");
    db.insert(1..=3).await;
    let run = drain(dir.path(), &db, &app_key(), &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("could not claim or dispatch a row")
            && run.stderr.contains("rowbranch doctor"),
        "{}",
        run.stderr
    );
    assert_eq!(run.summary().left, 3);
    assert!(db.dead_letters().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_the_database_does_not_have_exits_1_at_once_with_the_fix() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    let config = local_config(&db, "repo.git", "", "").replace(
        &format!("queue = \"{}\"", db.queue),
        "queue = \"no_such_queue\"",
    );
    write_config(dir.path(), &config);
    let run = drain(dir.path(), &db, &[], &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot read the queue no_such_queue")
            && run.stderr.contains("supabase-queue.sql"),
        "{}",
        run.stderr
    );
    assert!(run.took < Duration::from_secs(5), "{:?}", run.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_does_not_answer_exits_1_at_once_with_the_fix() {
    let dir = dir_with_repository().await;
    write_config(
        dir.path(),
        &format!(
            "[forge]\nkind = \"local\"\npath = \"repo.git\"\n\n[pgmq]\nqueue = \"rowbranch\"\n\n\
             {FEEDBACK_ROUTE}intake = \"pgmq\"\n"
        ),
    );
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let out = rowbranch(dir.path())
        .args(["drain", "--config", "rowbranch.toml"])
        .env(
            "DATABASE_URL",
            format!("postgres://rowbranch@127.0.0.1:{port}/postgres"),
        )
        .output()
        .await
        .unwrap();
    let took = started.elapsed();
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("cannot read the queue rowbranch") && text.contains("check DATABASE_URL"),
        "{text}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_time_shorter_than_the_grace_is_kept_with_half_of_it_for_the_grace() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let fake = github::fake().await;
    // Two rows claim at once; their dispatches and the other claims wait a minute on the pace.
    let options = GithubOptions {
        write_interval_ms: 60_000,
        write_burst: 2,
        extra_top: "shutdown_grace = \"20s\"\n".into(),
        ..GithubOptions::default()
    };
    let dir = fake_dir(&fake, &options, &db, "visibility_timeout_s = 600");
    db.insert(1..=5).await;
    let run = drain(dir.path(), &db, &app_key(), &["--max-time", "3s"]).await;
    let summary = run.clean();
    assert!(
        run.took < Duration::from_millis(4500),
        "took {:?}",
        run.took
    );
    assert_eq!(
        summary.dispatched, 2,
        "the claimed rows dispatch within the grace"
    );
    assert_eq!(summary.left, 3);
    assert_eq!(
        waiting(&db).await,
        vec![(1, true); 3],
        "released: visible at once"
    );

    let out = rowbranch(dir.path())
        .args(["drain", "--config", "rowbranch.toml", "--max-time", "soon"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--max-time soon"), "{}", stderr(&out));
}

/// The drain as an Actions job runs it: `[github] token_env`, the fake GitHub answering to a
/// plain token it registered for the repository with `permissions`.
async fn token_drain(
    db: &QueueDb,
    permissions: &[(&str, &str)],
) -> (Arc<FakeGithub>, TempDir, Vec<(&'static str, String)>) {
    let fake = fake_with_token(permissions).await;
    let dir = TempDir::new().unwrap();
    let config = token_config(&fake, &db.queue).replace(
        "[pgmq]\n",
        &format!(
            "[pgmq]\ndead_letter = \"{}\"\nvisibility_timeout_s = 60\n",
            db.dead
        ),
    );
    write_config(dir.path(), &config);
    (fake, dir, vec![("GITHUB_TOKEN", TOKEN.to_owned())])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_plain_token_successive_drains_dispatch_every_row_once() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let (fake, dir, env) = token_drain(&db, &DRAIN_PERMISSIONS).await;
    db.insert(1..=10).await;
    let first = drain(dir.path(), &db, &env, &[]).await.clean();
    db.insert(11..=20).await;
    let second = drain(dir.path(), &db, &env, &[]).await.clean();
    assert_eq!(first.dispatched + second.dispatched, 20);
    assert_eq!(second.left, 0);
    let dispatched: BTreeSet<String> = fake
        .dispatches(REPO)
        .iter()
        .map(|d| payload_id(&d.client_payload))
        .collect();
    assert_eq!(dispatched, all_ids(1..=20));
    assert_eq!(fake.dispatches(REPO).len(), 20, "one dispatch per row");

    // Nothing left: the token's check and one read, well under 2 s.
    let run = drain(dir.path(), &db, &env, &[]).await;
    assert_eq!(run.clean().dispatched, 0);
    eprintln!(
        "an empty queue with a token: {:?} from start to exit",
        run.took
    );
    assert!(run.took < Duration::from_secs(2), "{:?}", run.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_cannot_write_exits_1_with_the_permission_it_lacks_and_reads_nothing() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let (fake, dir, env) = token_drain(&db, &READ_ONLY).await;
    db.insert(1..=3).await;
    let run = drain(dir.path(), &db, &env, &[]).await;
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains(CANNOT_WRITE), "{}", run.stderr);
    assert!(!run.stderr.contains(TOKEN) && !run.stdout.contains(TOKEN));
    assert!(fake.dispatches(REPO).is_empty());
    assert_eq!(
        waiting(&db).await,
        vec![(0, true); 3],
        "never read: the rows wait, visible"
    );
}

/// With a token there is no App to hear GitHub's events: each drain writes back what the
/// pull requests and runs of the route's recent rows show, `--sweep` or not, in one listing of
/// each a route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_plain_token_each_drain_writes_back_the_rows_pull_requests_and_failed_runs() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    db.execute(
        "alter table public.feedbacks add column rowbranch_status text, \
           add column pull_request_url text",
    )
    .await;
    let (fake, dir, env) = token_drain(&db, &DRAIN_PERMISSIONS).await;
    let config = std::fs::read_to_string(dir.path().join("rowbranch.toml")).unwrap();
    write_config(
        dir.path(),
        &format!(
            "{config}status_column = \"rowbranch_status\"\npull_request_column = \"pull_request_url\"\n"
        ),
    );
    let states = || async {
        let rows = db
            .client
            .query(
                "select id, rowbranch_status, pull_request_url from public.feedbacks order by id",
                &[],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect::<Vec<(i64, Option<String>, Option<String>)>>()
    };
    db.insert(1..=3).await;
    assert_eq!(
        drain(dir.path(), &db, &env, &[]).await.clean().dispatched,
        3
    );
    let dispatched = |s: &str| (1, Some(s.to_owned()), None);
    assert_eq!(states().await[0], dispatched("dispatched"));

    // Row 1's pull request is open, row 2's merged, row 3's run ended without one.
    let branch = |id: &str| {
        let sent = fake.dispatches(REPO);
        let sent = sent.iter().find(|d| payload_id(&d.client_payload) == id);
        sent.unwrap().client_payload["branch"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let open = fake.add_pull(REPO, &branch("1"), fake_github::PullState::Open, false);
    fake.push_commit(REPO, &branch("2"));
    let merged = fake.add_pull(REPO, &branch("2"), fake_github::PullState::Closed, true);
    let title = format!("rowbranch: {}", branch("3"));
    fake.add_workflow_run(REPO, &title, "completed", Some("failure"));
    let listings = |fake: &FakeGithub| {
        [Op::ListPulls, Op::ListRuns, Op::MatchingRefs].map(|op| fake.requests_for(op).len())
    };
    let before = listings(&fake);
    let run = drain(dir.path(), &db, &env, &[]).await;
    assert_eq!(run.clean().dispatched, 0);
    let link = |n: u64| Some(format!("https://github.com/{REPO}/pull/{n}"));
    assert_eq!(
        states().await,
        [
            (1, Some("pr_open".to_owned()), link(open)),
            (2, Some("merged".to_owned()), link(merged)),
            (3, Some("failed".to_owned()), None),
        ],
        "{}",
        run.stderr
    );
    let after = listings(&fake);
    assert_eq!(
        [0, 1, 2].map(|i| after[i] - before[i]),
        [1, 1, 1],
        "one listing of each a run"
    );
    assert!(run.stderr.contains("states_written"), "{}", run.stderr);
    assert_eq!(fake.dispatches(REPO).len(), 3);
}
