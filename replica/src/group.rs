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
//!
//! Volumes are compacted by the leader ([`Group::drop_segment`] deletes a
//! segment on every replica through the log), and a partition the map no
//! longer places on this node has its left-behind copy deleted before its
//! group starts ([`RaftOpener`]'s `forget_left`), or while the node runs
//! once no leader has spoken to that replica for [`LEFT_QUIET`]
//! ([`Group::forget_if_left`]: the replica is stopped, its copy deleted,
//! and it starts again, empty and idle).

use crate::lease::{AckClock, LeasedNetwork, lease_for};
use crate::machine::PartitionMachine;
use crate::raft_log::RaftLog;
use crate::types::{Mutation, NodeId, PartitionRaft, TypeConfig};
use crate::wal::Wal;
use crate::{LogStore, ReplicaError, ReplicaResult};
use futures::future::BoxFuture;
use laneway_store::error::{StoreError, StoreResult};
use laneway_store::ids::PartitionId;
use laneway_store::index::{Engine, MetaIndex, WriteBatch, open_index};
use laneway_store::index_fjall::SharedFjall;
use laneway_store::replication::{
    Group, GroupOpener, GroupStatus, MemberChange, VolumeWrite, segment_epoch,
};
use laneway_store::sync_queue::SyncQueue;
use laneway_store::volume::VolumeSet;
use openraft::error::{CheckIsLeaderError, ClientWriteError, InitializeError, RaftError};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, RaftNetworkFactory, ServerState};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;

/// Longest a commit, a settle or a shipped piece waits for its group.
pub const GROUP_DEADLINE: Duration = Duration::from_secs(5);

/// Longest a change of voters waits for its two configurations (joint,
/// then the new one) to commit.
pub const MEMBERSHIP_DEADLINE: Duration = Duration::from_secs(30);

/// The openraft settings of a store partition's group: those of
/// [`crate::net::group_config`] (a snapshot every 10,000 entries, the log
/// before it purged but for the last 1,000), with fewer entries per
/// append. A snapshot carries the partition's volume segments beside its
/// index rows ([`crate::snapshot_volumes`]), so a replica that missed a
/// purged part of the log catches up from one.
pub fn store_group_config(name: &str) -> ReplicaResult<Arc<openraft::Config>> {
    store_group_config_with(name, SNAPSHOT_ENTRIES)
}

/// Log entries between two snapshots of a store partition's group, by
/// default.
pub const SNAPSHOT_ENTRIES: u64 = 10_000;

/// [`store_group_config`] with a snapshot every `entries` log entries
/// (`laneway store --raft-snapshot-entries`): fewer keep less log on disk
/// and cost a scan of the partition's index more often. A tenth of them,
/// at most 1,000, stay in the log after a snapshot for followers slightly
/// behind; a follower that needs entries the leader purged is sent the
/// snapshot (openraft 0.9 decides that by the purge alone). Adding a
/// learner waits until it is within twice the interval of the leader
/// (`replication_lag_threshold`, which openraft uses for nothing else).
pub fn store_group_config_with(name: &str, entries: u64) -> ReplicaResult<Arc<openraft::Config>> {
    let mut config = (*crate::net::group_config(name)?).clone();
    let entries = entries.max(1);
    config.snapshot_policy = openraft::SnapshotPolicy::LogsSinceLast(entries);
    config.max_in_snapshot_log_to_keep = (entries / 10).min(1_000);
    config.purge_batch_size = (entries / 10).clamp(1, 256);
    config.replication_lag_threshold = entries.saturating_mul(2);
    // Entries carry up to a MiB of body each: a few per append.
    config.max_payload_entries = 8;
    config
        .validate()
        .map(Arc::new)
        .map_err(|e| ReplicaError::Config(e.to_string()))
}

/// One partition's group, at this replica.
pub struct RaftGroup {
    handle: Handle,
    /// The replica running now: a new one, empty, once its copy of a
    /// group that removed it was forgotten ([`Group::forget_if_left`]).
    running: RwLock<Arc<Running>>,
    /// How to start this replica again, empty (partitions only: the
    /// catalog's replica is never forgotten while its node runs).
    again: Option<Again>,
}

