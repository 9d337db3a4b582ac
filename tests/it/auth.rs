//! Authentication (SPEC §3): bearer, Standard Webhooks, X-Hub-Signature-256, rotation, and the
//! 401 that says nothing about which check failed.

use std::time::{SystemTime, UNIX_EPOCH};

use rowbranch::webhook::auth::hub_signature_256;
use serde_json::json;

use crate::support::app::{spawn_app, Options, TestApp};
use crate::support::http::{insert, Reply};
use crate::support::random::{random_secret, random_whsec};
use crate::support::sign::standard_webhooks_signature;

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// POSTs row `id` signed the Standard Webhooks way with `secret`, dated `timestamp`.
async fn post_standard_webhooks(app: &TestApp, secret: &str, id: u64, timestamp: i64) -> Reply {
    let body = insert(json!(id), "Signed row").to_string();
    let msg_id = format!("msg_{id}");
    let signature = standard_webhooks_signature(secret, &msg_id, timestamp, body.as_bytes());
    let timestamp = timestamp.to_string();
    app.post_raw(
        body,
        &[
            ("content-type", "application/json"),
            ("webhook-id", &msg_id),
            ("webhook-timestamp", &timestamp),
            ("webhook-signature", &signature),
        ],
    )
    .await
}

/// POSTs `body` as JSON with `header` as its one credential.
async fn post_with(app: &TestApp, body: impl Into<Vec<u8>>, header: (&str, &str)) -> Reply {
    app.post_raw(body, &[("content-type", "application/json"), header])
        .await
}

async fn post_hub_signed(app: &TestApp, secret: &str, id: u64) -> Reply {
    let body = insert(json!(id), "Signed row").to_string();
    let signature = hub_signature_256(secret, body.as_bytes());
    post_with(app, body, ("x-hub-signature-256", &signature)).await
}

async fn post_bearer(app: &TestApp, token: &str, id: u64) -> Reply {
    let auth = format!("Bearer {token}");
    post_with(
        app,
        insert(json!(id), "Signed row").to_string(),
        ("authorization", &auth),
    )
    .await
}

/// An app whose secret is a new `whsec_` signing key, and the key.
async fn app_with_a_whsec_secret() -> (TestApp, String) {
    let secret = random_whsec();
    let app = spawn_app(Options::default().secret_env(&secret)).await;
    (app, secret)
}

#[track_caller]
fn expect_unauthorized(reply: &Reply, secret: &str) {
    reply.expect(401, "error");
    assert_eq!(
        reply.body,
        json!({"outcome": "error", "message": "missing or wrong credentials"})
    );
    assert!(!reply.text.contains(secret));
}

#[tokio::test]
async fn a_bearer_token_is_accepted() {
    let app = spawn_app(Options::default()).await;
    let secret = app.secret.clone();
    post_bearer(&app, &secret, 1)
        .await
        .expect(200, "dispatched");
    // The scheme is case-insensitive, as HTTP auth schemes are.
    let auth = format!("bearer {secret}");
    post_with(
        &app,
        insert(json!(2), "x").to_string(),
        ("authorization", &auth),
    )
    .await
    .expect(200, "dispatched");
    app.shutdown().await;
}

