//! replica-bench: the store's write and read paths with and without
//! replication, side by side in one run (docs/benchmarks.md,
//! "Replication").
//!
//! RF 1 is one durable store. RF 3 is three stores in this process, each
//! partition a Raft group of three replicas that talk over the real
//! cluster RPC on loopback (signed HTTP/2, the transport store nodes will
//! use): every PUT is acknowledged once a quorum has fsynced its log
//! entries (bodies above the inline size travel as volume pieces), and
//! every GET first passes the leader's read-index barrier. Calls go
//! straight to the partition's leader store (no gateway, no S3): this
//! measures what replication adds to the store, not the HTTP front.
//!
//! Method: `--objects` PUTs of `--size` bytes from `--concurrency` tasks,
//! then the same number of GETs; wall time, operations per second and the
//! whole process's CPU per operation (for RF 3 that is all three replicas,
//! which share this machine's cores as they would not in a real cluster).
//!
//! `--mode idle` measures what idle groups cost: RF 3 stores with no
//! requests for `--idle-secs`, first with every group sending its own
//! heartbeats (openraft's timer per group), then with one ticker per node
//! whose heartbeats travel as one batch call per peer; for each, the Raft
//! calls and appends the three nodes received per second and the
//! process's CPU per second.
//!
//! `--logs own` gives every RF 3 group a log database of its own instead
//! of one per node (`shared`, what store nodes run). `--batches
//! heartbeats` gathers only entry-less appends into a peer's batch calls,
//! as nodes did before rounds of entries joined them (`all`, with
//! `--in-flight` calls out per peer).

use bytes::Bytes;
use clap::Parser;
use futures::StreamExt;
use laneway_bench::cpu::cpu_seconds;
use laneway_replica::group::{GroupLogs, GroupSpec, RaftOpener};
use laneway_replica::net::{Asking, Batching, HeartbeatTicker, Peers, RaftService, RpcNetwork};
use laneway_replica::types::NodeId;
use laneway_replica::wal::Wal;
use laneway_store::ids::PartitionId;
use laneway_store::index_fjall::SharedFjall;
use laneway_store::replication::Replication;
use laneway_store::rpc::{RpcServer, ServerOptions, Signer};
use laneway_store::{BodyStream, BucketInfo, PutOptions, Store, StoreConfig, TenantId};
use openraft::BasicNode;
use std::collections::BTreeMap;
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

type BenchResult<T> = Result<T, Box<dyn Error>>;

/// Command-line flags.
#[derive(Parser, Debug)]
#[command(about = "Benchmark the store with and without replication")]
struct Args {
    /// Objects written (and then read).
    #[arg(long, default_value_t = 20_000)]
    objects: u64,
    /// Object size in bytes.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// Operations in flight.
    #[arg(long, default_value_t = 32)]
    concurrency: u64,
    /// Partitions of each store.
    #[arg(long, default_value_t = 16)]
    partitions: u32,
    /// Which setups: rf1, rf3, both, or idle (see the module doc).
    #[arg(long, default_value = "both")]
    mode: String,
    /// Seconds of each idle measurement.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// Where RF 3 groups keep their logs: `file` (one log file per node,
    /// as store nodes do), `shared` (one log database per node, as nodes
    /// did before the file) or `own` (a database per group).
    #[arg(long, default_value = "file")]
    logs: String,
    /// Which appends RF 3 nodes gather into one call per peer: `all`
    /// (rounds of entries too, one call in flight per peer, as store
    /// nodes do) or `heartbeats` (entry-less appends only, as before).
    #[arg(long, default_value = "all")]
    batches: String,
    /// Batch calls in flight per peer, with `--batches all`.
    #[arg(long, default_value_t = laneway_replica::net::batch::IN_FLIGHT)]
    in_flight: usize,
}

/// The batching `--batches` and `--in-flight` ask for.
fn batching(args: &Args) -> BenchResult<Batching> {
    match args.batches.as_str() {
        "all" => Ok(Batching {
            entries: true,
            in_flight: args.in_flight,
        }),
        "heartbeats" => Ok(Batching::HEARTBEATS_ONLY),
        other => Err(format!("--batches: {other:?} is neither all nor heartbeats").into()),
    }
}

