//! A listener whose connections a handler can kill, so that a request can be applied and
//! then left without an answer (`Fault::DropAfterApply`).
//!
//! Each accepted `TcpStream` is wrapped with a shared "killed" flag. The flag reaches the
//! handler as axum `ConnectInfo`. Once it is set, every write on the connection fails and
//! every read sees end of file, so hyper gives up on the connection without writing the
//! response, drops the socket, and the client sees the connection close with no answer.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

pub(crate) struct KillableListener {
    inner: TcpListener,
}

impl KillableListener {
    pub fn new(inner: TcpListener) -> KillableListener {
        KillableListener { inner }
    }
}

impl Listener for KillableListener {
    type Io = KillableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (KillableStream, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    let stream = KillableStream {
                        inner: stream,
                        killed: Arc::new(AtomicBool::new(false)),
                    };
                    return (stream, addr);
                }
                // Out of file descriptors and the like: wait a little and go on.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

pub(crate) struct KillableStream {
    inner: TcpStream,
    killed: Arc<AtomicBool>,
}

impl KillableStream {
    fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }
}

fn killed_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "fake GitHub: connection dropped on purpose",
    )
}

impl AsyncRead for KillableStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.is_killed() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.is_killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.is_killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.is_killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The kill switch of one connection, handed to the handler as `ConnectInfo`.
#[derive(Clone, Debug)]
pub(crate) struct ConnKill(Arc<AtomicBool>);

impl ConnKill {
    pub fn kill(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Connected<IncomingStream<'_, KillableListener>> for ConnKill {
    fn connect_info(stream: IncomingStream<'_, KillableListener>) -> ConnKill {
        ConnKill(stream.io().killed.clone())
    }
}
