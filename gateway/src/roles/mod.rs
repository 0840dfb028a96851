//! The cluster roles of the binary: `laneway store` ([`node`]), a store
//! node serving its partitions over the cluster RPC; and, for
//! `laneway gateway`, the registry kept in the catalog instead of a local
//! file ([`registry`]). The gateway role itself is `serve` with a remote
//! store client ([`crate::server::serve`]).

pub mod node;
pub mod registry;
