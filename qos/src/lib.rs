//! laneway lanes: weighted fair-share admission of requests per tenant.
//!
//! "If there is no car on the road, go fast; if there are other cars, stay
//! in your lane." Every tenant has a [`Weight`]. While the backend has
//! spare capacity every request goes straight through; when it does not,
//! each active tenant gets service in proportion to its weight, and an idle
//! tenant's share goes to the others.
//!
//! Service is counted in cost units (one unit = one byte-equivalent of
//! backend work): a request costs a base amount plus its body bytes, and
//! bodies are charged chunk by chunk as they flow, so one tenant's large
//! objects cannot starve another's small requests.
//!
//! The crate has three layers:
//! * [`Scheduler`]: the pure, deterministic core (start-time fair queuing
//!   over per-tenant FIFO lanes with bounded units in flight), driven by
//!   explicit calls and testable on a simulated clock;
//! * [`Lanes`]: the async wrapper the gateway uses: [`Lanes::admit`]
//!   returns a [`Permit`] (units given back on drop) or [`Overloaded`]
//!   (503 SlowDown with Retry-After), and enforces hard per-tenant
//!   [`Caps`] (requests/s, bytes/s) with `governor`;
//! * [`pace`]: wraps a body stream so each chunk waits for its grant;
//! * [`Lease`]: a permit held while its consumer works, at most
//!   `max_hold`, so a client that stops reading holds no capacity.
//!
//! [`Lanes::snapshot`] exports per-tenant counters. Weights and caps come
//! from tenancy and are applied with [`Lanes::update_tenant`]. The design,
//! the cost model and how to choose the settings are in `docs/qos.md`.

mod caps;
mod config;
mod error;
mod lane;
mod lanes;
mod lease;
mod pace;
mod scheduler;
mod stats;
mod tenant;

pub use caps::Caps;
pub use config::{
    DEFAULT_BASE_COST, DEFAULT_CAPACITY_UNITS, DEFAULT_CHUNK_BYTES, DEFAULT_MAX_HOLD,
    DEFAULT_MAX_QUEUE_PER_TENANT, DEFAULT_MAX_WAIT, DEFAULT_RETRY_AFTER, DEFAULT_STREAM_MAX_WAIT,
    LanesConfig, Mode,
};
pub use error::{OverloadReason, Overloaded};
pub use lanes::{Lanes, Permit};
pub use lease::{Lease, MAX_PENDING as MAX_PENDING_LEASES};
pub use pace::pace;
pub use scheduler::{ALONE_AFTER, ALONE_FACTOR, Config, LaneStats, Rejected, Scheduler, TicketId};
pub use stats::{LanesSnapshot, TenantSnapshot};
pub use tenant::{TenantKey, Weight};
