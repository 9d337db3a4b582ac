//! The queue intake end to end: `rowbranch serve` as a child process reading a real pgmq queue
//! in a real PostgreSQL, filled by the trigger of `templates/supabase-queue.sql`, on the local
//! forge (a git repository, with an `on_dispatch` the test controls) and on the fake GitHub.
//!
//! Each test has a database of its own, copied from a template of `scripts/test-postgres.sh`
//! with pgmq in it, and queues and roles named after it; all are dropped when the test ends,
//! passed or not. Without `DATABASE_URL` and the template a test says why and passes, except
//! under `CI=true`, where it fails. The settings are short where waiting is the point: polls
//! every 50 ms, a backoff of 100 ms doubling to 400 ms, a retry budget of 200 ms; the
//! visibility timeout is 60 s where nothing is killed and 10 s (the least the config takes)
//! where a killed process's messages must come back. Tests wait for events (lines in a log,
//! rows in a table), never for a fixed time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_github::{Fault, Op};
use rowbranch::startup::{Application, Launch, Mode};
use rustix::process::Signal;
use serde_json::Value;
use tempfile::TempDir;

use crate::support::app::{spawn_app, Options, FEEDBACK_ROUTE};
use crate::support::child::{self, Served, Start};
use crate::support::db::Install;
use crate::support::github::{self, GithubOptions, REPO};
use crate::support::http::{get, insert, Reply};
use crate::support::local::{branches, dir_with_repository, dispatches};
use crate::support::or_skip;
use crate::support::queue::{
    all_ids, local_config, payload_id, per_row, QueueDb, BLOCKING_DISPATCH,
};
use crate::support::random::random_secret;
use crate::support::wait::{eventually, eventually_within, PATIENCE};

