//! Placement: edits of the cluster file that change who holds what
//! (`laneway cluster add-node`, `remove-node`, `move-partition`,
//! `rebalance`), and the plans that choose which replica moves where.
//!
//! The file is what gateways route by and what a restarted node reads;
//! the replication groups' memberships are what is true. So the tool
//! changes a group first (through the engine's membership change) and
//! only then writes the file ([`ClusterFile::with_replica_moved`]), one
//! version newer, which every client takes within a round of its leader
//! watch. Every edit here is checked by the same parser that reads the
//! file ([`ClusterFile::save`]), so the tool never writes a file a node
//! would refuse.
//!
//! Plans are pure functions of the map: [`rebalance_step`] moves one
//! replica from the node holding the most to the node holding the fewest
//! until no two nodes differ by more than one; [`drain_step`] moves one
//! replica off a node being removed, to the node holding the fewest
//! among those without the partition.

use crate::cluster::file::{ClusterFile, ClusterFileError};
use crate::cluster::map::{NodeId, NodeInfo, PartitionMap};
use crate::ids::PartitionId;

/// One replica of one partition, moving from one node to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// The partition.
    pub partition: PartitionId,
    /// The node giving its replica up.
    pub from: NodeId,
    /// The node taking a replica.
    pub to: NodeId,
}

impl std::fmt::Display for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} -> {}", self.partition, self.from, self.to)
    }
}

impl ClusterFile {
    /// Write this file in place of the one at its path (atomically),
    /// after checking it parses as a node would read it.
    pub fn save(&self) -> Result<(), ClusterFileError> {
        let text = self.to_toml();
        ClusterFile::parse(&self.path, &text)?;
        crate::fsutil::write_atomically(&self.path, text.as_bytes(), 0o644).map_err(|source| {
            ClusterFileError::Write {
                path: self.path.clone(),
                source,
            }
        })
    }

    /// This file with node `node` added (holding nothing yet), its map
    /// one version newer.
    pub fn with_node(&self, node: NodeInfo) -> Result<ClusterFile, String> {
        if self.node(node.id.as_str()).is_some() {
            return Err(format!("node {} is already in the cluster file", node.id));
        }
        if let Some(n) = self.nodes.iter().find(|n| n.rpc == node.rpc) {
            return Err(format!("rpc address {} is node {}'s", node.rpc, n.id));
        }
        if let Some(n) = self
            .nodes
            .iter()
            .find(|n| n.id.raft_id() == node.id.raft_id())
        {
            return Err(format!(
                "{} and {} share a Raft id: choose another name",
                node.id, n.id
            ));
        }
        let mut file = self.clone();
        file.nodes.push(node);
        file.map = file.map.bumped();
        Ok(file)
    }

    /// This file without node `id`, which must hold no replica (of a
    /// partition or of the catalog), its map one version newer.
    pub fn without_node(&self, id: &NodeId) -> Result<ClusterFile, String> {
        if self.node(id.as_str()).is_none() {
            return Err(format!("node {id} is not in the cluster file"));
        }
        if self.map.catalog().contains(id) {
            return Err(format!(
                "node {id} holds a replica of the catalog, which cannot move yet \
                 (docs/replication.md); remove another node"
            ));
        }
        let held = self.map.hosted_by(id);
        if !held.is_empty() {
            return Err(format!("node {id} still holds {} partitions", held.len()));
        }
        let mut file = self.clone();
        file.nodes.retain(|n| n.id != *id);
        file.map = file.map.bumped();
        Ok(file)
    }

    /// This file with `m` done: its partition held by `m.to` in place of
    /// `m.from`, the map one version newer.
    pub fn with_replica_moved(&self, m: &Move) -> Result<ClusterFile, String> {
        check_move(self, m)?;
        let replicas: Vec<NodeId> = self
            .map
            .replicas(m.partition)
            .iter()
            .map(|n| {
                if *n == m.from {
                    m.to.clone()
                } else {
                    n.clone()
                }
            })
            .collect();
        let mut file = self.clone();
        file.map = file.map.with_replicas(m.partition, replicas);
        Ok(file)
    }
}

