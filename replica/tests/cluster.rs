//! Three replicas of one partition in one process, over the in-memory
//! transport: what a client was told is committed survives the leader's
//! stop, and a replica that was down catches up, from the log or, once the
//! log it missed is purged, from a snapshot.
//!
//! Waits are bounded by generous timeouts that only turn a hang into a
//! failure; nothing asserts how long anything took.

use laneway_replica::memnet::Router;
use laneway_replica::{Mutation, NodeId, PartitionRaft, open_group};
use laneway_store::Engine;
use laneway_store::index::{MetaIndex, WriteBatch};
use openraft::{BasicNode, Config, SnapshotPolicy};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;

/// The bound on every wait.
const PATIENCE: Duration = Duration::from_secs(60);

/// One running replica.
struct Replica {
    id: NodeId,
    raft: PartitionRaft,
    index: Arc<dyn MetaIndex>,
}

/// Three replica directories and the transport between them.
struct Cluster {
    root: TempDir,
    router: Router,
    config: Arc<Config>,
    running: BTreeMap<NodeId, Replica>,
}

fn config() -> Arc<Config> {
    let config = Config {
        heartbeat_interval: 100,
        election_timeout_min: 500,
        election_timeout_max: 1000,
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 0,
        ..Default::default()
    };
    Arc::new(config.validate().expect("valid config"))
}

impl Cluster {
    /// Replicas 1, 2 and 3 started and initialised as one group.
    async fn start() -> Cluster {
        let mut cluster = Cluster {
            root: tempfile::tempdir().expect("tempdir"),
            router: Router::default(),
            config: config(),
            running: BTreeMap::new(),
        };
        for id in 1..=3 {
            cluster.start_node(id).await;
        }
        let members: BTreeMap<NodeId, BasicNode> = (1..=3)
            .map(|id| (id, BasicNode::new(format!("node-{id}"))))
            .collect();
        cluster
            .node(1)
            .raft
            .initialize(members)
            .await
            .expect("initialize");
        cluster
    }

    fn dir(&self, id: NodeId) -> PathBuf {
        self.root.path().join(format!("node-{id}"))
    }

    /// Start (or restart) replica `id` from its directory.
    async fn start_node(&mut self, id: NodeId) {
        let (log, machine) = open_group(&self.dir(id), Engine::Fjall).expect("open replica");
        let index = Arc::clone(machine.index());
        let raft = PartitionRaft::new(
            id,
            Arc::clone(&self.config),
            self.router.clone(),
            log,
            machine,
        )
        .await
        .expect("start raft");
        self.router.add(id, raft.clone());
        self.running.insert(id, Replica { id, raft, index });
    }

    /// Stop replica `id`: unreachable at once, then shut down and closed.
    async fn stop_node(&mut self, id: NodeId) {
        self.router.remove(id);
        let replica = self.running.remove(&id).expect("running replica");
        replica.raft.shutdown().await.expect("shutdown");
    }

    fn node(&self, id: NodeId) -> &Replica {
        self.running.get(&id).expect("running replica")
    }

