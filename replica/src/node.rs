//! A store node's replication, wired from the cluster file: a replica of
//! every partition's Raft group and of the catalog's, each a member where
//! the map (or a membership change since) makes this node one, and idle
//! elsewhere: an idle replica never initializes its group, so it stays
//! out of it until the group's leader adds it (`laneway cluster
//! move-partition`).
//!
//! [`NodeReplication::new`] builds the two halves a node needs: the
//! [`Replication`] opener that `Store::open` starts every group through
//! (its members and their RPC addresses from the map, its transport over
//! the node's shared [`Peers`]), and the [`RaftService`] that receives
//! the groups' messages, which the node serves beside its store calls
//! on one port ([`crate::net::Split`]). Its groups send no heartbeats of
//! their own: the node's [`HeartbeatTicker`] triggers those of every
//! group it leads at once, and they travel as one call per peer
//! ([`crate::net::batch`]); nor do they start elections on their own
//! timers: the ticker campaigns for a group once a majority of its voters
//! no longer hears a leader ([`crate::net::prevote`]). Their logs share one file of segments in the
//! data directory ([`WAL_DIR`], [`crate::wal`]), written and synced by one
//! thread, so appends of several groups that arrive together share one
//! write and one fdatasync; a group whose log is still in the older
//! layout ([`LOG_DIR`], one keyspace per group) keeps it.
//!
//! Members are a node's Raft id ([`NodeId::raft_id`]) with its RPC address
//! from the cluster file. Changing who holds a partition is a membership
//! change through the group (`laneway cluster move-partition`,
//! docs/replication.md, "Membership changes"), never an edit of the file
//! under a running cluster; the tool writes the map after the change
//! committed, and the node reads the newer map (its leader watch polls the
//! file every round): a replica the map no longer places here has its copy
//! deleted while the node runs (`Group::forget_if_left`), and starts again
//! as the new map says.

use crate::group::{GroupLogs, GroupSpec, LOG_CACHE_BYTES, RaftOpener, turn_of};
use crate::net::{Asking, HeartbeatTicker, Peers, RaftService, RpcNetwork};
use crate::wal::Wal;
use laneway_store::cluster::{ClusterFile, FileMapSource, NodeId};
use laneway_store::ids::PartitionId;
use laneway_store::index_fjall::SharedFjall;
use laneway_store::replication::Replication;
use laneway_store::rpc::Signer;
use openraft::BasicNode;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tokio::runtime::Handle;

/// The directory of a node's Raft log file ([`Wal`]), in its data
/// directory.
pub const WAL_DIR: &str = "raft-wal";

/// The directory of a node's Raft log database, in its data directory:
/// where nodes kept their groups' logs before the log file (a group that
/// has its log there keeps it).
pub const LOG_DIR: &str = "raft-log";

/// The replication of one store node.
pub struct NodeReplication {
    /// Receives the Raft messages of this node's groups.
    pub service: Arc<RaftService>,
    /// Opens this node's groups (a `StoreConfig::groups`).
    pub opener: Replication,
    /// Sends the heartbeats of the groups this node leads; stops when
    /// dropped.
    pub ticker: HeartbeatTicker,
}

/// Why a node's groups cannot be described.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(String);

