//! `rowbranch doctor` with a token (`[github] token_env`), the binary against the fake GitHub:
//! no App checks; the token's reach and its write permission (the probe); the work workflow
//! letting `github-actions[bot]` start the work; the drain workflow on the default branch and
//! enabled; and with a database, the queue and the kick's trigger and Vault secret.

use fake_github::FakeGithub;
use rowbranch::cli::HostArg;
use rowbranch::cmd::init::actions::ActionsSetup;
use rowbranch::cmd::init::setup::{render, SetupContext};
use tempfile::TempDir;

use crate::github_token::{
    fake_with_token, token_config, CANNOT_WRITE, DRAIN_PERMISSIONS, READ_ONLY, TOKEN,
};
use crate::support::child;
use crate::support::db::{db_message, Install, Template, TestDb};
use crate::support::github::REPO;
use crate::support::or_skip;
use crate::support::setup::{actions_example, apply, create_table, queue_context};
use crate::support::supabase::STAND_IN;
use crate::support::tools::output_text;

/// A work workflow whose claude-code-action step allows `allowed_bots`, bounded as the route
/// says by default.
fn work_workflow(allowed_bots: &str) -> String {
    format!(
        "name: rowbranch\non:\n  repository_dispatch:\n    types: [feedback]\njobs:\n  work:\n    runs-on: ubuntu-latest\n    timeout-minutes: 30\n    steps:\n      - uses: anthropics/claude-code-action@v1\n        with:\n          allowed_bots: {allowed_bots:?}\n          claude_args: --max-turns 30\n          prompt: hi\n"
    )
}

const DRAIN_WORKFLOW: &str = "name: rowbranch drain\non:\n  schedule:\n    - cron: '17 * * * *'\n  workflow_dispatch:\njobs:\n  drain:\n    runs-on: ubuntu-latest\n    steps:\n      - run: rowbranch drain\n";

/// A fake whose `acme/app` holds both workflows, the work one allowing `github-actions[bot]`.
async fn set_up(permissions: &[(&str, &str)]) -> std::sync::Arc<FakeGithub> {
    let fake = fake_with_token(permissions).await;
    fake.add_workflow(REPO, "rowbranch.yml", &work_workflow("github-actions[bot]"));
    fake.add_workflow(REPO, "rowbranch-drain.yml", DRAIN_WORKFLOW);
    fake
}

/// `doctor` for the token's config on `queue`, with `DATABASE_URL` when given: its exit code
/// and its output.
async fn doctor(fake: &FakeGithub, queue: &str, database_url: Option<&str>) -> (i32, String) {
    let dir = TempDir::new().unwrap();
    let config = dir.path().join("rowbranch.toml");
    std::fs::write(&config, token_config(fake, queue)).unwrap();
    let mut command = child::rowbranch(dir.path());
    command
        .args(["doctor", "--config"])
        .arg(&config)
        .env("GITHUB_TOKEN", TOKEN);
    if let Some(url) = database_url {
        command.env("DATABASE_URL", url);
    }
    let out = child::run(&mut command).await;
    let text = output_text(&out);
    assert!(
        !text.contains(TOKEN),
        "the token in doctor's output:\n{text}"
    );
    (out.status.code().unwrap_or(-1), text)
}

/// `out` has a line starting with each of `lines`.
#[track_caller]
fn has(out: &str, lines: &[&str]) {
    for line in lines {
        assert!(
            out.lines().any(|l| l.starts_with(line)),
            "no line starting {line:?} in:\n{out}"
        );
    }
}

/// Checks no line is about the App: with a token there is none to check.
fn no_app(out: &str, fake: &FakeGithub) {
    for app in ["private key", "App's JWT", "is installed", "app_id"] {
        assert!(!out.contains(app), "{app:?} in:\n{out}");
    }
    assert!(fake.jwt_requests().is_empty());
}

