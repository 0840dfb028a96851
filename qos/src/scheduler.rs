//! The scheduler core: start-time fair queuing (SFQ) over per-tenant FIFO
//! lanes, with a bounded number of cost units in flight.
//!
//! This is pure, deterministic bookkeeping: no clock, no threads, no async.
//! The caller (the async [`Lanes`](crate::Lanes) wrapper, or a simulation
//! in a test) drives it with four calls:
//!
//! * [`Scheduler::enqueue`] puts a request of some cost in its tenant's
//!   lane, or refuses it when the lane already holds
//!   `max_queue_per_tenant` requests;
//! * [`Scheduler::next_grants`] dispatches waiting requests while their
//!   units fit in the free capacity, lowest start tag first;
//! * [`Scheduler::complete`] gives a granted request's units back;
//! * [`Scheduler::cancel`] withdraws a request that is still waiting.
//!
//! Dispatch order is the SFQ order: the waiting lane heads sit in an
//! ordered set keyed by (start tag, ticket sequence), so the smallest start
//! tag goes first and ties go to the older request. Virtual time `V` is the
//! largest start tag dispatched so far. Dispatch is strictly in tag order:
//! if the lowest-tagged head does not fit in the free capacity, nothing
//! behind it is dispatched either (otherwise a tenant with large requests
//! would be overtaken forever by one with small ones). A request costing
//! more than the whole capacity occupies all of it, alone.
//!
//! Properties, each pinned by a test in `tests/`:
//! * proportional share: backlogged tenants get granted cost in the ratio
//!   of their weights;
//! * work conservation: capacity is never left idle while a request that
//!   fits is waiting at the front, so a lone tenant gets all of it;
//! * no credit hoarding: a lane that was empty is tagged from the current
//!   `V` (see `lane.rs`), so idling earns no burst.

use std::collections::{BTreeSet, HashMap};

use crate::lane::{Lane, Queued};
use crate::tenant::{TenantKey, Weight};

/// Settings of the scheduler core.
#[derive(Debug, Clone)]
pub struct Config {
    /// Cost units that may be in flight (granted, not completed) at once.
    /// 0 is treated as 1; `u64::MAX` means "never limited".
    pub capacity_units: u64,
    /// Requests a tenant may have waiting before [`Scheduler::enqueue`]
    /// refuses more (0 is treated as 1).
    pub max_queue_per_tenant: usize,
    /// Weight of a tenant first seen by `enqueue` without `set_tenant`.
    pub default_weight: Weight,
}

/// A request that could not be queued: its tenant's lane is full.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lane of tenant {tenant} is full ({queued} requests waiting)")]
pub struct Rejected {
    /// The tenant whose lane is full.
    pub tenant: TenantKey,
    /// How many requests were waiting in it.
    pub queued: usize,
}

/// How many times the capacity a lane may have in flight while it is the
/// only active lane. Capacity is how lanes *share* the backend; it is kept
/// small so that, under contention, requests wait in the lanes (where the
/// weights apply) rather than inside the backend. A lone tenant has nobody
/// to share with, and on the benchmark machine it lost up to 19% of its
/// lanes-off throughput to those waits (docs/qos.md). A bounded factor,
/// rather than no limit, keeps the backlog a newcomer waits behind short:
/// when a second lane becomes active the limit drops back to the capacity,
/// and the newcomer's first request waits until the lone lane's surplus
/// has drained (at most 15 capacities of work). With the gateway's 256 KiB
/// capacity, 16 lets a lone tenant's 32 small requests (96 KiB each) all
/// be in flight.
pub const ALONE_FACTOR: u64 = 16;

/// How many tickets (requests and chunks) a lane must have been the only
/// active one before [`ALONE_FACTOR`] applies. A light tenant's lane is
/// often empty for a moment between its requests; without this memory a
/// busy neighbour would count as alone in those moments, run up eight
/// capacities, and make the light tenant's next request wait behind them.
pub const ALONE_AFTER: u64 = 4096;

/// Names one enqueued request until it is completed or cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TicketId {
    seq: u64,
    lane: usize,
}

