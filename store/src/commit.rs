//! Group commit: one thread per partition applies every mutation of that
//! partition, gathering whatever is queued into one durable batch.
//!
//! Why a thread: both index engines serialise syncs, and a sync costs the
//! same for one record as for a thousand. While the thread is syncing a
//! batch, new requests queue; the next round takes them all, so N concurrent
//! writers share one fsync instead of paying N. Because it is the only
//! writer of its partition's index, read-modify-write operations (tagging,
//! conditional puts, usage counters) need no further locking: the thread
//! reads through an overlay of the batch being built, so later requests in
//! the same batch see earlier ones.
//!
//! Order of a round: (1) apply each request to the overlay; a request that
//! fails (precondition, missing key) fails alone; (2) fdatasync every volume
//! segment the batch's records point into; (3) write the index batch,
//! including the usage and segment counter rows it changed; (4) sync the
//! index; (5) answer. Data is therefore durable before the metadata that
//! points to it, and a reply of success means both are on disk.
//!
//! After the round, every volume record its requests named is uncounted as
//! pending ([`VolumeSet::committed`]): from then on the live-bytes counters
//! alone say whether compaction may delete a segment. A round that failed to
//! persist seals the segments it named (an fsync that failed leaves the page
//! cache in an unknown state: never append after it); the index reopens
//! itself ([`crate::index_reopen`]), and the next round checks that every
//! segment the reopened index counts live bytes in still exists.

use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::index::{MetaIndex, WriteBatch};
use crate::record::{
    DataLoc, ObjectMeta, StoredObject, Tag, Usage, inline_key, object_key, segment_key, usage_key,
};
use crate::volume::VolumeSet;
use crossbeam_channel::{Receiver, Sender};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Most requests folded into one batch.
const MAX_BATCH: usize = 1024;

/// A precondition on a put.
#[derive(Clone, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum WriteCond {
    /// Unconditional.
    #[default]
    None,
    /// Only if no object exists under the key (If-None-Match: *).
    IfAbsent,
    /// Only if the current object's MD5 is this (If-Match).
    IfMd5([u8; 16]),
    /// Only if an object exists under the key (If-Match: *).
    IfExists,
    /// Only if the current object's ETag (without quotes) is this; works
    /// for multipart ETags (`<hex>-N`) too.
    IfEtag(String),
}

/// One mutation of a partition.
#[derive(Debug)]
pub enum Op {
    /// Store a new object record (replacing any old one).
    Put {
        /// Bucket.
        bucket: BucketId,
        /// Object key.
        key: String,
        /// The new record.
        record: StoredObject,
        /// Precondition.
        cond: WriteCond,
    },
    /// Remove an object.
    Delete {
        /// Bucket.
        bucket: BucketId,
        /// Object key.
        key: String,
    },
    /// Replace an object's tag set.
    SetTags {
        /// Bucket.
        bucket: BucketId,
        /// Object key.
        key: String,
        /// New tag set.
        tags: Vec<Tag>,
    },
    /// Apply a bulk tag edit to some objects of one partition (each where
    /// its filter matches), all in this round.
    EditTags {
        /// Bucket.
        bucket: BucketId,
        /// Object keys (all of this partition).
        keys: Vec<String>,
        /// The edit.
        edit: std::sync::Arc<crate::tagindex::TagEdit>,
    },
    /// Replace an object's client metadata (and optionally tags) in place.
    ReplaceMeta {
        /// Bucket.
        bucket: BucketId,
        /// Object key.
        key: String,
        /// New metadata.
        meta: ObjectMeta,
        /// New tags, or keep.
        tags: Option<Vec<Tag>>,
        /// New modification time.
        mtime_ms: i64,
    },
    /// Point an object (or a pending part) at a new copy of its data, if it
    /// still points at `from` (compaction).
    Relocate {
        /// What refers to the record.
        target: RelocTarget,
        /// (segment, offset) the reference must still point at.
        from: (u64, u64),
        /// The new copy.
        to: VolumeRef,
    },
    /// A multipart-upload mutation.
    Multipart(crate::multipart::MpOp),
    /// Forget the rows of repeatable calls ([`crate::repeat`]) among
    /// `rows` that applied before `cutoff_ms`.
    ForgetRepeats {
        /// Row keys.
        rows: Vec<Vec<u8>>,
        /// Apply time at or after which a row is kept.
        cutoff_ms: i64,
    },
    /// Refuse later writes into `bucket` in this partition until
    /// `until_ms`, if the partition holds none of its objects
    /// (BucketNotEmpty otherwise): a replicated DeleteBucket's seal
    /// ([`crate::seal_rows`]).
    SealBucket {
        /// Bucket.
        bucket: BucketId,
        /// Unix millisecond until which the seal holds.
        until_ms: i64,
    },
    /// Remove `bucket`'s seal in this partition (a DeleteBucket failed).
    ReviveBucket {
        /// Bucket.
        bucket: BucketId,
    },
}

