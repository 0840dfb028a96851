//! The sending side: one [`RpcClient`] per peer node, shared by every
//! group on this node ([`Peers`]), and each group's
//! `RaftNetworkFactory` over it ([`RpcNetwork`]).
//!
//! Sharing the client is what makes many groups cheap on the wire: the
//! client holds one HTTP/2 connection per peer, so the heartbeats and
//! appends of every group two nodes share are streams of one connection
//! (one TCP connection, one TLS-free handshake, one keep-alive), not a
//! connection per group.
//!
//! Every call's deadline is openraft's `hard_ttl` for it (the heartbeat
//! interval for appends, the minimum election timeout for votes, the
//! install timeout for snapshot chunks), so nothing waits on a peer longer
//! than openraft would. Failures become the `RPCError` openraft reacts to:
//! a peer that is down, or up without the group (not yet started, already
//! moved), is `Unreachable` (the replication stream backs off); a timeout
//! or an undecodable answer is a `Network` error (retried at the next
//! tick); the target Raft's own refusal is a `RemoteError`.
//!
//! Appends of all groups (heartbeats, commit updates, and rounds of
//! entries up to a size) go to a peer through its [`Batcher`], which
//! sends what is queued as one call ([`super::batch`]); votes, snapshot
//! chunks and large appends go alone.

use super::batch::{Batcher, Batching, Round};
use super::wire::{BatchAnswer, RaftAnswer, RaftMsg, RaftReply, RaftRequest};
use super::{GroupId, RAFT_METHOD};
use crate::types::{NodeId, TypeConfig};
use bytes::Bytes;
use laneway_store::rpc::wire::MAX_FRAME;
use laneway_store::rpc::{CallOptions, RpcClient, RpcError, Signer, WireCode};
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RaftNetwork, RaftNetworkFactory};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The clients of this node's peers, by node id, shared by all its groups.
pub struct Peers {
    signer: Signer,
    /// Each peer's address, client and batcher. The lock is held only to
    /// look up or replace an entry, never across a call.
    clients: Mutex<HashMap<NodeId, Peer>>,
    /// The heartbeat round every batcher of this node holds appends for.
    round: Arc<Round>,
    /// What the batchers gather.
    batching: Batching,
}

/// What this node keeps of one peer.
struct Peer {
    addr: String,
    client: Arc<RpcClient>,
    batcher: Option<Arc<Batcher>>,
}

impl Peers {
    /// No clients yet; they are made on first use, signing with `signer`
    /// (the cluster secret).
    pub fn new(signer: Signer) -> Peers {
        Peers::with_batching(signer, Batching::default())
    }

    /// As [`Peers::new`], with batchers gathering as `batching` says.
    pub fn with_batching(signer: Signer, batching: Batching) -> Peers {
        Peers {
            signer,
            clients: Mutex::new(HashMap::new()),
            round: Arc::new(Round::default()),
            batching,
        }
    }

    /// The client of node `id` at `addr`: the existing one, or a new one
    /// when there is none or the node's address changed (a node restarted
    /// elsewhere, as membership says).
    pub fn client(&self, id: NodeId, addr: &str) -> Arc<RpcClient> {
        self.peer(id, addr).0
    }

    /// One small call of `method` to node `id` at `addr`, answered within
    /// `within` (its whole deadline, and its stall limit): the reply's
    /// payload. The asks of [`super::terms`] and [`super::prevote`].
    pub async fn ask(
        &self,
        id: NodeId,
        addr: &str,
        method: &str,
        args: Bytes,
        within: Duration,
    ) -> Result<Bytes, RpcError> {
        let opts = CallOptions {
            deadline: within,
            stall: within,
        };
        let client = self.client(id, addr);
        client
            .call(method, args, None, &opts)
            .await
            .map(|(payload, _)| payload)
    }

