//! The cluster file: a TOML document naming the store nodes, the partition
//! count, the replication factor, the cluster secret's file and the
//! partition map. It is read whole, checked once ([`ClusterFile::parse`]),
//! and every mistake is reported with what was expected, never by a panic
//! or a silently odd cluster.
//!
//! ```toml
//! format = 1
//! partitions = 16
//! replicas = 1
//! secret_file = "cluster.secret"   # relative to this file
//!
//! [[nodes]]
//! id = "store-1"
//! rpc = "127.0.0.1:9100"
//!
//! [map]
//! version = 1
//! catalog = ["store-1"]             # the bucket and tenant catalog's replicas
//! partitions = [["store-1"], ...]  # one entry per partition, its replicas
//! ```
//!
//! The secret lives in a file of its own (mode 0600) so the cluster file can
//! be shown, diffed and shipped to every gateway without giving away the key
//! that authenticates store calls.

use crate::cluster::map::{NodeId, NodeInfo, PartitionMap};
use crate::layout::MAX_PARTITIONS;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Cluster file format written and read by this version.
pub const FORMAT: u32 = 1;
/// Replication factors a cluster may have (3 once replication lands).
pub const REPLICA_CHOICES: [u32; 2] = [1, 3];
/// Shortest cluster secret accepted, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// Why a cluster file could not be used.
#[derive(Debug, Error)]
pub enum ClusterFileError {
    /// The file (or its secret file) could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not valid TOML, or a field of the wrong type or name.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// Valid TOML that does not describe a usable cluster.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and what is expected.
        message: String,
    },
    /// The file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The document as written (field names are the file's keys).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    pub format: u32,
    pub partitions: u32,
    pub replicas: u32,
    pub secret_file: String,
    pub nodes: Vec<RawNode>,
    pub map: RawMap,
}

/// One `[[nodes]]` table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNode {
    pub id: String,
    pub rpc: String,
}

/// The `[map]` table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMap {
    pub version: u64,
    pub catalog: Vec<String>,
    pub partitions: Vec<Vec<String>>,
}

/// A checked cluster file.
#[derive(Debug, Clone)]
pub struct ClusterFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Replicas per partition.
    pub replicas: u32,
    /// The secret's file, resolved against the cluster file's folder.
    pub secret_file: PathBuf,
    /// Every store node with its RPC address.
    pub nodes: Vec<NodeInfo>,
    /// Partition -> replicas, versioned.
    pub map: PartitionMap,
}

impl ClusterFile {
    /// Read and check the cluster file at `path`.
    pub fn load(path: &Path) -> Result<ClusterFile, ClusterFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClusterFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Check the TOML `text` of the file at `path` (used for error
    /// messages and to resolve the secret file).
    pub fn parse(path: &Path, text: &str) -> Result<ClusterFile, ClusterFileError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ClusterFileError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let invalid = |message: String| ClusterFileError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        check_header(&raw).map_err(invalid)?;
        let nodes = check_nodes(&raw.nodes).map_err(invalid)?;
        let map = check_map(&raw, &nodes).map_err(invalid)?;
        let folder = path.parent().unwrap_or(Path::new("."));
        Ok(ClusterFile {
            path: path.to_path_buf(),
            replicas: raw.replicas,
            secret_file: folder.join(&raw.secret_file),
            nodes,
            map,
        })
    }

    /// The cluster secret (the key of every store call's HMAC).
    pub fn read_secret(&self) -> Result<Vec<u8>, ClusterFileError> {
        let text = std::fs::read_to_string(&self.secret_file).map_err(|source| {
            ClusterFileError::Read {
                path: self.secret_file.clone(),
                source,
            }
        })?;
        let secret = text.trim().as_bytes().to_vec();
        if secret.len() < MIN_SECRET_LEN {
            return Err(ClusterFileError::Invalid {
                path: self.secret_file.clone(),
                message: format!(
                    "the cluster secret must be at least {MIN_SECRET_LEN} characters (found {})",
                    secret.len()
                ),
            });
        }
        Ok(secret)
    }

    /// The node called `id`, if the file names it.
    pub fn node(&self, id: &str) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id.as_str() == id)
    }

    /// The file as TOML again (for `cluster init` and map updates).
    pub fn to_toml(&self) -> String {
        let folder = self.path.parent().unwrap_or(Path::new("."));
        let secret = self
            .secret_file
            .strip_prefix(folder)
            .unwrap_or(&self.secret_file);
        let raw = RawFile {
            format: FORMAT,
            partitions: self.map.partition_count(),
            replicas: self.replicas,
            secret_file: secret.to_string_lossy().into_owned(),
            nodes: self
                .nodes
                .iter()
                .map(|n| RawNode {
                    id: n.id.as_str().to_string(),
                    rpc: n.rpc.clone(),
                })
                .collect(),
            map: RawMap {
                version: self.map.version(),
                catalog: names(self.map.catalog()),
                partitions: self.map.raw_replicas(),
            },
        };
        let body = toml::to_string(&raw).unwrap_or_default();
        format!(
            "# laneway cluster file (docs/architecture.md, \"Cluster\").\n\
             # map.partitions[i] lists partition i's store nodes; bump map.version\n\
             # on every change so gateways holding the old map refresh.\n{body}"
        )
    }
}

