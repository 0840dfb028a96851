//! Placement: edits of the cluster file that change who holds what
//! (`laneway cluster add-node`, `remove-node`, `move-partition`,
//! `rebalance`), and the plans that choose which replica moves where.
//!
//! The file is what gateways route by and what a restarted node reads;
//! the replication groups' memberships are what is true. So the tool
//! changes a group first (through the engine's membership change) and
//! only then writes the file ([`ClusterFile::with_replica_moved`]), one
//! version newer, and publishes it as the catalog's copy
//! ([`crate::cluster::MAP_DOC`]), which every client takes within a round
//! of its leader watch. Every edit here is checked by the same parser that reads the
//! file ([`ClusterFile::save`]), so the tool never writes a file a node
//! would refuse.
//!
//! Plans are pure functions of the map: [`rebalance_step`] moves one
//! partition replica from the node holding the most to the node holding
//! the fewest until no two nodes differ by more than one (the catalog
//! stays where it is); [`drain_step`] moves one replica off a node being
//! removed, its partitions first and its catalog replica last, to the
//! node holding the fewest among those without one of that group.

use crate::cluster::file::{ClusterFile, ClusterFileError};
use crate::cluster::map::{NodeId, NodeInfo, PartitionMap};
use crate::ids::PartitionId;

/// A replication group of the cluster: a partition's or the catalog's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GroupRef {
    /// The catalog's group (buckets, tenants, keys).
    Catalog,
    /// A partition's group.
    Partition(PartitionId),
}

impl GroupRef {
    /// Its replicas under `map` (none for a partition out of range).
    pub fn replicas(self, map: &PartitionMap) -> &[NodeId] {
        match self {
            GroupRef::Catalog => map.catalog(),
            GroupRef::Partition(p) => map.replicas(p),
        }
    }

    /// `catalog`, `3` or `p0003`.
    pub fn parse(s: &str) -> Result<GroupRef, String> {
        if s == "catalog" {
            return Ok(GroupRef::Catalog);
        }
        s.strip_prefix('p')
            .unwrap_or(s)
            .parse::<u32>()
            .map(|p| GroupRef::Partition(PartitionId(p)))
            .map_err(|_| {
                format!(
                    "{s:?} is not a group: expected `catalog`, or a partition such as 3 or p0003"
                )
            })
    }
}

impl std::fmt::Display for GroupRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupRef::Catalog => f.write_str("catalog"),
            GroupRef::Partition(p) => write!(f, "{p}"),
        }
    }
}

/// One replica of one group, moving from one node to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// The group.
    pub group: GroupRef,
    /// The node giving its replica up.
    pub from: NodeId,
    /// The node taking a replica.
    pub to: NodeId,
}

impl std::fmt::Display for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} -> {}", self.group, self.from, self.to)
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
            return Err(format!("node {id} still holds a replica of the catalog"));
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

    /// This file with `m` done: its group held by `m.to` in place of
    /// `m.from`, the map one version newer.
    pub fn with_replica_moved(&self, m: &Move) -> Result<ClusterFile, String> {
        check_move(self, m)?;
        let swap = |n: &NodeId| {
            if *n == m.from {
                m.to.clone()
            } else {
                n.clone()
            }
        };
        let replicas: Vec<NodeId> = m.group.replicas(&self.map).iter().map(swap).collect();
        let mut file = self.clone();
        file.map = match m.group {
            GroupRef::Catalog => file.map.with_catalog(replicas),
            GroupRef::Partition(p) => file.map.with_replicas(p, replicas),
        };
        Ok(file)
    }
}

/// Whether `m` can be made on `file`: its group exists, `from` holds a
/// replica of it, `to` is a node of the file that does not.
pub fn check_move(file: &ClusterFile, m: &Move) -> Result<(), String> {
    let replicas = m.group.replicas(&file.map);
    if replicas.is_empty() {
        return Err(format!(
            "{} is not a partition of this cluster ({} partitions)",
            m.group,
            file.map.partition_count()
        ));
    }
    if !replicas.contains(&m.from) {
        return Err(format!("{} is not on {}", m.group, m.from));
    }
    if replicas.contains(&m.to) {
        return Err(format!("{} is already on {}", m.group, m.to));
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
        group: GroupRef::Partition(partition),
        from: most.clone(),
        to: fewest.clone(),
    })
}

/// The next move off node `leaving` (`Ok(None)`: it holds nothing): its
/// lowest partition, then its catalog replica, each to the node holding
/// the fewest replicas among those without one of that group.
pub fn drain_step(
    map: &PartitionMap,
    nodes: &[NodeInfo],
    leaving: &NodeId,
) -> Result<Option<Move>, String> {
    let group = match map.hosted_by(leaving).first() {
        Some(p) => GroupRef::Partition(*p),
        None if map.catalog().contains(leaving) => GroupRef::Catalog,
        None => return Ok(None),
    };
    let replicas = group.replicas(map);
    let to = loads(map, nodes)
        .into_iter()
        .filter(|(n, _)| n != leaving && !replicas.contains(n))
        .min_by_key(|(n, l)| (*l, n.clone()))
        .map(|(n, _)| n)
        .ok_or_else(|| {
            format!(
                "no node can take {group} from {leaving}: every other node holds it already \
                 (add a node first)"
            )
        })?;
    Ok(Some(Move {
        group,
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
    fn a_node_without_a_place_to_move_to_is_refused() {
        let f = file(3);
        let err = f.without_node(&id("s1")).expect_err("holds replicas");
        assert!(err.contains("catalog"), "{err}");
        let err = drain_step(&f.map, &f.nodes, &id("s1")).expect_err("nowhere to go");
        assert!(err.contains("add a node"), "{err}");
    }

    #[test]
    fn draining_a_catalog_node_moves_its_partitions_then_its_catalog_replica() {
        let (mut f, _) = rebalance(file(3).with_node(info("s4", 9104)).expect("add"));
        let s1 = id("s1");
        let mut moved = Vec::new();
        while let Some(m) = drain_step(&f.map, &f.nodes, &s1).expect("plan") {
            f = f.with_replica_moved(&m).expect("move");
            moved.push(m.group);
        }
        assert_eq!(
            moved.last(),
            Some(&GroupRef::Catalog),
            "the catalog last: {moved:?}"
        );
        assert_eq!(moved.len(), 7, "six partitions and the catalog");
        assert_eq!(f.map.catalog(), &[id("s4"), id("s2"), id("s3")]);
        let f = f.without_node(&s1).expect("remove");
        for n in ["s2", "s3", "s4"] {
            assert_eq!(f.map.hosted_by(&id(n)).len(), 8, "{n}");
        }
    }

    #[test]
    fn groups_are_named_catalog_or_by_partition() {
        assert_eq!(GroupRef::parse("catalog"), Ok(GroupRef::Catalog));
        assert_eq!(
            GroupRef::parse("3"),
            Ok(GroupRef::Partition(PartitionId(3)))
        );
        assert_eq!(
            GroupRef::parse("p0003"),
            Ok(GroupRef::Partition(PartitionId(3)))
        );
        assert!(GroupRef::parse("x3").is_err());
        assert!(GroupRef::parse("").is_err());
        assert_eq!(GroupRef::Partition(PartitionId(3)).to_string(), "p0003");
    }

    #[test]
    fn moves_and_additions_are_checked() {
        let f = file(3);
        let p = PartitionId(0);
        let m = |from: &str, to: &str| Move {
            group: GroupRef::Partition(p),
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
            group: GroupRef::Partition(PartitionId(8)),
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
