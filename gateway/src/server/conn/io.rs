//! [`Tracked`]: the socket of a connection, telling its [`ConnState`]
//! when bytes arrive (a next request header has begun) and since when a
//! write has been blocked (the client does not read; hyper waits on the
//! socket and polls no response body meanwhile, so only the socket can
//! tell). It sits under TLS, so it sees the raw socket.

use super::ConnState;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A socket whose progress is reported to its connection's state.
pub struct Tracked<S> {
    inner: S,
    conn: Arc<ConnState>,
}

impl<S> Tracked<S> {
    /// Wrap `inner`, reporting to `conn`.
    pub fn new(inner: S, conn: Arc<ConnState>) -> Tracked<S> {
        Tracked { inner, conn }
    }

    fn wrote<T>(&self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.conn.write_blocked(polled.is_pending());
        polled
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.read_some();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.wrote(polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.wrote(polled)
    }
}
