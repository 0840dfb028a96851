//! The narrow metadata-index trait every partition (and the catalog) is
//! written against, and the choice of engine behind it.
//!
//! The trait is deliberately small: point get, ordered range scan with a
//! limit, an atomic write batch, and a durable sync. Group commit lives above
//! it (in [`crate::commit`]): the engines themselves do not gain from
//! concurrent writers, so the partition gathers writes into one batch per
//! sync. Both engines pass the same test suite (`index_suite.rs`).

use crate::error::StoreResult;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One mutation in an atomic batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    /// Insert or replace `key` with `value`.
    Put(Vec<u8>, Vec<u8>),
    /// Remove `key` (a no-op when absent).
    Delete(Vec<u8>),
}

/// A set of mutations applied all together or not at all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    /// The operations, applied in order (a later op on the same key wins).
    pub ops: Vec<BatchOp>,
}

impl WriteBatch {
    /// Queue an insert/replace.
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(BatchOp::Put(key, value));
    }
    /// Queue a removal.
    pub fn delete(&mut self, key: Vec<u8>) {
        self.ops.push(BatchOp::Delete(key));
    }
    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Rows per batch of the default [`MetaIndex::ingest`].
const INGEST_BATCH: usize = 4096;

/// Refuse an ingest row whose key is not above the one before (`last`,
/// then updated).
pub fn check_ascending(last: &mut Option<Vec<u8>>, key: &[u8]) -> StoreResult<()> {
    if last.as_deref().is_some_and(|l| key <= l) {
        return Err(crate::error::StoreError::InvalidArgument(
            "ingest rows are not in ascending key order".into(),
        ));
    }
    *last = Some(key.to_vec());
    Ok(())
}

/// What [`MetaIndex::scan_each`] hands each row to: true to go on.
pub type RowVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> StoreResult<bool> + 'a;

/// A key/value pair returned by a scan.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A point-in-time view of a [`MetaIndex`] ([`MetaIndex::read_view`]):
/// its scans see exactly the rows of the moment it was taken.
pub trait ReadView: Send {
    /// As [`MetaIndex::scan`], on the view.
    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> StoreResult<Vec<Entry>>;
}

/// An ordered key-value index. Implementations must be safe to call from
/// many threads; writes are serialised by the caller (the commit thread).
pub trait MetaIndex: Send + Sync + 'static {
    /// The value stored at `key`, if any.
    fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>>;
    /// Up to `limit` entries with `start <= key < end`, in ascending key
    /// order. An empty `end` means "no upper bound".
    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> StoreResult<Vec<Entry>>;
    /// [`MetaIndex::scan`] without copies: each entry is handed to `f` as
    /// borrowed slices, in key order, until `limit` entries, the end of
    /// the range, or `f` answers false. An engine that can lend its rows
    /// does (LIST reads every row this way); the default copies them.
    fn scan_each(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        f: &mut RowVisitor<'_>,
    ) -> StoreResult<()> {
        for (k, v) in self.scan(start, end, limit)? {
            if !f(&k, &v)? {
                break;
            }
        }
        Ok(())
    }
    /// Apply `batch` atomically (visible to readers all at once; after a
    /// crash either all or none of it is present once synced).
    fn write(&self, batch: WriteBatch) -> StoreResult<()>;
    /// Make every write so far durable (survives power loss) before returning.
    fn sync(&self) -> StoreResult<()>;
    /// Bulk-load `rows`, which come in strictly ascending key order, as new
    /// entries (a bulk loader's path, not the commit path: see
    /// [`crate::ingest`]). An engine that can write sorted input straight
    /// into its files does; the default writes batches. Durable after
    /// [`MetaIndex::sync`].
    fn ingest(&self, rows: &mut dyn Iterator<Item = Entry>) -> StoreResult<()> {
        let mut batch = WriteBatch::default();
        let mut last = None;
        for (k, v) in rows {
            check_ascending(&mut last, &k)?;
            batch.put(k, v);
            if batch.ops.len() >= INGEST_BATCH {
                self.write(std::mem::take(&mut batch))?;
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.write(batch)
    }
    /// A view of the index as of now, if the engine keeps one (an MVCC
    /// snapshot): writes after this call are not seen through it. `None`
    /// when the engine has none; a caller that needs a consistent scan
    /// then keeps writers out while it reads (the default).
    fn read_view(&self) -> Option<Box<dyn ReadView>> {
        None
    }
    /// Leave the index in its read-optimal shape after a bulk load: an
    /// LSM engine merges its tables down now (and waits for it), so reads
    /// that follow do not share the machine with that merge. The default
    /// does nothing.
    fn settle(&self) -> StoreResult<()> {
        Ok(())
    }
    /// Bytes the index occupies on disk (for benchmarks and metrics).
    fn disk_bytes(&self) -> StoreResult<u64>;
}

/// Which engine backs the metadata indexes of a data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// fjall 3 (LSM tree); the default, chosen by measurement (docs/engine-choice.md).
    Fjall,
    /// sled 0.34 (Bw-tree-like); synced with an explicit fsync of its files.
    Sled,
}

