//! `spawn_app()`: the real server on 127.0.0.1:0 over a fresh bare repository, configured from a
//! TOML string, with a handle to send deliveries and look at what they left in the repository.

use std::future::Future;
use std::net::SocketAddr;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rowbranch::config::{Config, ForgeSettings};
use rowbranch::forge::local::{create_repository, LocalForge};
use rowbranch::forge::Forge;
use rowbranch::startup::{Application, Launch, Listen};
use serde_json::Value;
use tempfile::TempDir;

use super::faulty_forge::FaultyForge;
use super::local::{branches, dispatches};
use super::random::random_secret;
use super::server::{serve_env, Server};
use super::wait::{eventually, PATIENCE};

/// The route most tests use: `public.feedbacks` → `acme/app`, branches `feedback/…`, swept
/// (where a sweep is on) from an instant before any test's rows, as `init` writes it.
pub const FEEDBACK_ROUTE: &str = r#"
[[routes]]
table = "feedbacks"
repo = "acme/app"
text_column = "message"
branch_prefix = "feedback"
event_type = "feedback"
sweep_from = "2026-01-01T00:00:00+00:00"
"#;

/// [`FEEDBACK_ROUTE`]'s table held at a gate, as `init --run-when status=approved` writes it.
pub const GATED_ROUTE: &str = r#"
[[routes]]
table = "feedbacks"
repo = "acme/app"
events = ["INSERT", "UPDATE"]
branch_prefix = "feedback"
event_type = "feedback"
run_when = { column = "status", equals = "approved" }
"#;

/// `sweep_from`'s line in [`FEEDBACK_ROUTE`].
pub const SWEEP_FROM_LINE: &str = "sweep_from = \"2026-01-01T00:00:00+00:00\"\n";

/// How a test app is configured.
#[derive(Clone)]
pub struct Options {
    respond_within_ms: u64,
    max_body_bytes: Option<usize>,
    on_dispatch: Option<String>,
    routes: String,
    secret_env: Option<String>,
    faulty: bool,
    /// Files written beside the config before it is parsed (e.g. a payload template).
    files: Vec<(String, String)>,
    /// Lines before the first table (`status_page = true`, say).
    top: String,
    /// More environment variables than the webhook secret.
    env: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            // Long enough that a test sees the run's own answer, not `accepted`.
            respond_within_ms: 10_000,
            max_body_bytes: None,
            on_dispatch: None,
            routes: FEEDBACK_ROUTE.to_owned(),
            secret_env: None,
            faulty: false,
            files: Vec::new(),
            top: String::new(),
            env: Vec::new(),
        }
    }
}

impl Options {
    pub fn respond_within_ms(mut self, ms: u64) -> Options {
        self.respond_within_ms = ms;
        self
    }

    pub fn max_body_bytes(mut self, bytes: usize) -> Options {
        self.max_body_bytes = Some(bytes);
        self
    }

    pub fn on_dispatch(mut self, command: &str) -> Options {
        self.on_dispatch = Some(command.to_owned());
        self
    }

    /// Replaces the default route with these `[[routes]]` tables.
    pub fn routes(mut self, toml: &str) -> Options {
        self.routes = toml.to_owned();
        self
    }

    /// The value of ROWBRANCH_WEBHOOK_SECRET; a random secret otherwise.
    pub fn secret_env(mut self, value: &str) -> Options {
        self.secret_env = Some(value.to_owned());
        self
    }

    /// Writes `content` to `name` beside the config before the config is read.
    pub fn file(mut self, name: &str, content: &str) -> Options {
        self.files.push((name.to_owned(), content.to_owned()));
        self
    }

    /// Adds a line before the config's first table.
    pub fn top(mut self, line: &str) -> Options {
        self.top += line;
        self.top += "\n";
        self
    }

    /// Sets an environment variable the config reads.
    pub fn env(mut self, key: &str, value: &str) -> Options {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Wraps the local forge in a [`FaultyForge`].
    pub fn faulty(mut self) -> Options {
        self.faulty = true;
        self
    }

    fn toml(&self) -> String {
        let mut text = format!(
            "listen = \"127.0.0.1:0\"\n{}\n[forge]\nkind = \"local\"\npath = \"repo.git\"\n",
            self.top
        );
        if let Some(command) = &self.on_dispatch {
            text += &format!("on_dispatch = {}\n", toml::Value::String(command.clone()));
        }
        text += &format!(
            "\n[webhook]\nrespond_within_ms = {}\n",
            self.respond_within_ms
        );
        if let Some(max) = self.max_body_bytes {
            text += &format!("max_body_bytes = {max}\n");
        }
        text + &self.routes
    }
}

/// A running app and what it works on. It derefs to its [`Server`]: `url`, `secret` (the first
/// secret in ROWBRANCH_WEBHOOK_SECRET, as a sender would use it) and the ways to post.
pub struct TestApp {
    pub addr: SocketAddr,
    pub repo: PathBuf,
    pub dir: Arc<TempDir>,
    forge: Option<Arc<FaultyForge>>,
    server: Server,
}

impl Deref for TestApp {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.server
    }
}

