//! A cluster client following group leaders: [`RemoteStore`] against fake
//! store nodes that answer `NotLeader` (with or without a hint), refuse
//! connections or never answer, and against three real nodes that each
//! host every partition (so a total over "the partitions of each node"
//! would count every object three times).

use bytes::Bytes;
use futures::future::BoxFuture;
use laneway_store::client::StoreClient;
use laneway_store::cluster::{
    ClusterFile, FileMapSource, InitSpec, MapSource, NodeId, init_cluster,
};
use laneway_store::node::NodeService;
use laneway_store::node::lanes::NodeLanes;
use laneway_store::node::proto::{Call, Envelope, GroupReport, decode, encode};
use laneway_store::record::Usage;
use laneway_store::remote::RemoteStore;
use laneway_store::replication::GroupStatus;
use laneway_store::rpc::{
    CallOptions, Handler, Reply, RpcServer, ServerOptions, Signer, WireCode, WireError,
};
use laneway_store::{
    BodyStream, BucketId, BucketInfo, ObjectInfo, PartitionId, PutOptions, Store, StoreConfig,
    StoreError, TenantId, UploadQuery, WriteCond,
};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

const PARTITIONS: u32 = 8;

/// How a fake node answers.
#[derive(Clone, Copy, Debug)]
enum Role {
    /// Answers every call (see [`Fake::answer`]).
    Lead,
    /// `NotLeader`, naming the node of this index as the leader, if any.
    Follow(Option<usize>),
    /// Never answers.
    Hang,
    /// Not running: connections are refused.
    Down,
}

/// A fake store node: its role, and the methods it was called with.
struct Fake {
    role: Role,
    /// Its place among `ids`.
    me: usize,
    ids: Vec<u64>,
    calls: Mutex<Vec<String>>,
    /// Whether a leader's answer to the leader watch claims its groups
    /// (else it claims none, as before an election).
    claiming: std::sync::atomic::AtomicBool,
}

impl Fake {
    fn count(&self, method: &str) -> usize {
        self.calls.lock().iter().filter(|m| *m == method).count()
    }

    fn total(&self) -> usize {
        self.calls.lock().len()
    }

    /// The leader's replies: PartSize 7; BucketUsage one object per
    /// partition named; a completion finds no upload (the first attempt
    /// did it) and RepeatedCompletion answers the object; PutObject
    /// NoSuchBucket (so a test sees where it arrived).
    fn answer(call: &Call) -> Result<Vec<u8>, WireError> {
        let bad = |e: StoreError| WireError::new(WireCode::Internal, e.to_string());
        match call {
            Call::PartSize { .. } => encode(&Some(7u64)).map_err(bad),
            Call::BucketUsage { partitions, .. } => encode(&Usage {
                objects: i64::try_from(partitions.len()).unwrap_or(0),
                bytes: 0,
            })
            .map_err(bad),
            Call::CompleteMultipartUpload { .. } => {
                Err(WireError::from_store(&StoreError::NoSuchUpload))
            }
            Call::RepeatedCompletion { key, .. } => encode(&object(key)).map_err(bad),
            Call::PutObject { .. } => Err(WireError::from_store(&StoreError::NoSuchBucket)),
            _ => Err(WireError::new(WireCode::BadCall, "not faked")),
        }
    }
}

