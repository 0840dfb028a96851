//! A replica that starts with an empty log and no vote abstains from
//! elections until it has caught up with a leader.
//!
//! Why: a replica whose disk was wiped comes back empty, under its old id,
//! and still a voter. It has forgotten the entries it acknowledged (some
//! of them committed with its acknowledgement, so they may now rest on one
//! other replica only) and the vote it cast. Were it to vote at once, it
//! would grant its vote to any candidate (an empty log is never more up to
//! date than a candidate's), so a lagging replica could be elected without
//! those committed entries, and the leader's next appends would overwrite
//! them on the one replica that still had them. So an empty replica
//! answers vote requests itself, refusing, until:
//!
//! - a leader's append carried a commit index of the leader's own term
//!   (once a leader has committed an entry of its term, its commit index
//!   covers every entry committed before: Raft's leader completeness), and
//! - this replica has applied up to that index (from the log or from a
//!   snapshot), so its log is as complete as any committed history.
//!
//! It also ends when the replica itself is elected leader (a leader's
//! log holds every committed entry: it needs nothing more), which is how a
//! new group's first leader, empty when it started, stops abstaining; no
//! leader appends to it. From then on it votes as any replica does, and
//! `laneway cluster status` shows the replica as abstaining until then.
//! Until then the group needs
//! its two other replicas to elect a leader; if one of them is down too,
//! the group waits for it rather than risk losing what it committed.
//!
//! A new group's members are empty too. Their first election is told
//! apart by the candidate's log: a group's first entry (the membership
//! that `initialize` writes) is at index 0, so a candidate whose log ends
//! there has nothing a wiped replica could have acknowledged, and its
//! request is handed to the group as usual.
//!
//! A replica that lost its disk has also forgotten the votes it cast and
//! the leaders it acknowledged. Left at term 0, it would take the appends
//! of a leader deposed by a newer election it had voted in, if that
//! leader had not heard of the newer one yet (cut off from the new leader,
//! not from it): it could catch up with that leader, count in its quorum
//! beside the one replica still following it, and commit over entries the
//! newer leader committed with its acknowledgement before the wipe; or it
//! could vote again below a vote it had cast. So before it takes any
//! append or snapshot chunk it hears from each other replica of its group
//! (as the cluster file names them, and every voter their answers name
//! that the file does not: [`floor`]) what its vote is, by asking it
//! ([`crate::net::terms`]). The
//! highest of those votes is its floor ([`floor`]): while it abstains it
//! takes no message of a leader below the floor, and grants no vote below
//! it (a new group's first election included). Every vote it cast or
//! leader it acknowledged before the wipe is within the floor: it went to
//! a candidate or leader among the other replicas, whose vote has been at
//! least that since (votes only grow; its own candidacy that no other
//! replica heard elected nobody). Until every other replica has been
//! heard from, it takes nothing, so with one of them down and silent its
//! group waits (a group that lost two replicas' state has nothing safe to
//! elect from). Once it has caught up, its Raft's own vote (a leader's, at
//! least the floor) refuses older ones as for any replica.

pub mod floor;