/// What refers to a volume record that compaction moves.
#[derive(Debug, Clone)]
pub enum RelocTarget {
    /// An object's data (single record or one of its parts).
    Object {
        /// Bucket.
        bucket: BucketId,
        /// Object key.
        key: String,
    },
    /// A part of an upload in progress.
    Part {
        /// Upload id.
        upload: [u8; 16],
        /// Part number.
        part: u32,
    },
}

/// A volume record's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeRef {
    /// Segment.
    pub segment: u64,
    /// Offset in the segment.
    pub offset: u64,
    /// Record length.
    pub record_len: u64,
}

/// `loc` with the record at `from` replaced by `to`, or `None` if `loc`
/// does not use `from`.
fn moved(loc: &DataLoc, from: (u64, u64), to: &VolumeRef) -> Option<DataLoc> {
    match loc {
        DataLoc::Volume {
            segment, offset, ..
        } if (*segment, *offset) == from => Some(DataLoc::Volume {
            segment: to.segment,
            offset: to.offset,
            record_len: to.record_len,
        }),
        DataLoc::Parts(parts) => {
            let i = parts.iter().position(|p| (p.segment, p.offset) == from)?;
            let mut parts = parts.clone();
            parts[i].segment = to.segment;
            parts[i].offset = to.offset;
            parts[i].record_len = to.record_len;
            Some(DataLoc::Parts(parts))
        }
        _ => None,
    }
}

/// What a successful op did.
#[derive(Debug)]
pub enum Outcome {
    /// Put stored; the replaced record if any.
    Put(Option<StoredObject>),
    /// Delete done; whether the object existed.
    Deleted(bool),
    /// The updated record.
    Updated(StoredObject),
    /// Whether a relocation applied.
    Relocated(bool),
    /// A multipart mutation's result.
    Multipart(crate::multipart::MpOutcome),
    /// What a bulk tag edit did, per key.
    Edited(Vec<crate::tagindex::Edited>),
    /// How many rows of repeatable calls were forgotten.
    Forgotten(u64),
    /// A seal written or removed.
    Sealed,
}

/// A queued request.
pub struct Request {
    /// The mutation.
    pub op: Op,
    /// Volume segments that must be synced before this op's metadata.
    pub segments: Vec<u64>,
    /// The id of the call that queued it, if that call may be sent again
    /// ([`crate::repeat`]): applied once whatever its repeats.
    pub once: Option<crate::repeat::CallId>,
    /// Where the answer goes.
    pub reply: oneshot::Sender<StoreResult<Outcome>>,
}

/// The mutations of one round, applied to an overlay over the index.
pub(crate) struct Round<'a> {
    index: &'a dyn MetaIndex,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    usage: HashMap<BucketId, Usage>,
    segments: HashMap<u64, i64>,
}

