//! The receiving side: [`RaftService`] answers [`RAFT_METHOD`] calls by
//! handing each message to the Raft of the group it names, and [`Split`]
//! lets one RPC port serve both Raft and the store node's own methods.
//!
//! A message for a group this node does not host (not started yet,
//! stopped, moved away) is answered `Unavailable`, which the sender treats
//! as an unreachable target and backs off from; an undecodable message is
//! `BadCall`. The group's own errors travel inside the reply.
//!
//! A replica that started empty takes no append or snapshot chunk (a lone
//! call is answered `Unavailable`, a batched append `NotHosted`) until it
//! has heard every peer's vote, nor one of a leader below them. A
//! [`RAFT_TERMS_METHOD`] call is answered with this node's vote in the
//! group it names ([`super::terms`], [`crate::rejoin`]), a
//! [`RAFT_PREVOTE_METHOD`] call with whether this replica would vote for
//! the candidate now ([`super::prevote`]).
//!
//! A [`RAFT_BATCH_METHOD`] call carries appends of several groups: each
//! is handed to its group at once (the groups answer concurrently, so a
//! slow one delays only the call's reply, not the others' work), and the
//! reply holds an answer per append, `NotHosted` for a group not hosted
//! here. The reply waits for its slowest append at most
//! [`BATCH_ANSWER_WITHIN`]: a group stuck on this node answers `Late`,
//! and the other groups' answers reach their leaders before the
//! leaders' deadline, so one group cannot stall the replication of every
//! group its leader shares with this node.

use super::batch::MAX_BATCH;
use super::terms::Asking;
use super::wire::{
    BatchAnswer, RaftAnswer, RaftBatch, RaftBatchReply, RaftMsg, RaftReply, RaftRequest,
};
use super::wire::{PreVoteAsk, PreVoteReply, TermAsk};
use super::{
    GroupId, HEARTBEAT_INTERVAL_MS, RAFT_BATCH_METHOD, RAFT_METHOD, RAFT_PREVOTE_METHOD,
    RAFT_TERMS_METHOD,
};
use crate::rejoin::Rejoin;
use crate::rejoin::floor::Leader;
use crate::types::{NodeId, PartitionRaft, TypeConfig};
use bytes::Bytes;
use futures::future::BoxFuture;
use laneway_store::BodyStream;
use laneway_store::rpc::{Handler, Reply, WireCode, WireError};
use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The groups this node hosts, by id, reachable by their peers.
#[derive(Default)]
pub struct RaftService {
    /// Held only to look up, add or remove a handle, never across a call.
    groups: RwLock<BTreeMap<GroupId, Hosted>>,
    counts: Counts,
}

/// A hosted group: its handle, whether it started empty (then it
/// abstains from votes until caught up: [`crate::rejoin`]), when a
/// leader last spoke to it, and when the replica last took a message of
/// a leader not below its own vote.
#[derive(Clone)]
struct Hosted {
    raft: PartitionRaft,
    rejoin: Option<Arc<Rejoin>>,
    heard: Arc<Heard>,
    /// An append or snapshot chunk the group answered without a higher
    /// vote of its own: its leader is current. A leader deposed without
    /// knowing it, which reaches this replica but never hears its
    /// answers, refreshes `heard` and not this, so it cannot keep this
    /// replica from joining an election ([`super::prevote`]).
    led: Arc<Heard>,
}

/// When a leader last sent a hosted group an append (a heartbeat
/// included) or a snapshot chunk, whether or not the replica took it:
/// a replica its group removed hears nothing more ([`RaftService::unheard_for`]).
struct Heard(AtomicU64);

impl Heard {
    /// Heard now (a group counts as heard when it is registered).
    fn now() -> Heard {
        Heard(AtomicU64::new(clock_ms()))
    }

    fn hear(&self) {
        self.0.store(clock_ms(), Ordering::Relaxed);
    }

    fn since(&self) -> Duration {
        Duration::from_millis(clock_ms().saturating_sub(self.0.load(Ordering::Relaxed)))
    }
}

