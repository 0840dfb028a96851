//! A partition as openraft's state machine ([`RaftStateMachine`]): applying
//! committed entries writes their index batches into the partition's
//! [`MetaIndex`], and snapshots are streams of that index's rows.
//!
//! The machine keeps its own bookkeeping in the index, under a reserved key
//! prefix ([`RESERVED`], 0xFF: the store's row tags are ASCII letters), in
//! the same batch as the data an apply writes: the last applied log id and
//! the last membership. So after a crash the index is at some applied entry
//! with exactly that entry's data, never between two. An apply call is one
//! batch for all the entries openraft hands it.
//!
//! Durability: an apply is written but not synced. The entries it applies
//! are durable in the quorum's logs already (a write is acknowledged only
//! after that), so an index that loses its newest applies in a crash is
//! merely behind: on open openraft finds its applied id older than the
//! log's committed part and applies those entries again, and they are
//! still in the log, because the log is purged only up to the current
//! snapshot, a synced file that is installed again on open when the index
//! is behind it. Volume pieces an apply writes are synced before its
//! batch, so an index never names bytes that a crash could lose. Saving
//! the sync is one fsync less per round on every replica (measured in
//! docs/benchmarks.md, "RF 3 PUT: fewer syncs and hand-offs").
//!
//! Where applies run: on a store node, on one thread all its groups share
//! ([`PartitionMachine::with_apply_queue`]), which stays busy while
//! applies keep coming instead of waking a blocking-pool thread for each;
//! an apply that writes volume data, or that finds the machine held by a
//! snapshot build or install, goes to the blocking pool instead. What it
//! costs: an index whose writes the engine stalls (fjall slows writes
//! while its flushes and compactions catch up) delays the applies of the
//! node's other groups behind it, where on the pool it delayed only its
//! own; the partitions of a node share its disk, so such a stall is
//! rarely one partition's alone. The thread holds at most one apply per
//! group (openraft waits for each), so its queue is bounded by the
//! node's groups.
//!
//! Snapshots live in a directory of their own: `current.snap` is the index
//! stream of the one snapshot kept (written to `build.tmp`, or received
//! into `recv-N.part`, fsynced, then renamed over it). Building one reads
//! the applied id and the segment lengths under the apply lock together
//! with a read view of the index, then scans the view while applies go
//! on, so the rows, the segment lengths and the applied id agree (an
//! engine without views keeps the lock for the scan). A snapshot is sent as its index stream
//! plus the volume segments it names, read from the live segment files up
//! to the recorded lengths ([`crate::snapshot_volumes`] says why that is
//! safe); a receiver writes the segments' frames into its volumes as they
//! arrive. Installing one checks the index stream, makes it the current
//! snapshot, then replaces every row of the index with its rows in
//! batches of bounded size, the applied id last; a machine opened after a
//! crash anywhere after the first step finds its index behind
//! `current.snap` and installs it again (the volumes were synced before
//! the rename).

use crate::blocking::{ReplicaError, ReplicaResult, Work, blocking, storage_err};
use crate::snapshot::{SegmentExtent, StreamHead, StreamWriter, read_head, read_stream};
use crate::snapshot_data::SnapshotData;
use crate::snapshot_volumes::{Received, Receiver, Sources};
use crate::types::{Applied, LogEntry, LogId, Membership, SnapshotMeta, StorageError, TypeConfig};
use laneway_store::index::{Entry, MetaIndex, WriteBatch};
use laneway_store::sync_queue::{Job, SyncQueue};
use laneway_store::volume::VolumeSet;
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, Snapshot};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The key prefix of the machine's own rows; partition rows never use it.
pub const RESERVED: &[u8] = b"\xffraft/";
/// The first key after [`RESERVED`]'s range.
const RESERVED_END: &[u8] = b"\xffraft0";
/// The row of the last applied log id (bincode `Option<LogId>`).
pub const APPLIED: &[u8] = b"\xffraft/applied";
const MEMBERSHIP: &[u8] = b"\xffraft/membership";
/// Rows read per index scan while streaming or clearing.
const PAGE: usize = 1024;
const CURRENT: &str = "current.snap";

