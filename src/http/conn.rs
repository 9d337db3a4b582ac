//! Accepting and serving connections, in the spirit of mini-redis's listener: a permit of a
//! [`Semaphore`] for each connection, taken before it is accepted and given back when it ends,
//! so that at most the cap are served at once. Each is served by hyper's HTTP/1 with a timer,
//! so that a sender who is slow to send its headers — or idle between requests — is cut after
//! `read_timeout_ms`. (`axum::serve` sets no timer, so hyper's header timeout would be off.)
//!
//! A full table makes room: the connections waiting for a request head (a new one once a read
//! has found nothing more to read, or one between requests) are kept in [`Waiting`] with when
//! they began to wait, and a connection accepted when no permit is free takes the permit of
//! the one that has waited longest, which is cut. One just accepted whose task has not yet
//! read — its head may be there, unread — is not among them. A request under way — its body
//! being read, its answer being decided or written — is never cut for room, so clients that
//! never finish a request head cannot hold every slot, while one that sends slowly but sends
//! keeps its own. Only when every connection is in a request does a new one wait for one to
//! end (and the next ones in the listen backlog).
//!
//! Two more bounds cover what the header timeout does not see. A write that makes no progress
//! for `read_timeout_ms` fails (a client that sends requests and never reads its answers would
//! otherwise keep hyper waiting to write, with no timer, forever). And a connection lives at
//! most six read timeouts: then it is asked to close after the request under way, and it is cut
//! if it has not closed within what that request may take more (a client that asks for `/healthz` just
//! within every timeout would otherwise keep its slot forever).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::{service_fn, Service};
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_io_timeout::TimeoutStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::WebhookSettings;

/// hyper's buffers per connection, at most (its default is about 400 KiB): a request head
/// larger than this is refused, and a body is read through it in pieces no larger.
const MAX_BUF_SIZE: usize = 64 * 1024;
/// A connection's life, in read timeouts (1 minute by default).
const MAX_AGE_IN_READ_TIMEOUTS: u32 = 6;

/// How long a connection is served before it is asked to close, and when it is cut if it has
/// not closed by then: once the request under way has had what it may take at most — its
/// headers, its body and the writing of its answer within `read_timeout_ms` each, and the
/// answer within `respond_within_ms`.
fn lifetime(settings: &WebhookSettings) -> (Duration, Duration) {
    let max_age = settings.read_timeout * MAX_AGE_IN_READ_TIMEOUTS;
    (
        max_age,
        max_age + settings.read_timeout * 3 + settings.respond_within,
    )
}

