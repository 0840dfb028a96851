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
//!
//! Syncs are group commits ([`SyncGate`]): a sync that finds every write
//! before it already covered by a sync that started after that write
//! returns without an fsync of its own. That matters where several
//! writers share one database: a [`SharedFjall`] holds the indexes of
//! many owners (a store node's Raft logs, one keyspace per group) in one
//! journal, so the appends of groups that sync at the same moment share
//! one fsync instead of paying one each. Its [`SyncQueue`] goes further:
//! one thread writes the appends queued by every group and syncs them
//! together, so appends that arrive together (a leader's batch to a
//! follower) always share one fsync and one thread wake-up.

use crate::error::{StoreError, StoreResult};
use crate::index::{
    BatchOp, Entry, IndexMemory, MetaIndex, RowVisitor, WriteBatch, check_ascending,
};
use crate::sync_queue::SyncQueue;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Journal size that forces memtable flushes (fjall's minimum).
const MAX_JOURNAL_BYTES: u64 = 64 * 1024 * 1024;

/// The one keyspace an index uses.
const KEYSPACE: &str = "meta";

/// A metadata index stored in a fjall database directory: the one
/// keyspace of its own database, or one of a [`SharedFjall`]'s.
pub struct FjallIndex {
    db: Database,
    keyspace: Keyspace,
    gate: Arc<SyncGate>,
}

/// Group commit of a database's syncs: counts the writes, and lets a sync
/// skip its fsync when one that began after its last write has ended.
#[derive(Debug)]
pub struct SyncGate {
    /// Writes that have returned (starts at one, so the first sync after
    /// opening always persists).
    written: AtomicU64,
    /// How many writes the last finished persist covered; held across
    /// the persist, so syncs queue behind one another and find out here
    /// whether the one before covered them.
    synced: Mutex<u64>,
    /// Persists run (fsyncs of the journal).
    persists: AtomicU64,
}

impl Default for SyncGate {
    fn default() -> Self {
        SyncGate {
            written: AtomicU64::new(1),
            synced: Mutex::new(0),
            persists: AtomicU64::new(0),
        }
    }
}

impl SyncGate {
    /// Note a write that has returned.
    pub fn wrote(&self) {
        self.written.fetch_add(1, Ordering::SeqCst);
    }

    /// Make every write that returned before this call durable: by
    /// `persist`, unless a persist that began after them has finished.
    pub fn sync(&self, persist: impl FnOnce() -> StoreResult<()>) -> StoreResult<()> {
        let mine = self.written.load(Ordering::SeqCst);
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        if *synced >= mine {
            return Ok(());
        }
        // Writes counted here returned before the persist begins, so it
        // covers them: the ones that arrived while this sync queued ride
        // along.
        let covers = self.written.load(Ordering::SeqCst);
        self.persists.fetch_add(1, Ordering::Relaxed);
        persist()?;
        *synced = covers;
        Ok(())
    }

    /// How many persists the gate has run.
    pub fn persists(&self) -> u64 {
        self.persists.load(Ordering::Relaxed)
    }
}

/// One fjall database shared by many indexes, each a keyspace of it, with
/// one journal and one [`SyncGate`] (a store node's Raft logs: module doc).
#[derive(Clone)]
pub struct SharedFjall {
    db: Database,
    gate: Arc<SyncGate>,
    syncs: SyncQueue,
}

impl SharedFjall {
    /// Open (creating if needed) the shared database in directory `path`
    /// with a block cache of `cache_bytes`.
    pub fn open(path: &Path, cache_bytes: u64) -> StoreResult<SharedFjall> {
        let db = Database::builder(path)
            .cache_size(cache_bytes)
            .max_journaling_size(MAX_JOURNAL_BYTES)
            .open()
            .map_err(engine_err)?;
        let gate: Arc<SyncGate> = Arc::default();
        let (d, g) = (db.clone(), Arc::clone(&gate));
        let syncs = SyncQueue::start("log-sync", move || {
            g.sync(|| d.persist(PersistMode::SyncAll).map_err(engine_err))
        })?;
        Ok(SharedFjall { db, gate, syncs })
    }

    /// The queue whose thread syncs this database for many waiters at
    /// once ([`SyncQueue`]): a write that returned before a waiter was
    /// queued is durable when the waiter runs.
    pub fn sync_queue(&self) -> SyncQueue {
        self.syncs.clone()
    }

    /// The index kept in keyspace `name` (created if missing; fjall takes
    /// ASCII letters, digits, `_` and `-`), its memtables at most
    /// `memtable_bytes`.
    pub fn index(&self, name: &str, memtable_bytes: u64) -> StoreResult<FjallIndex> {
        let keyspace = self
            .db
            .keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(memtable_bytes)
            })
            .map_err(engine_err)?;
        let index = FjallIndex {
            db: self.db.clone(),
            keyspace,
            gate: Arc::clone(&self.gate),
        };
        index.sync()?;
        Ok(index)
    }

    /// How many times the database's journal has been persisted (fsynced)
    /// since it was opened.
    pub fn persists(&self) -> u64 {
        self.gate.persists()
    }

    /// Whether keyspace `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.db.keyspace_exists(name)
    }
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
        let index = FjallIndex {
            db,
            keyspace,
            gate: Arc::default(),
        };
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
        fjall_batch.commit().map_err(engine_err)?;
        self.gate.wrote();
        Ok(())
    }

    fn sync(&self) -> StoreResult<()> {
        self.gate
            .sync(|| self.db.persist(PersistMode::SyncAll).map_err(engine_err))
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
        ingestion.finish().map_err(engine_err)?;
        self.gate.wrote();
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_sync_persists_only_writes_no_earlier_persist_covered() {
        let gate = SyncGate::default();
        let persists = AtomicUsize::new(0);
        let persist = || {
            persists.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        gate.sync(persist).expect("sync");
        assert_eq!(
            persists.load(Ordering::SeqCst),
            1,
            "the first sync persists"
        );
        gate.sync(persist).expect("sync");
        assert_eq!(
            persists.load(Ordering::SeqCst),
            1,
            "nothing new: no persist"
        );
        gate.wrote();
        gate.sync(persist).expect("sync");
        assert_eq!(
            persists.load(Ordering::SeqCst),
            2,
            "a new write is persisted"
        );
    }

    #[test]
    fn a_failed_persist_covers_nothing() {
        let gate = SyncGate::default();
        gate.wrote();
        let failed = gate.sync(|| Err(StoreError::Engine("disk".into())));
        assert!(failed.is_err());
        let persists = AtomicUsize::new(0);
        gate.sync(|| {
            persists.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .expect("sync");
        assert_eq!(
            persists.load(Ordering::SeqCst),
            1,
            "the write is persisted again"
        );
    }

    #[test]
    fn concurrent_syncs_share_persists_and_each_write_is_covered() {
        let gate = Arc::new(SyncGate::default());
        let persisted_upto = Arc::new(AtomicU64::new(0));
        let persists = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gate, upto, persists) = (
                    Arc::clone(&gate),
                    Arc::clone(&persisted_upto),
                    Arc::clone(&persists),
                );
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        gate.wrote();
                        let mine = gate.written.load(Ordering::SeqCst);
                        gate.sync(|| {
                            persists.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_micros(200));
                            upto.fetch_max(gate.written.load(Ordering::SeqCst), Ordering::SeqCst);
                            Ok(())
                        })
                        .expect("sync");
                        // What this thread wrote was counted before a
                        // persist that has finished.
                        assert!(*gate.synced.lock().expect("lock") >= mine);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert!(persists.load(Ordering::SeqCst) <= 400);
    }

    #[test]
    fn the_queue_writes_many_keyspaces_and_they_share_its_persists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = SharedFjall::open(dir.path(), 1 << 20).expect("open");
        let before = shared.persists();
        let (writers, rounds) = (8u8, 25usize);
        let threads: Vec<_> = (0..writers)
            .map(|w| {
                let index = Arc::new(shared.index(&format!("p{w:04}"), 1 << 20).expect("index"));
                let queue = shared.sync_queue();
                std::thread::spawn(move || {
                    for r in 0..rounds {
                        let mut batch = WriteBatch::default();
                        batch.put(format!("k{r:03}").into_bytes(), vec![w; 4096]);
                        let (tx, rx) = std::sync::mpsc::channel();
                        let ix = Arc::clone(&index);
                        let job = crate::sync_queue::Job {
                            write: Box::new(move || ix.write(batch)),
                            done: Box::new(move |r| tx.send(r.is_ok()).expect("answer")),
                        };
                        assert!(queue.submit(job).is_ok());
                        assert!(rx.recv().expect("done"), "written and synced");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("writer");
        }
        let persists = shared.persists() - before;
        assert!(
            persists * 2 <= u64::from(writers) * rounds as u64,
            "{persists} persists for {} writes",
            usize::from(writers) * rounds
        );
        drop(shared);
        let shared = SharedFjall::open(dir.path(), 1 << 20).expect("reopen");
        for w in 0..writers {
            let index = shared.index(&format!("p{w:04}"), 1 << 20).expect("index");
            assert_eq!(index.scan(b"", b"", 100).expect("scan").len(), rounds);
        }
    }

    #[test]
    fn indexes_of_a_shared_database_keep_their_own_rows_across_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let shared = SharedFjall::open(dir.path(), 1 << 20).expect("open");
            let (a, b) = (
                shared.index("p0000", 1 << 20).expect("a"),
                shared.index("catalog", 1 << 20).expect("b"),
            );
            let mut batch = WriteBatch::default();
            batch.put(b"k".to_vec(), b"in a".to_vec());
            a.write(batch).expect("write a");
            let mut batch = WriteBatch::default();
            batch.put(b"k".to_vec(), b"in b".to_vec());
            batch.put(b"only-b".to_vec(), b"1".to_vec());
            b.write(batch).expect("write b");
            a.sync().expect("sync");
            assert_eq!(a.scan(b"", b"", 10).expect("scan").len(), 1);
        }
        let shared = SharedFjall::open(dir.path(), 1 << 20).expect("reopen");
        assert!(shared.has("p0000") && shared.has("catalog") && !shared.has("p0001"));
        let a = shared.index("p0000", 1 << 20).expect("a");
        let b = shared.index("catalog", 1 << 20).expect("b");
        assert_eq!(a.get(b"k").expect("get"), Some(b"in a".to_vec()));
        assert_eq!(b.get(b"k").expect("get"), Some(b"in b".to_vec()));
        assert_eq!(a.get(b"only-b").expect("get"), None);
    }
}
