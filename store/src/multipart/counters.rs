//! Per-bucket multipart counters: open uploads and the bytes of their parts.
//!
//! Quotas count what is stored, and the parts of an unfinished upload are
//! stored. So every change to upload and part rows moves a counter row
//! `'p' · bucket` (two i64 BE: open uploads, part bytes) in the same commit
//! batch, exactly as object usage moves with its objects: the counters are
//! exact after re-uploads, completions, aborts, expiry and crashes.
//!
//! Upload and part rows written before these counters existed (with
//! format byte 1) were never counted, so undoing them uncounts nothing;
//! rows written since carry format byte 2 ([`super::decode_counted`]
//! tells which).

use crate::commit::Round;
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::record::PENDING_TAG;

/// Multipart uploads in progress in one bucket (of one partition, or summed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pending {
    /// Uploads created and neither completed nor aborted.
    pub uploads: i64,
    /// Bytes of their stored parts.
    pub part_bytes: i64,
}

impl Pending {
    /// 16-byte encoding (two i64 BE).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&self.uploads.to_be_bytes());
        v.extend_from_slice(&self.part_bytes.to_be_bytes());
        v
    }

    /// Decode; a malformed row is corruption.
    pub fn decode(b: &[u8]) -> StoreResult<Pending> {
        let bad = || StoreError::Corrupt("pending counter row".into());
        let (u, rest) = b.split_first_chunk::<8>().ok_or_else(bad)?;
        let (by, _) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        Ok(Pending {
            uploads: i64::from_be_bytes(*u),
            part_bytes: i64::from_be_bytes(*by),
        })
    }
}

/// Index key of a bucket's counter row.
pub fn pending_key(bucket: BucketId) -> Vec<u8> {
    let mut k = vec![PENDING_TAG];
    k.extend_from_slice(&bucket.0.to_be_bytes());
    k
}

/// Bytes as a signed counter delta.
pub(crate) fn signed(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// Move the bucket's counters by (`uploads`, `bytes`) in this round. Read
/// through the round's overlay, so several ops of one round add up.
pub(crate) fn add(
    round: &mut Round<'_>,
    bucket: BucketId,
    uploads: i64,
    bytes: i64,
) -> StoreResult<()> {
    if uploads == 0 && bytes == 0 {
        return Ok(());
    }
    let key = pending_key(bucket);
    let mut p = round
        .get_raw(&key)?
        .map(|v| Pending::decode(&v))
        .transpose()?
        .unwrap_or_default();
    p.uploads += uploads;
    p.part_bytes += bytes;
    let row = (p != Pending::default()).then(|| p.encode());
    round.set(key, row);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_round_trip() {
        let p = Pending {
            uploads: 3,
            part_bytes: -7,
        };
        assert_eq!(Pending::decode(&p.encode()).expect("decode"), p);
        assert!(Pending::decode(&[0; 9]).is_err());
    }
}
