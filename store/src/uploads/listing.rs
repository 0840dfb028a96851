//! ListMultipartUploads and the background sweep of uploads: scans of the
//! upload rows of every partition.
//!
//! Upload rows are keyed `'m' · bucket · key · 0x00 · upload id`, so one
//! bucket's uploads under a prefix are a range scan per partition. A page
//! is a merge of one cursor per partition in (key, upload id) order, the
//! order S3 lists them in, rolled up at the delimiter like ListObjects.
//! Memory and reads are bounded by the page, not the bucket: each cursor
//! seeks straight to the markers, reads small batches (about its share of
//! the page) and refills only when the merge drains it; a rolled-up prefix
//! makes the cursor seek past every key under it; the merge stops at
//! max-uploads + 1 entries. A common prefix sorts where it starts, so a
//! key marker at or past it (a page that ended with the prefix names it as
//! NextKeyMarker) skips it.
//!
//! The sweep (stale uploads, records of completed uploads) also reads in
//! bounded chunks, acting on each chunk before reading the next.

use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::list::prefix_successor;
use crate::multipart::completed::{Completed, completed_key, upload_of_key};
use crate::multipart::{self, MpOp, UploadInfo, UploadRecord};
use crate::partition::Partition;
use crate::record::{COMPLETED_TAG, UPLOAD_TAG};
use crate::store::{BucketInfo, Store};
use std::collections::VecDeque;
use std::sync::Arc;

/// One entry of a ListMultipartUploads page.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum UploadEntry {
    /// An upload.
    Upload(UploadInfo),
    /// Keys rolled up at the delimiter.
    Prefix(String),
}

/// A ListMultipartUploads request.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct UploadPage {
    /// Entries in (key, upload id) order.
    pub entries: Vec<UploadEntry>,
    /// More follow.
    pub truncated: bool,
}

/// One partition's uploads of the listed range, read in small batches.
struct Cursor<'p> {
    part: &'p Partition,
    /// Next index key to read from.
    from: Vec<u8>,
    end: Vec<u8>,
    batch: usize,
    buf: VecDeque<(Vec<u8>, UploadInfo)>,
    exhausted: bool,
}

impl<'p> Cursor<'p> {
    /// The next upload (index key, info), reading a batch when drained.
    fn peek(&mut self) -> StoreResult<Option<&(Vec<u8>, UploadInfo)>> {
        if self.buf.is_empty() && !self.exhausted {
            let rows = self.part.index().scan(&self.from, &self.end, self.batch)?;
            self.exhausted = rows.len() < self.batch;
            if let Some((k, _)) = rows.last() {
                self.from = k.clone();
                self.from.push(0);
            }
            for (k, v) in rows {
                if let Some(info) = decode_row(&k, &v)? {
                    self.buf.push_back((k, info));
                }
            }
        }
        Ok(self.buf.front())
    }

    /// Skip every upload whose index key is below `to` (past a prefix).
    fn skip_to(&mut self, to: &[u8]) {
        while self.buf.front().is_some_and(|(k, _)| k.as_slice() < to) {
            self.buf.pop_front();
        }
        if self.buf.is_empty() && self.from.as_slice() < to {
            self.from = to.to_vec();
        }
    }
}

/// An upload row as a listed upload (None for a row of another shape).
fn decode_row(k: &[u8], v: &[u8]) -> StoreResult<Option<UploadInfo>> {
    let Some((_, key, id)) = split_upload_key(k) else {
        return Ok(None);
    };
    let rec: UploadRecord = multipart::decode(v)?;
    Ok(Some(UploadInfo {
        key: String::from_utf8_lossy(key).into_owned(),
        upload_id: multipart::format_upload_id(&id),
        created_ms: rec.created_ms,
        checksum: rec.checksum,
    }))
}

