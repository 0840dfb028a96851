//! A partition group's Raft log (openraft's [`RaftLogStorage`]) kept in a
//! laneway metadata index of its own.
//!
//! Rows, all bincode-encoded values:
//!
//! | key | value |
//! | --- | --- |
//! | `v` | the vote |
//! | `c` | the last committed log id (a hint for restarts; not synced) |
//! | `p` | the last purged log id |
//! | `t` | the last appended log id (the tail) |
//! | `l` + index (u64 BE) | the entry at that index |
//!
//! Big-endian indexes keep entries in log order, so a range of the log is
//! one index scan. The tail row is written in the same batch as the entries
//! it follows, so the log's end is known without a reverse scan.
//!
//! Durability: an append, a truncation and a vote are synced before they
//! are acknowledged (an append's [`LogFlushed`] callback runs after the
//! index's `sync()`). A log that is a keyspace of a node's shared log
//! database ([`LogStore::with_queue`]) hands its appends to that
//! database's queue thread ([`SyncQueue`]), which writes the appends of
//! every group it finds queued and syncs them with one fsync; openraft
//! waits for each append's callback before its group goes on, so one
//! group's appends never overtake each other, and the queue holds at most
//! one append per group.
//!
//! A purge is written without a sync: it is one atomic batch, so after a
//! crash either it or the entries it removed are there, and both are
//! consistent. The committed id is only a hint (openraft
//! re-applies up to it on a restart, and anything older is safe): it is
//! kept in memory and written with the next batch the log writes anyway,
//! instead of costing a write of its own at every commit.
//!
//! Reads: the newest entries stay in memory ([`Recent`], bounded by count
//! and bytes), because nearly every read follows an append closely: the
//! replication streams send what was just appended, and the state machine
//! applies what was just committed. Those reads (ranges with an end, all
//! of it kept) are answered from memory, without a trip to the blocking
//! pool; other ranges are read from the index.

use crate::blocking::{ReplicaResult, Work, blocking, storage_err};
use crate::types::{LogEntry, LogId, NodeId, StorageError, TypeConfig};
use laneway_store::index::{MetaIndex, WriteBatch};
use laneway_store::sync_queue::{Job, SyncQueue};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader, Vote};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};

const VOTE: &[u8] = b"v";
const COMMITTED: &[u8] = b"c";
const PURGED: &[u8] = b"p";
const TAIL: &[u8] = b"t";
const ENTRY_TAG: u8 = b'l';
/// The first key after every entry row.
const ENTRIES_END: &[u8] = b"m";

/// Most entries [`Recent`] keeps.
pub const RECENT_ENTRIES: usize = 256;
/// Most bytes (roughly: rows and volume pieces) [`Recent`] keeps.
pub const RECENT_BYTES: usize = 4 << 20;

/// The Raft log of one partition group, on its own [`MetaIndex`]. Clones
/// share the index and the in-memory part (a clone is also the log reader
/// openraft hands to its replication tasks).
#[derive(Clone)]
pub struct LogStore {
    index: Arc<dyn MetaIndex>,
    memory: Arc<Mutex<Memory>>,
    /// The thread that writes and syncs the appends of every log in the
    /// same database (`None`: each append on the blocking pool).
    appends: Option<SyncQueue>,
}

/// What a log keeps in memory: its newest entries, and a committed id not
/// written yet.
#[derive(Default)]
struct Memory {
    recent: Recent,
    /// The last committed id openraft reported, until a batch carries it.
    unsaved_committed: Option<Option<LogId>>,
}

/// The newest entries of the log, in order and without gaps, ending at
/// the log's last entry (or empty): at most [`RECENT_ENTRIES`] of them and
/// about [`RECENT_BYTES`], the oldest dropped first.
#[derive(Default)]
pub struct Recent {
    entries: VecDeque<LogEntry>,
    bytes: usize,
}

impl Recent {
    /// The index of the first entry kept, if any.
    fn first(&self) -> Option<u64> {
        self.entries.front().map(|e| e.log_id.index)
    }

