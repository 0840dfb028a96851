//! The partition map: for every partition, the store nodes holding it, with
//! a version that grows on every change; and [`MapSource`], the one
//! interface through which gateways and store nodes read it.
//!
//! Versions settle disagreements without a protocol of our own: a store
//! node refuses a call for a partition it does not own and says which map
//! version it holds; the caller refreshes from its source when that version
//! is newer than its own and retries once. A source never goes back to an
//! older version, and the partition count can never change (it decides
//! where every object lives, [`crate::hash`]).

use crate::cluster::file::{ClusterFile, ClusterFileError};
use crate::ids::PartitionId;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Longest node id accepted.
pub const MAX_NODE_ID_LEN: usize = 64;

/// A store node's name in the cluster file: lowercase letters, digits and
/// `-`, starting with a letter or digit (it appears in paths, metrics
/// labels and container names).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(String);

impl NodeId {
    /// Check and wrap a node id.
    pub fn parse(s: &str) -> Result<NodeId, String> {
        let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if s.is_empty() || s.len() > MAX_NODE_ID_LEN {
            return Err(format!("must be 1 to {MAX_NODE_ID_LEN} characters"));
        }
        if !s.chars().all(ok_char) || s.starts_with('-') {
            return Err("use lowercase letters, digits and '-' (not first)".into());
        }
        Ok(NodeId(s.to_string()))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This node's id in every replication group it is a member of:
    /// FNV-1a 64 over the name's UTF-8 bytes. Stable across versions and
    /// platforms (the id is in every log entry, so it must never change),
    /// spread well enough that distinct names of one cluster collide with
    /// odds near 2^-64 per pair, and never 0 (a hash of 0 becomes 1), as 0
    /// reads as "no node" in places. Not a defence against chosen names:
    /// names come from the operator's cluster file.
    pub fn raft_id(&self) -> u64 {
        raft_id_of(&self.0)
    }
}

/// [`NodeId::raft_id`] of a name (checked or not).
pub fn raft_id_of(name: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = name
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    hash.max(1)
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A store node and the address of its RPC listener (`host:port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Its id.
    pub id: NodeId,
    /// Where gateways and other nodes reach it.
    pub rpc: String,
}

/// Partition -> replicas (first = owner today, preferred leader once
/// partitions replicate), at one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMap {
    version: u64,
    catalog: Vec<NodeId>,
    replicas: Vec<Vec<NodeId>>,
}

impl PartitionMap {
    /// A map from its checked parts (the cluster file checks them).
    pub(crate) fn new(
        version: u64,
        catalog: Vec<NodeId>,
        replicas: Vec<Vec<NodeId>>,
    ) -> PartitionMap {
        PartitionMap {
            version,
            catalog,
            replicas,
        }
    }

    /// The nodes holding the catalog (buckets, tenants, keys), owner first.
    pub fn catalog(&self) -> &[NodeId] {
        &self.catalog
    }

    /// The map's version (grows on every change).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Number of partitions.
    pub fn partition_count(&self) -> u32 {
        u32::try_from(self.replicas.len()).unwrap_or(u32::MAX)
    }

    /// The node that serves `p` (None for a partition out of range).
    pub fn owner(&self, p: PartitionId) -> Option<&NodeId> {
        self.replicas(p).first()
    }

    /// Every node holding `p`, owner first.
    pub fn replicas(&self, p: PartitionId) -> &[NodeId] {
        usize::try_from(p.0)
            .ok()
            .and_then(|i| self.replicas.get(i))
            .map_or(&[], Vec::as_slice)
    }

    /// Partitions whose owner is `node`, in order.
    pub fn owned_by(&self, node: &NodeId) -> Vec<PartitionId> {
        self.partitions()
            .filter(|p| self.owner(*p) == Some(node))
            .collect()
    }

    /// Partitions of which `node` holds a replica, in order.
    pub fn hosted_by(&self, node: &NodeId) -> Vec<PartitionId> {
        self.partitions()
            .filter(|p| self.replicas(*p).contains(node))
            .collect()
    }

    /// Every partition id.
    pub fn partitions(&self) -> impl Iterator<Item = PartitionId> + '_ {
        (0..self.partition_count()).map(PartitionId)
    }

    /// This map one version newer, otherwise the same.
    pub fn bumped(&self) -> PartitionMap {
        PartitionMap {
            version: self.version + 1,
            ..self.clone()
        }
    }

    /// This map with partition `p` held by `replicas`, one version newer
    /// (`p` out of range: only the version changes).
    pub fn with_replicas(&self, p: PartitionId, replicas: Vec<NodeId>) -> PartitionMap {
        let mut map = self.bumped();
        if let Some(slot) = usize::try_from(p.0)
            .ok()
            .and_then(|i| map.replicas.get_mut(i))
        {
            *slot = replicas;
        }
        map
    }

    /// This map with the catalog held by `replicas`, one version newer.
    pub fn with_catalog(&self, replicas: Vec<NodeId>) -> PartitionMap {
        PartitionMap {
            catalog: replicas,
            ..self.bumped()
        }
    }

    /// The table as the cluster file writes it.
    pub(crate) fn raw_replicas(&self) -> Vec<Vec<String>> {
        self.replicas
            .iter()
            .map(|r| crate::cluster::file::names(r))
            .collect()
    }
}

/// Where the current partition map comes from.
pub trait MapSource: Send + Sync {
    /// The newest map this source has seen.
    fn current(&self) -> Arc<PartitionMap>;

    /// A store node holds map version `seen`: if that is newer than
    /// [`MapSource::current`], fetch the newer map. Returns the map after
    /// the refresh (which may still be older than `seen` when the source
    /// has not caught up yet; the caller then answers 503 and the client
    /// retries).
    fn refresh(&self, seen: u64) -> Result<Arc<PartitionMap>, ClusterFileError>;

    /// Every store node this source knows, with its address (a node
    /// added to the cluster after a client started is found here).
    fn nodes(&self) -> Vec<NodeInfo>;

    /// Look for a newer map now, whether or not a node reported one (the
    /// leader watch calls it each round, so a map changed by `laneway
    /// cluster move-partition` reaches every client within a round).
    fn poll(&self) -> Result<Arc<PartitionMap>, ClusterFileError> {
        self.refresh(u64::MAX)
    }

    /// The cluster file this source holds, as TOML, to publish as the
    /// catalog's copy ([`MAP_DOC`]); `None`: it has none to share.
    fn published(&self) -> Option<String> {
        None
    }

    /// The catalog's copy of the cluster file (`text`): taken if its map
    /// is newer than this source's. What it was to this source.
    fn offer(&self, _text: &str) -> Result<Offer, ClusterFileError> {
        Ok(Offer::Same)
    }
}

/// The name of the catalog document that holds the cluster file, with the
/// newest partition map any process has seen ([`MapSource::offer`]).
///
/// Why: the map says which nodes hold which partition and where each node
/// listens. Kept only in a file, every host of a multi-host cluster would
/// need that same file, rewritten by every `laneway cluster` membership
/// command. In the catalog's group it is replicated like the tenants and
/// buckets: each client's leader watch reads it every round and takes a
/// newer map, and publishes its own when the catalog's is older (a
/// command that just wrote its file, a hand edit, a cluster from before
/// the document). A process's file is then its starting point, and needs
/// to name only nodes through which the catalog can be reached.
pub const MAP_DOC: &str = "cluster/map";

/// What a copy of the cluster file offered to a source was to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Newer: the source's map now.
    Taken,
    /// The same map version.
    Same,
    /// Older than the source's map.
    Older,
}

/// The map as the cluster file on local disk says (every gateway and node
/// is given the same file; an operator edits it and bumps the version).
pub struct FileMapSource {
    path: PathBuf,
    current: RwLock<Arc<ClusterFile>>,
    map: RwLock<Arc<PartitionMap>>,
}

impl FileMapSource {
    /// Read the cluster file at `path`.
    pub fn open(path: &Path) -> Result<FileMapSource, ClusterFileError> {
        let file = ClusterFile::load(path)?;
        let map = Arc::new(file.map.clone());
        Ok(FileMapSource {
            path: path.to_path_buf(),
            current: RwLock::new(Arc::new(file)),
            map: RwLock::new(map),
        })
    }