use crate::types::{NodeId, PartitionRaft, TypeConfig};
use floor::{Floor, Leader};
use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, VoteRequest, VoteResponse};
use openraft::{BasicNode, RaftMetrics, ServerState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a replica that started empty may vote yet.
#[derive(Debug)]
pub struct Rejoin {
    /// Still refusing votes.
    abstaining: AtomicBool,
    /// The commit index (of a leader's own term) to apply before voting,
    /// once an append said it.
    until: Mutex<Option<u64>>,
    /// What it has heard of its peers' votes: no message of a leader
    /// below their highest is taken while abstaining.
    floor: Floor,
}

impl Rejoin {
    /// A replica that started empty, in a group whose other replicas are
    /// `others`: abstaining.
    pub fn new(others: impl IntoIterator<Item = NodeId>) -> Rejoin {
        Rejoin {
            abstaining: AtomicBool::new(true),
            until: Mutex::new(None),
            floor: Floor::new(others),
        }
    }

    /// Note that peer `from` answered that its vote is `vote`
    /// ([`Floor::heard`]).
    pub fn heard(&self, from: NodeId, vote: Leader) {
        if self.abstaining() {
            self.floor.heard(from, vote);
        }
    }

    /// Wait for the votes of `peers` too ([`Floor::expect`]).
    pub fn expect(&self, peers: impl IntoIterator<Item = NodeId>) {
        if self.abstaining() {
            self.floor.expect(peers);
        }
    }

    /// The peers not heard from yet.
    pub fn unheard(&self) -> Vec<NodeId> {
        self.floor.unheard()
    }

    /// The floor, once every peer was heard from.
    pub fn floor(&self) -> Option<Leader> {
        self.floor.get()
    }

    /// Whether a message (append or snapshot chunk) of `leader` may reach
    /// the group: always once caught up; while abstaining, only when the
    /// floor is known and `leader` is not below it.
    pub fn admits(&self, leader: &Leader) -> bool {
        !self.abstaining() || self.floor.admits(leader)
    }

    /// Whether it still refuses votes.
    pub fn abstaining(&self) -> bool {
        self.abstaining.load(Ordering::Acquire)
    }

    /// Note an append from a leader: the first that carries a commit index
    /// of the leader's own term sets what must be applied before voting.
    pub fn saw_append(&self, req: &AppendEntriesRequest<TypeConfig>) {
        if !self.abstaining() {
            return;
        }
        let Some(commit) = req.leader_commit else {
            return;
        };
        if commit.leader_id.term != req.vote.leader_id().term {
            return;
        }
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        if until.is_none() {
            *until = Some(commit.index);
        }
    }

    /// End the abstention if this replica, having applied up to
    /// `applied`, has caught up; whether it still abstains.
    pub fn update(&self, applied: Option<u64>) -> bool {
        if !self.abstaining() {
            return false;
        }
        let caught_up = {
            let until = self.until.lock().unwrap_or_else(|p| p.into_inner());
            until.is_some_and(|u| applied.is_some_and(|a| a >= u))
        };
        if caught_up {
            self.abstaining.store(false, Ordering::Release);
            tracing::info!("replica that started empty caught up: it votes again");
        }
        !caught_up
    }

    /// End the abstention if this replica, as `m` shows it, leads its
    /// group or has caught up; whether it still abstains.
    pub fn settle(&self, m: &RaftMetrics<NodeId, BasicNode>) -> bool {
        if m.state == ServerState::Leader && self.abstaining() {
            self.abstaining.store(false, Ordering::Release);
            tracing::info!("replica that started empty was elected leader: it votes again");
            return false;
        }
        self.update(m.last_applied.map(|l| l.index))
    }

    /// Whether `req` may be handed to the group, this replica as `m`
    /// shows it.
    pub fn may_vote(&self, req: &VoteRequest<NodeId>, m: &RaftMetrics<NodeId, BasicNode>) -> bool {
        self.may_vote_for(req.vote.leader_id(), req.last_log_id.map(|l| l.index), m)
    }

    /// Whether a vote for `candidate`, whose log ends at `last_index`,
    /// may be handed to the group ([`Rejoin::may_vote`]; a pre-vote asks
    /// it too, `crate::net::prevote`).
    pub fn may_vote_for(
        &self,
        candidate: &Leader,
        last_index: Option<u64>,
        m: &RaftMetrics<NodeId, BasicNode>,
    ) -> bool {
        if !self.settle(m) {
            return true;
        }
        // Else only a new group's first election (nothing to have
        // forgotten), for a candidate not below any vote the replica may
        // have cast.
        let first = last_index.is_none_or(|i| i == 0);
        first && self.floor.admits(candidate)
    }
}

/// Answer `req` for `raft`, through `rejoin` if the replica started empty:
/// a refusal, carrying this replica's own vote, while it abstains.
pub async fn vote(
    raft: &PartitionRaft,
    rejoin: Option<&Rejoin>,
    req: VoteRequest<NodeId>,
) -> Result<VoteResponse<NodeId>, RaftError<NodeId>> {
    if let Some(rejoin) = rejoin {
        let m = raft.metrics().borrow().clone();
        if rejoin.may_vote(&req, &m) {
            return raft.vote(req).await;
        }
        tracing::debug!(candidate = %req.vote, "vote refused: this replica started empty and has not caught up");
        return Ok(VoteResponse {
            vote: m.vote,
            vote_granted: false,
            last_log_id: None,
        });
    }
    raft.vote(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId, Vote};

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn append(term: u64, commit: Option<LogId<NodeId>>) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(term, 1),
            prev_log_id: None,
            entries: Vec::new(),
            leader_commit: commit,
        }
    }

    fn candidate(last: Option<LogId<NodeId>>) -> VoteRequest<NodeId> {
        VoteRequest::new(Vote::new(9, 2), last)
    }

    /// A follower's metrics, having applied up to `applied`.
    fn at(applied: Option<u64>) -> RaftMetrics<NodeId, BasicNode> {
        let mut m = RaftMetrics::new_initial(1);
        m.last_applied = applied.map(|i| log_id(1, i));
        m
    }

    /// A replica that started empty in a group with nodes 2 and 3.
    fn empty() -> Rejoin {
        Rejoin::new([2, 3])
    }

    fn vote(term: u64, node: NodeId) -> Leader {
        Leader::new(term, node)
    }

    #[test]
    fn an_empty_replica_elected_leader_votes_again() {
        let r = empty();
        assert!(r.settle(&at(None)));
        let mut m = at(Some(0));
        m.state = ServerState::Leader;
        assert!(!r.settle(&m), "a leader no longer abstains");
        assert!(r.may_vote(&candidate(Some(log_id(3, 40))), &at(Some(0))));
    }

    #[test]
    fn an_empty_replica_votes_in_a_new_group_s_first_election_only() {
        let r = empty();
        // Not before it heard its peers' votes.
        r.heard(2, vote(9, 2));
        assert!(!r.may_vote(&candidate(None), &at(None)));
        r.heard(3, vote(0, 0));
        assert!(r.may_vote(&candidate(None), &at(None)));
        assert!(r.may_vote(&candidate(Some(log_id(0, 0))), &at(None)));
        assert!(!r.may_vote(&candidate(Some(log_id(3, 40))), &at(None)));
        assert!(r.abstaining());
    }

    #[test]
    fn an_empty_replica_votes_for_no_candidate_below_its_peers_votes() {
        let r = empty();
        r.heard(2, vote(9, 2));
        r.heard(3, vote(9, 3));
        // Node 3 stood in term 9 after node 2: this replica may have
        // voted for it.
        assert!(!r.may_vote(&candidate(None), &at(None)));
        let again = VoteRequest::new(Vote::new(9, 3), None);
        assert!(r.may_vote(&again, &at(None)), "the highest vote itself");
        let later = VoteRequest::new(Vote::new(10, 2), None);
        assert!(r.may_vote(&later, &at(None)));
    }

    #[test]
    fn an_empty_replica_takes_no_message_of_a_leader_below_its_peers_votes() {
        let r = empty();
        assert!(!r.admits(&vote(7, 2)), "nothing before its peers are heard");
        r.heard(2, vote(7, 2));
        r.heard(3, vote(6, 3));
        assert!(!r.admits(&vote(6, 3)), "a deposed leader");
        assert!(!r.admits(&vote(7, 1)), "an older leader of the same term");
        assert!(r.admits(&vote(7, 2)));
        assert!(r.admits(&vote(8, 3)));
        // Caught up, its Raft's own vote judges.
        r.saw_append(&append(7, Some(log_id(7, 3))));
        assert!(!r.update(Some(3)));
        assert!(r.admits(&vote(1, 1)));
    }

    #[test]
    fn it_votes_again_once_it_applied_a_commit_of_a_leader_s_own_term() {
        let r = empty();
        // A commit index of an older term says nothing of what committed.
        r.saw_append(&append(5, Some(log_id(4, 30))));
        assert!(!r.may_vote(&candidate(Some(log_id(5, 50))), &at(Some(30))));
        r.saw_append(&append(5, Some(log_id(5, 42))));
        // A later append does not move the mark.
        r.saw_append(&append(5, Some(log_id(5, 60))));
        assert!(!r.may_vote(&candidate(Some(log_id(5, 50))), &at(Some(41))));
        assert!(r.abstaining());
        assert!(r.may_vote(&candidate(Some(log_id(5, 50))), &at(Some(42))));
        assert!(!r.abstaining());
        assert!(r.may_vote(&candidate(Some(log_id(6, 70))), &at(None)));
    }
}
