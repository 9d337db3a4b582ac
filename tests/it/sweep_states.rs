//! The sweep writes back the state each row's work shows (SPEC §6): from one listing of the
//! route's branches, one of its pull requests and one of its runs, against a real PostgreSQL
//! and the fake GitHub; and a gated route's scheduled sweep finds an approval days old.

use std::collections::BTreeSet;
use std::time::Duration;

use fake_github::{FakeGithub, Op, PullState, TEST_APP_PRIVATE_KEY_PEM};
use rowbranch::config::Config;
use rowbranch::db::Database;
use rowbranch::startup;
use rowbranch::sweep::{run as sweep, RouteSummary, SweepOptions};

use crate::support::app::SWEEP_FROM_LINE;
use crate::support::db::TestSchema;
use crate::support::github::{fake, GithubOptions, REPO};
use crate::support::or_skip;
use crate::support::random::random_secret;

const A_MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

/// The columns rowbranch writes, as the route names them.
const WRITES_BACK: &str =
    "status_column = \"rowbranch_status\"\npull_request_column = \"pull_request_url\"\n";

/// A gate on `status`, with the events a gated route must take.
const GATED: &str =
    "events = [\"INSERT\", \"UPDATE\"]\nrun_when = { column = \"status\", equals = \"approved\" }\n";

/// A fresh schema with a `feedbacks` table that has a gate column and the two columns
/// rowbranch writes; `None` (after saying why) without `DATABASE_URL`.
async fn feedbacks() -> Option<TestSchema> {
    let schema = TestSchema::create("states_").await?;
    schema
        .execute(&format!(
            "create table {} (id bigint primary key, message text, status text,
               rowbranch_status text, pull_request_url text,
               created_at timestamptz not null default now());",
            schema.table("feedbacks")
        ))
        .await;
    Some(schema)
}

/// Row `id`, its text `x`, its gate column `status` and its state `state`, created `age` ago.
async fn insert(table: &TestSchema, id: i64, status: &str, state: Option<&str>, age: Duration) {
    let sql = format!(
        "insert into {} (id, message, status, rowbranch_status, created_at)
         values ($1, 'x', $2, $3, now() - make_interval(secs => $4))",
        table.table("feedbacks")
    );
    let client = &table.client;
    let args: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&id, &status, &state, &age.as_secs_f64()];
    client.execute(&sql, &args).await.unwrap();
}