    /// The whole cluster file as last read (nodes and addresses).
    pub fn file(&self) -> Arc<ClusterFile> {
        Arc::clone(&self.current.read())
    }

    /// Re-read the file; keep the new map only if it is newer and keeps
    /// the partition count.
    fn reload(&self) -> Result<(), ClusterFileError> {
        let file = ClusterFile::load(&self.path)?;
        self.take_if_newer(file).map(|_| ())
    }

    /// Hold `file` if its map is newer than the one held and has the same
    /// partition count; what it was. The secret file stays the one this
    /// source was opened with (another host's copy names its own).
    fn take_if_newer(&self, mut file: ClusterFile) -> Result<Offer, ClusterFileError> {
        // Compared and replaced under one lock: of two newer maps taken at
        // once, the newest stays.
        let mut current = self.current.write();
        let old = &current.map;
        if file.map.partition_count() != old.partition_count() {
            return Err(ClusterFileError::Invalid {
                path: self.path.clone(),
                message: format!(
                    "partitions changed from {} to {}; the partition count of a cluster is fixed",
                    old.partition_count(),
                    file.map.partition_count()
                ),
            });
        }
        let offer = match file.map.version().cmp(&old.version()) {
            std::cmp::Ordering::Greater => Offer::Taken,
            std::cmp::Ordering::Equal => return Ok(Offer::Same),
            std::cmp::Ordering::Less => return Ok(Offer::Older),
        };
        file.secret_file = current.secret_file.clone();
        *self.map.write() = Arc::new(file.map.clone());
        *current = Arc::new(file);
        Ok(offer)
    }
}

impl MapSource for FileMapSource {
    fn current(&self) -> Arc<PartitionMap> {
        Arc::clone(&self.map.read())
    }

