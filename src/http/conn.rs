//! Accepting and serving connections: at most the connection cap open at once, each served by
//! hyper's HTTP/1 with a timer, so that a sender who is slow to send its headers — or idle
//! between requests — is cut after `read_timeout_ms`. (`axum::serve` sets no timer, so hyper's
//! header timeout would be off.)
//!
//! A full table makes room: the connections are kept in a [`Table`] that knows which of them
//! are waiting for a request head (a new connection, or one idle between requests) and since
//! when, and a connection accepted when the cap is reached takes the place of the one that has
//! waited longest. A request under way — its body being read, its answer being decided or
//! written — is never cut for room, so clients that never finish a request head cannot hold
//! every slot, while one that sends slowly but sends keeps its own. Only when every connection
//! is in a request does a new one wait, in the listen backlog, for one to end.
//!
//! Two more bounds cover what the header timeout does not see. A write that makes no progress
//! for `read_timeout_ms` fails (a client that sends requests and never reads its answers would
//! otherwise keep hyper waiting to write, with no timer, forever). And a connection lives at
//! most [`max_age`]: then it is asked to close after the request under way, and it is cut if it
//! has not closed within [`closing_allowance`] more (a client that asks for `/healthz` just
//! within every timeout would otherwise keep its slot forever).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use futures_util::future::BoxFuture;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::WebhookSettings;

/// hyper's buffers per connection, at most (its default is about 400 KiB): a request head
/// larger than this is refused, and a body is read through it in pieces no larger.
const MAX_BUF_SIZE: usize = 64 * 1024;
/// A connection's life, in read timeouts (1 minute by default).
const MAX_AGE_IN_READ_TIMEOUTS: u32 = 6;

/// How many connections to serve at once, and what that number was made from (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connections {
    /// Served at once, at most: `max_connections`, or the open-files limit less the reserve.
    pub cap: usize,
    /// The process's open-files limit; `None` when unlimited.
    pub open_files_limit: Option<u64>,
    /// File descriptors kept back from that limit for what is not a served connection.
    pub reserve: u64,
}

/// How long a connection is served before it is asked to close.
pub fn max_age(settings: &WebhookSettings) -> Duration {
    settings.read_timeout * MAX_AGE_IN_READ_TIMEOUTS
}

/// How long a connection asked to close at [`max_age`] still gets before it is cut: what the
/// request under way may take at most — its headers, its body and the writing of its answer
/// within `read_timeout_ms` each, and the answer within `respond_within_ms`.
pub fn closing_allowance(settings: &WebhookSettings) -> Duration {
    settings.read_timeout * 3 + settings.respond_within
}

