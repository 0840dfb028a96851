//! A store node: the partitions the map gives it (and the catalog, on the
//! catalog's node), served over the cluster RPC ([`crate::rpc`]).
//!
//! [`NodeService`] is the RPC [`Handler`]: it decodes each call's
//! [`proto::Envelope`], admits it through the node's lanes (weighted by
//! the caller's tenant, so a tenant spreading its load over several
//! gateways still gets one share here: [`lanes`]), runs it on the local
//! [`Store`] and encodes the reply, led by the caller's window: how many
//! of its calls the sending gateway may have in flight here
//! ([`windows`]). A call for a partition this node does
//! not host, or a catalog call on another node, is answered `WrongNode`
//! with the node's map version, so a stale sender refreshes its map and
//! retries.
//!
//! A write that carries a quota hold ([`Envelope::hold`]) runs in a task
//! of its own and gives the hold back to the catalog's desk when it is
//! done, committed or failed, even if its caller went away meanwhile: the
//! caller cannot know when that is (`crate::quota::QuotaHold::cover`).
//! The node owns the hold from the moment it decodes the call
//! (`GiveBack`): a call refused before it runs (not the leader, no
//! room in the lanes), or dropped while it waits there (its caller reset
//! the stream), gives the hold back too.

pub mod desk;
pub mod hold_rows;
pub mod lanes;
pub mod proto;
pub mod windows;

use crate::cluster::placement::GroupRef;
use crate::cluster::{MapSource, NodeId};
use crate::error::{StoreError, StoreResult};
use crate::list::RunSource;
use crate::list::merge::LocalRuns;
use crate::rpc::{Handler, Reply, WireCode, WireError};
use crate::store::{BodyStream, Store};
use bytes::Bytes;
use futures::future::BoxFuture;
use proto::{Call, Envelope, Route, decode, encode};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The RPC handler of one store node.
#[derive(Clone)]
pub struct NodeService {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<Store>,
    node: NodeId,
    map: Arc<dyn MapSource>,
    lanes: lanes::NodeLanes,
    desk: Arc<desk::QuotaDesk>,
    windows: windows::Windows,
    peers: Arc<crate::remote::RemoteStore>,
}

impl NodeService {
    /// Serve `store` as node `node` of the cluster whose map `map` gives;
    /// `cluster` is a client of every node (the catalog's quota desk reads
    /// usage through it; writes give their quota holds back through it).
    pub fn new(
        store: Arc<Store>,
        node: NodeId,
        map: Arc<dyn MapSource>,
        lanes: lanes::NodeLanes,
        cluster: Arc<crate::remote::RemoteStore>,
    ) -> NodeService {
        let usage: Arc<dyn crate::client::StoreClient> = cluster.clone();
        let desk = Arc::new(desk::QuotaDesk::new(usage, Arc::clone(&store)));
        NodeService {
            inner: Arc::new(Inner {
                store,
                node,
                map,
                lanes,
                desk,
                windows: windows::Windows::default(),
                peers: cluster,
            }),
        }
    }

    /// Quota holds the desk keeps (non-zero only on the catalog's node).
    pub fn quota_holds(&self) -> usize {
        self.inner.desk.held()
    }

    /// The node's lanes (metrics).
    pub fn lanes(&self) -> &lanes::NodeLanes {
        &self.inner.lanes
    }
}

impl Handler for NodeService {
    fn call(
        &self,
        method: String,
        args: Bytes,
        body: BodyStream,
    ) -> BoxFuture<'static, Result<Reply, WireError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.answer(&method, &args, body).await })
    }
}

/// How a call was asked, beside the call itself: its id, on a call that
/// applies once ([`crate::repeat`]), and when its sender stops waiting,
/// on one that must not take effect past that
/// ([`Call::lapses_unanswered`]).
#[derive(Clone, Copy)]
struct Asked {
    once: Option<crate::repeat::CallId>,
    not_after: Option<Instant>,
}

/// A quota hold this node owns for a write call: given back to the
/// catalog's desk when dropped, wherever the call ended (answered,
/// refused before it ran, or dropped with its caller's stream).
struct GiveBack {
    peers: Arc<crate::remote::RemoteStore>,
    id: u64,
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        self.peers.give_back_quota(self.id);
    }
}

