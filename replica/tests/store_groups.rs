//! Three replicated stores in one process (every partition a group of
//! three, over the in-memory transport): what the store acknowledged
//! survives the leader's stop, whole-object bodies above the inline size
//! included (they travel as volume pieces in the log), a follower refuses
//! to serve, and a stopped store catches up when it comes back; a
//! replica its group removed deletes its copy while its store runs, and
//! can be added back; with the catalog a group too, the quota holds in
//! flight outlive a change of its leader.
//!
//! Waits are bounded by generous timeouts that only turn a hang into a
//! failure; nothing asserts how long anything took.

use bytes::Bytes;
use futures::StreamExt;
use laneway_replica::group::{CATALOG_PARTITION, GroupLogs, GroupSpec, RaftOpener};
use laneway_replica::memnet::Router;
use laneway_replica::types::NodeId;
use laneway_replica::wal::Wal;
use laneway_store::ids::PartitionId;
use laneway_store::node::desk::QuotaDesk;
use laneway_store::replication::Replication;
use laneway_store::{BodyStream, BucketInfo, PutOptions, Store, StoreConfig, StoreError, TenantId};
use openraft::BasicNode;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PARTITIONS: u32 = 2;
const PATIENCE: Duration = Duration::from_secs(60);

fn members() -> BTreeMap<NodeId, BasicNode> {
    (1..=3)
        .map(|i| (i, BasicNode::new(format!("node-{i}"))))
        .collect()
}

/// Each partition's members as the nodes' map says (all three at first).
type Map = Arc<Mutex<Vec<BTreeMap<NodeId, BasicNode>>>>;

/// The stores of the three nodes and the transports between their groups.
struct Nodes {
    rt: tokio::runtime::Runtime,
    routers: Arc<Vec<Router>>,
    /// What the nodes' map says (read by their openers).
    map: Map,
    /// Whether every replica has heard no leader for an hour (as the
    /// nodes' Raft service would tell); else each heard one just now.
    quiet: Arc<AtomicBool>,
    dirs: Vec<PathBuf>,
    _root: tempfile::TempDir,
    stores: BTreeMap<NodeId, Arc<Store>>,
    /// Whether the catalog is a group of the three nodes too (else each
    /// node's catalog is its own).
    catalog: bool,
}

/// The transport slot of partition `p`'s group (the catalog's is last).
fn slot(p: PartitionId) -> usize {
    if p == CATALOG_PARTITION {
        PARTITIONS as usize
    } else {
        p.0 as usize
    }
}

impl Nodes {
    fn new() -> Nodes {
        Nodes::open(false)
    }

    /// Three nodes whose catalog is a group of the three as well.
    fn with_catalog() -> Nodes {
        Nodes::open(true)
    }

    fn open(catalog: bool) -> Nodes {
        let root = tempfile::tempdir().expect("tempdir");
        let dirs = (1..=3).map(|i| root.path().join(format!("n{i}"))).collect();
        let routers = Arc::new((0..=PARTITIONS).map(|_| Router::default()).collect());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let mut nodes = Nodes {
            rt,
            routers,
            map: Arc::new(Mutex::new((0..PARTITIONS).map(|_| members()).collect())),
            quiet: Arc::default(),
            dirs,
            _root: root,
            stores: BTreeMap::new(),
            catalog,
        };
        for id in 1..=3 {
            nodes.start(id);
        }
        nodes
    }

    /// Open node `id`'s store (its groups join the transport).
    fn start(&mut self, id: NodeId) {
        let store = open_store(
            &self.dirs[usize::try_from(id - 1).expect("id")],
            id,
            &self.routers,
            (Arc::clone(&self.map), Arc::clone(&self.quiet)),
            self.rt.handle().clone(),
            self.catalog,
        );
        self.stores.insert(id, store);
    }

    /// Stop node `id`: unreachable first, then its store closed.
    fn stop(&mut self, id: NodeId) {
        for r in self.routers.iter() {
            r.remove(id);
        }
        if let Some(s) = self.stores.remove(&id) {
            s.shutdown();
        }
    }

