//! [`ConnBody`]: a response body that holds its request's [`InFlight`]
//! place until hyper drops it, and tells the connection's watchdog when
//! it waits to be asked for its first or next frame: a body
//! hyper does not poll again for the stall timeout is one the client does
//! not take (an HTTP/1 socket it does not read, or a closed HTTP/2
//! flow-control window), and the connection is closed.

use super::InFlight;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A response body on a supervised connection.
pub struct ConnBody {
    inner: s3s::Body,
    flight: InFlight,
}

impl ConnBody {
    /// `inner`, holding `flight` until dropped. A body with bytes to send
    /// waits for hyper from the start: behind a closed HTTP/2 window hyper
    /// never polls it at all.
    pub fn new(inner: s3s::Body, flight: InFlight) -> ConnBody {
        if !inner.is_end_stream() {
            flight.yielded();
        }
        ConnBody { inner, flight }
    }
}

impl Body for ConnBody {
    type Data = Bytes;
    type Error = crate::server::unread::StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        this.flight.polled();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(Some(Ok(_)))) && !this.inner.is_end_stream() {
            this.flight.yielded();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
