//! The multipart-upload operations of [`Store`] (the records and the commit
//! logic are in [`crate::multipart`]).

use crate::commit::{Outcome, WriteCond};
use crate::error::{StoreError, StoreResult};
use crate::multipart::{
    self, MAX_PARTS, MpOp, MpOutcome, PartInfo, PartRecord, UploadInfo, UploadRecord,
};
use crate::partition::{Partition, now_ms};
use crate::record::{DataLoc, ObjectInfo, ObjectMeta, PartLoc, Tag, etag};
use crate::store::{BodyStream, BucketInfo, GetRange, PutOptions, Store};
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

fn expect_mp(o: Outcome) -> StoreResult<MpOutcome> {
    match o {
        Outcome::Multipart(m) => Ok(m),
        other => Err(StoreError::Engine(format!(
            "unexpected commit outcome {other:?}"
        ))),
    }
}

fn parse_etag(s: &str) -> StoreResult<[u8; 16]> {
    let raw = hex::decode(s.trim_matches('"')).map_err(|_| StoreError::InvalidPart)?;
    raw.try_into().map_err(|_| StoreError::InvalidPart)
}

impl Store {
    /// Start a multipart upload; returns its id.
    pub async fn create_multipart_upload(
        &self,
        bucket: &BucketInfo,
        key: &str,
        meta: ObjectMeta,
        tags: Vec<Tag>,
    ) -> StoreResult<String> {
        let upload = multipart::new_upload_id();
        let record = UploadRecord {
            created_ms: now_ms(),
            meta,
            tags,
        };
        let op = MpOp::Create {
            bucket: bucket.id,
            key: key.to_string(),
            upload,
            record,
        };
        self.partition_of(bucket.id, key)
            .submit(multipart::op(op), Vec::new())
            .await?;
        Ok(multipart::format_upload_id(&upload))
    }

    /// Receive part `number` (1..=10000) of an upload, durably.
    pub async fn upload_part(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
        number: u32,
        opts: PutOptions,
        body: BodyStream,
    ) -> StoreResult<PartInfo> {
        if !(1..=MAX_PARTS).contains(&number) {
            return Err(StoreError::InvalidArgument(format!(
                "Part number must be an integer between 1 and {MAX_PARTS}, inclusive"
            )));
        }
        let upload = multipart::parse_upload_id(upload_id)?;
        let p = self.partition_of(bucket.id, key);
        // Fail fast before receiving a body for an upload that is gone; the
        // commit checks again.
        if p.index()
            .get(&multipart::upload_key(bucket.id, key, &upload))?
            .is_none()
        {
            return Err(StoreError::NoSuchUpload);
        }
        let header_key = multipart::part_header_key(key, &upload, number);
        let got = p.receive_part(bucket.id, &header_key, &opts, body).await?;
        let DataLoc::Volume {
            segment,
            offset,
            record_len,
        } = got.data
        else {
            return Err(StoreError::Engine(
                "a part was not stored in a volume".into(),
            ));
        };
        let loc = PartLoc {
            segment,
            offset,
            record_len,
            header_key_len: header_key.len() as u64,
            size: got.size,
        };
        let record = PartRecord {
            size: got.size,
            md5: got.md5,
            mtime_ms: now_ms(),
            loc,
        };
        let info = PartInfo {
            number,
            size: got.size,
            etag: etag(&got.md5, 0),
            mtime_ms: record.mtime_ms,
        };
        let op = MpOp::PutPart {
            bucket: bucket.id,
            key: key.to_string(),
            upload,
            part: number,
            record,
        };
        p.submit(multipart::op(op), vec![segment]).await?;
        Ok(info)
    }

    /// Complete an upload from the client's (part number, ETag) list. No
    /// part data is copied.
    pub async fn complete_multipart_upload(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
        cond: WriteCond,
    ) -> StoreResult<ObjectInfo> {
        let upload = multipart::parse_upload_id(upload_id)?;
        let parts = parts
            .iter()
            .map(|(n, e)| Ok((*n, parse_etag(e)?)))
            .collect::<StoreResult<Vec<_>>>()?;
        let op = MpOp::Complete {
            bucket: bucket.id,
            key: key.to_string(),
            upload,
            parts,
            min_part_size: self.min_part_size,
            cond,
            mtime_ms: now_ms(),
        };
        match expect_mp(
            self.partition_of(bucket.id, key)
                .submit(multipart::op(op), Vec::new())
                .await?,
        )? {
            MpOutcome::Completed(rec) => Ok(rec.info(key)),
            MpOutcome::Done => Err(StoreError::Engine("completion returned no object".into())),
        }
    }

    /// Abort an upload; its parts' space is reclaimed by compaction.
    pub async fn abort_multipart_upload(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
    ) -> StoreResult<()> {
        let upload = multipart::parse_upload_id(upload_id)?;
        let op = MpOp::Abort {
            bucket: bucket.id,
            key: key.to_string(),
            upload,
        };
        self.partition_of(bucket.id, key)
            .submit(multipart::op(op), Vec::new())
            .await
            .map(|_| ())
    }

    /// The upload's parts after `marker`, up to `max`; and whether more follow.
    pub fn list_parts(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
        marker: u32,
        max: usize,
    ) -> StoreResult<(Vec<PartInfo>, bool)> {
        let upload = multipart::parse_upload_id(upload_id)?;
        let p = self.partition_of(bucket.id, key);
        if p.index()
            .get(&multipart::upload_key(bucket.id, key, &upload))?
            .is_none()
        {
            return Err(StoreError::NoSuchUpload);
        }
        let (_, end) = multipart::parts_range(&upload);
        let start = multipart::part_key(&upload, marker.saturating_add(1));
        let rows = p.index().scan(&start, &end, max.saturating_add(1))?;
        let truncated = rows.len() > max;
        let mut out = Vec::with_capacity(rows.len().min(max));
        for (k, v) in rows.into_iter().take(max) {
            let number = k
                .get(17..21)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes)
                .unwrap_or(0);
            let rec: PartRecord = multipart::decode(&v)?;
            out.push(PartInfo {
                number,
                size: rec.size,
                etag: etag(&rec.md5, 0),
                mtime_ms: rec.mtime_ms,
            });
        }
        Ok((out, truncated))
    }

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

    /// The byte range of part `number` of an object, and its part count
    /// (GetObject/HeadObject with partNumber). A single-PUT object has one
    /// part, the whole object.
    pub fn object_part_range(
        &self,
        bucket: &BucketInfo,
        key: &str,
        number: u32,
    ) -> StoreResult<(GetRange, u32)> {
        let p = self.partition_of(bucket.id, key);
        let raw = p
            .index()
            .get(&crate::record::object_key(bucket.id, key.as_bytes()))?
            .ok_or(StoreError::NoSuchKey)?;
        let rec = crate::record::StoredObject::decode(&raw)?;
        let sizes: Vec<u64> = match &rec.data {
            DataLoc::Parts(parts) => parts.iter().map(|p| p.size).collect(),
            _ => vec![rec.size],
        };
        let count = u32::try_from(sizes.len()).unwrap_or(u32::MAX);
        let idx = usize::try_from(number)
            .unwrap_or(usize::MAX)
            .wrapping_sub(1);
        let size = *sizes.get(idx).ok_or_else(|| {
            StoreError::InvalidArgument("The requested partnumber is not satisfiable".into())
        })?;
        let start: u64 = sizes[..idx].iter().sum();
        Ok((
            GetRange {
                start,
                end: start + size,
            },
            count,
        ))
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
