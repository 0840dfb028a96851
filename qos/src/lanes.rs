//! [`Lanes`]: the async face of the scheduler, for the gateway.
//!
//! One [`Scheduler`] sits behind a `parking_lot` mutex together with a map
//! from waiting tickets to `tokio::sync::oneshot` senders. `admit`:
//!
//! 1. checks the tenant's hard caps (refusal is immediate);
//! 2. under the lock, enqueues the request and runs dispatch; if its own
//!    ticket was granted it returns a [`Permit`] at once, otherwise it
//!    parks a oneshot sender for it;
//! 3. waits on the receiver for at most `max_wait`.
//!
//! Whoever frees capacity (a dropped [`Permit`], a cancelled wait) runs
//! dispatch under the lock and fires the senders of the tickets it grants.
//! The lock is never held across an `.await`, and the critical sections are
//! a few map and B-tree operations.
//!
//! Cancellation safety: a waiting `admit` future that is dropped (client
//! gone) or times out withdraws its ticket, or, if the grant raced in
//! first, gives the units straight back, through a drop guard, so no unit
//! is ever leaked. A wait that times out just as it was granted keeps the
//! grant instead of refusing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::caps::{Caps, Limits, cells_for};
use crate::config::{LanesConfig, Mode};
use crate::lease::{Lease, Reaper};
use crate::scheduler::{Config, LaneStats, Rejected, Scheduler, TicketId};
use crate::stats::{LanesSnapshot, TenantSnapshot, WaitCounters};
use crate::tenant::{TenantKey, Weight};
use crate::{OverloadReason, Overloaded};

/// The shared admission controller: one per gateway process, cheap to
/// clone (one `Arc`), `Send` and `Sync`.
///
/// [`admit`](Self::admit) checks the tenant's [`Caps`], then queues the
/// request in the tenant's lane of a [`Scheduler`] and waits (at most
/// `max_wait`) until the scheduler grants it; the returned [`Permit`] gives
/// its units back when dropped, which wakes the next waiters. Dropping a
/// waiting `admit` future withdraws its request. [`pace`](crate::pace)
/// charges body bytes chunk by chunk through the same lanes.
#[derive(Clone)]
pub struct Lanes {
    shared: Arc<Shared>,
}

struct Shared {
    config: LanesConfig,
    reaper: Arc<Reaper>,
    state: Mutex<State>,
    limits: RwLock<HashMap<TenantKey, Arc<Limits>>>,
}

struct State {
    sched: Scheduler,
    waiters: HashMap<TicketId, oneshot::Sender<()>>,
    counters: HashMap<TenantKey, WaitCounters>,
}

/// The right to use `cost` units of backend service; they are given back
/// when it is dropped.
#[must_use = "the units are released as soon as the permit is dropped"]
pub struct Permit {
    held: Option<(Arc<Shared>, TicketId)>,
    cost: u64,
}

/// What enqueueing produced.
enum Enqueued {
    Granted(TicketId),
    Waiting(TicketId, oneshot::Receiver<()>),
}

/// A waiting admission; withdraws its ticket if dropped while armed.
struct WaitGuard<'a> {
    shared: &'a Arc<Shared>,
    id: TicketId,
    armed: bool,
}

