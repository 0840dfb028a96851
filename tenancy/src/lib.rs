//! laneway-tenancy: tenants and their access keys, the credential store
//! behind SigV4 verification.
//!
//! - [`model`]: what a tenant and a key are (ids, names, weight, quotas,
//!   rate caps, status; read-write / read-only / bucket-scoped keys) and the
//!   checks their fields pass.
//! - [`registry`]: the [`Registry`] of tenants and keys, persisted durably
//!   through a [`backend`]: `<data-dir>/tenancy/tenants.json` (temp file,
//!   fsync, rename, fsync of the directory) for `laneway serve`, a
//!   versioned catalog document of the store in a cluster; reloaded when
//!   another process changed it.
//! - [`crypt`]: secrets at rest are sealed with AES-256-GCM under a master
//!   key (`<data-dir>/tenancy/master.key`, mode 0600, or the environment),
//!   so the data directory never holds a secret in clear.
//! - [`persist`]: the file format (with a `format` number) and the one-time
//!   migration of the pre-release `keys.json`.
//! - [`keygen`]: generation and validation of access keys and secrets.
//!
//! Secrets are held in [`Secret`], whose `Debug` output is redacted, so a
//! stray `{:?}` in a log line cannot leak one. Nothing in this crate logs a
//! secret; a secret is handed out once, when its key is created.

pub mod backend;
pub mod crypt;
pub mod keygen;
pub mod keys;
pub mod model;
pub mod persist;
pub mod registry;

pub use backend::{FileBackend, RegistryBackend, Version};
pub use crypt::MasterKey;
pub use model::{
    Grant, KeyAccess, KeyInfo, KeySpec, Limits, NewKey, Tenant, TenantPatch, TenantSpec,
    TenantStatus,
};
pub use registry::{Bootstrap, InitialKey, Registry};

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// Name of the tenant `laneway serve` creates on a new data directory.
pub const DEFAULT_TENANT: &str = "default";

/// Errors of the tenant registry.
#[derive(Debug, Error)]
pub enum TenancyError {
    /// Reading or writing a file failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done (includes the path: operator-facing only).
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file exists but cannot be understood (or decrypted).
    #[error("tenancy file {0}")]
    Corrupt(String),
    /// The OS random number generator failed.
    #[error("the system random number generator failed")]
    Random,
    /// An operator-supplied key is unusable.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// A request field is invalid (the message says which and why).
    #[error("{0}")]
    Invalid(String),
    /// No tenant with that id or name.
    #[error("no tenant {0:?}")]
    NoSuchTenant(String),
    /// No such access key (of that tenant).
    #[error("no access key {0:?}")]
    NoSuchKey(String),
    /// The name (or access key id) is taken.
    #[error("{0} already exists")]
    Conflict(String),
    /// The stored registry changed since it was read (another writer);
    /// reload and retry.
    #[error("the tenant registry changed meanwhile; retry")]
    Stale,
    /// The store holding the registry (a cluster's catalog) failed or
    /// could not be reached; retry.
    #[error("the tenant registry's store: {0}")]
    Backend(String),
}

/// A secret access key. `Debug` never shows it; [`Secret::expose`] does.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    pub fn new(s: String) -> Secret {
        Secret(s)
    }
    /// The secret itself (for SigV4 verification and the one-time display).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// Constant-time equality of two byte strings (length is not secret).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn now_ms() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    i64::try_from(ms).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_in_debug_output() {
        let s = Secret::new("topsecretvalue".into());
        assert!(!format!("{s:?}").contains("topsecretvalue"));
    }

    #[test]
    fn constant_time_eq_compares_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
