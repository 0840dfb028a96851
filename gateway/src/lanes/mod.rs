//! Lanes in the data path: every S3 request, and every body byte in both
//! directions, goes through `laneway_qos::Lanes` (weighted fair sharing
//! between tenants, hard caps) before it reaches s3s and the store.
//!
//! - [`LaneState`] (this file): the process's `Lanes` and [`Metrics`],
//!   tenant weights and caps applied from tenancy ([`sync`]), and the
//!   `/metrics` text the admin listener serves.
//! - [`gate`]: [`LaneGate`], the layer `serve` puts in front of s3s.
//! - [`key`]: the access key a request claims; [`trust`]: whether its
//!   connection proved it; [`op`]: its S3 operation.
//! - [`body`]: paced, counted bodies; [`slowdown`]: the 503 answer.
//! - [`meter`]: pacing of bytes copied inside the store.
//!
//! The design, flags and metric names are in `docs/qos.md`.

pub mod body;
pub mod gate;
pub mod key;
pub mod meter;
pub mod metrics;
pub mod op;
pub mod slowdown;
pub mod sync;
pub mod trust;

pub use gate::LaneGate;

use laneway_qos::{Lanes, LanesConfig, LanesSnapshot, Mode};
use laneway_tenancy::Registry;
use std::fmt::Write as _;
use std::sync::Arc;

use metrics::Metrics;

/// The metrics label of requests on unproved connections (their lanes
/// are `anonymous/N`, see [`trust`]).
pub const ANONYMOUS: &str = "anonymous";

/// The lanes of one gateway process and what they export.
pub struct LaneState {
    lanes: Lanes,
    metrics: Metrics,
    applied: sync::Applied,
}

impl LaneState {
    /// Lanes with `config`; the anonymous lane has weight 1.
    pub fn new(config: LanesConfig) -> LaneState {
        let lanes = Lanes::new(config);
        lanes.update_tenant(
            &ANONYMOUS.into(),
            laneway_qos::Weight::ONE,
            laneway_qos::Caps::NONE,
        );
        LaneState {
            lanes,
            metrics: Metrics::default(),
            applied: sync::Applied::default(),
        }
    }

    /// The admission controller.
    pub fn lanes(&self) -> &Lanes {
        &self.lanes
    }

    /// The request metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Applies every tenant's weight and caps from `registry` (only the
    /// ones that changed since the last call).
    pub fn sync(&self, registry: &Registry) {
        self.applied.apply(&self.lanes, &registry.tenants());
    }

    /// Re-applies weights and caps every [`sync::REFRESH_EVERY`], so
    /// changes made by another process (or by hand) take effect without
    /// a restart.
    pub fn spawn_refresh(self: &Arc<Self>, registry: Arc<Registry>) {
        let state = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(sync::REFRESH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                state.sync(&registry);
            }
        });
    }

    /// The Prometheus text of `/metrics`: per tenant and operation request
    /// metrics, then per tenant lane gauges and tenant names.
    pub fn render(&self, registry: &Registry) -> String {
        let mut out = String::new();
        self.metrics.render(&mut out);
        render_lanes(&mut out, &self.lanes.snapshot());
        render_names(&mut out, registry);
        out
    }
}

fn render_lanes(out: &mut String, snap: &LanesSnapshot) {
    let on = u8::from(snap.mode == Mode::Fair);
    let globals = [
        (
            "laneway_lanes_enabled",
            "1 when fair scheduling is on.",
            u64::from(on),
        ),
        (
            "laneway_lanes_capacity_units",
            "Cost units that may be in flight.",
            snap.capacity_units,
        ),
        (
            "laneway_lanes_in_flight_units",
            "Cost units granted and not released.",
            snap.in_flight_units,
        ),
    ];
    for (name, help, v) in globals {
        metrics::header(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
    type Get = fn(&laneway_qos::TenantSnapshot) -> u64;
    let per_tenant: [(&str, &str, &str, Get); 5] = [
        (
            "laneway_lane_weight",
            "gauge",
            "The tenant's weight.",
            |t| u64::from(t.weight.get()),
        ),
        (
            "laneway_lane_queue_depth",
            "gauge",
            "Requests and body chunks waiting in the lane.",
            |t| u64::try_from(t.queue_depth).unwrap_or(u64::MAX),
        ),
        (
            "laneway_lane_in_flight_units",
            "gauge",
            "The tenant's units in flight.",
            |t| t.in_flight_units,
        ),
        (
            "laneway_lane_served_units_total",
            "counter",
            "Cost units granted to the tenant (requests and chunks).",
            |t| t.served_units,
        ),
        (
            "laneway_lane_granted_total",
            "counter",
            "Grants to the tenant (requests and chunks).",
            |t| t.granted,
        ),
    ];
    for (name, kind, help, get) in per_tenant {
        metrics::header(out, name, kind, help);
        for t in &snap.tenants {
            let _ = writeln!(
                out,
                "{name}{{tenant=\"{}\"}} {}",
                metrics::escape(t.tenant.as_str()),
                get(t)
            );
        }
    }
}

fn render_names(out: &mut String, registry: &Registry) {
    let name = "laneway_tenant_info";
    metrics::header(out, name, "gauge", "Always 1; maps tenant ids to names.");
    let mut tenants = registry.tenants();
    tenants.sort_by(|a, b| a.id.cmp(&b.id));
    for t in tenants {
        let (id, n) = (metrics::escape(&t.id), metrics::escape(&t.name));
        let _ = writeln!(out, "{name}{{tenant=\"{id}\",name=\"{n}\"}} 1");
    }
}
