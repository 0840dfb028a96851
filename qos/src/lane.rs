//! One tenant's lane: its FIFO of waiting work, its weight, the virtual
//! time it has used up, and its counters.
//!
//! Start-time fair queuing tags each request with a start tag `S` and a
//! finish tag `F = S + cost / weight` in virtual time. A lane only tags its
//! head (the oldest waiting request), when that request reaches the front:
//! `S = max(V, F_last)`, where `V` is the scheduler's virtual time and
//! `F_last` the finish tag of the lane's last dispatched request. For a
//! backlogged lane that is exactly SFQ's arrival-time tagging (its next
//! request starts where the previous one finished); for a lane that was
//! idle it is the "no credit hoarding" rule: it starts at `V`, not at the
//! stale tag it had when it went quiet. Tagging only the head also means a
//! cancelled request never leaves a gap that later requests would pay for.
//!
//! Virtual time is a `u128` fixed-point number: one unit of cost at weight
//! 1 advances it by [`VT_SCALE`]. Divisions round up, so every request
//! advances its lane's tag by at least one tick.

use std::collections::VecDeque;

use crate::tenant::{TenantKey, Weight};

/// Virtual-time ticks per cost unit at weight 1.
pub(crate) const VT_SCALE: u128 = 1 << 32;

/// The virtual time that `cost` units take at `weight`, rounded up.
pub(crate) fn vt_span(cost: u64, weight: Weight) -> u128 {
    let w = u128::from(weight.get());
    (u128::from(cost.max(1)) * VT_SCALE).div_ceil(w)
}

/// A request waiting in a lane.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Queued {
    /// The ticket's sequence number (unique, increasing).
    pub seq: u64,
    /// Its cost in units.
    pub cost: u64,
}

/// Monotonic counters of one lane.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    pub granted: u64,
    pub served_units: u64,
    pub rejected: u64,
    pub cancelled: u64,
}

/// One tenant's lane.
#[derive(Debug)]
pub(crate) struct Lane {
    pub key: TenantKey,
    pub weight: Weight,
    /// Finish tag of the last request dispatched from this lane.
    pub finish: u128,
    pub queue: VecDeque<Queued>,
    /// Start tag of `queue.front()`; `Some` exactly when the queue is not
    /// empty.
    pub head_tag: Option<u128>,
    /// Units of this lane's granted, not yet completed requests.
    pub in_flight: u64,
    pub counters: Counters,
}

impl Lane {
    /// An empty lane.
    pub fn new(key: TenantKey, weight: Weight) -> Lane {
        Lane {
            key,
            weight,
            finish: 0,
            queue: VecDeque::new(),
            head_tag: None,
            in_flight: 0,
            counters: Counters::default(),
        }
    }

    /// Tags the current head against virtual time `vtime`; returns its
    /// start tag and ticket sequence, or `None` if the lane is empty.
    pub fn tag_head(&mut self, vtime: u128) -> Option<(u128, u64)> {
        let head = *self.queue.front()?;
        let tag = vtime.max(self.finish);
        self.head_tag = Some(tag);
        Some((tag, head.seq))
    }

    /// Whether the lane has work waiting or in flight.
    pub fn is_active(&self) -> bool {
        !self.queue.is_empty() || self.in_flight > 0
    }

    /// Charges `units` of work done without waiting for capacity (the
    /// small body of a request that already holds its permit): later
    /// requests of the lane start that much further on in virtual time.
    pub fn charge(&mut self, vtime: u128, units: u64) {
        self.finish = self
            .finish
            .max(vtime)
            .saturating_add(vt_span(units, self.weight));
        self.counters.served_units = self.counters.served_units.saturating_add(units);
    }

    /// Removes the head after dispatch: the lane's finish tag moves past it.
    pub fn dispatch_head(&mut self) -> Option<Queued> {
        let start = self.head_tag.take()?;
        let head = self.queue.pop_front()?;
        self.finish = start.saturating_add(vt_span(head.cost, self.weight));
        self.counters.granted += 1;
        self.counters.served_units = self.counters.served_units.saturating_add(head.cost);
        Some(head)
    }

    /// Position of the waiting request `seq`, if it is still waiting.
    pub fn position(&self, seq: u64) -> Option<usize> {
        self.queue.iter().position(|q| q.seq == seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_scales_inversely_with_weight() {
        let w1 = Weight::ONE;
        let w4 = Weight::new(4).expect("weight");
        assert_eq!(vt_span(4096, w1), 4096 * VT_SCALE);
        assert_eq!(vt_span(4096, w4), 1024 * VT_SCALE);
        // A zero cost still advances time, so it cannot be spammed for free.
        assert!(vt_span(0, w1) > 0);
        // Rounds up rather than down.
        let w3 = Weight::new(3).expect("weight");
        assert_eq!(vt_span(1, w3), VT_SCALE.div_ceil(3));
    }

    #[test]
    fn idle_lane_starts_at_virtual_time() {
        let mut lane = Lane::new(TenantKey::new("t"), Weight::ONE);
        lane.finish = 10;
        lane.queue.push_back(Queued { seq: 1, cost: 1 });
        lane.tag_head(500);
        assert_eq!(lane.head_tag, Some(500));
        let _ = lane.dispatch_head();
        assert_eq!(lane.finish, 500 + VT_SCALE);
        lane.queue.push_back(Queued { seq: 2, cost: 1 });
        lane.tag_head(7);
        assert_eq!(lane.head_tag, Some(500 + VT_SCALE));
    }
}
