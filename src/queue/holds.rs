//! What the consumer holds: each message read and not yet let go, by where its lease stands,
//! and the settles kept for the database's return. One lock, taken by small methods for a few
//! map operations and never across an await. The renewal loop and the settles order themselves
//! here, message by message: a renewal marks its messages before its statement and a settle of
//! one of them waits for the renewal's answer, so a renewal sent before a retry's or a
//! release's statement never lands after it; a renewal leaves out a message being settled,
//! whose own statement renews it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use super::settle::Fate;
use crate::db::queue::Message;
use crate::pipeline::Plan;

/// Which hold of a message this is: a message released and read again is a new hold, with a
/// new token, while one read again during its run (adopted) keeps its token. A handler acts
/// on its own hold only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldId(u64);

/// Where a held message's lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lease {
    /// Renewed by the renewal loop while its run goes on.
    Renewed,
    /// In the renewal statement under way: a settle of it waits for that statement's answer.
    Renewing,
    /// A renewal found it read again by another reader, or gone: not renewed again. Read again
    /// by this process, it is renewed again.
    Lost,
    /// Its settle's statement is being made, which renews it: the loop leaves it alone.
    Settling,
}

/// A message this process holds.
#[derive(Debug)]
struct Hold {
    token: HoldId,
    /// The read it is held under: raised when this process reads it again (adopted).
    read_ct: i32,
    lease: Lease,
}

/// Where a settle stands when it begins.
#[derive(Debug, PartialEq, Eq)]
pub enum Begin {
    /// The hold is gone (its handler panicked and let it go): nothing to settle.
    Gone,
    /// The message was read again by this process since the decision: the decision is made
    /// again on a run of the new read.
    ReadAgain,
    /// Settle it; `lost`: its lease was found lost.
    Settle { lost: bool },
}

/// A message held, as its handler takes it: the message, its hold, the route and row id its
/// count and log line name, and the row's plan (or the fate decided without a run).
#[derive(Debug)]
pub struct Job {
    pub message: Message,
    pub token: HoldId,
    /// The `schema.table` of the route that reads its table from the queue, for its metrics
    /// and log line; else [`crate::metrics::NO_ROUTE`].
    pub route: String,
    /// The row's id, as far as it is known.
    pub id: Option<String>,
    pub plan: Result<Plan, Fate>,
}

/// The holds, the kept settles, and what sizes the reads, behind one lock.
pub struct Holds {
    ledger: Mutex<Ledger>,
    /// Woken when a renewal ends: a settle of one of its messages waits for that.
    renewed: Notify,
    /// Woken when a hold ends: there may be room to read again.
    freed: Notify,
}

#[derive(Default)]
struct Ledger {
    holds: HashMap<i64, Hold>,
    /// The settles the database did not take (the connection went), each a job and its fate:
    /// their holds stay, settling, and the read loop makes them again once the database is
    /// back, before its next read, and once more after the shutdown's grace — so their
    /// handlers end, and a shutdown in an outage does not wait the grace for them.
    kept: Vec<(Job, Fate)>,
    next_token: u64,
    /// A running estimate of a message's size, for sizing reads by bytes.
    average_bytes: usize,
}

impl Holds {
    /// No holds yet; a message is taken to have `first_guess_bytes` until one is read.
    pub fn new(first_guess_bytes: usize) -> Holds {
        Holds {
            ledger: Mutex::new(Ledger {
                average_bytes: first_guess_bytes,
                ..Ledger::default()
            }),
            renewed: Notify::new(),
            freed: Notify::new(),
        }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().expect("holds lock poisoned")
    }

    /// How many messages this process holds.
    pub fn count(&self) -> usize {
        self.ledger().holds.len()
    }

    /// About how big a message is, by those read so far.
    pub fn average_bytes(&self) -> usize {
        self.ledger().average_bytes
    }

