//! rowbranch as a child process: the binary as a user runs it, with an environment of the
//! test's choosing; and `rowbranch serve` for what only a process has: its open-files limit, its
//! memory, its signals. Its log goes to a file the test reads while it runs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::app::FEEDBACK_ROUTE;
use super::local::{branches, dir_with_repository};
use super::wait::{eventually, PATIENCE};

/// Every variable rowbranch reads, besides those of the route from the environment.
const VARIABLES: [&str; 10] = [
    "ROWBRANCH_WEBHOOK_SECRET",
    "ROWBRANCH_LISTEN",
    "ROWBRANCH_LOG_FORMAT",
    "ROWBRANCH_STATUS_PASSWORD",
    "PORT",
    "GITHUB_APP_ID",
    "GITHUB_APP_PRIVATE_KEY",
    "GITHUB_API_URL",
    "DATABASE_URL",
    "RUST_LOG",
];

/// The binary, run in `dir` with none of rowbranch's variables from the test's own environment
/// (a test sets those it means), its input closed, and killed if the test drops it.
pub fn rowbranch(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rowbranch"));
    command
        .current_dir(dir)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for name in VARIABLES
        .into_iter()
        .chain(rowbranch::config::env::variables())
    {
        command.env_remove(name);
    }
    command
}

/// Runs `command` to its end, for at most a minute.
pub async fn run(command: &mut Command) -> Output {
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the command did not finish in time")
        .expect("could not run rowbranch")
}

/// `command` (a [`rowbranch`] `serve`) started listening on `addr`, once it answers `/healthz`;
/// its log is piped, for [`terminate`].
pub async fn serve_until_healthy(command: &mut Command, addr: &str) -> Child {
    let server = command
        .env("ROWBRANCH_LISTEN", addr)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("could not start rowbranch serve");
    let client = reqwest::Client::new();
    eventually("the server to answer /healthz", || async {
        let up = client.get(format!("http://{addr}/healthz")).send().await;
        up.ok().filter(|r| r.status() == 200)
    })
    .await;
    server
}

/// Stops a server started by [`serve_until_healthy`] with SIGTERM; its exit code and its log.
pub async fn terminate(mut server: Child) -> (Option<i32>, String) {
    let pid = server.id().expect("the server has a pid") as i32;
    let pid = rustix::process::Pid::from_raw(pid).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM)
        .expect("could not signal the server");
    let status = tokio::time::timeout(PATIENCE, server.wait())
        .await
        .expect("the server did not stop after SIGTERM")
        .expect("could not wait for the server");
    let mut log = String::new();
    if let Some(mut err) = server.stderr.take() {
        err.read_to_string(&mut log)
            .await
            .expect("could not read the log");
    }
    (status.code(), log)
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A running `rowbranch serve`.
pub struct Served {
    pub addr: SocketAddr,
    pub url: String,
    pub dir: Arc<TempDir>,
    log: PathBuf,
    child: Child,
}

/// How to start it.
pub struct Start<'a> {
    /// The config file's text; `listen` should be `127.0.0.1:0`.
    pub config: &'a str,
    /// Variables besides the webhook secret (set to `secret`).
    pub env: Vec<(&'static str, String)>,
    /// The open-files limit to run it under (`prlimit --nofile`), if any.
    pub nofile: Option<u64>,
    pub secret: String,
}

/// `serve` on a new local repository (`dir_with_repository`), with `webhook` as its
/// `[webhook]` lines, under the open-files limit `nofile` if any.
pub async fn serve_local(webhook: &str, nofile: Option<u64>, secret: &str) -> Served {
    serve(
        dir_with_repository().await,
        Start {
            config: &local_config(webhook),
            env: vec![],
            nofile,
            secret: secret.to_owned(),
        },
    )
    .await
}

/// `serve` with `config`, whose forge is the fake GitHub: its test-only App key in the
/// environment, and `env` besides.
pub async fn serve_on_fake(
    config: &str,
    mut env: Vec<(&'static str, String)>,
    secret: &str,
) -> Served {
    env.push((
        "GITHUB_APP_PRIVATE_KEY",
        fake_github::TEST_APP_PRIVATE_KEY_PEM.to_owned(),
    ));
    serve(
        Arc::new(TempDir::new().expect("a temporary directory")),
        Start {
            config,
            env,
            nofile: None,
            secret: secret.to_owned(),
        },
    )
    .await
}

/// Starts `rowbranch serve` in `dir` and waits until it logs its address.
pub async fn serve(dir: Arc<TempDir>, start: Start<'_>) -> Served {
    serve_binary(Path::new(env!("CARGO_BIN_EXE_rowbranch")), dir, start).await
}

/// The binary a measurement runs: `ROWBRANCH_MEASURE_BINARY` (another build, a release, an
/// earlier version), else this build's.
pub fn measured_binary() -> PathBuf {
    std::env::var_os("ROWBRANCH_MEASURE_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_rowbranch")),
        PathBuf::from,
    )
}

