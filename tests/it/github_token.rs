//! rowbranch on GitHub with a plain token (`[github] token_env`), against the fake GitHub's
//! plain tokens: a token that may write drains a queue route end to end with no JWT, no
//! installation lookup and no mint; one without Contents write is reported with the
//! permission it lacks at start (the probe) or, when the start check is skipped, at the first
//! write; the config refuses what cannot go with a token; and the token is in no log, even at
//! `RUST_LOG=debug`, nor in `rowbranch config`'s output.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fake_github::{Auth, FakeGithub, Op};
use rowbranch::config::Config;
use rowbranch::forge::ForgeError;
use rowbranch::identity::{BranchName, BranchPrefix, EventType, RepoName, RowId};
use rowbranch::startup::{self, Application, Launch, Listen, Mode, Shared, StartupError};
use serde_json::json;
use tempfile::TempDir;

use crate::support::app::FEEDBACK_ROUTE;
use crate::support::child::{self, Start};
use crate::support::db::{scalar, Install, Template, TestDb};
use crate::support::github::REPO;
use crate::support::or_skip;
use crate::support::random::random_secret;
use crate::support::setup::{apply, create_table, queue_context};
use crate::support::wait::{eventually_within, PATIENCE};

/// A workflow token's shape, made up; no output may show it.
pub const TOKEN: &str = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";

/// What the drain workflow's job is given: `permissions: contents: write, pull-requests: read,
/// actions: read`.
pub const DRAIN_PERMISSIONS: [(&str, &str); 3] = [
    ("contents", "write"),
    ("pull_requests", "read"),
    ("actions", "read"),
];

/// The same, without Contents write.
pub const READ_ONLY: [(&str, &str); 3] = [
    ("contents", "read"),
    ("pull_requests", "read"),
    ("actions", "read"),
];

/// What a token without Contents write is told, at start or at its first write.
pub const CANNOT_WRITE: &str = "the token cannot write acme/app: it lacks contents=write \
     (GitHub's X-Accepted-GitHub-Permissions); in the workflow, give the job `permissions: \
     contents: write`";

/// A fake with `acme/app` and `TOKEN` on it with `permissions`; no App installed.
pub async fn fake_with_token(permissions: &[(&str, &str)]) -> Arc<FakeGithub> {
    let fake = Arc::new(FakeGithub::start().await);
    fake.add_repo(REPO);
    fake.add_token(TOKEN, REPO, permissions);
    fake
}

/// The feedback route on the queue `queue`, on the fake with the token in `GITHUB_TOKEN`.
pub fn token_config(fake: &FakeGithub, queue: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nshutdown_grace = \"5s\"\n\n\
         [github]\ntoken_env = \"GITHUB_TOKEN\"\napi_url = \"{}\"\nretry_budget_ms = 500\n\n\
         [pgmq]\nqueue = \"{queue}\"\npoll_interval_ms = 50\nbackoff_base_ms = 100\n\
         backoff_cap_ms = 400\n{FEEDBACK_ROUTE}intake = \"pgmq\"\n",
        fake.url()
    )
}

fn parse(text: &str, database_url: Option<&str>) -> Config {
    let env = |key: &str| match key {
        "GITHUB_TOKEN" => Some(TOKEN.to_owned()),
        "DATABASE_URL" => database_url.map(str::to_owned),
        _ => None,
    };
    Config::parse(text, Path::new("rowbranch.toml"), &env).unwrap_or_else(|e| panic!("{e}"))
}

/// A database with pgmq, `public.feedbacks` and the queue's trigger on it; its queue's name.
async fn queue_db() -> Option<(TestDb, String)> {
    let db = TestDb::create(Template::Pgmq(Install::Extension)).await?;
    let queue = format!("rbq_{}", db.tag);
    create_table(&db, "public", "feedbacks").await;
    let ctx = queue_context("public", "feedbacks", &queue, &format!("{queue}_dead"));
    apply(&db, &ctx).await;
    Some((db, queue))
}

