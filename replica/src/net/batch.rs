//! The entry-less appends of many groups to one peer, gathered into one
//! call of [`super::RAFT_BATCH_METHOD`].
//!
//! An idle leader's traffic is heartbeats: appends with no entries, one
//! per group per follower per interval. With 16 partitions and the
//! catalog on three nodes that is 34 calls per node pair per 200 ms, each
//! its own stream, signature and reply. Every peer client ([`super::Peers`])
//! has a [`Batcher`]: a bounded queue and a task that sends what is
//! queued as one [`RaftBatch`], answering each waiting append from the
//! batch's reply. Appends carrying entries never wait here; they go alone,
//! as before, since their size and fsync make a call worth its overhead.
//!
//! When appends are gathered. The task sends as soon as it has something,
//! with whatever else is already queued: no timer holds an append back,
//! except in a heartbeat round. The node's [`super::HeartbeatTicker`]
//! opens a [`Round`] of [`ROUND_WINDOW`] before it asks every group it
//! leads for a heartbeat; an append that reaches the task while the round
//! is open waits for it to close, so the heartbeats of all groups leave
//! in one call per peer rather than in as many as the groups' cores
//! happen to spread them over. A commit update that falls in a round
//! waits the same few milliseconds, once per interval.
//!
//! Bounds. The queue holds [`QUEUE`] appends; when it is full an append
//! goes alone ([`Batcher::offer`] hands it back). A call carries at most
//! [`MAX_BATCH`] appends. Each batch is sent by its own task, so a slow
//! peer delays only its own calls; the tasks in flight are bounded by
//! the appends waiting, which openraft bounds at one per group and
//! follower. Every append keeps its own deadline (openraft's TTL): one
//! that expired while queued is answered as a network error without
//! being sent, and a batch's call gets the earliest deadline of its
//! appends.
//!
//! A peer that does not know the method (an older node, in a rolling
//! upgrade) refuses it as a bad call; the batcher then stops batching to
//! that peer and its appends go alone.

use super::GroupId;
use super::RAFT_BATCH_METHOD;
use super::peers::{FRAME_ROOM, Failure, failure_of};
use super::wire::{BatchAnswer, RaftBatch, RaftBatchReply};
use crate::types::TypeConfig;
use bytes::Bytes;
use laneway_store::rpc::{CallOptions, RpcClient, RpcError, WireCode};
use openraft::raft::AppendEntriesRequest;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Most appends one batch call carries (the receiver refuses more).
pub const MAX_BATCH: usize = 256;

/// Appends waiting per peer before new ones go alone.
pub const QUEUE: usize = 1024;

/// How long a heartbeat round stays open: long enough for every group's
/// core to turn the ticker's trigger into its append, short beside the
/// 200 ms interval and the 650 ms election timeout.
pub const ROUND_WINDOW: Duration = Duration::from_millis(3);

/// The node's heartbeat round: until when appends wait to leave together.
pub struct Round {
    base: Instant,
    /// When the open round closes, in nanoseconds after `base` (0: none
    /// was opened).
    closes: AtomicU64,
}

impl Default for Round {
    fn default() -> Round {
        Round {
            base: Instant::now(),
            closes: AtomicU64::new(0),
        }
    }
}

impl Round {
    /// Open a round closing `window` from now.
    pub fn open(&self, window: Duration) {
        let at = (Instant::now() + window).saturating_duration_since(self.base);
        let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        self.closes.store(nanos, Ordering::Release);
    }

    /// When the round open at `now` closes, if one is.
    pub fn closes_after(&self, now: Instant) -> Option<Instant> {
        let nanos = self.closes.load(Ordering::Acquire);
        if nanos == 0 {
            return None;
        }
        let close = self.base + Duration::from_nanos(nanos);
        // A clock oddity never holds an append longer than one window.
        (close > now && close <= now + ROUND_WINDOW).then_some(close)
    }
}

