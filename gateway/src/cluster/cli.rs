//! `laneway cluster init` and `laneway cluster show`: write a new cluster
//! file (nodes, partition count, replicas, a balanced partition map at
//! version 1, a random secret beside it) and print a checked one.
//! `laneway cluster local` ([`super::local`]) runs a whole cluster of
//! local processes; `laneway cluster ping` ([`super::ping`]) calls one
//! store node once; `laneway cluster status` ([`super::status`]) shows
//! every replication group; `add-node`, `move-partition`, `rebalance` and
//! `remove-node` ([`super::members`]) change who holds what, online.
//!
//! Nodes are given one by one (`--node ID=HOST:PORT`, repeatable) or as a
//! local range (`--store-nodes N --base-port P`: `store-1` on P,
//! `store-2` on P+1, ... at `--host`). Exit status: 0 on success, 1 when
//! the file cannot be written or does not check, 2 for bad flags.

use clap::{Args, Subcommand};
use laneway_store::cluster::{ClusterFile, InitSpec, init_cluster};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Flags of `laneway cluster`.
#[derive(Args)]
pub struct ClusterArgs {
    /// What to do.
    #[command(subcommand)]
    pub cmd: ClusterCmd,
}

/// `laneway cluster` subcommands.
#[derive(Subcommand)]
pub enum ClusterCmd {
    /// Write a new cluster file and its secret.
    Init(InitArgs),
    /// Check a cluster file and print its nodes and partition map.
    Show {
        /// The cluster file.
        #[arg(long, env = "LANEWAY_CLUSTER")]
        file: PathBuf,
    },
    /// Run a whole cluster (store nodes and gateways) as local child
    /// processes, for development and demos; Ctrl-C stops it.
    Local(super::local::LocalArgs),
    /// Call one store node (a signed RPC `ping`): exit 0 when it answers.
    Ping(super::ping::PingArgs),
    /// Every replication group's leader, replicas, log index, lag and
    /// health (a table, or JSON with --json): exit 0 when all are ok.
    Status(super::status::StatusArgs),
    /// Add a store node to the cluster file, holding nothing yet (start
    /// it, then `rebalance`).
    AddNode(super::members::AddNodeArgs),
    /// Move one partition's replica from one node to another, online
    /// (learner, then promotion, then the file).
    MovePartition(super::members::MoveArgs),
    /// Move replicas until every node holds its share.
    Rebalance(super::members::PlanArgs),
    /// Move every replica off a node, then take it out of the file.
    RemoveNode(super::members::RemoveNodeArgs),
}

/// Flags of `laneway cluster init`.
#[derive(Args)]
pub struct InitArgs {
    /// The cluster file to write (its secret goes beside it).
    #[arg(long, env = "LANEWAY_CLUSTER")]
    pub file: PathBuf,
    /// A store node as ID=HOST:PORT (repeat for each node).
    #[arg(long = "node", value_name = "ID=HOST:PORT")]
    pub nodes: Vec<String>,
    /// Instead of --node: this many local nodes, store-1 .. store-N.
    #[arg(long, conflicts_with = "nodes")]
    pub store_nodes: Option<u16>,
    /// First RPC port of --store-nodes (node i listens on base + i - 1).
    #[arg(long, default_value_t = 9100)]
    pub base_port: u16,
    /// Host of --store-nodes.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Partitions (a power of two, fixed for the cluster's life).
    #[arg(long, default_value_t = 16)]
    pub partitions: u32,
    /// Replicas per partition.
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    /// Replace an existing cluster file (its map restarts at version 1).
    #[arg(long, conflicts_with = "keep_existing")]
    pub force: bool,
    /// Leave an existing cluster file (and its secret) as it is, after
    /// checking it, and succeed: for an init step that runs on every start
    /// (docker-compose.yml's `init` service).
    #[arg(long)]
    pub keep_existing: bool,
}