impl<'a> Round<'a> {
    pub(crate) fn new(index: &'a dyn MetaIndex) -> Self {
        Round {
            index,
            overlay: BTreeMap::new(),
            usage: HashMap::new(),
            segments: HashMap::new(),
        }
    }

    pub(crate) fn current(&self, ikey: &[u8]) -> StoreResult<Option<StoredObject>> {
        self.get_raw(ikey)?
            .map(|v| StoredObject::decode(&v))
            .transpose()
    }

    pub(crate) fn account(
        &mut self,
        bucket: BucketId,
        old: Option<&StoredObject>,
        new: Option<&StoredObject>,
    ) {
        let u = self.usage.entry(bucket).or_default();
        let size =
            |r: Option<&StoredObject>| r.map_or(0, |r| i64::try_from(r.size).unwrap_or(i64::MAX));
        u.objects += i64::from(new.is_some()) - i64::from(old.is_some());
        u.bytes += size(new) - size(old);
        if let Some(o) = old {
            self.segment_delta(&o.data, -1);
        }
        if let Some(n) = new {
            self.segment_delta(&n.data, 1);
        }
    }

    /// Count (`sign` = 1) or uncount (-1) the volume bytes of `loc`.
    pub(crate) fn segment_delta(&mut self, loc: &DataLoc, sign: i64) {
        for (segment, len) in loc.volume_records() {
            *self.segments.entry(segment).or_default() +=
                sign * i64::try_from(len).unwrap_or(i64::MAX);
        }
    }

    /// Entries with `start <= key < end`, as the index plus this round's
    /// overlay shows them.
    pub(crate) fn scan_all(
        &self,
        start: &[u8],
        end: &[u8],
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut from = start.to_vec();
        loop {
            let rows = self.index.scan(&from, end, 1024)?;
            let full = rows.len() == 1024;
            if let Some((k, _)) = rows.last() {
                from = k.clone();
                from.push(0);
            }
            merged.extend(rows);
            if !full {
                break;
            }
        }
        for (k, v) in self.overlay.range(start.to_vec()..end.to_vec()) {
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
        Ok(merged.into_iter().collect())
    }

    /// A raw row as this round sees it.
    pub(crate) fn get_raw(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        match self.overlay.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.index.get(key),
        }
    }

    /// Queue the change of object `key` from `old` to `new` (a put, or a
    /// delete when `new` is `None`) with the tag index rows it changes.
    pub(crate) fn set_object(
        &mut self,
        bucket: BucketId,
        key: &str,
        old: Option<&StoredObject>,
        new: Option<&StoredObject>,
    ) {
        for (row, value) in crate::tagindex::reindex(bucket, key, old, new) {
            self.overlay.insert(row, value);
        }
        let stored = new.map(|n| self.body_beside(bucket, key, n));
        let stored = stored.as_ref().map(|c| c.as_ref());
        let had_row = old.is_some_and(|o| matches!(o.data, DataLoc::Beside { .. }));
        let has_row = stored.is_some_and(|n| matches!(n.data, DataLoc::Beside { .. }));
        if had_row && !has_row {
            self.overlay
                .insert(inline_key(bucket, key.as_bytes()), None);
        }
        self.overlay.insert(
            object_key(bucket, key.as_bytes()),
            stored.map(StoredObject::encode),
        );
    }