/// One start of a replica of a group.
struct Running {
    raft: PartitionRaft,
    lease: Lease,
    /// The group's log (for its size in the status).
    log: RaftLog,
    /// Set when this replica started empty (for the status).
    rejoin: Option<Arc<crate::rejoin::Rejoin>>,
}

/// What starts a partition's replica again after its copy was forgotten.
struct Again {
    opener: Arc<dyn Restart>,
    id: PartitionId,
    index: Arc<dyn MetaIndex>,
    volumes: Arc<VolumeSet>,
    dir: PathBuf,
    /// One forget at a time; `true` once the store closed the group (no
    /// replica starts again after that).
    forgetting: Mutex<bool>,
}

/// The part of a [`RaftOpener`] a running group needs to forget its copy
/// and start again (the opener is generic over its transport; the group
/// is not).
trait Restart: Send + Sync {
    /// Partition `id`'s group as the map says now.
    fn spec_now(&self, id: PartitionId) -> GroupSpec;
    /// How long since a leader last spoke to this node's replica of `id`.
    fn unheard_for(&self, id: PartitionId) -> Option<Duration>;
    /// [`RaftOpener::forget_left`].
    fn forget_copy(&self, again: &Again) -> StoreResult<bool>;
    /// [`RaftOpener::start_partition`].
    fn start_again(&self, again: &Again) -> StoreResult<Running>;
}

/// How long a replica that the map no longer places on its node must have
/// heard no leader before its copy is forgotten while the node runs
/// (fifty heartbeat intervals: a learner catching up, or a voter, hears
/// its leader several times a second).
pub const LEFT_QUIET: Duration = Duration::from_secs(10);

/// What a group's leader reads under without a read-index round
/// ([`crate::lease`]).
struct Lease {
    clock: Arc<AckClock>,
    time: Duration,
}

impl RaftGroup {
    fn new(handle: Handle, running: Running, again: Option<Again>) -> RaftGroup {
        RaftGroup {
            handle,
            running: RwLock::new(Arc::new(running)),
            again,
        }
    }

    /// The Raft handle of the replica running now (for tests).
    pub fn raft(&self) -> PartitionRaft {
        self.now().raft.clone()
    }

    fn now(&self) -> Arc<Running> {
        Arc::clone(&self.running.read())
    }
}

impl Running {
    /// Whether a read may skip the read-index round: this replica leads
    /// under a lease a majority granted in its term, and it has applied
    /// an entry of that term (so every entry committed before its term,
    /// and every write it acknowledged, is in its index).
    fn lease_holds(&self) -> bool {
        // Borrowed, not cloned: this runs before every read.
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.state == ServerState::Leader
            && m.last_applied
                .is_some_and(|l| l.leader_id.term == m.current_term)
            && self.lease.clock.holds(
                m.id,
                m.current_term,
                m.membership_config.membership().get_joint_config(),
                std::time::Instant::now(),
                self.lease.time,
            )
    }

    /// The current term, if this replica leads; `NotLeader` otherwise.
    fn leading_term(&self) -> StoreResult<u64> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        if m.state == ServerState::Leader {
            Ok(m.current_term)
        } else {
            Err(StoreError::NotLeader(m.current_leader))
        }
    }

    /// Stop this replica (`Ok` too when it had stopped already).
    fn stop(&self, handle: &Handle) -> StoreResult<()> {
        let raft = self.raft.clone();
        match handle.block_on(async { tokio::time::timeout(GROUP_DEADLINE, raft.shutdown()).await })
        {
            Ok(Ok(())) => Ok(()),
            _ if self.raft.metrics().borrow().state == ServerState::Shutdown => Ok(()),
            Ok(Err(e)) => Err(StoreError::Engine(format!("stopping a replica: {e}"))),
            Err(_) => Err(too_slow("stopping a replica")),
        }
    }
}

