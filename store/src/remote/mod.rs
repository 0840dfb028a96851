//! [`RemoteStore`]: the [`StoreClient`] of a cluster, the same interface as
//! [`crate::LocalStore`] over the store nodes' RPC.
//!
//! Each call is routed by the partition map ([`crate::cluster::MapSource`])
//! and the leader cache ([`leaders`]): an object's calls to the replica
//! believed to lead its partition's group, bucket and registry calls to
//! the catalog's, and calls over many partitions (per-bucket totals,
//! listings, bulk tag edits, the DeleteBucket seal) to each partition's
//! leader, naming the partitions each node answers for, so every partition
//! is counted once however many replicas a node hosts. A replica that does
//! not lead, a node that holds a newer map (`WrongNode`) or one that is
//! down sends the call on to the leader within the call's deadline; what
//! is sent again, and what answers 503: [`route`]. With one replica per
//! partition a node that is down, refuses, or does not answer within the
//! deadline is [`StoreError::Unavailable`] (503) for the calls routed to
//! it and only for them; a LIST, which needs every partition, fails as a
//! whole rather than return a shorter listing.
//!
//! Caches, never truth: a bucket found is remembered for
//! [`BUCKET_TTL`] (a bucket deleted through another gateway refuses
//! writes at once anyway: DeleteBucket seals it in every partition
//! first, [`RemoteStore::delete_bucket`]); a bucket not found is never cached, so
//! one created through another gateway is usable at once.

mod leaders;
mod list;
mod map_doc;
mod route;
mod settle;
mod watch;
mod window;

pub use map_doc::MapShare;
pub use watch::ReplicationView;

use crate::client::{Fut, StoreClient};
use crate::cluster::{ClusterFile, FileMapSource, MapSource, NodeId, PartitionMap};
use crate::commit::WriteCond;
use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, PartitionId, TenantId};
use crate::list::{ListPage, ListQuery};
use crate::multipart::{ListedPart, PartInfo, Pending, UploadChecksum};
use crate::node::proto::Call;
use crate::quota::{QuotaAsk, QuotaHold, QuotaLimits};
use crate::record::{Checksum, ObjectInfo, ObjectMeta, Tag, Usage};
use crate::rpc::{CallOptions, RpcClient, Signer};
use crate::store::{BodyStream, BucketInfo, GetRange, PutOptions};
use crate::tagindex::{EditCounts, TagEdit};
use crate::uploads::{ObjectPart, UploadPage, UploadQuery};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How long a bucket looked up stays cached.
pub const BUCKET_TTL: Duration = Duration::from_secs(2);

/// Buckets cached at most.
const BUCKET_CACHE: u64 = 100_000;

/// A client of every store node of a cluster.
#[derive(Clone)]
pub struct RemoteStore {
    inner: Arc<Inner>,
}

struct Inner {
    map: Arc<dyn MapSource>,
    /// A client per node, made on first use from the map source's
    /// addresses (a node added to a running cluster is found there).
    nodes: parking_lot::RwLock<HashMap<NodeId, Arc<RpcClient>>>,
    /// Signs every call.
    signer: Signer,
    opts: CallOptions,
    buckets: moka::sync::Cache<(TenantId, String), BucketInfo>,
    windows: window::Windows,
    /// The replica believed to lead each partition's group and the catalog's.
    leaders: leaders::Leaders,
    /// The leader watch's last round ([`watch`]).
    reports: parking_lot::Mutex<Option<ReplicationView>>,
    /// Rung by a call waiting long at a replicated group's leader: the
    /// watch then asks for claims at once ([`watch`]).
    hurry: Arc<tokio::sync::Notify>,
    /// This client's id in its calls (the nodes split a tenant's window
    /// among the clients that carry it).
    id: u64,
    /// Room for the watches of quota holds left at nodes ([`settle`]).
    settling: Arc<tokio::sync::Semaphore>,
}

