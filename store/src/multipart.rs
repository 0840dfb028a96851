//! Multipart uploads in the store.
//!
//! An upload lives in the partition of its (bucket, key), so completing it
//! is one local transaction. Rows:
//!
//! | key | value |
//! | --- | --- |
//! | `'m' · bucket · key · 0x00 · upload id` | [`UploadRecord`]: metadata and tags for the object |
//! | `'q' · upload id · part number (u32 BE)` | [`PartRecord`]: where the part's bytes are |
//!
//! Parts are appended to volume segments as they arrive (never inline), in
//! records flagged as parts whose key field also names the upload and part
//! number. Completion validates the client's list against the part rows,
//! writes the object record with a manifest of part locations
//! ([`DataLoc::Parts`]) and removes the upload's rows: no part data is
//! copied. Parts left out of the list, and every part of an aborted upload,
//! stop counting as live bytes in their segments, so compaction reclaims
//! them. Uploads older than a configurable age are aborted by the
//! background task.
//!
//! Every change to these rows also moves the bucket's multipart counters
//! ([`counters`]: open uploads, bytes of stored parts) in the same batch,
//! so quotas can count parts the moment they are durable; a completion
//! leaves a record that answers its retries ([`completed`]).

use crate::commit::{Op, Outcome, Round, VolumeRef, WriteCond};
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::list::prefix_successor;
use crate::record::{
    Checksum, DataLoc, FORMAT_V1, FORMAT_V2, ObjectInfo, ObjectMeta, PART_TAG, PartLoc,
    StoredObject, Tag, UPLOAD_TAG,
};
use counters::signed;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

mod complete;
pub mod completed;
pub mod counters;

pub use complete::ListedPart;
pub use counters::Pending;

/// Format byte of upload and part rows that are counted in their bucket's
/// [`Pending`] counters (all rows written since the counters exist).
const FORMAT_COUNTED: u8 = FORMAT_V2;

/// Most parts an upload may have.
pub const MAX_PARTS: u32 = 10_000;

/// An upload in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadRecord {
    /// When it was created, ms since the epoch.
    pub created_ms: i64,
    /// Metadata the object will get.
    pub meta: ObjectMeta,
    /// Tags the object will get.
    pub tags: Vec<Tag>,
    /// The checksum the client asked for at creation, if any.
    pub checksum: Option<UploadChecksum>,
}

/// The flexible checksum an upload was created with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadChecksum {
    /// Algorithm name as S3 spells it (CRC32, CRC32C, CRC64NVME, SHA1, SHA256).
    pub algorithm: String,
    /// FULL_OBJECT (true) or COMPOSITE (false).
    pub full_object: bool,
}

/// One uploaded part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    /// Bytes.
    pub size: u64,
    /// MD5 of the part (its ETag).
    pub md5: [u8; 16],
    /// Upload time, ms.
    pub mtime_ms: i64,
    /// Where it is.
    pub loc: PartLoc,
    /// The flexible checksum the part was verified against, if one was sent.
    pub checksum: Option<Checksum>,
}

/// A part as listed to clients.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartInfo {
    /// Part number (1..=10000).
    pub number: u32,
    /// Bytes.
    pub size: u64,
    /// ETag without quotes.
    pub etag: String,
    /// Upload time, ms.
    pub mtime_ms: i64,
    /// Its verified flexible checksum, if any.
    pub checksum: Option<Checksum>,
}

/// An upload as listed to clients.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UploadInfo {
    /// Object key.
    pub key: String,
    /// Upload id (32 hex digits).
    pub upload_id: String,
    /// Creation time, ms.
    pub created_ms: i64,
    /// The checksum asked for at creation.
    pub checksum: Option<UploadChecksum>,
}