impl NodeReplication {
    /// The replication of node `me` of the cluster `source`'s file describes, its
    /// messages signed with the cluster `secret`, its groups run on
    /// `handle`, a partition's group snapshotting every
    /// `snapshot_entries` log entries, the groups' logs in one database
    /// in the node's log file, `data_dir/raft-wal` ([`RaftOpener::logs`]).
    pub fn new(
        source: &Arc<FileMapSource>,
        me: &NodeId,
        secret: &[u8],
        handle: Handle,
        snapshot_entries: u64,
        data_dir: &Path,
    ) -> Result<NodeReplication, SpecError> {
        let specs = Specs::of(&source.file(), me)?;
        let wal = Wal::open(&data_dir.join(WAL_DIR))
            .map_err(|e| SpecError(format!("the node's Raft log file: {e}")))?;
        let older = if data_dir.join(LOG_DIR).exists() {
            Some(
                SharedFjall::open(&data_dir.join(LOG_DIR), LOG_CACHE_BYTES)
                    .map_err(|e| SpecError(format!("the node's Raft log database: {e}")))?,
            )
        } else {
            None
        };
        let service = Arc::new(RaftService::new());
        let peers = Arc::new(Peers::new(Signer::new(secret)));
        let registry = Arc::clone(&service);
        let asked_through = Arc::clone(&peers);
        let catalog = specs.catalog.clone();
        let specs = LiveSpecs {
            source: Arc::clone(source),
            me: me.clone(),
            cached: Mutex::new((Arc::new(specs), 0)),
        };
        let heard = Arc::clone(&service);
        let ticker = HeartbeatTicker::start(
            &handle,
            Arc::clone(&service),
            Arc::clone(&peers),
            std::time::Duration::from_millis(crate::net::HEARTBEAT_INTERVAL_MS),
        );
        let opener = RaftOpener {
            spec: Box::new(move |p| specs.now().of_partition(p)),
            unheard_for: Box::new(move |p: PartitionId| heard.unheard_for(p.0)),
            catalog,
            network: Box::new(move |p: PartitionId| RpcNetwork::new(p.0, Arc::clone(&peers))),
            started: Box::new(move |p: PartitionId, raft, empty, spec: &GroupSpec| {
                let asking = Asking::of(&asked_through, spec.me, &spec.members);
                registry.register_as(p.0, raft, empty, asking)
            }),
            handle,
            snapshot_entries,
            own_heartbeats: false,
            logs: GroupLogs::File { wal, older },
            applies: Some(
                crate::group::apply_queue()
                    .map_err(|e| SpecError(format!("the node's apply thread: {e}")))?,
            ),
        };
        Ok(NodeReplication {
            service,
            opener: Replication(Arc::new(opener)),
            ticker,
        })
    }
}

/// The groups' members as the newest map this node read says (the
/// node's leader watch reads the file again every round).
struct LiveSpecs {
    source: Arc<FileMapSource>,
    me: NodeId,
    /// The members by the newest readable map, and the newest version
    /// looked at.
    cached: Mutex<(Arc<Specs>, u64)>,
}

impl LiveSpecs {
    /// The members by the newest map; a map that cannot be described
    /// (it names a node the file lacks) is passed over, and the one
    /// before kept.
    fn now(&self) -> Arc<Specs> {
        let file = self.source.file();
        let version = file.map.version();
        let mut cached = self.cached.lock();
        if version > cached.0.version && version > cached.1 {
            cached.1 = version;
            match Specs::of(&file, &self.me) {
                Ok(specs) => cached.0 = Arc::new(specs),
                Err(e) => tracing::warn!(version, error = %e,
                    "the cluster file's newer map cannot be read; keeping the one before"),
            }
        }
        Arc::clone(&cached.0)
    }
}

/// Every group's members as this node sees them.
struct Specs {
    /// The map's version.
    version: u64,
    me: u64,
    partitions: Vec<BTreeMap<u64, BasicNode>>,
    catalog: Option<GroupSpec>,
}

impl Specs {
    fn of(file: &ClusterFile, me: &NodeId) -> Result<Specs, SpecError> {
        let map = &file.map;
        let partitions = map
            .partitions()
            .map(|p| members(file, map.replicas(p)))
            .collect::<Result<Vec<_>, _>>()?;
        // Every node runs a replica of the catalog's group, idle unless
        // the map (or a membership change since) makes it a member.
        let catalog = Some(GroupSpec {
            me: me.raft_id(),
            members: members(file, map.catalog())?,
            initializer: None,
        });
        Ok(Specs {
            version: map.version(),
            me: me.raft_id(),
            partitions,
            catalog,
        })
    }

    /// Partition `p`'s group (the store opens only partitions hosted
    /// here; an id past the map has no members and its group no leader).
    fn of_partition(&self, p: PartitionId) -> GroupSpec {
        let members = usize::try_from(p.0)
            .ok()
            .and_then(|i| self.partitions.get(i))
            .cloned()
            .unwrap_or_default();
        GroupSpec {
            me: self.me,
            initializer: turn_of(&members, u64::from(p.0)),
            members,
        }
    }
}

