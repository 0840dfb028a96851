//! Membership and placement of a replicated cluster, online:
//! `laneway cluster add-node`, `move-partition`, `rebalance` and
//! `remove-node`.
//!
//! A replica moves through the engine's own membership change, learner
//! then promotion, asked of the partition's leader:
//!
//! 1. the new node is added to the group as a learner: the leader sends
//!    it the log from the start (logs are kept whole, docs/replication.md)
//!    and it applies every entry, volume bytes included, without a vote;
//! 2. once it is within [`CATCH_UP_SLACK`] entries of the leader, the
//!    voters become the old ones with the new node in place of the one
//!    leaving (openraft's joint consensus: both configurations must agree
//!    until the new one commits, so no moment has two majorities);
//! 3. only then is the cluster file written, the partition's replicas
//!    changed and the map one version newer; every gateway and node takes
//!    it within a round of its leader watch (one second). The node the
//!    replica left keeps its copy until it next starts, and deletes it
//!    then (`laneway_replica::group`).
//!
//! Every step can be asked again: adding a learner twice or setting the
//! voters a group already has changes nothing, so a move cut short (the
//! tool killed, a leader lost mid-change) is finished by running it again.
//! Writers see at most the 503s of a leader change: when the leaving node
//! led the group, it steps down once the new configuration commits and
//! the new voters elect a leader.
//!
//! The catalog's group moves the same way (`--partition catalog`);
//! `remove-node` moves the node's partitions first and its catalog
//! replica last. The tool needs write access to the cluster file every
//! process reads (a shared file on one host, a shared volume under
//! compose).

use clap::Args;
use laneway_store::cluster::placement::{GroupRef, Move, check_move, drain_step, rebalance_step};
use laneway_store::cluster::{ClusterFile, FileMapSource, MapSource, NodeId, NodeInfo};
use laneway_store::node::proto::{Call, GroupReport};
use laneway_store::remote::MapShare;
use laneway_store::remote::RemoteStore;
use laneway_store::replication::{GroupStatus, MemberChange};
use laneway_store::rpc::CallOptions;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Entries a learner may still be behind its leader when it is promoted
/// (the rest arrive as to any voter; a small gap keeps the new
/// configuration's commit from waiting on the catch-up).
pub const CATCH_UP_SLACK: u64 = 64;

/// Longest one call of a membership step may take (a change of voters
/// commits two configurations).
const STEP_DEADLINE: Duration = Duration::from_secs(40);

/// How long a command waits for the catalog's copy of the map (`agree`).
const AGREE_DEADLINE: Duration = Duration::from_secs(10);

/// Pause between two looks at a catching-up learner.
const POLL: Duration = Duration::from_millis(250);

/// Flags of `laneway cluster add-node`.
#[derive(Args, Debug)]
pub struct AddNodeArgs {
    /// The cluster file (written in place).
    #[arg(long, env = "LANEWAY_CLUSTER")]
    pub file: PathBuf,
    /// The new node's id.
    #[arg(long)]
    pub id: String,
    /// Its RPC address (HOST:PORT).
    #[arg(long)]
    pub rpc: String,
}