/// A multipart mutation, applied by the commit thread.
#[derive(Debug)]
pub enum MpOp {
    /// Start an upload.
    Create {
        /// Bucket.
        bucket: BucketId,
        /// Key.
        key: String,
        /// Upload id.
        upload: [u8; 16],
        /// Its record.
        record: UploadRecord,
    },
    /// Record a received part (replacing an earlier one of that number).
    PutPart {
        /// Bucket.
        bucket: BucketId,
        /// Key.
        key: String,
        /// Upload id.
        upload: [u8; 16],
        /// Part number.
        part: u32,
        /// The part.
        record: PartRecord,
    },
    /// Complete the upload into an object.
    Complete {
        /// Bucket.
        bucket: BucketId,
        /// Key.
        key: String,
        /// Upload id.
        upload: [u8; 16],
        /// The client's list.
        parts: Vec<ListedPart>,
        /// Smallest size allowed for a part that is not the last.
        min_part_size: u64,
        /// Precondition on the existing object.
        cond: WriteCond,
        /// Completion time.
        mtime_ms: i64,
        /// The whole-object checksum the client sent, to compare with the
        /// one derived from the parts.
        whole: Option<Checksum>,
    },
    /// Drop the upload and its parts.
    Abort {
        /// Bucket.
        bucket: BucketId,
        /// Key.
        key: String,
        /// Upload id.
        upload: [u8; 16],
    },
    /// Forget records of completed uploads that completed before `cutoff_ms`.
    ForgetCompleted {
        /// Their upload ids.
        uploads: Vec<[u8; 16]>,
        /// Completion time at or after which a record is kept.
        cutoff_ms: i64,
    },
}

/// Result of a multipart mutation.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per commit reply
pub enum MpOutcome {
    /// Done (create, part, abort).
    Done,
    /// The completed object's record.
    Completed(StoredObject),
    /// A repeated completion, answered from the record of the first.
    Repeated(ObjectInfo),
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = vec![FORMAT_COUNTED];
    if let Err(e) = bincode::serialize_into(&mut out, v) {
        unreachable!("bincode of a plain struct into a Vec failed: {e}");
    }
    out
}

/// Decode a multipart row.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> StoreResult<T> {
    decode_counted(bytes).map(|(v, _)| v)
}

/// Decode a multipart row, and whether it is counted in [`Pending`].
pub(crate) fn decode_counted<T: DeserializeOwned>(bytes: &[u8]) -> StoreResult<(T, bool)> {
    match bytes.split_first() {
        Some((&f @ (FORMAT_V1 | FORMAT_COUNTED), rest)) => bincode::deserialize(rest)
            .map(|v| (v, f == FORMAT_COUNTED))
            .map_err(|e| StoreError::Corrupt(format!("multipart row: {e}"))),
        _ => Err(StoreError::Corrupt("multipart row: unknown format".into())),
    }
}

/// Index key of an upload row.
pub fn upload_key(bucket: BucketId, key: &str, upload: &[u8; 16]) -> Vec<u8> {
    let mut k = upload_prefix(bucket, key);
    k.push(0);
    k.extend_from_slice(upload);
    k
}

/// `'m' · bucket · key-prefix`: where uploads of keys with that prefix start.
pub fn upload_prefix(bucket: BucketId, key_prefix: &str) -> Vec<u8> {
    let mut k = vec![UPLOAD_TAG];
    k.extend_from_slice(&bucket.0.to_be_bytes());
    k.extend_from_slice(key_prefix.as_bytes());
    k
}

/// Index key of a part row.
pub fn part_key(upload: &[u8; 16], part: u32) -> Vec<u8> {
    let mut k = vec![PART_TAG];
    k.extend_from_slice(upload);
    k.extend_from_slice(&part.to_be_bytes());
    k
}

/// Key range of all part rows of an upload.
pub fn parts_range(upload: &[u8; 16]) -> (Vec<u8>, Vec<u8>) {
    let mut start = vec![PART_TAG];
    start.extend_from_slice(upload);
    let end = prefix_successor(&start).unwrap_or_default();
    (start, end)
}