impl Again {
    /// Whether the replica `running` holds a copy its group no longer
    /// counts on: the map places the partition elsewhere (it names a
    /// replica's new place only after the voters without this node
    /// committed), this replica neither leads nor is a learner being
    /// caught up (a move back here), no leader has spoken to it for
    /// [`LEFT_QUIET`], and it holds log entries, a snapshot, index rows
    /// or volume segments. A log in an older layout is left alone, as at
    /// start ([`RaftOpener::forget_left`]).
    fn left(&self, running: &Running) -> StoreResult<bool> {
        let spec = self.opener.spec_now(self.id);
        if spec.members.contains_key(&spec.me) {
            return Ok(false);
        }
        let (state, learner, holds_log) = {
            let metrics = running.raft.metrics();
            let m = metrics.borrow();
            let membership = m.membership_config.membership();
            (
                m.state,
                membership.learner_ids().any(|l| l == spec.me),
                m.last_log_index.is_some() || m.snapshot.is_some(),
            )
        };
        let quiet = self
            .opener
            .unheard_for(self.id)
            .is_some_and(|d| d >= LEFT_QUIET);
        let in_file = matches!(running.log, RaftLog::File(_));
        if state == ServerState::Leader || learner || !quiet || !in_file {
            return Ok(false);
        }
        Ok(holds_log || self.holds_data()?)
    }

    /// Whether the partition's index holds a row or its volumes a segment.
    fn holds_data(&self) -> StoreResult<bool> {
        Ok(!self.index.scan(b"", b"", 1)?.is_empty() || !self.volumes.extents()?.is_empty())
    }
}

/// A write's error as the store sees it. Never `NotLeader`, which tells
/// a client the call did nothing and may go elsewhere: openraft answers
/// `ForwardToLeader` also to a proposal already appended to this
/// replica's log when it steps down before the entry commits, and a later
/// leader may still commit it. So a lost leadership during a write is an
/// unknown outcome (`Unavailable`), which clients repeat only where
/// repeating is safe.
fn write_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> StoreError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            StoreError::Unavailable(format!(
                "the partition's leader changed during the write (now {}); its outcome is unknown",
                f.leader_id.map_or("unknown".to_string(), |l| l.to_string())
            ))
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

/// A membership change's error as the store sees it: `NotLeader` when
/// this replica does not lead, or stopped leading during the change
/// (which may still commit: changes are idempotent, so asking the next
/// leader again is safe), `InvalidArgument`
/// for a change the engine refuses as asked (a voter that is not a learner
/// yet, an empty set), `Unavailable` otherwise (its outcome unknown; the
/// change is idempotent, so the operator's tool asks again).
fn membership_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> StoreError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            StoreError::NotLeader(f.leader_id)
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
            StoreError::InvalidArgument(format!("membership change refused: {c}"))
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
        let running = self.now();
        let mut rx = running.raft.metrics();
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
        running.leading_term().map(|_| ())
    }

    fn commit(&self, batch: WriteBatch) -> StoreResult<()> {
        let m = Mutation::of_batch(&batch);
        let raft = self.raft();
        self.handle.block_on(async {
            match tokio::time::timeout(GROUP_DEADLINE, raft.client_write(m)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(write_error(e)),
                Err(_) => Err(too_slow("a commit")),
            }
        })
    }

    fn ship(&self, write: VolumeWrite) -> BoxFuture<'static, StoreResult<()>> {
        let running = self.now();
        let raft = running.raft.clone();
        let term = running.leading_term();
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

    fn drop_segment(&self, segment: u64) -> BoxFuture<'static, StoreResult<()>> {
        let raft = self.raft();
        Box::pin(async move {
            let m = Mutation::of_drop(segment);
            match tokio::time::timeout(GROUP_DEADLINE, raft.client_write(m)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(write_error(e)),
                Err(_) => Err(too_slow("deleting a volume segment")),
            }
        })
    }

    fn read_barrier(&self) -> BoxFuture<'static, StoreResult<()>> {
        let raft = {
            let running = self.running.read();
            if running.lease_holds() {
                return Box::pin(async { Ok(()) });
            }
            running.raft.clone()
        };
        Box::pin(async move {
            match tokio::time::timeout(GROUP_DEADLINE, raft.ensure_linearizable()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(read_error(e)),
                Err(_) => Err(too_slow("a read check")),
            }
        })
    }

    fn status(&self) -> GroupStatus {
        let running = self.now();
        let m = running.raft.metrics().borrow().clone();
        GroupStatus {
            me: m.id,
            leader: m.current_leader,
            term: m.current_term,
            last_log: m.last_log_index.unwrap_or(0),
            applied: m.last_applied.map_or(0, |l| l.index),
            snapshot: m.snapshot.map_or(0, |l| l.index),
            purged: m.purged.map_or(0, |l| l.index),
            voters: m.membership_config.voter_ids().collect(),
            learners: m.membership_config.membership().learner_ids().collect(),
            matched: m
                .replication
                .iter()
                .flatten()
                .map(|(id, l)| (*id, l.map_or(0, |l| l.index)))
                .collect(),
            log_bytes: running.log.stored_bytes(),
            abstaining: running.rejoin.as_ref().is_some_and(|r| r.settle(&m)),
        }
    }

    fn change_members(&self, change: MemberChange) -> BoxFuture<'static, StoreResult<()>> {
        let raft = self.raft();
        Box::pin(async move {
            let done = match change {
                MemberChange::AddLearner { id, addr } => {
                    let node = BasicNode { addr };
                    let asked = raft.add_learner(id, node, false);
                    tokio::time::timeout(GROUP_DEADLINE, asked).await
                }
                MemberChange::SetVoters { voters } => {
                    let voters: BTreeSet<NodeId> = voters.into_iter().collect();
                    let asked = raft.change_membership(voters, false);
                    tokio::time::timeout(MEMBERSHIP_DEADLINE, asked).await
                }
            };
            match done {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(membership_error(e)),
                Err(_) => Err(too_slow("a membership change")),
            }
        })
    }

    fn shutdown(&self) {
        let _closed = self.again.as_ref().map(|a| {
            let mut closed = a.forgetting.lock();
            *closed = true;
            closed
        });
        if self.now().stop(&self.handle).is_err() {
            tracing::warn!("a replication group did not stop within its deadline");
        }
    }

    fn forget_if_left(&self) -> StoreResult<bool> {
        let Some(again) = &self.again else {
            return Ok(false);
        };
        let closed = again.forgetting.lock();
        let running = self.now();
        if *closed || !again.left(&running)? {
            return Ok(false);
        }
        running.stop(&self.handle)?;
        again.opener.forget_copy(again)?;
        let fresh = again.opener.start_again(again)?;
        *self.running.write() = Arc::new(fresh);
        tracing::info!(partition = %again.id,
            "deleted the copy of a replica that moved away, while the node runs");
        Ok(true)
    }
}

