//! The cluster's shape: which store nodes exist, where they listen, and which
//! node hosts each partition (the partition map).
//!
//! A cluster file (TOML, [`file`]) is what an operator writes, or
//! `laneway cluster init` generates ([`init`]). It is parsed and validated
//! once, into a [`map::PartitionMap`] whose `version` only ever grows: a
//! store node that is asked for a partition it does not own answers with
//! its own map version, and a gateway holding an older map refreshes it
//! through a [`map::MapSource`] and retries.
//!
//! Where the map lives is hidden behind [`map::MapSource`]: the cluster
//! file ([`map::FileMapSource`]), read again by each client's leader watch
//! once a second, and with replication also the catalog's copy of it
//! ([`map::MAP_DOC`]), which the watch reads in the same round: the newer
//! map wins, so a process whose own file is older (another host's copy)
//! still routes by the newest. With replication the groups' memberships
//! are the truth and the map follows them: `laneway cluster
//! move-partition` changes a group through the engine, then writes the
//! map, to its file and to the catalog ([`placement`]).
//!
//! Each partition lists its replicas in order; with a replication factor of
//! 1 that is one node. The first replica is the partition's preferred
//! leader once replication lands; today it is the only owner.

pub mod file;
pub mod init;
pub mod map;
pub mod placement;

pub use file::{ClusterFile, ClusterFileError};
pub use init::{InitSpec, init_cluster};
pub use map::{
    FileMapSource, MAP_DOC, MapSource, NodeId, NodeInfo, Offer, PartitionMap, raft_id_of,
};
