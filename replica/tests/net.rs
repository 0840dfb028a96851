//! Three nodes in one process, each an RPC server on 127.0.0.1:0 serving a
//! `RaftService`, each hosting four groups; every Raft message goes over
//! the real cluster RPC (signed calls, one HTTP/2 connection per pair).
//!
//! What is checked: every group elects and replicate; every acknowledged
//! write survives the stop of a leader's node and a new election; a node
//! that was stopped catches up after a restart on the same port, from the
//! log, or, once the leader purged the log it missed, from a snapshot sent
//! in several chunks over the RPC; a node that lost its disk does not
//! vote a replica that lacks committed writes into leadership, and takes
//! no append (a deposed leader's of an older term included) before its
//! peers have told it their terms.
//!
//! Waits are bounded by generous timeouts that only turn a hang into a
//! failure; nothing asserts how long anything took.

use laneway_replica::net::wire::{RaftAnswer, RaftMsg, RaftReply, RaftRequest};
use laneway_replica::net::{
    GroupId, HeartbeatTicker, Peers, RAFT_METHOD, RaftService, group_config, raft_node_id,
    ticked_config,
};
use laneway_replica::{Mutation, NodeId, PartitionRaft, open_group};
use laneway_store::Engine;
use laneway_store::index::{MetaIndex, WriteBatch};
use laneway_store::rpc::{
    CallOptions, Handler, RpcClient, RpcError, RpcServer, ServerOptions, Signer, WireCode,
};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest};
use openraft::{
    BasicNode, Config, LogId, ServerState, SnapshotMeta, SnapshotPolicy, StoredMembership, Vote,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;
use tokio::net::TcpListener;

/// The bound on every wait.
const PATIENCE: Duration = Duration::from_secs(30);

/// The groups every node hosts.
/// (Four on three nodes: some node leads at least two, so its heartbeats
/// to a follower have something to be batched with.)
const GROUPS: [GroupId; 4] = [1, 2, 3, 4];

const SECRET: &[u8] = b"net test cluster secret";

/// One group's replica on a node.
struct Replica {
    raft: PartitionRaft,
    index: Arc<dyn MetaIndex>,
}

/// One node: its RPC server and the groups it hosts.
struct Node {
    name: String,
    addr: SocketAddr,
    server: RpcServer,
    service: Arc<RaftService>,
    ticker: Option<HeartbeatTicker>,
    groups: BTreeMap<GroupId, Replica>,
}

struct Cluster {
    root: TempDir,
    config: Arc<Config>,
    /// Whether each node runs a heartbeat ticker (groups on `config` then
    /// have their own heartbeats off).
    ticked: bool,
    members: BTreeMap<NodeId, BasicNode>,
    /// Every node's name and address, running or not.
    names: BTreeMap<NodeId, (String, SocketAddr)>,
    running: BTreeMap<NodeId, Node>,
}

/// The production settings, except: snapshots only when a test asks,
/// every snapshotted entry purged, and small chunks so a snapshot of a
/// few hundred KiB crosses the RPC in several.
fn config() -> Arc<Config> {
    test_config(group_config("net-test").expect("group config"))
}

fn test_config(base: Arc<Config>) -> Arc<Config> {
    let config = Config {
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        snapshot_max_chunk_size: 64 << 10,
        ..(*base).clone()
    };
    Arc::new(config.validate().expect("valid config"))
}

impl Cluster {
    /// Nodes a, b and c started, every group on each, initialised.
    async fn start() -> Cluster {
        Cluster::start_with(config(), false).await
    }

    /// As [`Cluster::start`], on `config`, with a heartbeat ticker on
    /// each node if `ticked`.
    async fn start_with(config: Arc<Config>, ticked: bool) -> Cluster {
        let mut listeners = Vec::new();
        let mut names = BTreeMap::new();
        for name in ["node-a", "node-b", "node-c"] {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("addr");
            let id = raft_node_id(name);
            names.insert(id, (name.to_string(), addr));
            listeners.push((id, listener));
        }
        let members = names
            .iter()
            .map(|(id, (_, addr))| (*id, BasicNode::new(addr.to_string())))
            .collect();
        let mut cluster = Cluster {
            root: tempfile::tempdir().expect("tempdir"),
            config,
            ticked,
            members,
            names,
            running: BTreeMap::new(),
        };
        for (id, listener) in listeners {
            cluster.start_node(id, listener).await;
        }
        cluster
    }

    /// Start node `id` on `listener` from its directories.
    async fn start_node(&mut self, id: NodeId, listener: TcpListener) {
        let members = self.members.clone();
        self.start_node_naming(id, listener, members).await;
    }

    /// Start node `id` on `listener`, its cluster file naming `members`
    /// as every group's replicas.
    async fn start_node_naming(
        &mut self,
        id: NodeId,
        listener: TcpListener,
        members: BTreeMap<NodeId, BasicNode>,
    ) {
        let (name, addr) = self.names.get(&id).expect("known node").clone();
        let service = Arc::new(RaftService::new());
        let handler: Arc<dyn Handler> = Arc::clone(&service) as Arc<dyn Handler>;
        let server = RpcServer::start(
            listener,
            handler,
            Signer::new(SECRET),
            ServerOptions::default(),
        )
        .expect("start rpc server");
        let peers = Arc::new(Peers::new(Signer::new(SECRET)));
        let ticker = self.ticked.then(|| {
            let interval = Duration::from_millis(self.config.heartbeat_interval);
            HeartbeatTicker::start(
                &tokio::runtime::Handle::current(),
                Arc::clone(&service),
                Arc::clone(&peers),
                interval,
            )
        });
        let mut groups = BTreeMap::new();
        for group in GROUPS {
            let dir = self.root.path().join(&name).join(format!("g{group}"));
            let (log, machine) = open_group(&dir, Engine::Fjall).expect("open replica");
            let index = Arc::clone(machine.index());
            let raft = laneway_replica::net::start_group_with(
                Arc::clone(&self.config),
                group,
                id,
                members.clone(),
                log,
                machine,
                Arc::clone(&peers),
                &service,
            )
            .await
            .expect("start group");
            groups.insert(group, Replica { raft, index });
        }
        self.running.insert(
            id,
            Node {
                name,
                addr,
                server,
                service,
                ticker,
                groups,
            },
        );
    }

    /// Stop node `id`: its server closes every connection, then each
    /// group's Raft is shut down.
    async fn stop_node(&mut self, id: NodeId) {
        let node = self.running.remove(&id).expect("running node");
        if let Some(ticker) = node.ticker {
            ticker.stop().await;
        }
        node.server.stop().await;
        for (group, replica) in node.groups {
            node.service.unregister(group);
            replica.raft.shutdown().await.expect("shutdown");
        }
    }

    /// Stop node `id` and delete its data directory (a lost disk).
    async fn wipe_node(&mut self, id: NodeId) {
        self.stop_node(id).await;
        let name = self.names[&id].0.clone();
        std::fs::remove_dir_all(self.root.path().join(name)).expect("wipe");
    }

    /// The two running nodes other than `id`.
    fn others_than(&self, id: NodeId) -> (NodeId, NodeId) {
        let others: Vec<NodeId> = self.running.keys().copied().filter(|n| *n != id).collect();
        (others[0], others[1])
    }

    /// Start node `id` again, on the port it had.
    async fn restart_node(&mut self, id: NodeId) {
        let (_, addr) = self.names.get(&id).expect("known node").clone();
        let listener = TcpListener::bind(addr).await.expect("bind the same port");
        self.start_node(id, listener).await;
    }

    fn replica(&self, id: NodeId, group: GroupId) -> &Replica {
        let node = self.running.get(&id).expect("running node");
        node.groups.get(&group).expect("hosted group")
    }

    /// The leader of `group` every running replica agrees on.
    async fn leader(&self, group: GroupId) -> NodeId {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(leader) = self.agreed_leader(group) {
                return leader;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no agreed leader of group {group}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn agreed_leader(&self, group: GroupId) -> Option<NodeId> {
        let mut seen = self.running.values().map(|n| {
            n.groups
                .get(&group)
                .map(|r| r.raft.metrics().borrow().current_leader)
        });
        let first = seen.next()???;
        (seen.all(|l| l == Some(Some(first))) && self.running.contains_key(&first)).then_some(first)
    }

    /// Write `rows` to `group` through whoever leads, retrying across a
    /// leader change as a gateway would; returns the committed index.
    async fn write(&self, group: GroupId, rows: &[(String, Option<Vec<u8>>)]) -> u64 {
        let mut batch = WriteBatch::default();
        for (key, value) in rows {
            match value {
                Some(v) => batch.put(key.as_bytes().to_vec(), v.clone()),
                None => batch.delete(key.as_bytes().to_vec()),
            }
        }
        let mutation = Mutation::of_batch(&batch);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let leader = self.leader(group).await;
            let raft = &self.replica(leader, group).raft;
            match raft.client_write(mutation.clone()).await {
                Ok(reply) => return reply.data.index,
                Err(e) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "write to group {group} failed: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Wait until node `id`'s replica of `group` has applied `index`.
    async fn applied(&self, id: NodeId, group: GroupId, index: u64) {
        self.replica(id, group)
            .raft
            .wait(Some(PATIENCE))
            .applied_index_at_least(Some(index), "applied")
            .await
            .expect("replica catches up");
    }
}

/// What the test was told is committed, per group: key -> value (None for
/// a deleted key).
type Acked = BTreeMap<GroupId, BTreeMap<String, Option<Vec<u8>>>>;

/// `count` writes of three rows each to `group`, values of `size` bytes;
/// returns the last committed index.
async fn write_many(
    cluster: &Cluster,
    acked: &mut Acked,
    group: GroupId,
    range: std::ops::Range<u32>,
    size: usize,
) -> u64 {
    let mut last = 0;
    for i in range {
        let rows: Vec<(String, Option<Vec<u8>>)> = (0..3)
            .map(|r| {
                let key = format!("g{group}-k{i:04}-r{r}");
                let mut value = format!("v{i}-{r}-").into_bytes();
                value.resize(size.max(value.len()), b'x');
                (key, Some(value))
            })
            .collect();
        last = cluster.write(group, &rows).await;
        acked.entry(group).or_default().extend(rows);
    }
    last
}

/// Every acknowledged write of `group` is in node `id`'s replica.
fn assert_has(cluster: &Cluster, acked: &Acked, id: NodeId, group: GroupId) {
    let replica = cluster.replica(id, group);
    let name = &cluster.running[&id].name;
    for (key, want) in acked.get(&group).into_iter().flatten() {
        let got = replica.index.get(key.as_bytes()).expect("index get");
        assert_eq!(&got, want, "{name} group {group} key {key}");
    }
}

/// Every running replica of every group applied its leader's writes and
/// holds every acknowledged one.
async fn assert_replicated(cluster: &Cluster, acked: &Acked, last: &BTreeMap<GroupId, u64>) {
    for (group, index) in last {
        for id in cluster.running.keys() {
            cluster.applied(*id, *group, *index).await;
            assert_has(cluster, acked, *id, *group);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_group_elects_and_replicates_over_the_rpc() {
    let cluster = Cluster::start().await;
    let mut acked = Acked::new();
    let mut last = BTreeMap::new();
    for group in GROUPS {
        last.insert(
            group,
            write_many(&cluster, &mut acked, group, 0..5, 16).await,
        );
    }
    assert_replicated(&cluster, &acked, &last).await;
    for node in cluster.running.values() {
        assert_eq!(node.server.local_addr(), node.addr);
    }
    // Each node's service knows when a leader last spoke to each of its
    // replicas: a follower hears heartbeats several times a second, a
    // leader hears none (nor would a replica its group removed).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for node in cluster.running.values() {
        assert_eq!(node.service.unheard_for(999), None, "a group not hosted");
        for (group, replica) in &node.groups {
            let state = replica.raft.metrics().borrow().state;
            let unheard = node.service.unheard_for(*group).expect("hosted");
            match state {
                ServerState::Follower => assert!(
                    unheard < Duration::from_millis(1500),
                    "{}'s follower of {group} heard no leader for {unheard:?}",
                    node.name
                ),
                ServerState::Leader => assert!(
                    unheard >= Duration::from_secs(2),
                    "{}'s leader of {group} heard a leader {unheard:?} ago",
                    node.name
                ),
                _ => {}
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_of_many_groups_share_calls_and_a_large_round_goes_alone() {
    let cluster = Cluster::start().await;
    let batched = |c: &Cluster| -> u64 {
        c.running
            .values()
            .map(|n| n.service.received().batched_with_entries)
            .sum()
    };
    // Writers on every group at once, four per group: appends with
    // entries reach each follower while a call to it is out, and wait to
    // leave together.
    let writers = GROUPS.iter().flat_map(|&group| {
        let cluster = &cluster;
        (0..4u32).map(move |w| async move {
            let mut acked = Acked::new();
            let last = write_many(cluster, &mut acked, group, w * 100..w * 100 + 15, 16).await;
            (group, last, acked)
        })
    });
    let mut acked = Acked::new();
    let mut last = BTreeMap::new();
    for (group, index, mine) in futures::future::join_all(writers).await {
        let top = last.entry(group).or_insert(0);
        *top = index.max(*top);
        acked
            .entry(group)
            .or_default()
            .extend(mine.into_values().flatten());
    }
    assert_replicated(&cluster, &acked, &last).await;
    let before = batched(&cluster);
    assert!(before > 0, "no append with entries travelled in a batch");

    // A round of 300 KiB is above what a batch takes: it goes alone, and
    // arrives all the same.
    let index = write_many(&cluster, &mut acked, 2, 1000..1001, 100 << 10).await;
    assert_replicated(&cluster, &acked, &BTreeMap::from([(2, index)])).await;
    assert_eq!(batched(&cluster), before, "the large round went alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_a_leaders_stop_and_the_restarted_node_catches_up() {
    leaders_stop_survived(Cluster::start().await).await;
}

/// The same with the nodes' tickers holding the elections: a voter
/// campaigns once a majority no longer hears the stopped leader
/// (laneway_replica::net::prevote).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticked_groups_elect_after_a_leaders_stop_and_the_restarted_node_catches_up() {
    let config = test_config(ticked_config("net-test").expect("ticked config"));
    assert!(!config.enable_elect);
    leaders_stop_survived(Cluster::start_with(config, true).await).await;
}

async fn leaders_stop_survived(mut cluster: Cluster) {
    let mut acked = Acked::new();
    for group in GROUPS {
        write_many(&cluster, &mut acked, group, 0..10, 16).await;
    }

    let old = cluster.leader(1).await;
    cluster.stop_node(old).await;
    let new = cluster.leader(1).await;
    assert_ne!(new, old, "a survivor leads group 1");
    let mut last = BTreeMap::new();
    for group in GROUPS {
        last.insert(
            group,
            write_many(&cluster, &mut acked, group, 10..20, 16).await,
        );
    }
    assert_eq!(cluster.running.len(), 2);
    assert_replicated(&cluster, &acked, &last).await;

    cluster.restart_node(old).await;
    assert_replicated(&cluster, &acked, &last).await;
    // The group still commits with all three back.
    let more = write_many(&cluster, &mut acked, 1, 20..22, 16).await;
    assert_replicated(&cluster, &acked, &BTreeMap::from([(1, more)])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_disk_elects_no_replica_missing_what_it_acknowledged() {
    wiped_elects_nothing_missing(Cluster::start().await).await;
}

/// The same with the nodes' tickers holding the elections: a replica
/// that abstains says no to a pre-vote as it would to the vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticked_a_node_that_lost_its_disk_elects_no_replica_missing_what_it_acknowledged() {
    let config = test_config(ticked_config("net-test").expect("ticked config"));
    wiped_elects_nothing_missing(Cluster::start_with(config, true).await).await;
}

async fn wiped_elects_nothing_missing(mut cluster: Cluster) {
    let mut acked = Acked::new();
    write_many(&cluster, &mut acked, 1, 0..5, 16).await;
    let leader = cluster.leader(1).await;
    let (wiped, lagging) = cluster.others_than(leader);
    // Writes committed by the leader and `wiped` alone.
    cluster.stop_node(lagging).await;
    let last = write_many(&cluster, &mut acked, 1, 5..15, 16).await;
    cluster.applied(wiped, 1, last).await;
    // `wiped` loses its disk and comes back empty; the leader, the one
    // other replica holding those writes, is down; the lagging replica is
    // back, and only `wiped`'s vote could make it leader.
    cluster.wipe_node(wiped).await;
    cluster.stop_node(leader).await;
    cluster.restart_node(lagging).await;
    cluster.restart_node(wiped).await;
    // Several election timeouts: nobody leads group 1, so nothing can
    // overwrite the writes the stopped leader still holds.
    let until = tokio::time::Instant::now() + Duration::from_secs(6);
    while tokio::time::Instant::now() < until {
        for id in [wiped, lagging] {
            let state = cluster.replica(id, 1).raft.metrics().borrow().state;
            assert_ne!(state, openraft::ServerState::Leader, "node {id} leads");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cluster.running[&wiped].service.abstaining(1));
    // The leader is back: with the lagging replica's vote it leads again,
    // and every acknowledged write reaches all three.
    cluster.restart_node(leader).await;
    let last = write_many(&cluster, &mut acked, 1, 15..16, 16).await;
    assert_replicated(&cluster, &acked, &BTreeMap::from([(1, last)])).await;
    // Caught up, the wiped replica votes again: without the leader, the
    // other two elect one of them and commit.
    let leader = cluster.leader(1).await;
    cluster.stop_node(leader).await;
    let last = write_many(&cluster, &mut acked, 1, 16..18, 16).await;
    assert_replicated(&cluster, &acked, &BTreeMap::from([(1, last)])).await;
    assert!(!cluster.running[&wiped].service.abstaining(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_disk_takes_no_append_before_its_peers_told_it_their_terms() {
    let mut cluster = Cluster::start().await;
    let mut acked = Acked::new();
    write_many(&cluster, &mut acked, 1, 0..3, 16).await;
    // A later term: the first leader stops, another is elected and
    // commits, and the first comes back as a follower.
    let first = cluster.leader(1).await;
    cluster.stop_node(first).await;
    write_many(&cluster, &mut acked, 1, 3..6, 16).await;
    cluster.restart_node(first).await;
    let leader = cluster.leader(1).await;
    let term = cluster
        .replica(leader, 1)
        .raft
        .metrics()
        .borrow()
        .current_term;
    assert!(term >= 2, "a second election ({term})");
    let (wiped, down) = cluster.others_than(leader);
    // `wiped` loses its disk and comes back empty while `down` is down.
    cluster.stop_node(down).await;
    cluster.wipe_node(wiped).await;
    cluster.restart_node(wiped).await;
    // A deposed leader of term 1 (as one cut off from the newer leader
    // would still be) reaches it first: refused, as is every append until
    // both peers told it their terms.
    let stale = stale_append(&cluster, wiped, first).await;
    assert!(
        matches!(&stale, Err(RpcError::Remote(e)) if e.code == WireCode::Unavailable),
        "{stale:?}"
    );
    assert_eq!(cluster.running[&wiped].service.floor(1), None);
    assert!(cluster.running[&wiped].service.abstaining(1));
    // `down` is back: the wiped replica learns the terms, takes the
    // leader's appends and catches up.
    cluster.restart_node(down).await;
    let last = write_many(&cluster, &mut acked, 1, 6..8, 16).await;
    assert_replicated(&cluster, &acked, &BTreeMap::from([(1, last)])).await;
    let floor = cluster.running[&wiped].service.floor(1);
    assert!(floor.is_some_and(|f| f >= term), "{floor:?} against {term}");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while cluster.running[&wiped].service.abstaining(1) {
        assert!(tokio::time::Instant::now() < deadline, "still abstaining");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Caught up, its Raft refuses the older term itself.
    let stale = stale_append(&cluster, wiped, first).await;
    assert!(
        matches!(
            &stale,
            Ok(RaftAnswer::Append(Ok(AppendEntriesResponse::HigherVote(_))))
        ),
        "{stale:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_disk_waits_for_a_voter_its_cluster_file_does_not_name() {
    let mut cluster = Cluster::start().await;
    let mut acked = Acked::new();
    write_many(&cluster, &mut acked, 1, 0..4, 16).await;
    let leader = cluster.leader(1).await;
    // The wiped node is neither the leader nor the lowest id (which
    // initialises a new group from its file's members).
    let ids: Vec<NodeId> = cluster.names.keys().copied().collect();
    let wiped = *ids[1..]
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    let unnamed = *ids
        .iter()
        .find(|id| **id != leader && **id != wiped)
        .expect("a third");
    // The third node is down, and the wiped node's cluster file does not
    // name it (a move cut short before the file was written): the
    // group's voters are all three all the same.
    cluster.stop_node(unnamed).await;
    cluster.wipe_node(wiped).await;
    let mut naming = cluster.members.clone();
    naming.remove(&unnamed);
    let (_, addr) = cluster.names[&wiped].clone();
    let listener = TcpListener::bind(addr).await.expect("bind the same port");
    cluster.start_node_naming(wiped, listener, naming).await;
    // The leader's answer names the third node as a voter: the wiped
    // replica waits for its vote too, with no floor and no message taken.
    let service = Arc::clone(&cluster.running[&wiped].service);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while service.unheard(1).is_some_and(|u| u.contains(&leader)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leader never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(service.unheard(1), Some(vec![unnamed]));
    assert_eq!(service.floor(1), None);
    assert!(service.abstaining(1));
    // The third node is back: the wiped replica hears it, catches up and
    // votes again.
    cluster.restart_node(unnamed).await;
    let last = write_many(&cluster, &mut acked, 1, 4..6, 16).await;
    assert_replicated(&cluster, &acked, &BTreeMap::from([(1, last)])).await;
    assert!(service.floor(1).is_some());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while service.abstaining(1) {
        assert!(tokio::time::Instant::now() < deadline, "still abstaining");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sent_a_snapshot_s_chunks_does_not_campaign_meanwhile() {
    let mut cluster = Cluster::start().await;
    let mut acked = Acked::new();
    write_many(&cluster, &mut acked, 1, 0..3, 16).await;
    let leader = cluster.leader(1).await;
    let (follower, other) = cluster.others_than(leader);
    let vote = cluster.replica(leader, 1).raft.metrics().borrow().vote;
    // Chunks of a snapshot with the leader's vote reach the follower every
    // 200 ms, as a long transfer's would, from before its leader and the
    // third node stop until well after: for four seconds (several
    // election timeouts) they are all it hears.
    let sending = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sender = tokio::spawn({
        let sending = Arc::clone(&sending);
        let addr = cluster.names[&follower].1;
        async move {
            while sending.load(std::sync::atomic::Ordering::Relaxed) {
                let answer = snapshot_chunk(addr, vote).await;
                assert!(matches!(answer, RaftAnswer::Snapshot(Ok(_))), "{answer:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    cluster.stop_node(leader).await;
    cluster.stop_node(other).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    sending.store(false, std::sync::atomic::Ordering::Relaxed);
    sender.await.expect("chunks sent");
    let m = cluster.replica(follower, 1).raft.metrics().borrow().clone();
    assert_eq!(
        m.vote.leader_id().term,
        vote.leader_id().term,
        "the follower campaigned while a snapshot streamed to it"
    );
    assert_eq!(m.current_leader, Some(leader));
}

/// The first chunk of a snapshot of group 1 (its first 8 bytes, short of
/// the stream's preamble: the receiver waits for more), sent again with
/// `vote` to the node at `addr`; its answer.
async fn snapshot_chunk(addr: SocketAddr, vote: Vote<NodeId>) -> RaftAnswer {
    snapshot_piece(addr, vote, ("chunks-only", b"LWSNVOL1"), false).await
}

/// A snapshot of group 1 of one chunk holding `data`, sent with `vote` to
/// the node at `addr`; its answer.
async fn snapshot_whole(addr: SocketAddr, vote: Vote<NodeId>, data: &[u8]) -> RaftAnswer {
    snapshot_piece(addr, vote, ("damaged", data), true).await
}

/// The first chunk (`done`: and the last) of a snapshot of group 1 with
/// the id and bytes `(id, data)`, sent with `vote` to the node at `addr`;
/// its answer.
async fn snapshot_piece(
    addr: SocketAddr,
    vote: Vote<NodeId>,
    (id, data): (&str, &[u8]),
    done: bool,
) -> RaftAnswer {
    let meta = SnapshotMeta {
        last_log_id: Some(LogId::new(*vote.leader_id(), 1_000_000)),
        last_membership: StoredMembership::default(),
        snapshot_id: id.to_string(),
    };
    let chunk = InstallSnapshotRequest {
        vote,
        meta,
        offset: 0,
        data: data.to_vec(),
        done,
    };
    let args = RaftRequest::new(1, RaftMsg::Snapshot(chunk))
        .encode()
        .expect("encode");
    let client = RpcClient::new(addr.to_string(), Signer::new(SECRET));
    let opts = CallOptions {
        deadline: Duration::from_secs(5),
        stall: Duration::from_secs(5),
    };
    let (payload, _) = client
        .call(RAFT_METHOD, args.into(), None, &opts)
        .await
        .expect("a snapshot chunk's call");
    RaftReply::decode(&payload).expect("decode reply").answer
}

/// What node `to` answers a heartbeat of group 1 from `from` as a leader
/// of term 1.
async fn stale_append(cluster: &Cluster, to: NodeId, from: NodeId) -> Result<RaftAnswer, RpcError> {
    let append = AppendEntriesRequest {
        vote: Vote::new_committed(1, from),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    let args = RaftRequest::new(1, RaftMsg::Append(append))
        .encode()
        .expect("encode");
    let client = RpcClient::new(cluster.names[&to].1.to_string(), Signer::new(SECRET));
    let opts = CallOptions {
        deadline: Duration::from_secs(5),
        stall: Duration::from_secs(5),
    };
    let (payload, _) = client.call(RAFT_METHOD, args.into(), None, &opts).await?;
    Ok(RaftReply::decode(&payload).expect("decode reply").answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_a_purged_log_catches_up_from_a_snapshot_over_the_rpc() {
    let mut cluster = Cluster::start().await;
    let mut acked = Acked::new();
    for group in GROUPS {
        write_many(&cluster, &mut acked, group, 0..5, 16).await;
    }
    let doomed = vec![("g1-doomed".to_string(), Some(b"here".to_vec()))];
    let before = cluster.write(1, &doomed).await;
    acked.entry(1).or_default().extend(doomed);

    let leader = cluster.leader(1).await;
    let behind = *cluster
        .running
        .keys()
        .find(|id| **id != leader)
        .expect("a follower of group 1");
    cluster.applied(behind, 1, before).await;
    cluster.stop_node(behind).await;

    let gone = vec![("g1-doomed".to_string(), None)];
    cluster.write(1, &gone).await;
    acked.entry(1).or_default().extend(gone);
    // 40 writes of 3 x 4 KiB: a snapshot of about 500 KiB, 8 chunks or so.
    let mut last = BTreeMap::new();
    for group in GROUPS {
        last.insert(
            group,
            write_many(&cluster, &mut acked, group, 5..45, 4096).await,
        );
    }
    let leader = cluster.leader(1).await;
    let purged = compact_log(&cluster.replica(leader, 1).raft).await;

    cluster.restart_node(behind).await;
    assert_replicated(&cluster, &acked, &last).await;
    let snapshot = cluster.replica(behind, 1).raft.metrics().borrow().snapshot;
    assert!(
        snapshot.is_some_and(|s| s.index >= purged),
        "group 1 on the restarted node was sent a snapshot ({snapshot:?}, purged {purged})"
    );
    let chunks = cluster.running[&behind].service.received().snapshot_chunks;
    assert!(
        chunks >= 2,
        "the snapshot crossed the rpc in several chunks ({chunks})"
    );
}

/// Snapshot `raft` (a leader) at what it applied and purge its log up to
/// there; returns the purged index.
async fn compact_log(raft: &PartitionRaft) -> u64 {
    let applied = raft.metrics().borrow().last_applied.map_or(0, |l| l.index);
    raft.trigger().snapshot().await.expect("trigger snapshot");
    let metrics = raft
        .wait(Some(PATIENCE))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= applied),
            "snapshot built",
        )
        .await
        .expect("snapshot");
    let snap = metrics.snapshot.expect("snapshot id").index;
    raft.trigger().purge_log(snap).await.expect("trigger purge");
    raft.wait(Some(PATIENCE))
        .metrics(|m| m.purged.is_some_and(|p| p.index >= snap), "log purged")
        .await
        .expect("purge");
    snap
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_ticker_keeps_its_groups_led_without_their_own_heartbeats() {
    let config = test_config(ticked_config("net-test").expect("ticked config"));
    assert!(!config.enable_heartbeat);
    let cluster = Cluster::start_with(config, true).await;
    let mut acked = Acked::new();
    let mut terms = BTreeMap::new();
    for group in GROUPS {
        write_many(&cluster, &mut acked, group, 0..3, 16).await;
        let leader = cluster.leader(group).await;
        let term = cluster
            .replica(leader, group)
            .raft
            .metrics()
            .borrow()
            .current_term;
        terms.insert(group, (leader, term));
    }

    // Idle, the only appends are the tickers' heartbeats: eight per tick
    // (four groups, two followers each). Wait for about ten ticks' worth,
    // longer than the longest election timeout: without the tickers the
    // followers would have campaigned by then, and the terms moved.
    let total = |c: &Cluster| -> u64 {
        c.running
            .values()
            .map(|n| n.service.received().appends)
            .sum()
    };
    let start = total(&cluster);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while total(&cluster) < start + 80 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "heartbeats keep arriving ({} of 80)",
            total(&cluster) - start
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (group, (leader, term)) in &terms {
        assert_eq!(
            cluster.agreed_leader(*group),
            Some(*leader),
            "group {group}"
        );
        for node in cluster.running.values() {
            let now = node.groups[group].raft.metrics().borrow().current_term;
            assert_eq!(now, *term, "no election in group {group} on {}", node.name);
        }
    }
    // Some node leads two groups or more, and a tick's heartbeats of its
    // groups to one follower travel in one call.
    let received: Vec<_> = cluster
        .running
        .values()
        .map(|n| n.service.received())
        .collect();
    assert!(received.iter().any(|r| r.batches > 0), "{received:?}");
    assert!(
        received.iter().any(|r| r.largest_batch >= 2),
        "no call carried the heartbeats of two groups: {received:?}"
    );
    let more = write_many(&cluster, &mut acked, 1, 3..5, 16).await;
    assert_replicated(&cluster, &acked, &BTreeMap::from([(1, more)])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_does_not_parse_leaves_its_follower_s_group_running() {
    let cluster = Cluster::start().await;
    let mut acked = Acked::new();
    write_many(&cluster, &mut acked, 1, 0..3, 16).await;
    let leader = cluster.leader(1).await;
    let (follower, _) = cluster.others_than(leader);
    let vote = cluster.replica(leader, 1).raft.metrics().borrow().vote;
    // A whole snapshot (one chunk, done) whose bytes are not a snapshot
    // stream, with the leader's vote, as a damaged transfer would be.
    let answer = snapshot_whole(cluster.names[&follower].1, vote, b"not a snapshot at all").await;
    assert!(!matches!(answer, RaftAnswer::Snapshot(Ok(_))), "{answer:?}");
    let running = cluster
        .replica(follower, 1)
        .raft
        .metrics()
        .borrow()
        .running_state
        .clone();
    assert!(running.is_ok(), "the follower's group stopped: {running:?}");
    // It goes on following: later writes reach it.
    let last = write_many(&cluster, &mut acked, 1, 3..6, 16).await;
    cluster.applied(follower, 1, last).await;
    assert_has(&cluster, &acked, follower, 1);
}