fn check_header(raw: &RawFile) -> Result<(), String> {
    if raw.format != FORMAT {
        return Err(format!(
            "format = {} is not known to this laneway (it reads format {FORMAT})",
            raw.format
        ));
    }
    if !raw.partitions.is_power_of_two() || raw.partitions > MAX_PARTITIONS {
        return Err(format!(
            "partitions = {} must be a power of two from 1 to {MAX_PARTITIONS}",
            raw.partitions
        ));
    }
    if !REPLICA_CHOICES.contains(&raw.replicas) {
        return Err(format!(
            "replicas = {} must be one of {REPLICA_CHOICES:?}",
            raw.replicas
        ));
    }
    if raw.secret_file.trim().is_empty() {
        return Err("secret_file must name the file that holds the cluster secret".into());
    }
    Ok(())
}

fn check_nodes(raw: &[RawNode]) -> Result<Vec<NodeInfo>, String> {
    if raw.is_empty() {
        return Err("the file names no store nodes: add a [[nodes]] table per node".into());
    }
    let mut ids = HashSet::new();
    let mut addrs = HashSet::new();
    let mut nodes = Vec::with_capacity(raw.len());
    for n in raw {
        let id = NodeId::parse(&n.id).map_err(|e| format!("node id {:?}: {e}", n.id))?;
        check_addr(&n.rpc).map_err(|e| format!("node {:?}: rpc = {:?}: {e}", n.id, n.rpc))?;
        if !ids.insert(id.clone()) {
            return Err(format!("node id {:?} appears twice", n.id));
        }
        if !addrs.insert(n.rpc.to_ascii_lowercase()) {
            return Err(format!("rpc address {:?} is given to two nodes", n.rpc));
        }
        nodes.push(NodeInfo {
            id,
            rpc: n.rpc.clone(),
        });
    }
    Ok(nodes)
}

/// A `host:port` (host a name, an IPv4 address or a bracketed IPv6 one).
fn check_addr(addr: &str) -> Result<(), String> {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err("expected host:port".into());
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("port {port:?} is not a number from 1 to 65535"))?;
    if port == 0 {
        return Err("port 0 cannot be reached by other nodes; give a fixed port".into());
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if bare.is_empty() {
        return Err("the host is empty".into());
    }
    if host.starts_with('[') {
        bare.parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("{bare:?} is not an IPv6 address"))?;
    } else if !bare
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
    {
        return Err(format!("host {bare:?} is not a host name or address"));
    }
    Ok(())
}

fn check_map(raw: &RawFile, nodes: &[NodeInfo]) -> Result<PartitionMap, String> {
    if raw.map.version == 0 {
        return Err("map.version must be at least 1".into());
    }
    let count = usize::try_from(raw.partitions).unwrap_or(usize::MAX);
    if raw.map.partitions.len() != count {
        return Err(format!(
            "map.partitions has {} entries; partitions = {} needs one per partition",
            raw.map.partitions.len(),
            raw.partitions
        ));
    }
    let replicas = usize::try_from(raw.replicas).unwrap_or(usize::MAX);
    if replicas > nodes.len() {
        return Err(format!(
            "replicas = {} needs at least that many nodes (the file names {})",
            raw.replicas,
            nodes.len()
        ));
    }
    let catalog = check_owners("map.catalog", &raw.map.catalog, replicas, nodes)?;
    let mut table = Vec::with_capacity(count);
    for (p, owners) in raw.map.partitions.iter().enumerate() {
        table.push(check_owners(
            &format!("map.partitions[{p}]"),
            owners,
            replicas,
            nodes,
        )?);
    }
    Ok(PartitionMap::new(raw.map.version, catalog, table))
}

/// Node ids as the file writes them.
pub(crate) fn names(ids: &[NodeId]) -> Vec<String> {
    ids.iter().map(|n| n.as_str().to_string()).collect()
}