/// The release build `.ci/run` makes (`ROWBRANCH_TEST_RELEASE_BINARY`), else this build's:
/// for a test whose load would take a debug build minutes on a small machine.
pub fn release_binary() -> PathBuf {
    std::env::var_os("ROWBRANCH_TEST_RELEASE_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_rowbranch")),
        PathBuf::from,
    )
}

/// [`serve`] with another build of rowbranch, for measurements that compare builds.
pub async fn serve_binary(binary: &Path, dir: Arc<TempDir>, start: Start<'_>) -> Served {
    let config = dir.path().join("rowbranch.toml");
    std::fs::write(&config, start.config).expect("could not write the config");
    let log = dir.path().join("serve.log");
    let log_file = std::fs::File::create(&log).expect("could not create the log");
    let mut command = match start.nofile {
        Some(limit) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={limit}:{limit}"))
                .arg("--")
                .arg(binary);
            c
        }
        None => Command::new(binary),
    };
    command
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .current_dir(dir.path())
        .env_remove("ROWBRANCH_LISTEN")
        .env_remove("PORT")
        // The suite's own database is not this server's: a test that means one passes it.
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "info")
        .env("ROWBRANCH_WEBHOOK_SECRET", &start.secret)
        .envs(start.env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        // A group of its own, so that a test can kill it with its children (`on_dispatch`).
        .process_group(0)
        .kill_on_drop(true);
    let child = command.spawn().expect("could not start rowbranch serve");
    let addr = eventually("rowbranch serve to log its address", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let line = text.lines().find(|l| l.contains("listening"))?;
        // A text line says `addr=…`; a JSON line `"addr":"…"`.
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(json) => json["addr"].as_str()?.parse().ok(),
            Err(_) => line
                .split("addr=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|addr| addr.parse().ok()),
        }
    })
    .await;
    Served {
        addr,
        url: format!("http://{addr}"),
        dir,
        log,
        child,
    }
}

impl Served {
    pub fn pid(&self) -> i32 {
        self.child.id().expect("the child is running") as i32
    }

    /// Everything the process has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process's peak resident memory so far, in bytes (`VmHWM`).
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the child's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmHWM in /proc status")
            * 1024
    }

    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid()).expect("a pid");
        rustix::process::kill_process(pid, signal).expect("could not signal the child");
    }

    /// Sends `signal` to the process and every process it started (`on_dispatch` commands).
    pub fn signal_group(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid()).expect("a pid");
        rustix::process::kill_process_group(pid, signal)
            .expect("could not signal the child's process group");
    }

    /// Sends SIGTERM and checks the process exits 0 within `within`.
    pub async fn stops_cleanly(&mut self, within: Duration) {
        self.signal(rustix::process::Signal::TERM);
        let code = self.exit_code(within).await;
        assert_eq!(code, Some(0), "{}", self.log());
    }

    /// Waits for the process to exit, for at most `within`; its exit code.
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("the process did not exit in time")
            .expect("could not wait for the process")
            .code()
    }

    pub fn repo(&self) -> PathBuf {
        self.dir.path().join("repo.git")
    }

    /// Short names of the branches in its repository, other than `main`, sorted.
    pub async fn branches(&self) -> Vec<String> {
        branches(&self.repo()).await
    }

    pub fn dispatch_log(&self) -> PathBuf {
        self.dir.path().join("dispatches.jsonl")
    }
}

/// The `[pgmq]` settings of a config without that table: its defaults.
pub fn default_pgmq() -> rowbranch::config::PgmqSettings {
    let path = std::path::Path::new("rowbranch.toml");
    let config = rowbranch::config::Config::parse(&local_config(""), path, &|_| None);
    config.expect("the local config loads").pgmq
}

/// A local-forge config for `public.feedbacks`, listening on a free port, with `webhook`'s
/// lines added to `[webhook]`.
pub fn local_config(webhook: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n\n[forge]\nkind = \"local\"\npath = \"repo.git\"\n\n\
         [webhook]\n{webhook}\n{}",
        FEEDBACK_ROUTE
    )
}
