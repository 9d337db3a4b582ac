//! What one row's run may cost and run, in the workflow `rowbranch init` writes: every action
//! pinned to the full commit SHA of a release, with that release beside it, in every workflow
//! init writes (with its defaults, with its options, once `--manifest-code` has named the App's
//! bot, and once the header's steps for the App's token are followed); the bounds on one run —
//! Claude's turns, the work job's minutes — written both into the workflow and into the route
//! that `doctor` holds the workflow to; and the App's key, on that optional path, in an
//! environment only the finish job references; and the hosts and paths init adds to the
//! sandbox's allowlist and the finish job's refusals. (The finish job's refusals and the authorship
//! of what it pushes are run in `setup_workflow`; doctor against the fake GitHub is in
//! `github::doctor_bounds`.)

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use rowbranch::cmd::doctor::workflow::{claude_steps, Bound};
use rowbranch::cmd::init::set_allowed_bots;
use rowbranch::config::Config;
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::tools::{actionlint, have_actionlint};

/// `rowbranch init --dir DIR --repo acme/app --owner-type organization` with `flags`.
fn init(dir: &Path, flags: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(["init", "--dir", dir.to_str().unwrap(), "--repo", "acme/app"])
        .args(["--owner-type", "organization"])
        .args(flags)
        .env_remove("GITHUB_API_URL")
        .output()
        .expect("the binary runs")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// A new folder where `init` with `flags` has succeeded.
fn initialized(flags: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = init(dir.path(), flags);
    assert!(out.status.success(), "init {flags:?}: {}", text(&out));
    dir
}

/// The workflow `init` writes with `flags`, which must succeed.
fn workflow_from_init(flags: &[&str]) -> String {
    std::fs::read_to_string(initialized(flags).path().join("workflow.yml")).unwrap()
}

/// The ways `init` is run: its defaults, the queue, and every option that reaches the workflow.
const INITS: &[&[&str]] = &[
    &["--url", "https://hooks.example.com"],
    &["--intake", "pgmq"],
    &[
        "--url",
        "https://hooks.example.com",
        "--app-name",
        "Acme Rows",
        "--table",
        "wishes",
        "--schema",
        "app",
        "--branch-prefix",
        "wish",
        "--event-type",
        "row-inserted",
        "--max-turns",
        "7",
        "--work-timeout-minutes",
        "360",
        "--allow-host",
        "index.crates.io",
        "--refuse-path",
        "deploy/",
    ],
];

/// One `uses:` line: the action, the commit, the release in the comment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pin {
    action: String,
    sha: String,
    version: String,
}

/// A `uses:` line read as `owner/name[/path]@<40 hex> # vX.Y.Z`, commented out or not; what
/// is wrong with it otherwise.
fn pin(line: &str) -> Result<Pin, String> {
    let uses = line
        .trim_start()
        .trim_start_matches('#')
        .trim_start()
        .trim_start_matches("- ")
        .strip_prefix("uses:")
        .ok_or("not a uses: line")?
        .trim();
    let (reference, comment) = uses
        .split_once(" # ")
        .ok_or("no `# vX.Y.Z` comment after the reference")?;
    let (action, sha) = reference.split_once('@').ok_or("no @")?;
    let parts: Vec<&str> = action.split('/').collect();
    if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(format!("`{action}` is not owner/name of a repository"));
    }
    if sha.len() != 40
        || !sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!("`{sha}` is not a full commit SHA (40 hex digits)"));
    }
    let version = comment.trim();
    let numbers: Vec<&str> = version.strip_prefix('v').unwrap_or("").split('.').collect();
    if numbers.len() != 3
        || numbers
            .iter()
            .any(|n| n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!("`{version}` is not a release vX.Y.Z"));
    }
    Ok(Pin {
        action: action.to_owned(),
        sha: sha.to_owned(),
        version: version.to_owned(),
    })
}

/// Every `uses:` of every step of `doc`, as YAML reads it (without its comment).
fn parsed_uses(doc: &Yaml) -> Vec<String> {
    doc["jobs"]
        .as_hash()
        .expect("jobs is a mapping")
        .values()
        .flat_map(|job| job["steps"].as_vec().cloned().unwrap_or_default())
        .filter_map(|step| step["uses"].as_str().map(str::to_owned))
        .collect()
}

