//! Completing a multipart upload inside a commit round.
//!
//! The client's part list is checked against the stored part rows (order,
//! ETags, flexible checksums the client repeats, minimum part size), the
//! precondition on the existing object is checked, and the object record is
//! written with a manifest of the parts' locations: no part data moves.
//!
//! The parts' bytes become the object's: the bucket's pending part bytes
//! drop by every stored part (those left out of the list are freed), and
//! the object is counted as objects are. A record of the answer is kept
//! ([`super::completed`]) so a retry of this completion, arriving after
//! the upload is gone, gets the same answer without writing anything.
//!
//! The object's flexible checksum is derived from the parts' checksums
//! ([`crate::flexsum::derive`]: COMPOSITE hashes of hashes, FULL_OBJECT CRC
//! combination), over exactly the part records the object is made of, read
//! in the same transaction that writes the object, and compared with the
//! whole-object checksum the client sent, which arrives as plain data.

use super::completed::{Completed, completed_key};
use super::{
    MpOutcome, PartRecord, UploadRecord, decode, drop_upload, encode, part_rows, require_upload,
};
use crate::commit::{Outcome, Round, WriteCond};
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::record::{Checksum, DataLoc, StoredObject, object_key};
use md5::{Digest, Md5};
use std::collections::BTreeMap;

/// One entry of the client's CompleteMultipartUpload list.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListedPart {
    /// Part number.
    pub number: u32,
    /// MD5 of the part (its ETag).
    pub md5: [u8; 16],
    /// The part's flexible checksum, when the client repeated it: it must
    /// equal the one verified at upload.
    pub checksum: Option<Checksum>,
}

/// Everything a completion needs.
pub(crate) struct Completion<'a> {
    pub bucket: BucketId,
    pub key: &'a str,
    pub upload: [u8; 16],
    pub parts: &'a [ListedPart],
    pub min_part_size: u64,
    pub cond: &'a WriteCond,
    pub mtime_ms: i64,
    /// The whole-object checksum the client sent, to compare.
    pub whole: Option<&'a Checksum>,
}

/// Check the client's part list against the stored parts.
fn validate(
    stored: &BTreeMap<u32, PartRecord>,
    parts: &[ListedPart],
    min_part_size: u64,
) -> StoreResult<()> {
    if parts.is_empty() {
        return Err(StoreError::InvalidPart);
    }
    if parts.windows(2).any(|w| w[0].number >= w[1].number) {
        return Err(StoreError::InvalidPartOrder);
    }
    for (i, p) in parts.iter().enumerate() {
        let rec = stored
            .get(&p.number)
            .filter(|r| r.md5 == p.md5)
            .ok_or(StoreError::InvalidPart)?;
        if let Some(want) = &p.checksum
            && rec.checksum.as_ref() != Some(want)
        {
            return Err(StoreError::InvalidPart);
        }
        if i + 1 < parts.len() && rec.size < min_part_size {
            return Err(StoreError::EntityTooSmall);
        }
    }
    Ok(())
}

/// The listed parts' records, in list order (validate() checked they exist).
fn chosen<'s>(
    stored: &'s BTreeMap<u32, PartRecord>,
    parts: &[ListedPart],
) -> StoreResult<Vec<&'s PartRecord>> {
    parts
        .iter()
        .map(|p| stored.get(&p.number).ok_or(StoreError::InvalidPart))
        .collect()
}

fn object_checksum(
    up: &UploadRecord,
    recs: &[&PartRecord],
    whole: Option<&Checksum>,
) -> StoreResult<Option<Checksum>> {
    let parts: Vec<(Option<&Checksum>, u64)> =
        recs.iter().map(|r| (r.checksum.as_ref(), r.size)).collect();
    crate::flexsum::derive(up.checksum.as_ref(), &parts, whole)
}

/// The parts' checksum values kept with the object: those of the object
/// checksum's algorithm, only when every part has one.
fn part_checksums(object: Option<&Checksum>, recs: &[&PartRecord]) -> Vec<String> {
    let Some(object) = object else {
        return Vec::new();
    };
    let values: Vec<String> = recs
        .iter()
        .filter_map(|r| r.checksum.as_ref())
        .filter(|c| c.algorithm == object.algorithm)
        .map(|c| c.value.clone())
        .collect();
    if values.len() == recs.len() {
        values
    } else {
        Vec::new()
    }
}

/// The answer to a completion of an upload that is gone: the first
/// completion's, when this repeats it; NoSuchUpload otherwise.
fn repeated(round: &Round<'_>, c: &Completion<'_>) -> StoreResult<Outcome> {
    let raw = round
        .get_raw(&completed_key(&c.upload))?
        .ok_or(StoreError::NoSuchUpload)?;
    let rec: Completed = decode(&raw)?;
    let info = rec.answer(c.bucket, c.key, c.parts)?;
    Ok(Outcome::Multipart(MpOutcome::Repeated(info)))
}