/// Where each partition's calls go.
struct Setup {
    /// Per partition, the store that leads it.
    leaders: Vec<Arc<Store>>,
    /// Everything to stop at the end.
    stores: Vec<Arc<Store>>,
    servers: Vec<RpcServer>,
    /// Each RF 3 node's receiving side (its counts).
    services: Vec<Arc<RaftService>>,
    /// Each RF 3 node's heartbeat ticker, when the groups use one.
    tickers: Vec<HeartbeatTicker>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Setup {
    fn stop(self, rt: &tokio::runtime::Runtime) {
        for s in &self.stores {
            s.shutdown();
        }
        rt.block_on(async {
            for ticker in self.tickers {
                ticker.stop().await;
            }
            for server in self.servers {
                server.stop().await;
            }
        });
    }
}

fn main() -> BenchResult<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "replica-bench: {} objects of {} B, {} in flight, {} partitions, logs {}, batches {} ({} in flight); CPU is this whole process",
        args.objects,
        args.size,
        args.concurrency,
        args.partitions,
        args.logs,
        args.batches,
        args.in_flight
    );
    if args.mode == "idle" {
        for ticked in [false, true] {
            let setup = rf3(&args, &rt, ticked)?;
            idle(&args, &setup, ticked)?;
            setup.stop(&rt);
        }
        return Ok(());
    }
    for mode in ["rf1", "rf3"] {
        if args.mode != "both" && args.mode != mode {
            continue;
        }
        let setup = if mode == "rf1" {
            rf1(&args)?
        } else {
            rf3(&args, &rt, false)?
        };
        measure(mode, &args, &rt, &setup)?;
        setup.stop(&rt);
    }
    Ok(())
}

/// Sit idle for `--idle-secs` (after 2 s for the groups to settle) and
/// print what the nodes received and the CPU spent.
fn idle(args: &Args, setup: &Setup, ticked: bool) -> BenchResult<()> {
    std::thread::sleep(Duration::from_secs(2));
    let total = |s: &Setup| {
        s.services.iter().fold((0u64, 0u64), |(c, a), svc| {
            let r = svc.received();
            (c + r.calls, a + r.appends)
        })
    };
    let (calls0, appends0) = total(setup);
    let cpu0 = cpu_seconds(None)?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(args.idle_secs));
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(None)? - cpu0;
    let (calls, appends) = total(setup);
    let largest = setup
        .services
        .iter()
        .map(|s| s.received().largest_batch)
        .max()
        .unwrap_or(0);
    println!(
        "idle, {} groups x 3, {}: {:.0} raft calls/s carrying {:.0} appends/s (largest batch {largest}), CPU {:.1} ms/s",
        args.partitions,
        if ticked {
            "one ticker per node, batched heartbeats"
        } else {
            "each group's own heartbeat timer"
        },
        (calls - calls0) as f64 / wall,
        (appends - appends0) as f64 / wall,
        cpu / wall * 1e3
    );
    Ok(())
}

fn rf1(args: &Args) -> BenchResult<Setup> {
    let dir = tempfile::tempdir()?;
    let cfg = StoreConfig {
        partitions: Some(args.partitions),
        ..StoreConfig::default()
    };
    let store = Store::open(dir.path(), cfg)?;
    Ok(Setup {
        leaders: vec![Arc::clone(&store); args.partitions as usize],
        stores: vec![store],
        servers: Vec::new(),
        services: Vec::new(),
        tickers: Vec::new(),
        _dirs: vec![dir],
    })
}

/// Three replicated stores; `ticked`: one heartbeat ticker per node
/// instead of each group's own timer.
fn rf3(args: &Args, rt: &tokio::runtime::Runtime, ticked: bool) -> BenchResult<Setup> {
    let signer = || Signer::new(&[7u8; 32]);
    let mut listeners = Vec::new();
    let mut members = BTreeMap::new();
    for id in 1..=3u64 {
        let l = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        members.insert(id, BasicNode::new(l.local_addr()?.to_string()));
        listeners.push(l);
    }
    let (mut stores, mut servers, mut dirs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut services, mut tickers) = (Vec::new(), Vec::new());
    for (i, listener) in listeners.into_iter().enumerate() {
        let me = i as NodeId + 1;
        let service = Arc::new(RaftService::new());
        let _guard = rt.enter();
        servers.push(RpcServer::start(
            listener,
            Arc::clone(&service) as Arc<dyn laneway_store::rpc::Handler>,
            signer(),
            ServerOptions::default(),
        )?);
        let peers = Arc::new(Peers::with_batching(signer(), batching(args)?));
        let asked_through = Arc::clone(&peers);
        services.push(Arc::clone(&service));
        if ticked {
            tickers.push(HeartbeatTicker::start(
                rt.handle(),
                Arc::clone(&service),
                Arc::clone(&peers),
                Duration::from_millis(laneway_replica::net::HEARTBEAT_INTERVAL_MS),
            ));
        }
        let members = members.clone();
        let dir = tempfile::tempdir()?;
        let logs = match args.logs.as_str() {
            "file" => GroupLogs::File {
                wal: Wal::open(&dir.path().join(laneway_replica::node::WAL_DIR))?,
                older: None,
            },
            "shared" => GroupLogs::Shared(SharedFjall::open(
                &dir.path().join("raft-log"),
                laneway_replica::group::LOG_CACHE_BYTES,
            )?),
            "own" => GroupLogs::Own,
            other => {
                return Err(format!("--logs: {other:?} is none of file, shared, own").into());
            }
        };
        let opener = RaftOpener {
            catalog: None,
            spec: Box::new(move |_| GroupSpec {
                me,
                members: members.clone(),
                initializer: None,
            }),
            unheard_for: Box::new(|_| None),
            network: Box::new(move |p: PartitionId| RpcNetwork::new(p.0, Arc::clone(&peers))),
            started: Box::new(move |p: PartitionId, raft, empty, spec: &GroupSpec| {
                let asking = Asking::of(&asked_through, spec.me, &spec.members);
                service.register_as(p.0, raft, empty, asking)
            }),
            handle: rt.handle().clone(),
            snapshot_entries: laneway_replica::group::SNAPSHOT_ENTRIES,
            own_heartbeats: !ticked,
            applies: (!matches!(logs, GroupLogs::Own))
                .then(laneway_replica::group::apply_queue)
                .transpose()?,
            logs,
        };
        let cfg = StoreConfig {
            partitions: Some(args.partitions),
            groups: Some(Replication(Arc::new(opener))),
            ..StoreConfig::default()
        };
        drop(_guard);
        stores.push(Store::open(dir.path(), cfg)?);
        dirs.push(dir);
    }
    let leaders = (0..args.partitions)
        .map(|p| leader_of(&stores, PartitionId(p)))
        .collect::<BenchResult<Vec<_>>>()?;
    Ok(Setup {
        leaders,
        stores,
        servers,
        services,
        tickers,
        _dirs: dirs,
    })
}

