//! Elections only when a majority has lost its leader: a replica asks its
//! group's voters whether they would vote for it before it campaigns
//! (the pre-vote of the Raft dissertation, section 9.6).
//!
//! Why. openraft 0.9 has no pre-vote. A follower that stops hearing its
//! leader for an election timeout campaigns at once, in a new term, and
//! that term deposes the leader wherever it is seen: a live leader reads
//! it in the follower's answer to its next append and steps down, and a
//! leader whose group has been idle even grants the vote (openraft keeps
//! a leader's own lease from its election, not from its heartbeats), so
//! the candidate takes the group over. A node that was only paused (a
//! SIGSTOP, a stalled VM, a swap storm) hears no leader for the length of
//! the pause, and its timers all fire before it reads the heartbeats
//! waiting in its sockets: measured before this module, a follower-only
//! node stopped for 6 s and continued took the leadership of all 8
//! partitions from the node that led them, every time, and under writes
//! every group it followed lost its leader for an election.
//!
//! So groups on a node with a [`super::HeartbeatTicker`] run with
//! openraft's own elections off ([`super::ticked_config`]), and
//! [`campaign`] holds them instead: a voter that has heard no leader for
//! its timeout ([`timeout`], at least the leader lease, randomised per
//! attempt) asks every other voter of its membership with one
//! [`super::RAFT_PREVOTE_METHOD`] call ([`PreVoteAsk`]) whether it would
//! vote for it in the next term, and triggers openraft's election only
//! when a majority of every voter set (both halves of a joint one) says
//! yes, itself counted. Nothing is persisted and no term moves before
//! that, so a replica that cannot win, or whose peers still hear a
//! leader, disturbs nobody.
//!
//! A voter says yes ([`judge`]) when it does not lead the group, has
//! taken no append or snapshot chunk of a current leader (one it answered
//! without a higher vote of its own, [`RaftService::unled_for`]) for the
//! leader lease (`election_timeout_max`, the time openraft's own vote
//! handler refuses votes after a leader's message), the candidate's log
//! is not behind its own (term of the last entry, then index: so of two
//! replicas that lost their leader only one with the longest log passes,
//! and the two do not split the vote round after round, one refusing the
//! other's log and the other its term, as they did without it), and, for
//! a replica that started empty, its abstention would let it vote for
//! that candidate ([`crate::rejoin`]). Terms are left to the real vote
//! ([`judge`] says why). A leader deposed without knowing it, whose appends still reach a
//! replica but whose answers do not reach it, does not count: it would
//! otherwise keep that replica saying no to every candidate.
//!
//! Safety stays openraft's: the gate only decides when `elect()` is
//! called, and refusing or delaying a campaign can never elect two
//! leaders. What it can cost is liveness, so a peer that answers with an
//! error because it does not know the method (a node of an older build,
//! mid-upgrade: the store's own calls refuse it as undecodable) counts
//! as a yes, as it would have voted without being asked; a peer that
//! does not answer counts as a no, as it could not have voted either.

use super::wire::{PreVoteAsk, PreVoteReply};
use super::{GroupId, Peers, RAFT_PREVOTE_METHOD, RaftService};
use crate::types::{NodeId, PartitionRaft};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use laneway_store::rpc::{RpcError, WireCode};
use openraft::ServerState;
use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

/// How often [`campaign`] looks at every group.
pub const LOOK_EVERY: Duration = Duration::from_millis(50);

/// How long one ask waits for its answer.
pub const ASK_WITHIN: Duration = Duration::from_millis(500);

/// What a voter knows when it judges an ask.
#[derive(Clone, Copy, Debug)]
pub struct Judged {
    /// It leads the group.
    pub leads: bool,
    /// Since it last took a current leader's append or snapshot chunk
    /// ([`RaftService::unled_for`]).
    pub unheard_for: Duration,
    /// Its leader lease: openraft refuses votes this long after a
    /// leader's message (`election_timeout_max`).
    pub lease: Duration,
    /// The candidate's last log entry is below its own (Raft's
    /// comparison: term, then index).
    pub log_behind: bool,
    /// Whether a replica that started empty would vote for the candidate
    /// (always true for any other).
    pub rejoin_allows: bool,
}

/// Whether a voter that knows `j` would vote for the candidate: not
/// while it leads, nor while it heard a leader within its lease, nor for
/// a log behind its own, nor while its abstention refuses. The terms are
/// left to the real vote: one refused for its term brings the candidate
/// the voter's, and its next attempt is above it (were the pre-vote to
/// refuse a lower term, a candidate with the longest log but a lower term
/// than the others would never learn theirs, and nobody could be elected).
pub fn judge(j: Judged) -> bool {
    !j.leads && j.unheard_for >= j.lease && !j.log_behind && j.rejoin_allows
}