impl Inner {
    async fn answer(
        self: &Arc<Self>,
        method: &str,
        args: &[u8],
        body: BodyStream,
    ) -> Result<Reply, WireError> {
        let env: Envelope =
            decode(args).map_err(|e| WireError::new(WireCode::BadCall, e.to_string()))?;
        if env.call.name() != method {
            return Err(WireError::new(
                WireCode::BadCall,
                format!("method {method} carries a {} call", env.call.name()),
            ));
        }
        // Its sender's wait, measured from its arrival: a call held up
        // here (lanes, leadership checks) keeps counting down.
        let not_after = env
            .answer_within_ms
            .filter(|_| env.call.lapses_unanswered())
            .map(|ms| Instant::now() + Duration::from_millis(ms));
        // Owned from here: given back however this call ends.
        let hold = env
            .hold
            .filter(|_| env.call.takes_quota())
            .map(|id| GiveBack {
                peers: Arc::clone(&self.peers),
                id,
            });
        let map_version = self.map.current().version();
        if env.call.route() == Route::Catalog && !self.hosts_catalog() {
            return Err(wrong_node(map_version, "the catalog is not on this node"));
        }
        self.check_leads(&env.call)
            .await
            .map_err(|e| self.wire_error(map_version, e))?;
        let mut permit = self
            .lanes
            .admit(env.caller.as_ref(), env.call.base_costs())
            .await
            .map_err(|e| WireError::from_store(&e))?;
        if env.call.has_data() || env.call.waits_on_peers() {
            // Its body's chunks wait for their own turns: a permit held
            // across them could hold capacity they wait for. A call that
            // waits on other nodes would hold the capacity across the
            // network: it had its turn, and runs without it.
            permit = None;
        }
        let body = self.lanes.pace(env.caller.as_ref(), body);
        let once = env.once.filter(|_| env.call.applies_once());
        let asked = Asked { once, not_after };
        let reply = self
            .run(env.call, body, hold, asked)
            .await
            .map_err(|e| self.wire_error(map_version, e))?;
        let window = env
            .caller
            .as_ref()
            .map_or(0, |c| self.windows.window(c, env.sender, env.backlog));
        Ok(self
            .lanes
            .hold_until_sent(permit, with_window(window, reply)))
    }

    /// Run `call` as `asked`; one made under quota hold `hold` in a task
    /// of its own, which gives the hold back once the call is done,
    /// however it ends, and whether or not this answer is still awaited.
    async fn run(
        self: &Arc<Self>,
        call: Call,
        body: BodyStream,
        hold: Option<GiveBack>,
        asked: Asked,
    ) -> StoreResult<Reply> {
        let Some(hold) = hold else {
            return crate::repeat::scope(asked.once, self.dispatch(call, body, asked)).await;
        };
        let me = Arc::clone(self);
        let write = tokio::spawn(async move {
            let done = crate::repeat::scope(asked.once, me.dispatch(call, body, asked)).await;
            drop(hold);
            done
        });
        write
            .await
            .map_err(|e| StoreError::Engine(format!("a write task ended: {e}")))?
    }

    /// A store error as the wire carries it: a partition this node does
    /// not host is `WrongNode` (the sender's map is stale).
    fn wire_error(&self, map_version: u64, e: StoreError) -> WireError {
        match e {
            StoreError::NotHosted(p) => {
                wrong_node(map_version, &format!("{p} is not on this node"))
            }
            e => WireError::from_store(&e),
        }
    }

    /// Refuse, with `NotLeader` and the leader this replica knows of, a
    /// call on one partition whose group this replica does not lead
    /// (calls that name several partitions check each: [`Inner::lead`]).
    async fn check_leads(&self, call: &Call) -> StoreResult<()> {
        match call.route() {
            Route::Object(bucket, key) => {
                let count = self.map.current().partition_count();
                let p = crate::hash::partition_of(bucket, key.as_bytes(), count);
                self.lead(p, call.is_read()).await
            }
            Route::Catalog => match self.store.catalog_group() {
                Some(group) => leads(group.as_ref(), call.is_read()).await,
                None => Ok(()),
            },
            Route::Named => self.lead_named(call).await,
        }
    }

