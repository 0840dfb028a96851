//! Recently completed uploads, so a repeated CompleteMultipartUpload (an
//! SDK retrying after the first answer was lost) gets the first answer.
//!
//! Completing an upload writes, in the same batch as the object, a row
//! `'c' · upload id` ([`Completed`]): the bucket and key, a digest of the
//! client's part list, and what the completion answered (ETag, size,
//! checksum). A later Complete of an upload that no longer exists is
//! answered from that row when bucket, key and part list match, and with
//! `NoSuchUpload` otherwise. Answering reads the row only: nothing is
//! written or counted again, and an overwrite or delete of the key since
//! does not matter (S3 answers the retry regardless). The rows are
//! forgotten after [`COMPLETED_TTL`] (or the upload max age, if shorter)
//! by the background sweep, which bounds them.

use super::ListedPart;
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::record::{COMPLETED_TAG, Checksum, ObjectInfo, ObjectMeta, StoredObject, etag};
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

/// How long a completed upload is remembered (at most).
pub const COMPLETED_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What a completion answered, kept for its retries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completed {
    /// Bucket it completed in.
    pub bucket: u64,
    /// Object key.
    pub key: String,
    /// MD5 over the client's (part number, part MD5) list.
    pub parts_digest: [u8; 16],
    /// When it completed, ms (also the object's mtime).
    pub completed_ms: i64,
    /// Object size.
    pub size: u64,
    /// MD5 of the parts' MD5s (the ETag's hex).
    pub md5: [u8; 16],
    /// Number of parts (the ETag's suffix).
    pub parts: u32,
    /// The object's flexible checksum.
    pub checksum: Option<Checksum>,
}

/// Index key of a completed upload's row.
pub fn completed_key(upload: &[u8; 16]) -> Vec<u8> {
    let mut k = vec![COMPLETED_TAG];
    k.extend_from_slice(upload);
    k
}

/// Digest of a client's part list: numbers and ETags, in its order.
pub fn parts_digest(parts: &[ListedPart]) -> [u8; 16] {
    let mut h = Md5::new();
    for p in parts {
        h.update(p.number.to_be_bytes());
        h.update(p.md5);
    }
    h.finalize().into()
}

impl Completed {
    /// The record of `object`, just completed from `parts`.
    pub fn of(bucket: BucketId, key: &str, parts: &[ListedPart], object: &StoredObject) -> Self {
        Completed {
            bucket: bucket.0,
            key: key.to_string(),
            parts_digest: parts_digest(parts),
            completed_ms: object.mtime_ms,
            size: object.size,
            md5: object.md5,
            parts: object.parts,
            checksum: object.checksum.clone(),
        }
    }

    /// The answer to a retry of this completion, if it is one (same
    /// bucket, key and part list); `NoSuchUpload` otherwise.
    pub fn answer(
        &self,
        bucket: BucketId,
        key: &str,
        parts: &[ListedPart],
    ) -> StoreResult<ObjectInfo> {
        if self.bucket != bucket.0 || self.key != key || self.parts_digest != parts_digest(parts) {
            return Err(StoreError::NoSuchUpload);
        }
        Ok(ObjectInfo {
            key: self.key.clone(),
            size: self.size,
            etag: etag(&self.md5, self.parts),
            mtime_ms: self.completed_ms,
            meta: ObjectMeta::default(),
            tags: Vec::new(),
            parts: self.parts,
            checksum: self.checksum.clone(),
        })
    }
}

/// The upload id of a `'c'` row key.
pub fn upload_of_key(k: &[u8]) -> Option<[u8; 16]> {
    k.get(1..17)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(number: u32, md5: u8) -> ListedPart {
        ListedPart {
            number,
            md5: [md5; 16],
            checksum: None,
        }
    }

    #[test]
    fn only_the_same_request_is_answered() {
        let parts = [listed(1, 1), listed(2, 2)];
        let rec = Completed {
            bucket: 7,
            key: "k".into(),
            parts_digest: parts_digest(&parts),
            completed_ms: 5,
            size: 10,
            md5: [9; 16],
            parts: 2,
            checksum: None,
        };
        let got = rec.answer(BucketId(7), "k", &parts).expect("retry");
        assert_eq!(got.etag, etag(&[9; 16], 2));
        let wrong = [
            rec.answer(BucketId(8), "k", &parts),
            rec.answer(BucketId(7), "other", &parts),
            rec.answer(BucketId(7), "k", &parts[..1]),
            rec.answer(BucketId(7), "k", &[listed(1, 1), listed(2, 3)]),
        ];
        for w in wrong {
            assert!(matches!(w, Err(StoreError::NoSuchUpload)));
        }
        assert_eq!(upload_of_key(&completed_key(&[4; 16])), Some([4; 16]));
    }
}
