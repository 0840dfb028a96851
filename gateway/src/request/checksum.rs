//! Flexible checksums of uploads: `x-amz-checksum-{crc32,crc32c,crc64nvme,
//! sha1,sha256}`, sent as a header or (aws-chunked uploads, the default of
//! current SDKs over TLS) as a trailer named by `x-amz-trailer`.
//!
//! [`verify`] wraps the upload stream and hashes the bytes as they pass, so
//! nothing is buffered. When the body ends, the digest is compared with the
//! header, or with the trailer s3s has just parsed; on a mismatch the stream
//! ends with an error instead of a clean end, so the store never commits
//! the object, and the [`FaultSlot`] tells the handler to answer
//! `BadDigest`, as S3 does. The computed value is echoed in the response.

use crate::request::body::{BodyFault, FaultSlot};
use crate::request::error::{GwError, GwResult};
use bytes::Bytes;
use futures::Stream;
use laneway_store::BodyStream;
pub use laneway_store::flexsum::{Algo, Hasher, digest_b64};
use s3s::TrailingHeaders;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

/// Where the expected value comes from.
pub enum Expected {
    /// A request header.
    Header(String),
    /// The aws-chunked trailer (read once the body has ended).
    Trailer(TrailingHeaders),
    /// Nothing to compare with: compute the checksum only (bytes the
    /// gateway reads from its own store, e.g. UploadPartCopy).
    Compute,
}

/// What the client asked to have verified.
pub struct Request {
    /// The algorithm.
    pub algo: Algo,
    /// The expected value.
    pub expected: Expected,
}

/// The checksum request of an upload, from its headers: at most one
/// `x-amz-checksum-*` header, or a trailer announced by `x-amz-trailer`.
pub fn requested(
    headers: &http::HeaderMap,
    trailers: Option<&TrailingHeaders>,
) -> GwResult<Option<Request>> {
    let mut found = Algo::ALL.into_iter().filter_map(|a| {
        let v = headers.get(a.header())?.to_str().ok()?;
        Some((a, v.to_string()))
    });
    if let Some((algo, value)) = found.next() {
        if found.next().is_some() {
            return Err(GwError::InvalidRequest(
                "Expecting a single x-amz-checksum- header".into(),
            ));
        }
        return Ok(Some(Request {
            algo,
            expected: Expected::Header(value),
        }));
    }
    let trailer = headers.get("x-amz-trailer").and_then(|v| v.to_str().ok());
    match (trailer.and_then(Algo::from_header), trailers) {
        (Some(algo), Some(t)) => Ok(Some(Request {
            algo,
            expected: Expected::Trailer(t.clone()),
        })),
        _ => Ok(None),
    }
}

/// The checksum computed over an upload, once it has been read (echoed in
/// the response; the store computes and keeps its own over the bytes it
/// stores, `laneway_store::ChecksumSpec`).
#[derive(Clone, Default)]
pub struct Computed(Arc<OnceLock<laneway_store::Checksum>>);

impl Computed {
    /// The base64 value, if the body was read to its end.
    pub fn get(&self) -> Option<String> {
        self.0.get().map(|c| c.value.clone())
    }
}

struct Verified {
    inner: BodyStream,
    hasher: Hasher,
    req: Request,
    faults: FaultSlot,
    computed: Computed,
    done: bool,
}

impl Verified {
    fn expected(&self) -> Option<String> {
        match &self.req.expected {
            Expected::Header(v) => Some(v.clone()),
            Expected::Trailer(t) => t
                .read(|h| {
                    h.get(self.req.algo.header())
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                })
                .flatten(),
            Expected::Compute => None,
        }
    }

    fn finish(&mut self) -> Option<std::io::Error> {
        let got = self.hasher.finish();
        let accepted = matches!(self.req.expected, Expected::Compute)
            || self.expected().is_some_and(|want| want.trim() == got);
        if accepted {
            let _ = self.computed.0.set(laneway_store::Checksum {
                algorithm: self.req.algo.name().to_string(),
                value: got,
            });
            return None;
        }
        self.faults.set(BodyFault::Checksum(self.req.algo));
        Some(std::io::Error::other(format!(
            "{} mismatch",
            self.req.algo.name()
        )))
    }
}

impl Stream for Verified {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match ready!(this.inner.as_mut().poll_next(cx)) {
            Some(Ok(chunk)) => {
                this.hasher.update(&chunk);
                Poll::Ready(Some(Ok(chunk)))
            }
            Some(Err(e)) => {
                this.done = true;
                Poll::Ready(Some(Err(e)))
            }
            None => {
                this.done = true;
                Poll::Ready(this.finish().map(Err))
            }
        }
    }
}

