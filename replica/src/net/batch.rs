//! The appends of many groups to one peer, gathered into calls of
//! [`super::RAFT_BATCH_METHOD`].
//!
//! Every partition is a group, and a node leads several of them with the
//! same followers. Sent alone, each group's append would be a call of its
//! own, with its own stream, signature, reply and wake-ups on both
//! sides, and on the follower its own log write and fsync: at RF 3 under
//! load that was two calls per group-commit round per follower (the
//! entries, then openraft's commit update) and most of the store nodes'
//! CPU. Every peer client ([`super::Peers`]) has a [`Batcher`]: a bounded
//! queue and a task that sends what is queued as one [`RaftBatch`],
//! answering each waiting append from the batch's reply. The follower
//! hands the appends of a batch to their groups at once, so their log
//! writes meet in one group-committed sync of the node's log database.
//!
//! When appends are gathered. At most [`Batching::in_flight`] batch calls
//! are out to a peer at a time; the task sends as soon as one of them is
//! free, with whatever else is queued by then. So no timer holds an
//! append back: an idle link sends each append at once, and a busy one
//! gathers the appends that arrive while its calls are out, which is
//! when there are many. An entry-less append that finds nothing else
//! queued (openraft's commit update after a round) waits up to
//! [`LINGER`] for an append with entries to carry it, so under load the
//! updates ride with the next rounds instead of costing calls of their
//! own. The other exception is a heartbeat round: the node's
//! [`super::HeartbeatTicker`] opens a [`Round`] of [`ROUND_WINDOW`]
//! before it asks every group it leads for a heartbeat; an append that
//! reaches the task while the round is open waits for it to close, so
//! the heartbeats of all groups leave in one call per peer rather than in
//! as many as the groups' cores happen to spread them over.
//!
//! Which appends. Entry-less appends (heartbeats, commit updates) always;
//! appends with entries when [`Batching::entries`] is on (the default)
//! and their encoding is at most [`BATCH_APPEND_BYTES`]. Larger ones
//! (volume pieces of big bodies, a follower catching up) go alone: their
//! size already pays for their call, and they would hold the small ones
//! of other groups behind them.
//!
//! Bounds. The queue holds [`QUEUE`] appends; when it is full an append
//! goes alone ([`Batcher::offer`] hands it back). A call carries at most
//! [`MAX_BATCH`] appends and [`BATCH_BYTES`] of them. Each batch is sent
//! by its own task, so a slow peer delays only its own calls. Every
//! append keeps its own deadline (openraft's TTL): one that expired while
//! queued is answered as a network error without being sent, a waiting
//! append stops waiting at its deadline, and a batch's call lasts until
//! the latest deadline among its appends, so one that waited long does
//! not cut the call short for the others. An append whose waiter gave up
//! may still reach its group; openraft sees a network error and sends it
//! again, which a follower accepts as it accepts any repeated append.
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
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Most appends one batch call carries (the receiver refuses more).
pub const MAX_BATCH: usize = 256;

/// Most bytes of encoded appends one batch call carries: a quarter of a
/// frame, a few milliseconds on a LAN.
pub const BATCH_BYTES: usize = 4 << 20;
const _: () = assert!(BATCH_BYTES <= FRAME_ROOM);

/// Largest encoded append that joins a batch. A group-commit round of
/// small objects is kilobytes; a volume piece is up to a MiB and goes
/// alone.
pub const BATCH_APPEND_BYTES: usize = 256 << 10;
const _: () = assert!(BATCH_APPEND_BYTES <= BATCH_BYTES);

/// Appends waiting per peer before new ones go alone.
pub const QUEUE: usize = 1024;

/// Batch calls in flight to one peer by default. One: every append that
/// arrives while a call is out leaves in the next one, which is what
/// gathers the rounds of all groups a node leads there
/// (docs/benchmarks.md, "Appends of many groups in one call").
pub const IN_FLIGHT: usize = 1;

/// How long a heartbeat round stays open: long enough for every group's
/// core to turn the ticker's trigger into its append, short beside the
/// 200 ms interval and the 650 ms election timeout.
pub const ROUND_WINDOW: Duration = Duration::from_millis(3);

