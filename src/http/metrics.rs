//! Counters for `GET /metrics`, in Prometheus' text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use super::answer::Answer;

/// Webhook answers counted by status, outcome and duplicate reason.
#[derive(Default)]
pub struct Metrics {
    answers: Mutex<BTreeMap<(u16, &'static str, &'static str), u64>>,
}

impl Metrics {
    pub fn count(&self, answer: &Answer) {
        let reason = match answer {
            Answer::Duplicate(_, reason) => reason.as_str(),
            _ => "",
        };
        let key = (answer.status().as_u16(), answer.outcome(), reason);
        *self
            .answers
            .lock()
            .expect("metrics lock poisoned")
            .entry(key)
            .or_default() += 1;
    }

    pub fn render(&self) -> String {
        let mut out = String::from(
            "# HELP rowbranch_webhook_answers_total Webhook deliveries answered, by status, outcome and reason.\n\
             # TYPE rowbranch_webhook_answers_total counter\n",
        );
        for ((status, outcome, reason), n) in
            self.answers.lock().expect("metrics lock poisoned").iter()
        {
            let _ = writeln!(
                out,
                "rowbranch_webhook_answers_total{{status=\"{status}\",outcome=\"{outcome}\",reason=\"{reason}\"}} {n}"
            );
        }
        out
    }
}