    /// The entries with `start <= index < end`, if every one of them is
    /// kept. A range without an end is never answered here: only the
    /// index knows for certain where the log ends.
    pub fn range(&self, start: u64, end: Option<u64>) -> Option<Vec<LogEntry>> {
        let end = end?;
        let first = self.first()?;
        let tail = first + self.entries.len() as u64;
        if end <= start {
            return Some(Vec::new());
        }
        if start < first || end > tail {
            return None;
        }
        let from = usize::try_from(start - first).ok()?;
        let to = usize::try_from(end - first).ok()?;
        Some(self.entries.range(from..to).cloned().collect())
    }

    /// `entries`, just written after the log's last entry. Entries that
    /// do not follow the kept ones start the memory afresh.
    pub fn appended(&mut self, entries: &[LogEntry]) {
        for entry in entries {
            let follows = self
                .entries
                .back()
                .is_none_or(|b| b.log_id.index + 1 == entry.log_id.index);
            if !follows {
                self.clear();
            }
            self.bytes += weight(entry);
            self.entries.push_back(entry.clone());
        }
        while self.entries.len() > RECENT_ENTRIES
            || (self.bytes > RECENT_BYTES && self.entries.len() > 1)
        {
            self.pop_front();
        }
    }

    /// Forget the entries from `since` on (a truncation).
    pub fn truncated(&mut self, since: u64) {
        while self.entries.back().is_some_and(|e| e.log_id.index >= since) {
            if let Some(e) = self.entries.pop_back() {
                self.bytes -= weight(&e);
            }
        }
    }

