//! A partition's replication group as the store sees it: openraft behind
//! [`laneway_store::replication::Group`], and the opener that starts one
//! group per hosted partition ([`RaftOpener`]).
//!
//! The store's commit thread calls [`Group::settle`] and [`Group::commit`]
//! from its own (non-async) thread; they run on the node's tokio runtime
//! through its [`Handle`], each with a deadline, so a group without a
//! quorum fails the round with `Unavailable` instead of hanging it.
//!
//! Leadership and volumes: when this replica becomes leader of a term, a
//! watcher tells the partition's volumes ([`VolumeSet::begin_term`]), so
//! the bodies it receives from then on go to segments of that term's epoch.
//! [`Group::ship`] refuses a piece of a segment of another epoch (a body
//! received just before a leadership change): the client retries, and no
//! two leaders' entries ever write into one segment.
//!
//! Reads: [`Group::read_barrier`] is openraft's read-index
//! (`ensure_linearizable`): the leader confirms with a quorum that it still
//! leads, then waits until it has applied what was committed before.

use crate::machine::PartitionMachine;
use crate::types::{Mutation, NodeId, PartitionRaft, TypeConfig};
use crate::{LogStore, ReplicaError};
use futures::future::BoxFuture;
use laneway_store::error::{StoreError, StoreResult};
use laneway_store::ids::PartitionId;
use laneway_store::index::{Engine, MetaIndex, WriteBatch, open_index};
use laneway_store::replication::{Group, GroupOpener, GroupStatus, VolumeWrite, segment_epoch};
use laneway_store::volume::VolumeSet;
use openraft::error::{CheckIsLeaderError, ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, RaftNetworkFactory, ServerState};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;

/// Longest a commit, a settle or a shipped piece waits for its group.
pub const GROUP_DEADLINE: Duration = Duration::from_secs(5);

/// The openraft settings of a store partition's group.
///
/// Snapshots are off: a snapshot today holds index rows only, not the
/// volume segments they point at, so a replica that needed one would end
/// up with records whose bodies it lacks. Until snapshots carry segments,
/// logs are kept whole and a replica catches up by replaying them
/// (docs/replication.md, "Known limits").
pub fn store_group_config(name: &str) -> Result<Arc<openraft::Config>, ReplicaError> {
    let config = openraft::Config {
        cluster_name: name.to_string(),
        heartbeat_interval: 250,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        // Entries carry up to a MiB of body each; keep a batch well under
        // the RPC's 16 MiB frame.
        max_payload_entries: 8,
        snapshot_policy: openraft::SnapshotPolicy::Never,
        ..Default::default()
    };
    config
        .validate()
        .map(Arc::new)
        .map_err(|e| ReplicaError::Snapshot(format!("raft config: {e}")))
}

/// One partition's group, at this replica.
pub struct RaftGroup {
    raft: PartitionRaft,
    handle: Handle,
}

impl RaftGroup {
    /// The Raft handle (for the transport's service and tests).
    pub fn raft(&self) -> &PartitionRaft {
        &self.raft
    }

    /// The current term, if this replica leads; `NotLeader` otherwise.
    fn leading_term(&self) -> StoreResult<u64> {
        let m = self.raft.metrics().borrow().clone();
        if m.state == ServerState::Leader {
            Ok(m.current_term)
        } else {
            Err(StoreError::NotLeader(m.current_leader))
        }
    }
}

/// A write's error as the store sees it.
fn write_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> StoreError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            StoreError::NotLeader(f.leader_id)
        }
        other => StoreError::Unavailable(format!("replication group: {other}")),
    }
}

/// A read check's error as the store sees it.
fn read_error(e: RaftError<NodeId, CheckIsLeaderError<NodeId, BasicNode>>) -> StoreError {
    match e {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => {
            StoreError::NotLeader(f.leader_id)
        }
        other => StoreError::Unavailable(format!("replication group: {other}")),
    }
}

fn too_slow(what: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "replication group: {what} took longer than {} s",
        GROUP_DEADLINE.as_secs()
    ))
}

impl Group for RaftGroup {
    fn settle(&self) -> StoreResult<()> {
        let mut rx = self.raft.metrics();
        let target = {
            let m = rx.borrow();
            if m.state != ServerState::Leader {
                return Err(StoreError::NotLeader(m.current_leader));
            }
            m.last_log_index.unwrap_or(0)
        };
        let settled = |m: &openraft::RaftMetrics<NodeId, BasicNode>| {
            m.state != ServerState::Leader || m.last_applied.map_or(0, |l| l.index) >= target
        };
        self.handle.block_on(async {
            tokio::time::timeout(GROUP_DEADLINE, rx.wait_for(settled))
                .await
                .map_err(|_| too_slow("catching up with its log"))?
                .map_err(|_| StoreError::ShuttingDown)
                .map(|_| ())
        })?;
        self.leading_term().map(|_| ())
    }

    fn commit(&self, batch: WriteBatch) -> StoreResult<()> {
        let m = Mutation::of_batch(&batch);
        self.handle.block_on(async {
            match tokio::time::timeout(GROUP_DEADLINE, self.raft.client_write(m)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(write_error(e)),
                Err(_) => Err(too_slow("a commit")),
            }
        })
    }