fn check_owners(
    what: &str,
    owners: &[String],
    replicas: usize,
    nodes: &[NodeInfo],
) -> Result<Vec<NodeId>, String> {
    if owners.len() != replicas {
        return Err(format!(
            "{what} lists {} nodes; replicas = {replicas}",
            owners.len()
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(owners.len());
    for o in owners {
        let Some(node) = nodes.iter().find(|n| n.id.as_str() == o) else {
            return Err(format!(
                "{what} names node {o:?}, which no [[nodes]] table defines"
            ));
        };
        if !seen.insert(o.as_str()) {
            return Err(format!(
                "{what} names node {o:?} twice (replicas must be on different nodes)"
            ));
        }
        out.push(node.id.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
format = 1
partitions = 4
replicas = 1
secret_file = "s.secret"

[[nodes]]
id = "a"
rpc = "127.0.0.1:9100"

[[nodes]]
id = "b"
rpc = "store-b:9100"

[map]
version = 3
catalog = ["a"]
partitions = [["a"], ["b"], ["a"], ["b"]]
"#;

    fn parse(text: &str) -> Result<ClusterFile, ClusterFileError> {
        ClusterFile::parse(Path::new("/etc/laneway/cluster.toml"), text)
    }

    fn message(text: &str) -> String {
        parse(text).expect_err("should be refused").to_string()
    }

    #[test]
    fn a_good_file_parses_into_its_map() {
        let f = parse(GOOD).expect("good file");
        assert_eq!(f.map.version(), 3);
        assert_eq!(f.map.partition_count(), 4);
        assert_eq!(
            f.map.owner(crate::PartitionId(1)).map(NodeId::as_str),
            Some("b")
        );
        assert_eq!(f.secret_file, Path::new("/etc/laneway/s.secret"));
        assert_eq!(f.node("b").map(|n| n.rpc.as_str()), Some("store-b:9100"));
    }

    #[test]
    fn the_file_round_trips_through_to_toml() {
        let f = parse(GOOD).expect("good file");
        let again = parse(&f.to_toml()).expect("written file parses");
        assert_eq!(again.map, f.map);
        assert_eq!(again.nodes, f.nodes);
        assert_eq!(again.secret_file, f.secret_file);
    }

    #[test]
    fn mistakes_are_named() {
        let cases: &[(&str, &str, &str)] = &[
            ("partitions = 4", "partitions = 3", "power of two"),
            ("replicas = 1", "replicas = 2", "must be one of"),
            ("format = 1", "format = 9", "format = 9"),
            (r#"rpc = "store-b:9100""#, r#"rpc = "store-b""#, "host:port"),
            (r#"rpc = "store-b:9100""#, r#"rpc = "store-b:0""#, "port 0"),
            (
                r#"rpc = "store-b:9100""#,
                r#"rpc = "127.0.0.1:9100""#,
                "two nodes",
            ),
            (r#"id = "b""#, r#"id = "a""#, "appears twice"),
            (r#"id = "b""#, r#"id = "B C""#, "node id"),
            (r#"["b"], ["a"], ["b"]]"#, r#"["b"], ["a"]]"#, "3 entries"),
            (r#"[["a"], ["b"]"#, r#"[["a"], ["c"]"#, "no [[nodes]] table"),
            (
                r#"catalog = ["a"]"#,
                r#"catalog = ["z"]"#,
                "map.catalog names node",
            ),
            (r#"catalog = ["a"]"#, "", "missing field `catalog`"),
            ("version = 3", "version = 0", "at least 1"),
            ("version = 3", "version = 3\nextra = 1", "unknown field"),
            ("partitions = 4", "partitions = \"four\"", "invalid type"),
        ];
        for (from, to, expect) in cases {
            assert!(GOOD.contains(from), "case {from:?} does not apply");
            let text = GOOD.replacen(from, to, 1);
            let msg = message(&text);
            assert!(msg.contains(expect), "{to:?}: {msg:?} lacks {expect:?}");
            assert!(msg.contains("cluster.toml"), "{msg:?} names no file");
        }
    }

    #[test]
    fn three_replicas_need_three_distinct_nodes() {
        let two_nodes = GOOD.replace("replicas = 1", "replicas = 3");
        assert!(message(&two_nodes).contains("needs at least that many nodes"));
        let three_nodes = two_nodes.replace(
            "[map]",
            "[[nodes]]\nid = \"c\"\nrpc = \"store-c:9100\"\n\n[map]",
        );
        assert!(message(&three_nodes).contains("lists 1 nodes; replicas = 3"));
        assert!(message(&three_nodes).contains("map.catalog lists 1 nodes"));
        let three_nodes = three_nodes.replace(r#"catalog = ["a"]"#, r#"catalog = ["a","b","c"]"#);
        let doubled = three_nodes.replace(
            r#"[["a"], ["b"], ["a"], ["b"]]"#,
            r#"[["a","b","c"], ["b","c","a"], ["c","a","c"], ["a","b","c"]]"#,
        );
        assert!(message(&doubled).contains("map.partitions[2] names node \"c\" twice"));
        let good = doubled.replace(r#"["c","a","c"]"#, r#"["c","a","b"]"#);
        let f = parse(&good).expect("three distinct replicas");
        assert_eq!(f.map.replicas(crate::PartitionId(2)).len(), 3);
    }

    #[test]
    fn addresses_accept_names_v4_and_bracketed_v6() {
        for ok in ["h:1", "10.0.0.1:9100", "[::1]:9100", "store_1.local:65535"] {
            assert!(check_addr(ok).is_ok(), "{ok}");
        }
        for bad in ["", ":9100", "h:", "h:70000", "[zz]:1", "a b:1", "h"] {
            assert!(check_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_short_secret_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, GOOD).expect("write");
        let f = ClusterFile::load(&path).expect("load");
        std::fs::write(dir.path().join("s.secret"), "short\n").expect("write");
        assert!(f.read_secret().is_err());
        std::fs::write(dir.path().join("s.secret"), format!("{}\n", "k".repeat(40)))
            .expect("write");
        assert_eq!(f.read_secret().expect("secret").len(), 40);
    }
}
