//! The load: wrk, driven by a Lua script that makes each request a Supabase INSERT body, and
//! what it measured, read from the one JSON line the script's `done` prints.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;

/// What the deliveries are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Every delivery a row never seen: three reads, a claim and a dispatch.
    New,
    /// Each row delivered by every connection of a thread at about the same time: the first
    /// starts its run, the others arrive before its branch exists (or just after).
    Early,
    /// Rows handled already, delivered again: their branch exists.
    Handled,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::New, Workload::Early, Workload::Handled];

    pub fn name(self) -> &'static str {
        match self {
            Workload::New => "new",
            Workload::Early => "early",
            Workload::Handled => "handled",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Workload::New => "new rows",
            Workload::Early => "a row redelivered before its branch exists",
            Workload::Handled => "a handled row redelivered",
        }
    }
}

/// How hard and how long.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub threads: u32,
    pub connections: u32,
    pub duration: Duration,
}

/// What wrk measured.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Measured {
    pub requests: u64,
    pub duration_us: u64,
    /// Answers with a status of 400 or more.
    pub non_2xx: u64,
    pub socket_errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

const SCRIPT: &str = r#"
-- Each request an INSERT of public.feedbacks; the id depends on the workload (see bench/src/load.rs).
local threads = {}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

local mode, base, group, pool
local counter = 0
local headers
function init(args)
  mode = args[1]
  base = tonumber(args[2])
  group = tonumber(args[3])
  pool = tonumber(args[4])
  headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. args[5] }
end

function request()
  counter = counter + 1
  local id
  if mode == "new" then
    id = base + tid * 100000000 + counter
  elseif mode == "early" then
    id = base + tid * 100000000 + math.floor(counter / group)
  else
    id = base + (counter * 7919 + tid * 104729) % pool
  end
  local body = string.format(
    '{"type":"INSERT","table":"feedbacks","schema":"public","record":{"id":%d,"message":"Add a dark mode to the settings page, please","created_at":"2026-12-02T09:30:00.000000+00:00"},"old_record":null}',
    id)
  return wrk.format("POST", "/webhook", headers, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"non_2xx":%d,"socket_errors":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"#;

/// The id of the first row of a run's ids: runs never share a row.
pub fn base(run: u64) -> u64 {
    (run + 1) * 100_000_000_000
}

/// Runs wrk against `url` for `shape`, with ids from `base` on (`pool` rows for `Handled`).
pub async fn wrk(
    dir: &Path,
    url: &str,
    workload: Workload,
    shape: Shape,
    base: u64,
    pool: u64,
    secret: &str,
) -> anyhow::Result<Measured> {
    let script = dir.join("rows.lua");
    std::fs::write(&script, SCRIPT).context("writing the wrk script")?;
    // A thread's connections take its ids in turn: a group that size is delivered about at once.
    let group = (shape.connections / shape.threads).max(1);
    let out = tokio::process::Command::new("wrk")
        .arg(format!("--threads={}", shape.threads))
        .arg(format!("--connections={}", shape.connections))
        .arg(format!("--duration={}s", shape.duration.as_secs().max(1)))
        .arg("--timeout=30s")
        .arg("--script")
        .arg(&script)
        .arg(format!("{url}/webhook"))
        .arg("--")
        .arg(workload.name())
        .arg(base.to_string())
        .arg(group.to_string())
        .arg(pool.max(1).to_string())
        .arg(secret)
        .output()
        .await
        .context("running wrk (Debian's package `wrk`: scripts/bench.sh installs it)")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "wrk failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("wrk printed no summary:\n{stdout}"))?;
    serde_json::from_str(line).with_context(|| format!("wrk's summary: {line}"))
}
