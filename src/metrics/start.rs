//! The series that exist at 0 from the start: for each counter, the label sets a run of the
//! config can produce ([`Scope`]) — not the cross product of its labels' values — so that an
//! alert on a rise sees the first one. README, "Metrics", lists them.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::{
    CauseLabels, DeliveryLabels, GithubOperation, MessageLabels, MessageResult, Metrics,
    RequestLabels, RetryCause, RowVerdict, RunLabels, RunResult, SweepLabels, SweepResult,
    VerdictLabels, NO_ROUTE,
};

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
    (202, "accepted", ""),
    (400, "error", ""),
    (422, "error", ""),
    (422, "error", "missing_column"),
    (500, "error", ""),
    (503, "error", ""),
];

/// The answers given before a delivery's route is known (`route="none"`): refused before its
/// body is read or authenticated, a body that is not a row's event, a table no route takes.
pub const UNROUTED_ANSWERS: &[AnswerLabels] = &[
    (200, "ignored", "no_route"),
    (400, "error", ""),
    (401, "error", ""),
    (408, "error", ""),
    (413, "error", ""),
    (415, "error", ""),
];

/// The answer a webhook delivery of a queue route's table gets (when another route takes
/// webhooks, so that the server answers them at all).
pub const QUEUE_ROUTE_ANSWERS: &[AnswerLabels] = &[(200, "ignored", "pgmq_intake")];

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
}

impl Metrics {
    /// Creates, at 0, every counter series `scope`'s run can produce (README, "Metrics": the
    /// label sets at start) — not the cross product of their labels' values. Histograms appear
    /// with their first observation.
    pub fn start_at_zero(&self, scope: &Scope) {
        let deliveries = |route: &str, answers: &[AnswerLabels]| {
            for &(status, outcome, reason) in answers {
                at_zero(
                    &self.deliveries,
                    DeliveryLabels {
                        route: route.to_owned(),
                        status: status.to_string(),
                        outcome,
                        reason,
                    },
                );
            }
        };
        // Without a webhook route the server answers no delivery (404), and counts none.
        if !scope.webhook_routes.is_empty() {
            deliveries(NO_ROUTE, UNROUTED_ANSWERS);
            for route in &scope.webhook_routes {
                deliveries(route, ROUTE_ANSWERS);
            }
            for route in &scope.queue_routes {
                deliveries(route, QUEUE_ROUTE_ANSWERS);
            }
        }
        let routes = (scope.webhook_routes.iter().map(|r| (r, false)))
            .chain(scope.queue_routes.iter().map(|r| (r, true)));
        for (route, reads_the_queue) in routes {
            for &result in RunResult::ALL {
                at_zero(
                    &self.runs,
                    RunLabels {
                        route: route.clone(),
                        result,
                    },
                );
            }
            if scope.sweep {
                for &verdict in RowVerdict::of_a_scheduled_sweep(reads_the_queue) {
                    at_zero(
                        &self.reconcile_rows,
                        VerdictLabels {
                            route: route.clone(),
                            verdict,
                        },
                    );
                }
            }
        }
        if scope.consumer {
            for route in &scope.queue_routes {
                for &result in MessageResult::ALL {
                    at_zero(
                        &self.pgmq_messages,
                        MessageLabels {
                            route: route.clone(),
                            result,
                        },
                    );
                }
            }
            // A message no route reads is dead-lettered, unless its lease was lost first.
            for result in [MessageResult::Dead, MessageResult::LeaseLost] {
                at_zero(
                    &self.pgmq_messages,
                    MessageLabels {
                        route: NO_ROUTE.to_owned(),
                        result,
                    },
                );
            }
        }
        if scope.sweep {
            for &result in SweepResult::ALL {
                at_zero(&self.reconcile_runs, SweepLabels { result });
            }
        }
        if scope.github {
            for &operation in GithubOperation::ALL {
                for status in operation.statuses_at_start() {
                    at_zero(
                        &self.github_requests,
                        RequestLabels {
                            operation,
                            status: (*status).to_owned(),
                        },
                    );
                }
            }
            for &cause in RetryCause::ALL {
                at_zero(&self.github_retries, CauseLabels { cause });
            }
        }
    }
}