/// Who a partition's group is made of, as this node sees it, and which
/// member initializes it when it is new ([`launch`]).
#[derive(Clone, Debug)]
pub struct GroupSpec {
    /// This node's Raft id.
    pub me: NodeId,
    /// Every voter of the group (this node included), with its address.
    pub members: BTreeMap<NodeId, BasicNode>,
    /// The member that initializes a new group, and so leads it first
    /// (`None`: the lowest-numbered). Every member must name the same one.
    pub initializer: Option<NodeId>,
}

impl GroupSpec {
    /// The member that initializes the group: [`GroupSpec::initializer`],
    /// else the lowest-numbered.
    pub fn first(&self) -> Option<NodeId> {
        self.initializer
            .or_else(|| self.members.keys().next().copied())
    }
}

/// The member of `members` at position `n` (modulo their number) in id
/// order: a node's partition groups take turns by partition number
/// ([`crate::node`]), so new groups' first leaders spread over the nodes
/// instead of all being the lowest-numbered one.
pub fn turn_of(members: &BTreeMap<NodeId, BasicNode>, n: u64) -> Option<NodeId> {
    let len = u64::try_from(members.len()).ok().filter(|l| *l > 0)?;
    let at = usize::try_from(n % len).ok()?;
    members.keys().nth(at).copied()
}

/// [`RaftOpener::started`].
pub type Started = Box<
    dyn Fn(PartitionId, PartitionRaft, bool, &GroupSpec) -> Option<Arc<crate::rejoin::Rejoin>>
        + Send
        + Sync,
>;

/// The partition id the catalog's group goes by in a [`RaftOpener`]'s
/// `network` and `started` (its transport group is
/// [`crate::net::CATALOG_GROUP`], the same number).
pub const CATALOG_PARTITION: PartitionId = PartitionId(crate::net::CATALOG_GROUP);