/// Whether `m` can be made on `file`: its partition exists, `from` holds
/// it, `to` is a node of the file that does not.
pub fn check_move(file: &ClusterFile, m: &Move) -> Result<(), String> {
    let replicas = file.map.replicas(m.partition);
    if replicas.is_empty() {
        return Err(format!(
            "{} is not a partition of this cluster ({} partitions)",
            m.partition,
            file.map.partition_count()
        ));
    }
    if !replicas.contains(&m.from) {
        return Err(format!("{} is not on {}", m.partition, m.from));
    }
    if replicas.contains(&m.to) {
        return Err(format!("{} is already on {}", m.partition, m.to));
    }
    if file.node(m.to.as_str()).is_none() {
        return Err(format!(
            "node {} is not in the cluster file: `laneway cluster add-node` first",
            m.to
        ));
    }
    Ok(())
}

/// How many partition replicas each of `nodes` holds under `map`.
fn loads(map: &PartitionMap, nodes: &[NodeInfo]) -> Vec<(NodeId, usize)> {
    nodes
        .iter()
        .map(|n| (n.id.clone(), map.hosted_by(&n.id).len()))
        .collect()
}

/// The next move that evens out the replicas over `nodes` (`None`: no
/// two nodes differ by more than one). From the node holding the most
/// to the one holding the fewest, the lowest partition the first holds
/// and the second does not; ties broken by node order, so a plan is the
/// same on every run.
pub fn rebalance_step(map: &PartitionMap, nodes: &[NodeInfo]) -> Option<Move> {
    let loads = loads(map, nodes);
    let (most, high) = loads
        .iter()
        .max_by_key(|(n, l)| (*l, std::cmp::Reverse(n)))?;
    let (fewest, low) = loads.iter().min_by_key(|(n, l)| (*l, n.clone()))?;
    if high - low <= 1 {
        return None;
    }
    let partition = map
        .partitions()
        .find(|p| map.replicas(*p).contains(most) && !map.replicas(*p).contains(fewest))?;
    Some(Move {
        partition,
        from: most.clone(),
        to: fewest.clone(),
    })
}