/// Flags of `laneway cluster move-partition`.
#[derive(Args, Debug)]
pub struct MoveArgs {
    /// The cluster file (written in place).
    #[arg(long, env = "LANEWAY_CLUSTER")]
    pub file: PathBuf,
    /// The partition (`3` or `p0003`), or `catalog`.
    #[arg(long)]
    pub partition: String,
    /// The node giving its replica up.
    #[arg(long)]
    pub from: String,
    /// The node taking the replica (running, in the cluster file).
    #[arg(long)]
    pub to: String,
    /// Longest one move may take, in seconds (catch-up included).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

/// Flags of `laneway cluster rebalance` and `remove-node`.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The cluster file (written in place after each move).
    #[arg(long, env = "LANEWAY_CLUSTER")]
    pub file: PathBuf,
    /// Longest one move may take, in seconds (catch-up included).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

/// Flags of `laneway cluster remove-node`.
#[derive(Args, Debug)]
pub struct RemoveNodeArgs {
    /// The node to take out (its replicas move to the others first).
    #[arg(long)]
    pub id: String,
    /// The file and the time allowed per move.
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// Run `laneway cluster add-node`: the node joins the file holding
/// nothing; `rebalance` then gives it its share.
pub fn add_node(args: AddNodeArgs) -> ExitCode {
    let done = (|| {
        let id = NodeId::parse(&args.id).map_err(|e| format!("--id {:?}: {e}", args.id))?;
        let rt = super::runtime()?;
        rt.block_on(agree(&args.file))?;
        let file = load_replicated(&args.file)?;
        let file = file.with_node(NodeInfo {
            id: id.clone(),
            rpc: args.rpc.clone(),
        })?;
        file.save().map_err(|e| e.to_string())?;
        rt.block_on(agree(&args.file))?;
        println!(
            "added {id} (rpc {}) to {}, map version {}; start it (`laneway store --cluster {} --node {id} ...`), \
             then `laneway cluster rebalance` gives it its share",
            args.rpc,
            file.path.display(),
            file.map.version(),
            file.path.display()
        );
        Ok(())
    })();
    finish(done)
}

/// Run `laneway cluster move-partition`.
pub fn move_partition(args: MoveArgs) -> ExitCode {
    let done = (|| {
        let m = Move {
            group: GroupRef::parse(&args.partition).map_err(|e| format!("--partition: {e}"))?,
            from: NodeId::parse(&args.from).map_err(|e| format!("--from: {e}"))?,
            to: NodeId::parse(&args.to).map_err(|e| format!("--to: {e}"))?,
        };
        let timeout = Duration::from_secs(args.timeout);
        super::runtime()?.block_on(move_replica(&args.file, &m, timeout))
    })();
    finish(done)
}

/// Run `laneway cluster rebalance`: move replicas until no two nodes
/// hold more than one apart.
pub fn rebalance(args: PlanArgs) -> ExitCode {
    let done = (|| {
        let timeout = Duration::from_secs(args.timeout);
        let rt = super::runtime()?;
        let mut moves = 0;
        loop {
            let file = load_replicated(&args.file)?;
            let Some(m) = rebalance_step(&file.map, &file.nodes) else {
                break;
            };
            rt.block_on(move_replica(&args.file, &m, timeout))?;
            moves += 1;
        }
        let file = load_replicated(&args.file)?;
        let shares: Vec<String> = file
            .nodes
            .iter()
            .map(|n| format!("{} {}", n.id, file.map.hosted_by(&n.id).len()))
            .collect();
        println!("balanced after {moves} moves: {}", shares.join(", "));
        Ok(())
    })();
    finish(done)
}

/// Run `laneway cluster remove-node`: move its replicas to the others,
/// then take it out of the file.
pub fn remove_node(args: RemoveNodeArgs) -> ExitCode {
    let done = (|| {
        let id = NodeId::parse(&args.id).map_err(|e| format!("--id {:?}: {e}", args.id))?;
        let timeout = Duration::from_secs(args.plan.timeout);
        let rt = super::runtime()?;
        rt.block_on(agree(&args.plan.file))?;
        let first = load_replicated(&args.plan.file)?;
        if first.node(id.as_str()).is_none() {
            return Err(format!("node {id} is not in the cluster file"));
        }
        // Refused before anything moves when some group has nowhere to go.
        let others = first.nodes.len() - 1;
        if others < first.map.catalog().len() {
            return Err(format!(
                "removing {id} would leave {others} nodes for groups of {} replicas: add a node first",
                first.map.catalog().len()
            ));
        }
        loop {
            let file = load_replicated(&args.plan.file)?;
            let Some(m) = drain_step(&file.map, &file.nodes, &id)? else {
                break;
            };
            rt.block_on(move_replica(&args.plan.file, &m, timeout))?;
        }
        let file = load_replicated(&args.plan.file)?.without_node(&id)?;
        file.save().map_err(|e| e.to_string())?;
        rt.block_on(agree(&args.plan.file))?;
        println!(
            "removed {id} from {}, map version {}; it holds no replica and may be stopped",
            file.path.display(),
            file.map.version()
        );
        Ok(())
    })();
    finish(done)
}

fn finish(done: Result<(), String>) -> ExitCode {
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("laneway: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// The cluster file at `path`, which must replicate (membership changes
/// are changes of replication groups).
fn load_replicated(path: &Path) -> Result<ClusterFile, String> {
    let file = ClusterFile::load(path).map_err(|e| e.to_string())?;
    if file.replicas <= 1 {
        return Err(format!(
            "{} has replicas = 1: its partitions have no replication groups to change",
            path.display()
        ));
    }
    Ok(file)
}

/// Make move `m` on the cluster of the file at `path`, each step within
/// `timeout` in all, then write the file.
async fn move_replica(path: &Path, m: &Move, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    agree(path).await?;
    let file = load_replicated(path)?;
    check_move(&file, m)?;
    let cluster = client(path)?;
    let to = file
        .node(m.to.as_str())
        .cloned()
        .ok_or_else(|| format!("node {} is not in the cluster file", m.to))?;
    cluster
        .call_node::<()>(&m.to, Call::Ping)
        .await
        .map_err(|e| format!("{} does not answer ({e}): start it first", m.to))?;
    let p = m.group;
    println!("{m}: adding {} as a learner", m.to);
    let learner = MemberChange::AddLearner {
        id: m.to.raft_id(),
        addr: to.rpc.clone(),
    };
    retry(deadline, || {
        cluster.change_members(p, learner.clone(), STEP_DEADLINE)
    })
    .await?;
    let asked = asked_nodes(&file, m);
    wait_caught_up(&cluster, &asked, m, deadline).await?;
    let voters: Vec<u64> = p
        .replicas(&file.map)
        .iter()
        .map(|n| if *n == m.from { &m.to } else { n })
        .map(NodeId::raft_id)
        .collect();
    println!("{m}: promoting {} and removing {}", m.to, m.from);
    let change = MemberChange::SetVoters {
        voters: voters.clone(),
    };
    let promoted = retry(deadline, || {
        cluster.change_members(p, change.clone(), STEP_DEADLINE)
    })
    .await;
    if let Err(e) = promoted {
        // The change may have committed although its answer was lost.
        if !has_voters(&cluster, &asked, p, &voters).await {
            return Err(e);
        }
    }
    wait_for_voters(&cluster, &asked, p, &voters, deadline).await?;
    let file = load_replicated(path)?.with_replica_moved(m)?;
    file.save().map_err(|e| e.to_string())?;
    agree(path).await?;
    let left = match p {
        GroupRef::Partition(_) => format!(" ({} deletes its copy when it next starts)", m.from),
        GroupRef::Catalog => String::new(),
    };
    println!("{m}: done, map version {}{left}", file.map.version());
    Ok(())
}

/// A client of the cluster at `path` whose calls may take a membership
/// step's time.
fn client(path: &Path) -> Result<RemoteStore, String> {
    let source = FileMapSource::open(path).map_err(|e| e.to_string())?;
    client_of(Arc::new(source))
}

/// A client routing by `source`, whose calls may take a membership
/// step's time.
fn client_of(source: Arc<FileMapSource>) -> Result<RemoteStore, String> {
    let file = source.file();
    let opts = CallOptions {
        deadline: STEP_DEADLINE,
        ..CallOptions::default()
    };
    let map: Arc<dyn MapSource> = source;
    RemoteStore::new(&file, map, opts).map_err(|e| e.to_string())
}

/// Bring the file at `path` and the catalog's copy of the map
/// (`MAP_DOC`) to the newer of the two: the catalog's written to the
/// file when newer (this host's file was older: another host's command
/// changed the map), this file's published when the catalog's is older
/// (the change just written). Every command starts and ends with it. A
/// catalog that does not answer is reported and the file used as it is:
/// the leader watch of every gateway and node reading this file
/// publishes it within a second.
async fn agree(path: &Path) -> Result<(), String> {
    let source = Arc::new(FileMapSource::open(path).map_err(|e| e.to_string())?);
    let cluster = client_of(Arc::clone(&source))?;
    match cluster.share_map(AGREE_DEADLINE).await {
        Ok(MapShare::Taken) => {
            let file = source.file();
            file.save().map_err(|e| e.to_string())?;
            println!(
                "{}: took the cluster's newer map (version {}) from the catalog",
                path.display(),
                file.map.version()
            );
        }
        Ok(MapShare::Same | MapShare::Published) => {}
        Err(e) => eprintln!(
            "laneway: warning: the catalog's copy of the partition map was not compared with {} ({e}); \
             going on with the file",
            path.display()
        ),
    }
    Ok(())
}

/// Ask `step` until it succeeds or `deadline` passes (a group without a
/// leader for a moment answers 503; each step is idempotent).
async fn retry<F, Fut>(deadline: Instant, step: F) -> Result<(), String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = laneway_store::StoreResult<()>>,
{
    loop {
        match step().await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e.to_string()),
            Err(e) => {
                tracing::debug!(error = %e, "a membership step failed; asking again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// The nodes that may report on the move's group: its replicas in the
/// file and the node taking one.
fn asked_nodes(file: &ClusterFile, m: &Move) -> Vec<NodeId> {
    let mut nodes = m.group.replicas(&file.map).to_vec();
    nodes.push(m.to.clone());
    nodes
}

/// Group `g` as its leader reports it (of several claims, the highest
/// term's), asking `nodes`.
async fn leader_status(
    cluster: &RemoteStore,
    nodes: &[NodeId],
    g: GroupRef,
) -> Option<GroupStatus> {
    let partition = match g {
        GroupRef::Catalog => None,
        GroupRef::Partition(p) => Some(p),
    };
    let asks = nodes.iter().map(|n| async move {
        cluster
            .call_node_within::<Vec<GroupReport>>(n, Call::Groups, Duration::from_secs(5))
            .await
            .ok()
    });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .flatten()
        .filter(|r| r.partition == partition)
        .map(|r| r.status)
        .filter(|s| s.leader == Some(s.me))
        .max_by_key(|s| s.term)
}

/// Wait until the learner of `m` is within [`CATCH_UP_SLACK`] entries of
/// its leader's log, saying how far it is every few seconds.
async fn wait_caught_up(
    cluster: &RemoteStore,
    nodes: &[NodeId],
    m: &Move,
    deadline: Instant,
) -> Result<(), String> {
    let learner = m.to.raft_id();
    let mut said = Instant::now();
    loop {
        if let Some(s) = leader_status(cluster, nodes, m.group).await {
            let matched = s
                .matched
                .iter()
                .find(|(id, _)| *id == learner)
                .map_or(0, |(_, i)| *i);
            if matched + CATCH_UP_SLACK >= s.last_log {
                return Ok(());
            }
            if said.elapsed() >= Duration::from_secs(5) {
                println!("{m}: {} at entry {matched} of {}", m.to, s.last_log);
                said = Instant::now();
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("{m}: {} did not catch up within the timeout", m.to));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether `p`'s leader reports exactly `voters` as its voters.
async fn has_voters(cluster: &RemoteStore, nodes: &[NodeId], p: GroupRef, voters: &[u64]) -> bool {
    let mut want = voters.to_vec();
    want.sort_unstable();
    leader_status(cluster, nodes, p).await.is_some_and(|s| {
        let mut have = s.voters;
        have.sort_unstable();
        have == want && s.learners.is_empty()
    })
}

/// Wait until a leader of `p` reports `voters` (after a change that
/// removed the leader, until the new voters elected one).
async fn wait_for_voters(
    cluster: &RemoteStore,
    nodes: &[NodeId],
    p: GroupRef,
    voters: &[u64],
    deadline: Instant,
) -> Result<(), String> {
    while !has_voters(cluster, nodes, p, voters).await {
        if Instant::now() >= deadline {
            return Err(format!(
                "{p}: no leader reported the new voters within the timeout"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}
