//! The store-client suite: every operation of the `StoreClient` trait,
//! run against the in-process store (`LocalStore`) and against a cluster
//! of three store nodes reached over the RPC (`RemoteStore`), with the
//! same expectations. The cluster run also checks what only a cluster
//! has: a node that is down fails the calls routed to it (and a LIST) with
//! Unavailable, and only those.

#![allow(clippy::cast_possible_truncation)] // test data patterns

mod common;

use common::{body, tenant};
use futures::StreamExt;
use laneway_store::client::StoreClient;
use laneway_store::cluster::{FileMapSource, InitSpec, MapSource, NodeId, init_cluster};
use laneway_store::multipart::ListedPart;
use laneway_store::node::NodeService;
use laneway_store::node::lanes::NodeLanes;
use laneway_store::quota::{QuotaAsk, QuotaLimits};
use laneway_store::remote::RemoteStore;
use laneway_store::rpc::{
    CallOptions, Handler, Reply, RpcServer, ServerOptions, Signer, WireCode, WireError,
};
use laneway_store::{
    BodyStream, BucketInfo, GetRange, ListEntry, ListQuery, LocalStore, PutOptions, Resume, Store,
    StoreConfig, StoreError, Tag, UploadQuery, WriteCond,
};
use std::sync::Arc;
use std::time::Duration;

const MIN_PART: u64 = 1024;
const PARTITIONS: u32 = 8;

fn config(hosted: Option<Vec<laneway_store::PartitionId>>) -> StoreConfig {
    StoreConfig {
        partitions: Some(PARTITIONS),
        min_part_size: MIN_PART,
        inline_max: 1024,
        hosted,
        ..StoreConfig::default()
    }
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn opts(len: usize) -> PutOptions {
    PutOptions {
        content_length: Some(len as u64),
        ..PutOptions::default()
    }
}

async fn read_all(mut s: BodyStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.expect("body chunk"));
    }
    out
}

