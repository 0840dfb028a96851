//! The leader cache: for each partition's replication group (and the
//! catalog's), the replica this client believes leads it, so a call goes
//! straight there and a failover costs the calls that meet it, not every
//! call after it.
//!
//! One slot per partition plus one for the catalog, a table the size of
//! the map (partition counts are small and fixed), emptied whenever the
//! map's version changes: a slot is only ever a replica of the map it was
//! learned under. An empty slot means the map's first replica (the
//! preferred leader; with one replica, the only node, as before
//! replication). Slots change on what a node answers: a `NotLeader` hint
//! naming a replica ([`Leaders::learn`]), or a failure of the replica in
//! the slot, which moves it on to the next replica ([`Leaders::pass`]).
//!
//! A replica's own claim to lead, with its term (the leader watch,
//! `super::watch`), also counts each change of claimed leader
//! ([`Leaders::claim`]): a call out at a replica that another one has
//! since claimed to succeed (with a term no older) gives up at once
//! ([`Leaders::deposed`]) instead of waiting out its deadline at a
//! leader that stopped or was cut off.

use crate::cluster::{NodeId, PartitionMap};
use crate::ids::PartitionId;
use parking_lot::Mutex;

/// What a call is sent to: one partition's group, or the catalog's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Target {
    /// A partition's replicas.
    Partition(PartitionId),
    /// The catalog's replicas.
    Catalog,
}

impl Target {
    /// Its replicas under `map`, the preferred leader first.
    pub(super) fn replicas(self, map: &PartitionMap) -> &[NodeId] {
        match self {
            Target::Partition(p) => map.replicas(p),
            Target::Catalog => map.catalog(),
        }
    }

    /// Its slot in a table of `map`.
    fn slot(self, map: &PartitionMap) -> usize {
        let index = match self {
            Target::Partition(p) => p.0,
            Target::Catalog => map.partition_count(),
        };
        usize::try_from(index).unwrap_or(usize::MAX)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Partition(p) => write!(f, "{p}"),
            Target::Catalog => f.write_str("the catalog"),
        }
    }
}

/// The replica believed to lead each group.
#[derive(Default)]
pub(super) struct Leaders {
    table: Mutex<Table>,
    /// Woken whenever a group's claimed leader changes.
    elected: tokio::sync::Notify,
}

/// The slots, for one map version.
#[derive(Default)]
struct Table {
    version: Option<u64>,
    slots: Vec<Option<NodeId>>,
    claims: Vec<Claim>,
}

/// The last leader a group's replicas claimed, for one slot.
#[derive(Clone, Default)]
struct Claim {
    leader: Option<NodeId>,
    term: u64,
    /// How often the claimed leader changed (under this map version).
    changes: u64,
}

impl Table {
    /// The slots for `map`, emptied first if they were for another version.
    fn of(&mut self, map: &PartitionMap) -> &mut Vec<Option<NodeId>> {
        self.reset_for(map);
        &mut self.slots
    }

    /// The claims for `map`, emptied first if they were for another version.
    fn claims_of(&mut self, map: &PartitionMap) -> &mut Vec<Claim> {
        self.reset_for(map);
        &mut self.claims
    }

    fn reset_for(&mut self, map: &PartitionMap) {
        if self.version != Some(map.version()) {
            let len = usize::try_from(map.partition_count()).unwrap_or(0) + 1;
            self.version = Some(map.version());
            self.slots = vec![None; len];
            self.claims = vec![Claim::default(); len];
        }
    }
}

impl Leaders {
    /// The replica of `t` believed to lead it (`None`: `t` has no replica
    /// in `map`).
    pub(super) fn get(&self, map: &PartitionMap, t: Target) -> Option<NodeId> {
        let mut table = self.table.lock();
        let known = table.of(map).get(t.slot(map)).cloned().flatten();
        known.or_else(|| t.replicas(map).first().cloned())
    }

    /// A replica answered that Raft id `leader` leads `t`: remember it if
    /// it is a replica of `t` in `map`, and return it (`None`: the hint
    /// names no replica of this map, so it is of no use).
    pub(super) fn learn(&self, map: &PartitionMap, t: Target, leader: u64) -> Option<NodeId> {
        let node = t
            .replicas(map)
            .iter()
            .find(|n| n.raft_id() == leader)?
            .clone();
        let mut table = self.table.lock();
        if let Some(slot) = table.of(map).get_mut(t.slot(map)) {
            *slot = Some(node.clone());
        }
        Some(node)
    }

