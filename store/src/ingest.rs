//! Bulk ingest: fill an empty bucket with many small objects without the
//! commit path, for the scale benchmarks (`laneway-bench load`, issue 14's
//! 100M-object bucket).
//!
//! The commit path costs a journal append, a memtable insert and, later,
//! the LSM's compaction of every row; at 10M objects that is over 100 µs of
//! CPU an object. A bulk load knows more: the bucket starts empty and its
//! keys come in ascending order, so no object replaces another. Objects are
//! gathered per partition; a partition's gathered objects become rows
//! through the commit path's own row builder ([`Round`]: record, inline
//! body, tag index rows, usage counters, exactly as a PUT writes them),
//! which hands them back in key order, and the index takes them in one
//! piece ([`MetaIndex::ingest`]: fjall writes sorted input straight into
//! new tables). The usage counters are then written and synced like any
//! batch. Each such piece is a sorted run of its own; when the load
//! finishes, every partition's index is settled ([`MetaIndex::settle`]:
//! fjall merges the runs into its last level at once), so reads of the
//! loaded bucket do not share the machine with that merge for the next
//! hour (docs/benchmarks.md, "N = 100,000,000").
//!
//! Rules the loader enforces: the store is not replicated, the bucket is
//! empty when the load starts, keys strictly ascend, and bodies are small
//! enough to live in the index. Nothing else may write the bucket while it
//! loads (the benchmark loads a data dir no server has open).
//!
//! [`MetaIndex::ingest`]: crate::index::MetaIndex::ingest
//! [`MetaIndex::settle`]: crate::index::MetaIndex::settle

use crate::commit::Round;
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::partition::{Partition, now_ms};
use crate::record::{DataLoc, ObjectMeta, StoredObject, Tag};
use crate::store::{BucketInfo, Store};
use md5::{Digest, Md5};
use std::sync::Arc;

/// One object of a bulk load.
#[derive(Clone, Debug)]
pub struct IngestObject {
    /// Object key; each greater than the one before.
    pub key: String,
    /// Body (at most the store's inline size).
    pub body: Vec<u8>,
    /// Tag set.
    pub tags: Vec<Tag>,
}

/// A bulk load in progress into one bucket ([`Store::bulk_load`]).
pub struct BulkLoad<'s> {
    store: &'s Store,
    bucket: BucketId,
    /// Objects gathered per partition, by slot in `store.partitions()`.
    pending: Vec<Vec<IngestObject>>,
    /// Objects a partition gathers before they are written as one run.
    run_objects: usize,
    last_key: Option<String>,
    loaded: u64,
}

impl Store {
    /// Start a bulk load of `bucket`, written in runs of `run_objects`
    /// objects per partition. Refused on a replicated store and on a
    /// bucket that holds any object.
    pub fn bulk_load(&self, bucket: &BucketInfo, run_objects: usize) -> StoreResult<BulkLoad<'_>> {
        if self.partitions().iter().any(|p| p.group().is_some()) {
            return Err(StoreError::InvalidArgument(
                "bulk load needs a store that is not replicated".into(),
            ));
        }
        if self.bucket_usage(bucket.id)?.objects != 0 {
            return Err(StoreError::InvalidArgument(
                "bulk load needs an empty bucket".into(),
            ));
        }
        Ok(BulkLoad {
            store: self,
            bucket: bucket.id,
            pending: vec![Vec::new(); self.partitions().len()],
            run_objects: run_objects.max(1),
            last_key: None,
            loaded: 0,
        })
    }
}

impl BulkLoad<'_> {
    /// Add one object; its partition's run is written when it is full.
    pub fn push(&mut self, obj: IngestObject) -> StoreResult<()> {
        if self.last_key.as_ref().is_some_and(|k| obj.key <= *k) {
            return Err(StoreError::InvalidArgument(format!(
                "bulk load keys must ascend: {:?} after {:?}",
                obj.key, self.last_key
            )));
        }
        let part = self.store.partition_of(self.bucket, &obj.key)?;
        if obj.body.len() as u64 > part.inline_max() {
            return Err(StoreError::InvalidArgument(format!(
                "bulk load bodies are at most {} bytes",
                part.inline_max()
            )));
        }
        let slot = self.slot_of(part)?;
        self.last_key = Some(obj.key.clone());
        self.pending[slot].push(obj);
        if self.pending[slot].len() >= self.run_objects {
            self.write_run(slot)?;
        }
        Ok(())
    }

    /// Write every gathered object and sync every index; the number of
    /// objects loaded.
    pub fn finish(mut self) -> StoreResult<u64> {
        for slot in 0..self.pending.len() {
            self.write_run(slot)?;
        }
        for p in self.store.partitions() {
            p.index().sync()?;
        }
        // The load's runs merged now, so what reads the bucket next does
        // not wait behind that merge.
        for p in self.store.partitions() {
            p.index().settle()?;
        }
        Ok(self.loaded)
    }

    fn slot_of(&self, part: &Arc<Partition>) -> StoreResult<usize> {
        self.store
            .partitions()
            .iter()
            .position(|p| Arc::ptr_eq(p, part))
            .ok_or(StoreError::NotHosted(part.id()))
    }

    /// Turn partition `slot`'s gathered objects into rows and ingest them.
    fn write_run(&mut self, slot: usize) -> StoreResult<()> {
        let objects = std::mem::take(&mut self.pending[slot]);
        if objects.is_empty() {
            return Ok(());
        }
        let part = &self.store.partitions()[slot];
        let mtime_ms = now_ms();
        let mut round = Round::new(part.index());
        for obj in &objects {
            let rec = record_of(obj, mtime_ms);
            round.account(self.bucket, None, Some(&rec));
            round.set_object(self.bucket, &obj.key, None, Some(&rec));
        }
        let (rows, counters) = round.into_rows()?;
        part.index().ingest(&mut rows.into_iter())?;
        part.index().write(counters)?;
        self.loaded += objects.len() as u64;
        Ok(())
    }
}

/// The record a PUT of `obj` would store (no checksum asked for).
fn record_of(obj: &IngestObject, mtime_ms: i64) -> StoredObject {
    StoredObject {
        size: obj.body.len() as u64,
        md5: Md5::digest(&obj.body).into(),
        mtime_ms,
        parts: 0,
        meta: ObjectMeta::default(),
        tags: obj.tags.clone(),
        checksum: None,
        data: DataLoc::Inline(obj.body.clone()),
        part_checksums: Vec::new(),
    }
}