/// The store leading partition `p`, once one does (at most 30 s).
fn leader_of(stores: &[Arc<Store>], p: PartitionId) -> BenchResult<Arc<Store>> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        for (i, s) in stores.iter().enumerate() {
            let status = s.partition(p)?.group().map(|g| g.status());
            if status.is_some_and(|st| st.leader == Some(i as u64 + 1)) {
                return Ok(Arc::clone(s));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{p} elected no leader in 30 s").into())
}

fn measure(
    mode: &str,
    args: &Args,
    rt: &tokio::runtime::Runtime,
    setup: &Setup,
) -> BenchResult<()> {
    let tenant = TenantId("bench".into());
    let buckets: Vec<BucketInfo> = setup
        .stores
        .iter()
        .map(|s| s.create_bucket(&tenant, "bench", "us-east-1"))
        .collect::<Result<_, _>>()?;
    let bucket = buckets[0].clone();
    let body = Bytes::from(vec![0x5au8; args.size]);
    for phase in ["put", "get"] {
        let raft0 = raft_counts(setup);
        let cpu0 = cpu_seconds(None)?;
        let t0 = Instant::now();
        rt.block_on(run_phase(phase, args, setup, &bucket, &body))?;
        let wall = t0.elapsed().as_secs_f64();
        let cpu = cpu_seconds(None)? - cpu0;
        let raft = raft_counts(setup);
        let n = args.objects as f64;
        let per_op = |now: u64, then: u64| (now - then) as f64 / n;
        let raft_text = if setup.services.is_empty() {
            String::new()
        } else {
            format!(
                "; per op {:.2} raft calls carrying {:.2} appends, {:.2} of them with entries in batches",
                per_op(raft.0, raft0.0),
                per_op(raft.1, raft0.1),
                per_op(raft.2, raft0.2)
            )
        };
        println!(
            "{mode} {phase}: {:.0} ops/s ({:.2} s), {:.0} us CPU/op{raft_text}",
            n / wall,
            wall,
            cpu / n * 1e6
        );
    }
    Ok(())
}

/// Raft calls, appends and batched appends with entries the RF 3 nodes
/// received so far (zeros at RF 1).
fn raft_counts(setup: &Setup) -> (u64, u64, u64) {
    setup.services.iter().fold((0, 0, 0), |(c, a, e), svc| {
        let r = svc.received();
        (c + r.calls, a + r.appends, e + r.batched_with_entries)
    })
}

async fn run_phase(
    phase: &str,
    args: &Args,
    setup: &Setup,
    bucket: &BucketInfo,
    body: &Bytes,
) -> BenchResult<()> {
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let workers = (0..args.concurrency).map(|_| {
        let next = Arc::clone(&next);
        async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= args.objects {
                    return Ok::<(), Box<dyn Error>>(());
                }
                let key = format!("obj/{i:08}");
                let p =
                    laneway_store::hash::partition_of(bucket.id, key.as_bytes(), args.partitions);
                let store = &setup.leaders[p.0 as usize];
                if phase == "put" {
                    let opts = PutOptions {
                        content_length: Some(body.len() as u64),
                        ..PutOptions::default()
                    };
                    let stream: BodyStream = Box::pin(futures::stream::iter([Ok(body.clone())]));
                    store
                        .put_object(bucket, &key, Default::default(), opts, stream)
                        .await?;
                } else {
                    if let Some(g) = store.partition(p)?.group() {
                        g.read_barrier().await?;
                    }
                    let (_, mut s) = store.get_object(bucket, &key, None)?;
                    while let Some(chunk) = s.next().await {
                        chunk?;
                    }
                }
            }
        }
    });
    futures::future::try_join_all(workers).await?;
    Ok(())
}