    /// Whether this replica may serve a call on partition `p`: always for
    /// an unreplicated partition; for a replicated one, a read only once
    /// the leader confirmed with a quorum that it still leads and applied
    /// what committed before (read-index), a write when this replica
    /// leads (its commit then goes through the group, which refuses it if
    /// leadership moved meanwhile). `NotHosted` when `p` is not here.
    pub(crate) async fn lead(&self, p: crate::ids::PartitionId, read: bool) -> StoreResult<()> {
        match self.store.partition(p)?.group() {
            Some(group) => leads(group.as_ref(), read).await,
            None => Ok(()),
        }
    }

    /// Whether catalog calls may be answered here: on a replicated node,
    /// where its replica of the catalog's group runs (every replicated
    /// node runs one, idle where it is no member, and the group refuses
    /// calls at any replica but its leader); otherwise where the map puts
    /// the catalog.
    fn hosts_catalog(&self) -> bool {
        self.store.catalog_group().is_some() || self.map.current().catalog().contains(&self.node)
    }

    /// Refuse a call that names partitions ([`Call::named_partitions`])
    /// unless this replica leads every one of them: `NotLeader` with the
    /// hint of the first it does not lead (the client then sends each
    /// partition of the call on its own, so every hint is unambiguous).
    /// Reads, and the seal's emptiness check, wait for the read-index
    /// ([`Inner::lead`] with `read`): what they sum or list must hold
    /// every write committed before them.
    async fn lead_named(&self, call: &Call) -> StoreResult<()> {
        let read = call.is_read() || matches!(call, Call::SealBucket { .. });
        let named = call.named_partitions(self.store.partition_count());
        // In parallel: a read barrier is a round trip to a quorum.
        futures::future::try_join_all(named.into_iter().map(|p| self.lead(p, read))).await?;
        Ok(())
    }

    /// Run one call on the local store.
    async fn dispatch(&self, call: Call, body: BodyStream, asked: Asked) -> StoreResult<Reply> {
        let s = &self.store;
        match call {
            Call::Ping => reply(&()),
            Call::Groups => reply(&self.groups()),
            Call::ChangeMembers { group, change } => {
                let found = match group {
                    GroupRef::Catalog => s.catalog_group(),
                    GroupRef::Partition(p) => s.partition(p)?.group(),
                };
                let found = found.ok_or_else(|| {
                    StoreError::InvalidArgument(format!("{group} is not replicated"))
                })?;
                reply(&found.change_members(change).await?)
            }
            call @ (Call::CreateBucket { .. }
            | Call::Bucket { .. }
            | Call::ListBuckets { .. }
            | Call::SetBucketTags { .. }
            | Call::DropBucket { .. }
            | Call::CatalogDoc { .. }
            | Call::PutCatalogDoc { .. }) => {
                let store = Arc::clone(s);
                // The call's id (a task-local of this task) goes along by hand.
                let once = crate::repeat::current();
                tokio::task::spawn_blocking(move || catalog_call(&store, call, once))
                    .await
                    .map_err(|e| StoreError::Engine(format!("catalog task: {e}")))?
            }
            Call::SealBucket { bucket, partitions } => {
                reply(&s.seal_bucket_in(bucket, &partitions).await?)
            }
            Call::ReviveBucket { bucket } => reply(&s.revive_bucket(bucket).await),
            Call::ReviveBucketIn { bucket, partitions } => {
                reply(&s.revive_bucket_in(bucket, &partitions).await?)
            }
            Call::BucketUsage { bucket, partitions } => {
                reply(&s.bucket_usage_in(bucket, &partitions)?)
            }
            Call::BucketPending { bucket, partitions } => {
                reply(&s.bucket_pending_in(bucket, &partitions)?)
            }
            Call::BucketsTotals {
                buckets,
                partitions,
            } => reply(&s.buckets_totals_in(&buckets, &partitions)?),
            Call::ListRuns {
                bucket,
                query,
                reqs,
            } => self.list_runs(bucket, query, reqs).await,
            Call::ListMultipartUploads {
                bucket,
                query,
                partitions,
            } => reply(&s.list_multipart_uploads_in(&bucket, &query, &partitions)?),
            Call::QuotaReserve {
                tenant,
                limits,
                ask,
            } => {
                let named = asked.once.map(|id| desk::hold_id(&id));
                let held = self
                    .desk
                    .reserve(named, &tenant, &limits, &ask, asked.not_after);
                reply(&held.await?)
            }
            Call::QuotaRelease { id } => reply(&self.desk.release(id).await?),
            object => self.object_call(object, body).await,
        }
    }

