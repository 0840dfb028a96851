//! The gateway's side of tenant quotas: it asks, the store decides.
//!
//! A write handler turns what it is about to store into a
//! [`QuotaAsk`] and calls [`reserve`] before the first byte streams; the
//! store that keeps the tenant's usage checks it against the tenant's
//! limits ([`limits`], from the key cache) and answers with a
//! [`QuotaHold`] the handler runs its write under ([`covered`]) until the
//! write commits or fails, or refuses with `403 QuotaExceeded` (the
//! guarantees are in `laneway_store::quota`). The gateway keeps no tally
//! of its own, so several gateways over one store share one. In a
//! cluster the hold goes with the write's call to the store node, which
//! gives it back when the write is done: a call that timed out or was cut
//! off leaves the gateway without that knowledge.

use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::GwResult;
use laneway_store::quota::DEFAULT_MAX_OPEN_UPLOADS;
use laneway_store::{QuotaAsk, QuotaHold, QuotaLimits};
use laneway_tenancy::Limits;

/// A tenant's limits as the store's quota check takes them.
pub fn limits(l: &Limits) -> QuotaLimits {
    QuotaLimits {
        quota_bytes: l.quota_bytes,
        quota_objects: l.quota_objects,
        max_open_uploads: l.max_open_uploads.unwrap_or(DEFAULT_MAX_OPEN_UPLOADS),
    }
}

/// Reserve room for `ask` in the request's tenant's quota (`None`: the
/// tenant has no byte or object quota). Run the write under the answer
/// ([`covered`]).
pub async fn reserve(gw: &Gateway, ctx: &ReqCtx, ask: QuotaAsk) -> GwResult<Option<QuotaHold>> {
    let hold = gw
        .store()
        .reserve_quota(&ctx.tenant, limits(&ctx.limits), ask)
        .await?;
    Ok(hold)
}

/// Run `write` (the store calls that make one write) under `hold`, which
/// is given back when the write is done ([`QuotaHold::cover`]).
pub async fn covered<F: Future>(hold: Option<QuotaHold>, write: F) -> F::Output {
    match hold {
        Some(hold) => hold.cover(write).await,
        None => write.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_limits_are_no_quota_and_the_default_upload_cap() {
        assert_eq!(limits(&Limits::default()), QuotaLimits::default());
        let set = Limits {
            quota_bytes: Some(100),
            quota_objects: Some(3),
            max_open_uploads: Some(2),
            ..Limits::default()
        };
        let want = QuotaLimits {
            quota_bytes: Some(100),
            quota_objects: Some(3),
            max_open_uploads: 2,
        };
        assert_eq!(limits(&set), want);
    }
}