/// Serves at most `cap` connections at once until `stop`; then asks every open one to close
/// (idle ones close at once, in-flight requests finish) and returns their tasks, to wait for.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &WebhookSettings,
    cap: usize,
    stop: impl Future<Output = ()>,
) -> TaskTracker {
    let permits = Arc::new(Semaphore::new(cap));
    let waiting = Arc::new(Waiting::default());
    let (close_all, tasks) = (CancellationToken::new(), TaskTracker::new());
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Since hyper 1.6 this also cuts a keep-alive connection idle for that long.
        .header_read_timeout(settings.read_timeout)
        .max_buf_size(MAX_BUF_SIZE)
        // A sender that writes its whole request and closes its side still gets its row run:
        // without this, hyper drops the request when it reads the end of the stream.
        .half_close(true);
    let (max_age, cut_at) = lifetime(settings);
    tokio::pin!(stop);
    for id in 0u64.. {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // A connection that went away while being accepted leaves nothing to wait out.
                    let gone = [ConnectionRefused, ConnectionAborted, ConnectionReset];
                    if !gone.contains(&e.kind()) {
                        // Out of file descriptors, say: accepting again at once would spin.
                        tracing::error!(error = %e, "could not accept a connection; trying again in 1 s");
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_secs(1)) => {}
                            () = &mut stop => break,
                        }
                    }
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // While every connection is in a request, this one waits here, and the next ones in
        // the backlog.
        let permit = tokio::select! {
            permit = waiting.make_room(&permits) => permit,
            () = &mut stop => break,
        };
        let slot = Slot::new(id, &waiting);
        let mut io = TimeoutStream::new(stream);
        io.set_write_timeout(Some(settings.read_timeout));
        let io = Served {
            io: Box::pin(io),
            slot: Arc::clone(&slot),
        };
        let (router, in_slot) = (TowerToHyperService::new(router.clone()), Arc::clone(&slot));
        // Out of `Waiting` from each request's head until hyper has taken the whole answer:
        // it drops the answer's body then (and serves one request at a time).
        let service = service_fn(move |request: Request<Incoming>| {
            // Out of `Waiting` until the hold goes, then waiting for the next head again.
            in_slot.begin_request();
            let in_request = scopeguard::guard(Arc::clone(&in_slot), |slot| slot.end_request());
            let answer = router.call(request);
            async move {
                // The hold goes with the answer's body: `map_err` only to tie it there, since
                // it keeps the body's size hint, so hyper still sends a length rather than chunks.
                let answer = answer.await?;
                Ok::<_, Infallible>(answer.map(|body| {
                    body.map_err(move |e| {
                        let _held = &in_request;
                        e
                    })
                }))
            }
        });
        let connection = builder.serve_connection(TokioIo::new(io), service);
        let stopped = close_all.clone();
        tasks.spawn(async move {
            let _permit: OwnedSemaphorePermit = permit;
            let mut connection = std::pin::pin!(connection);
            let aged = tokio::time::sleep(max_age);
            let cut = tokio::time::sleep(cut_at);
            tokio::pin!(aged, cut);
            let mut closing = false;
            let ended = loop {
                tokio::select! {
                    ended = connection.as_mut() => break ended,
                    () = stopped.cancelled(), if !closing => {
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    () = &mut aged, if !closing => {
                        tracing::debug!("a connection reached its age; closing it after its request");
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    () = &mut cut => {
                        tracing::debug!("a connection outlived its age and the allowance; cut");
                        break Ok(());
                    }
                    () = slot.cut.cancelled() => {
                        tracing::debug!("cut a connection waiting for a request head, to make room for a new one");
                        break Ok(());
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "a connection ended with an error");
            }
            // The permit and the slot go when this task ends, after the connection.
        });
    }
    close_all.cancel();
    tasks.close();
    tasks
}

/// The connections waiting for a request head — new, or idle between requests — that have read
/// all that came, each with when it began to wait and what cuts it: the one that has waited
/// longest makes room.
#[derive(Default)]
struct Waiting {
    since: Mutex<HashMap<u64, (Instant, CancellationToken)>>,
    /// Woken when a connection begins to wait: it may be cut to make room.
    began: Notify,
}

impl Waiting {
    fn since(&self) -> MutexGuard<'_, HashMap<u64, (Instant, CancellationToken)>> {
        self.since.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A permit for a connection just accepted: a free one, else that of the connection that
    /// has waited longest for a head, which is cut. While every connection is in a request,
    /// waits for one to end or to wait again.
    async fn make_room(&self, permits: &Arc<Semaphore>) -> OwnedSemaphorePermit {
        loop {
            let began = self.began.notified();
            tokio::pin!(began);
            // Registered before the look, so that a connection that begins to wait in between
            // still wakes it.
            began.as_mut().enable();
            if let Ok(permit) = Arc::clone(permits).try_acquire_owned() {
                return permit;
            }
            let longest = self
                .since()
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(id, _)| *id);
            if let Some((_, cut)) = longest.and_then(|id| self.since().remove(&id)) {
                cut.cancel();
                // Its task ends at once, and gives its permit back.
                return (Arc::clone(permits).acquire_owned().await).expect("never closed");
            }
            tokio::select! {
                permit = Arc::clone(permits).acquire_owned() => return permit.expect("never closed"),
                () = began => {}
            }
        }
    }
}

/// A connection's slot among those [`Waiting`]: in it from its first read that finds nothing
/// and between requests, out of it during each; out for good when the last hold on it goes.
struct Slot {
    id: u64,
    waiting: Arc<Waiting>,
    /// Whether a request is under way: from its head until hyper has taken the whole answer.
    in_request: AtomicBool,
    /// Cancelled when the connection is cut to make room.
    cut: CancellationToken,
}

impl Slot {
    fn new(id: u64, waiting: &Arc<Waiting>) -> Arc<Slot> {
        Arc::new(Slot {
            id,
            waiting: Arc::clone(waiting),
            in_request: AtomicBool::new(false),
            cut: CancellationToken::new(),
        })
    }

    /// A request's head has come: out of [`Waiting`] until it has been answered.
    fn begin_request(&self) {
        self.in_request.store(true, Ordering::Relaxed);
        self.waiting.since().remove(&self.id);
    }

    /// hyper has taken the whole answer: the connection waits for its next head from now.
    fn end_request(&self) {
        self.in_request.store(false, Ordering::Relaxed);
        self.idle();
    }

    /// Unless a request is under way (or it has been cut), the connection waits for a head
    /// from now, if it did not already.
    fn idle(&self) {
        if self.in_request.load(Ordering::Relaxed) || self.cut.is_cancelled() {
            return;
        }
        let mut since = self.waiting.since();
        if since.contains_key(&self.id) {
            return;
        }
        since.insert(self.id, (Instant::now(), self.cut.clone()));
        drop(since);
        self.waiting.began.notify_waiters();
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.waiting.since().remove(&self.id);
    }
}

/// A served connection's stream, which tells its [`Slot`] when a read finds nothing more to
/// read: a new connection may be cut for room only from then. (Entered at its acceptance
/// instead, a delivery could be cut with its head unread when, on a loaded machine, the accept
/// loop runs again before the new connection's task.)
struct Served {
    io: Pin<Box<TimeoutStream<TcpStream>>>,
    slot: Arc<Slot>,
}

impl AsyncRead for Served {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let read = this.io.as_mut().poll_read(cx, buf);
        if read.is_pending() {
            this.slot.idle();
        }
        read
    }
}

impl AsyncWrite for Served {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().io.as_mut().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().io.as_mut().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_mut().io.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_mut().io.as_mut().poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::config::Config;