    /// `rec` as stored: a body held in the record moves to its own row
    /// (`md5 | body`, see [`DataLoc::Beside`]), queued here.
    fn body_beside<'r>(
        &mut self,
        bucket: BucketId,
        key: &str,
        rec: &'r StoredObject,
    ) -> std::borrow::Cow<'r, StoredObject> {
        let DataLoc::Inline(bytes) = &rec.data else {
            return std::borrow::Cow::Borrowed(rec);
        };
        let mut row = Vec::with_capacity(16 + bytes.len());
        row.extend_from_slice(&rec.md5);
        row.extend_from_slice(bytes);
        self.overlay
            .insert(inline_key(bucket, key.as_bytes()), Some(row));
        std::borrow::Cow::Owned(StoredObject {
            size: rec.size,
            md5: rec.md5,
            mtime_ms: rec.mtime_ms,
            parts: rec.parts,
            meta: rec.meta.clone(),
            tags: rec.tags.clone(),
            checksum: rec.checksum.clone(),
            data: DataLoc::Beside {
                len: bytes.len() as u64,
            },
            part_checksums: rec.part_checksums.clone(),
        })
    }

    /// Queue a put of a raw row.
    pub(crate) fn set(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.overlay.insert(key, value);
    }

    /// Objects of `bucket` in this partition, as this round sees them.
    pub(crate) fn objects_in(&self, bucket: BucketId) -> StoreResult<i64> {
        let stored = self
            .get_raw(&usage_key(bucket))?
            .map(|raw| Usage::decode(&raw))
            .transpose()?
            .unwrap_or_default();
        let pending = self.usage.get(&bucket).map_or(0, |u| u.objects);
        Ok(stored.objects + pending)
    }

    fn apply(&mut self, op: Op) -> StoreResult<Outcome> {
        if let Some(bucket) = crate::gate::adds_to(&op) {
            crate::seal_rows::refuse_sealed(self, bucket, crate::partition::now_ms())?;
        }
        match op {
            Op::Put {
                bucket,
                key,
                record,
                cond,
            } => {
                let ikey = object_key(bucket, key.as_bytes());
                let old = self.current(&ikey)?;
                check_cond(&cond, old.as_ref())?;
                self.account(bucket, old.as_ref(), Some(&record));
                self.set_object(bucket, &key, old.as_ref(), Some(&record));
                Ok(Outcome::Put(old))
            }
            Op::Delete { bucket, key } => {
                let ikey = object_key(bucket, key.as_bytes());
                let Some(old) = self.current(&ikey)? else {
                    return Ok(Outcome::Deleted(false));
                };
                self.account(bucket, Some(&old), None);
                self.set_object(bucket, &key, Some(&old), None);
                Ok(Outcome::Deleted(true))
            }
            Op::SetTags { bucket, key, tags } => self.update(bucket, &key, |r| r.tags = tags),
            Op::EditTags { bucket, keys, edit } => {
                let edited = keys
                    .iter()
                    .map(|k| self.edit_tags(bucket, k, &edit))
                    .collect::<StoreResult<Vec<_>>>()?;
                Ok(Outcome::Edited(edited))
            }
            Op::ReplaceMeta {
                bucket,
                key,
                meta,
                tags,
                mtime_ms,
            } => self.update(bucket, &key, |r| {
                r.meta = meta;
                r.mtime_ms = mtime_ms;
                if let Some(t) = tags {
                    r.tags = t;
                }
            }),
            Op::Relocate { target, from, to } => self.relocate(target, from, to),
            Op::Multipart(op) => crate::multipart::apply(self, op),
            Op::ForgetRepeats { rows, cutoff_ms } => self.forget_repeats(rows, cutoff_ms),
            Op::SealBucket { bucket, until_ms } => {
                crate::seal_rows::seal(self, bucket, until_ms, crate::partition::now_ms())
            }
            Op::ReviveBucket { bucket } => crate::seal_rows::revive(self, bucket),
        }
    }

    /// Apply `op` of call `once`: a call whose row says it applied
    /// already (the same op: a bulk edit of the same keys) is answered
    /// from the row and changes nothing; else it is
    /// applied and, if it succeeded, its row written in the same batch.
    fn apply_once(&mut self, op: Op, once: Option<crate::repeat::CallId>) -> StoreResult<Outcome> {
        let Some(row) = once.and_then(|id| crate::repeat::row_key(&id, &op)) else {
            return self.apply(op);
        };
        let keys = crate::repeat::fingerprint(&op);
        if let Some(raw) = self.get_raw(&row)?
            && let Some(answer) = crate::repeat::recall(&raw, keys)?
        {
            return Ok(answer);
        }
        let outcome = self.apply(op)?;
        if let Some(value) = crate::repeat::remember(&outcome, keys, crate::partition::now_ms()) {
            self.set(row, Some(value));
        }
        Ok(outcome)
    }

    fn forget_repeats(&mut self, rows: Vec<Vec<u8>>, cutoff_ms: i64) -> StoreResult<Outcome> {
        let mut n = 0;
        for key in rows {
            let Some(raw) = self.get_raw(&key)? else {
                continue;
            };
            if crate::repeat::decode(&raw)?.applied_ms < cutoff_ms {
                self.set(key, None);
                n += 1;
            }
        }
        Ok(Outcome::Forgotten(n))
    }

    fn update(
        &mut self,
        bucket: BucketId,
        key: &str,
        f: impl FnOnce(&mut StoredObject),
    ) -> StoreResult<Outcome> {
        let ikey = object_key(bucket, key.as_bytes());
        let old = self.current(&ikey)?.ok_or(StoreError::NoSuchKey)?;
        let mut rec = old.clone();
        f(&mut rec);
        self.set_object(bucket, key, Some(&old), Some(&rec));
        Ok(Outcome::Updated(rec))
    }

    fn edit_tags(
        &mut self,
        bucket: BucketId,
        key: &str,
        edit: &crate::tagindex::TagEdit,
    ) -> StoreResult<crate::tagindex::Edited> {
        use crate::tagindex::{Edited, MAX_OBJECT_TAGS};
        let Some(old) = self.current(&object_key(bucket, key.as_bytes()))? else {
            return Ok(Edited::Skipped);
        };
        let Some(tags) = edit.apply(&old.tags) else {
            return Ok(Edited::Skipped);
        };
        if tags == old.tags {
            return Ok(Edited::Unchanged);
        }
        if tags.len() > MAX_OBJECT_TAGS {
            return Ok(Edited::TooManyTags);
        }
        let mut rec = old.clone();
        rec.tags = tags;
        self.set_object(bucket, key, Some(&old), Some(&rec));
        Ok(Edited::Changed)
    }

    fn relocate(
        &mut self,
        target: RelocTarget,
        from: (u64, u64),
        to: VolumeRef,
    ) -> StoreResult<Outcome> {
        match target {
            RelocTarget::Object { bucket, key } => {
                let ikey = object_key(bucket, key.as_bytes());
                let Some(old) = self.current(&ikey)? else {
                    return Ok(Outcome::Relocated(false));
                };
                let Some(data) = moved(&old.data, from, &to) else {
                    return Ok(Outcome::Relocated(false));
                };
                let mut new = old.clone();
                new.data = data;
                // Same object, same size: only the segment counters move.
                self.account(bucket, Some(&old), Some(&new));
                self.set_object(bucket, &key, Some(&old), Some(&new));
                Ok(Outcome::Relocated(true))
            }
            RelocTarget::Part { upload, part } => {
                crate::multipart::relocate_part(self, upload, part, from, to)
            }
        }
    }

    /// The index batch for this round, counters included.
    fn into_batch(self) -> StoreResult<WriteBatch> {
        let counters = self.counter_batch()?;
        let mut batch = WriteBatch::default();
        for (k, v) in self.overlay {
            match v {
                Some(v) => batch.put(k, v),
                None => batch.delete(k),
            }
        }
        batch.ops.extend(counters.ops);
        Ok(batch)
    }

    /// The bulk loader's split of a round ([`crate::ingest`]): the rows it
    /// writes, in key order (removals dropped: a round of new objects has
    /// none), and the batch of counter rows it changes.
    pub(crate) fn into_rows(self) -> StoreResult<(Vec<crate::index::Entry>, WriteBatch)> {
        let counters = self.counter_batch()?;
        let rows = self
            .overlay
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        Ok((rows, counters))
    }

    /// The usage and segment counter rows this round changes.
    fn counter_batch(&self) -> StoreResult<WriteBatch> {
        let mut batch = WriteBatch::default();
        for (bucket, delta) in &self.usage {
            let key = usage_key(*bucket);
            let mut u = self
                .index
                .get(&key)?
                .map(|v| Usage::decode(&v))
                .transpose()?
                .unwrap_or_default();
            u.objects += delta.objects;
            u.bytes += delta.bytes;
            if u == Usage::default() {
                batch.delete(key);
            } else {
                batch.put(key, u.encode());
            }
        }
        for (segment, delta) in self.segments.iter().filter(|(_, d)| **d != 0) {
            let key = segment_key(*segment);
            let live = read_live(self.index, *segment)? + delta;
            batch.put(key, live.to_be_bytes().to_vec());
        }
        Ok(batch)
    }
}

