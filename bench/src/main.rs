//! rowbranch's benchmark. Starts `rowbranch serve` (a release binary) on the fake GitHub with
//! pacing off, drives it with wrk, and reports per workload — new rows, a row redelivered
//! before its branch exists, a handled row redelivered — requests per second, p50/p99 latency,
//! GitHub requests per delivery, CPU time per delivery (rowbranch's process alone, from
//! `/proc`) and peak resident memory; the median of several runs. With `--baseline BIN` the
//! same runs for a second binary, interleaved with the first's, side by side with ratios: a
//! change is judged against `main` in one run on one machine. `scripts/bench.sh` builds and
//! runs it.
//!
//! The machine is shared and noisy: no figure here is a pass or a fail, only a comparison.

mod load;
mod target;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use serde_json::{json, Value};

use load::{Measured, Shape, Workload};
use target::{Target, SECRET};

#[derive(Parser)]
#[command(
    about = "rowbranch serve on the fake GitHub under wrk: throughput, latency, CPU and memory per workload"
)]
struct Args {
    /// The rowbranch binary to measure.
    #[arg(long, default_value = "target/release/rowbranch")]
    binary: PathBuf,
    /// A second binary measured in the same runs (e.g. main's), for ratios.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Runs per workload and binary; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: u64,
    /// Seconds of load per run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Open connections (wrk -c).
    #[arg(long, default_value_t = 32)]
    connections: u32,
    /// wrk's threads (wrk -t).
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// Which workloads; all by default.
    #[arg(long, value_enum, value_delimiter = ',')]
    workload: Vec<Workload>,
    /// Handled rows the `handled` workload redelivers.
    #[arg(long, default_value_t = 512)]
    pool: u64,
    /// One JSON record on standard output instead of the table.
    #[arg(long)]
    json: bool,
}

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Run {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    github_per_delivery: f64,
    cpu_us_per_delivery: f64,
    peak_rss_mb: f64,
    ready_ms: f64,
    refused: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let workloads = if args.workload.is_empty() {
        Workload::ALL.to_vec()
    } else {
        args.workload.clone()
    };
    let mut binaries = vec![args.binary.clone()];
    binaries.extend(args.baseline.clone());
    for binary in &binaries {
        if !binary.is_file() {
            bail!(
                "{} is not a file: build it (cargo build --release) or name another",
                binary.display()
            );
        }
    }
    let shape = Shape {
        threads: args.threads,
        connections: args.connections,
        duration: Duration::from_secs(args.seconds),
    };
    // runs[workload][binary] = each run's figures. Binaries alternate within a run, so that
    // whatever else the machine does falls on both.
    let mut runs = vec![vec![Vec::new(); binaries.len()]; workloads.len()];
    for run in 0..args.runs {
        for (w, &workload) in workloads.iter().enumerate() {
            for (b, binary) in binaries.iter().enumerate() {
                let figures = measure(binary, workload, shape, run, args.pool)
                    .await
                    .with_context(|| format!("{} on {}", workload.name(), binary.display()))?;
                if !args.json {
                    eprintln!(
                        "run {} {:<8} {:<40} {:>8.0} rows/s  {:>6.0} µs CPU/row",
                        run + 1,
                        workload.name(),
                        binary.display(),
                        figures.rps,
                        figures.cpu_us_per_delivery
                    );
                }
                runs[w][b].push(figures);
            }
        }
    }
    let medians: Vec<Vec<Run>> = runs
        .iter()
        .map(|per_binary| per_binary.iter().map(|r| median_run(r)).collect())
        .collect();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&record(&args, &binaries, &workloads, &medians, &runs))?
        );
    } else {
        print_table(&binaries, &workloads, &medians, &args);
    }
    Ok(())
}

