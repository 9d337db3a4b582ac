//! The example alert rules of `deploy/alerts.yml`, checked by Prometheus' own `promtool`: the
//! rules load, and their tests (`deploy/alerts.test.yml`: series that fire and series that
//! must not) pass. That those tests feed series as rowbranch shows them is a unit test of
//! src/metrics/start.rs.

use std::path::Path;
use std::process::Command;

use crate::support::tools::{assert_says, have, output_text};

/// Whether `promtool` runs (Debian's `prometheus` package has it); see [`have`].
pub fn have_promtool() -> bool {
    have("promtool", "apt-get install prometheus")
}

/// What `promtool` printed; it must succeed.
fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {}:\n{}",
        args[..2].join(" "),
        output_text(&out)
    );
    output_text(&out)
}

#[test]
fn promtool_loads_the_alert_rules() {
    if !have_promtool() {
        return;
    }
    let out = promtool(&["check", "rules", "deploy/alerts.yml"]);
    assert_says(&out, &["SUCCESS: 5 rules found"]);
}

#[test]
fn the_alert_rules_fire_on_their_tests_series_and_only_there() {
    if !have_promtool() {
        return;
    }
    promtool(&["test", "rules", "deploy/alerts.test.yml"]);
}
