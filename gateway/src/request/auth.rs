//! SigV4 secrets and the access check, both backed by the tenant registry
//! through a short-lived cache.
//!
//! [`KeyCache`] answers "who is this access key" from a moka cache whose
//! entries live [`KEY_CACHE_TTL`] (2 s); a miss asks the
//! [`Registry`], which first reloads its file if another process changed
//! it. So a revoked key, a suspended tenant or a changed quota takes
//! effect on every gateway within the TTL, and at once on the gateway
//! whose admin API made the change (it calls [`KeyCache::invalidate_all`]).
//! Unknown keys are cached too (as absent), so guessing keys cannot hammer
//! the registry.
//!
//! s3s verifies signatures itself; it only asks [`KeyAuth`] for the secret
//! (unknown -> `InvalidAccessKeyId`). Then [`TenantAccess::check`] runs for
//! every operation: anonymous -> AccessDenied; the SigV2 time limits s3s
//! does not enforce ([`crate::request::presign`]: presigned URLs at most seven days,
//! header signatures within 15 minutes of the clock); suspended tenant ->
//! AccessDenied naming the suspension; the operation is classified by
//! [`crate::request::opclass`] and a read-only key's writes, or a scoped key's
//! touching a bucket outside its scope, are AccessDenied. Allowed requests
//! carry the [`Tenant`], [`KeyScope`] and [`Limits`] in their extensions
//! (read by [`crate::request::context::ReqCtx`]) and the tenant in their span.
//!
//! Secrets are handed to s3s only; they are never logged.

use crate::lanes::trust::ConnTrust;
use crate::request::context::{KeyScope, RequestInfo, Tenant};
use crate::request::error::GwError;
use crate::request::opclass;
use laneway_store::TenantId;
use laneway_tenancy::{Grant, KeyAccess, Limits, Registry, TenantStatus};
use moka::sync::Cache;
use s3s::S3Result;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use std::sync::Arc;
use std::time::Duration;

/// How long a key lookup is trusted: the bound on revocation delay.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(2);

/// Access key -> grant, cached for [`KEY_CACHE_TTL`].
pub struct KeyCache {
    registry: Arc<Registry>,
    cache: Cache<String, Option<Arc<Grant>>>,
}

impl KeyCache {
    /// A cache over `registry`.
    pub fn new(registry: Arc<Registry>) -> KeyCache {
        KeyCache {
            registry,
            cache: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(KEY_CACHE_TTL)
                .build(),
        }
    }

    /// The registry behind the cache.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The grant of `access_key`, if the key exists.
    pub fn get(&self, access_key: &str) -> Option<Arc<Grant>> {
        self.cache.get_with(access_key.to_string(), || {
            self.registry.resolve(access_key).map(Arc::new)
        })
    }

    /// Forget everything (after a change made through this process).
    pub fn invalidate_all(&self) {
        self.cache.invalidate_all();
    }
}

/// Supplies secrets for SigV4 verification.
pub struct KeyAuth {
    keys: Arc<KeyCache>,
}

impl KeyAuth {
    /// Secrets from `keys`.
    pub fn new(keys: Arc<KeyCache>) -> KeyAuth {
        KeyAuth { keys }
    }
}

#[async_trait::async_trait]
impl S3Auth for KeyAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.keys.get(access_key) {
            Some(grant) => Ok(SecretKey::from(grant.secret.expose())),
            None => Err(GwError::InvalidAccessKeyId.into()),
        }
    }
}

/// Maps each authenticated request to its tenant and checks the key's
/// rights for the operation.
pub struct TenantAccess {
    keys: Arc<KeyCache>,
}

impl TenantAccess {
    /// Grants from `keys`.
    pub fn new(keys: Arc<KeyCache>) -> TenantAccess {
        TenantAccess { keys }
    }
}

/// Whether `grant` may run operation `op`; the reason when not.
pub fn authorize(grant: &Grant, op: &opclass::OpClass) -> Result<(), GwError> {
    if grant.tenant.status == TenantStatus::Suspended {
        return Err(GwError::Denied(format!(
            "tenant {} is suspended",
            grant.tenant.name
        )));
    }
    if op.write && grant.key.access == KeyAccess::ReadOnly {
        return Err(GwError::Denied("this access key is read-only".into()));
    }
    if let Some(scope) = &grant.key.buckets {
        if op.unreadable_source {
            return Err(GwError::Denied(
                "the copy source cannot be checked against this key's bucket scope".into(),
            ));
        }
        if op.buckets.iter().any(|b| !scope.contains(b)) {
            return Err(GwError::Denied(
                "this access key is not allowed to use this bucket".into(),
            ));
        }
    }
    Ok(())
}