/// One run of `workload` on `binary`: a fresh fake and a fresh process, a warm-up (or the
/// handled rows), then the load, then the process's counters.
async fn measure(
    binary: &std::path::Path,
    workload: Workload,
    shape: Shape,
    run: u64,
    pool: u64,
) -> anyhow::Result<Run> {
    let fake = target::fake().await;
    let target = Target::start(binary, &fake).await?;
    let client = reqwest::Client::new();
    // Rows below the run's base: a warm-up (a token minted, the default branch read), and for
    // `handled` the rows it redelivers.
    let base = load::base(run);
    let first = match workload {
        Workload::Handled => base,
        _ => base - 1_000_000,
    };
    let count = match workload {
        Workload::Handled => pool,
        _ => 32,
    };
    send_rows(&client, &target.url, first, count).await?;
    settle(&fake).await;
    let cpu_before = target.cpu()?;
    let github_before = fake.answered();
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let measured = load::wrk(dir.path(), &target.url, workload, shape, base, pool, SECRET).await?;
    settle(&fake).await;
    let cpu = target.cpu()?.saturating_sub(cpu_before);
    let github = fake.answered() - github_before;
    let peak_rss = target.peak_rss()?;
    let ready = target.ready;
    target.stop().await;
    Ok(figures(measured, cpu, github, peak_rss, ready))
}

fn figures(m: Measured, cpu: Duration, github: usize, peak_rss: u64, ready: Duration) -> Run {
    let requests = m.requests.max(1) as f64;
    Run {
        rps: m.requests as f64 / (m.duration_us.max(1) as f64 / 1e6),
        p50_ms: m.p50_us as f64 / 1000.0,
        p99_ms: m.p99_us as f64 / 1000.0,
        github_per_delivery: github as f64 / requests,
        cpu_us_per_delivery: cpu.as_secs_f64() * 1e6 / requests,
        peak_rss_mb: peak_rss as f64 / 1e6,
        ready_ms: ready.as_secs_f64() * 1000.0,
        refused: m.non_2xx + m.socket_errors,
    }
}

/// Sends rows `first..first + count`, 16 at a time, each once; every answer must be a 2xx.
async fn send_rows(
    client: &reqwest::Client,
    url: &str,
    first: u64,
    count: u64,
) -> anyhow::Result<()> {
    let ids: Vec<u64> = (first..first + count).collect();
    for chunk in ids.chunks(16) {
        let mut sends = tokio::task::JoinSet::new();
        for &id in chunk {
            let body = json!({
                "type": "INSERT", "table": "feedbacks", "schema": "public",
                "record": {"id": id, "message": "Add a dark mode to the settings page, please",
                           "created_at": "2026-12-02T09:30:00.000000+00:00"},
                "old_record": null
            });
            let request = client
                .post(format!("{url}/webhook"))
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {SECRET}"))
                .body(body.to_string());
            sends.spawn(async move {
                let answer = request.send().await?;
                let status = answer.status();
                let text = answer.text().await.unwrap_or_default();
                anyhow::Ok((status, text))
            });
        }
        while let Some(sent) = sends.join_next().await {
            let (status, text) = sent.context("a warm-up delivery's task")??;
            if !status.is_success() {
                bail!("a warm-up delivery was answered {status}: {text}");
            }
        }
    }
    Ok(())
}

/// Waits until the fake has answered nothing new for 300 ms: the runs a load left are done.
async fn settle(fake: &fake_github::FakeGithub) {
    let mut last = fake.answered();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = fake.answered();
        if now == last {
            return;
        }
        last = now;
    }
}

