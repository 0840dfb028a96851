//! Sending a call to the replica that leads its group, following the
//! leader through a failover ([`RemoteStore::send_routed`]), and calls
//! that cover several partitions, sent to each partition's leader
//! ([`RemoteStore::fan_out`]).
//!
//! An attempt fails in one of five ways ([`Sent`]). Three say the call did
//! nothing: `NotLeader` (with the leader's Raft id when the replica knows
//! it), `WrongNode` (the node holds a newer map) and no connection. Those
//! are always sent again: to the hinted leader, after a map refresh, or to
//! the next replica. One leaves the outcome unknown (no answer in time, or
//! the connection lost after the call went out): sent again only when
//! [`Call::may_repeat`] says so. The last is the node's answer, final.
//!
//! Every call has one deadline (`CallOptions::deadline`), for all its
//! attempts and the waits between them: after each full round of the
//! replicas a pause, 25 ms doubling to 400 ms (an election takes about a
//! second or two), and once the deadline leaves no room, 503. An attempt
//! at a group of several replicas may take at most half the deadline, so
//! a replica that does not answer leaves time to try another.
//!
//! A group of one replica (no replication) behaves as before: its one
//! node answers, or the call is 503 at once; only a `WrongNode` is sent
//! once more, after the map refresh.
//!
//! A call with a data stream (PutObject, UploadPart) is never sent again:
//! the stream is spent. It goes to the believed leader; a failure teaches
//! the cache (the hint, or the next replica) so the S3 client's retry goes
//! right, and answers 503.
//!
//! A call out at a replica that another replica then claims to succeed
//! as leader (the leader watch hears the claim, at most a second after
//! an election) stops waiting: its outcome is unknown (`Lost`), so it is
//! handled as if its attempt had run out of time, at once instead of at
//! the attempt's deadline.

use super::leaders::Target;
use super::window;
use super::{RemoteStore, split_window};
use crate::cluster::{NodeId, PartitionMap};
use crate::error::{StoreError, StoreResult};
use crate::ids::PartitionId;
use crate::node::proto::{Call, Envelope, Route, decode, encode};
use crate::quota::{Handover, Watch};
use crate::rpc::{CallOptions, RpcError, WireCode};
use crate::store::BodyStream;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The first pause after a round of replicas that all failed.
const FIRST_PAUSE: Duration = Duration::from_millis(25);

/// The longest pause between rounds.
const MAX_PAUSE: Duration = Duration::from_millis(400);

/// How one attempt failed.
pub(super) enum Sent {
    /// The node holds map version `.0` and not the target (did nothing).
    WrongNode(u64),
    /// The replica does not lead the group; the leader's Raft id if it
    /// knows one (did nothing).
    NotLeader(Option<u64>),
    /// No connection to the node: the call never left (did nothing).
    Unreached(String),
    /// The call went out and no answer came: its outcome is unknown.
    Lost(String),
    /// The node's answer (or this client's own failure), final.
    Store(StoreError),
}

impl Sent {
    /// The error the caller sees when this is the last failure.
    pub(super) fn into_store(self) -> StoreError {
        match self {
            Sent::WrongNode(v) => StoreError::Unavailable(format!(
                "the partition moved (the node holds map version {v}); retry"
            )),
            Sent::NotLeader(_) => StoreError::Unavailable(
                "the replica asked does not lead its group (an election?); retry".into(),
            ),
            Sent::Unreached(why) => StoreError::Unavailable(why),
            Sent::Lost(why) => StoreError::Unavailable(format!("{why}; its outcome is unknown")),
            Sent::Store(e) => e,
        }
    }

    /// A short account for the final error of a call that ran out of time.
    fn describe(&self) -> String {
        match self {
            Sent::WrongNode(v) => format!("the node holds map version {v}"),
            Sent::NotLeader(None) => "not the leader, none known".into(),
            Sent::NotLeader(Some(id)) => format!("not the leader (leader {id:#x})"),
            Sent::Unreached(why) | Sent::Lost(why) => why.clone(),
            Sent::Store(e) => e.to_string(),
        }
    }
}

