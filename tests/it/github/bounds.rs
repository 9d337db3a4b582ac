//! The client speaks HTTPS to GitHub and reads bounded answers: `api_url` with plain HTTP to a
//! host that is not loopback is a config error, said before any lookup or connection; an
//! answer's body is read up to 1 MiB (64 MiB for the refs listing), with or without a
//! Content-Length, and more is a failed answer the row retries, not memory taken.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, Request};
use fake_github::TEST_APP_PRIVATE_KEY_PEM;
use futures_util::stream;
use futures_util::StreamExt as _;
use rowbranch::config::{Config, ForgeSettings};
use rowbranch::forge::github::GithubForge;
use rowbranch::forge::{Forge, ForgeError};
use rowbranch::identity::{BranchName, BranchPrefix, RepoName};
use rowbranch::metrics::Metrics;
use rowbranch::shutdown::Shutdown;
use tokio::process::Command;

use crate::support::app::FEEDBACK_ROUTE;
use crate::support::github::{fake, GithubOptions};
use crate::support::random::random_secret;

const MIB: u64 = 1 << 20;

/// A GitHub on loopback whose every answer is too long: the refs listing 300 MiB chunked, the
/// pull requests 300 MiB under a Content-Length that says so, anything else 2 MiB chunked.
/// Counts the bytes it handed to the connection.
async fn endless_github(sent: Arc<AtomicU64>) -> String {
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let sent = Arc::clone(&sent);
        async move {
            let path = request.uri().path().to_owned();
            let total = match path.contains("/git/matching-refs/") || path.ends_with("/pulls") {
                true => 300 * MIB,
                false => 2 * MIB,
            };
            let chunks = stream::iter(0..total / MIB).map(move |_| {
                sent.fetch_add(MIB, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(Bytes::from(vec![b' '; MIB as usize]))
            });
            let mut response = axum::response::Response::new(Body::from_stream(chunks));
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
            if path.ends_with("/pulls") {
                headers.insert(header::CONTENT_LENGTH, total.into());
            }
            response
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api/v3", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The forge with a token, on `api_url`, giving up after half a second of retries.
fn forge(api_url: &str) -> GithubForge {
    let text = format!(
        "listen = \"127.0.0.1:0\"\n[github]\ntoken_env = \"GITHUB_TOKEN\"\napi_url = \"{api_url}\"\n\
         retry_budget_ms = 500\n\n[pgmq]\nqueue = \"rows\"\n{FEEDBACK_ROUTE}intake = \"pgmq\"\n"
    );
    let env = |key: &str| match key {
        "GITHUB_TOKEN" => Some("ghs_test".to_owned()),
        "DATABASE_URL" => Some("postgres://localhost/none".to_owned()),
        _ => None,
    };
    let config = Config::parse(&text, Path::new("rowbranch.toml"), &env).unwrap();
    let ForgeSettings::Github(settings) = &config.forge else {
        panic!("a GitHub forge")
    };
    GithubForge::new(settings, Shutdown::new(), Arc::new(Metrics::new())).unwrap()
}

/// The call failed as a retryable answer saying why, and each attempt read at most `bound`.
fn assert_bounded(result: Result<impl std::fmt::Debug, ForgeError>, sent: u64, bound: u64) {
    let Err(ForgeError::Unavailable { message, .. }) = &result else {
        panic!("not a retryable failure: {result:?}");
    };
    assert!(message.contains("longer than rowbranch reads"), "{message}");
    let attempts: u64 = message
        .split("; ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{message}"));
    // Beyond what was read, a connection's kernel buffers hold what the sender wrote ahead: at
    // most the receive and send buffers' maxima (32 MiB and 4 MiB on some kernels, where a
    // client slowed by load let the window grow past a fixed few MiB).
    let buffers = socket_buffers_max();
    assert!(
        sent <= attempts * (bound + buffers),
        "{} MiB sent over {attempts} attempts",
        sent / MIB
    );
}

/// The most a loopback connection's receive and send buffers may hold together, from the
/// kernel's `tcp_rmem` and `tcp_wmem` maxima (8 MiB where they cannot be read).
fn socket_buffers_max() -> u64 {
    let max = |name: &str| {
        let text = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).ok()?;
        text.split_whitespace().nth(2)?.parse::<u64>().ok()
    };
    match (max("tcp_rmem"), max("tcp_wmem")) {
        (Some(read), Some(write)) => read + write,
        _ => 8 * MIB,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_past_its_bound_is_a_failed_answer_chunked_or_with_a_length() {
    let sent = Arc::new(AtomicU64::new(0));
    let forge = forge(&endless_github(Arc::clone(&sent)).await);
    let repo = RepoName::parse("acme/app").unwrap();
    let prefix = BranchPrefix::parse("feedback").unwrap();

    // The refs listing, 300 MiB chunked: read to 64 MiB.
    let started = Instant::now();
    let listed = forge.prefix_branches(&repo, &prefix).await;
    assert_bounded(listed, sent.swap(0, Ordering::SeqCst), 64 * MIB);

    // A single object, 2 MiB chunked: read to 1 MiB.
    let base = forge.base(&repo).await;
    assert_bounded(base, sent.swap(0, Ordering::SeqCst), MIB);

    // A listing of pull requests that says it is 300 MiB long: read to 1 MiB.
    let branch = BranchName::listed(&prefix, "feedback/1").unwrap();
    let pulls = forge.has_pull_request(&repo, &branch).await;
    assert_bounded(pulls, sent.swap(0, Ordering::SeqCst), MIB);
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// Runs the binary with `args` and a config whose `api_url` is `api_url`; its exit code and
/// what it printed, within `within`.
async fn run_with_api_url(args: &[&str], api_url: &str, within: Duration) -> (Option<i32>, String) {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let text = GithubOptions::default()
        .config_text(&fake)
        .replace(&fake.url(), api_url);
    std::fs::write(dir.path().join("rowbranch.toml"), text).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(args)
        .args(["--config", "rowbranch.toml"])
        .current_dir(dir.path())
        .env_remove("GITHUB_API_URL")
        .env("ROWBRANCH_WEBHOOK_SECRET", random_secret())
        .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(within, run)
        .await
        .expect("it exits in time")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(fake.requests().is_empty(), "GitHub was asked: {text}");
    (out.status.code(), text)
}

#[tokio::test]
async fn plain_http_beyond_loopback_is_refused_before_any_lookup_naming_https() {
    // `.invalid` never resolves: a lookup would fail otherwise, and later.
    let clear = "http://ghe.example.invalid/api/v3";
    let (code, text) = run_with_api_url(&["serve"], clear, Duration::from_secs(10)).await;
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("plain HTTP") && text.contains("use https://"),
        "{text}"
    );
    // doctor fails as for any config that does not load: a ✗ line, and 2.
    let (code, text) = run_with_api_url(&["doctor"], clear, Duration::from_secs(10)).await;
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("✗"), "{text}");
    assert!(text.contains("use https://"), "{text}");
}