/// The run with each figure's median (figure by figure).
fn median_run(runs: &[Run]) -> Run {
    let m = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    Run {
        rps: m(|r| r.rps),
        p50_ms: m(|r| r.p50_ms),
        p99_ms: m(|r| r.p99_ms),
        github_per_delivery: m(|r| r.github_per_delivery),
        cpu_us_per_delivery: m(|r| r.cpu_us_per_delivery),
        peak_rss_mb: m(|r| r.peak_rss_mb),
        ready_ms: m(|r| r.ready_ms),
        refused: runs.iter().map(|r| r.refused).sum(),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// A figure of a run, as a table row shows it: its label, how to read it, and its decimals.
type Figure = (&'static str, fn(&Run) -> f64, usize);

const FIGURES: [Figure; 7] = [
    ("requests/s", |r| r.rps, 0),
    ("p50 ms", |r| r.p50_ms, 2),
    ("p99 ms", |r| r.p99_ms, 2),
    ("GitHub requests/delivery", |r| r.github_per_delivery, 2),
    ("CPU µs/delivery", |r| r.cpu_us_per_delivery, 0),
    ("peak RSS MB", |r| r.peak_rss_mb, 1),
    ("ready after start ms", |r| r.ready_ms, 1),
];

fn print_table(binaries: &[PathBuf], workloads: &[Workload], medians: &[Vec<Run>], args: &Args) {
    println!(
        "rowbranch serve on the fake GitHub, pacing off; wrk -t{} -c{}, {} s a run, median of {} runs",
        args.threads, args.connections, args.seconds, args.runs
    );
    for (w, workload) in workloads.iter().enumerate() {
        println!("\n{} ({})", workload.describe(), workload.name());
        let mut header = format!("  {:<26}", "");
        for binary in binaries {
            header += &format!(" {:>18}", short(binary));
        }
        if binaries.len() == 2 {
            header += &format!(" {:>8}", "ratio");
        }
        println!("{header}");
        for (label, figure, decimals) in FIGURES {
            let mut line = format!("  {label:<26}");
            let values: Vec<f64> = medians[w].iter().map(figure).collect();
            for value in &values {
                line += &format!(" {:>18.*}", decimals, value);
            }
            if let [new, old] = values[..] {
                line += &format!(" {:>7.2}×", new / old);
            }
            println!("{line}");
        }
        let refused: Vec<String> = medians[w].iter().map(|r| r.refused.to_string()).collect();
        println!(
            "  {:<26} {}",
            "answers ≥ 400 (all runs)",
            refused.join(" / ")
        );
    }
    if binaries.len() == 2 {
        println!("\nratio: {} / {}", short(&binaries[0]), short(&binaries[1]));
    }
}

/// The file name and its folder, enough to tell two binaries apart.
fn short(path: &std::path::Path) -> String {
    let parts: Vec<String> = path
        .iter()
        .rev()
        .take(3)
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let text = parts.into_iter().rev().collect::<Vec<_>>().join("/");
    if text.len() > 18 {
        format!("…{}", &text[text.len() - 17..])
    } else {
        text
    }
}

fn record(
    args: &Args,
    binaries: &[PathBuf],
    workloads: &[Workload],
    medians: &[Vec<Run>],
    runs: &[Vec<Vec<Run>>],
) -> Value {
    let as_json = |r: &Run| {
        json!({
            "requests_per_second": r.rps,
            "p50_ms": r.p50_ms,
            "p99_ms": r.p99_ms,
            "github_requests_per_delivery": r.github_per_delivery,
            "cpu_us_per_delivery": r.cpu_us_per_delivery,
            "peak_rss_mb": r.peak_rss_mb,
            "ready_ms": r.ready_ms,
            "answers_4xx_5xx": r.refused,
        })
    };
    let per_binary: Vec<Value> = binaries
        .iter()
        .enumerate()
        .map(|(b, binary)| {
            let workloads: serde_json::Map<String, Value> = workloads
                .iter()
                .enumerate()
                .map(|(w, workload)| {
                    let mut median = as_json(&medians[w][b]);
                    median["runs"] = runs[w][b].iter().map(as_json).collect();
                    (workload.name().to_owned(), median)
                })
                .collect();
            json!({"binary": binary.display().to_string(), "workloads": workloads})
        })
        .collect();
    json!({
        "shape": {"threads": args.threads, "connections": args.connections,
                  "seconds": args.seconds, "runs": args.runs, "pool": args.pool},
        "binaries": per_binary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn runs_never_share_a_row() {
        // A run's ids lie in [base, base + threads × 10^8 + rows), warm-up rows 10^6 below.
        for run in 0..100 {
            let end = load::base(run) + 64 * 100_000_000;
            assert!(end < load::base(run + 1) - 1_000_000);
        }
    }
}
