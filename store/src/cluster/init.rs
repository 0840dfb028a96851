//! `laneway cluster init`: write a new cluster file and its secret.
//!
//! Placement spreads partitions round-robin: partition `p`'s replicas are
//! nodes `p, p+1, ...` (mod the node count), so every node owns an equal
//! share (within one partition) and, with three replicas, holds three
//! shares on three different nodes. The catalog goes on the first nodes.

use crate::cluster::file::{ClusterFile, ClusterFileError, FORMAT, RawFile, RawMap, RawNode};
use ring::rand::{SecureRandom, SystemRandom};
use std::path::{Path, PathBuf};

/// Name of the secret file beside a cluster file that `init` writes.
pub const SECRET_FILE: &str = "cluster.secret";

/// What to put in a new cluster file.
#[derive(Clone, Debug)]
pub struct InitSpec {
    /// The cluster file to write (the secret goes beside it).
    pub path: PathBuf,
    /// (node id, rpc host:port) of every store node.
    pub nodes: Vec<(String, String)>,
    /// Partition count (a power of two).
    pub partitions: u32,
    /// Replicas per partition.
    pub replicas: u32,
}

/// Write the cluster file of `spec` (replacing one at that path), and a
/// new random secret beside it unless one is there already (so
/// re-running init keeps nodes and gateways that hold the secret working).
/// The written file is checked by the same parser that reads it.
pub fn init_cluster(spec: &InitSpec) -> Result<ClusterFile, ClusterFileError> {
    let raw = RawFile {
        format: FORMAT,
        partitions: spec.partitions,
        replicas: spec.replicas,
        secret_file: SECRET_FILE.into(),
        nodes: spec
            .nodes
            .iter()
            .map(|(id, rpc)| RawNode {
                id: id.clone(),
                rpc: rpc.clone(),
            })
            .collect(),
        map: RawMap {
            version: 1,
            catalog: spec
                .nodes
                .iter()
                .take(usize::try_from(spec.replicas).unwrap_or(1))
                .map(|(id, _)| id.clone())
                .collect(),
            partitions: round_robin(spec),
        },
    };
    let text = toml::to_string(&raw).map_err(|e| ClusterFileError::Invalid {
        path: spec.path.clone(),
        message: e.to_string(),
    })?;
    // Check before writing anything: a bad spec leaves no file behind.
    let file = ClusterFile::parse(&spec.path, &text)?;
    if !file.secret_file.exists() {
        write_secret(&file.secret_file)?;
    }
    write_atomically(&spec.path, file.to_toml().as_bytes(), 0o644)?;
    Ok(file)
}

fn round_robin(spec: &InitSpec) -> Vec<Vec<String>> {
    let n = spec.nodes.len().max(1);
    let replicas = usize::try_from(spec.replicas).unwrap_or(1);
    (0..usize::try_from(spec.partitions).unwrap_or(0))
        .map(|p| {
            (0..replicas.min(spec.nodes.len()))
                .map(|r| spec.nodes[(p + r) % n].0.clone())
                .collect()
        })
        .collect()
}

fn write_secret(path: &Path) -> Result<(), ClusterFileError> {
    let mut raw = [0u8; 32];
    SystemRandom::new()
        .fill(&mut raw)
        .map_err(|_| ClusterFileError::Write {
            path: path.to_path_buf(),
            source: std::io::Error::other("the system random generator failed"),
        })?;
    let text = format!("{}\n", hex::encode(raw));
    write_atomically(path, text.as_bytes(), 0o600)
}

/// [`crate::fsutil::write_atomically`], its error naming the file.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ClusterFileError> {
    crate::fsutil::write_atomically(path, bytes, mode).map_err(|source| ClusterFileError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::map::NodeId;
    use std::os::unix::fs::PermissionsExt;

    fn nodes(n: u32) -> Vec<(String, String)> {
        (0..n)
            .map(|i| (format!("s{i}"), format!("127.0.0.1:{}", 9100 + i)))
            .collect()
    }

    #[test]
    fn init_spreads_partitions_evenly_and_keeps_the_secret() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = InitSpec {
            path: dir.path().join("c").join("cluster.toml"),
            nodes: nodes(3),
            partitions: 16,
            replicas: 3,
        };
        let file = init_cluster(&spec).expect("init");
        for i in 0..3 {
            let id = NodeId::parse(&format!("s{i}")).expect("id");
            let owned = file.map.owned_by(&id).len();
            assert!((5..=6).contains(&owned), "s{i} owns {owned}");
            assert_eq!(file.map.hosted_by(&id).len(), 16);
        }
        let secret = file.read_secret().expect("secret");
        let mode = std::fs::metadata(&file.secret_file)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        let again = init_cluster(&InitSpec {
            replicas: 1,
            ..spec.clone()
        })
        .expect("init again");
        assert_eq!(again.read_secret().expect("secret"), secret, "secret kept");
        assert_eq!(ClusterFile::load(&spec.path).expect("load").replicas, 1);
    }

    #[test]
    fn a_bad_spec_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = InitSpec {
            path: dir.path().join("cluster.toml"),
            nodes: nodes(2),
            partitions: 16,
            replicas: 3,
        };
        assert!(init_cluster(&spec).is_err());
        assert!(!spec.path.exists());
        assert!(!dir.path().join(SECRET_FILE).exists());
    }
}