/// Starts the group of each partition a store opens (its state machine
/// over the partition's own index and volumes), and the catalog's group
/// where this node holds a replica of it (snapshots on: the catalog has
/// no volumes, so its snapshots are whole). Each group's log is a keyspace
/// of [`RaftOpener::logs`], or a database of its own in `<dir>/log`
/// (`<partition>/raft/log`, `catalog-raft/log`) where one exists or the
/// opener has no shared one ([`RaftOpener::open_log`]).
pub struct RaftOpener<N> {
    /// The group's members, per partition.
    pub spec: Box<dyn Fn(PartitionId) -> GroupSpec + Send + Sync>,
    /// The catalog group's members, if this node is one of them.
    pub catalog: Option<GroupSpec>,
    /// The transport of one partition's group (of the catalog's for
    /// [`CATALOG_PARTITION`]).
    pub network: Box<dyn Fn(PartitionId) -> N + Send + Sync>,
    /// Called with each started group, whether it started empty, and its
    /// spec (the transport's receiving side registers it here, an empty
    /// one with a [`crate::rejoin::Rejoin`] that asks the spec's other
    /// members for their terms, which it returns for the group's status).
    pub started: Started,
    /// How long since a leader last sent this node's replica of a
    /// partition's group an append or a snapshot chunk
    /// ([`crate::net::RaftService::unheard_for`]); `None`: not known, and
    /// then a replica's copy is forgotten only when its node starts
    /// ([`Group::forget_if_left`]).
    pub unheard_for: Box<dyn Fn(PartitionId) -> Option<Duration> + Send + Sync>,
    /// The runtime the groups run on.
    pub handle: Handle,
    /// Log entries between two snapshots of a partition's group
    /// ([`store_group_config_with`]; [`SNAPSHOT_ENTRIES`] by default).
    pub snapshot_entries: u64,
    /// Whether each group sends its own heartbeats and runs its own
    /// election timer; `false` when the node runs a
    /// [`crate::net::HeartbeatTicker`] for all of them.
    pub own_heartbeats: bool,
    /// Where the groups keep their logs ([`GroupLogs`]).
    pub logs: GroupLogs,
    /// The node's thread for its groups' applies of index rows
    /// ([`PartitionMachine::with_apply_queue`]); `None`: each apply on
    /// the blocking pool.
    pub applies: Option<SyncQueue>,
}

/// Where a node's groups keep their Raft logs.
pub enum GroupLogs {
    /// In the node's log file (`<data>/raft-wal`, [`Wal`]): one writer
    /// thread and one fdatasync for the appends of all groups. A group
    /// whose log is in an older layout keeps it: a database of its own
    /// (`<partition>/raft/log`), or a keyspace of `older`, the node's
    /// shared log database (`<data>/raft-log`) if the node has one.
    File {
        /// The node's log file.
        wal: Wal,
        /// The node's log database from before the log file, if any.
        older: Option<SharedFjall>,
    },
    /// Each group's log a keyspace of one database (one journal, synced
    /// by its queue thread for all groups).
    Shared(SharedFjall),
    /// Each group's log a database of its own.
    Own,
}

/// Start a node's thread for its groups' applies ([`RaftOpener::applies`]).
pub fn apply_queue() -> std::io::Result<SyncQueue> {
    SyncQueue::start("raft-apply", || Ok(()))
}

/// The largest memtable of one group's log in the node's log database
/// (a log holds only the entries since the last snapshot).
pub const LOG_MEMTABLE_BYTES: u64 = 8 << 20;

/// The block cache of a node's log database, shared by all its groups.
pub const LOG_CACHE_BYTES: u64 = 16 << 20;

/// The keyspace of group `id`'s log in a node's log database.
fn log_keyspace(id: PartitionId) -> String {
    if id == CATALOG_PARTITION {
        "catalog".to_string()
    } else {
        id.to_string()
    }
}

