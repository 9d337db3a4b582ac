//! What the server remembers of its deliveries, for people: the last decisions (for `GET /`)
//! and the one line each gets in the log; and the warn line for refused credentials, at most
//! one a minute for each kind of refusal.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};

use super::answer::Answer;
use crate::templates::pages::DecisionView;

/// How many decisions the status page shows.
const KEPT: usize = 200;
/// How often a kind of refused credential is logged, at most.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// One delivery's decision, as the status page and the log show it.
#[derive(Debug, Clone)]
pub struct Decision {
    pub at: SystemTime,
    /// The `webhook-id` the sender gave, or one made up here.
    pub delivery: String,
    /// The route's `schema.table`, or `none`.
    pub route: String,
    pub id: Option<String>,
    pub branch: Option<String>,
    pub repo: Option<String>,
    pub status: u16,
    pub outcome: &'static str,
    pub reason: &'static str,
    pub took: Duration,
}

impl Decision {
    pub fn new(delivery: String, route: String, answer: &Answer, took: Duration) -> Decision {
        let row = answer.row();
        Decision {
            at: SystemTime::now(),
            delivery,
            route,
            id: row.map(|r| r.id.to_string()),
            branch: row.map(|r| r.branch.to_string()),
            repo: row.map(|r| r.repo.to_string()),
            status: answer.status().as_u16(),
            outcome: answer.outcome(),
            reason: answer.reason(),
            took,
        }
    }

    /// The one info line for a delivery's decision. Never the row's text.
    pub fn log(&self) {
        tracing::info!(
            delivery = %self.delivery,
            route = %self.route,
            id = self.id.as_deref().unwrap_or(""),
            branch = self.branch.as_deref().unwrap_or(""),
            status = self.status,
            outcome = self.outcome,
            reason = self.reason,
            duration_ms = self.took.as_millis() as u64,
            "delivery"
        );
    }

    /// As the status page shows it; `web_url` is the forge's, for links to branches.
    pub fn view(&self, web_url: Option<&str>) -> DecisionView {
        let branch_url = match (web_url, &self.repo, &self.branch) {
            (Some(web), Some(repo), Some(branch)) => Some(format!("{web}/{repo}/tree/{branch}")),
            _ => None,
        };
        DecisionView {
            at: DateTime::<Utc>::from(self.at).to_rfc3339_opts(SecondsFormat::Secs, true),
            route: self.route.clone(),
            id: self.id.clone().unwrap_or_default(),
            branch: self.branch.clone().unwrap_or_default(),
            branch_url,
            status: self.status,
            outcome: self.outcome,
            reason: self.reason,
        }
    }
}

/// The last [`KEPT`] decisions.
#[derive(Default)]
pub struct Decisions {
    kept: Mutex<VecDeque<Decision>>,
}

impl Decisions {
    pub fn push(&self, decision: Decision) {
        let mut kept = self.kept.lock().expect("decisions lock poisoned");
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(decision);
    }

    /// Newest first.
    pub fn newest_first(&self) -> Vec<Decision> {
        let kept = self.kept.lock().expect("decisions lock poisoned");
        kept.iter().rev().cloned().collect()
    }
}

/// Logs refused credentials at warn, by kind, at most once a [`REFUSAL_LOG_EVERY`] for each
/// kind, saying how many went unlogged since. Never a header's value.
#[derive(Default)]
pub struct Refusals {
    last: Mutex<HashMap<&'static str, (Instant, u64)>>,
}

impl Refusals {
    pub fn refused(&self, kind: &'static str) {
        let mut last = self.last.lock().expect("refusals lock poisoned");
        let now = Instant::now();
        match last.get_mut(kind) {
            Some((at, quiet)) if now.duration_since(*at) < REFUSAL_LOG_EVERY => *quiet += 1,
            entry => {
                let quiet = entry.map_or(0, |(_, quiet)| *quiet);
                tracing::warn!(
                    kind,
                    unlogged_since_the_last = quiet,
                    "refused a delivery's credentials (is ROWBRANCH_WEBHOOK_SECRET the trigger's secret?)"
                );
                last.insert(kind, (now, 0));
            }
        }
    }
}

/// A delivery's id: the `webhook-id` (or Svix's `svix-id`) it carries, else a fresh one.
pub fn delivery_id(headers: &http::HeaderMap) -> String {
    headers
        .get("webhook-id")
        .or_else(|| headers.get("svix-id"))
        .and_then(|v| v.to_str().ok())
        .filter(|id| !id.is_empty() && id.len() <= 100)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("d_{:016x}", rand::random::<u64>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decisions_keep_the_newest_200() {
        let decisions = Decisions::default();
        for n in 0..250 {
            decisions.push(Decision::new(
                format!("d{n}"),
                "public.feedbacks".into(),
                &Answer::Unauthorized,
                Duration::ZERO,
            ));
        }
        let kept = decisions.newest_first();
        assert_eq!(kept.len(), 200);
        assert_eq!(kept[0].delivery, "d249");
        assert_eq!(kept[199].delivery, "d50");
    }

    #[test]
    fn a_delivery_id_is_the_senders_or_a_new_one() {
        let mut headers = http::HeaderMap::new();
        assert!(delivery_id(&headers).starts_with("d_"));
        assert_ne!(delivery_id(&headers), delivery_id(&headers));
        headers.insert(
            "webhook-id",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk".parse().unwrap(),
        );
        assert_eq!(delivery_id(&headers), "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk");
    }
}
