//! [`StoreClient`]: the one interface through which the gateway reaches the
//! store. [`LocalStore`] implements it over the partitions of this process
//! (`laneway serve`); a client of remote store nodes implements the same
//! trait over the cluster RPC, so the gateway's handlers do not know which
//! one they talk to.
//!
//! Every operation is async and returns a boxed future (the trait is used
//! as `dyn StoreClient`), including the reads that are synchronous index
//! lookups in process: across a network each is a round trip.
//!
//! Quota reservations are one of those operations
//! ([`StoreClient::reserve_quota`]): the store that keeps the usage
//! decides, so several gateways share one tally ([`crate::quota`]).
//! [`LocalStore`] owns the [`Quotas`] of this process and lets them read
//! usage through itself; a write made under one of its holds runs in a
//! task that keeps the hold until the write is done, so a caller that is
//! dropped meanwhile gives nothing back early ([`QuotaHold::cover`]).

use crate::commit::WriteCond;
use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, TenantId};
use crate::list::{ListPage, ListQuery};
use crate::multipart::{ListedPart, PartInfo, Pending, UploadChecksum};
use crate::quota::{Handover, QuotaAsk, QuotaHold, QuotaLimits, Quotas};
use crate::record::{Checksum, ObjectInfo, ObjectMeta, Tag, Usage};
use crate::store::{BodyStream, BucketInfo, GetRange, PutOptions, Store};
use crate::tagindex::{EditCounts, TagEdit};
use crate::uploads::{ObjectPart, UploadPage, UploadQuery};
use futures::future::BoxFuture;
use std::sync::Arc;
use tracing::Instrument;

/// The future of a store operation.
pub type Fut<'a, T> = BoxFuture<'a, StoreResult<T>>;

/// What the gateway asks of the store.
pub trait StoreClient: Send + Sync {
    // ----- buckets ---------------------------------------------------------

