//! The [`Gateway`] every S3 handler receives, and the per-request context.
//!
//! A request's context is built in two steps: the HTTP layer (`serve.rs`)
//! puts a [`RequestInfo`] (request id and tracing span) into the request
//! extensions; the access check (`auth.rs`) resolves the signing key to its
//! tenant and adds a [`Tenant`] and the key's [`KeyScope`] and tenant
//! [`Limits`]. Handlers read them through [`ReqCtx::of`], the one place that
//! knows where they live, so no handler touches credentials or globals.

use crate::request::error::{GwError, GwResult};
use laneway_store::{BucketInfo, StoreClient, TenantId};
use laneway_tenancy::Limits;
use s3s::S3Request;
use std::sync::Arc;

/// The S3 front door: the store (in process or remote, through one
/// trait) and this gateway's settings.
#[derive(Clone)]
pub struct Gateway {
    store: Arc<dyn StoreClient>,
    region: String,
}

impl Gateway {
    /// A gateway over `store` answering for `region`.
    pub fn new(store: Arc<dyn StoreClient>, region: String) -> Gateway {
        Gateway { store, region }
    }

    /// The store.
    pub fn store(&self) -> &dyn StoreClient {
        self.store.as_ref()
    }

    /// The region buckets are created in.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The tenant's bucket `name` (NoSuchBucket when it has none).
    pub async fn bucket(&self, ctx: &ReqCtx, name: &str) -> GwResult<BucketInfo> {
        Ok(self.store.bucket(&ctx.tenant, name).await?)
    }
}

/// Request id and span, attached by the HTTP layer.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    /// The id sent back as `x-amz-request-id`.
    pub id: String,
    /// The request's span (has an empty `tenant` field the access check fills).
    pub span: tracing::Span,
}

/// The tenant a request acts for, attached by the access check.
#[derive(Clone, Debug)]
pub struct Tenant(pub TenantId);

/// The signing key's bucket scope (`None`: every bucket of the tenant),
/// attached by the access check.
#[derive(Clone, Debug, Default)]
pub struct KeyScope(pub Option<Arc<[String]>>);

impl KeyScope {
    /// Whether the key may touch bucket `name`.
    pub fn allows(&self, name: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|list| list.iter().any(|b| b == name))
    }
}

/// What a handler knows about its request beyond the S3 input.
#[derive(Clone, Debug)]
pub struct ReqCtx {
    /// The tenant the signing key belongs to.
    pub tenant: TenantId,
    /// The key's bucket scope (ListBuckets shows only these).
    pub scope: KeyScope,
    /// The tenant's quotas (as of the key cache's last refresh).
    pub limits: Limits,
}

impl ReqCtx {
    /// The context of `req`. A request that reached a handler without a
    /// tenant was not authenticated: refuse it rather than guess.
    pub fn of<T>(req: &S3Request<T>) -> GwResult<ReqCtx> {
        let tenant = req
            .extensions
            .get::<Tenant>()
            .ok_or(GwError::AccessDenied)?;
        Ok(ReqCtx {
            tenant: tenant.0.clone(),
            scope: req
                .extensions
                .get::<KeyScope>()
                .cloned()
                .unwrap_or_default(),
            limits: req.extensions.get::<Limits>().cloned().unwrap_or_default(),
        })
    }
}
