//! Plain snapshot structs for metrics export.
//!
//! [`Lanes::snapshot`](crate::Lanes::snapshot) copies every counter out
//! under one short lock, so the gateway can turn them into whatever metric
//! format it exports without holding anything. Gauges are "now" values
//! (queue depth, units in flight); everything else is a monotonic counter
//! since the [`Lanes`](crate::Lanes) was built, suitable for rates.

use std::time::Duration;

use crate::caps::Caps;
use crate::config::Mode;
use crate::tenant::{TenantKey, Weight};

/// The whole scheduler at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanesSnapshot {
    /// Fair or off.
    pub mode: Mode,
    /// Configured capacity in units.
    pub capacity_units: u64,
    /// Units granted and not released now.
    pub in_flight_units: u64,
    /// Requests and chunks waiting now.
    pub queue_depth: usize,
    /// Every tenant seen (configured or that made a request), by name.
    pub tenants: Vec<TenantSnapshot>,
}

/// One tenant's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSnapshot {
    /// The tenant.
    pub tenant: TenantKey,
    /// Its weight now.
    pub weight: Weight,
    /// Its caps now.
    pub caps: Caps,
    /// Requests and chunks waiting now.
    pub queue_depth: usize,
    /// Units granted and not released now.
    pub in_flight_units: u64,
    /// Grants (requests and chunks) so far.
    pub granted: u64,
    /// Cost units granted so far.
    pub served_units: u64,
    /// Total time grants spent waiting in the lane (including waits that
    /// timed out).
    pub total_queue_wait: Duration,
    /// Requests refused because the lane was full.
    pub rejected_queue_full: u64,
    /// Requests (or chunks) refused because they waited too long.
    pub rejected_wait_timeout: u64,
    /// Requests refused by the requests/s cap.
    pub rejected_request_rate: u64,
    /// Requests refused while the bytes/s cap was throttling the tenant.
    pub rejected_byte_rate: u64,
    /// Waits abandoned by the caller (e.g. the client went away).
    pub cancelled: u64,
}

/// Counters kept by the async layer (the scheduler keeps the rest).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WaitCounters {
    pub total_wait: Duration,
    pub wait_timeouts: u64,
    pub request_rate: u64,
    pub byte_rate: u64,
}