/// Live bytes recorded for a segment.
pub fn read_live(index: &dyn MetaIndex, segment: u64) -> StoreResult<i64> {
    match index.get(&segment_key(segment))? {
        None => Ok(0),
        Some(v) => {
            let raw: [u8; 8] = v
                .as_slice()
                .try_into()
                .map_err(|_| StoreError::Corrupt("segment row".into()))?;
            Ok(i64::from_be_bytes(raw))
        }
    }
}

pub(crate) fn check_cond(cond: &WriteCond, old: Option<&StoredObject>) -> StoreResult<()> {
    let ok = match cond {
        WriteCond::None => true,
        WriteCond::IfAbsent => old.is_none(),
        WriteCond::IfExists => old.is_some(),
        WriteCond::IfEtag(e) => old.is_some_and(|o| crate::record::etag(&o.md5, o.parts) == *e),
        WriteCond::IfMd5(md5) => old.is_some_and(|o| &o.md5 == md5),
    };
    if ok {
        Ok(())
    } else {
        Err(StoreError::PreconditionFailed)
    }
}

/// Where a round's batch goes: the partition's own index, synced when
/// `durable`, or its replication group ([`crate::replication`]), whose
/// state machine writes it on every replica once a quorum has it.
#[derive(Clone)]
pub enum Sink {
    /// This store's index is the only copy.
    Local {
        /// fdatasync volumes and sync the index before answering.
        durable: bool,
    },
    /// The partition's replication group.
    Group(Arc<dyn crate::replication::Group>),
}

