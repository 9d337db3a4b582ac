//! Accepting and serving connections: at most the connection cap open at once (more wait in the
//! listen backlog), each served by hyper's HTTP/1 with a timer, so that a sender who is slow to
//! send its headers — or idle between requests — is cut after `read_timeout_ms`.
//! (`axum::serve` sets no timer, so hyper's header timeout would be off.)
//!
//! Two more bounds cover what the header timeout does not see. A write that makes no progress
//! for `read_timeout_ms` fails (a client that sends requests and never reads its answers would
//! otherwise keep hyper waiting to write, with no timer, forever). And a connection lives at
//! most [`max_age`]: then it is asked to close after the request under way, and it is cut if it
//! has not closed within [`closing_allowance`] more (a client that asks for `/healthz` just
//! within every timeout would otherwise keep its slot forever).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ForgeSettings, WebhookSettings};

/// File descriptors kept for the process itself whatever the config: the standard streams,
/// the listener, the runtime's own, the log, DNS lookups, a git or `on_dispatch` process or two.
const BASE_RESERVE: u64 = 32;
/// For the local forge, which runs git (two pipes a command) and `on_dispatch` per row.
const LOCAL_FORGE_RESERVE: u64 = 16;
/// For each job that holds a PostgreSQL connection (the queue's consumer, the scheduled
/// sweep): its connection, and the next one while it reconnects.
const DATABASE_RESERVE: u64 = 2;
/// hyper's buffers per connection, at most (its default is about 400 KiB): a request head
/// larger than this is refused, and a body is read through it in pieces no larger.
const MAX_BUF_SIZE: usize = 64 * 1024;
/// A connection's life, in read timeouts (1 minute by default).
const MAX_AGE_IN_READ_TIMEOUTS: u32 = 6;

/// File descriptors kept back from the open-files limit for what is not a served connection:
/// [`BASE_RESERVE`]; the forge's connections (GitHub: `max_concurrent_requests` for each
/// installation — at most one per account owning a route's repository — and as many again for
/// the App's own requests); and [`DATABASE_RESERVE`] for each job that reads the database.
pub fn reserve(config: &Config) -> u64 {
    let forge = match &config.forge {
        ForgeSettings::Github(github) => {
            let owners: std::collections::BTreeSet<String> = config
                .routes
                .iter()
                .map(|route| route.repo.owner().to_ascii_lowercase())
                .collect();
            (github.max_concurrent_requests as u64).saturating_mul(owners.len() as u64 + 1)
        }
        ForgeSettings::Local(_) => LOCAL_FORGE_RESERVE,
    };
    let database_jobs = match config.database_url {
        Some(_) => {
            u64::from(config.reads_the_queue()) + u64::from(config.reconcile.every.is_some())
        }
        None => 0,
    };
    BASE_RESERVE
        .saturating_add(forge)
        .saturating_add(database_jobs * DATABASE_RESERVE)
}

/// How many connections are served at once: `max_connections`, or the open-files limit less
/// the reserve when that is lower. An error when the limit leaves no room at all.
pub fn cap(max_connections: usize, reserve: u64, open_files: Option<u64>) -> Result<usize, String> {
    let Some(limit) = open_files else {
        return Ok(max_connections);
    };
    let room = usize::try_from(limit.saturating_sub(reserve)).unwrap_or(usize::MAX);
    if room == 0 {
        return Err(format!(
            "the open-files limit ({limit}) leaves no room for connections beyond the {reserve} \
             file descriptors kept for GitHub, git and the database: raise it (`ulimit -n`, \
             LimitNOFILE=) or lower [github] max_concurrent_requests"
        ));
    }
    Ok(max_connections.min(room))
}

/// The process's open-files limit; `None` when unlimited.
fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
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

/// Serves connections until `stop`; returns the open ones, to be shut down gracefully. An
/// error, before accepting anything, when the open-files limit leaves no room.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: &Config,
    stop: impl Future<Output = ()>,
) -> io::Result<Open> {
    let settings = &config.webhook;
    let reserve = reserve(config);
    let limit = open_files_limit();
    let cap = cap(settings.max_connections, reserve, limit).map_err(io::Error::other)?;
    tracing::info!(
        connections = cap,
        max_connections = settings.max_connections,
        open_files_limit = limit.map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
        reserve,
        "serving at most this many connections at once"
    );
    let permits = Arc::new(Semaphore::new(cap));
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
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => {
                permit.expect("the connection bound is never closed")
            }
            () = &mut stop => break,
        };
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
        let service = TowerToHyperService::new(router.clone());
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
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "a connection ended with an error");
            }
            drop(permit);
        });
    }
    Ok(open)
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

    fn config(text: &str, env: &[(&str, &str)]) -> Config {
        let env = |key: &str| {
            env.iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        };
        Config::parse(text, Path::new("/etc/rowbranch/rowbranch.toml"), &env).unwrap()
    }

    fn github(routes: &[&str], extra: &str) -> String {
        let mut text = format!("[github]\napp_id = 1\nprivate_key_path = \"app.pem\"\n{extra}\n");
        for (n, repo) in routes.iter().enumerate() {
            text.push_str(&format!(
                "[[routes]]\ntable = \"t{n}\"\nrepo = \"{repo}\"\nbranch_prefix = \"b\"\nevent_type = \"e\"\n"
            ));
        }
        text
    }

    #[test]
    fn the_reserve_grows_with_the_concurrent_requests_and_the_installations() {
        // One installation and the App's own requests, 16 each: 32 + 32.
        assert_eq!(reserve(&config(&github(&["acme/app"], ""), &[])), 64);
        // Three accounts (two repositories of acme share its installation): 32 + 16 × 4.
        let three = github(&["acme/app", "acme/web", "Globex/api", "initech/ops"], "");
        assert_eq!(reserve(&config(&three, &[])), 96);
        let wide = github(&["acme/app", "globex/api"], "max_concurrent_requests = 50");
        assert_eq!(reserve(&config(&wide, &[])), 32 + 50 * 3);
    }

    #[test]
    fn the_reserve_counts_the_jobs_that_hold_a_database_connection() {
        let url = [("DATABASE_URL", "postgres://u@db/x")];
        let sweeping = github(&["acme/app"], "");
        let sweeping = format!("reconcile_every = \"5m\"\n{sweeping}");
        assert_eq!(reserve(&config(&sweeping, &url)), 64 + 2);
        // Without DATABASE_URL the sweep does not run.
        assert_eq!(reserve(&config(&sweeping, &[])), 64);
        let local = crate::config::TEST_LOCAL_CONFIG;
        assert_eq!(reserve(&config(local, &url)), 32 + 16);
    }

    #[test]
    fn the_cap_never_exceeds_the_limit_less_the_reserve() {
        assert_eq!(cap(512, 64, None), Ok(512));
        assert_eq!(cap(512, 64, Some(1 << 20)), Ok(512));
        assert_eq!(cap(512, 64, Some(256)), Ok(192));
        assert_eq!(cap(512, 96, Some(100)), Ok(4));
        assert_eq!(cap(3, 64, Some(100)), Ok(3));
        let none = cap(512, 96, Some(96)).unwrap_err();
        assert!(none.contains("(96)") && none.contains("ulimit"), "{none}");
        assert!(cap(512, 96, Some(20)).is_err());
    }

    #[test]
    fn a_connection_lives_six_read_timeouts_and_may_then_finish_its_request() {
        let settings = &config(crate::config::TEST_LOCAL_CONFIG, &[]).webhook;
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
