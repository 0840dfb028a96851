//! Leader leases for reads: a leader that a quorum acknowledged a moment
//! ago serves a linearizable read without a read-index round.
//!
//! openraft 0.9 has no lease read (`ensure_linearizable` is a heartbeat
//! round to a quorum before every read, the largest part of an RF 3 GET's
//! cost). Its metrics' `millis_since_quorum_ack` is not enough: it is a
//! value the Raft core publishes when it runs, so a leader paused and
//! resumed still shows the fresh value it had before the pause. So the
//! instants come from the transport instead: [`LeasedNetwork`] wraps a
//! group's network and, for every AppendEntries (heartbeats included) a
//! follower accepts, records in the group's [`AckClock`] the instant the
//! request was *sent*, with the term it was sent in.
//!
//! Why a lease from those instants is safe. A follower that accepted an
//! append sent at `s` received it after `s`, and from then on
//! - refuses to vote for another candidate for openraft's leader lease
//!   (`election_timeout_max`) after that message, and
//! - does not campaign itself before `election_timeout_min` after it.
//!
//! Any new leader needs the vote of a majority, which overlaps every
//! majority that acknowledged us; so no other leader can be elected
//! before `s + election_timeout_min`. [`AckClock::holds`] asks that a
//! majority of every voter configuration (both halves of a joint one)
//! acknowledged, in the current term, an append sent less than
//! [`lease_for`] (half of `election_timeout_min`, the rest a margin for
//! clock rates and scheduling) before now, on this process's monotonic
//! clock. A pause of this process between sending and reading only makes
//! the instants older. Reads also need every write acknowledged before
//! them applied here: the group's writes are acknowledged only once their
//! leader applied them, and a leader's first entry of its term being
//! applied means every earlier committed entry is too
//! ([`crate::group::RaftGroup`] checks both before it skips the round).

use crate::types::{NodeId, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RaftNetwork, RaftNetworkFactory};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The lease a group's leader may read under: half its shortest election
/// timeout.
pub fn lease_for(config: &openraft::Config) -> Duration {
    Duration::from_millis(config.election_timeout_min / 2)
}

/// Per follower, the send instant of the newest append it accepted, and
/// the term it was sent in.
#[derive(Default)]
pub struct AckClock {
    acks: Mutex<HashMap<NodeId, (u64, Instant)>>,
}

impl AckClock {
    /// `target` accepted an append of term `term` sent at `sent`.
    pub fn record(&self, target: NodeId, term: u64, sent: Instant) {
        let mut acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        let e = acks.entry(target).or_insert((term, sent));
        if (term, sent) > *e {
            *e = (term, sent);
        }
    }

    /// Whether `me`, leading in `term`, holds a lease at `now`: in each of
    /// `configs` (the voter sets, two during a joint change) a majority,
    /// `me` counted, acknowledged an append of `term` sent within `lease`.
    pub fn holds(
        &self,
        me: NodeId,
        term: u64,
        configs: &[BTreeSet<NodeId>],
        now: Instant,
        lease: Duration,
    ) -> bool {
        if configs.is_empty() {
            return false;
        }
        let acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = |id: &NodeId| {
            *id == me
                || acks.get(id).is_some_and(|&(t, sent)| {
                    t == term && now.saturating_duration_since(sent) < lease
                })
        };
        configs
            .iter()
            .all(|voters| voters.iter().filter(|id| fresh(id)).count() > voters.len() / 2)
    }
}

/// A group's network whose connections record accepted appends in a
/// shared [`AckClock`].
pub struct LeasedNetwork<N> {
    inner: N,
    clock: Arc<AckClock>,
}

impl<N> LeasedNetwork<N> {
    /// `inner`, recording into `clock`.
    pub fn new(inner: N, clock: Arc<AckClock>) -> LeasedNetwork<N> {
        LeasedNetwork { inner, clock }
    }
}

/// A connection of a [`LeasedNetwork`].
pub struct LeasedConnection<C> {
    inner: C,
    target: NodeId,
    clock: Arc<AckClock>,
}

impl<N: RaftNetworkFactory<TypeConfig>> RaftNetworkFactory<TypeConfig> for LeasedNetwork<N> {
    type Network = LeasedConnection<N::Network>;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        LeasedConnection {
            inner: self.inner.new_client(target, node).await,
            target,
            clock: Arc::clone(&self.clock),
        }
    }
}

type Rpc<T, E = RaftError<NodeId>> = Result<T, RPCError<NodeId, BasicNode, E>>;

impl<C: RaftNetwork<TypeConfig>> RaftNetwork<TypeConfig> for LeasedConnection<C> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        // Only a leader's (committed) vote makes an acknowledgement count.
        let term = rpc.vote.committed.then_some(rpc.vote.leader_id().term);
        let sent = Instant::now();
        let answer = self.inner.append_entries(rpc, option).await;
        if let (
            Some(term),
            Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_)),
        ) = (term, &answer)
        {
            self.clock.record(self.target, term, sent);
        }
        answer
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        self.inner.install_snapshot(rpc, option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>> {
        self.inner.vote(rpc, option).await
    }

    fn backoff(&self) -> openraft::network::Backoff {
        self.inner.backoff()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_lease_needs_a_fresh_majority_of_every_config_in_the_current_term() {
        let clock = AckClock::default();
        let lease = Duration::from_millis(300);
        let t0 = Instant::now();
        let three = [set(&[1, 2, 3])];
        // Only the leader itself: no majority.
        assert!(!clock.holds(1, 5, &three, t0, lease));
        clock.record(2, 5, t0);
        assert!(clock.holds(1, 5, &three, t0 + Duration::from_millis(100), lease));
        // Stale, or of another term.
        assert!(!clock.holds(1, 5, &three, t0 + lease, lease));
        assert!(!clock.holds(1, 6, &three, t0, lease));
        // An older send instant never replaces a newer one.
        clock.record(2, 5, t0 - Duration::from_secs(1));
        assert!(clock.holds(1, 5, &three, t0 + Duration::from_millis(100), lease));
        // A joint change: the new half (1, 4, 5) has no fresh majority.
        let joint = [set(&[1, 2, 3]), set(&[1, 4, 5])];
        assert!(!clock.holds(1, 5, &joint, t0, lease));
        clock.record(4, 5, t0);
        assert!(clock.holds(1, 5, &joint, t0, lease));
        // No voters at all never holds.
        assert!(!clock.holds(1, 5, &[], t0, lease));
    }
}