/// The connections being served, to be shut down gracefully.
pub struct Open {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Open {
    /// Asks every connection to close (idle ones close at once, in-flight requests finish)
    /// and waits until they have.
    pub async fn shutdown(self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// Serves connections until `stop`; returns the open ones, to be shut down gracefully.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &WebhookSettings,
    connections: Connections,
    stop: impl Future<Output = ()>,
) -> Open {
    let Connections {
        cap,
        open_files_limit: limit,
        reserve,
    } = connections;
    tracing::info!(
        connections = cap,
        max_connections = settings.max_connections,
        open_files_limit = limit.map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
        reserve,
        "serving at most this many connections at once"
    );
    let table = Table::new(cap);
    let open = Open {
        stop: CancellationToken::new(),
        tasks: TaskTracker::new(),
    };
    let (read_timeout, max_age, allowance) = (
        settings.read_timeout,
        max_age(settings),
        closing_allowance(settings),
    );
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Since hyper 1.6 this also cuts a keep-alive connection idle for that long.
        .header_read_timeout(read_timeout)
        .max_buf_size(MAX_BUF_SIZE)
        // A sender that writes its whole request and closes its side still gets its row run:
        // without this, hyper drops the request when it reads the end of the stream.
        .half_close(true);
    tokio::pin!(stop);
    'accepting: loop {
        // Nothing is accepted while every connection is in a request: the backlog holds them.
        tokio::select! {
            () = table.room() => {}
            () = &mut stop => break,
        }
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if !is_connection_error(&e) {
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
        // The one that was to make room may have begun a request since: then this one waits
        // for the next room, accepted.
        let member = loop {
            if let Some(member) = table.admit() {
                break Arc::new(member);
            }
            tokio::select! {
                () = table.room() => {}
                () = &mut stop => break 'accepting,
            }
        };
        let service = Tracked {
            inner: TowerToHyperService::new(router.clone()),
            member: Arc::clone(&member),
        };
        let io = TokioIo::new(WriteDeadline::new(stream, read_timeout));
        let connection = builder.serve_connection(io, service);
        let stopped = open.stop.clone();
        open.tasks.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let aged = tokio::time::sleep(max_age);
            let cut = tokio::time::sleep(max_age + allowance);
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
                    () = member.evicted.cancelled() => {
                        tracing::debug!("cut a connection waiting for a request head, to make room for a new one");
                        break Ok(());
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "a connection ended with an error");
            }
            // Its place is given up when the last hold on `member` goes: this task's, and its
            // service's, which goes with the connection at the end of this block.
        });
        // The new connection's task runs next (a task spawned from a worker takes its next
        // turn), and reads the head its sender has sent, before another is accepted: in a flood
        // of accepts, a delivery's connection is in its request before it could be the one
        // that has waited longest.
        tokio::task::yield_now().await;
    }
    open
}

/// The connections served: for each, whether it is waiting for a request head and since
/// when, so that a connection accepted at the cap takes the place of the one that has waited
/// longest.
struct Table {
    cap: usize,
    state: Mutex<Slots>,
    /// Woken when a connection ends, or begins to wait for a request head: there may be room.
    room: Notify,
}

#[derive(Default)]
struct Slots {
    next_id: u64,
    open: HashMap<u64, Slot>,
}

struct Slot {
    /// Requests under way on it: from the service's call until hyper has written the answer.
    requests: usize,
    /// Since when it has waited for a request head, when `requests` is 0: its acceptance, or
    /// the end of its last answer.
    waiting_since: Instant,
    evicted: CancellationToken,
}

impl Slots {
    /// The connection that has waited longest for a request head, if any waits.
    fn longest_waiting(&self) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, slot)| slot.requests == 0)
            .min_by_key(|(_, slot)| slot.waiting_since)
            .map(|(id, _)| *id)
    }
}

impl Table {
    fn new(cap: usize) -> Arc<Table> {
        Arc::new(Table {
            cap,
            state: Mutex::new(Slots::default()),
            room: Notify::new(),
        })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.state.lock().expect("connection table lock poisoned")
    }

    /// Whether a new connection would be admitted now: below the cap, or one to make room.
    fn has_room(&self) -> bool {
        let slots = self.slots();
        slots.open.len() < self.cap || slots.longest_waiting().is_some()
    }

    /// Resolves when a new connection would be admitted.
    async fn room(&self) {
        loop {
            let changed = self.room.notified();
            tokio::pin!(changed);
            // Registered before the look, so that a change in between still wakes it.
            changed.as_mut().enable();
            if self.has_room() {
                return;
            }
            changed.await;
        }
    }

    /// A place for a new connection, waiting for its first request head: a free one, or that
    /// of the connection that has waited longest for a head, which is cut. `None` when the
    /// table is full of requests under way.
    fn admit(self: &Arc<Self>) -> Option<Member> {
        let mut slots = self.slots();
        if slots.open.len() >= self.cap {
            let id = slots.longest_waiting()?;
            let slot = slots.open.remove(&id).expect("the longest waiting is open");
            slot.evicted.cancel();
        }
        let id = slots.next_id;
        slots.next_id += 1;
        let evicted = CancellationToken::new();
        slots.open.insert(
            id,
            Slot {
                requests: 0,
                waiting_since: Instant::now(),
                evicted: evicted.clone(),
            },
        );
        Some(Member {
            table: Arc::clone(self),
            id,
            evicted,
        })
    }
}