    fn refresh(&self, seen: u64) -> Result<Arc<PartitionMap>, ClusterFileError> {
        if seen > self.current().version() {
            self.reload()?;
        }
        Ok(self.current())
    }

    fn nodes(&self) -> Vec<NodeInfo> {
        self.file().nodes.clone()
    }

    fn published(&self) -> Option<String> {
        Some(self.file().to_toml())
    }

    fn offer(&self, text: &str) -> Result<Offer, ClusterFileError> {
        self.take_if_newer(ClusterFile::parse(&self.path, text)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::init::{InitSpec, init_cluster};

    fn spec(dir: &Path, nodes: u32, partitions: u32) -> InitSpec {
        InitSpec {
            path: dir.join("cluster.toml"),
            nodes: (0..nodes)
                .map(|i| (format!("s{i}"), format!("127.0.0.1:{}", 9100 + i)))
                .collect(),
            partitions,
            replicas: 1,
        }
    }

    #[test]
    fn node_ids_are_checked() {
        for ok in ["a", "store-1", "9"] {
            assert!(NodeId::parse(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(MAX_NODE_ID_LEN + 1);
        for bad in ["", "-a", "A", "a_b", "a b", long.as_str()] {
            assert!(NodeId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lookups_follow_the_table() {
        let a = NodeId::parse("a").expect("id");
        let b = NodeId::parse("b").expect("id");
        let m = PartitionMap::new(
            2,
            vec![a.clone()],
            vec![vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]],
        );
        assert_eq!(m.catalog(), std::slice::from_ref(&a));
        assert_eq!(m.owner(PartitionId(0)), Some(&a));
        assert_eq!(m.owner(PartitionId(5)), None);
        assert_eq!(m.owned_by(&b), vec![PartitionId(1)]);
        assert_eq!(m.hosted_by(&b), vec![PartitionId(0), PartitionId(1)]);
    }

    #[test]
    fn refresh_takes_newer_maps_only_and_never_a_new_partition_count() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = spec(dir.path(), 2, 4);
        init_cluster(&spec).expect("init");
        let src = FileMapSource::open(&spec.path).expect("open");
        assert_eq!(src.current().version(), 1);

        // A newer file: taken when a node reports a newer version.
        let mut file = ClusterFile::load(&spec.path).expect("load");
        let swapped: Vec<Vec<NodeId>> = file
            .map
            .partitions()
            .map(|p| file.map.replicas(p).iter().rev().cloned().collect())
            .collect();
        file.map = PartitionMap::new(2, file.map.catalog().to_vec(), swapped);
        std::fs::write(&spec.path, file.to_toml()).expect("write");
        assert_eq!(
            src.refresh(1).expect("refresh").version(),
            1,
            "not newer: kept"
        );
        assert_eq!(src.refresh(2).expect("refresh").version(), 2);

        // An older file is never taken.
        file.map = PartitionMap::new(1, file.map.catalog().to_vec(), file.map.raw_replicas_ids());
        std::fs::write(&spec.path, file.to_toml()).expect("write");
        assert_eq!(src.refresh(5).expect("refresh").version(), 2);

        // A different partition count is refused.
        init_cluster(&InitSpec {
            partitions: 8,
            ..spec.clone()
        })
        .expect("init");
        let mut eight = ClusterFile::load(&spec.path).expect("load");
        eight.map = PartitionMap::new(
            9,
            eight.map.catalog().to_vec(),
            eight.map.raw_replicas_ids(),
        );
        std::fs::write(&spec.path, eight.to_toml()).expect("write");
        let err = src.refresh(9).expect_err("count change");
        assert!(err.to_string().contains("fixed"), "{err}");
        assert_eq!(src.current().version(), 2);
    }

    #[test]
    fn the_catalog_s_copy_is_taken_when_newer_with_its_nodes_but_not_its_secret_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = spec(dir.path(), 2, 4);
        init_cluster(&spec).expect("init");
        let src = FileMapSource::open(&spec.path).expect("open");
        let mine = src.file();
        // Another host's copy: a node added (map one newer), its own
        // secret file's name.
        let mut theirs = mine
            .with_node(NodeInfo {
                id: NodeId::parse("s9").expect("id"),
                rpc: "127.0.0.1:9199".into(),
            })
            .expect("add");
        theirs.secret_file = dir.path().join("theirs.secret");
        let text = theirs.to_toml();
        assert_eq!(src.offer(&text).expect("offer"), Offer::Taken);
        assert_eq!(src.current().version(), 2);
        assert!(src.nodes().iter().any(|n| n.id.as_str() == "s9"));
        assert_eq!(src.file().secret_file, mine.secret_file);
        assert_eq!(src.offer(&text).expect("offer"), Offer::Same);
        // The file here is older: polled, it does not take the map back,
        // and published, the newer map goes out.
        assert_eq!(src.poll().expect("poll").version(), 2);
        assert_eq!(src.offer(&mine.to_toml()).expect("offer"), Offer::Older);
        let published = src.published().expect("published");
        let back = ClusterFile::parse(&spec.path, &published).expect("parse");
        assert_eq!(back.map.version(), 2);
        assert_eq!(back.nodes.len(), 3);
        // Not a cluster file, or another partition count: refused, kept.
        assert!(src.offer("not toml [").is_err());
        let mut eight = ClusterFile::parse(
            &spec.path,
            &std::fs::read_to_string(&spec.path).expect("read"),
        )
        .expect("parse");
        eight.map = PartitionMap::new(
            9,
            eight.map.catalog().to_vec(),
            (0..8)
                .map(|_| eight.map.replicas(PartitionId(0)).to_vec())
                .collect(),
        );
        let err = src.offer(&eight.to_toml()).expect_err("count change");
        assert!(err.to_string().contains("fixed"), "{err}");
        assert_eq!(src.current().version(), 2);
    }

    impl PartitionMap {
        fn raw_replicas_ids(&self) -> Vec<Vec<NodeId>> {
            self.replicas.clone()
        }
    }
}
