//! One partition: its metadata index, its data volumes and its commit thread.
//!
//! A partition is self-contained under `<data dir>/partitions/pNNNN/`
//! (`index/` and `volumes/`), so it can later be moved to another node as a
//! unit. Reads go straight to the index; every mutation goes through the
//! partition's commit thread ([`crate::commit`]).
//!
//! Writes that grow the store are admitted against the data directory's
//! free-space reserve ([`crate::space`]) before they receive a byte: a PUT
//! or part by its declared length, then charged as its body streams in;
//! metadata-only growth (tags, metadata, upload creation and completion) at
//! [`Partition::submit`]. Deletes, aborts and compaction's relocations are
//! never refused, so space can always be freed.

use crate::commit::{self, Op, Outcome, Request, WriteCond};
use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, PartitionId};
use crate::index::{Engine, IndexMemory, MetaIndex, open_index_with};
use crate::record::{
    DataLoc, ObjectInfo, ObjectMeta, PartLoc, StoredObject, Tag, Usage, object_key, usage_key,
};
use crate::space::Space;
use crate::store::{BodyStream, GetRange, PutOptions, StoreConfig};
use crate::volume::{RangeReader, RecordWriter, SegmentWriter, VolumeSet};
use bytes::Bytes;
use crossbeam_channel::Sender;
use futures::StreamExt;
use md5::{Digest, Md5};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::oneshot;

/// One partition of the store.
pub struct Partition {
    id: PartitionId,
    index: Arc<dyn MetaIndex>,
    volumes: Arc<VolumeSet>,
    /// The commit thread's queue; `None` once shut down.
    tx: Mutex<Option<Sender<Request>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    inline_max: u64,
    /// Free space of the data directory (shared by every partition).
    space: Arc<Space>,
    /// The store's bucket liveness gate, entered by commits that add to a
    /// bucket ([`crate::gate`]).
    gate: Arc<crate::gate::BucketGate>,
    /// The partition's replication group, when it has one.
    group: Option<Arc<dyn crate::replication::Group>>,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A body being received: inline bytes until it outgrows the threshold,
/// then a volume record.
pub(crate) struct Received {
    pub(crate) size: u64,
    pub(crate) md5: [u8; 16],
    /// The flexible checksum the upload keeps ([`crate::ChecksumSpec`]).
    pub(crate) checksum: Option<crate::record::Checksum>,
    pub(crate) data: DataLoc,
    pub(crate) segment: Option<u64>,
}

/// The digests of a body taken as it is received: MD5 (the ETag) and the
/// flexible checksum the upload asked to compute.
pub(crate) struct Digests {
    md5: Md5,
    flex: Option<(crate::flexsum::Algo, crate::flexsum::Hasher)>,
}

impl Digests {
    fn new(opts: &PutOptions) -> Digests {
        let flex = match &opts.checksum {
            Some(crate::store::ChecksumSpec::Compute(a)) => {
                Some((*a, crate::flexsum::Hasher::new(*a)))
            }
            _ => None,
        };
        Digests {
            md5: Md5::new(),
            flex,
        }
    }

    fn update(&mut self, data: &[u8]) {
        self.md5.update(data);
        if let Some((_, h)) = &mut self.flex {
            h.update(data);
        }
    }

