//! Body adapters between s3s's [`StreamingBlob`] and the store's
//! [`BodyStream`]. Bodies are never collected: chunks flow through one at a
//! time, so memory per request stays bounded whatever the object size.
//!
//! Upload: s3s has already undone aws-chunked framing and checks chunk
//! signatures / x-amz-content-sha256 as the bytes flow, so what reaches the
//! store is exactly the user's bytes. When s3s's stream fails, the store
//! only sees an `io::Error`; [`upload`] keeps a classification of the first
//! failure on the side ([`BodyFault`]) so the handler can answer with the
//! right S3 code (`SignatureDoesNotMatch`, `XAmzContentSHA256Mismatch`, ...)
//! instead of a generic one. s3s's stream error types are private, so the
//! classification reads their (stable, `thiserror`) display names.
//!
//! Download: s3s wants `Send + Sync` streams and the store's stream is only
//! `Send`; [`SyncBody`] bridges that with a `Mutex` that is never contended
//! (polling has `&mut` access, so `get_mut` takes no lock).

use crate::request::error::GwError;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use laneway_store::BodyStream;
use s3s::dto::StreamingBlob;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

/// Why an upload body failed, as far as the client is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFault {
    /// An aws-chunked chunk signature did not verify.
    ChunkSignature,
    /// The payload did not hash to x-amz-content-sha256.
    Sha256Mismatch,
    /// The aws-chunked framing is malformed.
    Malformed,
    /// The body ended early, ran long, or the connection failed.
    Incomplete,
    /// The body does not match its x-amz-checksum-* value.
    Checksum(laneway_store::flexsum::Algo),
}

impl BodyFault {
    /// Classify an error from s3s's body stream.
    pub fn classify(err: &(dyn std::error::Error + 'static)) -> BodyFault {
        let text = err.to_string();
        if text.contains("SignatureMismatch") {
            BodyFault::ChunkSignature
        } else if text.contains("Sha256Mismatch") {
            BodyFault::Sha256Mismatch
        } else if [
            "FormatError",
            "ChunkMetaTooLarge",
            "TrailersTooLarge",
            "TooManyTrailerHeaders",
        ]
        .iter()
        .any(|n| text.contains(n))
        {
            BodyFault::Malformed
        } else {
            BodyFault::Incomplete
        }
    }
}

impl From<BodyFault> for GwError {
    fn from(f: BodyFault) -> GwError {
        match f {
            BodyFault::ChunkSignature => GwError::SignatureDoesNotMatch,
            BodyFault::Sha256Mismatch => GwError::ContentSha256Mismatch,
            BodyFault::Malformed => GwError::InvalidRequest("malformed aws-chunked body".into()),
            BodyFault::Incomplete => GwError::IncompleteBody,
            BodyFault::Checksum(algo) => GwError::ChecksumMismatch(algo.name()),
        }
    }
}

/// Where [`upload`] leaves the first body failure, if any.
#[derive(Clone, Debug, Default)]
pub struct FaultSlot(Arc<OnceLock<BodyFault>>);

impl FaultSlot {
    /// The first failure the body stream hit.
    pub fn get(&self) -> Option<BodyFault> {
        self.0.get().copied()
    }

    /// Record a failure found by a later stage (checksums), unless an
    /// earlier one was already recorded.
    pub fn set(&self, fault: BodyFault) {
        let _ = self.0.set(fault);
    }

    /// Turn a store error from a PUT into the client-facing error: a body
    /// failure seen on the way in wins over the store's own reading of it.
    pub fn explain(&self, err: laneway_store::StoreError) -> GwError {
        match self.get() {
            Some(fault) => fault.into(),
            None => err.into(),
        }
    }
}

/// Adapt an upload body for the store (an absent body is empty).
pub fn upload(blob: Option<StreamingBlob>) -> (BodyStream, FaultSlot) {
    let slot = FaultSlot::default();
    let Some(blob) = blob else {
        return (Box::pin(futures::stream::empty()), slot);
    };
    let seen = slot.clone();
    let stream = blob.map(move |chunk| {
        chunk.map_err(|e| {
            let _ = seen.0.set(BodyFault::classify(e.as_ref()));
            std::io::Error::other(e)
        })
    });
    (Box::pin(stream), slot)
}

/// A store body stream made `Sync` for s3s.
pub struct SyncBody {
    inner: Mutex<BodyStream>,
}

impl Stream for SyncBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let inner = self
            .get_mut()
            .inner
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        inner.as_mut().poll_next(cx)
    }
}

/// Adapt a store body stream for a GET response.
pub fn download(body: BodyStream) -> StreamingBlob {
    StreamingBlob::wrap(SyncBody {
        inner: Mutex::new(body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("AwsChunkedStreamError: SignatureMismatch")]
    struct FakeChunkError;

    #[tokio::test]
    async fn upload_passes_bytes_and_records_the_first_fault() {
        let chunks: Vec<Result<Bytes, FakeChunkError>> =
            vec![Ok(Bytes::from_static(b"abc")), Err(FakeChunkError)];
        let blob = StreamingBlob::wrap(futures::stream::iter(chunks));
        let (mut body, slot) = upload(Some(blob));
        assert_eq!(
            body.next().await.and_then(Result::ok),
            Some(Bytes::from_static(b"abc"))
        );
        assert!(matches!(body.next().await, Some(Err(_))));
        assert_eq!(slot.get(), Some(BodyFault::ChunkSignature));
    }

    #[tokio::test]
    async fn download_streams_the_store_body() {
        let body: BodyStream = Box::pin(futures::stream::iter(vec![
            Ok(Bytes::from_static(b"he")),
            Ok(Bytes::from_static(b"llo")),
        ]));
        let blob = download(body);
        let got: Vec<Bytes> = blob.map(|c| c.unwrap_or_default()).collect().await;
        assert_eq!(got.concat(), b"hello");
    }
}