    /// Resolves at the next end of a hold, once polled: there may be room to read again.
    pub fn freed(&self) -> Notified<'_> {
        self.freed.notified()
    }

    /// A message read: a new hold, to start its run; or `None` when it is held already (read
    /// again after its lease lapsed, in a database outage say): adopted under the new read, not
    /// run twice, and a settle waiting for the database is made under it.
    pub fn take(&self, message: &Message) -> Option<HoldId> {
        let mut ledger = self.ledger();
        ledger.average_bytes = (ledger.average_bytes * 7 + message.body.len()) / 8 + 1;
        if let Some(hold) = ledger.holds.get_mut(&message.id) {
            hold.read_ct = message.read_ct;
            if hold.lease == Lease::Lost {
                hold.lease = Lease::Renewed;
            }
            return None;
        }
        let token = HoldId(ledger.next_token);
        ledger.next_token += 1;
        let hold = Hold {
            token,
            read_ct: message.read_ct,
            lease: Lease::Renewed,
        };
        ledger.holds.insert(message.id, hold);
        Some(token)
    }

    /// Ends hold `token` of message `id`; a newer hold is left alone.
    pub fn unhold(&self, id: i64, token: HoldId) {
        let mut ledger = self.ledger();
        if ledger.holds.get(&id).is_some_and(|h| h.token == token) {
            ledger.holds.remove(&id);
        }
        drop(ledger);
        self.freed.notify_waiters();
    }

    /// The hold's read now (an adoption may have raised it) and whether its lease was found
    /// lost; `None` when the hold is gone.
    pub fn standing(&self, id: i64, token: HoldId) -> Option<(i32, bool)> {
        let ledger = self.ledger();
        let hold = ledger.holds.get(&id).filter(|h| h.token == token)?;
        Some((hold.read_ct, hold.lease == Lease::Lost))
    }

    /// Begins the hold's settle, decided on read `read_ct`, once no renewal of it is under way:
    /// marks it settling (its statement renews it, not the loop), or lets it go at once when
    /// the statement makes the message visible again (`lets_go`: a read of it after that is a
    /// new hold). One step under the lock, so that no read of the message falls between the
    /// check and the change.
    pub async fn begin_settle(&self, id: i64, token: HoldId, read_ct: i32, lets_go: bool) -> Begin {
        loop {
            // Registered before the look, so a renewal ending in between still wakes it.
            let renewed = self.renewed.notified();
            tokio::pin!(renewed);
            renewed.as_mut().enable();
            let begin = {
                let mut ledger = self.ledger();
                match ledger.holds.get_mut(&id).filter(|h| h.token == token) {
                    None => Some(Begin::Gone),
                    Some(hold) if hold.lease == Lease::Renewing => None,
                    Some(hold) if hold.read_ct != read_ct => Some(Begin::ReadAgain),
                    Some(hold) => {
                        let lost = hold.lease == Lease::Lost;
                        hold.lease = Lease::Settling;
                        if lets_go {
                            ledger.holds.remove(&id);
                        }
                        Some(Begin::Settle { lost })
                    }
                }
            };
            match begin {
                None => renewed.await,
                Some(begin) => {
                    if begin == Begin::Gone {
                        self.freed.notify_waiters();
                    }
                    return begin;
                }
            }
        }
    }

    /// The hold's end, after its settle's statement under read `settled_read`; `true` when the
    /// message was read again while that statement was being made (its lease lapsed
    /// meanwhile): it stays held under the new read, renewed by the loop, to be run again,
    /// which finds its row handled or dispatches it.
    pub fn settled(&self, id: i64, token: HoldId, settled_read: i32) -> bool {
        let mut ledger = self.ledger();
        if let Some(hold) = ledger.holds.get_mut(&id).filter(|h| h.token == token) {
            if hold.read_ct != settled_read {
                hold.lease = Lease::Renewed;
                return true;
            }
        }
        drop(ledger);
        self.unhold(id, token);
        false
    }

    /// Marks every hold the loop renews as in this renewal, and lists them with their reads:
    /// the renewal's statement renews those. Dropped, the renewal gives them back to the loop.
    pub fn begin_renewal(&self) -> Renewal<'_> {
        let mut ledger = self.ledger();
        let renewed = ledger
            .holds
            .iter_mut()
            .filter(|(_, h)| h.lease == Lease::Renewed);
        let leases = renewed
            .map(|(id, h)| {
                h.lease = Lease::Renewing;
                (*id, h.read_ct)
            })
            .collect();
        Renewal {
            holds: self,
            leases,
        }
    }

    /// Keeps a settle the database did not take, for the read loop to make once it is back.
    pub fn keep(&self, job: Job, fate: Fate) {
        self.ledger().kept.push((job, fate));
    }

    /// The settles kept, to be made now; one the database does not take again is kept again.
    pub fn take_kept(&self) -> Vec<(Job, Fate)> {
        std::mem::take(&mut self.ledger().kept)
    }
}

/// A renewal under way: its messages are marked, and a settle of one of them waits until the
/// renewal is over. It is over when dropped, however it stopped (answered, failed, its task
/// cancelled or panicking), so no message stays in a renewal for ever.
pub struct Renewal<'a> {
    holds: &'a Holds,
    /// The messages to renew, each with the read it is held under.
    pub leases: Vec<(i64, i32)>,
}

