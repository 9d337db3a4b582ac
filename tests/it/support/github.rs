//! rowbranch on the GitHub forge, against the stateful fake GitHub: the same server, config and
//! pipeline a user runs, with GitHub's answers — and its faults — coming from the fake.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use fake_github::{FakeGithub, TEST_APP_PRIVATE_KEY_PEM};
use rowbranch::config::Config;
use rowbranch::pipeline::Pipeline;
use rowbranch::startup::{Application, Listen};

use super::app::FEEDBACK_ROUTE;
use super::random::random_secret;
use super::server::{serve_env, Server};
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

/// A running rowbranch whose forge is the fake GitHub. It derefs to its [`Server`]: `url`,
/// `secret` and the ways to post.
pub struct GithubApp {
    pub fake: Arc<FakeGithub>,
    pipeline: Arc<Pipeline>,
    server: Server,
}

impl Deref for GithubApp {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.server
    }
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
    // The config's `listen` is 127.0.0.1:0.
    let application = Application::build(config, serve_env(Listen::Config))
        .await
        .expect("the GitHub forge opens and the routes compile");
    GithubApp {
        fake: Arc::clone(fake),
        pipeline: Arc::clone(application.pipeline()),
        server: Server::run(application, secret, Duration::from_secs(120)),
    }
}

impl GithubApp {
    /// Waits until no row is under way (answered `accepted` ones included): shutting down
    /// leaves rows that have not claimed yet.
    pub async fn drained(&self) {
        drained(&self.pipeline).await;
    }

    /// Stops the server after its runs finish, and checks the fake saw nothing unexpected.
    pub async fn shutdown(mut self) {
        self.server.stop().await;
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
