//! What crosses the wire: length-prefixed frames at the head of a body
//! stream, and [`WireError`], the typed error a store node answers with.
//!
//! [`WireCode`] has one variant per [`StoreError`] a caller must tell apart
//! (NoSuchKey is not BucketNotEmpty), plus the RPC's own outcomes
//! (`WrongNode` with the node's map version, `Unauthorized`, `BadCall`).
//! Converting back ([`WireError::into_store`]) is the one place where a
//! remote failure becomes a store error, so the gateway's single
//! StoreError -> S3 mapping covers local and remote stores alike.

use crate::error::StoreError;
use crate::store::BodyStream;
use bytes::{Buf, Bytes, BytesMut};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Largest argument or reply frame (a CompleteMultipartUpload of 10,000
/// parts is under 1 MiB; anything near this bound is a bug or an attack).
pub const MAX_FRAME: usize = 16 << 20;

/// Error codes a node answers with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireCode {
    /// [`StoreError::NoSuchBucket`].
    NoSuchBucket,
    /// [`StoreError::BucketAlreadyOwnedByYou`].
    BucketAlreadyOwnedByYou,
    /// [`StoreError::BucketNotEmpty`].
    BucketNotEmpty,
    /// [`StoreError::NoSuchKey`].
    NoSuchKey,
    /// [`StoreError::BadDigest`].
    BadDigest,
    /// [`StoreError::IncompleteBody`].
    IncompleteBody,
    /// [`StoreError::Body`].
    Body,
    /// [`StoreError::NoSuchUpload`].
    NoSuchUpload,
    /// [`StoreError::InvalidPart`].
    InvalidPart,
    /// [`StoreError::InvalidPartOrder`].
    InvalidPartOrder,
    /// [`StoreError::EntityTooSmall`].
    EntityTooSmall,
    /// [`StoreError::ChecksumMismatch`] (the message is the algorithm).
    ChecksumMismatch,
    /// [`StoreError::PreconditionFailed`].
    PreconditionFailed,
    /// [`StoreError::Corrupt`].
    Corrupt,
    /// [`StoreError::InvalidArgument`].
    InvalidArgument,
    /// [`StoreError::ShuttingDown`].
    ShuttingDown,
    /// [`StoreError::InsufficientStorage`].
    InsufficientStorage,
    /// [`StoreError::QuotaExceeded`] (the message is the client's).
    QuotaExceeded,
    /// [`StoreError::Unavailable`].
    Unavailable,
    /// [`StoreError::Layout`], [`StoreError::Io`], [`StoreError::Engine`]:
    /// the node's own failure (the message says which).
    Internal,
    /// The node does not host the partition; it holds this map version.
    WrongNode {
        /// The node's partition map version.
        map_version: u64,
    },
    /// This node's replica is not the group's leader; the leader's Raft
    /// id when known.
    NotLeader {
        /// The leader's Raft id.
        leader: Option<u64>,
    },
    /// The call's signature was refused (wrong secret, skewed clock).
    Unauthorized,
    /// Unknown method or arguments that do not decode.
    BadCall,
}

/// A node's typed answer to a failed call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct WireError {
    /// What failed.
    pub code: WireCode,
    /// For people: never secrets or paths.
    pub message: String,
}

impl WireError {
    /// An error of `code` with `message`.
    pub fn new(code: WireCode, message: impl Into<String>) -> WireError {
        WireError {
            code,
            message: message.into(),
        }
    }

