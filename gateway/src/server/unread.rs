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
//!
//! The watched body also ends a stalled upload: when the client sends no
//! byte for the stall timeout (`--stall-timeout-secs`) while the body is
//! being read, the body fails ([`BodyStalled`]), the handler stores
//! nothing and the answer closes the connection (the body was not read to
//! its end). The clock runs only while the server waits for the client: a
//! body nobody is reading (a request waiting for the lanes) is not
//! stalled. And it can replay bytes read ahead of s3s (a form upload's
//! fields, read by [`crate::s3::post::form`] to check its signature first).

use bytes::Bytes;
use http::{HeaderValue, Request, Version};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// The error type of request bodies (s3s's).
pub type StdError = Box<dyn std::error::Error + Send + Sync>;

/// A request body whose client sent nothing for the stall timeout.
#[derive(Debug, thiserror::Error)]
#[error("the client sent no body bytes for {0:?}")]
pub struct BodyStalled(pub Duration);

/// A request body that records whether it was read to its end, fails when
/// the client stalls, and first yields any bytes read ahead of it.
pub struct Watched {
    inner: Incoming,
    ended: Arc<AtomicBool>,
    /// Bytes read ahead, yielded first, one frame each.
    replay: VecDeque<Bytes>,
    stall: Duration,
    /// Armed when a read finds no data; disarmed when data comes.
    deadline: Option<Pin<Box<Sleep>>>,
}

/// What is left of a request once its body is handed on: whether that
/// body ended, and which HTTP version the request spoke.
pub struct BodyWatch {
    ended: Arc<AtomicBool>,
    version: Version,
}

/// `req` with its body watched (failing after `stall` without a byte
/// while it is read), and the watch.
pub fn watch(req: Request<Incoming>, stall: Duration) -> (Request<Watched>, BodyWatch) {
    let ended = Arc::new(AtomicBool::new(req.body().is_end_stream()));
    let watch = BodyWatch {
        ended: Arc::clone(&ended),
        version: req.version(),
    };
    let body = |inner| Watched {
        inner,
        ended,
        replay: VecDeque::new(),
        stall,
        deadline: None,
    };
    (req.map(body), watch)
}

impl Watched {
    /// Yield `bytes` (read ahead from this body) before the rest, after
    /// any replayed before, as a frame of its own.
    pub fn replay(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.replay.push_back(bytes);
        }
    }

    /// The next frame from the client, failing after the stall timeout
    /// without one.
    fn poll_client(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(polled) => {
                self.deadline = None;
                Poll::Ready(polled.map(|r| r.map_err(StdError::from)))
            }
            Poll::Pending => {
                let stall = self.stall;
                let deadline = self
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                if deadline.as_mut().poll(cx).is_ready() {
                    self.deadline = None;
                    return Poll::Ready(Some(Err(Box::new(BodyStalled(stall)))));
                }
                Poll::Pending
            }
        }
    }
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
    type Error = StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
        let this = &mut *self;
        if let Some(bytes) = this.replay.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        let polled = this.poll_client(cx);
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
        self.replay.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let hint = self.inner.size_hint();
        if self.replay.is_empty() {
            return hint;
        }
        let replayed: usize = self.replay.iter().map(Bytes::len).sum();
        let extra = u64::try_from(replayed).unwrap_or(u64::MAX);
        let mut out = SizeHint::new();
        out.set_lower(hint.lower().saturating_add(extra));
        if let Some(upper) = hint.upper() {
            out.set_upper(upper.saturating_add(extra));
        }
        out
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
