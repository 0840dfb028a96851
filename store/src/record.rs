//! Object records as stored in a partition index, with their format byte.
//!
//! Index key of an object: `b'o' | bucket id (u64 BE) | key bytes`, so one
//! bucket's objects are one ordered range. The value is
//! `FORMAT_V2 | bincode(StoredObject)`. The leading byte lets a version
//! migrate records in place: readers reject a byte they do not know instead
//! of misreading it. Records written as `FORMAT_V1` (before objects kept
//! their parts' checksums) still decode, with no part checksums; both
//! layouts share their leading fields, so a listing reads either the same
//! way.

use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use serde::{Deserialize, Serialize};

/// Format byte of the first record layout (also used by the catalog and
/// multipart rows).
pub const FORMAT_V1: u8 = 1;

/// Format byte of object records that end with their parts' checksums.
pub const FORMAT_V2: u8 = 2;

/// Key-space tag of object records.
pub const OBJECT_TAG: u8 = b'o';
/// Key-space tag of per-bucket usage counters (one row per bucket per partition).
pub const USAGE_TAG: u8 = b'u';
/// Key-space tag of per-segment live-byte counters (for compaction).
pub const SEGMENT_TAG: u8 = b's';
/// Key-space tag of multipart uploads in progress: `'m' | bucket | key | 0 | upload id`.
pub const UPLOAD_TAG: u8 = b'm';
/// Key-space tag of uploaded parts: `'q' | upload id | part number (u32 BE)`.
pub const PART_TAG: u8 = b'q';
/// Key-space tag of per-bucket multipart counters (open uploads, bytes of
/// their parts): `'p' | bucket`, one row per bucket per partition.
pub const PENDING_TAG: u8 = b'p';
/// Key-space tag of recently completed uploads (answers a repeated
/// CompleteMultipartUpload): `'c' | upload id`.
pub const COMPLETED_TAG: u8 = b'c';
/// Key-space tag of recently applied calls that may be repeated (answers
/// a repeat without applying it again): `'r' | call id | bucket | key`
/// ([`crate::repeat`]).
pub const REPEAT_TAG: u8 = b'r';

/// Key-space tag of small bodies kept beside their object records:
/// `'i' | bucket | key` -> `md5 (16 bytes) | body` ([`DataLoc::Beside`]).
pub const INLINE_TAG: u8 = b'i';

/// One object tag (key, value).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    /// Tag key (1..=128 characters).
    pub key: String,
    /// Tag value (0..=256 characters).
    pub value: String,
}

/// A flexible checksum of an object's body as the client sent it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksum {
    /// Algorithm name as S3 spells it: CRC32, CRC32C, CRC64NVME, SHA1, SHA256.
    pub algorithm: String,
    /// The value, base64 as in the x-amz-checksum-* header.
    pub value: String,
}

/// Client-supplied metadata stored with an object and returned on GET/HEAD.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// Content-Type.
    pub content_type: Option<String>,
    /// Content-Encoding.
    pub content_encoding: Option<String>,
    /// Content-Disposition.
    pub content_disposition: Option<String>,
    /// Content-Language.
    pub content_language: Option<String>,
    /// Cache-Control.
    pub cache_control: Option<String>,
    /// Expires (as the client sent it, HTTP date).
    pub expires: Option<String>,
    /// x-amz-meta-* pairs, names lower-cased without the prefix, in order.
    pub user: Vec<(String, String)>,
}

/// Where an object's bytes are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataLoc {
    /// Small object: the bytes live in the record itself.
    // serde_bytes: bincode then copies the bytes in one go instead of
    // element by element (a 4 KiB inline body decoded 20x faster).
    Inline(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Larger object: a record in a volume segment of the same partition.
    Volume {
        /// Segment number within the partition.
        segment: u64,
        /// Offset of the volume record's header in the segment.
        offset: u64,
        /// Total length of the volume record (header, data, block CRCs).
        record_len: u64,
    },
    /// A completed multipart upload: its parts' volume records, in order.
    Parts(Vec<PartLoc>),
    /// Small object: the bytes live in their own index row beside the
    /// record ([`inline_key`]), written in the same batch, so that a
    /// listing, which reads records, never copies bodies. Records written
    /// before it hold [`DataLoc::Inline`]; the commit round moves a body
    /// out of the record whenever it writes one ([`crate::commit`]).
    Beside {
        /// Body length.
        len: u64,
    },
}

