//! Who is scheduled and how much they count: [`TenantKey`] and [`Weight`].
//!
//! A tenant is named by the same string tenancy uses for it (the tenant id
//! an access key belongs to). The key is an `Arc<str>` so that cloning it
//! into a queue entry, a permit or a paced stream costs a reference count,
//! not an allocation.
//!
//! A weight is a positive integer: under contention, active tenants get
//! service in proportion to their weights. Weights are bounded by
//! [`Weight::MAX`] so that the scheduler's fixed-point arithmetic has a
//! wide margin; zero is not a weight (a tenant that must get nothing should
//! be refused at authentication, not starved in a queue).

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

/// The name of a tenant, cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantKey(Arc<str>);

impl TenantKey {
    /// A key for the tenant named `name`.
    pub fn new(name: &str) -> TenantKey {
        TenantKey(Arc::from(name))
    }

    /// The tenant's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for TenantKey {
    fn from(name: &str) -> TenantKey {
        TenantKey::new(name)
    }
}

impl From<String> for TenantKey {
    fn from(name: String) -> TenantKey {
        TenantKey(Arc::from(name))
    }
}

impl fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for TenantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A tenant's share of the backend under contention, relative to the other
/// active tenants' weights (1 ..= [`Weight::MAX`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Weight(NonZeroU32);

impl Weight {
    /// The weight every tenant has unless told otherwise.
    pub const ONE: Weight = Weight(NonZeroU32::MIN);

    /// The largest weight accepted.
    pub const MAX: u32 = 1_000_000;

    /// A weight of `n`, or `None` when `n` is 0 or above [`Weight::MAX`].
    pub fn new(n: u32) -> Option<Weight> {
        if n > Weight::MAX {
            return None;
        }
        NonZeroU32::new(n).map(Weight)
    }

    /// The weight as a number.
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl Default for Weight {
    fn default() -> Weight {
        Weight::ONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_bounds() {
        assert_eq!(Weight::new(0), None);
        assert_eq!(Weight::new(1), Some(Weight::ONE));
        assert_eq!(Weight::new(Weight::MAX).map(Weight::get), Some(Weight::MAX));
        assert_eq!(Weight::new(Weight::MAX + 1), None);
    }

    #[test]
    fn key_round_trips() {
        let k = TenantKey::from("acme");
        assert_eq!(k.as_str(), "acme");
        assert_eq!(k, TenantKey::from(String::from("acme")));
        assert_eq!(format!("{k} {k:?}"), "acme \"acme\"");
    }
}