/// The state machine of one partition group. Clones share everything (a
/// clone is the snapshot builder).
#[derive(Clone)]
pub struct PartitionMachine {
    shared: Arc<Shared>,
    /// The node's thread for applies of index rows only
    /// ([`PartitionMachine::with_apply_queue`]); `None`: the blocking pool.
    applies: Option<SyncQueue>,
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
            applies: None,
        })
    }

    /// This machine with its applies of index rows only run on `queue`'s
    /// thread, which a node's groups share: a thread that stays busy while
    /// applies keep coming, instead of a wake-up of the blocking pool for
    /// each. Applies that write volume data (and sync it), and applies
    /// that find a snapshot build or install holding the machine, still
    /// go to the blocking pool, so no apply waits behind another group's
    /// disk work or snapshot. The queue's persist is not needed (applies
    /// are not synced: module doc, "Durability").
    pub fn with_apply_queue(mut self, queue: SyncQueue) -> PartitionMachine {
        self.applies = Some(queue);
        self
    }

    /// Apply `entries` on the apply queue's thread (see
    /// [`PartitionMachine::with_apply_queue`]).
    async fn apply_queued(
        &self,
        queue: &SyncQueue,
        entries: Vec<LogEntry>,
    ) -> Result<Vec<Applied>, StorageError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shared = Arc::clone(&self.shared);
        let pool = tokio::runtime::Handle::current();
        let write = Box::new(move || {
            match shared.try_apply(entries) {
                Ok(applied) => {
                    let _ = tx.send(applied);
                }
                Err(entries) => {
                    pool.spawn_blocking(move || {
                        let _ = tx.send(shared.apply(entries));
                    });
                }
            }
            Ok(())
        });
        let job = Job {
            write,
            done: Box::new(|_| ()),
        };
        if let Err(job) = queue.submit(job) {
            tokio::task::spawn_blocking(move || (job.write)());
        }
        match rx.await {
            Ok(applied) => applied.map_err(|e| storage_err(Work::WriteMachine, &e)),
            Err(e) => Err(storage_err(Work::WriteMachine, &e)),
        }
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

