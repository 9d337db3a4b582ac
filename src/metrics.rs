//! The process's metrics, in one registry per server (tests start many servers in one process),
//! rendered as Prometheus text at `GET /metrics`. Label values come from fixed sets — a route's
//! `schema.table`, a GitHub operation, a status code — never a row id or a branch. The names
//! are part of the contract (README, "Metrics").

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The route label of what belongs to no route (an unauthenticated delivery, say).
pub const NO_ROUTE: &str = "none";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    route: String,
    status: String,
    outcome: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    route: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: &'static str,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    route: String,
    verdict: &'static str,
}

/// Seconds, from 5 ms to about 80 s: a read, a paced write, a run that waited its turn.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Every series rowbranch keeps.
pub struct Metrics {
    registry: Registry,
    deliveries: Family<DeliveryLabels, Counter>,
    runs: Family<RunLabels, Counter>,
    run_duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    github_requests: Family<RequestLabels, Counter>,
    github_duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    github_retries: Family<CauseLabels, Counter>,
    rate_limit_remaining: Family<ResourceLabels, Gauge>,
    tokens_minted: Counter,
    write_queue_depth: Gauge,
    runs_in_flight: Gauge,
    reconcile_runs: Family<ResultLabels, Counter>,
    reconcile_rows: Family<VerdictLabels, Counter>,
    pgmq_messages: Family<RunLabels, Counter>,
    pgmq_queue_depth: Family<QueueLabels, Gauge>,
    pgmq_oldest_age: Family<QueueLabels, Gauge>,
    /// Deliveries by outcome and runs by result, summed over routes, for the status page.
    totals: Mutex<BTreeMap<String, u64>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            deliveries: Family::default(),
            runs: Family::default(),
            run_duration: Family::new_with_constructor(seconds),
            github_requests: Family::default(),
            github_duration: Family::new_with_constructor(seconds),
            github_retries: Family::default(),
            rate_limit_remaining: Family::default(),
            tokens_minted: Counter::default(),
            write_queue_depth: Gauge::default(),
            runs_in_flight: Gauge::default(),
            reconcile_runs: Family::default(),
            reconcile_rows: Family::default(),
            pgmq_messages: Family::default(),
            pgmq_queue_depth: Family::default(),
            pgmq_oldest_age: Family::default(),
            totals: Mutex::new(BTreeMap::new()),
        };
        let mut registry = Registry::default();
        // Counters get their `_total` from the encoder.
        registry.register(
            "rowbranch_deliveries",
            "Webhook deliveries answered, by route, status, outcome and reason",
            m.deliveries.clone(),
        );
        registry.register(
            "rowbranch_runs",
            "Rows' runs ended, by route and result, whatever their delivery was told",
            m.runs.clone(),
        );
        registry.register(
            "rowbranch_run_duration_seconds",
            "How long rows' runs took, from acceptance to their end",
            m.run_duration.clone(),
        );
        registry.register(
            "rowbranch_github_requests",
            "Requests to GitHub answered, by operation and status (error: no answer)",
            m.github_requests.clone(),
        );
        registry.register(
            "rowbranch_github_request_duration_seconds",
            "How long GitHub took to answer, by operation",
            m.github_duration.clone(),
        );
        registry.register(
            "rowbranch_github_retries",
            "GitHub requests tried again, by cause",
            m.github_retries.clone(),
        );
        registry.register(
            "rowbranch_github_rate_limit_remaining",
            "Requests left in GitHub's current rate-limit window, by resource, as last answered",
            m.rate_limit_remaining.clone(),
        );
        registry.register(
            "rowbranch_installation_tokens_minted",
            "Installation tokens minted",
            m.tokens_minted.clone(),
        );
        registry.register(
            "rowbranch_write_queue_depth",
            "Writes to GitHub waiting for their turn or under way",
            m.write_queue_depth.clone(),
        );
        registry.register(
            "rowbranch_runs_in_flight",
            "Rows accepted and not yet finished",
            m.runs_in_flight.clone(),
        );
        registry.register(
            "rowbranch_reconcile_runs",
            "Sweeps of a route ended, by result (ok, or failed: stopped early)",
            m.reconcile_runs.clone(),
        );
        registry.register(
            "rowbranch_reconcile_rows",
            "Rows a sweep settled, by route and verdict",
            m.reconcile_rows.clone(),
        );
        registry.register(
            "rowbranch_pgmq_messages",
            "Queue messages settled, by route (none: no route) and result",
            m.pgmq_messages.clone(),
        );
        registry.register(
            "rowbranch_pgmq_queue_depth",
            "Messages in the queue, visible or held, as last sampled",
            m.pgmq_queue_depth.clone(),
        );
        registry.register(
            "rowbranch_pgmq_oldest_message_age_seconds",
            "Age of the oldest message in the queue, as last sampled",
            m.pgmq_oldest_age.clone(),
        );
        Metrics { registry, ..m }
    }

    /// One queue message settled: `archived`, `dead`, `retried`, `redispatched`, `lease_lost`
    /// or `released`.
    pub fn pgmq_message(&self, route: &str, result: &'static str) {
        self.pgmq_messages
            .get_or_create(&RunLabels {
                route: route.to_owned(),
                result,
            })
            .inc();
        self.add(format!("queue messages {result}"));
    }

    /// A sample of a queue: how many messages, and how old the oldest is.
    pub fn pgmq_queue(&self, queue: &str, depth: i64, oldest_age_seconds: i64) {
        let labels = QueueLabels {
            queue: queue.to_owned(),
        };
        self.pgmq_queue_depth.get_or_create(&labels).set(depth);
        self.pgmq_oldest_age
            .get_or_create(&labels)
            .set(oldest_age_seconds);
    }

    /// One webhook answer. `route` is the route's `schema.table`, or [`NO_ROUTE`].
    pub fn delivery(&self, route: &str, status: u16, outcome: &'static str, reason: &'static str) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                route: route.to_owned(),
                status: status.to_string(),
                outcome,
                reason,
            })
            .inc();
        self.add(format!("deliveries {outcome}"));
    }

    fn add(&self, total: String) {
        *self
            .totals
            .lock()
            .expect("totals lock poisoned")
            .entry(total)
            .or_default() += 1;
    }

    /// Deliveries by outcome and runs by result, summed over routes.
    pub fn totals(&self) -> Vec<(String, u64)> {
        let totals = self.totals.lock().expect("totals lock poisoned");
        totals.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// One run's end: `dispatched`, `duplicate`, `failed_unavailable`, `failed_refused`,
    /// `failed_internal` or `abandoned`.
    pub fn run_ended(&self, route: &str, result: &'static str, took: Duration) {
        self.runs
            .get_or_create(&RunLabels {
                route: route.to_owned(),
                result,
            })
            .inc();
        self.run_duration
            .get_or_create(&RouteLabels {
                route: route.to_owned(),
            })
            .observe(took.as_secs_f64());
        self.add(format!("runs {result}"));
    }

    pub fn runs_in_flight(&self, n: usize) {
        self.runs_in_flight
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// One request's answer (`status` its code, or `error` when none came).
    pub fn github_request(&self, operation: &'static str, status: &str, took: Duration) {
        self.github_requests
            .get_or_create(&RequestLabels {
                operation,
                status: status.to_owned(),
            })
            .inc();
        self.github_duration
            .get_or_create(&OperationLabels { operation })
            .observe(took.as_secs_f64());
    }

    /// A retry: `rate_limited`, `server_error`, `no_answer` or `not_there_yet`.
    pub fn github_retry(&self, cause: &'static str) {
        self.github_retries
            .get_or_create(&CauseLabels { cause })
            .inc();
    }

    pub fn rate_limit_remaining(&self, resource: &str, remaining: i64) {
        self.rate_limit_remaining
            .get_or_create(&ResourceLabels {
                resource: resource.to_owned(),
            })
            .set(remaining);
    }

    pub fn token_minted(&self) {
        self.tokens_minted.inc();
    }

    /// A write joins (+1) or leaves (-1) the queue.
    pub fn write_queue(&self, joined: bool) {
        if joined {
            self.write_queue_depth.inc();
        } else {
            self.write_queue_depth.dec();
        }
    }

    /// One route's sweep ended: `ok`, or `failed` when it stopped early.
    pub fn reconcile_run(&self, result: &'static str) {
        self.reconcile_runs
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// One row a sweep settled.
    pub fn reconcile_row(&self, route: &str, verdict: &'static str) {
        self.reconcile_rows
            .get_or_create(&VerdictLabels {
                route: route.to_owned(),
                verdict,
            })
            .inc();
    }

    /// Every series, in Prometheus' text format ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_series_renders_under_its_documented_name() {
        let m = Metrics::new();
        m.delivery("public.feedbacks", 200, "dispatched", "");
        m.run_ended("public.feedbacks", "dispatched", Duration::from_millis(30));
        m.github_request("create_ref", "201", Duration::from_millis(12));
        m.github_retry("server_error");
        m.rate_limit_remaining("core", 4999);
        m.token_minted();
        m.write_queue(true);
        m.runs_in_flight(3);
        m.reconcile_run("ok");
        m.reconcile_row("public.feedbacks", "handled");
        let text = m.render();
        for line in [
            r#"rowbranch_deliveries_total{route="public.feedbacks",status="200",outcome="dispatched",reason=""} 1"#,
            r#"rowbranch_runs_total{route="public.feedbacks",result="dispatched"} 1"#,
            r#"rowbranch_run_duration_seconds_count{route="public.feedbacks"} 1"#,
            r#"rowbranch_github_requests_total{operation="create_ref",status="201"} 1"#,
            r#"rowbranch_github_request_duration_seconds_count{operation="create_ref"} 1"#,
            r#"rowbranch_github_retries_total{cause="server_error"} 1"#,
            r#"rowbranch_github_rate_limit_remaining{resource="core"} 4999"#,
            "rowbranch_installation_tokens_minted_total 1",
            "rowbranch_write_queue_depth 1",
            "rowbranch_runs_in_flight 3",
            r#"rowbranch_reconcile_runs_total{result="ok"} 1"#,
            r#"rowbranch_reconcile_rows_total{route="public.feedbacks",verdict="handled"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
    }

    #[test]
    fn two_registries_count_apart() {
        let (a, b) = (Metrics::new(), Metrics::new());
        a.token_minted();
        assert!(a
            .render()
            .contains("rowbranch_installation_tokens_minted_total 1"));
        assert!(b
            .render()
            .contains("rowbranch_installation_tokens_minted_total 0"));
    }
}
