//! Tenant quotas (bytes, objects, open multipart uploads), decided where
//! the usage lives: in the store, behind [`StoreClient::reserve_quota`].
//!
//! Guarantee: every reservation of a tenant goes through one [`Quotas`]
//! (the one a [`LocalStore`](crate::LocalStore) owns, or the one of a
//! cluster's catalog node), so a tenant's stored bytes and objects never
//! exceed its quota, however many gateways send it writes. Before a write
//! streams a single byte, [`Quotas::reserve`] queues its ask for the
//! tenant's next check round, which runs under the tenant's check lock
//! (its own: other tenants never wait on it) and checks every ask then
//! waiting, in turn, against one read of the tenant's exact committed
//! usage through a [`StoreClient`] (per-bucket counters committed in the
//! same batch as the objects, summed over the tenant's buckets),
//! adds the bytes and objects of every write of this tenant still in
//! flight (as they were when the read began: a write whose reservation
//! is given back during the read committed before, and the read may not
//! have seen it; a refusal that holds only because of such a write reads
//! again, so it is not counted twice either), and refuses with [`StoreError::QuotaExceeded`] (the gateway
//! answers 403 `QuotaExceeded`) if this write would pass a limit.
//! Otherwise the write is reserved until its [`Reservation`] (or the
//! [`QuotaHold`] that carries it) is dropped, after the commit (or
//! failure): so concurrent uploads racing for the last bytes cannot both
//! win, and a refused upload leaves nothing behind because it never
//! started. "After" is decided by what runs the write (the store node,
//! or the in-process store's write task), not by its caller, which may
//! have stopped waiting ([`QuotaHold::cover`]).
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
//! UploadPartCopy reserves its bytes like a PUT ([`QuotaAsk::Part`]),
//! credited with the part of the same number it replaces; a completion
//! adds an object but no bytes (a [`QuotaAsk::Write`] of 0 bytes: its
//! parts' bytes become the object's), and an abort or the expiry sweep
//! gives the bytes back.
//!
//! Open multipart uploads are capped per tenant ([`QuotaAsk::Upload`], the
//! tenant's [`QuotaLimits::max_open_uploads`], by default
//! [`DEFAULT_MAX_OPEN_UPLOADS`]), so parts cannot pile up under thousands
//! of forgotten uploads: counted exactly the same way, under the same
//! lock, for every tenant.
//!
//! Tenants without quotas skip the byte and object checks (no store
//! reads, no lock: [`QuotaAsk::needs_reservation`]); only
//! CreateMultipartUpload counts their open uploads.
//!
//! The inputs ([`QuotaLimits`], [`QuotaAsk`]) are plain data, so a remote
//! client can send them to the node that decides; [`usage`] sums what a
//! tenant stores (the admin API shows the same totals).

mod engine;
mod hold;
pub mod rows;
pub mod usage;

pub use engine::{Inflight, Quotas, Reservation};
pub use hold::QuotaHold;
pub(crate) use hold::{Handover, Watch};
pub use usage::{TenantTotals, tenant_totals};

#[cfg(doc)]
use crate::{client::StoreClient, error::StoreError};

use crate::store::BucketInfo;
use serde::{Deserialize, Serialize};

/// Open multipart uploads a tenant may have when its limits name none.
pub const DEFAULT_MAX_OPEN_UPLOADS: u64 = 10_000;

/// A tenant's limits, as the quota check needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaLimits {
    /// Bytes it may store (objects and parts of unfinished uploads).
    pub quota_bytes: Option<u64>,
    /// Objects it may store.
    pub quota_objects: Option<u64>,
    /// Multipart uploads it may have in progress.
    pub max_open_uploads: u64,
}

impl Default for QuotaLimits {
    /// No byte or object quota, [`DEFAULT_MAX_OPEN_UPLOADS`].
    fn default() -> Self {
        QuotaLimits {
            quota_bytes: None,
            quota_objects: None,
            max_open_uploads: DEFAULT_MAX_OPEN_UPLOADS,
        }
    }
}

/// What a write asks of its tenant's quota.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum QuotaAsk {
    /// An object write (PUT, copy, completion).
    Write {
        /// Target bucket.
        bucket: BucketInfo,
        /// Key it replaces, if it may replace one (credited).
        key: Option<String>,
        /// Bytes it adds (0 for a completion: its parts are counted).
        bytes: u64,
        /// Objects it adds.
        objects: u64,
    },
    /// Part `number` of an upload, `bytes` long (UploadPart,
    /// UploadPartCopy); credited with the part of that number it replaces.
    Part {
        /// The upload's bucket.
        bucket: BucketInfo,
        /// The upload's key.
        key: String,
        /// Upload id.
        upload_id: String,
        /// Part number.
        number: u32,
        /// Bytes it adds.
        bytes: u64,
    },
    /// One more open multipart upload (CreateMultipartUpload).
    Upload,
}

impl QuotaAsk {
    /// Whether `limits` can refuse this ask at all. When not, the answer
    /// is `None` without a lock or a store read, so a remote client can
    /// skip the round trip.
    pub fn needs_reservation(&self, limits: &QuotaLimits) -> bool {
        matches!(self, QuotaAsk::Upload)
            || limits.quota_bytes.is_some()
            || limits.quota_objects.is_some()
    }
}
