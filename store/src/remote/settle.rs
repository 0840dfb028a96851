//! Settling the quota hold of a write whose call got no answer: the
//! [`Watch`] a call carrying a hold goes out with
//! ([`RemoteStore::settle_watch`]).
//!
//! A write call that went out and got no answer (the connection broke,
//! the deadline passed, another replica claimed the group) leaves its
//! hold to the store node that runs it, which gives it back once the
//! write is done (`crate::quota::QuotaHold::cover`). A node that died
//! with the write in flight gives back nothing, and the hold would stay
//! counted until it lapses, an hour later, refusing the tenant that much
//! room. The watch gives it back sooner, once the write's fate is
//! settled: when the leader of the write's partition answers a read of
//! the written key in a later term than the one the write was accepted
//! in. That leader is another replica than the node the write was sent
//! to, or that node itself once it claims a later term than it claimed
//! when the write was sent (it restarted, or lost the group and won it
//! back).
//!
//! Why that settles it. A replica answers a read only as its group's
//! leader after a read barrier (a quorum confirmed it leads, or its lease
//! holds) and once it has applied an entry of its own term
//! (`crate::node`). Committing that entry committed every entry before it
//! in its log, so an entry of the write's term that it holds is applied
//! there, and one it does not hold never commits (every later leader's
//! log holds that entry, so not the other). A write in flight is also
//! tied to the term it began in: its node's group refuses it once
//! leadership moved. So the usage the quota desk reads from then on
//! counts the write if it committed, and the hold is no longer needed
//! either way.
//!
//! The write's term is known only as the term its node last claimed
//! before the send (the leader watch's, at most a second old). A node
//! that lost its group and won it back within that second, and whose call
//! then went unanswered while it still ran the write, would see its hold
//! given back before the write commits: the tenant may then pass its
//! quota by that write. Any other case errs the other way (the watch
//! waits, or gives up and the hold lapses).
//!
//! Bounded: at most [`MAX_SETTLING`] watches run at once per client (one
//! more gives up at once: its hold lapses as before), each for at most
//! [`SETTLE_FOR`], with reads [`RECHECK`] apart. A group of one replica
//! has no other replica to answer, so its calls get no watch.

use super::RemoteStore;
use super::leaders::Target;
use super::route::{Sent, target_of};
use crate::cluster::{NodeId, PartitionMap};
use crate::error::StoreError;
use crate::node::proto::Call;
use crate::quota::Watch;
use crate::record::ObjectInfo;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long a watch looks for another leader before it gives up.
pub(super) const SETTLE_FOR: Duration = Duration::from_secs(300);

/// The pause between two looks, and the deadline of each read.
pub(super) const RECHECK: Duration = Duration::from_secs(1);

/// The most watches a client runs at once.
pub(super) const MAX_SETTLING: usize = 1024;

/// The write a watch is about: the node its call went to, and the term
/// that node last claimed to lead the write's group in when the call was
/// sent (`None`: the claims named another replica, or none).
struct Cut {
    target: Target,
    node: NodeId,
    term: Option<u64>,
}

impl RemoteStore {
    /// The watch of `call` (one that carries a quota hold) sent to `node`:
    /// `None` for a call that takes no quota or a group of one replica.
    pub(super) fn settle_watch(
        &self,
        map: &PartitionMap,
        call: &Call,
        node: &NodeId,
    ) -> Option<Watch> {
        let (bucket, key) = call.quota_object()?;
        let target = target_of(map, call)?;
        if target.replicas(map).len() < 2 {
            return None;
        }
        let head = Call::HeadObject {
            bucket: bucket.clone(),
            key: key.to_owned(),
        };
        let claim = self.inner.leaders.claim_of(map, target);
        let cut = Cut {
            target,
            term: claim.filter(|(n, _)| n == node).map(|(_, term)| term),
            node: node.clone(),
        };
        let me = self.clone();
        Some(Box::new(move || {
            Box::pin(async move {
                let Ok(_running) = Arc::clone(&me.inner.settling).try_acquire_owned() else {
                    return false;
                };
                me.settled(&cut, head).await
            })
        }))
    }

    /// Whether, within [`SETTLE_FOR`], the leader of the cut write's
    /// group answers `head` (a read of the written key) in a later term
    /// than the write's ([`RemoteStore::may_settle`]).
    async fn settled(&self, cut: &Cut, mut head: Call) -> bool {
        let until = Instant::now() + SETTLE_FOR;
        while Instant::now() < until {
            let map = self.map();
            let Some(leader) = self.inner.leaders.get(&map, cut.target) else {
                return false;
            };
            if self.may_settle(&map, cut, &leader) {
                let by = Instant::now() + RECHECK;
                let Ok((sealed, back)) = self.envelope(head, &map, &leader, None, by) else {
                    return false;
                };
                head = back;
                let read = self.exchange::<ObjectInfo>(&leader, "head_object", sealed, None, by);
                let answered = match read.await {
                    Ok(_) => true,
                    Err(Sent::Store(e)) => answered_as_leader(&e),
                    Err(Sent::WrongNode(seen)) => {
                        drop(self.refresh(seen));
                        false
                    }
                    Err(failure) => {
                        self.note(&map, cut.target, &leader, &failure);
                        false
                    }
                };
                if answered {
                    tracing::info!(target = %cut.target, node = %cut.node, %leader,
                        "a write cut off at its node is settled: its quota hold is given back");
                    return true;
                }
            } else {
                // The write's node still leads, as far as is known: the
                // leader watch asks for claims now.
                self.inner.hurry.notify_one();
            }
            tokio::time::sleep(RECHECK).await;
        }
        tracing::warn!(target = %cut.target, node = %cut.node,
            "no leader answered for a write cut off at its node: its quota hold is left to lapse");
        false
    }

    /// Whether a read answered by `leader` would settle the cut write:
    /// another replica, or the write's own node claiming a later term
    /// than it claimed when the write was sent (it lost the group and won
    /// it again, as after a restart).
    fn may_settle(&self, map: &PartitionMap, cut: &Cut, leader: &NodeId) -> bool {
        if *leader != cut.node {
            return true;
        }
        let claim = self.inner.leaders.claim_of(map, cut.target);
        match (claim, cut.term) {
            (Some((claimed, term)), Some(then)) => claimed == cut.node && term > then,
            _ => false,
        }
    }
}

/// Whether a node's error to a read of one key came after its read
/// barrier (the node answered as the group's leader): the key or its
/// bucket not found.
fn answered_as_leader(e: &StoreError) -> bool {
    matches!(e, StoreError::NoSuchKey | StoreError::NoSuchBucket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_not_found_answers_come_from_a_leader() {
        assert!(answered_as_leader(&StoreError::NoSuchKey));
        assert!(answered_as_leader(&StoreError::NoSuchBucket));
        assert!(!answered_as_leader(&StoreError::NotLeader(None)));
        assert!(!answered_as_leader(&StoreError::Unavailable("slow".into())));
        assert!(!answered_as_leader(&StoreError::ShuttingDown));
    }
}