/// The key field of a part's volume record: object key, upload id, part number.
pub fn part_header_key(key: &str, upload: &[u8; 16], part: u32) -> Vec<u8> {
    let mut k = key.as_bytes().to_vec();
    k.extend_from_slice(upload);
    k.extend_from_slice(&part.to_be_bytes());
    k
}

/// Split a part record's key field back into (object key, upload id, part number).
pub fn split_part_header_key(field: &[u8]) -> Option<(&[u8], [u8; 16], u32)> {
    let n = field.len().checked_sub(20)?;
    let (key, rest) = field.split_at(n);
    let upload: [u8; 16] = rest[..16].try_into().ok()?;
    let part = u32::from_be_bytes(rest[16..].try_into().ok()?);
    Some((key, upload, part))
}

/// Upload id as clients see it.
pub fn format_upload_id(id: &[u8; 16]) -> String {
    hex::encode(id)
}

/// Parse a client's upload id (NoSuchUpload when it cannot be one of ours).
pub fn parse_upload_id(s: &str) -> StoreResult<[u8; 16]> {
    let raw = hex::decode(s).map_err(|_| StoreError::NoSuchUpload)?;
    raw.try_into().map_err(|_| StoreError::NoSuchUpload)
}

/// A new upload id: 128 bits from the process's randomly keyed SipHash over
/// the time and a counter (unique and unpredictable enough for an id that
/// is not a secret; access is still checked by SigV4).
pub fn new_upload_id() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let mut out = [0u8; 16];
    for (i, half) in out.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(t);
        h.write_u64(n);
        h.write_usize(i);
        half.copy_from_slice(&h.finish().to_be_bytes());
    }
    out
}

/// A stored part row: its number, record, and whether its bytes are
/// counted in the bucket's [`Pending`] counters.
pub(crate) type PartRow = (u32, PartRecord, bool);

pub(crate) fn part_rows(round: &Round<'_>, upload: &[u8; 16]) -> StoreResult<Vec<PartRow>> {
    let (start, end) = parts_range(upload);
    let mut out = Vec::new();
    for (k, v) in round.scan_all(&start, &end)? {
        let n = k
            .get(17..21)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes);
        let n = n.ok_or_else(|| StoreError::Corrupt("part row key".into()))?;
        let (rec, counted) = decode_counted(&v)?;
        out.push((n, rec, counted));
    }
    Ok(out)
}

/// The upload's record, and whether the upload is counted in [`Pending`].
pub(crate) fn require_upload(
    round: &Round<'_>,
    bucket: BucketId,
    key: &str,
    upload: &[u8; 16],
) -> StoreResult<(UploadRecord, bool)> {
    let raw = round
        .get_raw(&upload_key(bucket, key, upload))?
        .ok_or(StoreError::NoSuchUpload)?;
    decode_counted(&raw)
}

/// Remove the upload's row and every part row, uncounting what was counted
/// (abort, and completion once the object holds what it keeps).
pub(crate) fn drop_upload(
    round: &mut Round<'_>,
    bucket: BucketId,
    key: &str,
    upload: &[u8; 16],
    counted: bool,
    parts: &[PartRow],
) -> StoreResult<()> {
    let mut bytes = 0i64;
    for (n, rec, part_counted) in parts {
        round.segment_delta(&part_loc_data(&rec.loc), -1);
        round.set(part_key(upload, *n), None);
        if *part_counted {
            bytes += signed(rec.size);
        }
    }
    round.set(upload_key(bucket, key, upload), None);
    counters::add(round, bucket, -i64::from(counted), -bytes)
}

pub(crate) fn part_loc_data(loc: &PartLoc) -> DataLoc {
    DataLoc::Parts(vec![loc.clone()])
}

