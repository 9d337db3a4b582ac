//! `rowbranch init --host actions`: the files it writes (and the App's it does not), the flags it
//! takes and refuses, and the drain workflow it renders — read as YAML, linted with actionlint
//! and shellcheck, every action pinned, the permissions, schedule, concurrency and time budget
//! it promises, and its scripts run with stand-ins for the release archive and for rowbranch.
//!
//! What the drain does once it runs is `rowbranch drain`'s own tests' business.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use rowbranch::cli::HostArg;
use rowbranch::cmd::doctor::workflow::{allows_bot, claude_steps};
use rowbranch::cmd::doctor::DRAIN_WORKFLOW_FILE;
use rowbranch::cmd::init::actions::{ActionsSetup, Every, Install, DRAIN_MAX_TIME_MINUTES};
use rowbranch::cmd::init::setup::{render, SetupContext};
use tempfile::TempDir;
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::setup::{actions_example, example};
use crate::support::tools::{
    actionlint, assert_says, assert_says_none, checked, have, have_actionlint, have_shellcheck,
    output_text, shellcheck,
};

const GIT_URL: &str = "https://github.com/acme/rowbranch";
const REV: &str = "0123456789abcdef0123456789abcdef01234567";

/// The actions the drain workflow may use, at the commits of these releases (the work
/// workflow pins the same ones). No cache: what the drain runs is never something another
/// job could have saved.
const PINS: &[(&str, &str, &str)] = &[(
    "actions/checkout",
    "fbc6f3992d24b796d5a048ff273f7fcc4a7b6c09",
    "v5.1.0",
)];

/// `rowbranch init` in `cwd`, with a GitHub that cannot be reached: `--host actions` asks
/// GitHub nothing.
fn init(cwd: &Path, args: &[&str]) -> Output {
    rowbranch_init(cwd, args, Some("http://127.0.0.1:9"))
}

fn rowbranch_init(cwd: &Path, args: &[&str], api_url: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rowbranch"));
    command.current_dir(cwd).arg("init").args(args);
    match api_url {
        Some(url) => command.env("GITHUB_API_URL", url),
        None => command.env_remove("GITHUB_API_URL"),
    };
    command.output().expect("the binary runs")
}

/// `init`'s arguments for the Actions way to run acme/app, then `rest`.
fn actions<'a>(rest: &[&'a str]) -> Vec<&'a str> {
    [&["--host", "actions", "--repo", "acme/app"][..], rest].concat()
}

/// `init --host actions` that installs rowbranch from `GIT_URL` at `REV`, with `extra`.
fn init_actions(cwd: &Path, extra: &[&str]) -> Output {
    let from_git = actions(&["--install-from-git", GIT_URL, "--rev", REV]);
    init(cwd, &[&from_git[..], extra].concat())
}

#[track_caller]
fn succeeded(out: &Output) -> String {
    assert!(out.status.success(), "{}", output_text(out));
    output_text(out)
}

#[track_caller]
fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{}", output_text(out));
    output_text(out)
}

/// The context `init --host actions` fills in, with `install` and `every`.
fn context(install: Install, every: &str) -> SetupContext {
    SetupContext {
        host: HostArg::Actions,
        app_slug: "github-actions".into(),
        actions: Some(ActionsSetup {
            every: Every::parse(every).unwrap(),
            install,
            ..actions_example()
        }),
        ..example()
    }
}

fn git() -> Install {
    Install::Git {
        url: GIT_URL.into(),
        rev: REV.into(),
    }
}

fn release(url: &str, sha256: &str) -> Install {
    Install::Release {
        url: url.into(),
        sha256: sha256.into(),
    }
}

fn drain_text(ctx: &SetupContext) -> String {
    render(DRAIN_WORKFLOW_FILE, ctx).expect("the drain workflow renders")
}