    /// Replica `leader` (a Raft id) says it leads `t` in `term`: believe
    /// it unless a claim of a later term came first, and if it is another
    /// leader than the last claimed, count the change and wake the calls
    /// waiting in [`Leaders::deposed`]. A claim naming no replica of
    /// `map` is ignored.
    pub(super) fn claim(&self, map: &PartitionMap, t: Target, leader: u64, term: u64) {
        let Some(node) = t.replicas(map).iter().find(|n| n.raft_id() == leader) else {
            return;
        };
        let changed = {
            let mut table = self.table.lock();
            let slot = t.slot(map);
            let Some(claim) = table.claims_of(map).get_mut(slot) else {
                return;
            };
            if term < claim.term {
                return;
            }
            claim.term = term;
            let changed = claim.leader.as_ref() != Some(node);
            if changed {
                claim.leader = Some(node.clone());
                claim.changes += 1;
            }
            if let Some(s) = table.of(map).get_mut(slot) {
                *s = Some(node.clone());
            }
            changed
        };
        if changed {
            self.elected.notify_waiters();
        }
    }

    /// How often `t`'s claimed leader changed so far (for
    /// [`Leaders::deposed`]).
    pub(super) fn changes(&self, map: &PartitionMap, t: Target) -> u64 {
        let mut table = self.table.lock();
        table
            .claims_of(map)
            .get(t.slot(map))
            .map_or(0, |c| c.changes)
    }

    /// The replica that last claimed to lead `t`, with the term of its
    /// claim (`None`: no claim heard under this map).
    pub(super) fn claim_of(&self, map: &PartitionMap, t: Target) -> Option<(NodeId, u64)> {
        let mut table = self.table.lock();
        let claim = table.claims_of(map).get(t.slot(map))?;
        Some((claim.leader.clone()?, claim.term))
    }

    /// Whether, after `since` changes, a replica other than `node` claimed
    /// to lead `t`.
    fn claimed_other(&self, map: &PartitionMap, t: Target, node: &NodeId, since: u64) -> bool {
        let mut table = self.table.lock();
        table
            .claims_of(map)
            .get(t.slot(map))
            .is_some_and(|c| c.changes > since && c.leader.as_ref() != Some(node))
    }

    /// Resolves once a replica other than `node` claims to lead `t`, after
    /// the `since`-th change of claimed leader (read before the call at
    /// `node` began): that call can stop waiting for `node`.
    pub(super) async fn deposed(&self, map: &PartitionMap, t: Target, node: &NodeId, since: u64) {
        loop {
            let woken = self.elected.notified();
            tokio::pin!(woken);
            // Registered before the check, so a change between the two
            // still wakes it.
            woken.as_mut().enable();
            if self.claimed_other(map, t, node, since) {
                return;
            }
            woken.await;
        }
    }