impl RemoteStore {
    /// A client of the cluster that `file` describes, its map from `map`.
    pub fn new(
        file: &ClusterFile,
        map: Arc<dyn MapSource>,
        opts: CallOptions,
    ) -> StoreResult<Self> {
        let secret = file
            .read_secret()
            .map_err(|e| StoreError::Layout(e.to_string()))?;
        let signer = Signer::new(&secret);
        let nodes = file
            .nodes
            .iter()
            .map(|n| {
                let client = RpcClient::new(n.rpc.clone(), signer.clone());
                (n.id.clone(), Arc::new(client))
            })
            .collect();
        let buckets = moka::sync::Cache::builder()
            .max_capacity(BUCKET_CACHE)
            .time_to_live(BUCKET_TTL)
            .build();
        Ok(RemoteStore {
            inner: Arc::new(Inner {
                map,
                nodes: parking_lot::RwLock::new(nodes),
                signer,
                opts,
                buckets,
                windows: window::Windows::default(),
                leaders: leaders::Leaders::default(),
                reports: parking_lot::Mutex::new(None),
                hurry: Arc::default(),
                id: client_id(),
                settling: Arc::new(tokio::sync::Semaphore::new(settle::MAX_SETTLING)),
            }),
        })
    }

    /// A client of the cluster of the cluster file at `path` (its map
    /// read from the same file).
    pub fn open(path: &std::path::Path, opts: CallOptions) -> StoreResult<Self> {
        let source = FileMapSource::open(path).map_err(|e| StoreError::Layout(e.to_string()))?;
        let file = source.file();
        RemoteStore::new(&file, Arc::new(source), opts)
    }

    /// The map in use.
    pub fn map(&self) -> Arc<PartitionMap> {
        self.inner.map.current()
    }

    /// Each node that owns partitions (is their first replica), with them.
    pub fn owners(&self) -> Vec<(NodeId, Vec<PartitionId>)> {
        let map = self.map();
        let mut out: Vec<(NodeId, Vec<PartitionId>)> = Vec::new();
        for p in map.partitions() {
            let Some(owner) = map.owner(p) else { continue };
            match out.iter_mut().find(|(n, _)| n == owner) {
                Some((_, ps)) => ps.push(p),
                None => out.push((owner.clone(), vec![p])),
            }
        }
        out
    }

    /// `tenant`'s calls to `node` in flight or waiting for its window
    /// (0 once every call has ended, however it ended).
    pub fn backlog(&self, node: &NodeId, tenant: &str) -> u32 {
        self.inner.windows.of(node, tenant).backlog()
    }

    /// Ask node `node` to answer `call` (liveness probes, per-node steps),
    /// once, within the deadline.
    pub async fn call_node<T: DeserializeOwned>(
        &self,
        node: &NodeId,
        call: Call,
    ) -> StoreResult<T> {
        self.call_node_within(node, call, self.inner.opts.deadline)
            .await
    }

    /// [`RemoteStore::call_node`] with a deadline of its own.
    pub async fn call_node_within<T: DeserializeOwned>(
        &self,
        node: &NodeId,
        call: Call,
        within: Duration,
    ) -> StoreResult<T> {
        let deadline = tokio::time::Instant::now() + within;
        let map = self.map();
        let name = call.name();
        let (sealed, _) = self.envelope(call, &map, node, None, deadline)?;
        self.exchange(node, name, sealed, None, deadline)
            .await
            .map(|(reply, _)| reply)
            .map_err(route::Sent::into_store)
    }

    /// The client of `node`: made from the map source's address the first
    /// time (`None`: no source knows the node).
    pub(crate) fn client(&self, node: &NodeId) -> Option<Arc<RpcClient>> {
        if let Some(c) = self.inner.nodes.read().get(node) {
            return Some(Arc::clone(c));
        }
        let info = self.inner.map.nodes().into_iter().find(|n| n.id == *node)?;
        let client = Arc::new(RpcClient::new(info.rpc, self.inner.signer.clone()));
        let mut nodes = self.inner.nodes.write();
        Some(Arc::clone(nodes.entry(node.clone()).or_insert(client)))
    }

    /// Every store node the map source knows, in name order (a node
    /// taken out of the cluster file is no longer asked); the nodes this
    /// client has met when the source names none.
    pub(crate) fn known_nodes(&self) -> Vec<NodeId> {
        let mut ids: Vec<NodeId> = self.inner.map.nodes().into_iter().map(|n| n.id).collect();
        if ids.is_empty() {
            ids = self.inner.nodes.read().keys().cloned().collect();
        }
        ids.sort();
        ids
    }

