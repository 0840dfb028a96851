//! An in-process transport for partition groups: every node's Raft handle
//! in one shared map, each RPC a direct call on the target's handle.
//!
//! For tests and for trying the engine out; the cluster's transport will be
//! the store nodes' RPC. A node taken out of the map is unreachable, which
//! is how a test stops or cuts off a node.

use crate::types::{NodeId, PartitionRaft, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RaftNetwork, RaftNetworkFactory};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The nodes a transport reaches, by id. Clones share the map.
#[derive(Clone, Default)]
pub struct Router {
    nodes: Arc<Mutex<BTreeMap<NodeId, PartitionRaft>>>,
}

impl Router {
    /// Make `raft` reachable as `id`.
    pub fn add(&self, id: NodeId, raft: PartitionRaft) {
        self.map().insert(id, raft);
    }

    /// Make `id` unreachable, returning its handle.
    pub fn remove(&self, id: NodeId) -> Option<PartitionRaft> {
        self.map().remove(&id)
    }

    /// The handle of `id`, when reachable.
    pub fn get(&self, id: NodeId) -> Option<PartitionRaft> {
        self.map().get(&id).cloned()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, PartitionRaft>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A connection from one node to `target`.
pub struct Connection {
    router: Router,
    target: NodeId,
}

impl Connection {
    /// The error of a call to a target that is not reachable.
    fn unreachable<E: std::error::Error>(&self) -> RPCError<NodeId, BasicNode, E> {
        let down = std::io::Error::other(format!("node {} is not reachable", self.target));
        RPCError::Unreachable(Unreachable::new(&down))
    }

    /// `err` as the target's answer.
    fn remote<E: std::error::Error>(&self, err: E) -> RPCError<NodeId, BasicNode, E> {
        RPCError::RemoteError(RemoteError::new(self.target, err))
    }
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            router: self.clone(),
            target,
        }
    }
}

type Rpc<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        let raft = self
            .router
            .get(self.target)
            .ok_or_else(|| self.unreachable())?;
        raft.append_entries(rpc).await.map_err(|e| self.remote(e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let raft = self
            .router
            .get(self.target)
            .ok_or_else(|| self.unreachable())?;
        raft.install_snapshot(rpc).await.map_err(|e| self.remote(e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>> {
        let raft = self
            .router
            .get(self.target)
            .ok_or_else(|| self.unreachable())?;
        raft.vote(rpc).await.map_err(|e| self.remote(e))
    }
}