/// Start the commit thread of a partition.
pub fn spawn(
    name: String,
    index: Arc<dyn MetaIndex>,
    volumes: Arc<VolumeSet>,
    sink: Sink,
) -> StoreResult<(Sender<Request>, std::thread::JoinHandle<()>)> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let handle = std::thread::Builder::new()
        .name(name)
        .spawn(move || run(&*index, &volumes, &rx, &sink))?;
    Ok((tx, handle))
}

fn run(index: &dyn MetaIndex, volumes: &VolumeSet, rx: &Receiver<Request>, sink: &Sink) {
    // Set after a failed round: check the volumes once the index works again.
    let mut verify = false;
    // Ends when every sender is gone (shutdown) and the queue is drained.
    while let Ok(first) = rx.recv() {
        let mut reqs = vec![first];
        while reqs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => reqs.push(r),
                Err(_) => break,
            }
        }
        if verify {
            verify = !verify_volumes(index, volumes);
        }
        verify |= !commit_round(index, volumes, reqs, sink);
    }
}

/// After a failed round and a reopen of the index: every segment the index
/// counts live bytes in must still exist (compaction deletes only segments
/// without any). Returns whether the check ran (false: index still closed).
fn verify_volumes(index: &dyn MetaIndex, volumes: &VolumeSet) -> bool {
    let start = segment_key(0);
    let end = vec![crate::record::SEGMENT_TAG + 1];
    let rows = match index.scan(&start, &end, usize::MAX) {
        Ok(rows) => rows,
        Err(_) => return false,
    };
    let mut missing = 0u64;
    for (k, v) in rows {
        let id = k.get(1..9).and_then(|b| <[u8; 8]>::try_from(b).ok());
        let live = <[u8; 8]>::try_from(v.as_slice()).map(i64::from_be_bytes);
        if let (Some(id), Ok(live)) = (id, live)
            && live > 0
            && volumes.file(u64::from_be_bytes(id)).is_err()
        {
            missing += 1;
        }
    }
    if missing > 0 {
        tracing::error!(
            missing,
            "segments with live objects are missing after an index reopen"
        );
    } else {
        tracing::info!("volume state verified after an index reopen");
    }
    true
}