async fn put(c: &dyn StoreClient, b: &BucketInfo, key: &str, d: &[u8]) {
    c.put_object(
        b,
        key,
        Default::default(),
        opts(d.len()),
        body(d),
        WriteCond::None,
    )
    .await
    .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

async fn list_keys(c: &dyn StoreClient, b: &BucketInfo, page: usize) -> Vec<String> {
    let mut keys = Vec::new();
    let mut resume = Resume::Start;
    loop {
        let q = ListQuery {
            tags: Vec::new(),
            prefix: String::new(),
            delimiter: None,
            resume: resume.clone(),
            max_keys: page,
        };
        let p = c.list_objects(b, q).await.expect("list");
        for e in &p.entries {
            if let ListEntry::Object(o) = e {
                keys.push(o.key.clone());
            }
        }
        match (p.truncated, p.next) {
            (true, Some(next)) => resume = next,
            _ => return keys,
        }
    }
}

fn md5_of(etag: &str) -> [u8; 16] {
    let mut md5 = [0u8; 16];
    hex::decode_to_slice(etag, &mut md5).expect("etag hex");
    md5
}

/// Buckets, objects, listing, tags and metadata, quotas and documents.
async fn objects_and_buckets(c: &dyn StoreClient) {
    let t = tenant();
    let b = c
        .create_bucket(&t, "suite", "us-east-1")
        .await
        .expect("create");
    assert!(matches!(
        c.create_bucket(&t, "suite", "us-east-1").await,
        Err(StoreError::BucketAlreadyOwnedByYou)
    ));
    assert_eq!(c.bucket(&t, "suite").await.expect("bucket"), b);
    assert!(matches!(
        c.bucket(&t, "nope").await,
        Err(StoreError::NoSuchBucket)
    ));
    assert_eq!(c.list_buckets(&t).await.expect("buckets"), vec![b.clone()]);

    let mut want: Vec<String> = (0..60).map(|i| format!("k/{i:03}")).collect();
    for (i, k) in want.iter().enumerate() {
        put(c, &b, k, &data(10 + i * 97, i as u8)).await;
    }
    want.sort();
    assert_eq!(
        list_keys(c, &b, 7).await,
        want,
        "paged listing over every partition"
    );
    let roll = ListQuery {
        tags: Vec::new(),
        prefix: String::new(),
        delimiter: Some("/".into()),
        resume: Resume::Start,
        max_keys: 10,
    };
    let page = c.list_objects(&b, roll).await.expect("delimited");
    assert_eq!(page.entries, vec![ListEntry::Prefix("k/".into())]);

    let big = data(5000, 9);
    put(c, &b, "big", &big).await;
    let (info, s) = c.get_object(&b, "big", None).await.expect("get");
    assert_eq!(info.size, 5000);
    assert_eq!(read_all(s).await, big);
    let r = GetRange {
        start: 100,
        end: 200,
    };
    let (_, s) = c.get_object(&b, "big", Some(r)).await.expect("range");
    assert_eq!(read_all(s).await, big[100..200].to_vec());
    assert_eq!(c.head_object(&b, "big").await.expect("head").size, 5000);
    assert!(matches!(
        c.head_object(&b, "none").await,
        Err(StoreError::NoSuchKey)
    ));

    let absent = c
        .put_object(
            &b,
            "big",
            Default::default(),
            opts(1),
            body(b"x"),
            WriteCond::IfAbsent,
        )
        .await;
    assert!(matches!(absent, Err(StoreError::PreconditionFailed)));

    let tags = vec![Tag {
        key: "split".into(),
        value: "train".into(),
    }];
    c.put_object_tags(&b, "k/001", tags.clone())
        .await
        .expect("tags");
    assert_eq!(c.head_object(&b, "k/001").await.expect("head").tags, tags);
    let meta = laneway_store::ObjectMeta {
        content_type: Some("text/plain".into()),
        ..Default::default()
    };
    let replaced = c
        .replace_object_meta(&b, "k/002", meta, None)
        .await
        .expect("replace");
    assert_eq!(replaced.meta.content_type.as_deref(), Some("text/plain"));

    let usage = c.bucket_usage(b.id).await.expect("usage");
    assert_eq!(usage.objects, 61);
    let bytes: i64 = (0..60).map(|i| 10 + i * 97).sum::<i64>() + 5000;
    assert_eq!(usage.bytes, bytes);

    // A tenant's buckets summed in one ask (of each node, for a cluster).
    let other = c
        .create_bucket(&t, "suite-other", "us-east-1")
        .await
        .expect("create");
    put(c, &other, "one", &data(700, 7)).await;
    let (sum, _) = c
        .buckets_totals(vec![b.id, other.id])
        .await
        .expect("totals");
    assert_eq!((sum.objects, sum.bytes), (62, bytes + 700));
    let (none, _) = c.buckets_totals(Vec::new()).await.expect("no buckets");
    assert_eq!((none.objects, none.bytes), (0, 0));
    assert!(c.delete_object(&other, "one").await.expect("delete"));
    c.delete_bucket(&t, "suite-other")
        .await
        .expect("delete bucket");

    assert!(c.delete_object(&b, "k/000").await.expect("delete"));
    assert!(!c.delete_object(&b, "k/000").await.expect("delete again"));

    let limits = QuotaLimits {
        quota_bytes: Some(bytes as u64 + 100),
        ..QuotaLimits::default()
    };
    let ask = |n| QuotaAsk::Write {
        bucket: b.clone(),
        key: None,
        bytes: n,
        objects: 1,
    };
    let held = c.reserve_quota(&t, limits, ask(50)).await.expect("fits");
    assert!(held.is_some());
    let over = c.reserve_quota(&t, limits, ask(100)).await;
    assert!(
        matches!(over, Err(StoreError::QuotaExceeded(_))),
        "the hold counts"
    );
    drop(held);
    let free = QuotaLimits::default();
    assert!(
        c.reserve_quota(&t, free, ask(1 << 40))
            .await
            .expect("no quota")
            .is_none()
    );

    assert_eq!(c.catalog_doc("suite/doc").await.expect("doc"), None);
    let v = c
        .put_catalog_doc("suite/doc", 0, b"one".to_vec())
        .await
        .expect("put doc");
    assert!(matches!(
        c.put_catalog_doc("suite/doc", 0, b"two".to_vec()).await,
        Err(StoreError::PreconditionFailed)
    ));
    assert_eq!(
        c.catalog_doc("suite/doc").await.expect("doc"),
        Some((v, b"one".to_vec()))
    );

    assert!(matches!(
        c.delete_bucket(&t, "suite").await,
        Err(StoreError::BucketNotEmpty)
    ));
    put(c, &b, "after-refused-delete", b"still writable").await;
}

/// Multipart uploads from creation to completion, listing and abort.
async fn uploads(c: &dyn StoreClient) {
    let t = tenant();
    let b = c
        .create_bucket(&t, "mp", "us-east-1")
        .await
        .expect("create");
    let id = c
        .create_multipart_upload(&b, "obj", Default::default(), Vec::new(), None)
        .await
        .expect("create upload");
    let other = c
        .create_multipart_upload(&b, "gone", Default::default(), Vec::new(), None)
        .await
        .expect("create other");
    let parts = [data(2000, 1), data(700, 2)];
    let mut listed = Vec::new();
    for (i, d) in parts.iter().enumerate() {
        let n = i as u32 + 1;
        let p = c
            .upload_part(&b, "obj", &id, n, opts(d.len()), body(d))
            .await
            .expect("part");
        listed.push(ListedPart {
            number: n,
            md5: md5_of(&p.etag),
            checksum: None,
        });
    }
    assert_eq!(
        c.part_size(&b, "obj", &id, 1).await.expect("size"),
        Some(2000)
    );
    assert_eq!(c.part_size(&b, "obj", &id, 9).await.expect("size"), None);
    let (ps, more) = c.list_parts(&b, "obj", &id, 0, 1).await.expect("parts");
    assert_eq!((ps.len(), more), (1, true));
    assert_eq!(
        c.upload_checksum(&b, "obj", &id).await.expect("checksum"),
        None
    );
    let q = UploadQuery {
        max_uploads: 10,
        ..UploadQuery::default()
    };
    let page = c.list_multipart_uploads(&b, &q).await.expect("uploads");
    assert_eq!(
        page.entries.len(),
        2,
        "both uploads, whichever node holds them"
    );
    assert_eq!(c.bucket_pending(b.id).await.expect("pending").uploads, 2);
    let (_, pending) = c.buckets_totals(vec![b.id]).await.expect("totals");
    assert_eq!(pending, c.bucket_pending(b.id).await.expect("pending"));

    let done = c
        .complete_multipart_upload(&b, "obj", &id, listed.clone(), WriteCond::None, None)
        .await
        .expect("complete");
    assert_eq!(done.size, 2700);
    let again = c
        .repeated_completion(&b, "obj", &id, &listed)
        .await
        .expect("repeat");
    assert_eq!(again.etag, done.etag);
    let (_, s) = c.get_object(&b, "obj", None).await.expect("get");
    assert_eq!(
        read_all(s).await,
        [parts[0].clone(), parts[1].clone()].concat()
    );
    let (range, count) = c.object_part_range(&b, "obj", 2).await.expect("part range");
    assert_eq!(
        (range, count),
        (
            GetRange {
                start: 2000,
                end: 2700
            },
            2
        )
    );
    let (_, listed_parts) = c.object_with_parts(&b, "obj").await.expect("with parts");
    assert_eq!(listed_parts.len(), 2);

    c.abort_multipart_upload(&b, "gone", &other)
        .await
        .expect("abort");
    assert!(matches!(
        c.upload_part(&b, "gone", &other, 1, opts(1), body(b"x"))
            .await,
        Err(StoreError::NoSuchUpload)
    ));
    assert_eq!(c.bucket_pending(b.id).await.expect("pending").uploads, 0);

    assert!(c.delete_object(&b, "obj").await.expect("delete"));
    c.delete_bucket(&t, "mp")
        .await
        .expect("delete empty bucket");
    assert!(matches!(
        c.bucket(&t, "mp").await,
        Err(StoreError::NoSuchBucket)
    ));
    let late = c
        .put_object(
            &b,
            "late",
            Default::default(),
            opts(1),
            body(b"x"),
            WriteCond::None,
        )
        .await;
    assert!(matches!(late, Err(StoreError::NoSuchBucket)), "{late:?}");
}

async fn run_suite(c: &dyn StoreClient) {
    objects_and_buckets(c).await;
    uploads(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_passes_the_suite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), config(None)).expect("open");
    run_suite(&LocalStore::new(store)).await;
}