/// Milliseconds on a monotonic clock that starts with the process's
/// first reading.
fn clock_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Messages handed to a group since the service started, by kind, and
/// calls refused (undecodable, unknown method, group not hosted).
#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    appends: AtomicU64,
    votes: AtomicU64,
    snapshot_chunks: AtomicU64,
    refused: AtomicU64,
    batches: AtomicU64,
    largest_batch: AtomicU64,
    batched_with_entries: AtomicU64,
}

/// What a [`RaftService`] has received, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Calls received (lone messages and batches, refused ones included).
    pub calls: u64,
    /// Appends (heartbeats included) handed to a group.
    pub appends: u64,
    /// Vote requests handed to a group.
    pub votes: u64,
    /// Snapshot chunks handed to a group.
    pub snapshot_chunks: u64,
    /// Calls answered with an error before reaching a group.
    pub refused: u64,
    /// Batch calls among those (each counted once; their appends are in
    /// `appends`).
    pub batches: u64,
    /// The most appends one batch call carried.
    pub largest_batch: u64,
    /// Appends carrying entries that arrived in batch calls.
    pub batched_with_entries: u64,
}

impl RaftService {
    /// A service hosting no group yet.
    pub fn new() -> RaftService {
        RaftService::default()
    }

    /// Deliver messages for `group` to `raft` from now on; returns the
    /// handle it replaces, if any.
    pub fn register(&self, group: GroupId, raft: PartitionRaft) -> Option<PartitionRaft> {
        self.host(group, raft, None)
    }

    /// [`RaftService::register`], for a replica that started `empty` (no
    /// log, no vote) with a [`Rejoin`]: it asks the group's other
    /// replicas (`asking`) for their terms, takes no append or snapshot
    /// chunk until all have answered nor one of an older term than theirs,
    /// and answers vote requests through it ([`crate::rejoin`]) until it
    /// has caught up. Returns that [`Rejoin`], for the group's status.
    pub fn register_as(
        &self,
        group: GroupId,
        raft: PartitionRaft,
        empty: bool,
        asking: Asking,
    ) -> Option<Arc<Rejoin>> {
        let others = asking.others.iter().map(|(id, _)| *id);
        let rejoin = empty.then(|| Arc::new(Rejoin::new(others)));
        self.host(group, raft, rejoin.clone());
        if let Some(rejoin) = &rejoin {
            super::terms::start_learning(rejoin, group, asking);
        }
        rejoin
    }

    fn host(
        &self,
        group: GroupId,
        raft: PartitionRaft,
        rejoin: Option<Arc<Rejoin>>,
    ) -> Option<PartitionRaft> {
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        groups
            .insert(
                group,
                Hosted {
                    raft,
                    rejoin,
                    heard: Arc::new(Heard::now()),
                    led: Arc::new(Heard::now()),
                },
            )
            .map(|h| h.raft)
    }

    /// Stop delivering messages for `group`; returns its handle (which the
    /// caller shuts down).
    pub fn unregister(&self, group: GroupId) -> Option<PartitionRaft> {
        let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
        groups.remove(&group).map(|h| h.raft)
    }

    /// The handle of `group`, if hosted here.
    pub fn get(&self, group: GroupId) -> Option<PartitionRaft> {
        self.hosted(group).map(|h| h.raft)
    }

    /// Whether `group`'s replica here started empty and still abstains
    /// from votes.
    pub fn abstaining(&self, group: GroupId) -> bool {
        self.hosted(group)
            .and_then(|h| h.rejoin)
            .is_some_and(|r| r.abstaining())
    }

    /// How long since a leader last sent `group`'s replica here an append
    /// or a snapshot chunk (or since it was registered); `None` when the
    /// group is not hosted. A replica whose group removed it (`laneway
    /// cluster move-partition`) hears nothing more.
    pub fn unheard_for(&self, group: GroupId) -> Option<Duration> {
        self.hosted(group).map(|h| h.heard.since())
    }

