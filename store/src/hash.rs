//! The stable object -> partition mapping.
//!
//! The hash must never change for an existing data dir: it decides where
//! every object lives. It is FNV-1a (64-bit) over the bucket id (big-endian)
//! and the key bytes, followed by a 64-bit finaliser so that the low bits
//! used for the power-of-two partition mask are well mixed.

use crate::ids::{BucketId, PartitionId};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// Finaliser (the one of splitmix64): spreads every input bit over the output.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Stable 64-bit hash of (bucket, key).
pub fn object_hash(bucket: BucketId, key: &[u8]) -> u64 {
    mix(fnv1a(fnv1a(FNV_OFFSET, &bucket.0.to_be_bytes()), key))
}

/// The partition that owns (bucket, key) among `count` partitions (a power of two).
pub fn partition_of(bucket: BucketId, key: &[u8], count: u32) -> PartitionId {
    debug_assert!(count.is_power_of_two());
    let mask = u64::from(count.saturating_sub(1));
    // The mask keeps the value below `count`, so it fits in u32.
    PartitionId(u32::try_from(object_hash(bucket, key) & mask).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_across_releases() {
        // Pinned values: changing the hash would strand every stored object.
        assert_eq!(
            object_hash(BucketId(1), b"hello"),
            object_hash(BucketId(1), b"hello")
        );
        assert_eq!(
            partition_of(BucketId(7), b"a/b/c", 16),
            partition_of(BucketId(7), b"a/b/c", 16)
        );
        let pinned = [
            partition_of(BucketId(1), b"a", 16).0,
            partition_of(BucketId(1), b"b", 16).0,
            partition_of(BucketId(2), b"a", 16).0,
        ];
        assert_eq!(pinned, [2, 13, 13]);
        assert_eq!(object_hash(BucketId(1), b"a") & 0xffff, PINNED_LOW_BITS);
    }

    const PINNED_LOW_BITS: u64 = 35234;

    #[test]
    fn keys_spread_over_partitions() {
        let mut counts = [0u32; 16];
        for i in 0..16_000 {
            let k = format!("data/file-{i}.parquet");
            counts[partition_of(BucketId(3), k.as_bytes(), 16).0 as usize] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "uneven spread: {counts:?}");
        }
    }
}
