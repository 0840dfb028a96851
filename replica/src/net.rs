//! The Raft transport over the cluster RPC, and how a node starts a group
//! on it.
//!
//! A node hosts many groups (one per partition, plus the catalog's,
//! [`CATALOG_GROUP`]). Every Raft message is one call of the cluster RPC
//! (`laneway_store::rpc`) with method [`RAFT_METHOD`], whose argument
//! frame names the group ([`wire`]). The pieces:
//!
//! - [`Peers`]: one RPC client per peer node, shared by all groups, so the
//!   messages of every group two nodes share are streams of one HTTP/2
//!   connection.
//! - [`RpcNetwork`]: a group's `RaftNetworkFactory` over [`Peers`], with
//!   deadlines from openraft's own per-call TTL.
//! - [`RaftService`]: the receiving side, routing each message to the
//!   group's Raft; [`Split`] serves it beside the store's own methods on
//!   one port.
//! - [`group_config`] and [`start_group`]: the settings of a group and
//!   its start, initialising a new group exactly once.
//!
//! - [`batch`]: the appends (heartbeats, commit updates, rounds of
//!   entries) of every group to one peer, gathered into
//!   [`RAFT_BATCH_METHOD`] calls.
//! - [`HeartbeatTicker`]: one heartbeat timer per node for all the groups
//!   it leads, instead of one per group, opening the round in which their
//!   heartbeats are gathered.
//! - [`terms`]: a replica that started empty asks its group's other
//!   replicas for their terms before it takes a message
//!   ([`crate::rejoin`] says why).
//! - [`prevote`]: on a node with a [`HeartbeatTicker`], a voter that
//!   hears no leader asks its peers whether they would vote for it before
//!   it campaigns, so a node back from a pause deposes nobody.
//!
//! So the groups two nodes share use one connection, and their heartbeats
//! one call per interval between the pair (in each direction a node
//! leads groups in).

pub mod batch;
pub mod heartbeat;
pub mod peers;
pub mod prevote;
pub mod service;
pub mod terms;
pub mod wire;

pub use batch::Batching;
pub use heartbeat::{HeartbeatTicker, ticked_config};
pub use peers::{Connection, Peers, RpcNetwork};
pub use service::{RaftService, Received, Split};
pub use terms::Asking;