/// Counters of one tenant's lane, as returned by [`Scheduler::stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneStats {
    /// The tenant.
    pub tenant: TenantKey,
    /// Its current weight.
    pub weight: Weight,
    /// Requests waiting now.
    pub queued: usize,
    /// Units granted and not yet completed now.
    pub in_flight_units: u64,
    /// Requests granted since the lane was created.
    pub granted: u64,
    /// Cost units granted since the lane was created.
    pub served_units: u64,
    /// Requests refused because the lane was full.
    pub rejected: u64,
    /// Requests withdrawn while waiting.
    pub cancelled: u64,
}

/// A granted request's bookkeeping.
#[derive(Debug, Clone, Copy)]
struct Granted {
    lane: usize,
    units: u64,
}

/// The pure scheduler: start-time fair queuing over per-tenant FIFO lanes,
/// with at most `capacity_units` cost units granted and not completed
/// ([`ALONE_FACTOR`] times that while only one lane is active).
///
/// Driven by explicit calls, with no clock: [`enqueue`](Self::enqueue) a
/// request's cost, [`next_grants`](Self::next_grants) to dispatch what
/// fits, [`complete`](Self::complete) when the work is done,
/// [`cancel`](Self::cancel) to withdraw a waiting request.
///
/// Each lane's head request gets the start tag `max(V, F)`, where `F` is
/// the finish tag of the lane's previous dispatched request and `V` the
/// virtual time (the largest start tag dispatched so far); a dispatched
/// request moves its lane's `F` to `start + cost / weight`. Dispatch takes
/// the lowest start tag first (ties: the older request), strictly: if it
/// does not fit in the free capacity, nothing behind it goes either. So
/// backlogged tenants get cost in proportion to their weights, a lone
/// tenant gets all the capacity, and a tenant waking from idle starts at
/// `V` and gets no burst for the time it was idle. A request costing more
/// than the whole capacity runs alone.
#[derive(Debug)]
pub struct Scheduler {
    capacity: u64,
    max_queue: usize,
    default_weight: Weight,
    index: HashMap<TenantKey, usize>,
    lanes: Vec<Lane>,
    /// Waiting lane heads: (start tag, ticket sequence, lane).
    heads: BTreeSet<(u128, u64, usize)>,
    granted: HashMap<u64, Granted>,
    vtime: u128,
    in_flight: u64,
    next_seq: u64,
    /// Lanes with work waiting or in flight.
    active: usize,
    /// `next_seq` when two or more lanes were last active.
    last_shared: u64,
}

impl Scheduler {
    /// A scheduler with no tenants yet.
    pub fn new(config: Config) -> Scheduler {
        Scheduler {
            capacity: config.capacity_units.max(1),
            max_queue: config.max_queue_per_tenant.max(1),
            default_weight: config.default_weight,
            index: HashMap::new(),
            lanes: Vec::new(),
            heads: BTreeSet::new(),
            granted: HashMap::new(),
            vtime: 0,
            in_flight: 0,
            next_seq: 0,
            active: 0,
            last_shared: 0,
        }
    }

    /// Sets a tenant's weight (creating its lane if needed). A request
    /// already at the front of the lane keeps the tag it was given; every
    /// later one is tagged with the new weight.
    pub fn set_tenant(&mut self, tenant: &TenantKey, weight: Weight) {
        let lane = self.lane_of(tenant);
        self.lanes[lane].weight = weight;
    }

    /// The tenant's weight, if it has a lane.
    pub fn weight(&self, tenant: &TenantKey) -> Option<Weight> {
        self.index.get(tenant).map(|&i| self.lanes[i].weight)
    }

    /// Queues a request of `cost` units for `tenant`, unless its lane
    /// already holds `max_queue_per_tenant` waiting requests. The request
    /// is not granted yet: call [`Scheduler::next_grants`].
    pub fn enqueue(&mut self, tenant: &TenantKey, cost: u64) -> Result<TicketId, Rejected> {
        let lane = self.lane_of(tenant);
        let queued = self.lanes[lane].queue.len();
        if queued >= self.max_queue {
            self.lanes[lane].counters.rejected += 1;
            return Err(Rejected {
                tenant: tenant.clone(),
                queued,
            });
        }
        Ok(self.push(lane, cost))
    }

