//! Tenant weights and caps, from tenancy into the lanes.
//!
//! [`Applied`] remembers what was last applied per tenant so that a sync
//! (at startup, after every admin API change, and every
//! [`REFRESH_EVERY`]) calls `Lanes::update_tenant` only for tenants whose
//! weight or caps changed. `update_tenant` would keep an unchanged
//! limiter anyway; skipping it also spares the scheduler lock.
//!
//! Tenancy weights are 1..=1000 and fit a qos `Weight`; a requests/s cap
//! above `u32::MAX` saturates; a cap of 0 (which tenancy refuses) would
//! mean "uncapped" rather than "nothing".

use laneway_qos::{Caps, Lanes, TenantKey, Weight};
use laneway_tenancy::{Limits, Tenant};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

/// How often weights and caps are re-read from the registry.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// The weight and caps last applied, by tenant id.
#[derive(Default)]
pub struct Applied {
    last: Mutex<HashMap<String, (Weight, Caps)>>,
}

impl Applied {
    /// Applies what changed among `tenants`.
    pub fn apply(&self, lanes: &Lanes, tenants: &[Tenant]) {
        let mut last = self.last.lock();
        for t in tenants {
            let now = (weight_of(t.weight), caps_of(&t.limits));
            if last.get(&t.id) == Some(&now) {
                continue;
            }
            lanes.update_tenant(&TenantKey::from(t.id.as_str()), now.0, now.1);
            tracing::debug!(tenant = %t.id, weight = now.0.get(), "lanes: tenant settings applied");
            last.insert(t.id.clone(), now);
        }
    }
}

/// A tenancy weight as a lanes weight (an impossible one becomes 1).
pub fn weight_of(w: u32) -> Weight {
    Weight::new(w).unwrap_or(Weight::ONE)
}

/// A tenant's rate caps as lanes caps.
pub fn caps_of(l: &Limits) -> Caps {
    let rps = l
        .max_requests_per_sec
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        .and_then(NonZeroU32::new);
    Caps {
        requests_per_sec: rps,
        bytes_per_sec: l.max_bytes_per_sec.and_then(NonZeroU64::new),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use laneway_qos::LanesConfig;
    use laneway_tenancy::TenantStatus;

    fn tenant(id: &str, weight: u32, rps: Option<u64>) -> Tenant {
        Tenant {
            id: id.into(),
            name: id.into(),
            weight,
            limits: Limits {
                max_requests_per_sec: rps,
                ..Limits::default()
            },
            status: TenantStatus::Active,
            created_ms: 0,
        }
    }

    #[test]
    fn conversions() {
        assert_eq!(weight_of(7).get(), 7);
        assert_eq!(weight_of(0), Weight::ONE);
        let c = caps_of(&Limits {
            max_requests_per_sec: Some(u64::MAX),
            max_bytes_per_sec: Some(0),
            ..Limits::default()
        });
        assert_eq!(c.requests_per_sec.map(NonZeroU32::get), Some(u32::MAX));
        assert_eq!(c.bytes_per_sec, None);
    }

    #[test]
    fn applies_weights_and_changes() {
        let lanes = Lanes::new(LanesConfig::default());
        let applied = Applied::default();
        applied.apply(
            &lanes,
            &[tenant("t-1", 3, None), tenant("t-2", 1, Some(10))],
        );
        let snap = lanes.snapshot();
        let w = |id: &str| {
            snap.tenants
                .iter()
                .find(|t| t.tenant.as_str() == id)
                .map(|t| (t.weight.get(), t.caps.requests_per_sec.map(NonZeroU32::get)))
        };
        assert_eq!(w("t-1"), Some((3, None)));
        assert_eq!(w("t-2"), Some((1, Some(10))));
        applied.apply(&lanes, &[tenant("t-1", 5, None)]);
        let snap = lanes.snapshot();
        let t1 = snap.tenants.iter().find(|t| t.tenant.as_str() == "t-1");
        assert_eq!(t1.map(|t| t.weight.get()), Some(5));
    }
}