    /// The wire form of a store error.
    pub fn from_store(e: &StoreError) -> WireError {
        use StoreError as S;
        use WireCode as W;
        let code = match e {
            S::NoSuchBucket => W::NoSuchBucket,
            S::BucketAlreadyOwnedByYou => W::BucketAlreadyOwnedByYou,
            S::BucketNotEmpty => W::BucketNotEmpty,
            S::NoSuchKey => W::NoSuchKey,
            S::BadDigest => W::BadDigest,
            S::IncompleteBody => W::IncompleteBody,
            S::Body(_) => W::Body,
            S::NoSuchUpload => W::NoSuchUpload,
            S::InvalidPart => W::InvalidPart,
            S::InvalidPartOrder => W::InvalidPartOrder,
            S::EntityTooSmall => W::EntityTooSmall,
            S::ChecksumMismatch(alg) => return WireError::new(W::ChecksumMismatch, alg.clone()),
            S::PreconditionFailed => W::PreconditionFailed,
            S::Corrupt(_) => W::Corrupt,
            S::InvalidArgument(_) => W::InvalidArgument,
            S::ShuttingDown => W::ShuttingDown,
            S::InsufficientStorage => W::InsufficientStorage,
            S::QuotaExceeded(why) => return WireError::new(W::QuotaExceeded, why.clone()),
            S::Unavailable(_) => W::Unavailable,
            // The node's handler answers with its map version; a bare
            // conversion only knows the partition is elsewhere.
            S::NotHosted(_) => W::WrongNode { map_version: 0 },
            S::NotLeader(leader) => W::NotLeader { leader: *leader },
            S::Layout(_) | S::Io(_) | S::Engine(_) => W::Internal,
        };
        WireError::new(code, e.to_string())
    }

    /// The store error a caller sees for this answer.
    pub fn into_store(self) -> StoreError {
        use StoreError as S;
        use WireCode as W;
        match self.code {
            W::NoSuchBucket => S::NoSuchBucket,
            W::BucketAlreadyOwnedByYou => S::BucketAlreadyOwnedByYou,
            W::BucketNotEmpty => S::BucketNotEmpty,
            W::NoSuchKey => S::NoSuchKey,
            W::BadDigest => S::BadDigest,
            W::IncompleteBody => S::IncompleteBody,
            W::Body => S::Body(self.message),
            W::NoSuchUpload => S::NoSuchUpload,
            W::InvalidPart => S::InvalidPart,
            W::InvalidPartOrder => S::InvalidPartOrder,
            W::EntityTooSmall => S::EntityTooSmall,
            W::ChecksumMismatch => S::ChecksumMismatch(self.message),
            W::PreconditionFailed => S::PreconditionFailed,
            W::Corrupt => S::Corrupt(self.message),
            W::InvalidArgument => S::InvalidArgument(self.message),
            W::ShuttingDown => S::ShuttingDown,
            W::InsufficientStorage => S::InsufficientStorage,
            W::QuotaExceeded => S::QuotaExceeded(self.message),
            W::Unavailable | W::WrongNode { .. } => S::Unavailable(self.message),
            W::NotLeader { leader } => S::NotLeader(leader),
            W::Internal | W::Unauthorized | W::BadCall => {
                S::Engine(format!("store node: {}", self.message))
            }
        }
    }
}

/// `payload` as a frame: its length (u32, big-endian), then itself.
pub fn frame(payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(4 + payload.len());
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    out.freeze()
}

/// The reply frame of a call: `Ok(payload)` or the node's error.
pub fn encode_result(result: &Result<Bytes, WireError>) -> Bytes {
    let as_wire: Result<&serde_bytes::Bytes, &WireError> = match result {
        Ok(b) => Ok(serde_bytes::Bytes::new(b)),
        Err(e) => Err(e),
    };
    // Serialising bytes and a plain struct into a Vec cannot fail.
    frame(&bincode::serialize(&as_wire).unwrap_or_default())
}

/// Decode a reply frame's payload (see [`encode_result`]).
pub fn decode_result(payload: &[u8]) -> Result<Result<Bytes, WireError>, String> {
    let r: Result<serde_bytes::ByteBuf, WireError> =
        bincode::deserialize(payload).map_err(|e| e.to_string())?;
    Ok(r.map(|b| Bytes::from(b.into_vec())))
}

/// Why a frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The stream ended inside the frame.
    Truncated,
    /// The declared length passes [`MAX_FRAME`].
    TooLarge(usize),
    /// No bytes arrived within the stall bound.
    Stalled,
    /// The stream failed.
    Io(String),
}

