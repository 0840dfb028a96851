//! `laneway store`: one store node of a cluster. It opens, in its data
//! directory, the partitions the cluster file's map gives it (and the
//! catalog, which every data directory has and the catalog's node serves),
//! then answers the cluster RPC until SIGTERM or Ctrl-C, and syncs and
//! closes the store.
//!
//! With `replicas = 3` in the cluster file, the node opens every
//! partition, each with its replica of the partition's Raft group
//! (`laneway_replica::node`), which is a member where the map (or a
//! membership change since, `laneway cluster move-partition`) makes it
//! one and idle elsewhere; the catalog's group where the map lists the
//! node among the catalog's replicas. The groups' messages arrive on the
//! same port as the store calls, and a replica that does not lead a group
//! refuses that group's calls with a hint to the leader.
//!
//! Startup prints one line on stdout once the RPC port is bound and the
//! store open: `laneway store node ID listening on rpc://ADDR`. The port
//! serves the groups' messages from before that, each group's once it is
//! open, and answers the node's own calls `Unavailable` until then.

use clap::Args;
use laneway_replica::net::Split;
use laneway_replica::node::NodeReplication;
use laneway_store::cluster::{FileMapSource, MapSource, NodeId};
use laneway_store::node::NodeService;
use laneway_store::node::lanes::NodeLanes;
use laneway_store::remote::RemoteStore;
use laneway_store::rpc::{
    CallOptions, Handler, Reply, RpcServer, ServerOptions, Signer, WireCode, WireError,
};
use laneway_store::{Store, StoreConfig, StoreError};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `laneway store`.
#[derive(Args)]
pub struct StoreArgs {
    /// Data directory of this node (created on first start).
    #[arg(long, env = "LANEWAY_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Address of the RPC listener (gateways and nodes reach it at the
    /// address the cluster file gives for this node).
    #[arg(long, env = "LANEWAY_LISTEN")]
    pub listen: String,
    /// The cluster file.
    #[arg(long, env = "LANEWAY_CLUSTER")]
    pub cluster: PathBuf,
    /// This node's id in the cluster file.
    #[arg(long, env = "LANEWAY_NODE")]
    pub node: String,
    /// Free space kept for deletes and compaction, as for `serve`.
    #[arg(long, env = "LANEWAY_DISK_RESERVE", default_value = "auto")]
    pub disk_reserve: String,
    /// Index cache and memtables of the node's partitions, as for `serve`.
    #[arg(long, env = "LANEWAY_INDEX_MEMORY", default_value = "128M")]
    pub index_memory: String,
    /// Log entries between two snapshots of a replicated partition's
    /// group; the log before a snapshot is then purged (docs/replication.md,
    /// "Snapshots").
    #[arg(long, env = "LANEWAY_RAFT_SNAPSHOT_ENTRIES", default_value_t = laneway_replica::group::SNAPSHOT_ENTRIES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub raft_snapshot_entries: u64,
    /// Seconds between two background passes that abort stale multipart
    /// uploads and compact volume segments at least half garbage (a
    /// replicated partition is compacted by its leader, through its group).
    #[arg(long, env = "LANEWAY_COMPACT_EVERY", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub compact_every: u64,
    /// Log filter (RUST_LOG syntax).
    #[arg(long = "log", env = "LANEWAY_LOG")]
    pub log: Option<String>,
}

/// Why a store node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A flag or the cluster file is wrong.
    #[error("{0}")]
    Config(String),
    /// The store would not open.
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    /// The RPC port could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A blocking task failed.
    #[error("background task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl StoreArgs {
    /// The log filter asked for.
    pub fn log(&self) -> Option<&str> {
        self.log.as_deref()
    }
}

