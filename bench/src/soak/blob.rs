//! Object contents the soak can regenerate and check from a seed alone.
//!
//! Version `seed` of an object of `size` bytes is a run of 64 KiB blocks:
//! one pseudo-random base block per seed ([`crate::content::pattern`]),
//! with block `b`'s first 8 bytes replaced by `seed ^ b`. A stale version
//! (other seed), a block served at the wrong offset and a truncated or
//! padded body all differ from what is expected, yet making a block is
//! one 64 KiB copy, so PUT bodies stream from it and GET bodies are
//! compared chunk by chunk as they arrive, without holding the object.

use bytes::{Bytes, BytesMut};

use crate::body::{ChunkFn, ReqBody};
use crate::content;

/// Block length.
pub const BLOCK: u64 = 64 * 1024;

/// One version of an object's contents.
#[derive(Clone)]
pub struct Blob {
    seed: u64,
    size: u64,
    base: Bytes,
}

impl Blob {
    /// The contents of version `seed`, `size` bytes long.
    pub fn new(seed: u64, size: u64) -> Blob {
        let base_len = usize::try_from(BLOCK.min(size.max(8))).unwrap_or(8).max(8);
        Blob {
            seed,
            size,
            base: content::pattern(seed, base_len),
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Total length.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Block `b` (64 KiB, or shorter when it is the last).
    pub fn block(&self, b: u64) -> Bytes {
        let start = b.saturating_mul(BLOCK);
        let len = self.size.saturating_sub(start).min(BLOCK);
        let len = usize::try_from(len).unwrap_or(0);
        if len == 0 {
            return Bytes::new();
        }
        let mut out = BytesMut::from(&self.base[..len.min(self.base.len())]);
        let stamp = (self.seed ^ b).to_le_bytes();
        let n = stamp.len().min(out.len());
        out[..n].copy_from_slice(&stamp[..n]);
        out.freeze()
    }

    /// Bytes `[from, to)`, copied (for buffers and tests).
    pub fn range(&self, from: u64, to: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = from;
        while at < to.min(self.size) {
            let block = self.block(at / BLOCK);
            let off = usize::try_from(at % BLOCK).unwrap_or(0);
            let take = usize::try_from((to - at).min(BLOCK - at % BLOCK)).unwrap_or(0);
            let end = (off + take).min(block.len());
            out.extend_from_slice(&block[off..end]);
            at += (end - off).max(1) as u64;
        }
        out
    }

    /// A request body of bytes `[from, to)`, streamed block by block.
    pub fn body(&self, from: u64, to: u64) -> ReqBody {
        let blob = self.clone();
        let next: ChunkFn = Box::new(move |offset| {
            let at = from + offset;
            let block = blob.block(at / BLOCK);
            let off = usize::try_from(at % BLOCK).unwrap_or(usize::MAX);
            if off >= block.len() {
                return Bytes::new();
            }
            block.slice(off..)
        });
        ReqBody::generated(to.saturating_sub(from), next)
    }

    /// A checker for bytes `[from, from + len)` arriving in order.
    pub fn checker(&self, from: u64, len: u64) -> Checker {
        Checker {
            blob: self.clone(),
            at: from,
            end: from + len,
            block: None,
            mismatch: None,
        }
    }
}

/// Compares a body with a [`Blob`] as it arrives.
pub struct Checker {
    blob: Blob,
    at: u64,
    end: u64,
    block: Option<(u64, Bytes)>,
    mismatch: Option<String>,
}

impl Checker {
    /// Checks the next `data`.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() && self.mismatch.is_none() {
            if self.at >= self.end {
                self.mismatch = Some(format!("body longer than {} bytes", self.end));
                return;
            }
            let b = self.at / BLOCK;
            if self.block.as_ref().is_none_or(|(have, _)| *have != b) {
                self.block = Some((b, self.blob.block(b)));
            }
            let Some((_, block)) = &self.block else {
                return;
            };
            let off = usize::try_from(self.at % BLOCK).unwrap_or(usize::MAX);
            let avail = block.len().saturating_sub(off);
            let room = usize::try_from(self.end - self.at).unwrap_or(usize::MAX);
            let n = data.len().min(avail).min(room);
            if n == 0 || data[..n] != block[off..off + n] {
                self.mismatch = Some(format!("wrong bytes at offset {}", self.at));
                return;
            }
            self.at += n as u64;
            data = &data[n..];
        }
    }

    /// The first difference found so far, if any.
    pub fn mismatch(&self) -> Option<&str> {
        self.mismatch.as_deref()
    }

    /// `Ok` if every expected byte arrived and matched.
    pub fn finish(self) -> Result<(), String> {
        if let Some(m) = self.mismatch {
            return Err(m);
        }
        if self.at != self.end {
            return Err(format!("body ended at {} of {}", self.at, self.end));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn body_checker_and_range_agree() {
        let blob = Blob::new(7, 3 * BLOCK + 100);
        let body = blob.body(0, blob.size()).collect().await.expect("body");
        let bytes = body.to_bytes();
        assert_eq!(bytes.len() as u64, blob.size());
        assert_eq!(&bytes[..], &blob.range(0, blob.size())[..]);
        let mut c = blob.checker(0, blob.size());
        for chunk in bytes.chunks(1000) {
            c.feed(chunk);
        }
        assert!(c.finish().is_ok());
        let mut part = blob.checker(BLOCK - 5, 10);
        part.feed(&blob.range(BLOCK - 5, BLOCK + 5));
        assert!(part.finish().is_ok());
    }

    #[test]
    fn catches_stale_moved_and_short_bodies() {
        let (a, b) = (Blob::new(1, 2 * BLOCK), Blob::new(2, 2 * BLOCK));
        let mut stale = a.checker(0, a.size());
        stale.feed(&b.range(0, b.size()));
        assert!(stale.finish().is_err());
        let mut moved = a.checker(0, BLOCK);
        moved.feed(&a.range(BLOCK, 2 * BLOCK));
        assert!(moved.finish().is_err());
        let mut short = a.checker(0, a.size());
        short.feed(&a.range(0, 10));
        assert!(short.finish().is_err());
        let mut long = a.checker(0, 4);
        long.feed(&a.range(0, 5));
        assert!(long.finish().is_err());
        assert_eq!(Blob::new(3, 5).range(0, 5).len(), 5);
    }
}