impl From<RpcError> for Sent {
    fn from(e: RpcError) -> Sent {
        match e {
            RpcError::Remote(w) => match w.code {
                WireCode::WrongNode { map_version } => Sent::WrongNode(map_version),
                WireCode::NotLeader { leader } => Sent::NotLeader(leader),
                _ => Sent::Store(w.into_store()),
            },
            RpcError::Unavailable { sent: false, .. } | RpcError::Timeout { sent: false, .. } => {
                Sent::Unreached(e.to_string())
            }
            RpcError::Unavailable { sent: true, .. } | RpcError::Timeout { sent: true, .. } => {
                Sent::Lost(e.to_string())
            }
            RpcError::Protocol { .. } => Sent::Store(StoreError::Engine(e.to_string())),
            RpcError::BodyFailed { why, .. } => Sent::Store(StoreError::Body(why)),
        }
    }
}

/// Whether a failed call is finished at the node as far as a quota hold
/// it carried is concerned: the node answered (its answer comes after
/// the write is done), the call never left, or its data stream failed
/// (the node never saw the stream's end, so its write cannot commit). A
/// call that went out without an answer, or whose answer could not be
/// read, may still be running there.
fn node_is_done(e: &RpcError) -> bool {
    match e {
        RpcError::Remote(_) | RpcError::BodyFailed { .. } => true,
        RpcError::Unavailable { sent, .. } | RpcError::Timeout { sent, .. } => !sent,
        RpcError::Protocol { .. } => false,
    }
}

/// What the calls of one [`RemoteStore::fan_out`] share: the map they
/// are routed by, how items fall into partitions and become a call, the
/// caller's call id (if any) and the deadline.
struct Spread<'f, P, M> {
    map: Arc<PartitionMap>,
    part_of: &'f P,
    make: &'f M,
    given: Option<crate::repeat::CallId>,
    deadline: Instant,
}

/// An envelope ready to go, with what goes with it: the caller's window
/// at the node (none for calls made for no tenant) and the quota hold the
/// call carries, if any.
pub(super) struct Sealed {
    args: Bytes,
    window: Option<Arc<window::Window>>,
    hold: Option<Arc<Handover>>,
    /// How the hold comes back if the call gets no answer
    /// ([`super::settle`]).
    watch: Option<Watch>,
}

/// A routed call that failed for good.
pub(super) struct Failed {
    /// What the caller sees.
    pub(super) error: StoreError,
    /// Whether the answer came from a repeat of the call after an attempt
    /// whose outcome is unknown (that attempt may have done the call, so
    /// "no such upload" may mean "done": the caller decides).
    pub(super) repeated: bool,
}

impl Failed {
    fn new(error: StoreError, repeated: bool) -> Failed {
        Failed { error, repeated }
    }
}