async fn depth(db: &TestDb, queue: &str) -> i64 {
    scalar(db, &format!("select count(*) from pgmq.\"q_{queue}\"")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_may_write_drains_the_queue_with_no_app_at_all() {
    let (db, queue) = or_skip!(queue_db().await);
    let fake = fake_with_token(&DRAIN_PERMISSIONS).await;
    let config = parse(&token_config(&fake, &queue), Some(&db.url));
    let env = Launch {
        mode: Mode::ConsumerOnly,
        ..Launch::process()
    };
    let application = Application::build(config, env).await.expect("it builds");
    application
        .check_write_access()
        .await
        .expect("the token may write");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(application.run(async {
        let _ = stopped.await;
    }));
    db.execute(
        "insert into public.feedbacks (id, message) \
         select n, 'Row ' || n from generate_series(1, 5) as n",
    )
    .await;
    eventually_within(
        "the five rows dispatched and settled",
        Duration::from_secs(60),
        || async {
            (fake.dispatches(REPO).len() == 5 && depth(&db, &queue).await == 0).then_some(())
        },
    )
    .await;
    let _ = stop.send(());
    tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the run stops")
        .expect("no panic")
        .expect("a clean end");

    let ids: BTreeSet<String> = fake
        .dispatches(REPO)
        .iter()
        .map(|d| d.client_payload["id"].to_string())
        .collect();
    assert_eq!(ids.len(), 5, "one dispatch a row");
    assert!(fake
        .dispatches(REPO)
        .iter()
        .all(|d| d.installation_id.is_none()));
    // No App: no JWT, no installation lookup, no token minted; every request the token's.
    assert!(fake.jwt_requests().is_empty());
    assert!(fake.requests_for(Op::GetInstallation).is_empty());
    assert_eq!(fake.token_mints(), 0);
    let requests = fake.requests();
    assert!(
        requests
            .iter()
            .all(|r| matches!(r.auth, Auth::Plain { .. })),
        "{requests:?}"
    );
    // The probe: one create of main's own ref, answered 422, then the five claims.
    let creates: Vec<Option<u16>> = fake
        .requests_for(Op::CreateRef)
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(creates[0], Some(422), "{creates:?}");
    assert_eq!(creates.iter().filter(|s| **s == Some(201)).count(), 5);
    assert_eq!(fake.refs(REPO).len(), 6, "main and five claims");
    fake.assert_no_unexpected();
}

/// A token's `serve`, not started: its application, built, listening nowhere that matters.
async fn built(fake: &FakeGithub) -> Application {
    let config = parse(&token_config(fake, "rowbranch"), None);
    let env = Launch {
        mode: Mode::Serve {
            listen: Listen::FreePort,
            warm_up: false,
        },
        ..Launch::process()
    };
    Application::build(config, env).await.expect("it builds")
}

#[tokio::test]
async fn a_token_without_contents_write_is_reported_at_start_with_the_permission_it_lacks() {
    let fake = fake_with_token(&READ_ONLY).await;
    let application = built(&fake).await;
    let error = application
        .check_write_access()
        .await
        .expect_err("a token that cannot write");
    assert!(matches!(error, StartupError::CannotWrite(_)), "{error:?}");
    let message = error.to_string();
    assert!(message.starts_with(CANNOT_WRITE), "{message}");
    assert!(!message.contains(TOKEN));
    // Asked without a change: the default branch and its head read, one create refused.
    assert_eq!(fake.refs(REPO), vec!["main"]);
    assert_eq!(fake.writes().len(), 1);
    assert_eq!(fake.requests_for(Op::CreateRef)[0].status, Some(403));
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_token_github_does_not_take_stops_the_start_saying_so() {
    let fake = fake_with_token(&DRAIN_PERMISSIONS).await;
    let text = token_config(&fake, "rowbranch");
    let env = |key: &str| (key == "GITHUB_TOKEN").then(|| "ghs_revoked".to_owned());
    let config = Config::parse(&text, Path::new("rowbranch.toml"), &env).unwrap();
    let env = Launch {
        mode: Mode::Serve {
            listen: Listen::FreePort,
            warm_up: false,
        },
        ..Launch::process()
    };
    let application = Application::build(config, env).await.expect("it builds");
    let error = application.check_write_access().await.expect_err("refused");
    let message = error.to_string();
    assert!(
        message.starts_with("could not check whether acme/app may be written: GitHub answered 401"),
        "{message}"
    );
    assert!(message.contains("Bad credentials"), "{message}");
    assert!(fake.writes().is_empty());
}

#[tokio::test]
async fn without_the_start_check_the_first_write_says_the_same() {
    let fake = fake_with_token(&READ_ONLY).await;
    let config = parse(&token_config(&fake, "rowbranch"), None);
    let forge = startup::forge(&config, &Shared::default())
        .await
        .expect("the forge opens");
    let repo = RepoName::parse(REPO).unwrap();
    let base = forge.base(&repo).await.expect("the token reads");
    let prefix = BranchPrefix::parse("feedback").unwrap();
    let branch = BranchName::new(&prefix, &RowId::parse(&json!(1)).unwrap(), None);
    let claimed = forge.claim(&repo, &branch, &base.sha).await;
    match claimed {
        Err(ForgeError::Refused { message }) => {
            assert!(message.starts_with(CANNOT_WRITE), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fake.requests_for(Op::CreateRef).len(),
        1,
        "a refusal is final"
    );
    let event = EventType::parse("feedback").unwrap();
    match forge.dispatch(&repo, &event, &json!({"id": 1})).await {
        Err(ForgeError::Unavailable { message, .. }) => {
            assert!(message.starts_with(CANNOT_WRITE), "{message}");
            assert!(!message.contains("App"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.dispatches(REPO).is_empty());
    fake.assert_no_unexpected();
}

/// `rowbranch` in a new folder, with `config` as its config file and the token set.
fn command(dir: &Path, config: &str, args: &[&str]) -> tokio::process::Command {
    std::fs::write(dir.join("rowbranch.toml"), config).unwrap();
    let mut command = child::rowbranch(dir);
    command
        .args(args)
        .args(["--config", "rowbranch.toml"])
        .env("GITHUB_TOKEN", TOKEN);
    command
}

#[tokio::test]
async fn serve_with_a_token_that_cannot_write_exits_1_saying_so_and_never_logs_the_token() {
    let fake = fake_with_token(&READ_ONLY).await;
    let dir = TempDir::new().unwrap();
    let mut serve = command(dir.path(), &token_config(&fake, "rowbranch"), &["serve"]);
    // A database that does not answer: serve starts all the same, and then asks GitHub.
    serve
        .env("DATABASE_URL", "postgres://rowbranch@127.0.0.1:1/none")
        .env("RUST_LOG", "trace");
    let out = child::run(&mut serve).await;
    let stderr = child::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("error: {CANNOT_WRITE}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("TRACE") || stderr.contains("DEBUG"),
        "{stderr}"
    );
    assert!(!stderr.contains(TOKEN), "the token in the log:\n{stderr}");
    assert!(!child::stdout(&out).contains(TOKEN));
}

#[tokio::test]
async fn what_cannot_go_with_a_token_is_refused_before_anything_starts() {
    let fake = fake_with_token(&DRAIN_PERMISSIONS).await;
    let text = token_config(&fake, "rowbranch");
    /// A config, the variables beside the token, and what the refusal says.
    type Case<'a> = (String, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 4] = [
        // A webhook route: only the App takes webhooks.
        (
            text.replace("intake = \"pgmq\"\n", ""),
            &[],
            &[
                "token_env = \"GITHUB_TOKEN\"",
                "takes webhooks",
                "intake = \"pgmq\"",
            ],
        ),
        // The App's id beside the token.
        (
            text.clone(),
            &[("GITHUB_APP_ID", "4242")],
            &["token_env = \"GITHUB_TOKEN\" and GITHUB_APP_ID are both set"],
        ),
        (
            text.replace("[github]\n", "[github]\nprivate_key_path = \"app.pem\"\n"),
            &[],
            &["and [github] private_key_path are both set"],
        ),
        // The variable unset.
        (
            text.replace("\"GITHUB_TOKEN\"", "\"ROWBRANCH_TEST_NO_SUCH_TOKEN\""),
            &[],
            &["ROWBRANCH_TEST_NO_SUCH_TOKEN is not set"],
        ),
    ];
    for (config, env, expected) in cases {
        let dir = TempDir::new().unwrap();
        let mut serve = command(dir.path(), &config, &["serve"]);
        serve.envs(env.iter().copied());
        let out = child::run(&mut serve).await;
        let stderr = child::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        for text in expected {
            assert!(stderr.contains(text), "{text:?} in:\n{stderr}");
        }
        assert!(!stderr.contains(TOKEN), "{stderr}");
    }
    assert!(fake.requests().is_empty(), "nothing reached GitHub");
}

#[tokio::test]
async fn rowbranch_config_prints_token_env_and_that_the_token_is_set_never_the_token() {
    let fake = fake_with_token(&DRAIN_PERMISSIONS).await;
    let dir = TempDir::new().unwrap();
    let mut config = command(dir.path(), &token_config(&fake, "rowbranch"), &["config"]);
    let out = child::run(&mut config).await;
    let (stdout, stderr) = (child::stdout(&out), child::stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.lines().any(|l| l == "token_env = \"GITHUB_TOKEN\""),
        "{stdout}"
    );
    assert!(!stdout.contains("app_id"), "{stdout}");
    assert!(
        stderr
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["GITHUB_TOKEN", "set"]),
        "{stderr}"
    );
    assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_a_token_drains_the_queue_and_its_debug_log_never_shows_the_token() {
    let (db, queue) = or_skip!(queue_db().await);
    let fake = fake_with_token(&DRAIN_PERMISSIONS).await;
    let mut served = child::serve(
        Arc::new(TempDir::new().unwrap()),
        Start {
            config: &token_config(&fake, &queue),
            env: vec![
                ("DATABASE_URL", db.url.clone()),
                ("GITHUB_TOKEN", TOKEN.to_owned()),
                ("RUST_LOG", "debug".to_owned()),
            ],
            nofile: None,
            secret: random_secret(),
        },
    )
    .await;
    db.execute("insert into public.feedbacks (id, message) values (1, 'One'), (2, 'Two')")
        .await;
    eventually_within("two dispatches", Duration::from_secs(60), || async {
        (fake.dispatches(REPO).len() == 2 && depth(&db, &queue).await == 0).then_some(())
    })
    .await;
    // `/readyz` asks GitHub with the token, uncounted.
    let ready = reqwest::get(format!("{}/readyz", served.url))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    assert!(!fake.requests_for(Op::RateLimit).is_empty());
    served.stops_cleanly(Duration::from_secs(20)).await;
    let log = served.log();
    assert!(log.contains("DEBUG"), "a debug log:\n{log}");
    assert!(log.contains("may write the repository"), "{log}");
    assert!(!log.contains(TOKEN), "the token in the log:\n{log}");
    fake.assert_no_unexpected();
}
