//! openraft's own storage test suite (`openraft::testing::Suite`) run
//! against laneway's log store and partition state machine, each test on
//! fresh fjall indexes in a temporary directory: once with a log and an
//! index of the replica's own, and once as a store node runs them (the
//! log a keyspace of a shared log database whose queue thread writes and
//! syncs it, the applies on an apply thread), and once on the node's log
//! file, as store nodes keep their logs now.

use laneway_replica::blocking::{Work, storage_err};
use laneway_replica::group::apply_queue;
use laneway_replica::types::StorageError;
use laneway_replica::wal::{Wal, WalLog};
use laneway_replica::{LogStore, PartitionMachine, TypeConfig, open_group};
use laneway_store::Engine;
use laneway_store::index::{MetaIndex, open_index};
use laneway_store::index_fjall::SharedFjall;
use openraft::testing::{StoreBuilder, Suite};
use std::sync::Arc;
use tempfile::TempDir;

/// Builds a replica's storage in a new temporary directory, which lives as
/// long as the test that uses it.
struct FreshReplica;

impl StoreBuilder<TypeConfig, LogStore, PartitionMachine, TempDir> for FreshReplica {
    async fn build(&self) -> Result<(TempDir, LogStore, PartitionMachine), StorageError> {
        let dir = tempfile::tempdir().map_err(|e| storage_err(Work::WriteLogs, &e))?;
        let (log, machine) =
            open_group(dir.path(), Engine::Fjall).map_err(|e| storage_err(Work::WriteLogs, &e))?;
        Ok((dir, log, machine))
    }
}

/// Builds a replica's storage as a store node opens it: the log a
/// keyspace of a node's log database, written and synced by its queue,
/// and the machine's applies on an apply thread.
struct QueuedReplica;

impl StoreBuilder<TypeConfig, LogStore, PartitionMachine, TempDir> for QueuedReplica {
    async fn build(&self) -> Result<(TempDir, LogStore, PartitionMachine), StorageError> {
        let err = |e: &dyn std::fmt::Display| storage_err(Work::WriteLogs, &Failed(e.to_string()));
        let dir = tempfile::tempdir().map_err(|e| err(&e))?;
        let logs = SharedFjall::open(&dir.path().join("raft-log"), 1 << 20).map_err(|e| err(&e))?;
        let log: Arc<dyn MetaIndex> = Arc::new(logs.index("p0001", 1 << 20).map_err(|e| err(&e))?);
        let index: Arc<dyn MetaIndex> =
            Arc::from(open_index(Engine::Fjall, &dir.path().join("index")).map_err(|e| err(&e))?);
        let machine = PartitionMachine::open(index, &dir.path().join("snapshots"))
            .map_err(|e| err(&e))?
            .with_apply_queue(apply_queue().map_err(|e| err(&e))?);
        Ok((dir, LogStore::with_queue(log, logs.sync_queue()), machine))
    }
}

/// Builds a replica's storage as a store node opens it now: the log in a
/// node's log file (`Wal`), the machine's applies on an apply thread.
struct FileReplica;

impl StoreBuilder<TypeConfig, WalLog, PartitionMachine, TempDir> for FileReplica {
    async fn build(&self) -> Result<(TempDir, WalLog, PartitionMachine), StorageError> {
        let err = |e: &dyn std::fmt::Display| storage_err(Work::WriteLogs, &Failed(e.to_string()));
        let dir = tempfile::tempdir().map_err(|e| err(&e))?;
        let wal = Wal::open(&dir.path().join("raft-wal")).map_err(|e| err(&e))?;
        let index: Arc<dyn MetaIndex> =
            Arc::from(open_index(Engine::Fjall, &dir.path().join("index")).map_err(|e| err(&e))?);
        let machine = PartitionMachine::open(index, &dir.path().join("snapshots"))
            .map_err(|e| err(&e))?
            .with_apply_queue(apply_queue().map_err(|e| err(&e))?);
        Ok((dir, wal.log(1), machine))
    }
}

/// A set-up step that failed.
#[derive(Debug)]
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

#[test]
fn openraft_storage_suite_passes_on_the_node_s_shared_log_and_queues() {
    Suite::test_all(QueuedReplica).expect("openraft storage suite");
}

#[test]
fn openraft_storage_suite_passes_on_the_node_s_log_file() {
    Suite::test_all(FileReplica).expect("openraft storage suite");
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(FreshReplica).expect("openraft storage suite");
}