impl<N> GroupOpener for RaftOpener<N>
where
    N: RaftNetworkFactory<TypeConfig> + Send + Sync + 'static,
{
    fn open(
        self: Arc<Self>,
        partition: PartitionId,
        index: Arc<dyn MetaIndex>,
        volumes: Arc<VolumeSet>,
        dir: &Path,
    ) -> StoreResult<Arc<dyn Group>> {
        let again = Again {
            opener: Arc::clone(&self) as Arc<dyn Restart>,
            id: partition,
            index,
            volumes,
            dir: dir.to_path_buf(),
            forgetting: Mutex::new(false),
        };
        let spec = (self.spec)(partition);
        if !spec.members.contains_key(&spec.me) {
            self.forget_left(&again)?;
        }
        let running = self.start_partition(&again, spec)?;
        Ok(Arc::new(RaftGroup::new(
            self.handle.clone(),
            running,
            Some(again),
        )))
    }

    fn open_catalog(
        &self,
        index: Arc<dyn MetaIndex>,
        dir: &Path,
    ) -> StoreResult<Option<Arc<dyn Group>>> {
        let Some(spec) = self.catalog.clone() else {
            return Ok(None);
        };
        let config = crate::net::group_config("catalog")
            .map(|c| self.heartbeats(c))
            .map_err(|e| StoreError::Engine(e.to_string()))?;
        let running = self.start(CATALOG_PARTITION, spec, config, index, None, dir)?;
        Ok(Some(Arc::new(RaftGroup::new(
            self.handle.clone(),
            running,
            None,
        ))))
    }
}

impl<N> RaftOpener<N>
where
    N: RaftNetworkFactory<TypeConfig> + Send + Sync + 'static,
{
    /// `config` with the group's own heartbeats and election timer off
    /// when the node's ticker runs them ([`crate::net::heartbeat::ticked`]).
    fn heartbeats(&self, config: Arc<openraft::Config>) -> Arc<openraft::Config> {
        if self.own_heartbeats {
            return config;
        }
        crate::net::heartbeat::ticked(&config)
    }

    /// Group `id`'s log, in the node's layout ([`GroupLogs`]); a group
    /// that has a log of its own in `dir/log` keeps it.
    fn open_log(&self, id: PartitionId, dir: &Path) -> StoreResult<RaftLog> {
        let own = dir.join("log");
        let in_keyspace = |shared: &SharedFjall| -> StoreResult<RaftLog> {
            Ok(LogStore::with_queue(
                Arc::new(shared.index(&log_keyspace(id), LOG_MEMTABLE_BYTES)?),
                shared.sync_queue(),
            )
            .into())
        };
        if own.exists() {
            return Ok(LogStore::new(Arc::from(open_index(Engine::Fjall, &own)?)).into());
        }
        match &self.logs {
            GroupLogs::File {
                older: Some(shared),
                ..
            } if shared.has(&log_keyspace(id)) => in_keyspace(shared),
            GroupLogs::File { wal, .. } => Ok(wal.log(u64::from(id.0)).into()),
            GroupLogs::Shared(shared) => in_keyspace(shared),
            GroupLogs::Own => Ok(LogStore::new(Arc::from(open_index(Engine::Fjall, &own)?)).into()),
        }
    }

    /// Delete what this node still holds of partition `again.id` when the
    /// map does not place a replica of it here (one moved away: `laneway
    /// cluster move-partition`, `rebalance`, `remove-node`): its log in
    /// the node's log file, its index rows, volume segments and snapshots,
    /// before the group starts (at the node's start, or again once its
    /// replica stopped: [`Group::forget_if_left`]), so it starts empty and
    /// idle. The map names
    /// a replica's new place only after the voters without this node
    /// committed (`laneway_gateway` cluster members), so the group no
    /// longer counts on this copy; a node that is a voter the map does
    /// not name yet (a move cut short before its map write) comes back
    /// empty and abstains from votes until it caught up
    /// ([`crate::rejoin`]), as after a lost disk. A log in an older layout
    /// (a keyspace of its own) is left alone, and the rest with it:
    /// `Ok(false)`.
    fn forget_left(&self, again: &Again) -> StoreResult<bool> {
        let (id, dir) = (again.id, again.dir.as_path());
        let RaftLog::File(log) = self.open_log(id, dir)? else {
            return Ok(false);
        };
        let logged = log.is_known();
        if logged {
            self.handle
                .block_on(log.forget())
                .map_err(|e| StoreError::Engine(format!("{id}: forgetting its log: {e}")))?;
        }
        let wiped = crate::machine::wipe(
            again.index.as_ref(),
            Some(&again.volumes),
            &dir.join("snapshots"),
        )
        .map_err(|e| StoreError::Engine(format!("{id}: deleting a moved replica: {e}")))?;
        if logged || wiped {
            tracing::info!(partition = %id, "deleted the copy of a replica that moved away");
        }
        Ok(true)
    }

    /// Start this node's replica of partition `again.id`'s group as
    /// `spec` says, and tell its volumes each term it leads.
    fn start_partition(&self, again: &Again, spec: GroupSpec) -> StoreResult<Running> {
        let id = again.id;
        let config = store_group_config_with(&id.to_string(), self.snapshot_entries)
            .map(|c| self.heartbeats(c))
            .map_err(|e| StoreError::Engine(e.to_string()))?;
        let running = self.start(
            id,
            spec,
            config,
            Arc::clone(&again.index),
            Some(Arc::clone(&again.volumes)),
            &again.dir,
        )?;
        watch_leadership(
            &self.handle,
            running.raft.clone(),
            Arc::clone(&again.volumes),
        );
        Ok(running)
    }

    /// Start this node's replica of the group `id` names: its log
    /// ([`RaftOpener::open_log`]), its state machine over `index` (and `volumes`), its
    /// transport recording the acknowledgements its reads' lease rests on.
    fn start(
        &self,
        id: PartitionId,
        spec: GroupSpec,
        config: Arc<openraft::Config>,
        index: Arc<dyn MetaIndex>,
        volumes: Option<Arc<VolumeSet>>,
        dir: &Path,
    ) -> StoreResult<Running> {
        let what = if id == CATALOG_PARTITION {
            "the catalog".to_string()
        } else {
            id.to_string()
        };
        let log = self.open_log(id, dir)?;
        let kept = log.clone();
        let mut machine = PartitionMachine::open_with(index, volumes, &dir.join("snapshots"))
            .map_err(|e| StoreError::Engine(format!("{what} state machine: {e}")))?;
        if let Some(queue) = &self.applies {
            machine = machine.with_apply_queue(queue.clone());
        }
        let lease = Lease {
            clock: Arc::default(),
            time: lease_for(&config),
        };
        let network = LeasedNetwork::new((self.network)(id), Arc::clone(&lease.clock));
        let mut rejoin = None;
        let raft = self
            .handle
            .block_on(launch(
                config,
                spec.me,
                spec.first(),
                spec.members.clone(),
                network,
                log,
                machine,
                |raft, empty| rejoin = (self.started)(id, raft.clone(), empty, &spec),
            ))
            .map_err(|e| StoreError::Unavailable(format!("{what} group: {e}")))?;
        Ok(Running {
            raft,
            lease,
            log: kept,
            rejoin,
        })
    }
}

