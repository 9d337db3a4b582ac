//! `doctor` holds the committed workflow to the route's bounds on one run: Claude's turns
//! (`--max-turns` in claude-code-action's `claude_args`, the route's `max_turns`) and the work
//! job's minutes (its `timeout-minutes`, the route's `work_timeout_minutes`). A bound that is
//! missing, not a number or above the route's fails with where to put it; one at or below it
//! passes. And what Claude may run: a Bash rule that takes every command fails.

use crate::support::github::{fake, GithubOptions, REPO};
use crate::support::random::random_secret;
use crate::support::tools::assert_says;

use super::doctor::{doctor, write_config};

/// A workflow whose work job runs claude-code-action, allowing the fake App's bot, with
/// `job` lines added to the job and `claude_args` given to the action when not empty.
fn workflow(job: &str, claude_args: &str) -> String {
    let args = if claude_args.is_empty() {
        String::new()
    } else {
        format!("          claude_args: {claude_args}\n")
    };
    format!(
        "on:\n  repository_dispatch:\n    types: [feedback]\njobs:\n  work:\n    runs-on: ubuntu-latest\n{job}    steps:\n      - uses: anthropics/claude-code-action@v1\n        with:\n          allowed_bots: \"rowbranch-test[bot]\"\n{args}          prompt: hi\n"
    )
}

/// `doctor` on `workflow`, committed, with `route` appended to the route of the config: its
/// exit code and its report.
async fn doctor_on(workflow: &str, route: &str) -> (i32, String) {
    let fake = fake().await;
    fake.add_workflow(REPO, "rowbranch.yml", workflow);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &fake, &GithubOptions::default());
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}\n{route}\n")).unwrap();
    doctor(&config, Some(&random_secret())).await
}

#[tokio::test]
async fn a_workflow_with_no_bound_on_a_run_fails_and_doctor_says_where_to_put_each() {
    let (code, out) = doctor_on(&workflow("", ""), "").await;
    assert_eq!(code, 1, "{out}");
    assert_says(
        &out,
        &[
        "✗ acme/app: .github/workflows/rowbranch.yml sets no --max-turns in job work: claude-code-action then lets Claude take as many turns as it likes, while the route's max_turns = 30",
        "fix: put `--max-turns 30` in the claude_args of that step (job work) and commit it to main",
        "✗ acme/app: .github/workflows/rowbranch.yml sets no timeout-minutes in job work: GitHub then lets the job run for 360 minutes, while the route's work_timeout_minutes = 30",
        "fix: set `timeout-minutes: 30` on job work and commit it to main",
        ],
    );
}

#[tokio::test]
async fn doctor_holds_the_workflow_to_the_routes_bounds() {
    let bounded = |minutes: &str, turns: &str| {
        workflow(
            &format!("    timeout-minutes: {minutes}\n"),
            &format!("--max-turns {turns} --allowedTools \"Bash(git commit:*),Edit\""),
        )
    };
    for (workflow, route, ok, expected) in [
        (
            bounded("30", "30"),
            "",
            true,
            &[
                "✓ acme/app: .github/workflows/rowbranch.yml bounds a run to 30 turns (--max-turns, the route's max_turns)",
                "✓ acme/app: .github/workflows/rowbranch.yml bounds a run to 30 minutes (timeout-minutes, the route's work_timeout_minutes)",
            ][..],
        ),
        (
            bounded("20", "10"),
            "",
            true,
            &[
                "✓ acme/app: .github/workflows/rowbranch.yml bounds a run to 10 turns (--max-turns), within the route's max_turns = 30",
                "✓ acme/app: .github/workflows/rowbranch.yml bounds a run to 20 minutes (timeout-minutes), within the route's work_timeout_minutes = 30",
            ],
        ),
        (
            bounded("30", "50"),
            "",
            false,
            &[
                "✗ acme/app: .github/workflows/rowbranch.yml allows 50 turns a run (--max-turns in job work), more than the route's max_turns = 30",
                "fix: put `--max-turns 30` in the claude_args of that step (job work) and commit it to main, or raise max_turns in the route to 50",
            ],
        ),
        (
            bounded("90", "30"),
            "",
            false,
            &[
                "✗ acme/app: .github/workflows/rowbranch.yml allows 90 minutes a run (timeout-minutes in job work), more than the route's work_timeout_minutes = 30",
            ],
        ),
        (
            bounded("90", "50"),
            "max_turns = 50\nwork_timeout_minutes = 90",
            true,
            &["bounds a run to 50 turns (--max-turns, the route's max_turns)"],
        ),
        (
            bounded("${{ vars.MINUTES }}", "30"),
            "",
            false,
            &["✗ acme/app: .github/workflows/rowbranch.yml: timeout-minutes in job work is \"${{ vars.MINUTES }}\", not a number rowbranch can hold to the route's work_timeout_minutes = 30"],
        ),
        (
            workflow("    timeout-minutes: 30\n", "--max-turns=30"),
            "",
            false,
            &["sets no --max-turns in job work"],
        ),
    ] {
        let (code, out) = doctor_on(&workflow, route).await;
        assert_eq!(code, if ok { 0 } else { 1 }, "{workflow}\n{route}\n{out}");
        for line in expected {
            assert!(out.contains(line), "missing {line:?} in:\n{out}");
        }
    }
}

#[tokio::test]
async fn a_bash_rule_that_takes_every_command_fails_and_doctor_names_it() {
    for rule in ["Bash", "Bash(*)", "Bash(git)", "Bash(git *)", "Bash(git:*)"] {
        let workflow = workflow(
            "    timeout-minutes: 30\n",
            &format!("--max-turns 30 --allowedTools \"Edit,{rule}\""),
        );
        let (code, out) = doctor_on(&workflow, "").await;
        assert_eq!(code, 1, "{rule}: {out}");
        assert_says(
            &out,
            &[
                &format!("✗ acme/app: .github/workflows/rowbranch.yml lets Claude run any command: `{rule}` in the --allowedTools of job work"),
                "fix: name the git commands the work needs instead, as `rowbranch init` writes them (Bash(git add:*),Bash(git commit:*),Bash(git status:*),Bash(git diff:*),Bash(git log:*)), and commit it to main",
            ],
        );
    }
}
