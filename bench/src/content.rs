//! Deterministic object contents.
//!
//! Benchmarks and the crash test must be reproducible from a seed, and the
//! crash test must recompute an object's expected bytes from nothing but its
//! key and generation after the writer that produced them is gone. Contents
//! are a splitmix64 stream seeded from an FNV-1a hash of the key, mixed with
//! the generation number.

use bytes::{Bytes, BytesMut};
use md5::{Digest, Md5};

/// FNV-1a 64-bit hash of `data`.
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// One step of splitmix64: advances `state` and returns the next value.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `len` pseudo-random bytes determined by `seed`.
pub fn pattern(seed: u64, len: usize) -> Bytes {
    let mut state = seed;
    let mut out = BytesMut::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&splitmix64(&mut state).to_le_bytes());
    }
    out.truncate(len);
    out.freeze()
}

/// The seed for generation `generation` of `key`.
pub fn object_seed(key: &str, generation: u64) -> u64 {
    let mut state = fnv1a(key.as_bytes()) ^ generation.rotate_left(32);
    splitmix64(&mut state)
}

/// The contents of generation `generation` of `key`, `len` bytes long.
pub fn object_bytes(key: &str, generation: u64, len: usize) -> Bytes {
    pattern(object_seed(key, generation), len)
}

/// Lowercase hex MD5 of `data` (the ETag of a single-part PUT).
pub fn md5_hex(data: &[u8]) -> String {
    hex::encode(Md5::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_are_deterministic_and_distinct() {
        let a = object_bytes("k", 1, 100);
        assert_eq!(a.len(), 100);
        assert_eq!(a, object_bytes("k", 1, 100));
        assert_ne!(a, object_bytes("k", 2, 100));
        assert_ne!(a, object_bytes("j", 1, 100));
        assert_eq!(pattern(5, 0).len(), 0);
    }

    #[test]
    fn md5_matches_known_value() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
    }
}