/// How long a voter that heard no leader waits before it asks: the lease
/// (`election_timeout_max`) plus a random share of the election timeout's
/// spread (`election_timeout_max - election_timeout_min`), drawn afresh
/// for every attempt, so the voters of a group that lost its leader seldom
/// ask at the same moment and split the vote.
pub fn timeout(config: &openraft::Config, draw: u64) -> Duration {
    let spread = config
        .election_timeout_max
        .saturating_sub(config.election_timeout_min)
        .max(1);
    Duration::from_millis(config.election_timeout_max + draw % spread)
}

/// A fresh random number (std's hasher keys are random per instance).
fn draw() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0u8)
}

/// Whether `granted` holds a majority of every set in `configs`.
pub fn majority_of_each(configs: &[BTreeSet<NodeId>], granted: &BTreeSet<NodeId>) -> bool {
    !configs.is_empty()
        && configs
            .iter()
            .all(|c| c.iter().filter(|id| granted.contains(id)).count() * 2 > c.len())
}

/// One group's state in [`campaign`].
struct Attempts {
    /// When the last attempt began (none since it last led or heard).
    last: Option<Instant>,
    /// The wait drawn for the next one.
    wait: Duration,
    /// An attempt is still asking.
    asking: Arc<AtomicBool>,
}

/// Until `stop` changes, every [`LOOK_EVERY`] try an election for each
/// group of `service` whose replica here is a voter without a leader to
/// hear ([`judge`]'s counterpart on the asking side), through `peers`.
pub async fn campaign(
    service: Arc<RaftService>,
    peers: Arc<Peers>,
    mut stop: watch::Receiver<bool>,
) {
    let mut looks = tokio::time::interval(LOOK_EVERY);
    looks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut groups: HashMap<GroupId, Attempts> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = looks.tick() => {}
        }
        let hosted = service.all();
        groups.retain(|g, _| hosted.iter().any(|(h, _)| h == g));
        for (group, raft) in hosted {
            let Some(unheard) = service.unled_for(group) else {
                continue;
            };
            let a = groups.entry(group).or_insert_with(|| Attempts {
                last: None,
                wait: timeout(raft.config(), draw()),
                asking: Arc::new(AtomicBool::new(false)),
            });
            if let Some(ask) = due(&raft, a, unheard) {
                a.last = Some(Instant::now());
                a.wait = timeout(raft.config(), draw());
                a.asking.store(true, Ordering::Release);
                let asking = Arc::clone(&a.asking);
                let peers = Arc::clone(&peers);
                tokio::spawn(async move {
                    attempt(group, raft, ask, &peers).await;
                    asking.store(false, Ordering::Release);
                });
            }
        }
    }
}

/// What to ask, if group `raft`'s replica here should try an election:
/// a voter that does not lead, has heard no leader for `a.wait`, made no
/// attempt for as long, and is not still asking. The only voter of its
/// group has nobody to hear or ask, and campaigns at once.
fn due(raft: &PartitionRaft, a: &mut Attempts, unheard: Duration) -> Option<Asked> {
    let m = raft.metrics();
    let m = m.borrow();
    let membership = m.membership_config.membership();
    let voter = membership.voter_ids().any(|id| id == m.id);
    let alone = membership.voter_ids().all(|id| id == m.id);
    if m.state == ServerState::Leader || !voter || (!alone && unheard < a.wait) {
        a.last = None;
        return None;
    }
    let waiting = !alone && a.last.is_some_and(|t| t.elapsed() < a.wait);
    if a.asking.load(Ordering::Acquire) || waiting {
        return None;
    }
    let configs: Vec<BTreeSet<NodeId>> = membership.get_joint_config().to_vec();
    let others = membership
        .voter_ids()
        .filter(|id| *id != m.id)
        .map(|id| {
            let addr = membership.get_node(&id).map(|n| n.addr.clone());
            (id, addr.unwrap_or_default())
        })
        .collect();
    Some(Asked {
        me: m.id,
        vote: m.vote,
        term: m.vote.leader_id().term + 1,
        last_log: raft.data_metrics().borrow().last_log,
        configs,
        others,
    })
}

/// One attempt's question and whom to ask.
struct Asked {
    me: NodeId,
    /// Its vote when it asked.
    vote: openraft::Vote<NodeId>,
    /// The term the election would be in.
    term: u64,
    last_log: Option<openraft::LogId<NodeId>>,
    configs: Vec<BTreeSet<NodeId>>,
    others: Vec<(NodeId, String)>,
}

