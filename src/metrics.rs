//! The process's metrics, in one registry per server (tests start many servers in one process),
//! rendered as Prometheus text at `GET /metrics`. Label values come from fixed sets — a route's
//! `schema.table`, a GitHub operation, a status code — never a row id or a branch. The names
//! are part of the contract (docs/operating.md). Every counter exists at 0 from the start for
//! the label sets its run can produce ([`Metrics::start_at_zero`]), so that an alert on its
//! rise sees the first one; a gauge whose 0 would be a claim (the rate limit left, a queue's
//! depth) appears once known. Beside them, the build and the process (src/metrics/process.rs).

mod process;
mod start;

pub use start::{AnswerLabels, Scope, QUEUE_ROUTE_ANSWERS, ROUTE_ANSWERS, UNROUTED_ANSWERS};

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The route label of what belongs to no route (an unauthenticated delivery, say).
pub const NO_ROUTE: &str = "none";

/// A label whose values are a fixed set: an enum, each variant with the text `/metrics` shows
/// for it, and every variant in `ALL`. prometheus-client's own derive of `EncodeLabelValue`
/// would show the variant's name (`LeaseLost`), not the contract's (`lease_lost`).
macro_rules! label_values {
    ($(#[$meta:meta])* pub enum $name:ident {
        $($(#[$variant_meta:meta])* $variant:ident => $text:literal,)+
    }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The value as `/metrics` shows it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
                encoder.write_str(self.as_str())
            }
        }
    };
}

label_values! {
    /// How a queue message was settled (`rowbranch_pgmq_messages_total{result}`).
    pub enum MessageResult {
        /// Archived: its row is handled.
        Archived => "archived",
        /// Sent to the dead-letter queue, and archived.
        Dead => "dead",
        /// Left in the queue, visible again after a backoff.
        Retried => "retried",
        /// Dispatched again on its branch as it was, then archived.
        Redispatched => "redispatched",
        /// Another reader holds it now, or it is gone: left alone.
        LeaseLost => "lease_lost",
        /// Made visible again at once (at shutdown).
        Released => "released",
    }
}

label_values! {
    /// How a row's run ended (`rowbranch_runs_total{result}`).
    pub enum RunResult {
        Dispatched => "dispatched",
        Duplicate => "duplicate",
        FailedUnavailable => "failed_unavailable",
        FailedRefused => "failed_refused",
        FailedInternal => "failed_internal",
        Abandoned => "abandoned",
    }
}

label_values! {
    /// A request to GitHub, by what it does (`rowbranch_github_requests_total{operation}`).
    pub enum GithubOperation {
        GetApp => "get_app",
        GetInstallation => "get_installation",
        GetRepo => "get_repo",
        GetRef => "get_ref",
        MatchingRefs => "matching_refs",
        CreateRef => "create_ref",
        DeleteRef => "delete_ref",
        Dispatch => "dispatch",
        ListPulls => "list_pulls",
        Compare => "compare",
        GetContents => "get_contents",
        ListRuns => "list_runs",
        GetWorkflow => "get_workflow",
        RateLimit => "rate_limit",
    }
}

label_values! {
    /// Why a request to GitHub was tried again (`rowbranch_github_retries_total{cause}`).
    pub enum RetryCause {
        /// 429, or a 403 that is a rate limit.
        RateLimited => "rate_limited",
        /// A 5xx.
        ServerError => "server_error",
        /// A timeout or a lost connection.
        NoAnswer => "no_answer",
        /// GitHub answered, but what should be there is not (yet).
        NotThereYet => "not_there_yet",
    }
}

label_values! {
    /// How one route's sweep ended (`rowbranch_reconcile_runs_total{result}`).
    pub enum SweepResult {
        Ok => "ok",
        /// It stopped early.
        Failed => "failed",
    }
}