    /// Ask `group`'s leader to change its members (`laneway cluster
    /// move-partition`), following leaders within `within`.
    pub async fn change_members(
        &self,
        group: crate::cluster::placement::GroupRef,
        change: crate::replication::MemberChange,
        within: Duration,
    ) -> StoreResult<()> {
        use crate::cluster::placement::GroupRef;
        let deadline = tokio::time::Instant::now() + within;
        let target = match group {
            GroupRef::Catalog => leaders::Target::Catalog,
            GroupRef::Partition(p) => leaders::Target::Partition(p),
        };
        let call = Call::ChangeMembers { group, change };
        self.send_routed::<()>(target, call, deadline)
            .await
            .map(|_| ())
            .map_err(|f| f.error)
    }

    /// Send `call` and keep only its reply.
    async fn ask<T: DeserializeOwned>(&self, call: Call) -> StoreResult<T> {
        Ok(self.send(call, None).await?.0)
    }

    /// [`RemoteStore::ask`], saying whether a failure came from a repeat
    /// of the call after an attempt whose outcome is unknown.
    async fn ask_routed<T: DeserializeOwned>(&self, call: Call) -> Result<T, route::Failed> {
        let deadline = tokio::time::Instant::now() + self.inner.opts.deadline;
        let target = route::target_of(&self.map(), &call).ok_or_else(|| route::Failed {
            error: StoreError::InvalidArgument(format!("{} names its node", call.name())),
            repeated: false,
        })?;
        let (reply, _) = self.send_routed(target, call, deadline).await?;
        Ok(reply)
    }

    /// `make(partitions)` sent to the leaders of every partition, each
    /// naming the partitions it answers for; their replies.
    async fn each_partition<T: DeserializeOwned>(
        &self,
        make: impl Fn(Vec<PartitionId>) -> Call + Sync,
    ) -> StoreResult<Vec<T>> {
        let all: Vec<PartitionId> = self.map().partitions().collect();
        let replies = self.fan_out(all, |p| *p, make).await?;
        Ok(replies.into_iter().map(|(_, reply)| reply).collect())
    }

    /// The bucket, from the catalog (not the cache).
    async fn fetch_bucket(&self, tenant: &TenantId, name: &str) -> StoreResult<BucketInfo> {
        let b: BucketInfo = self
            .ask(Call::Bucket {
                tenant: tenant.clone(),
                name: name.to_string(),
            })
            .await?;
        self.inner
            .buckets
            .insert((tenant.clone(), name.to_string()), b.clone());
        Ok(b)
    }

    /// DeleteBucket across nodes: seal the bucket at the leader of every
    /// partition (each checks that the partitions it leads hold none of
    /// its objects and refuses later writes into it), then remove its
    /// catalog record. A partition that is not empty (or a leader that
    /// cannot be reached in time) undoes the seals, and the delete fails
    /// with its error.
    ///
    /// With replicas, a partition's seal is a row written through its
    /// group ([`crate::seal_rows`]): a replica elected after the seal has
    /// it too, so only each partition's leader is asked, and the delete
    /// succeeds while a store node is down, as writes do. Without, a
    /// partition has one node, whose seal ([`crate::gate`]) is written to
    /// its data directory and read back when it restarts
    /// ([`crate::seals`]). Either way the seal outlives the window in
    /// which a write resolved before the delete can arrive: bucket ids are
    /// never reused, and a write into a deleted bucket needs a gateway
    /// that still caches it ([`BUCKET_TTL`]).
    async fn delete_bucket_everywhere(&self, tenant: &TenantId, name: &str) -> StoreResult<()> {
        let b = self.fetch_bucket(tenant, name).await?;
        let checked: StoreResult<Vec<()>> = self
            .each_partition(|partitions| Call::SealBucket {
                bucket: b.id,
                partitions,
            })
            .await;
        if let Err(e) = checked {
            self.revive(b.id).await;
            return Err(e);
        }
        let dropped: StoreResult<()> = self
            .ask(Call::DropBucket {
                tenant: tenant.clone(),
                name: name.to_string(),
            })
            .await;
        self.inner
            .buckets
            .invalidate(&(tenant.clone(), name.to_string()));
        if let Err(e) = dropped {
            self.revive(b.id).await;
            return Err(e);
        }
        Ok(())
    }

