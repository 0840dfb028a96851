//! The catalog node's quota desk: where a cluster's quota reservations
//! are made, so several gateways share one tally.
//!
//! A gateway asks for a reservation ([`crate::node::proto::Call::QuotaReserve`]);
//! the desk runs the same engine as a single process ([`Quotas`]), reading
//! committed usage from every node through its own client of the cluster,
//! and keeps the granted [`Reservation`] in a table under a new id until
//! it is given back ([`crate::node::proto::Call::QuotaRelease`]) after its
//! write committed or failed: by the store node that ran the write (the
//! write's call carries the id), and by the gateway when it knows the
//! write is done (`crate::quota::QuotaHold::cover`). A hold nobody gives
//! back (its gateway died before sending the write, or the call was lost
//! on the way in) lapses after [`HOLD_MAX`], and the table is bounded
//! ([`MAX_HOLDS`]; past it new reservations answer 503).

use crate::client::StoreClient;
use crate::error::{StoreError, StoreResult};
use crate::ids::TenantId;
use crate::quota::{QuotaAsk, QuotaLimits, Quotas, Reservation};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest a reservation is held for a gateway that never gives it back
/// (longer than any upload's stall bounds allow a write to last idle).
pub const HOLD_MAX: Duration = Duration::from_secs(3600);

/// Reservations held at once, at most.
pub const MAX_HOLDS: usize = 1 << 20;

/// Reservations of every gateway.
pub struct QuotaDesk {
    engine: Quotas,
    cluster: Arc<dyn StoreClient>,
    holds: Mutex<HashMap<u64, (Reservation, Instant)>>,
    next: AtomicU64,
    lapsed: Mutex<Instant>,
}

impl QuotaDesk {
    /// A desk reading usage through `cluster` (a client of every node).
    pub fn new(cluster: Arc<dyn StoreClient>) -> QuotaDesk {
        QuotaDesk {
            engine: Quotas::default(),
            cluster,
            holds: Mutex::new(HashMap::new()),
            next: AtomicU64::new(first_id()),
            lapsed: Mutex::new(Instant::now()),
        }
    }

    /// Reserve for `ask`; the hold's id (`None`: nothing to hold).
    pub async fn reserve(
        &self,
        tenant: &TenantId,
        limits: &QuotaLimits,
        ask: &QuotaAsk,
    ) -> StoreResult<Option<u64>> {
        self.lapse();
        if self.holds.lock().len() >= MAX_HOLDS {
            return Err(StoreError::Unavailable(
                "too many quota reservations in flight".into(),
            ));
        }
        let Some(r) = self
            .engine
            .reserve(self.cluster.as_ref(), tenant, limits, ask)
            .await?
        else {
            return Ok(None);
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.holds.lock().insert(id, (r, Instant::now()));
        Ok(Some(id))
    }

    /// Give hold `id` back (unknown ids, already lapsed, are ignored).
    pub fn release(&self, id: u64) {
        let gone = self.holds.lock().remove(&id);
        drop(gone);
    }

    /// Holds in the table.
    pub fn held(&self) -> usize {
        self.holds.lock().len()
    }

    /// Drop holds older than [`HOLD_MAX`] (a scan at most every
    /// [`LAPSE_EVERY`]).
    fn lapse(&self) {
        let now = Instant::now();
        {
            let mut last = self.lapsed.lock();
            if now.duration_since(*last) < LAPSE_EVERY {
                return;
            }
            *last = now;
        }
        let mut holds = self.holds.lock();
        holds.retain(|_, (_, at)| now.duration_since(*at) < HOLD_MAX);
    }
}

/// The first id of a desk: a random high half, counting up from 1 in the
/// low half. A release still on its way from a write made under another
/// desk (the catalog's leader before a failover, or this node before a
/// restart) then names no hold here, instead of one that happens to have
/// the same number.
fn first_id() -> u64 {
    use ring::rand::SecureRandom;
    let mut raw = [0u8; 4];
    // A failed generator leaves 0: ids then start at 1, as they used to.
    let _ = ring::rand::SystemRandom::new().fill(&mut raw);
    (u64::from(u32::from_be_bytes(raw)) << 32) | 1
}

/// How often the table is scanned for lapsed holds.
const LAPSE_EVERY: Duration = Duration::from_secs(60);
