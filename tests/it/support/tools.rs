//! Programs a test runs besides rowbranch: whether one is installed (a test that needs a missing
//! one skips, or under `CI=true` fails), and running one that must succeed.

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
