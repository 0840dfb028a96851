//! Fairness properties of the scheduler core, on a simulated backend.
//!
//! The simulation is fully deterministic: no threads, no wall clock. The
//! backend serves granted requests one at a time in grant order; serving a
//! request advances the simulated clock by its cost (one unit per tick), so
//! the clock measures work done. Saturating tenants keep their lanes topped
//! up to a fixed depth after every completion. Shares are measured as cost
//! granted per tenant over a window of the run; SFQ bounds the lag between
//! two backlogged tenants by about one request of each, so over long
//! windows the ratios must match the weights within a small tolerance.

use std::collections::{HashMap, VecDeque};

use laneway_qos::{Config, Scheduler, TenantKey, TicketId, Weight};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// One simulated tenant.
struct SimTenant {
    key: TenantKey,
    cost: u64,
    /// Keeps its lane at `depth` requests while true.
    active: bool,
    queued: usize,
    granted_units: u64,
    /// Clock at this tenant's last grant, and the longest stretch of work
    /// done while it waited for one.
    last_grant: u64,
    max_gap: u64,
}

/// A scheduler in front of a one-at-a-time FIFO backend.
struct Sim {
    sched: Scheduler,
    tenants: Vec<SimTenant>,
    depth: usize,
    /// Granted, not completed: (ticket, tenant index, cost).
    running: VecDeque<(TicketId, usize, u64)>,
    owner: HashMap<TicketId, (usize, u64)>,
    /// Work done so far.
    clock: u64,
}

impl Sim {
    fn new(capacity: u64, depth: usize) -> Sim {
        let sched = Scheduler::new(Config {
            capacity_units: capacity,
            max_queue_per_tenant: depth,
            default_weight: Weight::ONE,
        });
        Sim {
            sched,
            tenants: Vec::new(),
            depth,
            running: VecDeque::new(),
            owner: HashMap::new(),
            clock: 0,
        }
    }

    /// Adds a saturating tenant; returns its index.
    fn tenant(&mut self, name: &str, weight: u32, cost: u64) -> usize {
        let key = TenantKey::new(name);
        self.sched
            .set_tenant(&key, Weight::new(weight).expect("weight"));
        self.tenants.push(SimTenant {
            key,
            cost,
            active: true,
            queued: 0,
            granted_units: 0,
            last_grant: 0,
            max_gap: 0,
        });
        self.tenants.len() - 1
    }

    fn refill(&mut self) {
        for (i, t) in self.tenants.iter_mut().enumerate() {
            while t.active && t.queued < self.depth {
                let id = self.sched.enqueue(&t.key, t.cost).expect("lane has room");
                self.owner.insert(id, (i, t.cost));
                t.queued += 1;
            }
        }
    }

    fn grant(&mut self) {
        for id in self.sched.next_grants() {
            let (i, cost) = self.owner.remove(&id).expect("known ticket");
            let t = &mut self.tenants[i];
            t.queued -= 1;
            t.granted_units += cost;
            t.max_gap = t.max_gap.max(self.clock - t.last_grant);
            t.last_grant = self.clock;
            self.running.push_back((id, i, cost));
        }
    }

    /// Completes the oldest running request; refills and grants.
    fn step(&mut self) {
        if let Some((id, _, cost)) = self.running.pop_front() {
            assert!(self.sched.complete(id));
            self.clock += cost;
        }
        self.refill();
        self.grant();
    }

    /// Steps until `work` more units have been done.
    fn run_for(&mut self, work: u64) {
        let end = self.clock + work;
        self.refill();
        self.grant();
        while self.clock < end {
            self.step();
        }
    }

    fn granted(&self) -> Vec<u64> {
        self.tenants.iter().map(|t| t.granted_units).collect()
    }
}

