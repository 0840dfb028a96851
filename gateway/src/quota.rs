//! Tenant quotas (bytes, objects) on the write path.
//!
//! Guarantee: with one gateway, a tenant's stored bytes and objects never
//! exceed its quota. Before a write streams a single byte, [`Quotas::reserve`]
//! takes the tenant's check lock (its own: other tenants never wait on
//! it), reads its exact committed usage from the store
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
//! Multipart parts count as stored bytes from the moment they are durable
//! (the store keeps per-bucket counters of open uploads and their parts'
//! bytes, in the same batch as the part rows). So an UploadPart or
//! UploadPartCopy reserves its bytes like a PUT ([`Quotas::reserve_part`]),
//! credited with the part of the same number it replaces; a completion
//! adds an object but no bytes (its parts' bytes become the object's), and
//! an abort or the expiry sweep gives the bytes back.
//!
//! Open multipart uploads are capped per tenant ([`Quotas::reserve_upload`],
//! the tenant's `max_open_uploads`, default [`DEFAULT_MAX_OPEN_UPLOADS`]),
//! so parts cannot pile up under thousands of forgotten uploads: counted
//! exactly the same way, under the same lock, for every tenant.
//!
//! Several gateways over one store: each sees the others' committed writes
//! but not their in-flight ones, so usage can pass the quota by at most
//! the uploads in flight on the other gateways at that moment.
//!
//! Tenants without quotas skip the byte and object checks (no store
//! reads, no lock); only CreateMultipartUpload counts their open uploads.

use crate::context::ReqCtx;
use crate::error::{GwError, GwResult};
use laneway_store::{BucketInfo, StoreClient, StoreError, TenantId};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

/// Open multipart uploads a tenant may have when its limits name none.
pub const DEFAULT_MAX_OPEN_UPLOADS: u64 = 10_000;

/// Bytes, objects and upload creations of one tenant's writes in flight
/// on this gateway.
#[derive(Default, Debug, Clone, Copy)]
struct Inflight {
    bytes: u64,
    objects: u64,
    uploads: u64,
}

/// One tenant's reservations: `check` serialises the checks (it is held
/// while the tenant's usage is read from the store, which is a wait on
/// the store; it is this tenant's alone, so only its own writes queue on
/// it); `inflight` is only ever held for a few instructions, never across
/// a wait, so a reservation can be given back in `Drop`.
#[derive(Default, Debug)]
struct Slot {
    check: tokio::sync::Mutex<()>,
    inflight: Mutex<Inflight>,
}

/// In-flight reservations of every tenant.
#[derive(Default, Debug)]
pub struct Quotas {
    tenants: Mutex<HashMap<TenantId, Arc<Slot>>>,
}

/// One write's share of its tenant's quota, released on drop.
#[derive(Debug)]
pub struct Reservation {
    slot: Arc<Slot>,
    held: Inflight,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut f = self.slot.inflight.lock();
        f.bytes = f.bytes.saturating_sub(self.held.bytes);
        f.objects = f.objects.saturating_sub(self.held.objects);
        f.uploads = f.uploads.saturating_sub(self.held.uploads);
    }
}

/// What a write adds and what it replaces (credited), for the check.
#[derive(Debug, Clone, Copy, Default)]
struct Delta {
    bytes: u64,
    objects: u64,
    credit_bytes: u64,
    credit_objects: u64,
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
    fn slot(&self, tenant: &TenantId) -> Arc<Slot> {
        Arc::clone(self.tenants.lock().entry(tenant.clone()).or_default())
    }

    /// Reserve room for `w` in the tenant's quota, or refuse it. `None`
    /// when the tenant has no quota.
    pub async fn reserve(
        &self,
        store: &dyn StoreClient,
        ctx: &ReqCtx,
        w: Write<'_>,
    ) -> GwResult<Option<Reservation>> {
        let delta = async {
            let (credit_bytes, credit_objects) = replaced(store, w).await?;
            Ok(Delta {
                bytes: w.bytes,
                objects: w.objects,
                credit_bytes,
                credit_objects,
            })
        };
        self.reserve_with(store, ctx, delta).await
    }

    /// Reserve room for part `number` of an upload, `bytes` long, crediting
    /// the part of that number it replaces (UploadPart, UploadPartCopy).
    /// `None` when the tenant has no quota.
    pub async fn reserve_part(
        &self,
        store: &dyn StoreClient,
        ctx: &ReqCtx,
        part: Part<'_>,
        bytes: u64,
    ) -> GwResult<Option<Reservation>> {
        let delta = async {
            let old = store
                .part_size(part.bucket, part.key, part.upload_id, part.number)
                .await?;
            Ok(Delta {
                bytes,
                credit_bytes: old.unwrap_or(0),
                ..Delta::default()
            })
        };
        self.reserve_with(store, ctx, delta).await
    }