/// Where one part of a multipart object is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartLoc {
    /// Segment number.
    pub segment: u64,
    /// Offset of the part's volume record.
    pub offset: u64,
    /// Length of the volume record.
    pub record_len: u64,
    /// Length of the key field in the record header.
    pub header_key_len: u64,
    /// Data bytes of the part.
    pub size: u64,
}

impl DataLoc {
    /// Every (segment, record length) this location occupies.
    pub fn volume_records(&self) -> Vec<(u64, u64)> {
        match self {
            DataLoc::Inline(_) | DataLoc::Beside { .. } => Vec::new(),
            DataLoc::Volume {
                segment,
                record_len,
                ..
            } => vec![(*segment, *record_len)],
            DataLoc::Parts(parts) => parts.iter().map(|p| (p.segment, p.record_len)).collect(),
        }
    }

    /// Whether a volume record at (segment, offset) belongs to this location.
    pub fn uses(&self, segment: u64, offset: u64) -> bool {
        match self {
            DataLoc::Inline(_) | DataLoc::Beside { .. } => false,
            DataLoc::Volume {
                segment: s,
                offset: o,
                ..
            } => (*s, *o) == (segment, offset),
            DataLoc::Parts(parts) => parts
                .iter()
                .any(|p| (p.segment, p.offset) == (segment, offset)),
        }
    }
}

/// The full stored record of one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredObject {
    /// Object size in bytes.
    pub size: u64,
    /// MD5 of the body (the ETag of a single PUT), 16 raw bytes.
    pub md5: [u8; 16],
    /// Last-modified time, milliseconds since the Unix epoch.
    pub mtime_ms: i64,
    /// Number of parts of a multipart object (0 for a single PUT); the ETag
    /// is then the MD5 of the parts' MD5s with a `-N` suffix.
    pub parts: u32,
    /// Client metadata.
    pub meta: ObjectMeta,
    /// The tag set (tag updates rewrite only this record).
    pub tags: Vec<Tag>,
    /// The flexible checksum the client sent and the gateway verified.
    pub checksum: Option<Checksum>,
    /// Where the data is.
    pub data: DataLoc,
    /// A multipart object's part checksums (values of `checksum`'s
    /// algorithm), in part order; empty when the object has no checksum or
    /// is a single PUT. Last, so older layouts decode up to it.
    pub part_checksums: Vec<String>,
}

/// The layout of [`FORMAT_V1`] object records: a [`StoredObject`] without
/// part checksums.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct StoredObjectV1 {
    size: u64,
    md5: [u8; 16],
    mtime_ms: i64,
    parts: u32,
    meta: ObjectMeta,
    tags: Vec<Tag>,
    checksum: Option<Checksum>,
    data: DataLoc,
}

impl From<StoredObjectV1> for StoredObject {
    fn from(v: StoredObjectV1) -> StoredObject {
        StoredObject {
            size: v.size,
            md5: v.md5,
            mtime_ms: v.mtime_ms,
            parts: v.parts,
            meta: v.meta,
            tags: v.tags,
            checksum: v.checksum,
            data: v.data,
            part_checksums: Vec::new(),
        }
    }
}

/// What the gateway sees of an object (everything but the data location).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    /// The object key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// ETag without quotes (hex MD5 for a single PUT).
    pub etag: String,
    /// Last-modified, milliseconds since the Unix epoch.
    pub mtime_ms: i64,
    /// Client metadata.
    pub meta: ObjectMeta,
    /// Tags.
    pub tags: Vec<Tag>,
    /// Number of parts (0: not a multipart object).
    pub parts: u32,
    /// Stored flexible checksum, if the client sent one.
    pub checksum: Option<Checksum>,
}