    /// Create bucket `name` of `tenant` in `region`.
    fn create_bucket<'a>(
        &'a self,
        tenant: &'a TenantId,
        name: &'a str,
        region: &'a str,
    ) -> Fut<'a, BucketInfo>;
    /// The tenant's bucket `name` (NoSuchBucket when it has none).
    fn bucket<'a>(&'a self, tenant: &'a TenantId, name: &'a str) -> Fut<'a, BucketInfo>;
    /// The tenant's buckets in name order.
    fn list_buckets<'a>(&'a self, tenant: &'a TenantId) -> Fut<'a, Vec<BucketInfo>>;
    /// Delete an empty bucket (BucketNotEmpty otherwise).
    fn delete_bucket<'a>(&'a self, tenant: &'a TenantId, name: &'a str) -> Fut<'a, ()>;
    /// Replace (or, empty, remove) a bucket's tag set.
    fn set_bucket_tags<'a>(
        &'a self,
        tenant: &'a TenantId,
        name: &'a str,
        tags: Vec<Tag>,
    ) -> Fut<'a, ()>;
    /// Objects and bytes stored in a bucket.
    fn bucket_usage(&self, bucket: BucketId) -> Fut<'_, Usage>;
    /// Open multipart uploads of a bucket and their part bytes.
    fn bucket_pending(&self, bucket: BucketId) -> Fut<'_, Pending>;
    /// [`StoreClient::bucket_usage`] and [`StoreClient::bucket_pending`]
    /// summed over `buckets` (a tenant's: its quota check). A remote
    /// client asks each node once for all of them.
    fn buckets_totals(&self, buckets: Vec<BucketId>) -> Fut<'_, (Usage, Pending)> {
        Box::pin(totals_bucket_by_bucket(self, buckets))
    }

    // ----- objects ---------------------------------------------------------

    /// Store `body` as `key` durably if `cond` holds when it commits.
    fn put_object<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        meta: ObjectMeta,
        opts: PutOptions,
        body: BodyStream,
        cond: WriteCond,
    ) -> Fut<'a, ObjectInfo>;
    /// Metadata of `key` (NoSuchKey when absent).
    fn head_object<'a>(&'a self, bucket: &'a BucketInfo, key: &'a str) -> Fut<'a, ObjectInfo>;
    /// Metadata and a body stream of `key`, whole or `range`.
    fn get_object<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        range: Option<GetRange>,
    ) -> Fut<'a, (ObjectInfo, BodyStream)>;
    /// Delete `key`; whether it existed.
    fn delete_object<'a>(&'a self, bucket: &'a BucketInfo, key: &'a str) -> Fut<'a, bool>;
    /// Replace the tag set of `key`.
    fn put_object_tags<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        tags: Vec<Tag>,
    ) -> Fut<'a, ()>;
    /// Apply a bulk tag edit to `keys` (each where its filter matches).
    /// `once`: an id the caller gives the edit when it may make it again
    /// (the same id and keys apply once at a replicated partition:
    /// [`crate::repeat`]); `None` for a fresh id.
    fn edit_tags<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        keys: Vec<String>,
        edit: TagEdit,
        once: Option<crate::repeat::CallId>,
    ) -> Fut<'a, EditCounts>;
    /// Replace the client metadata (and optionally tags) of `key` in place.
    fn replace_object_meta<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        meta: ObjectMeta,
        tags: Option<Vec<Tag>>,
    ) -> Fut<'a, ObjectInfo>;
    /// One page of a listing.
    fn list_objects<'a>(&'a self, bucket: &'a BucketInfo, query: ListQuery) -> Fut<'a, ListPage>;
    /// The byte range of part `number` of a multipart object, and its part
    /// count.
    fn object_part_range<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        number: u32,
    ) -> Fut<'a, (GetRange, u32)>;
    /// An object with its parts (GetObjectAttributes).
    fn object_with_parts<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
    ) -> Fut<'a, (ObjectInfo, Vec<ObjectPart>)>;

    // ----- multipart uploads -----------------------------------------------

    /// Start an upload; its id.
    fn create_multipart_upload<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        meta: ObjectMeta,
        tags: Vec<Tag>,
        checksum: Option<UploadChecksum>,
    ) -> Fut<'a, String>;
    /// Store part `number` of an upload.
    fn upload_part<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        number: u32,
        opts: PutOptions,
        body: BodyStream,
    ) -> Fut<'a, PartInfo>;
    /// Complete an upload from the client's part list; `whole` is the
    /// whole-object checksum the client sent, compared with the one the
    /// store derives from the parts'.
    fn complete_multipart_upload<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        parts: Vec<ListedPart>,
        cond: WriteCond,
        whole: Option<Checksum>,
    ) -> Fut<'a, ObjectInfo>;
    /// The answer of an earlier completion with this part list (a retry).
    fn repeated_completion<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        parts: &'a [ListedPart],
    ) -> Fut<'a, ObjectInfo>;
    /// Size of a stored part, if uploaded.
    fn part_size<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        number: u32,
    ) -> Fut<'a, Option<u64>>;
    /// Abort an upload and free its parts.
    fn abort_multipart_upload<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
    ) -> Fut<'a, ()>;
    /// The checksum an upload was created with.
    fn upload_checksum<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
    ) -> Fut<'a, Option<UploadChecksum>>;
    /// A page of an upload's parts after `marker`; whether more follow.
    fn list_parts<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        marker: u32,
        max: usize,
    ) -> Fut<'a, (Vec<PartInfo>, bool)>;
    /// A page of a bucket's open uploads.
    fn list_multipart_uploads<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        q: &'a UploadQuery,
    ) -> Fut<'a, UploadPage>;

    // ----- catalog documents -----------------------------------------------

    /// Catalog document `name` and its version.
    fn catalog_doc<'a>(&'a self, name: &'a str) -> Fut<'a, Option<(u64, Vec<u8>)>>;
    /// Replace catalog document `name` if still at version `expected`.
    fn put_catalog_doc<'a>(&'a self, name: &'a str, expected: u64, body: Vec<u8>) -> Fut<'a, u64>;

    // ----- quotas ----------------------------------------------------------

    /// Reserve room for `ask` in the tenant's quota under `limits`, or
    /// refuse it (QuotaExceeded). Hold the answer until the write commits
    /// or fails; `None` when the tenant has no byte or object quota (an
    /// [`QuotaAsk::Upload`] is always checked, so always `Some`).
    fn reserve_quota<'a>(
        &'a self,
        tenant: &'a TenantId,
        limits: QuotaLimits,
        ask: QuotaAsk,
    ) -> Fut<'a, Option<QuotaHold>>;

    // ----- replication -----------------------------------------------------

    /// What the store nodes last said of their replication groups (a
    /// cluster client's leader watch keeps it; `None` for a store that
    /// does not replicate). For `/metrics`; never asks the network.
    fn replication(&self) -> Option<crate::remote::ReplicationView> {
        None
    }
}

/// The store of this process as a [`StoreClient`], with the quota
/// reservations of every tenant (cheap to clone: both are shared).
#[derive(Clone)]
pub struct LocalStore {
    store: Arc<Store>,
    quotas: Arc<Quotas>,
}

