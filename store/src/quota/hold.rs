//! [`QuotaHold`]: a reservation of quota as the caller of
//! [`StoreClient::reserve_quota`](crate::StoreClient::reserve_quota) holds
//! it, whichever store made it; and its handover to the store node that
//! runs the write it covers ([`QuotaHold::cover`]).
//!
//! Why a handover: a hold must last until its write has committed or
//! failed, and in a cluster only the store node running the write knows
//! when that is. A gateway whose call timed out, lost its connection or
//! was cancelled by its own client has not learned the outcome, and the
//! node may still commit the write; giving the hold back then would let
//! other writes be admitted into room this one is about to fill. So the
//! write calls made under [`QuotaHold::cover`] carry the hold's id (the
//! catalog node's quota desk made it), the node gives the hold back
//! itself once its write is finished (`crate::node`), and the gateway
//! gives it back only when it knows the node is done: an answer came,
//! or the call never left. Otherwise the node's release is the one that
//! counts (and if the call was lost on the way in, the desk lets the
//! hold lapse: erring on the side of refusing). A hold left to a node
//! whose call carried a [`Watch`] comes back early all the same once the
//! watch finds the call settled (its partition is now led in a later
//! term, so the write has committed or never will: `crate::remote`),
//! since a node that died with the write in flight gives nothing back
//! and the hold would otherwise stay counted until it lapses. In process the same holds
//! for a caller dropped while its write commits (its S3 client hung up):
//! the in-process store's write takes the hold and gives it back itself.

use super::Reservation;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What gives a hold back.
type Release = Box<dyn FnOnce() + Send + Sync>;

/// How a call that carried a hold and got no answer is found settled:
/// run once the write is done, it resolves `true` once the call's write
/// has committed or never will (the hold may then be given back), or
/// `false` when it gives up (the hold stays with the node, or lapses).
/// Made by the client that sends the call (`crate::remote`).
pub(crate) type Watch = Box<dyn FnOnce() -> BoxFuture<'static, bool> + Send>;

/// A write's share of its tenant's quota, given back when dropped (after
/// the write commits or fails). In process it carries the engine's
/// [`Reservation`]; a remote client's hold runs the action that releases
/// the reservation on the node that made it, and has that node's id for
/// it, which write calls carry ([`QuotaHold::cover`]).
#[must_use = "the reservation is given back as soon as the hold is dropped"]
pub struct QuotaHold {
    release: Option<Release>,
    id: Option<u64>,
}

impl QuotaHold {
    /// A hold that runs `release` once, when it is dropped.
    pub fn new(release: impl FnOnce() + Send + Sync + 'static) -> QuotaHold {
        QuotaHold {
            release: Some(Box::new(release)),
            id: None,
        }
    }

    /// A hold made by a quota desk under `id`, given back by `release`
    /// (or by the store node its write ran on).
    pub fn remote(id: u64, release: impl FnOnce() + Send + Sync + 'static) -> QuotaHold {
        QuotaHold {
            release: Some(Box::new(release)),
            id: Some(id),
        }
    }

    /// The quota desk's id of a remote hold (what a write call carries).
    pub fn id(&self) -> Option<u64> {
        self.id
    }

    /// Run `write` (the store calls of one write) under this hold, then
    /// give the hold back, unless a call of `write` that carried it may
    /// still be running on a store node (no answer came: the node gives
    /// it back when that write is done). The same when this future is
    /// dropped before it finishes. An in-process hold (no id) may be
    /// taken by the in-process store's write, which keeps it until that
    /// write is done, in a task of its own (`crate::LocalStore`): a
    /// caller dropped while its write commits gives nothing back early.
    pub async fn cover<F: Future>(self, write: F) -> F::Output {
        let handover = Arc::new(Handover {
            id: self.id,
            at_node: AtomicBool::new(false),
            watches: Mutex::new(Some(Vec::new())),
            kept: Mutex::new(Some(self)),
        });
        let covered = Covered(Arc::clone(&handover));
        let out = HANDOVER.scope(handover, write).await;
        drop(covered);
        out
    }
}

/// A hold while its write runs: given back on drop (if the write did not
/// take it) unless a store node may still be running a call that carried
/// it; then given back once every such call's watch finds it settled, or
/// left to the node if one had no watch.
struct Covered(Arc<Handover>);

impl Drop for Covered {
    fn drop(&mut self) {
        let Some(mut hold) = self.0.kept.lock().take() else {
            return;
        };
        if !self.0.at_node.load(Ordering::Acquire) {
            return;
        }
        let watches = self.0.watches.lock().take().unwrap_or_default();
        let runtime = tokio::runtime::Handle::try_current();
        match (hold.release.take(), runtime) {
            (Some(release), Ok(runtime)) if !watches.is_empty() => {
                runtime.spawn(settle(release, watches));
            }
            // Left to the node (or to the hold's lapse).
            _ => {}
        }
    }
}

/// Give a hold back (`release`) once every watch found its call settled;
/// if one gives up (or the task is dropped), the hold stays with the node.
async fn settle(release: Release, watches: Vec<Watch>) {
    let settled = futures::future::join_all(watches.into_iter().map(|w| w())).await;
    if settled.into_iter().all(|s| s) {
        release();
    }
}