impl GithubOperation {
    /// The statuses `rowbranch_github_requests_total` has at 0 from the start for this
    /// operation: what GitHub answers when it does what was asked (for `get_ref`, also the 404
    /// of a branch not there, which a new row's claim expects), and `error` (no answer). Other
    /// statuses appear when first answered. None for what `serve` never asks: `get_contents`
    /// and `get_workflow` (`doctor`'s), `list_runs` (`explain`'s); nor for `rate_limit`, asked
    /// only by `/readyz` with a token.
    pub fn statuses_at_start(self) -> &'static [&'static str] {
        match self {
            GithubOperation::GetContents
            | GithubOperation::ListRuns
            | GithubOperation::GetWorkflow
            | GithubOperation::RateLimit => &[],
            GithubOperation::GetRef => &["200", "404", "error"],
            GithubOperation::CreateRef => &["201", "error"],
            GithubOperation::DeleteRef | GithubOperation::Dispatch => &["204", "error"],
            GithubOperation::GetApp
            | GithubOperation::GetInstallation
            | GithubOperation::GetRepo
            | GithubOperation::MatchingRefs
            | GithubOperation::ListPulls
            | GithubOperation::Compare => &["200", "error"],
        }
    }
}

impl RowVerdict {
    /// The verdicts a scheduled sweep gives a route's rows: not `would_dispatch` (a dry run's),
    /// and `in_queue` only for a route that reads the queue.
    fn of_a_scheduled_sweep(reads_the_queue: bool) -> &'static [RowVerdict] {
        use RowVerdict::*;
        if reads_the_queue {
            &[
                Handled,
                MergedBefore,
                Dispatched,
                DeadClaim,
                Failed,
                InQueue,
            ]
        } else {
            &[Handled, MergedBefore, Dispatched, DeadClaim, Failed]
        }
    }
}

/// Creates `labels`' series of `family` at 0; one already there is left as it is.
fn at_zero<S: Clone + std::hash::Hash + Eq>(family: &Family<S, Counter>, labels: S) {
    drop(family.get_or_create(&labels));
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Duration;

    use yaml_rust2::YamlLoader;

    use super::*;

    /// A webhook route and a queue route, with the consumer, a scheduled sweep and GitHub.
    fn everything() -> Scope {
        Scope {
            webhook_routes: vec!["public.feedbacks".into()],
            queue_routes: vec!["public.tasks".into()],
            consumer: true,
            sweep: true,
            github: true,
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
            // none: 6; the webhook route: 12; the queue route: its trigger posting anyway.
            ("rowbranch_deliveries_total", 6 + 12 + 1),
            ("rowbranch_runs_total", 2 * 6),
            // 10 operations, two statuses each, and get_ref's 404.
            ("rowbranch_github_requests_total", 10 * 2 + 1),
            ("rowbranch_github_retries_total", 4),
            ("rowbranch_installation_tokens_minted_total", 1),
            ("rowbranch_write_queue_depth", 1),
            ("rowbranch_runs_in_flight", 1),
            ("rowbranch_reconcile_runs_total", 2),
            ("rowbranch_reconcile_rows_total", 5 + 6),
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
            r#"rowbranch_deliveries_total{route="none",status="401",outcome="error",reason=""} 0"#,
            r#"rowbranch_deliveries_total{route="public.feedbacks",status="503",outcome="error",reason=""} 0"#,
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
            ("rowbranch_deliveries_total", 6 + 12),
            ("rowbranch_runs_total", 6),
            ("rowbranch_installation_tokens_minted_total", 1),
            ("rowbranch_write_queue_depth", 1),
            ("rowbranch_runs_in_flight", 1),
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
