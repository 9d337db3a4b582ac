//! The process's metrics, in one registry per server (tests start many servers in one process),
//! rendered as Prometheus text at `GET /metrics`. Label values come from fixed sets — a route's
//! `schema.table`, a GitHub operation, a status code — never a row id or a branch. The names
//! are part of the contract (docs/operating.md). Every counter exists at 0 from the start for
//! the label sets its run can produce ([`Metrics::start_at_zero`], from the config's routes
//! and the label enums), so that an alert on its rise sees the first one; a gauge whose 0 would
//! be a claim (the rate limit left, a queue's depth) appears once known. Beside them, the build
//! and the process (src/metrics/process.rs).

mod process;

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The route label of what belongs to no route (an unauthenticated delivery, say).
pub const NO_ROUTE: &str = "none";

crate::reason::named_set! {
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

crate::reason::named_set! {
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

crate::reason::named_set! {
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

crate::reason::named_set! {
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

crate::reason::named_set! {
    /// How one route's sweep ended (`rowbranch_reconcile_runs_total{result}`).
    pub enum SweepResult {
        Ok => "ok",
        /// It stopped early.
        Failed => "failed",
    }
}

crate::reason::named_set! {
    /// What a sweep made of one row (`rowbranch_reconcile_rows_total{verdict}`).
    pub enum RowVerdict {
        Handled => "handled",
        MergedBefore => "merged_before",
        Dispatched => "dispatched",
        WouldDispatch => "would_dispatch",
        DeadClaim => "dead_claim",
        Failed => "failed",
        InQueue => "in_queue",
        BeforeSweepFrom => "before_sweep_from",
        /// A claim at its base whose work already ran: reported, not dispatched again.
        AlreadyRan => "already_ran",
    }
}

impl GithubOperation {
    /// The statuses `rowbranch_github_requests_total` has at 0 from the start for this
    /// operation: what GitHub answers when it does what was asked (for `get_ref`, also the 404
    /// of a branch not there, which a new row's claim expects), and `error` (no answer). Other
    /// statuses appear when first answered. None for what `serve` never asks: `get_contents`
    /// and `get_workflow` (`doctor`'s), `list_runs` (`explain`'s); nor for `rate_limit`, asked
    /// only by `/readyz` with a token.
    fn statuses_at_start(self) -> &'static [&'static str] {
        use GithubOperation::*;
        match self {
            GetContents | ListRuns | GetWorkflow | RateLimit => &[],
            GetRef => &["200", "404", "error"],
            CreateRef => &["201", "error"],
            DeleteRef | Dispatch => &["204", "error"],
            GetApp | GetInstallation | GetRepo | MatchingRefs | ListPulls | Compare => {
                &["200", "error"]
            }
        }
    }
}

/// A webhook answer as `rowbranch_deliveries_total` labels it: its status, `outcome` and
/// `reason`.
pub type AnswerLabels = (u16, &'static str, &'static str);

/// The answers a delivery of a webhook route's table can get (SPEC §3), each at 0 for each such
/// route from the start. A test in src/http/answer.rs holds every answer the server can give to
/// this list and the two below, and one in tests/it/metrics_at_start.rs the route each is
/// counted under.
pub const ROUTE_ANSWERS: &[AnswerLabels] = &[
    (200, "dispatched", ""),
    (200, "duplicate", "branch_exists"),
    (200, "duplicate", "pull_request"),
    (200, "duplicate", "claim_taken"),
    (200, "duplicate", "in_flight"),
    (200, "ignored", "event"),
    (200, "ignored", "not_ready"),
    (200, "ignored", "passed_before"),
    (202, "accepted", ""),
    (400, "error", "malformed"),
    (422, "error", "bad_id"),
    (422, "error", "missing_column"),
    (422, "error", "payload_refused"),
    (500, "error", "internal"),
    (503, "error", "unavailable"),
    (503, "error", "queue_full"),
    (503, "error", "queue_bytes_full"),
    (503, "error", "abandoned"),
];

/// The answers given before a delivery's route is known (`route="none"`): refused before its
/// body is read or authenticated, a body that is not a row's event, a table no route takes.
pub const UNROUTED_ANSWERS: &[AnswerLabels] = &[
    (400, "error", "malformed"),
    (401, "error", "unauthorized"),
    (408, "error", "timed_out"),
    (413, "error", "too_large"),
    (415, "error", "content_type"),
    (422, "error", "no_route"),
];

/// The answer a webhook delivery of a queue route's table gets (when another route takes
/// webhooks, so that the server answers them at all).
pub const QUEUE_ROUTE_ANSWERS: &[AnswerLabels] = &[(200, "ignored", "pgmq_intake")];

/// The answers `POST /github` gives before a route is known (`route="none"`), when
/// `GITHUB_WEBHOOK_SECRET` is set (SPEC §3, "POST /github"): refused before the event is read,
/// an event or action that says nothing of a row, and an event no route's row owns. A test in
/// src/http/github.rs holds every answer the endpoint can give to this list and the next.
pub const GITHUB_EVENT_ANSWERS: &[AnswerLabels] = &[
    (200, "ignored", "event"),
    (200, "ignored", "action"),
    (200, "ignored", "not_work"),
    (200, "ignored", "repository"),
    (200, "ignored", "fork"),
    (200, "ignored", "branch"),
    (200, "ignored", "not_written"),
    (400, "error", "malformed"),
    (401, "error", "unauthorized"),
    (408, "error", "timed_out"),
    (413, "error", "too_large"),
    (415, "error", "content_type"),
    (500, "error", "internal"),
    (503, "error", "unavailable"),
];

/// The answers `POST /github` gives for an event of a route that writes its rows' states: the
/// state handed to the writer, or why none was.
pub const GITHUB_EVENT_ROUTE_ANSWERS: &[AnswerLabels] = &[
    (200, "pr_open", ""),
    (200, "merged", ""),
    (200, "closed", ""),
    (200, "failed", ""),
    (200, "ignored", "no_row"),
    (200, "ignored", "superseded"),
    (200, "ignored", "pull_request"),
    (503, "error", "unavailable"),
];

/// What `POST /github` answers every event without `GITHUB_WEBHOOK_SECRET`.
pub const GITHUB_EVENT_OFF: AnswerLabels = (404, "error", "not_configured");

/// What a process can count, known from its config at start: which series exist at 0 from then
/// on ([`Metrics::start_at_zero`]).
#[derive(Debug, Default, Clone)]
pub struct Scope {
    /// The `schema.table` of each route that takes webhook deliveries, when the server runs.
    pub webhook_routes: Vec<String>,
    /// The `schema.table` of each route that reads the queue.
    pub queue_routes: Vec<String>,
    /// Whether the queue's consumer runs.
    pub consumer: bool,
    /// Whether the sweep runs on a schedule.
    pub sweep: bool,
    /// Whether the forge is GitHub.
    pub github: bool,
    /// The `schema.table` of each route whose rows hear back (`status_column`,
    /// `pull_request_column`), when the process writes them.
    pub status_routes: Vec<String>,
    /// Whether the server takes the App's events (`POST /github`, on the GitHub forge), and
    /// if so whether `GITHUB_WEBHOOK_SECRET` is set.
    pub github_hook: Option<bool>,
}

/// A series' labels, each a name and its value: a route's `schema.table` (or [`NO_ROUTE`]), the
/// text of a value of one of the sets above, a status, a queue or a rate-limit resource. One
/// shape for every family, so that each series is made the same way.
type Labels = Vec<(&'static str, String)>;

fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    (pairs.into_iter())
        .map(|(name, value)| (name, value.to_owned()))
        .collect()
}

/// A webhook answer's series of `rowbranch_deliveries_total` for `route`.
fn delivery_labels(route: &str, (status, outcome, reason): AnswerLabels) -> Labels {
    let status = status.to_string();
    labels([
        ("route", route),
        ("status", &status),
        ("outcome", outcome),
        ("reason", reason),
    ])
}

/// `route`'s label sets, with `key` set to each of `values`.
fn by_route<'a>(
    route: &'a str,
    key: &'static str,
    values: impl IntoIterator<Item = &'static str> + 'a,
) -> impl Iterator<Item = Labels> + 'a {
    (values.into_iter()).map(move |value| labels([("route", route), (key, value)]))
}

/// Seconds, from 5 ms to about 80 s: a read, a paced write, a run that waited its turn.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

type Counters = Family<Labels, Counter>;
type Gauges = Family<Labels, Gauge>;
type Seconds = Family<Labels, Histogram, fn() -> Histogram>;

/// Declares [`Metrics`] with each of its families once: its field and type, how it is made,
/// and the name (a counter gets its `_total` from the encoder) and help it is registered under.
macro_rules! families {
    ($($field:ident: $type:ty = $init:expr, $name:literal, $help:literal;)+) => {
        /// Every series rowbranch keeps.
        #[derive(Debug)]
        pub struct Metrics {
            registry: Registry,
            $($field: $type,)+
            /// Deliveries by outcome, runs by result and queue messages by result, summed over
            /// routes, for the status page.
            totals: Mutex<BTreeMap<String, u64>>,
        }

        impl Metrics {
            pub fn new() -> Metrics {
                let mut registry = Registry::default();
                $(
                    let $field: $type = $init;
                    registry.register($name, $help, $field.clone());
                )+
                let build = [
                    ("version", env!("CARGO_PKG_VERSION")),
                    ("commit", env!("ROWBRANCH_COMMIT")),
                ];
                registry.register(
                    "rowbranch_build",
                    "The version of rowbranch running, and the commit it was built from",
                    Info::new(build),
                );
                registry.register_collector(Box::new(process::ProcessCollector));
                Metrics {
                    registry,
                    $($field,)+
                    totals: Mutex::default(),
                }
            }
        }
    };
}

families! {
    deliveries: Counters = Family::default(), "rowbranch_deliveries",
        "Webhook deliveries answered, by route, status, outcome and reason";
    runs: Counters = Family::default(), "rowbranch_runs",
        "Rows' runs ended, by route and result, whatever their delivery was told";
    run_duration: Seconds = Family::new_with_constructor(seconds),
        "rowbranch_run_duration_seconds", "How long rows' runs took, from acceptance to their end";
    github_requests: Counters = Family::default(), "rowbranch_github_requests",
        "Requests to GitHub answered, by operation and status (error: no answer)";
    github_duration: Seconds = Family::new_with_constructor(seconds),
        "rowbranch_github_request_duration_seconds", "How long GitHub took to answer, by operation";
    github_retries: Counters = Family::default(), "rowbranch_github_retries",
        "GitHub requests tried again, by cause";
    rate_limit_remaining: Gauges = Family::default(), "rowbranch_github_rate_limit_remaining",
        "Requests left in GitHub's current rate-limit window, by resource, as last answered";
    tokens_minted: Counter = Counter::default(), "rowbranch_installation_tokens_minted",
        "Installation tokens minted";
    write_queue_depth: Gauge = Gauge::default(), "rowbranch_write_queue_depth",
        "Writes to GitHub waiting for their turn or under way";
    runs_in_flight: Gauge = Gauge::default(), "rowbranch_runs_in_flight",
        "Rows accepted and not yet finished";
    reconcile_runs: Counters = Family::default(), "rowbranch_reconcile_runs",
        "Sweeps of a route ended, by result (ok, or failed: stopped early)";
    reconcile_rows: Counters = Family::default(), "rowbranch_reconcile_rows",
        "Rows a sweep settled, by route and verdict";
    pgmq_messages: Counters = Family::default(), "rowbranch_pgmq_messages",
        "Queue messages settled, by route (none: no route) and result";
    pgmq_queue_depth: Gauges = Family::default(), "rowbranch_pgmq_queue_depth",
        "Messages in the queue, visible or held, as last sampled";
    pgmq_oldest_age: Gauges = Family::default(), "rowbranch_pgmq_oldest_message_age_seconds",
        "Age of the oldest message in the queue, as last sampled";
    unknown_paths: Counter = Counter::default(), "rowbranch_unknown_path_requests",
        "Requests to a path the server does not serve, answered 404";
    status_writes: Counters = Family::default(), "rowbranch_status_writes",
        "Row states written back into the rows, by route and result";
    github_events: Counters = Family::default(), "rowbranch_github_events",
        "The GitHub App's events answered at POST /github, by route, status, outcome and reason";
}

crate::reason::named_set! {
    /// What a write of a row's state did (`rowbranch_status_writes_total{result}`).
    pub enum StatusResult {
        /// The row holds the new state.
        Written => "written",
        /// It held that state, or a later one, already.
        Already => "already",
        /// Row level security hides the row from the UPDATE.
        NotVisible => "not_visible",
        /// No row has the id.
        NoRow => "no_row",
        /// Not written: the database could not be reached, or refused the statement.
        Failed => "failed",
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

/// Creates each of `label_sets`' series of `family` at 0; one already there is left as it is.
fn at_zero(family: &Counters, label_sets: impl IntoIterator<Item = Labels>) {
    for labels in label_sets {
        drop(family.get_or_create(&labels));
    }
}

impl Metrics {
    /// Creates, at 0, every counter series `scope`'s run can produce (docs/operating.md: the
    /// label sets at start) — not the cross product of their labels' values. Histograms appear
    /// with their first observation.
    pub fn start_at_zero(&self, scope: &Scope) {
        let (webhook, queue) = (&scope.webhook_routes, &scope.queue_routes);
        // Without a webhook route the server answers no delivery (404), and counts none.
        if !webhook.is_empty() {
            let answers = (webhook.iter().map(|route| (route.as_str(), ROUTE_ANSWERS)))
                .chain(queue.iter().map(|r| (r.as_str(), QUEUE_ROUTE_ANSWERS)))
                .chain([(NO_ROUTE, UNROUTED_ANSWERS)]);
            for (route, answers) in answers {
                let label_sets = answers.iter().map(|&a| delivery_labels(route, a));
                at_zero(&self.deliveries, label_sets);
            }
        }
        for route in webhook.iter().chain(queue) {
            let results = RunResult::ALL.iter().map(|r| r.as_str());
            at_zero(&self.runs, by_route(route, "result", results));
        }
        if scope.sweep {
            let results = SweepResult::ALL.iter();
            at_zero(
                &self.reconcile_runs,
                results.map(|r| labels([("result", r.as_str())])),
            );
            // Not `would_dispatch` (a dry run's), and `in_queue` only for a route that reads
            // the queue.
            let routes =
                (webhook.iter().map(|r| (r, false))).chain(queue.iter().map(|r| (r, true)));
            for (route, reads_the_queue) in routes {
                let verdicts = RowVerdict::ALL.iter().filter(|&&verdict| {
                    verdict != RowVerdict::WouldDispatch
                        && verdict != RowVerdict::BeforeSweepFrom
                        && (reads_the_queue || verdict != RowVerdict::InQueue)
                });
                let verdicts = verdicts.map(|v| v.as_str());
                at_zero(&self.reconcile_rows, by_route(route, "verdict", verdicts));
            }
        }
        for route in &scope.status_routes {
            let results = StatusResult::ALL.iter().map(|r| r.as_str());
            at_zero(&self.status_writes, by_route(route, "result", results));
        }
        let events = match scope.github_hook {
            None => Vec::new(),
            Some(false) => vec![(NO_ROUTE, std::slice::from_ref(&GITHUB_EVENT_OFF))],
            Some(true) => (scope.status_routes.iter())
                .map(|route| (route.as_str(), GITHUB_EVENT_ROUTE_ANSWERS))
                .chain([(NO_ROUTE, GITHUB_EVENT_ANSWERS)])
                .collect(),
        };
        for (route, answers) in events {
            let label_sets = answers.iter().map(|&a| delivery_labels(route, a));
            at_zero(&self.github_events, label_sets);
        }
        if scope.consumer {
            for route in queue {
                let results = MessageResult::ALL.iter().map(|r| r.as_str());
                at_zero(&self.pgmq_messages, by_route(route, "result", results));
            }
            // A message no route reads is dead-lettered, unless its lease was lost first.
            let unrouted = [MessageResult::Dead, MessageResult::LeaseLost].map(|r| r.as_str());
            at_zero(&self.pgmq_messages, by_route(NO_ROUTE, "result", unrouted));
        }
        if scope.github {
            for &operation in GithubOperation::ALL {
                let statuses = operation.statuses_at_start().iter();
                let label_sets = statuses
                    .map(|status| labels([("operation", operation.as_str()), ("status", status)]));
                at_zero(&self.github_requests, label_sets);
            }
            let causes = RetryCause::ALL.iter();
            at_zero(
                &self.github_retries,
                causes.map(|c| labels([("cause", c.as_str())])),
            );
        }
    }

    /// One queue message settled.
    pub fn pgmq_message(&self, route: &str, result: MessageResult) {
        let labels = labels([("route", route), ("result", result.as_str())]);
        self.pgmq_messages.get_or_create(&labels).inc();
        self.add(format!("queue messages {result}"));
    }

    /// A sample of a queue: how many messages, and how old the oldest is.
    pub fn pgmq_queue(&self, queue: &str, depth: i64, oldest_age_seconds: i64) {
        let labels = labels([("queue", queue)]);
        self.pgmq_queue_depth.get_or_create(&labels).set(depth);
        (self.pgmq_oldest_age.get_or_create(&labels)).set(oldest_age_seconds);
    }

    /// One webhook answer. `route` is the route's `schema.table`, or [`NO_ROUTE`].
    pub fn delivery(&self, route: &str, answer: AnswerLabels) {
        let labels = delivery_labels(route, answer);
        self.deliveries.get_or_create(&labels).inc();
        self.add(format!("deliveries {}", answer.1));
    }

    /// One answer of `POST /github`. `route` is the route's `schema.table`, or [`NO_ROUTE`].
    pub fn github_event(&self, route: &str, answer: AnswerLabels) {
        let labels = delivery_labels(route, answer);
        self.github_events.get_or_create(&labels).inc();
        self.add(format!("GitHub events {}", answer.1));
    }

    fn add(&self, total: String) {
        let mut totals = self.totals.lock().unwrap_or_else(PoisonError::into_inner);
        *totals.entry(total).or_default() += 1;
    }

    /// Deliveries by outcome, runs by result and queue messages by result, summed over routes.
    pub fn totals(&self) -> Vec<(String, u64)> {
        let totals = self.totals.lock().unwrap_or_else(PoisonError::into_inner);
        totals.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// One run's end.
    pub fn run_ended(&self, route: &str, result: RunResult, took: Duration) {
        let duration = labels([("route", route)]);
        (self.run_duration.get_or_create(&duration)).observe(took.as_secs_f64());
        let labels = labels([("route", route), ("result", result.as_str())]);
        self.runs.get_or_create(&labels).inc();
        self.add(format!("runs {result}"));
    }

    pub fn runs_in_flight(&self, n: usize) {
        (self.runs_in_flight).set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// One request's answer (`status` its code, or `error` when none came).
    pub fn github_request(&self, operation: GithubOperation, status: &str, took: Duration) {
        let operation = operation.as_str();
        let duration = labels([("operation", operation)]);
        (self.github_duration.get_or_create(&duration)).observe(took.as_secs_f64());
        let labels = labels([("operation", operation), ("status", status)]);
        self.github_requests.get_or_create(&labels).inc();
    }

    /// A request to GitHub tried again.
    pub fn github_retry(&self, cause: RetryCause) {
        let labels = labels([("cause", cause.as_str())]);
        self.github_retries.get_or_create(&labels).inc();
    }

    pub fn rate_limit_remaining(&self, resource: &str, remaining: i64) {
        let labels = labels([("resource", resource)]);
        self.rate_limit_remaining
            .get_or_create(&labels)
            .set(remaining);
    }

    /// A request to a path the server does not serve.
    pub fn unknown_path(&self) {
        self.unknown_paths.inc();
        self.add("requests to unknown paths".to_owned());
    }

    pub fn token_minted(&self) {
        self.tokens_minted.inc();
    }

    /// A write joins (+1) or leaves (-1) the queue.
    pub fn write_queue(&self, joined: bool) {
        self.write_queue_depth.inc_by(if joined { 1 } else { -1 });
    }

    /// One route's sweep ended.
    pub fn reconcile_run(&self, result: SweepResult) {
        let labels = labels([("result", result.as_str())]);
        self.reconcile_runs.get_or_create(&labels).inc();
    }

    /// One write of a row's state back into the row.
    pub fn status_written(&self, route: &str, result: StatusResult) {
        let labels = labels([("route", route), ("result", result.as_str())]);
        self.status_writes.get_or_create(&labels).inc();
    }

    /// One row a sweep settled.
    pub fn reconcile_row(&self, route: &str, verdict: RowVerdict) {
        let labels = labels([("route", route), ("verdict", verdict.as_str())]);
        self.reconcile_rows.get_or_create(&labels).inc();
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
    use std::collections::{BTreeMap, BTreeSet};

    use yaml_rust2::YamlLoader;

    use super::*;

    #[test]
    fn each_series_renders_under_its_documented_name() {
        let m = Metrics::new();
        m.delivery("public.feedbacks", (200, "dispatched", ""));
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
        m.unknown_path();
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
            "rowbranch_unknown_path_requests_total 1",
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

    // The series at start.

    /// A webhook route and a queue route, with the consumer, a scheduled sweep and GitHub.
    fn everything() -> Scope {
        Scope {
            webhook_routes: vec!["public.feedbacks".into()],
            queue_routes: vec!["public.tasks".into()],
            consumer: true,
            sweep: true,
            github: true,
            status_routes: vec!["public.feedbacks".into()],
            github_hook: Some(true),
        }
    }

    /// How many series each family has in `text`, by the family's name as `# TYPE` gives it.
    fn counts(text: &str) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            *counts.entry(name.to_owned()).or_default() += 1;
        }
        counts
    }

    /// The `rowbranch_*` families of `text` (the process's own are another matter).
    fn rowbranch(text: &str) -> BTreeMap<String, usize> {
        let mut counts = counts(text);
        counts.retain(|name, _| name.starts_with("rowbranch_"));
        counts
    }

    #[test]
    fn every_counter_starts_at_zero_for_the_label_sets_its_run_can_produce() {
        let m = Metrics::new();
        m.start_at_zero(&everything());
        let text = m.render();
        let expected: BTreeMap<String, usize> = [
            // none: 6; the webhook route: 18; the queue route: its trigger posting anyway.
            ("rowbranch_deliveries_total", 6 + 18 + 1),
            // The route that writes its rows' states: each result.
            ("rowbranch_status_writes_total", 5),
            // POST /github: none's 14, and the route that writes its rows' states: 8.
            ("rowbranch_github_events_total", 14 + 8),
            ("rowbranch_runs_total", 2 * 6),
            // 10 operations, two statuses each, and get_ref's 404.
            ("rowbranch_github_requests_total", 10 * 2 + 1),
            ("rowbranch_github_retries_total", 4),
            ("rowbranch_installation_tokens_minted_total", 1),
            ("rowbranch_write_queue_depth", 1),
            ("rowbranch_runs_in_flight", 1),
            ("rowbranch_unknown_path_requests_total", 1),
            ("rowbranch_reconcile_runs_total", 2),
            ("rowbranch_reconcile_rows_total", 6 + 7),
            // The queue route's 6, and none's dead and lease_lost.
            ("rowbranch_pgmq_messages_total", 6 + 2),
            ("rowbranch_build_info", 1),
        ]
        .into_iter()
        .map(|(name, n)| (name.to_owned(), n))
        .collect();
        assert_eq!(rowbranch(&text), expected, "{text}");
        for line in text.lines().filter(|l| l.starts_with("rowbranch_")) {
            assert!(
                line.ends_with(" 0") || line.starts_with("rowbranch_build_info"),
                "{line}"
            );
        }
        for line in [
            r#"rowbranch_deliveries_total{route="none",status="401",outcome="error",reason="unauthorized"} 0"#,
            r#"rowbranch_deliveries_total{route="public.feedbacks",status="503",outcome="error",reason="unavailable"} 0"#,
            r#"rowbranch_deliveries_total{route="public.tasks",status="200",outcome="ignored",reason="pgmq_intake"} 0"#,
            r#"rowbranch_runs_total{route="public.tasks",result="failed_unavailable"} 0"#,
            r#"rowbranch_github_requests_total{operation="get_ref",status="404"} 0"#,
            r#"rowbranch_github_requests_total{operation="dispatch",status="error"} 0"#,
            r#"rowbranch_github_retries_total{cause="no_answer"} 0"#,
            r#"rowbranch_reconcile_rows_total{route="public.tasks",verdict="in_queue"} 0"#,
            r#"rowbranch_pgmq_messages_total{route="none",result="dead"} 0"#,
            r#"rowbranch_pgmq_messages_total{route="public.tasks",result="lease_lost"} 0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
        for absent in [
            r#"rowbranch_deliveries_total{route="public.tasks",status="200",outcome="dispatched""#,
            r#"rowbranch_pgmq_messages_total{route="public.feedbacks""#,
            r#"rowbranch_reconcile_rows_total{route="public.feedbacks",verdict="in_queue"}"#,
            r#"verdict="would_dispatch""#,
            r#"operation="get_contents""#,
            r#"operation="list_runs""#,
            // A gauge whose 0 would be a claim, and the histograms.
            "rowbranch_github_rate_limit_remaining",
            "rowbranch_pgmq_queue_depth",
            "rowbranch_pgmq_oldest_message_age_seconds",
            "rowbranch_run_duration_seconds",
            "rowbranch_github_request_duration_seconds",
        ] {
            assert!(!text.contains(absent), "{absent} in:\n{text}");
        }
    }

    #[test]
    fn a_webhook_route_on_the_local_forge_has_its_deliveries_and_runs_and_no_more() {
        let m = Metrics::new();
        m.start_at_zero(&Scope {
            webhook_routes: vec!["public.feedbacks".into()],
            ..Scope::default()
        });
        let expected: BTreeMap<String, usize> = [
            ("rowbranch_deliveries_total", 6 + 18),
            ("rowbranch_runs_total", 6),
            ("rowbranch_installation_tokens_minted_total", 1),
            ("rowbranch_write_queue_depth", 1),
            ("rowbranch_runs_in_flight", 1),
            ("rowbranch_unknown_path_requests_total", 1),
            ("rowbranch_build_info", 1),
        ]
        .into_iter()
        .map(|(name, n)| (name.to_owned(), n))
        .collect();
        assert_eq!(rowbranch(&m.render()), expected);
    }

    #[test]
    fn starting_at_zero_keeps_what_was_counted() {
        let m = Metrics::new();
        m.run_ended(
            "public.feedbacks",
            RunResult::Dispatched,
            Duration::from_millis(1),
        );
        m.start_at_zero(&everything());
        let text = m.render();
        let line = r#"rowbranch_runs_total{route="public.feedbacks",result="dispatched"} 1"#;
        assert!(text.lines().any(|l| l == line), "{text}");
    }

    fn repository_file(relative: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{relative}: {e}"))
    }

    /// Everything counted once, with the queues of the alert rules' tests sampled.
    fn all_series() -> String {
        let m = Metrics::new();
        m.start_at_zero(&everything());
        m.run_ended("public.feedbacks", RunResult::Dispatched, Duration::ZERO);
        m.github_request(GithubOperation::Dispatch, "502", Duration::ZERO);
        m.rate_limit_remaining("core", 1);
        m.pgmq_queue("rowbranch", 0, 0);
        m.pgmq_queue("rowbranch_dead", 0, 0);
        m.render()
    }

    #[test]
    fn the_alert_rules_name_only_series_rowbranch_has() {
        let text = all_series();
        let families: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let rules = repository_file("deploy/alerts.yml");
        let named: BTreeSet<&str> = rules
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("rowbranch_"))
            .collect();
        assert!(named.len() >= 4, "{named:?}");
        for name in named {
            assert!(
                families.contains(name),
                "deploy/alerts.yml names {name}, which /metrics does not have"
            );
        }
    }

    #[test]
    fn the_alert_rules_tests_feed_series_as_rowbranch_shows_them() {
        let text = all_series();
        let docs = YamlLoader::load_from_str(&repository_file("deploy/alerts.test.yml"))
            .expect("deploy/alerts.test.yml is YAML");
        let mut fed = 0;
        for test in docs[0]["tests"].as_vec().expect("a list of tests") {
            for input in test["input_series"].as_vec().expect("input series") {
                let series = input["series"].as_str().expect("a series");
                assert!(
                    text.lines().any(|l| l.strip_prefix(series).is_some_and(|v| v.starts_with(' '))),
                    "deploy/alerts.test.yml feeds {series}, which rowbranch does not show so:\n{text}"
                );
                fed += 1;
            }
        }
        assert!(fed >= 5, "{fed} series");
    }
}
