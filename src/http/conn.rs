//! Accepting and serving connections: at most the connection cap open at once (more wait in the
//! listen backlog), each served by hyper's HTTP/1 with a timer, so that a sender who is slow to
//! send its headers — or idle between requests — is cut after `read_timeout_ms`.
//! (`axum::serve` sets no timer, so hyper's header timeout would be off.)

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::WebhookSettings;

/// File descriptors kept for what is not a served connection: GitHub's connections (up to
/// `max_concurrent_requests` per installation), git and `on_dispatch` pipes, PostgreSQL, logs.
const FD_RESERVE: u64 = 64;
/// The fewest connections served, however low the open-files limit.
const MIN_CONNECTIONS: usize = 8;

/// How many connections are served at once: `max_connections`, or fewer when the process's
/// open-files limit less the reserve is lower. Logged, since a low limit is easy to miss.
pub fn cap(max_connections: usize) -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let cap = match limit {
        Some(files) => max_connections.min(files.saturating_sub(FD_RESERVE) as usize),
        None => max_connections,
    }
    .max(MIN_CONNECTIONS);
    tracing::info!(
        connections = cap,
        max_connections,
        open_files_limit = limit.map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
        reserve = FD_RESERVE,
        "serving at most this many connections at once"
    );
    cap
}

/// Serves connections until `stop`; returns the open ones, to be shut down gracefully (idle
/// ones close at once, in-flight requests finish).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &WebhookSettings,
    stop: impl Future<Output = ()>,
) -> GracefulShutdown {
    let permits = std::sync::Arc::new(Semaphore::new(cap(settings.max_connections)));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Since hyper 1.6 this also cuts a keep-alive connection idle for that long.
        .header_read_timeout(settings.read_timeout)
        // A sender that writes its whole request and closes its side still gets its row run:
        // without this, hyper drops the request when it reads the end of the stream.
        .half_close(true);
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            permit = std::sync::Arc::clone(&permits).acquire_owned() => {
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
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a connection ended with an error");
            }
            drop(permit);
        });
    }
    graceful
}

/// Errors of one connection that went away while being accepted: nothing to wait out.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