#[tokio::test]
async fn a_standard_webhooks_signature_with_a_fresh_timestamp_is_accepted() {
    let (app, secret) = app_with_a_whsec_secret().await;
    // Within five minutes either way is fresh.
    for (id, timestamp) in [(1, now()), (2, now() - 240), (3, now() + 240)] {
        post_standard_webhooks(&app, &secret, id, timestamp)
            .await
            .expect(200, "dispatched");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_whsec_secret_as_supabase_displays_it_with_v1_in_front_works() {
    let secret = random_whsec();
    let app = spawn_app(Options::default().secret_env(&format!("v1,{secret}"))).await;
    post_standard_webhooks(&app, &secret, 1, now())
        .await
        .expect(200, "dispatched");
    // A whsec_ secret is a signing key: as a bearer token it is refused, with or without `v1,`.
    expect_unauthorized(&post_bearer(&app, &secret, 2).await, &secret);
    expect_unauthorized(
        &post_bearer(&app, &format!("v1,{secret}"), 2).await,
        &secret,
    );
    app.shutdown().await;
}

#[tokio::test]
async fn an_x_hub_signature_256_is_accepted() {
    let app = spawn_app(Options::default()).await;
    post_hub_signed(&app, &app.secret, 1)
        .await
        .expect(200, "dispatched");
    app.shutdown().await;
}

#[tokio::test]
async fn either_of_two_rotated_secrets_is_accepted_and_no_other() {
    let (old, new) = (random_secret(), random_whsec());
    let app = spawn_app(Options::default().secret_env(&format!("{old}  {new}"))).await;
    post_bearer(&app, &old, 1).await.expect(200, "dispatched");
    // The whsec_ one signs, and is never a bearer token.
    expect_unauthorized(&post_bearer(&app, &new, 2).await, &new);
    post_hub_signed(&app, &old, 3)
        .await
        .expect(200, "dispatched");
    post_hub_signed(&app, &new, 4)
        .await
        .expect(200, "dispatched");
    post_standard_webhooks(&app, &new, 5, now())
        .await
        .expect(200, "dispatched");

    let stranger = random_secret();
    expect_unauthorized(&post_bearer(&app, &stranger, 6).await, &old);
    expect_unauthorized(&post_hub_signed(&app, &stranger, 7).await, &old);
    // Both secrets together are not a third one.
    expect_unauthorized(&post_bearer(&app, &format!("{old}{new}"), 8).await, &old);
    assert_eq!(app.branches().await.len(), 4);
    app.shutdown().await;
}

#[tokio::test]
async fn missing_or_wrong_credentials_are_a_401_without_detail() {
    let app = spawn_app(Options::default()).await;
    let secret = app.secret.clone();
    let body = insert(json!(42), "Add dark mode!").to_string();

    let none = app
        .post_raw(body.clone(), &[("content-type", "application/json")])
        .await;
    expect_unauthorized(&none, &secret);

    expect_unauthorized(&post_bearer(&app, &random_secret(), 42).await, &secret);
    // A prefix of the secret, or the secret with another scheme, is not the secret.
    expect_unauthorized(&post_bearer(&app, &secret[..30], 42).await, &secret);
    let basic = format!("Basic {secret}");
    let reply = post_with(&app, body.clone(), ("authorization", &basic)).await;
    expect_unauthorized(&reply, &secret);

    // Signed with the right secret, but over another body.
    let signature = hub_signature_256(&secret, b"{}");
    let reply = post_with(&app, body.clone(), ("x-hub-signature-256", &signature)).await;
    expect_unauthorized(&reply, &secret);
    let reply = post_with(&app, body, ("x-hub-signature-256", "sha256=nothex")).await;
    expect_unauthorized(&reply, &secret);

    assert!(app.branches().await.is_empty());
    assert!(app.dispatches().is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn a_standard_webhooks_signature_older_than_five_minutes_is_a_401() {
    let (app, secret) = app_with_a_whsec_secret().await;
    // Correctly signed, but replayed ten minutes later.
    expect_unauthorized(
        &post_standard_webhooks(&app, &secret, 1, now() - 600).await,
        &secret,
    );
    // Or dated too far ahead.
    expect_unauthorized(
        &post_standard_webhooks(&app, &secret, 2, now() + 600).await,
        &secret,
    );
    // Signed with another whsec_ secret.
    expect_unauthorized(
        &post_standard_webhooks(&app, &random_whsec(), 3, now()).await,
        &secret,
    );
    assert!(app.branches().await.is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn credentials_are_checked_before_the_body_is_parsed() {
    let app = spawn_app(Options::default()).await;
    let reply = app
        .post_raw("not json", &[("content-type", "application/json")])
        .await;
    expect_unauthorized(&reply, &app.secret);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_under_false_signatures_cut_each_other_and_a_valid_delivery_gets_through() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (app, secret) = app_with_a_whsec_secret().await;
    // Fifty senders of a fresh, well-formed, false signature, each 200,000 bytes into a body of
    // 262,000: 10 MB between them, past the budget for bodies not yet checked.
    let false_signature = format!("v1,{}", "A".repeat(43) + "=");
    let mut senders = Vec::new();
    for n in 0..50 {
        let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
        let head = format!(
            "POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: 262000\r\nwebhook-id: msg_{n}\r\nwebhook-timestamp: {}\r\n\
             webhook-signature: {false_signature}\r\n\r\n",
            now()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&vec![b' '; 200_000]).await.unwrap();
        senders.push(stream);
    }
    let started = std::time::Instant::now();
    post_standard_webhooks(&app, &secret, 7, now())
        .await
        .expect(200, "dispatched");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "the valid delivery took {:?}",
        started.elapsed()
    );
    // The first senders were cut to make room: each got its answer, and its connection ends.
    let mut first = senders.remove(0);
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        first.read_to_end(&mut answer),
    )
    .await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        read.is_ok() && answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    app.shutdown().await;
}