/// What the waiting append learns.
type Outcome = Result<BatchAnswer, Failure>;

/// One append waiting for its batch.
struct Pending {
    group: GroupId,
    rpc: AppendEntriesRequest<TypeConfig>,
    deadline: Instant,
    answer: oneshot::Sender<Outcome>,
}

/// The batching of one peer's entry-less appends.
pub struct Batcher {
    queue: mpsc::Sender<Pending>,
    /// Cleared when the peer refuses the batch method.
    supported: Arc<AtomicBool>,
}

impl Batcher {
    /// A batcher sending to `client`, holding appends during `round`; its
    /// task runs on the current runtime until the batcher is dropped.
    /// `None` outside a runtime (appends then go alone).
    pub(super) fn start(client: Arc<RpcClient>, round: Arc<Round>) -> Option<Batcher> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (queue, queued) = mpsc::channel(QUEUE);
        let supported = Arc::new(AtomicBool::new(true));
        runtime.spawn(gather(client, round, queued, Arc::clone(&supported)));
        Some(Batcher { queue, supported })
    }

    /// Send `rpc` for `group` in a batch, within `ttl`; the group's answer.
    /// `Err(rpc)` hands it back when it must go alone: it carries
    /// entries, the peer does not batch, or the queue is full.
    pub(super) async fn offer(
        &self,
        group: GroupId,
        rpc: AppendEntriesRequest<TypeConfig>,
        ttl: Duration,
    ) -> Result<Outcome, AppendEntriesRequest<TypeConfig>> {
        if !rpc.entries.is_empty() || !self.supported.load(Ordering::Relaxed) {
            return Err(rpc);
        }
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            group,
            rpc,
            deadline: Instant::now() + ttl,
            answer,
        };
        if let Err(e) = self.queue.try_send(pending) {
            let (mpsc::error::TrySendError::Full(p) | mpsc::error::TrySendError::Closed(p)) = e;
            return Err(p.rpc);
        }
        // The batch's call ends by the earliest deadline in it; the margin
        // covers the round and the answer's way back.
        let outcome = tokio::time::timeout(ttl + ROUND_WINDOW, answered).await;
        Ok(match outcome {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(Failure::Network("the batch was dropped unsent".into())),
            Err(_) => Err(Failure::Network("no answer within the deadline".into())),
        })
    }
}

