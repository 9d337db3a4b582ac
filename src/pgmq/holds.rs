//! What the consumer holds: each message read and not yet let go, by where its lease stands,
//! and the settles kept for after a reconnect. One lock, taken by small methods for a few map
//! operations and never across an await. The renewal loop and the settles order themselves
//! here, message by message: a renewal marks its messages before its statement and a settle
//! of one of them waits for the renewal's answer, so a renewal sent before a retry's or a
//! release's statement never lands after it; a renewal leaves out a message being settled,
//! whose own statement renews it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use super::settle::Fate;
use crate::db::queue::Message;

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

/// A settle the database did not take (the connection went): made again after reconnecting.
#[derive(Debug, Clone)]
pub struct Deferred {
    pub id: i64,
    /// The read it is settled under: checked (and renewed) before the statement, so a message
    /// another reader took meanwhile is left to it.
    pub read_ct: i32,
    pub route: String,
    /// `None`: archive; `Some`: dead-letter with this letter.
    pub letter: Option<String>,
    /// The fate it settles, counted once made: archived or dead-lettered.
    pub fate: Fate,
}

/// What a read message is to this process.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// A new hold: start its run.
    New(HoldId),
    /// Held already (read again after its lease lapsed, in a database outage say): adopted
    /// under the new read, not run twice.
    Adopted,
    /// Its work is done and its settle waits for the database: now made under the new read.
    Deferred,
}

/// A hold as its run ends: the read its settle is decided on, and whether its lease was found
/// lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldNow {
    pub read_ct: i32,
    pub lost: bool,
}

/// A held message to run again, under a new token: read again by this process while its
/// settle was being decided or made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rerun {
    pub token: HoldId,
    pub read_ct: i32,
}

/// Where a settle stands when it begins.
#[derive(Debug, PartialEq, Eq)]
pub enum Begin {
    /// The hold is gone (its handler panicked and let it go): nothing to settle.
    Gone,
    /// The message was read again by this process since the decision: the decision is made
    /// again on a run of the new read.
    ReadAgain(Rerun),
    /// Settle it; `lost`: its lease was found lost.
    Settle { lost: bool },
}

/// The holds, the deferred settles, and what sizes the reads, behind one lock.
pub struct Holds {
    ledger: Mutex<Ledger>,
    /// Woken when a renewal ends: a settle of one of its messages waits for that.
    renewed: Notify,
    /// Woken when a hold ends: there may be room to read again.
    freed: Notify,
}

struct Ledger {
    holds: HashMap<i64, Hold>,
    /// Settles kept for after a reconnect. Not holds: their work is done, and nothing renews
    /// them.
    deferred: Vec<Deferred>,
    next_token: u64,
    /// A running estimate of a message's size, for sizing reads by bytes.
    average_bytes: usize,
}

impl Ledger {
    fn new_token(&mut self) -> HoldId {
        let token = HoldId(self.next_token);
        self.next_token += 1;
        token
    }

    /// The hold `token` of message `id`, if it is still that one.
    fn hold(&mut self, id: i64, token: HoldId) -> Option<&mut Hold> {
        self.holds.get_mut(&id).filter(|h| h.token == token)
    }

    /// Gives hold `id` a new token, under its current read, renewed by the loop again.
    fn rerun(&mut self, id: i64) -> Option<Rerun> {
        let token = self.new_token();
        let hold = self.holds.get_mut(&id)?;
        hold.token = token;
        hold.lease = Lease::Renewed;
        Some(Rerun {
            token,
            read_ct: hold.read_ct,
        })
    }
}