/// An `on_dispatch` command that holds each dispatch until the test calls
/// [`TestApp::open_gate`] (or 20 s pass), then succeeds.
pub const GATED_DISPATCH: &str = "i=0; while [ ! -e gate-open ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; cat >/dev/null";

pub async fn spawn_app(options: Options) -> TestApp {
    let dir = Arc::new(tempfile::tempdir().expect("no temporary directory"));
    create_repository(&dir.path().join("repo.git"))
        .await
        .expect("could not create the repository");
    start(&options, dir).await
}

/// Two apps over one repository: two single-flight maps, as two processes would have.
pub async fn spawn_two_apps(options: Options) -> (TestApp, TestApp) {
    let first = spawn_app(options.clone()).await;
    let second = start(&options, Arc::clone(&first.dir)).await;
    (first, second)
}

async fn start(options: &Options, dir: Arc<TempDir>) -> TestApp {
    let secret_env = options.secret_env.clone().unwrap_or_else(random_secret);
    let secret = secret_env
        .split_whitespace()
        .next()
        .expect("an empty secret")
        .to_owned();
    let env = |key: &str| {
        if key == "ROWBRANCH_WEBHOOK_SECRET" {
            return Some(secret_env.clone());
        }
        options
            .env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    for (name, content) in &options.files {
        std::fs::write(dir.path().join(name), content).expect("could not write a test file");
    }
    let config_path = dir.path().join("rowbranch.toml");
    let config = Config::parse(&options.toml(), &config_path, &env)
        .unwrap_or_else(|e| panic!("the test config does not parse: {e}"));
    let ForgeSettings::Local(local) = &config.forge else {
        panic!("the test config names a local forge");
    };
    let repo = local.path.clone();
    let local = LocalForge::open(local)
        .await
        .expect("could not open the repository");
    let (forge, faulty): (Arc<dyn Forge>, _) = if options.faulty {
        let faulty = Arc::new(FaultyForge::new(local));
        (faulty.clone(), Some(faulty))
    } else {
        (Arc::new(local), None)
    };
    let env = Launch {
        forge: Some(forge),
        // The config's `listen` is 127.0.0.1:0.
        ..serve_env(Listen::Config)
    };
    let application = Application::build(config, env)
        .await
        .expect("the test routes compile");
    TestApp {
        addr: application.addr().expect("a test app listens"),
        repo,
        dir,
        forge: faulty,
        server: Server::run(application, secret, Duration::from_secs(30)),
    }
}

impl TestApp {
    /// The faulty forge; panics if the app was not started with [`Options::faulty`].
    pub fn forge(&self) -> &FaultyForge {
        self.forge.as_deref().expect("this app has no faulty forge")
    }

    /// Short names of the branches in the repository, other than `main`, sorted.
    pub async fn branches(&self) -> Vec<String> {
        branches(&self.repo).await
    }

    /// The lines of `dispatches.jsonl`, parsed.
    pub fn dispatches(&self) -> Vec<Value> {
        dispatches(&self.dir.path().join("dispatches.jsonl"))
    }

    /// Checks that no branch was claimed and nothing was dispatched.
    pub async fn assert_untouched(&self) {
        assert_eq!(self.branches().await, Vec::<String>::new(), "claimed");
        assert_eq!(self.dispatches(), Vec::<Value>::new(), "dispatched");
    }

    /// Waits until `dispatches.jsonl` holds `n` lines and returns them. (A line can land a
    /// moment after the answer: see `the_dispatch_line_is_in_the_log_when_the_webhook_answers_dispatched`.)
    pub async fn wait_for_dispatches(&self, n: usize) -> Vec<Value> {
        eventually(&format!("{n} dispatch lines"), || async {
            let lines = self.dispatches();
            (lines.len() >= n).then_some(lines)
        })
        .await
    }

    /// Waits until `dispatches.jsonl` holds `n` lines, then checks it holds no more.
    #[track_caller]
    pub fn expect_dispatches(&self, n: usize) -> impl Future<Output = Vec<Value>> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            let lines = self.wait_for_dispatches(n).await;
            assert_eq!(lines.len(), n, "dispatch lines (checked at {caller})");
            lines
        }
    }

    /// Waits until the repository has `n` branches besides `main`.
    pub async fn wait_for_branches(&self, n: usize) -> Vec<String> {
        eventually(&format!("{n} branches"), || async {
            let branches = self.branches().await;
            (branches.len() >= n).then_some(branches)
        })
        .await
    }

    /// Lets every dispatch held by [`GATED_DISPATCH`] go on.
    pub fn open_gate(&self) {
        std::fs::write(self.dir.path().join("gate-open"), b"").expect("could not open the gate");
    }

    /// Stops taking deliveries, waits for every run under way, and checks the faulty forge saw
    /// nothing unexpected.
    pub async fn shutdown(mut self) {
        tokio::time::timeout(PATIENCE, self.server.stop())
            .await
            .expect("the server did not stop in time");
        if let Some(forge) = &self.forge {
            forge.verify();
        }
    }
}
