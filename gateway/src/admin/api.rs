//! Handlers of the admin API: JSON in, JSON out, over the tenant registry
//! and the store.
//!
//! Every change made here invalidates the S3 key cache of this process
//! and re-applies tenant weights and caps to the lanes, so it takes effect
//! at once on this gateway (other gateways pick it up within the cache TTL
//! and the lanes' 2 s refresh). Deleting a tenant that owns buckets is refused
//! (409 `tenant_not_empty`) unless `?purge=true`: then the tenant is first
//! suspended (its keys stop working), its objects and buckets are deleted,
//! and only then the tenant and its keys are removed. A purge that fails
//! half-way leaves a suspended tenant that can be purged again.

use crate::lanes::LaneState;
use crate::request::auth::KeyCache;
use laneway_store::quota::tenant_totals;
use laneway_store::{ListEntry, ListQuery, Resume, StoreClient, TenantId};
use laneway_tenancy::{
    KeyAccess, KeyInfo, KeySpec, Limits, NewKey, Registry, TenancyError, Tenant, TenantPatch,
    TenantSpec, TenantStatus,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

use super::routes::Route;

/// What the handlers work on.
pub struct AdminState {
    /// Tenants and keys.
    pub registry: Arc<Registry>,
    /// The S3 side's key cache (invalidated after every change).
    pub keys: Arc<KeyCache>,
    /// The store (usage, purge).
    pub store: Arc<dyn StoreClient>,
    /// The lanes: tenant weights and caps are re-applied after every
    /// change; `/metrics` renders them.
    pub lanes: Arc<LaneState>,
}

/// A failed admin request: HTTP status, short code, message.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Stable machine-readable code.
    pub error: &'static str,
    /// Human message.
    pub message: String,
}

impl ApiError {
    /// A 400.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            error: "bad_request",
            message: message.into(),
        }
    }
}

impl From<TenancyError> for ApiError {
    fn from(e: TenancyError) -> ApiError {
        let (status, error) = match &e {
            TenancyError::Invalid(_) | TenancyError::InvalidKey(_) => (400, "bad_request"),
            TenancyError::NoSuchTenant(_) => (404, "no_such_tenant"),
            TenancyError::NoSuchKey(_) => (404, "no_such_key"),
            TenancyError::Conflict(_) => (409, "conflict"),
            TenancyError::Stale => (503, "busy"),
            TenancyError::Backend(_) => {
                tracing::warn!(error = %e, "admin request: registry store unavailable");
                return ApiError {
                    status: 503,
                    error: "unavailable",
                    message: "the tenant registry's store is unavailable; retry".into(),
                };
            }
            TenancyError::Io { .. } | TenancyError::Corrupt(_) | TenancyError::Random => {
                tracing::error!(error = %e, "admin request failed");
                return internal();
            }
        };
        ApiError {
            status,
            error,
            message: e.to_string(),
        }
    }
}

impl From<crate::request::error::GwError> for ApiError {
    fn from(e: crate::request::error::GwError) -> ApiError {
        tracing::error!(error = ?e, "admin request failed in the store");
        internal()
    }
}

impl From<laneway_store::StoreError> for ApiError {
    fn from(e: laneway_store::StoreError) -> ApiError {
        crate::request::error::GwError::Store(e).into()
    }
}

fn internal() -> ApiError {
    ApiError {
        status: 500,
        error: "internal",
        message: "internal error; see the server log".into(),
    }
}

/// Body of POST /v1/tenants.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantBody {
    name: String,
    weight: Option<u32>,
    quota_bytes: Option<u64>,
    quota_objects: Option<u64>,
    max_requests_per_sec: Option<u64>,
    max_bytes_per_sec: Option<u64>,
    max_open_uploads: Option<u64>,
    #[serde(default)]
    access: KeyAccess,
    buckets: Option<Vec<String>>,
}