/// For a request whose signature s3s verified with `access_key`'s secret:
/// check that its key may run `op`, and put its tenant, bucket scope and
/// limits into the request's extensions (where [`crate::request::context::ReqCtx::of`] finds them).
/// The one place both S3 operations and laneway's own routes are let in.
pub fn grant_request(
    keys: &KeyCache,
    access_key: &str,
    op: &opclass::OpClass,
    ext: &mut http::Extensions,
) -> Result<Arc<Grant>, GwError> {
    let Some(grant) = keys.get(access_key) else {
        return Err(GwError::InvalidAccessKeyId);
    };
    let tenant = TenantId(grant.tenant.id.clone());
    if let Some(info) = ext.get::<RequestInfo>() {
        info.span.record("tenant", tenant.as_str());
    }
    authorize(&grant, op)?;
    if let Some(trust) = ext.get::<Arc<ConnTrust>>() {
        // s3s verified the signature before calling us: this connection
        // holds the key's secret.
        trust.prove(&grant.key.access_key);
    }
    ext.insert(Tenant(tenant));
    ext.insert(KeyScope(grant.key.buckets.clone().map(Arc::from)));
    ext.insert::<Limits>(grant.tenant.limits.clone());
    Ok(grant)
}

#[async_trait::async_trait]
impl S3Access for TenantAccess {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(cred) = cx.credentials() else {
            return Err(GwError::AccessDenied.into());
        };
        crate::request::presign::check_v2_time(
            cx.headers(),
            cx.uri().query(),
            time::OffsetDateTime::now_utc(),
        )?;
        let access_key = cred.access_key.clone();
        let op = opclass::classify(cx.s3_op().name(), cx.s3_path(), cx.headers());
        grant_request(&self.keys, &access_key, &op, cx.extensions_mut())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use laneway_tenancy::{KeyInfo, Secret, Tenant as TenantRec};

    fn grant(access: KeyAccess, buckets: Option<Vec<String>>, status: TenantStatus) -> Grant {
        Grant {
            tenant: TenantRec {
                id: "t-1".into(),
                name: "acme".into(),
                weight: 1,
                limits: Limits::default(),
                status,
                created_ms: 0,
            },
            key: KeyInfo {
                access_key: "AK".into(),
                tenant: "t-1".into(),
                access,
                buckets,
                created_ms: 0,
            },
            secret: Secret::new("s".into()),
        }
    }

    fn op(write: bool, buckets: &[&str]) -> opclass::OpClass {
        opclass::OpClass {
            write,
            buckets: buckets.iter().map(|b| b.to_string()).collect(),
            unreadable_source: false,
        }
    }

    #[test]
    fn rights_are_enforced() {
        let rw = grant(KeyAccess::ReadWrite, None, TenantStatus::Active);
        assert!(authorize(&rw, &op(true, &["a"])).is_ok());
        let ro = grant(KeyAccess::ReadOnly, None, TenantStatus::Active);
        assert!(authorize(&ro, &op(false, &["a"])).is_ok());
        assert!(matches!(
            authorize(&ro, &op(true, &["a"])),
            Err(GwError::Denied(_))
        ));
        let scoped = grant(
            KeyAccess::ReadWrite,
            Some(vec!["a".into()]),
            TenantStatus::Active,
        );
        assert!(authorize(&scoped, &op(true, &["a"])).is_ok());
        assert!(authorize(&scoped, &op(false, &[])).is_ok(), "ListBuckets");
        assert!(authorize(&scoped, &op(false, &["b"])).is_err());
        assert!(
            authorize(&scoped, &op(true, &["a", "b"])).is_err(),
            "copy source"
        );
        let sus = grant(KeyAccess::ReadWrite, None, TenantStatus::Suspended);
        let Err(GwError::Denied(why)) = authorize(&sus, &op(false, &[])) else {
            panic!("suspended tenant allowed");
        };
        assert!(why.contains("suspended"));
    }
}