/// [`verify`] when the client asked for a checksum; the body unchanged otherwise.
pub fn verify_requested(
    body: BodyStream,
    req: Option<Request>,
    faults: &FaultSlot,
) -> (BodyStream, Option<Computed>) {
    match req {
        Some(r) => {
            let (s, c) = verify(body, r, faults);
            (s, Some(c))
        }
        None => (body, None),
    }
}

/// Wrap `body` so it fails at its end unless it matches `req`.
pub fn verify(body: BodyStream, req: Request, faults: &FaultSlot) -> (BodyStream, Computed) {
    let computed = Computed::default();
    let v = Verified {
        inner: body,
        hasher: Hasher::new(req.algo),
        req,
        faults: faults.clone(),
        computed: computed.clone(),
        done: false,
    };
    (Box::pin(v), computed)
}

/// A stored checksum spread over the five optional output fields of
/// GetObject/HeadObject.
#[derive(Default)]
pub struct Fields {
    /// x-amz-checksum-crc32.
    pub crc32: Option<String>,
    /// x-amz-checksum-crc32c.
    pub crc32c: Option<String>,
    /// x-amz-checksum-crc64nvme.
    pub crc64nvme: Option<String>,
    /// x-amz-checksum-sha1.
    pub sha1: Option<String>,
    /// x-amz-checksum-sha256.
    pub sha256: Option<String>,
    /// x-amz-checksum-type (COMPOSITE for a multipart object's composite
    /// checksum, FULL_OBJECT otherwise).
    pub checksum_type: Option<s3s::dto::ChecksumType>,
}

/// The checksum to return: only when the client asked
/// (`x-amz-checksum-mode: ENABLED`), the object has one, and the response
/// carries the whole object (a checksum of the whole cannot vouch for a range).
pub fn fields(stored: Option<&laneway_store::Checksum>, mode_enabled: bool, whole: bool) -> Fields {
    let mut f = Fields::default();
    let Some(c) = stored.filter(|_| mode_enabled && whole) else {
        return f;
    };
    let slot = match c.algorithm.as_str() {
        "CRC32" => &mut f.crc32,
        "CRC32C" => &mut f.crc32c,
        "CRC64NVME" => &mut f.crc64nvme,
        "SHA1" => &mut f.sha1,
        "SHA256" => &mut f.sha256,
        _ => return f,
    };
    *slot = Some(c.value.clone());
    f.checksum_type = Some(crate::request::composite::type_of(c));
    f
}

/// Whether a request's checksum mode is ENABLED.
pub fn mode_enabled(mode: Option<&s3s::dto::ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case("ENABLED"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn digest_of(algo: Algo, data: &[u8]) -> String {
        let mut h = Hasher::new(algo);
        h.update(data);
        h.finish()
    }

    #[test]
    fn digests_match_known_values() {
        // botocore's values for b"hello world".
        assert_eq!(digest_of(Algo::Crc32, b"hello world"), "DUoRhQ==");
        assert_eq!(digest_of(Algo::Crc32c, b"hello world"), "yZRlqg==");
        assert_eq!(
            digest_of(Algo::Sha1, b"hello world"),
            "Kq5sNclPz7QV2+lfQIuc6R7oRu0="
        );
        assert_eq!(
            digest_of(Algo::Sha256, b"hello world"),
            "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="
        );
        assert_eq!(digest_of(Algo::Crc64Nvme, b"").len(), 12);
    }

    fn body(parts: &[&'static [u8]]) -> BodyStream {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Box::pin(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn matching_header_passes_and_mismatch_fails_at_the_end() {
        let faults = FaultSlot::default();
        let req = Request {
            algo: Algo::Crc32,
            expected: Expected::Header("DUoRhQ==".into()),
        };
        let (s, computed) = verify(body(&[b"hello ", b"world"]), req, &faults);
        let out: Vec<_> = s.collect().await;
        assert!(out.iter().all(Result::is_ok));
        assert_eq!(computed.get().as_deref(), Some("DUoRhQ=="));
        assert_eq!(faults.get(), None);

        let req = Request {
            algo: Algo::Crc32,
            expected: Expected::Header("AAAAAA==".into()),
        };
        let (s, _) = verify(body(&[b"hello world"]), req, &faults);
        let out: Vec<_> = s.collect().await;
        assert!(out.last().is_some_and(Result::is_err));
        assert_eq!(faults.get(), Some(BodyFault::Checksum(Algo::Crc32)));
    }

    #[test]
    fn at_most_one_checksum_header() {
        let mut h = http::HeaderMap::new();
        assert!(requested(&h, None).expect("none").is_none());
        h.insert(
            "x-amz-checksum-crc32",
            http::HeaderValue::from_static("DUoRhQ=="),
        );
        let r = requested(&h, None).expect("one").expect("some");
        assert_eq!(r.algo, Algo::Crc32);
        h.insert("x-amz-checksum-sha1", http::HeaderValue::from_static("x"));
        assert!(requested(&h, None).is_err());
    }
}
