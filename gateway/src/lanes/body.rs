//! [`PacedBody`]: a request or response body paced through the lanes,
//! counted into the metrics as it flows, as an `http_body::Body` that s3s
//! and hyper can carry.
//!
//! It keeps the inner body's size hint (minus the bytes already yielded)
//! so Content-Length handling and s3s's length checks see what they would
//! have seen without pacing.
//!
//! A large request body also carries the request's admission permit: the
//! permit covers s3s's and the handler's work up to the first read of the
//! body, and is dropped *before* the first paced chunk waits for its grant,
//! so a request never holds its base units while waiting for body units
//! (the hold-and-wait that `docs/qos.md` forbids). A small response body
//! carries the permit to its end instead ([`Finish::holding`]): it is
//! charged, not paced, so nothing waits while the permit is held. It is
//! carried as a [`Lease`], so a client that does not read the response
//! (hyper waiting on its socket, or an HTTP/2 window of 0) gives the
//! units back after the lanes' `max_hold` instead of holding them.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http_body::{Frame, SizeHint};
use laneway_qos::{Lease, Permit};
use parking_lot::Mutex;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::lanes::metrics::OpSeries;

/// s3s's body error type.
pub type StdError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed stream of body bytes.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, StdError>> + Send>>;

/// The admission permit of a request, shared by the layer and the body.
pub type HeldPermit = Arc<Mutex<Option<Permit>>>;

/// Which way a body flows (which byte counter it feeds).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Direction {
    /// Request body, client to store.
    In,
    /// Response body, store to client.
    Out,
}

/// Records a request's latency when its response body ends or is
/// dropped, and then gives back the admission permit it may carry.
pub struct Finish {
    series: Arc<OpSeries>,
    started: Instant,
    permit: Option<Lease>,
}

impl Finish {
    /// A finish of the request of `series` that arrived at `started`.
    pub fn new(series: Arc<OpSeries>, started: Instant) -> Finish {
        Finish {
            series,
            started,
            permit: None,
        }
    }

    /// Keeps `permit` until the response body is done, or the lease
    /// expires (the client is not reading).
    pub fn holding(mut self, permit: Option<Lease>) -> Finish {
        self.permit = permit;
        self
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.series.latency.observe(self.started.elapsed());
        drop(self.permit.take());
    }
}

/// A paced, counted body.
pub struct PacedBody {
    inner: ByteStream,
    remaining: SizeHint,
    release: Option<HeldPermit>,
    series: Arc<OpSeries>,
    direction: Direction,
    _finish: Option<Finish>,
}

impl PacedBody {
    /// Wraps `inner` (already paced), whose size hint was `hint`.
    pub fn new(
        inner: ByteStream,
        hint: SizeHint,
        series: Arc<OpSeries>,
        direction: Direction,
    ) -> PacedBody {
        PacedBody {
            inner,
            remaining: hint,
            release: None,
            series,
            direction,
            _finish: None,
        }
    }

    /// Drops `permit`'s content before the body is first read.
    pub fn releasing(mut self, permit: HeldPermit) -> PacedBody {
        self.release = Some(permit);
        self
    }

    /// Records the request's latency when this body is done.
    pub fn finishing(mut self, finish: Finish) -> PacedBody {
        self._finish = Some(finish);
        self
    }

    fn count(&mut self, n: usize) {
        let n64 = u64::try_from(n).unwrap_or(u64::MAX);
        match self.direction {
            Direction::In => self.series.add_bytes_in(n64),
            Direction::Out => self.series.add_bytes_out(n64),
        }
        self.remaining = shrink(&self.remaining, n64);
    }
}

/// `hint` after `n` more bytes were yielded.
fn shrink(hint: &SizeHint, n: u64) -> SizeHint {
    let lower = hint.lower().saturating_sub(n);
    let mut next = SizeHint::new();
    next.set_lower(lower);
    if let Some(upper) = hint.upper() {
        next.set_upper(upper.saturating_sub(n).max(lower));
    }
    next
}

impl http_body::Body for PacedBody {
    type Data = Bytes;
    type Error = StdError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
        let this = self.get_mut();
        if let Some(held) = this.release.take() {
            drop(held.lock().take());
        }
        match std::task::ready!(this.inner.poll_next_unpin(cx)) {
            Some(Ok(bytes)) => {
                this.count(bytes.len());
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => {
                this._finish = None;
                Poll::Ready(None)
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.remaining
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_hint_shrinks_as_bytes_flow() {
        let exact = SizeHint::with_exact(10);
        let s = shrink(&exact, 4);
        assert_eq!(s.exact(), Some(6));
        assert_eq!(shrink(&s, 100).exact(), Some(0));
        let open = shrink(&SizeHint::new(), 5);
        assert_eq!((open.lower(), open.upper()), (0, None));
    }

    #[tokio::test]
    async fn counts_bytes_and_releases_the_permit_on_first_read() {
        use http_body_util::BodyExt;
        let lanes = laneway_qos::Lanes::new(laneway_qos::LanesConfig::default());
        let permit = lanes.admit(&"t".into(), 10).await.expect("admitted");
        let held: HeldPermit = Arc::new(Mutex::new(Some(permit)));
        let series = Arc::new(OpSeries::default());
        let chunks = vec![
            Ok(Bytes::from_static(b"abc")),
            Ok(Bytes::from_static(b"de")),
        ];
        let inner: ByteStream = Box::pin(futures::stream::iter(chunks));
        let body = PacedBody::new(
            inner,
            SizeHint::with_exact(5),
            Arc::clone(&series),
            Direction::In,
        )
        .releasing(Arc::clone(&held));
        assert!(held.lock().is_some());
        let got = body.collect().await.expect("body").to_bytes();
        assert_eq!(got, Bytes::from_static(b"abcde"));
        assert!(held.lock().is_none(), "permit released");
        assert_eq!(lanes.snapshot().in_flight_units, 0);
    }
}
