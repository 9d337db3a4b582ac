//! The process's own series, under the names Prometheus' client libraries give them
//! (`process_resident_memory_bytes`, `process_open_fds`, …; Prometheus' "Writing client
//! libraries", process metrics), read from `/proc/self` at each scrape: a few small files and one
//! directory listing. Where there is no `/proc` (not Linux) there are none of them.

use std::fs;
use std::sync::OnceLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Encodes the process's series at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        // Nothing where there is no `/proc/self/stat` to read (not Linux).
        let Some([utime, stime, start, rss]) = fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|text| stat(&text))
        else {
            return Ok(());
        };
        let mut encode = |name, help, metric: &dyn EncodeMetric| {
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
        };
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        encode(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            &ConstCounter::new((utime + stime) as f64 / ticks),
        )?;
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                Some(rss as f64 * rustix::param::page_size() as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                boot_time().map(|boot| boot + start as f64 / ticks),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                fs::read_dir("/proc/self/fd")
                    .ok()
                    .map(|fds| fds.count() as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                // The soft limit, as the Go client reports it; none when unlimited.
                rustix::process::getrlimit(rustix::process::Resource::Nofile)
                    .current
                    .map(|n| n as f64),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                encode(name, help, &ConstGauge::new(value))?;
            }
        }
        Ok(())
    }
}

/// The fields of `/proc/self/stat` read here (proc_pid_stat(5)), in ticks and pages: utime,
/// stime, starttime (since the machine booted) and rss. The second field is the command's name
/// in parentheses, which may itself hold spaces and parentheses: the fields are counted from
/// after its last `)`, where the third begins.
fn stat(text: &str) -> Option<[u64; 4]> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field N of proc_pid_stat(5) is fields[N - 3].
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some([field(14)?, field(15)?, field(22)?, field(24)?])
}

/// When the machine booted, in seconds since the epoch (`btime` of `/proc/stat`); read once.
fn boot_time() -> Option<f64> {
    static BOOT: OnceLock<Option<f64>> = OnceLock::new();
    *BOOT.get_or_init(|| {
        let text = fs::read_to_string("/proc/stat").ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stat_fields_are_counted_from_after_the_name() {
        // A name with a space and a parenthesis; utime 7, stime 3, starttime 12345, rss 2048.
        let text = "4242 (rb (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 7 3 0 0 20 0 9 0 \
                    12345 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 4096 17475 0 0 0 \
                    17 1 0 0 0 0 0\n";
        assert_eq!(stat(text), Some([7, 3, 12345, 2048]));
        assert_eq!(stat("4242 (cut short) S 1 2"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_as_itself() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |name: &str| -> f64 {
            let line = text.lines().find(|l| l.starts_with(&format!("{name} ")));
            let value = line.and_then(|l| l.split(' ').nth(1));
            value
                .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
                .parse()
                .unwrap()
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(started <= now + 1.0 && started > now - 86_400.0, "{text}");
        assert!(value("process_resident_memory_bytes") > 1e6, "{text}");
        assert!(value("process_open_fds") >= 3.0, "{text}");
        assert!(value("process_cpu_seconds_total") >= 0.0, "{text}");
    }
}