/// The next move off node `leaving` (`Ok(None)`: it holds nothing): its
/// lowest partition, to the node holding the fewest replicas among those
/// without that partition.
pub fn drain_step(
    map: &PartitionMap,
    nodes: &[NodeInfo],
    leaving: &NodeId,
) -> Result<Option<Move>, String> {
    let Some(partition) = map.hosted_by(leaving).first().copied() else {
        return Ok(None);
    };
    let replicas = map.replicas(partition);
    let to = loads(map, nodes)
        .into_iter()
        .filter(|(n, _)| n != leaving && !replicas.contains(n))
        .min_by_key(|(n, l)| (*l, n.clone()))
        .map(|(n, _)| n)
        .ok_or_else(|| {
            format!(
                "no node can take {partition} from {leaving}: every other node holds it already \
                 (add a node first)"
            )
        })?;
    Ok(Some(Move {
        partition,
        from: leaving.clone(),
        to,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn file(nodes: usize) -> ClusterFile {
        let names: Vec<String> = (1..=nodes).map(|i| format!("\"s{i}\"")).collect();
        let node_tables: String = (1..=nodes)
            .map(|i| {
                format!(
                    "[[nodes]]\nid = \"s{i}\"\nrpc = \"127.0.0.1:{}\"\n\n",
                    9100 + i
                )
            })
            .collect();
        let row = format!("[{}]", names[..3].join(", "));
        let text = format!(
            "format = 1\npartitions = 8\nreplicas = 3\nsecret_file = \"s\"\n\n{node_tables}\
             [map]\nversion = 1\ncatalog = {row}\npartitions = [{}]\n",
            vec![row.clone(); 8].join(", ")
        );
        ClusterFile::parse(Path::new("/x/cluster.toml"), &text).expect("parse")
    }

    fn id(n: &str) -> NodeId {
        NodeId::parse(n).expect("id")
    }

    fn info(n: &str, port: u16) -> NodeInfo {
        NodeInfo {
            id: id(n),
            rpc: format!("127.0.0.1:{port}"),
        }
    }

    /// Apply rebalance steps until none is left; the moves made.
    fn rebalance(mut f: ClusterFile) -> (ClusterFile, Vec<Move>) {
        let mut moves = Vec::new();
        while let Some(m) = rebalance_step(&f.map, &f.nodes) {
            f = f.with_replica_moved(&m).expect("a planned move is valid");
            moves.push(m);
            assert!(moves.len() < 100, "rebalance does not end");
        }
        (f, moves)
    }

    #[test]
    fn a_fourth_node_takes_its_share_in_the_fewest_moves() {
        let f = file(3).with_node(info("s4", 9104)).expect("add");
        assert_eq!(f.map.version(), 2);
        let (f, moves) = rebalance(f);
        assert_eq!(moves.len(), 6, "24 replicas over 4 nodes: 6 move to s4");
        assert!(moves.iter().all(|m| m.to == id("s4")));
        for n in ["s1", "s2", "s3", "s4"] {
            assert_eq!(f.map.hosted_by(&id(n)).len(), 6, "{n}");
        }
        assert_eq!(f.map.version(), 8, "one version per move");
        for p in f.map.partitions() {
            assert_eq!(f.map.replicas(p).len(), 3);
        }
    }

    #[test]
    fn a_balanced_map_plans_nothing() {
        let f = file(3);
        assert_eq!(rebalance_step(&f.map, &f.nodes), None);
    }

    #[test]
    fn draining_a_node_moves_each_of_its_partitions_and_then_removes_it() {
        let (mut f, _) = rebalance(file(3).with_node(info("s4", 9104)).expect("add"));
        let s4 = id("s4");
        let err = f.without_node(&s4).expect_err("s4 still holds partitions");
        assert!(err.contains("still holds 6"), "{err}");
        while let Some(m) = drain_step(&f.map, &f.nodes, &s4).expect("plan") {
            assert_eq!(m.from, s4);
            f = f.with_replica_moved(&m).expect("move");
        }
        let f = f.without_node(&s4).expect("remove");
        assert!(f.node("s4").is_none());
        for n in ["s1", "s2", "s3"] {
            assert_eq!(f.map.hosted_by(&id(n)).len(), 8, "{n}");
        }
    }

    #[test]
    fn a_node_of_the_catalog_or_without_a_place_to_move_to_is_refused() {
        let f = file(3);
        let err = f.without_node(&id("s1")).expect_err("catalog");
        assert!(err.contains("catalog"), "{err}");
        let err = drain_step(&f.map, &f.nodes, &id("s1")).expect_err("nowhere to go");
        assert!(err.contains("add a node"), "{err}");
    }

    #[test]
    fn moves_and_additions_are_checked() {
        let f = file(3);
        let p = PartitionId(0);
        let m = |from: &str, to: &str| Move {
            partition: p,
            from: id(from),
            to: id(to),
        };
        assert!(
            f.with_replica_moved(&m("s1", "s2")).is_err(),
            "already on s2"
        );
        assert!(
            f.with_replica_moved(&m("s1", "s9")).is_err(),
            "no such node"
        );
        let f4 = f.with_node(info("s4", 9104)).expect("add");
        assert!(f4.with_replica_moved(&m("s4", "s1")).is_err(), "not on s4");
        let moved = f4.with_replica_moved(&m("s2", "s4")).expect("move");
        assert_eq!(moved.map.replicas(p), &[id("s1"), id("s4"), id("s3")]);
        let out_of_range = Move {
            partition: PartitionId(8),
            ..m("s1", "s4")
        };
        assert!(f4.with_replica_moved(&out_of_range).is_err());
        assert!(f.with_node(info("s1", 9200)).is_err(), "name taken");
        assert!(f.with_node(info("s5", 9101)).is_err(), "address taken");
    }

    #[test]
    fn a_saved_file_reads_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = file(3).with_node(info("s4", 9104)).expect("add");
        f.path = dir.path().join("cluster.toml");
        f.save().expect("save");
        let back = ClusterFile::load(&f.path).expect("load");
        assert_eq!(back.map, f.map);
        assert_eq!(back.nodes, f.nodes);
    }
}
