//! DeleteBucket's seal as a row of each replicated partition, written
//! through the partition's group like any other write.
//!
//! Why: a gateway resolves a bucket's id when a write starts and caches it
//! for up to two seconds, so a write into a bucket can reach a partition
//! after DeleteBucket removed the bucket's catalog record. Something must
//! refuse it there, or it commits into a dead id (stored, uncounted,
//! unreachable). A seal held by a node ([`crate::gate`]) does that on one
//! machine, but a replica elected after the seal would not hold it, so a
//! cluster had to seal every node, and DeleteBucket failed while any store
//! node was down. A seal row is in the partition's log instead: every
//! replica that can ever lead the partition has it, only a quorum of each
//! group needs to answer, and a node that lost its disk gets it back with
//! the partition's snapshot.
//!
//! How: the partition's commit thread, which applies every write of the
//! partition in order (its leader having applied everything committed
//! before, [`crate::replication::Group::settle`]), applies
//! [`Op::SealBucket`](crate::commit::Op::SealBucket): if the partition
//! holds none of the bucket's objects it writes `'x' | bucket id` ->
//! the Unix millisecond until which the seal holds; else the op fails
//! BucketNotEmpty and writes nothing. Every later op that adds to the
//! bucket ([`crate::gate::adds_to`]) meets the row and fails NoSuchBucket,
//! at whichever replica leads by then. A failed DeleteBucket removes the
//! rows again ([`Op::ReviveBucket`](crate::commit::Op::ReviveBucket)).
//!
//! Bounded: a seal holds for [`SEAL_ROW_KEEP`] (a write in flight into a
//! deleted bucket was resolved at most a gateway cache lifetime before;
//! bucket ids are never reused, so nothing else can name the id later),
//! and each new seal deletes the partition's expired ones, so a partition
//! keeps at most the seals of one keep period plus those expired since its
//! last seal. The keep also bounds the harm of a revive that could not
//! reach a partition: its writes into a live bucket are refused until the
//! seal expires, not for good.

use crate::commit::{Outcome, Round};
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;

/// Key-space tag of seal rows: `'x' | bucket id (u64 BE)` -> the Unix
/// millisecond until which the seal holds (i64 BE).
pub const SEAL_TAG: u8 = b'x';

/// How long a seal row refuses writes.
pub const SEAL_ROW_KEEP: std::time::Duration = std::time::Duration::from_secs(600);

/// Index key of `bucket`'s seal row.
pub fn seal_key(bucket: BucketId) -> Vec<u8> {
    let mut k = vec![SEAL_TAG];
    k.extend_from_slice(&bucket.0.to_be_bytes());
    k
}

/// The time a seal row holds until (a malformed row is corruption).
fn until_of(raw: &[u8]) -> StoreResult<i64> {
    raw.split_first_chunk::<8>()
        .map(|(b, _)| i64::from_be_bytes(*b))
        .ok_or_else(|| StoreError::Corrupt("seal row".into()))
}

/// NoSuchBucket if `bucket` has a seal that holds at `now_ms`.
pub(crate) fn refuse_sealed(round: &Round<'_>, bucket: BucketId, now_ms: i64) -> StoreResult<()> {
    match round.get_raw(&seal_key(bucket))? {
        Some(raw) if until_of(&raw)? > now_ms => Err(StoreError::NoSuchBucket),
        _ => Ok(()),
    }
}

/// Seal `bucket` in this partition until `until_ms` if the partition holds
/// none of its objects (as this round sees them); drop expired seals.
pub(crate) fn seal(
    round: &mut Round<'_>,
    bucket: BucketId,
    until_ms: i64,
    now_ms: i64,
) -> StoreResult<Outcome> {
    if round.objects_in(bucket)? != 0 {
        return Err(StoreError::BucketNotEmpty);
    }
    drop_expired(round, now_ms)?;
    round.set(seal_key(bucket), Some(until_ms.to_be_bytes().to_vec()));
    Ok(Outcome::Sealed)
}

/// Remove `bucket`'s seal in this partition, if it has one.
pub(crate) fn revive(round: &mut Round<'_>, bucket: BucketId) -> StoreResult<Outcome> {
    let key = seal_key(bucket);
    if round.get_raw(&key)?.is_some() {
        round.set(key, None);
    }
    Ok(Outcome::Sealed)
}

/// Delete the seal rows that no longer hold at `now_ms`.
fn drop_expired(round: &mut Round<'_>, now_ms: i64) -> StoreResult<()> {
    let rows = round.scan_all(&[SEAL_TAG], &[SEAL_TAG + 1])?;
    for (key, raw) in rows {
        if until_of(&raw)? <= now_ms {
            round.set(key, None);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{MetaIndex, WriteBatch};
    use crate::index_sled::SledIndex;
    use crate::record::{Usage, usage_key};

    fn index() -> (tempfile::TempDir, SledIndex) {
        let dir = tempfile::tempdir().expect("tempdir");
        let index = SledIndex::open(&dir.path().join("index")).expect("open");
        (dir, index)
    }

    fn sealed(round: &Round<'_>, bucket: u64, now_ms: i64) -> bool {
        match refuse_sealed(round, BucketId(bucket), now_ms) {
            Ok(()) => false,
            Err(StoreError::NoSuchBucket) => true,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_seal_refuses_its_bucket_until_it_expires_or_is_revived() {
        let (_dir, index) = index();
        let mut round = Round::new(&index);
        assert!(!sealed(&round, 7, 0));
        seal(&mut round, BucketId(7), 1_000, 0).expect("empty: sealed");
        assert!(sealed(&round, 7, 999));
        assert!(!sealed(&round, 7, 1_000), "expired");
        assert!(!sealed(&round, 8, 500), "another bucket");
        revive(&mut round, BucketId(7)).expect("revive");
        assert!(!sealed(&round, 7, 500));
        revive(&mut round, BucketId(9)).expect("a revive without a seal");
    }

    #[test]
    fn a_partition_holding_objects_of_the_bucket_is_not_sealed() {
        let (_dir, index) = index();
        let mut batch = WriteBatch::default();
        let one = Usage {
            objects: 1,
            bytes: 4,
        };
        batch.put(usage_key(BucketId(7)), one.encode());
        index.write(batch).expect("write");
        let mut round = Round::new(&index);
        let refused = seal(&mut round, BucketId(7), 1_000, 0);
        assert!(matches!(refused, Err(StoreError::BucketNotEmpty)));
        assert!(!sealed(&round, 7, 500), "nothing written");
        seal(&mut round, BucketId(8), 1_000, 0).expect("another bucket is empty");
    }

    #[test]
    fn a_seal_drops_the_expired_ones() {
        let (_dir, index) = index();
        let mut batch = WriteBatch::default();
        batch.put(seal_key(BucketId(1)), 100i64.to_be_bytes().to_vec());
        batch.put(seal_key(BucketId(2)), 10_000i64.to_be_bytes().to_vec());
        index.write(batch).expect("write");
        let mut round = Round::new(&index);
        seal(&mut round, BucketId(3), 9_000, 5_000).expect("seal");
        let left: Vec<Vec<u8>> = round
            .scan_all(&[SEAL_TAG], &[SEAL_TAG + 1])
            .expect("scan")
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(left, vec![seal_key(BucketId(2)), seal_key(BucketId(3))]);
    }
}
