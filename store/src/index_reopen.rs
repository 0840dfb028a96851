//! [`ReopeningIndex`]: a [`MetaIndex`] that reopens its engine after a
//! failed write or sync, so one I/O error (a full disk, say) does not take a
//! partition out of service until the process restarts.
//!
//! Why: fjall poisons a database whose journal write or fsync failed, and
//! refuses every later write (deletes too) with `Poisoned`; its advice is to
//! restart. Reopening the database directory is that restart, for one index:
//! the journal is replayed (a batch torn by the failure is cut off, as after
//! a crash), and what was synced before the failure is all there. A request
//! whose batch failed was answered with an error, so losing its unsynced
//! batch loses nothing acknowledged.
//!
//! How: the engine sits behind an `RwLock`. Reads and writes hold the read
//! side for one call. After a write or sync fails, the failing caller (the
//! partition's commit thread, its only writer) takes the write side, which
//! waits for in-flight reads, drops the old engine (it holds the
//! directory's lock file) and opens a new one, up to [`ATTEMPTS`] times
//! with a short backoff. If all attempts fail (the disk is still full, say)
//! the index stays closed: every call answers
//! [`StoreError::Unavailable`] (503 at the gateway) and the next write
//! tries again, at most once per [`RETRY_EVERY`].

use crate::error::{StoreError, StoreResult};
use crate::index::{Engine, Entry, MetaIndex, RowVisitor, WriteBatch};
use parking_lot::{Mutex, RwLock};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Reopen attempts after one failure before the index stays closed.
pub const ATTEMPTS: u32 = 3;
/// Backoff before the second attempt (doubled for each further one).
const BACKOFF: Duration = Duration::from_millis(20);
/// How often a closed index tries again (on its next write).
pub const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Opens the engine of a [`ReopeningIndex`] in its directory.
type Opener = Box<dyn Fn(&Path) -> StoreResult<Box<dyn MetaIndex>> + Send + Sync>;

/// An index that reopens its engine after a failed write or sync.
pub struct ReopeningIndex {
    open: Opener,
    path: PathBuf,
    /// The open engine; `None` while closed (reopen failed).
    inner: RwLock<Option<Box<dyn MetaIndex>>>,
    /// A write or sync failed and the engine has not been reopened since.
    broken: AtomicBool,
    /// No reopen attempt before this time (set when all attempts failed).
    retry_after: Mutex<Option<Instant>>,
    /// Successful reopens so far.
    reopens: AtomicU64,
}

impl ReopeningIndex {
    /// Open the index of `engine` in `path`.
    pub fn open(
        engine: Engine,
        path: &Path,
        mem: crate::index::IndexMemory,
    ) -> StoreResult<ReopeningIndex> {
        Self::with_opener(path, Box::new(move |p| open_engine(engine, p, mem)))
    }

    /// The index `open` opens in `path` (and reopens there).
    fn with_opener(path: &Path, open: Opener) -> StoreResult<ReopeningIndex> {
        Ok(ReopeningIndex {
            inner: RwLock::new(Some(open(path)?)),
            open,
            path: path.to_path_buf(),
            broken: AtomicBool::new(false),
            retry_after: Mutex::new(None),
            reopens: AtomicU64::new(0),
        })
    }

    /// How many times the engine was reopened.
    pub fn reopens(&self) -> u64 {
        self.reopens.load(Ordering::Relaxed)
    }

    fn with<T>(&self, f: impl FnOnce(&dyn MetaIndex) -> StoreResult<T>) -> StoreResult<T> {
        match self.inner.read().as_deref() {
            Some(index) => f(index),
            None => Err(closed()),
        }
    }

    /// A write or sync: reopen first if the last one failed; reopen right
    /// after this one if it fails.
    fn mutate(&self, f: impl FnOnce(&dyn MetaIndex) -> StoreResult<()>) -> StoreResult<()> {
        self.recover()?;
        let result = self.with(f);
        if let Err(e) = &result
            && !matches!(e, StoreError::Unavailable(_))
        {
            tracing::warn!(index = %self.path.display(), error = %e,
                "index write failed; reopening the index");
            self.broken.store(true, Ordering::Release);
            // The caller's request failed either way; a failed reopen is
            // logged, and retried by the next write.
            let _ = self.recover();
        }
        result
    }

    /// Reopen the engine if a write or sync failed since it was opened.
    pub fn recover(&self) -> StoreResult<()> {
        if !self.broken.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.retry_after.lock().is_some_and(|t| Instant::now() < t) {
            return Err(closed());
        }
        let mut inner = self.inner.write();
        if !self.broken.load(Ordering::Acquire) {
            return Ok(());
        }
        // The old engine holds the directory's lock: drop it first.
        drop(inner.take());
        let mut last = None;
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(BACKOFF * 2u32.pow(attempt - 1));
            }
            match (self.open)(&self.path) {
                Ok(index) => {
                    *inner = Some(index);
                    self.broken.store(false, Ordering::Release);
                    *self.retry_after.lock() = None;
                    let n = self.reopens.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::info!(index = %self.path.display(), attempt = attempt + 1,
                        reopens = n, "index reopened after an I/O error");
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        *self.retry_after.lock() = Some(Instant::now() + RETRY_EVERY);
        if let Some(e) = last {
            tracing::error!(index = %self.path.display(), error = %e, attempts = ATTEMPTS,
                "reopening the index failed; it stays closed until a later write retries");
        }
        Err(closed())
    }
}

fn closed() -> StoreError {
    StoreError::Unavailable("the index is being reopened after an I/O error".into())
}

fn open_engine(
    engine: Engine,
    path: &Path,
    mem: crate::index::IndexMemory,
) -> StoreResult<Box<dyn MetaIndex>> {
    match engine {
        Engine::Fjall => Ok(Box::new(crate::index_fjall::FjallIndex::open_with(
            path, mem,
        )?)),
        Engine::Sled => Ok(Box::new(crate::index_sled::SledIndex::open(path)?)),
    }
}

impl MetaIndex for ReopeningIndex {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        self.with(|i| i.get(key))
    }

    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> StoreResult<Vec<Entry>> {
        self.with(|i| i.scan(start, end, limit))
    }

