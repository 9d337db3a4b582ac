//! Credentials judged before the body wherever the headers decide (SPEC §3, "Reading,
//! credentials and connections"), the schemes `[webhook] accept` lists, a `whsec_` signing key
//! never taken as a bearer token, and Svix's header names — against `rowbranch serve`, over raw
//! sockets where a client library would not send what is needed: headers that promise a body
//! that never comes.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rowbranch::webhook::auth::hub_signature_256;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::child::{self, Served};
use crate::support::http::{insert, reply, Reply};
use crate::support::random::{random_secret, random_whsec};
use crate::support::sign::standard_webhooks_signature;

/// How soon a refusal that needs no body must be answered, and its connection closed.
const REFUSED_WITHIN: Duration = Duration::from_secs(2);

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A `v1,` entry of the right form — the base64 of 32 bytes — that no secret signed.
fn unsigned_v1() -> String {
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode([7u8; 32])
    )
}

/// Sends the head of a POST /webhook that promises a 200 KB body, with `credentials` (header
/// lines, each ending in CRLF), then the first bytes of a body that never comes; reads until
/// the server closes the connection, for at most `REFUSED_WITHIN` and a little. What it
/// answered, and how long until it closed.
async fn promised_body(addr: SocketAddr, credentials: &str) -> (String, Duration) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: 200000\r\n{credentials}\r\n{{\"type\":"
    );
    let start = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        REFUSED_WITHIN + Duration::from_secs(3),
        stream.read_to_end(&mut answer),
    )
    .await;
    (
        String::from_utf8_lossy(&answer).into_owned(),
        start.elapsed(),
    )
}

/// Checks that each of `credentials` is answered 401, and its connection closed, within
/// `REFUSED_WITHIN`, without the body it promised.
async fn refused_unread(served: &Served, credentials: &[String]) {
    for lines in credentials {
        let (answer, took) = promised_body(served.addr, lines).await;
        println!("{lines:?}: refused after {took:?}");
        assert!(answer.starts_with("HTTP/1.1 401"), "{lines:?}: {answer}");
        assert!(
            answer.contains("missing or wrong credentials"),
            "{lines:?}: {answer}"
        );
        assert!(
            took < REFUSED_WITHIN,
            "{lines:?} was refused after {took:?}"
        );
    }
}

/// POSTs row `id` with these headers besides the content type; the answer, read whole.
async fn post(served: &Served, id: u64, body: Option<String>, headers: &[(&str, &str)]) -> Reply {
    let body = body.unwrap_or_else(|| insert(json!(id), "Signed row").to_string());
    let mut request = reqwest::Client::new()
        .post(format!("{}/webhook", served.url))
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    reply(request.send().await.unwrap()).await
}