    /// How long `group`'s replica here has taken no message of a current
    /// leader (an append or snapshot chunk answered without a higher vote
    /// of its own), or since it was registered; `None` when the group is
    /// not hosted. What [`super::prevote`] counts as hearing a leader.
    pub fn unled_for(&self, group: GroupId) -> Option<Duration> {
        self.hosted(group).map(|h| h.led.since())
    }

    /// The term of the floor of `group`'s replica here, if it started
    /// empty and has heard every peer's vote ([`Rejoin::floor`]).
    pub fn floor(&self, group: GroupId) -> Option<u64> {
        self.hosted(group)
            .and_then(|h| h.rejoin)
            .and_then(|r| r.floor())
            .map(|f| f.term)
    }

    /// The peers whose votes `group`'s replica here still waits for, if
    /// it started empty ([`Rejoin::unheard`]).
    pub fn unheard(&self, group: GroupId) -> Option<Vec<NodeId>> {
        self.hosted(group)
            .and_then(|h| h.rejoin)
            .map(|r| r.unheard())
    }

    fn hosted(&self, group: GroupId) -> Option<Hosted> {
        let groups = self.groups.read().unwrap_or_else(|p| p.into_inner());
        groups.get(&group).cloned()
    }

    /// The counts of messages received so far.
    pub fn received(&self) -> Received {
        let c = &self.counts;
        Received {
            calls: c.calls.load(Ordering::Relaxed),
            appends: c.appends.load(Ordering::Relaxed),
            votes: c.votes.load(Ordering::Relaxed),
            snapshot_chunks: c.snapshot_chunks.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            largest_batch: c.largest_batch.load(Ordering::Relaxed),
            batched_with_entries: c.batched_with_entries.load(Ordering::Relaxed),
        }
    }

    /// Every hosted group and its handle.
    pub fn all(&self) -> Vec<(GroupId, PartitionRaft)> {
        let groups = self.groups.read().unwrap_or_else(|p| p.into_inner());
        groups.iter().map(|(g, h)| (*g, h.raft.clone())).collect()
    }

    /// Answer a [`RAFT_BATCH_METHOD`] call.
    fn call_batch(&self, args: &[u8]) -> BoxFuture<'static, Result<Reply, WireError>> {
        let routed = match self.route_batch(args) {
            Ok(routed) => routed,
            Err(e) => {
                self.counts.refused.fetch_add(1, Ordering::Relaxed);
                return Box::pin(async move { Err(e) });
            }
        };
        let c = &self.counts;
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let hosted = routed.iter().filter(|r| r.is_some()).count();
        let with_entries = routed
            .iter()
            .filter(|r| r.as_ref().is_some_and(|(_, rpc)| !rpc.entries.is_empty()))
            .count();
        c.batched_with_entries
            .fetch_add(count(with_entries), Ordering::Relaxed);
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.appends.fetch_add(count(hosted), Ordering::Relaxed);
        c.largest_batch
            .fetch_max(count(routed.len()), Ordering::Relaxed);
        Box::pin(async move {
            let appends = routed.into_iter().map(|r| async move {
                match r {
                    Some((hosted, rpc)) => BatchAnswer::Append(hosted.append(rpc).await),
                    None => BatchAnswer::NotHosted,
                }
            });
            let answers = answers_within(appends, BATCH_ANSWER_WITHIN).await;
            let payload = RaftBatchReply::new(answers)
                .encode()
                .map_err(|e| WireError::new(WireCode::Internal, format!("encode reply: {e}")))?;
            Ok(Reply::payload(payload))
        })
    }

    /// Answer a [`RAFT_TERMS_METHOD`] call: this node's term in the group
    /// ([`super::terms`]).
    fn call_terms(&self, args: &[u8]) -> Result<Reply, WireError> {
        let ask = TermAsk::decode(args).map_err(|e| {
            self.counts.refused.fetch_add(1, Ordering::Relaxed);
            WireError::new(WireCode::BadCall, e.to_string())
        })?;
        let hosted = self.get(ask.group);
        let payload = super::terms::answer(hosted.as_ref())
            .encode()
            .map_err(|e| WireError::new(WireCode::Internal, format!("encode reply: {e}")))?;
        Ok(Reply::payload(payload))
    }

    /// Answer a [`RAFT_PREVOTE_METHOD`] call: whether this node would
    /// vote for the candidate now ([`super::prevote`]).
    fn call_prevote(&self, args: &[u8]) -> Result<Reply, WireError> {
        let ask = PreVoteAsk::decode(args).map_err(|e| {
            self.counts.refused.fetch_add(1, Ordering::Relaxed);
            WireError::new(WireCode::BadCall, e.to_string())
        })?;
        let granted = self.hosted(ask.group).is_some_and(|h| h.would_vote(&ask));
        let payload = PreVoteReply::new(granted)
            .encode()
            .map_err(|e| WireError::new(WireCode::Internal, format!("encode reply: {e}")))?;
        Ok(Reply::payload(payload))
    }

    /// Each append of a batch with its group's handle (`None`: not
    /// hosted here, or a replica that started empty does not take it:
    /// [`Hosted::admits`]).
    fn route_batch(&self, args: &[u8]) -> Result<Vec<Option<Routed>>, WireError> {
        let batch = RaftBatch::decode(args)
            .map_err(|e| WireError::new(WireCode::BadCall, e.to_string()))?;
        if batch.appends.len() > MAX_BATCH {
            return Err(WireError::new(
                WireCode::BadCall,
                format!(
                    "a batch of {} appends (at most {MAX_BATCH})",
                    batch.appends.len()
                ),
            ));
        }
        Ok(batch
            .appends
            .into_iter()
            .map(|(group, rpc)| {
                self.hosted(group)
                    .inspect(|h| h.heard.hear())
                    .filter(|h| h.admits(rpc.vote.leader_id()))
                    .map(|hosted| (hosted, rpc))
            })
            .collect())
    }
}

