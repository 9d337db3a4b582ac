//! The statements that settle a message: checked and renewed first in the same way as a
//! renewal, so a message another reader holds now is left to it; kept for after a reconnect
//! when the connection is what failed; and each ending in one [`Settled`], the one thing its
//! count and log line are made from.

use std::time::Duration;

use serde_json::{json, Value};

use super::progress::Counted;
use super::Consumer;
use crate::db::queue::{self, Message};
use crate::db::{self, Database};
use crate::metrics::MessageResult;
use crate::pgmq::holds::Deferred;
use crate::pgmq::settle::DeadReason;

/// The statement that settles a message, once any dispatch again has been made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Statement {
    /// Archived: the row is handled.
    Archive,
    /// Archived after the row was dispatched again.
    ArchiveRedispatched,
    /// To the dead-letter queue with this reason, and archived.
    DeadLetter(DeadReason),
    /// Visible again after this long (whole seconds: pgmq's visibility is in seconds).
    Retry(Duration),
    /// Visible again at once.
    Release,
}

impl Statement {
    /// Whether it makes the message visible to other readers.
    pub(super) fn lets_go(&self) -> bool {
        matches!(self, Statement::Retry(_) | Statement::Release)
    }
}

/// A settle's statement and what it is about, as the statement's failure keeps it.
#[derive(Clone, Copy)]
pub(super) struct Settle<'a> {
    message: &'a Message,
    read_ct: i32,
    statement: &'a Statement,
    route: &'a str,
    counted: Option<Counted>,
}

/// How a settle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Settled {
    Archived,
    /// Archived after a dispatch again.
    Redispatched,
    /// In the dead-letter queue as `dead_letter_id`, and archived.
    Dead {
        reason: DeadReason,
        dead_letter_id: i64,
    },
    /// Left to be read again after its backoff (or, when the statement failed for good, after
    /// its lease lapses).
    Retried,
    Released,
    /// Another reader holds it now, or it is gone: left to that reader.
    LeaseLost,
    /// Kept for after reconnecting: counted once made.
    Deferred,
}

impl Settled {
    /// Its `rowbranch_pgmq_messages_total` result; `None` until a deferred settle is made.
    pub(super) fn result(&self) -> Option<MessageResult> {
        Some(match self {
            Settled::Archived => MessageResult::Archived,
            Settled::Redispatched => MessageResult::Redispatched,
            Settled::Dead { .. } => MessageResult::Dead,
            Settled::Retried => MessageResult::Retried,
            Settled::Released => MessageResult::Released,
            Settled::LeaseLost => MessageResult::LeaseLost,
            Settled::Deferred => return None,
        })
    }
}

impl Consumer {
    /// Makes the settle's statement. The lease is checked and renewed in the same statement
    /// first: a message another reader holds now is left to it, whatever this run did.
    /// `counted`: what it counts as in a drain's summary once made (kept with a deferred one).
    pub(super) async fn apply(
        &self,
        message: &Message,
        read_ct: i32,
        lost: bool,
        statement: &Statement,
        route: &str,
        counted: Option<Counted>,
    ) -> Settled {
        let settle = Settle {
            message,
            read_ct,
            statement,
            route,
            counted,
        };
        let db = match self.db().await {
            Ok(db) => db,
            // A lease found lost is another reader's to settle, whenever the database is back.
            Err(_) if lost => return Settled::LeaseLost,
            Err(_) => return self.defer(&settle),
        };
        let client = db.client();
        let vt = match statement {
            Statement::Retry(after) => whole_seconds(*after),
            Statement::Release => 0,
            _ => self.vt_seconds(),
        };
        match queue::renew(client, self.queue(), &[(message.id, read_ct)], vt).await {
            Ok(found) if !found.is_empty() => {}
            Ok(_) => return Settled::LeaseLost,
            Err(e) => return self.statement_failed(&e, &settle).await,
        }
        let archive = || queue::archive(client, self.queue(), message.id);
        let settled = match statement {
            Statement::Retry(_) => return Settled::Retried,
            Statement::Release => return Settled::Released,
            Statement::Archive => archive().await.map(|_| Settled::Archived),
            Statement::ArchiveRedispatched => archive().await.map(|_| Settled::Redispatched),
            Statement::DeadLetter(reason) => queue::dead_letter(
                client,
                self.queue(),
                &self.settings.pgmq.dead_letter,
                message.id,
                &letter(*reason, message),
            )
            .await
            .map(|dead| match dead {
                Some(dead_letter_id) => Settled::Dead {
                    reason: *reason,
                    dead_letter_id,
                },
                // Not there to archive, just after its lease was renewed: deleted by another.
                None => Settled::LeaseLost,
            }),
        };
        match settled {
            Ok(settled) => settled,
            Err(e) => self.statement_failed(&e, &settle).await,
        }
    }

