//! A group's Raft log in whichever layout its node keeps it: the node's log
//! file ([`WalLog`], what store nodes write now) or a metadata index
//! ([`LogStore`]: a database of the group's own, or a keyspace of the
//! node's shared log database, the layouts of nodes from before the log
//! file, which a group that has one keeps).

use crate::log_store::LogStore;
use crate::types::{LogEntry, LogId, NodeId, StorageError, TypeConfig};
use crate::wal::WalLog;
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader, Vote};
use std::fmt::Debug;
use std::ops::RangeBounds;

/// A group's Raft log.
#[derive(Clone)]
pub enum RaftLog {
    /// In the node's log file.
    File(WalLog),
    /// In a metadata index.
    Index(LogStore),
}

impl RaftLog {
    /// Bytes of the entries the log holds, where the layout knows it
    /// cheaply (the log file; 0 for an index).
    pub fn stored_bytes(&self) -> u64 {
        match self {
            RaftLog::File(l) => l.stored_bytes(),
            RaftLog::Index(_) => 0,
        }
    }
}

impl From<WalLog> for RaftLog {
    fn from(log: WalLog) -> Self {
        RaftLog::File(log)
    }
}

impl From<LogStore> for RaftLog {
    fn from(log: LogStore) -> Self {
        RaftLog::Index(log)
    }
}

impl RaftLogReader<TypeConfig> for RaftLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<LogEntry>, StorageError> {
        match self {
            RaftLog::File(l) => l.try_get_log_entries(range).await,
            RaftLog::Index(l) => l.try_get_log_entries(range).await,
        }
    }
}

impl RaftLogStorage<TypeConfig> for RaftLog {
    type LogReader = RaftLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        match self {
            RaftLog::File(l) => l.get_log_state().await,
            RaftLog::Index(l) => l.get_log_state().await,
        }
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        match self {
            RaftLog::File(l) => l.save_vote(vote).await,
            RaftLog::Index(l) => l.save_vote(vote).await,
        }
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        match self {
            RaftLog::File(l) => l.read_vote().await,
            RaftLog::Index(l) => l.read_vote().await,
        }
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        match self {
            RaftLog::File(l) => l.save_committed(committed).await,
            RaftLog::Index(l) => l.save_committed(committed).await,
        }
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        match self {
            RaftLog::File(l) => l.read_committed().await,
            RaftLog::Index(l) => l.read_committed().await,
        }
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
        match self {
            RaftLog::File(l) => l.append(entries, callback).await,
            RaftLog::Index(l) => l.append(entries, callback).await,
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        match self {
            RaftLog::File(l) => l.truncate(log_id).await,
            RaftLog::Index(l) => l.truncate(log_id).await,
        }
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        match self {
            RaftLog::File(l) => l.purge(log_id).await,
            RaftLog::Index(l) => l.purge(log_id).await,
        }
    }
}