impl Handler for Fake {
    fn call(
        &self,
        method: String,
        args: Bytes,
        _body: BodyStream,
    ) -> BoxFuture<'static, Result<Reply, WireError>> {
        self.calls.lock().push(method);
        let role = self.role;
        let ids = self.ids.clone();
        let me = ids[self.me];
        let claiming = self.claiming.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            let env: Envelope =
                decode(&args).map_err(|e| WireError::new(WireCode::BadCall, e.to_string()))?;
            match role {
                Role::Hang | Role::Down => futures::future::pending().await,
                Role::Follow(hint) => Err(WireError::new(
                    WireCode::NotLeader {
                        leader: hint.map(|i| ids[i]),
                    },
                    "not the leader",
                )),
                Role::Lead => {
                    let reply = match env.call {
                        Call::Groups if !claiming => encode(&Vec::<GroupReport>::new())
                            .map_err(|e| WireError::new(WireCode::Internal, e.to_string()))?,
                        Call::Groups => encode(&claims(me))
                            .map_err(|e| WireError::new(WireCode::Internal, e.to_string()))?,
                        call => Fake::answer(&call)?,
                    };
                    let mut payload = 0u32.to_be_bytes().to_vec();
                    payload.extend_from_slice(&reply);
                    Ok(Reply::payload(Bytes::from(payload)))
                }
            }
        })
    }
}

/// A leader's answer to the leader watch: Raft id `me` leads every
/// partition and the catalog, in term 7.
fn claims(me: u64) -> Vec<GroupReport> {
    let status = GroupStatus {
        me,
        leader: Some(me),
        term: 7,
        ..GroupStatus::default()
    };
    let mut groups: Vec<GroupReport> = (0..PARTITIONS)
        .map(|p| GroupReport {
            group: format!("p{p:04}"),
            partition: Some(PartitionId(p)),
            status: status.clone(),
        })
        .collect();
    groups.push(GroupReport {
        group: "catalog".into(),
        partition: None,
        status,
    });
    groups
}

fn object(key: &str) -> ObjectInfo {
    ObjectInfo {
        key: key.to_string(),
        size: 3,
        etag: "done".into(),
        mtime_ms: 0,
        meta: Default::default(),
        tags: Vec::new(),
        parts: 1,
        checksum: None,
    }
}

/// Three fake nodes, every partition (and the catalog) on all three.
struct Fakes {
    _dir: tempfile::TempDir,
    file: ClusterFile,
    path: std::path::PathBuf,
    nodes: Vec<Arc<Fake>>,
    _servers: Vec<RpcServer>,
}

async fn fakes(roles: [Role; 3]) -> Fakes {
    fakes_with(roles, 3).await
}

/// Three fake nodes, each partition on `replicas` of them.
async fn fakes_with(roles: [Role; 3], replicas: u32) -> Fakes {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut listeners = Vec::new();
    for _ in 0..3 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        listeners.push(l);
    }
    let names: Vec<String> = (1..=3).map(|i| format!("node-{i}")).collect();
    let nodes = names
        .iter()
        .zip(&listeners)
        .map(|(n, l)| (n.clone(), l.local_addr().expect("addr").to_string()))
        .collect();
    let path = dir.path().join("cluster.toml");
    let spec = InitSpec {
        path: path.clone(),
        nodes,
        partitions: PARTITIONS,
        replicas,
    };
    let file = init_cluster(&spec).expect("init");
    let secret = file.read_secret().expect("secret");
    let ids: Vec<u64> = names
        .iter()
        .map(|n| NodeId::parse(n).expect("id").raft_id())
        .collect();
    let mut fakes = Vec::new();
    let mut servers = Vec::new();
    for (me, (listener, role)) in listeners.into_iter().zip(roles).enumerate() {
        let fake = Arc::new(Fake {
            role,
            me,
            ids: ids.clone(),
            calls: Mutex::new(Vec::new()),
            claiming: std::sync::atomic::AtomicBool::new(true),
        });
        if matches!(role, Role::Down) {
            drop(listener); // refused from now on
        } else {
            let server = RpcServer::start(
                listener,
                Arc::clone(&fake) as Arc<dyn Handler>,
                Signer::new(&secret),
                ServerOptions::default(),
            )
            .expect("serve");
            servers.push(server);
        }
        fakes.push(fake);
    }
    Fakes {
        _dir: dir,
        file,
        path,
        nodes: fakes,
        _servers: servers,
    }
}