impl StoredObject {
    /// Encode with the current format byte.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT_V2];
        // bincode into a Vec cannot fail for these plain types.
        if let Err(e) = bincode::serialize_into(&mut out, self) {
            unreachable!("bincode of a plain struct into a Vec failed: {e}");
        }
        out
    }

    /// Decode a value read from the index (either layout).
    pub fn decode(bytes: &[u8]) -> StoreResult<StoredObject> {
        match bytes.first() {
            Some(&FORMAT_V1) => decode_object_value::<StoredObjectV1>(bytes).map(Into::into),
            _ => decode_object_value(bytes),
        }
    }

    /// The gateway's view of this record under `key`.
    pub fn info(&self, key: &str) -> ObjectInfo {
        ObjectInfo {
            key: key.to_string(),
            size: self.size,
            etag: etag(&self.md5, self.parts),
            mtime_ms: self.mtime_ms,
            meta: self.meta.clone(),
            tags: self.tags.clone(),
            parts: self.parts,
            checksum: self.checksum.clone(),
        }
    }
}

/// Decode an object record value (or its leading fields) after checking
/// its format byte; bincode ignores the fields a shorter type leaves out.
fn decode_object_value<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> StoreResult<T> {
    match bytes.split_first() {
        Some((&(FORMAT_V1 | FORMAT_V2), rest)) => bincode::deserialize(rest)
            .map_err(|e| StoreError::Corrupt(format!("object record: {e}"))),
        Some((v, _)) => Err(StoreError::Corrupt(format!("unknown record format {v}"))),
        None => Err(StoreError::Corrupt("empty object record".into())),
    }
}

/// The ETag (without quotes) of an object with this MD5 and part count.
pub fn etag(md5: &[u8; 16], parts: u32) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    // Every listed key makes one: a table, not hex's char iterator.
    let mut hex = String::with_capacity(32 + 11);
    for b in md5 {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    if parts != 0 {
        hex.push('-');
        hex.push_str(&parts.to_string());
    }
    hex
}