/// POSTs row `id` signed the Standard Webhooks way with `secret`, under the headers named
/// `{prefix}-id`, `{prefix}-timestamp` and `{prefix}-signature`.
async fn post_signed(served: &Served, secret: &str, prefix: &str, id: u64) -> Reply {
    let body = insert(json!(id), "Signed row").to_string();
    let msg_id = format!("msg_{id}");
    let timestamp = now();
    let signature = standard_webhooks_signature(secret, &msg_id, timestamp, body.as_bytes());
    let timestamp = timestamp.to_string();
    let names = ["id", "timestamp", "signature"].map(|part| format!("{prefix}-{part}"));
    post(
        served,
        id,
        Some(body),
        &[
            (names[0].as_str(), msg_id.as_str()),
            (names[1].as_str(), timestamp.as_str()),
            (names[2].as_str(), signature.as_str()),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bogus_bearer_promising_200_kb_that_never_come_is_refused_within_2_s() {
    let secret = random_secret();
    let served = child::serve_local("", None, &secret).await;
    refused_unread(
        &served,
        &[
            "Authorization: nope\r\n".to_owned(),
            "Authorization: Bearer nope\r\n".to_owned(),
            format!("Authorization: Bearer {}\r\n", random_secret()),
            format!("Authorization: Basic {secret}\r\n"),
            // A malformed signature beside it cannot save it.
            "Authorization: Bearer nope\r\nX-Hub-Signature-256: sha256=zz\r\n".to_owned(),
        ],
    )
    .await;
    // The right bearer still gets its row dispatched.
    let auth = format!("Bearer {secret}");
    post(&served, 1, None, &[("authorization", &auth)])
        .await
        .expect(200, "dispatched");
    assert_eq!(served.branches().await, ["feedback/1-signed-row"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_expired_standard_webhooks_delivery_is_refused_within_2_s() {
    let whsec = random_whsec();
    let served = child::serve_local("", None, &format!("{whsec} {}", random_secret())).await;
    let v1 = unsigned_v1();
    let sw = |id: &str, timestamp: &str, signature: &str| {
        format!(
            "webhook-id: {id}\r\nwebhook-timestamp: {timestamp}\r\nwebhook-signature: {signature}\r\n"
        )
    };
    let (stale, future, fresh) = (
        (now() - 600).to_string(),
        (now() + 600).to_string(),
        now().to_string(),
    );
    refused_unread(
        &served,
        &[
            sw("msg_1", &stale, &v1),
            sw("msg_1", &future, &v1),
            sw("msg_1", "yesterday", &v1),
            sw("msg_1", &fresh, "v1,abc"),
            sw("msg_1", &fresh, &v1.replacen("v1,", "v2,", 1)),
            sw("msg_1", &fresh, "v1,bm90IGEgbWFj"),
            sw("", &fresh, &v1),
            sw(&"m".repeat(300), &fresh, &v1),
            format!("webhook-timestamp: {fresh}\r\nwebhook-signature: {v1}\r\n"),
            // Svix's names are a credential too, judged the same way.
            format!("svix-id: msg_1\r\nsvix-timestamp: {stale}\r\nsvix-signature: {v1}\r\n"),
        ],
    )
    .await;
    // Signed and fresh, it is dispatched.
    post_signed(&served, &whsec, "webhook", 2)
        .await
        .expect(200, "dispatched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bogus_bearer_beside_a_hub_signature_has_its_body_read_and_the_signature_decides() {
    let secret = random_secret();
    let served = child::serve_local("read_timeout_ms = 1000", None, &secret).await;
    let body = insert(json!(3), "Signed row").to_string();
    let signature = hub_signature_256(&secret, body.as_bytes());
    let headers = [
        ("authorization", "Bearer some-other-service-token"),
        ("x-hub-signature-256", signature.as_str()),
    ];
    post(&served, 3, Some(body), &headers)
        .await
        .expect(200, "dispatched");
    // A well-formed signature may match the body, so the body is waited for: its absence is
    // answered 408 once read_timeout_ms has passed, not 401 at once.
    let (answer, took) = promised_body(
        served.addr,
        &format!("Authorization: Bearer nope\r\nX-Hub-Signature-256: {signature}\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(took >= Duration::from_millis(900), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whsec_secret_is_a_signing_key_and_never_a_bearer_token() {
    let whsec = random_whsec();
    let plain = random_secret();
    let served = child::serve_local("", None, &format!("{whsec} {plain}")).await;
    refused_unread(
        &served,
        &[
            format!("Authorization: Bearer {whsec}\r\n"),
            format!("Authorization: Bearer v1,{whsec}\r\n"),
        ],
    )
    .await;
    let auth = format!("Bearer {whsec}");
    let reply = post(&served, 4, None, &[("authorization", &auth)]).await;
    reply.expect(401, "error");
    // It signs: as a Standard Webhooks key, and as an X-Hub-Signature-256 key.
    post_signed(&served, &whsec, "webhook", 5)
        .await
        .expect(200, "dispatched");
    let body = insert(json!(6), "Signed row").to_string();
    let signature = hub_signature_256(&whsec, body.as_bytes());
    post(
        &served,
        6,
        Some(body),
        &[("x-hub-signature-256", &signature)],
    )
    .await
    .expect(200, "dispatched");
    assert!(served.log().contains("refused_scheme"), "{}", served.log());
    assert!(!served.log().contains(&whsec), "the secret is never logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn svix_header_names_are_standard_webhooks() {
    let whsec = random_whsec();
    let served = child::serve_local("accept = [\"standard-webhooks\"]", None, &whsec).await;
    let reply = post_signed(&served, &whsec, "svix", 7).await;
    reply.expect(200, "dispatched");
    // Signed with another key, it is read and refused.
    post_signed(&served, &random_whsec(), "svix", 8)
        .await
        .expect(401, "error");
    assert_eq!(served.branches().await, ["feedback/7-signed-row"]);
    // The delivery's id in the log is Svix's.
    assert!(served.log().contains("msg_7"), "{}", served.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signatures_only_deployment_refuses_a_bearer_and_a_hub_signature_as_wrong_secrets() {
    let (whsec, plain) = (random_whsec(), random_secret());
    let served = child::serve_local(
        "accept = [\"standard-webhooks\"]",
        None,
        &format!("{whsec} {plain}"),
    )
    .await;
    // The right bearer secret, refused unread: the deployment takes signatures only.
    refused_unread(&served, &[format!("Authorization: Bearer {plain}\r\n")]).await;
    let auth = format!("Bearer {plain}");
    let reply = post(&served, 9, None, &[("authorization", &auth)]).await;
    reply.expect(401, "error");
    assert_eq!(
        reply.body,
        json!({"outcome": "error", "message": "missing or wrong credentials"})
    );
    let body = insert(json!(10), "Signed row").to_string();
    let signature = hub_signature_256(&plain, body.as_bytes());
    post(
        &served,
        10,
        Some(body),
        &[("x-hub-signature-256", &signature)],
    )
    .await
    .expect(401, "error");
    post_signed(&served, &whsec, "webhook", 11)
        .await
        .expect(200, "dispatched");
    assert_eq!(served.branches().await, ["feedback/11-signed-row"]);
    let log = served.log();
    assert_warned(&log, "refused_scheme");
    assert!(!log.contains(&plain), "the secret is never logged");
}

/// A WARN line of `log` says `says`.
#[track_caller]
fn assert_warned(log: &str, says: &str) {
    assert!(
        log.lines().any(|l| l.contains("WARN") && l.contains(says)),
        "no WARN line says {says:?}:\n{log}"
    );
}

#[tokio::test]
async fn accept_with_an_unknown_scheme_or_none_at_all_stops_serve() {
    for (accept, says) in [
        ("[\"bearer\", \"basic\"]", "\"basic\" is not a scheme"),
        ("[]", "accept is empty"),
    ] {
        let dir = crate::support::local::dir_with_repository().await;
        let config = dir.path().join("rowbranch.toml");
        std::fs::write(&config, child::local_config(&format!("accept = {accept}"))).unwrap();
        let out = child::run(
            child::rowbranch(dir.path())
                .arg("serve")
                .arg("--config")
                .arg(&config)
                .env("ROWBRANCH_WEBHOOK_SECRET", random_secret()),
        )
        .await;
        let stderr = child::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{accept}: {stderr}");
        assert!(stderr.contains(says), "{accept}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_that_takes_none_of_the_secrets_is_warned_of_at_start() {
    for (accept, secret) in [
        ("[\"bearer\"]", random_whsec()),
        ("[\"standard-webhooks\"]", random_secret()),
    ] {
        let served = child::serve_local(&format!("accept = {accept}"), None, &secret).await;
        let log = served.log();
        assert_warned(&log, "every delivery will be refused");
        assert!(!log.contains(&secret), "{log}");
    }
}

/// 510 connections, each promising 256 KiB behind a bogus bearer and sending it: refused
/// unread, none of their bodies is held. (Before they were judged from their headers, the
/// server read every body first: 151 MB for the release binary.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_and_ten_bogus_bearers_with_256_kib_each_keep_the_peak_rss_under_40_mb() {
    let served = child::serve_local("read_timeout_ms = 60000", None, &random_secret()).await;
    let before = served.peak_rss();
    let head = "POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                Authorization: Bearer nope\r\nContent-Length: 262144\r\n\r\n";
    let body = vec![b' '; 262_144];
    let mut streams = Vec::new();
    for _ in 0..510 {
        let mut stream = TcpStream::connect(served.addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        streams.push(stream);
    }
    let sends: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            let body = body.clone();
            tokio::spawn(async move {
                // The server may have answered and closed already: a failed write is expected.
                let _ = stream.write_all(&body).await;
                let mut answer = Vec::new();
                let _ =
                    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
                        .await;
                String::from_utf8_lossy(&answer).into_owned()
            })
        })
        .collect();
    let mut refused = 0;
    for send in sends {
        if send.await.unwrap().starts_with("HTTP/1.1 401") {
            refused += 1;
        }
    }
    let peak = served.peak_rss();
    println!(
        "peak RSS with 510 bogus bearers of 256 KiB: {:.1} MB (before them: {:.1} MB); {refused} answered 401",
        peak as f64 / 1e6,
        before as f64 / 1e6
    );
    assert!(refused >= 500, "only {refused} of 510 were answered 401");
    assert!(peak < 40 << 20, "peak RSS {peak} bytes");
}