/// Run the node until a shutdown signal.
pub async fn run(args: StoreArgs) -> Result<(), NodeError> {
    crate::server::conn::fds::raise_nofile_limit();
    let map_source = Arc::new(FileMapSource::open(&args.cluster).map_err(cfg_err)?);
    let file = map_source.file();
    let node = NodeId::parse(&args.node).map_err(NodeError::Config)?;
    if file.node(node.as_str()).is_none() {
        return Err(NodeError::Config(format!(
            "node {node} is not in the cluster file {}",
            file.path.display()
        )));
    }
    let secret = file.read_secret().map_err(cfg_err)?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|source| NodeError::Bind {
            addr: args.listen.clone(),
            source,
        })?;
    let replication = replication_of(&map_source, &node, &secret, &args)?;
    // Served from here on: the Raft messages of each group as soon as it
    // is open (the peers' elections and their replicas that started empty
    // need this node's answers while the rest of its store opens), the
    // node's own methods once the store is open (`Opening`).
    let opening = Arc::new(Opening::default());
    let own: Arc<dyn Handler> = Arc::clone(&opening) as Arc<dyn Handler>;
    let handler: Arc<dyn Handler> = match &replication {
        Some(r) => Arc::new(Split {
            raft: Arc::clone(&r.service),
            rest: own,
        }),
        None => own,
    };
    let server = RpcServer::start(
        listener,
        handler,
        Signer::new(&secret),
        ServerOptions::default(),
    )
    .map_err(|source| NodeError::Bind {
        addr: args.listen.clone(),
        source,
    })?;
    let groups = replication.as_ref().map(|r| r.opener.clone());
    let store = open_store(&args, &map_source, &node, groups).await?;
    start_compactor(&store, args.compact_every);
    if replication.is_some() {
        spawn_forgetting(Arc::clone(&store));
    }
    let map: Arc<dyn MapSource> = map_source.clone();
    let cluster = RemoteStore::new(&file, Arc::clone(&map), CallOptions::default())?;
    let _watch = cluster.watch_leaders(std::time::Duration::from_secs(1));
    let node_lanes = NodeLanes::new(laneway_store::node::lanes::node_lanes_config());
    let lanes_view = node_lanes.lanes().clone();
    let service = NodeService::new(
        Arc::clone(&store),
        node.clone(),
        map,
        node_lanes,
        Arc::new(cluster),
    );
    opening.open(Arc::new(service));
    announce(&node, server.local_addr());
    spawn_lanes_log(lanes_view);
    crate::server::serve::shutdown_signal().await;
    tracing::info!("stopping the RPC listener");
    server.stop().await;
    tracing::info!("syncing and closing the store");
    tokio::task::spawn_blocking(move || store.shutdown()).await?;
    Ok(())
}

/// The node's own methods (everything but the Raft transport's), which
/// answer `Unavailable` until the store is open: a caller retries as it
/// does for a node that is down.
#[derive(Default)]
struct Opening {
    service: std::sync::OnceLock<Arc<dyn Handler>>,
}

impl Opening {
    /// Serve the node's methods through `service` from now on.
    fn open(&self, service: Arc<dyn Handler>) {
        let _ = self.service.set(service);
    }
}

impl Handler for Opening {
    fn call(
        &self,
        method: String,
        args: bytes::Bytes,
        body: laneway_store::BodyStream,
    ) -> futures::future::BoxFuture<'static, Result<Reply, WireError>> {
        match self.service.get() {
            Some(service) => service.call(method, args, body),
            None => Box::pin(std::future::ready(Err(WireError::new(
                WireCode::Unavailable,
                "the store node is still opening its store",
            )))),
        }
    }
}

/// The node's groups when the cluster replicates (`replicas` above 1).
fn replication_of(
    source: &Arc<FileMapSource>,
    node: &NodeId,
    secret: &[u8],
    args: &StoreArgs,
) -> Result<Option<NodeReplication>, NodeError> {
    if source.file().replicas <= 1 {
        return Ok(None);
    }
    let handle = tokio::runtime::Handle::current();
    let snapshot_entries = args.raft_snapshot_entries;
    NodeReplication::new(
        source,
        node,
        secret,
        handle,
        snapshot_entries,
        &args.data_dir,
    )
    .map(Some)
    .map_err(cfg_err)
}

