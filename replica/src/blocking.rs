//! Running the index's blocking calls off the async runtime, and turning
//! their errors into openraft's storage errors.
//!
//! Every [`laneway_store::index::MetaIndex`] call may read or fsync files,
//! so the storage traits' async methods hand that work to tokio's blocking
//! pool instead of stalling the runtime thread that drives Raft.

use crate::types::StorageError;
use openraft::StorageIOError;
use std::fmt;

/// An error of this crate's storage, before openraft's error wraps it.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The metadata index failed.
    #[error("index: {0}")]
    Index(#[from] laneway_store::StoreError),
    /// A file (a snapshot) failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// Stored bytes did not decode.
    #[error("decode: {0}")]
    Decode(#[from] bincode::Error),
    /// A snapshot stream is damaged or does not match its metadata.
    #[error("snapshot: {0}")]
    Snapshot(String),
    /// A group's openraft settings were refused.
    #[error("raft config: {0}")]
    Config(String),
    /// openraft refused to start or initialise a group.
    #[error("raft: {0}")]
    Raft(String),
}

/// What a storage step returns.
pub type ReplicaResult<T> = Result<T, ReplicaError>;

/// Which kind of storage work failed, for openraft's error subject.
#[derive(Clone, Copy, Debug)]
pub enum Work {
    /// Reading or writing the vote.
    Vote,
    /// Reading log entries.
    ReadLogs,
    /// Appending, truncating or purging log entries.
    WriteLogs,
    /// Reading the state machine.
    ReadMachine,
    /// Applying entries to the state machine.
    WriteMachine,
    /// Building, reading or installing a snapshot.
    Snapshot,
}

/// `err` as openraft's storage error for `work`.
pub fn storage_err(work: Work, err: &(impl std::error::Error + 'static)) -> StorageError {
    let io = match work {
        Work::Vote => StorageIOError::write_vote(err),
        Work::ReadLogs => StorageIOError::read_logs(err),
        Work::WriteLogs => StorageIOError::write_logs(err),
        Work::ReadMachine => StorageIOError::read_state_machine(err),
        Work::WriteMachine => StorageIOError::write_state_machine(err),
        Work::Snapshot => StorageIOError::write_snapshot(None, err),
    };
    io.into()
}

/// Run `f` on the blocking pool; its error (or a panic) becomes a storage
/// error for `work`.
pub async fn blocking<T, F>(work: Work, f: F) -> Result<T, StorageError>
where
    T: Send + 'static,
    F: FnOnce() -> ReplicaResult<T> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(storage_err(work, &e)),
        Err(join) => Err(storage_err(work, &Panicked(join.to_string()))),
    }
}

/// A blocking task that did not finish.
#[derive(Debug)]
struct Panicked(String);

impl fmt::Display for Panicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "storage task failed: {}", self.0)
    }
}

impl std::error::Error for Panicked {}