/// Checks that every `uses:` of `workflow`, the commented-out ones too, is pinned, and each
/// action to one commit and release throughout; returns the pins by action.
#[track_caller]
fn assert_pinned(workflow: &str, which: &str) -> BTreeMap<String, Pin> {
    let lines: Vec<&str> = workflow
        .lines()
        .filter(|l| {
            let bare = l.trim_start().trim_start_matches('#').trim_start();
            bare.starts_with("uses:") || bare.starts_with("- uses:")
        })
        .collect();
    let mut pins: BTreeMap<String, Pin> = BTreeMap::new();
    for line in &lines {
        let pin = pin(line).unwrap_or_else(|e| panic!("{which}: `{}`: {e}", line.trim()));
        if let Some(earlier) = pins.get(&pin.action) {
            assert_eq!(earlier, &pin, "{which}: one commit per action");
        }
        pins.insert(pin.action.clone(), pin);
    }
    // What YAML reads is what the lines say: no `uses:` hides in another form.
    let docs = YamlLoader::load_from_str(workflow).expect("the workflow is YAML");
    let parsed = parsed_uses(&docs[0]);
    let uncommented = lines.iter().filter(|l| !l.trim_start().starts_with('#'));
    assert_eq!(parsed.len(), uncommented.count(), "{which}: {parsed:?}");
    for uses in &parsed {
        let (action, sha) = uses.split_once('@').expect("action@ref");
        assert_eq!(
            pins.get(action).map(|p| p.sha.as_str()),
            Some(sha),
            "{which}: {uses}"
        );
    }
    pins
}

#[test]
fn every_action_in_every_workflow_init_writes_is_pinned_to_a_commit_with_its_release_beside_it() {
    let mut seen: Option<BTreeMap<String, Pin>> = None;
    for flags in INITS {
        let workflow = workflow_from_init(flags);
        let renamed =
            set_allowed_bots(&workflow, "acme-rows-2").expect("the bot's name is rewritten");
        for (which, text) in [("init", &workflow), ("--manifest-code", &renamed)] {
            let which = format!("{which} {flags:?}");
            let pins = assert_pinned(text, &which);
            let actions: Vec<&str> = pins.keys().map(String::as_str).collect();
            assert_eq!(
                actions,
                [
                    "actions/checkout",
                    "actions/create-github-app-token",
                    "actions/download-artifact",
                    "actions/upload-artifact",
                    "anthropics/claude-code-action",
                ],
                "{which}: the work job holds ANTHROPIC_API_KEY and the finish job a token that \
                 writes, so each action they run is pinned, the optional one in the comments too"
            );
            match &seen {
                Some(first) => {
                    assert_eq!(first, &pins, "{which}: the same pins whatever the flags")
                }
                None => seen = Some(pins),
            }
        }
    }
}