    /// The MD5 (checked against Content-MD5) and the checksum to keep.
    fn finish(self, opts: &PutOptions) -> StoreResult<([u8; 16], Option<crate::record::Checksum>)> {
        let md5 = finish_md5(self.md5, opts)?;
        let checksum = match (self.flex, &opts.checksum) {
            (Some((algo, mut h)), _) => Some(crate::record::Checksum {
                algorithm: algo.name().to_string(),
                value: h.finish(),
            }),
            (None, Some(crate::store::ChecksumSpec::Known(c))) => Some(c.clone()),
            (None, _) => None,
        };
        Ok((md5, checksum))
    }
}

impl Partition {
    /// Open partition `id` of the data dir `dir`.
    pub fn open(
        dir: &Path,
        id: PartitionId,
        engine: Engine,
        cfg: &StoreConfig,
        mem: IndexMemory,
        space: Arc<Space>,
        gate: Arc<crate::gate::BucketGate>,
    ) -> StoreResult<Arc<Partition>> {
        let root = dir.join("partitions").join(id.to_string());
        let index_dir = root.join("index");
        std::fs::create_dir_all(&index_dir)?;
        let index: Arc<dyn MetaIndex> = Arc::from(open_index_with(engine, &index_dir, mem)?);
        let volumes = Arc::new(VolumeSet::open(&root.join("volumes"), cfg.segment_max)?);
        let group = match &cfg.groups {
            // A replicated partition's index is written only by its log
            // (it was born with the tag index: nothing to backfill).
            Some(opener) => Some({
                volumes.replicated();
                Arc::clone(&opener.0).open(
                    id,
                    Arc::clone(&index),
                    Arc::clone(&volumes),
                    &root.join("raft"),
                )?
            }),
            None => {
                let indexed = crate::tagindex::backfill(&*index)?;
                if indexed > 0 {
                    tracing::info!(partition = %id, objects = indexed, "built the tag index of a partition written before it existed");
                }
                None
            }
        };
        let sink = match &group {
            Some(g) => commit::Sink::Group(Arc::clone(g)),
            None => commit::Sink::Local {
                durable: cfg.durable,
            },
        };
        let (tx, thread) = commit::spawn(
            format!("commit-{id}"),
            Arc::clone(&index),
            Arc::clone(&volumes),
            sink,
        )?;
        Ok(Arc::new(Partition {
            id,
            index,
            volumes,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            inline_max: cfg.inline_max,
            space,
            gate,
            group,
        }))
    }

    /// The partition's replication group, if it is replicated.
    pub fn group(&self) -> Option<&Arc<dyn crate::replication::Group>> {
        self.group.as_ref()
    }

    /// This partition's id.
    pub fn id(&self) -> PartitionId {
        self.id
    }

    /// The metadata index (LIST scans, compaction).
    pub fn index(&self) -> &dyn MetaIndex {
        &*self.index
    }

    /// The data volumes (compaction).
    pub fn volumes(&self) -> &VolumeSet {
        &self.volumes
    }

    /// Free space of the data directory.
    pub fn space(&self) -> &Space {
        &self.space
    }

    /// Queue `op` on the commit thread and wait until it is durable.
    /// An op that only grows metadata is refused below the disk reserve; one
    /// whose data is already in a volume (`segments`) was admitted before
    /// its body was received.
    pub async fn submit(&self, op: Op, segments: Vec<u64>) -> StoreResult<Outcome> {
        if segments.is_empty() && grows(&op) {
            self.space.admit(0)?;
        }
        // Held until the commit is durable: DeleteBucket waits for it.
        let _alive = match crate::gate::adds_to(&op) {
            Some(bucket) => Some(self.gate.enter(bucket).await?),
            None => None,
        };
        let (reply, rx) = oneshot::channel();
        {
            let tx = self.tx.lock();
            let tx = tx.as_ref().ok_or(StoreError::ShuttingDown)?;
            tx.send(Request {
                op,
                segments,
                reply,
                once: crate::repeat::current(),
            })
            .map_err(|_| StoreError::ShuttingDown)?;
        }
        rx.await.map_err(|_| StoreError::ShuttingDown)?
    }

    fn record(&self, bucket: BucketId, key: &str) -> StoreResult<StoredObject> {
        let raw = self
            .index
            .get(&object_key(bucket, key.as_bytes()))?
            .ok_or(StoreError::NoSuchKey)?;
        StoredObject::decode(&raw)
    }

    /// Metadata of an object.
    pub fn head(&self, bucket: BucketId, key: &str) -> StoreResult<ObjectInfo> {
        Ok(self.record(bucket, key)?.info(key))
    }