/// A connection's place in the [`Table`]; given up when dropped.
struct Member {
    table: Arc<Table>,
    id: u64,
    /// Cancelled when the place is given to a new connection: the connection is then cut.
    evicted: CancellationToken,
}

impl Member {
    /// A request's head has arrived: until the guard is dropped, the connection is in a
    /// request and is not cut for room.
    fn begin_request(self: &Arc<Self>) -> InRequest {
        if let Some(slot) = self.table.slots().open.get_mut(&self.id) {
            slot.requests += 1;
        }
        InRequest(Arc::clone(self))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Ok(mut slots) = self.table.state.lock() {
            slots.open.remove(&self.id);
        }
        self.table.room.notify_waiters();
    }
}

/// Held from a request's head to the end of its answer.
struct InRequest(Arc<Member>);

impl Drop for InRequest {
    fn drop(&mut self) {
        let table = &self.0.table;
        let waiting = match table.state.lock() {
            Ok(mut slots) => match slots.open.get_mut(&self.0.id) {
                Some(slot) => {
                    slot.requests = slot.requests.saturating_sub(1);
                    if slot.requests == 0 {
                        slot.waiting_since = Instant::now();
                    }
                    slot.requests == 0
                }
                None => false,
            },
            Err(_) => false,
        };
        if waiting {
            table.room.notify_waiters();
        }
    }
}

/// The router as hyper calls it, marking the connection in a request from each request's head
/// until hyper has taken the whole answer (it drops the answer's body then).
struct Tracked<S> {
    inner: S,
    member: Arc<Member>,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Tracked<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Answering<B>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let guard = self.member.begin_request();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| Answering {
                body,
                _guard: guard,
            }))
        })
    }
}

/// An answer's body, which keeps its connection in a request until it is dropped.
struct Answering<B> {
    body: B,
    /// Dropped with the body: the connection waits for its next request head from then.
    _guard: InRequest,
}

impl<B: Body + Unpin> Body for Answering<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Errors of one connection that went away while being accepted: nothing to wait out.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// A stream whose writes fail with [`io::ErrorKind::TimedOut`] once a write has made no
/// progress for `timeout`: the clock starts when a write has to wait, and stops at each byte
/// written. Reads are untouched (hyper's header timeout and the body's deadline bound them).
struct WriteDeadline<S> {
    inner: S,
    timeout: Duration,
    /// Armed while a write waits.
    sleep: Pin<Box<Sleep>>,
    waiting: bool,
}

impl<S> WriteDeadline<S> {
    fn new(inner: S, timeout: Duration) -> WriteDeadline<S> {
        WriteDeadline {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            waiting: false,
        }
    }

    /// What a write that returned `polled` means: progress disarms the clock; waiting arms it
    /// (once) and fails when it has run out.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                self.waiting = false;
                Poll::Ready(result)
            }
            Poll::Pending => {
                if !self.waiting {
                    self.waiting = true;
                    let deadline = Instant::now() + self.timeout;
                    self.sleep.as_mut().reset(deadline);
                }
                match self.sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the peer read nothing of the answer for the read timeout",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, polled)
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
        assert_eq!(max_age(settings), Duration::from_secs(60));
        assert_eq!(closing_allowance(settings), Duration::from_millis(30_800));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_makes_no_progress_for_the_timeout_fails() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut server = WriteDeadline::new(server, Duration::from_secs(10));
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
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
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
        let mut server = WriteDeadline::new(server, Duration::from_millis(100));
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            server.write_all(b"an answer").await.unwrap();
            server.flush().await.unwrap();
            let mut buf = [0u8; 9];
            client.read_exact(&mut buf).await.unwrap();
        }
    }
}