    /// Queues a request whatever the lane's length: for more work of a
    /// request that was already admitted (the next chunk of its body), which
    /// must not fail half way because the lane is busy. It still waits its
    /// turn like any other request.
    pub fn enqueue_unbounded(&mut self, tenant: &TenantKey, cost: u64) -> TicketId {
        let lane = self.lane_of(tenant);
        self.push(lane, cost)
    }

    /// Charges `units` to `tenant`'s lane without granting or holding
    /// capacity: the lane's later requests are tagged as if it had been
    /// served that much more. For small bodies of requests that already
    /// hold a permit, which must not wait a second time.
    pub fn charge(&mut self, tenant: &TenantKey, units: u64) {
        let lane = self.lane_of(tenant);
        let vtime = self.vtime;
        self.lanes[lane].charge(vtime, units);
    }

    /// Grants waiting requests, in start-tag order, while they fit in the
    /// free capacity. Returns the granted tickets (often none).
    pub fn next_grants(&mut self) -> Vec<TicketId> {
        let mut out = Vec::new();
        while let Some(id) = self.grant_one() {
            out.push(id);
        }
        out
    }

    /// Gives back the units of a granted request. Returns false (and does
    /// nothing) if `id` is not granted: still waiting, or already done.
    pub fn complete(&mut self, id: TicketId) -> bool {
        let Some(g) = self.granted.remove(&id.seq) else {
            return false;
        };
        self.in_flight = self.in_flight.saturating_sub(g.units);
        let lane = &mut self.lanes[g.lane];
        lane.in_flight = lane.in_flight.saturating_sub(g.units);
        self.note_activity(g.lane, true);
        true
    }

    /// Withdraws a request that is still waiting. Returns false (and does
    /// nothing) if `id` is not waiting: already granted, or done.
    pub fn cancel(&mut self, id: TicketId) -> bool {
        let Some(lane) = self.lanes.get_mut(id.lane) else {
            return false;
        };
        let Some(pos) = lane.position(id.seq) else {
            return false;
        };
        lane.counters.cancelled += 1;
        if pos > 0 {
            lane.queue.remove(pos);
            return true;
        }
        if let Some(tag) = lane.head_tag.take() {
            self.heads.remove(&(tag, id.seq, id.lane));
        }
        lane.queue.pop_front();
        self.tag_head(id.lane);
        self.note_activity(id.lane, true);
        true
    }

    /// True if `id` is granted and not completed.
    pub fn is_granted(&self, id: TicketId) -> bool {
        self.granted.contains_key(&id.seq)
    }

    /// Units granted and not completed, over all tenants.
    pub fn in_flight_units(&self) -> u64 {
        self.in_flight
    }

    /// The capacity in units.
    pub fn capacity_units(&self) -> u64 {
        self.capacity
    }

    /// Requests waiting, over all tenants.
    pub fn queued(&self) -> usize {
        self.lanes.iter().map(|l| l.queue.len()).sum()
    }

    /// Counters of every tenant that has a lane, in order of first use.
    pub fn stats(&self) -> Vec<LaneStats> {
        self.lanes.iter().map(lane_stats).collect()
    }

    /// Counters of one tenant, if it has a lane.
    pub fn tenant_stats(&self, tenant: &TenantKey) -> Option<LaneStats> {
        self.index.get(tenant).map(|&i| lane_stats(&self.lanes[i]))
    }

    /// The lane of `tenant`, created with the default weight if new.
    fn lane_of(&mut self, tenant: &TenantKey) -> usize {
        if let Some(&i) = self.index.get(tenant) {
            return i;
        }
        let i = self.lanes.len();
        self.lanes
            .push(Lane::new(tenant.clone(), self.default_weight));
        self.index.insert(tenant.clone(), i);
        i
    }

    /// Appends a request to a lane; tags it if it is the new head.
    fn push(&mut self, lane: usize, cost: u64) -> TicketId {
        let seq = self.next_seq;
        self.next_seq += 1;
        let was_active = self.lanes[lane].is_active();
        let l = &mut self.lanes[lane];
        l.queue.push_back(Queued { seq, cost });
        if l.queue.len() == 1 {
            self.tag_head(lane);
        }
        self.note_activity(lane, was_active);
        TicketId { seq, lane }
    }