    /// Largest body kept in the index instead of a volume.
    pub fn inline_max(&self) -> u64 {
        self.inline_max
    }

    /// Usage of `bucket` in this partition.
    pub fn usage(&self, bucket: BucketId) -> StoreResult<Usage> {
        self.index
            .get(&usage_key(bucket))?
            .map(|v| Usage::decode(&v))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    /// Receive, verify and durably store an object.
    pub async fn put(
        &self,
        bucket: BucketId,
        key: &str,
        meta: ObjectMeta,
        opts: PutOptions,
        body: BodyStream,
    ) -> StoreResult<ObjectInfo> {
        self.put_if(bucket, key, meta, opts, body, WriteCond::None)
            .await
    }

    /// [`Partition::put`] with a precondition checked atomically at commit.
    pub async fn put_if(
        &self,
        bucket: BucketId,
        key: &str,
        meta: ObjectMeta,
        opts: PutOptions,
        body: BodyStream,
        cond: WriteCond,
    ) -> StoreResult<ObjectInfo> {
        self.space.admit(opts.content_length.unwrap_or(0))?;
        let got = self.receive(bucket, key, &opts, body).await?;
        let record = StoredObject {
            size: got.size,
            md5: got.md5,
            mtime_ms: now_ms(),
            parts: 0,
            meta,
            checksum: got.checksum,
            tags: opts.tags,
            data: got.data,
            part_checksums: Vec::new(),
        };
        let info = record.info(key);
        let op = Op::Put {
            bucket,
            key: key.to_string(),
            record,
            cond,
        };
        self.submit(op, got.segment.into_iter().collect()).await?;
        Ok(info)
    }

    async fn receive(
        &self,
        bucket: BucketId,
        key: &str,
        opts: &PutOptions,
        mut body: BodyStream,
    ) -> StoreResult<Received> {
        let mut digests = Digests::new(opts);
        let mut head: Vec<u8> = Vec::new();
        let goes_inline = opts.content_length.is_none_or(|n| n <= self.inline_max);
        if goes_inline {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| StoreError::Body(e.to_string()))?;
                digests.update(&chunk);
                head.extend_from_slice(&chunk);
                if head.len() as u64 > self.inline_max {
                    break;
                }
            }
            if head.len() as u64 <= self.inline_max {
                let (md5, checksum) = digests.finish(opts)?;
                check_length(head.len() as u64, opts)?;
                return Ok(Received {
                    size: head.len() as u64,
                    md5,
                    checksum,
                    data: DataLoc::Inline(head),
                    segment: None,
                });
            }
        }
        self.receive_to_volume(bucket, key.as_bytes(), 0, opts, digests, head, body)
            .await
    }