    fn config(text: &str) -> Config {
        Config::parse(text, Path::new("/etc/rowbranch/rowbranch.toml"), &|_| None).unwrap()
    }

    #[test]
    fn a_connection_lives_six_read_timeouts_and_may_then_finish_its_request() {
        let settings = &config(crate::config::TEST_LOCAL_CONFIG).webhook;
        // Asked to close at 60 s, then 30.8 s more for the request under way.
        let (max_age, cut_at) = lifetime(settings);
        assert_eq!(max_age, Duration::from_secs(60));
        assert_eq!(cut_at - max_age, Duration::from_millis(30_800));
    }

    /// Whether `future` is still pending when polled once.
    fn pending<F: Future + Unpin>(future: &mut F) -> bool {
        let mut context = Context::from_waker(std::task::Waker::noop());
        Pin::new(future).poll(&mut context).is_pending()
    }

    /// A connection's slot, with its permit given back once it is cut, as its task does.
    async fn held(waiting: &Arc<Waiting>, permits: &Arc<Semaphore>) -> Arc<Slot> {
        let permit = waiting.make_room(permits).await;
        let slot = Slot::new(1, waiting);
        let cut = slot.cut.clone();
        tokio::spawn(async move {
            cut.cancelled().await;
            drop(permit);
        });
        slot
    }

    #[tokio::test]
    async fn a_connection_is_cut_for_room_only_once_it_has_read_all_that_came() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        // Its sender has sent the start of a head before the connection is accepted.
        let mut sender = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        sender
            .write_all(b"POST /webhook HTTP/1.1\r\n")
            .await
            .unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let (permits, waiting) = (Arc::new(Semaphore::new(1)), Arc::new(Waiting::default()));
        let slot = held(&waiting, &permits).await;
        let mut served = Served {
            io: Box::pin(TimeoutStream::new(stream)),
            slot: Arc::clone(&slot),
        };
        let newcomer = waiting.make_room(&permits);
        tokio::pin!(newcomer);
        // Its task has not read yet: a newcomer waits.
        assert!(pending(&mut newcomer));
        assert!(!slot.cut.is_cancelled());
        // A read that finds the start of the head: it still waits.
        let mut buf = [0u8; 64];
        assert!(served.read(&mut buf).await.unwrap() > 0);
        assert!(pending(&mut newcomer));
        assert!(!slot.cut.is_cancelled());
        // All that came is read and no more comes: the newcomer takes its place.
        while tokio::time::timeout(Duration::from_millis(100), served.read(&mut buf))
            .await
            .is_ok()
        {}
        let _newcomers_permit = tokio::time::timeout(Duration::from_secs(10), newcomer)
            .await
            .expect("the newcomer was not given a place");
        assert!(slot.cut.is_cancelled());
    }

    #[tokio::test]
    async fn a_connection_in_a_request_is_not_cut_for_room() {
        let (permits, waiting) = (Arc::new(Semaphore::new(1)), Arc::new(Waiting::default()));
        let slot = held(&waiting, &permits).await;
        slot.idle();
        slot.begin_request();
        // A read that finds nothing more of the body does not make it wait for a head.
        slot.idle();
        let newcomer = waiting.make_room(&permits);
        tokio::pin!(newcomer);
        assert!(pending(&mut newcomer));
        assert!(!slot.cut.is_cancelled());
        // Answered: now it waits for its next head, and may be cut.
        slot.end_request();
        let _newcomers_permit = tokio::time::timeout(Duration::from_secs(10), newcomer)
            .await
            .expect("the newcomer was not given a place");
        assert!(slot.cut.is_cancelled());
    }

    /// A server's end of a pipe whose writes fail once they make no progress for `timeout`,
    /// as a served connection's do.
    fn with_write_timeout(
        server: tokio::io::DuplexStream,
        timeout: Duration,
    ) -> std::pin::Pin<Box<TimeoutStream<tokio::io::DuplexStream>>> {
        let mut server = TimeoutStream::new(server);
        server.set_write_timeout(Some(timeout));
        Box::pin(server)
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_makes_no_progress_for_the_timeout_fails() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut server = with_write_timeout(server, Duration::from_secs(10));
        let block = vec![b'x'; 4096];
        // The peer reads a little every 9 s: each time the clock starts again.
        let start = Instant::now();
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 512];
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(9)).await;
                client.read_exact(&mut buf).await.unwrap();
            }
            // Then it reads no more, and keeps its end open.
            client
        });
        let error = loop {
            if let Err(e) = server.write_all(&block).await {
                break e;
            }
        };
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        // Three reads 9 s apart, then 10 s without progress.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(37) && took < Duration::from_secs(38),
            "{took:?}"
        );
        drop(reader.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn writes_that_never_wait_never_time_out() {
        let (server, mut client) = tokio::io::duplex(1 << 16);
        let mut server = with_write_timeout(server, Duration::from_millis(100));
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            server.write_all(b"an answer").await.unwrap();
            server.flush().await.unwrap();
            let mut buf = [0u8; 9];
            client.read_exact(&mut buf).await.unwrap();
        }
    }
}