    /// A bulk tag edit: the keys grouped by partition, the partitions by
    /// their leader, one call per leader, the leaders in parallel; all
    /// with the id `once` if the caller gave one.
    async fn edit_tags_on_nodes(
        &self,
        bucket: &BucketInfo,
        keys: Vec<String>,
        edit: TagEdit,
        once: Option<crate::repeat::CallId>,
    ) -> StoreResult<EditCounts> {
        let count = self.map().partition_count();
        let part_of = |key: &String| crate::hash::partition_of(bucket.id, key.as_bytes(), count);
        let make = |keys: Vec<String>| Call::EditTags {
            bucket: bucket.clone(),
            keys,
            edit: edit.clone(),
        };
        let counts: Vec<(Vec<String>, EditCounts)> =
            self.fan_out_once(keys, part_of, make, once).await?;
        Ok(counts
            .into_iter()
            .map(|(_, c)| c)
            .fold(EditCounts::default(), EditCounts::plus))
    }

    /// Undo a failed delete's seals at the leader of every partition (a
    /// seal that did not happen is undone harmlessly). A partition whose
    /// leader cannot be reached keeps refusing writes into the bucket
    /// until its seal expires ([`crate::seal_rows::SEAL_ROW_KEEP`]), or,
    /// without replicas, until its node restarts.
    async fn revive(&self, bucket: BucketId) {
        let revived: StoreResult<Vec<()>> = self
            .each_partition(|partitions| Call::ReviveBucketIn { bucket, partitions })
            .await;
        if let Err(e) = revived {
            tracing::warn!(bucket = bucket.0, error = %e,
                "could not revive a bucket after a failed delete; where it was sealed, writes into it fail until the seal expires");
        }
    }
}

/// A random id for a client's calls.
fn client_id() -> u64 {
    use ring::rand::SecureRandom;
    let mut raw = [0u8; 8];
    // A failed generator leaves 0: the client's calls then share the
    // window entry of every other such sender; nothing else depends on it.
    let _ = ring::rand::SystemRandom::new().fill(&mut raw);
    u64::from_be_bytes(raw)
}

/// The window in front of an answer's payload, and the reply after it.
fn split_window(payload: &[u8]) -> StoreResult<(u32, &[u8])> {
    match payload.split_first_chunk::<4>() {
        Some((w, rest)) => Ok((u32::from_be_bytes(*w), rest)),
        None => Err(StoreError::Engine(
            "a store node's answer without its window".into(),
        )),
    }
}

fn sum_usage(parts: Vec<Usage>) -> Usage {
    parts.into_iter().fold(Usage::default(), |a, u| Usage {
        objects: a.objects + u.objects,
        bytes: a.bytes + u.bytes,
    })
}

fn sum_pending(parts: Vec<Pending>) -> Pending {
    parts.into_iter().fold(Pending::default(), |a, p| Pending {
        uploads: a.uploads + p.uploads,
        part_bytes: a.part_bytes + p.part_bytes,
    })
}

/// Owned copies of an object call's common arguments.
fn at(bucket: &BucketInfo, key: &str) -> (BucketInfo, String) {
    (bucket.clone(), key.to_string())
}

impl StoreClient for RemoteStore {
    fn replication(&self) -> Option<ReplicationView> {
        self.last_reports()
    }