label_values! {
    /// What a sweep made of one row (`rowbranch_reconcile_rows_total{verdict}`).
    pub enum RowVerdict {
        Handled => "handled",
        MergedBefore => "merged_before",
        Dispatched => "dispatched",
        WouldDispatch => "would_dispatch",
        DeadClaim => "dead_claim",
        Failed => "failed",
        InQueue => "in_queue",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

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
    result: RunResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MessageLabels {
    route: String,
    result: MessageResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: GithubOperation,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: GithubOperation,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: RetryCause,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SweepLabels {
    result: SweepResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    route: String,
    verdict: RowVerdict,
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
    reconcile_runs: Family<SweepLabels, Counter>,
    reconcile_rows: Family<VerdictLabels, Counter>,
    pgmq_messages: Family<MessageLabels, Counter>,
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
        registry.register(
            "rowbranch_build",
            "The version of rowbranch running, and the commit it was built from",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit: env!("ROWBRANCH_COMMIT"),
            }),
        );
        registry.register_collector(Box::new(process::ProcessCollector));
        Metrics { registry, ..m }
    }

    /// One queue message settled.
    pub fn pgmq_message(&self, route: &str, result: MessageResult) {
        self.pgmq_messages
            .get_or_create(&MessageLabels {
                route: route.to_owned(),
                result,
            })
            .inc();
        self.add(format!("queue messages {}", result.as_str()));
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

    /// One run's end.
    pub fn run_ended(&self, route: &str, result: RunResult, took: Duration) {
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
        self.add(format!("runs {}", result.as_str()));
    }

    pub fn runs_in_flight(&self, n: usize) {
        self.runs_in_flight
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// One request's answer (`status` its code, or `error` when none came).
    pub fn github_request(&self, operation: GithubOperation, status: &str, took: Duration) {
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

    /// A request to GitHub tried again.
    pub fn github_retry(&self, cause: RetryCause) {
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

    /// One route's sweep ended.
    pub fn reconcile_run(&self, result: SweepResult) {
        self.reconcile_runs
            .get_or_create(&SweepLabels { result })
            .inc();
    }

    /// One row a sweep settled.
    pub fn reconcile_row(&self, route: &str, verdict: RowVerdict) {
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
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn each_series_renders_under_its_documented_name() {
        let m = Metrics::new();
        m.delivery("public.feedbacks", 200, "dispatched", "");
        m.run_ended(
            "public.feedbacks",
            RunResult::Dispatched,
            Duration::from_millis(30),
        );
        m.github_request(GithubOperation::CreateRef, "201", Duration::from_millis(12));
        m.github_retry(RetryCause::ServerError);
        m.rate_limit_remaining("core", 4999);
        m.token_minted();
        m.write_queue(true);
        m.runs_in_flight(3);
        m.reconcile_run(SweepResult::Ok);
        m.reconcile_row("public.feedbacks", RowVerdict::Handled);
        m.pgmq_message("public.feedbacks", MessageResult::LeaseLost);
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
            r#"rowbranch_pgmq_messages_total{route="public.feedbacks",result="lease_lost"} 1"#,
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

    /// The values a label's enum lists, as text.
    fn texts<T: Copy>(all: &[T], text: fn(T) -> &'static str) -> BTreeSet<&'static str> {
        all.iter().map(|v| text(*v)).collect()
    }

    /// The plain words in backquotes on the operating guide's row for `series`, less `others`.
    fn documented(series: &str, others: &[&str]) -> BTreeSet<&'static str> {
        const GUIDE: &str = include_str!("../docs/operating.md");
        let row = GUIDE
            .lines()
            .find(|l| l.starts_with(&format!("| `{series}{{")))
            .unwrap_or_else(|| panic!("no docs/operating.md row for {series}"));
        row.split('`')
            .skip(3) // the row's start, the series, and the text between
            .step_by(2)
            .filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .filter(|w| !others.contains(w))
            .collect()
    }

    #[test]
    fn every_label_value_is_the_one_the_operating_guide_documents() {
        let cases: [(&str, BTreeSet<&str>, &[&str]); 6] = [
            (
                "rowbranch_pgmq_messages_total",
                texts(MessageResult::ALL, MessageResult::as_str),
                &[],
            ),
            (
                "rowbranch_runs_total",
                texts(RunResult::ALL, RunResult::as_str),
                &[],
            ),
            (
                "rowbranch_github_requests_total",
                texts(GithubOperation::ALL, GithubOperation::as_str),
                &["error"],
            ),
            (
                "rowbranch_github_retries_total",
                texts(RetryCause::ALL, RetryCause::as_str),
                &[],
            ),
            (
                "rowbranch_reconcile_runs_total",
                texts(SweepResult::ALL, SweepResult::as_str),
                &[],
            ),
            (
                "rowbranch_reconcile_rows_total",
                texts(RowVerdict::ALL, RowVerdict::as_str),
                &[],
            ),
        ];
        for (series, values, others) in cases {
            assert_eq!(values, documented(series, others), "{series}");
        }
    }

    #[test]
    fn a_label_enum_renders_as_its_text() {
        let m = Metrics::new();
        for &result in MessageResult::ALL {
            m.pgmq_message("public.t", result);
        }
        let text = m.render();
        for result in MessageResult::ALL {
            let line = format!(
                r#"rowbranch_pgmq_messages_total{{route="public.t",result="{}"}} 1"#,
                result.as_str()
            );
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
    }

    #[test]
    fn the_build_and_the_process_are_shown() {
        let text = Metrics::new().render();
        let build = format!(
            r#"rowbranch_build_info{{version="{}",commit="{}"}} 1"#,
            env!("CARGO_PKG_VERSION"),
            env!("ROWBRANCH_COMMIT")
        );
        assert!(text.lines().any(|l| l == build), "no {build} in:\n{text}");
        assert!(text.contains("# TYPE rowbranch_build_info gauge"), "{text}");
        if cfg!(target_os = "linux") {
            for name in [
                "process_cpu_seconds_total",
                "process_resident_memory_bytes",
                "process_start_time_seconds",
                "process_open_fds",
                "process_max_fds",
            ] {
                assert!(
                    text.lines().any(|l| l.starts_with(&format!("{name} "))),
                    "no {name} in:\n{text}"
                );
            }
        }
    }
}