impl Renewal<'_> {
    /// The statement's answer, the messages it renewed: one it did not was read again by
    /// another reader, or is gone, and its lease is lost — unless this process read it again
    /// meanwhile, when the next renewal renews it under the new read.
    pub fn answered(self, renewed: &[(i64, i32)]) {
        let renewed: HashSet<&(i64, i32)> = renewed.iter().collect();
        let mut ledger = self.holds.ledger();
        for lease in &self.leases {
            let Some(hold) = ledger.holds.get_mut(&lease.0) else {
                continue;
            };
            if hold.lease == Lease::Renewing && hold.read_ct == lease.1 && !renewed.contains(lease)
            {
                hold.lease = Lease::Lost;
            }
        }
    }
}

impl Drop for Renewal<'_> {
    /// What it marked and did not find lost goes back to the loop, and the settles waiting for
    /// it go on.
    fn drop(&mut self) {
        let mut ledger = self.holds.ledger();
        for (id, _) in &self.leases {
            if let Some(hold) = ledger.holds.get_mut(id) {
                if hold.lease == Lease::Renewing {
                    hold.lease = Lease::Renewed;
                }
            }
        }
        drop(ledger);
        self.holds.renewed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    //! The orders between renewals and settles, without a database: the statements are stood
    //! in for by explicit points where the test lets each go on.

    use futures_util::FutureExt;

    use std::sync::Arc;

    use super::*;

    fn message(id: i64, read_ct: i32) -> Message {
        Message {
            id,
            read_ct,
            enqueued_at: chrono::Utc::now(),
            body: "{}".into(),
        }
    }

    fn new_hold(holds: &Holds, id: i64, read_ct: i32) -> HoldId {
        holds
            .take(&message(id, read_ct))
            .unwrap_or_else(|| panic!("message {id} taken as held already"))
    }

    #[tokio::test]
    async fn a_settle_waits_for_the_renewal_of_its_message_and_a_release_lands_after_it() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        let order = Mutex::new(Vec::new());

        // The renewal marks the message; its statement is under way until it is over.
        let renewal = holds.begin_renewal();
        assert_eq!(renewal.leases, [(1, 1)]);

        // A release of it, polled now, waits for the renewal's answer.
        let mut release = Box::pin(async {
            let begin = holds.begin_settle(1, token, 1, true).await;
            order.lock().unwrap().push("release");
            begin
        });
        assert!(
            (&mut release).now_or_never().is_none(),
            "the settle began during the renewal"
        );

        order.lock().unwrap().push("renewal");
        renewal.answered(&[(1, 1)]);
        assert_eq!(release.await, Begin::Settle { lost: false });
        assert_eq!(*order.lock().unwrap(), ["renewal", "release"]);
        // Let go: no later renewal includes it.
        assert!(holds.begin_renewal().leases.is_empty());
        assert_eq!(holds.count(), 0);
    }

    #[test]
    fn a_renewal_leaves_out_the_messages_being_settled() {
        let holds = Holds::new(1);
        let archived = new_hold(&holds, 1, 1);
        let released = new_hold(&holds, 2, 1);
        new_hold(&holds, 3, 2);
        let begin = |id, token, lets_go| {
            holds
                .begin_settle(id, token, 1, lets_go)
                .now_or_never()
                .expect("no renewal under way: the settle begins at once")
        };
        assert_eq!(begin(1, archived, false), Begin::Settle { lost: false });
        assert_eq!(begin(2, released, true), Begin::Settle { lost: false });
        // The archive's statement renews message 1; message 2 is visible again.
        assert_eq!(holds.begin_renewal().leases, [(3, 2)]);
        assert_eq!(holds.count(), 2);
    }

    #[test]
    fn a_settle_of_a_message_outside_the_renewal_does_not_wait_for_it() {
        let holds = Holds::new(1);
        new_hold(&holds, 1, 1);
        let renewal = holds.begin_renewal();
        let token = new_hold(&holds, 2, 1);
        assert_eq!(renewal.leases, [(1, 1)]);
        let begin = holds.begin_settle(2, token, 1, true).now_or_never();
        assert_eq!(begin, Some(Begin::Settle { lost: false }));
    }

    #[tokio::test]
    async fn a_renewal_that_fails_lets_its_settles_go_on_with_their_lease_held() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        let renewal = holds.begin_renewal();
        let mut settle = Box::pin(holds.begin_settle(1, token, 1, false));
        assert!((&mut settle).now_or_never().is_none());
        drop(renewal);
        assert_eq!(settle.await, Begin::Settle { lost: false });
    }

    #[tokio::test]
    async fn a_renewal_whose_task_stops_early_gives_its_messages_back_and_lets_their_settles_go_on()
    {
        let holds = Arc::new(Holds::new(1));
        let token = new_hold(&holds, 1, 1);
        let (marked, was_marked) = tokio::sync::oneshot::channel();
        let renewing = Arc::clone(&holds);
        // Stopped while its statement is under way: no answer, no explicit end.
        let task = tokio::spawn(async move {
            let renewal = renewing.begin_renewal();
            marked.send(renewal.leases.clone()).unwrap();
            std::future::pending::<()>().await;
        });
        assert_eq!(was_marked.await.unwrap(), [(1, 1)]);
        let mut settle = Box::pin(holds.begin_settle(1, token, 1, false));
        assert!((&mut settle).now_or_never().is_none());
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(settle.await, Begin::Settle { lost: false });
        // Not left renewing: a message the loop renews is in the next renewal.
        let other = new_hold(&holds, 2, 1);
        let renewal = holds.begin_renewal();
        drop(renewal);
        assert_eq!(holds.begin_renewal().leases, [(2, 1)]);
        assert!(holds.standing(2, other).is_some());
    }

    #[test]
    fn a_message_missing_from_the_renewal_is_lost_unless_read_again_meanwhile() {
        let holds = Holds::new(1);
        let lost = new_hold(&holds, 1, 1);
        let adopted = new_hold(&holds, 2, 1);
        let kept = new_hold(&holds, 3, 1);
        let renewal = holds.begin_renewal();
        assert_eq!(holds.take(&message(2, 2)), None);
        renewal.answered(&[(3, 1)]);
        assert_eq!(holds.standing(1, lost), Some((1, true)));
        assert_eq!(holds.standing(2, adopted), Some((2, false)));
        assert_eq!(holds.standing(3, kept), Some((1, false)));
        // A lost lease is not renewed; read again by this process, it is.
        assert_eq!(holds.begin_renewal().leases.len(), 2);
        assert_eq!(holds.take(&message(1, 3)), None);
        assert_eq!(holds.standing(1, lost), Some((3, false)));
    }

    #[test]
    fn a_message_read_again_before_its_settle_begins_is_decided_again_on_the_new_read() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        assert_eq!(holds.take(&message(1, 2)), None);
        let begin = holds.begin_settle(1, token, 1, false).now_or_never();
        assert_eq!(begin, Some(Begin::ReadAgain));
        // Its handler's hold is there under the new read, and settles under it.
        assert_eq!(holds.standing(1, token), Some((2, false)));
        let begin = holds.begin_settle(1, token, 2, false).now_or_never();
        assert_eq!(begin, Some(Begin::Settle { lost: false }));
    }

    #[test]
    fn a_message_read_again_during_its_settle_is_run_again_after_it() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        let begin = holds.begin_settle(1, token, 1, false).now_or_never();
        assert_eq!(begin, Some(Begin::Settle { lost: false }));
        assert_eq!(holds.take(&message(1, 2)), None);
        assert!(holds.settled(1, token, 1), "run again");
        // Renewed by the loop again while it runs.
        assert_eq!(holds.begin_renewal().leases, [(1, 2)]);
        assert!(!holds.settled(1, token, 2));
        assert_eq!(holds.count(), 0);
    }

    #[test]
    fn a_settle_waiting_for_the_database_takes_the_new_read_of_its_message() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        let begin = holds.begin_settle(1, token, 1, false).now_or_never();
        assert_eq!(begin, Some(Begin::Settle { lost: false }));
        // Its statement failed with the connection: kept, still held, and nothing renews it
        // while it waits (its own statement checks and renews the lease).
        let job = Job {
            message: message(1, 1),
            token,
            route: "public.feedbacks".into(),
            id: Some("1".into()),
            plan: Err(Fate::Handled),
        };
        holds.keep(job, Fate::Handled);
        assert_eq!(holds.count(), 1);
        assert!(holds.begin_renewal().leases.is_empty());
        assert_eq!(holds.take(&message(1, 2)), None);
        assert_eq!(holds.standing(1, token), Some((2, false)));
        assert!(holds.begin_renewal().leases.is_empty());
        // Made once the database is back, under the new read: done, not run again.
        let kept = holds.take_kept();
        assert_eq!(kept.len(), 1);
        assert!(holds.take_kept().is_empty(), "made by one caller only");
        assert!(!holds.settled(1, kept[0].0.token, 2));
        assert_eq!(holds.count(), 0);
    }

    #[test]
    fn a_handlers_panic_lets_its_hold_go_but_not_a_newer_one() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        holds.unhold(1, token);
        assert_eq!(holds.count(), 0);
        let newer = new_hold(&holds, 1, 2);
        holds.unhold(1, token);
        assert!(holds.standing(1, newer).is_some());
    }

    #[test]
    fn reads_are_sized_by_a_running_average() {
        let holds = Holds::new(256 << 10);
        let mut big = message(1, 1);
        big.body = "x".repeat(300 << 10);
        holds.take(&big);
        assert_eq!(
            holds.average_bytes(),
            ((256 << 10) * 7 + (300 << 10)) / 8 + 1
        );
    }
}