    /// Receive a multipart part into a volume record flagged as a part.
    pub(crate) async fn receive_part(
        &self,
        bucket: BucketId,
        header_key: &[u8],
        opts: &PutOptions,
        body: BodyStream,
    ) -> StoreResult<Received> {
        self.space.admit(opts.content_length.unwrap_or(0))?;
        let flags = crate::volume::FLAG_PART;
        self.receive_to_volume(
            bucket,
            header_key,
            flags,
            opts,
            Digests::new(opts),
            Vec::new(),
            body,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn receive_to_volume(
        &self,
        bucket: BucketId,
        header_key: &[u8],
        flags: u8,
        opts: &PutOptions,
        digests: Digests,
        head: Vec<u8>,
        body: BodyStream,
    ) -> StoreResult<Received> {
        let mut seg = self.volumes.take_writer()?;
        let target = Target {
            seg: &mut seg,
            space: &self.space,
        };
        let result =
            write_record(target, bucket, header_key, flags, opts, digests, head, body).await;
        let id = seg.id();
        self.volumes.release(seg);
        let (size, (md5, checksum), data) = result?;
        self.ship_record(&data).await?;
        Ok(Received {
            size,
            md5,
            checksum,
            data,
            segment: Some(id),
        })
    }

    /// Replicate the volume record `data` names (already in this
    /// replica's volume, counted pending) to the partition's group, if it
    /// has one, before the op that points at it is queued. A record that
    /// could not be shipped is done with (its op is never queued): it
    /// stops counting as pending, so compaction may reclaim it.
    pub(crate) async fn ship_record(&self, data: &DataLoc) -> StoreResult<()> {
        let Some(group) = &self.group else {
            return Ok(());
        };
        let shipped = self.ship(group, data).await;
        if shipped.is_err()
            && let DataLoc::Volume { segment, .. } = *data
        {
            self.volumes.committed(&[segment]);
        }
        shipped
    }

    /// Whether this replica may write the partition now: it is not
    /// replicated, or it leads its group and has applied what was
    /// committed (background sweeps run only there; elsewhere their writes
    /// would be refused).
    pub async fn writes_here(&self) -> bool {
        match &self.group {
            None => true,
            Some(g) => g.read_barrier().await.is_ok(),
        }
    }

    /// Replicate the volume record `data` names to the group, a piece at
    /// a time, before the op that points at it is queued: an entry never
    /// commits pointing at bytes a quorum does not have.
    async fn ship(
        &self,
        group: &Arc<dyn crate::replication::Group>,
        data: &DataLoc,
    ) -> StoreResult<()> {
        let DataLoc::Volume {
            segment,
            offset,
            record_len,
        } = *data
        else {
            return Ok(());
        };
        let file = self.volumes.file(segment)?;
        let piece = crate::replication::SHIP_PIECE;
        let mut at = offset;
        while at < offset + record_len {
            let len = piece.min(offset + record_len - at);
            let f = Arc::clone(&file);
            let bytes = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
                std::os::unix::fs::FileExt::read_exact_at(&*f, &mut buf, at).map(|()| buf)
            })
            .await
            .map_err(|e| StoreError::Engine(format!("volume read task: {e}")))??;
            let write = crate::replication::VolumeWrite {
                segment,
                offset: at,
                bytes: Bytes::from(bytes),
            };
            group.ship(write).await?;
            at += len;
        }
        Ok(())
    }

    /// Metadata and body of an object, whole or a range.
    pub fn get(
        &self,
        bucket: BucketId,
        key: &str,
        range: Option<GetRange>,
    ) -> StoreResult<(ObjectInfo, BodyStream)> {
        // A compaction may move the data between reading the record and
        // opening its segment; the second read then sees the new location.
        for _ in 0..3 {
            let rec = self.record(bucket, key)?;
            match self.open_body(bucket, &rec, key, range) {
                Ok(body) => return Ok((rec.info(key), body)),
                Err(StoreError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Engine(
            "object data kept moving during the read".into(),
        ))
    }

    fn open_body(
        &self,
        bucket: BucketId,
        rec: &StoredObject,
        key: &str,
        range: Option<GetRange>,
    ) -> StoreResult<BodyStream> {
        let (start, end) = range.map_or((0, rec.size), |r| (r.start, r.end.min(rec.size)));
        match &rec.data {
            DataLoc::Beside { .. } => {
                let bytes = self.body_beside(bucket, rec, key)?;
                Ok(slice_stream(&bytes, start, end))
            }
            DataLoc::Inline(bytes) => Ok(slice_stream(bytes, start, end)),
            DataLoc::Volume {
                segment, offset, ..
            } => {
                let file = self.volumes.file(*segment)?;
                let key_len = key.len() as u64;
                let reader = RangeReader::new(file, *offset, key_len, rec.size, start, end);
                Ok(chunk_stream(vec![reader]))
            }
            DataLoc::Parts(parts) => Ok(chunk_stream(self.part_readers(parts, start, end)?)),
        }
    }

    /// The body of a small object from its row beside the record. A row
    /// of another version (an overwrite or delete committed between the
    /// two reads) reads as NotFound, so [`Partition::get`] reads the
    /// record again.
    fn body_beside(&self, bucket: BucketId, rec: &StoredObject, key: &str) -> StoreResult<Vec<u8>> {
        let row = self
            .index
            .get(&crate::record::inline_key(bucket, key.as_bytes()))?;
        match row {
            Some(row)
                if row.get(..16) == Some(&rec.md5[..]) && row.len() as u64 == 16 + rec.size =>
            {
                Ok(row[16..].to_vec())
            }
            _ => Err(StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the body row changed since the record was read",
            ))),
        }
    }