/// Which appends a node's batchers gather, and how many calls each keeps
/// out at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    /// Appends carrying entries join batches (up to
    /// [`BATCH_APPEND_BYTES`]); when off, only entry-less ones do.
    pub entries: bool,
    /// Batch calls in flight to one peer (at least 1).
    pub in_flight: usize,
}

impl Default for Batching {
    fn default() -> Batching {
        Batching {
            entries: true,
            in_flight: IN_FLIGHT,
        }
    }
}

impl Batching {
    /// Only entry-less appends gathered, and a call sent for every
    /// gathering: how nodes batched before appends with entries joined
    /// (kept for benchmarks comparing the two).
    pub const HEARTBEATS_ONLY: Batching = Batching {
        entries: false,
        in_flight: QUEUE,
    };
}
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
    /// The append and its group, encoded ([`RaftBatch::piece`]).
    piece: Vec<u8>,
    /// Whether it carries entries (else a commit update or a heartbeat).
    entries: bool,
    deadline: Instant,
    answer: oneshot::Sender<Outcome>,
}

/// The batching of one peer's appends.
pub struct Batcher {
    queue: mpsc::Sender<Pending>,
    /// Cleared when the peer refuses the batch method.
    supported: Arc<AtomicBool>,
    entries: bool,
    /// The task's permits for calls in flight (shared with it), and how
    /// many there are.
    slots: Arc<Semaphore>,
    most_in_flight: usize,
}

impl Batcher {
    /// A batcher sending to `client` as `batching` says, holding appends
    /// during `round`; its task runs on the current runtime until the
    /// batcher is dropped. `None` outside a runtime (appends then go
    /// alone).
    pub(super) fn start(
        client: Arc<RpcClient>,
        round: Arc<Round>,
        batching: Batching,
    ) -> Option<Batcher> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (queue, queued) = mpsc::channel(QUEUE);
        let supported = Arc::new(AtomicBool::new(true));
        let most_in_flight = batching.in_flight.max(1);
        let slots = Arc::new(Semaphore::new(most_in_flight));
        let task = Gatherer {
            client,
            round,
            linger: batching.entries,
            supported: Arc::clone(&supported),
            slots: Arc::clone(&slots),
        };
        runtime.spawn(task.run(queued));
        Some(Batcher {
            queue,
            supported,
            entries: batching.entries,
            slots,
            most_in_flight,
        })
    }

    /// Batch calls in flight to the peer now.
    pub fn in_flight(&self) -> usize {
        self.most_in_flight - self.slots.available_permits()
    }

    /// Send `rpc` for `group` in a batch, within `ttl`; the group's answer.
    /// `Err(rpc)` hands it back when it must go alone: it carries entries
    /// this batcher does not gather (too large, or entries are off), the
    /// peer does not batch, or the queue is full.
    pub(super) async fn offer(
        &self,
        group: GroupId,
        rpc: AppendEntriesRequest<TypeConfig>,
        ttl: Duration,
    ) -> Result<Outcome, AppendEntriesRequest<TypeConfig>> {
        let has_entries = !rpc.entries.is_empty();
        if (has_entries && !self.entries) || !self.supported.load(Ordering::Relaxed) {
            return Err(rpc);
        }
        let piece = match RaftBatch::piece(group, &rpc) {
            Ok(piece) if piece.len() <= BATCH_APPEND_BYTES => piece,
            // Too large to gather, or unencodable: the lone call says so.
            _ => return Err(rpc),
        };
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            piece,
            entries: has_entries,
            deadline: Instant::now() + ttl,
            answer,
        };
        if self.queue.try_send(pending).is_err() {
            return Err(rpc);
        }
        drop(rpc);
        // The margin covers the round and the answer's way back.
        let outcome = tokio::time::timeout(ttl + ROUND_WINDOW, answered).await;
        Ok(match outcome {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(Failure::Network("the batch was dropped unsent".into())),
            Err(_) => Err(Failure::Network("no answer within the deadline".into())),
        })
    }
}

/// A batcher's task and what it sends with.
struct Gatherer {
    client: Arc<RpcClient>,
    round: Arc<Round>,
    /// Whether an entry-less append waits up to [`LINGER`] for entries.
    linger: bool,
    supported: Arc<AtomicBool>,
    /// One permit per batch call that may be in flight.
    slots: Arc<Semaphore>,
}