/// The registry's view of a create request (also what the fuzz targets
/// validate, since the body's fields are private).
impl From<CreateTenantBody> for TenantSpec {
    fn from(b: CreateTenantBody) -> TenantSpec {
        TenantSpec {
            name: b.name,
            weight: b.weight,
            limits: Limits {
                quota_bytes: b.quota_bytes,
                quota_objects: b.quota_objects,
                max_requests_per_sec: b.max_requests_per_sec,
                max_bytes_per_sec: b.max_bytes_per_sec,
                max_open_uploads: b.max_open_uploads,
            },
            key: KeySpec {
                access: b.access,
                buckets: b.buckets,
            },
        }
    }
}

/// A key with its secret: only in create and rotate responses.
#[derive(Debug, Serialize)]
pub struct CreatedKey {
    #[serde(flatten)]
    info: KeyInfo,
    secret_key: String,
}

impl From<NewKey> for CreatedKey {
    fn from(k: NewKey) -> CreatedKey {
        CreatedKey {
            secret_key: k.secret.expose().to_string(),
            info: k.info,
        }
    }
}

/// Decode a JSON body (empty counts as `{}`). Public for the fuzz targets
/// (fuzz/fuzz_targets/admin_json.rs), which feed it untrusted bytes.
pub fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

fn to_json<T: Serialize>(v: &T) -> Result<Value, ApiError> {
    serde_json::to_value(v).map_err(|e| {
        tracing::error!(error = %e, "encoding an admin response failed");
        internal()
    })
}

fn param(params: &[String], i: usize) -> Result<&str, ApiError> {
    params
        .get(i)
        .map(String::as_str)
        .ok_or_else(|| ApiError::bad_request("missing path parameter"))
}

impl AdminState {
    /// Run `route`; the response status and JSON body.
    pub async fn handle(
        &self,
        route: Route,
        params: &[String],
        query: &str,
        bytes: &[u8],
    ) -> Result<(u16, Value), ApiError> {
        let reg = &self.registry;
        let out = match route {
            Route::CreateTenant => return self.create_tenant(body(bytes)?),
            Route::ListTenants => to_json(&json!({ "tenants": reg.tenants() }))?,
            Route::GetTenant => to_json(&reg.tenant(param(params, 0)?)?)?,
            Route::UpdateTenant => {
                let patch: TenantPatch = body(bytes)?;
                to_json(&reg.update_tenant(param(params, 0)?, &patch)?)?
            }
            Route::DeleteTenant => self.delete_tenant(param(params, 0)?, query).await?,
            Route::Suspend => {
                to_json(&reg.set_status(param(params, 0)?, TenantStatus::Suspended)?)?
            }
            Route::Resume => to_json(&reg.set_status(param(params, 0)?, TenantStatus::Active)?)?,
            Route::CreateKey => {
                let spec: KeySpec = body(bytes)?;
                let k = reg.create_key(param(params, 0)?, spec)?;
                self.changed();
                return Ok((201, to_json(&CreatedKey::from(k))?));
            }
            Route::ListKeys => to_json(&json!({ "keys": reg.keys(param(params, 0)?)? }))?,
            Route::RevokeKey => to_json(&reg.revoke_key(param(params, 0)?, param(params, 1)?)?)?,
            Route::RotateKey => {
                let k = reg.rotate_key(param(params, 0)?, param(params, 1)?)?;
                self.changed();
                return Ok((201, to_json(&CreatedKey::from(k))?));
            }
            Route::Usage => self.usage(param(params, 0)?).await?,
        };
        self.changed();
        Ok((200, out))
    }

    /// After a change: forget cached keys and apply weights and caps, so
    /// the change takes effect at once on this gateway.
    fn changed(&self) {
        self.keys.invalidate_all();
        self.lanes.sync(&self.registry);
    }