/// `'m' · bucket · key · 0x00 · id` into (bucket, key, id).
fn split_upload_key(k: &[u8]) -> Option<(BucketId, &[u8], [u8; 16])> {
    if k.len() < 1 + 8 + 17 {
        return None;
    }
    let bucket = BucketId(u64::from_be_bytes(k.get(1..9)?.try_into().ok()?));
    let (key, id) = k[9..].split_at(k.len() - 9 - 17);
    Some((bucket, key, id.get(1..)?.try_into().ok()?))
}

/// The first index key a listing can start at: the prefix, or just past
/// the markers when they are further.
fn start_key(bucket: BucketId, q: &UploadQuery) -> Vec<u8> {
    let from_prefix = multipart::upload_prefix(bucket, &q.prefix);
    let from_marker = q.key_marker.as_deref().map(|k| {
        let id = q
            .upload_id_marker
            .as_deref()
            .and_then(|id| multipart::parse_upload_id(id).ok());
        match id {
            // Just past that upload of the key.
            Some(id) => {
                let mut s = multipart::upload_key(bucket, k, &id);
                s.push(0);
                s
            }
            // Uploads of the key itself sort below `key · 0x01`; with an
            // unparsable id marker, start at the key and let `after` decide.
            None if q.upload_id_marker.is_some() => multipart::upload_prefix(bucket, k),
            None => {
                let mut s = multipart::upload_prefix(bucket, k);
                s.push(1);
                s
            }
        }
    });
    match from_marker {
        Some(m) if m > from_prefix => m,
        _ => from_prefix,
    }
}

/// Whether `u` comes after the request's markers (S3's rule; the seek
/// already skips almost everything before them).
fn after(q: &UploadQuery, u: &UploadInfo) -> bool {
    match (&q.key_marker, &q.upload_id_marker) {
        (None, _) => true,
        (Some(k), None) => u.key.as_str() > k.as_str(),
        (Some(k), Some(id)) => (u.key.as_str(), u.upload_id.as_str()) > (k.as_str(), id.as_str()),
    }
}

/// The common prefix `key` rolls up into, if any.
fn rolled_up(q: &UploadQuery, key: &str) -> Option<String> {
    let d = q.delimiter.as_deref().filter(|d| !d.is_empty())?;
    let rest = key.get(q.prefix.len()..)?;
    rest.find(d)
        .map(|i| key[..q.prefix.len() + i + d.len()].to_string())
}

