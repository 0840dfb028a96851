//! The seam between a partition and its replication group.
//!
//! The store does not know the consensus engine (that is `laneway-replica`,
//! on openraft); it knows a [`Group`]: something that makes one round of
//! the partition's group commit durable on a quorum, replicates volume
//! bytes ahead of the record that will point at them, and says whether
//! this replica may serve a read. A store opened with a
//! [`StoreConfig::groups`](crate::StoreConfig) opener hands every hosted
//! partition's index and volumes to it at open, and from then on:
//!
//! - the commit thread gives each round's index batch to
//!   [`Group::commit`] instead of writing it (the group's state machine
//!   writes it, on every replica, in log order);
//! - a body received into a volume record is shipped with
//!   [`Group::ship`] before its op is queued, in pieces of at most
//!   [`SHIP_PIECE`] bytes, each piece a log entry that every replica writes
//!   at the same segment and offset ([`crate::volume::VolumeSet::write_at`]);
//! - a store node asks [`Group::read_barrier`] before serving a read and
//!   refuses with [`StoreError::NotLeader`](crate::StoreError) when this
//!   replica is not the leader;
//! - compaction, at the leader, deletes a segment it emptied with
//!   [`Group::drop_segment`]: an entry every replica applies by deleting
//!   its copy of the segment, after every entry that wrote to it or moved
//!   a record out of it.
//!
//! Volume segments are named by the leader's term ([`segment_epoch`]): a
//! leader writes only to segments whose id starts with its term, so
//! entries of two leaders never write to the same segment, and a replica's
//! volumes are, at every committed position, what the log says.

use crate::error::StoreResult;
use crate::ids::PartitionId;
use crate::index::{MetaIndex, WriteBatch};
use crate::volume::VolumeSet;
use bytes::Bytes;
use futures::future::BoxFuture;
use std::path::Path;
use std::sync::Arc;

/// Largest piece of volume data one log entry carries.
pub const SHIP_PIECE: u64 = 1 << 20;

/// Bits of a segment id below its epoch (the leader term that made it).
pub const EPOCH_SHIFT: u32 = 32;

/// The epoch (leader term) a segment id belongs to.
pub fn segment_epoch(segment: u64) -> u64 {
    segment >> EPOCH_SHIFT
}

/// Bytes to write into a volume segment at an offset, on every replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeWrite {
    /// The segment.
    pub segment: u64,
    /// Byte offset in the segment.
    pub offset: u64,
    /// The bytes (a piece of one volume record).
    pub bytes: Bytes,
}

/// What a partition needs of its replication group.
pub trait Group: Send + Sync {
    /// Wait until this replica is the leader and its index holds every
    /// entry its log held when called (a commit that timed out may still
    /// be applied later: the next round must not read around it), or fail
    /// with [`StoreError::NotLeader`](crate::StoreError) or
    /// `Unavailable`. Blocking: the commit thread calls it before it reads
    /// the index for a round.
    fn settle(&self) -> StoreResult<()>;

    /// Make `batch` durable on a quorum and applied to this replica's
    /// index (by the group's state machine), or fail with nothing applied
    /// by this call. Blocking: the commit thread calls it.
    fn commit(&self, batch: WriteBatch) -> StoreResult<()>;

    /// Replicate `write` (bytes already in this replica's own volume)
    /// to a quorum's volumes; done once the entry carrying it committed.
    fn ship(&self, write: VolumeWrite) -> BoxFuture<'static, StoreResult<()>>;

    /// Delete volume segment `segment` on every replica, in log order
    /// (compaction moved every live record out of it); done once the
    /// entry committed and this replica applied it.
    fn drop_segment(&self, segment: u64) -> BoxFuture<'static, StoreResult<()>>;

    /// Wait until this replica may serve a linearizable read (it is the
    /// leader and has applied everything committed before the call), or
    /// fail with [`StoreError::NotLeader`](crate::StoreError).
    fn read_barrier(&self) -> BoxFuture<'static, StoreResult<()>>;