/// [`StoreClient::buckets_totals`] asked bucket by bucket, with
/// [`StoreClient::bucket_usage`] and [`StoreClient::bucket_pending`].
pub async fn totals_bucket_by_bucket<C: StoreClient + ?Sized>(
    client: &C,
    buckets: Vec<BucketId>,
) -> StoreResult<(Usage, Pending)> {
    let mut usage = Usage::default();
    let mut pending = Pending::default();
    for b in buckets {
        let u = client.bucket_usage(b).await?;
        let p = client.bucket_pending(b).await?;
        usage.objects += u.objects;
        usage.bytes += u.bytes;
        pending.uploads += p.uploads;
        pending.part_bytes += p.part_bytes;
    }
    Ok((usage, pending))
}

impl LocalStore {
    /// A client of `store`, with no reservation in flight.
    pub fn new(store: Arc<Store>) -> LocalStore {
        LocalStore {
            store,
            quotas: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

/// Run `write`, a write of this process's store; one made under an
/// in-process quota hold ([`QuotaHold::cover`]) in a task of its own that
/// keeps the hold until the write is done. So a caller dropped while its
/// write commits (its S3 client hung up) gives the hold back only once
/// the write has committed or failed, never while it may still commit.
async fn keeping_hold<T: Send + 'static>(
    write: impl Future<Output = StoreResult<T>> + Send + 'static,
) -> StoreResult<T> {
    let Some(hold) = Handover::take_in_process() else {
        return write.await;
    };
    let task = tokio::spawn(
        async move {
            let done = write.await;
            drop(hold);
            done
        }
        .in_current_span(),
    );
    task.await
        .map_err(|e| StoreError::Engine(format!("a write task ended: {e}")))?
}

/// Box a result that is ready now.
fn ready<'a, T: Send + 'a>(r: StoreResult<T>) -> Fut<'a, T> {
    Box::pin(std::future::ready(r))
}

impl StoreClient for LocalStore {
    fn create_bucket<'a>(
        &'a self,
        tenant: &'a TenantId,
        name: &'a str,
        region: &'a str,
    ) -> Fut<'a, BucketInfo> {
        ready(self.store.create_bucket(tenant, name, region))
    }

    fn bucket<'a>(&'a self, tenant: &'a TenantId, name: &'a str) -> Fut<'a, BucketInfo> {
        ready(self.store.bucket(tenant, name))
    }

    fn list_buckets<'a>(&'a self, tenant: &'a TenantId) -> Fut<'a, Vec<BucketInfo>> {
        ready(self.store.list_buckets(tenant))
    }

    fn delete_bucket<'a>(&'a self, tenant: &'a TenantId, name: &'a str) -> Fut<'a, ()> {
        Box::pin(self.store.delete_bucket(tenant, name))
    }

    fn set_bucket_tags<'a>(
        &'a self,
        tenant: &'a TenantId,
        name: &'a str,
        tags: Vec<Tag>,
    ) -> Fut<'a, ()> {
        ready(self.store.set_bucket_tags(tenant, name, tags, None))
    }

    fn bucket_usage(&self, bucket: BucketId) -> Fut<'_, Usage> {
        ready(self.store.bucket_usage(bucket))
    }

    fn bucket_pending(&self, bucket: BucketId) -> Fut<'_, Pending> {
        ready(self.store.bucket_pending(bucket))
    }

    fn put_object<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        meta: ObjectMeta,
        opts: PutOptions,
        body: BodyStream,
        cond: WriteCond,
    ) -> Fut<'a, ObjectInfo> {
        let (store, bucket, key) = (Arc::clone(&self.store), bucket.clone(), key.to_string());
        Box::pin(keeping_hold(async move {
            store
                .put_object_if(&bucket, &key, meta, opts, body, cond)
                .await
        }))
    }

    fn head_object<'a>(&'a self, bucket: &'a BucketInfo, key: &'a str) -> Fut<'a, ObjectInfo> {
        ready(self.store.head_object(bucket, key))
    }

    fn get_object<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        range: Option<GetRange>,
    ) -> Fut<'a, (ObjectInfo, BodyStream)> {
        ready(self.store.get_object(bucket, key, range))
    }

    fn delete_object<'a>(&'a self, bucket: &'a BucketInfo, key: &'a str) -> Fut<'a, bool> {
        Box::pin(self.store.delete_object(bucket, key))
    }

    fn put_object_tags<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        tags: Vec<Tag>,
    ) -> Fut<'a, ()> {
        Box::pin(self.store.put_object_tags(bucket, key, tags))
    }

    fn edit_tags<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        keys: Vec<String>,
        edit: TagEdit,
        // One replica: a failed edit committed nothing, so no repeat
        // needs an id.
        _once: Option<crate::repeat::CallId>,
    ) -> Fut<'a, EditCounts> {
        Box::pin(self.store.edit_tags(bucket, keys, edit))
    }

    fn replace_object_meta<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        meta: ObjectMeta,
        tags: Option<Vec<Tag>>,
    ) -> Fut<'a, ObjectInfo> {
        Box::pin(self.store.replace_object_meta(bucket, key, meta, tags))
    }

    fn list_objects<'a>(&'a self, bucket: &'a BucketInfo, query: ListQuery) -> Fut<'a, ListPage> {
        Box::pin(self.store.list_objects(bucket, query))
    }

    fn object_part_range<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        number: u32,
    ) -> Fut<'a, (GetRange, u32)> {
        ready(self.store.object_part_range(bucket, key, number))
    }

    fn object_with_parts<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
    ) -> Fut<'a, (ObjectInfo, Vec<ObjectPart>)> {
        ready(self.store.object_with_parts(bucket, key))
    }

    fn create_multipart_upload<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        meta: ObjectMeta,
        tags: Vec<Tag>,
        checksum: Option<UploadChecksum>,
    ) -> Fut<'a, String> {
        let (store, bucket, key) = (Arc::clone(&self.store), bucket.clone(), key.to_string());
        Box::pin(keeping_hold(async move {
            store
                .create_multipart_upload_with(&bucket, &key, meta, tags, checksum)
                .await
        }))
    }

    fn upload_part<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        number: u32,
        opts: PutOptions,
        body: BodyStream,
    ) -> Fut<'a, PartInfo> {
        let (store, bucket, key) = (Arc::clone(&self.store), bucket.clone(), key.to_string());
        let upload_id = upload_id.to_string();
        Box::pin(keeping_hold(async move {
            store
                .upload_part(&bucket, &key, &upload_id, number, opts, body)
                .await
        }))
    }

    fn complete_multipart_upload<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        parts: Vec<ListedPart>,
        cond: WriteCond,
        whole: Option<Checksum>,
    ) -> Fut<'a, ObjectInfo> {
        let (store, bucket, key) = (Arc::clone(&self.store), bucket.clone(), key.to_string());
        let upload_id = upload_id.to_string();
        Box::pin(keeping_hold(async move {
            store
                .complete_multipart_upload_with(&bucket, &key, &upload_id, parts, cond, whole)
                .await
        }))
    }

    fn repeated_completion<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        parts: &'a [ListedPart],
    ) -> Fut<'a, ObjectInfo> {
        ready(
            self.store
                .repeated_completion(bucket, key, upload_id, parts),
        )
    }

    fn part_size<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        number: u32,
    ) -> Fut<'a, Option<u64>> {
        ready(self.store.part_size(bucket, key, upload_id, number))
    }

    fn abort_multipart_upload<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
    ) -> Fut<'a, ()> {
        Box::pin(self.store.abort_multipart_upload(bucket, key, upload_id))
    }

    fn upload_checksum<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
    ) -> Fut<'a, Option<UploadChecksum>> {
        ready(self.store.upload_checksum(bucket, key, upload_id))
    }

    fn list_parts<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        marker: u32,
        max: usize,
    ) -> Fut<'a, (Vec<PartInfo>, bool)> {
        ready(self.store.list_parts(bucket, key, upload_id, marker, max))
    }

    fn list_multipart_uploads<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        q: &'a UploadQuery,
    ) -> Fut<'a, UploadPage> {
        ready(self.store.list_multipart_uploads(bucket, q))
    }

    fn catalog_doc<'a>(&'a self, name: &'a str) -> Fut<'a, Option<(u64, Vec<u8>)>> {
        ready(self.store.catalog_doc(name))
    }

    fn put_catalog_doc<'a>(&'a self, name: &'a str, expected: u64, body: Vec<u8>) -> Fut<'a, u64> {
        ready(self.store.put_catalog_doc(name, expected, &body))
    }

    fn reserve_quota<'a>(
        &'a self,
        tenant: &'a TenantId,
        limits: QuotaLimits,
        ask: QuotaAsk,
    ) -> Fut<'a, Option<QuotaHold>> {
        Box::pin(async move {
            let held = self.quotas.reserve(self, tenant, &limits, &ask).await?;
            Ok(held.map(QuotaHold::from))
        })
    }
}