/// Index key of object `key` in `bucket`.
pub fn object_key(bucket: BucketId, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + key.len());
    k.push(OBJECT_TAG);
    k.extend_from_slice(&bucket.0.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// Index key of the body of small object `key` in `bucket`.
pub fn inline_key(bucket: BucketId, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + key.len());
    k.push(INLINE_TAG);
    k.extend_from_slice(&bucket.0.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The object key back out of an index key (`None` if not an object key of `bucket`).
pub fn split_object_key(bucket: BucketId, index_key: &[u8]) -> Option<&[u8]> {
    let prefix = object_key(bucket, b"");
    index_key.strip_prefix(prefix.as_slice())
}

/// Index key of a bucket's usage row in one partition.
pub fn usage_key(bucket: BucketId) -> Vec<u8> {
    let mut k = vec![USAGE_TAG];
    k.extend_from_slice(&bucket.0.to_be_bytes());
    k
}

/// Index key of a segment's live-bytes row.
pub fn segment_key(segment: u64) -> Vec<u8> {
    let mut k = vec![SEGMENT_TAG];
    k.extend_from_slice(&segment.to_be_bytes());
    k
}

/// Usage of one bucket in one partition: object count and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// Number of objects.
    pub objects: i64,
    /// Sum of object sizes.
    pub bytes: i64,
}

impl Usage {
    /// 16-byte encoding (two i64 BE).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&self.objects.to_be_bytes());
        v.extend_from_slice(&self.bytes.to_be_bytes());
        v
    }
    /// Decode; a malformed row is corruption.
    pub fn decode(b: &[u8]) -> StoreResult<Usage> {
        let (o, rest) = b
            .split_first_chunk::<8>()
            .ok_or_else(|| StoreError::Corrupt("usage row".into()))?;
        let (by, _) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| StoreError::Corrupt("usage row".into()))?;
        Ok(Usage {
            objects: i64::from_be_bytes(*o),
            bytes: i64::from_be_bytes(*by),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_are_lower_hex_with_the_part_count_of_a_multipart_object() {
        let md5: [u8; 16] = std::array::from_fn(|i| u8::try_from(i * 17).unwrap_or(0));
        assert_eq!(etag(&md5, 0), hex::encode(md5));
        assert_eq!(etag(&md5, 12), format!("{}-12", hex::encode(md5)));
    }

    #[test]
    fn record_round_trips_and_rejects_unknown_format() {
        let r = StoredObject {
            size: 3,
            md5: [7; 16],
            mtime_ms: 42,
            parts: 0,
            meta: ObjectMeta {
                content_type: Some("text/plain".into()),
                ..Default::default()
            },
            tags: vec![Tag {
                key: "k".into(),
                value: "v".into(),
            }],
            checksum: None,
            data: DataLoc::Inline(b"abc".to_vec()),
            part_checksums: Vec::new(),
        };
        let enc = r.encode();
        assert_eq!(enc[0], FORMAT_V2);
        assert_eq!(StoredObject::decode(&enc).expect("decode"), r);
        let mut bad = enc.clone();
        bad[0] = 99;
        assert!(matches!(
            StoredObject::decode(&bad),
            Err(StoreError::Corrupt(_))
        ));
        assert!(StoredObject::decode(&[]).is_err());
    }

    #[test]
    fn v1_records_decode_without_part_checksums() {
        let data = DataLoc::Inline(b"xyz".to_vec());
        let mut enc = vec![FORMAT_V1];
        let v1 = StoredObjectV1 {
            size: 3,
            md5: [1; 16],
            mtime_ms: 9,
            parts: 0,
            meta: ObjectMeta::default(),
            tags: Vec::new(),
            checksum: None,
            data: data.clone(),
        };
        bincode::serialize_into(&mut enc, &v1).expect("encode v1");
        let got = StoredObject::decode(&enc).expect("decode v1");
        assert_eq!((got.size, got.mtime_ms, &got.data), (3, 9, &data));
        assert!(got.part_checksums.is_empty());
        assert_eq!(ListSummary::decode(&enc).expect("summary").size, 3);
    }

    #[test]
    fn object_keys_order_by_bucket_then_key() {
        let a = object_key(BucketId(1), b"zzz");
        let b = object_key(BucketId(2), b"aaa");
        assert!(a < b);
        assert_eq!(split_object_key(BucketId(1), &a), Some(&b"zzz"[..]));
        assert_eq!(split_object_key(BucketId(2), &a), None);
    }
}

/// The leading fields of a [`StoredObject`], all a listing needs. Decoding
/// stops after them, so LIST never copies metadata, tags or inline data.
#[derive(Clone, Debug, Deserialize)]
pub struct ListSummary {
    /// Size in bytes.
    pub size: u64,
    /// MD5 of the body.
    pub md5: [u8; 16],
    /// Last-modified, ms.
    pub mtime_ms: i64,
    /// Part count (0: single PUT).
    pub parts: u32,
}

impl ListSummary {
    /// Decode the summary from a full record value (trailing fields ignored).
    pub fn decode(bytes: &[u8]) -> StoreResult<ListSummary> {
        decode_object_value(bytes)
    }

    /// A listing's view of the object (no metadata or tags).
    pub fn info(&self, key: &str) -> ObjectInfo {
        ObjectInfo {
            key: key.to_string(),
            size: self.size,
            etag: etag(&self.md5, self.parts),
            mtime_ms: self.mtime_ms,
            meta: ObjectMeta::default(),
            tags: Vec::new(),
            parts: self.parts,
            checksum: None,
        }
    }
}
