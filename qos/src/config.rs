//! Settings of [`Lanes`](crate::Lanes) and their defaults.
//!
//! The unit of cost is one **byte-equivalent of backend work**: moving one
//! body byte to or from the store costs 1 unit, and every request also
//! costs a fixed base ([`DEFAULT_BASE_COST`], 4 KiB worth) for the index
//! lookups, commits and CPU that any request needs, whatever its body.
//!
//! The defaults suit one gateway in front of one local store with
//! something like 0.5–2 GB/s of disk bandwidth; `docs/qos.md` explains how
//! to derive each one for other hardware.

use std::time::Duration;

use crate::tenant::Weight;

/// Units charged for a request besides its body bytes.
pub const DEFAULT_BASE_COST: u64 = 4 * 1024;
/// Units that may be in flight at once (16 MiB of work).
pub const DEFAULT_CAPACITY_UNITS: u64 = 16 * 1024 * 1024;
/// Body bytes paced per scheduler grant (256 KiB, the store's write size).
pub const DEFAULT_CHUNK_BYTES: usize = 256 * 1024;
/// Requests a tenant may have waiting before new ones are refused.
pub const DEFAULT_MAX_QUEUE_PER_TENANT: usize = 256;
/// Longest a new request waits for its turn before it is refused.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(5);
/// Longest a chunk of a body already flowing waits before the body fails.
pub const DEFAULT_STREAM_MAX_WAIT: Duration = Duration::from_secs(30);
/// Retry-After hint when a lane is full or a wait timed out.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Longest a response's permit or a paced chunk's grant is held while its
/// consumer has not come back for more (see [`crate::Lease`]): long enough
/// for hyper to write a 256 KiB chunk to a socket that takes it, short
/// enough that a client that stopped reading holds nothing others notice.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_millis(5);

/// Whether requests go through the fair scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Weighted fair sharing with bounded capacity (the default).
    #[default]
    Fair,
    /// Lanes off: every request and chunk is admitted at once and nothing
    /// is queued or counted by the scheduler (per-tenant caps still
    /// apply). For benchmarks that compare against no scheduling.
    Off,
}

/// Settings of [`Lanes`](crate::Lanes).
#[derive(Debug, Clone)]
pub struct LanesConfig {
    /// Fair scheduling or bypass.
    pub mode: Mode,
    /// Cost units that may be in flight at once, over all tenants.
    pub capacity_units: u64,
    /// Requests (and body chunks) a tenant may have waiting; a new request
    /// beyond it is refused. Body chunks of admitted requests are never
    /// refused for this, but count towards it.
    pub max_queue_per_tenant: usize,
    /// Longest a new request waits in its lane before it is refused.
    pub max_wait: Duration,
    /// Longest a body chunk waits before its paced stream fails.
    pub stream_max_wait: Duration,
    /// Weight of a tenant that was never given one.
    pub default_weight: Weight,
    /// Units charged per request on top of its body bytes.
    pub base_cost: u64,
    /// Body bytes per paced chunk (0 is treated as 1).
    pub chunk_bytes: usize,
    /// Retry-After hint for a full lane or a wait that timed out.
    pub retry_after: Duration,
    /// Longest a [`Lease`](crate::Lease) keeps its units: a response
    /// permit or a paced chunk's grant whose consumer (hyper, waiting on
    /// the client's socket) has not come back for more by then is given
    /// back, so a stalled reader holds no shared capacity.
    pub max_hold: Duration,
}

impl Default for LanesConfig {
    fn default() -> LanesConfig {
        LanesConfig {
            mode: Mode::Fair,
            capacity_units: DEFAULT_CAPACITY_UNITS,
            max_queue_per_tenant: DEFAULT_MAX_QUEUE_PER_TENANT,
            max_wait: DEFAULT_MAX_WAIT,
            stream_max_wait: DEFAULT_STREAM_MAX_WAIT,
            default_weight: Weight::ONE,
            base_cost: DEFAULT_BASE_COST,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            retry_after: DEFAULT_RETRY_AFTER,
            max_hold: DEFAULT_MAX_HOLD,
        }
    }
}

impl LanesConfig {
    /// The defaults with lanes off (see [`Mode::Off`]).
    pub fn off() -> LanesConfig {
        LanesConfig {
            mode: Mode::Off,
            ..LanesConfig::default()
        }
    }

    /// The cost of a request whose body is admitted whole (not paced):
    /// the base cost plus its body bytes.
    pub fn request_cost(&self, body_bytes: u64) -> u64 {
        self.base_cost.saturating_add(body_bytes)
    }
}
