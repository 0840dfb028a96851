//! The cluster roles of the `laneway` binary: `laneway cluster init` and
//! `laneway cluster show` ([`cli`]), which write and check the cluster
//! file (laneway-store's `cluster` module owns its format and the
//! partition map); `laneway cluster local` ([`local`]), a whole cluster of
//! local child processes; `laneway cluster ping` ([`ping`]), one signed
//! call to a store node (the compose health check); `laneway cluster
//! status` ([`status`]), every replication group's state; `laneway
//! cluster add-node`, `move-partition`, `rebalance` and `remove-node`
//! ([`members`]), membership changes of a running replicated cluster.

pub mod cli;
pub mod local;
pub mod members;
pub mod ping;
pub mod status;

/// The single-threaded runtime a cluster command runs its calls on.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}
