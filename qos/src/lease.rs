//! [`Lease`]: a [`Permit`] held while its holder works, but never longer
//! than `max_hold` ([`LanesConfig::max_hold`](crate::LanesConfig)).
//!
//! A response's permit, and the grant of a paced body chunk, are meant to
//! cover the server's work on them: hyper writes the bytes to the socket
//! and polls the body for more. When the client does not read (a paused
//! reader, a slow link, an HTTP/2 stream whose window is 0), hyper stops
//! polling, and a plainly held permit would keep its units, and with them
//! the capacity every tenant shares, for as long as the client pleases.
//! One unread 7 MiB GET was enough to refuse every tenant's requests.
//!
//! A lease gives its units back at the first of: the holder drops it (the
//! work ended), or `max_hold` has passed since it was taken (the holder is
//! waiting on a client, which is not work). The bytes stay charged to the
//! tenant's lane either way, so a slow reader still pays for what it gets;
//! it just stops holding what others need.
//!
//! Expiry runs in one background task per [`Lanes`](crate::Lanes), the
//! reaper, started with the first lease. Every lease has the same hold, so
//! deadlines are queued in the order they were taken (a FIFO is sorted),
//! and the task sleeps until the oldest is due. The queue is bounded
//! ([`MAX_PENDING`]): a lease taken when it is full is released at once,
//! so neither the queue nor a held permit can grow without bound. Outside
//! a tokio runtime there is no reaper and a lease is held until dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::lanes::Permit;

/// Leases that may wait for expiry at once; past this a new lease is
/// released as soon as it is taken.
pub const MAX_PENDING: usize = 1 << 16;

/// Where a leased permit lives until its holder or the reaper takes it.
type Slot = Mutex<Option<Permit>>;

/// A permit that is given back when dropped, or by the reaper after the
/// lanes' `max_hold`, whichever comes first.
#[must_use = "the units are released as soon as the lease is dropped"]
pub struct Lease {
    slot: Arc<Slot>,
}

impl Lease {
    /// Whether the permit is still held (neither expired nor released).
    pub fn is_held(&self) -> bool {
        self.slot.lock().is_some()
    }

    /// Gives the units back now.
    pub fn release(&self) {
        drop(self.slot.lock().take());
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.release();
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("held", &self.is_held())
            .finish()
    }
}

/// The expiry queue of one `Lanes`, and its task.
pub(crate) struct Reaper {
    max_hold: Duration,
    queue: Mutex<VecDeque<(Instant, Weak<Slot>)>>,
    wake: Notify,
    started: AtomicBool,
}

impl Reaper {
    /// A reaper whose leases last at most `max_hold`.
    pub(crate) fn new(max_hold: Duration) -> Arc<Reaper> {
        Arc::new(Reaper {
            max_hold,
            queue: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            started: AtomicBool::new(false),
        })
    }

    /// Leases `permit`. A permit that holds no units (lanes off) is not
    /// queued: there is nothing to give back early.
    pub(crate) fn lease(self: &Arc<Self>, permit: Permit) -> Lease {
        let holds_units = permit.holds_units();
        let slot = Arc::new(Mutex::new(Some(permit)));
        let lease = Lease {
            slot: Arc::clone(&slot),
        };
        if !holds_units || !self.ensure_started() {
            return lease;
        }
        let deadline = Instant::now() + self.max_hold;
        let was_empty = {
            let mut queue = self.queue.lock();
            if queue.len() >= MAX_PENDING {
                drop(queue);
                lease.release();
                return lease;
            }
            queue.push_back((deadline, Arc::downgrade(&slot)));
            queue.len() == 1
        };
        if was_empty {
            self.wake.notify_one();
        }
        lease
    }

    /// Starts the task once; false outside a tokio runtime.
    fn ensure_started(self: &Arc<Self>) -> bool {
        if self.started.load(Ordering::Acquire) {
            return true;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        if !self.started.swap(true, Ordering::AcqRel) {
            handle.spawn(run(Arc::clone(self)));
        }
        true
    }

    /// Releases every lease due by `now`; returns the next deadline.
    fn expire(&self, now: Instant) -> Option<Instant> {
        let mut due = Vec::new();
        let next = {
            let mut queue = self.queue.lock();
            while let Some((deadline, _)) = queue.front() {
                if *deadline > now {
                    break;
                }
                if let Some((_, slot)) = queue.pop_front() {
                    due.push(slot);
                }
            }
            queue.front().map(|(d, _)| *d)
        };
        // Permits are dropped outside the queue's lock: dropping one takes
        // the scheduler's lock and dispatches.
        for slot in due {
            if let Some(slot) = slot.upgrade() {
                drop(slot.lock().take());
            }
        }
        next
    }
}

/// The reaper's task: expire what is due, sleep until the next deadline
/// or until a lease arrives in an empty queue.
async fn run(reaper: Arc<Reaper>) {
    loop {
        match reaper.expire(Instant::now()) {
            Some(next) => tokio::time::sleep_until(next).await,
            None => reaper.wake.notified().await,
        }
    }
}
