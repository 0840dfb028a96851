//! Who a store operation is done for: the tenant and its lane weight,
//! carried beside the call rather than through every [`crate::StoreClient`]
//! method. The gateway runs each request inside [`Caller::scope`]; a remote
//! store client reads [`Caller::current`] and sends it with every call, so
//! a store node can share its own capacity among tenants by weight (the
//! contended resource, once several gateways send to one node).

use crate::ids::TenantId;
use serde::{Deserialize, Serialize};
use std::future::Future;

/// The tenant a call is made for, and its weight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// The tenant.
    pub tenant: TenantId,
    /// Its lane weight (1 and up).
    pub weight: u32,
}

tokio::task_local! {
    static CALLER: Caller;
}

impl Caller {
    /// Run `fut` with `self` as the caller of every store call it makes.
    pub fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        CALLER.scope(self, fut)
    }

    /// The caller of the running task, if it set one.
    pub fn current() -> Option<Caller> {
        CALLER.try_with(Caller::clone).ok()
    }
}

/// What to give up before a store call waits on the network: the gateway
/// sets it to drop the request's lane permit, so that a store node that
/// is slow or cut off holds none of the tenant's shared capacity (its
/// other requests, to nodes that answer, are admitted meanwhile).
pub type BeforeWait = std::sync::Arc<dyn Fn() + Send + Sync>;

tokio::task_local! {
    static BEFORE_WAIT: BeforeWait;
}

/// Run `fut` with `hook` called before each of its store calls waits on
/// the network.
pub fn scope_before_wait<F: Future>(hook: BeforeWait, fut: F) -> impl Future<Output = F::Output> {
    BEFORE_WAIT.scope(hook, fut)
}

/// Called by a remote store client before it waits on a node.
pub fn before_network_wait() {
    let _ = BEFORE_WAIT.try_with(|hook| hook());
}
