//! Requests answered before their body was read: the connection closes.
//!
//! Many answers come before the body is read: a refused signature or key,
//! an invalid part number, `503 SlowDown` from the lanes. SDKs send
//! `PutObject` and `UploadPart` with `Expect: 100-continue`; a client that
//! gets a final answer instead of `100 Continue` keeps its body and may
//! reuse the connection for its next request. hyper still expects the
//! body's `Content-Length` bytes. Once it notices that the body was
//! dropped, it reads whatever bytes have arrived, "in case a tiny body was
//! included". If the client's next request is on the wire by then, its
//! first bytes are taken for the old body. `PUT` then parses as a request
//! with method `UT`, whose signature cannot match.
//!
//! RFC 9110 (section 10.1.1) asks a server that answers before reading the
//! whole content to say whether it will close the connection. laneway
//! closes it: every HTTP/1 answer to a request whose body was not read to its end
//! carries `Connection: close`. hyper then ends the connection after the
//! answer, and the client opens a new one for its next request. HTTP/2
//! frames each request on its own stream and needs nothing.

use bytes::Bytes;
use http::{HeaderValue, Request, Version};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

/// A request body that records whether it was read to its end.
pub struct Watched {
    inner: Incoming,
    ended: Arc<AtomicBool>,
}

/// What is left of a request once its body is handed on: whether that
/// body ended, and which HTTP version the request spoke.
pub struct BodyWatch {
    ended: Arc<AtomicBool>,
    version: Version,
}

/// `req` with its body watched, and the watch.
pub fn watch(req: Request<Incoming>) -> (Request<Watched>, BodyWatch) {
    let ended = Arc::new(AtomicBool::new(req.body().is_end_stream()));
    let watch = BodyWatch {
        ended: Arc::clone(&ended),
        version: req.version(),
    };
    (req.map(|inner| Watched { inner, ended }), watch)
}

impl BodyWatch {
    /// Whether the request's body was read to its end (an empty body
    /// always was).
    pub fn body_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Mark `headers` to close the connection after this answer when the
    /// body was left unread on an HTTP/1 connection.
    pub fn close_if_unread(&self, headers: &mut http::HeaderMap) {
        let http1 = matches!(self.version, Version::HTTP_10 | Version::HTTP_11);
        if http1 && !self.body_ended() {
            headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
}

impl Body for Watched {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            Poll::Ready(Some(Err(_))) | Poll::Pending => false,
        };
        if ended {
            this.ended.store(true, Ordering::Release);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(ended: bool, version: Version) -> BodyWatch {
        BodyWatch {
            ended: Arc::new(AtomicBool::new(ended)),
            version,
        }
    }

    fn closes(w: &BodyWatch) -> bool {
        let mut headers = http::HeaderMap::new();
        w.close_if_unread(&mut headers);
        headers
            .get(http::header::CONNECTION)
            .is_some_and(|v| v == "close")
    }

    #[test]
    fn unread_http1_bodies_close_the_connection() {
        assert!(closes(&watch(false, Version::HTTP_11)));
        assert!(closes(&watch(false, Version::HTTP_10)));
    }

    #[test]
    fn read_bodies_and_http2_keep_it() {
        assert!(!closes(&watch(true, Version::HTTP_11)));
        assert!(!closes(&watch(false, Version::HTTP_2)));
    }
}