/// The node's background passes (every `every_secs`: segments at least
/// half dead, multipart uploads a week old). On a replicated node each
/// partition is swept and compacted by its leader only, its segments moved
/// and deleted through the group's log (`laneway_store::compaction`).
fn start_compactor(store: &Arc<Store>, every_secs: u64) {
    store.start_compactor(
        std::time::Duration::from_secs(every_secs),
        0.5,
        std::time::Duration::from_secs(168 * 3600),
    );
}

/// How often a replicated node looks for partitions whose copy here the
/// group no longer counts on (moved away by `laneway cluster
/// move-partition`, `rebalance` or `remove-node`).
const FORGET_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Every [`FORGET_EVERY`], delete the copy of each partition whose
/// replica here its group left behind, while the node runs (the group
/// decides: `Group::forget_if_left`), so a rebalance frees the disk of
/// the nodes it moved replicas off without their restart.
fn spawn_forgetting(store: Arc<Store>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(FORGET_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let pass = Arc::clone(&store);
            let done = tokio::task::spawn_blocking(move || forget_left_copies(&pass)).await;
            if done.is_err() {
                tracing::warn!("a pass deleting left-behind replicas failed");
            }
        }
    });
}

/// One pass of [`spawn_forgetting`].
fn forget_left_copies(store: &Store) {
    for p in store.partitions() {
        let Some(group) = p.group() else {
            continue;
        };
        if let Err(e) = group.forget_if_left() {
            tracing::warn!(partition = %p.id(), error = %e,
                "could not delete the copy of a replica that moved away; trying again later");
        }
    }
}

fn cfg_err(e: impl std::fmt::Display) -> NodeError {
    NodeError::Config(e.to_string())
}

/// Open the node's share of the partitions: with replication, every
/// partition, since who holds a replica changes while the node runs
/// (`laneway cluster move-partition` adds it to a group as a learner),
/// and a partition whose group it is no member of stays idle: its group
/// never initializes here and never leads, so the node serves nothing of
/// it ([`NodeReplication`] says who may initialize a group).
async fn open_store(
    args: &StoreArgs,
    map: &FileMapSource,
    node: &NodeId,
    groups: Option<laneway_store::replication::Replication>,
) -> Result<Arc<Store>, NodeError> {
    let current = map.current();
    let hosted = if groups.is_some() {
        current.partitions().collect()
    } else {
        current.hosted_by(node)
    };
    let disk_reserve = laneway_store::DiskReserve::parse(&args.disk_reserve)
        .map_err(|e| NodeError::Config(format!("--disk-reserve: {e}")))?;
    let index_memory = crate::admin::cli::parse_size(&args.index_memory)
        .ok()
        .filter(|n| *n >= 1 << 20)
        .ok_or_else(|| {
            NodeError::Config(format!("--index-memory: bad size {:?}", args.index_memory))
        })?;
    let cfg = StoreConfig {
        partitions: Some(current.partition_count()),
        disk_reserve,
        index_memory,
        hosted: Some(hosted.clone()),
        groups,
        ..StoreConfig::default()
    };
    let dir = args.data_dir.clone();
    std::fs::create_dir_all(&dir)
        .map_err(|e| NodeError::Config(format!("cannot create {}: {e}", dir.display())))?;
    let store = tokio::task::spawn_blocking(move || Store::open(&dir, cfg)).await??;
    tracing::info!(node = %node, partitions = hosted.len(), catalog = current.catalog().contains(node),
        "store node open");
    Ok(store)
}

fn announce(node: &NodeId, addr: std::net::SocketAddr) {
    let mut out = std::io::stdout().lock();
    let line = format!("laneway store node {node} listening on rpc://{addr}\n");
    if out
        .write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        tracing::warn!("could not write the startup line to stdout");
    }
}

/// Every 10 s, at debug level, what the node's lanes served per tenant.
fn spawn_lanes_log(lanes: laneway_qos::Lanes) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
        loop {
            tick.tick().await;
            for t in lanes.snapshot().tenants {
                tracing::debug!(tenant = %t.tenant.as_str(), weight = t.weight.get(),
                    granted = t.granted, served_units = t.served_units, queued = t.queue_depth,
                    waited_ms = u64::try_from(t.total_queue_wait.as_millis()).unwrap_or(u64::MAX),
                    "node lanes");
            }
        }
    });
}