    /// `failed` could not serve `t` (not its leader and no hint, or not
    /// reachable): believe the replica after it leads, unless the slot
    /// already moved away from `failed` (another call learned better
    /// meanwhile). Nothing changes for a group of one replica.
    pub(super) fn pass(&self, map: &PartitionMap, t: Target, failed: &NodeId) {
        let replicas = t.replicas(map);
        if replicas.len() < 2 {
            return;
        }
        let mut table = self.table.lock();
        let Some(slot) = table.of(map).get_mut(t.slot(map)) else {
            return;
        };
        let current = slot.as_ref().or(replicas.first());
        if current != Some(failed) {
            return;
        }
        let next = replicas
            .iter()
            .position(|n| n == failed)
            .map_or(0, |i| (i + 1) % replicas.len());
        *slot = Some(replicas[next].clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeId {
        NodeId::parse(name).expect("node id")
    }

    /// Two partitions on a, b, c (in two orders), the catalog on a alone.
    fn map(version: u64) -> PartitionMap {
        let (a, b, c) = (node("a"), node("b"), node("c"));
        PartitionMap::new(
            version,
            vec![a.clone()],
            vec![
                vec![a.clone(), b.clone(), c.clone()],
                vec![c.clone(), a.clone(), b.clone()],
            ],
        )
    }

    #[test]
    fn the_first_replica_leads_until_told_otherwise() {
        let (leaders, m) = (Leaders::default(), map(1));
        assert_eq!(
            leaders.get(&m, Target::Partition(PartitionId(1))),
            Some(node("c"))
        );
        assert_eq!(leaders.get(&m, Target::Catalog), Some(node("a")));
        assert_eq!(leaders.get(&m, Target::Partition(PartitionId(9))), None);
    }

    #[test]
    fn a_hint_naming_a_replica_is_kept_and_a_stranger_ignored() {
        let (leaders, m) = (Leaders::default(), map(1));
        let p = Target::Partition(PartitionId(0));
        assert_eq!(leaders.learn(&m, p, node("b").raft_id()), Some(node("b")));
        assert_eq!(leaders.get(&m, p), Some(node("b")));
        assert_eq!(leaders.learn(&m, p, node("zz").raft_id()), None);
        assert_eq!(leaders.get(&m, p), Some(node("b")));
        // The other partition is untouched.
        let q = Target::Partition(PartitionId(1));
        assert_eq!(leaders.get(&m, q), Some(node("c")));
    }

    #[test]
    fn a_failed_replica_passes_to_the_next_once() {
        let (leaders, m) = (Leaders::default(), map(1));
        let p = Target::Partition(PartitionId(1));
        leaders.pass(&m, p, &node("c"));
        assert_eq!(leaders.get(&m, p), Some(node("a")));
        // A second report of the same failure does not skip past a.
        leaders.pass(&m, p, &node("c"));
        assert_eq!(leaders.get(&m, p), Some(node("a")));
        leaders.pass(&m, p, &node("a"));
        leaders.pass(&m, p, &node("b"));
        assert_eq!(leaders.get(&m, p), Some(node("c")), "round and round");
        // The catalog has one replica: nothing to pass to.
        leaders.pass(&m, Target::Catalog, &node("a"));
        assert_eq!(leaders.get(&m, Target::Catalog), Some(node("a")));
    }

    #[test]
    fn claims_of_a_later_term_win_and_each_change_is_counted() {
        let (leaders, m) = (Leaders::default(), map(1));
        let p = Target::Partition(PartitionId(0));
        assert_eq!(leaders.changes(&m, p), 0);
        leaders.claim(&m, p, node("a").raft_id(), 1);
        assert_eq!(leaders.changes(&m, p), 1);
        // The same leader again, even in a later term: no change.
        leaders.claim(&m, p, node("a").raft_id(), 2);
        assert_eq!(leaders.changes(&m, p), 1);
        leaders.claim(&m, p, node("b").raft_id(), 3);
        assert_eq!(leaders.changes(&m, p), 2);
        assert_eq!(leaders.get(&m, p), Some(node("b")));
        // A deposed leader still claiming its older term is not believed.
        leaders.claim(&m, p, node("a").raft_id(), 2);
        assert_eq!(
            (leaders.changes(&m, p), leaders.get(&m, p)),
            (2, Some(node("b")))
        );
        // Nor a stranger.
        leaders.claim(&m, p, node("zz").raft_id(), 9);
        assert_eq!(leaders.changes(&m, p), 2);
        assert_eq!(leaders.claim_of(&m, p), Some((node("b"), 3)));
        assert_eq!(
            leaders.claim_of(&m, Target::Partition(PartitionId(1))),
            None
        );
        assert!(leaders.claimed_other(&m, p, &node("a"), 1));
        assert!(
            !leaders.claimed_other(&m, p, &node("b"), 1),
            "b is the one claimed"
        );
        assert!(
            !leaders.claimed_other(&m, p, &node("a"), 2),
            "no change since"
        );
    }

    #[tokio::test]
    async fn a_call_waiting_at_a_replica_is_woken_when_another_claims_the_group() {
        let leaders = std::sync::Arc::new(Leaders::default());
        let m = std::sync::Arc::new(map(1));
        let p = Target::Partition(PartitionId(0));
        leaders.claim(&m, p, node("a").raft_id(), 1);
        let since = leaders.changes(&m, p);
        let waiting = {
            let (leaders, m) = (std::sync::Arc::clone(&leaders), std::sync::Arc::clone(&m));
            tokio::spawn(async move { leaders.deposed(&m, p, &node("a"), since).await })
        };
        // Claims that change nothing, or about another group, wake nothing.
        leaders.claim(&m, p, node("a").raft_id(), 2);
        leaders.claim(
            &m,
            Target::Partition(PartitionId(1)),
            node("b").raft_id(),
            5,
        );
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        leaders.claim(&m, p, node("c").raft_id(), 3);
        waiting.await.expect("woken by the new leader's claim");
    }

    #[test]
    fn a_new_map_version_forgets_what_was_learned() {
        let leaders = Leaders::default();
        let p = Target::Partition(PartitionId(0));
        leaders.learn(&map(1), p, node("c").raft_id());
        assert_eq!(leaders.get(&map(1), p), Some(node("c")));
        assert_eq!(leaders.get(&map(2), p), Some(node("a")));
    }
}