/// Ask `asked.others` for `group`; trigger the election if a majority
/// of each voter set would vote for this replica, as soon as it has one
/// (a peer that is down answers nothing, and waiting out its deadline
/// would let the other replicas' elections run meanwhile), and only if
/// the replica's vote is still the one it asked with: a leader elected
/// while it asked would be deposed by a campaign on the answers from
/// before (measured: with one of three nodes stopped, the two others took
/// turns deposing each other's new leaders for 20 s).
async fn attempt(group: GroupId, raft: PartitionRaft, asked: Asked, peers: &Peers) {
    let ask = PreVoteAsk::new(group, asked.me, asked.term, asked.last_log);
    let Ok(args) = ask.encode() else {
        return;
    };
    let args = Bytes::from(args);
    let mut answers: FuturesUnordered<_> = asked
        .others
        .iter()
        .map(|(id, addr)| {
            let answer = ask_one(peers, *id, addr, args.clone(), group);
            async move { (*id, answer.await) }
        })
        .collect();
    let mut granted: BTreeSet<NodeId> = [asked.me].into();
    while !majority_of_each(&asked.configs, &granted) {
        match answers.next().await {
            Some((id, true)) => {
                granted.insert(id);
            }
            Some((_, false)) => {}
            None => {
                tracing::debug!(
                    group,
                    term = asked.term,
                    ?granted,
                    "no election: a majority still hears a leader or did not answer"
                );
                return;
            }
        }
    }
    drop(answers);
    if raft.metrics().borrow().vote != asked.vote {
        tracing::debug!(
            group,
            "no election: the vote changed while the peers were asked"
        );
        return;
    }
    tracing::info!(
        group,
        term = asked.term,
        "no leader heard by a majority: campaigning"
    );
    if let Err(e) = raft.trigger().elect().await {
        tracing::debug!(group, error = %e, "election of a stopped group");
    }
}

/// Node `id`'s answer about `group`: whether it would vote; a node of a
/// build without the method counts as yes, one that does not answer as
/// no.
async fn ask_one(peers: &Peers, id: NodeId, addr: &str, args: Bytes, group: GroupId) -> bool {
    match peers
        .ask(id, addr, RAFT_PREVOTE_METHOD, args, ASK_WITHIN)
        .await
    {
        Ok(payload) => match PreVoteReply::decode(&payload) {
            Ok(reply) => reply.granted,
            Err(e) => {
                tracing::debug!(group, peer = id, "undecodable pre-vote answer: {e}");
                false
            }
        },
        // A build without the method sends it to the store's own calls,
        // which refuse it as a call they cannot decode.
        Err(RpcError::Remote(e)) if e.code == WireCode::BadCall => true,
        Err(e) => {
            tracing::debug!(group, peer = id, "asking a peer's pre-vote: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follower(unheard_ms: u64) -> Judged {
        Judged {
            leads: false,
            unheard_for: Duration::from_millis(unheard_ms),
            lease: Duration::from_millis(1300),
            log_behind: false,
            rejoin_allows: true,
        }
    }

    #[test]
    fn a_voter_says_yes_only_without_a_leader_to_hear() {
        assert!(judge(follower(1300)));
        assert!(!judge(follower(1299)), "heard a leader within its lease");
        assert!(
            !judge(Judged {
                log_behind: true,
                ..follower(5000)
            }),
            "a log behind its own"
        );
        assert!(
            !judge(Judged {
                leads: true,
                ..follower(5000)
            }),
            "it leads"
        );
        assert!(
            !judge(Judged {
                rejoin_allows: false,
                ..follower(5000)
            }),
            "a replica that started empty and abstains"
        );
    }

    #[test]
    fn the_wait_is_at_least_the_lease_and_below_lease_plus_spread() {
        let config = crate::net::group_config("g").expect("config");
        for d in [0, 1, 649, 650, 651, u64::MAX] {
            let t = timeout(&config, d);
            assert!(
                t >= Duration::from_millis(1300) && t < Duration::from_millis(1950),
                "{t:?}"
            );
        }
        let waits: BTreeSet<Duration> = (0..64).map(|_| timeout(&config, draw())).collect();
        assert!(waits.len() > 8, "draws vary: {waits:?}");
    }

    #[test]
    fn a_majority_of_every_voter_set_is_needed() {
        let set = |ids: &[NodeId]| ids.iter().copied().collect::<BTreeSet<_>>();
        let one = vec![set(&[1, 2, 3])];
        assert!(majority_of_each(&one, &set(&[1, 2])));
        assert!(!majority_of_each(&one, &set(&[1])));
        assert!(
            majority_of_each(&[set(&[1])], &set(&[1])),
            "a single voter elects itself"
        );
        let joint = vec![set(&[1, 2, 3]), set(&[3, 4, 5])];
        assert!(
            !majority_of_each(&joint, &set(&[1, 2, 3])),
            "the new half lacks a majority"
        );
        assert!(majority_of_each(&joint, &set(&[1, 3, 4])));
        assert!(!majority_of_each(&[], &set(&[1])));
    }
}
