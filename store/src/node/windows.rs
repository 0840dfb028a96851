//! Windows: how many calls of one tenant one gateway may have in flight at
//! this node, so that a tenant's share of the node follows its weight
//! wherever its requests come from.
//!
//! The node's own lanes ([`super::lanes`]) order the calls they see, but
//! most of a small call's cost at the node is spent before its handler
//! runs (decoding it off the connection) and after (encoding the answer),
//! first come first served; a tenant that sends through two gateways gets
//! the node's time of both. So the node also decides how much of each
//! tenant's work may be in flight at it at all, and tells each gateway in
//! every answer: [`TOTAL`] calls in flight per node are shared among the
//! tenants active in the last [`ACTIVE_FOR`] by weight, and a tenant's
//! share among the gateways that carry it by the backlog each reports
//! (calls in flight plus waiting, sent with every call). The gateway
//! holds its calls to that window ([`crate::remote`]); a lone tenant gets
//! the whole [`TOTAL`].

use crate::caller::Caller;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Calls in flight at one node, over every tenant and gateway: enough to
/// keep a node busy (its cores and its commit batches), small enough that
/// the rest of a backlog waits at the gateways, in the tenants' windows.
pub const TOTAL: u32 = 32;

/// A gateway's report for a tenant counts this long.
pub const ACTIVE_FOR: Duration = Duration::from_secs(1);

/// Tenants tracked at most (the stalest are dropped past it).
const MAX_TENANTS: usize = 10_000;

/// Demand of one tenant: its weight and each gateway's last backlog.
struct Demand {
    weight: u32,
    gateways: HashMap<u64, (u32, Instant)>,
}

/// Every tenant's demand at this node.
#[derive(Default)]
pub struct Windows {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    tenants: HashMap<String, Demand>,
    /// The weights of the active tenants summed, and when (recounted at
    /// most every [`RECOUNT_EVERY`], or when a tenant becomes active, so a
    /// call does not scan every tenant).
    active: Option<(u64, Instant)>,
}

/// Longest the active weight sum is reused.
const RECOUNT_EVERY: Duration = Duration::from_millis(50);

fn is_active(d: &Demand, now: Instant) -> bool {
    d.gateways
        .values()
        .any(|(_, at)| now.duration_since(*at) < ACTIVE_FOR)
}

impl Windows {
    /// Record `gateway`'s `backlog` for the caller's tenant and answer its
    /// window (at least 1).
    pub fn window(&self, caller: &Caller, gateway: u64, backlog: u32) -> u32 {
        let now = Instant::now();
        let mut st = self.state.lock();
        let State { tenants, active } = &mut *st;
        if tenants.len() >= MAX_TENANTS && !tenants.contains_key(&caller.tenant.0) {
            prune(tenants, now);
        }
        let d = tenants
            .entry(caller.tenant.0.clone())
            .or_insert_with(|| Demand {
                weight: caller.weight,
                gateways: HashMap::new(),
            });
        let newly_active = !is_active(d, now) || d.weight != caller.weight.max(1);
        d.weight = caller.weight.max(1);
        d.gateways.insert(gateway, (backlog.max(1), now));
        let weight = match *active {
            Some((w, at)) if !newly_active && now.duration_since(at) < RECOUNT_EVERY => w,
            _ => {
                let w = tenants
                    .values()
                    .filter(|d| is_active(d, now))
                    .map(|d| u64::from(d.weight))
                    .sum();
                *active = Some((w, now));
                w
            }
        };
        let Some(d) = tenants.get(&caller.tenant.0) else {
            return TOTAL;
        };
        split(d, gateway, weight.max(1), now)
    }
}

/// This gateway's part of the tenant's weighted share of [`TOTAL`].
fn split(d: &Demand, gateway: u64, active_weight: u64, now: Instant) -> u32 {
    let share = u64::from(TOTAL) * u64::from(d.weight) / active_weight;
    let fresh = d
        .gateways
        .values()
        .filter(|(_, at)| now.duration_since(*at) < ACTIVE_FOR);
    let backlog: u64 = fresh.map(|(b, _)| u64::from(*b)).sum();
    let mine = d.gateways.get(&gateway).map_or(1, |(b, _)| u64::from(*b));
    let part = share * mine / backlog.max(1);
    u32::try_from(part.max(1)).unwrap_or(TOTAL)
}

/// Forget tenants no gateway reported within [`ACTIVE_FOR`]; if that
/// frees nothing, forget them all (they are re-learnt on their next call).
fn prune(tenants: &mut HashMap<String, Demand>, now: Instant) {
    tenants.retain(|_, d| is_active(d, now));
    if tenants.len() >= MAX_TENANTS {
        tenants.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TenantId;

    fn caller(t: &str, weight: u32) -> Caller {
        Caller {
            tenant: TenantId(t.into()),
            weight,
        }
    }

    #[test]
    fn a_lone_tenant_gets_the_whole_node() {
        let w = Windows::default();
        assert_eq!(w.window(&caller("a", 1), 1, 5), TOTAL);
    }

    #[test]
    fn tenants_share_by_weight_and_a_tenant_on_two_gateways_splits_its_share() {
        let w = Windows::default();
        w.window(&caller("a", 1), 1, 10);
        w.window(&caller("a", 1), 2, 10);
        let b = w.window(&caller("b", 3), 2, 10);
        assert_eq!(b, TOTAL * 3 / 4, "b's share counts a once, not per gateway");
        let a1 = w.window(&caller("a", 1), 1, 10);
        let a2 = w.window(&caller("a", 1), 2, 10);
        assert_eq!(
            a1 + a2,
            TOTAL / 4,
            "a's quarter is split between its gateways"
        );
    }

    #[test]
    fn every_window_is_at_least_one_call() {
        let w = Windows::default();
        w.window(&caller("big", 1000), 1, 100);
        assert_eq!(w.window(&caller("small", 1), 1, 1), 1);
    }
}
