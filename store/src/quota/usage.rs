//! What a tenant stores, summed over its buckets from the store's exact
//! committed counters: the quota check's input, and the admin API's usage.

use crate::client::StoreClient;
use crate::error::StoreResult;
use crate::ids::TenantId;

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

/// A counter as a count (a negative one, which a committed counter never
/// is, as none).
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The tenant's committed totals, exact.
pub async fn tenant_totals(
    store: &dyn StoreClient,
    tenant: &TenantId,
) -> StoreResult<TenantTotals> {
    let mut t = TenantTotals::default();
    for b in store.list_buckets(tenant).await? {
        let u = store.bucket_usage(b.id).await?;
        let p = store.bucket_pending(b.id).await?;
        let part_bytes = count(p.part_bytes);
        t.bytes += count(u.bytes) + part_bytes;
        t.objects += count(u.objects);
        t.part_bytes += part_bytes;
        t.uploads += count(p.uploads);
    }
    Ok(t)
}

/// The tenant's multipart uploads in progress, exact (committed); reads
/// only the upload counters.
pub async fn open_uploads(store: &dyn StoreClient, tenant: &TenantId) -> StoreResult<u64> {
    let mut n = 0u64;
    for b in store.list_buckets(tenant).await? {
        n += count(store.bucket_pending(b.id).await?.uploads);
    }
    Ok(n)
}