    fn create_bucket<'a>(
        &'a self,
        tenant: &'a TenantId,
        name: &'a str,
        region: &'a str,
    ) -> Fut<'a, BucketInfo> {
        Box::pin(self.ask(Call::CreateBucket {
            tenant: tenant.clone(),
            name: name.to_string(),
            region: region.to_string(),
        }))
    }

    fn bucket<'a>(&'a self, tenant: &'a TenantId, name: &'a str) -> Fut<'a, BucketInfo> {
        Box::pin(async move {
            if let Some(b) = self.inner.buckets.get(&(tenant.clone(), name.to_string())) {
                return Ok(b);
            }
            self.fetch_bucket(tenant, name).await
        })
    }

    fn list_buckets<'a>(&'a self, tenant: &'a TenantId) -> Fut<'a, Vec<BucketInfo>> {
        Box::pin(self.ask(Call::ListBuckets {
            tenant: tenant.clone(),
        }))
    }

    fn delete_bucket<'a>(&'a self, tenant: &'a TenantId, name: &'a str) -> Fut<'a, ()> {
        Box::pin(self.delete_bucket_everywhere(tenant, name))
    }

    fn set_bucket_tags<'a>(
        &'a self,
        tenant: &'a TenantId,
        name: &'a str,
        tags: Vec<Tag>,
    ) -> Fut<'a, ()> {
        Box::pin(async move {
            let r = self
                .ask(Call::SetBucketTags {
                    tenant: tenant.clone(),
                    name: name.to_string(),
                    tags,
                })
                .await;
            self.inner
                .buckets
                .invalidate(&(tenant.clone(), name.to_string()));
            r
        })
    }

    fn bucket_usage(&self, bucket: BucketId) -> Fut<'_, Usage> {
        Box::pin(async move {
            let parts = self
                .each_partition(|partitions| Call::BucketUsage { bucket, partitions })
                .await?;
            Ok(sum_usage(parts))
        })
    }

    fn bucket_pending(&self, bucket: BucketId) -> Fut<'_, Pending> {
        Box::pin(async move {
            let parts = self
                .each_partition(|partitions| Call::BucketPending { bucket, partitions })
                .await?;
            Ok(sum_pending(parts))
        })
    }

    fn buckets_totals(&self, buckets: Vec<BucketId>) -> Fut<'_, (Usage, Pending)> {
        Box::pin(async move {
            if buckets.is_empty() {
                return Ok((Usage::default(), Pending::default()));
            }
            let asked: StoreResult<Vec<(Usage, Pending)>> = self
                .each_partition(|partitions| Call::BucketsTotals {
                    buckets: buckets.clone(),
                    partitions,
                })
                .await;
            match asked {
                Ok(parts) => {
                    let (usage, pending): (Vec<Usage>, Vec<Pending>) = parts.into_iter().unzip();
                    Ok((sum_usage(usage), sum_pending(pending)))
                }
                // A node of an earlier build (a rolling upgrade) does not
                // know the call and refuses it as one it cannot decode:
                // ask bucket by bucket, as that build's gateways do.
                Err(StoreError::Engine(_)) => {
                    crate::client::totals_bucket_by_bucket(self, buckets).await
                }
                Err(e) => Err(e),
            }
        })
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
        let (bucket, key) = at(bucket, key);
        let call = Call::PutObject {
            bucket,
            key,
            meta,
            opts,
            cond,
        };
        Box::pin(async move { Ok(self.send(call, Some(body)).await?.0) })
    }

    fn head_object<'a>(&'a self, bucket: &'a BucketInfo, key: &'a str) -> Fut<'a, ObjectInfo> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::HeadObject { bucket, key }))
    }

    fn get_object<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        range: Option<GetRange>,
    ) -> Fut<'a, (ObjectInfo, BodyStream)> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.send(Call::GetObject { bucket, key, range }, None))
    }

    fn delete_object<'a>(&'a self, bucket: &'a BucketInfo, key: &'a str) -> Fut<'a, bool> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::DeleteObject { bucket, key }))
    }

    fn put_object_tags<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        tags: Vec<Tag>,
    ) -> Fut<'a, ()> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::PutObjectTags { bucket, key, tags }))
    }

    fn edit_tags<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        keys: Vec<String>,
        edit: TagEdit,
        once: Option<crate::repeat::CallId>,
    ) -> Fut<'a, EditCounts> {
        Box::pin(self.edit_tags_on_nodes(bucket, keys, edit, once))
    }

    fn replace_object_meta<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        meta: ObjectMeta,
        tags: Option<Vec<Tag>>,
    ) -> Fut<'a, ObjectInfo> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::ReplaceObjectMeta {
            bucket,
            key,
            meta,
            tags,
        }))
    }

    fn list_objects<'a>(&'a self, bucket: &'a BucketInfo, query: ListQuery) -> Fut<'a, ListPage> {
        Box::pin(async move {
            let runs = list::NodeRuns::new(self);
            crate::list::merge(&runs, bucket.id, &query).await
        })
    }

    fn object_part_range<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        number: u32,
    ) -> Fut<'a, (GetRange, u32)> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::ObjectPartRange {
            bucket,
            key,
            number,
        }))
    }

    fn object_with_parts<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
    ) -> Fut<'a, (ObjectInfo, Vec<ObjectPart>)> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::ObjectWithParts { bucket, key }))
    }

    fn create_multipart_upload<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        meta: ObjectMeta,
        tags: Vec<Tag>,
        checksum: Option<UploadChecksum>,
    ) -> Fut<'a, String> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::CreateMultipartUpload {
            bucket,
            key,
            meta,
            tags,
            checksum,
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
        let (bucket, key) = at(bucket, key);
        let call = Call::UploadPart {
            bucket,
            key,
            upload_id: upload_id.to_string(),
            number,
            opts,
        };
        Box::pin(async move { Ok(self.send(call, Some(body)).await?.0) })
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
        Box::pin(async move {
            let call = Call::CompleteMultipartUpload {
                bucket: bucket.clone(),
                key: key.to_string(),
                upload_id: upload_id.to_string(),
                parts: parts.clone(),
                cond,
                whole,
            };
            match self.ask_routed(call).await {
                // A repeat after an attempt whose outcome is unknown finds
                // no upload: that attempt completed it. Answer as S3
                // answers a repeated completion.
                Err(route::Failed {
                    error: StoreError::NoSuchUpload,
                    repeated: true,
                }) => {
                    self.repeated_completion(bucket, key, upload_id, &parts)
                        .await
                }
                r => r.map_err(|f| f.error),
            }
        })
    }

    fn repeated_completion<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        parts: &'a [ListedPart],
    ) -> Fut<'a, ObjectInfo> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::RepeatedCompletion {
            bucket,
            key,
            upload_id: upload_id.to_string(),
            parts: parts.to_vec(),
        }))
    }

    fn part_size<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        number: u32,
    ) -> Fut<'a, Option<u64>> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::PartSize {
            bucket,
            key,
            upload_id: upload_id.to_string(),
            number,
        }))
    }

    fn abort_multipart_upload<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
    ) -> Fut<'a, ()> {
        let (bucket, key) = at(bucket, key);
        let call = Call::AbortMultipartUpload {
            bucket,
            key,
            upload_id: upload_id.to_string(),
        };
        Box::pin(async move {
            match self.ask_routed(call).await {
                // A repeat after an attempt whose outcome is unknown finds
                // no upload: that attempt aborted it.
                Err(route::Failed {
                    error: StoreError::NoSuchUpload,
                    repeated: true,
                }) => Ok(()),
                r => r.map_err(|f| f.error),
            }
        })
    }

    fn upload_checksum<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
    ) -> Fut<'a, Option<UploadChecksum>> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::UploadChecksum {
            bucket,
            key,
            upload_id: upload_id.to_string(),
        }))
    }

    fn list_parts<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        key: &'a str,
        upload_id: &'a str,
        marker: u32,
        max: usize,
    ) -> Fut<'a, (Vec<PartInfo>, bool)> {
        let (bucket, key) = at(bucket, key);
        Box::pin(self.ask(Call::ListParts {
            bucket,
            key,
            upload_id: upload_id.to_string(),
            marker,
            max,
        }))
    }

    fn list_multipart_uploads<'a>(
        &'a self,
        bucket: &'a BucketInfo,
        q: &'a UploadQuery,
    ) -> Fut<'a, UploadPage> {
        Box::pin(async move {
            let pages = self
                .each_partition(|partitions| Call::ListMultipartUploads {
                    bucket: bucket.clone(),
                    query: q.clone(),
                    partitions,
                })
                .await?;
            Ok(list::merge_upload_pages(pages, q.max_uploads))
        })
    }

    fn catalog_doc<'a>(&'a self, name: &'a str) -> Fut<'a, Option<(u64, Vec<u8>)>> {
        Box::pin(self.ask(Call::CatalogDoc {
            name: name.to_string(),
        }))
    }

    fn put_catalog_doc<'a>(&'a self, name: &'a str, expected: u64, body: Vec<u8>) -> Fut<'a, u64> {
        Box::pin(self.ask(Call::PutCatalogDoc {
            name: name.to_string(),
            expected,
            body,
        }))
    }

    fn reserve_quota<'a>(
        &'a self,
        tenant: &'a TenantId,
        limits: QuotaLimits,
        ask: QuotaAsk,
    ) -> Fut<'a, Option<QuotaHold>> {
        Box::pin(async move {
            if !ask.needs_reservation(&limits) {
                return Ok(None);
            }
            let call = Call::QuotaReserve {
                tenant: tenant.clone(),
                limits,
                ask,
            };
            let once = self.id_for(&call);
            let deadline = tokio::time::Instant::now() + self.inner.opts.deadline;
            match self.send_as::<Option<u64>>(call, once, deadline).await {
                Ok(id) => Ok(id.map(|id| self.remote_hold(id))),
                Err(e) => {
                    // An attempt whose answer was lost may have made the
                    // hold, named after the call's id, or may still make
                    // it until the deadline (the desk makes none past
                    // it): give it back then (a desk that never made it
                    // ignores this). A refusal is final: no attempt made
                    // one.
                    if let Some(once) = once.filter(|_| !matches!(e, StoreError::QuotaExceeded(_)))
                    {
                        let id = crate::node::desk::hold_id(&once);
                        self.give_back_quota_after(id, deadline + GIVE_BACK_MARGIN);
                    }
                    Err(e)
                }
            }
        })
    }
}