impl Lanes {
    /// A controller with no tenants configured yet (tenants first seen in
    /// `admit` get `default_weight` and no caps).
    pub fn new(config: LanesConfig) -> Lanes {
        let sched = Scheduler::new(Config {
            capacity_units: config.capacity_units,
            max_queue_per_tenant: config.max_queue_per_tenant,
            default_weight: config.default_weight,
        });
        let state = State {
            sched,
            waiters: HashMap::new(),
            counters: HashMap::new(),
        };
        Lanes {
            shared: Arc::new(Shared {
                reaper: Reaper::new(config.max_hold),
                config,
                state: Mutex::new(state),
                limits: RwLock::new(HashMap::new()),
            }),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &LanesConfig {
        &self.shared.config
    }

    /// Sets a tenant's weight and caps; subsequent requests (and chunks)
    /// see them. Limiters are rebuilt (full buckets) only if the caps
    /// changed.
    pub fn update_tenant(&self, tenant: &TenantKey, weight: Weight, caps: Caps) {
        self.shared.state.lock().sched.set_tenant(tenant, weight);
        let mut limits = self.shared.limits.write();
        if caps.is_none() {
            limits.remove(tenant);
            return;
        }
        if limits.get(tenant).is_some_and(|l| l.caps() == caps) {
            return;
        }
        limits.insert(tenant.clone(), Arc::new(Limits::new(caps)));
    }

    /// Admits one request of `cost` units for `tenant` (see
    /// [`LanesConfig::request_cost`]): waits for its turn, at most
    /// `max_wait`. Refused at once if a cap is exceeded or the tenant's
    /// lane is full. Hold the permit while the backend works on the
    /// request; do not hold it while a paced body of the same request waits
    /// for its own chunks (see `docs/qos.md`).
    pub async fn admit(&self, tenant: &TenantKey, cost: u64) -> Result<Permit, Overloaded> {
        if let Some(limits) = self.limits_of(tenant) {
            limits
                .admit()
                .inspect_err(|e| self.count_cap_refusal(tenant, e))?;
        }
        let max_wait = self.shared.config.max_wait;
        self.acquire(tenant, cost, true, max_wait).await
    }

    /// Charges `units` to `tenant` without waiting or holding capacity
    /// (see [`Scheduler::charge`]): for the small body of a request that
    /// keeps its admission permit. No-op when lanes are off.
    pub fn charge(&self, tenant: &TenantKey, units: u64) {
        if self.shared.config.mode == Mode::Off {
            return;
        }
        self.shared.state.lock().sched.charge(tenant, units);
    }

    /// Holds `permit` while its consumer works, at most `max_hold` (see
    /// [`Lease`]): for a response's permit or a paced chunk's grant, whose
    /// consumer may be waiting on a client that stopped reading.
    pub fn lease(&self, permit: Permit) -> Lease {
        self.shared.reaper.lease(permit)
    }

    /// Copies every counter out (see [`LanesSnapshot`]).
    pub fn snapshot(&self) -> LanesSnapshot {
        let limits = self.shared.limits.read();
        let st = self.shared.state.lock();
        let mut tenants: Vec<TenantSnapshot> = st
            .sched
            .stats()
            .into_iter()
            .map(|l| {
                let counters = st.counters.get(&l.tenant).copied().unwrap_or_default();
                let caps = limits.get(&l.tenant).map_or(Caps::NONE, |x| x.caps());
                tenant_snapshot(l, counters, caps)
            })
            .collect();
        tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        LanesSnapshot {
            mode: self.shared.config.mode,
            capacity_units: st.sched.capacity_units(),
            in_flight_units: st.sched.in_flight_units(),
            queue_depth: st.sched.queued(),
            tenants,
        }
    }

    /// Takes `bytes` from the tenant's bytes/s cap, sleeping while it is
    /// exhausted. No-op for an uncapped tenant.
    pub(crate) async fn throttle_bytes(&self, tenant: &TenantKey, bytes: u64) {
        let Some(limits) = self.limits_of(tenant) else {
            return;
        };
        let mut cells = cells_for(bytes);
        while cells > 0 {
            match limits.take_cells(cells) {
                Ok(taken) => cells = cells.saturating_sub(taken),
                Err(wait) => tokio::time::sleep(wait).await,
            }
        }
    }

    /// Acquires units for a chunk of an admitted request's body: never
    /// refused for a full lane, waits at most `stream_max_wait`.
    pub(crate) async fn acquire_chunk(
        &self,
        tenant: &TenantKey,
        bytes: u64,
    ) -> Result<Permit, Overloaded> {
        let max_wait = self.shared.config.stream_max_wait;
        self.acquire(tenant, bytes, false, max_wait).await
    }

    fn limits_of(&self, tenant: &TenantKey) -> Option<Arc<Limits>> {
        let limits = self.shared.limits.read();
        if limits.is_empty() {
            return None;
        }
        limits.get(tenant).cloned()
    }

    async fn acquire(
        &self,
        tenant: &TenantKey,
        cost: u64,
        bounded: bool,
        max_wait: Duration,
    ) -> Result<Permit, Overloaded> {
        if self.shared.config.mode == Mode::Off {
            return Ok(Permit::bypass(cost));
        }
        let started = Instant::now();
        let (id, rx) = match self.enqueue(tenant, cost, bounded) {
            Ok(Enqueued::Granted(id)) => return Ok(self.permit(id, cost)),
            Ok(Enqueued::Waiting(id, rx)) => (id, rx),
            Err(rejected) => return Err(self.lane_full(&rejected)),
        };
        let mut guard = WaitGuard {
            shared: &self.shared,
            id,
            armed: true,
        };
        let woke = tokio::time::timeout(max_wait, rx).await;
        guard.armed = false;
        match woke {
            Ok(Ok(())) => Ok(self.granted(id, cost, tenant, started)),
            _ => self.settle_late(id, cost, tenant, started),
        }
    }

    /// Enqueues under the lock, dispatches, and reports whether the new
    /// ticket was granted right away.
    fn enqueue(&self, tenant: &TenantKey, cost: u64, bounded: bool) -> Result<Enqueued, Rejected> {
        let mut st = self.shared.state.lock();
        let id = if bounded {
            st.sched.enqueue(tenant, cost)?
        } else {
            st.sched.enqueue_unbounded(tenant, cost)
        };
        st.dispatch();
        if st.sched.is_granted(id) {
            return Ok(Enqueued::Granted(id));
        }
        let (tx, rx) = oneshot::channel();
        st.waiters.insert(id, tx);
        Ok(Enqueued::Waiting(id, rx))
    }

    /// The wait ended without a wake-up (timeout): withdraw the ticket, or
    /// keep the grant if it raced in.
    fn settle_late(
        &self,
        id: TicketId,
        cost: u64,
        tenant: &TenantKey,
        started: Instant,
    ) -> Result<Permit, Overloaded> {
        let mut st = self.shared.state.lock();
        st.waiters.remove(&id);
        if st.sched.is_granted(id) {
            drop(st);
            return Ok(self.granted(id, cost, tenant, started));
        }
        if st.sched.cancel(id) {
            st.dispatch();
        }
        let c = st.counters.entry(tenant.clone()).or_default();
        c.wait_timeouts += 1;
        c.total_wait = c.total_wait.saturating_add(started.elapsed());
        tracing::debug!(%tenant, cost, "lanes: wait timed out");
        Err(Overloaded {
            reason: OverloadReason::WaitTimeout,
            retry_after: self.shared.config.retry_after,
        })
    }

    /// Builds the permit for a ticket granted after waiting, and records
    /// the wait.
    fn granted(&self, id: TicketId, cost: u64, tenant: &TenantKey, started: Instant) -> Permit {
        let mut st = self.shared.state.lock();
        let c = st.counters.entry(tenant.clone()).or_default();
        c.total_wait = c.total_wait.saturating_add(started.elapsed());
        drop(st);
        self.permit(id, cost)
    }

    fn permit(&self, id: TicketId, cost: u64) -> Permit {
        Permit {
            held: Some((Arc::clone(&self.shared), id)),
            cost,
        }
    }

    fn lane_full(&self, rejected: &Rejected) -> Overloaded {
        tracing::debug!(tenant = %rejected.tenant, queued = rejected.queued, "lanes: lane full");
        Overloaded {
            reason: OverloadReason::QueueFull,
            retry_after: self.shared.config.retry_after,
        }
    }

    fn count_cap_refusal(&self, tenant: &TenantKey, e: &Overloaded) {
        let mut st = self.shared.state.lock();
        let c = st.counters.entry(tenant.clone()).or_default();
        match e.reason {
            OverloadReason::ByteRate => c.byte_rate += 1,
            _ => c.request_rate += 1,
        }
    }
}

/// One tenant's snapshot from the scheduler's and the async layer's
/// counters.
fn tenant_snapshot(l: LaneStats, c: WaitCounters, caps: Caps) -> TenantSnapshot {
    TenantSnapshot {
        weight: l.weight,
        caps,
        queue_depth: l.queued,
        in_flight_units: l.in_flight_units,
        granted: l.granted,
        served_units: l.served_units,
        total_queue_wait: c.total_wait,
        rejected_queue_full: l.rejected,
        rejected_wait_timeout: c.wait_timeouts,
        rejected_request_rate: c.request_rate,
        rejected_byte_rate: c.byte_rate,
        // Timed-out waits are withdrawn too; count them once.
        cancelled: l.cancelled.saturating_sub(c.wait_timeouts),
        tenant: l.tenant,
    }
}

impl State {
    /// Grants what fits and wakes the granted waiters.
    fn dispatch(&mut self) {
        for id in self.sched.next_grants() {
            if let Some(tx) = self.waiters.remove(&id) {
                // A closed receiver means its admit future is being
                // dropped; its guard gives the units back.
                let _ = tx.send(());
            }
        }
    }

    /// Forgets a ticket whatever its state, giving back its units.
    fn abandon(&mut self, id: TicketId) {
        self.waiters.remove(&id);
        if !self.sched.cancel(id) {
            self.sched.complete(id);
        }
        self.dispatch();
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.state.lock().abandon(self.id);
        }
    }
}

impl Permit {
    fn bypass(cost: u64) -> Permit {
        Permit { held: None, cost }
    }

    /// The units this permit holds.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Whether dropping it gives units back (false with lanes off).
    pub(crate) fn holds_units(&self) -> bool {
        self.held.is_some()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some((shared, id)) = self.held.take() {
            let mut st = shared.state.lock();
            st.sched.complete(id);
            st.dispatch();
        }
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("cost", &self.cost)
            .field("bypass", &self.held.is_none())
            .finish()
    }
}

impl std::fmt::Debug for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}
