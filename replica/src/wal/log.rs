//! One group's Raft log in the node's log file: openraft's
//! [`RaftLogStorage`] and [`RaftLogReader`].
//!
//! The log's state (vote, committed and purged ids, last entry) is read
//! from the file's in-memory state, without a trip to the blocking pool.
//! Entries are encoded here, on the group's task, so the writer thread
//! only copies bytes; the newest ones stay in memory ([`Recent`]) because
//! nearly every read follows an append closely (the replication streams
//! and the state machine), and older ones are read from the segments on
//! the blocking pool. The committed id is only a hint: it waits in memory
//! and is written with the group's next append or purge.

use super::Wal;
use super::record::{Framed, Kind};
use super::writer::{Effect, Pending};
use crate::blocking::{ReplicaError, Work, blocking, storage_err};
use crate::log_store::{Recent, index_range};
use crate::types::{LogEntry, LogId, NodeId, StorageError, TypeConfig};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader, Vote};
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

/// A group's log in a [`Wal`]. Clones share the in-memory part (a clone is
/// also the reader openraft hands to its replication tasks).
#[derive(Clone)]
pub struct WalLog {
    wal: Wal,
    group: u64,
    memory: Arc<Mutex<Memory>>,
}

/// What the handle keeps beside the file.
#[derive(Default)]
pub struct Memory {
    recent: Recent,
    /// The last committed id openraft reported, until a record carries it.
    unsaved_committed: Option<Option<LogId>>,
}

impl WalLog {
    pub(super) fn new(wal: Wal, group: u64) -> WalLog {
        WalLog {
            wal,
            group,
            memory: Arc::default(),
        }
    }

    fn err(work: Work, e: impl Into<ReplicaError>) -> StorageError {
        storage_err(work, &e.into())
    }

    /// The committed id waiting to be written, as a record, if any.
    fn take_committed(&self) -> std::io::Result<Option<Pending>> {
        let Some(c) = lock_memory(&self.memory).unsaved_committed.take() else {
            return Ok(None);
        };
        let framed = Framed::committed(self.group, &c).map_err(io)?;
        Ok(Some(Pending {
            framed,
            effect: Effect::Committed(c),
        }))
    }

    /// Write `records` (after a waiting committed id), synced when `sync`.
    async fn write(
        &self,
        work: Work,
        mut records: Vec<Pending>,
        sync: bool,
    ) -> Result<(), StorageError> {
        if let Some(c) = self.take_committed().map_err(|e| Self::err(work, e))? {
            records.insert(0, c);
        }
        self.wal
            .submit(self.group, records, sync)
            .await
            .map_err(|e| Self::err(work, e))
    }
}

impl WalLog {
    /// Bytes of the entries the log holds.
    pub fn stored_bytes(&self) -> u64 {
        self.wal
            .with_state(|s| s.groups.get(&self.group).map_or(0, |g| g.live_bytes))
    }

    /// Whether the file holds anything of this group (entries, a vote, a
    /// purged or committed id).
    pub fn is_known(&self) -> bool {
        self.wal.with_state(|s| s.groups.contains_key(&self.group))
    }

    /// Drop everything of this group, durably: its entries, vote and
    /// committed and purged ids (its replica left the node; the group,
    /// if it comes back, begins empty).
    pub async fn forget(&self) -> Result<(), StorageError> {
        let framed = Framed::forget(self.group).map_err(|e| Self::err(Work::WriteLogs, io(e)))?;
        let record = Pending {
            framed,
            effect: Effect::Forgotten,
        };
        {
            let mut memory = lock_memory(&self.memory);
            memory.recent.clear();
            memory.unsaved_committed = None;
        }
        self.wal
            .submit(self.group, vec![record], true)
            .await
            .map_err(|e| Self::err(Work::WriteLogs, e))
    }

    /// Append `entries` after the log, durably (what `append` does before
    /// its callback).
    pub async fn write_entries(&self, entries: &[LogEntry]) -> Result<(), StorageError> {
        if entries.is_empty() {
            return Ok(());
        }
        let framed = Framed::entries(Kind::Entries, self.group, entries)
            .map_err(|e| Self::err(Work::WriteLogs, io(e)))?;
        let record = Pending {
            framed,
            effect: Effect::Appended,
        };
        let done = self.write(Work::WriteLogs, vec![record], true).await;
        let mut memory = lock_memory(&self.memory);
        match &done {
            Ok(()) => memory.recent.appended(entries),
            // What reached the file is unknown: read it from there.
            Err(_) => memory.recent.clear(),
        }
        done
    }
}

fn lock_memory(memory: &Mutex<Memory>) -> MutexGuard<'_, Memory> {
    memory.lock().unwrap_or_else(|p| p.into_inner())
}

fn io(e: super::record::RecordError) -> std::io::Error {
    std::io::Error::other(e)
}

impl RaftLogReader<TypeConfig> for WalLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<LogEntry>, StorageError> {
        let (start, end) = index_range(&range);
        if let Some(kept) = lock_memory(&self.memory).recent.range(start, end) {
            return Ok(kept);
        }
        let (wal, group) = (self.wal.clone(), self.group);
        blocking(Work::ReadLogs, move || Ok(wal.read(group, start, end)?)).await
    }
}

impl RaftLogStorage<TypeConfig> for WalLog {
    type LogReader = WalLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        Ok(self.wal.with_state(|s| {
            let g = s.group(self.group);
            LogState {
                last_log_id: g.last_log_id(),
                last_purged_log_id: g.purged,
            }
        }))
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let framed = Framed::vote(self.group, vote).map_err(|e| Self::err(Work::Vote, io(e)))?;
        let record = Pending {
            framed,
            effect: Effect::Voted(*vote),
        };
        self.write(Work::Vote, vec![record], true).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.wal.with_state(|s| s.group(self.group).vote))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        lock_memory(&self.memory).unsaved_committed = Some(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        if let Some(c) = lock_memory(&self.memory).unsaved_committed {
            return Ok(c);
        }
        Ok(self.wal.with_state(|s| s.group(self.group).committed))
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
        let done = self.write_entries(&entries).await;
        match &done {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        done
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        lock_memory(&self.memory).recent.truncated(log_id.index);
        let framed = Framed::truncate(self.group, log_id.index)
            .map_err(|e| Self::err(Work::WriteLogs, io(e)))?;
        let record = Pending {
            framed,
            effect: Effect::Truncated(log_id.index),
        };
        self.write(Work::WriteLogs, vec![record], true).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        lock_memory(&self.memory).recent.purged(log_id.index);
        let framed =
            Framed::purge(self.group, &log_id).map_err(|e| Self::err(Work::WriteLogs, io(e)))?;
        let record = Pending {
            framed,
            effect: Effect::Purged(log_id),
        };
        self.write(Work::WriteLogs, vec![record], false).await
    }
}