    /// Calls on one object (or its uploads).
    async fn object_call(&self, call: Call, body: BodyStream) -> StoreResult<Reply> {
        let s = &self.store;
        match call {
            Call::PutObject {
                bucket,
                key,
                meta,
                opts,
                cond,
            } => reply(
                &s.put_object_if(&bucket, &key, meta, opts, body, cond)
                    .await?,
            ),
            Call::HeadObject { bucket, key } => reply(&s.head_object(&bucket, &key)?),
            Call::GetObject { bucket, key, range } => {
                let (info, data) = s.get_object(&bucket, &key, range)?;
                Ok(Reply {
                    payload: Bytes::from(encode(&info)?),
                    body: Some(data),
                })
            }
            Call::DeleteObject { bucket, key } => reply(&s.delete_object(&bucket, &key).await?),
            Call::EditTags { bucket, keys, edit } => {
                reply(&s.edit_tags(&bucket, keys, edit).await?)
            }
            Call::PutObjectTags { bucket, key, tags } => {
                reply(&s.put_object_tags(&bucket, &key, tags).await?)
            }
            Call::ReplaceObjectMeta {
                bucket,
                key,
                meta,
                tags,
            } => reply(&s.replace_object_meta(&bucket, &key, meta, tags).await?),
            Call::ObjectPartRange {
                bucket,
                key,
                number,
            } => reply(&s.object_part_range(&bucket, &key, number)?),
            Call::ObjectWithParts { bucket, key } => reply(&s.object_with_parts(&bucket, &key)?),
            other => self.upload_call(other, body).await,
        }
    }

    /// Multipart upload calls.
    async fn upload_call(&self, call: Call, body: BodyStream) -> StoreResult<Reply> {
        let s = &self.store;
        match call {
            Call::CreateMultipartUpload {
                bucket,
                key,
                meta,
                tags,
                checksum,
            } => reply(
                &s.create_multipart_upload_with(&bucket, &key, meta, tags, checksum)
                    .await?,
            ),
            Call::UploadPart {
                bucket,
                key,
                upload_id,
                number,
                opts,
            } => reply(
                &s.upload_part(&bucket, &key, &upload_id, number, opts, body)
                    .await?,
            ),
            Call::CompleteMultipartUpload {
                bucket,
                key,
                upload_id,
                parts,
                cond,
                whole,
            } => reply(
                &s.complete_multipart_upload_with(&bucket, &key, &upload_id, parts, cond, whole)
                    .await?,
            ),
            Call::RepeatedCompletion {
                bucket,
                key,
                upload_id,
                parts,
            } => reply(&s.repeated_completion(&bucket, &key, &upload_id, &parts)?),
            Call::PartSize {
                bucket,
                key,
                upload_id,
                number,
            } => reply(&s.part_size(&bucket, &key, &upload_id, number)?),
            Call::AbortMultipartUpload {
                bucket,
                key,
                upload_id,
            } => reply(&s.abort_multipart_upload(&bucket, &key, &upload_id).await?),
            Call::UploadChecksum {
                bucket,
                key,
                upload_id,
            } => reply(&s.upload_checksum(&bucket, &key, &upload_id)?),
            Call::ListParts {
                bucket,
                key,
                upload_id,
                marker,
                max,
            } => reply(&s.list_parts(&bucket, &key, &upload_id, marker, max)?),
            other => Err(StoreError::InvalidArgument(format!(
                "{} is not a call of this node",
                other.name()
            ))),
        }
    }