fn yaml(text: &str) -> Yaml {
    let mut docs = YamlLoader::load_from_str(text).expect("the drain workflow is YAML");
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

fn steps(doc: &Yaml) -> Vec<Yaml> {
    doc["jobs"]["drain"]["steps"]
        .as_vec()
        .expect("the drain job has steps")
        .clone()
}

fn step(doc: &Yaml, name: &str) -> Yaml {
    steps(doc)
        .into_iter()
        .find(|s| s["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no step named {name:?}"))
}

fn strings(map: &Yaml) -> BTreeMap<String, String> {
    map.as_hash()
        .map(|hash| {
            hash.iter()
                .map(|(k, v)| {
                    let value = match v {
                        Yaml::String(s) => s.clone(),
                        Yaml::Boolean(b) => b.to_string(),
                        Yaml::Integer(i) => i.to_string(),
                        other => panic!("{other:?}"),
                    };
                    (k.as_str().unwrap().to_owned(), value)
                })
                .collect()
        })
        .unwrap_or_default()
}

// ---- init ----

#[test]
fn init_writes_the_drain_setup_into_setup_and_nothing_of_an_app() {
    let dir = TempDir::new().unwrap();
    let printed = succeeded(&init_actions(dir.path(), &[]));
    let setup = dir.path().join("setup");
    for name in [
        "rowbranch.toml",
        "workflow.yml",
        "rowbranch-drain.yml",
        "supabase-queue.sql",
    ] {
        assert!(setup.join(name).is_file(), "{name} missing");
    }
    for name in [
        "app-manifest.json",
        "create-app.html",
        "rowbranch.env",
        "supabase-vault.sql",
        "supabase.sql",
        "supabase-kick.sql",
        "payload.json.j2",
        "app.pem",
    ] {
        assert!(!setup.join(name).exists(), "{name} written");
    }
    assert_says(
        &printed,
        &[
            "supabase-queue.sql",
            "Session pooler",
            "sslmode=verify-full",
            "ROWBRANCH_DATABASE_URL",
            "as .github/rowbranch/rowbranch.toml",
            "as .github/workflows/rowbranch.yml",
            "as .github/workflows/rowbranch-drain.yml",
            "as .github/rowbranch/supabase-ca.crt",
            "gh workflow run rowbranch-drain.yml --repo acme/app",
            "every hour",
            "Each run builds rowbranch",
            "nothing is cached",
            "rowbranch doctor --config setup/rowbranch.toml",
        ],
    );
    assert_says_none(
        &printed,
        &[
            "create-app.html",
            "--manifest-code",
            "Install the App",
            "webhook secret",
        ],
    );

    // The work is started by the drain job's GITHUB_TOKEN: its bot, and no App's.
    let work = fs::read_to_string(setup.join("workflow.yml")).unwrap();
    let claude = claude_steps(&work).expect("the work workflow is YAML");
    assert!(!claude.is_empty());
    for step in &claude {
        assert_eq!(step.allowed_bots, "github-actions[bot]");
        assert!(allows_bot(&step.allowed_bots, "github-actions"));
    }

    let config = fs::read_to_string(setup.join("rowbranch.toml")).unwrap();
    assert!(
        config.contains("\ntoken_env = \"GITHUB_TOKEN\""),
        "{config}"
    );
    assert_says_none(
        &config,
        &[
            "\napp_id",
            "\nprivate_key_path",
            "\npayload_template",
            "\n[webhook]",
        ],
    );
    assert!(config.contains("\nintake = \"pgmq\""), "{config}");
}

/// Parses the config `init --host actions` wrote: token auth (`[github] token_env`), the route
/// on the queue.
#[test]
fn the_written_config_parses_as_token_auth_reading_the_queue() {
    use rowbranch::config::{Config, Intake};
    let dir = TempDir::new().unwrap();
    succeeded(&init_actions(dir.path(), &[]));
    let path = dir.path().join("setup/rowbranch.toml");
    let text = fs::read_to_string(&path).unwrap();
    // As the drain job runs it: the workflow's token in GITHUB_TOKEN.
    let env = |key: &str| (key == "GITHUB_TOKEN").then(|| "ghs_the_jobs_token".to_owned());
    let config = Config::parse(&text, &path, &env).expect("the written config parses");
    assert_eq!(
        config.forge.token().map(|t| t.variable()),
        Some("GITHUB_TOKEN"),
        "token auth"
    );
    let route = &config.routes[0];
    let intake = Intake::Pgmq {
        max_rows_per_hour: Some(60),
    };
    assert_eq!(route.intake, intake);
    assert_eq!(route.payload_template, None, "the built-in payload");
}

#[test]
fn with_kick_init_writes_the_kick_and_says_where_its_token_goes() {
    let dir = TempDir::new().unwrap();
    let mut args = actions(&[
        "--install-from-git",
        GIT_URL,
        "--kick",
        "--dir",
        "out",
        "--default-branch",
        "trunk",
    ]);
    // --rev defaults to this build's commit, when the build knows it.
    let own = env!("ROWBRANCH_COMMIT");
    if own == "unknown" {
        args.extend(["--rev", REV]);
    }
    let printed = succeeded(&rowbranch_init(dir.path(), &args, None));
    let kick = fs::read_to_string(dir.path().join("out/supabase-kick.sql")).unwrap();
    assert!(kick.contains(
        "'https://api.github.com/repos/acme/app/actions/workflows/rowbranch-drain.yml/dispatches'"
    ));
    assert!(
        kick.contains("E'trunk'"),
        "the kick runs the default branch's workflow"
    );
    let drain = fs::read_to_string(dir.path().join("out/rowbranch-drain.yml")).unwrap();
    let rev = if own == "unknown" { REV } else { own };
    assert!(drain.contains(&format!("REV: \"{rev}\"")), "{drain}");
    assert!(kick.contains("\"rowbranch_kick_rowbranch\""));
    assert_says(
        &printed,
        &[
            "Fine-grained tokens",
            "Actions: Read and write",
            "access to acme/app only",
            "rowbranch_kick_token",
            "out/supabase-kick.sql",
        ],
    );
}

/// Flags that only the way with an App takes, and how init's refusal names each.
const APP_FLAGS: [(&[&str], &str); 4] = [
    (&["--url", "https://h.example"], "--url"),
    (&["--app-name", "x"], "--app-name"),
    (&["--owner-type", "user"], "--owner-type"),
    (&["--intake", "webhook"], "--intake webhook"),
];

#[test]
fn the_flags_of_an_app_are_refused_with_host_actions_and_the_actions_flags_without_it() {
    let dir = TempDir::new().unwrap();
    for (flags, named) in APP_FLAGS {
        let message = refused(&init_actions(dir.path(), flags));
        assert_says(&message, &[named, "--host actions takes no"]);
    }
    succeeded(&init_actions(dir.path(), &["--intake", "pgmq", "--force"]));

    for (flags, named) in [
        (&["--every", "1h"][..], "--every"),
        (&["--kick"][..], "--kick"),
        (&["--install-from-git", GIT_URL][..], "--install-from-git"),
    ] {
        let mut args = vec![
            "--repo",
            "acme/app",
            "--url",
            "https://h.example",
            "--owner-type",
            "user",
            "--dir",
            "server",
        ];
        args.extend_from_slice(flags);
        let message = refused(&init(dir.path(), &args));
        assert_says(&message, &[named, "add --host actions"]);
    }
    assert!(!dir.path().join("server").exists(), "nothing written");
}

#[test]
fn the_schedule_the_install_and_the_branch_are_checked_before_anything_is_written() {
    let dir = TempDir::new().unwrap();
    for (flags, says) in [
        (&["--every", "7m"][..], "1h, 2h"),
        (&["--every", "1m"][..], "shortest"),
        (
            &["--kick", "--default-branch", "a b"][..],
            "--default-branch",
        ),
    ] {
        let message = refused(&init_actions(dir.path(), flags));
        assert!(message.contains(says), "{flags:?}: {message}");
    }
    for (source, says) in [
        (
            &["--install-from-git", GIT_URL, "--rev", "main"][..],
            "not a commit id",
        ),
        (
            &["--install-from-git", "http://example.com/r", "--rev", REV][..],
            "must be an https:// URL",
        ),
        (
            &[
                "--release-url",
                "https://example.com/r.tar.gz",
                "--release-sha256",
                "abc",
            ][..],
            "64 hexadecimal digits",
        ),
    ] {
        let message = refused(&init(dir.path(), &actions(source)));
        assert!(message.contains(says), "{source:?}: {message}");
    }
    let without_source = refused(&init(dir.path(), &actions(&[])));
    assert!(
        without_source.contains("--install-from-git URL")
            && without_source.contains("--release-url URL"),
        "{without_source}"
    );
    assert!(
        without_source.find("--release-url") < without_source.find("--install-from-git"),
        "the release archive is the way offered first: {without_source}"
    );
    assert!(!dir.path().join("setup").exists(), "nothing written");
}

#[test]
fn every_sets_the_schedule_the_workflow_runs_on() {
    let dir = TempDir::new().unwrap();
    for every in ["5m", "15m", "1h", "6h", "1d"] {
        let out = format!("every-{every}");
        let printed = succeeded(&init_actions(
            dir.path(),
            &["--every", every, "--dir", &out],
        ));
        let text = fs::read_to_string(dir.path().join(&out).join(DRAIN_WORKFLOW_FILE)).unwrap();
        let doc = yaml(&text);
        let every = Every::parse(every).unwrap();
        let schedule = doc["on"]["schedule"].as_vec().expect("a schedule");
        assert_eq!(schedule.len(), 1);
        assert_eq!(
            schedule[0]["cron"].as_str(),
            Some(every.cron("acme/app").as_str())
        );
        let expected = every.words();
        assert!(
            printed.contains(&format!("runs every {expected}")),
            "{printed}"
        );
        assert!(text.contains(&format!("# - every {expected}, on the schedule")));
    }
}

// ---- the drain workflow ----

#[test]
fn actionlint_and_shellcheck_find_nothing_wrong_with_the_drain_workflow() {
    if !have_actionlint() {
        return;
    }
    let dir = TempDir::new().unwrap();
    let sum = "a".repeat(64);
    for (i, install) in [git(), release("https://example.com/r.tar.gz", &sum)]
        .into_iter()
        .enumerate()
    {
        let text = drain_text(&context(install, "15m"));
        let path = dir.path().join(format!("drain-{i}.yml"));
        fs::write(&path, &text).unwrap();
        actionlint(&path);
        if have_shellcheck() {
            for (n, step) in steps(&yaml(&text)).iter().enumerate() {
                let Some(script) = step["run"].as_str() else {
                    continue;
                };
                let script_path = dir.path().join(format!("drain-{i}-{n}.sh"));
                fs::write(&script_path, script).unwrap();
                shellcheck(&script_path);
            }
        }
    }
}

#[test]
fn every_action_is_pinned_to_a_release_commit_with_its_version_beside_it() {
    let sum = "a".repeat(64);
    for install in [git(), release("https://example.com/r.tar.gz", &sum)] {
        let text = drain_text(&context(install, "1h"));
        let uses: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("uses:") || l.starts_with("- uses:"))
            .collect();
        assert!(!uses.is_empty());
        for line in uses {
            let spec = line
                .trim_start_matches("- ")
                .trim_start_matches("uses:")
                .trim();
            let (action, rest) = spec.split_once('@').expect("an action@ref");
            let (sha, comment) = rest.split_once(" # ").expect("a version comment");
            let &(_, pinned, version) = PINS
                .iter()
                .find(|(name, _, _)| *name == action)
                .unwrap_or_else(|| panic!("{action} is not one of the pinned actions"));
            assert_eq!(sha, pinned, "{line}");
            assert_eq!(comment, version, "{line}");
        }
    }
}