    /// The group's state as this replica sees it.
    fn status(&self) -> GroupStatus;

    /// Change who holds the group (at its leader; `NotLeader` elsewhere):
    /// add a learner that catches up from the log, or make a set of
    /// replicas the voters (openraft's joint consensus; voters left out
    /// are removed). The engine makes the change; this only asks for it.
    fn change_members(&self, change: MemberChange) -> BoxFuture<'static, StoreResult<()>>;

    /// Stop this replica of the group (the store is closing). Blocking.
    fn shutdown(&self);

    /// Delete this replica's copy of the group's data if the group no
    /// longer counts on it (a move placed the partition elsewhere), and
    /// start the replica again, empty and idle; `Ok(true)` if it did.
    /// Blocking: a store node calls it for each partition now and then.
    fn forget_if_left(&self) -> StoreResult<bool>;
}

/// A change of a group's members, asked of its leader
/// (`laneway cluster move-partition`: a learner first, then the voters).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberChange {
    /// Add replica `id` (reached at `addr`) as a learner: it receives the
    /// log and catches up, without a vote. Adding a learner twice, or a
    /// voter, changes nothing.
    AddLearner {
        /// Its Raft id.
        id: u64,
        /// Its RPC address.
        addr: String,
    },
    /// Make exactly `voters` the voters (each already a voter or a
    /// learner); a voter left out is removed from the group.
    SetVoters {
        /// The new voters' Raft ids.
        voters: Vec<u64>,
    },
}

/// One group's state at one replica (for `cluster status` and metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupStatus {
    /// This replica's Raft id.
    pub me: u64,
    /// The current leader's Raft id, if known.
    pub leader: Option<u64>,
    /// The current term.
    pub term: u64,
    /// Last log index this replica holds.
    pub last_log: u64,
    /// Last index applied to the partition.
    pub applied: u64,
    /// Last log index in this replica's current snapshot (0: none yet).
    #[serde(default)]
    pub snapshot: u64,
    /// Last log index purged from this replica's log after a snapshot
    /// (0: none): its log holds only the entries above it.
    #[serde(default)]
    pub purged: u64,
    /// Voters of the group.
    pub voters: Vec<u64>,
    /// Learners of the group (replicas catching up before a promotion).
    #[serde(default)]
    pub learners: Vec<u64>,
    /// At the leader: each follower's matched log index.
    pub matched: Vec<(u64, u64)>,
    /// Bytes of the entries this replica's log holds (in the node's log
    /// file; 0 for a log kept in an older layout).
    #[serde(default)]
    pub log_bytes: u64,
    /// This replica started with an empty log and no vote (a wiped disk,
    /// a new replica) and refuses votes until it has caught up with a
    /// leader or leads itself (docs/replication.md, "A replica that lost
    /// its disk").
    #[serde(default)]
    pub abstaining: bool,
}

/// Opens the group of each partition a store hosts.
pub trait GroupOpener: Send + Sync {
    /// The group of `partition`, whose state machine writes `index` and
    /// `volumes`; its own files (log, snapshots) go under `dir`.
    fn open(
        self: Arc<Self>,
        partition: PartitionId,
        index: Arc<dyn MetaIndex>,
        volumes: Arc<VolumeSet>,
        dir: &Path,
    ) -> StoreResult<Arc<dyn Group>>;

    /// The catalog's group at this node, whose state machine writes
    /// `index` (no volumes); its own files go under `dir`. `None` when this
    /// node holds no replica of the catalog (its local catalog is then
    /// never served).
    fn open_catalog(
        &self,
        index: Arc<dyn MetaIndex>,
        dir: &Path,
    ) -> StoreResult<Option<Arc<dyn Group>>>;
}

/// A [`GroupOpener`] in a [`StoreConfig`](crate::StoreConfig) (which is
/// `Clone` and `Debug`).
#[derive(Clone)]
pub struct Replication(pub Arc<dyn GroupOpener>);

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Replication(..)")
    }
}