#[test]
fn this_repositorys_own_workflows_pin_every_action_too() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".github/workflows");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("the repository has .github/workflows") {
        let path = entry.expect("a workflow file").path();
        if path.extension().is_some_and(|e| e == "yml" || e == "yaml") {
            let text = std::fs::read_to_string(&path).expect("a readable workflow");
            let pins = assert_pinned(&text, &path.display().to_string());
            assert!(!pins.is_empty(), "{}: no action at all?", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 2, "ci.yml and release.yml at least");
}

#[test]
fn a_reference_that_is_not_a_full_commit_with_a_release_is_caught() {
    let sha = "fbc6f3992d24b796d5a048ff273f7fcc4a7b6c09";
    assert!(pin(&format!("        uses: actions/checkout@{sha} # v5.1.0")).is_ok());
    assert!(pin(&format!("#        uses: actions/checkout@{sha} # v5.1.0")).is_ok());
    for bad in [
        "uses: actions/checkout@v5".to_owned(),
        format!("uses: actions/checkout@{sha}"),
        format!("uses: actions/checkout@{sha} # v5"),
        format!("uses: actions/checkout@{} # v5.1.0", &sha[..12]),
        format!("uses: actions/checkout@{} # v5.1.0", sha.to_uppercase()),
        format!("uses: checkout@{sha} # v5.1.0"),
        "uses: ./local-action".to_owned(),
        "uses: docker://alpine:3".to_owned(),
    ] {
        assert!(pin(&bad).is_err(), "{bad}");
    }
}

/// The claude-code-action steps' bounds in `workflow`, and the route's in `config`.
fn bounds(dir: &Path) -> (Vec<(Bound, Bound)>, (u32, u32)) {
    let workflow = std::fs::read_to_string(dir.join("workflow.yml")).unwrap();
    let steps = claude_steps(&workflow).expect("YAML");
    assert!(!steps.is_empty(), "a claude-code-action step");
    let config = Config::load(&dir.join("rowbranch.toml"), &|_| None).expect("the config loads");
    let route = &config.routes[0];
    (
        steps
            .into_iter()
            .map(|s| (s.max_turns, s.job_timeout_minutes))
            .collect(),
        (route.max_turns, route.work_timeout_minutes),
    )
}

#[test]
fn init_bounds_each_run_in_the_workflow_and_writes_the_same_bounds_into_the_route() {
    let dir = initialized(&["--url", "https://hooks.example.com"]);
    assert_eq!(
        bounds(dir.path()),
        (vec![(Bound::Set(30), Bound::Set(30))], (30, 30)),
        "30 turns and 30 minutes by default"
    );

    let dir = initialized(&[
        "--intake",
        "pgmq",
        "--max-turns",
        "12",
        "--work-timeout-minutes",
        "45",
    ]);
    assert_eq!(
        bounds(dir.path()),
        (vec![(Bound::Set(12), Bound::Set(45))], (12, 45))
    );
    // The bound is on the job that runs Claude, and only the work job runs it.
    let workflow = std::fs::read_to_string(dir.path().join("workflow.yml")).unwrap();
    let doc = &YamlLoader::load_from_str(&workflow).unwrap()[0];
    assert_eq!(doc["jobs"]["work"]["timeout-minutes"].as_i64(), Some(45));
    assert_eq!(claude_steps(&workflow).unwrap()[0].job, "work");
}

#[test]
fn init_refuses_a_bound_that_bounds_nothing() {
    for (flag, value) in [
        ("--max-turns", "0"),
        ("--max-turns", "-1"),
        ("--work-timeout-minutes", "0"),
        ("--work-timeout-minutes", "361"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = init(
            dir.path(),
            &[
                "--url",
                "https://hooks.example.com",
                &format!("{flag}={value}"),
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {}", text(&out));
        assert!(text(&out).contains(flag), "{flag} {value}: {}", text(&out));
        assert!(
            !dir.path().join("workflow.yml").exists(),
            "nothing is written"
        );
    }
}

#[test]
fn init_writes_the_hosts_and_paths_it_is_given_into_the_workflow() {
    let workflow = workflow_from_init(&[
        "--url",
        "https://hooks.example.com",
        "--allow-host",
        "Index.Crates.io",
        "--allow-host",
        "*.npmjs.org",
        "--refuse-path",
        "deploy/",
        "--refuse-path",
        "config/*.secret",
    ]);
    assert!(
        workflow.contains(
            r#""allowedDomains": ["api.anthropic.com", "index.crates.io", "*.npmjs.org"]"#
        ),
        "{workflow}"
    );
    let doc = &YamlLoader::load_from_str(&workflow).expect("YAML")[0];
    let refused: Vec<&str> = doc["jobs"]["finish"]["env"]["ROWBRANCH_REFUSED_PATHS"]
        .as_str()
        .expect("the finish job's list")
        .lines()
        .collect();
    assert_eq!(refused[..3], [".github/", "CODEOWNERS", "docs/CODEOWNERS"]);
    assert_eq!(refused[refused.len() - 2..], ["deploy/", "config/*.secret"]);
}

#[test]
fn init_refuses_a_host_or_a_path_it_cannot_write_as_one() {
    for (flag, value) in [
        ("--allow-host", "https://index.crates.io"),
        ("--allow-host", "index.crates.io:443"),
        ("--allow-host", "a b.com"),
        ("--allow-host", "-x.com"),
        ("--allow-host", "x..com"),
        ("--allow-host", ""),
        ("--refuse-path", "/etc/passwd"),
        ("--refuse-path", "a/../b"),
        ("--refuse-path", ":(exclude)x"),
        ("--refuse-path", " deploy/"),
        ("--refuse-path", ""),
        ("--refuse-path", "a\nb"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = init(
            dir.path(),
            &[
                "--url",
                "https://hooks.example.com",
                &format!("{flag}={value}"),
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flag} {value:?}: {}",
            text(&out)
        );
        assert!(
            text(&out).contains(flag),
            "{flag} {value:?}: {}",
            text(&out)
        );
        assert!(
            !dir.path().join("workflow.yml").exists(),
            "nothing is written"
        );
    }
}

/// `workflow` as its header says to change it to open the pull requests with the App's token:
/// the commented step uncommented at the start of the finish job's steps, the job given the
/// environment that holds the key, and the step that opens the pull request given its token.
fn with_the_apps_token(workflow: &str) -> String {
    let lines: Vec<&str> = workflow.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim_start_matches('#').trim() == "- name: Get a token of the App")
        .expect("the header shows the App's step");
    let step: Vec<&str> = lines[start..]
        .iter()
        .take_while(|l| l.trim() != "#")
        .map(|l| l.strip_prefix('#').expect("a comment line"))
        .collect();
    let mut out = Vec::new();
    let mut job = "";
    for line in &lines {
        if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':')) {
            if !name.starts_with(' ') {
                job = name;
            }
        }
        if job == "finish" && *line == "          GH_TOKEN: ${{ github.token }}" {
            out.push("          GH_TOKEN: ${{ steps.app-token.outputs.token }}");
            continue;
        }
        out.push(line);
        if job == "finish" && *line == "    runs-on: ubuntu-latest" {
            out.push("    environment: rowbranch-finish");
        }
        if job == "finish" && *line == "    steps:" {
            out.extend(&step);
            out.push("");
        }
    }
    out.join("\n") + "\n"
}

#[test]
fn the_apps_token_path_reads_the_key_from_an_environment_only_the_finish_job_references() {
    let workflow = workflow_from_init(&["--url", "https://hooks.example.com"]);
    let changed = with_the_apps_token(&workflow);
    assert_pinned(&changed, "with the App's token");
    let doc = &YamlLoader::load_from_str(&changed).expect("YAML")[0];
    for (name, job) in doc["jobs"].as_hash().unwrap() {
        let expected = match name.as_str() {
            Some("finish") => Some("rowbranch-finish"),
            _ => None,
        };
        assert_eq!(job["environment"].as_str(), expected, "{name:?}");
    }
    let steps = doc["jobs"]["finish"]["steps"].as_vec().unwrap();
    let token = &steps[0];
    assert!(token["uses"]
        .as_str()
        .unwrap()
        .starts_with("actions/create-github-app-token@"));
    assert_eq!(
        token["with"]["private-key"].as_str(),
        Some("${{ secrets.ROWBRANCH_APP_PRIVATE_KEY }}")
    );
    assert_eq!(token["with"]["permission-contents"].as_str(), Some("read"));
    assert_eq!(
        token["with"]["permission-pull-requests"].as_str(),
        Some("write")
    );
    let finish = steps
        .iter()
        .find(|s| s["id"].as_str() == Some("finish"))
        .unwrap();
    assert_eq!(
        finish["env"]["GH_TOKEN"].as_str(),
        Some("${{ steps.app-token.outputs.token }}")
    );
    // Nowhere else is the key named: no job but the finish job can read it.
    assert_eq!(
        changed.matches("secrets.ROWBRANCH_APP_PRIVATE_KEY").count(),
        2
    );

    if !have_actionlint() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rowbranch.yml");
    std::fs::write(&path, &changed).unwrap();
    actionlint(&path);
}