    /// Units that may be in flight now: the capacity, or
    /// [`ALONE_FACTOR`] times it once a single lane has been the only
    /// active one for [`ALONE_AFTER`] tickets.
    fn limit(&self) -> u64 {
        let alone_for = self.next_seq.saturating_sub(self.last_shared);
        if self.active == 1 && alone_for > ALONE_AFTER {
            self.capacity.saturating_mul(ALONE_FACTOR)
        } else {
            self.capacity
        }
    }

    /// Keeps the count of active lanes right after `lane` changed; it was
    /// active before the change if `was_active`.
    fn note_activity(&mut self, lane: usize, was_active: bool) {
        match (was_active, self.lanes[lane].is_active()) {
            (false, true) => {
                self.active += 1;
                if self.active > 1 {
                    self.last_shared = self.next_seq;
                }
            }
            (true, false) => self.active = self.active.saturating_sub(1),
            _ => {}
        }
    }

    /// Tags the head of `lane` (if any) and enters it in the head set.
    fn tag_head(&mut self, lane: usize) {
        let vtime = self.vtime;
        if let Some((tag, seq)) = self.lanes[lane].tag_head(vtime) {
            self.heads.insert((tag, seq, lane));
        }
    }

    /// Dispatches the lowest-tagged head if it fits.
    fn grant_one(&mut self) -> Option<TicketId> {
        let &(tag, seq, lane) = self.heads.first()?;
        let cost = self.lanes[lane].queue.front()?.cost;
        let units = cost.min(self.capacity);
        if units > self.limit().saturating_sub(self.in_flight) {
            return None;
        }
        self.heads.pop_first();
        self.vtime = self.vtime.max(tag);
        let l = &mut self.lanes[lane];
        l.dispatch_head();
        l.in_flight = l.in_flight.saturating_add(units);
        self.in_flight = self.in_flight.saturating_add(units);
        self.granted.insert(seq, Granted { lane, units });
        self.tag_head(lane);
        Some(TicketId { seq, lane })
    }
}