impl<N> Restart for RaftOpener<N>
where
    N: RaftNetworkFactory<TypeConfig> + Send + Sync + 'static,
{
    fn spec_now(&self, id: PartitionId) -> GroupSpec {
        (self.spec)(id)
    }

    fn unheard_for(&self, id: PartitionId) -> Option<Duration> {
        (self.unheard_for)(id)
    }

    fn forget_copy(&self, again: &Again) -> StoreResult<bool> {
        self.forget_left(again)
    }

    fn start_again(&self, again: &Again) -> StoreResult<Running> {
        self.start_partition(again, (self.spec)(again.id))
    }
}

/// Create this node's replica `me` of a group, make it reachable
/// (`reachable`, called before it may campaign, so its peers' answers
/// find it, and told whether the replica started with an empty log and no
/// vote: such a replica must abstain from votes until it has caught up,
/// [`crate::rejoin`]), and initialize a new group with `members` if `me`
/// is its `initializer`.
///
/// A new group is initialized (its first log entry, the membership, is
/// written) by exactly one node: the initializer every member names (the
/// lowest-numbered member, or for a store node's partitions the one
/// whose turn the partition's number makes it: [`turn_of`]), and only when
/// its log and vote are empty. Why that is safe: openraft's `initialize`
/// refuses a node that has any log entry or has voted, and the other
/// members never call it, so a group's first membership is proposed once,
/// by one node, with one member set; two nodes initialising with
/// different sets is the split brain openraft warns of, and cannot happen
/// here. The others wait, empty, until the first one's election reaches
/// them. A restart finds the log non-empty and only rejoins. If the
/// lowest-numbered member is not up, a new group has no leader until it
/// is.
///
/// The first member that lost its disk restarts empty, like a member of
/// a new group. Before it initializes it therefore waits
/// [`INIT_GRACE`] for a leader to reach it: in a group that exists, the
/// leader's next heartbeat (every 200 ms) finds it, it joins as a
/// follower with an empty log and catches up, and it never initializes.
/// Only when no leader speaks within the grace (a new cluster, or a group
/// with no quorum up) does it initialize; in the second case the others,
/// at a higher term with longer logs, refuse its term-1 candidacy and
/// their leader overwrites its one entry once they are back, so no
/// second history appears. A replica that lost its disk has forgotten
/// the entries it acknowledged and its vote, so until it has caught up
/// with a leader it refuses to vote ([`crate::rejoin`] says why and what
/// that leaves open).
#[allow(clippy::too_many_arguments)]
pub async fn launch<N, L>(
    config: Arc<openraft::Config>,
    me: NodeId,
    initializer: Option<NodeId>,
    members: BTreeMap<NodeId, BasicNode>,
    network: N,
    log: L,
    machine: PartitionMachine,
    reachable: impl FnOnce(&PartitionRaft, bool),
) -> ReplicaResult<PartitionRaft>
where
    N: RaftNetworkFactory<TypeConfig>,
    L: RaftLogStorage<TypeConfig>,
{
    let raft = openraft::Raft::new(me, config, network, log, machine)
        .await
        .map_err(|e| ReplicaError::Raft(e.to_string()))?;
    let empty = match initialized(&raft).await {
        Ok(initialized) => !initialized,
        Err(e) => {
            let _ = raft.shutdown().await;
            return Err(e);
        }
    };
    reachable(&raft, empty);
    if initializer == Some(me)
        && let Err(e) = initialize_after_grace(&raft, members).await
    {
        let _ = raft.shutdown().await;
        return Err(e);
    }
    Ok(raft)
}

