//! Bodies not yet authenticated: those whose signature the headers leave to the body (SPEC §3,
//! `standard-webhooks` and `hub-signature`). Anyone can send a well-formed signature, so such
//! bodies are read within one budget of bytes for the whole process; when a body needs more than
//! is free, the one that has been reading longest is cut to make room (its connection closes).
//! A valid delivery sends its body at once and is never the one reading longest, so it is never
//! refused for them; senders who trickle bodies under false signatures cut each other.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;

/// What bodies not yet authenticated may hold between them, at least: with the connections'
/// own buffers at their worst beside it, the process stays within the memory SPEC §3 promises
/// under a flood of false signatures.
pub const UNVERIFIED_BYTES: usize = 8 << 20;

/// Why a body was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// Larger than the bound the caller gave.
    TooLarge,
    /// Cut to make room for other bodies: it had been reading longest.
    Cut,
    /// The connection broke before the body's end.
    Broken,
}

/// The budget, and the bodies reading within it, oldest first.
pub struct Unverified {
    budget: usize,
    readers: Mutex<Readers>,
}

#[derive(Default)]
struct Readers {
    used: usize,
    /// Each body under way, by the order it began: the bytes it holds, and how to cut it.
    reading: BTreeMap<u64, (usize, CancellationToken)>,
    next: u64,
}

impl Unverified {
    /// A budget of `budget` bytes, never less than one body of `max_body` bytes.
    pub fn new(budget: usize, max_body: usize) -> Unverified {
        Unverified {
            budget: budget.max(max_body),
            readers: Mutex::default(),
        }
    }

    fn readers(&self) -> std::sync::MutexGuard<'_, Readers> {
        self.readers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes held by the bodies under way.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.readers().used
    }

    /// Reads `body` whole, at most `max` bytes, within the budget. The caller bounds the time.
    pub async fn read(&self, mut body: Body, max: usize) -> Result<Bytes, Unread> {
        let (me, cut) = {
            let mut readers = self.readers();
            let me = readers.next;
            readers.next += 1;
            let cut = CancellationToken::new();
            readers.reading.insert(me, (0, cut.clone()));
            (me, cut)
        };
        // Its bytes go back to the budget however the read ends, dropped midway included.
        let _reading = scopeguard::guard((), |()| {
            let mut readers = self.readers();
            if let Some((held, _)) = readers.reading.remove(&me) {
                readers.used -= held;
            }
        });
        let mut read = Vec::new();
        loop {
            // A cut comes first: a body cut while a frame was ready reads no more.
            let frame = tokio::select! {
                biased;
                () = cut.cancelled() => return Err(Unread::Cut),
                frame = body.frame() => frame,
            };
            let data = match frame {
                None => return Ok(Bytes::from(read)),
                Some(Err(_)) => return Err(Unread::Broken),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
            };
            if read.len() + data.len() > max {
                return Err(Unread::TooLarge);
            }
            self.take(me, data.len())?;
            read.extend_from_slice(&data);
        }
    }

    /// Counts `bytes` more for body `me`, cutting the bodies that have been reading longest
    /// until they fit; `Cut` when `me` is the longest itself.
    fn take(&self, me: u64, bytes: usize) -> Result<(), Unread> {
        let mut readers = self.readers();
        // Cut already (its bytes given back): it takes no more.
        if !readers.reading.contains_key(&me) {
            return Err(Unread::Cut);
        }
        while readers.used + bytes > self.budget {
            let Some((&oldest, _)) = readers.reading.first_key_value() else {
                break;
            };
            if oldest == me {
                return Err(Unread::Cut);
            }
            if let Some((held, cut)) = readers.reading.remove(&oldest) {
                readers.used -= held;
                cut.cancel();
            }
        }
        if let Some((held, _)) = readers.reading.get_mut(&me) {
            *held += bytes;
            readers.used += bytes;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use futures_util::stream::{self, StreamExt};

    /// A body that sends `first`, then nothing until it is dropped.
    fn stuck(first: usize) -> Body {
        let chunks = stream::iter([Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; first]))])
            .chain(stream::pending());
        Body::from_stream(chunks)
    }

    #[tokio::test]
    async fn a_body_that_needs_room_cuts_the_one_reading_longest_and_is_read_whole() {
        let unverified = std::sync::Arc::new(Unverified::new(1000, 600));
        let (first, second) = (
            std::sync::Arc::clone(&unverified),
            std::sync::Arc::clone(&unverified),
        );
        let oldest = tokio::spawn(async move { first.read(stuck(500), 600).await });
        tokio::task::yield_now().await;
        while unverified.used() < 500 {
            tokio::task::yield_now().await;
        }
        let younger = tokio::spawn(async move { second.read(stuck(400), 600).await });
        while unverified.used() < 900 {
            tokio::task::yield_now().await;
        }
        // A valid delivery's 300 bytes do not fit beside the two: the oldest is cut.
        let valid = unverified.read(Body::from(vec![b'v'; 300]), 600).await;
        assert_eq!(valid.map(|b| b.len()), Ok(300));
        assert_eq!(oldest.await.unwrap(), Err(Unread::Cut));
        assert!(!younger.is_finished(), "the younger one reads on");
        assert_eq!(unverified.used(), 400);
        younger.abort();
        let _ = younger.await;
        assert_eq!(
            unverified.used(),
            0,
            "a body dropped midway gives its bytes back"
        );
    }

    #[test]
    fn a_body_cut_takes_no_more_and_the_count_stays_true() {
        let unverified = Unverified::new(1000, 600);
        let (first, second) = (0, 1);
        {
            let mut readers = unverified.readers();
            for me in [first, second] {
                readers.reading.insert(me, (0, CancellationToken::new()));
            }
            readers.next = 2;
        }
        unverified.take(first, 600).unwrap();
        unverified.take(second, 600).unwrap();
        assert_eq!(unverified.used(), 600, "the first was cut for the second");
        // The first, cut, has a frame ready all the same: it is refused, and counts nothing.
        assert_eq!(unverified.take(first, 100), Err(Unread::Cut));
        assert_eq!(unverified.used(), 600);
    }

    #[tokio::test]
    async fn a_body_over_its_bound_is_too_large_and_holds_nothing_after() {
        let unverified = Unverified::new(1000, 100);
        let read = unverified.read(Body::from(vec![b'x'; 101]), 100).await;
        assert_eq!(read, Err(Unread::TooLarge));
        assert_eq!(unverified.used(), 0);
    }
}
