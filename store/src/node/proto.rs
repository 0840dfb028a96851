//! The calls a store node answers, as data: [`Call`] is every operation of
//! the store-client trait that crosses the network, plus the cluster's own
//! steps (sealing a bucket on each node before DeleteBucket removes it,
//! fetching LIST runs of several partitions at once).
//!
//! A call travels as an [`Envelope`] (bincode) in the RPC's argument frame:
//! the call, the caller (tenant and weight, for the node's lanes), the
//! map version the sender routed by, and the sender's backlog for the
//! caller. A successful answer's payload starts with the caller's window
//! at this node (4 bytes, big-endian; 0 without a caller), then the
//! call's reply. Its method name in the URL is
//! [`Call::name`]. Each call's reply type is fixed by the call and named
//! beside its variant; the node encodes it with [`encode`], the client
//! decodes it with [`decode`].
//!
//! Where a call goes is decided here too ([`Call::route`]), so the client
//! and the node agree: a partition's calls to the replica leading it,
//! bucket and registry calls to the catalog's, and the calls that cover
//! several partitions ([`Route::Named`]) name them
//! ([`Call::named_partitions`]), so a node answers for exactly those (with
//! three replicas every node hosts most partitions: a total over "the
//! partitions here" would count each object three times).
//!
//! And whether a call may be sent again after a failure that leaves its
//! outcome unknown ([`Call::may_repeat`]): the one rule the client's
//! failover follows.

use crate::caller::Caller;
use crate::cluster::placement::GroupRef;
use crate::commit::WriteCond;
use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, PartitionId, TenantId};
use crate::list::ListQuery;
use crate::list::run::RunRequest;
use crate::multipart::{ListedPart, UploadChecksum};
use crate::quota::{QuotaAsk, QuotaLimits};
use crate::record::{Checksum, ObjectMeta, Tag};
use crate::store::{BucketInfo, GetRange, PutOptions};
use crate::uploads::UploadQuery;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// One call and what it was sent with.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// The operation.
    pub call: Call,
    /// Who it is for (lanes at the node); `None` for the cluster's own.
    pub caller: Option<Caller>,
    /// The partition map version the sender routed by.
    pub map_version: u64,
    /// The sending process (a gateway's random id; 0 for others).
    pub sender: u64,
    /// The sender's calls of this caller to this node, in flight or
    /// waiting for its window ([`crate::node::windows`]).
    pub backlog: u32,
    /// The quota desk's id of the hold this write is made under, which
    /// the node gives back once the write is done (only on calls that
    /// [`Call::takes_quota`]; `crate::quota::QuotaHold::cover`).
    pub hold: Option<u64>,
    /// The call's id, the same for all its attempts, on calls that apply
    /// once however often they are sent ([`Call::applies_once`],
    /// [`crate::repeat`]) to a replicated group.
    pub once: Option<crate::repeat::CallId>,
    /// How long (ms, from when the call was sent) its sender waits for
    /// the answer, on calls that must not take effect once nobody waits
    /// for it ([`Call::lapses_unanswered`]): past it, a reservation makes
    /// no hold, since its sender will have given the id back.
    pub answer_within_ms: Option<u64>,
}