/// Read one frame from the head of `body`, waiting at most `stall` for
/// each chunk. Returns the frame's payload and the rest of the stream
/// (bytes read past the frame come first).
pub async fn read_frame(
    mut body: BodyStream,
    stall: Duration,
) -> Result<(Bytes, BodyStream), FrameError> {
    let mut buf = BytesMut::new();
    let mut need: Option<usize> = None;
    loop {
        if need.is_none() && buf.len() >= 4 {
            let len = usize::try_from(buf.get_u32()).unwrap_or(usize::MAX);
            if len > MAX_FRAME {
                return Err(FrameError::TooLarge(len));
            }
            need = Some(len);
        }
        if let Some(len) = need.filter(|len| buf.len() >= *len) {
            let payload = buf.split_to(len).freeze();
            let rest = buf.freeze();
            let tail: BodyStream = if rest.is_empty() {
                body
            } else {
                Box::pin(futures::stream::once(async move { Ok(rest) }).chain(body))
            };
            return Ok((payload, tail));
        }
        match tokio::time::timeout(stall, body.next()).await {
            Err(_) => return Err(FrameError::Stalled),
            Ok(None) => return Err(FrameError::Truncated),
            Ok(Some(Err(e))) => return Err(FrameError::Io(e.to_string())),
            Ok(Some(Ok(chunk))) => buf.extend_from_slice(&chunk),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: Vec<&'static [u8]>) -> BodyStream {
        Box::pin(futures::stream::iter(
            parts.into_iter().map(|p| Ok(Bytes::from_static(p))),
        ))
    }

    async fn rest(s: BodyStream) -> Vec<u8> {
        s.map(|c| c.expect("chunk").to_vec()).concat().await
    }

    #[tokio::test]
    async fn a_frame_split_anywhere_is_read_and_the_rest_kept() {
        let mut whole = frame(b"hello").to_vec();
        whole.extend_from_slice(b"DATA");
        for cut in 0..whole.len() {
            let (a, b) = whole.split_at(cut);
            let a: &'static [u8] = Box::leak(a.to_vec().into_boxed_slice());
            let b: &'static [u8] = Box::leak(b.to_vec().into_boxed_slice());
            let (payload, tail) = read_frame(chunks(vec![a, b]), Duration::from_secs(1))
                .await
                .expect("frame");
            assert_eq!(&payload[..], b"hello", "cut {cut}");
            assert_eq!(rest(tail).await, b"DATA", "cut {cut}");
        }
    }

    #[tokio::test]
    async fn short_huge_and_stalled_frames_are_refused() {
        let short = read_frame(chunks(vec![&[0, 0, 0, 9, 1]]), Duration::from_secs(1)).await;
        assert_eq!(short.err(), Some(FrameError::Truncated));
        let huge = read_frame(chunks(vec![&[0xff, 0, 0, 0]]), Duration::from_secs(1)).await;
        assert!(matches!(huge.err(), Some(FrameError::TooLarge(_))));
        let never: BodyStream = Box::pin(futures::stream::pending());
        let stalled = read_frame(never, Duration::from_millis(20)).await;
        assert_eq!(stalled.err(), Some(FrameError::Stalled));
    }

    #[test]
    fn store_errors_survive_the_wire() {
        let cases = [
            StoreError::NoSuchKey,
            StoreError::BucketNotEmpty,
            StoreError::ChecksumMismatch("CRC32".into()),
            StoreError::InsufficientStorage,
            StoreError::PreconditionFailed,
            StoreError::QuotaExceeded("quota_bytes = 100".into()),
        ];
        for e in cases {
            let before = e.to_string();
            let wire: WireError = bincode::deserialize(
                &bincode::serialize(&WireError::from_store(&e)).expect("encode"),
            )
            .expect("decode");
            assert_eq!(wire.into_store().to_string(), before);
        }
        for r in [
            Ok(Bytes::from_static(b"reply")),
            Err(WireError::new(WireCode::BadCall, "x")),
        ] {
            let framed = encode_result(&r);
            assert_eq!(decode_result(&framed[4..]).expect("decode"), r);
        }
        // A refusal's message reaches the client as the store wrote it.
        let why = "This upload would exceed the tenant's byte quota (quota_bytes = 1).";
        let wire = WireError::from_store(&StoreError::QuotaExceeded(why.into()));
        assert_eq!(wire.message, why);
        assert!(matches!(wire.into_store(), StoreError::QuotaExceeded(m) if m == why));
        let moved = WireError::new(WireCode::WrongNode { map_version: 7 }, "p0003 moved");
        assert!(matches!(moved.into_store(), StoreError::Unavailable(_)));
    }
}
