//! A GitHub that cannot be reached, as `serve` meets it: its log says so in rowbranch's own
//! lines, one per failed operation, and the HTTP client's lines stay out; `/readyz` says the
//! cause once.
//!
//! A failed operation is a step of a row's run that ended the run (its reads, the claim, the
//! dispatch), whatever retries it took, or the first look at a repository at start. Each gets
//! exactly one line at warn or error, which names the operation, the repository, GitHub's host,
//! the attempts made, and — for a row — what happens next.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::child::serve_on_fake;
use crate::support::github::{fake, GithubOptions};
use crate::support::http::{free_port, insert, post_webhook};
use crate::support::random::random_secret;
use crate::support::wait::eventually;

#[tokio::test]
async fn an_unreachable_github_is_one_line_per_failed_operation_and_none_from_the_client_library() {
    let fake = fake().await;
    // A port nothing listens on.
    let host = format!("127.0.0.1:{}", free_port());
    let config = GithubOptions {
        retry_budget_ms: 3_000,
        respond_within_ms: 500,
        ..GithubOptions::default()
    }
    .config_text(&fake)
    .replace(&fake.url(), &format!("http://{host}"));
    let secret = random_secret();
    // RUST_LOG=info, as `serve` is run: no library's lines, the client has none of its own.
    let served = serve_on_fake(
        &config,
        vec![("ROWBRANCH_LOG_FORMAT", "json".to_owned())],
        &secret,
    )
    .await;
    let body = insert(json!(42), "Dark mode");
    let answer = post_webhook(&reqwest::Client::new(), &served.url, &secret, &body).await;
    assert_eq!(answer.status, 202, "the row goes on in the background");

    let lines: Vec<Value> = eventually("the row's run and the first look to end", || async {
        let log = served.log();
        let ended = log.contains("the row's run failed") && log.contains("cannot take claims");
        ended.then(|| {
            log.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!({ "text": l })))
                .collect()
        })
    })
    .await;
    let log = served.log();
    assert!(
        !log.contains("octocrab"),
        "the client library's lines:\n{log}"
    );
    assert!(!log.contains("Service Error"), "{log}");
    let loud: Vec<&Value> = lines
        .iter()
        .filter(|l| matches!(l["level"].as_str(), Some("WARN" | "ERROR")))
        .collect();
    assert_eq!(
        loud.len(),
        2,
        "one for the first look, one for the row:\n{log}"
    );

    let find = |message: &str| {
        *loud
            .iter()
            .find(|l| l["message"].as_str().unwrap_or_default().contains(message))
            .unwrap_or_else(|| panic!("no line {message:?}:\n{log}"))
    };
    let first_look = find("cannot take claims");
    assert_eq!(first_look["repo"], "acme/app", "{log}");
    let error = first_look["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("reading the default branch: "), "{error}");
    assert!(error.contains(&format!("GitHub at {host}")), "{error}");
    assert!(error.contains("attempts in"), "{error}");

    let row = find("the row's run failed");
    assert_eq!(row["span"]["repo"], "acme/app", "{log}");
    assert_eq!(row["span"]["id"], "42", "{log}");
    let error = row["error"].as_str().unwrap_or_default();
    assert_eq!(
        error.matches("listing the row's branches").count(),
        1,
        "the operation, once: {error}"
    );
    assert!(error.contains(&format!("GitHub at {host}")), "{error}");
    assert_eq!(
        error.matches("Connection refused").count(),
        1,
        "the cause, once: {error}"
    );
    assert!(error.contains("attempts in"), "{error}");
    assert_eq!(
        row["next"], "left for the sweep: run `rowbranch reconcile`",
        "{log}"
    );

    let ready = reqwest::Client::new()
        .get(format!("{}/readyz", served.url))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("rowbranch answers");
    assert_eq!(ready.status().as_u16(), 503);
    let body = ready.text().await.unwrap();
    assert_eq!(body.matches("Connection refused").count(), 1, "{body}");
    assert!(body.contains(&format!("GitHub at {host}")), "{body}");
    assert!(!body.contains("client error"), "{body}");
}