/// How long a batch call's reply waits for its slowest append: three
/// quarters of the heartbeat interval, which is the sender's deadline
/// for an append, so the answers that did come reach it in time.
pub const BATCH_ANSWER_WITHIN: Duration = Duration::from_millis(HEARTBEAT_INTERVAL_MS * 3 / 4);

/// The answers of `appends`, in order, each [`BatchAnswer::Late`] if it
/// had none `within` of the call. An abandoned append may still reach
/// its group; openraft accepts a repeated append.
async fn answers_within<F>(
    appends: impl IntoIterator<Item = F>,
    within: Duration,
) -> Vec<BatchAnswer>
where
    F: std::future::Future<Output = BatchAnswer>,
{
    let deadline = tokio::time::Instant::now() + within;
    let bounded = appends.into_iter().map(|append| async move {
        tokio::time::timeout_at(deadline, append)
            .await
            .unwrap_or(BatchAnswer::Late)
    });
    futures::future::join_all(bounded).await
}

/// A batched append and its group.
type Routed = (Hosted, AppendEntriesRequest<TypeConfig>);

impl Hosted {
    /// Whether a message of a leader whose vote is `sender` may reach the
    /// group: a replica that started empty takes none before it heard
    /// every peer's vote, nor one of a leader below them
    /// ([`Rejoin::admits`]).
    fn admits(&self, sender: &Leader) -> bool {
        self.rejoin.as_ref().is_none_or(|r| r.admits(sender))
    }

    /// Whether this replica would vote for `ask`'s candidate now
    /// ([`super::prevote::judge`]).
    fn would_vote(&self, ask: &PreVoteAsk) -> bool {
        let m = self.raft.metrics().borrow().clone();
        let last_log = self.raft.data_metrics().borrow().last_log;
        let candidate = openraft::LeaderId::new(ask.term, ask.candidate);
        let last_index = ask.last_log.map(|l| l.index);
        let judged = super::prevote::Judged {
            leads: m.state == openraft::ServerState::Leader,
            unheard_for: self.led.since(),
            lease: Duration::from_millis(self.raft.config().election_timeout_max),
            log_behind: ask.last_log < last_log,
            rejoin_allows: self
                .rejoin
                .as_ref()
                .is_none_or(|r| r.may_vote_for(&candidate, last_index, &m)),
        };
        super::prevote::judge(judged)
    }