/// Apply, persist and answer one round; whether it persisted.
fn commit_round(
    index: &dyn MetaIndex,
    volumes: &VolumeSet,
    reqs: Vec<Request>,
    sink: &Sink,
) -> bool {
    if let Sink::Group(group) = sink
        && let Err(e) = group.settle()
    {
        volumes.committed(
            &reqs
                .iter()
                .flat_map(|r| r.segments.clone())
                .collect::<Vec<_>>(),
        );
        for req in reqs {
            let _ = req.reply.send(Err(same_error(&e)));
        }
        return true;
    }
    let mut round = Round::new(index);
    let mut segments = BTreeSet::new();
    let mut named = Vec::new();
    let mut answers = Vec::with_capacity(reqs.len());
    for req in reqs {
        let result = round.apply_once(req.op, req.once);
        named.extend_from_slice(&req.segments);
        if result.is_ok() {
            segments.extend(req.segments);
        }
        answers.push((req.reply, result));
    }
    let committed = persist(index, volumes, round, &segments, sink);
    if let Err(e) = &committed
        && matches!(sink, Sink::Local { .. })
    {
        tracing::warn!(error = %e, segments = segments.len(), "commit round failed; sealing its segments");
        for &s in &segments {
            volumes.seal(s);
        }
    }
    // Only now, with the index written (or the round failed), may
    // compaction judge these segments by their live-bytes counters.
    volumes.committed(&named);
    for (reply, result) in answers {
        let result = match (&committed, result) {
            (Ok(()), r) => r,
            (Err(StoreError::Unavailable(m)), Ok(_)) => Err(StoreError::Unavailable(m.clone())),
            (Err(StoreError::NotLeader(l)), Ok(_)) => Err(StoreError::NotLeader(*l)),
            (Err(e), Ok(_)) => Err(StoreError::Io(std::io::Error::other(e.to_string()))),
            (Err(_), Err(e)) => Err(e),
        };
        // A caller that went away no longer needs its answer.
        let _ = reply.send(result);
    }
    // A group's failure says nothing about this replica's index or
    // volumes (no quorum, lost leadership): nothing to verify after it.
    committed.is_ok() || matches!(sink, Sink::Group(_))
}

/// `e` again, for each request of a round that failed as a whole.
fn same_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::NotLeader(l) => StoreError::NotLeader(*l),
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        other => StoreError::Unavailable(other.to_string()),
    }
}

fn persist(
    index: &dyn MetaIndex,
    volumes: &VolumeSet,
    round: Round<'_>,
    segments: &BTreeSet<u64>,
    sink: &Sink,
) -> StoreResult<()> {
    let durable = match sink {
        Sink::Local { durable } => *durable,
        // The volume bytes went to a quorum's logs before these ops were
        // queued (Group::ship); the batch goes the same way.
        Sink::Group(group) => {
            let batch = round.into_batch()?;
            return if batch.is_empty() {
                Ok(())
            } else {
                group.commit(batch)
            };
        }
    };
    if durable {
        for &s in segments {
            volumes.sync(s)?;
        }
    }
    let batch = round.into_batch()?;
    if batch.is_empty() {
        return Ok(());
    }
    index.write(batch)?;
    if durable {
        index.sync()?;
    }
    Ok(())
}
