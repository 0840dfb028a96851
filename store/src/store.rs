//! [`Store`]: the one interface the gateway uses. It routes each object to its
//! partition, keeps the bucket catalog, and merges partition listings.

use crate::catalog::Catalog;
use crate::compaction::CompactionReport;
use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, TenantId};
use crate::index::Engine;
use crate::list::{ListPage, ListQuery};
use crate::partition::Partition;
use crate::record::{ObjectInfo, ObjectMeta, Tag};
use bytes::Bytes;
use futures::Stream;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

/// Rows read per index scan of a background sweep ([`Store::sweep`]).
const SWEEP_CHUNK: usize = 1000;

/// When the background pass of [`Store::start_compactor`] first runs
/// after the start, at the latest.
pub const FIRST_PASS_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// A stream of body bytes, in or out.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

/// Settings fixed or tuned when a store is opened.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Number of partitions (a power of two). `None`: the data dir's own
    /// count, or 16 for a new one. `Some(n)` for an existing data dir created
    /// with another count is refused with a clear message.
    pub partitions: Option<u32>,
    /// Metadata engine. `None`: the data dir's own, or fjall for a new one.
    /// Asking for another engine than an existing data dir uses is refused.
    pub engine: Option<Engine>,
    /// Objects up to this size are stored inside their metadata record.
    pub inline_max: u64,
    /// A volume segment is sealed once it grows past this many bytes
    /// (only sealed segments are compacted, so this bounds the space a
    /// delete can leave unreclaimed in a busy open segment).
    pub segment_max: u64,
    /// Smallest size of a multipart part that is not the last (S3: 5 MiB).
    pub min_part_size: u64,
    /// Sync to disk before acknowledging writes (only benchmarks of the
    /// engines themselves ever turn this off).
    pub durable: bool,
    /// Free space kept for deletes and compaction: writes that would go
    /// below it are refused ([`crate::space`]).
    pub disk_reserve: crate::space::DiskReserve,
    /// Bytes of block cache and memtables all partition indexes share
    /// (each gets its share, 1 to 16 MiB of each: [`crate::index::IndexMemory::share`]).
    pub index_memory: u64,
    /// The partitions this store opens and serves (a cluster node's share
    /// of the map); `None`: every partition (`laneway serve`). The others
    /// answer [`StoreError::NotHosted`].
    pub hosted: Option<Vec<crate::ids::PartitionId>>,
    /// Replicate every hosted partition through the groups this opens
    /// ([`crate::replication`]); `None`: this store's copy is the only one.
    pub groups: Option<crate::replication::Replication>,
}

/// Default [`StoreConfig::index_memory`]: 128 MiB, so 16 partitions keep
/// 4 MiB of cache and 4 MiB of memtable each.
pub const DEFAULT_INDEX_MEMORY: u64 = 128 << 20;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            partitions: None,
            engine: None,
            inline_max: 16 * 1024,
            segment_max: 256 << 20,
            min_part_size: 5 << 20,
            durable: true,
            disk_reserve: crate::space::DiskReserve::Auto,
            index_memory: DEFAULT_INDEX_MEMORY,
            hosted: None,
            groups: None,
        }
    }
}

/// A bucket as the catalog records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketInfo {
    /// Internal id (prefix of its objects' index keys).
    pub id: BucketId,
    /// Owning tenant.
    pub tenant: TenantId,
    /// Bucket name (unique within the tenant).
    pub name: String,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: i64,
    /// Region it was created in.
    pub region: String,
    /// Bucket tag set (empty = none).
    pub tags: Vec<Tag>,
}

/// Checks and options of a PUT.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PutOptions {
    /// Content-MD5 the client sent: the body must hash to it (BadDigest).
    pub content_md5: Option<[u8; 16]>,
    /// Declared body length: a body of another length is refused.
    pub content_length: Option<u64>,
    /// Tags to store with the object.
    pub tags: Vec<Tag>,
    /// The flexible checksum to keep with the object.
    pub checksum: Option<ChecksumSpec>,
}