use crate::PartitionMachine;
use crate::blocking::{ReplicaError, ReplicaResult};
use crate::types::{NodeId, PartitionRaft, TypeConfig};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Config, SnapshotPolicy};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The RPC method that carries Raft messages (the server accepts method
/// names of ASCII letters, digits and `_`).
pub const RAFT_METHOD: &str = "raft";

/// The RPC method that carries a batch of appends of several groups
/// ([`batch`]).
pub const RAFT_BATCH_METHOD: &str = "raft_batch";

/// The RPC method by which a replica that started empty asks a peer for
/// its term in a group ([`terms`]).
pub const RAFT_TERMS_METHOD: &str = "raft_terms";

/// The RPC method by which a voter asks a peer whether it would vote for
/// it before it campaigns ([`prevote`]).
pub const RAFT_PREVOTE_METHOD: &str = "raft_prevote";

/// Whether `method` is one of the Raft transport's ([`Split`] sends them
/// to the [`RaftService`]).
pub fn is_raft_method(method: &str) -> bool {
    [
        RAFT_METHOD,
        RAFT_BATCH_METHOD,
        RAFT_TERMS_METHOD,
        RAFT_PREVOTE_METHOD,
    ]
    .contains(&method)
}

/// A group's id: a partition's group id is its partition number.
pub type GroupId = u32;

/// The group of the cluster catalog.
pub const CATALOG_GROUP: GroupId = u32::MAX;

/// Largest snapshot chunk sent in one call. The RPC refuses argument
/// frames above 16 MiB (`laneway_store::rpc::wire::MAX_FRAME`); 4 MiB plus
/// the request's few hundred bytes of header stays far below it, and takes
/// well under a second on a LAN.
pub const SNAPSHOT_CHUNK: u64 = 4 << 20;
// Chunks start on snapshot frame boundaries (crate::snapshot_volumes).
const _: () = assert!(SNAPSHOT_CHUNK.is_multiple_of(crate::snapshot_volumes::FRAME));

/// How often a leader sends heartbeats (a group's own timer, or the
/// node's [`HeartbeatTicker`]).
pub const HEARTBEAT_INTERVAL_MS: u64 = 200;

/// Most log entries sent in one append. An entry is one group-commit
/// round of a partition (its index rows, small bodies inline), typically
/// kilobytes; 128 of them fit a frame many times over. A batch that does
/// not fit is refused before it is sent and openraft retries with fewer
/// entries ([`peers`]).
pub const MAX_PAYLOAD_ENTRIES: u64 = 128;

/// The openraft settings of one group, named `name`, for many groups per
/// node on loopback or a LAN:
///
/// - heartbeat every 200 ms and election timeout 0.65-1.3 s: a follower
///   that hears nothing for 0.65-1.3 s (more than three missed
///   heartbeats, so a loaded node does not start elections for nothing)
///   campaigns. openraft's followers refuse votes for
///   `election_timeout_max` after their leader's last message (its leader
///   lease), so the first candidacy is usually refused and the election
///   that wins comes 1.3-2.6 s after a SIGKILL (docs/benchmarks.md,
///   "Failover"). On a node with a [`HeartbeatTicker`] the timer is the
///   ticker's instead, which asks the peers first ([`prevote`]): 1.3-1.95
///   s without a leader heard. The leader's append calls time out after one
///   heartbeat interval (openraft's choice), which includes the
///   follower's fsync: on disks slower than that, raise the interval with
///   the election timeouts. Votes time out after 1 s;
/// - a snapshot every 10,000 log entries since the last one; 1,000 entries
///   already in a snapshot are kept so a follower slightly behind catches
///   up from the log, and purges go in batches of at least 256 entries;
/// - snapshot chunks of [`SNAPSHOT_CHUNK`], each with 20 s to be sent and
///   written (the last one includes the install, which replaces the
///   partition's rows);
/// - at most [`MAX_PAYLOAD_ENTRIES`] entries per append.
pub fn group_config(name: &str) -> ReplicaResult<Arc<Config>> {
    let config = Config {
        cluster_name: name.to_string(),
        heartbeat_interval: HEARTBEAT_INTERVAL_MS,
        election_timeout_min: 650,
        election_timeout_max: 1300,
        install_snapshot_timeout: 20_000,
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(10_000),
        // openraft's advice: above the snapshot interval, so a follower
        // this far behind is sent a snapshot, not the log.
        replication_lag_threshold: 20_000,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK,
        max_in_snapshot_log_to_keep: 1_000,
        purge_batch_size: 256,
        ..Default::default()
    };
    let config = config
        .validate()
        .map_err(|e| ReplicaError::Config(e.to_string()))?;
    Ok(Arc::new(config))
}

/// Start this node's replica of `group` with [`group_config`]: see
/// [`start_group_with`].
#[allow(clippy::too_many_arguments)]
pub async fn start_group<L: RaftLogStorage<TypeConfig>>(
    group: GroupId,
    me: NodeId,
    members: BTreeMap<NodeId, BasicNode>,
    log: L,
    machine: PartitionMachine,
    peers: Arc<Peers>,
    service: &RaftService,
) -> ReplicaResult<PartitionRaft> {
    let config = group_config(&format!("group-{group}"))?;
    start_group_with(config, group, me, members, log, machine, peers, service).await
}

/// Start this node's replica `me` of `group` on `log` and `machine`,
/// reachable through `service` and talking through `peers`; the group's
/// voters are `members` (with their RPC addresses). The lowest-numbered
/// initializes a new group; why that is safe: [`crate::group::launch`].
#[allow(clippy::too_many_arguments)]
pub async fn start_group_with<L: RaftLogStorage<TypeConfig>>(
    config: Arc<Config>,
    group: GroupId,
    me: NodeId,
    members: BTreeMap<NodeId, BasicNode>,
    log: L,
    machine: PartitionMachine,
    peers: Arc<Peers>,
    service: &RaftService,
) -> ReplicaResult<PartitionRaft> {
    let asking = Asking::of(&peers, me, &members);
    let network = RpcNetwork::new(group, peers);
    let first = members.keys().next().copied();
    let started = crate::group::launch(
        config,
        me,
        first,
        members,
        network,
        log,
        machine,
        |raft, empty| {
            // Reachable before it may campaign, so its peers' answers find it.
            service.register_as(group, raft.clone(), empty, asking);
        },
    )
    .await;
    if started.is_err() {
        service.unregister(group);
    }
    started
}

/// A cluster node's Raft id from its name in the cluster file
/// ([`laneway_store::cluster::NodeId::raft_id`], which says why it is
/// FNV-1a 64 and never 0).
pub fn raft_node_id(node_name: &str) -> NodeId {
    laneway_store::cluster::raft_id_of(node_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use laneway_store::rpc::wire::MAX_FRAME;

    #[test]
    fn node_ids_are_stable_distinct_and_nonzero() {
        // FNV-1a 64 reference values.
        assert_eq!(raft_node_id(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(raft_node_id("a"), 0xaf63_dc4c_8601_ec8c);
        let ids: std::collections::BTreeSet<NodeId> = (0..1000)
            .map(|i| raft_node_id(&format!("node-{i}")))
            .collect();
        assert_eq!(ids.len(), 1000);
        assert!(!ids.contains(&0));
    }

    #[test]
    fn the_group_config_is_valid_and_its_chunks_fit_a_frame() {
        let config = group_config("g").expect("valid");
        assert!(config.election_timeout_min > 3 * config.heartbeat_interval);
        assert!(config.election_timeout_max + config.heartbeat_interval < 3000);
        let chunk = usize::try_from(config.snapshot_max_chunk_size).expect("fits usize");
        assert!(chunk + 4096 < MAX_FRAME);
        assert_eq!(
            config.snapshot_max_chunk_size % crate::snapshot_volumes::FRAME,
            0
        );
        let store = crate::group::store_group_config("p").expect("store config");
        assert_eq!(store.snapshot_policy, SnapshotPolicy::LogsSinceLast(10_000));
    }
}