/// Whether any of `entries` writes or deletes volume files.
fn touch_volumes(entries: &[LogEntry]) -> bool {
    entries
        .iter()
        .any(|e| matches!(&e.payload, EntryPayload::Normal(m) if m.touches_volumes()))
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

/// A range scan: the rows with `start <= key < end`, at most `limit`.
type Scan<'a> = &'a dyn Fn(&[u8], &[u8], usize) -> laneway_store::StoreResult<Vec<Entry>>;

/// The rows `scan` finds with `start <= key < end` (empty end: no bound),
/// a page at a time, each page handed to `f`.
fn for_each_page(
    scan: Scan<'_>,
    start: &[u8],
    end: &[u8],
    mut f: impl FnMut(&[Entry]) -> ReplicaResult<()>,
) -> ReplicaResult<()> {
    let mut from = start.to_vec();
    loop {
        let page = scan(&from, end, PAGE)?;
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

/// Every partition row (all but the reserved ones) `scan` finds, page by
/// page.
fn for_each_data_page(
    scan: Scan<'_>,
    mut f: impl FnMut(&[Entry]) -> ReplicaResult<()>,
) -> ReplicaResult<()> {
    for_each_page(scan, b"", RESERVED, &mut f)?;
    for_each_page(scan, RESERVED_END, b"", &mut f)
}

/// [`for_each_data_page`] over the index as it is.
fn for_each_index_page(
    index: &dyn MetaIndex,
    f: impl FnMut(&[Entry]) -> ReplicaResult<()>,
) -> ReplicaResult<()> {
    for_each_data_page(&|a, b, n| index.scan(a, b, n), f)
}

/// Delete a replica's whole state machine: every row of `index` (the
/// machine's own rows too), every segment of `volumes` and the snapshots
/// in `dir`, durably; whether there was anything to delete. For a replica
/// that left its node ([`crate::group`]): each step can be cut by a crash
/// and done again.
pub fn wipe(index: &dyn MetaIndex, volumes: Option<&VolumeSet>, dir: &Path) -> ReplicaResult<bool> {
    let mut found = false;
    // Each page from after the last (not from the start again, which would
    // step over every tombstone before it on each page).
    let mut from = Vec::new();
    loop {
        let page = index.scan(&from, b"", PAGE)?;
        let Some((last, _)) = page.last() else {
            break;
        };
        found = true;
        from = last.clone();
        from.push(0);
        let mut batch = WriteBatch::default();
        page.into_iter().for_each(|(k, _)| batch.delete(k));
        index.write(batch)?;
    }
    if found {
        index.sync()?;
    }
    if let Some(v) = volumes {
        for (id, _) in v.extents()? {
            v.drop_segment(id)?;
            found = true;
        }
    }
    if dir.exists() {
        found |= std::fs::read_dir(dir)?.next().is_some();
        std::fs::remove_dir_all(dir)?;
    }
    Ok(found)
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

    /// Apply `entries` in one batch with the new applied id (not synced:
    /// module doc).
    fn apply(&self, entries: Vec<LogEntry>) -> ReplicaResult<Vec<Applied>> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.apply_held(entries)
    }

    /// [`Shared::apply`] if the apply lock is free now; else `entries`
    /// back (a snapshot build or install holds it).
    fn try_apply(
        &self,
        entries: Vec<LogEntry>,
    ) -> Result<ReplicaResult<Vec<Applied>>, Vec<LogEntry>> {
        let _held = match self.lock.try_lock() {
            Ok(held) => held,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err(entries),
        };
        Ok(self.apply_held(entries))
    }

    /// [`Shared::apply`], the lock held.
    fn apply_held(&self, entries: Vec<LogEntry>) -> ReplicaResult<Vec<Applied>> {
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
                    self.drop_segments(&m, &mut written)?;
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
        // Not synced: the entries are durable in the log, and an index
        // that lost its newest applies in a crash is behind, never torn
        // (module doc, "Durability").
        self.index.write(batch)?;
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

    /// Delete the segments an entry drops (after every entry before it
    /// wrote to them), durably; they no longer need a sync. Deleted
    /// before the index batch that records the entry applied: an apply
    /// repeated after a crash recreates a segment from the pieces before
    /// the drop and deletes it again, where the other order could record
    /// the drop applied and leave the file behind for good.
    fn drop_segments(
        &self,
        m: &crate::types::Mutation,
        written: &mut std::collections::BTreeSet<u64>,
    ) -> ReplicaResult<()> {
        for segment in m.drops() {
            let Some(v) = &self.volumes else {
                return Err(ReplicaError::Snapshot(
                    "an entry drops a volume segment but the group has no volumes".into(),
                ));
            };
            v.drop_segment(segment)?;
            written.remove(&segment);
        }
        Ok(())
    }

    /// The volume segments and their lengths now.
    fn extents(&self) -> ReplicaResult<Vec<SegmentExtent>> {
        let Some(v) = &self.volumes else {
            return Ok(Vec::new());
        };
        Ok(v.extents()?
            .into_iter()
            .map(|(id, len)| SegmentExtent { id, len })
            .collect())
    }

    /// Stream the index into a new `current.snap` and return it.
    ///
    /// The head (applied id, membership, segment lengths) is read under
    /// the apply lock, with a read view of the index taken at the same
    /// moment; the rows then stream from the view while applies go on.
    /// An engine without views ([`MetaIndex::read_view`] `None`: sled)
    /// keeps the lock for the whole scan. The lock is taken again to make
    /// the build current, unless an install made a newer one meanwhile.
    fn build(&self) -> ReplicaResult<(SnapshotMeta, SnapshotData)> {
        let held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let head = StreamHead {
            meta: SnapshotMeta {
                last_log_id: self.applied()?,
                last_membership: self.membership()?,
                snapshot_id: snapshot_id(self.applied()?),
            },
            // Every byte an applied row points at is in these lengths
            // (pieces are applied before the rows that name them).
            segments: self.extents()?,
        };
        let view = self.index.read_view();
        let held = match view {
            Some(_) => {
                drop(held);
                None
            }
            None => Some(held),
        };
        let tmp = self.dir.join("build.tmp");
        let mut w = StreamWriter::new(BufWriter::new(File::create(&tmp)?), &head)?;
        let rows = |page: &[Entry]| page.iter().try_for_each(|(k, v)| w.row(k, v));
        match &view {
            Some(v) => for_each_data_page(&|a, b, n| v.scan(a, b, n), rows)?,
            None => for_each_index_page(self.index.as_ref(), rows)?,
        }
        drop(view);
        let file = w.finish()?.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let _held = held.unwrap_or_else(|| self.lock.lock().unwrap_or_else(|p| p.into_inner()));
        let newer = self
            .current_meta()?
            .is_some_and(|m| m.last_log_id > head.meta.last_log_id);
        if newer {
            std::fs::remove_file(&tmp)?;
        } else {
            self.make_current(&tmp)?;
        }
        self.current()?
            .ok_or_else(|| ReplicaError::Snapshot("built snapshot vanished".into()))
    }

    /// Rename `tmp` over `current.snap`, durably.
    fn make_current(&self, tmp: &Path) -> ReplicaResult<()> {
        std::fs::rename(tmp, self.current_path())?;
        sync_dir(&self.dir)
    }

    /// The head of the current snapshot, if there is one.
    fn current_head(&self) -> ReplicaResult<Option<StreamHead>> {
        match File::open(self.current_path()) {
            Ok(f) => Ok(Some(read_head(BufReader::new(f))?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The current snapshot's metadata, if there is one.
    fn current_meta(&self) -> ReplicaResult<Option<SnapshotMeta>> {
        Ok(self.current_head()?.map(|h| h.meta))
    }

    /// The current snapshot's metadata and its stream, from the start.
    fn current(&self) -> ReplicaResult<Option<(SnapshotMeta, SnapshotData)>> {
        let Some(head) = self.current_head()? else {
            return Ok(None);
        };
        // A rename over `current.snap` after this leaves the file opened
        // here whole: the stream stays the snapshot `head` describes.
        let sources = Sources::open(&self.current_path(), head.segments, self.volumes.as_deref())?;
        Ok(Some((head.meta, SnapshotData::sending(sources))))
    }

    /// A receiver for a new snapshot stream.
    fn receiver(&self) -> ReplicaResult<Receiver> {
        Receiver::create(&self.receive_path(), self.volumes.clone())
    }

    /// Check the received stream against `meta`, make it current, and
    /// replace the index's rows with its rows.
    fn install(&self, received: Receiver, meta: &SnapshotMeta) -> ReplicaResult<()> {
        let Received { path, segments } = received.finish()?;
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        // A whole read first (rows dropped): the stream's checksum is at its
        // end, and no row of a damaged stream may reach the index.
        let found = read_stream(BufReader::new(File::open(&path)?), |_, _| {})?;
        if found.meta.last_log_id != meta.last_log_id
            || found.meta.last_membership != meta.last_membership
            || found.segments != segments
        {
            return Err(ReplicaError::Snapshot(
                "stream does not match its metadata".into(),
            ));
        }
        self.make_current(&path)?;
        self.replace_rows(&self.current_path(), meta)?;
        self.drop_unnamed(&segments)
    }

    /// Delete every volume segment `segments` (an installed snapshot's)
    /// does not name: a segment the leader had deleted by the snapshot's
    /// last entry, whose drop this replica will never apply (the log
    /// before the snapshot is gone). A segment made later is not here yet
    /// either: this replica applied less than the snapshot holds, and
    /// only applies write segments.
    fn drop_unnamed(&self, segments: &[SegmentExtent]) -> ReplicaResult<()> {
        let Some(v) = &self.volumes else {
            return Ok(());
        };
        let named: std::collections::HashSet<u64> = segments.iter().map(|s| s.id).collect();
        for (id, _) in v.extents()? {
            if !named.contains(&id) {
                v.drop_segment(id)?;
            }
        }
        Ok(())
    }

    /// Every partition row removed, the rows of the (checked) stream in
    /// `path` written, then `meta`'s applied id and membership; synced.
    /// In batches of at most [`INSTALL_ROWS`] rows or [`INSTALL_BYTES`], so
    /// an install's memory does not grow with the partition. Until the
    /// last batch the applied id is the old one, behind `current.snap`: a
    /// machine opened after a crash in between installs it again
    /// ([`Shared::recover`]), and nothing reads a replica's index while it
    /// installs (openraft's state machine calls are serial, and a read
    /// needs an entry of the leader's term applied).
    fn replace_rows(&self, path: &Path, meta: &SnapshotMeta) -> ReplicaResult<()> {
        let index = self.index.as_ref();
        for_each_index_page(index, |page| {
            let mut batch = WriteBatch::default();
            page.iter().for_each(|(k, _)| batch.delete(k.clone()));
            index.write(batch)?;
            Ok(())
        })?;
        let mut rows = Batches::new(index);
        read_stream(BufReader::new(File::open(path)?), |k, v| rows.put(k, v))?;
        rows.finish()?;
        let mut batch = WriteBatch::default();
        batch.put(APPLIED.to_vec(), bincode::serialize(&meta.last_log_id)?);
        batch.put(
            MEMBERSHIP.to_vec(),
            bincode::serialize(&meta.last_membership)?,
        );
        index.write(batch)?;
        index.sync()?;
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
        let path = self.current_path();
        let head = read_stream(BufReader::new(File::open(&path)?), |_, _| {})?;
        self.replace_rows(&path, &meta)?;
        self.drop_unnamed(&head.segments)
    }

    /// A new file to receive a snapshot stream into.
    fn receive_path(&self) -> PathBuf {
        let n = self.received.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!("recv-{n}.part"))
    }
}

/// Most rows, and bytes of rows, an install writes in one batch.
const INSTALL_ROWS: usize = 16 * 1024;
const INSTALL_BYTES: usize = 8 << 20;

/// Rows put into an index in batches of bounded size; the first failed
/// write stops the rest and is returned by [`Batches::finish`].
struct Batches<'a> {
    index: &'a dyn MetaIndex,
    batch: WriteBatch,
    bytes: usize,
    failed: Option<laneway_store::StoreError>,
}

impl<'a> Batches<'a> {
    fn new(index: &'a dyn MetaIndex) -> Batches<'a> {
        Batches {
            index,
            batch: WriteBatch::default(),
            bytes: 0,
            failed: None,
        }
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        if self.failed.is_some() {
            return;
        }
        self.bytes += key.len() + value.len();
        self.batch.put(key, value);
        if self.batch.ops.len() >= INSTALL_ROWS || self.bytes >= INSTALL_BYTES {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        self.bytes = 0;
        if let Err(e) = self.index.write(batch) {
            self.failed = Some(e);
        }
    }

    fn finish(mut self) -> ReplicaResult<()> {
        if !self.batch.ops.is_empty() && self.failed.is_none() {
            self.flush();
        }
        match self.failed {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// The checked head and the rows (as one batch of puts) of the stream in
/// file `path`.
#[cfg(test)]
fn read_rows(path: &Path) -> ReplicaResult<(StreamHead, WriteBatch)> {
    let mut rows = WriteBatch::default();
    let head = read_stream(BufReader::new(File::open(path)?), |k, v| rows.put(k, v))?;
    Ok((head, rows))
}

/// A snapshot id unique to this build: the applied index and the time.
fn snapshot_id(applied: Option<LogId>) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let index = applied.map_or(0, |l| l.index);
    format!("{index}-{nanos:x}")
}

/// A snapshot whose stream is `data`.
fn as_snapshot((meta, data): (SnapshotMeta, SnapshotData)) -> Snapshot<TypeConfig> {
    Snapshot {
        meta,
        snapshot: Box::new(data),
    }
}

/// Copy the whole of a stored snapshot's stream `data` into `into` (a
/// snapshot handed over in process, as openraft's storage suite does).
async fn copy_stream(data: &mut SnapshotData, into: &mut SnapshotData) -> std::io::Result<()> {
    use tokio::io::{AsyncSeekExt, AsyncWriteExt};
    data.seek(std::io::SeekFrom::Start(0)).await?;
    tokio::io::copy(data, into).await?;
    into.shutdown().await
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
        match &self.applies {
            Some(queue) if !touch_volumes(&entries) => self.apply_queued(queue, entries).await,
            _ => {
                self.run(Work::WriteMachine, move |s| s.apply(entries))
                    .await
            }
        }
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        let receiver = self.run(Work::Snapshot, Shared::receiver).await?;
        Ok(Box::new(SnapshotData::receiving(receiver)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        if !snapshot.is_receiving() {
            let mut into = self.begin_receiving_snapshot().await?;
            copy_stream(&mut snapshot, &mut into)
                .await
                .map_err(|e| snapshot_err(&e))?;
            snapshot = into;
        }
        let receiver = snapshot.into_receiver().map_err(|e| snapshot_err(&e))?;
        let meta = meta.clone();
        self.run(Work::Snapshot, move |s| {
            s.install(receiver, &meta)?;
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

    /// The keys of a snapshot's rows, in order.
    fn keys_of(rows: &WriteBatch) -> Vec<Vec<u8>> {
        rows.ops
            .iter()
            .map(|op| match op {
                laneway_store::index::BatchOp::Put(k, _)
                | laneway_store::index::BatchOp::Delete(k) => k.clone(),
            })
            .collect()
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
        assert_eq!(keys_of(&rows), vec![b"a".to_vec(), b"b".to_vec()]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_machine_held_by_a_snapshot_holds_up_no_other_group_on_the_apply_thread() {
        let (a_dir, b_dir) = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        );
        let queue = crate::group::apply_queue().expect("apply thread");
        let mut a = machine(a_dir.path()).with_apply_queue(queue.clone());
        let mut b = machine(b_dir.path()).with_apply_queue(queue);
        // As a snapshot build or install does, something holds a's lock.
        let held = Arc::clone(&a.shared);
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _held = held.lock.lock().expect("lock");
            locked_tx.send(()).expect("locked");
            release_rx.recv().ok();
        });
        locked_rx.recv().expect("a is held");
        let a_apply = tokio::spawn(async move {
            let r = a.apply(vec![put_entry(1, b"a", b"1")]).await;
            (a, r)
        });
        // b's applies go through the same thread while a waits.
        for i in 1..=20 {
            let r = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                b.apply(vec![put_entry(i, b"b", b"2")]),
            )
            .await
            .expect("b is not held up by a");
            assert_eq!(r.expect("apply"), vec![Applied { index: i }]);
        }
        assert!(!a_apply.is_finished(), "a waits for its lock");
        release_tx.send(()).expect("release");
        holder.join().expect("holder");
        let (mut a, r) = a_apply.await.expect("join");
        assert_eq!(r.expect("apply"), vec![Applied { index: 1 }]);
        let (applied, _) = a.applied_state().await.expect("state");
        assert_eq!(applied, Some(openraft::testing::log_id(1, 1, 1)));
        assert_eq!(a.index().get(b"a").expect("get"), Some(b"1".to_vec()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_built_while_entries_apply_holds_exactly_the_rows_of_its_applied_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = machine(dir.path());
        let key = |i: u64| format!("k{i:06}").into_bytes();
        let first: Vec<LogEntry> = (1..=3000).map(|i| put_entry(i, &key(i), b"v")).collect();
        m.apply(first).await.expect("apply");
        let mut builder = m.get_snapshot_builder().await;
        let build = tokio::spawn(async move { builder.build_snapshot().await });
        // Entries keep applying while the snapshot streams.
        for i in 3001..=3400 {
            m.apply(vec![put_entry(i, &key(i), b"v")])
                .await
                .expect("apply");
        }
        let snap = build.await.expect("join").expect("build");
        let last = snap.meta.last_log_id.expect("applied").index;
        assert!(last >= 3000);
        let (head, rows) = read_rows(&dir.path().join("snapshots").join(CURRENT)).expect("rows");
        assert_eq!(head.meta, snap.meta);
        assert_eq!(keys_of(&rows), (1..=last).map(key).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_current_snapshot_newer_than_the_index_is_installed_on_open() {
        let (a_dir, b_dir) = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        );
        let mut a = machine(a_dir.path());
        let snap = applied_and_snapshotted(&mut a, vec![put_entry(1, b"k", b"v")]).await;

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

    /// A machine whose entries write `volumes`.
    fn machine_with_volumes(dir: &Path) -> (PartitionMachine, Arc<VolumeSet>) {
        let index: Arc<dyn MetaIndex> =
            Arc::from(open_index(Engine::Fjall, &dir.join("index")).expect("index"));
        let volumes = Arc::new(VolumeSet::open(&dir.join("volumes"), 1 << 30).expect("volumes"));
        volumes.replicated();
        let m =
            PartitionMachine::open_with(index, Some(Arc::clone(&volumes)), &dir.join("snapshots"))
                .expect("machine");
        (m, volumes)
    }

    /// An entry at `index` writing `bytes` at the start of `segment`.
    fn piece_entry(index: u64, segment: u64, bytes: &[u8]) -> LogEntry {
        let write = laneway_store::replication::VolumeWrite {
            segment,
            offset: 0,
            bytes: bytes::Bytes::copy_from_slice(bytes),
        };
        LogEntry {
            log_id: openraft::testing::log_id(1, 1, index),
            payload: EntryPayload::Normal(Mutation::of_data(&write)),
        }
    }

    /// An entry at `index` deleting `segment`.
    fn drop_entry(index: u64, segment: u64) -> LogEntry {
        LogEntry {
            log_id: openraft::testing::log_id(1, 1, index),
            payload: EntryPayload::Normal(Mutation::of_drop(segment)),
        }
    }

    /// The segment ids `volumes` holds.
    fn segment_ids(volumes: &VolumeSet) -> Vec<u64> {
        volumes
            .extents()
            .expect("extents")
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    #[tokio::test]
    async fn a_drop_deletes_its_segment_after_the_pieces_before_it_also_when_applied_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut m, volumes) = machine_with_volumes(dir.path());
        let entries = vec![
            piece_entry(1, 7, b"seven"),
            piece_entry(2, 8, b"eight"),
            drop_entry(3, 7),
            put_entry(4, b"k", b"v"),
        ];
        m.apply(entries.clone()).await.expect("apply");
        assert_eq!(segment_ids(&volumes), vec![8]);
        // As after a crash that lost the index's newest applies: the same
        // entries again recreate the segment from its piece and delete it.
        m.apply(entries).await.expect("apply again");
        assert_eq!(segment_ids(&volumes), vec![8]);
        let files: Vec<_> = std::fs::read_dir(dir.path().join("volumes"))
            .expect("dir")
            .collect();
        assert_eq!(files.len(), 1, "only segment 8 is on disk");
        assert_eq!(m.index().get(b"k").expect("get"), Some(b"v".to_vec()));
    }

    #[tokio::test]
    async fn a_snapshot_sent_after_a_drop_carries_zeros_and_its_install_deletes_unnamed_segments() {
        let (a_dir, b_dir) = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        );
        let (mut a, a_volumes) = machine_with_volumes(a_dir.path());
        let snap = applied_and_snapshotted(
            &mut a,
            vec![piece_entry(1, 7, b"seven"), piece_entry(2, 8, b"eight")],
        )
        .await;
        // Compaction deletes segment 7 after the build.
        a.apply(vec![drop_entry(3, 7)]).await.expect("drop");
        assert_eq!(segment_ids(&a_volumes), vec![8]);

        // b holds a segment the snapshot does not name (dropped before it).
        let (mut b, b_volumes) = machine_with_volumes(b_dir.path());
        b.apply(vec![piece_entry(1, 5, b"five")])
            .await
            .expect("apply");
        send_current_snapshot(&mut a, &mut b, &snap.meta).await;
        assert_eq!(segment_ids(&b_volumes), vec![7, 8]);
        let read = |id: u64| {
            let mut buf = vec![0u8; 5];
            std::os::unix::fs::FileExt::read_exact_at(
                &*b_volumes.file(id).expect("file"),
                &mut buf,
                0,
            )
            .expect("read");
            buf
        };
        assert_eq!(read(7), vec![0u8; 5], "a dropped segment travels as zeros");
        assert_eq!(read(8), b"eight".to_vec());
        // The drop after the snapshot, applied from the log, deletes it.
        b.apply(vec![drop_entry(3, 7)]).await.expect("drop");
        assert_eq!(segment_ids(&b_volumes), vec![8]);
    }

    /// Stream `from`'s current snapshot into `to` and install it there.
    async fn send_current_snapshot(
        from: &mut PartitionMachine,
        to: &mut PartitionMachine,
        meta: &SnapshotMeta,
    ) {
        let mut into = to.begin_receiving_snapshot().await.expect("receive");
        let mut current = from
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("a snapshot");
        copy_stream(&mut current.snapshot, &mut into)
            .await
            .expect("copy");
        to.install_snapshot(meta, into).await.expect("install");
    }

    /// Apply `entries` to `m`, then build its snapshot.
    async fn applied_and_snapshotted(
        m: &mut PartitionMachine,
        entries: Vec<LogEntry>,
    ) -> Snapshot<TypeConfig> {
        m.apply(entries).await.expect("apply");
        m.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("build")
    }

    /// Every partition row of `index`, in order.
    fn rows_of(index: &dyn MetaIndex) -> Vec<Entry> {
        let mut rows = Vec::new();
        for_each_index_page(index, |page| {
            rows.extend_from_slice(page);
            Ok(())
        })
        .expect("scan");
        rows
    }

    /// An entry at `index` putting `key(i)` = `value` for every `i` in `range`.
    fn rows_entry(index: u64, range: std::ops::Range<usize>, value: &[u8]) -> LogEntry {
        let mut batch = WriteBatch::default();
        for i in range {
            batch.put(format!("row/{i:06}").into_bytes(), value.to_vec());
        }
        LogEntry {
            log_id: openraft::testing::log_id(1, 1, index),
            payload: EntryPayload::Normal(Mutation::of_batch(&batch)),
        }
    }

    #[tokio::test]
    async fn an_install_of_many_batches_leaves_exactly_the_snapshots_rows_and_a_cut_one_ends_on_open()
     {
        let (a_dir, b_dir, c_dir) = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
            tempfile::tempdir().expect("c"),
        );
        // Three install batches' worth of rows, and a tail of another entry.
        let rows = 2 * INSTALL_ROWS + 100;
        let mut a = machine(a_dir.path());
        let entries = vec![rows_entry(1, 0..rows, b"new"), put_entry(2, b"tail", b"t")];
        let snap = applied_and_snapshotted(&mut a, entries).await;
        let want = rows_of(a.index().as_ref());
        assert_eq!(want.len(), rows + 1);

        // b holds stale rows (overlapping keys, and keys the snapshot lacks).
        let mut b = machine(b_dir.path());
        b.apply(vec![rows_entry(1, rows / 2..rows + 500, b"stale")])
            .await
            .expect("apply");
        send_current_snapshot(&mut a, &mut b, &snap.meta).await;
        assert_eq!(rows_of(b.index().as_ref()), want);
        assert_eq!(
            b.applied_state().await.expect("state").0,
            snap.meta.last_log_id
        );

        // c was cut off after its first batches: the stream current, some
        // rows written, stale ones left, the applied id the old one.
        {
            let mut c = machine(c_dir.path());
            c.apply(vec![rows_entry(1, rows / 2..rows + 500, b"stale")])
                .await
                .expect("apply");
            let mut half = WriteBatch::default();
            for (k, v) in &want[..INSTALL_ROWS] {
                half.put(k.clone(), v.clone());
            }
            c.index().write(half).expect("write");
            std::fs::copy(
                a_dir.path().join("snapshots").join(CURRENT),
                c_dir.path().join("snapshots").join(CURRENT),
            )
            .expect("copy");
        }
        let mut c = machine(c_dir.path());
        assert_eq!(rows_of(c.index().as_ref()), want);
        assert_eq!(
            c.applied_state().await.expect("state").0,
            snap.meta.last_log_id
        );
    }
}