impl Gatherer {
    /// Take what is queued (after the round, if one is open, and once a
    /// call may go) and send it as one call, until every sender is gone.
    async fn run(self, mut queued: mpsc::Receiver<Pending>) {
        // An append that did not fit the last batch opens the next one.
        let mut carried: Option<Pending> = None;
        loop {
            let first = match carried.take() {
                Some(p) => p,
                None => match queued.recv().await {
                    Some(p) => p,
                    None => return,
                },
            };
            let mut early = Vec::new();
            if let Some(close) = self.round.closes_after(Instant::now()) {
                tokio::time::sleep_until(close.into()).await;
            } else if self.linger && !first.entries {
                early = linger(&mut queued).await;
            }
            let Ok(slot) = Arc::clone(&self.slots).acquire_owned().await else {
                return;
            };
            let mut batch = Gathered::new(first);
            let mut more = early.into_iter().map(Ok);
            while batch.len() < MAX_BATCH {
                match more.next().unwrap_or_else(|| queued.try_recv()) {
                    Ok(p) if batch.fits(&p) => batch.push(p),
                    Ok(p) => {
                        carried = Some(p);
                        break;
                    }
                    Err(_) => break,
                }
            }
            let client = Arc::clone(&self.client);
            let supported = Arc::clone(&self.supported);
            tokio::spawn(async move {
                send(&client, batch.appends, &supported).await;
                drop(slot);
            });
        }
    }
}

/// How long an entry-less append (openraft's commit update after a
/// round, or a heartbeat) waits for an append with entries to the same
/// peer to carry it. Under load the next round of some group comes
/// within it and the update rides along, instead of costing a call and
/// its reply of its own (half of the calls were commit updates); idle,
/// a follower learns a commit this much later, which delays only its
/// own apply (a leader answers its client from its own apply, and
/// reads are served by leaders). Far below the heartbeat interval
/// (200 ms) and the election timeout.
pub const LINGER: Duration = Duration::from_millis(2);