/// Complete the upload into an object.
pub(crate) fn complete(round: &mut Round<'_>, c: Completion<'_>) -> StoreResult<Outcome> {
    let (up, counted) = match require_upload(round, c.bucket, c.key, &c.upload) {
        Err(StoreError::NoSuchUpload) => return repeated(round, &c),
        other => other?,
    };
    let rows = part_rows(round, &c.upload)?;
    let stored: BTreeMap<u32, PartRecord> =
        rows.iter().map(|(n, rec, _)| (*n, rec.clone())).collect();
    validate(&stored, c.parts, c.min_part_size)?;
    let okey = object_key(c.bucket, c.key.as_bytes());
    let old = round.current(&okey)?;
    crate::commit::check_cond(c.cond, old.as_ref())?;
    let recs = chosen(&stored, c.parts)?;
    let checksum = object_checksum(&up, &recs, c.whole)?;
    let mut md5s = Md5::new();
    for rec in &recs {
        md5s.update(rec.md5);
    }
    let locs: Vec<_> = recs.iter().map(|r| r.loc.clone()).collect();
    let part_checksums = part_checksums(checksum.as_ref(), &recs);
    let object = StoredObject {
        size: locs.iter().map(|l| l.size).sum(),
        md5: md5s.finalize().into(),
        mtime_ms: c.mtime_ms,
        parts: u32::try_from(c.parts.len()).unwrap_or(u32::MAX),
        meta: up.meta,
        tags: up.tags,
        checksum,
        data: DataLoc::Parts(locs),
        part_checksums,
    };
    // Every stored part stops counting as a pending part (segment bytes
    // and the bucket's part bytes); account() then counts what the object
    // keeps, as object bytes.
    drop_upload(round, c.bucket, c.key, &c.upload, counted, &rows)?;
    round.account(c.bucket, old.as_ref(), Some(&object));
    let done = Completed::of(c.bucket, c.key, c.parts, &object);
    round.set(completed_key(&c.upload), Some(encode(&done)));
    round.set_object(c.bucket, c.key, old.as_ref(), Some(&object));
    Ok(Outcome::Multipart(MpOutcome::Completed(object)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::PartLoc;

    fn rec(size: u64, md5: u8, sum: Option<&str>) -> PartRecord {
        PartRecord {
            size,
            md5: [md5; 16],
            mtime_ms: 0,
            loc: PartLoc {
                segment: 0,
                offset: 0,
                record_len: 0,
                header_key_len: 0,
                size,
            },
            checksum: sum.map(|v| Checksum {
                algorithm: "CRC32".into(),
                value: v.into(),
            }),
        }
    }

    fn listed(number: u32, md5: u8, sum: Option<&str>) -> ListedPart {
        ListedPart {
            number,
            md5: [md5; 16],
            checksum: sum.map(|v| Checksum {
                algorithm: "CRC32".into(),
                value: v.into(),
            }),
        }
    }

    #[test]
    fn repeated_part_checksums_must_match() {
        let stored: BTreeMap<u32, PartRecord> =
            [(1, rec(10, 1, Some("AAAAAA=="))), (2, rec(3, 2, None))].into();
        assert!(validate(&stored, &[listed(1, 1, Some("AAAAAA=="))], 5).is_ok());
        assert!(validate(&stored, &[listed(1, 1, None), listed(2, 2, None)], 5).is_ok());
        assert!(matches!(
            validate(&stored, &[listed(1, 1, Some("BBBBBB=="))], 5),
            Err(StoreError::InvalidPart)
        ));
        assert!(matches!(
            validate(&stored, &[listed(2, 2, Some("AAAAAA=="))], 5),
            Err(StoreError::InvalidPart)
        ));
    }

    #[test]
    fn order_size_and_etags_are_checked() {
        let stored: BTreeMap<u32, PartRecord> = [(1, rec(3, 1, None)), (2, rec(3, 2, None))].into();
        assert!(matches!(
            validate(&stored, &[], 1),
            Err(StoreError::InvalidPart)
        ));
        assert!(matches!(
            validate(&stored, &[listed(2, 2, None), listed(1, 1, None)], 1),
            Err(StoreError::InvalidPartOrder)
        ));
        assert!(matches!(
            validate(&stored, &[listed(1, 1, None), listed(2, 2, None)], 5),
            Err(StoreError::EntityTooSmall)
        ));
        assert!(matches!(
            validate(&stored, &[listed(1, 9, None)], 1),
            Err(StoreError::InvalidPart)
        ));
    }
}
