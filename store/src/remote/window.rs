//! The gateway's side of the node windows ([`crate::node::windows`]): per
//! store node and tenant, at most the window the node last answered of
//! this tenant's calls are in flight to it; the others wait here, in
//! order, at most until the call's deadline (then 503). Waiting here costs
//! the node nothing, so a node shares itself by the tenants' weights
//! whichever gateways their calls come through.

use crate::cluster::NodeId;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Notify;

/// Windows kept at most (unused ones are dropped past it).
const MAX_WINDOWS: usize = 100_000;

/// A node's first answer is awaited with this window.
const FIRST_WINDOW: u32 = crate::node::windows::TOTAL;

/// One tenant's calls to one node.
pub(super) struct Window {
    state: Mutex<State>,
    freed: Notify,
}

#[derive(Clone, Copy)]
struct State {
    limit: u32,
    inflight: u32,
    waiting: u32,
}

/// A place in a window, given back on drop.
pub(super) struct Slot(Arc<Window>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.state.lock().inflight -= 1;
        self.0.freed.notify_one();
    }
}

impl Window {
    fn new() -> Window {
        Window {
            state: Mutex::new(State {
                limit: FIRST_WINDOW,
                inflight: 0,
                waiting: 0,
            }),
            freed: Notify::new(),
        }
    }

    /// Calls in flight or waiting (what the node is told).
    pub(super) fn backlog(&self) -> u32 {
        let s = *self.state.lock();
        s.inflight + s.waiting
    }

    /// The node's new window for this tenant (0: none given).
    pub(super) fn set_limit(&self, limit: u32) {
        if limit == 0 {
            return;
        }
        let grew = {
            let mut s = self.state.lock();
            let grew = limit > s.limit;
            s.limit = limit;
            grew
        };
        if grew {
            self.freed.notify_waiters();
        }
    }

    /// A place in the window, waiting until `deadline` at most (`None`:
    /// the deadline passed).
    pub(super) async fn enter(self: &Arc<Self>, deadline: tokio::time::Instant) -> Option<Slot> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut s = self.state.lock();
                if s.inflight < s.limit {
                    s.inflight += 1;
                    return Some(Slot(Arc::clone(self)));
                }
                s.waiting += 1;
            }
            let woke = tokio::time::timeout_at(deadline, freed).await;
            self.state.lock().waiting -= 1;
            if woke.is_err() {
                return None;
            }
        }
    }
}

/// Every window of a client.
#[derive(Default)]
pub(super) struct Windows {
    map: Mutex<HashMap<(NodeId, String), Arc<Window>>>,
}

impl Windows {
    /// The window of `tenant` at `node`.
    pub(super) fn of(&self, node: &NodeId, tenant: &str) -> Arc<Window> {
        let mut map = self.map.lock();
        if map.len() >= MAX_WINDOWS {
            map.retain(|_, w| Arc::strong_count(w) > 1);
        }
        Arc::clone(
            map.entry((node.clone(), tenant.to_string()))
                .or_insert_with(|| Arc::new(Window::new())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn calls_past_the_window_wait_for_a_place_or_the_deadline() {
        let w = Arc::new(Window::new());
        w.set_limit(1);
        let soon = || tokio::time::Instant::now() + Duration::from_millis(50);
        let first = w.enter(soon()).await.expect("a place");
        assert!(
            w.enter(soon()).await.is_none(),
            "the window is full until the deadline"
        );
        let waiter = {
            let w = Arc::clone(&w);
            tokio::spawn(async move {
                w.enter(tokio::time::Instant::now() + Duration::from_secs(5))
                    .await
                    .is_some()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(w.backlog(), 2, "one in flight, one waiting");
        drop(first);
        assert!(
            waiter.await.expect("join"),
            "a freed place goes to the waiter"
        );
    }

    #[tokio::test]
    async fn a_wider_window_lets_waiters_in() {
        let w = Arc::new(Window::new());
        w.set_limit(1);
        let _held = w.enter(tokio::time::Instant::now()).await.expect("a place");
        let waiter = {
            let w = Arc::clone(&w);
            tokio::spawn(async move {
                w.enter(tokio::time::Instant::now() + Duration::from_secs(5))
                    .await
                    .is_some()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.set_limit(2);
        assert!(waiter.await.expect("join"));
    }
}
