//! Tenant quotas (bytes, objects) on the write path.
//!
//! Guarantee: with one gateway, a tenant's stored bytes and objects never
//! exceed its quota. Before a write streams a single byte, [`Quotas::reserve`]
//! takes the tenant's lock, reads its exact committed usage from the store
//! (per-bucket counters committed in the same batch as the objects, summed
//! over the tenant's buckets), adds the bytes and objects of every write of
//! this tenant still in flight on this gateway, and refuses with
//! `QuotaExceeded` (403) if this write would pass a limit. Otherwise the
//! write is reserved until its [`Reservation`] is dropped, after the
//! commit (or failure): so concurrent uploads racing for the last bytes
//! cannot both win, and a refused upload leaves nothing behind because it
//! never started.
//!
//! An overwrite is credited with the size of the object it replaces (read
//! under the same lock), so replacing an object at the quota with one no
//! larger succeeds; in-flight reservations are counted gross (no credit),
//! which errs on the side of refusing. Deletes need no bookkeeping: the
//! next check reads the store again. Nothing is cached, so a restart
//! loses nothing.
//!
//! Several gateways over one store: each sees the others' committed writes
//! but not their in-flight ones, so usage can pass the quota by at most
//! the uploads in flight on the other gateways at that moment.
//!
//! Tenants without quotas skip all of this (no store reads, no lock).

use crate::context::ReqCtx;
use crate::error::{GwError, GwResult};
use laneway_store::{BucketInfo, Store, StoreError, TenantId};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Bytes and objects of one tenant's writes in flight on this gateway.
#[derive(Default, Debug, Clone, Copy)]
struct Inflight {
    bytes: u64,
    objects: u64,
}

/// In-flight reservations of every tenant.
#[derive(Default, Debug)]
pub struct Quotas {
    tenants: Mutex<HashMap<TenantId, Arc<Mutex<Inflight>>>>,
}

/// One write's share of its tenant's quota, released on drop.
#[derive(Debug)]
pub struct Reservation {
    slot: Arc<Mutex<Inflight>>,
    bytes: u64,
    objects: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut f = self.slot.lock();
        f.bytes = f.bytes.saturating_sub(self.bytes);
        f.objects = f.objects.saturating_sub(self.objects);
    }
}

/// One write to check.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// Target bucket.
    pub bucket: &'a BucketInfo,
    /// Key it replaces, if it may replace one (credited).
    pub key: Option<&'a str>,
    /// Bytes it adds.
    pub bytes: u64,
    /// Objects it adds (1 for a PUT or copy, 0 for a part).
    pub objects: u64,
}

impl Quotas {
    fn slot(&self, tenant: &TenantId) -> Arc<Mutex<Inflight>> {
        Arc::clone(self.tenants.lock().entry(tenant.clone()).or_default())
    }

    /// Reserve room for `w` in the tenant's quota, or refuse it. `None`
    /// when the tenant has no quota.
    pub fn reserve(
        &self,
        store: &Store,
        ctx: &ReqCtx,
        w: Write<'_>,
    ) -> GwResult<Option<Reservation>> {
        let (max_bytes, max_objects) = (ctx.limits.quota_bytes, ctx.limits.quota_objects);
        if max_bytes.is_none() && max_objects.is_none() {
            return Ok(None);
        }
        let slot = self.slot(&ctx.tenant);
        let mut inflight = slot.lock();
        let (credit_bytes, credit_objects) = replaced(store, w)?;
        let (used_bytes, used_objects) = tenant_usage(store, &ctx.tenant)?;
        let bytes = (used_bytes + inflight.bytes + w.bytes).saturating_sub(credit_bytes);
        let objects = (used_objects + inflight.objects + w.objects).saturating_sub(credit_objects);
        if let Some(max) = max_bytes
            && bytes > max
        {
            return Err(GwError::QuotaExceeded(format!(
                "This upload would exceed the tenant's byte quota (quota_bytes = {max}; \
                 {used_bytes} bytes stored)."
            )));
        }
        if let Some(max) = max_objects
            && objects > max
        {
            return Err(GwError::QuotaExceeded(format!(
                "This upload would exceed the tenant's object quota (quota_objects = {max}; \
                 {used_objects} objects stored)."
            )));
        }
        inflight.bytes += w.bytes;
        inflight.objects += w.objects;
        drop(inflight);
        Ok(Some(Reservation {
            slot,
            bytes: w.bytes,
            objects: w.objects,
        }))
    }
}

/// Size and count of the object `w` would replace.
fn replaced(store: &Store, w: Write<'_>) -> GwResult<(u64, u64)> {
    let Some(key) = w.key else { return Ok((0, 0)) };
    match store.head_object(w.bucket, key) {
        Ok(info) => Ok((info.size, 1)),
        Err(StoreError::NoSuchKey) => Ok((0, 0)),
        Err(e) => Err(e.into()),
    }
}

/// The tenant's committed (bytes, objects), exact.
pub fn tenant_usage(store: &Store, tenant: &TenantId) -> GwResult<(u64, u64)> {
    let mut bytes = 0u64;
    let mut objects = 0u64;
    for b in store.list_buckets(tenant)? {
        let u = store.bucket_usage(b.id)?;
        bytes += u64::try_from(u.bytes).unwrap_or(0);
        objects += u64::try_from(u.objects).unwrap_or(0);
    }
    Ok((bytes, objects))
}
