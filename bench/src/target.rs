//! One `rowbranch serve` under test: a child process on the fake GitHub, with pacing off, and
//! what `/proc` says of it — CPU time (all its threads, those that ended included) and peak
//! resident memory.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fake_github::{FakeGithub, TEST_APP_PRIVATE_KEY_PEM};
use tempfile::TempDir;
use tokio::process::{Child, Command};

/// The repository the route targets, and its installation on the fake.
pub const REPO: &str = "acme/app";
const INSTALLATION: u64 = 77;

/// The webhook secret every run uses: the bench's own, never a real one.
pub const SECRET: &str = "bench-only-secret-0123456789abcdef";

/// A fake GitHub as fast as it goes: no latency, no faults, and a rate limit no run reaches.
pub async fn fake() -> FakeGithub {
    let fake = FakeGithub::start().await;
    fake.add_repo(REPO);
    fake.install(REPO, INSTALLATION);
    fake.set_rate_limit(u64::from(u32::MAX));
    fake
}

/// A running `rowbranch serve`.
pub struct Target {
    pub url: String,
    /// From the spawn to the first `200` of `/readyz`.
    pub ready: Duration,
    child: Child,
    pid: u32,
    _dir: TempDir,
}

/// The config: one route to the fake, writes unpaced (the bucket never empties and no hourly
/// cap is reached), every other key at its default — the default log level included.
fn config(fake: &FakeGithub) -> String {
    format!(
        r#"listen = "127.0.0.1:0"

[github]
app_id = {app_id}
api_url = "{api_url}"
write_interval_ms = 0
write_burst = 1000000
write_hourly_max = 4000000000
queue_capacity = 100000

[[routes]]
table = "feedbacks"
repo = "{REPO}"
text_column = "message"
branch_prefix = "feedback"
event_type = "feedback"
"#,
        app_id = fake.app_id(),
        api_url = fake.url(),
    )
}

impl Target {
    /// Starts `binary serve` on `fake` and waits until it is ready.
    pub async fn start(binary: &Path, fake: &FakeGithub) -> anyhow::Result<Target> {
        let dir = tempfile::tempdir().context("a temporary directory")?;
        let config = dir.path().join("rowbranch.toml");
        std::fs::write(&config, self::config(fake)).context("writing the config")?;
        let log = dir.path().join("serve.log");
        let log_file = std::fs::File::create(&log).context("creating the log")?;
        let started = Instant::now();
        let child = Command::new(binary)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .current_dir(dir.path())
            .env_remove("ROWBRANCH_LISTEN")
            .env_remove("PORT")
            .env_remove("RUST_LOG")
            .env("ROWBRANCH_WEBHOOK_SECRET", SECRET)
            .env("GITHUB_APP_PRIVATE_KEY", TEST_APP_PRIVATE_KEY_PEM)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let pid = child.id().context("the child's pid")?;
        let addr = wait_for_address(&log, started).await?;
        let url = format!("http://{addr}");
        let client = reqwest::Client::new();
        loop {
            let ready = client
                .get(format!("{url}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ready {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("{} was not ready within 30 s", binary.display());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(Target {
            url,
            ready: started.elapsed(),
            child,
            pid,
            _dir: dir,
        })
    }

    /// CPU time the process has used so far, user and system, in all its threads.
    pub fn cpu(&self) -> anyhow::Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .context("reading /proc/PID/stat")?;
        // The command name, in parentheses, may hold spaces: count fields after its `)`.
        let rest = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .context("/proc/PID/stat has no `)`")?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
        let ticks = |i: usize| -> anyhow::Result<u64> {
            fields
                .get(i)
                .context("/proc/PID/stat is short")?
                .parse()
                .context("a tick count")
        };
        let ticks = ticks(11)? + ticks(12)?;
        Ok(Duration::from_secs_f64(
            ticks as f64 / clock_ticks()? as f64,
        ))
    }

    /// The process's peak resident memory so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .context("reading /proc/PID/status")?;
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmHWM in /proc/PID/status")?;
        Ok(kb * 1024)
    }

    /// SIGTERM, and the wait for the exit (killed after the shutdown's grace).
    pub async fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status()
            .await;
        if tokio::time::timeout(Duration::from_secs(25), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The address `serve` logs once it listens.
async fn wait_for_address(log: &PathBuf, started: Instant) -> anyhow::Result<String> {
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let addr = text
            .lines()
            .find(|l| l.contains("listening"))
            .and_then(|line| line.split("addr=").nth(1))
            .and_then(|rest| rest.split_whitespace().next());
        if let Some(addr) = addr {
            return Ok(addr.to_owned());
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("serve did not log its address within 30 s:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The kernel's clock ticks per second, the unit of `/proc/PID/stat`'s CPU times.
fn clock_ticks() -> anyhow::Result<u64> {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("running getconf CLK_TCK")?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("getconf CLK_TCK's answer")
}
