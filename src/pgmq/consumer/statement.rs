//! The statements that settle a message by its [`Fate`]: checked and renewed first in the same
//! way as a renewal, so a message another reader holds now is left to it; kept for after a
//! reconnect when the connection is what failed; each ending in the fate as made, the one thing
//! its count and log line are made from.

use std::time::Duration;

use serde_json::json;
use serde_json::value::RawValue;

use super::Consumer;
use crate::db::queue::{self, Message};
use crate::db::{self, Database};
use crate::pgmq::holds::Deferred;
use crate::pgmq::settle::Fate;
use crate::reason::Reason;

impl Consumer {
    /// Makes `fate`'s statement, decided on read `read_ct`. The lease is checked and renewed in
    /// the same statement first: a message another reader holds now is left to it, whatever
    /// this run did. The fate as made: the same, [`Fate::LeaseLost`], or [`Fate::Later`] when
    /// the statement failed for good; `None` when it is kept for after reconnecting (counted
    /// once made).
    pub(super) async fn apply(
        &self,
        message: &Message,
        read_ct: i32,
        lost: bool,
        fate: Fate,
        route: &str,
    ) -> Option<Fate> {
        if fate == Fate::LeaseLost {
            return Some(fate);
        }
        let db = match self.db().await {
            Ok(db) => db,
            // A lease found lost is another reader's to settle, whenever the database is back.
            Err(_) if lost => return Some(Fate::LeaseLost),
            Err(_) => return self.defer(message, read_ct, fate, route),
        };
        let client = db.client();
        let vt = match &fate {
            Fate::Later(after) => whole_seconds(*after),
            Fate::Release => 0,
            _ => self.vt_seconds(),
        };
        match queue::renew(client, self.queue(), &[(message.id, read_ct)], vt).await {
            Ok(found) if !found.is_empty() => {}
            Ok(_) => return Some(Fate::LeaseLost),
            Err(e) => {
                return self
                    .statement_failed(&e, message, read_ct, fate, route)
                    .await
            }
        }
        let made = match &fate {
            // The renewal was the statement.
            Fate::Later(_) | Fate::Release => return Some(fate),
            Fate::DeadLetter { reason, .. } => queue::dead_letter(
                client,
                self.queue(),
                &self.settings.pgmq.dead_letter,
                message.id,
                &letter(*reason, message),
            )
            .await
            .map(|dead| match dead {
                Some(id) => Fate::DeadLetter {
                    reason: *reason,
                    letter_id: Some(id),
                },
                // Not there to archive, just after its lease was renewed: deleted by another.
                None => Fate::LeaseLost,
            }),
            _ => queue::archive(client, self.queue(), message.id)
                .await
                .map(|_| fate.clone()),
        };
        match made {
            Ok(made) => Some(made),
            Err(e) => {
                self.statement_failed(&e, message, read_ct, fate, route)
                    .await
            }
        }
    }

    /// A statement that failed: when the connection is what failed, an archive or a dead letter
    /// is kept for after reconnecting; any other error (a privilege, a missing queue) is
    /// logged with its SQLSTATE and the message is read again when its lease lapses.
    async fn statement_failed(
        &self,
        e: &db::Error,
        message: &Message,
        read_ct: i32,
        fate: Fate,
        route: &str,
    ) -> Option<Fate> {
        self.failed(e).await;
        if e.transient() {
            return self.defer(message, read_ct, fate, route);
        }
        tracing::error!(msg_id = message.id, %route, code = e.code().map(|c| c.code()),
            error = %e.describe(), "a queue message's settle failed; it is read again when its lease lapses");
        Some(Fate::Later(self.settings.pgmq.visibility_timeout))
    }

    /// Keeps an archive or a dead letter the database did not take, for after reconnecting; a
    /// retry or a release needs nothing: the message's lease lapses by itself.
    fn defer(&self, message: &Message, read_ct: i32, fate: Fate, route: &str) -> Option<Fate> {
        let letter = match &fate {
            Fate::Later(_) | Fate::Release => return Some(fate),
            Fate::DeadLetter { reason, .. } => Some(letter(*reason, message)),
            _ => None,
        };
        self.holds.defer(Deferred {
            id: message.id,
            read_ct,
            route: route.to_owned(),
            letter,
            fate,
        });
        None
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
                    let fate = if made { item.fate } else { Fate::LeaseLost };
                    let result = fate.label();
                    self.pipeline.metrics().pgmq_message(&item.route, result);
                    self.progress.count(&fate);
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

/// The dead letter: why, which message, and the message itself (its JSON as it came).
fn letter(reason: Reason, message: &Message) -> String {
    let original = match serde_json::from_str::<&RawValue>(&message.body) {
        Ok(raw) => json!({"reason": reason.as_str(), "msg_id": message.id, "message": raw}),
        Err(_) => json!({"reason": reason.as_str(), "msg_id": message.id, "message": message.body}),
    };
    original.to_string()
}

/// A wait in whole seconds, at least one: pgmq's visibility is set in seconds, and a backoff
/// rounded down to none would read the message again at once.
fn whole_seconds(wait: Duration) -> i32 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn a_dead_letter_carries_why_which_and_what() {
        let message = Message {
            id: 7,
            read_ct: 1,
            enqueued_at: chrono::Utc::now(),
            body: r#"{"type":"INSERT","record":{"id":"a b"}}"#.into(),
        };
        let letter: Value = serde_json::from_str(&letter(Reason::BadId, &message)).unwrap();
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
}
