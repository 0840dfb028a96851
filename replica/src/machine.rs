//! A partition as openraft's state machine ([`RaftStateMachine`]): applying
//! committed entries writes their index batches into the partition's
//! [`MetaIndex`], and snapshots are streams of that index's rows.
//!
//! The machine keeps its own bookkeeping in the index, under a reserved key
//! prefix ([`RESERVED`], 0xFF: the store's row tags are ASCII letters), in
//! the same batch as the data an apply writes: the last applied log id and
//! the last membership. So after a crash the index is at some applied entry
//! with exactly that entry's data, never between two. An apply call is one
//! batch and one sync for all the entries openraft hands it.
//!
//! Snapshots live in a directory of their own: `current.snap` is the one
//! snapshot kept (written to `build.tmp` or `install.tmp`, fsynced, then
//! renamed over it), `recv-N.part` are streams being received. Building
//! one holds the apply lock while it scans, so the rows and the applied id
//! it records agree. Installing one checks the whole stream first, makes
//! it the current snapshot, then replaces every row of the index with its
//! rows in one batch; a machine opened after a crash between those two
//! steps finds its index behind `current.snap` and installs it again.

use crate::blocking::{ReplicaError, ReplicaResult, Work, blocking};
use crate::snapshot::{StreamWriter, read_meta, read_stream};
use crate::types::{Applied, LogEntry, LogId, Membership, SnapshotMeta, StorageError, TypeConfig};
use laneway_store::index::{Entry, MetaIndex, WriteBatch};
use laneway_store::volume::VolumeSet;
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, Snapshot};
use std::fs::File;
use std::io::{BufReader, BufWriter, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The key prefix of the machine's own rows; partition rows never use it.
pub const RESERVED: &[u8] = b"\xffraft/";
/// The first key after [`RESERVED`]'s range.
const RESERVED_END: &[u8] = b"\xffraft0";
const APPLIED: &[u8] = b"\xffraft/applied";
const MEMBERSHIP: &[u8] = b"\xffraft/membership";
/// Rows read per index scan while streaming or clearing.
const PAGE: usize = 1024;
const CURRENT: &str = "current.snap";

/// The state machine of one partition group. Clones share everything (a
/// clone is the snapshot builder).
#[derive(Clone)]
pub struct PartitionMachine {
    shared: Arc<Shared>,
}

struct Shared {
    index: Arc<dyn MetaIndex>,
    /// The partition's volumes, written by entries carrying data (`None`:
    /// a group of index rows only, as in the storage tests).
    volumes: Option<Arc<VolumeSet>>,
    dir: PathBuf,
    /// Held by an apply, a snapshot build and an install.
    lock: Mutex<()>,
    received: AtomicU64,
}

impl PartitionMachine {
    /// The machine over the partition `index`, with its snapshots in `dir`
    /// (created if missing). Streams left half-received are removed, and a
    /// current snapshot newer than the index is installed into it.
    pub fn open(index: Arc<dyn MetaIndex>, dir: &Path) -> ReplicaResult<PartitionMachine> {
        Self::open_with(index, None, dir)
    }

    /// [`PartitionMachine::open`] for a partition with volumes: entries'
    /// data pieces are written into `volumes`.
    pub fn open_with(
        index: Arc<dyn MetaIndex>,
        volumes: Option<Arc<VolumeSet>>,
        dir: &Path,
    ) -> ReplicaResult<PartitionMachine> {
        std::fs::create_dir_all(dir)?;
        remove_leftovers(dir)?;
        let shared = Shared {
            index,
            volumes,
            dir: dir.to_path_buf(),
            lock: Mutex::new(()),
            received: AtomicU64::new(0),
        };
        shared.recover()?;
        Ok(PartitionMachine {
            shared: Arc::new(shared),
        })
    }

    /// The partition's index (for reads).
    pub fn index(&self) -> &Arc<dyn MetaIndex> {
        &self.shared.index
    }

    async fn run<T, F>(&self, work: Work, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&Shared) -> ReplicaResult<T> + Send + 'static,
    {
        let shared = Arc::clone(&self.shared);
        blocking(work, move || f(&shared)).await
    }
}

/// Remove temporary and half-received snapshot files from `dir`.
fn remove_leftovers(dir: &Path) -> ReplicaResult<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".tmp") || name.ends_with(".part") {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// The rows of `index` with `start <= key < end` (empty end: no bound), a
/// page at a time, each page handed to `f`.
fn for_each_page(
    index: &dyn MetaIndex,
    start: &[u8],
    end: &[u8],
    mut f: impl FnMut(&[Entry]) -> ReplicaResult<()>,
) -> ReplicaResult<()> {
    let mut from = start.to_vec();
    loop {
        let page = index.scan(&from, end, PAGE)?;
        f(&page)?;
        match page.last() {
            Some((k, _)) if page.len() == PAGE => {
                from = k.clone();
                from.push(0);
            }
            _ => return Ok(()),
        }
    }
}

/// Every partition row (all but the reserved ones), page by page.
fn for_each_data_page(
    index: &dyn MetaIndex,
    mut f: impl FnMut(&[Entry]) -> ReplicaResult<()>,
) -> ReplicaResult<()> {
    for_each_page(index, b"", RESERVED, &mut f)?;
    for_each_page(index, RESERVED_END, b"", &mut f)
}

/// fsync the directory `dir`, so a rename in it is durable.
fn sync_dir(dir: &Path) -> ReplicaResult<()> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

impl Shared {
    fn current_path(&self) -> PathBuf {
        self.dir.join(CURRENT)
    }

    fn applied(&self) -> ReplicaResult<Option<LogId>> {
        match self.index.get(APPLIED)? {
            Some(b) => Ok(bincode::deserialize(&b)?),
            None => Ok(None),
        }
    }

    fn membership(&self) -> ReplicaResult<Membership> {
        match self.index.get(MEMBERSHIP)? {
            Some(b) => Ok(bincode::deserialize(&b)?),
            None => Ok(Membership::default()),
        }
    }

    /// Apply `entries` in one batch with the new applied id, and sync.
    fn apply(&self, entries: Vec<LogEntry>) -> ReplicaResult<Vec<Applied>> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch = WriteBatch::default();
        let mut replies = Vec::with_capacity(entries.len());
        let Some(last) = entries.last().map(|e| e.log_id) else {
            return Ok(replies);
        };
        let mut written = std::collections::BTreeSet::new();
        for entry in entries {
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(m) => {
                    self.write_data(&m.data, &mut written)?;
                    m.batch.append_to(&mut batch);
                }
                EntryPayload::Membership(mem) => {
                    let stored = Membership::new(Some(entry.log_id), mem);
                    batch.put(MEMBERSHIP.to_vec(), bincode::serialize(&stored)?);
                }
            }
            replies.push(Applied {
                index: entry.log_id.index,
            });
        }
        // The data before the applied id that says it is there.
        if let Some(v) = &self.volumes {
            for &segment in &written {
                v.sync(segment)?;
            }
        }
        batch.put(APPLIED.to_vec(), bincode::serialize(&Some(last))?);
        self.index.write(batch)?;
        self.index.sync()?;
        Ok(replies)
    }

    /// Write an entry's data pieces into the volumes, noting the segments.
    fn write_data(
        &self,
        pieces: &[crate::types::DataPiece],
        written: &mut std::collections::BTreeSet<u64>,
    ) -> ReplicaResult<()> {
        if pieces.is_empty() {
            return Ok(());
        }
        let Some(v) = &self.volumes else {
            return Err(ReplicaError::Snapshot(
                "an entry carries volume data but the group has no volumes".into(),
            ));
        };
        for p in pieces {
            v.write_at(p.segment, p.offset, &p.bytes)?;
            written.insert(p.segment);
        }
        Ok(())
    }

    /// Stream the index into a new `current.snap` and return it.
    fn build(&self) -> ReplicaResult<(SnapshotMeta, File)> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let meta = SnapshotMeta {
            last_log_id: self.applied()?,
            last_membership: self.membership()?,
            snapshot_id: snapshot_id(self.applied()?),
        };
        let tmp = self.dir.join("build.tmp");
        let mut w = StreamWriter::new(BufWriter::new(File::create(&tmp)?), &meta)?;
        for_each_data_page(self.index.as_ref(), |page| {
            page.iter().try_for_each(|(k, v)| w.row(k, v))
        })?;
        let file = w.finish()?.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        self.make_current(&tmp)?;
        self.current()?
            .ok_or_else(|| ReplicaError::Snapshot("built snapshot vanished".into()))
    }

    /// Rename `tmp` over `current.snap`, durably.
    fn make_current(&self, tmp: &Path) -> ReplicaResult<()> {
        std::fs::rename(tmp, self.current_path())?;
        sync_dir(&self.dir)
    }

    /// The current snapshot's metadata, if there is one.
    fn current_meta(&self) -> ReplicaResult<Option<SnapshotMeta>> {
        Ok(self.current()?.map(|(meta, _)| meta))
    }

    /// The current snapshot's metadata and its file, read from the start.
    fn current(&self) -> ReplicaResult<Option<(SnapshotMeta, File)>> {
        let mut file = match File::open(self.current_path()) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let meta = read_meta(BufReader::new(&file))?;
        file.seek(SeekFrom::Start(0))?;
        Ok(Some((meta, file)))
    }

    /// Check the stream in `tmp` against `meta`, make it current, and
    /// replace the index's rows with its rows.
    fn install(&self, tmp: &Path, meta: &SnapshotMeta) -> ReplicaResult<()> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let (found, rows) = read_rows(tmp)?;
        if found.last_log_id != meta.last_log_id || found.last_membership != meta.last_membership {
            return Err(ReplicaError::Snapshot(
                "stream does not match its metadata".into(),
            ));
        }
        self.make_current(tmp)?;
        self.replace_rows(rows, meta)
    }

    /// One batch: every partition row removed, `rows` and `meta`'s applied
    /// id and membership written; then synced.
    fn replace_rows(&self, rows: WriteBatch, meta: &SnapshotMeta) -> ReplicaResult<()> {
        let mut batch = WriteBatch::default();
        for_each_data_page(self.index.as_ref(), |page| {
            page.iter().for_each(|(k, _)| batch.delete(k.clone()));
            Ok(())
        })?;
        batch.ops.extend(rows.ops);
        batch.put(APPLIED.to_vec(), bincode::serialize(&meta.last_log_id)?);
        batch.put(
            MEMBERSHIP.to_vec(),
            bincode::serialize(&meta.last_membership)?,
        );
        self.index.write(batch)?;
        self.index.sync()?;
        Ok(())
    }

    /// After a crash between making a snapshot current and writing its
    /// rows: install `current.snap` again.
    fn recover(&self) -> ReplicaResult<()> {
        let Some(meta) = self.current_meta()? else {
            return Ok(());
        };
        if meta.last_log_id <= self.applied()? {
            return Ok(());
        }
        let (_, rows) = read_rows(&self.current_path())?;
        self.replace_rows(rows, &meta)
    }

    /// A new file to receive a snapshot stream into.
    fn receive_path(&self) -> PathBuf {
        let n = self.received.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!("recv-{n}.part"))
    }
}

