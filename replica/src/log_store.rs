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
//! index's `sync()`). A purge is written without a sync: it is one atomic
//! batch, so after a crash either it or the entries it removed are there,
//! and both are consistent.

use crate::blocking::{ReplicaResult, Work, blocking};
use crate::types::{LogEntry, LogId, NodeId, StorageError, TypeConfig};
use laneway_store::index::{MetaIndex, WriteBatch};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader, Vote};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

const VOTE: &[u8] = b"v";
const COMMITTED: &[u8] = b"c";
const PURGED: &[u8] = b"p";
const TAIL: &[u8] = b"t";
const ENTRY_TAG: u8 = b'l';
/// The first key after every entry row.
const ENTRIES_END: &[u8] = b"m";

/// The Raft log of one partition group, on its own [`MetaIndex`]. Clones
/// share the index (a clone is also the log reader openraft hands to its
/// replication tasks).
#[derive(Clone)]
pub struct LogStore {
    index: Arc<dyn MetaIndex>,
}

impl LogStore {
    /// A log kept in `index` (which holds nothing else).
    pub fn new(index: Arc<dyn MetaIndex>) -> LogStore {
        LogStore { index }
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
fn index_range(range: &impl RangeBounds<u64>) -> (u64, Option<u64>) {
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

/// Write `entries` and their tail, durably.
fn append_entries(index: &dyn MetaIndex, entries: Vec<LogEntry>) -> ReplicaResult<()> {
    let Some(last) = entries.last().map(|e| e.log_id) else {
        return Ok(());
    };
    let mut batch = WriteBatch::default();
    for entry in &entries {
        put_value(&mut batch, &entry_key(entry.log_id.index), entry)?;
    }
    put_value(&mut batch, TAIL, &last)?;
    commit(index, batch, true)
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

/// Remove the entries up to and including `upto` and record it as purged.
fn purge_upto(index: &dyn MetaIndex, upto: LogId) -> ReplicaResult<()> {
    let mut batch = WriteBatch::default();
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
        self.with_index(Work::WriteLogs, move |ix| {
            save_value(ix, COMMITTED, &committed, false)
        })
        .await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
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
        let done = self
            .with_index(Work::WriteLogs, move |ix| append_entries(ix, entries))
            .await;
        match &done {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        done
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.with_index(Work::WriteLogs, move |ix| truncate_since(ix, log_id.index))
            .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.with_index(Work::WriteLogs, move |ix| purge_upto(ix, log_id))
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

    #[test]
    fn ranges_become_half_open_index_ranges() {
        assert_eq!(index_range(&(3..7)), (3, Some(7)));
        assert_eq!(index_range(&(3..=7)), (3, Some(8)));
        assert_eq!(index_range(&(..)), (0, None));
        assert_eq!(index_range(&(0..=u64::MAX)), (0, None));
    }
}