/// Entry-less appends queued behind the first: wait until an append with
/// entries arrives (it is the last taken), [`LINGER`] passes, or half a
/// batch has gathered.
async fn linger(queued: &mut mpsc::Receiver<Pending>) -> Vec<Pending> {
    let until = tokio::time::Instant::now() + LINGER;
    let mut taken = Vec::new();
    while taken.len() < MAX_BATCH / 2 {
        match tokio::time::timeout_at(until, queued.recv()).await {
            Ok(Some(p)) => {
                let entries = p.entries;
                taken.push(p);
                if entries {
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    taken
}

/// The appends of one batch call and their encoded size.
struct Gathered {
    appends: Vec<Pending>,
    bytes: usize,
}

impl Gathered {
    fn new(first: Pending) -> Gathered {
        Gathered {
            bytes: first.piece.len(),
            appends: vec![first],
        }
    }

    fn len(&self) -> usize {
        self.appends.len()
    }

    /// Whether `p` still fits within [`BATCH_BYTES`].
    fn fits(&self, p: &Pending) -> bool {
        self.bytes + p.piece.len() <= BATCH_BYTES
    }

    fn push(&mut self, p: Pending) {
        self.bytes += p.piece.len();
        self.appends.push(p);
    }
}

/// Send `batch` as one call and answer each of its appends.
async fn send(client: &RpcClient, batch: Vec<Pending>, supported: &AtomicBool) {
    let now = Instant::now();
    let (live, expired): (Vec<Pending>, Vec<Pending>) =
        batch.into_iter().partition(|p| p.deadline > now);
    for p in expired {
        let _ = p
            .answer
            .send(Err(Failure::Network("deadline passed while queued".into())));
    }
    let Some(deadline) = live.iter().map(|p| p.deadline).max() else {
        return;
    };
    let (pieces, answers): (Vec<_>, Vec<_>) = live.into_iter().map(|p| (p.piece, p.answer)).unzip();
    let outcomes = call(client, &pieces, deadline - now, supported).await;
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
    pieces: &[Vec<u8>],
    deadline: Duration,
    supported: &AtomicBool,
) -> Result<Vec<BatchAnswer>, Failure> {
    let count = pieces.len();
    let args = RaftBatch::frame(pieces);
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
    use crate::types::{DataPiece, Mutation};
    use futures::future::BoxFuture;
    use laneway_store::BodyStream;
    use laneway_store::rpc::{Handler, Reply, RpcServer, ServerOptions, Signer, WireError};
    use openraft::raft::AppendEntriesResponse;
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
    use std::sync::atomic::AtomicUsize;

    /// An append of term 1 carrying one entry with `size` bytes of volume
    /// data.
    fn append_of(size: usize) -> AppendEntriesRequest<TypeConfig> {
        let mutation = Mutation {
            data: vec![DataPiece {
                segment: 1,
                offset: 0,
                bytes: vec![7; size],
            }],
            ..Mutation::default()
        };
        AppendEntriesRequest {
            entries: vec![Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
                payload: EntryPayload::Normal(mutation),
            }],
            ..heartbeat()
        }
    }

    /// A peer that answers every batch call after `delay`, each append
    /// with success, counting calls, appends, and the most calls it had
    /// at once.
    #[derive(Default)]
    struct SlowPeer {
        delay: Duration,
        calls: AtomicUsize,
        appends: AtomicUsize,
        open: AtomicUsize,
        most_open: AtomicUsize,
        largest_call: AtomicUsize,
    }

    /// The handler of a [`SlowPeer`].
    struct SlowHandler(Arc<SlowPeer>);

    impl Handler for SlowHandler {
        fn call(
            &self,
            _method: String,
            args: Bytes,
            _body: BodyStream,
        ) -> BoxFuture<'static, Result<Reply, WireError>> {
            let peer = Arc::clone(&self.0);
            Box::pin(async move {
                let batch = RaftBatch::decode(&args)
                    .map_err(|e| WireError::new(WireCode::BadCall, e.to_string()))?;
                peer.calls.fetch_add(1, Ordering::SeqCst);
                peer.largest_call.fetch_max(args.len(), Ordering::SeqCst);
                peer.appends
                    .fetch_add(batch.appends.len(), Ordering::SeqCst);
                let open = peer.open.fetch_add(1, Ordering::SeqCst) + 1;
                peer.most_open.fetch_max(open, Ordering::SeqCst);
                tokio::time::sleep(peer.delay).await;
                peer.open.fetch_sub(1, Ordering::SeqCst);
                let answers = batch
                    .appends
                    .iter()
                    .map(|_| BatchAnswer::Append(Ok(AppendEntriesResponse::Success)))
                    .collect();
                let reply = RaftBatchReply::new(answers).encode().expect("encode");
                Ok(Reply::payload(reply))
            })
        }
    }

    /// A [`SlowPeer`] serving on loopback, and a batcher sending to it.
    async fn slow_peer(delay: Duration, batching: Batching) -> (Arc<SlowPeer>, RpcServer, Batcher) {
        let peer = Arc::new(SlowPeer {
            delay,
            ..SlowPeer::default()
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let handler: Arc<dyn Handler> = Arc::new(SlowHandler(Arc::clone(&peer)));
        let server = RpcServer::start(
            listener,
            handler,
            Signer::new(b"k"),
            ServerOptions::default(),
        )
        .expect("serve");
        let client = Arc::new(RpcClient::new(addr, Signer::new(b"k")));
        let batcher =
            Batcher::start(client, Arc::new(Round::default()), batching).expect("in a runtime");
        (peer, server, batcher)
    }

    #[tokio::test]
    async fn appends_that_arrive_while_a_call_is_out_leave_together_in_the_next() {
        let (peer, _server, batcher) =
            slow_peer(Duration::from_millis(100), Batching::default()).await;
        let ttl = Duration::from_secs(5);
        // The first append goes at once; the 11 offered while its call is
        // out (rounds of entries and commit updates of 12 groups) wait
        // for it and leave in one call.
        let first = batcher.offer(0, append_of(1000), ttl);
        let rest = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let offers = (1..12).map(|g| {
                let rpc = if g % 2 == 0 {
                    append_of(1000)
                } else {
                    heartbeat()
                };
                batcher.offer(g, rpc, ttl)
            });
            futures::future::join_all(offers).await
        };
        let (first, rest) = tokio::join!(first, rest);
        for outcome in std::iter::once(first).chain(rest) {
            let outcome = outcome.map_err(|_| "went alone").expect("batched");
            assert!(
                matches!(
                    outcome,
                    Ok(BatchAnswer::Append(Ok(AppendEntriesResponse::Success)))
                ),
                "{outcome:?}"
            );
        }
        assert_eq!(peer.appends.load(Ordering::SeqCst), 12);
        assert_eq!(
            peer.calls.load(Ordering::SeqCst),
            2,
            "one call out, then one for the rest"
        );
        assert_eq!(
            peer.most_open.load(Ordering::SeqCst),
            1,
            "one call in flight at a time"
        );
        let deadline = Instant::now() + Duration::from_secs(1);
        while batcher.in_flight() > 0 {
            assert!(Instant::now() < deadline, "a call stays in flight");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_commit_update_waits_for_a_round_of_entries_to_carry_it() {
        let (peer, _server, batcher) = slow_peer(Duration::ZERO, Batching::default()).await;
        let ttl = Duration::from_secs(5);
        // A commit update, and a moment later (well within the linger) a
        // round of another group: one call carries both.
        let update = batcher.offer(0, heartbeat(), ttl);
        let round = async {
            tokio::time::sleep(LINGER / 4).await;
            batcher.offer(1, append_of(1000), ttl).await
        };
        let (update, round) = tokio::join!(update, round);
        for outcome in [update, round] {
            let outcome = outcome.map_err(|_| "went alone").expect("batched");
            assert!(outcome.is_ok(), "{outcome:?}");
        }
        assert_eq!(peer.calls.load(Ordering::SeqCst), 1, "one call for both");
        assert_eq!(peer.appends.load(Ordering::SeqCst), 2);
        // Alone, an update still leaves once the linger is over.
        let alone = batcher.offer(2, heartbeat(), ttl).await;
        assert!(alone.map_err(|_| "went alone").expect("batched").is_ok());
        assert_eq!(peer.calls.load(Ordering::SeqCst), 2);
        let deadline = Instant::now() + Duration::from_secs(1);
        while batcher.in_flight() > 0 {
            assert!(Instant::now() < deadline, "a call stays in flight");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn large_appends_and_switched_off_entries_go_alone_and_bytes_bound_a_batch() {
        let (peer, _server, batcher) =
            slow_peer(Duration::from_millis(100), Batching::default()).await;
        let ttl = Duration::from_secs(5);
        let large = append_of(BATCH_APPEND_BYTES + 1);
        let back = batcher.offer(1, large, ttl).await.expect_err("goes alone");
        assert_eq!(back.entries.len(), 1, "handed back whole");

        // 40 appends of 200 KiB are about 8 MB: more than one batch's
        // bytes, so they take two calls or more, none above the bound.
        let offers = (0..40).map(|g| batcher.offer(g, append_of(200 << 10), ttl));
        for outcome in futures::future::join_all(offers).await {
            let outcome = outcome.map_err(|_| "went alone").expect("batched");
            assert!(outcome.is_ok(), "{outcome:?}");
        }
        assert_eq!(peer.appends.load(Ordering::SeqCst), 40);
        let calls = peer.calls.load(Ordering::SeqCst);
        assert!(
            (2..40).contains(&calls),
            "{calls} calls for 40 appends of 8 MB"
        );
        let largest = peer.largest_call.load(Ordering::SeqCst);
        assert!(largest <= BATCH_BYTES + 9, "a call of {largest} bytes");

        let (_peer, _server, heartbeats_only) =
            slow_peer(Duration::ZERO, Batching::HEARTBEATS_ONLY).await;
        let back = heartbeats_only
            .offer(1, append_of(10), ttl)
            .await
            .expect_err("entries go alone");
        assert_eq!(back.entries.len(), 1);
        let outcome = heartbeats_only.offer(1, heartbeat(), ttl).await;
        assert!(matches!(outcome, Ok(Ok(_))), "a heartbeat is still batched");
    }

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
            let round = Arc::new(Round::default());
            let batcher = Batcher::start(client, round, Batching::default()).expect("in a runtime");
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
                // The call's task gives its slot back once the call ends,
                // by the latest deadline of its appends.
                let deadline = Instant::now() + ttl + Duration::from_secs(1);
                while batcher.in_flight() > 0 {
                    assert!(
                        Instant::now() < deadline,
                        "hang {hang}: a call stays in flight"
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
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