/// Cost granted per tenant between two snapshots.
fn delta(before: &[u64], after: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// Asserts `served[i] / sum` is within `tol` (relative) of
/// `weights[i] / sum(weights)` for every tenant.
fn assert_shares(served: &[u64], weights: &[u32], tol: f64) {
    let total: u64 = served.iter().sum();
    let wsum: u32 = weights.iter().sum();
    for (i, (&s, &w)) in served.iter().zip(weights).enumerate() {
        let got = s as f64 / total as f64;
        let want = f64::from(w) / f64::from(wsum);
        let err = (got - want).abs() / want;
        assert!(
            err <= tol,
            "tenant {i}: share {got:.4}, want {want:.4} (rel. error {err:.4}), served {served:?}"
        );
    }
}

fn proportional(weights: &[u32]) {
    let mut sim = Sim::new(MIB, 8);
    // Different request sizes per tenant, so shares are not an artefact of
    // equal costs.
    let costs = [64 * KIB, 4 * KIB + 100 * KIB, 256 * KIB];
    for (i, &w) in weights.iter().enumerate() {
        sim.tenant(&format!("t{i}"), w, costs[i % costs.len()]);
    }
    sim.run_for(64 * MIB);
    let before = sim.granted();
    sim.run_for(2048 * MIB);
    assert_shares(&delta(&before, &sim.granted()), weights, 0.02);
}

#[test]
fn proportional_share_1_1() {
    proportional(&[1, 1]);
}

#[test]
fn proportional_share_1_3() {
    proportional(&[1, 3]);
}

#[test]
fn proportional_share_1_2_5() {
    proportional(&[1, 2, 5]);
}

#[test]
fn mixed_large_and_small_costs_get_equal_cost_shares() {
    let mut sim = Sim::new(128 * MIB, 64);
    sim.tenant("big", 1, 64 * MIB);
    let small = sim.tenant("small", 1, 4 * KIB);
    sim.run_for(256 * MIB);
    let before = sim.granted();
    sim.run_for(4 * 1024 * MIB);
    let served = delta(&before, &sim.granted());
    assert_shares(&served, &[1, 1], 0.03);
    // The small requests are never stuck behind more than about one large
    // request plus one capacity's worth of work.
    let gap = sim.tenants[small].max_gap;
    assert!(
        gap <= 64 * MIB + 128 * MIB,
        "small tenant waited {gap} units"
    );
}

#[test]
fn lone_tenant_gets_all_capacity() {
    let cost = 100 * KIB;
    let capacity = MIB;
    let mut sim = Sim::new(capacity, 8);
    sim.tenant("alone", 1, cost);
    sim.refill();
    sim.grant();
    for _ in 0..10_000 {
        sim.step();
        // Work conserving: nothing that would fit is left waiting.
        let in_flight = sim.sched.in_flight_units();
        assert!(in_flight + cost > capacity, "idle capacity: {in_flight}");
    }
    assert_eq!(sim.granted()[0], sim.clock + sim.sched.in_flight_units());
}

#[test]
fn idle_tenants_share_goes_to_the_other() {
    let mut sim = Sim::new(MIB, 8);
    let a = sim.tenant("a", 1, 64 * KIB);
    let b = sim.tenant("b", 3, 64 * KIB);
    sim.run_for(256 * MIB);
    sim.tenants[b].active = false;
    // Let b's queued and running requests drain.
    sim.run_for(2 * MIB);
    let before = sim.granted();
    sim.run_for(256 * MIB);
    let served = delta(&before, &sim.granted());
    assert_eq!(served[b], 0);
    assert!(served[a] >= 256 * MIB, "a got {} of 256 MiB", served[a]);
    // And b comes back to its 3:1 share.
    sim.tenants[b].active = true;
    sim.run_for(16 * MIB);
    let before = sim.granted();
    sim.run_for(1024 * MIB);
    assert_shares(&delta(&before, &sim.granted()), &[1, 3], 0.02);
}

#[test]
fn waking_tenant_gets_no_burst() {
    let cost = 64 * KIB;
    let mut sim = Sim::new(MIB, 8);
    let a = sim.tenant("a", 1, cost);
    let b = sim.tenant("b", 1, cost);
    sim.tenants[b].active = false;
    // a runs alone for a long time; b earns nothing by idling.
    sim.run_for(4096 * MIB);
    let before = sim.granted();
    sim.tenants[b].active = true;
    sim.refill();
    sim.grant();
    for _ in 0..20_000 {
        sim.step();
        let now = delta(&before, &sim.granted());
        // From the moment b wakes, it never gets ahead of a by more than
        // a couple of requests (a hoarding scheduler would hand b the
        // next 4 GiB alone).
        assert!(
            now[b] <= now[a] + 2 * cost + MIB,
            "burst: a {} b {}",
            now[a],
            now[b]
        );
    }
    let served = delta(&before, &sim.granted());
    assert_shares(&served, &[1, 1], 0.02);
}

#[test]
fn weight_change_applies_to_later_requests() {
    let mut sim = Sim::new(MIB, 8);
    sim.tenant("a", 1, 64 * KIB);
    sim.tenant("b", 1, 64 * KIB);
    sim.run_for(256 * MIB);
    let before = sim.granted();
    sim.run_for(1024 * MIB);
    assert_shares(&delta(&before, &sim.granted()), &[1, 1], 0.02);
    let b = TenantKey::new("b");
    sim.sched.set_tenant(&b, Weight::new(4).expect("weight"));
    sim.run_for(16 * MIB);
    let before = sim.granted();
    sim.run_for(1024 * MIB);
    assert_shares(&delta(&before, &sim.granted()), &[1, 4], 0.02);
}

#[test]
fn full_lane_is_rejected() {
    let mut sched = Scheduler::new(Config {
        capacity_units: 1,
        max_queue_per_tenant: 3,
        default_weight: Weight::ONE,
    });
    let t = TenantKey::new("t");
    let other = TenantKey::new("other");
    for _ in 0..3 {
        sched.enqueue(&t, 10).expect("room");
    }
    let err = sched.enqueue(&t, 10).expect_err("lane full");
    assert_eq!((err.tenant.as_str(), err.queued), ("t", 3));
    // Another tenant's lane is unaffected.
    assert!(sched.enqueue(&other, 10).is_ok());
    // Granting frees a slot in the lane.
    assert_eq!(sched.next_grants().len(), 1);
    assert!(sched.enqueue(&t, 10).is_ok());
    let st = sched.tenant_stats(&t).expect("lane");
    assert_eq!((st.queued, st.rejected, st.granted), (3, 1, 1));
}