    /// The state of every replication group this node holds a replica of
    /// (as a voter or a learner: a replicated node opens every partition,
    /// and a partition it is no member of, never or no longer, is not
    /// reported).
    fn groups(&self) -> Vec<proto::GroupReport> {
        let catalog = self
            .store
            .catalog_group()
            .and_then(|g| member_report("catalog".into(), None, g.status()));
        let partitions = self.store.partitions().iter().filter_map(|p| {
            let status = p.group()?.status();
            member_report(p.id().to_string(), Some(p.id()), status)
        });
        catalog.into_iter().chain(partitions).collect()
    }

    /// LIST runs of partitions of this node, read on a blocking thread
    /// (index scans).
    async fn list_runs(
        &self,
        bucket: crate::ids::BucketId,
        query: crate::list::ListQuery,
        reqs: Vec<crate::list::run::RunRequest>,
    ) -> StoreResult<Reply> {
        let store = Arc::clone(&self.store);
        let runs = tokio::task::spawn_blocking(move || {
            let local = LocalRuns {
                partitions: store.partitions(),
            };
            futures::executor::block_on(local.fetch(bucket, &query, reqs))
        })
        .await
        .map_err(|e| StoreError::Engine(format!("list task: {e}")))??;
        reply(&runs)
    }
}

/// A catalog call on the local store, with its id if it applies once.
/// Blocking: index reads, and a replicated catalog's writes wait for
/// their group.
fn catalog_call(s: &Store, call: Call, once: Option<crate::repeat::CallId>) -> StoreResult<Reply> {
    match call {
        Call::CreateBucket {
            tenant,
            name,
            region,
        } => reply(&s.create_bucket(&tenant, &name, &region)?),
        Call::Bucket { tenant, name } => reply(&s.bucket(&tenant, &name)?),
        Call::ListBuckets { tenant } => reply(&s.list_buckets(&tenant)?),
        Call::SetBucketTags { tenant, name, tags } => {
            reply(&s.set_bucket_tags(&tenant, &name, tags, once)?)
        }
        Call::DropBucket { tenant, name } => reply(&s.drop_bucket_record(&tenant, &name)?),
        Call::CatalogDoc { name } => reply(&s.catalog_doc(&name)?),
        Call::PutCatalogDoc {
            name,
            expected,
            body: doc,
        } => reply(&s.put_catalog_doc(&name, expected, &doc)?),
        other => Err(StoreError::InvalidArgument(format!(
            "{} is not a catalog call",
            other.name()
        ))),
    }
}

/// Whether this replica of `group` may serve a read (read-index: it
/// confirmed with a quorum that it leads, and applied what committed
/// before) or a write (it leads now; its commit goes through the group,
/// which refuses it if leadership moved since). `NotLeader` with the
/// leader it knows of otherwise.
async fn leads(group: &dyn crate::replication::Group, read: bool) -> StoreResult<()> {
    if read {
        return group.read_barrier().await;
    }
    let status = group.status();
    if status.leader == Some(status.me) {
        Ok(())
    } else {
        Err(StoreError::NotLeader(status.leader))
    }
}

/// A group's report, if this replica is one of its voters or learners
/// (an idle replica, never or no longer a member, is not reported).
fn member_report(
    group: String,
    partition: Option<crate::ids::PartitionId>,
    status: crate::replication::GroupStatus,
) -> Option<proto::GroupReport> {
    let member = status.voters.contains(&status.me) || status.learners.contains(&status.me);
    member.then_some(proto::GroupReport {
        group,
        partition,
        status,
    })
}

/// `reply` with the caller's window in front of its payload.
fn with_window(window: u32, reply: Reply) -> Reply {
    let mut payload = Vec::with_capacity(4 + reply.payload.len());
    payload.extend_from_slice(&window.to_be_bytes());
    payload.extend_from_slice(&reply.payload);
    Reply {
        payload: Bytes::from(payload),
        body: reply.body,
    }
}

/// A reply without data.
fn reply<T: Serialize>(v: &T) -> StoreResult<Reply> {
    Ok(Reply::payload(Bytes::from(encode(v)?)))
}

fn wrong_node(map_version: u64, why: &str) -> WireError {
    WireError::new(WireCode::WrongNode { map_version }, why)
}