/// Three store nodes on loopback, each with its data dir and RPC server.
struct Cluster {
    _dir: tempfile::TempDir,
    servers: Vec<Option<RpcServer>>,
    stores: Vec<Arc<Store>>,
    services: Vec<NodeService>,
    client: RemoteStore,
}

async fn cluster() -> Cluster {
    cluster_of(false).await
}

/// A node of an earlier build, before `buckets_totals`: it cannot decode
/// that call and refuses it as such; every other call it answers.
struct EarlierBuild(NodeService);

impl Handler for EarlierBuild {
    fn call(
        &self,
        method: String,
        args: bytes::Bytes,
        body: BodyStream,
    ) -> futures::future::BoxFuture<'static, Result<Reply, WireError>> {
        if method == "buckets_totals" {
            let refused = WireError::new(WireCode::BadCall, "unknown variant index");
            return Box::pin(async move { Err(refused) });
        }
        self.0.call(method, args, body)
    }
}

/// Three nodes; of an earlier build (`EarlierBuild`) when `earlier`.
async fn cluster_of(earlier: bool) -> Cluster {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
        );
    }
    let nodes = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            (
                format!("store-{}", i + 1),
                l.local_addr().expect("addr").to_string(),
            )
        })
        .collect();
    let path = dir.path().join("cluster.toml");
    let spec = InitSpec {
        path: path.clone(),
        nodes,
        partitions: PARTITIONS,
        replicas: 1,
    };
    let file = init_cluster(&spec).expect("init");
    let map: Arc<dyn MapSource> = Arc::new(FileMapSource::open(&path).expect("map"));
    let opts = CallOptions {
        deadline: Duration::from_secs(2),
        ..CallOptions::default()
    };
    let client = RemoteStore::new(&file, Arc::clone(&map), opts).expect("client");
    let secret = file.read_secret().expect("secret");
    let (mut servers, mut stores, mut services) = (Vec::new(), Vec::new(), Vec::new());
    for (i, listener) in listeners.into_iter().enumerate() {
        let node = NodeId::parse(&format!("store-{}", i + 1)).expect("id");
        let hosted = map.current().hosted_by(&node);
        let store =
            Store::open(&dir.path().join(node.as_str()), config(Some(hosted))).expect("open");
        let lanes = NodeLanes::new(laneway_store::node::lanes::node_lanes_config());
        let peers = Arc::new(client.clone());
        let service = NodeService::new(Arc::clone(&store), node, Arc::clone(&map), lanes, peers);
        let handler: Arc<dyn Handler> = if earlier {
            Arc::new(EarlierBuild(service.clone()))
        } else {
            Arc::new(service.clone())
        };
        let server = RpcServer::start(
            listener,
            handler,
            Signer::new(&secret),
            ServerOptions::default(),
        )
        .expect("serve");
        servers.push(Some(server));
        stores.push(store);
        services.push(service);
    }
    Cluster {
        _dir: dir,
        servers,
        stores,
        services,
        client,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_s_totals_are_read_bucket_by_bucket_from_nodes_of_an_earlier_build() {
    let c = cluster_of(true).await;
    let t = tenant();
    let mut ids = Vec::new();
    for (i, name) in ["older-a", "older-b"].into_iter().enumerate() {
        let b = c
            .client
            .create_bucket(&t, name, "us-east-1")
            .await
            .expect("create");
        put(&c.client, &b, "k", &data(100 * (i + 1), 1)).await;
        ids.push(b.id);
    }
    let (usage, pending) = c.client.buckets_totals(ids).await.expect("totals");
    assert_eq!((usage.objects, usage.bytes, pending.uploads), (2, 300, 0));
    for s in &c.stores {
        s.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_store_over_three_nodes_passes_the_suite() {
    let c = cluster().await;
    run_suite(&c.client).await;
    for s in &c.stores {
        s.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_down_fails_only_its_partitions_and_every_listing() {
    let mut c = cluster().await;
    let t = tenant();
    let b = c
        .client
        .create_bucket(&t, "faults", "us-east-1")
        .await
        .expect("create");
    let keys: Vec<String> = (0..40).map(|i| format!("key-{i}")).collect();
    for k in &keys {
        put(&c.client, &b, k, k.as_bytes()).await;
    }
    // Stop the third node (not the catalog's, which is the first).
    let down = NodeId::parse("store-3").expect("id");
    if let Some(server) = c.servers[2].take() {
        server.stop().await;
    }
    let map = c.client.map();
    let (mut failed, mut served) = (0, 0);
    for k in &keys {
        let p = laneway_store::hash::partition_of(b.id, k.as_bytes(), PARTITIONS);
        let on_down = map.owner(p) == Some(&down);
        match c.client.head_object(&b, k).await {
            Ok(_) => {
                assert!(!on_down, "{k} answered from a stopped node");
                served += 1;
            }
            Err(StoreError::Unavailable(_)) => {
                assert!(on_down, "{k} failed though its node is up");
                failed += 1;
            }
            Err(e) => panic!("{k}: {e}"),
        }
    }
    assert!(
        failed > 0 && served > 0,
        "keys on both sides ({failed} failed, {served} served)"
    );
    let q = ListQuery {
        tags: Vec::new(),
        prefix: String::new(),
        delimiter: None,
        resume: Resume::Start,
        max_keys: 1000,
    };
    assert!(matches!(
        c.client.list_objects(&b, q).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        c.client.bucket_usage(b.id).await,
        Err(StoreError::Unavailable(_))
    ));
    for s in &c.stores {
        s.shutdown();
    }
}

/// A body that sends `first`, then ends in an error (a client gone
/// mid-upload).
fn cut_body(first: &[u8]) -> BodyStream {
    let chunk = bytes::Bytes::copy_from_slice(first);
    Box::pin(futures::stream::iter(vec![
        Ok(chunk),
        Err(std::io::Error::other("client went away")),
    ]))
}

/// A body that sends `first`, then never more.
fn stalled_body(first: &[u8]) -> BodyStream {
    let chunk = bytes::Bytes::copy_from_slice(first);
    Box::pin(futures::stream::once(async move { Ok(chunk) }).chain(futures::stream::pending()))
}

/// Whether every gauge of the cluster is back at zero: the client's
/// windows for `tenant` at every node, and the units in flight in every
/// node's lanes.
fn all_idle(c: &Cluster, tenant: &str) -> bool {
    let windows = NODES
        .iter()
        .all(|n| c.client.backlog(&NodeId::parse(n).expect("id"), tenant) == 0);
    let lanes = c.services.iter().all(|s| {
        s.lanes()
            .lanes()
            .snapshot()
            .tenants
            .iter()
            .all(|t| t.in_flight_units == 0)
    });
    windows && lanes
}

/// A cluster, the test tenant as a caller of weight 1, and a new bucket
/// `name` of it.
async fn tenant_cluster(
    name: &str,
) -> (
    Cluster,
    laneway_store::TenantId,
    laneway_store::caller::Caller,
    BucketInfo,
) {
    let c = cluster().await;
    let t = tenant();
    let caller = laneway_store::caller::Caller {
        tenant: t.clone(),
        weight: 1,
    };
    let b = c
        .client
        .create_bucket(&t, name, "us-east-1")
        .await
        .expect("create");
    (c, t, caller, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_misbehave_leave_no_window_or_lane_held() {
    let (c, t, caller, b) = tenant_cluster("rude").await;
    let big = data(200_000, 3);
    caller
        .clone()
        .scope(async {
            for i in 0..8 {
                put(&c.client, &b, &format!("k{i}"), &big).await;
            }
            // Cut mid-body: the upload fails and stores nothing.
            for i in 0..8 {
                let key = format!("cut{i}");
                let r = c
                    .client
                    .put_object(
                        &b,
                        &key,
                        Default::default(),
                        opts(big.len()),
                        cut_body(&big[..1000]),
                        WriteCond::None,
                    )
                    .await;
                assert!(r.is_err(), "a cut body must not be stored");
                assert!(matches!(
                    c.client.head_object(&b, &key).await,
                    Err(StoreError::NoSuchKey)
                ));
            }
            // Stalled mid-body, then abandoned (the gateway's client left).
            for i in 0..8 {
                let key = format!("stall{i}");
                let put = c.client.put_object(
                    &b,
                    &key,
                    Default::default(),
                    opts(big.len()),
                    stalled_body(&big[..1000]),
                    WriteCond::None,
                );
                assert!(
                    tokio::time::timeout(Duration::from_millis(200), put)
                        .await
                        .is_err()
                );
            }
            // Bodies asked for and never read, or read halfway and dropped.
            for i in 0..8 {
                let (_, mut body) = c
                    .client
                    .get_object(&b, &format!("k{i}"), None)
                    .await
                    .expect("get");
                if i % 2 == 0 {
                    let _ = body.next().await;
                }
                drop(body);
            }
        })
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !all_idle(&c, &t.0) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        all_idle(&c, &t.0),
        "a window or a lane is still held after the callers left"
    );
    let usage = c.client.bucket_usage(b.id).await.expect("usage");
    assert_eq!(usage.objects, 8, "only the whole uploads are stored");
    for s in &c.stores {
        s.shutdown();
    }
}

/// Poll `done` every 20 ms for up to 5 s.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..250 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not within 5 s: {what}");
}

/// The size of the writes of the quota hold tests.
const HELD: usize = 200_000;

/// A byte quota with room for one write of [`HELD`] bytes, not two.
fn room_for_one() -> QuotaLimits {
    QuotaLimits {
        quota_bytes: Some(300_000),
        ..QuotaLimits::default()
    }
}

/// A PUT of `bytes` to `key`, as the quota check takes it.
fn write_ask(b: &BucketInfo, key: &str, bytes: usize) -> QuotaAsk {
    QuotaAsk::Write {
        bucket: b.clone(),
        key: Some(key.to_string()),
        bytes: bytes as u64,
        objects: 1,
    }
}

/// While a write's hold counts, `ask` (one more write of its size) is
/// refused; then the write's body gets its `rest` and ends.
async fn refused_then_finish(
    client: &dyn StoreClient,
    limits: QuotaLimits,
    ask: QuotaAsk,
    body: futures::channel::mpsc::UnboundedSender<std::io::Result<bytes::Bytes>>,
    rest: &[u8],
) {
    let another = client.reserve_quota(&tenant(), limits, ask).await;
    assert!(
        matches!(another, Err(StoreError::QuotaExceeded(_))),
        "the unfinished write's hold counts: {another:?}"
    );
    body.unbounded_send(Ok(bytes::Bytes::copy_from_slice(rest)))
        .expect("the rest of the body");
}

/// The arguments of a store node's PutObject call of `size` bytes to
/// `key`, made under quota hold `id`, as a gateway sends them.
fn held_put(b: &BucketInfo, key: &str, size: usize, id: u64, map_version: u64) -> bytes::Bytes {
    use laneway_store::node::proto::{Call, Envelope, encode};
    let env = Envelope {
        call: Call::PutObject {
            bucket: b.clone(),
            key: key.into(),
            meta: Default::default(),
            opts: opts(size),
            cond: WriteCond::None,
        },
        caller: None,
        map_version,
        sender: 0,
        backlog: 0,
        hold: Some(id),
        once: None,
        answer_within_ms: None,
    };
    bytes::Bytes::from(encode(&env).expect("encode"))
}

/// The cluster's store nodes, in the order of `Cluster::services`.
const NODES: [&str; 3] = ["store-1", "store-2", "store-3"];

/// A hold for a write of [`HELD`] bytes to `key`, reserved and handed
/// over as a gateway does with its call (its own copy is never given
/// back): the desk's id of it, and the node that hosts `key`.
async fn handed_over(c: &Cluster, b: &BucketInfo, key: &str) -> (u64, String) {
    let hold = c
        .client
        .reserve_quota(&tenant(), room_for_one(), write_ask(b, key, HELD))
        .await
        .expect("fits")
        .expect("a hold");
    let id = hold.id().expect("a desk's hold has an id");
    std::mem::forget(hold);
    assert_eq!(c.services[0].quota_holds(), 1);
    let map = c.client.map();
    let p = laneway_store::hash::partition_of(b.id, key.as_bytes(), PARTITIONS);
    let owner = map.owner(p).expect("an owner").as_str().to_string();
    (id, owner)
}

/// A write's caller (a gateway) can go away before the write is done: its
/// call timed out, its connection dropped, or its own client hung up.
/// The node still finishes the write, and only then gives back the quota
/// hold the call carried; until then the hold keeps counting, so no
/// other write is admitted into the room this one fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_caller_went_away_commits_and_then_gives_its_quota_hold_back() {
    use laneway_store::rpc::Handler;
    let (c, _, _, b) = tenant_cluster("holds").await;
    let (size, limits) = (HELD, room_for_one());
    let ask = |key: &str| write_ask(&b, key, size);
    let (id, owner) = handed_over(&c, &b, "k").await;
    let catalog = &c.services[0];
    let at = NODES.iter().position(|n| *n == owner).expect("a node");
    let args = held_put(&b, "k", size, id, c.client.map().version());
    let bytes = data(size, 9);
    let (tx, rx) = futures::channel::mpsc::unbounded::<std::io::Result<bytes::Bytes>>();
    tx.unbounded_send(Ok(bytes::Bytes::copy_from_slice(&bytes[..size / 2])))
        .expect("first half");
    let answer = c.services[at].call("put_object".into(), args, Box::pin(rx));
    // The caller gives up while the body is still arriving.
    let gave_up = tokio::time::timeout(Duration::from_millis(300), answer).await;
    assert!(gave_up.is_err(), "the write waits for the rest of its body");

    assert_eq!(catalog.quota_holds(), 1, "the write is not done");
    refused_then_finish(&c.client, limits, ask("other"), tx, &bytes[size / 2..]).await;
    eventually("the node gives the hold back", || {
        catalog.quota_holds() == 0
    })
    .await;
    let info = c.client.head_object(&b, "k").await.expect("committed");
    assert_eq!(info.size, size as u64);
    let usage = c.client.bucket_usage(b.id).await.expect("usage");
    assert_eq!(usage.bytes, size as i64, "counted as stored once done");
    for s in &c.stores {
        s.shutdown();
    }
}

/// The in-process store keeps the same promise as a store node: a write
/// whose caller was dropped (its S3 client hung up) still finishes, and
/// its quota hold counts until it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_write_whose_caller_went_away_keeps_its_quota_hold_until_done() {
    let dir = tempfile::tempdir().expect("tempdir");
    let local = LocalStore::new(Store::open(dir.path(), config(None)).expect("open"));
    let t = tenant();
    let b = local
        .create_bucket(&t, "holds", "us-east-1")
        .await
        .expect("create");
    let (size, limits) = (HELD, room_for_one());
    let ask = |key: &str, bytes: usize| write_ask(&b, key, bytes);
    let hold = local
        .reserve_quota(&t, limits, ask("k", size))
        .await
        .expect("fits")
        .expect("a hold");
    let bytes = data(size, 5);
    let (tx, rx) = futures::channel::mpsc::unbounded::<std::io::Result<bytes::Bytes>>();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let first = bytes::Bytes::copy_from_slice(&bytes[..size / 2]);
    let body: BodyStream = Box::pin(
        futures::stream::once(async move {
            let _ = started_tx.send(());
            Ok(first)
        })
        .chain(rx),
    );
    let writer = {
        let (local, b) = (local.clone(), b.clone());
        tokio::spawn(async move {
            let write = local.put_object(
                &b,
                "k",
                Default::default(),
                opts(size),
                body,
                WriteCond::None,
            );
            hold.cover(write).await
        })
    };
    started_rx.await.expect("the write reads its body");
    writer.abort();
    assert!(writer.await.is_err(), "the caller is gone");

    refused_then_finish(&local, limits, ask("other", size), tx, &bytes[size / 2..]).await;
    // An overwrite of "k" is credited with the object it replaces, so it
    // fits once "k" is stored and its hold given back, and not before.
    let mut fits = None;
    for _ in 0..250 {
        if let Ok(Some(h)) = local.reserve_quota(&t, limits, ask("k", size)).await {
            fits = Some(h);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(fits.is_some(), "the write is done and its hold given back");
    drop(fits);
    let info = local.head_object(&b, "k").await.expect("committed");
    assert_eq!(info.size, size as u64);
    let over = local.reserve_quota(&t, limits, ask("more", size)).await;
    assert!(
        matches!(over, Err(StoreError::QuotaExceeded(_))),
        "the committed write counts as stored"
    );
    local.store().shutdown();
}

/// A store node owns the quota hold of a write call from the moment it
/// reads the call: one it refuses before running it (here: a partition it
/// does not host) gives the hold back too, so a caller that never learns
/// the answer (its stream was reset while the call waited for a lane)
/// leaves nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_a_node_refuses_before_running_it_gives_the_hold_back() {
    use laneway_store::rpc::Handler;
    let (c, _, _, b) = tenant_cluster("refused").await;
    let (id, owner) = handed_over(&c, &b, "k").await;
    let elsewhere = NODES.iter().position(|n| *n != owner).expect("a node");
    let args = held_put(&b, "k", HELD, id, c.client.map().version());
    let answer = c.services[elsewhere]
        .call("put_object".into(), args, body(&data(HELD, 2)))
        .await;
    assert!(answer.is_err(), "a node that does not host k refuses it");
    eventually("the refusing node gives the hold back", || {
        c.services[0].quota_holds() == 0
    })
    .await;
    for s in &c.stores {
        s.shutdown();
    }
}

/// A write under a quota hold whose body fails partway (its S3 client
/// went away mid-upload) stores nothing, and leaves nothing held: the
/// desk's hold, the caller's windows and every node's lanes are all back
/// at zero, and the room is free for the next write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_with_a_cut_body_gives_back_its_hold_window_and_lanes() {
    let (c, t, caller, b) = tenant_cluster("cut-held").await;
    let limits = room_for_one();
    let half = data(HELD / 2, 4);
    for i in 0..4 {
        let key = format!("k{i}");
        let hold = c
            .client
            .reserve_quota(&t, limits, write_ask(&b, &key, HELD))
            .await
            .expect("fits")
            .expect("a hold");
        let put = c.client.put_object(
            &b,
            &key,
            Default::default(),
            opts(HELD),
            cut_body(&half),
            WriteCond::None,
        );
        let r = caller.clone().scope(hold.cover(put)).await;
        assert!(r.is_err(), "a cut body must not be stored");
        assert!(matches!(
            c.client.head_object(&b, &key).await,
            Err(StoreError::NoSuchKey)
        ));
        // Given back in the background, by the node or by this client.
        eventually("the cut write's hold is given back", || {
            c.services[0].quota_holds() == 0
        })
        .await;
    }
    eventually("no hold, window or lane is left", || {
        c.services[0].quota_holds() == 0 && all_idle(&c, &t.0)
    })
    .await;
    let hold = c
        .client
        .reserve_quota(&t, limits, write_ask(&b, "whole", HELD))
        .await
        .expect("the room is free")
        .expect("a hold");
    let whole = data(HELD, 6);
    let put = c.client.put_object(
        &b,
        "whole",
        Default::default(),
        opts(HELD),
        body(&whole),
        WriteCond::None,
    );
    caller.scope(hold.cover(put)).await.expect("stored");
    eventually("the whole write's hold is given back", || {
        c.services[0].quota_holds() == 0
    })
    .await;
    for s in &c.stores {
        s.shutdown();
    }
}

/// The arguments of a store node's `call` as a gateway sends them, with
/// call id `once` (the same on every attempt of one call).
fn with_id(
    call: laneway_store::node::proto::Call,
    once: [u8; 16],
    map_version: u64,
) -> bytes::Bytes {
    use laneway_store::node::proto::{Envelope, encode};
    let env = Envelope {
        call,
        caller: None,
        map_version,
        sender: 0,
        backlog: 0,
        hold: None,
        once: Some(once),
        answer_within_ms: None,
    };
    bytes::Bytes::from(encode(&env).expect("encode"))
}

fn no_body() -> BodyStream {
    Box::pin(futures::stream::empty())
}

fn tag(k: &str, v: &str) -> laneway_store::record::Tag {
    laneway_store::record::Tag {
        key: k.into(),
        value: v.into(),
    }
}

/// A call that may be sent again (DeleteObject, PutObjectTags, EditTags,
/// the catalog's SetBucketTags) applies once per call id: its repeat, after another client's write of
/// the same key, is answered as the first attempt was and leaves that
/// write alone;
/// a call with another id applies; and once the sweep forgot the ids
/// (past their time), the same id applies again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_repeated_with_its_id_applies_once() {
    use laneway_store::node::proto::Call;
    use laneway_store::rpc::Handler;
    let (c, _, _, b) = tenant_cluster("once").await;
    let version = c.client.map().version();
    let p = laneway_store::hash::partition_of(b.id, b"k", PARTITIONS);
    let owner = c
        .client
        .map()
        .owner(p)
        .expect("an owner")
        .as_str()
        .to_string();
    let node = NODES.iter().position(|n| *n == owner).expect("a node");
    let send = |call: Call, id: [u8; 16]| {
        c.services[node].call(call.name().into(), with_id(call, id, version), no_body())
    };
    let delete = || Call::DeleteObject {
        bucket: b.clone(),
        key: "k".into(),
    };

    put(&c.client, &b, "k", &data(100, 1)).await;
    send(delete(), [1; 16]).await.expect("the first attempt");
    put(&c.client, &b, "k", &data(200, 2)).await;
    send(delete(), [1; 16])
        .await
        .expect("the repeat is answered");
    let info = c
        .client
        .head_object(&b, "k")
        .await
        .expect("the newer object stays");
    assert_eq!(info.size, 200);

    let tags = |v: &str| Call::PutObjectTags {
        bucket: b.clone(),
        key: "k".into(),
        tags: vec![tag("state", v)],
    };
    send(tags("old"), [2; 16]).await.expect("tags set");
    c.client
        .put_object_tags(&b, "k", vec![tag("state", "new")])
        .await
        .expect("another client's tags");
    send(tags("old"), [2; 16])
        .await
        .expect("the repeat is answered");
    let info = c.client.head_object(&b, "k").await.expect("k");
    assert_eq!(
        info.tags,
        vec![tag("state", "new")],
        "the repeat put old tags back"
    );

    // A bulk tag edit over two partitions of this node: its repeats, sent
    // a partition at a time as the gateway does when the whole call
    // failed on the way, answer the first attempt's counts and leave the
    // other client's tags.
    let other = (0..)
        .map(|i| format!("j{i}"))
        .find(|k| {
            let q = laneway_store::hash::partition_of(b.id, k.as_bytes(), PARTITIONS);
            q != p && c.client.map().owner(q).is_some_and(|o| o.as_str() == owner)
        })
        .expect("another partition of the node");
    put(&c.client, &b, &other, &data(10, 3)).await;
    let edit = |keys: &[&str]| Call::EditTags {
        bucket: b.clone(),
        keys: keys.iter().map(|k| k.to_string()).collect(),
        edit: laneway_store::tagindex::TagEdit {
            set: vec![tag("stage", "bulk")],
            ..Default::default()
        },
    };
    let counts = |payload: bytes::Bytes| -> laneway_store::tagindex::EditCounts {
        let reply = payload.get(4..).expect("the window, then the reply");
        laneway_store::node::proto::decode(reply).expect("counts")
    };
    let both = ["k", other.as_str()];
    let first = counts(send(edit(&both), [3; 16]).await.expect("the edit").payload);
    assert_eq!((first.matched, first.changed), (2, 2));
    for k in both {
        c.client
            .put_object_tags(&b, k, vec![tag("stage", "later")])
            .await
            .expect("another client's tags");
    }
    let mut again = laneway_store::tagindex::EditCounts::default();
    for k in both {
        let reply = send(edit(&[k]), [3; 16]).await.expect("a repeat");
        again = again.plus(counts(reply.payload));
    }
    assert_eq!(again, first, "the repeats answer as the first did");
    for k in both {
        let info = c.client.head_object(&b, k).await.expect("k");
        assert_eq!(
            info.tags,
            vec![tag("stage", "later")],
            "a repeated bulk edit put its tags back on {k}"
        );
    }

    // The same id and first key with other keys (a job's page listed
    // again after it changed): a new op, applied.
    let more = (0..)
        .map(|i| format!("m{i}"))
        .find(|k| laneway_store::hash::partition_of(b.id, k.as_bytes(), PARTITIONS) == p)
        .expect("another key of k's partition");
    put(&c.client, &b, &more, &data(10, 4)).await;
    let reply = send(edit(&["k", more.as_str()]), [3; 16])
        .await
        .expect("a new op");
    assert_eq!(counts(reply.payload).changed, 2, "k and the new key");
    let info = c.client.head_object(&b, &more).await.expect("the new key");
    assert_eq!(info.tags, vec![tag("stage", "bulk")]);

    // The catalog's bucket tagging, at the node that holds the catalog:
    // its repeat leaves another client's bucket tags alone.
    let catalog = c.client.map().catalog()[0].as_str().to_string();
    let at_catalog = NODES
        .iter()
        .position(|n| *n == catalog)
        .expect("the catalog's node");
    let bucket_tags = |v: &str| Call::SetBucketTags {
        tenant: b.tenant.clone(),
        name: b.name.clone(),
        tags: vec![tag("owner", v)],
    };
    let to_catalog = |call: Call, id: [u8; 16]| {
        c.services[at_catalog].call(call.name().into(), with_id(call, id, version), no_body())
    };
    to_catalog(bucket_tags("old"), [4; 16])
        .await
        .expect("bucket tags set");
    c.client
        .set_bucket_tags(&b.tenant, &b.name, vec![tag("owner", "new")])
        .await
        .expect("another client's bucket tags");
    to_catalog(bucket_tags("old"), [4; 16])
        .await
        .expect("the repeat is answered");
    // Read at the catalog itself (the client caches buckets).
    let stored = || {
        c.stores[at_catalog]
            .bucket(&b.tenant, &b.name)
            .expect("bucket")
    };
    assert_eq!(
        stored().tags,
        vec![tag("owner", "new")],
        "the repeat put the old bucket tags back"
    );
    let later = laneway_store::partition::now_ms() + 1;
    let swept = c.stores[at_catalog].forget_catalog_repeats(later);
    assert_eq!(swept.expect("the catalog's sweep"), 1);
    to_catalog(bucket_tags("old"), [4; 16])
        .await
        .expect("applies again");
    assert_eq!(stored().tags, vec![tag("owner", "old")]);

    // Nothing is forgotten before its time; everything after it.
    let store = &c.stores[node];
    assert_eq!(store.forget_repeats(0).await.expect("sweep"), 0);
    let later = laneway_store::partition::now_ms() + 1;
    assert_eq!(store.forget_repeats(later).await.expect("sweep"), 4);
    send(delete(), [1; 16]).await.expect("applies again");
    assert!(matches!(
        c.client.head_object(&b, "k").await,
        Err(StoreError::NoSuchKey)
    ));
    for s in &c.stores {
        s.shutdown();
    }
}
