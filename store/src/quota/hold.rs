//! [`QuotaHold`]: a reservation of quota as the caller of
//! [`StoreClient::reserve_quota`](crate::StoreClient::reserve_quota) holds
//! it, whichever store made it.

use super::Reservation;
use std::fmt;

/// What gives a hold back.
type Release = Box<dyn FnOnce() + Send + Sync>;

/// A write's share of its tenant's quota, given back when dropped (after
/// the write commits or fails). In process it carries the engine's
/// [`Reservation`]; a remote client's hold runs the action that releases
/// the reservation on the node that made it.
#[must_use = "the reservation is given back as soon as the hold is dropped"]
pub struct QuotaHold {
    release: Option<Release>,
}

impl QuotaHold {
    /// A hold that runs `release` once, when it is dropped.
    pub fn new(release: impl FnOnce() + Send + Sync + 'static) -> QuotaHold {
        QuotaHold {
            release: Some(Box::new(release)),
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

    #[test]
    fn a_hold_can_move_between_tasks() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<QuotaHold>();
        send_sync::<Reservation>();
    }
}
