//! The status page is never public by accident (SPEC §3, "Other endpoints"): `serve` refuses to
//! start with the page on and no password, or a short one, unless `--insecure-public-status`;
//! a wrong password is logged, never echoed, and after ten in a minute every login waits for
//! the rest of that minute.

use std::time::{Duration, Instant};

use tokio::process::Command;

use crate::support::app::FEEDBACK_ROUTE;
use crate::support::child::{self, Start};
use crate::support::http::free_port;
use crate::support::local::dir_with_repository;
use crate::support::random::{random_hex, random_secret};

/// A local-forge config with the status page on.
fn config() -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nstatus_page = true\n\n[forge]\nkind = \"local\"\n\
         path = \"repo.git\"\n{FEEDBACK_ROUTE}"
    )
}

/// `rowbranch serve` on that config, in a new folder, with the status password `password`
/// (unset when `None`) and the flags `extra`.
async fn serve_command(password: Option<&str>, extra: &[&str]) -> (tempfile::TempDir, Command) {
    let dir = dir_with_repository().await;
    let dir = std::sync::Arc::try_unwrap(dir).expect("the only handle");
    std::fs::write(dir.path().join("rowbranch.toml"), config()).unwrap();
    let mut command = child::rowbranch(dir.path());
    command
        .args(["serve", "--config", "rowbranch.toml"])
        .args(extra)
        .env("ROWBRANCH_WEBHOOK_SECRET", random_secret());
    if let Some(password) = password {
        command.env("ROWBRANCH_STATUS_PASSWORD", password);
    }
    (dir, command)
}

#[tokio::test]
async fn serve_refuses_a_status_page_without_a_password_or_with_one_under_16_characters() {
    for password in [None, Some(""), Some("fifteen-chars-x")] {
        let (_dir, mut command) = serve_command(password, &[]).await;
        let out = child::run(&mut command).await;
        let stderr = child::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{password:?}: {stderr}");
        assert!(
            stderr.contains("ROWBRANCH_STATUS_PASSWORD"),
            "{password:?}: {stderr}"
        );
        assert!(stderr.contains("--insecure-public-status"), "{stderr}");
        if let Some(password) = password.filter(|p| !p.is_empty()) {
            assert!(!stderr.contains(password), "the password is never shown");
        }
    }
}

#[tokio::test]
async fn with_insecure_public_status_the_page_is_served_to_anyone_and_a_warning_says_so() {
    let (_dir, mut command) = serve_command(None, &["--insecure-public-status"]).await;
    let addr = format!("127.0.0.1:{}", free_port());
    let server = child::serve_until_healthy(&mut command, &addr).await;
    let page = reqwest::get(format!("http://{addr}/")).await.unwrap();
    assert_eq!(page.status(), 200);
    let (code, log) = child::terminate(server).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("--insecure-public-status"), "{log}");

    // A password of 16 characters starts, and the page asks for it.
    let password = random_hex(8);
    let (_dir, mut command) = serve_command(Some(&password), &[]).await;
    let addr = format!("127.0.0.1:{}", free_port());
    let server = child::serve_until_healthy(&mut command, &addr).await;
    let page = reqwest::get(format!("http://{addr}/")).await.unwrap();
    assert_eq!(page.status(), 401);
    child::terminate(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_wrong_passwords_in_a_minute_make_every_login_wait_for_the_rest_of_it() {
    let password = random_hex(16);
    let served = child::serve(
        dir_with_repository().await,
        Start {
            config: &config(),
            env: vec![("ROWBRANCH_STATUS_PASSWORD", password.clone())],
            nofile: None,
            secret: random_secret(),
        },
    )
    .await;
    let client = reqwest::Client::new();
    let page = format!("{}/", served.url);
    let login = |guess: Option<&str>| {
        let request = client.get(&page);
        let request = match guess {
            Some(guess) => request.basic_auth("anyone", Some(guess)),
            None => request,
        };
        async move { request.send().await.unwrap() }
    };
    assert_eq!(login(Some(&password)).await.status(), 200);
    // A browser's first request carries no password: not a guess, not counted.
    for _ in 0..20 {
        assert_eq!(login(None).await.status(), 401);
    }
    let guess = "a-wrong-guess-that-never-reaches-the-log";
    let start = Instant::now();
    for n in 1..=10 {
        assert_eq!(login(Some(guess)).await.status(), 401, "guess {n}");
    }
    // The eleventh, and every login after it this minute, the right password too.
    for attempt in [Some(guess), Some(password.as_str()), None] {
        let locked = login(attempt).await;
        assert_eq!(locked.status(), 429, "{attempt:?}");
        let retry_after: u64 = locked.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let left = Duration::from_secs(60).saturating_sub(start.elapsed());
        assert!(
            retry_after >= 1 && retry_after <= left.as_secs() + 1,
            "Retry-After {retry_after} with {left:?} of the minute left"
        );
    }
    let log = served.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("wrong password for the status page"))
        .collect();
    assert_eq!(warnings.len(), 1, "one line a minute: {log}");
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("answered 429")),
        "{log}"
    );
    assert!(!log.contains(guess) && !log.contains(&password), "{log}");
}