/// The checked metadata and the rows (as one batch of puts) of the stream
/// in file `path`.
fn read_rows(path: &Path) -> ReplicaResult<(SnapshotMeta, WriteBatch)> {
    let mut rows = WriteBatch::default();
    let meta = read_stream(BufReader::new(File::open(path)?), |k, v| rows.put(k, v))?;
    Ok((meta, rows))
}

/// A snapshot id unique to this build: the applied index and the time.
fn snapshot_id(applied: Option<LogId>) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let index = applied.map_or(0, |l| l.index);
    format!("{index}-{nanos:x}")
}

/// A snapshot whose data is `file`.
fn as_snapshot((meta, file): (SnapshotMeta, File)) -> Snapshot<TypeConfig> {
    Snapshot {
        meta,
        snapshot: Box::new(tokio::fs::File::from_std(file)),
    }
}

/// Copy the whole of `data` into the new file `tmp` and sync it.
async fn copy_stream(data: &mut tokio::fs::File, tmp: &Path) -> std::io::Result<()> {
    use tokio::io::AsyncSeekExt;
    data.seek(std::io::SeekFrom::Start(0)).await?;
    let mut out = tokio::fs::File::create(tmp).await?;
    tokio::io::copy(data, &mut out).await?;
    out.sync_all().await
}

