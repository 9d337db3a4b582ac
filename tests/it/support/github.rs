//! rowbranch on the GitHub forge, against the stateful fake GitHub: the same server, config and
//! pipeline a user runs, with GitHub's answers — and its faults — coming from the fake.

use std::sync::Arc;
use std::time::Duration;

use fake_github::{FakeGithub, TEST_APP_PRIVATE_KEY_PEM};
use rowbranch::config::Config;
use rowbranch::pipeline::Pipeline;
use rowbranch::startup::{Application, Env, Listen, Mode, StartupError};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::app::FEEDBACK_ROUTE;
use super::http::{get, insert, post_webhook, Reply};
use super::random::random_secret;
use super::wait::drained;

/// The repository the feedback route targets, and its installation.
pub const REPO: &str = "acme/app";
pub const INSTALLATION: u64 = 77;

/// A fake with `acme/app` and the App installed on it.
pub async fn fake() -> Arc<FakeGithub> {
    let fake = Arc::new(FakeGithub::start().await);
    fake.add_repo(REPO);
    fake.install(REPO, INSTALLATION);
    fake
}

/// rowbranch with the default options on a new [`fake`].
pub async fn on_a_fake() -> (Arc<FakeGithub>, GithubApp) {
    let fake = fake().await;
    let app = spawn(&fake, GithubOptions::default()).await;
    (fake, app)
}

/// How a test app talks to the fake.
#[derive(Clone)]
pub struct GithubOptions {
    pub write_interval_ms: u64,
    pub write_burst: u32,
    pub write_hourly_max: u32,
    pub queue_capacity: usize,
    pub retry_budget_ms: u64,
    pub respond_within_ms: u64,
    pub max_concurrent_requests: usize,
    /// More lines: before the first table, and at the end of `[github]` and `[webhook]`.
    pub extra_top: String,
    pub extra_webhook: String,
}

impl Default for GithubOptions {
    fn default() -> GithubOptions {
        GithubOptions {
            write_interval_ms: 1000,
            write_burst: 10,
            write_hourly_max: 450,
            queue_capacity: 10_000,
            retry_budget_ms: 30_000,
            respond_within_ms: 20_000,
            max_concurrent_requests: 16,
            extra_top: String::new(),
            extra_webhook: String::new(),
        }
    }
}

impl GithubOptions {
    pub fn config_text(&self, fake: &FakeGithub) -> String {
        format!(
            "listen = \"127.0.0.1:0\"\n{}\n[github]\napp_id = {}\napi_url = \"{}\"\n\
             write_interval_ms = {}\nwrite_burst = {}\nwrite_hourly_max = {}\n\
             queue_capacity = {}\nretry_budget_ms = {}\nmax_concurrent_requests = {}\n\n\
             [webhook]\nrespond_within_ms = {}\n{}\n{FEEDBACK_ROUTE}",
            self.extra_top,
            fake.app_id(),
            fake.url(),
            self.write_interval_ms,
            self.write_burst,
            self.write_hourly_max,
            self.queue_capacity,
            self.retry_budget_ms,
            self.max_concurrent_requests,
            self.respond_within_ms,
            self.extra_webhook,
        )
    }
}

/// A running rowbranch whose forge is the fake GitHub.
pub struct GithubApp {
    pub fake: Arc<FakeGithub>,
    pub url: String,
    pub secret: String,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), StartupError>>>,
    pipeline: Arc<Pipeline>,
}

/// The environment a user would set: the webhook secret and the App's key.
pub fn env(secret: &str) -> impl Fn(&str) -> Option<String> + '_ {
    move |key: &str| match key {
        "ROWBRANCH_WEBHOOK_SECRET" => Some(secret.to_owned()),
        "GITHUB_APP_PRIVATE_KEY" => Some(TEST_APP_PRIVATE_KEY_PEM.to_owned()),
        _ => None,
    }
}

pub async fn spawn(fake: &Arc<FakeGithub>, options: GithubOptions) -> GithubApp {
    let secret = random_secret();
    let config = Config::parse(
        &options.config_text(fake),
        std::path::Path::new("rowbranch.toml"),
        &env(&secret),
    )
    .unwrap_or_else(|e| panic!("the test config does not parse: {e}"));
    let env = Env {
        // The config's `listen` is 127.0.0.1:0; no first look, which the fake would count.
        mode: Mode::Serve {
            listen: Listen::Config,
            warm_up: false,
        },
        ..Env::process()
    };
    let application = Application::build(config, env)
        .await
        .expect("the GitHub forge opens and the routes compile");
    let pipeline = Arc::clone(application.pipeline());
    let url = format!("http://{}", application.addr().expect("it listens"));
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(application.run(async {
        let _ = stopped.await;
    }));
    GithubApp {
        fake: Arc::clone(fake),
        url,
        secret,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .expect("no HTTP client"),
        stop: Some(stop),
        server: Some(server),
        pipeline,
    }
}

impl GithubApp {
    /// Waits until no row is under way (answered `accepted` ones included): shutting down
    /// leaves rows that have not claimed yet.
    pub async fn drained(&self) {
        drained(&self.pipeline).await;
    }

    pub async fn post_insert(&self, id: Value, text: &str) -> Reply {
        post_webhook(&self.client, &self.url, &self.secret, &insert(id, text)).await
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

    pub async fn get(&self, path: &str) -> Reply {
        get(&self.client, &format!("{}{path}", self.url)).await
    }

    /// Stops the server after its runs finish, and checks the fake saw nothing unexpected.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.expect("the server task").expect("the server");
        }
        self.fake.assert_no_unexpected();
    }
}

/// The branches of the feedback repository.
pub fn branches(fake: &FakeGithub) -> Vec<String> {
    let mut refs: Vec<String> = fake
        .refs(REPO)
        .into_iter()
        .filter(|r| r.starts_with("feedback/"))
        .collect();
    refs.sort();
    refs
}

/// The branch of each dispatch, in the order they came.
pub fn dispatched_branches(fake: &FakeGithub) -> Vec<String> {
    fake.dispatches(REPO)
        .iter()
        .map(|d| d.client_payload["branch"].as_str().unwrap_or("").to_owned())
        .collect()
}
