//! rowbranch's server running in this process, as `main`'s `serve` runs it: an
//! [`Application`] on a task with a way to stop it, and a client that speaks to it as a
//! Supabase Database Webhook would.

use std::time::Duration;

use futures_util::future::join_all;
use rowbranch::startup::{Application, Launch, Listen, Mode, StartupError};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::http::{get, insert, reply, Reply};

/// The environment of a server a test starts: it listens as `listen` says, and takes no first
/// look at the forge (which a test double would count).
pub fn serve_env(listen: Listen) -> Launch {
    Launch {
        mode: Mode::Serve {
            listen,
            warm_up: false,
        },
        ..Launch::process()
    }
}

/// A running server and a client for it.
pub struct Server {
    pub url: String,
    /// The bearer token a sender uses.
    pub secret: String,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), StartupError>>>,
}

impl Server {
    /// Runs `application` until [`Server::stop`]; each request waits at most `timeout`.
    pub fn run(application: Application, secret: String, timeout: Duration) -> Server {
        let url = format!(
            "http://{}",
            application.addr().expect("a test server listens")
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(application.run(async {
            let _ = stopped.await;
        }));
        Server {
            url,
            secret,
            client: reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .expect("no HTTP client"),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// POSTs an INSERT of row `id` with bearer auth.
    pub async fn post_insert(&self, id: Value, text: &str) -> Reply {
        self.post_json(&insert(id, text)).await
    }

    /// POSTs the INSERTs of rows `ids` with `text`, all at once; their answers, in order.
    pub async fn post_inserts(&self, ids: impl IntoIterator<Item = u64>, text: &str) -> Vec<Reply> {
        join_all(ids.into_iter().map(|id| self.post_insert(json!(id), text))).await
    }

    /// POSTs an INSERT of row `id` and checks it is answered `200 dispatched`.
    pub async fn dispatched(&self, id: Value, text: &str) -> Reply {
        let reply = self.post_insert(id, text).await;
        reply.expect(200, "dispatched");
        reply
    }

    /// POSTs an INSERT of row `id` and checks it is answered `200 duplicate` for `reason`.
    pub async fn duplicate(&self, id: Value, text: &str, reason: &str) -> Reply {
        let reply = self.post_insert(id, text).await;
        reply.expect_duplicate(reason);
        reply
    }

    /// POSTs `body` as JSON with bearer auth.
    pub async fn post_json(&self, body: &Value) -> Reply {
        self.post_bytes(body.to_string()).await
    }

    /// POSTs raw bytes as `application/json` with bearer auth.
    pub async fn post_bytes(&self, body: impl Into<Vec<u8>>) -> Reply {
        let auth = format!("Bearer {}", self.secret);
        self.post_raw(
            body,
            &[
                ("content-type", "application/json"),
                ("authorization", &auth),
            ],
        )
        .await
    }

    /// POSTs raw bytes with exactly these headers (reqwest adds Content-Length and Host).
    pub async fn post_raw(&self, body: impl Into<Vec<u8>>, headers: &[(&str, &str)]) -> Reply {
        self.post_to("/webhook", body, headers).await
    }

    /// [`Server::post_raw`] to `path`.
    pub async fn post_to(
        &self,
        path: &str,
        body: impl Into<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = self
            .client
            .post(format!("{}{path}", self.url))
            .body(body.into());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        reply(request.send().await.expect("the request failed")).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        get(&self.client, &format!("{}{path}", self.url)).await
    }

    /// Stops taking deliveries and waits for every run under way; the server must end well.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("the server task panicked")
                .expect("the server failed");
        }
    }
}
