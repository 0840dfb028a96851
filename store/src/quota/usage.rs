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
    let buckets = store.list_buckets(tenant).await?;
    let (u, p) = store
        .buckets_totals(buckets.iter().map(|b| b.id).collect())
        .await?;
    let part_bytes = count(p.part_bytes);
    Ok(TenantTotals {
        bytes: count(u.bytes) + part_bytes,
        objects: count(u.objects),
        part_bytes,
        uploads: count(p.uploads),
    })
}
