//! [`MetaIndex`] on sled 0.34, with a sync that is really durable.
//!
//! sled 0.34's own `flush()` writes its log with `sync_file_range`, which
//! pushes dirty pages to the device but neither flushes the device cache nor
//! persists file metadata (sizes, new blob files, directory entries). An
//! acknowledged write can therefore be lost on power failure. [`SledIndex`]
//! closes that gap: [`MetaIndex::sync`] calls `flush()` and then `fsync`s every
//! file sled keeps in its directory (`db`, `conf`, `snap.*`, `blobs/*`) and the
//! directories themselves.
//!
//! sled applies a batch atomically for point reads, but its iterators take
//! sled's read lock per step, so a range scan can observe half of a batch. A
//! reader/writer lock around `write` and `scan` restores "visible to readers
//! all at once" for scans too.
//!
//! This module owns only the sled adapter; the trait and the engine choice
//! live in [`crate::index`].

use crate::error::{StoreError, StoreResult};
use crate::index::{BatchOp, Entry, MetaIndex, WriteBatch};
use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// Page-cache budget per index: 16 partition indexes share one process.
const CACHE_CAPACITY_BYTES: u64 = 64 * 1024 * 1024;

/// Background flush period. Durability comes from [`MetaIndex::sync`]; the
/// background flusher only bounds how much unsynced work piles up.
const FLUSH_EVERY_MS: u64 = 1_000;

/// How long `open` waits for a previous instance to release the directory.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Pause between two attempts to take the directory lock.
const LOCK_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// sled's directory of out-of-line values and large pages.
const BLOB_DIR: &str = "blobs";

/// A metadata index stored in one sled database directory.
pub struct SledIndex {
    db: sled::Db,
    dir: PathBuf,
    /// Held shared by scans and exclusively by writes (see module docs).
    scan_gate: RwLock<()>,
    /// Blob files already fsynced. sled writes each blob once under a fresh,
    /// never reused name, so one fsync per blob is enough.
    synced_blobs: Mutex<HashSet<OsString>>,
}

impl SledIndex {
    /// Open (creating if needed) the sled database in directory `path`.
    pub fn open(path: &Path) -> StoreResult<SledIndex> {
        std::fs::create_dir_all(path)?;
        let db = open_db(path)?;
        let index = SledIndex {
            db,
            dir: path.to_path_buf(),
            scan_gate: RwLock::new(()),
            synced_blobs: Mutex::new(HashSet::new()),
        };
        index.sync()?;
        sync_parent_dir(path)?;
        Ok(index)
    }

    /// fsync every file and directory sled keeps under `self.dir`.
    fn fsync_files(&self) -> StoreResult<()> {
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_name() == BLOB_DIR {
                self.fsync_new_blobs(&entry.path())?;
            } else if entry.file_type()?.is_file() {
                fsync_if_exists(&entry.path())?;
            }
        }
        fsync_if_exists(&self.dir)
    }

    /// fsync the blob files not synced before, then the blob directory.
    fn fsync_new_blobs(&self, blob_dir: &Path) -> StoreResult<()> {
        let present = list_names(blob_dir)?;
        let mut synced = self
            .synced_blobs
            .lock()
            .map_err(|_| StoreError::Engine("sled blob set lock poisoned".into()))?;
        synced.retain(|name| present.contains(name));
        for name in present {
            if !synced.contains(&name) {
                fsync_if_exists(&blob_dir.join(&name))?;
                synced.insert(name);
            }
        }
        fsync_if_exists(blob_dir)
    }
}

impl MetaIndex for SledIndex {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let value = self.db.get(key).map_err(engine_err)?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> StoreResult<Vec<Entry>> {
        if limit == 0 || (!end.is_empty() && start >= end) {
            return Ok(Vec::new());
        }
        let _shared = self.scan_gate.read().map_err(|_| gate_poisoned())?;
        let iter = if end.is_empty() {
            self.db.range(start..)
        } else {
            self.db.range(start..end)
        };
        let mut out = Vec::with_capacity(limit.min(1024));
        for item in iter.take(limit) {
            let (k, v) = item.map_err(engine_err)?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn write(&self, batch: WriteBatch) -> StoreResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let sled_batch = to_sled_batch(batch);
        let _exclusive = self.scan_gate.write().map_err(|_| gate_poisoned())?;
        self.db.apply_batch(sled_batch).map_err(engine_err)
    }

    fn sync(&self) -> StoreResult<()> {
        self.db.flush().map_err(engine_err)?;
        self.fsync_files()
    }

    fn disk_bytes(&self) -> StoreResult<u64> {
        self.db.size_on_disk().map_err(engine_err)
    }
}

/// Open sled in `path`, waiting out the file lock a just-dropped instance of
/// the same directory may still hold: sled releases it only when its
/// background I/O tasks finish, shortly after the last handle is dropped.
fn open_db(path: &Path) -> StoreResult<sled::Db> {
    let config = sled::Config::new()
        .path(path)
        .cache_capacity(CACHE_CAPACITY_BYTES)
        .flush_every_ms(Some(FLUSH_EVERY_MS));
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match config.open() {
            Err(e) if is_lock_busy(&e) && Instant::now() < deadline => {
                std::thread::sleep(LOCK_RETRY_PAUSE);
            }
            other => return other.map_err(engine_err),
        }
    }
}

/// sled reports a held directory lock as an I/O error with this text.
fn is_lock_busy(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

/// Translate our batch into sled's. sled's batch is a map, so a later op on
/// the same key replaces an earlier one, as the trait requires.
fn to_sled_batch(batch: WriteBatch) -> sled::Batch {
    let mut out = sled::Batch::default();
    for op in batch.ops {
        match op {
            BatchOp::Put(k, v) => out.insert(k, v),
            BatchOp::Delete(k) => out.remove(k),
        }
    }
    out
}

/// The names in directory `dir` (empty when it does not exist yet).
fn list_names(dir: &Path) -> StoreResult<HashSet<OsString>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(e) => return Err(e.into()),
    };
    let mut names = HashSet::new();
    for entry in entries {
        names.insert(entry?.file_name());
    }
    Ok(names)
}

/// fsync a file or directory; one that vanished meanwhile (sled removes old
/// snapshots and collected blobs in the background) needs no sync.
fn fsync_if_exists(path: &Path) -> StoreResult<()> {
    match File::open(path) {
        Ok(file) => file.sync_all().map_err(StoreError::from),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// fsync the directory holding `path`, so a newly created index directory
/// survives power loss.
fn sync_parent_dir(path: &Path) -> StoreResult<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => fsync_if_exists(parent),
        _ => Ok(()),
    }
}

fn engine_err(e: sled::Error) -> StoreError {
    StoreError::Engine(format!("sled: {e}"))
}

fn gate_poisoned() -> StoreError {
    StoreError::Engine("sled scan gate poisoned".into())
}