/// Apply a multipart mutation inside a commit round.
pub(crate) fn apply(round: &mut Round<'_>, op: MpOp) -> StoreResult<Outcome> {
    match op {
        MpOp::Create {
            bucket,
            key,
            upload,
            record,
        } => {
            round.set(upload_key(bucket, &key, &upload), Some(encode(&record)));
            counters::add(round, bucket, 1, 0)?;
        }
        MpOp::PutPart {
            bucket,
            key,
            upload,
            part,
            record,
        } => {
            require_upload(round, bucket, &key, &upload)?;
            let pkey = part_key(&upload, part);
            // A part number uploaded again replaces the old part's bytes.
            let mut freed = 0;
            if let Some(old) = round.get_raw(&pkey)? {
                let (old, counted): (PartRecord, bool) = decode_counted(&old)?;
                round.segment_delta(&part_loc_data(&old.loc), -1);
                if counted {
                    freed = signed(old.size);
                }
            }
            round.segment_delta(&part_loc_data(&record.loc), 1);
            counters::add(round, bucket, 0, signed(record.size) - freed)?;
            round.set(pkey, Some(encode(&record)));
        }
        MpOp::Complete {
            bucket,
            key,
            upload,
            parts,
            min_part_size,
            cond,
            mtime_ms,
            whole,
        } => {
            let c = complete::Completion {
                bucket,
                key: &key,
                upload,
                parts: &parts,
                min_part_size,
                cond: &cond,
                mtime_ms,
                whole: whole.as_ref(),
            };
            return complete::complete(round, c);
        }
        MpOp::Abort {
            bucket,
            key,
            upload,
        } => {
            let (_, counted) = require_upload(round, bucket, &key, &upload)?;
            let parts = part_rows(round, &upload)?;
            drop_upload(round, bucket, &key, &upload, counted, &parts)?;
        }
        MpOp::ForgetCompleted { uploads, cutoff_ms } => {
            for upload in uploads {
                let ckey = completed::completed_key(&upload);
                let Some(raw) = round.get_raw(&ckey)? else {
                    continue;
                };
                let rec: completed::Completed = decode(&raw)?;
                if rec.completed_ms < cutoff_ms {
                    round.set(ckey, None);
                }
            }
        }
    }
    Ok(Outcome::Multipart(MpOutcome::Done))
}

/// Re-point a pending part at a moved copy (compaction).
pub(crate) fn relocate_part(
    round: &mut Round<'_>,
    upload: [u8; 16],
    part: u32,
    from: (u64, u64),
    to: VolumeRef,
) -> StoreResult<Outcome> {
    let pkey = part_key(&upload, part);
    let Some(raw) = round.get_raw(&pkey)? else {
        return Ok(Outcome::Relocated(false));
    };
    let (mut rec, counted): (PartRecord, bool) = decode_counted(&raw)?;
    if (rec.loc.segment, rec.loc.offset) != from {
        return Ok(Outcome::Relocated(false));
    }
    round.segment_delta(&part_loc_data(&rec.loc), -1);
    rec.loc.segment = to.segment;
    rec.loc.offset = to.offset;
    rec.loc.record_len = to.record_len;
    round.segment_delta(&part_loc_data(&rec.loc), 1);
    // Keep the row's format: an uncounted (older) part must stay uncounted.
    let mut row = encode(&rec);
    if !counted {
        row[0] = FORMAT_V1;
    }
    round.set(pkey, Some(row));
    Ok(Outcome::Relocated(true))
}

/// Wrap a multipart op for the commit queue.
pub fn op(op: MpOp) -> Op {
    Op::Multipart(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_header_keys_round_trip() {
        let id = new_upload_id();
        let f = part_header_key("dir/file.bin", &id, 42);
        let (k, u, n) = split_part_header_key(&f).expect("split");
        assert_eq!((k, u, n), (&b"dir/file.bin"[..], id, 42));
        assert_eq!(parse_upload_id(&format_upload_id(&id)).expect("parse"), id);
        assert!(parse_upload_id("zz").is_err());
        assert_ne!(new_upload_id(), new_upload_id());
    }
}