tokio::task_local! {
    static HANDOVER: Arc<Handover>;
}

/// The hold of the write the running task makes ([`QuotaHold::cover`]):
/// what its calls to store nodes carry, or what the in-process store's
/// write takes.
pub(crate) struct Handover {
    /// The desk's id of a remote hold.
    id: Option<u64>,
    /// Set once a call carrying the hold went out and no answer came.
    at_node: AtomicBool,
    /// The watches of such calls; `None` once one of them had none (the
    /// node alone may give the hold back then).
    watches: Mutex<Option<Vec<Watch>>>,
    /// The hold, until the write is done or takes it.
    kept: Mutex<Option<QuotaHold>>,
}

impl Handover {
    /// The hold of the running task's write, if it has one.
    pub(crate) fn current() -> Option<Arc<Handover>> {
        HANDOVER.try_with(Arc::clone).ok()
    }

    /// The desk's id of the hold (`None`: an in-process hold).
    pub(crate) fn id(&self) -> Option<u64> {
        self.id
    }

    /// The running task's in-process hold, taken by the write that keeps
    /// it until it is done (`None`: no hold, a remote one, or taken).
    pub(crate) fn take_in_process() -> Option<QuotaHold> {
        let h = Handover::current()?;
        if h.id.is_some() {
            return None;
        }
        h.kept.lock().take()
    }

    /// A call carrying the hold is going out: unless
    /// [`Sending::answered`] says otherwise, the node has it, and `watch`
    /// (if any) can tell when the call is settled.
    pub(crate) fn sending(self: &Arc<Self>, watch: Option<Watch>) -> Sending {
        Sending {
            handover: Some(Arc::clone(self)),
            watch,
        }
    }

    /// A call carrying the hold may still run at its node: keep its watch
    /// (without one, only the node gives the hold back).
    fn left_at_node(&self, watch: Option<Watch>) {
        let mut watches = self.watches.lock();
        match (watches.as_mut(), watch) {
            (Some(all), Some(w)) => all.push(w),
            _ => *watches = None,
        }
        self.at_node.store(true, Ordering::Release);
    }
}

/// One call that carries a hold, until its outcome is known.
pub(crate) struct Sending {
    handover: Option<Arc<Handover>>,
    watch: Option<Watch>,
}

impl Sending {
    /// The call ended: `done` when the node answered or the call never
    /// left (the node is not running it); otherwise the node may be.
    pub(crate) fn answered(mut self, done: bool) {
        if let (Some(h), false) = (self.handover.take(), done) {
            h.left_at_node(self.watch.take());
        }
    }
}

impl Drop for Sending {
    /// Dropped before its outcome was known (the caller was cancelled,
    /// or gave up on a leader another replica replaced): the node may be
    /// running the call.
    fn drop(&mut self) {
        if let Some(h) = self.handover.take() {
            h.left_at_node(self.watch.take());
        }
    }
}

impl From<Reservation> for QuotaHold {
    fn from(r: Reservation) -> QuotaHold {
        QuotaHold::new(move || drop(r))
    }
}

