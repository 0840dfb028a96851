//! Fair sharing at the store node: with several gateways, the contended
//! resource is the node, so each call is admitted through lanes of its own
//! (the qos crate's weighted fair scheduler), by the tenant and weight the
//! gateway sent with it ([`crate::caller::Caller`]). A tenant that spreads
//! its load over two gateways meets itself in one lane here, and gets one
//! share, not two (the dmClock idea: schedule where the contention is).
//!
//! A call is admitted at its base cost and its permit held while it runs
//! and until its answer is handed to the connection; an upload's body is
//! paced chunk by chunk through the same lanes instead (its permit goes
//! before the body streams, so no chunk waits behind its own call). Calls without a caller
//! (the cluster's own steps, health checks) are not queued.

use crate::caller::Caller;
use crate::error::{StoreError, StoreResult};
use crate::rpc::Reply;
use crate::store::BodyStream;
use futures::StreamExt;
use laneway_qos::{Caps, Lanes, LanesConfig, Overloaded, Permit, TenantKey, Weight};
use parking_lot::Mutex;
use std::collections::HashMap;

/// Units in flight at the node while tenants share: as at a gateway
/// (docs/qos.md), two small calls' worth, so that under contention calls
/// wait in the lanes, where the weights apply, not in the store.
pub const NODE_CAPACITY: u64 = 256 * 1024;

/// Units one call's index work costs (a small request's, as at a gateway).
pub const NODE_BASE_COST: u64 = 96 * 1024;

/// The node's lanes settings: the qos defaults with [`NODE_CAPACITY`] and
/// [`NODE_BASE_COST`].
pub fn node_lanes_config() -> LanesConfig {
    LanesConfig {
        capacity_units: NODE_CAPACITY,
        base_cost: NODE_BASE_COST,
        ..LanesConfig::default()
    }
}

/// Tenants whose weight the node remembers (more are forgotten, oldest
/// first, and re-learnt from their next call).
const MAX_TENANTS: usize = 100_000;

/// The node's lanes and the weights it was last told.
pub struct NodeLanes {
    lanes: Lanes,
    weights: Mutex<HashMap<String, u32>>,
}

impl NodeLanes {
    /// Lanes with `config`.
    pub fn new(config: LanesConfig) -> NodeLanes {
        NodeLanes {
            lanes: Lanes::new(config),
            weights: Mutex::new(HashMap::new()),
        }
    }

    /// The scheduler (metrics).
    pub fn lanes(&self) -> &Lanes {
        &self.lanes
    }

    /// Wait for the caller's turn for `calls` base costs (`None` without
    /// a caller).
    pub async fn admit(&self, caller: Option<&Caller>, calls: u64) -> StoreResult<Option<Permit>> {
        let Some(c) = caller else { return Ok(None) };
        let key = self.key(c);
        let cost = self.lanes.config().base_cost.saturating_mul(calls);
        match self.lanes.admit(&key, cost).await {
            Ok(p) => Ok(Some(p)),
            Err(o) => Err(busy(&o)),
        }
    }

    /// `reply` holding `permit` until its answer has been handed to the
    /// connection (its data, if any, read to the end), so the call's
    /// turn covers the node's whole work on it, not just the index read;
    /// at most the lanes' `max_hold` once the connection stops taking it
    /// (a caller that stops reading holds nothing others wait for).
    pub fn hold_until_sent(&self, permit: Option<Permit>, reply: Reply) -> Reply {
        let Some(permit) = permit else { return reply };
        let lease = self.lanes.lease(permit);
        let data = reply
            .body
            .unwrap_or_else(|| Box::pin(futures::stream::empty()));
        let held =
            futures::stream::unfold((data, Some(lease)), |(mut data, mut lease)| async move {
                match data.next().await {
                    Some(item) => Some((item, (data, lease))),
                    None => {
                        drop(lease.take());
                        None
                    }
                }
            });
        Reply {
            payload: reply.payload,
            body: Some(Box::pin(held)),
        }
    }

    /// `body` paced through the caller's lane (unchanged without a caller).
    pub fn pace(&self, caller: Option<&Caller>, body: BodyStream) -> BodyStream {
        let Some(c) = caller else { return body };
        let key = self.key(c);
        let chunk = self.lanes.config().chunk_bytes;
        let inner = body.map(|r| r.map_err(Paced::Io));
        let paced = laneway_qos::pace(self.lanes.clone(), key, inner, chunk);
        Box::pin(paced.map(|r| {
            r.map_err(|e| match e {
                Paced::Io(e) => e,
                Paced::Over(o) => std::io::Error::other(busy(&o).to_string()),
            })
        }))
    }

    /// The caller's lane, with its weight brought up to date.
    fn key(&self, c: &Caller) -> TenantKey {
        let key = TenantKey::new(&c.tenant.0);
        let mut weights = self.weights.lock();
        if weights.get(&c.tenant.0) != Some(&c.weight) {
            if weights.len() >= MAX_TENANTS {
                weights.clear();
            }
            weights.insert(c.tenant.0.clone(), c.weight);
            tracing::debug!(tenant = %c.tenant.0, weight = c.weight, "node lanes: tenant weight");
            let w = Weight::new(c.weight).unwrap_or(Weight::ONE);
            self.lanes.update_tenant(&key, w, Caps::NONE);
        }
        key
    }
}

/// A body error, or a chunk that waited too long for its turn.
enum Paced {
    Io(std::io::Error),
    Over(Overloaded),
}

impl From<Overloaded> for Paced {
    fn from(o: Overloaded) -> Paced {
        Paced::Over(o)
    }
}

fn busy(o: &Overloaded) -> StoreError {
    StoreError::Unavailable(format!("store node busy: {o}"))
}
