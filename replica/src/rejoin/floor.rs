//! The floor of a replica that started empty: the highest vote among its
//! group's other replicas, once every one of them is heard from
//! ([`crate::rejoin`] says why it needs one).
//!
//! A vote here is openraft's `LeaderId`: the term and the candidate (or
//! leader) it is for. In openraft's default mode these are ordered by
//! term, then node id, and a term may have several leaders in that order;
//! so the floor compares whole `LeaderId`s, not terms alone.
//!
//! What counts as hearing from a peer: its answer to a
//! [`crate::net::RAFT_TERMS_METHOD`] call this replica sent after it
//! started: the peer's vote as it stood then, so at least every vote it
//! had before. (Not the vote a message of the peer carries: a call made
//! before the wipe, still trying to connect, could arrive after the
//! restart with a vote older than one this replica cast.) For each peer
//! the highest heard is kept; the floor is set, once, when every peer has
//! been heard from, and does not change after.
//!
//! Which peers: those the cluster file names for the group, and every
//! voter a peer's answer names that the file does not ([`Floor::expect`]).
//! The file can lag the group: a membership change cut short before its
//! new map was written leaves voters in the group that the file does not
//! name yet, and such a voter may have elected a leader with this
//! replica's vote. A replica that took part in that change (a voter of
//! the old configuration, or of the new) holds the change in its log, and
//! the replica waits for every voter the file names, so at least one
//! answer names the new voter before the floor is set (the change was
//! accepted by a quorum of each configuration; this replica's copy is
//! gone, so another voter of each had it).

use crate::types::NodeId;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// A vote: a term and the node it is for.
pub type Leader = openraft::LeaderId<NodeId>;

/// What a replica that started empty has heard of its peers' votes.
#[derive(Debug)]
pub struct Floor {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The group's other replicas: as the cluster file names them, and
    /// the voters the answers named.
    others: BTreeSet<NodeId>,
    /// The highest vote heard from each peer.
    heard: BTreeMap<NodeId, Leader>,
    /// Set once every peer has been heard from.
    floor: Option<Leader>,
}

impl Floor {
    /// A floor over `others` (with none, it is known at once: the lowest).
    pub fn new(others: impl IntoIterator<Item = NodeId>) -> Floor {
        let others: BTreeSet<NodeId> = others.into_iter().collect();
        let state = State {
            floor: others.is_empty().then(Leader::default),
            others,
            heard: BTreeMap::new(),
        };
        Floor {
            state: Mutex::new(state),
        }
    }

    /// Wait for `peers` too (voters a peer's answer named), while the
    /// floor is not set. The caller notes every answer's voters before
    /// its vote, so the floor is never set between the two.
    pub fn expect(&self, peers: impl IntoIterator<Item = NodeId>) {
        let mut state = self.lock();
        if state.floor.is_some() {
            return;
        }
        for peer in peers {
            if state.others.insert(peer) {
                tracing::info!(
                    peer,
                    "replica that started empty waits for the vote of a voter the cluster file does not name"
                );
            }
        }
    }

    /// Note that `peer`'s vote is `vote` (or was, lately). Votes of nodes
    /// that are not among the peers, or heard once the floor is set,
    /// change nothing.
    pub fn heard(&self, peer: NodeId, vote: Leader) {
        let mut state = self.lock();
        if !state.others.contains(&peer) || state.floor.is_some() {
            return;
        }
        let higher = state.heard.get(&peer).is_none_or(|h| above(&vote, h));
        if higher {
            state.heard.insert(peer, vote);
        }
        if state.heard.len() == state.others.len() {
            let floor = state
                .heard
                .values()
                .copied()
                .reduce(|a, b| if above(&b, &a) { b } else { a })
                .unwrap_or_default();
            state.floor = Some(floor);
            tracing::info!(%floor, "replica that started empty heard every peer's vote");
        }
    }

    /// The peers not heard from yet.
    pub fn unheard(&self) -> Vec<NodeId> {
        let state = self.lock();
        state
            .others
            .iter()
            .filter(|p| !state.heard.contains_key(p))
            .copied()
            .collect()
    }

    /// The floor, once set.
    pub fn get(&self) -> Option<Leader> {
        self.lock().floor
    }

    /// Whether the floor is set and `leader` is not below it.
    pub fn admits(&self, leader: &Leader) -> bool {
        self.get().is_some_and(|f| !above(&f, leader))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether `a` is above `b` (two votes openraft cannot order count as
/// not above: then neither is taken over the other).
fn above(a: &Leader, b: &Leader) -> bool {
    matches!(a.partial_cmp(b), Some(Ordering::Greater))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(term: u64, node: NodeId) -> Leader {
        Leader::new(term, node)
    }

    #[test]
    fn the_floor_is_the_highest_vote_once_every_peer_is_heard() {
        let f = Floor::new([2, 3]);
        f.heard(2, vote(4, 2));
        f.heard(9, vote(50, 9));
        assert_eq!(f.get(), None, "a node that is no peer counts for nothing");
        assert_eq!(f.unheard(), vec![3]);
        assert!(!f.admits(&vote(99, 2)));
        f.heard(2, vote(3, 1));
        f.heard(3, vote(4, 3));
        assert_eq!(f.get(), Some(vote(4, 3)), "term, then node id");
        f.heard(3, vote(8, 3));
        assert_eq!(f.get(), Some(vote(4, 3)), "set once");
        assert!(f.admits(&vote(4, 3)));
        assert!(f.admits(&vote(5, 1)));
        assert!(!f.admits(&vote(4, 2)), "an older leader of the same term");
        assert!(!f.admits(&vote(3, 9)));
    }

    #[test]
    fn a_voter_an_answer_names_is_waited_for_too() {
        let f = Floor::new([2]);
        // Node 2's answer names voter 4, which the file does not.
        f.expect([4]);
        f.heard(2, vote(3, 2));
        assert_eq!(f.get(), None, "node 4 not heard yet");
        assert_eq!(f.unheard(), vec![4]);
        f.heard(4, vote(5, 4));
        assert_eq!(f.get(), Some(vote(5, 4)), "node 4's vote is the highest");
        f.expect([6]);
        assert_eq!(
            f.unheard(),
            Vec::<NodeId>::new(),
            "set: nothing more is waited for"
        );
    }

    #[test]
    fn a_group_of_one_has_its_floor_at_once() {
        let f = Floor::new([]);
        assert_eq!(f.get(), Some(Leader::default()));
        assert!(f.admits(&vote(1, 1)));
    }
}