impl Holds {
    /// No holds yet; a message is taken to have `first_guess_bytes` until one is read.
    pub fn new(first_guess_bytes: usize) -> Holds {
        Holds {
            ledger: Mutex::new(Ledger {
                holds: HashMap::new(),
                deferred: Vec::new(),
                next_token: 0,
                average_bytes: first_guess_bytes,
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

    /// A message read: a new hold, an adoption of one held already, or the new read of a
    /// deferred settle's message.
    pub fn take(&self, message: &Message) -> Taken {
        let mut ledger = self.ledger();
        ledger.average_bytes = (ledger.average_bytes * 7 + message.body.len()) / 8 + 1;
        if let Some(deferred) = ledger.deferred.iter_mut().find(|d| d.id == message.id) {
            deferred.read_ct = message.read_ct;
            return Taken::Deferred;
        }
        if let Some(hold) = ledger.holds.get_mut(&message.id) {
            hold.read_ct = message.read_ct;
            if hold.lease == Lease::Lost {
                hold.lease = Lease::Renewed;
            }
            return Taken::Adopted;
        }
        let token = ledger.new_token();
        ledger.holds.insert(
            message.id,
            Hold {
                token,
                read_ct: message.read_ct,
                lease: Lease::Renewed,
            },
        );
        Taken::New(token)
    }

    /// Forgets hold `token` of message `id` (its handler panicked); a newer hold is left alone.
    pub fn unhold(&self, id: i64, token: HoldId) {
        {
            let mut ledger = self.ledger();
            if ledger.hold(id, token).is_some() {
                ledger.holds.remove(&id);
            }
        }
        self.freed.notify_waiters();
    }

    /// The hold's read now (an adoption may have raised it) and whether its lease was found
    /// lost; `None` when the hold is gone.
    pub fn standing(&self, id: i64, token: HoldId) -> Option<HoldNow> {
        let mut ledger = self.ledger();
        ledger.hold(id, token).map(|h| HoldNow {
            read_ct: h.read_ct,
            lost: h.lease == Lease::Lost,
        })
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
            match self.try_begin_settle(id, token, read_ct, lets_go) {
                Some(begin) => return begin,
                None => renewed.await,
            }
        }
    }

    /// [`begin_settle`](Self::begin_settle) now; `None` while a renewal of the message is under
    /// way.
    fn try_begin_settle(
        &self,
        id: i64,
        token: HoldId,
        read_ct: i32,
        lets_go: bool,
    ) -> Option<Begin> {
        let mut ledger = self.ledger();
        let Some(hold) = ledger.hold(id, token) else {
            drop(ledger);
            self.freed.notify_waiters();
            return Some(Begin::Gone);
        };
        if hold.lease == Lease::Renewing {
            return None;
        }
        if hold.read_ct != read_ct {
            let rerun = ledger.rerun(id).expect("the hold was just found");
            return Some(Begin::ReadAgain(rerun));
        }
        let lost = hold.lease == Lease::Lost;
        if lets_go {
            ledger.holds.remove(&id);
        } else {
            hold.lease = Lease::Settling;
        }
        Some(Begin::Settle { lost })
    }

    /// The hold's end, after its settle's statement under read `settled_read`. A message read
    /// again while that statement was being made (its lease lapsed meanwhile) is held by this
    /// process under the new read with no handler: it is to be run again, which finds its row
    /// handled or dispatches it.
    pub fn settled(&self, id: i64, token: HoldId, settled_read: i32) -> Option<Rerun> {
        let rerun = {
            let mut ledger = self.ledger();
            match ledger.hold(id, token).map(|h| h.read_ct) {
                Some(read_ct) if read_ct != settled_read => ledger.rerun(id),
                Some(_) => {
                    ledger.holds.remove(&id);
                    None
                }
                None => None,
            }
        };
        self.freed.notify_waiters();
        rerun
    }

    /// Marks every hold the loop renews as in this renewal, and lists them with their reads:
    /// the renewal's statement renews those. Dropped, the renewal lets them go back to the loop.
    pub fn begin_renewal(&self) -> Renewal<'_> {
        let mut ledger = self.ledger();
        let leases = ledger
            .holds
            .iter_mut()
            .filter(|(_, h)| h.lease == Lease::Renewed)
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

    /// Keeps a settle the database did not take, for after reconnecting.
    pub fn defer(&self, deferred: Deferred) {
        self.ledger().deferred.push(deferred);
    }

    /// The settles kept, to be made now; one the database does not take again goes back with
    /// [`defer`](Self::defer).
    pub fn take_deferred(&self) -> Vec<Deferred> {
        std::mem::take(&mut self.ledger().deferred)
    }
}

/// A renewal under way: its messages are marked, and a settle of one of them waits until the
/// renewal is answered or dropped.
pub struct Renewal<'a> {
    holds: &'a Holds,
    leases: Vec<(i64, i32)>,
}

impl Renewal<'_> {
    /// The messages to renew, each with the read it is held under.
    pub fn leases(&self) -> &[(i64, i32)] {
        &self.leases
    }

    /// The statement's answer, the messages it renewed: one it did not was read again by
    /// another reader, or is gone, and its lease is lost — unless this process read it again
    /// meanwhile, when the next renewal renews it under the new read.
    pub fn answered(self, renewed: &[(i64, i32)]) {
        let renewed: HashSet<&(i64, i32)> = renewed.iter().collect();
        let mut ledger = self.holds.ledger();
        for &(id, read_ct) in &self.leases {
            if let Some(hold) = ledger.holds.get_mut(&id) {
                if hold.lease == Lease::Renewing
                    && hold.read_ct == read_ct
                    && !renewed.contains(&(id, read_ct))
                {
                    hold.lease = Lease::Lost;
                }
            }
        }
    }
}

impl Drop for Renewal<'_> {
    /// The renewal is over (answered, failed, or its task stopped): what it marked goes back to
    /// the loop, and the settles waiting for it go on.
    fn drop(&mut self) {
        {
            let mut ledger = self.holds.ledger();
            for (id, _) in &self.leases {
                if let Some(hold) = ledger.holds.get_mut(id) {
                    if hold.lease == Lease::Renewing {
                        hold.lease = Lease::Renewed;
                    }
                }
            }
        }
        self.holds.renewed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    //! The orders between renewals and settles, without a database: the statements are stood
    //! in for by explicit points where the test lets each go on.

    use futures_util::FutureExt;

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
        match holds.take(&message(id, read_ct)) {
            Taken::New(token) => token,
            other => panic!("message {id} taken as {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_settle_waits_for_the_renewal_of_its_message_and_a_release_lands_after_it() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        let order = Mutex::new(Vec::new());

        // The renewal marks the message; its statement is under way until `answered`.
        let renewal = holds.begin_renewal();
        assert_eq!(renewal.leases(), [(1, 1)]);

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
        assert!(holds.begin_renewal().leases().is_empty());
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
        assert_eq!(holds.begin_renewal().leases(), [(3, 2)]);
        assert_eq!(holds.count(), 2);
    }

    #[test]
    fn a_settle_of_a_message_outside_the_renewal_does_not_wait_for_it() {
        let holds = Holds::new(1);
        new_hold(&holds, 1, 1);
        let renewal = holds.begin_renewal();
        let token = new_hold(&holds, 2, 1);
        assert_eq!(renewal.leases(), [(1, 1)]);
        let begin = holds.begin_settle(2, token, 1, true).now_or_never();
        assert_eq!(begin, Some(Begin::Settle { lost: false }));
    }

    #[tokio::test]
    async fn a_renewal_that_fails_or_stops_lets_its_settles_go_on_with_their_lease_held() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        let renewal = holds.begin_renewal();
        let mut settle = Box::pin(holds.begin_settle(1, token, 1, false));
        assert!((&mut settle).now_or_never().is_none());
        drop(renewal);
        assert_eq!(settle.await, Begin::Settle { lost: false });
    }

    #[test]
    fn a_message_missing_from_the_renewal_is_lost_unless_read_again_meanwhile() {
        let holds = Holds::new(1);
        let lost = new_hold(&holds, 1, 1);
        let adopted = new_hold(&holds, 2, 1);
        let kept = new_hold(&holds, 3, 1);
        let renewal = holds.begin_renewal();
        assert_eq!(holds.take(&message(2, 2)), Taken::Adopted);
        renewal.answered(&[(3, 1)]);
        let standing = |id, token| holds.standing(id, token).unwrap();
        assert_eq!(
            standing(1, lost),
            HoldNow {
                read_ct: 1,
                lost: true
            }
        );
        assert_eq!(
            standing(2, adopted),
            HoldNow {
                read_ct: 2,
                lost: false
            }
        );
        assert_eq!(
            standing(3, kept),
            HoldNow {
                read_ct: 1,
                lost: false
            }
        );
        // A lost lease is not renewed; read again by this process, it is.
        assert_eq!(holds.begin_renewal().leases().len(), 2);
        assert_eq!(holds.take(&message(1, 3)), Taken::Adopted);
        assert_eq!(
            standing(1, lost),
            HoldNow {
                read_ct: 3,
                lost: false
            }
        );
    }

    #[test]
    fn a_message_read_again_before_its_settle_begins_is_run_again_under_a_new_token() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        assert_eq!(holds.take(&message(1, 2)), Taken::Adopted);
        let Some(Begin::ReadAgain(rerun)) = holds.begin_settle(1, token, 1, false).now_or_never()
        else {
            panic!("not read again");
        };
        assert_eq!(rerun.read_ct, 2);
        assert_ne!(rerun.token, token);
        // The old handler's hold is gone; the new one's is there.
        assert_eq!(holds.standing(1, token), None);
        assert!(holds.standing(1, rerun.token).is_some());
    }

    #[test]
    fn a_message_read_again_during_its_settle_is_run_again_after_it() {
        let holds = Holds::new(1);
        let token = new_hold(&holds, 1, 1);
        let begin = holds.begin_settle(1, token, 1, false).now_or_never();
        assert_eq!(begin, Some(Begin::Settle { lost: false }));
        assert_eq!(holds.take(&message(1, 2)), Taken::Adopted);
        let rerun = holds.settled(1, token, 1).expect("run again");
        assert_eq!(rerun.read_ct, 2);
        assert_eq!(holds.settled(1, rerun.token, 2), None);
        assert_eq!(holds.count(), 0);
    }

    #[test]
    fn a_deferred_settle_takes_the_new_read_of_its_message_and_holds_nothing() {
        let holds = Holds::new(1);
        holds.defer(Deferred {
            id: 1,
            read_ct: 1,
            route: "public.t".into(),
            letter: None,
            fate: Fate::Handled,
        });
        assert_eq!(holds.take(&message(1, 2)), Taken::Deferred);
        assert_eq!(holds.count(), 0);
        let deferred = holds.take_deferred();
        assert_eq!(deferred.len(), 1);
        assert_eq!(deferred[0].read_ct, 2);
        assert!(holds.take_deferred().is_empty());
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