#[tokio::test]
async fn with_a_token_that_may_write_and_both_workflows_every_github_check_passes() {
    let fake = set_up(&DRAIN_PERMISSIONS).await;
    let (_, out) = doctor(&fake, "rowbranch", None).await;
    has(
        &out,
        &[
        "✓ GitHub token from GITHUB_TOKEN ([github] token_env): no App to check",
        "✓ acme/app: the token reads it: default branch main at ",
        "✓ acme/app: the token may write it (GitHub answered \"Reference already exists\"",
        "✓ acme/app: .github/workflows/rowbranch.yml runs on repository_dispatch `feedback`",
        "✓ acme/app: .github/workflows/rowbranch.yml lets GITHUB_TOKEN's bot github-actions[bot] start the work (allowed_bots)",
        "✓ acme/app: .github/workflows/rowbranch.yml bounds a run to 30 turns",
        "✓ acme/app: .github/workflows/rowbranch-drain.yml is on main",
        "✓ acme/app: rowbranch-drain.yml is active: GitHub runs its schedule",
        ],
    );
    // Only the database is missing here.
    let failed: Vec<&str> = out.lines().filter(|l| l.starts_with('✗')).collect();
    assert_eq!(
        failed,
        ["✗ a route reads the queue but DATABASE_URL is not set"],
        "{out}"
    );
    no_app(&out, &fake);
    assert_eq!(fake.refs(REPO), vec!["main"], "the probe changes nothing");
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_token_without_contents_write_fails_naming_the_permission_and_where_to_grant_it() {
    let fake = set_up(&READ_ONLY).await;
    let (code, out) = doctor(&fake, "rowbranch", None).await;
    assert_eq!(code, 1, "{out}");
    let (problem, fix) = CANNOT_WRITE.split_once("; ").unwrap();
    has(&out, &[&format!("✗ {problem}"), &format!("    fix: {fix}")]);
    // The rest is still checked.
    has(&out, &["✓ acme/app: rowbranch-drain.yml is active"]);
    no_app(&out, &fake);
}

#[tokio::test]
async fn a_missing_drain_workflow_and_a_work_workflow_closed_to_github_actions_fail() {
    let fake = fake_with_token(&DRAIN_PERMISSIONS).await;
    fake.add_workflow(REPO, "rowbranch.yml", &work_workflow("rowbranch-acme[bot]"));
    let (code, out) = doctor(&fake, "rowbranch", None).await;
    assert_eq!(code, 1, "{out}");
    has(&out, &["✗ acme/app: .github/workflows/rowbranch.yml does not let GITHUB_TOKEN's bot github-actions[bot] start the work", "    fix: set `allowed_bots: \"github-actions[bot]\"` in that step and commit it to main", "✗ acme/app: .github/workflows/rowbranch-drain.yml is not on main: nothing drains the queue", "    fix: copy rowbranch-drain.yml (`rowbranch init --host actions` writes it)"]);
    no_app(&out, &fake);
}

#[tokio::test]
async fn a_drain_workflow_github_disabled_for_inactivity_fails_with_how_to_enable_it() {
    let fake = set_up(&DRAIN_PERMISSIONS).await;
    fake.set_workflow_state(REPO, "rowbranch-drain.yml", "disabled_inactivity");
    let (code, out) = doctor(&fake, "rowbranch", None).await;
    assert_eq!(code, 1, "{out}");
    has(&out, &["✗ acme/app: rowbranch-drain.yml is disabled_inactivity: GitHub disabled it after 60 days without activity", "    fix: re-enable it: the Actions tab → the workflow → Enable workflow, or `gh workflow enable rowbranch-drain.yml`"]);
    fake.set_workflow_state(REPO, "rowbranch-drain.yml", "disabled_manually");
    let (_, out) = doctor(&fake, "rowbranch", None).await;
    has(
        &out,
        &["✗ acme/app: rowbranch-drain.yml is disabled_manually, not active"],
    );
}

#[tokio::test]
async fn a_token_that_may_not_read_actions_cannot_tell_the_schedule_and_says_so() {
    let fake = set_up(&[("contents", "write"), ("pull_requests", "read")]).await;
    let (_, out) = doctor(&fake, "rowbranch", None).await;
    has(&out, &["✗ acme/app: the token cannot read whether GitHub runs rowbranch-drain.yml: it lacks actions=read"]);
}

#[tokio::test]
async fn a_token_that_cannot_see_the_repository_says_so_and_checks_no_further() {
    let fake = set_up(&DRAIN_PERMISSIONS).await;
    fake.add_repo("acme/other");
    let dir = TempDir::new().unwrap();
    let config = dir.path().join("rowbranch.toml");
    let text =
        token_config(&fake, "rowbranch").replace("repo = \"acme/app\"", "repo = \"acme/other\"");
    std::fs::write(&config, text).unwrap();
    let mut command = child::rowbranch(dir.path());
    command
        .args(["doctor", "--config"])
        .arg(&config)
        .env("GITHUB_TOKEN", TOKEN);
    let out = output_text(&child::run(&mut command).await);
    has(
        &out,
        &["✗ acme/other: cannot read the default branch with the token: GitHub answered 404"],
    );
    assert!(out.contains("may the token see it?"), "{out}");
    assert!(!out.contains("rowbranch-drain.yml"), "{out}");
}

/// A database with pgmq and Supabase's stand-ins, `public.feedbacks` with the queue's trigger,
/// and the queue's name.
async fn database() -> Option<(TestDb, String, SetupContext)> {
    let db = TestDb::create(Template::Pgmq(Install::Sql)).await?;
    db.execute(STAND_IN).await;
    create_table(&db, "public", "feedbacks").await;
    let queue = format!("rbq_{}", db.tag);
    let ctx = SetupContext {
        host: HostArg::Actions,
        actions: Some(ActionsSetup {
            kick: true,
            ..actions_example()
        }),
        ..queue_context("public", "feedbacks", &queue, &format!("{queue}_dead"))
    };
    apply(&db, &ctx).await;
    Some((db, queue, ctx))
}

#[tokio::test]
async fn with_the_database_every_check_passes_and_the_kick_needs_its_vault_secret() {
    let (db, queue, ctx) = or_skip!(database().await);
    let fake = set_up(&DRAIN_PERMISSIONS).await;
    let (code, out) = doctor(&fake, &queue, Some(&db.url)).await;
    assert_eq!(code, 0, "{out}");
    has(
        &out,
        &[
            &format!("✓ queue {queue} exists, logged"),
            &format!("✓ no kick (no trigger rowbranch_kick_{queue})"),
        ],
    );
    no_app(&out, &fake);

    let kick = render("supabase-kick.sql", &ctx).expect("the kick renders");
    db.batch_execute(&kick)
        .await
        .unwrap_or_else(|e| panic!("supabase-kick.sql: {}", db_message(&e)));
    let (code, out) = doctor(&fake, &queue, Some(&db.url)).await;
    assert_eq!(code, 1, "{out}");
    has(&out, &[&format!("✓ \"public\".\"feedbacks\": trigger rowbranch_kick_{queue} asks GitHub to run the drain"), "✗ Vault has no secret rowbranch_kick_token"]);

    db.execute("select vault.create_secret('github_pat_kick', 'rowbranch_kick_token')")
        .await;
    let (code, out) = doctor(&fake, &queue, Some(&db.url)).await;
    assert_eq!(code, 0, "{out}");
    has(
        &out,
        &["✓ Vault holds the kick's token (secret rowbranch_kick_token; its value not read)"],
    );
    assert!(!out.contains("github_pat_kick"), "{out}");

    db.execute(&format!(
        "alter table public.feedbacks disable trigger \"rowbranch_kick_{queue}\""
    ))
    .await;
    let (code, out) = doctor(&fake, &queue, Some(&db.url)).await;
    assert_eq!(code, 1, "{out}");
    has(
        &out,
        &[&format!(
            "✗ \"public\".\"feedbacks\": trigger rowbranch_kick_{queue} is disabled"
        )],
    );
}

#[tokio::test]
async fn without_a_vault_schema_the_kicks_secret_is_a_note() {
    let Some(db) = TestDb::create(Template::Pgmq(Install::Sql)).await else {
        return;
    };
    create_table(&db, "public", "feedbacks").await;
    let queue = format!("rbq_{}", db.tag);
    apply(
        &db,
        &queue_context("public", "feedbacks", &queue, &format!("{queue}_dead")),
    )
    .await;
    // A kick trigger made by hand: the setup's own needs Vault.
    db.execute(&format!(
        "create function public.kick_stand_in() returns trigger language plpgsql as \
         $$ begin return null; end $$; \
         create trigger \"rowbranch_kick_{queue}\" after insert on public.feedbacks \
         for each statement execute function public.kick_stand_in()"
    ))
    .await;
    let fake = set_up(&DRAIN_PERMISSIONS).await;
    let (code, out) = doctor(&fake, &queue, Some(&db.url)).await;
    assert_eq!(code, 0, "{out}");
    has(&out, &["! this database has no vault.secrets, so the kick's secret rowbranch_kick_token cannot be checked"]);
}
