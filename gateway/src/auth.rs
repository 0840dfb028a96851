//! SigV4 secrets and the access check, both backed by tenancy's credential
//! store.
//!
//! s3s verifies signatures itself; it only asks [`KeyAuth`] for the secret
//! of an access key id (unknown -> `InvalidAccessKeyId`). After the
//! signature holds, s3s calls [`TenantAccess::check`] for every operation:
//! it refuses anonymous requests, maps the key to its tenant, stores the
//! [`Tenant`] in the request extensions (where [`crate::context::ReqCtx`]
//! finds it) and records the tenant in the request's tracing span.
//!
//! Secrets are handed to s3s only; they are never logged.

use crate::context::{RequestInfo, Tenant};
use crate::error::GwError;
use laneway_store::TenantId;
use laneway_tenancy::CredentialStore;
use s3s::S3Result;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use std::sync::Arc;

/// Supplies secrets for SigV4 verification.
pub struct KeyAuth {
    creds: Arc<CredentialStore>,
}

impl KeyAuth {
    /// Secrets from `creds`.
    pub fn new(creds: Arc<CredentialStore>) -> KeyAuth {
        KeyAuth { creds }
    }
}

#[async_trait::async_trait]
impl S3Auth for KeyAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.creds.lookup(access_key) {
            Some(entry) => Ok(SecretKey::from(entry.secret.expose())),
            None => Err(GwError::InvalidAccessKeyId.into()),
        }
    }
}

/// Maps each authenticated request to its tenant.
pub struct TenantAccess {
    creds: Arc<CredentialStore>,
}

impl TenantAccess {
    /// Tenants from `creds`.
    pub fn new(creds: Arc<CredentialStore>) -> TenantAccess {
        TenantAccess { creds }
    }
}

#[async_trait::async_trait]
impl S3Access for TenantAccess {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(cred) = cx.credentials() else {
            return Err(GwError::AccessDenied.into());
        };
        let Some(entry) = self.creds.lookup(&cred.access_key) else {
            return Err(GwError::InvalidAccessKeyId.into());
        };
        let tenant = TenantId(entry.tenant.clone());
        if let Some(info) = cx.extensions_mut().get::<RequestInfo>() {
            info.span.record("tenant", tenant.as_str());
        }
        cx.extensions_mut().insert(Tenant(tenant));
        Ok(())
    }
}
