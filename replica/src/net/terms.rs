//! How a replica that started empty hears its group's other replicas'
//! votes before it takes any message ([`crate::rejoin`] says why).
//!
//! The asking side ([`learn_floor`]) asks every other replica the cluster
//! file names for the group, with one [`RAFT_TERMS_METHOD`] call each,
//! until each has answered ([`crate::rejoin::floor`]), and every voter an
//! answer names that it was not asking yet; a peer that is down,
//! or up without the group started, is asked again every [`ASK_EVERY`]
//! for the first [`ASK_OFTEN_FOR`] (a new cluster's nodes start together,
//! and its groups' first elections wait for these answers), then every
//! [`ASK_EVERY_LATER`], with a warning naming the peers still silent.
//! The task ends once every peer was heard from, or
//! when the replica no longer abstains, or when its group is no longer
//! hosted (the [`Rejoin`] dropped). Each call has a deadline of
//! [`ASK_WITHIN`].
//!
//! The answering side ([`answer`]) reads the group's vote from its Raft's
//! metrics: the term and the node this peer voted for or follows, which
//! only grows; and the voters of the newest membership in its log, with
//! their addresses.

use super::wire::{TermAsk, TermReply};
use super::{GroupId, Peers, RAFT_TERMS_METHOD};
use crate::rejoin::Rejoin;
use crate::types::{NodeId, PartitionRaft};
use bytes::Bytes;
use openraft::BasicNode;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How long one ask waits for its answer.
pub const ASK_WITHIN: Duration = Duration::from_secs(1);

/// How soon the peers that have not answered are asked again, at first.
pub const ASK_EVERY: Duration = Duration::from_millis(250);

/// How long the peers that have not answered are asked every
/// [`ASK_EVERY`].
pub const ASK_OFTEN_FOR: Duration = Duration::from_secs(10);

/// How soon a peer still silent after [`ASK_OFTEN_FOR`] is asked again.
pub const ASK_EVERY_LATER: Duration = Duration::from_secs(1);

/// The other replicas of a group, as the cluster file names them, and the
/// clients to ask them through.
#[derive(Clone)]
pub struct Asking {
    /// This node's clients of its peers.
    pub peers: Arc<Peers>,
    /// This replica.
    pub me: NodeId,
    /// Every other replica of the group and its RPC address.
    pub others: Vec<(NodeId, String)>,
}

impl Asking {
    /// The replicas of `members` other than `me`, asked through `peers`.
    pub fn of(peers: &Arc<Peers>, me: NodeId, members: &BTreeMap<NodeId, BasicNode>) -> Asking {
        Asking {
            peers: Arc::clone(peers),
            me,
            others: members
                .iter()
                .filter(|(id, _)| **id != me)
                .map(|(id, node)| (*id, node.addr.clone()))
                .collect(),
        }
    }
}

/// Start learning `rejoin`'s floor in `group` from `asking` on the current
/// runtime ([`learn_floor`]).
pub fn start_learning(rejoin: &Arc<Rejoin>, group: GroupId, asking: Asking) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(learn_floor(Arc::downgrade(rejoin), group, asking));
        }
        Err(e) => tracing::error!(
            group,
            "a replica that started empty cannot ask its peers' terms (no runtime: {e}); \
             it takes no message"
        ),
    }
}

/// Ask each of `asking`'s replicas not heard from yet for its vote in
/// `group`, until every one has been heard from; the voters an answer
/// names that `asking` lacks are asked too.
pub async fn learn_floor(rejoin: Weak<Rejoin>, group: GroupId, mut asking: Asking) {
    let started = tokio::time::Instant::now();
    let mut warned = false;
    loop {
        let Some(unheard) = still_learning(&rejoin) else {
            return;
        };
        let missing: Vec<(NodeId, String)> = asking
            .others
            .iter()
            .filter(|(id, _)| unheard.contains(id))
            .cloned()
            .collect();
        let asks = missing
            .iter()
            .map(|(id, addr)| ask_vote(&asking.peers, *id, addr, group));
        let answers = futures::future::join_all(asks).await;
        let Some(r) = rejoin.upgrade() else {
            return;
        };
        // Every answer's voters before any answer's vote: the floor is
        // never set while a voter named in this round is still unknown.
        let named = answers.iter().flatten().flat_map(|a| a.voters.iter());
        r.expect(asking.add(named));
        for ((id, _), answer) in missing.iter().zip(answers) {
            if let Some(vote) = answer.and_then(|a| a.vote) {
                r.heard(*id, vote);
            }
        }
        let waited = started.elapsed();
        let pause = if waited < ASK_OFTEN_FOR {
            ASK_EVERY
        } else {
            ASK_EVERY_LATER
        };
        if waited >= ASK_OFTEN_FOR && !warned {
            warned = true;
            let unheard = r.unheard();
            if !unheard.is_empty() {
                tracing::warn!(
                    group,
                    ?unheard,
                    "replica that started empty (a new or wiped node) still waits for these peers' votes; it takes no message of its group until they answer"
                );
            }
        }
        drop(r);
        tokio::time::sleep(pause).await;
    }
}

/// The peers still to hear from, while the replica is hosted, abstaining
/// and without a floor.
fn still_learning(rejoin: &Weak<Rejoin>) -> Option<Vec<NodeId>> {
    let r = rejoin.upgrade()?;
    (r.abstaining() && r.floor().is_none()).then(|| r.unheard())
}

impl Asking {
    /// Ask `voters` too, those not asked yet and other than this replica;
    /// their ids.
    fn add<'a>(&mut self, voters: impl Iterator<Item = &'a (NodeId, String)>) -> Vec<NodeId> {
        let mut added = Vec::new();
        for (id, addr) in voters {
            if *id != self.me && !self.others.iter().any(|(o, _)| o == id) {
                self.others.push((*id, addr.clone()));
                added.push(*id);
            }
        }
        added
    }
}

/// Node `id`'s answer about `group` (its vote, the voters it knows);
/// `None` if it did not answer.
async fn ask_vote(peers: &Peers, id: NodeId, addr: &str, group: GroupId) -> Option<TermReply> {
    let args = TermAsk::new(group).encode().ok()?;
    match peers
        .ask(id, addr, RAFT_TERMS_METHOD, Bytes::from(args), ASK_WITHIN)
        .await
    {
        Ok(payload) => match TermReply::decode(&payload) {
            Ok(reply) => Some(reply),
            Err(e) => {
                tracing::debug!(group, peer = id, "undecodable vote answer: {e}");
                None
            }
        },
        Err(e) => {
            tracing::debug!(group, peer = id, "asking a peer's vote: {e}");
            None
        }
    }
}

/// `raft`'s vote and voters, which a [`TermAsk`] is answered with.
pub fn answer(raft: Option<&PartitionRaft>) -> TermReply {
    let Some(raft) = raft else {
        return TermReply::new(None, Vec::new());
    };
    let m = raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters = membership
        .voter_ids()
        .map(|id| {
            let addr = membership.get_node(&id).map(|n| n.addr.clone());
            (id, addr.unwrap_or_default())
        })
        .collect();
    TermReply::new(Some(*m.vote.leader_id()), voters)
}
