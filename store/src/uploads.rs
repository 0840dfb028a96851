//! The multipart-upload operations of [`Store`] (the records and the commit
//! logic are in [`crate::multipart`]).

use crate::commit::{Outcome, WriteCond};
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::multipart::{
    self, ListedPart, MAX_PARTS, MpOp, MpOutcome, PartInfo, PartRecord, Pending, UploadChecksum,
    UploadRecord,
};
use crate::partition::now_ms;
use crate::record::{Checksum, DataLoc, ObjectInfo, ObjectMeta, PartLoc, StoredObject, Tag, etag};
use crate::store::{BodyStream, BucketInfo, GetRange, PutOptions, Store};
mod listing;

pub use listing::{UploadEntry, UploadPage, UploadQuery};

fn expect_mp(o: Outcome) -> StoreResult<MpOutcome> {
    match o {
        Outcome::Multipart(m) => Ok(m),
        other => Err(StoreError::Engine(format!(
            "unexpected commit outcome {other:?}"
        ))),
    }
}

/// The MD5 an ETag (quoted or not) stands for; InvalidPart when it cannot
/// be one of a part's.
pub fn part_md5(s: &str) -> StoreResult<[u8; 16]> {
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
        self.create_multipart_upload_with(bucket, key, meta, tags, None)
            .await
    }

    /// Start a multipart upload that asked for a flexible checksum.
    pub async fn create_multipart_upload_with(
        &self,
        bucket: &BucketInfo,
        key: &str,
        meta: ObjectMeta,
        tags: Vec<Tag>,
        checksum: Option<UploadChecksum>,
    ) -> StoreResult<String> {
        let upload = multipart::new_upload_id();
        let record = UploadRecord {
            created_ms: now_ms(),
            meta,
            tags,
            checksum,
        };
        let op = MpOp::Create {
            bucket: bucket.id,
            key: key.to_string(),
            upload,
            record,
        };
        self.partition_of(bucket.id, key)?
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
        let p = self.partition_of(bucket.id, key)?;
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
        let checksum = got.checksum.clone();
        let record = PartRecord {
            size: got.size,
            md5: got.md5,
            mtime_ms: now_ms(),
            loc,
            checksum: checksum.clone(),
        };
        let info = PartInfo {
            number,
            size: got.size,
            etag: etag(&got.md5, 0),
            mtime_ms: record.mtime_ms,
            checksum,
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
        let parts = parts
            .iter()
            .map(|(n, e)| {
                Ok(ListedPart {
                    number: *n,
                    md5: part_md5(e)?,
                    checksum: None,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        self.complete_multipart_upload_with(bucket, key, upload_id, parts, cond, None)
            .await
    }

    /// Complete an upload, checking the part checksums the client repeated
    /// and deriving the object's checksum from theirs (compared with
    /// `whole`, the whole-object checksum the client sent, if any).
    pub async fn complete_multipart_upload_with(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
        parts: Vec<ListedPart>,
        cond: WriteCond,
        whole: Option<Checksum>,
    ) -> StoreResult<ObjectInfo> {
        let upload = multipart::parse_upload_id(upload_id)?;
        let op = MpOp::Complete {
            bucket: bucket.id,
            key: key.to_string(),
            upload,
            parts,
            min_part_size: self.min_part_size,
            cond,
            mtime_ms: now_ms(),
            whole,
        };
        match expect_mp(
            self.partition_of(bucket.id, key)?
                .submit(multipart::op(op), Vec::new())
                .await?,
        )? {
            MpOutcome::Completed(rec) => Ok(rec.info(key)),
            MpOutcome::Repeated(info) => Ok(info),
            MpOutcome::Done => Err(StoreError::Engine("completion returned no object".into())),
        }
    }

    /// The answer to a CompleteMultipartUpload of an upload that is gone:
    /// the first completion's (ETag, size, checksum) when this one repeats
    /// it (same bucket, key and part list) and it completed recently;
    /// NoSuchUpload otherwise. Reads only: nothing is written or counted.
    pub fn repeated_completion(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
        parts: &[ListedPart],
    ) -> StoreResult<ObjectInfo> {
        let upload = multipart::parse_upload_id(upload_id)?;
        let raw = self
            .partition_of(bucket.id, key)?
            .index()
            .get(&multipart::completed::completed_key(&upload))?
            .ok_or(StoreError::NoSuchUpload)?;
        let rec: multipart::completed::Completed = multipart::decode(&raw)?;
        rec.answer(bucket.id, key, parts)
    }

    /// The size of part `number` of an upload, if it has been uploaded
    /// (what a re-upload of that number replaces).
    pub fn part_size(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
        number: u32,
    ) -> StoreResult<Option<u64>> {
        let upload = multipart::parse_upload_id(upload_id)?;
        let raw = self
            .partition_of(bucket.id, key)?
            .index()
            .get(&multipart::part_key(&upload, number))?;
        raw.map(|v| multipart::decode::<PartRecord>(&v).map(|r| r.size))
            .transpose()
    }

    /// Open uploads of a bucket and the bytes of their parts (summed over
    /// partitions; exact, since the counters change in the same batch as
    /// the upload and part rows).
    pub fn bucket_pending(&self, bucket: BucketId) -> StoreResult<Pending> {
        pending_over(self.partitions(), bucket)
    }

    /// [`Store::bucket_pending`] over partitions `ids` only (a cluster
    /// node answers for the partitions it leads).
    pub fn bucket_pending_in(
        &self,
        bucket: BucketId,
        ids: &[crate::ids::PartitionId],
    ) -> StoreResult<Pending> {
        pending_over(&self.partitions_in(ids)?, bucket)
    }

    /// Usage and open uploads of every bucket of `buckets`, summed over
    /// them and over partitions `ids` (a cluster node answers for the
    /// partitions it leads).
    pub fn buckets_totals_in(
        &self,
        buckets: &[BucketId],
        ids: &[crate::ids::PartitionId],
    ) -> StoreResult<(crate::record::Usage, Pending)> {
        let parts = self.partitions_in(ids)?;
        let mut usage = crate::record::Usage::default();
        let mut pending = Pending::default();
        for &b in buckets {
            let u = crate::store::usage_over(&parts, b)?;
            let p = pending_over(&parts, b)?;
            usage.objects += u.objects;
            usage.bytes += u.bytes;
            pending.uploads += p.uploads;
            pending.part_bytes += p.part_bytes;
        }
        Ok((usage, pending))
    }

    /// Abort an upload; its parts stop counting at once, and their space is
    /// reclaimed by compaction.
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
        self.partition_of(bucket.id, key)?
            .submit(multipart::op(op), Vec::new())
            .await
            .map(|_| ())
    }

    /// The checksum an upload was created with (NoSuchUpload when it is gone).
    pub fn upload_checksum(
        &self,
        bucket: &BucketInfo,
        key: &str,
        upload_id: &str,
    ) -> StoreResult<Option<UploadChecksum>> {
        let upload = multipart::parse_upload_id(upload_id)?;
        let raw = self
            .partition_of(bucket.id, key)?
            .index()
            .get(&multipart::upload_key(bucket.id, key, &upload))?
            .ok_or(StoreError::NoSuchUpload)?;
        let rec: UploadRecord = multipart::decode(&raw)?;
        Ok(rec.checksum)
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
        let p = self.partition_of(bucket.id, key)?;
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
                checksum: rec.checksum,
            });
        }
        Ok((out, truncated))
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
        let rec = self.object_record(bucket, key)?;
        let sizes = part_sizes(&rec);
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

    /// An object and its parts, read together (GetObjectAttributes); the
    /// parts carry their checksums when the object kept them. A single-PUT
    /// object has no parts.
    pub fn object_with_parts(
        &self,
        bucket: &BucketInfo,
        key: &str,
    ) -> StoreResult<(ObjectInfo, Vec<ObjectPart>)> {
        let rec = self.object_record(bucket, key)?;
        if rec.parts == 0 {
            return Ok((rec.info(key), Vec::new()));
        }
        let mut sums = rec.part_checksums.iter();
        let parts = (1u32..)
            .zip(part_sizes(&rec))
            .map(|(number, size)| ObjectPart {
                number,
                size,
                checksum: sums.next().cloned(),
            })
            .collect();
        Ok((rec.info(key), parts))
    }

    /// The stored record of an object (NoSuchKey when absent).
    fn object_record(&self, bucket: &BucketInfo, key: &str) -> StoreResult<StoredObject> {
        let raw = self
            .partition_of(bucket.id, key)?
            .index()
            .get(&crate::record::object_key(bucket.id, key.as_bytes()))?
            .ok_or(StoreError::NoSuchKey)?;
        StoredObject::decode(&raw)
    }
}

/// One part of a multipart object.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectPart {
    /// Part number (1-based position in the object).
    pub number: u32,
    /// Bytes.
    pub size: u64,
    /// Its checksum value (the object checksum's algorithm), if kept.
    pub checksum: Option<String>,
}

/// The sizes of an object's parts; a single PUT is one part.
fn part_sizes(rec: &StoredObject) -> Vec<u64> {
    match &rec.data {
        DataLoc::Parts(parts) => parts.iter().map(|p| p.size).collect(),
        _ => vec![rec.size],
    }
}

/// Open uploads of `bucket` and their part bytes, summed over `partitions`.
fn pending_over(
    partitions: &[std::sync::Arc<crate::partition::Partition>],
    bucket: BucketId,
) -> StoreResult<Pending> {
    let mut total = Pending::default();
    for p in partitions {
        let key = multipart::counters::pending_key(bucket);
        if let Some(v) = p.index().get(&key)? {
            let got = Pending::decode(&v)?;
            total.uploads += got.uploads;
            total.part_bytes += got.part_bytes;
        }
    }
    Ok(total)
}
