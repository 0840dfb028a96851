//! openraft's own storage test suite (`openraft::testing::Suite`) run
//! against laneway's log store and partition state machine, each test on
//! fresh fjall indexes in a temporary directory.

use laneway_replica::blocking::{Work, storage_err};
use laneway_replica::types::StorageError;
use laneway_replica::{LogStore, PartitionMachine, TypeConfig, open_group};
use laneway_store::Engine;
use openraft::testing::{StoreBuilder, Suite};
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

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(FreshReplica).expect("openraft storage suite");
}