    /// The node whose store accepts a PUT of `key` (its partition's
    /// leader), retrying through elections.
    fn put(&self, b: &BucketInfo, key: &str, data: &[u8]) -> NodeId {
        let start = Instant::now();
        loop {
            for (&id, store) in &self.stores {
                let r = self.rt.block_on(store.put_object(
                    b,
                    key,
                    Default::default(),
                    opts(data.len()),
                    body(data),
                ));
                match r {
                    Ok(_) => return id,
                    Err(StoreError::NotLeader(_) | StoreError::Unavailable(_)) => {}
                    Err(e) => panic!("put {key} at node {id}: {e}"),
                }
            }
            assert!(start.elapsed() < PATIENCE, "no leader took {key}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `key` read at its partition's leader after a read barrier.
    fn get(&self, b: &BucketInfo, key: &str) -> Option<Vec<u8>> {
        let start = Instant::now();
        let p = laneway_store::hash::partition_of(b.id, key.as_bytes(), PARTITIONS);
        loop {
            for store in self.stores.values() {
                let group = store.group_of(p);
                if self.rt.block_on(group.read_barrier()).is_err() {
                    continue;
                }
                return match store.get_object(b, key, None) {
                    Ok((_, stream)) => Some(self.rt.block_on(read_all(stream))),
                    Err(StoreError::NoSuchKey) => None,
                    Err(e) => panic!("get {key}: {e}"),
                };
            }
            assert!(start.elapsed() < PATIENCE, "no leader served {key}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The bucket's usage, each partition's read at its leader after a
    /// read barrier (a follower's count may lag its log).
    fn usage(&self, b: &BucketInfo) -> (i64, i64) {
        let mut total = (0, 0);
        for p in (0..PARTITIONS).map(PartitionId) {
            let start = Instant::now();
            let u = loop {
                let led = self.stores.values().find(|store| {
                    let group = store.group_of(p);
                    self.rt.block_on(group.read_barrier()).is_ok()
                });
                if let Some(store) = led {
                    break store.bucket_usage_in(b.id, &[p]).expect("usage");
                }
                assert!(start.elapsed() < PATIENCE, "no leader of {p}");
                std::thread::sleep(Duration::from_millis(50));
            };
            total = (total.0 + u.objects, total.1 + u.bytes);
        }
        total
    }

    /// The leader of partition `p`, once one leads.
    fn leader(&self, p: PartitionId) -> NodeId {
        let start = Instant::now();
        loop {
            for (&id, store) in &self.stores {
                let status = store.group_of(p).status();
                if status.leader == Some(id) {
                    return id;
                }
            }
            assert!(start.elapsed() < PATIENCE, "{p} elected no leader");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        let ids: Vec<NodeId> = self.stores.keys().copied().collect();
        for id in ids {
            self.stop(id);
        }
    }
}

/// A hosted partition's group at a store (every partition is replicated
/// here).
trait GroupOf {
    fn group_of(&self, p: PartitionId) -> &Arc<dyn laneway_store::replication::Group>;
}

impl GroupOf for Store {
    fn group_of(&self, p: PartitionId) -> &Arc<dyn laneway_store::replication::Group> {
        self.partition(p).expect("hosted").group().expect("group")
    }
}

fn open_store(
    dir: &Path,
    me: NodeId,
    routers: &Arc<Vec<Router>>,
    (map, quiet): (Map, Arc<AtomicBool>),
    handle: tokio::runtime::Handle,
    catalog: bool,
) -> Arc<Store> {
    let (net, started) = (Arc::clone(routers), Arc::clone(routers));
    let opener = RaftOpener {
        catalog: catalog.then(|| GroupSpec {
            me,
            members: members(),
            initializer: None,
        }),
        spec: Box::new(move |p: PartitionId| GroupSpec {
            me,
            members: map.lock()[p.0 as usize].clone(),
            initializer: None,
        }),
        unheard_for: Box::new(move |_| {
            let quiet = quiet.load(Ordering::Relaxed);
            Some(Duration::from_secs(if quiet { 3600 } else { 0 }))
        }),
        network: Box::new(move |p: PartitionId| net[slot(p)].clone()),
        started: Box::new(move |p: PartitionId, raft, _, _: &GroupSpec| {
            started[slot(p)].add(me, raft);
            None
        }),
        handle,
        snapshot_entries: laneway_replica::group::SNAPSHOT_ENTRIES,
        own_heartbeats: true,
        logs: GroupLogs::File {
            wal: Wal::open(&dir.join(laneway_replica::node::WAL_DIR))
                .expect("open the node's log file"),
            older: None,
        },
        applies: Some(laneway_replica::group::apply_queue().expect("start the apply thread")),
    };
    let cfg = StoreConfig {
        partitions: Some(PARTITIONS),
        inline_max: 1024,
        groups: Some(Replication(Arc::new(opener))),
        ..StoreConfig::default()
    };
    Store::open(dir, cfg).expect("open a replicated store")
}

fn opts(len: usize) -> PutOptions {
    PutOptions {
        content_length: Some(len as u64),
        ..PutOptions::default()
    }
}

fn body(data: &[u8]) -> BodyStream {
    let chunks: Vec<Result<Bytes, std::io::Error>> = data
        .chunks(64 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(chunks))
}

async fn read_all(mut s: BodyStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.expect("body chunk"));
    }
    out
}

/// A body of `len` bytes that differs per `seed`.
fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// The same bucket in every node's (local) catalog.
fn bucket(nodes: &Nodes) -> BucketInfo {
    let tenant = TenantId("t1".into());
    let made: Vec<BucketInfo> = nodes
        .stores
        .values()
        .map(|s| s.create_bucket(&tenant, "b", "us-east-1").expect("bucket"))
        .collect();
    assert!(made.windows(2).all(|w| w[0].id == w[1].id));
    made[0].clone()
}

#[test]
fn acknowledged_objects_survive_the_leaders_stop_and_a_replica_catches_up() {
    let mut nodes = Nodes::new();
    let b = bucket(&nodes);
    // Small (inline) and large (volume, several shipped pieces) bodies.
    let sizes = [10usize, 900, 5_000, 300_000, 2_500_000];
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("k{i}");
        let body = data(i as u64, len);
        nodes.put(&b, &key, &body);
        acked.insert(key, body);
    }
    for (k, v) in &acked {
        assert_eq!(
            nodes.get(&b, k).as_deref(),
            Some(v.as_slice()),
            "{k} before the stop"
        );
    }
    // A follower's store refuses reads.
    let p0 = PartitionId(0);
    let leader = nodes.leader(p0);
    let follower = *nodes
        .stores
        .keys()
        .find(|&&id| id != leader)
        .expect("a follower");
    let g = nodes.stores[&follower].group_of(p0).clone();
    assert!(matches!(
        nodes.rt.block_on(g.read_barrier()),
        Err(StoreError::NotLeader(_))
    ));

    // Stop partition 0's leader: a new one serves everything acknowledged
    // (its volumes got the large bodies from the log), and takes writes.
    nodes.stop(leader);
    for (k, v) in &acked {
        assert_eq!(
            nodes.get(&b, k).as_deref(),
            Some(v.as_slice()),
            "{k} after the stop"
        );
    }
    for i in 0..4u64 {
        let key = format!("after-{i}");
        let body = data(100 + i, if i % 2 == 0 { 200 } else { 700_000 });
        nodes.put(&b, &key, &body);
        acked.insert(key, body);
    }
    // Overwrite and delete while one replica is down.
    let over = data(999, 50_000);
    nodes.put(&b, "k0", &over);
    acked.insert("k0".into(), over);

    // The stopped node comes back and catches up from the log; then the
    // other two stop in turn, so it must serve as leader with the rest.
    nodes.start(leader);
    let others: Vec<NodeId> = nodes
        .stores
        .keys()
        .copied()
        .filter(|&id| id != leader)
        .collect();
    // Let it catch up before the others go (it needs a quorum partner).
    wait_caught_up(&nodes, leader);
    nodes.stop(others[0]);
    for (k, v) in &acked {
        assert_eq!(
            nodes.get(&b, k).as_deref(),
            Some(v.as_slice()),
            "{k} after the restart"
        );
    }
    let (objects, bytes) = nodes.usage(&b);
    assert_eq!(objects, acked.len() as i64);
    assert_eq!(bytes, acked.values().map(|v| v.len() as i64).sum::<i64>());
}

#[test]
fn a_replica_its_group_removed_deletes_its_copy_while_its_node_runs_and_can_come_back() {
    let nodes = Nodes::new();
    let b = bucket(&nodes);
    let p0 = PartitionId(0);
    let in_p0 = |k: &str| laneway_store::hash::partition_of(b.id, k.as_bytes(), PARTITIONS) == p0;
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for i in 0..12u64 {
        let key = format!("k{i}");
        let body = data(i, if i % 3 == 0 { 300_000 } else { 100 });
        nodes.put(&b, &key, &body);
        acked.insert(key, body);
    }
    assert!(acked.keys().any(|k| in_p0(k)) && acked.keys().any(|k| !in_p0(k)));
    let leader = nodes.leader(p0);
    let gone = (1..=3).find(|&id| id != leader).expect("a follower");
    wait_caught_up(&nodes, gone);
    let at_gone = &nodes.stores[&gone];
    let group = Arc::clone(at_gone.group_of(p0));
    let segments = nodes.dirs[usize::try_from(gone - 1).expect("id")]
        .join("partitions")
        .join(p0.to_string())
        .join("volumes");
    let segment_files = || {
        std::fs::read_dir(&segments)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("seg-"))
                    .count()
            })
            .unwrap_or(0)
    };
    assert!(
        segment_files() > 0,
        "the large bodies of p0 are in the follower's volumes"
    );
    nodes.quiet.store(true, Ordering::Relaxed);
    assert!(
        !group.forget_if_left().expect("asked"),
        "a replica the map still places here keeps its copy"
    );

    // The group removes it; the map then names the other two.
    let voters: Vec<NodeId> = (1..=3).filter(|&id| id != gone).collect();
    let change = laneway_store::replication::MemberChange::SetVoters {
        voters: voters.clone(),
    };
    nodes
        .rt
        .block_on(nodes.stores[&leader].group_of(p0).change_members(change))
        .expect("remove the follower");
    nodes.map.lock()[0].remove(&gone);
    nodes.quiet.store(false, Ordering::Relaxed);
    assert!(
        !group.forget_if_left().expect("asked"),
        "a replica that heard a leader lately keeps its copy"
    );
    nodes.quiet.store(true, Ordering::Relaxed);
    assert!(group.forget_if_left().expect("forgotten"));
    let status = group.status();
    assert_eq!((status.last_log, status.applied), (0, 0), "{status:?}");
    assert_eq!(segment_files(), 0, "its volume segments are deleted");
    for (k, v) in &acked {
        let local = match at_gone.get_object(&b, k, None) {
            Ok((_, stream)) => Some(nodes.rt.block_on(read_all(stream))),
            Err(StoreError::NoSuchKey) => None,
            Err(e) => panic!("local read of {k}: {e}"),
        };
        let want = (!in_p0(k)).then_some(v.as_slice());
        assert_eq!(local.as_deref(), want, "{k} at the node that left p0");
    }
    assert!(
        !group.forget_if_left().expect("asked"),
        "nothing is left to forget"
    );
    // The group goes on without it.
    let over = data(77, 5_000);
    let key = acked
        .keys()
        .find(|k| in_p0(k))
        .expect("a key of p0")
        .clone();
    nodes.put(&b, &key, &over);
    acked.insert(key, over);

    // Added back: as a learner it keeps what it receives, then it is a
    // voter with everything.
    let add = laneway_store::replication::MemberChange::AddLearner {
        id: gone,
        addr: format!("node-{gone}"),
    };
    nodes
        .rt
        .block_on(nodes.stores[&leader].group_of(p0).change_members(add))
        .expect("add it back as a learner");
    let start = Instant::now();
    while !group.status().learners.contains(&gone) {
        assert!(
            start.elapsed() < PATIENCE,
            "it never learned it is a learner"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !group.forget_if_left().expect("asked"),
        "a learner being caught up keeps what it received"
    );
    let all = laneway_store::replication::MemberChange::SetVoters {
        voters: (1..=3).collect(),
    };
    nodes
        .rt
        .block_on(nodes.stores[&leader].group_of(p0).change_members(all))
        .expect("a voter again");
    nodes.map.lock()[0] = members();
    wait_caught_up(&nodes, gone);
    for (k, v) in acked.iter().filter(|(k, _)| in_p0(k)) {
        let (_, stream) = at_gone.get_object(&b, k, None).expect("caught up");
        assert_eq!(
            &nodes.rt.block_on(read_all(stream)),
            v,
            "{k} back at the node"
        );
    }
}

/// Wait until node `id` has applied, in every partition, what the leader
/// had committed when the wait began.
fn wait_caught_up(nodes: &Nodes, id: NodeId) {
    for p in 0..PARTITIONS {
        let p = PartitionId(p);
        let leader = nodes.leader(p);
        let target = nodes.stores[&leader].group_of(p).status().last_log;
        let start = Instant::now();
        loop {
            let s = nodes.stores[&id].group_of(p).status();
            if s.applied >= target {
                break;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "node {id} did not catch up on {p}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_replica_behind_a_purged_log_catches_up_from_a_snapshot_with_its_volumes() {
    let mut nodes = Nodes::new();
    let b = bucket(&nodes);
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let put = |nodes: &Nodes, acked: &mut BTreeMap<String, Vec<u8>>, key: &str, body: Vec<u8>| {
        nodes.put(&b, key, &body);
        acked.insert(key.to_string(), body);
    };
    // Before the stop: inline bodies and shipped ones of one and several
    // pieces.
    for (i, len) in [10usize, 300_000, 2_500_000].into_iter().enumerate() {
        put(
            &nodes,
            &mut acked,
            &format!("before-{i}"),
            data(i as u64, len),
        );
    }
    let behind: NodeId = 3;
    nodes.stop(behind);
    for (i, len) in [700_000usize, 50, 1_200_000, 90_000]
        .into_iter()
        .enumerate()
    {
        put(
            &nodes,
            &mut acked,
            &format!("while-{i}"),
            data(50 + i as u64, len),
        );
    }
    put(&nodes, &mut acked, "before-1", data(77, 400_000));

    // Every group's leader snapshots and purges its whole log, so the
    // replica that was down can only catch up from the snapshot.
    for p in 0..PARTITIONS {
        let leader = nodes.leader(PartitionId(p));
        let raft = nodes.routers[p as usize]
            .get(leader)
            .expect("leader's raft");
        snapshot_and_purge(&nodes.rt, &raft);
    }

    nodes.start(behind);
    wait_caught_up(&nodes, behind);
    for p in 0..PARTITIONS {
        let raft = nodes.routers[p as usize].get(behind).expect("raft");
        assert!(
            raft.metrics().borrow().snapshot.is_some(),
            "partition {p} caught up through a snapshot"
        );
    }
    // Its own index and volumes hold every acknowledged object, read
    // straight from its store (as it would serve them on leading).
    let store = Arc::clone(&nodes.stores[&behind]);
    for (k, v) in &acked {
        let (_, stream) = store
            .get_object(&b, k, None)
            .expect("on the caught-up replica");
        assert_eq!(&nodes.rt.block_on(read_all(stream)), v, "{k}");
    }
    // And it takes part in new writes, which read back everywhere.
    let others: Vec<NodeId> = [1, 2].into_iter().collect();
    nodes.stop(others[0]);
    put(&nodes, &mut acked, "after", data(99, 800_000));
    for (k, v) in &acked {
        assert_eq!(nodes.get(&b, k).as_deref(), Some(v.as_slice()), "{k}");
    }
    let (objects, bytes) = nodes.usage(&b);
    assert_eq!(objects, acked.len() as i64);
    assert_eq!(bytes, acked.values().map(|v| v.len() as i64).sum::<i64>());
}

/// Have `raft` (a leader) build a snapshot of everything it applied and
/// purge its log up to it; wait for both.
fn snapshot_and_purge(rt: &tokio::runtime::Runtime, raft: &laneway_replica::PartitionRaft) {
    let applied = raft.metrics().borrow().last_applied.expect("applied").index;
    rt.block_on(async {
        raft.trigger().snapshot().await.expect("trigger snapshot");
        raft.wait(Some(PATIENCE))
            .metrics(
                |m| m.snapshot.is_some_and(|s| s.index >= applied),
                "snapshot built",
            )
            .await
            .expect("snapshot");
        raft.trigger()
            .purge_log(applied)
            .await
            .expect("trigger purge");
        raft.wait(Some(PATIENCE))
            .metrics(
                |m| m.purged.is_some_and(|s| s.index >= applied),
                "log purged",
            )
            .await
            .expect("purged");
    });
}

#[test]
fn a_leader_cut_off_from_its_followers_serves_no_read_once_its_lease_lapses() {
    let mut nodes = Nodes::new();
    let b = bucket(&nodes);
    nodes.put(&b, "k", b"v");
    let p = PartitionId(0);
    let leader = nodes.leader(p);
    let group = nodes.stores[&leader].group_of(p).clone();
    nodes
        .rt
        .block_on(group.read_barrier())
        .expect("the leader reads");
    // Both followers gone: no append of this leader is acknowledged any
    // more. Past the lease (325 ms) and a heartbeat, a read must not be
    // served on the strength of the old acknowledgements.
    let followers: Vec<NodeId> = nodes
        .stores
        .keys()
        .copied()
        .filter(|&id| id != leader)
        .collect();
    for id in followers {
        nodes.stop(id);
    }
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        nodes.rt.block_on(group.read_barrier()).is_err(),
        "a lapsed lease serves no read"
    );
}

impl Nodes {
    /// `f` at the leader of what it touches: the first store whose answer
    /// is not "not the leader" or "no quorum yet", retrying through
    /// elections.
    fn at_leader<T>(&self, f: impl Fn(&Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let start = Instant::now();
        loop {
            for store in self.stores.values() {
                match f(store) {
                    Err(StoreError::NotLeader(_) | StoreError::Unavailable(_)) => {}
                    done => return done,
                }
            }
            assert!(start.elapsed() < PATIENCE, "no leader answered");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A key of bucket `b` in partition `p`.
fn key_in(b: &BucketInfo, p: PartitionId, tag: &str) -> String {
    (0..)
        .map(|i| format!("{tag}-{i}"))
        .find(|k| laneway_store::hash::partition_of(b.id, k.as_bytes(), PARTITIONS) == p)
        .expect("some key lands in every partition")
}

#[test]
fn a_delete_bucket_seal_goes_through_the_groups_with_a_node_down_and_holds_at_later_leaders() {
    let mut nodes = Nodes::new();
    let b = bucket(&nodes);
    let parts: Vec<PartitionId> = (0..PARTITIONS).map(PartitionId).collect();
    let kept = key_in(&b, parts[0], "kept");
    nodes.put(&b, &kept, b"body");
    // Node 3 is down: each group's seal needs only its quorum.
    nodes.stop(3);
    let seal = |nodes: &Nodes, p: PartitionId| {
        nodes.at_leader(|s| nodes.rt.block_on(s.seal_bucket_in(b.id, &[p])))
    };
    let revive = |nodes: &Nodes, p: PartitionId| {
        nodes.at_leader(|s| nodes.rt.block_on(s.revive_bucket_in(b.id, &[p])))
    };
    let put = |nodes: &Nodes, key: &str| {
        nodes.at_leader(|s| {
            let r = s.put_object(&b, key, Default::default(), opts(4), body(b"late"));
            nodes.rt.block_on(r)
        })
    };
    // Not empty where the object is: refused, and nothing sealed there.
    assert!(matches!(
        seal(&nodes, parts[0]),
        Err(StoreError::BucketNotEmpty)
    ));
    seal(&nodes, parts[1]).expect("an empty partition is sealed");
    let late = put(&nodes, &key_in(&b, parts[1], "late"));
    assert!(matches!(late, Err(StoreError::NoSuchBucket)), "{late:?}");
    put(&nodes, &key_in(&b, parts[0], "late")).expect("the unsealed partition takes writes");
    // The failed delete is undone: both take writes again.
    for &p in &parts {
        revive(&nodes, p).expect("revive");
        put(&nodes, &key_in(&b, p, "again")).expect("revived");
    }
    // Emptied and sealed everywhere, still with node 3 down.
    for &p in &parts {
        for tag in ["kept", "late", "again"] {
            let key = key_in(&b, p, tag);
            nodes
                .at_leader(|s| nodes.rt.block_on(s.delete_object(&b, &key)))
                .expect("delete");
        }
    }
    for &p in &parts {
        seal(&nodes, p).expect("empty: sealed");
    }
    // Node 3 comes back with the seals from the logs; no node's own gate
    // was sealed, so every refusal below is a seal row's.
    nodes.start(3);
    wait_caught_up(&nodes, 3);
    for &p in &parts {
        let index = nodes.stores[&3].partition(p).expect("hosted").index();
        let row = index.get(&laneway_store::seal_rows::seal_key(b.id));
        assert!(row.expect("get").is_some(), "node 3 has {p}'s seal");
    }
    // Each partition's sealing leader stops in turn; whoever leads next
    // refuses writes into the bucket.
    for &p in &parts {
        let leader = nodes.leader(p);
        nodes.stop(leader);
        for &q in &parts {
            let late = put(&nodes, &key_in(&b, q, "after-stop"));
            assert!(matches!(late, Err(StoreError::NoSuchBucket)), "{late:?}");
        }
        nodes.start(leader);
        wait_caught_up(&nodes, leader);
    }
    assert_eq!(nodes.usage(&b), (0, 0), "nothing under the sealed id");
}

/// The node whose replica leads the catalog's group, once one does.
fn catalog_leader(nodes: &Nodes) -> NodeId {
    let start = Instant::now();
    loop {
        for (&id, store) in &nodes.stores {
            let status = store.catalog_group().expect("a catalog group").status();
            if status.leader == Some(id) {
                return id;
            }
        }
        assert!(start.elapsed() < PATIENCE, "the catalog elected no leader");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A quota desk's surroundings: the tenant's usage read from a store of
/// its own, where it stores nothing (only the holds in flight count),
/// and an 8 MiB byte quota.
struct DeskFixture {
    _dir: tempfile::TempDir,
    usage: Arc<dyn laneway_store::StoreClient>,
    tenant: TenantId,
    limits: laneway_store::quota::QuotaLimits,
}

const MIB: u64 = 1 << 20;

impl DeskFixture {
    fn new() -> DeskFixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let usage = Arc::new(laneway_store::LocalStore::new(
            Store::open(dir.path(), StoreConfig::default()).expect("usage store"),
        ));
        DeskFixture {
            _dir: dir,
            usage,
            tenant: TenantId("t1".into()),
            limits: laneway_store::quota::QuotaLimits {
                quota_bytes: Some(8 * MIB),
                ..Default::default()
            },
        }
    }

    /// A desk at node `id`'s store.
    fn desk_at(&self, nodes: &Nodes, id: NodeId) -> Arc<QuotaDesk> {
        Arc::new(QuotaDesk::new(
            Arc::clone(&self.usage),
            Arc::clone(&nodes.stores[&id]),
        ))
    }

    /// What a write of one object of `bytes` asks.
    fn write(&self, bytes: u64) -> laneway_store::quota::QuotaAsk {
        laneway_store::quota::QuotaAsk::Write {
            bucket: BucketInfo {
                id: laneway_store::ids::BucketId(1),
                tenant: self.tenant.clone(),
                name: "b".into(),
                created_ms: 0,
                region: "us-east-1".into(),
                tags: Vec::new(),
            },
            key: None,
            bytes,
            objects: 1,
        }
    }

    /// A reservation of `bytes` (under the call id `named`, if any),
    /// retried through an election's NotLeader and Unavailable answers.
    fn reserve(
        &self,
        nodes: &Nodes,
        desk: &Arc<QuotaDesk>,
        named: Option<u64>,
        bytes: u64,
    ) -> Result<Option<u64>, StoreError> {
        let write = self.write(bytes);
        let start = Instant::now();
        loop {
            match nodes
                .rt
                .block_on(desk.reserve(named, &self.tenant, &self.limits, &write, None))
            {
                Err(StoreError::NotLeader(_) | StoreError::Unavailable(_))
                    if start.elapsed() < PATIENCE =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }
}

#[test]
fn quota_holds_in_flight_outlive_a_change_of_the_catalog_s_leader() {
    let mut nodes = Nodes::with_catalog();
    let f = DeskFixture::new();
    let reserve =
        |nodes: &Nodes, desk: &Arc<QuotaDesk>, bytes: u64| f.reserve(nodes, desk, None, bytes);
    let desk_at = |nodes: &Nodes, id: NodeId| f.desk_at(nodes, id);
    let first = catalog_leader(&nodes);
    let desk = desk_at(&nodes, first);
    let big = reserve(&nodes, &desk, 6 * MIB)
        .expect("6 of 8 MiB")
        .expect("held");
    let small = reserve(&nodes, &desk, MIB)
        .expect("7 of 8 MiB")
        .expect("held");
    nodes.rt.block_on(desk.release(small)).expect("released");
    assert!(matches!(
        reserve(&nodes, &desk, 3 * MIB),
        Err(StoreError::QuotaExceeded(_))
    ));
    // The catalog's leader stops with the 6 MiB write still in flight
    // (its desk goes with it, and lets go of its store).
    drop(desk);
    nodes.stop(first);
    let second = catalog_leader(&nodes);
    let desk = desk_at(&nodes, second);
    let refused = reserve(&nodes, &desk, 3 * MIB);
    assert!(
        matches!(refused, Err(StoreError::QuotaExceeded(_))),
        "the new leader's desk counts the write in flight: {refused:?}"
    );
    assert_eq!(
        desk.held(),
        1,
        "the hold given back before the stop is not taken over"
    );
    let fits = reserve(&nodes, &desk, 2 * MIB)
        .expect("8 of 8 MiB")
        .expect("held");
    // The write of the 6 MiB finishes: its release, sent to the new
    // leader, frees its room there.
    nodes
        .rt
        .block_on(desk.release(big))
        .expect("released at the new leader");
    reserve(&nodes, &desk, 6 * MIB)
        .expect("2 + 6 of 8 MiB")
        .expect("held");
    // The first leader comes back and the leadership moves again: the
    // holds follow, the one given back does not.
    nodes.start(first);
    nodes.rt.block_on(desk.release(fits)).expect("released");
    drop(desk);
    nodes.stop(second);
    let third = catalog_leader(&nodes);
    let desk = desk_at(&nodes, third);
    assert!(matches!(
        reserve(&nodes, &desk, 3 * MIB),
        Err(StoreError::QuotaExceeded(_))
    ));
    reserve(&nodes, &desk, 2 * MIB)
        .expect("6 + 2 of 8 MiB")
        .expect("held");
}

#[test]
fn a_reservation_asked_again_holds_once_at_its_desk_and_at_the_next_leader() {
    let mut nodes = Nodes::with_catalog();
    let f = DeskFixture::new();
    // Named by its call's id, as a gateway's reservation is.
    let reserve = |nodes: &Nodes, desk: &Arc<QuotaDesk>, named: Option<u64>, bytes: u64| {
        f.reserve(nodes, desk, named, bytes)
    };
    let desk_at = |nodes: &Nodes, id: NodeId| f.desk_at(nodes, id);
    const NAMED: u64 = 0x5eed_0000_0000_0077;
    let first = catalog_leader(&nodes);
    let desk = desk_at(&nodes, first);
    assert_eq!(
        reserve(&nodes, &desk, Some(NAMED), 6 * MIB).expect("6 of 8 MiB"),
        Some(NAMED)
    );
    // Its answer was lost, say: asked again, it is the same hold (held
    // twice, 12 MiB would not fit under 8).
    assert_eq!(
        reserve(&nodes, &desk, Some(NAMED), 6 * MIB).expect("again"),
        Some(NAMED)
    );
    assert_eq!(desk.held(), 1);
    let two = reserve(&nodes, &desk, None, 2 * MIB)
        .expect("6 + 2 of 8 MiB")
        .expect("held");
    nodes.rt.block_on(desk.release(two)).expect("released");
    // The leader stops; the call is asked again at the next one, which
    // took the hold over from its row.
    drop(desk);
    nodes.stop(first);
    let second = catalog_leader(&nodes);
    let desk = desk_at(&nodes, second);
    assert_eq!(
        reserve(&nodes, &desk, Some(NAMED), 6 * MIB).expect("at the next leader"),
        Some(NAMED)
    );
    assert_eq!(desk.held(), 1, "taken over, not held again");
    let two = reserve(&nodes, &desk, None, 2 * MIB)
        .expect("6 + 2 of 8 MiB at the next leader")
        .expect("held");
    assert!(matches!(
        reserve(&nodes, &desk, None, MIB),
        Err(StoreError::QuotaExceeded(_))
    ));
    // Given back, the id names nothing: asked again, it is checked anew.
    nodes.rt.block_on(desk.release(NAMED)).expect("released");
    nodes.rt.block_on(desk.release(two)).expect("released");
    assert_eq!(
        reserve(&nodes, &desk, Some(NAMED), 8 * MIB).expect("8 of 8 MiB"),
        Some(NAMED)
    );
    assert_eq!(desk.held(), 1);
}

#[test]
fn a_reservation_that_arrives_after_its_sender_stopped_waiting_holds_nothing() {
    let nodes = Nodes::with_catalog();
    let f = DeskFixture::new();
    let desk = f.desk_at(&nodes, catalog_leader(&nodes));
    // The desk has taken over (one reservation answered and given back).
    let six = f
        .reserve(&nodes, &desk, None, 6 * MIB)
        .expect("6 of 8 MiB")
        .expect("held");
    nodes.rt.block_on(desk.release(six)).expect("released");
    // Its sender's wait is over: the sender gives its id back, so a hold
    // made now would be counted until it lapses.
    const NAMED: u64 = 0x5eed_0000_0000_0078;
    let over = Some(Instant::now());
    let late =
        nodes
            .rt
            .block_on(desk.reserve(Some(NAMED), &f.tenant, &f.limits, &f.write(6 * MIB), over));
    assert!(matches!(late, Err(StoreError::Unavailable(_))), "{late:?}");
    assert_eq!(desk.held(), 0);
    // So the whole quota is still there.
    let all = f.reserve(&nodes, &desk, None, 8 * MIB).expect("8 of 8 MiB");
    assert!(all.is_some());
    assert_eq!(desk.held(), 1);
}