#[test]
fn where_both_workflows_pin_an_action_they_pin_the_same_commit() {
    let ctx = context(git(), "1h");
    let work = render("workflow.yml", &ctx).unwrap();
    let drain = drain_text(&ctx);
    let pins = |text: &str| -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.trim().trim_start_matches("- ").strip_prefix("uses:"))
            .filter_map(|spec| {
                let (action, rest) = spec.trim().split_once('@')?;
                let sha = rest.split_whitespace().next()?;
                let pinned = sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit());
                pinned.then(|| (action.to_owned(), sha.to_owned()))
            })
            .collect()
    };
    let work = pins(&work);
    for (action, sha) in pins(&drain) {
        if let Some(other) = work.get(&action) {
            assert_eq!(other, &sha, "{action}");
        }
    }
}

#[test]
fn the_token_may_do_exactly_what_the_drain_needs() {
    let doc = yaml(&drain_text(&context(git(), "1h")));
    let permissions = strings(&doc["permissions"]);
    let expected: BTreeMap<String, String> = [
        ("contents", "write"),
        ("pull-requests", "read"),
        ("actions", "read"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(permissions, expected);
    let jobs = doc["jobs"].as_hash().unwrap();
    assert_eq!(jobs.len(), 1, "one job");
    assert!(
        doc["jobs"]["drain"]["permissions"].is_badvalue(),
        "the job asks for nothing more"
    );
}

#[test]
fn it_runs_on_demand_and_on_schedule_and_never_two_at_once() {
    let doc = yaml(&drain_text(&context(git(), "30m")));
    assert_eq!(
        doc["on"]["schedule"][0]["cron"].as_str(),
        Some(Every::parse("30m").unwrap().cron("acme/app").as_str())
    );
    let dispatch = &doc["on"]["workflow_dispatch"];
    assert!(
        !dispatch.is_badvalue(),
        "the kick and a person can start it"
    );
    assert_eq!(
        dispatch["inputs"]["sweep"]["type"].as_str(),
        Some("boolean")
    );
    assert_eq!(
        dispatch["inputs"]["sweep"]["default"].as_bool(),
        Some(false)
    );
    assert_eq!(
        doc["concurrency"]["group"].as_str(),
        Some("rowbranch-drain")
    );
    assert_eq!(
        doc["concurrency"]["cancel-in-progress"].as_bool(),
        Some(false)
    );
}

#[test]
fn the_timeout_covers_the_install_the_drain_and_its_grace() {
    let sum = "a".repeat(64);
    for install in [git(), release("https://example.com/r.tar.gz", &sum)] {
        let ctx = context(install.clone(), "1h");
        let doc = yaml(&drain_text(&ctx));
        let timeout = doc["jobs"]["drain"]["timeout-minutes"]
            .as_i64()
            .expect("a timeout");
        assert_eq!(
            timeout,
            i64::from(ctx.actions.as_ref().unwrap().timeout_minutes())
        );
        let drain = step(&doc, "Drain the queue");
        let script = drain["run"].as_str().unwrap();
        let max_time = format!("--max-time {DRAIN_MAX_TIME_MINUTES}m");
        assert!(script.contains(&max_time), "{script}");
        // The install at its slowest, the drain's whole --max-time, a minute for the runner
        // and the checkout, and one to spare.
        let needed = install.minutes() + DRAIN_MAX_TIME_MINUTES + 2;
        assert!(timeout >= i64::from(needed), "{timeout} < {needed}");
        assert!(
            timeout <= 60,
            "a stuck run is stopped within the hour: {timeout}"
        );
    }
}

#[test]
fn only_the_drain_step_holds_the_database_and_the_token() {
    let doc = yaml(&drain_text(&context(git(), "1h")));
    let drain = step(&doc, "Drain the queue");
    let env = strings(&drain["env"]);
    assert_eq!(env["DATABASE_URL"], "${{ secrets.ROWBRANCH_DATABASE_URL }}");
    assert_eq!(env["GITHUB_TOKEN"], "${{ github.token }}");
    assert_eq!(env["CONFIG"], ".github/rowbranch/rowbranch.toml");
    for other in steps(&doc) {
        if other["name"].as_str() == Some("Drain the queue") {
            continue;
        }
        let text = format!("{:?}", other);
        assert!(!text.contains("secrets."), "{text}");
        assert!(!text.contains("github.token"), "{text}");
        if let Some(script) = other["run"].as_str() {
            assert!(
                !script.contains("${{"),
                "values reach scripts through env: {script}"
            );
        }
    }
    assert!(
        doc["jobs"]["drain"]["env"].is_badvalue() && doc["env"].is_badvalue(),
        "nothing is given to every step"
    );
    let checkout = step(&doc, "Check out rowbranch's config");
    let with = strings(&checkout["with"]);
    assert_eq!(with["sparse-checkout"], ".github/rowbranch");
    assert_eq!(with["persist-credentials"], "false");
}

#[test]
fn from_git_it_builds_the_commit_on_every_run_and_restores_nothing_from_a_cache() {
    let doc = yaml(&drain_text(&context(git(), "1h")));
    let build = step(&doc, "Build rowbranch");
    assert!(build["if"].is_badvalue(), "every run builds");
    let env = strings(&build["env"]);
    assert_eq!(env["SOURCE"], GIT_URL);
    assert_eq!(env["REV"], REV);
    let run = build["run"].as_str().unwrap();
    assert!(
        run.contains("cargo install --locked --git \"$SOURCE\" --rev \"$REV\""),
        "{run}"
    );
    // Before it first runs, the binary must say it is of that commit.
    let all = steps(&doc);
    let names: Vec<&str> = all
        .iter()
        .map(|s| s["name"].as_str().unwrap_or_default())
        .collect();
    let at = |name: &str| names.iter().position(|n| *n == name).unwrap();
    assert!(at("Build rowbranch") < at("rowbranch is the one of that commit"));
    assert!(at("rowbranch is the one of that commit") < at("Drain the queue"));
    let sum = "a".repeat(64);
    for install in [git(), release("https://example.com/r.tar.gz", &sum)] {
        let text = drain_text(&context(install, "1h"));
        assert!(!text.contains("actions/cache"), "{text}");
        assert!(!text.contains("cache-hit"), "{text}");
    }
}

/// Runs one step's script as the runner would, with `env` and the step's own `env:`.
fn run_step(step: &Yaml, cwd: &Path, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new("bash");
    command
        .args(["-e", "-o", "pipefail", "-c"])
        .arg(step["run"].as_str().expect("a run step"))
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap());
    for (k, v) in strings(&step["env"]) {
        command.env(k, v);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

#[test]
fn a_release_archive_runs_only_when_its_checksum_matches() {
    if !have("curl", "apt-get install -y curl") {
        return;
    }
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    // A release's archive as the release workflow packs it: a folder with the binary.
    let packed = root.join("pack/rowbranch-v0.1.0-x86_64-unknown-linux-gnu");
    fs::create_dir_all(&packed).unwrap();
    fs::write(
        packed.join("rowbranch"),
        "#!/bin/sh\necho 'rowbranch 0.1.0 (commit 0123456789ab)'\n",
    )
    .unwrap();
    let archive = root.join("release.tar.gz");
    checked(
        Command::new("tar")
            .arg("-czf")
            .arg(&archive)
            .arg("-C")
            .arg(root.join("pack"))
            .arg("rowbranch-v0.1.0-x86_64-unknown-linux-gnu"),
    );
    let sum = checked(Command::new("sha256sum").arg(&archive));
    let sum = sum.split_whitespace().next().unwrap().to_owned();
    let url = format!("file://{}", archive.display());

    for (given, works) in [("0".repeat(64), false), (sum, true)] {
        let home = TempDir::new().unwrap();
        let temp = TempDir::new().unwrap();
        let doc = yaml(&drain_text(&context(release(&url, &given), "1h")));
        let out = run_step(
            &step(&doc, "Download rowbranch"),
            root,
            &[
                ("HOME", home.path().to_str().unwrap()),
                ("RUNNER_TEMP", temp.path().to_str().unwrap()),
            ],
        );
        let installed = home.path().join(".rowbranch/bin/rowbranch");
        assert_eq!(out.status.success(), works, "{}", output_text(&out));
        assert_eq!(installed.exists(), works, "{}", output_text(&out));
        if works {
            assert!(output_text(&out).contains("(commit 0123456789ab)"));
        }
    }
}

#[test]
fn the_drain_step_runs_drain_with_the_committed_config_and_sweeps_when_asked() {
    let dir = TempDir::new().unwrap();
    let home = dir.path().join("home");
    let bin = home.join(".rowbranch/bin");
    fs::create_dir_all(&bin).unwrap();
    let calls = dir.path().join("calls");
    fs::write(
        bin.join("rowbranch"),
        format!(
            "#!/bin/sh\nprintf '%s ' \"$@\" >> '{}'\necho \"$DATABASE_URL\" >> '{0}'\n",
            calls.display()
        ),
    )
    .unwrap();
    checked(Command::new("chmod").arg("+x").arg(bin.join("rowbranch")));
    let doc = yaml(&drain_text(&context(git(), "1h")));
    let drain = step(&doc, "Drain the queue");
    for sweep in ["", "false", "true"] {
        let out = run_step(
            &drain,
            dir.path(),
            &[
                ("HOME", home.to_str().unwrap()),
                ("SWEEP", sweep),
                ("DATABASE_URL", "postgres://stand-in"),
            ],
        );
        assert!(out.status.success(), "{}", output_text(&out));
    }
    let calls = fs::read_to_string(&calls).unwrap();
    let plain = "drain --config .github/rowbranch/rowbranch.toml --max-time 4m";
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            format!("{plain} postgres://stand-in"),
            format!("{plain} postgres://stand-in"),
            format!("{plain} --sweep postgres://stand-in"),
        ]
    );
}

#[test]
fn a_committed_ca_becomes_the_databases_trusted_root() {
    let doc = yaml(&drain_text(&context(git(), "1h")));
    let trust = step(&doc, "Trust the database's CA");
    let dir = TempDir::new().unwrap();
    let home = TempDir::new().unwrap();
    let home_path = home.path().to_str().unwrap();
    let without = run_step(&trust, dir.path(), &[("HOME", home_path)]);
    assert!(without.status.success(), "{}", output_text(&without));
    assert!(output_text(&without).contains("::notice::"));
    assert!(!home.path().join(".postgresql/root.crt").exists());

    fs::create_dir_all(dir.path().join(".github/rowbranch")).unwrap();
    fs::write(dir.path().join(".github/rowbranch/supabase-ca.crt"), "CA").unwrap();
    let with = run_step(&trust, dir.path(), &[("HOME", home_path)]);
    assert!(with.status.success(), "{}", output_text(&with));
    assert_eq!(
        fs::read_to_string(home.path().join(".postgresql/root.crt")).unwrap(),
        "CA"
    );
}