    /// The leader every running replica agrees on.
    async fn leader(&self) -> NodeId {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(leader) = self.agreed_leader() {
                return leader;
            }
            assert!(tokio::time::Instant::now() < deadline, "no agreed leader");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The leader all running replicas name, if they name the same running one.
    fn agreed_leader(&self) -> Option<NodeId> {
        let mut seen = self
            .running
            .values()
            .map(|r| r.raft.metrics().borrow().current_leader);
        let first = seen.next()??;
        (seen.all(|l| l == Some(first)) && self.running.contains_key(&first)).then_some(first)
    }

    /// Put `key` through whoever leads, retrying across a leader change as
    /// a gateway would; returns once the write is committed (acknowledged).
    async fn put(&self, key: &str, value: &str) -> u64 {
        let mut batch = WriteBatch::default();
        batch.put(key.as_bytes().to_vec(), value.as_bytes().to_vec());
        self.propose(Mutation::of_batch(&batch)).await
    }

    /// Delete `key` as [`Cluster::put`] puts it.
    async fn delete(&self, key: &str) -> u64 {
        let mut batch = WriteBatch::default();
        batch.delete(key.as_bytes().to_vec());
        self.propose(Mutation::of_batch(&batch)).await
    }

    async fn propose(&self, mutation: Mutation) -> u64 {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let leader = self.leader().await;
            match self.node(leader).raft.client_write(mutation.clone()).await {
                Ok(reply) => return reply.data.index,
                Err(e) => assert!(tokio::time::Instant::now() < deadline, "write failed: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Wait until replica `id` has applied up to `index`.
    async fn applied(&self, id: NodeId, index: u64) {
        self.node(id)
            .raft
            .wait(Some(PATIENCE))
            .applied_index_at_least(Some(index), "applied")
            .await
            .expect("replica catches up");
    }
}

/// The value of `key` in a replica's partition index.
fn value(replica: &Replica, key: &str) -> Option<String> {
    let bytes = replica.index.get(key.as_bytes()).expect("index get");
    bytes.map(|b| String::from_utf8(b).expect("utf8"))
}

/// Every acknowledged write is in replica's index.
fn assert_has(replica: &Replica, acked: &BTreeMap<String, String>) {
    for (key, want) in acked {
        let got = value(replica, key);
        assert_eq!(
            got.as_deref(),
            Some(want.as_str()),
            "node {} key {key}",
            replica.id
        );
    }
}

async fn put_many(
    cluster: &Cluster,
    acked: &mut BTreeMap<String, String>,
    range: std::ops::Range<u32>,
) -> u64 {
    let mut last = 0;
    for i in range {
        let (key, val) = (format!("okey-{i:04}"), format!("value-{i}"));
        last = cluster.put(&key, &val).await;
        acked.insert(key, val);
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_the_leaders_stop_and_a_restarted_replica_catches_up() {
    let mut cluster = Cluster::start().await;
    let mut acked = BTreeMap::new();
    put_many(&cluster, &mut acked, 0..20).await;

    let old = cluster.leader().await;
    cluster.stop_node(old).await;
    let new = cluster.leader().await;
    assert_ne!(new, old, "a survivor leads");
    let last = put_many(&cluster, &mut acked, 20..40).await;

    let survivors: Vec<NodeId> = cluster.running.keys().copied().collect();
    for id in &survivors {
        cluster.applied(*id, last).await;
        assert_has(cluster.node(*id), &acked);
    }

    cluster.start_node(old).await;
    cluster.applied(old, last).await;
    assert_has(cluster.node(old), &acked);
    assert_eq!(cluster.leader().await, new, "the restarted replica follows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_behind_a_purged_log_catches_up_from_a_snapshot() {
    let mut cluster = Cluster::start().await;
    let mut acked = BTreeMap::new();
    put_many(&cluster, &mut acked, 0..10).await;
    // The index of the entry that wrote it: the leader's applied index
    // read from its metrics could still be an earlier one.
    let doomed_at = cluster.put("doomed", "here").await;

    let leader = cluster.leader().await;
    let behind = *cluster
        .running
        .keys()
        .find(|id| **id != leader)
        .expect("a follower");
    cluster.applied(behind, doomed_at).await;
    assert_eq!(
        value(cluster.node(behind), "doomed").as_deref(),
        Some("here")
    );
    cluster.stop_node(behind).await;

    cluster.delete("doomed").await;
    let last = put_many(&cluster, &mut acked, 10..40).await;
    compact_log(cluster.node(leader), last).await;

    cluster.start_node(behind).await;
    cluster.applied(behind, last).await;
    let replica = cluster.node(behind);
    let installed = replica.raft.metrics().borrow().snapshot;
    assert_eq!(
        installed.map(|l| l.index),
        Some(last),
        "caught up through the snapshot"
    );
    assert_has(replica, &acked);
    assert_eq!(
        value(replica, "doomed"),
        None,
        "a row deleted while it was down is gone"
    );
    assert!(snapshot_file(&cluster.dir(behind)).exists());
}

/// Snapshot the leader at `last` and purge its log up to there.
async fn compact_log(leader: &Replica, last: u64) {
    leader
        .raft
        .trigger()
        .snapshot()
        .await
        .expect("trigger snapshot");
    let wait = leader.raft.wait(Some(PATIENCE));
    let metrics = wait
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= last),
            "snapshot built",
        )
        .await
        .expect("snapshot");
    let snap = metrics.snapshot.expect("snapshot id").index;
    leader
        .raft
        .trigger()
        .purge_log(snap)
        .await
        .expect("trigger purge");
    leader
        .raft
        .wait(Some(PATIENCE))
        .metrics(|m| m.purged.is_some_and(|p| p.index >= snap), "log purged")
        .await
        .expect("purge");
}

fn snapshot_file(dir: &Path) -> PathBuf {
    dir.join("snapshots").join("current.snap")
}

/// What a crash can do to a replica since applies are not synced (the
/// machine's module doc, "Durability"): its index comes back at an older
/// applied id, without the rows applied after it. Restarted, it applies
/// those entries again from its log and ends with every acknowledged
/// write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_that_lost_its_newest_applies_applies_them_again_from_the_log() {
    use openraft::RaftLogReader;
    let mut cluster = Cluster::start().await;
    let mut acked = BTreeMap::new();
    let half = put_many(&cluster, &mut acked, 0..10).await;
    let last = put_many(&cluster, &mut acked, 10..20).await;
    let leader = cluster.leader().await;
    let follower = *cluster
        .running
        .keys()
        .find(|id| **id != leader)
        .expect("a follower");
    cluster.applied(follower, last).await;
    cluster.stop_node(follower).await;

    // The crash: the index as it was when `half` was the last apply.
    {
        let (mut log, machine) = open_group(&cluster.dir(follower), Engine::Fjall).expect("open");
        let at_half = log
            .try_get_log_entries(half..=half)
            .await
            .expect("read the log")
            .pop()
            .expect("the entry at half")
            .log_id;
        let mut batch = WriteBatch::default();
        let applied = bincode::serialize(&Some(at_half)).expect("encode");
        batch.put(laneway_replica::machine::APPLIED.to_vec(), applied);
        for i in 10..20 {
            batch.delete(format!("okey-{i:04}").into_bytes());
        }
        machine.index().write(batch).expect("roll back");
        machine.index().sync().expect("sync");
        assert_eq!(
            machine.index().get(b"okey-0015").expect("get"),
            None,
            "the rolled-back index lacks the later rows"
        );
    }

    cluster.start_node(follower).await;
    cluster.applied(follower, last).await;
    assert_has(cluster.node(follower), &acked);
}