impl Engine {
    /// Parse an engine name as used on the command line and in the data dir.
    pub fn parse(s: &str) -> Option<Engine> {
        match s {
            "fjall" => Some(Engine::Fjall),
            "sled" => Some(Engine::Sled),
            _ => None,
        }
    }
    /// The engine's name.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Fjall => "fjall",
            Engine::Sled => "sled",
        }
    }
}

/// Memory one index may keep: its block cache and its memtable (fjall;
/// sled sizes its own cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexMemory {
    /// Block cache bytes.
    pub cache_bytes: u64,
    /// Memtable bytes at which it is flushed to a table.
    pub memtable_bytes: u64,
}

/// What one index keeps at most (and the catalog's size).
pub const INDEX_MEMORY_MAX: u64 = 16 << 20;
/// What one index keeps at least.
pub const INDEX_MEMORY_MIN: u64 = 1 << 20;

impl Default for IndexMemory {
    fn default() -> Self {
        IndexMemory {
            cache_bytes: INDEX_MEMORY_MAX,
            memtable_bytes: INDEX_MEMORY_MAX,
        }
    }
}

impl IndexMemory {
    /// One of `count` indexes' share of `budget` bytes (half cache, half
    /// memtable), between [`INDEX_MEMORY_MIN`] and [`INDEX_MEMORY_MAX`]
    /// each: so a data dir's index memory stays near its budget whatever
    /// its partition count, instead of growing by 32 MiB a partition.
    pub fn share(budget: u64, count: u32) -> IndexMemory {
        let each = (budget / 2 / u64::from(count.max(1))).clamp(INDEX_MEMORY_MIN, INDEX_MEMORY_MAX);
        IndexMemory {
            cache_bytes: each,
            memtable_bytes: each,
        }
    }
}

/// Open (creating if needed) an index of `engine` in directory `path`,
/// wrapped so that it reopens itself after a failed write or sync
/// ([`crate::index_reopen`]), with the default memory.
pub fn open_index(engine: Engine, path: &Path) -> StoreResult<Box<dyn MetaIndex>> {
    open_index_with(engine, path, IndexMemory::default())
}

/// [`open_index`] keeping at most `mem`.
pub fn open_index_with(
    engine: Engine,
    path: &Path,
    mem: IndexMemory,
) -> StoreResult<Box<dyn MetaIndex>> {
    Ok(Box::new(crate::index_reopen::ReopeningIndex::open(
        engine, path, mem,
    )?))
}

#[cfg(test)]
mod memory_tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_within_bounds() {
        let m = IndexMemory::share(128 << 20, 16);
        assert_eq!((m.cache_bytes, m.memtable_bytes), (4 << 20, 4 << 20));
        assert_eq!(IndexMemory::share(128 << 20, 1), IndexMemory::default());
        assert_eq!(
            IndexMemory::share(128 << 20, 4096).cache_bytes,
            INDEX_MEMORY_MIN
        );
        assert_eq!(IndexMemory::share(0, 0).memtable_bytes, INDEX_MEMORY_MIN);
    }
}
