//! laneway-replica: a laneway partition as a Raft group, on openraft 0.9.
//!
//! This is the first step of replication (docs/replication.md): the engine
//! chosen, and the two pieces of storage laneway gives it, both on the
//! store's own metadata index.
//!
//! - [`types`]: what a log entry carries (a partition's index batch) and
//!   the openraft type configuration.
//! - [`wal`]: a store node's Raft log file, the logs of all its groups in
//!   one append-only file of segments written by one thread, synced before
//!   an append is acknowledged; [`log_store`]: a Raft log in a metadata
//!   index (the layout of nodes from before the file, and of tests); a
//!   group's log is either ([`raft_log`]).
//! - [`machine`]: the partition index as the state machine, applied in one
//!   batch per call with its applied id, and snapshots as checked streams
//!   of its rows ([`snapshot`]) sent with the volume segments they point
//!   at ([`snapshot_volumes`], moved by [`snapshot_data`]).
//! - [`memnet`]: an in-process transport between groups, for tests.
//! - [`net`]: the transport between nodes, on the cluster RPC
//!   (`laneway_store::rpc`): every group's messages to a peer share that
//!   peer's one HTTP/2 connection, a [`net::RaftService`] routes incoming
//!   messages to the node's groups, and [`net::start_group`] starts a
//!   replica and initialises a new group exactly once; a replica that
//!   started empty (a wiped disk) refuses votes until it has caught up
//!   ([`rejoin`]).
//! - [`group`]: a partition's group as the store's `Group` seam sees it,
//!   and the opener that starts one per hosted partition and the catalog;
//!   its leader serves reads under a lease ([`lease`]) when a quorum
//!   acknowledged it a moment ago.
//! - [`node`]: a store node's groups wired from the cluster file.
//!
//! [`open_group`] opens both halves of one replica from a directory.

pub mod blocking;
pub mod group;
pub mod lease;
pub mod log_store;
pub mod machine;
pub mod memnet;
pub mod net;
pub mod node;
pub mod raft_log;
pub mod rejoin;
pub mod snapshot;
pub mod snapshot_data;
pub mod snapshot_volumes;
pub mod types;
pub mod wal;

pub use blocking::{ReplicaError, ReplicaResult};
pub use log_store::LogStore;
pub use machine::PartitionMachine;
pub use types::{Applied, Mutation, NodeId, PartitionRaft, TypeConfig};

use laneway_store::index::{Engine, MetaIndex, open_index};
use std::path::Path;
use std::sync::Arc;

/// One replica's storage, opened from `dir`: the log in `dir/log`, the
/// partition index in `dir/index` and its snapshots in `dir/snapshots`,
/// both indexes on `engine`.
pub fn open_group(dir: &Path, engine: Engine) -> ReplicaResult<(LogStore, PartitionMachine)> {
    let log: Arc<dyn MetaIndex> = Arc::from(open_index(engine, &dir.join("log"))?);
    let index: Arc<dyn MetaIndex> = Arc::from(open_index(engine, &dir.join("index"))?);
    let machine = PartitionMachine::open(index, &dir.join("snapshots"))?;
    Ok((LogStore::new(log), machine))
}
