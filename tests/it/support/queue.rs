//! A test's own queue: a database copied from a pgmq template of `scripts/test-postgres.sh`,
//! with `public.feedbacks`, the trigger of `templates/supabase-queue.sql` on it and its two
//! queues named after the database; and what a test reads back from the queue, its archive,
//! its dead letters and the local forge's dispatch logs.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;
use std::path::Path;

use serde_json::Value;

use super::app::FEEDBACK_ROUTE;
use super::db::{Install, Template, TestDb};
use super::local::dispatches;
use super::setup::{apply, queue_context};

/// A test's database: `public.feedbacks` with the queue's trigger on it, and its queues.
pub struct QueueDb {
    pub db: TestDb,
    pub queue: String,
    pub dead: String,
}

/// The database itself: its client, its URL, its roles.
impl Deref for QueueDb {
    type Target = TestDb;

    fn deref(&self) -> &TestDb {
        &self.db
    }
}

impl QueueDb {
    /// A new database from `install`'s template, or `None` (after saying why) when there is
    /// none; under `CI=true`, a panic.
    pub async fn new(install: Install) -> Option<QueueDb> {
        let db = TestDb::create(Template::Pgmq(install)).await?;
        let (queue, dead) = (format!("rbq_{}", db.tag), format!("rbq_{}_dead", db.tag));
        let db = QueueDb { db, queue, dead };
        db.execute(
            "create table public.feedbacks ( \
               id bigint primary key, \
               message text, \
               created_at timestamptz not null default now())",
        )
        .await;
        db.apply_setup_sql().await;
        Some(db)
    }

    /// Runs templates/supabase-queue.sql for `public.feedbacks` and this test's queues.
    pub async fn apply_setup_sql(&self) {
        let ctx = queue_context("public", "feedbacks", &self.queue, &self.dead);
        apply(&self.client, &ctx).await;
    }

    /// Inserts rows `ids` in one statement, each with the text `Row N`.
    pub async fn insert(&self, ids: std::ops::RangeInclusive<i64>) {
        self.client
            .execute(
                "insert into public.feedbacks (id, message) \
                 select n, 'Row ' || n from generate_series($1::bigint, $2::bigint) as n",
                &[ids.start(), ids.end()],
            )
            .await
            .expect("could not insert the rows");
    }

    /// Sends `body` to the queue as the trigger would, bypassing it; the message's id.
    pub async fn send_raw(&self, body: &str) -> i64 {
        self.client
            .query_one(
                "select pgmq.send($1::text, $2::text::jsonb, 0::integer)",
                &[&self.queue, &body],
            )
            .await
            .expect("could not send a message")
            .get(0)
    }

    pub async fn count(&self, table: &str) -> i64 {
        self.client
            .query_one(&format!("select count(*) from pgmq.\"{table}\""), &[])
            .await
            .unwrap_or_else(|e| panic!("could not count pgmq.{table}: {e}"))
            .get(0)
    }

    /// Messages in the queue, visible or held.
    pub async fn depth(&self) -> i64 {
        self.count(&format!("q_{}", self.queue)).await
    }

    /// Each archived message of `public.feedbacks`: its row's id and how often it was read.
    pub async fn archived(&self) -> BTreeMap<String, i32> {
        let rows = self
            .client
            .query(
                &format!(
                    "select message -> 'record' ->> 'id', read_ct from pgmq.\"a_{}\"",
                    self.queue
                ),
                &[],
            )
            .await
            .expect("could not read the archive");
        let mut out = BTreeMap::new();
        for row in rows {
            let id: Option<String> = row.get(0);
            let previous = out.insert(id.unwrap_or_default(), row.get(1));
            assert!(previous.is_none(), "one archived message per row");
        }
        out
    }

    /// The dead letters: each one's message id and body.
    pub async fn dead_letters(&self) -> Vec<(i64, Value)> {
        let rows = self
            .client
            .query(
                &format!(
                    "select msg_id, message::text from pgmq.\"q_{}\" order by msg_id",
                    self.dead
                ),
                &[],
            )
            .await
            .expect("could not read the dead-letter queue");
        rows.iter()
            .map(|r| {
                let text: String = r.get(1);
                (
                    r.get(0),
                    serde_json::from_str(&text).expect("a dead letter is JSON"),
                )
            })
            .collect()
    }
}

/// The row id in a dispatch's payload.
pub fn payload_id(payload: &Value) -> String {
    match &payload["id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// How many lines of a JSON-lines log (`dispatches.jsonl`, `attempts.jsonl`) each row has.
pub fn per_row(path: &Path) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in dispatches(path) {
        *out.entry(payload_id(&line["client_payload"])).or_default() += 1;
    }
    out
}

pub fn all_ids(range: std::ops::RangeInclusive<i64>) -> BTreeSet<String> {
    range.map(|n| n.to_string()).collect()
}

/// A local-forge config reading this test's queue; `forge` and `pgmq` add lines to their
/// sections; `repo` is the repository's path.
pub fn local_config(db: &QueueDb, repo: &str, forge: &str, pgmq: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nshutdown_grace = \"5s\"\n\n\
         [forge]\nkind = \"local\"\npath = \"{repo}\"\n{forge}\n\n\
         [pgmq]\nqueue = \"{}\"\ndead_letter = \"{}\"\npoll_interval_ms = 50\n\
         backoff_base_ms = 100\nbackoff_cap_ms = 400\n{pgmq}\n{FEEDBACK_ROUTE}intake = \"pgmq\"\n",
        db.queue, db.dead
    )
}

/// Records each dispatch in `attempts.jsonl`; once there are more than the number in `limit`
/// (when that file exists), blocks until killed: a dispatch started after its claim and
/// never finished.
pub const BLOCKING_DISPATCH: &str = r#"line=$(cat)
printf '%s\n' "$line" >> attempts.jsonl
if [ -f limit ] && [ "$(wc -l < attempts.jsonl)" -gt "$(cat limit)" ]; then
  exec sleep 600
fi
"#;
