//! The tenancy data model and the checks its fields pass.
//!
//! A [`Tenant`] has a stable id (`t-` + 16 hex digits, never reused, the
//! namespace of its buckets in the store), a unique human name, a QoS
//! weight, optional quotas and rate caps ([`Limits`]) and a status. An
//! access key ([`KeyInfo`]) belongs to one tenant and is read-write or
//! read-only, optionally restricted to a list of bucket names. A [`Grant`]
//! is what the S3 front door needs to authenticate and authorise one key.
//!
//! Names may not start with `t-`, so "id or name" lookups are unambiguous.

use crate::{Secret, TenancyError};
use serde::{Deserialize, Deserializer, Serialize};

/// Largest accepted tenant weight.
pub const MAX_WEIGHT: u32 = 1000;

/// Whether a tenant's keys work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantStatus {
    /// Requests are served.
    Active,
    /// Every S3 request is refused with AccessDenied.
    Suspended,
}

/// What a key may do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyAccess {
    /// Reads and writes.
    #[default]
    ReadWrite,
    /// Reads only: every write operation is AccessDenied.
    ReadOnly,
}

/// Quotas and rate caps; `None` is unlimited.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Most bytes the tenant may store.
    pub quota_bytes: Option<u64>,
    /// Most objects the tenant may store.
    pub quota_objects: Option<u64>,
    /// Most requests per second.
    pub max_requests_per_sec: Option<u64>,
    /// Most body bytes per second.
    pub max_bytes_per_sec: Option<u64>,
    /// Most multipart uploads in progress at once. Unlike the others,
    /// `None` is not unlimited but the store's default (10,000,
    /// `laneway_store::quota::DEFAULT_MAX_OPEN_UPLOADS`).
    #[serde(default)]
    pub max_open_uploads: Option<u64>,
}

/// A tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Stable id (`t-<hex>`), the namespace of its buckets.
    pub id: String,
    /// Unique name.
    pub name: String,
    /// QoS weight (1..=1000).
    pub weight: u32,
    /// Quotas and rate caps.
    #[serde(flatten)]
    pub limits: Limits,
    /// Active or suspended.
    pub status: TenantStatus,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: i64,
}

/// An access key as shown to operators: never the secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    /// Access key id.
    pub access_key: String,
    /// Owning tenant id.
    pub tenant: String,
    /// Read-write or read-only.
    pub access: KeyAccess,
    /// Buckets the key is limited to (`None`: all of the tenant's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Vec<String>>,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: i64,
}

/// A key just created: the only time its secret is handed out.
#[derive(Clone, Debug)]
pub struct NewKey {
    /// The key.
    pub info: KeyInfo,
    /// Its secret.
    pub secret: Secret,
}

/// What a new key may do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct KeySpec {
    /// Read-write (default) or read-only.
    #[serde(default)]
    pub access: KeyAccess,
    /// Bucket scope (`None`: every bucket of the tenant).
    #[serde(default)]
    pub buckets: Option<Vec<String>>,
}

/// A tenant to create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantSpec {
    /// Unique name.
    pub name: String,
    /// Weight (default 1).
    pub weight: Option<u32>,
    /// Quotas and caps.
    pub limits: Limits,
    /// Its first key.
    pub key: KeySpec,
}

/// A change to a tenant: absent fields stay, `null` clears a limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantPatch {
    /// New name.
    #[serde(default)]
    pub name: Option<String>,
    /// New weight.
    #[serde(default)]
    pub weight: Option<u32>,
    /// New byte quota (`null`: none).
    #[serde(default, deserialize_with = "present")]
    pub quota_bytes: Option<Option<u64>>,
    /// New object quota (`null`: none).
    #[serde(default, deserialize_with = "present")]
    pub quota_objects: Option<Option<u64>>,
    /// New request-rate cap (`null`: none).
    #[serde(default, deserialize_with = "present")]
    pub max_requests_per_sec: Option<Option<u64>>,
    /// New byte-rate cap (`null`: none).
    #[serde(default, deserialize_with = "present")]
    pub max_bytes_per_sec: Option<Option<u64>>,
    /// New cap on open multipart uploads (`null`: the default).
    #[serde(default, deserialize_with = "present")]
    pub max_open_uploads: Option<Option<u64>>,
}

