//! The example alert rules of `deploy/alerts.yml`, checked by Prometheus' own `promtool`: the
//! rules load, and their tests (`deploy/alerts.test.yml`: series that fire and series that
//! must not) pass. That those tests feed series as rowbranch shows them is a unit test of
//! src/metrics/start.rs.

use std::path::Path;
use std::process::{Command, Output};

/// Whether `promtool` runs (Debian's `prometheus` package has it). When it does not: on CI
/// (`CI=true`) the test fails, elsewhere it says why it skips.
pub fn have_promtool() -> bool {
    let why = match Command::new("promtool").arg("--version").output() {
        Ok(out) if out.status.success() => return true,
        Ok(out) => format!("`promtool --version` exited with {}", out.status),
        Err(e) => format!("`promtool` cannot be run: {e}"),
    };
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{why}; CI must have it: apt-get install prometheus");
    }
    eprintln!("skipping: {why} (install it with `apt-get install prometheus`)");
    false
}

pub fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn promtool(args: &[&str]) -> Output {
    Command::new("promtool")
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("promtool runs")
}

#[test]
fn promtool_loads_the_alert_rules() {
    if !have_promtool() {
        return;
    }
    let out = promtool(&["check", "rules", "deploy/alerts.yml"]);
    assert!(
        out.status.success(),
        "promtool check rules:\n{}",
        output_text(&out)
    );
    assert!(
        output_text(&out).contains("SUCCESS: 5 rules found"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn the_alert_rules_fire_on_their_tests_series_and_only_there() {
    if !have_promtool() {
        return;
    }
    let out = promtool(&["test", "rules", "deploy/alerts.test.yml"]);
    assert!(
        out.status.success(),
        "promtool test rules:\n{}",
        output_text(&out)
    );
}