    /// The Prometheus text of `GET /metrics`.
    pub fn metrics(&self) -> String {
        let mut out = self.lanes.render(&self.registry);
        if let Some(view) = self.store.replication() {
            crate::cluster::status::render_map_version(&mut out, view.map.version());
            let reports = view.reports.into_iter().collect();
            let groups = crate::cluster::status::join(&view.map, &reports);
            crate::cluster::status::render_metrics(&mut out, &groups);
        }
        out
    }

    fn create_tenant(&self, b: CreateTenantBody) -> Result<(u16, Value), ApiError> {
        let (tenant, key) = self.registry.create_tenant(b.into())?;
        self.changed();
        tracing::info!(tenant = %tenant.id, name = %tenant.name, "tenant created");
        let out = json!({ "tenant": to_json(&tenant)?, "key": to_json(&CreatedKey::from(key))? });
        Ok((201, out))
    }

    async fn usage(&self, who: &str) -> Result<Value, ApiError> {
        let t = self.registry.tenant(who)?;
        let id = TenantId(t.id.clone());
        let mut buckets = Vec::new();
        for b in self.store.list_buckets(&id).await? {
            let u = self.store.bucket_usage(b.id).await?;
            let p = self.store.bucket_pending(b.id).await?;
            buckets.push(json!({
                "name": b.name,
                "bytes": u.bytes + p.part_bytes,
                "objects": u.objects,
                "multipart_bytes": p.part_bytes,
                "open_uploads": p.uploads,
            }));
        }
        // Bytes count the parts of unfinished uploads: quotas count them.
        let totals = tenant_totals(self.store.as_ref(), &id).await?;
        Ok(json!({
            "tenant": t.id,
            "name": t.name,
            "bytes": totals.bytes,
            "objects": totals.objects,
            "multipart_bytes": totals.part_bytes,
            "open_uploads": totals.uploads,
            "quota_bytes": t.limits.quota_bytes,
            "quota_objects": t.limits.quota_objects,
            "max_open_uploads": crate::request::quota::limits(&t.limits).max_open_uploads,
            "buckets": buckets,
        }))
    }

    async fn delete_tenant(&self, who: &str, query: &str) -> Result<Value, ApiError> {
        let purge = query
            .split('&')
            .any(|kv| kv == "purge=true" || kv == "purge=1");
        let t: Tenant = self.registry.tenant(who)?;
        let id = TenantId(t.id.clone());
        let buckets = self.store.list_buckets(&id).await?;
        if !buckets.is_empty() && !purge {
            return Err(ApiError {
                status: 409,
                error: "tenant_not_empty",
                message: format!(
                    "tenant {} owns {} bucket(s); delete them first or pass ?purge=true",
                    t.name,
                    buckets.len()
                ),
            });
        }
        if !buckets.is_empty() {
            self.registry.set_status(&t.id, TenantStatus::Suspended)?;
            self.changed();
            for b in &buckets {
                purge_bucket(self.store.as_ref(), b).await?;
                self.store.delete_bucket(&id, &b.name).await?;
            }
        }
        let gone = self.registry.delete_tenant(&t.id)?;
        tracing::info!(tenant = %gone.id, buckets = buckets.len(), "tenant deleted");
        Ok(json!({ "deleted": gone.id, "buckets_deleted": buckets.len() }))
    }
}

/// Delete every object of `bucket`, a page at a time.
async fn purge_bucket(
    store: &dyn StoreClient,
    bucket: &laneway_store::BucketInfo,
) -> Result<(), ApiError> {
    loop {
        let query = ListQuery {
            tags: Vec::new(),
            prefix: String::new(),
            delimiter: None,
            resume: Resume::Start,
            max_keys: 1000,
        };
        let page = store.list_objects(bucket, query).await?;
        if page.entries.is_empty() {
            return Ok(());
        }
        for e in page.entries {
            if let ListEntry::Object(o) = e {
                store.delete_object(bucket, &o.key).await?;
            }
        }
    }
}