/// Run `laneway cluster ...`.
pub fn run(args: ClusterArgs) -> ExitCode {
    match args.cmd {
        ClusterCmd::Init(init) => run_init(init),
        ClusterCmd::Local(local) => super::local::run(local),
        ClusterCmd::Ping(ping) => super::ping::run(ping),
        ClusterCmd::Status(status) => super::status::run(status),
        ClusterCmd::AddNode(a) => super::members::add_node(a),
        ClusterCmd::MovePartition(a) => super::members::move_partition(a),
        ClusterCmd::Rebalance(a) => super::members::rebalance(a),
        ClusterCmd::RemoveNode(a) => super::members::remove_node(a),
        ClusterCmd::Show { file } => show(&file, None),
    }
}

/// Check the cluster file at `path` and print it (after `heading PATH`).
fn show(path: &Path, heading: Option<&str>) -> ExitCode {
    match ClusterFile::load(path) {
        Ok(f) => {
            if let Some(h) = heading {
                println!("{h} {}", f.path.display());
            }
            print!("{}", describe(&f));
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e.to_string()),
    }
}

fn run_init(args: InitArgs) -> ExitCode {
    let nodes = match node_list(&args) {
        Ok(n) => n,
        Err(msg) => {
            eprintln!("laneway: {msg}");
            return ExitCode::from(2);
        }
    };
    if args.file.exists() && args.keep_existing {
        return show(&args.file, Some("kept"));
    }
    if args.file.exists() && !args.force {
        return fail(&format!(
            "{} exists; pass --force to replace it (its partition map restarts at version 1)",
            args.file.display()
        ));
    }
    let spec = InitSpec {
        path: args.file,
        nodes,
        partitions: args.partitions,
        replicas: args.replicas,
    };
    match init_cluster(&spec) {
        Ok(f) => {
            println!("wrote {}", f.path.display());
            print!("{}", describe(&f));
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("laneway: {msg}");
    ExitCode::FAILURE
}

/// (id, address) of every node the flags name.
fn node_list(args: &InitArgs) -> Result<Vec<(String, String)>, String> {
    if let Some(n) = args.store_nodes {
        return (1..=n)
            .map(|i| {
                let port = args.base_port.checked_add(i - 1).ok_or_else(|| {
                    format!("--base-port {} + {n} nodes passes 65535", args.base_port)
                })?;
                Ok((format!("store-{i}"), format!("{}:{port}", args.host)))
            })
            .collect();
    }
    if args.nodes.is_empty() {
        return Err(
            "name the store nodes: --node ID=HOST:PORT (repeated) or --store-nodes N".into(),
        );
    }
    args.nodes
        .iter()
        .map(|n| {
            n.split_once('=')
                .map(|(id, addr)| (id.to_string(), addr.to_string()))
                .ok_or_else(|| format!("--node {n:?}: expected ID=HOST:PORT"))
        })
        .collect()
}

/// Nodes with their share of the map, then the map itself.
fn describe(f: &ClusterFile) -> String {
    let mut out = format!(
        "partitions {}  replicas {}  map version {}  secret {}\n",
        f.map.partition_count(),
        f.replicas,
        f.map.version(),
        f.secret_file.display()
    );
    let catalog: Vec<&str> = f.map.catalog().iter().map(|n| n.as_str()).collect();
    out.push_str(&format!("catalog  {}\n", catalog.join(" ")));
    out.push_str("NODE                 RPC                        OWNS  HOSTS\n");
    for n in &f.nodes {
        out.push_str(&format!(
            "{:<20} {:<26} {:>4}  {:>5}\n",
            n.id.as_str(),
            n.rpc,
            f.map.owned_by(&n.id).len(),
            f.map.hosted_by(&n.id).len()
        ));
    }
    for p in f.map.partitions() {
        let replicas: Vec<&str> = f.map.replicas(p).iter().map(|n| n.as_str()).collect();
        out.push_str(&format!("{p}  {}\n", replicas.join(" ")));
    }
    out
}