impl Drop for QuotaHold {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl fmt::Debug for QuotaHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaHold")
            .field("held", &self.release.is_some())
            .field("id", &self.id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_release_runs_once_when_the_hold_is_dropped() {
        let released = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&released);
        let hold = QuotaHold::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(released.load(Ordering::SeqCst), 0);
        drop(hold);
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    /// A remote hold whose release counts into `released`.
    fn remote(id: u64, released: &Arc<AtomicUsize>) -> QuotaHold {
        let counter = Arc::clone(released);
        QuotaHold::remote(id, move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
    }

    /// A call of the covered write: sent under the task's hold, ended as
    /// `done` says.
    fn call(done: bool) {
        let handover = Handover::current().expect("a covered write");
        handover.sending(None).answered(done);
    }

    #[tokio::test]
    async fn a_covered_write_gives_the_hold_back_once_its_calls_were_answered() {
        let released = Arc::new(AtomicUsize::new(0));
        let out = remote(7, &released)
            .cover(async {
                assert_eq!(Handover::current().and_then(|h| h.id()), Some(7));
                call(true);
                call(true);
                "written"
            })
            .await;
        assert_eq!(out, "written");
        assert_eq!(released.load(Ordering::SeqCst), 1);
        assert!(
            Handover::current().is_none(),
            "the hold is the write's only"
        );
    }

    #[tokio::test]
    async fn a_call_without_an_answer_leaves_the_hold_to_the_node() {
        let released = Arc::new(AtomicUsize::new(0));
        remote(8, &released)
            .cover(async {
                call(false);
                // A later answered call does not take the hold back: the
                // first may still be running.
                call(true);
            })
            .await;
        assert_eq!(released.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_write_dropped_during_a_call_leaves_the_hold_to_the_node() {
        let released = Arc::new(AtomicUsize::new(0));
        let (sent_tx, sent_rx) = tokio::sync::oneshot::channel::<()>();
        let write = remote(9, &released).cover(async move {
            let _sending = Handover::current().expect("covered").sending(None);
            let _ = sent_tx.send(());
            std::future::pending::<()>().await;
        });
        let task = tokio::spawn(write);
        sent_rx.await.expect("the call went out");
        task.abort();
        let _ = task.await;
        assert_eq!(released.load(Ordering::SeqCst), 0);
    }

    /// A watch that answers `settled` once `go` is sent.
    fn watch(settled: bool) -> (Watch, tokio::sync::oneshot::Sender<()>) {
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let w: Watch = Box::new(move || {
            Box::pin(async move {
                let _ = wait.await;
                settled
            })
        });
        (w, go)
    }

    /// A covered write under hold `id` whose calls go out with their
    /// watches and end as said: answered (`true`) or left at the node.
    async fn write_making(id: u64, released: &Arc<AtomicUsize>, calls: Vec<(Option<Watch>, bool)>) {
        remote(id, released)
            .cover(async move {
                let h = Handover::current().expect("covered");
                for (watch, done) in calls {
                    h.sending(watch).answered(done);
                }
            })
            .await;
    }

    /// Let spawned tasks run.
    async fn settle_down() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_hold_left_at_a_node_comes_back_once_every_watch_finds_its_call_settled() {
        let released = Arc::new(AtomicUsize::new(0));
        let (first, go_first) = watch(true);
        let (second, go_second) = watch(true);
        write_making(
            11,
            &released,
            vec![(Some(first), false), (Some(second), false)],
        )
        .await;
        settle_down().await;
        assert_eq!(released.load(Ordering::SeqCst), 0, "not settled yet");
        go_first.send(()).expect("watching");
        settle_down().await;
        assert_eq!(released.load(Ordering::SeqCst), 0, "one call still out");
        go_second.send(()).expect("watching");
        settle_down().await;
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_watch_that_gives_up_leaves_the_hold_to_the_node() {
        let released = Arc::new(AtomicUsize::new(0));
        let (gives_up, go) = watch(false);
        write_making(12, &released, vec![(Some(gives_up), false)]).await;
        go.send(()).expect("watching");
        settle_down().await;
        assert_eq!(released.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_call_left_at_a_node_without_a_watch_outweighs_the_watched_ones() {
        let released = Arc::new(AtomicUsize::new(0));
        let (settles, go) = watch(true);
        write_making(13, &released, vec![(Some(settles), false), (None, false)]).await;
        // The watch was dropped with the hold left to the node.
        assert!(go.send(()).is_err(), "nothing watches");
        settle_down().await;
        assert_eq!(released.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_write_cancelled_during_a_watched_call_comes_back_once_settled() {
        let released = Arc::new(AtomicUsize::new(0));
        let (settles, go) = watch(true);
        let (sent_tx, sent_rx) = tokio::sync::oneshot::channel::<()>();
        let write = remote(14, &released).cover(async move {
            let _sending = Handover::current().expect("covered").sending(Some(settles));
            let _ = sent_tx.send(());
            std::future::pending::<()>().await;
        });
        let task = tokio::spawn(write);
        sent_rx.await.expect("the call went out");
        task.abort();
        let _ = task.await;
        settle_down().await;
        assert_eq!(released.load(Ordering::SeqCst), 0);
        go.send(()).expect("watching");
        settle_down().await;
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_answered_call_drops_its_watch_unrun() {
        let released = Arc::new(AtomicUsize::new(0));
        let (unused, go) = watch(false);
        write_making(15, &released, vec![(Some(unused), true)]).await;
        assert!(go.send(()).is_err(), "the watch was dropped");
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_write_dropped_before_any_call_gives_the_hold_back() {
        let released = Arc::new(AtomicUsize::new(0));
        let write = remote(10, &released).cover(std::future::pending::<()>());
        let task = tokio::spawn(write);
        tokio::task::yield_now().await;
        task.abort();
        let _ = task.await;
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_in_process_hold_is_given_back_after_its_write() {
        let released = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&released);
        let hold = QuotaHold::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        hold.cover(async {
            assert_eq!(
                Handover::current().and_then(|h| h.id()),
                None,
                "no id to carry"
            );
        })
        .await;
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_in_process_hold_taken_by_its_write_is_given_back_by_that_write() {
        let released = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&released);
        let hold = QuotaHold::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
        let write = hold.cover(async move {
            let taken = Handover::take_in_process().expect("the hold");
            assert!(Handover::take_in_process().is_none(), "taken once");
            let _ = taken_tx.send(taken);
            std::future::pending::<()>().await;
        });
        let task = tokio::spawn(write);
        let taken = taken_rx.await.expect("taken");
        task.abort();
        let _ = task.await;
        assert_eq!(released.load(Ordering::SeqCst), 0, "the write keeps it");
        drop(taken);
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_remote_hold_is_never_taken_by_an_in_process_write() {
        let released = Arc::new(AtomicUsize::new(0));
        remote(11, &released)
            .cover(async {
                assert!(Handover::take_in_process().is_none());
            })
            .await;
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_hold_can_move_between_tasks() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<QuotaHold>();
        send_sync::<Reservation>();
    }
}