/// Which flexible checksum an upload keeps: plain data, so it crosses the
/// cluster RPC as well as a function call.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ChecksumSpec {
    /// Compute this algorithm over the bytes as they are stored. (The
    /// gateway checks the client's value, header or trailer, and fails the
    /// body on a mismatch, so nothing commits; the store records what it
    /// computed over what it wrote, end to end across any hop between.)
    Compute(crate::flexsum::Algo),
    /// The value is known already (a copy of an object that has one).
    Known(crate::record::Checksum),
}

/// A byte range of an object to read, already resolved against its size:
/// `start..end` (end exclusive, `start < end <= size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GetRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// The store: catalog plus partitions.
pub struct Store {
    dir: PathBuf,
    pub(crate) min_part_size: u64,
    catalog: Catalog,
    /// The hosted partitions, in id order.
    partitions: Vec<Arc<Partition>>,
    /// Partition count of the data dir (hosted or not).
    total: u32,
    /// For each partition id, its place in `partitions` (`None`: not hosted).
    slots: Vec<Option<usize>>,
    /// Free space of the data directory, shared with the partitions.
    space: Arc<crate::space::Space>,
    /// Held by a compaction pass (the periodic one, the low-space one, or
    /// an explicit [`Store::compact`]).
    compacting: tokio::sync::Mutex<()>,
    /// Keeps writes from committing into deleted buckets.
    gate: Arc<crate::gate::BucketGate>,
}