/// The Raft members that `nodes` are, with their RPC addresses.
fn members(file: &ClusterFile, nodes: &[NodeId]) -> Result<BTreeMap<u64, BasicNode>, SpecError> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let info = file
            .node(n.as_str())
            .ok_or_else(|| SpecError(format!("the map names node {n}, which the file lacks")))?;
        if out
            .insert(n.raft_id(), BasicNode::new(info.rpc.clone()))
            .is_some()
        {
            return Err(SpecError(format!(
                "two nodes of one group share the Raft id of {n}: rename one"
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::Path;

    const FILE: &str = r#"
format = 1
partitions = 2
replicas = 3
secret_file = "s.secret"

[[nodes]]
id = "a"
rpc = "127.0.0.1:9101"

[[nodes]]
id = "b"
rpc = "127.0.0.1:9102"

[[nodes]]
id = "c"
rpc = "127.0.0.1:9103"

[[nodes]]
id = "d"
rpc = "127.0.0.1:9104"

[map]
version = 1
catalog = ["a", "b", "c"]
partitions = [["a", "b", "c"], ["b", "c", "d"]]
"#;

    fn node(n: &str) -> NodeId {
        NodeId::parse(n).expect("id")
    }

    #[test]
    fn each_group_has_the_maps_replicas_at_their_rpc_addresses() {
        let file = ClusterFile::parse(Path::new("/x/cluster.toml"), FILE).expect("parse");
        let specs = Specs::of(&file, &node("d")).expect("specs");
        let idle = specs
            .catalog
            .as_ref()
            .expect("every node runs the catalog's group");
        assert!(
            !idle.members.contains_key(&node("d").raft_id()),
            "d is no member of it, so it never initializes it"
        );
        let p1 = specs.of_partition(PartitionId(1));
        assert_eq!(p1.me, node("d").raft_id());
        let addrs: Vec<(u64, String)> = p1
            .members
            .iter()
            .map(|(id, n)| (*id, n.addr.clone()))
            .collect();
        let mut want: Vec<(u64, String)> = [("b", 9102), ("c", 9103), ("d", 9104)]
            .iter()
            .map(|(n, port)| (node(n).raft_id(), format!("127.0.0.1:{port}")))
            .collect();
        want.sort();
        assert_eq!(addrs, want);
        assert!(
            specs.of_partition(PartitionId(7)).members.is_empty(),
            "a partition past the map has no members"
        );

        let specs = Specs::of(&file, &node("a")).expect("specs");
        let catalog = specs.catalog.expect("a holds a catalog replica");
        assert_eq!(catalog.members.len(), 3);
        assert!(catalog.members.contains_key(&node("a").raft_id()));
    }

    #[test]
    fn new_partition_groups_take_turns_at_initializing_and_every_node_agrees() {
        let file = ClusterFile::parse(Path::new("/x/cluster.toml"), FILE).expect("parse");
        let views: Vec<Specs> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| Specs::of(&file, &node(n)).expect("specs"))
            .collect();
        for p in [PartitionId(0), PartitionId(1)] {
            let firsts: BTreeSet<Option<u64>> =
                views.iter().map(|v| v.of_partition(p).first()).collect();
            assert_eq!(firsts.len(), 1, "{p}: every node names one initializer");
            let first = firsts.into_iter().next().flatten().expect("an initializer");
            assert!(views[0].of_partition(p).members.contains_key(&first));
        }
        // Three groups on the same three nodes start led by three nodes.
        let mut members = BTreeMap::new();
        for n in ["a", "b", "c"] {
            members.insert(node(n).raft_id(), BasicNode::new(n));
        }
        let turns: BTreeSet<u64> = (0..3).filter_map(|p| turn_of(&members, p)).collect();
        assert_eq!(turns.len(), 3);
        assert_eq!(turn_of(&members, 4), turn_of(&members, 1));
        assert_eq!(turn_of(&BTreeMap::new(), 0), None);
        // The catalog keeps the lowest-numbered member.
        let catalog = views[0].catalog.as_ref().expect("catalog");
        assert_eq!(catalog.first(), catalog.members.keys().next().copied());
    }
}