/// How long a quota release is asked again ([`RemoteStore::give_back_quota`]):
/// past a catalog election and its new leader's takeover of the holds,
/// also on a loaded machine. Three calls (about 17 s, before) may not
/// outlast those, and a hold whose release gave up stays counted for
/// an hour.
const RELEASE_FOR: Duration = Duration::from_secs(60);

/// The pause between two calls of a release.
const RELEASE_PAUSE: Duration = Duration::from_secs(1);

/// How long after a failed reservation's deadline its id is given back:
/// the desk makes no hold once the sender's wait is over, counted from
/// the call's arrival there, so later than the sender's own deadline by
/// the call's time on the way (`crate::node::desk`).
const GIVE_BACK_MARGIN: Duration = Duration::from_secs(1);

impl RemoteStore {
    /// A hold whose drop gives reservation `id` back to the catalog node,
    /// in the background on the runtime it was made on (a store node
    /// running a write made under it gives it back too:
    /// [`QuotaHold::cover`]).
    fn remote_hold(&self, id: u64) -> QuotaHold {
        let me = self.clone();
        let handle = tokio::runtime::Handle::try_current().ok();
        QuotaHold::remote(id, move || {
            if let Some(handle) = handle {
                handle.spawn(me.release_quota(id));
            }
        })
    }

