//! Tenant provisioning: a JSON-over-HTTP API on its own listener, and the
//! `laneway admin` command line client that talks to it.
//!
//! - [`routes`]: the route table (the one list of endpoints, also checked
//!   against `docs/admin-api.yaml` by a test) and path matching.
//! - [`api`]: the handlers, on top of the tenant [`laneway_tenancy::Registry`]
//!   and the store (usage, purge).
//! - [`server`]: the listener, bearer-token check, JSON error bodies, and
//!   `GET /metrics` (Prometheus text of the lanes, and in a replicated
//!   cluster of every replication group, same token).
//! - [`client`] and [`cli`]: `laneway admin ...`.
//!
//! The API is for operators: it is guarded by one bearer token (compared
//! in constant time) and should listen on a private address (the default
//! is 127.0.0.1:9001). Secrets appear in exactly two responses, creating a
//! tenant and creating/rotating a key, and in no log line.

pub mod api;
pub mod boot;
pub mod cli;
pub mod cli_output;
pub mod client;
pub mod routes;
pub mod server;

pub use api::AdminState;
pub use server::{AdminToken, serve_admin};
