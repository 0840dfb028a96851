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
//! - [`HeartbeatTicker`]: optionally, one heartbeat timer per node for
//!   all the groups it leads, instead of one per group.
//!
//! What is shared between groups is the connection (and, with the ticker,
//! the instant heartbeats leave), not the messages: each group's
//! heartbeat is still its own call ([`heartbeat`] says what folding them
//! would take).

pub mod heartbeat;
pub mod peers;
pub mod service;
pub mod wire;

pub use heartbeat::{HeartbeatTicker, ticked_config};
pub use peers::{Connection, Peers, RpcNetwork};
pub use service::{RaftService, Received, Split};

use crate::blocking::{ReplicaError, ReplicaResult};
use crate::types::{NodeId, PartitionRaft};
use crate::{LogStore, PartitionMachine};
use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, Config, SnapshotPolicy};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The RPC method that carries Raft messages (the server accepts method
/// names of ASCII letters, digits and `_`).
pub const RAFT_METHOD: &str = "raft";

/// A group's id: a partition's group id is its partition number.
pub type GroupId = u32;

/// The group of the cluster catalog.
pub const CATALOG_GROUP: GroupId = u32::MAX;

/// Largest snapshot chunk sent in one call. The RPC refuses argument
/// frames above 16 MiB (`laneway_store::rpc::wire::MAX_FRAME`); 4 MiB plus
/// the request's few hundred bytes of header stays far below it, and takes
/// well under a second on a LAN.
pub const SNAPSHOT_CHUNK: u64 = 4 << 20;

/// Most log entries sent in one append. An entry is one group-commit
/// round of a partition (its index rows, small bodies inline), typically
/// kilobytes; 128 of them fit a frame many times over. A batch that does
/// not fit is refused before it is sent and openraft retries with fewer
/// entries ([`peers`]).
pub const MAX_PAYLOAD_ENTRIES: u64 = 128;

/// The openraft settings of one group, named `name`, for many groups per
/// node on loopback or a LAN:
///
/// - heartbeat every 250 ms and election timeout 1-2 s: a follower that
///   hears nothing for 1-2 s (four to eight missed heartbeats, so a loaded
///   node does not start elections for nothing) campaigns, and a new
///   leader can write about 2.5 s after its predecessor's SIGKILL, inside
///   the 3 s failover goal. The leader's append calls time out after one
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
        heartbeat_interval: 250,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
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
pub async fn start_group(
    group: GroupId,
    me: NodeId,
    members: BTreeMap<NodeId, BasicNode>,
    log: LogStore,
    machine: PartitionMachine,
    peers: Arc<Peers>,
    service: &RaftService,
) -> ReplicaResult<PartitionRaft> {
    let config = group_config(&format!("group-{group}"))?;
    start_group_with(config, group, me, members, log, machine, peers, service).await
}

/// Start this node's replica `me` of `group` on `log` and `machine`,
/// reachable through `service` and talking through `peers`; the group's
/// voters are `members` (with their RPC addresses).
///
/// A new group is initialised (its first log entry, the membership, is
/// written) by exactly one node: the lowest-numbered member, and only when
/// its log and vote are empty. Why that is safe: openraft's `initialize`
/// refuses a node that has any log entry or has voted, and the other
/// members never call it, so a group's first membership is proposed once,
/// by one node, with one member set; two nodes initialising with
/// different sets is the split brain openraft warns of, and cannot happen
/// here. The others wait, empty, until the first one's election reaches
/// them. A restart finds the log non-empty and only rejoins. If the
/// lowest-numbered member is not up, a new group has no leader until it
/// is.
///
/// Not handled: the first member losing its disk. It then restarts empty
/// and initialises again, with the same members, proposing term 1 from an
/// empty log; the others, at a higher term with longer logs, refuse it
/// and their leader overwrites it, so no second history appears while
/// they are up. But a replica that lost its disk has also forgotten its
/// vote and the entries it acknowledged: it can vote twice in one term,
/// and a write that it helped commit may then rest on a single survivor.
/// The safe path is to bring it back as a new replica through a
/// membership change (remove it, add it as a learner, promote), which is
/// the placement work still to come; until then a node with a lost disk
/// must not be restarted under its old id.
#[allow(clippy::too_many_arguments)]
pub async fn start_group_with(
    config: Arc<Config>,
    group: GroupId,
    me: NodeId,
    members: BTreeMap<NodeId, BasicNode>,
    log: LogStore,
    machine: PartitionMachine,
    peers: Arc<Peers>,
    service: &RaftService,
) -> ReplicaResult<PartitionRaft> {
    let network = RpcNetwork::new(group, peers);
    let raft = PartitionRaft::new(me, config, network, log, machine)
        .await
        .map_err(|e| ReplicaError::Raft(e.to_string()))?;
    // Reachable before it may campaign, so its peers' answers find it.
    service.register(group, raft.clone());
    if members.keys().next() == Some(&me)
        && let Err(e) = initialize_once(&raft, members).await
    {
        service.unregister(group);
        let _ = raft.shutdown().await;
        return Err(e);
    }
    Ok(raft)
}

/// Initialise `raft` with `members` unless its log or vote says the group
/// already exists.
async fn initialize_once(
    raft: &PartitionRaft,
    members: BTreeMap<NodeId, BasicNode>,
) -> ReplicaResult<()> {
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|e| ReplicaError::Raft(e.to_string()))?;
    if initialized {
        return Ok(());
    }
    match raft.initialize(members).await {
        Ok(()) => Ok(()),
        // A peer's vote request arrived between the check and the call:
        // the group exists, which is what this call wanted.
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
        Err(e) => Err(ReplicaError::Raft(e.to_string())),
    }
}

/// A cluster node's Raft id from its name in the cluster file: FNV-1a 64
/// over the name's UTF-8 bytes. Stable across versions and platforms (the
/// id is in every log entry, so it must never change), spread well enough
/// that distinct names of one cluster collide with odds near 2^-64 per
/// pair, and never 0 (a hash of 0 becomes 1), as 0 reads as "no node" in
/// places. Not a defence against chosen names: names come from the
/// operator's cluster file.
pub fn raft_node_id(node_name: &str) -> NodeId {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = node_name
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    hash.max(1)
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
    }
}