/// Every operation a store node answers (the reply type in brackets).
#[derive(Debug, Serialize, Deserialize)]
pub enum Call {
    /// Liveness (`()`).
    Ping,
    /// Create a bucket (BucketInfo). Catalog.
    CreateBucket {
        /// Owner.
        tenant: TenantId,
        /// Name.
        name: String,
        /// Region.
        region: String,
    },
    /// Look a bucket up (BucketInfo). Catalog.
    Bucket {
        /// Owner.
        tenant: TenantId,
        /// Name.
        name: String,
    },
    /// A tenant's buckets (`Vec<BucketInfo>`). Catalog.
    ListBuckets {
        /// Owner.
        tenant: TenantId,
    },
    /// Replace a bucket's tags (`()`). Catalog.
    SetBucketTags {
        /// Owner.
        tenant: TenantId,
        /// Name.
        name: String,
        /// The tag set.
        tags: Vec<Tag>,
    },
    /// Refuse further writes into a bucket at this node, after checking
    /// that `partitions` (which this node leads) hold none of its objects
    /// (`()`). Sent to the leaders of every partition, and with no
    /// partitions to every other node (see `RemoteStore::delete_bucket`).
    SealBucket {
        /// The bucket.
        bucket: BucketId,
        /// The partitions to check empty.
        partitions: Vec<PartitionId>,
    },
    /// Undo a seal (`()`). Every node (a seal is the node's, not a
    /// partition's).
    ReviveBucket {
        /// The bucket.
        bucket: BucketId,
    },
    /// Remove the catalog record of a sealed bucket (`()`). Catalog.
    DropBucket {
        /// Owner.
        tenant: TenantId,
        /// Name.
        name: String,
    },
    /// Usage over `partitions` (Usage). Their leaders.
    BucketUsage {
        /// The bucket.
        bucket: BucketId,
        /// The partitions to sum.
        partitions: Vec<PartitionId>,
    },
    /// Open uploads over `partitions` (Pending). Their leaders.
    BucketPending {
        /// The bucket.
        bucket: BucketId,
        /// The partitions to sum.
        partitions: Vec<PartitionId>,
    },
    /// Store an object from the data stream (ObjectInfo).
    PutObject {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Client metadata.
        meta: ObjectMeta,
        /// Checks and options.
        opts: PutOptions,
        /// Precondition.
        cond: WriteCond,
    },
    /// An object's metadata (ObjectInfo).
    HeadObject {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
    },
    /// An object's metadata, then its bytes as the reply's data (ObjectInfo).
    GetObject {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Byte range.
        range: Option<GetRange>,
    },
    /// Delete an object (bool: it existed).
    DeleteObject {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
    },
    /// Replace an object's tags (`()`).
    PutObjectTags {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// The tag set.
        tags: Vec<Tag>,
    },
    /// Apply a bulk tag edit to keys of partitions this node leads
    /// (EditCounts). Their leaders.
    EditTags {
        /// Bucket.
        bucket: BucketInfo,
        /// Keys.
        keys: Vec<String>,
        /// The edit.
        edit: crate::tagindex::TagEdit,
    },
    /// Replace an object's metadata in place (ObjectInfo).
    ReplaceObjectMeta {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// New metadata.
        meta: ObjectMeta,
        /// New tags, if replaced.
        tags: Option<Vec<Tag>>,
    },
    /// LIST runs of several partitions this node leads (`Vec<Run>`).
    ListRuns {
        /// Bucket.
        bucket: BucketId,
        /// The listing.
        query: ListQuery,
        /// One run each.
        reqs: Vec<RunRequest>,
    },
    /// A part's byte range ((GetRange, u32)).
    ObjectPartRange {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Part number.
        number: u32,
    },
    /// An object and its parts ((ObjectInfo, Vec<ObjectPart>)).
    ObjectWithParts {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
    },
    /// Start an upload (String: its id).
    CreateMultipartUpload {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Metadata.
        meta: ObjectMeta,
        /// Tags.
        tags: Vec<Tag>,
        /// Checksum algorithm and type.
        checksum: Option<UploadChecksum>,
    },
    /// Store a part from the data stream (PartInfo).
    UploadPart {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Upload.
        upload_id: String,
        /// Part number.
        number: u32,
        /// Checks.
        opts: PutOptions,
    },
    /// Complete an upload (ObjectInfo).
    CompleteMultipartUpload {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Upload.
        upload_id: String,
        /// The client's part list.
        parts: Vec<ListedPart>,
        /// Precondition.
        cond: WriteCond,
        /// The client's whole-object checksum.
        whole: Option<Checksum>,
    },
    /// The answer of an earlier completion (ObjectInfo).
    RepeatedCompletion {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Upload.
        upload_id: String,
        /// The client's part list.
        parts: Vec<ListedPart>,
    },
    /// A stored part's size (`Option<u64>`).
    PartSize {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Upload.
        upload_id: String,
        /// Part number.
        number: u32,
    },
    /// Abort an upload (`()`).
    AbortMultipartUpload {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Upload.
        upload_id: String,
    },
    /// An upload's checksum (`Option<UploadChecksum>`).
    UploadChecksum {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Upload.
        upload_id: String,
    },
    /// A page of an upload's parts ((Vec<PartInfo>, bool)).
    ListParts {
        /// Bucket.
        bucket: BucketInfo,
        /// Key.
        key: String,
        /// Upload.
        upload_id: String,
        /// After this part number.
        marker: u32,
        /// At most this many.
        max: usize,
    },
    /// A page of the open uploads of `partitions` (UploadPage). Their
    /// leaders.
    ListMultipartUploads {
        /// Bucket.
        bucket: BucketInfo,
        /// The listing.
        query: UploadQuery,
        /// The partitions to list.
        partitions: Vec<PartitionId>,
    },
    /// A catalog document (`Option<(u64, Vec<u8>)>`). Catalog.
    CatalogDoc {
        /// Its name.
        name: String,
    },
    /// Replace a catalog document by version (u64). Catalog.
    PutCatalogDoc {
        /// Its name.
        name: String,
        /// The version it replaces.
        expected: u64,
        /// The new content.
        body: Vec<u8>,
    },
    /// Reserve quota for a write (`Option<u64>`: the hold's id, which is
    /// the call's id's when it carries one: [`Call::applies_once`]).
    /// Catalog.
    QuotaReserve {
        /// The tenant.
        tenant: TenantId,
        /// Its limits.
        limits: QuotaLimits,
        /// What the write asks.
        ask: QuotaAsk,
    },
    /// Give a hold back (`()`). Catalog.
    QuotaRelease {
        /// The hold's id.
        id: u64,
    },
    /// The replication groups of this node, as it sees them
    /// (`Vec<GroupReport>`; empty when the node does not replicate). Named.
    Groups,
    /// Change who holds a group (`()`), at its leader. Catalog for the
    /// catalog's group; Named (the partition) for a partition's.
    ChangeMembers {
        /// The group.
        group: GroupRef,
        /// The change.
        change: crate::replication::MemberChange,
    },
    /// Undo the seal of a bucket in `partitions`, which this node leads
    /// (`()`): their seal rows, written through their groups, and this
    /// node's own seal. Sent to the leaders of every partition after a
    /// replicated DeleteBucket failed (`RemoteStore::delete_bucket`).
    ReviveBucketIn {
        /// The bucket.
        bucket: BucketId,
        /// The partitions whose seal rows go.
        partitions: Vec<PartitionId>,
    },
    /// Usage and open uploads of every bucket of `buckets`, summed over
    /// them and over `partitions` (`(Usage, Pending)`): a tenant's
    /// totals in one call per node, whatever its number of buckets.
    /// Their leaders.
    BucketsTotals {
        /// The buckets (one tenant's).
        buckets: Vec<BucketId>,
        /// The partitions to sum.
        partitions: Vec<PartitionId>,
    },
}