impl Fakes {
    /// A new client (its own leader cache) with a call deadline of `secs`.
    fn client(&self, secs: u64) -> RemoteStore {
        let map: Arc<dyn MapSource> = Arc::new(FileMapSource::open(&self.path).expect("map"));
        let opts = CallOptions {
            deadline: Duration::from_secs(secs),
            ..CallOptions::default()
        };
        RemoteStore::new(&self.file, map, opts).expect("client")
    }
}

fn bucket() -> BucketInfo {
    BucketInfo {
        id: BucketId(1),
        tenant: TenantId("t".into()),
        name: "b".into(),
        created_ms: 0,
        region: "us-east-1".into(),
        tags: Vec::new(),
    }
}

/// A key whose partition's first replica is node `first` (0-based).
fn key_first_at(client: &RemoteStore, first: usize) -> String {
    let map = client.map();
    let want = NodeId::parse(&format!("node-{}", first + 1)).expect("id");
    (0..1000)
        .map(|i| format!("key-{i}"))
        .find(|k| {
            let p = laneway_store::hash::partition_of(bucket().id, k.as_bytes(), PARTITIONS);
            map.replicas(p).first() == Some(&want)
        })
        .expect("a key for every node")
}

/// PutObject of `key` with the body "abc".
async fn put_abc(client: &RemoteStore, key: &str) -> Result<ObjectInfo, StoreError> {
    let body: BodyStream = Box::pin(futures::stream::once(async {
        Ok(Bytes::from_static(b"abc"))
    }));
    let b = bucket();
    client
        .put_object(
            &b,
            key,
            Default::default(),
            PutOptions::default(),
            body,
            WriteCond::None,
        )
        .await
}