    /// Give quota hold `id` back to the catalog node's desk, in the
    /// background (one for a hold already given back is ignored there).
    /// Outside a runtime, nothing: the hold lapses at the desk.
    pub fn give_back_quota(&self, id: u64) {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(self.clone().release_quota(id));
        }
    }

    /// [`RemoteStore::give_back_quota`] once `at` has come.
    fn give_back_quota_after(&self, id: u64, at: tokio::time::Instant) {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let me = self.clone();
            handle.spawn(async move {
                tokio::time::sleep_until(at).await;
                me.release_quota(id).await;
            });
        }
    }

    /// Ask the catalog node to release hold `id`, again and again for up
    /// to [`RELEASE_FOR`] (each call follows leader changes within its
    /// deadline; a catalog whose election outlasts one is asked again).
    /// A last failure is logged: the hold then lapses there. How many
    /// releases wait so is bounded by the holds made, and a catalog that
    /// cannot release makes none.
    async fn release_quota(self, id: u64) {
        let until = tokio::time::Instant::now() + RELEASE_FOR;
        loop {
            let r: StoreResult<()> = self.ask(Call::QuotaRelease { id }).await;
            match r {
                Ok(()) => return,
                Err(e) if tokio::time::Instant::now() + RELEASE_PAUSE >= until => {
                    tracing::warn!(hold = id, error = %e, "quota release failed; it lapses at the catalog node");
                    return;
                }
                Err(e) => {
                    tracing::debug!(hold = id, error = %e, "quota release failed; asked again");
                    tokio::time::sleep(RELEASE_PAUSE).await;
                }
            }
        }
    }
}