/// How long the first member of a group with an empty log waits for a
/// leader of an existing group to reach it before it initializes a new
/// one: seven heartbeat intervals of [`crate::net::group_config`].
pub const INIT_GRACE: Duration = Duration::from_millis(1500);

/// [`initialize_once`], after waiting up to [`INIT_GRACE`] for a leader
/// to reach this replica if its log and vote are empty ([`launch`] says
/// why).
async fn initialize_after_grace(
    raft: &PartitionRaft,
    members: BTreeMap<NodeId, BasicNode>,
) -> ReplicaResult<()> {
    if initialized(raft).await? {
        return Ok(());
    }
    let mut rx = raft.metrics();
    let led = tokio::time::timeout(INIT_GRACE, rx.wait_for(|m| m.current_leader.is_some())).await;
    if matches!(led, Ok(Ok(_))) {
        return Ok(());
    }
    initialize_once(raft, members).await
}

/// Whether `raft`'s log or vote says its group exists.
async fn initialized(raft: &PartitionRaft) -> ReplicaResult<bool> {
    raft.is_initialized()
        .await
        .map_err(|e| ReplicaError::Raft(e.to_string()))
}

/// Initialize `raft` with `members` unless its log or vote says the group
/// already exists.
async fn initialize_once(
    raft: &PartitionRaft,
    members: BTreeMap<NodeId, BasicNode>,
) -> ReplicaResult<()> {
    if initialized(raft).await? {
        return Ok(());
    }
    match raft.initialize(members).await {
        Ok(()) => Ok(()),
        // A peer's vote request arrived between the check and the call:
        // the group exists, which is what this call wanted.
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
        Err(e) => Err(ReplicaError::Raft(e.to_string())),
    }
}

/// Tell `volumes` each term this replica starts leading. It watches
/// openraft's server metrics, which change with the vote, the state and
/// the membership only (not with every append and apply, as the whole
/// metrics do).
fn watch_leadership(handle: &Handle, raft: PartitionRaft, volumes: Arc<VolumeSet>) {
    let mut rx = raft.server_metrics();
    handle.spawn(async move {
        let mut led = None;
        loop {
            let (state, term) = {
                let m = rx.borrow_and_update();
                (m.state, m.vote.leader_id.get_term())
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
