//! Request bodies: empty, one buffer, or generated chunk by chunk.
//!
//! A generated body lets the benchmarks PUT multi-GiB objects while holding
//! only one chunk at a time. The length is fixed up front (sent as
//! `content-length`); the body stops after exactly that many bytes and fails
//! the request if the generator runs dry early, so a short object is never
//! sent as if it were complete.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// Produces the next chunk of a generated body, given the byte offset it
/// starts at. An empty chunk before the declared length is an error.
pub type ChunkFn = Box<dyn FnMut(u64) -> Bytes + Send>;

/// The body of a client request.
pub struct ReqBody {
    kind: Kind,
}

enum Kind {
    Full(Option<Bytes>),
    Generated {
        offset: u64,
        len: u64,
        next: ChunkFn,
    },
}

impl ReqBody {
    /// A body with no bytes.
    pub fn empty() -> Self {
        Self::full(Bytes::new())
    }

    /// A body made of one buffer.
    pub fn full(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Full(Some(bytes)),
        }
    }

    /// A body of exactly `len` bytes pulled from `next`.
    pub fn generated(len: u64, next: ChunkFn) -> Self {
        Self {
            kind: Kind::Generated {
                offset: 0,
                len,
                next,
            },
        }
    }

    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        match &self.kind {
            Kind::Full(Some(b)) => b.len() as u64,
            Kind::Full(None) => 0,
            Kind::Generated { len, .. } => *len,
        }
    }

    /// True if the body has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for ReqBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReqBody").field("len", &self.len()).finish()
    }
}

/// Next frame of a generated body, trimmed so the body ends at `len`.
fn next_generated(offset: &mut u64, len: u64, next: &mut ChunkFn) -> Option<io::Result<Bytes>> {
    let remaining = len.saturating_sub(*offset);
    if remaining == 0 {
        return None;
    }
    let mut chunk = next(*offset);
    if chunk.is_empty() {
        let msg = format!("body generator ended at {offset} of {len} bytes");
        return Some(Err(io::Error::new(io::ErrorKind::UnexpectedEof, msg)));
    }
    if chunk.len() as u64 > remaining {
        // remaining < chunk.len() <= usize::MAX, so it fits.
        chunk.truncate(usize::try_from(remaining).unwrap_or(usize::MAX));
    }
    *offset += chunk.len() as u64;
    Some(Ok(chunk))
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let frame = match &mut self.get_mut().kind {
            Kind::Full(slot) => slot.take().filter(|b| !b.is_empty()).map(Ok),
            Kind::Generated { offset, len, next } => next_generated(offset, *len, next),
        };
        Poll::Ready(frame.map(|r| r.map(Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(slot) => slot.as_ref().is_none_or(Bytes::is_empty),
            Kind::Generated { offset, len, .. } => offset >= len,
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len())
    }
}

/// A chunk generator that repeats `pattern` forever, handing out cheap
/// slices of it (no copies), so any length can be sent from one buffer.
pub fn repeat_pattern(pattern: Bytes) -> ChunkFn {
    Box::new(move |offset| {
        if pattern.is_empty() {
            return Bytes::new();
        }
        let start = usize::try_from(offset % pattern.len() as u64).unwrap_or(0);
        pattern.slice(start..)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn generated_body_has_exact_length() {
        let pattern = Bytes::from_static(b"0123456789");
        let body = ReqBody::generated(25, repeat_pattern(pattern));
        let bytes = body.collect().await.expect("collect").to_bytes();
        assert_eq!(&bytes[..], b"0123456789012345678901234");
    }

    #[tokio::test]
    async fn dry_generator_fails() {
        let body = ReqBody::generated(5, Box::new(|_| Bytes::new()));
        assert!(body.collect().await.is_err());
    }
}