    /// Readers of the parts that overlap `start..end`, each for its share.
    fn part_readers(
        &self,
        parts: &[PartLoc],
        start: u64,
        end: u64,
    ) -> StoreResult<Vec<RangeReader>> {
        let mut readers = Vec::new();
        let mut part_start = 0;
        for p in parts {
            let part_end = part_start + p.size;
            if part_end > start && part_start < end {
                let file = self.volumes.file(p.segment)?;
                let (s, e) = (
                    start.max(part_start) - part_start,
                    end.min(part_end) - part_start,
                );
                readers.push(RangeReader::new(
                    file,
                    p.offset,
                    p.header_key_len,
                    p.size,
                    s,
                    e,
                ));
            }
            part_start = part_end;
        }
        Ok(readers)
    }

    /// Delete an object; whether it existed.
    pub async fn delete(&self, bucket: BucketId, key: &str) -> StoreResult<bool> {
        match self
            .submit(
                Op::Delete {
                    bucket,
                    key: key.to_string(),
                },
                Vec::new(),
            )
            .await?
        {
            Outcome::Deleted(existed) => Ok(existed),
            other => Err(unexpected(&other)),
        }
    }

    /// Apply a bulk tag edit to `keys` (all of this partition) in one round.
    pub async fn edit_tags(
        &self,
        bucket: BucketId,
        keys: Vec<String>,
        edit: Arc<crate::tagindex::TagEdit>,
    ) -> StoreResult<Vec<crate::tagindex::Edited>> {
        match self
            .submit(Op::EditTags { bucket, keys, edit }, Vec::new())
            .await?
        {
            Outcome::Edited(e) => Ok(e),
            other => Err(unexpected(&other)),
        }
    }

    /// Replace an object's tags.
    pub async fn set_tags(&self, bucket: BucketId, key: &str, tags: Vec<Tag>) -> StoreResult<()> {
        self.submit(
            Op::SetTags {
                bucket,
                key: key.to_string(),
                tags,
            },
            Vec::new(),
        )
        .await
        .map(|_| ())
    }

    /// Replace an object's metadata in place.
    pub async fn replace_meta(
        &self,
        bucket: BucketId,
        key: &str,
        meta: ObjectMeta,
        tags: Option<Vec<Tag>>,
    ) -> StoreResult<ObjectInfo> {
        let op = Op::ReplaceMeta {
            bucket,
            key: key.to_string(),
            meta,
            tags,
            mtime_ms: now_ms(),
        };
        match self.submit(op, Vec::new()).await? {
            Outcome::Updated(rec) => Ok(rec.info(key)),
            other => Err(unexpected(&other)),
        }
    }

    /// Stop the commit thread once it has committed everything queued.
    pub fn shutdown(&self) {
        drop(self.tx.lock().take());
        if let Some(t) = self.thread.lock().take()
            && t.join().is_err()
        {
            tracing::error!(partition = %self.id, "commit thread panicked");
        }
        if let Some(g) = &self.group {
            g.shutdown();
        }
        if let Err(e) = self.index.sync() {
            tracing::error!(partition = %self.id, error = %e, "final index sync failed");
        }
    }
}