/// One replication group at one node (`laneway cluster status`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GroupReport {
    /// `catalog`, or the partition (`p0003`).
    pub group: String,
    /// The partition (`None`: the catalog's group).
    pub partition: Option<crate::ids::PartitionId>,
    /// The group's state at this replica.
    pub status: crate::replication::GroupStatus,
}

/// Where a call is sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// The node hosting the partition of this object.
    Object(BucketId, &'a str),
    /// The catalog's node.
    Catalog,
    /// A node the caller names, for the partitions the call names
    /// ([`Call::named_partitions`]; none: a step of the node itself).
    Named,
}

impl Call {
    /// The method name in the call's URL (and its signature).
    pub fn name(&self) -> &'static str {
        match self {
            Call::Ping => "ping",
            Call::CreateBucket { .. } => "create_bucket",
            Call::Bucket { .. } => "bucket",
            Call::ListBuckets { .. } => "list_buckets",
            Call::SetBucketTags { .. } => "set_bucket_tags",
            Call::SealBucket { .. } => "seal_bucket",
            Call::ReviveBucket { .. } => "revive_bucket",
            Call::DropBucket { .. } => "drop_bucket",
            Call::BucketUsage { .. } => "bucket_usage",
            Call::BucketPending { .. } => "bucket_pending",
            Call::PutObject { .. } => "put_object",
            Call::HeadObject { .. } => "head_object",
            Call::GetObject { .. } => "get_object",
            Call::DeleteObject { .. } => "delete_object",
            Call::PutObjectTags { .. } => "put_object_tags",
            Call::EditTags { .. } => "edit_tags",
            Call::ReplaceObjectMeta { .. } => "replace_object_meta",
            Call::ListRuns { .. } => "list_runs",
            Call::ObjectPartRange { .. } => "object_part_range",
            Call::ObjectWithParts { .. } => "object_with_parts",
            Call::CreateMultipartUpload { .. } => "create_multipart_upload",
            Call::UploadPart { .. } => "upload_part",
            Call::CompleteMultipartUpload { .. } => "complete_multipart_upload",
            Call::RepeatedCompletion { .. } => "repeated_completion",
            Call::PartSize { .. } => "part_size",
            Call::AbortMultipartUpload { .. } => "abort_multipart_upload",
            Call::UploadChecksum { .. } => "upload_checksum",
            Call::ListParts { .. } => "list_parts",
            Call::ListMultipartUploads { .. } => "list_multipart_uploads",
            Call::CatalogDoc { .. } => "catalog_doc",
            Call::PutCatalogDoc { .. } => "put_catalog_doc",
            Call::QuotaReserve { .. } => "quota_reserve",
            Call::QuotaRelease { .. } => "quota_release",
            Call::Groups => "groups",
            Call::ChangeMembers { .. } => "change_members",
            Call::ReviveBucketIn { .. } => "revive_bucket_in",
            Call::BucketsTotals { .. } => "buckets_totals",
        }
    }

    /// Where the call goes.
    pub fn route(&self) -> Route<'_> {
        match self {
            Call::CreateBucket { .. }
            | Call::Bucket { .. }
            | Call::ListBuckets { .. }
            | Call::SetBucketTags { .. }
            | Call::DropBucket { .. }
            | Call::CatalogDoc { .. }
            | Call::PutCatalogDoc { .. }
            | Call::QuotaReserve { .. }
            | Call::QuotaRelease { .. }
            | Call::ChangeMembers {
                group: GroupRef::Catalog,
                ..
            } => Route::Catalog,
            Call::Ping
            | Call::Groups
            | Call::ChangeMembers { .. }
            | Call::SealBucket { .. }
            | Call::ReviveBucket { .. }
            | Call::ReviveBucketIn { .. }
            | Call::BucketUsage { .. }
            | Call::BucketPending { .. }
            | Call::BucketsTotals { .. }
            | Call::ListRuns { .. }
            | Call::EditTags { .. }
            | Call::ListMultipartUploads { .. } => Route::Named,
            Call::PutObject { bucket, key, .. }
            | Call::HeadObject { bucket, key }
            | Call::GetObject { bucket, key, .. }
            | Call::DeleteObject { bucket, key }
            | Call::PutObjectTags { bucket, key, .. }
            | Call::ReplaceObjectMeta { bucket, key, .. }
            | Call::ObjectPartRange { bucket, key, .. }
            | Call::ObjectWithParts { bucket, key }
            | Call::CreateMultipartUpload { bucket, key, .. }
            | Call::UploadPart { bucket, key, .. }
            | Call::CompleteMultipartUpload { bucket, key, .. }
            | Call::RepeatedCompletion { bucket, key, .. }
            | Call::PartSize { bucket, key, .. }
            | Call::AbortMultipartUpload { bucket, key, .. }
            | Call::UploadChecksum { bucket, key, .. }
            | Call::ListParts { bucket, key, .. } => Route::Object(bucket.id, key),
        }
    }

    /// Whether the call must not take effect at the node once its sender
    /// stopped waiting for the answer (a quota reservation: its sender
    /// then gives the hold's id back, and a hold made after that would
    /// be counted until it lapses). Such calls carry how long the sender
    /// waits ([`Envelope::answer_within_ms`]).
    pub fn lapses_unanswered(&self) -> bool {
        matches!(self, Call::QuotaReserve { .. })
    }

    /// Whether the call is a write a quota hold is reserved for (it
    /// carries the hold to the node, which gives it back once done).
    pub fn takes_quota(&self) -> bool {
        self.quota_object().is_some()
    }

    /// The bucket and key of a write a quota hold is reserved for; `None`
    /// for any other call (the one list of such writes).
    pub fn quota_object(&self) -> Option<(&BucketInfo, &str)> {
        match self {
            Call::PutObject { bucket, key, .. }
            | Call::UploadPart { bucket, key, .. }
            | Call::CompleteMultipartUpload { bucket, key, .. }
            | Call::CreateMultipartUpload { bucket, key, .. } => Some((bucket, key)),
            _ => None,
        }
    }

    /// Whether the node's work on the call is mostly waiting on other
    /// nodes: a quota reservation (the tenant's usage read from every
    /// node, its hold's row committed through the catalog's group) or
    /// release (the row's delete committed). It takes its turn in the
    /// lanes but holds no capacity while it waits (`crate::node`).
    pub fn waits_on_peers(&self) -> bool {
        matches!(self, Call::QuotaReserve { .. } | Call::QuotaRelease { .. })
    }

    /// Whether the call streams a body after its arguments.
    pub fn has_data(&self) -> bool {
        matches!(self, Call::PutObject { .. } | Call::UploadPart { .. })
    }

    /// Whether the call only reads (a replicated node confirms it still
    /// leads, with a quorum, before it answers one: a linearizable read).
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Call::Bucket { .. }
                | Call::ListBuckets { .. }
                | Call::CatalogDoc { .. }
                | Call::BucketUsage { .. }
                | Call::BucketPending { .. }
                | Call::BucketsTotals { .. }
                | Call::ListRuns { .. }
                | Call::ListMultipartUploads { .. }
                | Call::HeadObject { .. }
                | Call::GetObject { .. }
                | Call::ObjectPartRange { .. }
                | Call::ObjectWithParts { .. }
                | Call::RepeatedCompletion { .. }
                | Call::PartSize { .. }
                | Call::UploadChecksum { .. }
                | Call::ListParts { .. }
        )
    }

    /// The partitions a [`Route::Named`] call covers, under a map of
    /// `count` partitions (the node checks it leads each before it
    /// answers); empty for every other call, and for the node-wide steps
    /// (Ping, ReviveBucket, a SealBucket that only seals).
    pub fn named_partitions(&self, count: u32) -> Vec<PartitionId> {
        match self {
            Call::SealBucket { partitions, .. }
            | Call::ReviveBucketIn { partitions, .. }
            | Call::BucketUsage { partitions, .. }
            | Call::BucketPending { partitions, .. }
            | Call::BucketsTotals { partitions, .. }
            | Call::ListMultipartUploads { partitions, .. } => partitions.clone(),
            Call::ListRuns { reqs, .. } => reqs.iter().map(|r| r.partition).collect(),
            Call::ChangeMembers {
                group: GroupRef::Partition(p),
                ..
            } => vec![*p],
            Call::EditTags { bucket, keys, .. } => {
                let mut ps: Vec<PartitionId> = keys
                    .iter()
                    .map(|k| crate::hash::partition_of(bucket.id, k.as_bytes(), count))
                    .collect();
                ps.sort();
                ps.dedup();
                ps
            }
            _ => Vec::new(),
        }
    }

    /// Whether the call may be sent again after a failure that leaves its
    /// outcome unknown (no answer within the deadline, the connection lost
    /// after the call went out): the node may have done it, so only a call
    /// whose second run answers as the first (or whose difference the
    /// client resolves) is repeated. A refusal that says the call did
    /// nothing (`NotLeader`, `WrongNode`, no connection) is always safe to
    /// send elsewhere; this rule is for the unknown case only.
    ///
    /// - Reads, and the idempotent writes: PutObjectTags, DeleteObject (a
    ///   repeat answers "did not exist", which S3 does not show),
    ///   ReplaceObjectMeta (no precondition), EditTags ("applying it twice
    ///   is applying it once"), SealBucket, ReviveBucket(In), SetBucketTags,
    ///   QuotaRelease, ChangeMembers (adding a learner twice, or setting
    ///   the voters it already has, changes nothing).
    /// - QuotaReserve to a replicated catalog: its hold is named by the
    ///   call's id ([`Call::applies_once`]), and a desk that holds it
    ///   answers a repeat with it (`crate::node::desk`).
    /// - AbortMultipartUpload and an unconditional
    ///   CompleteMultipartUpload: a repeat after the first took effect
    ///   finds no upload, which the client reads as that effect (a
    ///   completion asks RepeatedCompletion for the object it made).
    /// - Never: a write with a data stream (the stream is spent), a
    ///   conditional write (a repeat would test the precondition against
    ///   the first run's own result), CreateMultipartUpload (a second
    ///   upload id), CreateBucket and DropBucket (a repeat answers
    ///   "exists" / "no such bucket"), PutCatalogDoc (conditional on its
    ///   version).
    pub fn may_repeat(&self) -> bool {
        if self.is_read() {
            return true;
        }
        match self {
            Call::Ping
            | Call::ChangeMembers { .. }
            | Call::PutObjectTags { .. }
            | Call::DeleteObject { .. }
            | Call::ReplaceObjectMeta { .. }
            | Call::EditTags { .. }
            | Call::SealBucket { .. }
            | Call::ReviveBucket { .. }
            | Call::ReviveBucketIn { .. }
            | Call::SetBucketTags { .. }
            | Call::QuotaRelease { .. }
            | Call::QuotaReserve { .. }
            | Call::AbortMultipartUpload { .. } => true,
            Call::CompleteMultipartUpload { cond, .. } => *cond == WriteCond::None,
            _ => false,
        }
    }

    /// Whether a repeat of this call after an attempt of unknown outcome
    /// is answered from that attempt's row when it committed
    /// ([`crate::repeat`]): the object writes the gateway sends again
    /// ([`Call::may_repeat`]) whose repeat could undo another client's
    /// write, and the catalog's bucket tagging (its row is the catalog's:
    /// [`crate::catalog::Catalog::set_tags`]); and a quota reservation,
    /// whose hold is named by the id, so a repeat finds it
    /// (`crate::node::desk`).
    pub fn applies_once(&self) -> bool {
        matches!(
            self,
            Call::DeleteObject { .. }
                | Call::PutObjectTags { .. }
                | Call::ReplaceObjectMeta { .. }
                | Call::EditTags { .. }
                | Call::SetBucketTags { .. }
                | Call::QuotaReserve { .. }
        )
    }

    /// The call's index work in base costs of the node's lanes (one; a
    /// LIST fetch one per partition run it reads). Bodies add their bytes.
    pub fn base_costs(&self) -> u64 {
        match self {
            Call::ListRuns { reqs, .. } => u64::try_from(reqs.len()).unwrap_or(1).max(1),
            _ => 1,
        }
    }
}

