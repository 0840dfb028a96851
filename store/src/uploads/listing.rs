//! ListMultipartUploads and the stale-upload sweep: scans of the upload
//! rows of every partition.
//!
//! Upload rows are keyed `'m' · bucket · key · 0x00 · upload id`, so one
//! bucket's uploads under a prefix are a range scan per partition; the
//! partitions' results are merged in (key, upload id) order, the order S3
//! lists them in, and rolled up at the delimiter like ListObjects.

use crate::error::{StoreError, StoreResult};
use crate::multipart::{self, MpOp, UploadInfo, UploadRecord};
use crate::partition::Partition;
use crate::store::{BucketInfo, Store};
use std::sync::Arc;

/// One entry of a ListMultipartUploads page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UploadEntry {
    /// An upload.
    Upload(UploadInfo),
    /// Keys rolled up at the delimiter.
    Prefix(String),
}

/// A ListMultipartUploads request.
#[derive(Clone, Debug, Default)]
pub struct UploadQuery {
    /// Only keys with this prefix.
    pub prefix: String,
    /// Roll keys up at this delimiter.
    pub delimiter: Option<String>,
    /// Resume after this key (with `upload_id_marker`: after that upload of it).
    pub key_marker: Option<String>,
    /// Resume after this upload of `key_marker`.
    pub upload_id_marker: Option<String>,
    /// Entries per page (1..=1000).
    pub max_uploads: usize,
}

/// A ListMultipartUploads page.
#[derive(Clone, Debug, Default)]
pub struct UploadPage {
    /// Entries in (key, upload id) order.
    pub entries: Vec<UploadEntry>,
    /// More follow.
    pub truncated: bool,
}

impl Store {
    /// One page of the bucket's uploads in progress, merged over partitions.
    pub fn list_multipart_uploads(
        &self,
        bucket: &BucketInfo,
        q: &UploadQuery,
    ) -> StoreResult<UploadPage> {
        let mut all = Vec::new();
        for p in self.partitions() {
            all.extend(uploads_of(p, bucket, &q.prefix)?);
        }
        all.sort_by(|a, b| (&a.key, &a.upload_id).cmp(&(&b.key, &b.upload_id)));
        let after = |u: &UploadInfo| match (&q.key_marker, &q.upload_id_marker) {
            (None, _) => true,
            (Some(k), None) => u.key.as_str() > k.as_str(),
            (Some(k), Some(id)) => {
                (u.key.as_str(), u.upload_id.as_str()) > (k.as_str(), id.as_str())
            }
        };
        let mut page = UploadPage::default();
        for u in all.into_iter().filter(after) {
            let rolled = q
                .delimiter
                .as_deref()
                .filter(|d| !d.is_empty())
                .and_then(|d| {
                    u.key[q.prefix.len()..]
                        .find(d)
                        .map(|i| u.key[..q.prefix.len() + i + d.len()].to_string())
                });
            let entry = match rolled {
                Some(cp) => UploadEntry::Prefix(cp),
                None => UploadEntry::Upload(u),
            };
            if matches!(entry, UploadEntry::Prefix(_)) && page.entries.last() == Some(&entry) {
                continue; // further uploads under a prefix already listed
            }
            if page.entries.len() == q.max_uploads {
                page.truncated = true;
                break;
            }
            page.entries.push(entry);
        }
        Ok(page)
    }

    /// Abort every upload created before `cutoff_ms`; how many.
    pub async fn abort_stale_uploads(&self, cutoff_ms: i64) -> StoreResult<u64> {
        let mut n = 0;
        for p in self.partitions() {
            for (bucket, key, upload, created_ms) in all_uploads(p)? {
                if created_ms < cutoff_ms {
                    let op = MpOp::Abort {
                        bucket,
                        key,
                        upload,
                    };
                    match p.submit(multipart::op(op), Vec::new()).await {
                        Ok(_) | Err(StoreError::NoSuchUpload) => n += 1,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(n)
    }
}

fn uploads_of(
    p: &Arc<Partition>,
    bucket: &BucketInfo,
    prefix: &str,
) -> StoreResult<Vec<UploadInfo>> {
    let start = multipart::upload_prefix(bucket.id, prefix);
    let end = crate::list::prefix_successor(&start).unwrap_or_default();
    let skip = multipart::upload_prefix(bucket.id, "").len();
    let mut out = Vec::new();
    for (k, v) in scan_all(p, &start, &end)? {
        let Some(rest) = k.get(skip..).filter(|r| r.len() >= 17) else {
            continue;
        };
        let (key, id) = rest.split_at(rest.len() - 17);
        let id: [u8; 16] = id[1..]
            .try_into()
            .map_err(|_| StoreError::Corrupt("upload row key".into()))?;
        let rec: UploadRecord = multipart::decode(&v)?;
        out.push(UploadInfo {
            key: String::from_utf8_lossy(key).into_owned(),
            upload_id: multipart::format_upload_id(&id),
            created_ms: rec.created_ms,
            checksum: rec.checksum,
        });
    }
    Ok(out)
}

type UploadRow = (crate::ids::BucketId, String, [u8; 16], i64);

fn all_uploads(p: &Arc<Partition>) -> StoreResult<Vec<UploadRow>> {
    let start = vec![crate::record::UPLOAD_TAG];
    let end = vec![crate::record::UPLOAD_TAG + 1];
    let mut out = Vec::new();
    for (k, v) in scan_all(p, &start, &end)? {
        if k.len() < 1 + 8 + 17 {
            continue;
        }
        let bucket =
            crate::ids::BucketId(u64::from_be_bytes(k[1..9].try_into().unwrap_or_default()));
        let (key, id) = k[9..].split_at(k.len() - 9 - 17);
        let id: [u8; 16] = id[1..]
            .try_into()
            .map_err(|_| StoreError::Corrupt("upload row key".into()))?;
        let rec: UploadRecord = multipart::decode(&v)?;
        out.push((
            bucket,
            String::from_utf8_lossy(key).into_owned(),
            id,
            rec.created_ms,
        ));
    }
    Ok(out)
}

fn scan_all(p: &Arc<Partition>, start: &[u8], end: &[u8]) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut from = start.to_vec();
    loop {
        let rows = p.index().scan(&from, end, 1000)?;
        let full = rows.len() == 1000;
        if let Some((k, _)) = rows.last() {
            from = k.clone();
            from.push(0);
        }
        out.extend(rows);
        if !full {
            return Ok(out);
        }
    }
}