fn snapshot_err(e: &std::io::Error) -> StorageError {
    crate::blocking::storage_err(Work::Snapshot, e)
}

impl RaftSnapshotBuilder<TypeConfig> for PartitionMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        Ok(as_snapshot(self.run(Work::Snapshot, Shared::build).await?))
    }
}

impl RaftStateMachine<TypeConfig> for PartitionMachine {
    type SnapshotBuilder = PartitionMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), StorageError> {
        self.run(Work::ReadMachine, |s| Ok((s.applied()?, s.membership()?)))
            .await
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = LogEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<LogEntry> = entries.into_iter().collect();
        self.run(Work::WriteMachine, move |s| s.apply(entries))
            .await
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        let path = self.shared.receive_path();
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(|e| snapshot_err(&e))?;
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError> {
        let tmp = self.shared.dir.join("install.tmp");
        copy_stream(&mut snapshot, &tmp)
            .await
            .map_err(|e| snapshot_err(&e))?;
        drop(snapshot);
        let meta = meta.clone();
        self.run(Work::Snapshot, move |s| {
            s.install(&tmp, &meta)?;
            remove_leftovers(&s.dir)
        })
        .await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let current = self.run(Work::Snapshot, Shared::current).await?;
        Ok(current.map(as_snapshot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Mutation;
    use laneway_store::index::{Engine, open_index};

    fn machine(dir: &Path) -> PartitionMachine {
        let index: Arc<dyn MetaIndex> =
            Arc::from(open_index(Engine::Fjall, &dir.join("index")).expect("index"));
        PartitionMachine::open(index, &dir.join("snapshots")).expect("machine")
    }

    fn put_entry(index: u64, key: &[u8], value: &[u8]) -> LogEntry {
        let mut batch = WriteBatch::default();
        batch.put(key.to_vec(), value.to_vec());
        LogEntry {
            log_id: openraft::testing::log_id(1, 1, index),
            payload: EntryPayload::Normal(Mutation::of_batch(&batch)),
        }
    }

    #[tokio::test]
    async fn applied_rows_and_id_land_together_and_skip_the_reserved_prefix_in_snapshots() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = machine(dir.path());
        let replies = m
            .apply(vec![put_entry(1, b"a", b"1"), put_entry(2, b"b", b"2")])
            .await
            .expect("apply");
        assert_eq!(replies, vec![Applied { index: 1 }, Applied { index: 2 }]);
        let (applied, _) = m.applied_state().await.expect("state");
        assert_eq!(applied, Some(openraft::testing::log_id(1, 1, 2)));

        m.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("build");
        let (_, rows) = read_rows(&dir.path().join("snapshots").join(CURRENT)).expect("rows");
        let keys: Vec<&[u8]> = rows
            .ops
            .iter()
            .map(|op| match op {
                laneway_store::index::BatchOp::Put(k, _)
                | laneway_store::index::BatchOp::Delete(k) => k.as_slice(),
            })
            .collect();
        assert_eq!(keys, vec![&b"a"[..], &b"b"[..]]);
    }

    #[tokio::test]
    async fn a_current_snapshot_newer_than_the_index_is_installed_on_open() {
        let (a_dir, b_dir) = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        );
        let mut a = machine(a_dir.path());
        a.apply(vec![put_entry(1, b"k", b"v")])
            .await
            .expect("apply");
        let snap = a
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("build");

        // As if an install had made the stream current and stopped before
        // writing its rows.
        let snaps = b_dir.path().join("snapshots");
        std::fs::create_dir_all(&snaps).expect("mkdir");
        std::fs::copy(
            a_dir.path().join("snapshots").join(CURRENT),
            snaps.join(CURRENT),
        )
        .expect("copy");
        let mut b = machine(b_dir.path());
        assert_eq!(
            b.applied_state().await.expect("state").0,
            snap.meta.last_log_id
        );
        assert_eq!(b.index().get(b"k").expect("get"), Some(b"v".to_vec()));
    }
}