fn lane_stats(l: &Lane) -> LaneStats {
    LaneStats {
        tenant: l.key.clone(),
        weight: l.weight,
        queued: l.queue.len(),
        in_flight_units: l.in_flight,
        granted: l.counters.granted,
        served_units: l.counters.served_units,
        rejected: l.counters.rejected,
        cancelled: l.counters.cancelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(capacity: u64) -> Scheduler {
        Scheduler::new(Config {
            capacity_units: capacity,
            max_queue_per_tenant: 4,
            default_weight: Weight::ONE,
        })
    }

    #[test]
    fn charged_units_delay_the_lane_like_served_ones() {
        // Capacity for one request at a time; a and b alternate until a is
        // charged 3 requests' worth, after which b gets the next 3 grants.
        let mut s = sched(4096);
        let (a, b): (TenantKey, TenantKey) = ("a".into(), "b".into());
        s.charge(&a, 3 * 4096);
        let mut order = Vec::new();
        let mut ids: Vec<TicketId> = (0..4)
            .flat_map(|_| [s.enqueue_unbounded(&a, 4096), s.enqueue_unbounded(&b, 4096)])
            .collect();
        let a_lane = ids[0].lane;
        while !ids.is_empty() {
            let granted = s.next_grants();
            assert!(!granted.is_empty());
            for g in granted {
                order.push(if g.lane == a_lane { 'a' } else { 'b' });
                s.complete(g);
                ids.retain(|id| *id != g);
            }
        }
        assert_eq!(order.iter().take(4).collect::<String>(), "bbba");
        assert_eq!(s.tenant_stats(&a).expect("a").served_units, 7 * 4096);
    }

    #[test]
    fn grants_up_to_capacity_then_waits_for_completion() {
        let mut s = sched(10);
        // A neighbour with one unit in flight: two lanes are active, so
        // the capacity applies.
        let z = s.enqueue(&TenantKey::new("z"), 1).expect("queued");
        assert_eq!(s.next_grants(), vec![z]);
        let t = TenantKey::new("a");
        let a = s.enqueue(&t, 6).expect("queued");
        let b = s.enqueue(&t, 6).expect("queued");
        assert_eq!(s.next_grants(), vec![a]);
        assert!(s.next_grants().is_empty());
        assert_eq!(s.in_flight_units(), 7);
        assert!(s.complete(a));
        assert!(!s.complete(a), "second completion is a no-op");
        assert_eq!(s.next_grants(), vec![b]);
    }

    #[test]
    fn a_lone_lane_may_use_alone_factor_capacities() {
        let mut s = sched(10);
        let t = TenantKey::new("a");
        // Not at once: only after ALONE_AFTER tickets with nobody else.
        let first = s.enqueue_unbounded(&t, 10);
        let second = s.enqueue_unbounded(&t, 10);
        assert_eq!(s.next_grants(), vec![first]);
        s.complete(first);
        assert_eq!(s.next_grants(), vec![second]);
        s.complete(second);
        for _ in 0..ALONE_AFTER {
            let id = s.enqueue_unbounded(&t, 10);
            assert_eq!(s.next_grants(), vec![id]);
            s.complete(id);
        }
        let f = usize::try_from(ALONE_FACTOR).expect("small");
        let ids: Vec<TicketId> = (0..=f).map(|_| s.enqueue_unbounded(&t, 10)).collect();
        assert_eq!(s.next_grants(), ids[..f].to_vec());
        assert_eq!(s.in_flight_units(), 10 * ALONE_FACTOR);
        // A newcomer brings the limit back to the capacity: it waits
        // until the surplus has drained, and so does the lone lane's last.
        let n = s.enqueue(&TenantKey::new("n"), 10).expect("queued");
        for id in &ids[..f - 1] {
            s.complete(*id);
            assert!(s.next_grants().is_empty());
        }
        s.complete(ids[f - 1]);
        assert_eq!(s.next_grants(), vec![n]);
    }

    #[test]
    fn oversized_request_runs_alone() {
        let mut s = sched(10);
        let t = TenantKey::new("a");
        let big = s.enqueue(&t, 1000).expect("queued");
        let z = s.enqueue(&TenantKey::new("z"), 1).expect("queued");
        let small = s.enqueue(&t, 1).expect("queued");
        assert_eq!(s.next_grants(), vec![big]);
        assert_eq!(s.in_flight_units(), 10);
        assert!(s.next_grants().is_empty());
        s.complete(big);
        assert_eq!(s.next_grants(), vec![z, small]);
    }

    #[test]
    fn full_lane_is_rejected_and_unbounded_is_not() {
        let mut s = sched(1);
        let t = TenantKey::new("a");
        for _ in 0..4 {
            s.enqueue(&t, 1).expect("queued");
        }
        let err = s.enqueue(&t, 1).expect_err("full");
        assert_eq!(err.queued, 4);
        let _ = s.enqueue_unbounded(&t, 1);
        let st = s.tenant_stats(&t).expect("lane");
        assert_eq!((st.queued, st.rejected), (5, 1));
    }

    #[test]
    fn cancel_head_and_middle() {
        let mut s = sched(1);
        let t = TenantKey::new("a");
        let blocker = s.enqueue(&t, 1).expect("queued");
        assert_eq!(s.next_grants(), vec![blocker]);
        let a = s.enqueue(&t, 1).expect("queued");
        let b = s.enqueue(&t, 1).expect("queued");
        let c = s.enqueue(&t, 1).expect("queued");
        assert!(s.cancel(b));
        assert!(s.cancel(a));
        assert!(!s.cancel(a));
        assert!(!s.cancel(blocker), "granted tickets are not cancelled");
        s.complete(blocker);
        assert_eq!(s.next_grants(), vec![c]);
        assert_eq!(s.queued(), 0);
    }

    #[test]
    fn tie_goes_to_older_request() {
        let mut s = sched(1);
        let a = s.enqueue(&TenantKey::new("a"), 1).expect("queued");
        let b = s.enqueue(&TenantKey::new("b"), 1).expect("queued");
        assert_eq!(s.next_grants(), vec![a]);
        s.complete(a);
        assert_eq!(s.next_grants(), vec![b]);
    }
}