    fn ship(&self, write: VolumeWrite) -> BoxFuture<'static, StoreResult<()>> {
        let raft = self.raft.clone();
        let term = self.leading_term();
        Box::pin(async move {
            if term? != segment_epoch(write.segment) {
                return Err(StoreError::Unavailable(
                    "the partition's leader changed while the body was received; retry".into(),
                ));
            }
            let m = Mutation::of_data(&write);
            match tokio::time::timeout(GROUP_DEADLINE, raft.client_write(m)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(write_error(e)),
                Err(_) => Err(too_slow("shipping a body")),
            }
        })
    }

    fn read_barrier(&self) -> BoxFuture<'static, StoreResult<()>> {
        let raft = self.raft.clone();
        Box::pin(async move {
            match tokio::time::timeout(GROUP_DEADLINE, raft.ensure_linearizable()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(read_error(e)),
                Err(_) => Err(too_slow("a read check")),
            }
        })
    }

    fn status(&self) -> GroupStatus {
        let m = self.raft.metrics().borrow().clone();
        GroupStatus {
            me: m.id,
            leader: m.current_leader,
            term: m.current_term,
            last_log: m.last_log_index.unwrap_or(0),
            applied: m.last_applied.map_or(0, |l| l.index),
            voters: m.membership_config.voter_ids().collect(),
            matched: m
                .replication
                .iter()
                .flatten()
                .map(|(id, l)| (*id, l.map_or(0, |l| l.index)))
                .collect(),
        }
    }

    fn shutdown(&self) {
        let raft = self.raft.clone();
        let done = self
            .handle
            .block_on(async { tokio::time::timeout(GROUP_DEADLINE, raft.shutdown()).await });
        if !matches!(done, Ok(Ok(()))) {
            tracing::warn!("a replication group did not stop within its deadline");
        }
    }
}

/// Who a partition's group is made of, as this node sees it.
#[derive(Clone, Debug)]
pub struct GroupSpec {
    /// This node's Raft id.
    pub me: NodeId,
    /// Every voter of the group (this node included), with its address.
    pub members: BTreeMap<NodeId, BasicNode>,
}

/// Starts the group of each partition a store opens: its log in
/// `<partition>/raft/log`, its state machine over the partition's own
/// index and volumes.
pub struct RaftOpener<N> {
    /// The group's members, per partition.
    pub spec: Box<dyn Fn(PartitionId) -> GroupSpec + Send + Sync>,
    /// The transport of one partition's group.
    pub network: Box<dyn Fn(PartitionId) -> N + Send + Sync>,
    /// Called with each started group (the transport's receiving side
    /// registers it here).
    pub started: Box<dyn Fn(PartitionId, PartitionRaft) + Send + Sync>,
    /// The runtime the groups run on.
    pub handle: Handle,
}

impl<N> GroupOpener for RaftOpener<N>
where
    N: RaftNetworkFactory<TypeConfig> + Send + Sync + 'static,
{
    fn open(
        &self,
        partition: PartitionId,
        index: Arc<dyn MetaIndex>,
        volumes: Arc<VolumeSet>,
        dir: &Path,
    ) -> StoreResult<Arc<dyn Group>> {
        let spec = (self.spec)(partition);
        let log: Arc<dyn MetaIndex> = Arc::from(open_index(Engine::Fjall, &dir.join("log"))?);
        let machine =
            PartitionMachine::open_with(index, Some(Arc::clone(&volumes)), &dir.join("snapshots"))
                .map_err(|e| StoreError::Engine(format!("{partition} state machine: {e}")))?;
        let config = store_group_config(&partition.to_string())
            .map_err(|e| StoreError::Engine(e.to_string()))?;
        let network = (self.network)(partition);
        let raft =
            self.handle
                .block_on(start(spec, config, network, LogStore::new(log), machine))?;
        (self.started)(partition, raft.clone());
        watch_leadership(&self.handle, raft.clone(), volumes);
        Ok(Arc::new(RaftGroup {
            raft,
            handle: self.handle.clone(),
        }))
    }
}

/// Create the Raft of a group and, when its storage is new, initialize it
/// with its members. Every member does so with the same membership, which
/// openraft documents as safe (the first election settles it); a member
/// that already has a log or a vote gets `NotAllowed`, which is fine.
///
/// Known limit: a member whose disk was wiped starts with no vote and an
/// empty log and initializes again; it cannot win an election against the
/// others' longer logs, but it may vote a second time in a term it voted
/// in before the wipe. Rejoining as a new member (learner, then voter) is
/// the safe way and comes with the membership commands.
async fn start<N>(
    spec: GroupSpec,
    config: Arc<openraft::Config>,
    network: N,
    log: LogStore,
    machine: PartitionMachine,
) -> StoreResult<PartitionRaft>
where
    N: RaftNetworkFactory<TypeConfig>,
{
    let raft = openraft::Raft::new(spec.me, config, network, log, machine)
        .await
        .map_err(|e| StoreError::Engine(format!("starting a replication group: {e}")))?;
    match raft.initialize(spec.members).await {
        Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(raft),
        Err(e) => Err(StoreError::Engine(format!(
            "initializing a replication group: {e}"
        ))),
    }
}

/// Tell `volumes` each term this replica starts leading.
fn watch_leadership(handle: &Handle, raft: PartitionRaft, volumes: Arc<VolumeSet>) {
    let mut rx = raft.metrics();
    handle.spawn(async move {
        let mut led = None;
        loop {
            let (state, term) = {
                let m = rx.borrow_and_update();
                (m.state, m.current_term)
            };
            if state == ServerState::Shutdown {
                return;
            }
            if state == ServerState::Leader && led != Some(term) {
                volumes.begin_term(term);
                led = Some(term);
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}