/// Bincode of a reply or an envelope.
pub fn encode<T: Serialize>(v: &T) -> StoreResult<Vec<u8>> {
    bincode::serialize(v).map_err(|e| StoreError::Engine(format!("encoding a call: {e}")))
}

/// A reply or envelope from bincode.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> StoreResult<T> {
    // Bounded: frames are at most MAX_FRAME, and bincode's default options
    // take lengths from the input, so the limit keeps a hostile length
    // prefix from allocating past it.
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(crate::rpc::wire::MAX_FRAME as u64)
        .deserialize(bytes)
        .map_err(|e| StoreError::Engine(format!("decoding a call: {e}")))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A bucket for calls made in tests.
    pub(crate) fn bucket() -> BucketInfo {
        BucketInfo {
            id: BucketId(7),
            tenant: TenantId("t".into()),
            name: "b".into(),
            created_ms: 0,
            region: "r".into(),
            tags: Vec::new(),
        }
    }

    fn complete(cond: WriteCond) -> Call {
        Call::CompleteMultipartUpload {
            bucket: bucket(),
            key: "k".into(),
            upload_id: "u".into(),
            parts: Vec::new(),
            cond,
            whole: None,
        }
    }

    #[test]
    fn only_calls_whose_repeat_answers_as_the_first_may_repeat() {
        let (b, key) = (bucket(), String::from("k"));
        let repeat = [
            Call::HeadObject {
                bucket: b.clone(),
                key: key.clone(),
            },
            Call::DeleteObject {
                bucket: b.clone(),
                key: key.clone(),
            },
            Call::AbortMultipartUpload {
                bucket: b.clone(),
                key: key.clone(),
                upload_id: "u".into(),
            },
            complete(WriteCond::None),
            Call::SealBucket {
                bucket: b.id,
                partitions: Vec::new(),
            },
            Call::ReviveBucketIn {
                bucket: b.id,
                partitions: vec![PartitionId(1)],
            },
        ];
        for call in &repeat {
            assert!(call.may_repeat(), "{}", call.name());
        }
        let once = [
            complete(WriteCond::IfAbsent),
            Call::CreateMultipartUpload {
                bucket: b.clone(),
                key: key.clone(),
                meta: ObjectMeta::default(),
                tags: Vec::new(),
                checksum: None,
            },
            Call::PutObject {
                bucket: b.clone(),
                key,
                meta: ObjectMeta::default(),
                opts: PutOptions::default(),
                cond: WriteCond::None,
            },
            Call::CreateBucket {
                tenant: b.tenant.clone(),
                name: "b".into(),
                region: "r".into(),
            },
            Call::PutCatalogDoc {
                name: "d".into(),
                expected: 1,
                body: Vec::new(),
            },
        ];
        for call in &once {
            assert!(!call.may_repeat(), "{}", call.name());
        }
    }

    #[test]
    fn named_calls_name_each_partition_once() {
        let b = bucket();
        let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
        let edit = Call::EditTags {
            bucket: b.clone(),
            keys: keys.clone(),
            edit: crate::tagindex::TagEdit::default(),
        };
        let mut want: Vec<PartitionId> = keys
            .iter()
            .map(|k| crate::hash::partition_of(b.id, k.as_bytes(), 8))
            .collect();
        want.sort();
        want.dedup();
        assert_eq!(edit.named_partitions(8), want);
        let usage = Call::BucketUsage {
            bucket: b.id,
            partitions: vec![PartitionId(3), PartitionId(5)],
        };
        assert_eq!(
            usage.named_partitions(8),
            vec![PartitionId(3), PartitionId(5)]
        );
        assert!(
            Call::ReviveBucket { bucket: b.id }
                .named_partitions(8)
                .is_empty()
        );
        let revive = Call::ReviveBucketIn {
            bucket: b.id,
            partitions: vec![PartitionId(2)],
        };
        assert_eq!(revive.named_partitions(8), vec![PartitionId(2)]);
        assert!(complete(WriteCond::None).named_partitions(8).is_empty());
    }
}