async fn part_size(client: &RemoteStore, key: &str) -> Result<Option<u64>, StoreError> {
    client.part_size(&bucket(), key, "upload", 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_sends_the_call_to_the_leader_and_later_calls_go_straight_there() {
    let f = fakes([Role::Follow(Some(2)), Role::Follow(Some(2)), Role::Lead]).await;
    let client = f.client(5);
    let keys: Vec<String> = (0..3).map(|n| key_first_at(&client, n)).collect();
    for k in &keys {
        assert_eq!(part_size(&client, k).await.expect("answered"), Some(7));
    }
    let asked_followers = f.nodes[0].total() + f.nodes[1].total();
    assert_eq!(asked_followers, 2, "one hint each from the two followers");
    for k in &keys {
        assert_eq!(part_size(&client, k).await.expect("answered"), Some(7));
    }
    assert_eq!(
        f.nodes[0].total() + f.nodes[1].total(),
        asked_followers,
        "the learned leader is asked directly"
    );
    assert_eq!(f.nodes[2].count("part_size"), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replica_and_one_that_knows_no_leader_are_passed_over() {
    let f = fakes([Role::Down, Role::Follow(None), Role::Lead]).await;
    let client = f.client(5);
    for first in 0..3 {
        let k = key_first_at(&client, first);
        assert_eq!(part_size(&client, &k).await.expect("answered"), Some(7));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_leader_anywhere_the_call_is_503_after_rounds_within_its_deadline() {
    let f = fakes([Role::Follow(None); 3]).await;
    let client = f.client(1);
    let k = key_first_at(&client, 0);
    let r = part_size(&client, &k).await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    for node in &f.nodes {
        assert!(node.total() >= 2, "every replica asked again after a pause");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_a_body_is_not_replayed_but_its_retry_goes_to_the_leader() {
    let f = fakes([Role::Follow(Some(2)), Role::Follow(Some(2)), Role::Lead]).await;
    let client = f.client(5);
    let k = key_first_at(&client, 0);
    let put = || put_abc(&client, &k);
    let first = put().await;
    assert!(
        matches!(first, Err(StoreError::Unavailable(_))),
        "{first:?}"
    );
    assert_eq!(f.nodes[2].total(), 0, "the spent body is not sent again");
    let again = put().await;
    assert!(matches!(again, Err(StoreError::NoSuchBucket)), "{again:?}");
    assert_eq!(
        f.nodes[2].count("put_object"),
        1,
        "the retry reached the leader"
    );
    assert_eq!(f.nodes[0].count("put_object"), 1);
}

/// Calls out at a leader that stopped (it never answers) end as soon as
/// another replica claims the group in a round of the leader watch (while
/// the round still waits for the stopped node), long before their
/// deadline: a PUT answers 503 (its spent body is not sent
/// again), a read is sent again to the new leader, and the next PUT goes
/// straight there. The tenant's window at the stopped node is given back
/// by the calls that gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_at_a_stopped_leader_end_when_another_replica_claims_the_group() {
    let f = fakes([Role::Hang, Role::Follow(Some(2)), Role::Lead]).await;
    // A deadline no test run waits out: an answer means the claim ended
    // the calls.
    let client = f.client(600);
    let k = key_first_at(&client, 0);
    let put = || put_abc(&client, &k);
    // A watch round that waits up to 600 s for the stopped node's answer:
    // the leader's claim counts as soon as it answers.
    let mut round = None;
    let election = async {
        while f.nodes[0].count("put_object") + f.nodes[0].count("part_size") < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let stopped = NodeId::parse("node-1").expect("id");
        assert_eq!(
            client.backlog(&stopped, "t"),
            2,
            "both calls hold a place there"
        );
        let watch = client.clone();
        round = Some(tokio::spawn(async move {
            watch.refresh_leaders(Duration::from_secs(600)).await;
        }));
    };
    let caller = laneway_store::caller::Caller {
        tenant: TenantId("t".into()),
        weight: 1,
    };
    let calls = caller.scope(async { tokio::join!(put(), part_size(&client, &k)) });
    let ((written, read), ()) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(calls, election)
    })
    .await
    .expect("the calls end once another replica claims the group");
    match written {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("another replica claims it"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        f.nodes[2].count("put_object"),
        0,
        "the spent body is not sent again"
    );
    assert_eq!(read.expect("the read, sent again"), Some(7));
    let stopped = NodeId::parse("node-1").expect("id");
    assert_eq!(
        client.backlog(&stopped, "t"),
        0,
        "no place in the window at the stopped node is still held"
    );
    let again = put().await;
    assert!(matches!(again, Err(StoreError::NoSuchBucket)), "{again:?}");
    assert_eq!(
        f.nodes[2].count("put_object"),
        1,
        "the retry reached the new leader"
    );
    assert_eq!(f.nodes[0].count("put_object"), 1);
    let round = round.expect("the round began");
    assert!(
        !round.is_finished(),
        "the round still waits for the stopped node"
    );
    round.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_out_at_a_stopped_leader_hurry_the_watch_to_the_new_claim() {
    let f = fakes([Role::Hang, Role::Follow(Some(2)), Role::Lead]).await;
    // Nobody claims the groups yet; the watch ticks every 600 s (its
    // first round, at once, then waits for the stopped node that long).
    f.nodes[2]
        .claiming
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let client = f.client(600);
    let _watch = client.watch_leaders(Duration::from_secs(600));
    let k = key_first_at(&client, 0);
    let election = async {
        while f.nodes[0].count("part_size") < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The read is out at the stopped node; another replica now leads.
        f.nodes[2]
            .claiming
            .store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let (read, ()) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(part_size(&client, &k), election)
    })
    .await
    .expect("the call ends once a hurried round hears the new claim");
    assert_eq!(read.expect("the read, sent again"), Some(7));
    assert_eq!(
        f.nodes[2].count("part_size"),
        1,
        "answered by the new leader"
    );
    assert!(
        f.nodes[2].count("groups") >= 2,
        "the ticking round and at least one hurried round"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_silent_replica_reads_and_completions_are_repeated_conditional_writes_not() {
    let f = fakes([Role::Hang, Role::Follow(Some(2)), Role::Lead]).await;
    let k = key_first_at(&f.client(2), 0);
    // A read: the silent replica's half of the deadline, then the leader.
    let client = f.client(2);
    assert_eq!(part_size(&client, &k).await.expect("answered"), Some(7));

    // A conditional completion whose outcome is unknown is not repeated.
    let client = f.client(2);
    let cond = client
        .complete_multipart_upload(&bucket(), &k, "u1", Vec::new(), WriteCond::IfAbsent, None)
        .await;
    assert!(matches!(cond, Err(StoreError::Unavailable(_))), "{cond:?}");
    assert_eq!(f.nodes[2].count("complete_multipart_upload"), 0);

    // An unconditional one is: the repeat finds the upload gone (the
    // first attempt completed it) and answers as a repeated completion.
    let client = f.client(2);
    let done = client
        .complete_multipart_upload(&bucket(), &k, "u1", Vec::new(), WriteCond::None, None)
        .await
        .expect("completed");
    assert_eq!(done, object(&k));
    assert_eq!(f.nodes[2].count("complete_multipart_upload"), 1);
    assert_eq!(f.nodes[2].count("repeated_completion"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_replica_a_dead_node_is_503_at_once_and_no_other_node_is_asked() {
    let f = fakes_with([Role::Down, Role::Lead, Role::Lead], 1).await;
    let client = f.client(5);
    let k = key_first_at(&client, 0);
    let r = part_size(&client, &k).await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    assert_eq!(f.nodes[1].total() + f.nodes[2].total(), 0);
    // The other nodes' partitions are served as ever.
    let k = key_first_at(&client, 1);
    assert_eq!(part_size(&client, &k).await.expect("answered"), Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_call_refused_by_a_follower_is_resent_partition_by_partition() {
    let f = fakes([Role::Follow(Some(2)), Role::Follow(Some(2)), Role::Lead]).await;
    let client = f.client(5);
    let usage = client.bucket_usage(BucketId(1)).await.expect("usage");
    assert_eq!(usage.objects, i64::from(PARTITIONS), "each partition once");
    // The leader learned from the single-partition hints: all at once now.
    let before = f.nodes[2].count("bucket_usage");
    let usage = client.bucket_usage(BucketId(1)).await.expect("usage");
    assert_eq!(usage.objects, i64::from(PARTITIONS));
    assert_eq!(f.nodes[2].count("bucket_usage"), before + 1);
}

// ----- three real nodes, each hosting every partition ---------------------

fn config() -> StoreConfig {
    StoreConfig {
        partitions: Some(PARTITIONS),
        min_part_size: 1024,
        inline_max: 1024,
        hosted: Some((0..PARTITIONS).map(PartitionId).collect()),
        ..StoreConfig::default()
    }
}

/// Three nodes over one RF 3 map (no replication groups: each store is its
/// own copy), and a client of them.
struct Hosts {
    _dir: tempfile::TempDir,
    stores: Vec<Arc<Store>>,
    _servers: Vec<RpcServer>,
    client: RemoteStore,
}

async fn hosts() -> Hosts {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut listeners = Vec::new();
    for _ in 0..3 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        listeners.push(l);
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
        replicas: 3,
    };
    let file = init_cluster(&spec).expect("init");
    let map: Arc<dyn MapSource> = Arc::new(FileMapSource::open(&path).expect("map"));
    let opts = CallOptions {
        deadline: Duration::from_secs(5),
        ..CallOptions::default()
    };
    let client = RemoteStore::new(&file, Arc::clone(&map), opts).expect("client");
    let secret = file.read_secret().expect("secret");
    let (mut stores, mut servers) = (Vec::new(), Vec::new());
    for (i, listener) in listeners.into_iter().enumerate() {
        let node = NodeId::parse(&format!("store-{}", i + 1)).expect("id");
        let store = Store::open(&dir.path().join(node.as_str()), config()).expect("open");
        let lanes = NodeLanes::new(laneway_store::node::lanes::node_lanes_config());
        let peers = Arc::new(client.clone());
        let service = NodeService::new(Arc::clone(&store), node, Arc::clone(&map), lanes, peers);
        let server = RpcServer::start(
            listener,
            Arc::new(service),
            Signer::new(&secret),
            ServerOptions::default(),
        )
        .expect("serve");
        stores.push(store);
        servers.push(server);
    }
    Hosts {
        _dir: dir,
        stores,
        _servers: servers,
        client,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_and_upload_listings_count_each_partition_once_and_a_delete_seals_each_partition() {
    let h = hosts().await;
    let t = TenantId("acme".into());
    let b = h
        .client
        .create_bucket(&t, "everywhere", "us-east-1")
        .await
        .expect("create");
    // Every node holds every object and upload, as replicas would.
    for store in &h.stores {
        for i in 0..20 {
            let body: BodyStream = Box::pin(futures::stream::once(async {
                Ok(Bytes::from_static(b"0123456789"))
            }));
            store
                .put_object(
                    &b,
                    &format!("obj-{i}"),
                    Default::default(),
                    PutOptions::default(),
                    body,
                )
                .await
                .expect("put");
        }
        store
            .create_multipart_upload_with(&b, "upload-key", Default::default(), Vec::new(), None)
            .await
            .expect("create upload");
    }
    let usage = h.client.bucket_usage(b.id).await.expect("usage");
    assert_eq!((usage.objects, usage.bytes), (20, 200));
    let pending = h.client.bucket_pending(b.id).await.expect("pending");
    assert_eq!(
        pending.uploads, 1,
        "one upload per node, but one per partition leader"
    );
    let q = UploadQuery {
        max_uploads: 100,
        ..UploadQuery::default()
    };
    let page = h.client.list_multipart_uploads(&b, &q).await.expect("list");
    assert_eq!(page.entries.len(), 1);
    let listed = h
        .client
        .list_objects(
            &b,
            laneway_store::ListQuery {
                prefix: String::new(),
                delimiter: None,
                resume: laneway_store::Resume::Start,
                max_keys: 1000,
                tags: Vec::new(),
            },
        )
        .await
        .expect("list objects");
    assert_eq!(listed.entries.len(), 20);
    // Not empty at the leaders: the delete is refused, and the bucket
    // still takes writes everywhere (the seals were undone).
    let refused = h.client.delete_bucket(&t, "everywhere").await;
    assert!(
        matches!(refused, Err(StoreError::BucketNotEmpty)),
        "{refused:?}"
    );
    for store in &h.stores {
        let body: BodyStream = Box::pin(futures::stream::once(async {
            Ok(Bytes::from_static(b"x"))
        }));
        store
            .put_object(&b, "after", Default::default(), PutOptions::default(), body)
            .await
            .expect("writes still go in");
    }
    // Empty: deleted, and sealed at the node answering for each partition
    // (these partitions have no groups, so each node's seal is its own
    // gate's; every node answers for some partition here), so no node
    // takes a write into it. Replicated partitions seal through their
    // groups instead: replica/tests/store_groups.rs.
    for store in &h.stores {
        for i in 0..20 {
            store
                .delete_object(&b, &format!("obj-{i}"))
                .await
                .expect("delete");
        }
        store.delete_object(&b, "after").await.expect("delete");
    }
    h.client
        .delete_bucket(&t, "everywhere")
        .await
        .expect("empty bucket deleted");
    for store in &h.stores {
        let body: BodyStream = Box::pin(futures::stream::once(async {
            Ok(Bytes::from_static(b"x"))
        }));
        let late = store
            .put_object(&b, "late", Default::default(), PutOptions::default(), body)
            .await;
        assert!(matches!(late, Err(StoreError::NoSuchBucket)), "{late:?}");
    }
    for s in &h.stores {
        s.shutdown();
    }
}