/// The batcher's task: take what is queued (after the round, if one is
/// open) and send it as one call, until every sender is gone.
async fn gather(
    client: Arc<RpcClient>,
    round: Arc<Round>,
    mut queued: mpsc::Receiver<Pending>,
    supported: Arc<AtomicBool>,
) {
    while let Some(first) = queued.recv().await {
        if let Some(close) = round.closes_after(Instant::now()) {
            tokio::time::sleep_until(close.into()).await;
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queued.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        tokio::spawn(send(Arc::clone(&client), batch, Arc::clone(&supported)));
    }
}

/// Send `batch` as one call and answer each of its appends.
async fn send(client: Arc<RpcClient>, batch: Vec<Pending>, supported: Arc<AtomicBool>) {
    let now = Instant::now();
    let (live, expired): (Vec<Pending>, Vec<Pending>) =
        batch.into_iter().partition(|p| p.deadline > now);
    for p in expired {
        let _ = p
            .answer
            .send(Err(Failure::Network("deadline passed while queued".into())));
    }
    let Some(deadline) = live.iter().map(|p| p.deadline).min() else {
        return;
    };
    let (appends, answers): (Vec<_>, Vec<_>) = live
        .into_iter()
        .map(|p| ((p.group, p.rpc), p.answer))
        .unzip();
    let outcomes = call(&client, appends, deadline - now, &supported).await;
    match outcomes {
        Ok(outcomes) => {
            for (answer, outcome) in answers.into_iter().zip(outcomes) {
                let _ = answer.send(Ok(outcome));
            }
        }
        Err(failure) => {
            for answer in answers {
                let _ = answer.send(Err(failure.clone()));
            }
        }
    }
}

/// One batch call: an answer per append, in order, or why none came.
async fn call(
    client: &RpcClient,
    appends: Vec<(GroupId, AppendEntriesRequest<TypeConfig>)>,
    deadline: Duration,
    supported: &AtomicBool,
) -> Result<Vec<BatchAnswer>, Failure> {
    let count = appends.len();
    let args = RaftBatch::new(appends)
        .encode()
        .map_err(|e| Failure::Network(format!("encode: {e}")))?;
    if args.len() > FRAME_ROOM {
        return Err(Failure::Network("raft batch larger than a frame".into()));
    }
    let opts = CallOptions {
        deadline,
        stall: deadline,
    };
    let (payload, _rest) = match client
        .call(RAFT_BATCH_METHOD, Bytes::from(args), None, &opts)
        .await
    {
        Ok(answer) => answer,
        Err(RpcError::Remote(w)) if w.code == WireCode::BadCall => {
            // An older peer: from now on its appends go alone.
            supported.store(false, Ordering::Relaxed);
            return Err(Failure::Network(format!("peer refused batches: {w}")));
        }
        Err(e) => return Err(failure_of(e)),
    };
    let reply = RaftBatchReply::decode(&payload)
        .map_err(|e| Failure::Network(format!("batch answer: {e}")))?;
    if reply.answers.len() != count {
        return Err(Failure::Network(format!(
            "batch of {count} appends answered with {}",
            reply.answers.len()
        )));
    }
    Ok(reply.answers)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use laneway_store::rpc::Signer;
    use openraft::Vote;

    /// An entry-less append of term 1 (for this module's and the
    /// service's tests).
    pub(crate) fn heartbeat() -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            entries: Vec::new(),
            leader_commit: None,
        }
    }

    /// A peer that accepts connections and then never reads or answers
    /// (`hang`), or drops each one at once.
    async fn bad_peer(hang: bool) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((sock, _)) = listener.accept().await {
                if hang {
                    held.push(sock);
                }
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_peer_that_never_answers_or_hangs_up_fails_each_append_by_its_deadline() {
        for hang in [true, false] {
            let client = Arc::new(RpcClient::new(bad_peer(hang).await, Signer::new(b"k")));
            let batcher = Batcher::start(client, Arc::new(Round::default())).expect("in a runtime");
            let ttl = Duration::from_millis(200);
            // Several rounds, several appends each: none is stuck behind
            // an earlier one, and the queue empties every time.
            for _ in 0..3 {
                let started = Instant::now();
                let offers = (1..=4).map(|g| batcher.offer(g, heartbeat(), ttl));
                for outcome in futures::future::join_all(offers).await {
                    let outcome = outcome.map_err(|_| "went alone").expect("batched");
                    assert!(outcome.is_err(), "hang {hang}: {outcome:?}");
                }
                assert!(
                    started.elapsed() < ttl + ROUND_WINDOW + Duration::from_millis(500),
                    "hang {hang}: answered by the deadline"
                );
                assert_eq!(batcher.queue.capacity(), QUEUE, "nothing left queued");
            }
        }
    }

    #[test]
    fn a_round_holds_appends_only_while_open_and_never_past_one_window() {
        let round = Round::default();
        let now = Instant::now();
        assert_eq!(round.closes_after(now), None, "no round opened yet");
        round.open(ROUND_WINDOW);
        let close = round.closes_after(Instant::now()).expect("open");
        assert!(close <= Instant::now() + ROUND_WINDOW);
        assert_eq!(round.closes_after(close), None, "closed at its end");
        assert_eq!(round.closes_after(close + ROUND_WINDOW), None);
        round.open(Duration::from_secs(60));
        assert_eq!(
            round.closes_after(Instant::now()),
            None,
            "a round longer than the window does not hold appends"
        );
    }
}
