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

/// Bytes, objects and upload creations of writes in flight (one write's
/// hold, or all of one tenant's).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Inflight {
    /// Bytes the writes add.
    pub bytes: u64,
    /// Objects they add.
    pub objects: u64,
    /// Multipart uploads they open.
    pub uploads: u64,
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

impl Reservation {
    /// What this reservation counts in flight.
    pub fn amount(&self) -> Inflight {
        self.held
    }
}

impl Quotas {
    /// Count `amount` in flight for `tenant` without a check, until the
    /// returned reservation is dropped: a hold another desk admitted,
    /// taken over by this one (`crate::node::desk`).
    pub fn adopt(&self, tenant: &TenantId, amount: Inflight) -> Reservation {
        let slot = self.slot(tenant);
        {
            let mut f = slot.inflight.lock();
            f.bytes += amount.bytes;
            f.objects += amount.objects;
            f.uploads += amount.uploads;
        }
        Reservation { slot, held: amount }
    }

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
    let refuses = |open: &u64, inflight: &Inflight| {
        (open + inflight.uploads >= max).then(|| {
            format!(
                "This tenant has {open} multipart uploads in progress, the most it may have \
                 (max_open_uploads = {max}); complete or abort some first."
            )
        })
    };
    let one = Inflight {
        uploads: 1,
        ..Inflight::default()
    };
    settled(slot, || open_uploads(store, tenant), refuses, one).await
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
    let refuses = |used: &TenantTotals, inflight: &Inflight| refusal(limits, used, inflight, &w);
    let adds = Inflight {
        bytes: w.bytes,
        objects: w.objects,
        uploads: 0,
    };
    settled(slot, || tenant_totals(store, tenant), refuses, adds).await
}

/// Reads of a tenant's usage one check makes at most while holds are
/// given back during them ([`settled`]).
const SETTLE_READS: usize = 3;

/// Read the tenant's committed usage with `read`, check it with
/// `refuses` next to what is in flight, and count `adds` in flight if it
/// fits (the caller holds the tenant's check lock, so no hold is added
/// meanwhile; holds are only given back).
///
/// Every write is counted at least once. A hold is given back only after
/// its write committed or failed, so a write whose hold is given back
/// while usage is read may or may not be in what the read returns; it is
/// counted in flight as it was before the read (`before`), so it is never
/// missed (missed, two writes racing for the last bytes could both be
/// admitted: the quota passed by a whole object). Counted twice instead,
/// a check could refuse what fits; so a refusal that holds only because
/// of such a write is not final: usage is read again (its write then
/// committed before the read began), up to [`SETTLE_READS`] reads.
async fn settled<T, R>(
    slot: &Slot,
    read: impl Fn() -> R,
    refuses: impl Fn(&T, &Inflight) -> Option<String>,
    adds: Inflight,
) -> StoreResult<Inflight>
where
    R: std::future::Future<Output = StoreResult<T>>,
{
    let mut reads = 0;
    loop {
        reads += 1;
        let before = *slot.inflight.lock();
        let used = read().await?;
        let mut inflight = slot.inflight.lock();
        let Some(why) = refuses(&used, &before) else {
            inflight.bytes += adds.bytes;
            inflight.objects += adds.objects;
            inflight.uploads += adds.uploads;
            return Ok(adds);
        };
        let given_back = before != *inflight;
        if !given_back || reads >= SETTLE_READS || refuses(&used, &inflight).is_some() {
            return Err(StoreError::QuotaExceeded(why));
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const MIB: u64 = 1 << 20;

    /// A 1 MiB write asked under a byte quota of `quota`, while another
    /// 1 MiB write is in flight and is given back during the first read
    /// of usage, which answers `reads[0]` bytes stored, then `reads[1]`;
    /// the check's result and how many reads it made.
    async fn ask_while_one_is_given_back(
        reads: [u64; 2],
        quota: u64,
    ) -> (StoreResult<Inflight>, usize) {
        let slot = Arc::new(Slot::default());
        let one = Inflight {
            bytes: MIB,
            objects: 1,
            uploads: 0,
        };
        *slot.inflight.lock() = one;
        let other = Mutex::new(Some(Reservation {
            slot: Arc::clone(&slot),
            held: one,
        }));
        let made = AtomicUsize::new(0);
        let read = || {
            let i = made.fetch_add(1, Ordering::Relaxed);
            drop(other.lock().take());
            let used = TenantTotals {
                bytes: reads[i.min(1)],
                ..TenantTotals::default()
            };
            async move { Ok(used) }
        };
        let limits = QuotaLimits {
            quota_bytes: Some(quota),
            ..QuotaLimits::default()
        };
        let w = Delta {
            bytes: MIB,
            objects: 1,
            ..Delta::default()
        };
        let refuses =
            |used: &TenantTotals, inflight: &Inflight| refusal(&limits, used, inflight, &w);
        let r = settled(&slot, read, refuses, one).await;
        (r, made.load(Ordering::Relaxed))
    }

    #[tokio::test]
    async fn a_write_given_back_while_usage_is_read_is_not_missed() {
        // Read as 7 MiB stored; the write in flight committed meanwhile,
        // so 8 MiB are stored and a ninth does not fit under 8 MiB.
        // Counted nowhere (not in the read, no longer in flight), it
        // would have been admitted.
        let (r, reads) = ask_while_one_is_given_back([7 * MIB, 8 * MIB], 8 * MIB).await;
        assert!(matches!(r, Err(StoreError::QuotaExceeded(_))), "{r:?}");
        assert_eq!(reads, 2, "read again before the refusal is final");
    }

    #[tokio::test]
    async fn a_write_given_back_while_usage_is_read_is_not_counted_twice() {
        // It had committed before the read (8 MiB stored) and is given
        // back meanwhile: a 1 MiB write fits under 9 MiB.
        let (r, _) = ask_while_one_is_given_back([8 * MIB, 8 * MIB], 9 * MIB).await;
        assert_eq!(r.expect("admitted").bytes, MIB);
    }
}