impl Store {
    /// Open (creating on first use) the store in `dir`.
    pub fn open(dir: &Path, cfg: StoreConfig) -> StoreResult<Arc<Store>> {
        let layout = crate::layout::Layout::open_or_create(dir, &cfg)?;
        let catalog = Catalog::open(dir, layout.engine, cfg.groups.as_ref())?;
        let space = Arc::new(crate::space::Space::open(dir, cfg.disk_reserve)?);
        let cfg = StoreConfig {
            segment_max: space.segment_cap(cfg.segment_max),
            ..cfg
        };
        let gate = Arc::new(crate::gate::BucketGate::open(dir)?);
        let hosted = hosted_ids(&cfg, layout.partitions)?;
        let share = u32::try_from(hosted.len()).unwrap_or(u32::MAX).max(1);
        let mem = crate::index::IndexMemory::share(cfg.index_memory, share);
        // Partitions open in parallel: an LSM engine replays its journal on
        // open, and a restart should cost one replay, not one per partition.
        let partitions = std::thread::scope(|scope| {
            let handles: Vec<_> = hosted
                .iter()
                .map(|&p| {
                    let cfg = &cfg;
                    let space = Arc::clone(&space);
                    let gate = Arc::clone(&gate);
                    scope.spawn(move || {
                        Partition::open(dir, p, layout.engine, cfg, mem, space, gate)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(StoreError::Engine("partition open panicked".into()))
                    })
                })
                .collect::<StoreResult<Vec<_>>>()
        })?;
        let mut slots = vec![None; layout.partitions as usize];
        for (i, p) in hosted.iter().enumerate() {
            slots[p.0 as usize] = Some(i);
        }
        Ok(Arc::new(Store {
            dir: dir.to_path_buf(),
            min_part_size: cfg.min_part_size,
            catalog,
            partitions,
            total: layout.partitions,
            slots,
            space,
            compacting: tokio::sync::Mutex::new(()),
            gate,
        }))
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Free space of the data directory and its reserve.
    pub fn space(&self) -> &crate::space::Space {
        &self.space
    }

    /// Number of partitions of the data dir (hosted here or not).
    pub fn partition_count(&self) -> u32 {
        self.total
    }

    /// The partition `key` of `bucket` lives in ([`StoreError::NotHosted`]
    /// when this store does not serve it).
    pub(crate) fn partition_of(&self, bucket: BucketId, key: &str) -> StoreResult<&Arc<Partition>> {
        self.partition(crate::hash::partition_of(
            bucket,
            key.as_bytes(),
            self.total,
        ))
    }

    /// Partition `id`, if hosted here.
    pub fn partition(&self, id: crate::ids::PartitionId) -> StoreResult<&Arc<Partition>> {
        usize::try_from(id.0)
            .ok()
            .and_then(|i| self.slots.get(i).copied().flatten())
            .map(|i| &self.partitions[i])
            .ok_or(StoreError::NotHosted(id))
    }

    /// The hosted partitions (LIST merge, compaction, shutdown).
    pub fn partitions(&self) -> &[Arc<Partition>] {
        &self.partitions
    }

    /// A background sweep of the rows under key-space tag `tag`, in every
    /// partition this replica writes (a replica that does not lead a
    /// partition leaves it to the one that does): `act` gets the rows in
    /// chunks of [`SWEEP_CHUNK`], each before the next is read, and says
    /// how many it dealt with; the sum.
    pub(crate) async fn sweep<F>(
        &self,
        tag: u8,
        act: impl Fn(Arc<Partition>, Vec<(Vec<u8>, Vec<u8>)>) -> F,
    ) -> StoreResult<u64>
    where
        F: std::future::Future<Output = StoreResult<u64>>,
    {
        let mut n = 0;
        for p in self.partitions() {
            if !p.writes_here().await {
                continue;
            }
            let (mut from, end) = (vec![tag], vec![tag + 1]);
            loop {
                let rows = p.index().scan(&from, &end, SWEEP_CHUNK)?;
                let full = rows.len() == SWEEP_CHUNK;
                if let Some((k, _)) = rows.last() {
                    from = k.clone();
                    from.push(0);
                }
                n += act(Arc::clone(p), rows).await?;
                if !full {
                    break;
                }
            }
        }
        Ok(n)
    }

    /// Partitions `ids`, each hosted here ([`StoreError::NotHosted`] for
    /// the first that is not); each once, in id order.
    pub fn partitions_in(
        &self,
        ids: &[crate::ids::PartitionId],
    ) -> StoreResult<Vec<Arc<Partition>>> {
        let mut ids = ids.to_vec();
        ids.sort();
        ids.dedup();
        ids.into_iter()
            .map(|id| self.partition(id).cloned())
            .collect()
    }

    // ----- buckets -------------------------------------------------------

    /// Create bucket `name` for `tenant`.
    pub fn create_bucket(
        &self,
        tenant: &TenantId,
        name: &str,
        region: &str,
    ) -> StoreResult<BucketInfo> {
        self.space.admit(0)?;
        self.catalog.create(tenant, name, region)
    }

    /// Look up a bucket of `tenant` (NoSuchBucket when it has none of that name).
    pub fn bucket(&self, tenant: &TenantId, name: &str) -> StoreResult<BucketInfo> {
        self.catalog
            .get(tenant, name)?
            .ok_or(StoreError::NoSuchBucket)
    }

    /// The tenant's buckets in name order.
    pub fn list_buckets(&self, tenant: &TenantId) -> StoreResult<Vec<BucketInfo>> {
        self.catalog.list(tenant)
    }

    /// Delete an empty bucket (BucketNotEmpty otherwise). Atomic with
    /// respect to writes into it ([`crate::gate`]): a write racing the
    /// delete either commits first (BucketNotEmpty) or fails NoSuchBucket.
    pub async fn delete_bucket(&self, tenant: &TenantId, name: &str) -> StoreResult<()> {
        let b = self.bucket(tenant, name)?;
        let _exclusive = self.gate.exclusive(b.id).await;
        let usage = self.bucket_usage(b.id)?;
        if usage.objects != 0 {
            return Err(StoreError::BucketNotEmpty);
        }
        self.catalog.delete(tenant, name)?;
        self.gate.bury(b.id);
        Ok(())
    }

    /// A cluster DeleteBucket's step on one store node: under the bucket's
    /// exclusive gate, check that the partitions hosted here hold none of
    /// its objects, then refuse every later write into it (NoSuchBucket).
    /// BucketNotEmpty (and nothing changed) when they hold some.
    pub async fn seal_bucket(&self, bucket: BucketId) -> StoreResult<()> {
        let _exclusive = self.gate.exclusive(bucket).await;
        if self.bucket_usage(bucket)?.objects != 0 {
            return Err(StoreError::BucketNotEmpty);
        }
        self.gate.seal(bucket)
    }

    /// [`Store::seal_bucket`] checking only partitions `ids` (those this
    /// node leads). A replicated partition is sealed by a row written
    /// through its group ([`crate::seal_rows`]), so every replica that
    /// leads it later refuses writes into the bucket; the others (and a
    /// call naming none, from a gateway of an earlier build) seal this
    /// store ([`crate::gate::BucketGate`]), which refuses them on every
    /// partition here.
    pub async fn seal_bucket_in(
        &self,
        bucket: BucketId,
        ids: &[crate::ids::PartitionId],
    ) -> StoreResult<()> {
        let parts = self.partitions_in(ids)?;
        let (grouped, local): (Vec<_>, Vec<_>) =
            parts.into_iter().partition(|p| p.group().is_some());
        let until_ms = crate::partition::now_ms().saturating_add(
            i64::try_from(crate::seal_rows::SEAL_ROW_KEEP.as_millis()).unwrap_or(i64::MAX),
        );
        let seals = grouped.iter().map(|p| {
            p.submit(
                crate::commit::Op::SealBucket { bucket, until_ms },
                Vec::new(),
            )
        });
        futures::future::try_join_all(seals).await?;
        if grouped.is_empty() || !local.is_empty() {
            let _exclusive = self.gate.exclusive(bucket).await;
            if usage_over(&local, bucket)?.objects != 0 {
                return Err(StoreError::BucketNotEmpty);
            }
            self.gate.seal(bucket)?;
        }
        Ok(())
    }

    /// Undo [`Store::seal_bucket`] (another node was not empty).
    pub async fn revive_bucket(&self, bucket: BucketId) {
        let _exclusive = self.gate.exclusive(bucket).await;
        self.gate.revive(bucket);
    }

    /// Undo [`Store::seal_bucket_in`] in partitions `ids` (those this node
    /// leads): the seal rows of the replicated ones, and this store's seal.
    pub async fn revive_bucket_in(
        &self,
        bucket: BucketId,
        ids: &[crate::ids::PartitionId],
    ) -> StoreResult<()> {
        let parts = self.partitions_in(ids)?;
        let revivals = parts
            .iter()
            .filter(|p| p.group().is_some())
            .map(|p| p.submit(crate::commit::Op::ReviveBucket { bucket }, Vec::new()));
        let done = futures::future::try_join_all(revivals).await;
        self.revive_bucket(bucket).await;
        done.map(|_| ())
    }

    /// Remove the catalog record of a bucket every node has sealed (the
    /// last step of a cluster DeleteBucket).
    pub fn drop_bucket_record(&self, tenant: &TenantId, name: &str) -> StoreResult<()> {
        self.catalog.delete(tenant, name)
    }

    /// Replace a bucket's tag set (empty: remove it); a call with an id
    /// (`once`, [`crate::repeat`]) applies once.
    pub fn set_bucket_tags(
        &self,
        tenant: &TenantId,
        name: &str,
        tags: Vec<Tag>,
        once: Option<crate::repeat::CallId>,
    ) -> StoreResult<()> {
        self.space.admit(0)?;
        self.catalog.set_tags(tenant, name, tags, once)
    }

    /// Forget the catalog's rows of tagging calls that applied before
    /// `cutoff_ms` ([`Catalog::forget_repeats`]); how many. Blocking.
    pub fn forget_catalog_repeats(&self, cutoff_ms: i64) -> StoreResult<u64> {
        self.catalog.forget_repeats(cutoff_ms)
    }

    /// The catalog's replication group at this node, if replicated.
    pub fn catalog_group(&self) -> Option<&Arc<dyn crate::replication::Group>> {
        self.catalog.group()
    }

    /// Write the catalog rows of quota holds `puts` and delete those of
    /// `deletes`, in one batch ([`Catalog::write_holds`]). Blocking.
    pub fn write_quota_holds(
        &self,
        puts: &[(u64, crate::quota::rows::HoldRow)],
        deletes: &[u64],
    ) -> StoreResult<()> {
        let rows = puts.iter().map(|(id, row)| (*id, row.encode())).collect();
        self.catalog.write_holds(rows, deletes)
    }

    /// Every quota hold row of the catalog (rows that do not decode are
    /// left out and logged). Blocking.
    pub fn quota_holds(&self) -> StoreResult<Vec<(u64, crate::quota::rows::HoldRow)>> {
        let rows = self.catalog.holds()?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, v)| match crate::quota::rows::HoldRow::decode(&v) {
                Ok(row) => Some((id, row)),
                Err(e) => {
                    tracing::warn!(hold = id, error = %e, "quota hold row skipped");
                    None
                }
            })
            .collect())
    }

    /// Catalog document `name` and its version ([`Catalog::doc`]).
    pub fn catalog_doc(&self, name: &str) -> StoreResult<Option<(u64, Vec<u8>)>> {
        self.catalog.doc(name)
    }

    /// Replace catalog document `name` if still at version `expected`
    /// ([`Catalog::put_doc`]).
    pub fn put_catalog_doc(&self, name: &str, expected: u64, body: &[u8]) -> StoreResult<u64> {
        self.space.admit(0)?;
        self.catalog.put_doc(name, expected, body)
    }

    /// Objects and bytes in a bucket (summed over partitions; exact, since
    /// counters change in the same batch as the objects).
    pub fn bucket_usage(&self, bucket: BucketId) -> StoreResult<crate::record::Usage> {
        usage_over(&self.partitions, bucket)
    }

    /// [`Store::bucket_usage`] over partitions `ids` only (a cluster node
    /// answers for the partitions it leads).
    pub fn bucket_usage_in(
        &self,
        bucket: BucketId,
        ids: &[crate::ids::PartitionId],
    ) -> StoreResult<crate::record::Usage> {
        usage_over(&self.partitions_in(ids)?, bucket)
    }

    // ----- objects -------------------------------------------------------

    /// Store `body` as `key`, durably, replacing any previous object.
    pub async fn put_object(
        &self,
        bucket: &BucketInfo,
        key: &str,
        meta: ObjectMeta,
        opts: PutOptions,
        body: BodyStream,
    ) -> StoreResult<ObjectInfo> {
        self.partition_of(bucket.id, key)?
            .put(bucket.id, key, meta, opts, body)
            .await
    }

    /// [`Store::put_object`] with a precondition checked atomically when the
    /// object is committed (If-None-Match: * / If-Match): a failed
    /// precondition is PreconditionFailed and leaves the old object alone.
    pub async fn put_object_if(
        &self,
        bucket: &BucketInfo,
        key: &str,
        meta: ObjectMeta,
        opts: PutOptions,
        body: BodyStream,
        cond: crate::commit::WriteCond,
    ) -> StoreResult<ObjectInfo> {
        self.partition_of(bucket.id, key)?
            .put_if(bucket.id, key, meta, opts, body, cond)
            .await
    }

    /// Metadata of `key` (NoSuchKey when absent).
    pub fn head_object(&self, bucket: &BucketInfo, key: &str) -> StoreResult<ObjectInfo> {
        self.partition_of(bucket.id, key)?.head(bucket.id, key)
    }

    /// Metadata and a body stream of `key` (whole object, or `range`).
    /// The stream verifies stored checksums as it reads.
    pub fn get_object(
        &self,
        bucket: &BucketInfo,
        key: &str,
        range: Option<GetRange>,
    ) -> StoreResult<(ObjectInfo, BodyStream)> {
        self.partition_of(bucket.id, key)?
            .get(bucket.id, key, range)
    }

    /// Delete `key`; Ok whether or not it existed (S3 semantics). Returns
    /// whether it existed.
    pub async fn delete_object(&self, bucket: &BucketInfo, key: &str) -> StoreResult<bool> {
        self.partition_of(bucket.id, key)?
            .delete(bucket.id, key)
            .await
    }

    /// Replace the tag set of `key` (metadata only; NoSuchKey when absent).
    pub async fn put_object_tags(
        &self,
        bucket: &BucketInfo,
        key: &str,
        tags: Vec<Tag>,
    ) -> StoreResult<()> {
        self.partition_of(bucket.id, key)?
            .set_tags(bucket.id, key, tags)
            .await
    }

    /// Apply a bulk tag edit to `keys` of `bucket`: one commit round per
    /// partition, the partitions in parallel. Every key must be hosted here.
    pub async fn edit_tags(
        &self,
        bucket: &BucketInfo,
        keys: Vec<String>,
        edit: crate::tagindex::TagEdit,
    ) -> StoreResult<crate::tagindex::EditCounts> {
        let edit = Arc::new(edit);
        let mut by_partition: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
        for key in keys {
            let p = crate::hash::partition_of(bucket.id, key.as_bytes(), self.total);
            by_partition.entry(p.0).or_default().push(key);
        }
        let mut rounds = Vec::with_capacity(by_partition.len());
        for (p, keys) in by_partition {
            let part = self.partition(crate::ids::PartitionId(p))?;
            rounds.push(part.edit_tags(bucket.id, keys, Arc::clone(&edit)));
        }
        let mut counts = crate::tagindex::EditCounts::default();
        for edited in futures::future::try_join_all(rounds).await? {
            edited.into_iter().for_each(|e| counts.add(e));
        }
        Ok(counts)
    }

    /// Replace the client metadata of `key` in place (self-copy with
    /// REPLACE directive): no data is copied.
    pub async fn replace_object_meta(
        &self,
        bucket: &BucketInfo,
        key: &str,
        meta: ObjectMeta,
        tags: Option<Vec<Tag>>,
    ) -> StoreResult<ObjectInfo> {
        self.partition_of(bucket.id, key)?
            .replace_meta(bucket.id, key, meta, tags)
            .await
    }

    /// One page of a listing, merged over all partitions.
    pub async fn list_objects(
        self: &Arc<Self>,
        bucket: &BucketInfo,
        query: ListQuery,
    ) -> StoreResult<ListPage> {
        let me = Arc::clone(self);
        let id = bucket.id;
        tokio::task::spawn_blocking(move || crate::list::list(&me.partitions, id, &query))
            .await
            .map_err(|e| StoreError::Engine(format!("list task: {e}")))?
    }

    /// Reclaim volume space: rewrite every sealed segment whose garbage share
    /// is at least `min_garbage`; with `seal_idle`, idle open segments too.
    pub async fn compact(
        &self,
        min_garbage: f64,
        seal_idle: bool,
    ) -> StoreResult<CompactionReport> {
        // One pass at a time: two passes over one segment would both copy
        // its records and both try to delete it.
        let _one = self.compacting.lock().await;
        let mut total = CompactionReport::default();
        for p in &self.partitions {
            let r = crate::compaction::compact_partition(p, min_garbage, seal_idle).await?;
            total.segments += r.segments;
            total.records_moved += r.records_moved;
            total.bytes_freed += r.bytes_freed;
        }
        Ok(total)
    }

    /// Every [`crate::compaction::LOW_SPACE_EVERY`], in the background, while
    /// free space is under twice the reserve: seal idle segments and compact
    /// those with a quarter garbage, so deletes on a full disk free space.
    /// A failing partition does not keep the others from being compacted.
    fn start_low_space_compactor(self: &Arc<Self>) {
        let store = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(crate::compaction::LOW_SPACE_EVERY);
            loop {
                tick.tick().await;
                let Some(store) = store.upgrade() else { return };
                if !store.space.is_low() {
                    continue;
                }
                let _one = store.compacting.lock().await;
                for p in &store.partitions {
                    let min = crate::compaction::LOW_SPACE_MIN_GARBAGE;
                    match crate::compaction::compact_partition(p, min, true).await {
                        Ok(r) if r.segments > 0 => tracing::info!(partition = %p.id(),
                            segments = r.segments, freed = r.bytes_freed, "low-space compaction"),
                        Ok(_) => {}
                        Err(StoreError::ShuttingDown) => return,
                        Err(e) => tracing::warn!(partition = %p.id(), error = %e,
                            "low-space compaction failed"),
                    }
                }
            }
        });
    }

    /// Every `every`, in the background: abort multipart uploads older than
    /// `upload_max_age`, forget completed uploads older than that or a day
    /// (whichever is shorter) and calls that may be repeated older than
    /// [`crate::repeat::REPEAT_TTL`], then [`Store::compact`] sealed segments (so
    /// writes in progress are never disturbed). The first pass runs
    /// [`FIRST_PASS_AFTER`] after the start (or after `every`, if
    /// shorter), so a node restarted more often than `every` still
    /// compacts. The task ends when the store shuts down.
    pub fn start_compactor(
        self: &Arc<Self>,
        every: std::time::Duration,
        min_garbage: f64,
        upload_max_age: std::time::Duration,
    ) {
        self.start_low_space_compactor();
        let store = Arc::downgrade(self);
        tokio::spawn(async move {
            let first = tokio::time::Instant::now() + every.min(FIRST_PASS_AFTER);
            let mut tick = tokio::time::interval_at(first, every);
            loop {
                tick.tick().await;
                let Some(store) = store.upgrade() else { return };
                let age = i64::try_from(upload_max_age.as_millis()).unwrap_or(i64::MAX);
                match store
                    .abort_stale_uploads(crate::partition::now_ms().saturating_sub(age))
                    .await
                {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(uploads = n, "aborted stale multipart uploads"),
                    Err(StoreError::ShuttingDown) => return,
                    Err(e) => tracing::warn!(error = %e, "aborting stale uploads failed"),
                }
                let ttl = upload_max_age.min(crate::multipart::completed::COMPLETED_TTL);
                let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
                match store
                    .forget_completed(crate::partition::now_ms().saturating_sub(ttl))
                    .await
                {
                    Ok(_) => {}
                    Err(StoreError::ShuttingDown) => return,
                    Err(e) => tracing::warn!(error = %e, "forgetting completed uploads failed"),
                }
                let ttl = i64::try_from(crate::repeat::REPEAT_TTL.as_millis()).unwrap_or(i64::MAX);
                let cutoff = crate::partition::now_ms().saturating_sub(ttl);
                match store.forget_repeats(cutoff).await {
                    Ok(_) => {}
                    Err(StoreError::ShuttingDown) => return,
                    Err(e) => tracing::warn!(error = %e, "forgetting repeatable calls failed"),
                }
                let catalog = Arc::clone(&store);
                match tokio::task::spawn_blocking(move || catalog.forget_catalog_repeats(cutoff))
                    .await
                {
                    Ok(Ok(_)) => {}
                    Ok(Err(StoreError::ShuttingDown)) => return,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "forgetting repeatable catalog calls failed")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the catalog's sweep of repeatable calls failed")
                    }
                }
                match store.compact(min_garbage, false).await {
                    Ok(r) if r.segments > 0 => tracing::info!(
                        segments = r.segments,
                        moved = r.records_moved,
                        freed = r.bytes_freed,
                        "compaction"
                    ),
                    Ok(_) => {}
                    Err(StoreError::ShuttingDown) => return,
                    Err(e) => tracing::warn!(error = %e, "compaction pass failed"),
                }
            }
        });
    }

    /// Bytes on disk: (metadata indexes incl. catalog, data volumes).
    pub fn disk_usage(&self) -> StoreResult<(u64, u64)> {
        let mut index = 0;
        let mut volumes = 0;
        for p in &self.partitions {
            index += p.index().disk_bytes()?;
            volumes += p.volumes().disk_bytes()?;
        }
        Ok((index, volumes))
    }

    /// Stop commit threads after draining what they hold, syncing everything.
    pub fn shutdown(&self) {
        for p in &self.partitions {
            p.shutdown();
        }
        if let Some(g) = self.catalog.group() {
            g.shutdown();
        }
        self.catalog.sync().ok();
    }
}

/// Usage of `bucket` summed over `partitions`.
pub(crate) fn usage_over(
    partitions: &[Arc<Partition>],
    bucket: BucketId,
) -> StoreResult<crate::record::Usage> {
    let mut total = crate::record::Usage::default();
    for p in partitions {
        let u = p.usage(bucket)?;
        total.objects += u.objects;
        total.bytes += u.bytes;
    }
    Ok(total)
}

/// The partitions a store of `total` opens: `cfg.hosted`, checked, or all.
fn hosted_ids(cfg: &StoreConfig, total: u32) -> StoreResult<Vec<crate::ids::PartitionId>> {
    let Some(ids) = &cfg.hosted else {
        return Ok((0..total).map(crate::ids::PartitionId).collect());
    };
    let mut ids = ids.clone();
    ids.sort();
    ids.dedup();
    if let Some(bad) = ids.iter().find(|p| p.0 >= total) {
        return Err(StoreError::Layout(format!(
            "{bad} asked for, but the data directory has {total} partitions"
        )));
    }
    Ok(ids)
}