    /// Hand an append to the group (noting it for a replica that started
    /// empty).
    async fn append(
        &self,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        let answer = match self.rejoin.as_ref().filter(|r| r.abstaining()) {
            None => self.raft.append_entries(rpc).await,
            Some(rejoin) => {
                rejoin.saw_append(&rpc);
                let answer = self.raft.append_entries(rpc).await;
                rejoin.settle(&self.raft.metrics().borrow());
                answer
            }
        };
        if matches!(&answer, Ok(a) if !matches!(a, AppendEntriesResponse::HigherVote(_))) {
            self.led.hear();
        }
        answer
    }
}

/// Hand `msg` to its group; its answer, errors included.
async fn deliver(hosted: Hosted, msg: RaftMsg) -> RaftAnswer {
    match msg {
        RaftMsg::Append(rpc) => RaftAnswer::Append(hosted.append(rpc).await),
        RaftMsg::Vote(rpc) => {
            RaftAnswer::Vote(crate::rejoin::vote(&hosted.raft, hosted.rejoin.as_deref(), rpc).await)
        }
        RaftMsg::Snapshot(rpc) => {
            let leader = rpc.vote;
            keep_following(&hosted.raft, &leader).await;
            let answer = hosted.raft.install_snapshot(rpc).await;
            if matches!(&answer, Ok(a) if a.vote <= leader) {
                hosted.led.hear();
            }
            RaftAnswer::Snapshot(answer)
        }
    }
}

/// Tell a group that the leader sending it a snapshot chunk is alive.
///
/// Why: openraft 0.9 gathers a snapshot's chunks outside its core and
/// hands it the whole snapshot only with the last one, so the chunks do
/// not reset the follower's election timer, and its leader's heartbeats
/// wait behind the snapshot in the leader's stream to it. A transfer
/// longer than an election timeout (a partition of a few hundred MiB)
/// had the follower campaign mid-stream; its higher term deposed the
/// leader, and the next leader sent the snapshot again from the start,
/// with the same end, for good (a long nemesis run, docs/benchmarks.md,
/// "A long nemesis run"). An empty append with the chunk's vote, no
/// previous entry and no commit index refreshes the timer and the lease
/// as a heartbeat does and changes nothing else (no entry to match or
/// append, no commit to move). Refused or failed, it only leaves things
/// as they were.
async fn keep_following(raft: &PartitionRaft, vote: &openraft::Vote<NodeId>) {
    let alive = AppendEntriesRequest {
        vote: *vote,
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    if let Err(e) = raft.append_entries(alive).await {
        tracing::debug!(error = %e, "a snapshot chunk's leader could not be noted as alive");
    }
}

impl Handler for RaftService {
    fn call(
        &self,
        method: String,
        args: Bytes,
        _body: BodyStream,
    ) -> BoxFuture<'static, Result<Reply, WireError>> {
        self.counts.calls.fetch_add(1, Ordering::Relaxed);
        if method == RAFT_BATCH_METHOD {
            return self.call_batch(&args);
        }
        if method == RAFT_TERMS_METHOD {
            return Box::pin(std::future::ready(self.call_terms(&args)));
        }
        if method == RAFT_PREVOTE_METHOD {
            return Box::pin(std::future::ready(self.call_prevote(&args)));
        }
        // Decoding and the lookup happen before the future, so it holds a
        // handle of its own and no lock.
        let routed = route(self, &method, &args);
        let counter = match &routed {
            Ok((_, RaftMsg::Append(_))) => &self.counts.appends,
            Ok((_, RaftMsg::Vote(_))) => &self.counts.votes,
            Ok((_, RaftMsg::Snapshot(_))) => &self.counts.snapshot_chunks,
            Err(_) => &self.counts.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move {
            let (hosted, msg) = routed?;
            let reply = RaftReply::new(deliver(hosted, msg).await);
            let payload = reply
                .encode()
                .map_err(|e| WireError::new(WireCode::Internal, format!("encode reply: {e}")))?;
            Ok(Reply::payload(payload))
        })
    }
}

