//! HTTP as a sender speaks it: a Supabase INSERT, a POST to `/webhook` with bearer auth, raw
//! bytes over a socket for what a client library will not send, and the answer read whole.

use std::net::SocketAddr;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wait::PATIENCE;

/// An answer from the server.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
    /// The body as JSON, or `Null` when it is not JSON.
    pub body: Value,
}

impl Reply {
    pub fn outcome(&self) -> &str {
        self.body["outcome"].as_str().unwrap_or("")
    }

    pub fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or("")
    }

    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or("")
    }

    /// Panics with the whole answer unless it is `status` with `outcome`.
    #[track_caller]
    pub fn expect(&self, status: u16, outcome: &str) -> &Reply {
        assert!(
            self.status == status && self.outcome() == outcome,
            "expected {status} {outcome}, got {} {}",
            self.status,
            self.text
        );
        assert!(
            !self.message().is_empty(),
            "every answer has a message: {}",
            self.text
        );
        self
    }

    /// Panics unless the answer's message says `says`.
    #[track_caller]
    pub fn expect_message(&self, says: &str) -> &Reply {
        assert!(self.message().contains(says), "{}", self.text);
        self
    }

    /// Panics unless the answer names `branch` as the row's branch.
    #[track_caller]
    pub fn expect_branch(&self, branch: &str) -> &Reply {
        assert_eq!(self.body["branch"], branch, "{}", self.text);
        self
    }

    /// Panics unless the answer is `200 duplicate` for `reason`.
    #[track_caller]
    pub fn expect_duplicate(&self, reason: &str) -> &Reply {
        self.expect(200, "duplicate");
        assert_eq!(self.reason(), reason, "{}", self.text);
        self
    }
}

/// A Supabase INSERT into `public.feedbacks`.
pub fn insert(id: Value, text: &str) -> Value {
    json!({
        "type": "INSERT",
        "table": "feedbacks",
        "schema": "public",
        "record": { "id": id, "message": text, "created_at": "2026-12-02T09:30:00.000000+00:00" },
        "old_record": null
    })
}

/// A POST of `body` to `{url}/webhook` as a Supabase Database Webhook sends it: JSON, with
/// `secret` as the bearer token.
pub fn webhook(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    client
        .post(format!("{url}/webhook"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {secret}"))
        .body(body)
}

/// Sends `body` to `{url}/webhook` with bearer `secret` and reads the whole answer.
pub async fn post_webhook(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    body: &Value,
) -> Reply {
    let response = webhook(client, url, secret, body.to_string())
        .send()
        .await
        .expect("the request failed");
    reply(response).await
}

/// GETs `url` and reads the whole answer.
pub async fn get(client: &reqwest::Client, url: &str) -> Reply {
    reply(client.get(url).send().await.expect("the request failed")).await
}

pub async fn reply(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("the answer was cut off");
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        text,
        body,
    }
}

/// Sends `request` as is over a new connection and returns everything the server answers
/// until it closes (send `Connection: close`).
pub async fn raw_http(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = send_whole(addr, request).await;
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
        .await
        .expect("no answer in time")
        .expect("the answer could not be read");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Opens a connection and writes `request` whole, leaving the answer unread.
pub async fn send_whole(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("could not connect");
    stream
        .write_all(request)
        .await
        .expect("could not send the request");
    stream.flush().await.expect("could not send the request");
    stream
}

/// The head of a raw POST /webhook with a JSON body, bearer auth and `Connection: close`;
/// `framing` is the Content-Length or Transfer-Encoding line.
pub fn raw_head(secret: &str, framing: &str) -> String {
    format!(
        "POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {secret}\r\n{framing}\r\nConnection: close\r\n\r\n"
    )
}

/// A complete, authenticated POST /webhook of row `id`, as raw bytes.
pub fn delivery(secret: &str, id: Value, text: &str) -> Vec<u8> {
    let body = insert(id, text).to_string();
    let head = raw_head(secret, &format!("Content-Length: {}", body.len()));
    format!("{head}{body}").into_bytes()
}

/// A free port on 127.0.0.1, as far as anyone can tell before using it.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("could not bind")
        .local_addr()
        .expect("no local address")
        .port()
}