    fn scan_each(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        f: &mut RowVisitor<'_>,
    ) -> StoreResult<()> {
        self.with(|i| i.scan_each(start, end, limit, f))
    }

    fn write(&self, batch: WriteBatch) -> StoreResult<()> {
        self.mutate(|i| i.write(batch))
    }

    fn sync(&self) -> StoreResult<()> {
        self.mutate(|i| i.sync())
    }

    fn ingest(&self, rows: &mut dyn Iterator<Item = Entry>) -> StoreResult<()> {
        self.mutate(|i| i.ingest(rows))
    }

    fn settle(&self) -> StoreResult<()> {
        self.mutate(|i| i.settle())
    }

    fn read_view(&self) -> Option<Box<dyn crate::index::ReadView>> {
        self.with(|i| Ok(i.read_view())).ok().flatten()
    }

    fn disk_bytes(&self) -> StoreResult<u64> {
        self.with(|i| i.disk_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// An index that only records which of its methods were called.
    struct Recording(Arc<Mutex<Vec<&'static str>>>);

    impl Recording {
        fn saw(&self, name: &'static str) {
            self.0.lock().push(name);
        }
    }

    impl MetaIndex for Recording {
        fn get(&self, _: &[u8]) -> StoreResult<Option<Vec<u8>>> {
            self.saw("get");
            Ok(None)
        }
        fn scan(&self, _: &[u8], _: &[u8], _: usize) -> StoreResult<Vec<Entry>> {
            self.saw("scan");
            Ok(Vec::new())
        }
        fn scan_each(
            &self,
            _: &[u8],
            _: &[u8],
            _: usize,
            _: &mut RowVisitor<'_>,
        ) -> StoreResult<()> {
            self.saw("scan_each");
            Ok(())
        }
        fn write(&self, _: WriteBatch) -> StoreResult<()> {
            self.saw("write");
            Ok(())
        }
        fn sync(&self) -> StoreResult<()> {
            self.saw("sync");
            Ok(())
        }
        fn ingest(&self, _: &mut dyn Iterator<Item = Entry>) -> StoreResult<()> {
            self.saw("ingest");
            Ok(())
        }
        fn settle(&self) -> StoreResult<()> {
            self.saw("settle");
            Ok(())
        }
        fn read_view(&self) -> Option<Box<dyn crate::index::ReadView>> {
            self.saw("read_view");
            None
        }
        fn disk_bytes(&self) -> StoreResult<u64> {
            self.saw("disk_bytes");
            Ok(0)
        }
    }

    /// Every method of the trait reaches the engine, the defaulted ones
    /// included (a wrapper that kept a default would silently skip an
    /// engine's own version: the bulk loader's settle once did).
    #[test]
    fn every_method_reaches_the_engine() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&calls);
        let dir = tempfile::tempdir().expect("tempdir");
        let index = ReopeningIndex::with_opener(
            dir.path(),
            Box::new(move |_| Ok(Box::new(Recording(Arc::clone(&seen))))),
        )
        .expect("open");
        index.get(b"k").expect("get");
        index.scan(b"", b"", 1).expect("scan");
        index
            .scan_each(b"", b"", 1, &mut |_, _| Ok(true))
            .expect("scan_each");
        index.write(WriteBatch::default()).expect("write");
        index.sync().expect("sync");
        index.ingest(&mut std::iter::empty()).expect("ingest");
        index.settle().expect("settle");
        assert!(index.read_view().is_none());
        index.disk_bytes().expect("disk_bytes");
        assert_eq!(
            *calls.lock(),
            [
                "get",
                "scan",
                "scan_each",
                "write",
                "sync",
                "ingest",
                "settle",
                "read_view",
                "disk_bytes"
            ]
        );
    }

    /// Both engines can be dropped and reopened in place, in one process
    /// (their directory locks are released), and keep what was synced.
    #[test]
    fn reopen_keeps_synced_data_for_both_engines() {
        for engine in [Engine::Fjall, Engine::Sled] {
            let dir = tempfile::tempdir().expect("tempdir");
            let index = ReopeningIndex::open(engine, dir.path(), Default::default()).expect("open");
            let mut batch = WriteBatch::default();
            batch.put(b"k".to_vec(), b"v".to_vec());
            index.write(batch).expect("write");
            index.sync().expect("sync");
            for round in 1..=2 {
                // What a failed write leaves behind.
                index.broken.store(true, Ordering::Release);
                index.recover().expect("reopen");
                assert_eq!(index.reopens(), round, "{engine:?}");
                assert_eq!(index.get(b"k").expect("get"), Some(b"v".to_vec()));
            }
            let mut batch = WriteBatch::default();
            batch.delete(b"k".to_vec());
            index.write(batch).expect("write after reopen");
            assert_eq!(index.get(b"k").expect("get"), None, "{engine:?}");
        }
    }
}