/// A body stream that reads (and verifies) the readers' ranges in order.
/// A stream of `bytes[start..end]` (clamped), in one chunk.
fn slice_stream(bytes: &[u8], start: u64, end: u64) -> BodyStream {
    let s = usize::try_from(start)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let e = usize::try_from(end)
        .unwrap_or(usize::MAX)
        .min(bytes.len())
        .max(s);
    let chunk = Bytes::copy_from_slice(&bytes[s..e]);
    Box::pin(futures::stream::iter(
        (!chunk.is_empty()).then_some(Ok(chunk)),
    ))
}

fn chunk_stream(readers: Vec<RangeReader>) -> BodyStream {
    let state = (std::collections::VecDeque::from(readers), ());
    Box::pin(futures::stream::try_unfold(
        state,
        |(mut readers, ())| async move {
            while let Some(r) = readers.front_mut() {
                match r.next_chunk() {
                    Ok(Some(b)) => return Ok(Some((b, (readers, ())))),
                    Ok(None) => {
                        readers.pop_front();
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "volume read failed");
                        return Err(std::io::Error::other(e.to_string()));
                    }
                }
            }
            Ok(None)
        },
    ))
}

/// Whether `op` adds to what the index holds (refused below the reserve).
/// A list of what grows, not of what shrinks: an op that frees space
/// (deletes, aborts, forgetting completed uploads, relocations) must never
/// be refused on a full disk, including ones added later.
fn grows(op: &Op) -> bool {
    use crate::multipart::MpOp;
    match op {
        Op::Put { .. } | Op::SetTags { .. } | Op::ReplaceMeta { .. } => true,
        Op::Multipart(m) => matches!(
            m,
            MpOp::Create { .. } | MpOp::PutPart { .. } | MpOp::Complete { .. }
        ),
        _ => false,
    }
}

/// Where a body goes: the lent segment, and the free space it is charged to.
struct Target<'a> {
    seg: &'a mut SegmentWriter,
    space: &'a Space,
}

/// Append one record (the head already received, then the rest of the
/// body) to `seg`, checking length and MD5 before the record is finished,
/// so a refused body leaves nothing behind. Every chunk is charged to the
/// free space, so a body without a declared length (or many admitted at
/// once) stops before it eats the reserve.
#[allow(clippy::too_many_arguments)]
async fn write_record(
    Target { seg, space }: Target<'_>,
    bucket: BucketId,
    header_key: &[u8],
    flags: u8,
    opts: &PutOptions,
    mut digests: Digests,
    head: Vec<u8>,
    mut body: BodyStream,
) -> StoreResult<(u64, ([u8; 16], Option<crate::record::Checksum>), DataLoc)> {
    let mut rw = RecordWriter::begin_with_flags(seg, bucket, header_key, flags)?;
    space.charge(head.len() as u64)?;
    rw.push(&head)?;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| StoreError::Body(e.to_string()))?;
        digests.update(&chunk);
        space.charge(chunk.len() as u64)?;
        rw.push(&chunk)?;
        if opts.content_length.is_some_and(|n| rw.data_len() > n) {
            return Err(StoreError::Body(
                "body is longer than its declared length".into(),
            ));
        }
    }
    let size = rw.data_len();
    check_length(size, opts)?;
    let sums = digests.finish(opts)?;
    Ok((size, sums, rw.finish()?))
}

fn unexpected(o: &Outcome) -> StoreError {
    StoreError::Engine(format!("unexpected commit outcome {o:?}"))
}

fn finish_md5(md5: Md5, opts: &PutOptions) -> StoreResult<[u8; 16]> {
    let got: [u8; 16] = md5.finalize().into();
    match opts.content_md5 {
        Some(want) if want != got => Err(StoreError::BadDigest),
        _ => Ok(got),
    }
}

fn check_length(size: u64, opts: &PutOptions) -> StoreResult<()> {
    match opts.content_length {
        Some(n) if size < n => Err(StoreError::IncompleteBody),
        Some(n) if size > n => Err(StoreError::Body(
            "body is longer than its declared length".into(),
        )),
        _ => Ok(()),
    }
}