    /// The client and batcher of node `id` at `addr` (as [`Peers::client`]).
    fn peer(&self, id: NodeId, addr: &str) -> (Arc<RpcClient>, Option<Arc<Batcher>>) {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        match clients.get(&id) {
            Some(peer) if peer.addr == addr => (Arc::clone(&peer.client), peer.batcher.clone()),
            _ => {
                let client = Arc::new(RpcClient::new(addr, self.signer.clone()));
                let round = Arc::clone(&self.round);
                let batcher =
                    Batcher::start(Arc::clone(&client), round, self.batching).map(Arc::new);
                let peer = Peer {
                    addr: addr.to_string(),
                    client: Arc::clone(&client),
                    batcher: batcher.clone(),
                };
                clients.insert(id, peer);
                (client, batcher)
            }
        }
    }

    /// Open a heartbeat round: appends reaching a batcher in
    /// the next `window` leave together when it ends ([`super::batch`]).
    pub fn open_round(&self, window: std::time::Duration) {
        self.round.open(window);
    }

    /// Drop the client of node `id` (a node that left the cluster).
    pub fn forget(&self, id: NodeId) {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients.remove(&id);
    }

    /// How many peers have a client.
    pub fn len(&self) -> usize {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no peer has a client yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One group's network: its messages to a target go out as
/// [`RAFT_METHOD`] calls on the shared client of that target.
#[derive(Clone)]
pub struct RpcNetwork {
    group: GroupId,
    peers: Arc<Peers>,
}

impl RpcNetwork {
    /// The network of `group`, over `peers`.
    pub fn new(group: GroupId, peers: Arc<Peers>) -> RpcNetwork {
        RpcNetwork { group, peers }
    }
}

impl RaftNetworkFactory<TypeConfig> for RpcNetwork {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Connection {
        let (client, batcher) = self.peers.peer(target, &node.addr);
        Connection {
            group: self.group,
            target,
            client,
            batcher,
        }
    }
}

/// One group's link to one target node.
pub struct Connection {
    group: GroupId,
    target: NodeId,
    client: Arc<RpcClient>,
    /// Where its appends go (`None` outside a runtime).
    batcher: Option<Arc<Batcher>>,
}

type Rpc<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

/// Why a message did not get the target Raft's answer.
#[derive(Clone, Debug)]
pub(super) enum Failure {
    /// Back off: the node is down or does not host the group.
    Unreachable(String),
    /// Retry at the next tick.
    Network(String),
    /// The request does not fit in one frame.
    TooLarge,
}

impl Failure {
    fn into_rpc<E: std::error::Error>(self) -> RPCError<NodeId, BasicNode, E> {
        match self {
            Failure::Unreachable(why) => {
                RPCError::Unreachable(Unreachable::new(&std::io::Error::other(why)))
            }
            Failure::Network(why) => {
                RPCError::Network(NetworkError::new(&std::io::Error::other(why)))
            }
            Failure::TooLarge => RPCError::Network(NetworkError::new(&std::io::Error::other(
                "raft message larger than the rpc frame limit",
            ))),
        }
    }
}

/// Room left in a frame for what wraps the request (none today; a margin
/// so a change of the wrapping does not turn a fitting batch into a
/// refused one).
pub(super) const FRAME_ROOM: usize = MAX_FRAME - 4096;

impl Connection {
    /// Send `msg`, within `option`'s hard deadline; the target's answer.
    async fn send(&self, msg: RaftMsg, option: &RPCOption) -> Result<RaftAnswer, Failure> {
        let args = RaftRequest::new(self.group, msg)
            .encode()
            .map_err(|e| Failure::Network(format!("encode: {e}")))?;
        if args.len() > FRAME_ROOM {
            return Err(Failure::TooLarge);
        }
        let deadline = option.hard_ttl();
        let opts = CallOptions {
            deadline,
            stall: deadline,
        };
        // Raft answers carry no data stream; the rest of the body is empty
        // and dropped with `_rest`.
        let (payload, _rest) = self
            .client
            .call(RAFT_METHOD, Bytes::from(args), None, &opts)
            .await
            .map_err(failure_of)?;
        let reply = RaftReply::decode(&payload).map_err(|e| {
            Failure::Network(format!(
                "node {} answered group {}: {e}",
                self.target, self.group
            ))
        })?;
        Ok(reply.answer)
    }

    /// Send `rpc` through the peer's batcher; `Err(rpc)` when it must go
    /// alone.
    async fn batched(
        &self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: &RPCOption,
    ) -> Result<Rpc<AppendEntriesResponse<NodeId>>, AppendEntriesRequest<TypeConfig>> {
        let Some(batcher) = &self.batcher else {
            return Err(rpc);
        };
        let outcome = batcher.offer(self.group, rpc, option.hard_ttl()).await?;
        Ok(match outcome {
            Ok(BatchAnswer::Append(answer)) => answer.map_err(|e| self.remote(e)),
            Ok(BatchAnswer::Late) => Err(Failure::Network(format!(
                "raft group {} on node {} did not answer within its batch's wait",
                self.group, self.target
            ))
            .into_rpc()),
            Ok(BatchAnswer::NotHosted) => Err(Failure::Unreachable(format!(
                "raft group {} is not hosted on node {}",
                self.group, self.target
            ))
            .into_rpc()),
            Err(f) => Err(f.into_rpc()),
        })
    }

    fn wrong_kind(&self) -> Failure {
        Failure::Network(format!(
            "node {} answered group {} with a reply of another kind",
            self.target, self.group
        ))
    }

    fn remote<E: std::error::Error>(&self, err: E) -> RPCError<NodeId, BasicNode, E> {
        RPCError::RemoteError(RemoteError::new(self.target, err))
    }
}

/// What openraft should make of a failed call.
pub(super) fn failure_of(e: RpcError) -> Failure {
    match &e {
        RpcError::Unavailable { .. } => Failure::Unreachable(e.to_string()),
        // "Not hosted here" and a node shutting down are both answers
        // to come back later to.
        RpcError::Remote(w)
            if matches!(
                w.code,
                WireCode::Unavailable | WireCode::ShuttingDown | WireCode::WrongNode { .. }
            ) =>
        {
            Failure::Unreachable(e.to_string())
        }
        RpcError::Timeout { .. }
        | RpcError::Remote(_)
        | RpcError::Protocol { .. }
        | RpcError::BodyFailed { .. } => Failure::Network(e.to_string()),
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        let rpc = match self.batched(rpc, &option).await {
            Ok(answer) => return answer,
            Err(alone) => alone,
        };
        let entries = rpc.entries.len();
        match self.send(RaftMsg::Append(rpc), &option).await {
            Ok(RaftAnswer::Append(answer)) => answer.map_err(|e| self.remote(e)),
            Ok(_) => Err(self.wrong_kind().into_rpc()),
            // Openraft resends fewer entries at once when told so; a
            // single entry too large for a frame cannot be sent at all
            // (the proposer must keep entries under the frame limit).
            Err(Failure::TooLarge) if entries > 1 => {
                let hint = u64::try_from(entries / 2).unwrap_or(1).max(1);
                Err(RPCError::PayloadTooLarge(
                    PayloadTooLarge::new_entries_hint(hint),
                ))
            }
            Err(f) => Err(f.into_rpc()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        match self.send(RaftMsg::Snapshot(rpc), &option).await {
            Ok(RaftAnswer::Snapshot(answer)) => answer.map_err(|e| self.remote(e)),
            Ok(_) => Err(self.wrong_kind().into_rpc()),
            Err(f) => Err(f.into_rpc()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>> {
        match self.send(RaftMsg::Vote(rpc), &option).await {
            Ok(RaftAnswer::Vote(answer)) => answer.map_err(|e| self.remote(e)),
            Ok(_) => Err(self.wrong_kind().into_rpc()),
            Err(f) => Err(f.into_rpc()),
        }
    }
}
