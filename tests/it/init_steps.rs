//! The first step `init` prints, followed as printed, for either intake: where GitHub sends the
//! browser once the App is created, nothing of rowbranch can answer yet (`serve` refuses to
//! start with the setup as it is then), so the step must not promise a page there; the code is
//! in the address bar, and the command the step gives, with it, creates the App.

use std::path::Path;

use fake_github::{FakeGithub, TEST_APP_PRIVATE_KEY_PEM};
use serde_json::Value;
use tempfile::TempDir;

use crate::support::child::{rowbranch, run, stderr, stdout};

const CODE: &str = "code-from-the-address-bar";

/// The text of step 1 of the steps `init` printed.
fn first_step(printed: &str) -> String {
    let start = printed.find("\n  1. ").expect("a step 1");
    let rest = &printed[start + 1..];
    rest[..rest.find("\n  2. ").expect("a step 2")].to_owned()
}

async fn follow_the_first_step(intake: &[&str]) {
    let fake = FakeGithub::start().await;
    fake.add_manifest_code(CODE);
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    let mut init = rowbranch(root);
    init.args(["init", "--dir", "setup", "--repo", "acme/app"])
        .args(["--owner-type", "organization"])
        .args(intake);
    let out = run(&mut init).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let step = first_step(&stdout(&out));
    let words = step.split_whitespace().collect::<Vec<_>>().join(" ");

    // Where GitHub sends the browser: the manifest's redirect URL, named by the step.
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("setup/app-manifest.json")).unwrap(),
    )
    .unwrap();
    let redirect = manifest["redirect_url"]
        .as_str()
        .unwrap()
        .trim_end_matches('/');
    assert!(
        words.contains(&format!("{redirect}/?code=")),
        "the step names where GitHub sends the browser:\n{step}"
    );

    // rowbranch cannot answer there now: `serve` with the setup as it is at step 1 (the
    // config init wrote, no key, no database, no secret in the environment) refuses to start.
    let mut serve = rowbranch(root);
    serve.args(["serve", "--config", "setup/rowbranch.toml"]);
    let refused = run(&mut serve).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    // So the step sends nobody to a page of it, and says where the code is.
    assert!(
        !words.contains("serve shows") && !words.contains("rowbranch serve"),
        "step 1 promises a page that nothing serves at this point:\n{step}"
    );
    assert!(words.contains("nothing answers yet"), "{step}");
    assert!(
        words.contains("copy the code from the address bar"),
        "{step}"
    );

    // The command it gives, with that code, creates the App.
    let command = step
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("rowbranch init") && l.contains("--manifest-code"))
        .unwrap_or_else(|| panic!("step 1 gives the command to run:\n{step}"));
    let args: Vec<String> = command
        .split_whitespace()
        .skip(1)
        .map(|w| {
            if w == "THE_CODE" {
                CODE.to_owned()
            } else {
                w.to_owned()
            }
        })
        .collect();
    assert!(args.iter().any(|w| w == CODE), "{command}");
    let mut finish = rowbranch(root);
    finish.args(&args).args(["--api-url", &fake.url()]);
    let out = run(&mut finish).await;
    assert!(out.status.success(), "{command}: {}", stderr(&out));
    let key = std::fs::read_to_string(root.join("setup/app.pem")).unwrap();
    assert_eq!(key, TEST_APP_PRIVATE_KEY_PEM);
    let config = std::fs::read_to_string(root.join(Path::new("setup/rowbranch.toml"))).unwrap();
    assert!(
        config.contains(&format!("app_id = {}", fake.app_id())),
        "{config}"
    );
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn the_queues_first_step_works_as_printed() {
    follow_the_first_step(&["--intake", "pgmq"]).await;
}

#[tokio::test]
async fn the_webhooks_first_step_works_as_printed() {
    follow_the_first_step(&["--url", "https://hooks.example.com"]).await;
}