/// The group's handle and the decoded message of one call.
fn route(service: &RaftService, method: &str, args: &[u8]) -> Result<(Hosted, RaftMsg), WireError> {
    if method != RAFT_METHOD {
        return Err(WireError::new(
            WireCode::BadCall,
            format!("unknown method {method}"),
        ));
    }
    let req =
        RaftRequest::decode(args).map_err(|e| WireError::new(WireCode::BadCall, e.to_string()))?;
    let hosted = service.hosted(req.group).ok_or_else(|| {
        WireError::new(
            WireCode::Unavailable,
            format!("raft group {} is not hosted on this node", req.group),
        )
    })?;
    if !matches!(req.msg, RaftMsg::Vote(_)) {
        hosted.heard.hear();
    }
    let admitted = match &req.msg {
        RaftMsg::Append(rpc) => hosted.admits(rpc.vote.leader_id()),
        RaftMsg::Snapshot(rpc) => hosted.admits(rpc.vote.leader_id()),
        // Votes are judged by the group's Rejoin (crate::rejoin::vote).
        RaftMsg::Vote(_) => true,
    };
    if !admitted {
        return Err(WireError::new(
            WireCode::Unavailable,
            format!(
                "raft group {}'s replica here started empty and takes no message of a leader \
                 below its peers' votes (nor any before it heard them all)",
                req.group
            ),
        ));
    }
    Ok((hosted, req.msg))
}

/// One handler for a node's port: [`RAFT_METHOD`], [`RAFT_BATCH_METHOD`],
/// [`RAFT_TERMS_METHOD`] and [`RAFT_PREVOTE_METHOD`] calls go to `raft`,
/// every other method to `rest` (the store node's own service).
pub struct Split {
    /// Receives the Raft messages.
    pub raft: Arc<RaftService>,
    /// Receives everything else.
    pub rest: Arc<dyn Handler>,
}