    /// Forget the entries up to and including `upto` (a purge).
    pub fn purged(&mut self, upto: u64) {
        while self.first().is_some_and(|f| f <= upto) {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some(e) = self.entries.pop_front() {
            self.bytes -= weight(&e);
        }
    }

    /// Forget every entry (what the log holds is unknown).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

/// About how many bytes `entry` holds.
fn weight(entry: &LogEntry) -> usize {
    let payload = match &entry.payload {
        openraft::EntryPayload::Normal(m) => {
            let rows: usize = m
                .batch
                .ops
                .iter()
                .map(|op| match op {
                    crate::types::OpWire::Put(k, v) => k.len() + v.len(),
                    crate::types::OpWire::Delete(k) => k.len(),
                    crate::types::OpWire::DropSegment(_) => 8,
                })
                .sum();
            rows + m.data.iter().map(|p| p.bytes.len()).sum::<usize>()
        }
        _ => 0,
    };
    64 + payload
}

impl LogStore {
    /// A log kept in `index` (which holds nothing else).
    pub fn new(index: Arc<dyn MetaIndex>) -> LogStore {
        LogStore {
            index,
            memory: Arc::default(),
            appends: None,
        }
    }

    /// A log kept in `index`, a keyspace of a database whose appends
    /// `queue`'s thread writes and syncs (the database's
    /// [`laneway_store::index_fjall::SharedFjall::sync_queue`]): the
    /// appends of many groups arriving together share one fsync.
    pub fn with_queue(index: Arc<dyn MetaIndex>, queue: SyncQueue) -> LogStore {
        LogStore {
            appends: Some(queue),
            ..LogStore::new(index)
        }
    }

    /// Write `batch` and make it durable: on the append queue's thread
    /// when there is one (and it has room), else on the blocking pool.
    async fn write_synced(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let Some(queue) = &self.appends else {
            return self
                .with_index(Work::WriteLogs, move |ix| commit(ix, batch, true))
                .await;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let index = Arc::clone(&self.index);
        let job = Job {
            write: Box::new(move || index.write(batch)),
            done: Box::new(move |r| {
                let _ = tx.send(r);
            }),
        };
        if let Err(job) = queue.submit(job) {
            let index = Arc::clone(&self.index);
            tokio::task::spawn_blocking(move || {
                let r = (job.write)().and_then(|()| index.sync());
                (job.done)(r);
            });
        }
        match rx.await {
            Ok(r) => r.map_err(|e| storage_err(Work::WriteLogs, &e)),
            Err(e) => Err(storage_err(Work::WriteLogs, &e)),
        }
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The committed id waiting to be written, taken (it goes into the
    /// next batch).
    fn take_committed(&self) -> Option<Option<LogId>> {
        self.memory().unsaved_committed.take()
    }

    /// Run `f` with this log's index on the blocking pool.
    async fn with_index<T, F>(&self, work: Work, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn MetaIndex) -> ReplicaResult<T> + Send + 'static,
    {
        let index = Arc::clone(&self.index);
        blocking(work, move || f(index.as_ref())).await
    }
}

/// The index key of the entry at `index`.
fn entry_key(index: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(ENTRY_TAG);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// The bincode value stored at `key`, if any.
fn get_value<T: DeserializeOwned>(index: &dyn MetaIndex, key: &[u8]) -> ReplicaResult<Option<T>> {
    match index.get(key)? {
        Some(bytes) => Ok(Some(bincode::deserialize(&bytes)?)),
        None => Ok(None),
    }
}

/// Queue `value`, bincode-encoded, at `key`.
fn put_value<T: Serialize>(batch: &mut WriteBatch, key: &[u8], value: &T) -> ReplicaResult<()> {
    batch.put(key.to_vec(), bincode::serialize(value)?);
    Ok(())
}

/// Write `batch` and, when `sync`, make it durable.
fn commit(index: &dyn MetaIndex, batch: WriteBatch, sync: bool) -> ReplicaResult<()> {
    index.write(batch)?;
    if sync {
        index.sync()?;
    }
    Ok(())
}

/// The half-open index range `[start, end)` of `range` (`end` None: no end).
pub(crate) fn index_range(range: &impl RangeBounds<u64>) -> (u64, Option<u64>) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.checked_add(1),
        Bound::Excluded(e) => Some(*e),
        Bound::Unbounded => None,
    };
    (start, end)
}

/// The entries with `start <= index < end`, in order.
fn read_entries(
    index: &dyn MetaIndex,
    start: u64,
    end: Option<u64>,
) -> ReplicaResult<Vec<LogEntry>> {
    if end.is_some_and(|e| e <= start) {
        return Ok(Vec::new());
    }
    let end_key = end.map_or_else(|| ENTRIES_END.to_vec(), entry_key);
    let rows = index.scan(&entry_key(start), &end_key, usize::MAX)?;
    rows.iter()
        .map(|(_, v)| Ok(bincode::deserialize(v)?))
        .collect()
}

/// The index keys of every entry with `start <= index < end`.
fn entry_keys(index: &dyn MetaIndex, start: u64, end: Option<u64>) -> ReplicaResult<Vec<Vec<u8>>> {
    let end_key = end.map_or_else(|| ENTRIES_END.to_vec(), entry_key);
    let rows = index.scan(&entry_key(start), &end_key, usize::MAX)?;
    Ok(rows.into_iter().map(|(k, _)| k).collect())
}

/// The log's last purged and last present log ids.
fn log_state(index: &dyn MetaIndex) -> ReplicaResult<LogState<TypeConfig>> {
    let purged: Option<LogId> = get_value(index, PURGED)?;
    let tail: Option<LogId> = get_value(index, TAIL)?;
    Ok(LogState {
        last_log_id: tail.max(purged),
        last_purged_log_id: purged,
    })
}

/// A batch that starts with the committed id `committed`, if one waits.
fn batch_with(committed: Option<Option<LogId>>) -> ReplicaResult<WriteBatch> {
    let mut batch = WriteBatch::default();
    if let Some(c) = committed {
        put_value(&mut batch, COMMITTED, &c)?;
    }
    Ok(batch)
}

/// The batch that writes `entries` and their tail (with `committed`, if
/// any); `None` for no entries.
fn append_batch(
    entries: &[LogEntry],
    committed: Option<Option<LogId>>,
) -> ReplicaResult<Option<WriteBatch>> {
    let Some(last) = entries.last().map(|e| e.log_id) else {
        return Ok(None);
    };
    let mut batch = batch_with(committed)?;
    for entry in entries {
        put_value(&mut batch, &entry_key(entry.log_id.index), entry)?;
    }
    put_value(&mut batch, TAIL, &last)?;
    Ok(Some(batch))
}

/// Remove the entries from `since` on, durably; the tail becomes the entry
/// before it (or nothing: the purge marker is then the log's end).
fn truncate_since(index: &dyn MetaIndex, since: u64) -> ReplicaResult<()> {
    let mut batch = WriteBatch::default();
    for key in entry_keys(index, since, None)? {
        batch.delete(key);
    }
    let before = match since.checked_sub(1) {
        Some(i) => get_value::<LogEntry>(index, &entry_key(i))?,
        None => None,
    };
    match before {
        Some(entry) => put_value(&mut batch, TAIL, &entry.log_id)?,
        None => batch.delete(TAIL.to_vec()),
    }
    commit(index, batch, true)
}

/// Remove the entries up to and including `upto` and record it as purged
/// (with `committed`, if any).
fn purge_upto(
    index: &dyn MetaIndex,
    upto: LogId,
    committed: Option<Option<LogId>>,
) -> ReplicaResult<()> {
    let mut batch = batch_with(committed)?;
    for key in entry_keys(index, 0, upto.index.checked_add(1))? {
        batch.delete(key);
    }
    put_value(&mut batch, PURGED, &upto)?;
    commit(index, batch, false)
}

/// Store `value` at `key`, synced when `sync`.
fn save_value<T: Serialize>(
    index: &dyn MetaIndex,
    key: &[u8],
    value: &T,
    sync: bool,
) -> ReplicaResult<()> {
    let mut batch = WriteBatch::default();
    put_value(&mut batch, key, value)?;
    commit(index, batch, sync)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<LogEntry>, StorageError> {
        let (start, end) = index_range(&range);
        if let Some(kept) = self.memory().recent.range(start, end) {
            return Ok(kept);
        }
        self.with_index(Work::ReadLogs, move |ix| read_entries(ix, start, end))
            .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        self.with_index(Work::ReadLogs, log_state).await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let vote = *vote;
        self.with_index(Work::Vote, move |ix| save_value(ix, VOTE, &vote, true))
            .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        self.with_index(Work::Vote, |ix| get_value(ix, VOTE)).await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.memory().unsaved_committed = Some(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        if let Some(c) = self.memory().unsaved_committed {
            return Ok(c);
        }
        self.with_index(Work::ReadLogs, |ix| {
            Ok(get_value::<Option<LogId>>(ix, COMMITTED)?.flatten())
        })
        .await
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = LogEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<LogEntry> = entries.into_iter().collect();
        let committed = self.take_committed();
        let done = match append_batch(&entries, committed) {
            Ok(Some(batch)) => self.write_synced(batch).await,
            Ok(None) => Ok(()),
            Err(e) => Err(storage_err(Work::WriteLogs, &e)),
        };
        match &done {
            Ok(()) => {
                self.memory().recent.appended(&entries);
                callback.log_io_completed(Ok(()));
            }
            Err(e) => {
                // What reached the index is unknown: read it from there.
                self.memory().recent.clear();
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
            }
        }
        done
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.memory().recent.truncated(log_id.index);
        let done = self
            .with_index(Work::WriteLogs, move |ix| truncate_since(ix, log_id.index))
            .await;
        if done.is_err() {
            self.memory().recent.clear();
        }
        done
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.memory().recent.purged(log_id.index);
        let committed = self.take_committed();
        self.with_index(Work::WriteLogs, move |ix| purge_upto(ix, log_id, committed))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_keys_sort_in_log_order() {
        assert!(entry_key(255) < entry_key(256));
        assert!(entry_key(u64::MAX) < ENTRIES_END.to_vec());
    }

    fn entry(index: u64, body: usize) -> LogEntry {
        let mut batch = WriteBatch::default();
        batch.put(b"k".to_vec(), vec![7; body]);
        LogEntry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: openraft::EntryPayload::Normal(crate::types::Mutation::of_batch(&batch)),
        }
    }

    fn indexes(entries: Option<Vec<LogEntry>>) -> Option<Vec<u64>> {
        entries.map(|e| e.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn recent_entries_are_a_bounded_gapless_tail() {
        let mut recent = Recent::default();
        assert_eq!(indexes(recent.range(1, Some(2))), None, "nothing kept");
        let all: Vec<LogEntry> = (1..=300).map(|i| entry(i, 10)).collect();
        recent.appended(&all);
        assert_eq!(recent.entries.len(), RECENT_ENTRIES);
        assert_eq!(indexes(recent.range(44, Some(46))), None, "evicted");
        assert_eq!(indexes(recent.range(45, Some(48))), Some(vec![45, 46, 47]));
        assert_eq!(indexes(recent.range(300, Some(301))), Some(vec![300]));
        assert_eq!(
            indexes(recent.range(300, None)),
            None,
            "only bounded ranges"
        );
        assert_eq!(indexes(recent.range(299, Some(302))), None, "past the tail");
        assert_eq!(indexes(recent.range(10, Some(10))), Some(vec![]));

        recent.truncated(290);
        assert_eq!(indexes(recent.range(288, Some(290))), Some(vec![288, 289]));
        assert_eq!(indexes(recent.range(290, Some(291))), None);
        recent.appended(&[entry(290, 10)]);
        assert_eq!(indexes(recent.range(289, Some(291))), Some(vec![289, 290]));

        // An append that does not follow the kept entries replaces them.
        recent.appended(&[entry(400, 10)]);
        assert_eq!(indexes(recent.range(290, Some(291))), None);
        assert_eq!(indexes(recent.range(400, Some(401))), Some(vec![400]));
        recent.purged(400);
        assert_eq!(recent.entries.len(), 0);
        assert_eq!(recent.bytes, 0);
    }

    #[test]
    fn recent_entries_stay_within_their_bytes() {
        let mut recent = Recent::default();
        let big: Vec<LogEntry> = (1..=10).map(|i| entry(i, 1 << 20)).collect();
        recent.appended(&big);
        assert!(recent.bytes <= RECENT_BYTES, "{} bytes kept", recent.bytes);
        assert_eq!(indexes(recent.range(10, Some(11))), Some(vec![10]));
        // One entry larger than the bound is still kept (the newest).
        recent.appended(&[entry(11, RECENT_BYTES + 1)]);
        assert_eq!(indexes(recent.range(11, Some(12))), Some(vec![11]));
        assert_eq!(recent.entries.len(), 1);
    }

    #[tokio::test]
    async fn a_committed_id_waits_for_the_next_batch_the_log_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let index: Arc<dyn MetaIndex> = Arc::from(
            laneway_store::index::open_index(laneway_store::Engine::Fjall, dir.path())
                .expect("open"),
        );
        let mut log = LogStore::new(Arc::clone(&index));
        let id = |i| LogId::new(openraft::CommittedLeaderId::new(1, 1), i);
        log.save_committed(Some(id(5))).await.expect("save");
        assert_eq!(log.read_committed().await.expect("read"), Some(id(5)));
        assert_eq!(
            LogStore::new(Arc::clone(&index))
                .read_committed()
                .await
                .expect("read"),
            None,
            "not written yet"
        );
        log.purge(id(2)).await.expect("purge");
        assert_eq!(
            LogStore::new(index).read_committed().await.expect("read"),
            Some(id(5)),
            "written with the purge"
        );
    }

    #[test]
    fn ranges_become_half_open_index_ranges() {
        assert_eq!(index_range(&(3..7)), (3, Some(7)));
        assert_eq!(index_range(&(3..=7)), (3, Some(8)));
        assert_eq!(index_range(&(..)), (0, None));
        assert_eq!(index_range(&(0..=u64::MAX)), (0, None));
    }
}