/// A field that is present (possibly `null`) becomes `Some(..)`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl TenantPatch {
    /// Apply to `t` (the caller validates the result).
    pub fn apply(&self, t: &mut Tenant) {
        if let Some(n) = &self.name {
            t.name.clone_from(n);
        }
        if let Some(w) = self.weight {
            t.weight = w;
        }
        let l = &mut t.limits;
        set(&mut l.quota_bytes, self.quota_bytes);
        set(&mut l.quota_objects, self.quota_objects);
        set(&mut l.max_requests_per_sec, self.max_requests_per_sec);
        set(&mut l.max_bytes_per_sec, self.max_bytes_per_sec);
        set(&mut l.max_open_uploads, self.max_open_uploads);
    }
}

fn set(slot: &mut Option<u64>, change: Option<Option<u64>>) {
    if let Some(v) = change {
        *slot = v;
    }
}

/// Everything the S3 front door needs about one access key.
#[derive(Clone, Debug)]
pub struct Grant {
    /// The tenant (status, limits).
    pub tenant: Tenant,
    /// The key (access, scope).
    pub key: KeyInfo,
    /// The key's secret, for SigV4.
    pub secret: Secret,
}

/// Check a tenant name: 1..=63 of `a-z0-9-`, starting with a letter or
/// digit, not starting with `t-` (reserved for ids).
pub fn validate_name(name: &str) -> Result<(), TenancyError> {
    let ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.starts_with("t-");
    if ok {
        Ok(())
    } else {
        Err(TenancyError::Invalid(format!(
            "tenant name {name:?} must be 1 to 63 of a-z, 0-9 and '-', not start with '-' or 't-'"
        )))
    }
}

/// Check a weight.
pub fn validate_weight(w: u32) -> Result<(), TenancyError> {
    if (1..=MAX_WEIGHT).contains(&w) {
        Ok(())
    } else {
        Err(TenancyError::Invalid(format!(
            "weight must be 1 to {MAX_WEIGHT} (got {w})"
        )))
    }
}

/// Check a bucket scope: non-empty list of plausible bucket names.
pub fn validate_scope(buckets: Option<&[String]>) -> Result<(), TenancyError> {
    let Some(list) = buckets else { return Ok(()) };
    if list.is_empty() {
        return Err(TenancyError::Invalid(
            "buckets must name at least one bucket (omit it for all buckets)".into(),
        ));
    }
    for b in list {
        let ok = (3..=63).contains(&b.len())
            && b.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.');
        if !ok {
            return Err(TenancyError::Invalid(format!(
                "bucket {b:?} in the key scope is not a valid bucket name"
            )));
        }
    }
    Ok(())
}

/// Check limits: a zero quota or cap is refused (suspend the tenant instead).
pub fn validate_limits(l: &Limits) -> Result<(), TenancyError> {
    let fields = [
        ("quota_bytes", l.quota_bytes),
        ("quota_objects", l.quota_objects),
        ("max_requests_per_sec", l.max_requests_per_sec),
        ("max_bytes_per_sec", l.max_bytes_per_sec),
        ("max_open_uploads", l.max_open_uploads),
    ];
    match fields.iter().find(|(_, v)| *v == Some(0)) {
        Some((name, _)) => Err(TenancyError::Invalid(format!(
            "{name} must be at least 1 (omit or null it for no limit)"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_weights_and_scopes_are_checked() {
        assert!(validate_name("acme").is_ok());
        assert!(validate_name("acme-2").is_ok());
        for bad in ["", "Acme", "t-123", "-x", "a b", &"x".repeat(64)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
        assert!(validate_weight(1).is_ok());
        assert!(validate_weight(0).is_err());
        assert!(validate_weight(MAX_WEIGHT + 1).is_err());
        assert!(validate_scope(None).is_ok());
        assert!(validate_scope(Some(&["logs".to_string()])).is_ok());
        assert!(validate_scope(Some(&[])).is_err());
        assert!(validate_scope(Some(&["Bad_Name".to_string()])).is_err());
    }

    #[test]
    fn patch_sets_keeps_and_clears() {
        let mut t = Tenant {
            id: "t-1".into(),
            name: "a".into(),
            weight: 1,
            limits: Limits {
                quota_bytes: Some(5),
                quota_objects: Some(7),
                ..Limits::default()
            },
            status: TenantStatus::Active,
            created_ms: 0,
        };
        let p: TenantPatch =
            serde_json::from_str(r#"{"weight":3,"quota_bytes":null}"#).expect("json");
        p.apply(&mut t);
        assert_eq!(t.weight, 3);
        assert_eq!(t.limits.quota_bytes, None);
        assert_eq!(t.limits.quota_objects, Some(7));
        assert!(serde_json::from_str::<TenantPatch>(r#"{"wieght":3}"#).is_err());
    }
}
