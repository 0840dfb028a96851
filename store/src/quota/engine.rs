//! [`Quotas`]: the in-flight reservations of every tenant and the check
//! that admits or refuses a write (see the [module doc](super)).

use super::usage::{open_uploads, tenant_totals};
use super::{QuotaAsk, QuotaLimits, TenantTotals};
use crate::client::StoreClient;
use crate::error::{StoreError, StoreResult};
use crate::ids::TenantId;
use crate::store::BucketInfo;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Bytes, objects and upload creations of one tenant's writes in flight.
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

/// One write's share of its tenant's quota, released on drop. A store
/// node can keep it in a table until its remote holder gives it back.
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

impl Quotas {
    fn slot(&self, tenant: &TenantId) -> Arc<Slot> {
        Arc::clone(self.tenants.lock().entry(tenant.clone()).or_default())
    }

    /// Reserve room for `ask` in the tenant's quota, reading its usage
    /// through `store`, or refuse it ([`StoreError::QuotaExceeded`]).
    /// `None` when `limits` cannot refuse it (no byte or object quota);
    /// an [`QuotaAsk::Upload`] is always checked.
    pub async fn reserve(
        &self,
        store: &dyn StoreClient,
        tenant: &TenantId,
        limits: &QuotaLimits,
        ask: &QuotaAsk,
    ) -> StoreResult<Option<Reservation>> {
        if !ask.needs_reservation(limits) {
            return Ok(None);
        }
        let slot = self.slot(tenant);
        let _check = slot.check.lock().await;
        let held = admit(store, tenant, limits, ask, &slot).await?;
        Ok(Some(Reservation {
            slot: Arc::clone(&slot),
            held,
        }))
    }
}

/// Check `ask` and count it in flight (the caller holds the tenant's
/// check lock). What an ask credits is read under the lock, so it cannot
/// change under the check.
async fn admit(
    store: &dyn StoreClient,
    tenant: &TenantId,
    limits: &QuotaLimits,
    ask: &QuotaAsk,
    slot: &Slot,
) -> StoreResult<Inflight> {
    let w = match ask {
        QuotaAsk::Upload => return upload_room(store, tenant, limits, slot).await,
        QuotaAsk::Write {
            bucket,
            key,
            bytes,
            objects,
        } => {
            let (credit_bytes, credit_objects) = replaced(store, bucket, key.as_deref()).await?;
            Delta {
                bytes: *bytes,
                objects: *objects,
                credit_bytes,
                credit_objects,
            }
        }
        QuotaAsk::Part {
            bucket,
            key,
            upload_id,
            number,
            bytes,
        } => Delta {
            bytes: *bytes,
            credit_bytes: store
                .part_size(bucket, key, upload_id, *number)
                .await?
                .unwrap_or(0),
            ..Delta::default()
        },
    };
    room(store, tenant, limits, slot, w).await
}

/// Check one more open upload against `max_open_uploads` and count it
/// in flight.
async fn upload_room(
    store: &dyn StoreClient,
    tenant: &TenantId,
    limits: &QuotaLimits,
    slot: &Slot,
) -> StoreResult<Inflight> {
    let max = limits.max_open_uploads;
    let open = open_uploads(store, tenant).await?;
    let mut inflight = slot.inflight.lock();
    if open + inflight.uploads >= max {
        return Err(StoreError::QuotaExceeded(format!(
            "This tenant has {open} multipart uploads in progress, the most it may have \
             (max_open_uploads = {max}); complete or abort some first."
        )));
    }
    inflight.uploads += 1;
    Ok(Inflight {
        uploads: 1,
        ..Inflight::default()
    })
}

/// Check the bytes and objects of `w` against the quotas and count them
/// in flight.
async fn room(
    store: &dyn StoreClient,
    tenant: &TenantId,
    limits: &QuotaLimits,
    slot: &Slot,
    w: Delta,
) -> StoreResult<Inflight> {
    let used = tenant_totals(store, tenant).await?;
    let mut inflight = slot.inflight.lock();
    if let Some(why) = refusal(limits, &used, &inflight, &w) {
        return Err(StoreError::QuotaExceeded(why));
    }
    inflight.bytes += w.bytes;
    inflight.objects += w.objects;
    Ok(Inflight {
        bytes: w.bytes,
        objects: w.objects,
        uploads: 0,
    })
}

/// Why `w` does not fit next to what is stored and in flight, if it
/// does not. Only what the write adds is checked: a completion adds an
/// object but no bytes, a part bytes but no object.
fn refusal(
    limits: &QuotaLimits,
    used: &TenantTotals,
    inflight: &Inflight,
    w: &Delta,
) -> Option<String> {
    let (used_bytes, used_objects) = (used.bytes, used.objects);
    let bytes = (used_bytes + inflight.bytes + w.bytes).saturating_sub(w.credit_bytes);
    let objects = (used_objects + inflight.objects + w.objects).saturating_sub(w.credit_objects);
    if let Some(max) = passed(limits.quota_bytes, w.bytes, bytes) {
        return Some(format!(
            "This upload would exceed the tenant's byte quota (quota_bytes = {max}; \
             {used_bytes} bytes stored)."
        ));
    }
    if let Some(max) = passed(limits.quota_objects, w.objects, objects) {
        return Some(format!(
            "This upload would exceed the tenant's object quota (quota_objects = {max}; \
             {used_objects} objects stored)."
        ));
    }
    None
}

/// The limit a total of `total` passes, if the write adds to it at all.
fn passed(limit: Option<u64>, adds: u64, total: u64) -> Option<u64> {
    limit.filter(|max| adds > 0 && total > *max)
}

/// Size and count of the object a write to `key` would replace.
async fn replaced(
    store: &dyn StoreClient,
    bucket: &BucketInfo,
    key: Option<&str>,
) -> StoreResult<(u64, u64)> {
    let Some(key) = key else { return Ok((0, 0)) };
    match store.head_object(bucket, key).await {
        Ok(info) => Ok((info.size, 1)),
        Err(StoreError::NoSuchKey) => Ok((0, 0)),
        Err(e) => Err(e),
    }
}