    /// Reserve one more open multipart upload for the tenant, or refuse
    /// past its `max_open_uploads` (QuotaExceeded). Hold the reservation
    /// until the upload is created.
    pub async fn reserve_upload(
        &self,
        store: &dyn StoreClient,
        ctx: &ReqCtx,
    ) -> GwResult<Reservation> {
        let max = ctx
            .limits
            .max_open_uploads
            .unwrap_or(DEFAULT_MAX_OPEN_UPLOADS);
        let slot = self.slot(&ctx.tenant);
        let _check = slot.check.lock().await;
        let open = open_uploads(store, &ctx.tenant).await?;
        let mut inflight = slot.inflight.lock();
        if open + inflight.uploads >= max {
            return Err(GwError::QuotaExceeded(format!(
                "This tenant has {open} multipart uploads in progress, the most it may have \
                 (max_open_uploads = {max}); complete or abort some first."
            )));
        }
        inflight.uploads += 1;
        drop(inflight);
        Ok(Reservation {
            slot: Arc::clone(&slot),
            held: Inflight {
                uploads: 1,
                ..Inflight::default()
            },
        })
    }

    /// The check of every byte and object reservation: `delta` is computed
    /// under the tenant's lock, so what it credits cannot change under it.
    async fn reserve_with(
        &self,
        store: &dyn StoreClient,
        ctx: &ReqCtx,
        delta: impl Future<Output = GwResult<Delta>>,
    ) -> GwResult<Option<Reservation>> {
        let (max_bytes, max_objects) = (ctx.limits.quota_bytes, ctx.limits.quota_objects);
        if max_bytes.is_none() && max_objects.is_none() {
            return Ok(None);
        }
        let slot = self.slot(&ctx.tenant);
        let _check = slot.check.lock().await;
        let w = delta.await?;
        let used = tenant_totals(store, &ctx.tenant).await?;
        let mut inflight = slot.inflight.lock();
        let (used_bytes, used_objects) = (used.bytes, used.objects);
        let bytes = (used_bytes + inflight.bytes + w.bytes).saturating_sub(w.credit_bytes);
        let objects =
            (used_objects + inflight.objects + w.objects).saturating_sub(w.credit_objects);
        // Only what the write adds is checked: a completion adds an object
        // but no bytes, a part bytes but no object.
        if let Some(max) = max_bytes
            && w.bytes > 0
            && bytes > max
        {
            return Err(GwError::QuotaExceeded(format!(
                "This upload would exceed the tenant's byte quota (quota_bytes = {max}; \
                 {used_bytes} bytes stored)."
            )));
        }
        if let Some(max) = max_objects
            && w.objects > 0
            && objects > max
        {
            return Err(GwError::QuotaExceeded(format!(
                "This upload would exceed the tenant's object quota (quota_objects = {max}; \
                 {used_objects} objects stored)."
            )));
        }
        let held = Inflight {
            bytes: w.bytes,
            objects: w.objects,
            uploads: 0,
        };
        inflight.bytes += held.bytes;
        inflight.objects += held.objects;
        drop(inflight);
        Ok(Some(Reservation {
            slot: Arc::clone(&slot),
            held,
        }))
    }
}

/// A part of an upload (what a part upload replaces).
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    /// The upload's bucket.
    pub bucket: &'a BucketInfo,
    /// The upload's key.
    pub key: &'a str,
    /// Upload id.
    pub upload_id: &'a str,
    /// Part number.
    pub number: u32,
}

/// Size and count of the object `w` would replace.
async fn replaced(store: &dyn StoreClient, w: Write<'_>) -> GwResult<(u64, u64)> {
    let Some(key) = w.key else { return Ok((0, 0)) };
    match store.head_object(w.bucket, key).await {
        Ok(info) => Ok((info.size, 1)),
        Err(StoreError::NoSuchKey) => Ok((0, 0)),
        Err(e) => Err(e.into()),
    }
}

/// The tenant's committed (bytes, objects), exact; bytes include the
/// parts of its unfinished multipart uploads.
pub async fn tenant_usage(store: &dyn StoreClient, tenant: &TenantId) -> GwResult<(u64, u64)> {
    let t = tenant_totals(store, tenant).await?;
    Ok((t.bytes, t.objects))
}

/// What a tenant stores, summed over its buckets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantTotals {
    /// Bytes of objects and of parts of unfinished uploads.
    pub bytes: u64,
    /// Objects.
    pub objects: u64,
    /// Bytes of parts of unfinished uploads (included in `bytes`).
    pub part_bytes: u64,
    /// Multipart uploads in progress.
    pub uploads: u64,
}

/// The tenant's multipart uploads in progress, exact (committed).
async fn open_uploads(store: &dyn StoreClient, tenant: &TenantId) -> GwResult<u64> {
    let mut n = 0u64;
    for b in store.list_buckets(tenant).await? {
        n += u64::try_from(store.bucket_pending(b.id).await?.uploads).unwrap_or(0);
    }
    Ok(n)
}

/// The tenant's committed totals, exact.
pub async fn tenant_totals(store: &dyn StoreClient, tenant: &TenantId) -> GwResult<TenantTotals> {
    let mut t = TenantTotals::default();
    for b in store.list_buckets(tenant).await? {
        let u = store.bucket_usage(b.id).await?;
        let p = store.bucket_pending(b.id).await?;
        let part_bytes = u64::try_from(p.part_bytes).unwrap_or(0);
        t.bytes += u64::try_from(u.bytes).unwrap_or(0) + part_bytes;
        t.objects += u64::try_from(u.objects).unwrap_or(0);
        t.part_bytes += part_bytes;
        t.uploads += u64::try_from(p.uploads).unwrap_or(0);
    }
    Ok(t)
}