/// Each row's id, state and pull request link.
async fn states(table: &TestSchema) -> Vec<(i64, Option<String>, Option<String>)> {
    let sql = format!(
        "select id, rowbranch_status, pull_request_url from {} order by id",
        table.table("feedbacks")
    );
    let rows = table.client.query(&sql, &[]).await.unwrap();
    rows.iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The fake's route on `table`'s schema, with `route` added to it and `sweep_from` as given.
fn config(fake: &FakeGithub, table: &TestSchema, route: &str, sweep_from: &str) -> Config {
    let text = GithubOptions {
        write_interval_ms: 5,
        ..GithubOptions::default()
    }
    .config_text(fake)
    .replace(
        "[[routes]]\n",
        &format!("[[routes]]\nschema = \"{}\"\n{route}", table.name),
    )
    .replace(SWEEP_FROM_LINE, &format!("sweep_from = \"{sweep_from}\"\n"));
    let (secret, url) = (random_secret(), table.url.clone());
    let env = move |key: &str| match key {
        "ROWBRANCH_WEBHOOK_SECRET" => Some(secret.clone()),
        "GITHUB_APP_PRIVATE_KEY" => Some(TEST_APP_PRIVATE_KEY_PEM.to_owned()),
        "DATABASE_URL" => Some(url.clone()),
        _ => None,
    };
    Config::parse(&text, std::path::Path::new("rowbranch.toml"), &env).unwrap()
}

/// A reconcile's options over the last hour.
fn options() -> SweepOptions {
    SweepOptions {
        window: Duration::from_secs(3600),
        stale_claim_after: Duration::from_secs(3600),
        dry_run: false,
        concurrency: 4,
        page_size: 4,
        pgmq: crate::support::child::default_pgmq(),
        scheduled: false,
        states_only: false,
    }
}

/// One sweep, its writes awaited: its summary, how many requests it made to the repository
/// (the App's token aside), and the writer's count of rows it changed.
async fn run(
    fake: &FakeGithub,
    config: &Config,
    options: &SweepOptions,
) -> (RouteSummary, usize, u64) {
    let rows = Database::connect(config.database_url.as_ref().unwrap().expose())
        .await
        .unwrap();
    let shared = startup::Shared::default();
    let forge = startup::forge(config, &shared).await.unwrap();
    let pipeline = startup::pipeline(config, forge, &shared);
    let routes = rowbranch::pipeline::Routes::compile(config).unwrap();
    let before = repository_requests(fake);
    let mut summaries = sweep(&routes, &rows, &pipeline, options, &|_| {}).await;
    pipeline.drain().await;
    let written = (shared.metrics.render().lines())
        .find(|l| {
            l.starts_with("rowbranch_status_writes_total{") && l.contains("result=\"written\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0);
    (
        summaries.remove(0),
        repository_requests(fake) - before,
        written,
    )
}

/// The requests made so far, but for the App's own (its installation and tokens).
fn repository_requests(fake: &FakeGithub) -> usize {
    let app = [Op::GetInstallation, Op::MintToken, Op::GetApp];
    (fake.requests().iter())
        .filter(|r| r.op.is_some_and(|op| !app.contains(&op)))
        .count()
}

/// Row `id`'s finished work: its branch `feedback/{id}-x`, one commit ahead of its base.
fn worked(fake: &FakeGithub, id: i64) -> String {
    let branch = format!("feedback/{id}-x");
    fake.create_branch(REPO, &branch, "main");
    fake.push_commit(REPO, &branch);
    branch
}

fn row(id: i64, state: Option<&str>, pull: Option<u64>) -> (i64, Option<String>, Option<String>) {
    let link = pull.map(|n| format!("https://github.com/{REPO}/pull/{n}"));
    (id, state.map(str::to_owned), link)
}

#[tokio::test]
async fn each_rows_work_is_written_back_once_in_three_requests_whatever_the_rows() {
    let table = or_skip!(feedbacks().await);
    let fake = fake().await;
    for id in 1..=5 {
        insert(&table, id, "new", Some("dispatched"), A_MINUTE).await;
    }
    let open = fake.add_pull(REPO, &worked(&fake, 1), PullState::Open, false);
    // Merged, its branch deleted since.
    let merged = fake.add_pull(REPO, "feedback/2-x", PullState::Closed, true);
    let closed = fake.add_pull(REPO, &worked(&fake, 3), PullState::Closed, false);
    // The work's run ended with no pull request; row 5's is under way.
    let failed = worked(&fake, 4);
    fake.add_workflow_run(
        REPO,
        &format!("rowbranch: {failed}"),
        "completed",
        Some("success"),
    );
    let running = worked(&fake, 5);
    fake.add_workflow_run(REPO, &format!("rowbranch: {running}"), "in_progress", None);
    let config = config(&fake, &table, WRITES_BACK, "2026-01-01T00:00:00+00:00");

    let (first, requests, written) = run(&fake, &config, &options()).await;
    assert_eq!(first.failed, 0, "{first:?}");
    assert_eq!(first.states_written, 4, "{first:?}");
    assert_eq!(written, 4);
    assert_eq!(
        states(&table).await,
        [
            row(1, Some("pr_open"), Some(open)),
            row(2, Some("merged"), Some(merged)),
            row(3, Some("closed"), Some(closed)),
            row(4, Some("failed"), None),
            row(5, Some("dispatched"), None),
        ]
    );
    // The branches, the runs, the pull requests: nothing a row.
    assert_eq!(requests, 3, "{:?}", fake.requests());

    let (again, requests, written) = run(&fake, &config, &options()).await;
    assert_eq!(
        again.states_written, 0,
        "a second sweep writes nothing: {again:?}"
    );
    assert_eq!(written, 0);
    assert_eq!(requests, 3);

    // Thirty more rows, each with an open pull request, and row 1's merged meanwhile: still
    // three requests.
    let mut opened = Vec::new();
    for id in 10..40 {
        insert(&table, id, "new", None, A_MINUTE).await;
        opened.push(fake.add_pull(REPO, &worked(&fake, id), PullState::Open, false));
    }
    fake.set_pull_state(REPO, open, PullState::Closed, true);
    let (more, requests, written) = run(&fake, &config, &options()).await;
    assert_eq!(
        (more.rows_seen, more.states_written, written),
        (35, 31, 31),
        "{more:?}"
    );
    assert_eq!(requests, 3, "the requests do not grow with the rows");
    let now = states(&table).await;
    assert_eq!(now[0], row(1, Some("merged"), Some(open)));
    let expected: Vec<_> = (10..)
        .zip(&opened)
        .map(|(id, n)| row(id, Some("pr_open"), Some(*n)))
        .collect();
    assert_eq!(now[5..], expected[..]);
    assert!(fake.dispatches(REPO).is_empty(), "nothing ran");
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_redo_under_way_is_not_given_the_state_of_the_work_it_replaced() {
    let table = or_skip!(feedbacks().await);
    let fake = fake().await;
    insert(&table, 1, "new", Some("dispatched"), A_MINUTE).await;
    insert(&table, 2, "new", Some("dispatched"), A_MINUTE).await;
    // Row 1: merged, then redone on its own deleted branch's name (claimed again at the base).
    fake.add_pull(REPO, "feedback/1-x", PullState::Closed, true);
    fake.create_branch(REPO, "feedback/1-x", "main");
    // Row 2: its first run failed, and its redo's is under way.
    let first = worked(&fake, 2);
    fake.add_workflow_run(
        REPO,
        &format!("rowbranch: {first}"),
        "completed",
        Some("failure"),
    );
    fake.create_branch(REPO, "feedback/2-x-redo-1", "main");
    let config = config(&fake, &table, WRITES_BACK, "2026-01-01T00:00:00+00:00");
    let (summary, _, _) = run(&fake, &config, &options()).await;
    assert_eq!(summary.states_written, 0, "{summary:?}");
    assert_eq!(
        states(&table).await,
        [
            row(1, Some("dispatched"), None),
            row(2, Some("dispatched"), None)
        ]
    );
    // The redo's run ends with no pull request: now the row failed.
    fake.add_workflow_run(
        REPO,
        "rowbranch: feedback/2-x-redo-1",
        "completed",
        Some("success"),
    );
    let (summary, _, _) = run(&fake, &config, &options()).await;
    assert_eq!(summary.states_written, 1, "{summary:?}");
    assert_eq!(states(&table).await[1], row(2, Some("failed"), None));
}

#[tokio::test]
async fn a_gated_routes_scheduled_sweep_finds_an_approval_days_old_once_the_row_says_it_never_started(
) {
    let table = or_skip!(feedbacks().await);
    let fake = fake().await;
    let five_days = 5 * DAY;
    // Approved five days ago, never started: NULL, waiting, a column default rowbranch does
    // not know.
    insert(&table, 1, "approved", None, five_days).await;
    insert(&table, 2, "approved", Some("waiting"), five_days).await;
    insert(&table, 3, "approved", Some("new"), five_days).await;
    // Left: before sweep_from; not through the gate; started already.
    insert(&table, 4, "approved", None, 10 * DAY).await;
    insert(&table, 5, "new", None, five_days).await;
    insert(&table, 6, "approved", Some("dispatched"), five_days).await;
    // Within the window.
    insert(&table, 7, "approved", None, A_MINUTE).await;
    let sweep_from = (chrono::Utc::now() - chrono::Duration::days(7)).to_rfc3339();
    let scheduled = SweepOptions {
        scheduled: true,
        ..options()
    };
    let dispatched = |fake: &FakeGithub| -> BTreeSet<String> {
        (fake.dispatches(REPO).iter())
            .map(|d| d.client_payload["id"].as_str().unwrap_or("").to_owned())
            .collect()
    };

    // Without a status column nothing tells a row that never started from one long done:
    // the window alone is read.
    let windowed = config(&fake, &table, GATED, &sweep_from);
    let (summary, _, _) = run(&fake, &windowed, &scheduled).await;
    assert_eq!(
        (summary.rows_seen, summary.dispatched_now),
        (1, 1),
        "{summary:?}"
    );
    assert_eq!(dispatched(&fake), BTreeSet::from(["7".to_owned()]));

    let gated = config(&fake, &table, &format!("{GATED}{WRITES_BACK}"), &sweep_from);
    // An operator's reconcile reads its window, as before.
    let (summary, _, _) = run(&fake, &gated, &options()).await;
    assert_eq!(
        (summary.rows_seen, summary.dispatched_now),
        (1, 0),
        "{summary:?}"
    );
    let (summary, _, _) = run(&fake, &gated, &scheduled).await;
    assert_eq!(summary.failed, 0, "{summary:?}");
    assert_eq!(
        (summary.rows_seen, summary.dispatched_now),
        (4, 3),
        "{summary:?}"
    );
    let ids = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(dispatched(&fake), ids(&["1", "2", "3", "7"]));
    let now = states(&table).await;
    let started: Vec<_> = (now.iter())
        .filter(|(_, state, _)| state.as_deref() == Some("dispatched"))
        .map(|(id, _, _)| *id)
        .collect();
    assert_eq!(started, [1, 2, 3, 6]);

    // Started now: the next scheduled sweep reads the window alone again.
    let (summary, _, _) = run(&fake, &gated, &scheduled).await;
    assert_eq!(
        (summary.rows_seen, summary.dispatched_now),
        (1, 0),
        "{summary:?}"
    );
    assert_eq!(fake.dispatch_count(REPO), 4);
}