/// The sum of a counter's series whose labels include `label`, from `/metrics`.
async fn metric(served: &Served, name: &str, label: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", served.url))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("a metrics body");
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A counter once it has reached `at_least`: a message's end is counted just after its
/// statement, so a moment after the queue shows it. Its value then, to compare exactly.
async fn metric_once(served: &Served, name: &str, label: &str, at_least: f64) -> f64 {
    eventually_within(
        &format!("{name}{{{label}}} at {at_least}"),
        Duration::from_secs(10),
        || async {
            let value = metric(served, name, label).await;
            (value >= at_least).then_some(value)
        },
    )
    .await
}

async fn start(dir: &Arc<TempDir>, db: &QueueDb, config: &str) -> Served {
    child::serve(
        Arc::clone(dir),
        Start {
            config,
            env: vec![("DATABASE_URL", db.url.clone())],
            nofile: None,
            secret: random_secret(),
        },
    )
    .await
}

/// `serve` on the repository in `dir`, reading `db`'s queue with `pgmq`'s lines besides.
async fn serve_reading(dir: &Arc<TempDir>, db: &QueueDb, pgmq: &str) -> Served {
    start(dir, db, &local_config(db, "repo.git", "", pgmq)).await
}

/// `serve` with `config`, whose forge is the fake GitHub, reading `db`'s queue.
async fn serve_on_the_fake(db: &QueueDb, config: &str) -> Served {
    child::serve_on_fake(
        config,
        vec![("DATABASE_URL", db.url.clone())],
        &random_secret(),
    )
    .await
}

/// Stops `served` with SIGTERM and checks it exits 0.
async fn stop(mut served: Served) {
    served.stops_cleanly(Duration::from_secs(20)).await;
}

/// Waits until every row of `ids` has a dispatch line and the queue is empty; on a timeout,
/// the panic says which rows are missing and ends with `served`'s log.
async fn all_dispatched(
    db: &QueueDb,
    served: &Served,
    ids: &BTreeSet<String>,
    limit: Duration,
) -> BTreeMap<String, usize> {
    let log = served.dispatch_log();
    let deadline = Instant::now() + limit;
    loop {
        let seen = per_row(&log);
        let depth = db.depth().await;
        if ids.iter().all(|id| seen.contains_key(id)) && depth == 0 {
            return seen;
        }
        if Instant::now() > deadline {
            let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
            let log = served.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "after {limit:?}, {} of {} rows have no dispatch ({missing:?}) and {depth} messages \
                 are in the queue; the log ends:\n{}",
                missing.len(),
                ids.len(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_rows_in_one_insert_then_rows_inserted_while_serve_is_stopped() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    let config = local_config(&db, "repo.git", "", "visibility_timeout_s = 60");
    let served = start(&dir, &db, &config).await;
    db.insert(1..=500).await;
    let seen = all_dispatched(&db, &served, &all_ids(1..=500), Duration::from_secs(120)).await;
    assert!(seen.values().all(|n| *n == 1), "one dispatch per row");
    assert_eq!(served.branches().await.len(), 500);
    stop(served).await;

    // Nothing reads the queue now: the rows wait in it.
    db.insert(501..=550).await;
    assert_eq!(db.depth().await, 50);
    let served = start(&dir, &db, &config).await;
    let seen = all_dispatched(&db, &served, &all_ids(1..=550), Duration::from_secs(60)).await;
    assert_eq!(seen.len(), 550);
    assert!(seen.values().all(|n| *n == 1), "one dispatch per row");
    assert_eq!(served.branches().await.len(), 550);
    let archived = db.archived().await;
    assert_eq!(
        archived.keys().cloned().collect::<BTreeSet<_>>(),
        all_ids(1..=550)
    );
    assert!(
        archived.values().all(|read_ct| *read_ct == 1),
        "each message read once"
    );
    assert!(db.dead_letters().await.is_empty());
    let archived_metric = metric_once(
        &served,
        "rowbranch_pgmq_messages_total",
        "result=\"archived\"",
        50.0,
    )
    .await;
    assert_eq!(archived_metric, 50.0, "this process archived the 50");
    // Runs from the queue are runs, not deliveries.
    let runs = metric_once(
        &served,
        "rowbranch_runs_total",
        "result=\"dispatched\"",
        50.0,
    )
    .await;
    assert_eq!(runs, 50.0);
    assert_eq!(metric(&served, "rowbranch_deliveries_total", "").await, 0.0);
    // A queue-only server says what it does, and not "POST /webhook", which answers 404 here.
    let log = served.log();
    assert!(log.contains("the consumer reads the queue"), "{log}");
    assert!(!log.contains("POST /webhook"), "{log}");
    stop(served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_between_claims_and_dispatches_twice_still_gives_every_row_one_branch_and_a_bounded_number_of_dispatches(
) {
    let db = or_skip!(QueueDb::new(Install::Sql).await);
    let dir = dir_with_repository().await;
    std::fs::write(dir.path().join("on-dispatch.sh"), BLOCKING_DISPATCH).unwrap();
    let attempts = dir.path().join("attempts.jsonl");
    let config = local_config(
        &db,
        "repo.git",
        "on_dispatch = \"sh on-dispatch.sh\"",
        "visibility_timeout_s = 10",
    );
    db.insert(1..=150).await;
    let ids = all_ids(1..=150);

    // Killed after 20 dispatches, with the rows after them claimed and dispatching.
    let mut limit = 20;
    for round in 0..2 {
        std::fs::write(dir.path().join("limit"), limit.to_string()).unwrap();
        let mut served = start(&dir, &db, &config).await;
        let made = eventually_within(
            "a dispatch blocked past the limit",
            Duration::from_secs(60),
            || async {
                let n = dispatches(&attempts).len();
                (n > limit).then_some(n)
            },
        )
        .await;
        served.signal_group(Signal::KILL);
        served.exit_code(Duration::from_secs(10)).await;
        eprintln!("round {round}: killed with {made} dispatches started");
        limit = made + 40;
    }

    std::fs::remove_file(dir.path().join("limit")).unwrap();
    let served = start(&dir, &db, &config).await;
    all_dispatched(&db, &served, &ids, Duration::from_secs(120)).await;
    let redispatched = metric(
        &served,
        "rowbranch_pgmq_messages_total",
        "result=\"redispatched\"",
    )
    .await;
    assert!(
        redispatched > 0.0,
        "rows claimed by a killed process are dispatched again"
    );
    stop(served).await;

    let branches = branches(&dir.path().join("repo.git")).await;
    assert_eq!(branches.len(), 150, "one branch per row: {branches:?}");
    let branch_ids: BTreeSet<String> = branches
        .iter()
        .map(|b| {
            b.trim_start_matches("feedback/")
                .split('-')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(branch_ids, ids);
    let archived = db.archived().await;
    assert_eq!(
        archived.keys().cloned().collect::<BTreeSet<_>>(),
        ids,
        "every message archived"
    );
    let tried = per_row(&attempts);
    for (id, read_ct) in &archived {
        let n = tried.get(id).copied().unwrap_or(0);
        assert!(n >= 1, "row {id} was dispatched");
        assert!(
            n <= usize::try_from(*read_ct).unwrap(),
            "row {id}: {n} dispatches from a message read {read_ct} times"
        );
    }
    assert_eq!(db.depth().await, 0);
    assert!(db.dead_letters().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serve_processes_on_one_queue_give_one_branch_and_one_dispatch_per_row() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let first = dir_with_repository().await;
    let second = Arc::new(tempfile::tempdir().unwrap());
    let repo = first.path().join("repo.git");
    let config = local_config(
        &db,
        repo.to_str().unwrap(),
        "",
        "visibility_timeout_s = 60\nbatch = 10",
    );
    let a = start(&first, &db, &config).await;
    let b = start(&second, &db, &config).await;
    db.insert(1..=300).await;
    let seen = all_dispatched(&db, &a, &all_ids(1..=300), Duration::from_secs(120)).await;
    assert!(
        seen.values().all(|n| *n == 1),
        "one dispatch per row: {seen:?}"
    );
    assert_eq!(branches(&repo).await.len(), 300);
    let archived = |served| {
        metric(
            served,
            "rowbranch_pgmq_messages_total",
            "result=\"archived\"",
        )
    };
    let (by_a, by_b) =
        eventually_within("300 archives counted", Duration::from_secs(10), || async {
            let (by_a, by_b) = (archived(&a).await, archived(&b).await);
            (by_a + by_b >= 300.0).then_some((by_a, by_b))
        })
        .await;
    assert_eq!(by_a + by_b, 300.0);
    eprintln!("archived by the first process: {by_a}, by the second: {by_b}");
    stop(a).await;
    stop(b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_insert_sends_nothing_and_a_role_without_pgmq_rights_still_inserts() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    // The setup SQL run a second time changes nothing that matters here.
    db.apply_setup_sql().await;
    let inserter = db.role("inserter");
    db.client
        .batch_execute(&format!(
            "create role \"{inserter}\"; \
             grant usage on schema public to \"{inserter}\"; \
             grant insert on public.feedbacks to \"{inserter}\";"
        ))
        .await
        .unwrap();
    db.client
        .batch_execute(
            "begin; insert into public.feedbacks (id, message) values (1, 'Gone'); rollback;",
        )
        .await
        .unwrap();
    db.client
        .batch_execute(&format!(
            "set role \"{inserter}\"; \
             insert into public.feedbacks (id, message) values (2, 'From the app'); \
             reset role;"
        ))
        .await
        .expect("a role with no rights on pgmq inserts");
    db.insert(3..=3).await;
    assert_eq!(db.depth().await, 2, "two committed rows, two messages");

    let dir = dir_with_repository().await;
    let served = serve_reading(&dir, &db, "visibility_timeout_s = 60").await;
    let seen = all_dispatched(&db, &served, &all_ids(2..=3), Duration::from_secs(30)).await;
    assert!(
        !seen.contains_key("1"),
        "the rolled-back row is never dispatched"
    );
    assert_eq!(seen.len(), 2);
    stop(served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bad_and_unrouted_messages_are_dead_lettered_and_redrive_brings_one_back() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let malformed = db.send_raw(r#"{"hello":"world"}"#).await;
    let bad_id = db
        .send_raw(
            r#"{"type":"INSERT","table":"feedbacks","schema":"public","record":{"id":"../x","message":"Hi"},"old_record":null}"#,
        )
        .await;
    let unrouted = db
        .send_raw(
            r#"{"type":"INSERT","table":"ideas","schema":"public","record":{"id":7,"message":"An idea"},"old_record":null}"#,
        )
        .await;
    // pgmq.send takes an SQL NULL as a message, too.
    let null: i64 = db
        .client
        .query_one(
            "select pgmq.send($1::text, null::jsonb, 0::integer)",
            &[&db.queue],
        )
        .await
        .unwrap()
        .get(0);
    db.insert(1..=3).await;
    let dir = dir_with_repository().await;
    let config = local_config(&db, "repo.git", "", "visibility_timeout_s = 60");
    let served = start(&dir, &db, &config).await;
    let log = served.dispatch_log();
    all_dispatched(&db, &served, &all_ids(1..=3), Duration::from_secs(30)).await;
    let letters = db.dead_letters().await;
    let reasons: BTreeMap<i64, String> = letters
        .iter()
        .map(|(_, letter)| {
            (
                letter["msg_id"]
                    .as_i64()
                    .expect("the letter names its message"),
                letter["reason"]
                    .as_str()
                    .expect("the letter says why")
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        BTreeMap::from([
            (malformed, "malformed".to_owned()),
            (null, "malformed".to_owned()),
            (bad_id, "bad_id".to_owned()),
            (unrouted, "no_route".to_owned()),
        ])
    );
    let (unrouted_letter, letter) = letters
        .iter()
        .find(|(_, l)| l["reason"] == "no_route")
        .unwrap();
    assert_eq!(
        letter["message"]["record"]["message"], "An idea",
        "the message kept whole"
    );
    let dead = metric_once(
        &served,
        "rowbranch_pgmq_messages_total",
        "result=\"dead\"",
        4.0,
    )
    .await;
    assert_eq!(dead, 4.0);
    let logged = served.log();
    assert!(
        logged.contains("../x") && logged.contains("dead_letter_id"),
        "the bad id logged, and each dead letter's own id for redrive: {logged}"
    );
    stop(served).await;

    // The route the message wanted is added, for its table (serve refuses a route whose table
    // is not there); redrive sends it again, and it is dispatched.
    db.execute(
        "create table public.ideas (id bigint primary key, message text, \
           created_at timestamptz not null default now())",
    )
    .await;
    let with_ideas = format!(
        "{config}\n[[routes]]\ntable = \"ideas\"\nrepo = \"acme/app\"\nbranch_prefix = \"idea\"\n\
         event_type = \"idea\"\nintake = \"pgmq\"\n"
    );
    let served = start(&dir, &db, &with_ideas).await;
    let config_path = dir.path().join("rowbranch.toml");
    let redrive = |args: Vec<String>| {
        let url = db.url.clone();
        let config_path = config_path.clone();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_rowbranch"))
                .args(["queue", "redrive", "--config"])
                .arg(&config_path)
                .args(args)
                .env("DATABASE_URL", url)
                .output()
                .await
                .expect("rowbranch queue redrive runs")
        }
    };
    let out = redrive(vec!["--id".into(), "999999".into()]).await;
    assert_eq!(out.status.code(), Some(1), "no such dead letter");
    let out = redrive(vec!["--id".into(), unrouted_letter.to_string()]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("moved 1 dead letter"));
    eventually_within(
        "the redriven row's dispatch",
        Duration::from_secs(30),
        || async {
            dispatches(&log)
                .iter()
                .any(|d| d["event_type"] == "idea" && payload_id(&d["client_payload"]) == "7")
                .then_some(())
        },
    )
    .await;
    let left: BTreeSet<String> = db
        .dead_letters()
        .await
        .iter()
        .map(|(_, l)| l["reason"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        left,
        BTreeSet::from(["malformed".to_owned(), "bad_id".to_owned()])
    );
    stop(served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_unavailable_for_ten_backoff_rounds_dead_letters_nothing_and_every_row_is_dispatched_when_it_returns(
) {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let fake = github::fake().await;
    for op in Op::ROW_READS {
        fake.inject(op, Fault::Status(503), 1_000_000);
    }
    let options = GithubOptions {
        retry_budget_ms: 200,
        ..GithubOptions::default()
    };
    let config = format!(
        "{}intake = \"pgmq\"\n\n[pgmq]\nqueue = \"{}\"\ndead_letter = \"{}\"\npoll_interval_ms = 50\n\
         backoff_base_ms = 100\nbackoff_cap_ms = 400\nvisibility_timeout_s = 60\n",
        options.config_text(&fake),
        db.queue,
        db.dead
    );
    let served = serve_on_the_fake(&db, &config).await;
    db.insert(1..=5).await;
    eventually_within(
        "ten backoff rounds for each of the 5 rows",
        Duration::from_secs(90),
        || async {
            let retried = metric(
                &served,
                "rowbranch_pgmq_messages_total",
                "result=\"retried\"",
            )
            .await;
            (retried >= 50.0).then_some(())
        },
    )
    .await;
    assert!(fake.dispatches(REPO).is_empty());
    assert!(
        db.dead_letters().await.is_empty(),
        "never dead-lettered for retrying"
    );
    assert_eq!(db.depth().await, 5, "the rows wait in the queue");

    fake.clear_faults();
    eventually_within("the 5 rows dispatched", Duration::from_secs(30), || async {
        (fake.dispatches(REPO).len() >= 5 && db.depth().await == 0).then_some(())
    })
    .await;
    let dispatched: BTreeSet<String> = fake
        .dispatches(REPO)
        .iter()
        .map(|d| payload_id(&d.client_payload))
        .collect();
    assert_eq!(dispatched, all_ids(1..=5));
    assert_eq!(fake.dispatches(REPO).len(), 5, "one dispatch each");
    assert!(db.archived().await.values().all(|read_ct| *read_ct > 10));
    assert!(db.dead_letters().await.is_empty());
    stop(served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_shutdown_messages_waiting_on_the_pace_are_released_visible_at_once_and_read_once() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let fake = github::fake().await;
    // Two writes at once, then one a minute: the first row claims and dispatches, and the
    // four after it wait on the pace for their claims.
    let options = GithubOptions {
        write_interval_ms: 60_000,
        write_burst: 2,
        extra_top: "shutdown_grace = \"5s\"\n".into(),
        ..GithubOptions::default()
    };
    let config = format!(
        "{}intake = \"pgmq\"\n\n[pgmq]\nqueue = \"{}\"\ndead_letter = \"{}\"\npoll_interval_ms = 50\n\
         visibility_timeout_s = 600\n",
        options.config_text(&fake),
        db.queue,
        db.dead
    );
    let mut served = serve_on_the_fake(&db, &config).await;
    db.insert(1..=1).await;
    eventually_within(
        "the first row dispatched",
        Duration::from_secs(30),
        || async { (fake.dispatches(REPO).len() == 1).then_some(()) },
    )
    .await;
    db.insert(2..=5).await;
    eventually_within("one dispatch, four held", Duration::from_secs(30), || async {
        let held: i64 = db
            .client
            .query_one(
                &format!(
                    "select count(*) from pgmq.\"q_{}\" where read_ct = 1 and vt > now() + interval '1 minute'",
                    db.queue
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        (fake.dispatches(REPO).len() == 1 && held == 4).then_some(())
    })
    .await;
    served.stops_cleanly(Duration::from_secs(30)).await;
    let left: Vec<(i32, bool)> = db
        .client
        .query(
            &format!(
                "select read_ct, vt <= now() from pgmq.\"q_{}\" order by msg_id",
                db.queue
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        left,
        vec![(1, true); 4],
        "released: visible at once, read once; {}",
        served.log()
    );
    assert_eq!(fake.dispatches(REPO).len(), 1);
    assert_eq!(
        served.log().matches("result=\"released\"").count(),
        4,
        "{}",
        served.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_another_reader_takes_during_its_run_is_not_archived_but_its_run_dispatches() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    let gate = dir.path().join("gate");
    let config = local_config(
        &db,
        "repo.git",
        &format!(
            "on_dispatch = \"cat > /dev/null; while [ ! -e '{}' ]; do sleep 0.05; done\"",
            gate.display()
        ),
        "visibility_timeout_s = 60",
    );
    let served = start(&dir, &db, &config).await;
    db.insert(1..=1).await;
    // The row's run is dispatching (its on_dispatch waits at the gate): its message is held.
    eventually_within(
        "the row's message held",
        Duration::from_secs(30),
        || async {
            let held: i64 = db
                .client
                .query_one(
                    &format!(
                        "select count(*) from pgmq.\"q_{}\" where read_ct = 1 and vt > now()",
                        db.queue
                    ),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            (held == 1 && branches(&dir.path().join("repo.git")).await.len() == 1).then_some(())
        },
    )
    .await;
    // Another reader takes it: visible now, then read for ten minutes.
    let taken: i32 = db
        .client
        .query_one(
            &format!(
                "select m.read_ct from pgmq.set_vt('{q}'::text, (select msg_id from pgmq.\"q_{q}\"), 0) as s, \
                 lateral pgmq.read('{q}'::text, 600, 1) as m",
                q = db.queue
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(taken, 2);
    std::fs::write(&gate, "").unwrap();
    eventually_within("the lease found lost", Duration::from_secs(30), || async {
        served.log().contains("lease was lost").then_some(())
    })
    .await;
    assert_eq!(
        dispatches(&dir.path().join("dispatches.jsonl")).len(),
        1,
        "the run that claimed dispatched"
    );
    assert_eq!(db.depth().await, 1, "left to the reader that holds it");
    assert!(db.archived().await.is_empty(), "{}", served.log());
    let lost = metric_once(
        &served,
        "rowbranch_pgmq_messages_total",
        "result=\"lease_lost\"",
        1.0,
    )
    .await;
    assert_eq!(lost, 1.0);
    stop(served).await;
}

/// Each dispatch takes a moment, so that a batch is still being worked on when its
/// connection goes.
const SLOW_DISPATCH: &str = "cat > /dev/null; sleep 0.05";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumers_connection_terminated_mid_batch_reconnects_and_loses_nothing() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    let config = local_config(
        &db,
        "repo.git",
        &format!("on_dispatch = \"{SLOW_DISPATCH}\""),
        "visibility_timeout_s = 60\nbatch = 20",
    );
    let served = start(&dir, &db, &config).await;
    db.insert(1..=200).await;
    let log = served.dispatch_log();
    eventually_within("the first dispatches", Duration::from_secs(30), || async {
        (dispatches(&log).len() >= 30).then_some(())
    })
    .await;
    let terminated_at: chrono::DateTime<chrono::Utc> = db
        .client
        .query_one("select now()", &[])
        .await
        .unwrap()
        .get(0);
    let terminated: i64 = db
        .client
        .query_one(
            "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity \
             where datname = current_database() and pid <> pg_backend_pid()) as t",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        terminated >= 1,
        "the consumer's connection was there to terminate"
    );
    let seen = all_dispatched(&db, &served, &all_ids(1..=200), Duration::from_secs(120)).await;
    let archived = db.archived().await;
    assert_eq!(archived.len(), 200, "every message archived once");
    for (id, n) in &seen {
        assert!(
            *n <= usize::try_from(archived[id]).unwrap(),
            "row {id}: {n} dispatches from a message read {} times",
            archived[id]
        );
    }
    let reconnected: i64 = db
        .client
        .query_one(
            "select count(*) from pg_stat_activity \
             where datname = current_database() and pid <> pg_backend_pid() \
               and backend_start > $1::timestamptz",
            &[&terminated_at],
        )
        .await
        .unwrap()
        .get(0);
    assert!(reconnected >= 1, "the consumer opened a connection anew");
    assert!(
        served.log().contains("connected to the database again"),
        "it says it reconnected:\n{}",
        served.log()
    );
    stop(served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_kb_row_is_dispatched_with_its_text_cut_to_fit_the_payload() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let text = "Make the dashboard faster. ".repeat(12_000);
    assert!(text.len() > 300_000);
    db.client
        .execute(
            "insert into public.feedbacks (id, message) values (1, $1)",
            &[&text],
        )
        .await
        .unwrap();
    let dir = dir_with_repository().await;
    let served = serve_reading(&dir, &db, "visibility_timeout_s = 60").await;
    let log = served.dispatch_log();
    all_dispatched(&db, &served, &all_ids(1..=1), Duration::from_secs(30)).await;
    let line = std::fs::read_to_string(&log).unwrap();
    assert!(line.len() < 64_000, "the dispatch is {} bytes", line.len());
    let dispatch: Value = serde_json::from_str(line.trim()).unwrap();
    let sent = dispatch["client_payload"]["text"].as_str().unwrap();
    assert!(
        sent.len() > 1000 && text.starts_with(sent.trim_end_matches('…')),
        "the text cut, not lost"
    );
    let branches = branches(&dir.path().join("repo.git")).await;
    assert_eq!(branches.len(), 1);
    assert!(
        branches[0].starts_with("feedback/1-make-the-dashboard-faster"),
        "{branches:?}"
    );
    stop(served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_messages_past_archive_retention_are_deleted_from_both_archives() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    db.insert(1..=2).await;
    // Two messages archived eight days ago, one of them a redriven dead letter, and one today.
    db.client
        .batch_execute(&format!(
            "select pgmq.archive('{q}'::text, msg_id) from pgmq.\"q_{q}\"; \
             update pgmq.\"a_{q}\" set archived_at = now() - interval '8 days' \
               where message -> 'record' ->> 'id' = '1'; \
             select pgmq.send('{d}'::text, '{{\"reason\":\"bad_id\"}}'::jsonb, 0::integer); \
             select pgmq.archive('{d}'::text, msg_id) from pgmq.\"q_{d}\"; \
             update pgmq.\"a_{d}\" set archived_at = now() - interval '8 days';",
            q = db.queue,
            d = db.dead
        ))
        .await
        .unwrap();
    let dir = dir_with_repository().await;
    let served = serve_reading(&dir, &db, "archive_retention = \"7d\"").await;
    eventually_within(
        "the old archived messages deleted",
        Duration::from_secs(30),
        || async {
            let queue_archive = db.count(&format!("a_{}", db.queue)).await;
            let dead_archive = db.count(&format!("a_{}", db.dead)).await;
            (queue_archive == 1 && dead_archive == 0).then_some(())
        },
    )
    .await;
    assert_eq!(
        db.archived().await.keys().cloned().collect::<Vec<_>>(),
        vec!["2".to_owned()],
        "the message archived today is kept"
    );
    stop(served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_leaves_queued_rows_to_the_consumer_dates_claims_from_their_archive_and_reports_rows_never_queued(
) {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let trigger = format!("\"rowbranch_queue_{}\"", db.queue);
    // 1–3: in the queue, nobody reading it. 4: inserted ten minutes ago while the trigger was
    // off. 7: inserted just now with the trigger off, as a row that commits while the sweep
    // reads the queue looks: left to the consumer, not run or reported.
    db.insert(1..=3).await;
    db.client
        .batch_execute(&format!(
            "alter table public.feedbacks disable trigger {trigger}; \
             insert into public.feedbacks (id, message, created_at) \
               values (4, 'Row 4', now() - interval '10 minutes'); \
             insert into public.feedbacks (id, message) values (7, 'Row 7'); \
             alter table public.feedbacks enable trigger {trigger};"
        ))
        .await
        .unwrap();
    // 5 and 6: created three hours ago, claimed and never dispatched; 5's message was read
    // (and archived) a minute ago, out of a backlog; 6's three hours ago.
    db.client
        .batch_execute(&format!(
            "insert into public.feedbacks (id, message, created_at) \
               values (5, 'Row 5', now() - interval '3 hours'), (6, 'Row 6', now() - interval '3 hours'); \
             select pgmq.archive('{q}'::text, msg_id) from pgmq.\"q_{q}\" \
               where message -> 'record' ->> 'id' in ('5', '6'); \
             update pgmq.\"a_{q}\" set archived_at = now() - interval '1 minute' \
               where message -> 'record' ->> 'id' = '5'; \
             update pgmq.\"a_{q}\" set archived_at = now() - interval '3 hours' \
               where message -> 'record' ->> 'id' = '6';",
            q = db.queue
        ))
        .await
        .unwrap();
    let dir = dir_with_repository().await;
    let repo = dir.path().join("repo.git");
    for id in [5, 6] {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&repo)
            .args([
                "update-ref",
                &format!("refs/heads/feedback/{id}-row-{id}"),
                "main",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    let config = local_config(&db, "repo.git", "", "visibility_timeout_s = 60")
        .replace("shutdown_grace = \"5s\"", "stale_claim_after = \"1h\"");
    std::fs::write(dir.path().join("rowbranch.toml"), &config).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(["reconcile", "--json", "--since", "24h", "--config"])
        .arg(dir.path().join("rowbranch.toml"))
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    let route = &summary[0];
    assert_eq!(route["rows_seen"], 7, "{route}");
    assert_eq!(route["in_queue"], 4, "1–3 and the row just made: {route}");
    assert_eq!(route["not_queued"], serde_json::json!(["4"]), "{route}");
    assert_eq!(
        route["dispatched_now"], 1,
        "row 4, swept like any other: {route}"
    );
    assert_eq!(
        route["dead_claims"],
        serde_json::json!(["feedback/6-row-6"]),
        "5's claim is a minute old, counted from its message's archive: {route}"
    );
    assert_eq!(route["dead_claims_redispatched"], 1);
    let dispatched: BTreeSet<String> = per_row(&dir.path().join("dispatches.jsonl"))
        .into_keys()
        .collect();
    assert_eq!(dispatched, BTreeSet::from(["4".to_owned(), "6".to_owned()]));
    assert_eq!(db.depth().await, 3, "the sweep leaves the queue alone");
}

/// A route for `public.ideas` that reads the queue, beside the webhook's `feedbacks`.
const IDEAS_FROM_THE_QUEUE: &str = "\n[[routes]]\ntable = \"ideas\"\nrepo = \"acme/app\"\n\
     branch_prefix = \"idea\"\nevent_type = \"idea\"\nintake = \"pgmq\"\n";

#[tokio::test]
async fn a_webhook_for_a_table_whose_route_reads_the_queue_is_ignored_with_that_reason() {
    let app =
        spawn_app(Options::default().routes(&format!("{FEEDBACK_ROUTE}{IDEAS_FROM_THE_QUEUE}")))
            .await;
    let mut idea = insert(serde_json::json!(7), "An idea");
    idea["table"] = "ideas".into();
    let reply = app.post_json(&idea).await;
    reply.expect(200, "ignored");
    assert_eq!(reply.reason(), "pgmq_intake", "{:?}", reply.message());
    app.dispatched(serde_json::json!(1), "Dark mode").await;
    assert_eq!(
        app.branches().await,
        vec!["feedback/1-dark-mode".to_owned()]
    );
    app.shutdown().await;
}

/// `/readyz` once the consumer has tried the database.
async fn readyz_once_the_database_was_tried(client: &reqwest::Client, served: &Served) -> Reply {
    eventually_within(
        "/readyz to report the database",
        Duration::from_secs(30),
        || async {
            let reply = get(client, &format!("{}/readyz", served.url)).await;
            (reply.body["database"] != "not reached yet").then_some(reply)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_route_on_the_queue_webhook_is_404_and_readyz_needs_the_database() {
    // A database that does not answer: a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let unreachable = format!("postgres://rowbranch:secret-password@127.0.0.1:{port}/rows");
    let only_queue = format!(
        "listen = \"127.0.0.1:0\"\n[forge]\nkind = \"local\"\npath = \"repo.git\"\n{}intake = \"pgmq\"\n",
        FEEDBACK_ROUTE
    );
    let dir = dir_with_repository().await;
    let served = child::serve(
        Arc::clone(&dir),
        Start {
            config: &only_queue,
            env: vec![("DATABASE_URL", unreachable.clone())],
            nofile: None,
            secret: random_secret(),
        },
    )
    .await;
    let client = reqwest::Client::new();
    let webhook = client
        .post(format!("{}/webhook", served.url))
        .header("content-type", "application/json")
        .body(insert(serde_json::json!(1), "Hi").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(webhook.status(), 404);
    let ready = readyz_once_the_database_was_tried(&client, &served).await;
    assert_eq!(ready.status, 503, "{:?}", ready.body);
    assert_ne!(ready.body["database"], "ok");
    assert!(
        !ready.body.to_string().contains("secret-password"),
        "no password in the answer: {:?}",
        ready.body
    );
    stop(served).await;

    // With a webhook route beside it, the webhooks work on: ready, the database reported.
    let mixed = format!(
        "listen = \"127.0.0.1:0\"\n[forge]\nkind = \"local\"\npath = \"repo.git\"\n{FEEDBACK_ROUTE}{IDEAS_FROM_THE_QUEUE}"
    );
    let served = child::serve(
        Arc::clone(&dir),
        Start {
            config: &mixed,
            env: vec![("DATABASE_URL", unreachable)],
            nofile: None,
            secret: random_secret(),
        },
    )
    .await;
    let ready = readyz_once_the_database_was_tried(&client, &served).await;
    assert_eq!(ready.status, 200, "{:?}", ready.body);
    assert_ne!(ready.body["database"], "ok");
    stop(served).await;
}

#[tokio::test]
async fn a_route_on_the_queue_without_database_url_exits_2_saying_what_to_set() {
    let dir = dir_with_repository().await;
    let config = format!(
        "listen = \"127.0.0.1:0\"\n[forge]\nkind = \"local\"\npath = \"repo.git\"\n{FEEDBACK_ROUTE}intake = \"pgmq\"\n"
    );
    std::fs::write(dir.path().join("rowbranch.toml"), &config).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(["serve", "--config"])
        .arg(dir.path().join("rowbranch.toml"))
        .env_remove("DATABASE_URL")
        .env_remove("ROWBRANCH_WEBHOOK_SECRET")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DATABASE_URL is not set"), "{stderr}");
    assert!(
        !stderr.contains("WEBHOOK_SECRET"),
        "no secret is asked for: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_alone_reads_and_settles_the_queue_with_no_port_open() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    // The config names a port that is free: the run must leave it so.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let text = local_config(&db, "repo.git", "", "visibility_timeout_s = 60").replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"127.0.0.1:{port}\""),
    );
    let env = |key: &str| (key == "DATABASE_URL").then(|| db.url.clone());
    let config = rowbranch::config::Config::parse(&text, &dir.path().join("rowbranch.toml"), &env)
        .expect("the config parses");
    let env = Launch {
        mode: Mode::ConsumerOnly,
        ..Launch::process()
    };
    let application = Application::build(config, env)
        .await
        .expect("the consumer alone builds");
    assert_eq!(application.addr(), None);
    assert!(application.router().is_none());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(application.run(async {
        let _ = stopped.await;
    }));

    db.insert(1..=20).await;
    let log = dir.path().join("dispatches.jsonl");
    let seen = eventually_within(
        "every row dispatched and its message settled",
        Duration::from_secs(60),
        || async {
            let seen = per_row(&log);
            (seen.len() == 20 && db.depth().await == 0).then_some(seen)
        },
    )
    .await;
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        all_ids(1..=20)
    );
    assert!(seen.values().all(|n| *n == 1), "one dispatch per row");
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("nothing listens on the config's port");

    let _ = stop.send(());
    tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the run stops within the grace")
        .expect("the run did not panic")
        .expect("the run ends cleanly");
    let archived = db.archived().await;
    assert_eq!(
        archived.keys().cloned().collect::<BTreeSet<_>>(),
        all_ids(1..=20)
    );
    assert!(
        archived.values().all(|read_ct| *read_ct == 1),
        "each message read once"
    );
    assert!(db.dead_letters().await.is_empty());
    assert_eq!(branches(&dir.path().join("repo.git")).await.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_without_the_routes_text_column_is_dead_lettered_missing_column_and_redriven_once_fixed(
) {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    let config = local_config(&db, "repo.git", "", "visibility_timeout_s = 60");
    let served = start(&dir, &db, &config).await;
    // The text column renamed under the running consumer: the trigger's rows lack `message`.
    db.client
        .batch_execute("alter table public.feedbacks rename column message to body")
        .await
        .unwrap();
    db.client
        .execute(
            "insert into public.feedbacks (id, body) values (1, 'Renamed column')",
            &[],
        )
        .await
        .unwrap();
    let letters = eventually_within("the dead letter", Duration::from_secs(30), || async {
        let letters = db.dead_letters().await;
        (!letters.is_empty()).then_some(letters)
    })
    .await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].1["reason"], "missing_column", "{letters:?}");
    assert!(dispatches(&served.dispatch_log()).is_empty());
    // Logged once the dead letter is written: a moment after it shows in the table.
    eventually("the dead letter in the log", || async {
        let log = served.log();
        (log.contains("no `message` column") && log.contains("dead_letter_id")).then_some(())
    })
    .await;
    stop(served).await;

    // As it is, the route does not fit the table: serve does not start.
    let config_path = dir.path().join("rowbranch.toml");
    let mut serve = child::rowbranch(dir.path());
    serve.args(["serve", "--config"]).arg(&config_path);
    let out = child::run(serve.env("DATABASE_URL", &db.url)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no column \"message\"") && stderr.contains("id, body, created_at"),
        "{stderr}"
    );

    // Fixed, and the dead letter redriven: the row is dispatched.
    let fixed = config.replace("text_column = \"message\"", "text_column = \"body\"");
    let served = start(&dir, &db, &fixed).await;
    let mut redrive = child::rowbranch(dir.path());
    redrive
        .args(["queue", "redrive", "--all", "--config"])
        .arg(&config_path);
    let out = child::run(redrive.env("DATABASE_URL", &db.url)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = served.dispatch_log();
    eventually_within(
        "the redriven row's dispatch",
        Duration::from_secs(30),
        || async {
            dispatches(&log)
                .iter()
                .any(|d| d["client_payload"]["branch"] == "feedback/1-renamed-column")
                .then_some(())
        },
    )
    .await;
    stop(served).await;
}