    /// A statement that failed: when the connection is what failed, an archive or a dead letter
    /// is kept for after reconnecting; any other error (a privilege, a missing queue) is
    /// logged with its SQLSTATE and the message is read again when its lease lapses.
    async fn statement_failed(&self, e: &db::Error, settle: &Settle<'_>) -> Settled {
        self.failed(e).await;
        if e.transient() {
            return self.defer(settle);
        }
        let Settle { message, route, .. } = settle;
        tracing::error!(msg_id = message.id, %route, code = e.code().map(|c| c.code()),
            error = %e.describe(), "a queue message's settle failed; it is read again when its lease lapses");
        Settled::Retried
    }

    /// Keeps an archive or a dead letter the database did not take, for after reconnecting; a
    /// retry or a release needs nothing: the message's lease lapses by itself.
    fn defer(&self, settle: &Settle<'_>) -> Settled {
        let Settle {
            message,
            read_ct,
            statement,
            route,
            counted,
        } = *settle;
        let (letter, counts_as) = match statement {
            Statement::Archive => (None, MessageResult::Archived),
            Statement::ArchiveRedispatched => (None, MessageResult::Redispatched),
            Statement::DeadLetter(reason) => (Some(letter(*reason, message)), MessageResult::Dead),
            Statement::Retry(_) => return Settled::Retried,
            Statement::Release => return Settled::Released,
        };
        self.holds.defer(Deferred {
            id: message.id,
            read_ct,
            route: route.to_owned(),
            letter,
            counts_as,
            counted,
        });
        Settled::Deferred
    }

    /// Makes the statements kept for after a reconnect, each once its lease is checked (and
    /// renewed) under the read it was kept with: a message another reader took meanwhile is
    /// left to it. An archive of a message archived already answers false, and a dead letter
    /// is sent only with its archive: done, either way, and nothing twice.
    pub(super) async fn settle_deferred(&self, db: &Database) {
        for item in self.holds.take_deferred() {
            let client = db.client();
            let done = match queue::renew(
                client,
                self.queue(),
                &[(item.id, item.read_ct)],
                self.vt_seconds(),
            )
            .await
            {
                Ok(found) if found.is_empty() => Ok(false),
                Ok(_) => match &item.letter {
                    None => queue::archive(client, self.queue(), item.id)
                        .await
                        .map(|_| true),
                    Some(letter) => queue::dead_letter(
                        client,
                        self.queue(),
                        &self.settings.pgmq.dead_letter,
                        item.id,
                        letter,
                    )
                    .await
                    .map(|_| true),
                },
                Err(e) => Err(e),
            };
            match done {
                Ok(made) => {
                    let result = if made {
                        item.counts_as
                    } else {
                        MessageResult::LeaseLost
                    };
                    self.pipeline.metrics().pgmq_message(&item.route, result);
                    if let (true, Some(counted)) = (made, item.counted) {
                        self.progress.count(counted);
                    }
                    tracing::info!(
                        msg_id = item.id,
                        result = result.as_str(),
                        "settled a queue message after reconnecting"
                    );
                }
                Err(e) if e.transient() => {
                    self.failed(&e).await;
                    self.holds.defer(item);
                }
                Err(e) => tracing::error!(msg_id = item.id, code = e.code().map(|c| c.code()),
                    error = %e.describe(), "a queue message's settle failed again; it is read again when its lease lapses"),
            }
        }
    }
}

/// The dead letter: why, which message, and the message itself.
fn letter(reason: DeadReason, message: &Message) -> String {
    let original: Value =
        serde_json::from_str(&message.body).unwrap_or(Value::String(message.body.clone()));
    json!({"reason": reason.as_str(), "msg_id": message.id, "message": original}).to_string()
}

/// A wait in whole seconds, at least one: pgmq's visibility is set in seconds, and a backoff
/// rounded down to none would read the message again at once.
fn whole_seconds(wait: Duration) -> i32 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_letter_carries_why_which_and_what() {
        let message = Message {
            id: 7,
            read_ct: 1,
            enqueued_at: chrono::Utc::now(),
            body: r#"{"type":"INSERT","record":{"id":"a b"}}"#.into(),
        };
        let letter: Value = serde_json::from_str(&letter(DeadReason::BadId, &message)).unwrap();
        assert_eq!(letter["reason"], "bad_id");
        assert_eq!(letter["msg_id"], 7);
        assert_eq!(letter["message"]["record"]["id"], "a b");
    }

    #[test]
    fn a_visibility_is_whole_seconds_and_never_none() {
        assert_eq!(whole_seconds(Duration::from_millis(100)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::from_secs(5)), 5);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_secs(u64::MAX)), i32::MAX);
    }

    #[test]
    fn each_settle_counts_under_its_result_and_a_deferred_one_not_yet() {
        let dead = Settled::Dead {
            reason: DeadReason::BadId,
            dead_letter_id: 3,
        };
        assert_eq!(dead.result(), Some(MessageResult::Dead));
        assert_eq!(
            Settled::Redispatched.result(),
            Some(MessageResult::Redispatched)
        );
        assert_eq!(Settled::Deferred.result(), None);
        assert!(Statement::Release.lets_go() && Statement::Retry(Duration::ZERO).lets_go());
        assert!(!Statement::Archive.lets_go() && !Statement::ArchiveRedispatched.lets_go());
    }
}