/// Index of the cursor holding the smallest (key, upload id), if any.
fn smallest(cursors: &mut [Cursor<'_>]) -> StoreResult<Option<usize>> {
    let mut best: Option<(usize, (String, String))> = None;
    for (i, c) in cursors.iter_mut().enumerate() {
        if let Some((_, u)) = c.peek()? {
            let k = (u.key.clone(), u.upload_id.clone());
            if best.as_ref().is_none_or(|(_, b)| k < *b) {
                best = Some((i, k));
            }
        }
    }
    Ok(best.map(|(i, _)| i))
}

impl Store {
    /// One page of the bucket's uploads in progress, merged over partitions.
    pub fn list_multipart_uploads(
        &self,
        bucket: &BucketInfo,
        q: &UploadQuery,
    ) -> StoreResult<UploadPage> {
        uploads_page(self.partitions(), bucket, q)
    }

    /// [`Store::list_multipart_uploads`] over partitions `ids` only (a
    /// cluster node answers for the partitions it leads; the client
    /// merges the pages).
    pub fn list_multipart_uploads_in(
        &self,
        bucket: &BucketInfo,
        q: &UploadQuery,
        ids: &[crate::ids::PartitionId],
    ) -> StoreResult<UploadPage> {
        uploads_page(&self.partitions_in(ids)?, bucket, q)
    }

    /// Abort every upload created before `cutoff_ms`; how many. Their
    /// parts stop counting in the bucket's usage in the same batch.
    pub async fn abort_stale_uploads(&self, cutoff_ms: i64) -> StoreResult<u64> {
        self.sweep(UPLOAD_TAG, |p, rows| async move {
            abort_older(&p, &rows, cutoff_ms).await
        })
        .await
    }

    /// Forget the records of uploads completed before `cutoff_ms` (they
    /// answer repeated completions); how many.
    pub async fn forget_completed(&self, cutoff_ms: i64) -> StoreResult<u64> {
        self.sweep(COMPLETED_TAG, |p, rows| async move {
            let mut old = Vec::new();
            for (k, v) in &rows {
                let rec: Completed = multipart::decode(v)?;
                if let Some(id) = upload_of_key(k).filter(|_| rec.completed_ms < cutoff_ms) {
                    debug_assert_eq!(completed_key(&id), *k);
                    old.push(id);
                }
            }
            if old.is_empty() {
                return Ok(0);
            }
            let n = u64::try_from(old.len()).unwrap_or(u64::MAX);
            let op = MpOp::ForgetCompleted {
                uploads: old,
                cutoff_ms,
            };
            p.submit(multipart::op(op), Vec::new()).await?;
            Ok(n)
        })
        .await
    }
}

/// Abort the uploads among `rows` created before `cutoff_ms`; how many.
async fn abort_older(
    p: &Arc<Partition>,
    rows: &[(Vec<u8>, Vec<u8>)],
    cutoff_ms: i64,
) -> StoreResult<u64> {
    let mut n = 0;
    for (k, v) in rows {
        let Some((bucket, key, upload)) = split_upload_key(k) else {
            continue;
        };
        let rec: UploadRecord = multipart::decode(v)?;
        if rec.created_ms >= cutoff_ms {
            continue;
        }
        let op = MpOp::Abort {
            bucket,
            key: String::from_utf8_lossy(key).into_owned(),
            upload,
        };
        match p.submit(multipart::op(op), Vec::new()).await {
            Ok(_) | Err(StoreError::NoSuchUpload) => n += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// One page of the uploads of `bucket` merged over `partitions`.
fn uploads_page(
    partitions: &[Arc<Partition>],
    bucket: &BucketInfo,
    q: &UploadQuery,
) -> StoreResult<UploadPage> {
    let start = start_key(bucket.id, q);
    let end = prefix_successor(&multipart::upload_prefix(bucket.id, &q.prefix)).unwrap_or_default();
    let parts = partitions.len().max(1);
    // About each partition's share of the page, plus one to see past it.
    let batch = (q.max_uploads + 1).div_ceil(parts).clamp(2, 1001);
    let mut cursors: Vec<Cursor<'_>> = partitions
        .iter()
        .map(|p| Cursor {
            part: p,
            from: start.clone(),
            end: end.clone(),
            batch,
            buf: VecDeque::new(),
            exhausted: false,
        })
        .collect();
    let mut page = UploadPage::default();
    while let Some(i) = smallest(&mut cursors)? {
        let Some((_, u)) = cursors[i].buf.pop_front() else {
            break;
        };
        if !after(q, &u) {
            continue;
        }
        let entry = match rolled_up(q, &u.key) {
            Some(cp) => {
                // Nothing under this prefix can be listed again: seek
                // past it in this partition.
                let past = prefix_successor(&multipart::upload_prefix(bucket.id, &cp));
                cursors[i].skip_to(&past.unwrap_or_else(|| end.clone()));
                if q.key_marker.as_deref().is_some_and(|k| cp.as_str() <= k) {
                    // A prefix sorts where it starts: at or before the
                    // marker it was listed already (a truncated page
                    // ending in a prefix names it as NextKeyMarker).
                    continue;
                }
                UploadEntry::Prefix(cp)
            }
            None => UploadEntry::Upload(u),
        };
        if matches!(entry, UploadEntry::Prefix(_)) && page.entries.last() == Some(&entry) {
            continue; // the same prefix, from another partition
        }
        if page.entries.len() == q.max_uploads {
            page.truncated = true;
            break;
        }
        page.entries.push(entry);
    }
    Ok(page)
}