/// How long the sender of `call` waits for its answer from now, in ms,
/// on a call that must not take effect once nobody waits for it
/// ([`Call::lapses_unanswered`]); `None` on any other.
fn answer_within_ms(call: &Call, deadline: Instant) -> Option<u64> {
    let left = deadline.saturating_duration_since(Instant::now());
    call.lapses_unanswered()
        .then(|| u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
}

/// The group of a call routed by one key or by the catalog (`None`: a
/// call that names its partitions or its node).
pub(super) fn target_of(map: &PartitionMap, call: &Call) -> Option<Target> {
    match call.route() {
        Route::Catalog => Some(Target::Catalog),
        Route::Object(bucket, key) => Some(Target::Partition(crate::hash::partition_of(
            bucket,
            key.as_bytes(),
            map.partition_count(),
        ))),
        Route::Named => None,
    }
}

/// The id `call` carries through all its attempts, if it applies once
/// ([`crate::repeat`]): only at a group of several replicas, where an
/// attempt of unknown outcome is sent again; the caller's id `given` if
/// it gave one, else a fresh one.
fn once_id(
    call: &Call,
    replicas: usize,
    given: Option<crate::repeat::CallId>,
) -> Option<crate::repeat::CallId> {
    if call.applies_once() && replicas > 1 {
        given.or_else(crate::repeat::new_id)
    } else {
        None
    }
}

/// When an attempt at a group of `replicas` must have its answer: by the
/// call's deadline, and for several replicas within half the call's
/// whole time, so another replica can still be tried.
fn attempt_until(replicas: usize, deadline: Instant, whole: Duration) -> Instant {
    if replicas < 2 {
        return deadline;
    }
    deadline.min(Instant::now() + whole / 2)
}

/// Rounds over a group's replicas: a pause after each full round.
struct Rounds {
    deadline: Instant,
    tried: usize,
    pause: Duration,
}

impl Rounds {
    fn new(deadline: Instant) -> Rounds {
        Rounds {
            deadline,
            tried: 0,
            pause: FIRST_PAUSE,
        }
    }

    /// Count a failed attempt at a group of `replicas`; after a full round
    /// wait the pause (doubling). False when the deadline leaves no time
    /// for another attempt.
    async fn next(&mut self, replicas: usize) -> bool {
        self.tried += 1;
        if self.tried >= replicas.max(1) {
            self.tried = 0;
            if Instant::now() + self.pause >= self.deadline {
                return false;
            }
            tokio::time::sleep(self.pause).await;
            self.pause = (self.pause * 2).min(MAX_PAUSE);
        }
        Instant::now() < self.deadline
    }
}

impl RemoteStore {
    /// Send `call` (routed by key or to the catalog; with its data stream,
    /// if any) to its group's leader, within the call's deadline.
    pub(super) async fn send<T: DeserializeOwned>(
        &self,
        call: Call,
        data: Option<BodyStream>,
    ) -> StoreResult<(T, BodyStream)> {
        let deadline = Instant::now() + self.inner.opts.deadline;
        let target = target_of(&self.map(), &call).ok_or_else(|| {
            StoreError::InvalidArgument(format!("{} names its node", call.name()))
        })?;
        match data {
            Some(data) => self.send_stream(target, call, data, deadline).await,
            None => self
                .send_routed(target, call, deadline)
                .await
                .map_err(|f| f.error),
        }
    }

    /// Send `call` to the leader of `target`'s group, following hints and
    /// passing over replicas that fail, until an answer or `deadline`
    /// (the rules: the module's docs).
    pub(super) async fn send_routed<T: DeserializeOwned>(
        &self,
        target: Target,
        call: Call,
        deadline: Instant,
    ) -> Result<(T, BodyStream), Failed> {
        let once = once_id(&call, target.replicas(&self.map()).len(), None);
        self.send_routed_once(target, call, deadline, once).await
    }

    /// The id `call` carries to its group, drawn now (`None` when it
    /// carries none: [`once_id`]), for a caller that needs to know it.
    pub(super) fn id_for(&self, call: &Call) -> Option<crate::repeat::CallId> {
        let map = self.map();
        let replicas = target_of(&map, call).map_or(1, |t| t.replicas(&map).len());
        once_id(call, replicas, None)
    }

    /// [`RemoteStore::send`] of a call without data, with the id `once`
    /// ([`RemoteStore::id_for`]), answered by `deadline`.
    pub(super) async fn send_as<T: DeserializeOwned>(
        &self,
        call: Call,
        once: Option<crate::repeat::CallId>,
        deadline: Instant,
    ) -> StoreResult<T> {
        let target = target_of(&self.map(), &call).ok_or_else(|| {
            StoreError::InvalidArgument(format!("{} names its node", call.name()))
        })?;
        let (reply, _) = self
            .send_routed_once(target, call, deadline, once)
            .await
            .map_err(|f| f.error)?;
        Ok(reply)
    }

    /// [`RemoteStore::send_routed`] with the call's id `once`, which all
    /// its attempts carry (a part of a call that covered several
    /// partitions keeps the whole call's id).
    async fn send_routed_once<T: DeserializeOwned>(
        &self,
        target: Target,
        mut call: Call,
        deadline: Instant,
        once: Option<crate::repeat::CallId>,
    ) -> Result<(T, BodyStream), Failed> {
        let name = call.name();
        let repeatable = call.may_repeat();
        let mut map = self.map();
        let mut rounds = Rounds::new(deadline);
        let (mut refreshed, mut repeated) = (false, false);
        loop {
            let replicas = target.replicas(&map).len();
            let since = self.inner.leaders.changes(&map, target);
            let node = self
                .leader(&map, target, name)
                .map_err(|e| Failed::new(e, repeated))?;
            let (sealed, back) = self
                .envelope(call, &map, &node, once, deadline)
                .map_err(|e| Failed::new(e, repeated))?;
            call = back;
            let until = attempt_until(replicas, deadline, self.inner.opts.deadline);
            let exchange = self.exchange(&node, name, sealed, None, until);
            let failure = match self
                .unless_deposed(&map, target, &node, since, exchange)
                .await
            {
                Ok(answer) => return Ok(answer),
                Err(f) => f,
            };
            match &failure {
                Sent::Store(_) => return Err(Failed::new(failure.into_store(), repeated)),
                Sent::WrongNode(seen) => {
                    if refreshed {
                        return Err(Failed::new(failure.into_store(), repeated));
                    }
                    refreshed = true;
                    let newer = self.refresh(*seen).map_err(|e| Failed::new(e, repeated))?;
                    if newer.version() == map.version() {
                        self.inner.leaders.pass(&map, target, &node);
                    }
                    map = newer;
                    // Sent again at once, as before replication.
                    continue;
                }
                Sent::Unreached(_) if replicas < 2 => {
                    return Err(Failed::new(failure.into_store(), repeated));
                }
                Sent::Lost(_) if replicas < 2 || !repeatable => {
                    return Err(Failed::new(failure.into_store(), repeated));
                }
                Sent::Lost(_) => repeated = true,
                Sent::NotLeader(_) | Sent::Unreached(_) => {}
            }
            self.note(&map, target, &node, &failure);
            if !rounds.next(replicas).await {
                let why = format!(
                    "no replica of {target} answered {name} within the deadline (last: {})",
                    failure.describe()
                );
                return Err(Failed::new(StoreError::Unavailable(why), repeated));
            }
        }
    }

    /// Send `call` with its data stream to the believed leader of
    /// `target`, once: a failure teaches the leader cache and is 503.
    async fn send_stream<T: DeserializeOwned>(
        &self,
        target: Target,
        call: Call,
        data: BodyStream,
        deadline: Instant,
    ) -> StoreResult<(T, BodyStream)> {
        let name = call.name();
        let map = self.map();
        let since = self.inner.leaders.changes(&map, target);
        let node = self.leader(&map, target, name)?;
        let (sealed, _) = self.envelope(call, &map, &node, None, deadline)?;
        let exchange = self.exchange(&node, name, sealed, Some(data), deadline);
        match self
            .unless_deposed(&map, target, &node, since, exchange)
            .await
        {
            Ok(answer) => Ok(answer),
            Err(failure) => {
                if let Sent::WrongNode(seen) = failure {
                    // For the retry; this call's stream is spent.
                    let _ = self.refresh(seen);
                }
                self.note(&map, target, &node, &failure);
                Err(failure.into_store())
            }
        }
    }

    /// `items` (each in one partition, `part_of`) sent to the leaders of
    /// their partitions: grouped by the believed leader, one `make(group)`
    /// call per replica, all in parallel. A group whose call fails on the
    /// way (not led, moved, unreachable; or lost, for a call that may be
    /// repeated) is sent again one partition at a time, each following its
    /// own leader ([`RemoteStore::send_routed`]), within the same deadline
    /// and with the same call id (a call that applies once: each
    /// partition's part of it is answered from its row if it committed).
    /// Each reply with the items it covers.
    pub(super) async fn fan_out<I, T>(
        &self,
        items: Vec<I>,
        part_of: impl Fn(&I) -> PartitionId + Sync,
        make: impl Fn(Vec<I>) -> Call + Sync,
    ) -> StoreResult<Vec<(Vec<I>, T)>>
    where
        I: Clone + Send,
        T: DeserializeOwned,
    {
        self.fan_out_once(items, part_of, make, None).await
    }

    /// [`RemoteStore::fan_out`] of a call that applies once with the
    /// caller's id `given` (`None`: a fresh id per leader's call).
    pub(super) async fn fan_out_once<I, T>(
        &self,
        items: Vec<I>,
        part_of: impl Fn(&I) -> PartitionId + Sync,
        make: impl Fn(Vec<I>) -> Call + Sync,
        given: Option<crate::repeat::CallId>,
    ) -> StoreResult<Vec<(Vec<I>, T)>>
    where
        I: Clone + Send,
        T: DeserializeOwned,
    {
        let deadline = Instant::now() + self.inner.opts.deadline;
        let map = self.map();
        let mut groups: Vec<(NodeId, Vec<I>)> = Vec::new();
        for item in items {
            let p = part_of(&item);
            let node = self.leader(&map, Target::Partition(p), "a call")?;
            match groups.iter_mut().find(|(n, _)| *n == node) {
                Some((_, g)) => g.push(item),
                None => groups.push((node, vec![item])),
            }
        }
        let spread = Spread {
            map,
            part_of: &part_of,
            make: &make,
            given,
            deadline,
        };
        let calls = groups
            .into_iter()
            .map(|(node, group)| self.group_call(&spread, node, group));
        let replies = futures::future::try_join_all(calls).await?;
        Ok(replies.into_iter().flatten().collect())
    }

    /// One group of [`RemoteStore::fan_out`]: `make(group)` to `node`,
    /// partition by partition again if that fails on the way.
    async fn group_call<I, T, P, M>(
        &self,
        spread: &Spread<'_, P, M>,
        node: NodeId,
        group: Vec<I>,
    ) -> StoreResult<Vec<(Vec<I>, T)>>
    where
        I: Clone + Send,
        T: DeserializeOwned,
        P: Fn(&I) -> PartitionId + Sync,
        M: Fn(Vec<I>) -> Call + Sync,
    {
        let Spread {
            map,
            part_of,
            make,
            given,
            deadline,
        } = spread;
        let (given, deadline) = (*given, *deadline);
        let call = make(group.clone());
        let (name, repeatable) = (call.name(), call.may_repeat());
        let mut parts: Vec<PartitionId> = group.iter().map(part_of).collect();
        parts.sort();
        parts.dedup();
        let replicas = parts
            .iter()
            .map(|p| map.replicas(*p).len())
            .max()
            .unwrap_or(1);
        let once = once_id(&call, replicas, given);
        let (sealed, _) = self.envelope(call, map, &node, once, deadline)?;
        let until = attempt_until(replicas, deadline, self.inner.opts.deadline);
        let failure = match self.exchange(&node, name, sealed, None, until).await {
            Ok((reply, _)) => return Ok(vec![(group, reply)]),
            Err(f) => f,
        };
        let again = match failure {
            Sent::Store(_) => false,
            Sent::WrongNode(_) => true,
            Sent::NotLeader(_) | Sent::Unreached(_) => replicas > 1,
            Sent::Lost(_) => replicas > 1 && repeatable,
        };
        if !again {
            return Err(failure.into_store());
        }
        match parts.as_slice() {
            // A hint about the one partition of the call is its leader's.
            [p] => self.note(map, Target::Partition(*p), &node, &failure),
            // Which partition a hint is about is not said: each finds its
            // own. A replica that failed fails for all of them.
            _ if !matches!(failure, Sent::NotLeader(_)) => {
                for p in &parts {
                    self.note(map, Target::Partition(*p), &node, &failure);
                }
            }
            _ => {}
        }
        let singles = parts.into_iter().map(|p| {
            let items: Vec<I> = group.iter().filter(|i| part_of(i) == p).cloned().collect();
            let call = make(items.clone());
            async move {
                let sent = self.send_routed_once(Target::Partition(p), call, deadline, once);
                sent.await
                    .map(|(reply, _)| (items, reply))
                    .map_err(|f| f.error)
            }
        });
        futures::future::try_join_all(singles).await
    }

    /// `exchange`, a call at `node` as `target`'s leader, given up as lost
    /// (its outcome unknown) once another replica claims to lead `target`
    /// after the `since`-th change of claimed leader (read before `node`
    /// was chosen; `Leaders::deposed`): a leader that stopped or was cut
    /// off keeps the call only until the group elects another, not to its
    /// deadline. Every [`super::watch::STALL_NUDGE`] the call is out, it
    /// asks the leader watch for a round of claims at once, so the new
    /// leader's claim is heard soon after the election, not at the
    /// watch's next tick.
    async fn unless_deposed<T>(
        &self,
        map: &PartitionMap,
        target: Target,
        node: &NodeId,
        since: u64,
        exchange: impl std::future::Future<Output = Result<T, Sent>>,
    ) -> Result<T, Sent> {
        if target.replicas(map).len() < 2 {
            // One replica: no other can claim the group.
            return exchange.await;
        }
        let mut exchange = std::pin::pin!(exchange);
        let mut deposed = std::pin::pin!(self.inner.leaders.deposed(map, target, node, since));
        let mut nudge = std::pin::pin!(tokio::time::sleep(super::watch::STALL_NUDGE));
        loop {
            tokio::select! {
                answer = &mut exchange => return answer,
                () = &mut deposed => return Err(Sent::Lost(format!(
                    "store node {node} stopped leading {target} while the call was out \
                     (another replica claims it)"
                ))),
                () = &mut nudge => {
                    // Still out: the leader may have stopped, so the watch
                    // asks the nodes for claims now, not at its next tick.
                    self.inner.hurry.notify_one();
                    nudge.as_mut().reset(tokio::time::Instant::now() + super::watch::STALL_NUDGE);
                }
            }
        }
    }

    /// Teach the leader cache what `node`'s failure on `target` says.
    pub(super) fn note(&self, map: &PartitionMap, target: Target, node: &NodeId, failure: &Sent) {
        let leaders = &self.inner.leaders;
        match failure {
            Sent::NotLeader(Some(id)) => {
                let learned = leaders.learn(map, target, *id);
                if learned.is_none_or(|n| n == *node) {
                    leaders.pass(map, target, node);
                }
            }
            Sent::NotLeader(None) | Sent::Unreached(_) | Sent::Lost(_) => {
                leaders.pass(map, target, node);
            }
            Sent::WrongNode(_) | Sent::Store(_) => {}
        }
    }

    /// The believed leader of `target` (for call `name`).
    fn leader(&self, map: &PartitionMap, target: Target, name: &str) -> StoreResult<NodeId> {
        self.inner
            .leaders
            .get(map, target)
            .ok_or_else(|| StoreError::InvalidArgument(format!("no node to send {name} to")))
    }

    /// The map after a node said it holds version `seen`.
    pub(super) fn refresh(&self, seen: u64) -> StoreResult<Arc<PartitionMap>> {
        self.inner
            .map
            .refresh(seen)
            .map_err(|e| StoreError::Unavailable(format!("partition map: {e}")))
    }

    /// The call's envelope for `node` with what goes with it (the
    /// caller's window there, the write's quota hold), and the call back
    /// (for another attempt). `once`: the call's id, the same for all
    /// its attempts, on a call that applies once ([`crate::repeat`]);
    /// `deadline`: when the caller stops waiting for the answer.
    pub(super) fn envelope(
        &self,
        call: Call,
        map: &PartitionMap,
        node: &NodeId,
        once: Option<crate::repeat::CallId>,
        deadline: Instant,
    ) -> StoreResult<(Sealed, Call)> {
        let caller = crate::caller::Caller::current();
        let window = caller
            .as_ref()
            .map(|c| self.inner.windows.of(node, &c.tenant.0));
        let hold = Handover::current().filter(|h| h.id().is_some() && call.takes_quota());
        let env = Envelope {
            answer_within_ms: answer_within_ms(&call, deadline),
            call,
            caller,
            map_version: map.version(),
            sender: self.inner.id,
            backlog: window.as_ref().map_or(0, |w| w.backlog() + 1),
            hold: hold.as_ref().and_then(|h| h.id()),
            once,
        };
        let watch = hold
            .as_ref()
            .and_then(|_| self.settle_watch(map, &env.call, node));
        let args = Bytes::from(encode(&env)?);
        let sealed = Sealed {
            args,
            window,
            hold,
            watch,
        };
        Ok((sealed, env.call))
    }

    /// One attempt at one node, within the caller's window there and by
    /// `deadline` (the wait for a place in the window included); its reply
    /// decoded (and the node's new window taken). A call that carries a
    /// quota hold tells the hold whether the node may still be running it.
    pub(super) async fn exchange<T: DeserializeOwned>(
        &self,
        node: &NodeId,
        method: &str,
        sealed: Sealed,
        data: Option<BodyStream>,
        deadline: Instant,
    ) -> Result<(T, BodyStream), Sent> {
        let Sealed {
            args,
            window,
            hold,
            watch,
        } = sealed;
        let client = self.client(node).ok_or_else(|| {
            Sent::Store(StoreError::Unavailable(format!(
                "store node {node} is not in the cluster file"
            )))
        })?;
        crate::caller::before_network_wait();
        let _slot = match &window {
            Some(w) => Some(w.enter(deadline).await.ok_or_else(|| {
                Sent::Store(StoreError::Unavailable(format!(
                    "store node {node} is busy with this tenant's calls"
                )))
            })?),
            None => None,
        };
        let opts = CallOptions {
            deadline: deadline.saturating_duration_since(Instant::now()),
            ..self.inner.opts.clone()
        };
        let sending = hold.as_ref().map(|h| h.sending(watch));
        let answer = client.call(method, args, data, &opts).await;
        if let Some(s) = sending {
            s.answered(answer.as_ref().err().is_none_or(node_is_done));
        }
        let (payload, rest) = answer?;
        let (given, reply) = split_window(&payload).map_err(Sent::Store)?;
        if let Some(w) = &window {
            w.set_limit(given);
        }
        Ok((decode(reply).map_err(Sent::Store)?, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::proto::tests::bucket;

    #[test]
    fn object_writes_to_a_replicated_group_carry_a_fresh_or_the_callers_call_id() {
        let delete = Call::DeleteObject {
            bucket: bucket(),
            key: "k".into(),
        };
        let tags = Call::PutObjectTags {
            bucket: bucket(),
            key: "k".into(),
            tags: Vec::new(),
        };
        let a = once_id(&delete, 3, None).expect("a delete to three replicas");
        assert_ne!(Some(a), once_id(&delete, 3, None), "each call its own id");
        assert!(once_id(&tags, 3, None).is_some());
        let bulk = Call::EditTags {
            bucket: bucket(),
            keys: vec!["k".into()],
            edit: crate::tagindex::TagEdit::default(),
        };
        assert!(once_id(&bulk, 3, None).is_some() && bulk.may_repeat());
        // A caller's id is kept; only where the call applies once.
        assert_eq!(once_id(&bulk, 3, Some([9; 16])), Some([9; 16]));
        assert_eq!(once_id(&bulk, 1, Some([9; 16])), None);
        assert!(delete.may_repeat() && tags.may_repeat());
        // One replica: no attempt is repeated, so no row is written.
        assert_eq!(once_id(&delete, 1, None), None);
        let head = Call::HeadObject {
            bucket: bucket(),
            key: "k".into(),
        };
        assert_eq!(once_id(&head, 3, None), None, "a read applies nothing");
        assert_eq!(once_id(&head, 3, Some([9; 16])), None);
    }
}
