//! [`MetaIndex`] on fjall 3 (an LSM tree): the store's default engine.
//!
//! One fjall database per index directory, holding a single keyspace. Writes
//! go to fjall's journal (flushed to the OS on every batch) and become durable
//! only when [`MetaIndex::sync`] persists the journal with
//! `PersistMode::SyncAll` (fsync of data and metadata).
//!
//! Two fjall details the adapter handles:
//! - fjall's plain keyspace reads see the newest entries, including a batch
//!   still being applied; reads here go through a database snapshot, which
//!   only shows published (complete) batches.
//! - every op of a fjall batch carries the same sequence number, so two ops on
//!   one key would be ambiguous; the batch is reduced to the last op per key
//!   before it is committed.
//!
//! Memory is kept modest because many partition indexes share one process:
//! each gets its share of the data dir's budget ([`IndexMemory`]).

use crate::error::{StoreError, StoreResult};
use crate::index::{
    BatchOp, Entry, IndexMemory, MetaIndex, RowVisitor, WriteBatch, check_ascending,
};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
use std::collections::HashSet;
use std::path::Path;

/// Journal size that forces memtable flushes (fjall's minimum).
const MAX_JOURNAL_BYTES: u64 = 64 * 1024 * 1024;

/// The one keyspace an index uses.
const KEYSPACE: &str = "meta";

/// A metadata index stored in one fjall database directory.
pub struct FjallIndex {
    db: Database,
    keyspace: Keyspace,
}

impl FjallIndex {
    /// Open (creating if needed) the fjall database in directory `path`,
    /// with the default memory.
    pub fn open(path: &Path) -> StoreResult<FjallIndex> {
        Self::open_with(path, IndexMemory::default())
    }

    /// [`FjallIndex::open`] keeping at most `mem` (fjall's defaults are a
    /// 32 MiB cache and 64 MiB memtables).
    pub fn open_with(path: &Path, mem: IndexMemory) -> StoreResult<FjallIndex> {
        let db = Database::builder(path)
            .cache_size(mem.cache_bytes)
            .max_journaling_size(MAX_JOURNAL_BYTES)
            .open()
            .map_err(engine_err)?;
        let keyspace = db
            .keyspace(KEYSPACE, || {
                KeyspaceCreateOptions::default().max_memtable_size(mem.memtable_bytes)
            })
            .map_err(engine_err)?;
        let index = FjallIndex { db, keyspace };
        index.sync()?;
        Ok(index)
    }
}

/// A fjall snapshot of the index's keyspace.
struct FjallView {
    snapshot: fjall::Snapshot,
    keyspace: Keyspace,
}

impl crate::index::ReadView for FjallView {
    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> StoreResult<Vec<Entry>> {
        let mut out = Vec::with_capacity(limit.min(1024));
        scan_snapshot(
            &self.snapshot,
            &self.keyspace,
            start,
            end,
            limit,
            &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(true)
            },
        )?;
        Ok(out)
    }
}

/// The rows of `keyspace` in `snapshot` with `start <= key < end` (empty
/// end: no bound), at most `limit`, lent to `f` until it answers false.
fn scan_snapshot(
    snapshot: &fjall::Snapshot,
    keyspace: &Keyspace,
    start: &[u8],
    end: &[u8],
    limit: usize,
    f: &mut RowVisitor<'_>,
) -> StoreResult<()> {
    if limit == 0 || (!end.is_empty() && start >= end) {
        return Ok(());
    }
    let iter = if end.is_empty() {
        snapshot.range(keyspace, start..)
    } else {
        snapshot.range(keyspace, start..end)
    };
    for guard in iter.take(limit) {
        let (k, v) = guard.into_inner().map_err(engine_err)?;
        if !f(&k, &v)? {
            break;
        }
    }
    Ok(())
}

impl MetaIndex for FjallIndex {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let snapshot = self.db.snapshot();
        let value = snapshot.get(&self.keyspace, key).map_err(engine_err)?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> StoreResult<Vec<Entry>> {
        let mut out = Vec::with_capacity(limit.min(1024));
        self.scan_each(start, end, limit, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    fn scan_each(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        f: &mut RowVisitor<'_>,
    ) -> StoreResult<()> {
        scan_snapshot(&self.db.snapshot(), &self.keyspace, start, end, limit, f)
    }

    fn write(&self, batch: WriteBatch) -> StoreResult<()> {
        let ops = last_op_per_key(batch.ops);
        if ops.is_empty() {
            return Ok(());
        }
        let mut fjall_batch = self.db.batch();
        for op in ops {
            match op {
                BatchOp::Put(k, v) => fjall_batch.insert(&self.keyspace, k, v),
                BatchOp::Delete(k) => fjall_batch.remove(&self.keyspace, k),
            }
        }
        fjall_batch.commit().map_err(engine_err)
    }

    fn sync(&self) -> StoreResult<()> {
        self.db.persist(PersistMode::SyncAll).map_err(engine_err)
    }

    fn ingest(&self, rows: &mut dyn Iterator<Item = Entry>) -> StoreResult<()> {
        // Sorted input goes straight into new tables (no journal, no
        // memtable): the bulk loader's reason to exist.
        let mut ingestion = self.keyspace.start_ingestion().map_err(engine_err)?;
        let mut last = None;
        for (k, v) in rows {
            // fjall panics on unsorted input; refuse it instead.
            check_ascending(&mut last, &k)?;
            ingestion.write(k, v).map_err(engine_err)?;
        }
        ingestion.finish().map_err(engine_err)
    }

    fn read_view(&self) -> Option<Box<dyn crate::index::ReadView>> {
        Some(Box::new(FjallView {
            snapshot: self.db.snapshot(),
            keyspace: self.keyspace.clone(),
        }))
    }

    fn settle(&self) -> StoreResult<()> {
        // Every ingested run is an L0 run of its own; leveled compaction
        // would merge them down in the background for a long time after
        // a large load (docs/benchmarks.md, "N = 100,000,000"). One major
        // compaction merges them into the last level at once.
        self.keyspace.major_compact().map_err(engine_err)
    }

    fn disk_bytes(&self) -> StoreResult<u64> {
        self.db.disk_space().map_err(engine_err)
    }
}

/// Keep only the last op on each key, in their original relative order.
fn last_op_per_key(ops: Vec<BatchOp>) -> Vec<BatchOp> {
    let keep = last_occurrence_flags(&ops);
    if keep.iter().all(|k| *k) {
        return ops;
    }
    ops.into_iter()
        .zip(keep)
        .filter_map(|(op, k)| k.then_some(op))
        .collect()
}

/// For each op, whether no later op in `ops` touches the same key.
fn last_occurrence_flags(ops: &[BatchOp]) -> Vec<bool> {
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(ops.len());
    let mut keep: Vec<bool> = ops.iter().rev().map(|op| seen.insert(op_key(op))).collect();
    keep.reverse();
    keep
}

fn op_key(op: &BatchOp) -> &[u8] {
    match op {
        BatchOp::Put(k, _) | BatchOp::Delete(k) => k,
    }
}

fn engine_err(e: fjall::Error) -> StoreError {
    StoreError::Engine(format!("fjall: {e}"))
}