impl Handler for Split {
    fn call(
        &self,
        method: String,
        args: Bytes,
        body: BodyStream,
    ) -> BoxFuture<'static, Result<Reply, WireError>> {
        if super::is_raft_method(&method) {
            self.raft.call(method, args, body)
        } else {
            self.rest.call(method, args, body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::batch::tests::heartbeat;
    use crate::net::wire::WIRE_VERSION;
    use openraft::Vote;
    use openraft::raft::VoteRequest;

    fn empty() -> BodyStream {
        Box::pin(futures::stream::empty())
    }

    /// A handler that answers every call with its method name.
    struct Echo;

    impl Handler for Echo {
        fn call(
            &self,
            method: String,
            _args: Bytes,
            _body: BodyStream,
        ) -> BoxFuture<'static, Result<Reply, WireError>> {
            Box::pin(async move { Ok(Reply::payload(method.into_bytes())) })
        }
    }

    #[tokio::test]
    async fn unknown_methods_garbage_and_unhosted_groups_are_refused() {
        let service = RaftService::new();
        let other = service.call("get".into(), Bytes::new(), empty()).await;
        assert!(matches!(other, Err(e) if e.code == WireCode::BadCall));
        let garbage = Bytes::from_static(&[WIRE_VERSION, 0xff]);
        let bad = service.call(RAFT_METHOD.into(), garbage, empty()).await;
        assert!(matches!(bad, Err(e) if e.code == WireCode::BadCall));
        let vote = RaftRequest::new(4, RaftMsg::Vote(VoteRequest::new(Vote::new(1, 1), None)));
        let args = Bytes::from(vote.encode().expect("encode"));
        let absent = service.call(RAFT_METHOD.into(), args, empty()).await;
        assert!(matches!(absent, Err(e) if e.code == WireCode::Unavailable));
        assert_eq!(
            service.received(),
            Received {
                calls: 3,
                refused: 3,
                ..Received::default()
            }
        );
    }

    #[tokio::test]
    async fn a_garbage_pre_vote_is_refused_and_one_for_a_group_not_hosted_is_a_no() {
        let service = RaftService::new();
        let garbage = Bytes::from_static(&[WIRE_VERSION, 0xff]);
        let bad = service
            .call(RAFT_PREVOTE_METHOD.into(), garbage, empty())
            .await;
        assert!(matches!(bad, Err(e) if e.code == WireCode::BadCall));
        let ask = PreVoteAsk::new(4, 1, 2, None).encode().expect("encode");
        let reply = service
            .call(RAFT_PREVOTE_METHOD.into(), Bytes::from(ask), empty())
            .await
            .expect("answered");
        assert!(
            !PreVoteReply::decode(&reply.payload)
                .expect("decode")
                .granted
        );
        assert_eq!(service.received().refused, 1);
    }

    #[tokio::test]
    async fn a_batch_answers_each_append_and_refuses_garbage_and_oversize() {
        let service = RaftService::new();
        let batch = RaftBatch::new(vec![(4, heartbeat()), (5, heartbeat())]);
        let args = Bytes::from(batch.encode().expect("encode"));
        let reply = service
            .call(RAFT_BATCH_METHOD.into(), args, empty())
            .await
            .expect("a batch for unhosted groups is answered");
        let reply = RaftBatchReply::decode(&reply.payload).expect("decode");
        assert!(matches!(
            reply.answers[..],
            [BatchAnswer::NotHosted, BatchAnswer::NotHosted]
        ));
        let garbage = Bytes::from_static(&[WIRE_VERSION, 0xff]);
        let bad = service
            .call(RAFT_BATCH_METHOD.into(), garbage, empty())
            .await;
        assert!(matches!(bad, Err(e) if e.code == WireCode::BadCall));
        let big = RaftBatch::new(vec![(4, heartbeat()); MAX_BATCH + 1]);
        let args = Bytes::from(big.encode().expect("encode"));
        let refused = service.call(RAFT_BATCH_METHOD.into(), args, empty()).await;
        assert!(matches!(refused, Err(e) if e.code == WireCode::BadCall));
        let received = service.received();
        assert_eq!((received.batches, received.largest_batch), (1, 2));
        assert_eq!((received.calls, received.refused), (3, 2));
        assert_eq!(received.appends, 0, "nothing reached a group");
    }

    #[tokio::test]
    async fn a_batch_reply_waits_for_its_slowest_append_only_so_long() {
        let ready = |a: BatchAnswer| -> BoxFuture<'static, BatchAnswer> { Box::pin(async { a }) };
        let stuck: BoxFuture<'static, BatchAnswer> = Box::pin(futures::future::pending());
        let slow: BoxFuture<'static, BatchAnswer> = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            BatchAnswer::NotHosted
        });
        let started = tokio::time::Instant::now();
        let answers = answers_within(
            vec![ready(BatchAnswer::NotHosted), stuck, slow],
            BATCH_ANSWER_WITHIN,
        )
        .await;
        assert!(matches!(
            answers[..],
            [
                BatchAnswer::NotHosted,
                BatchAnswer::Late,
                BatchAnswer::NotHosted
            ]
        ));
        let waited = started.elapsed();
        assert!(waited >= BATCH_ANSWER_WITHIN, "{waited:?}");
        assert!(
            waited < BATCH_ANSWER_WITHIN + Duration::from_secs(2),
            "{waited:?}"
        );
        assert!(BATCH_ANSWER_WITHIN < Duration::from_millis(HEARTBEAT_INTERVAL_MS));
    }

    #[tokio::test]
    async fn split_sends_raft_to_the_service_and_the_rest_elsewhere() {
        let split = Split {
            raft: Arc::new(RaftService::new()),
            rest: Arc::new(Echo),
        };
        let rest = split.call("put".into(), Bytes::new(), empty()).await;
        assert!(matches!(rest, Ok(r) if &r.payload[..] == b"put"));
        let raft = split.call(RAFT_METHOD.into(), Bytes::new(), empty()).await;
        assert!(matches!(raft, Err(e) if e.code == WireCode::BadCall));
        let batch = split
            .call(RAFT_BATCH_METHOD.into(), Bytes::new(), empty())
            .await;
        assert!(matches!(batch, Err(e) if e.code == WireCode::BadCall));
    }
}
