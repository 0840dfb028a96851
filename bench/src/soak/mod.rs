//! `laneway-bench soak`: a long mixed run of four tenants beside clients
//! that misbehave, with a 2x overload phase, and checks at the end.
//!
//! The soak starts its own `laneway serve` ([`server`]) or uses a running
//! one, creates four tenants through the admin API (weights 1, 1, 2, 4),
//! and runs for `--duration` seconds:
//!
//! - polite tenants ([`tenant`]): closed loops of PUT, multipart, GET
//!   (whole, ranged), LIST, tagging and DELETE on keys each worker owns,
//!   recorded in a [`ledger`] only once acknowledged, every read checked;
//!   `--concurrency` workers per tenant, twice that in the overload phase
//!   ([`plan`]);
//! - misbehaving clients ([`rogue`]), all the time: slow and stalled
//!   readers ([`slow`]), GETs dropped and PUTs cut mid-body ([`abort`]),
//!   unauthenticated junk ([`junk`]), over raw sockets ([`raw`]).
//!
//! Then it waits for the lanes to drain, reads back every key the ledgers
//! know ([`verify`]), and prints the figures and a PASS/FAIL line per
//! check ([`report`]): lanes idle, server RSS (sampled every second by
//! [`monitor`]) within 2x of its baseline, no polite failure but 503 and
//! timeouts ([`outcome`]), every acknowledged object intact, nothing forged
//! accepted. A failed check makes the command exit non-zero. Objects are
//! [`blob`]s, regenerated from a seed; the extra S3 calls are in [`s3x`].

pub mod abort;
pub mod blob;
pub mod junk;
pub mod ledger;
pub mod monitor;
pub mod outcome;
pub mod plan;
pub mod raw;
pub mod report;
pub mod rogue;
pub mod s3x;
pub mod server;
pub mod slow;
pub mod tenant;
pub mod verify;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use blob::Blob;
use ledger::{KeyState, Tags, Version};
use monitor::Monitor;
use outcome::Cell;
use plan::Plan;
use rogue::{BIG_KEY, BIG_SIZE, RogueCtx, Target};
use server::Server;
use tenant::{Progress, Tenant, WorkerOut};
use verify::Job;

use crate::admin::{AdminClient, LaneGauges};
use crate::cli::{SoakArgs, check_loopback};
use crate::client::S3Client;

/// The tenants: name and weight.
const TENANTS: [(&str, u32); 4] = [("a", 1), ("b", 1), ("c", 2), ("d", 4)];
/// Longest wait for the lanes to drain after the load.
const SETTLE: Duration = Duration::from_secs(10);

/// Runs the soak; `Err` if it could not run or a check failed.
pub async fn run_mode(a: SoakArgs) -> Result<(), String> {
    let mut server = open_server(&a).await?;
    let admin = AdminClient::new(&server.admin, &server.token)?;
    print_method(&a, &server);
    let made = provision(&a, &server, &admin).await?;
    let tenants: Vec<Arc<Tenant>> = made.iter().map(|m| m.tenant.clone()).collect();
    let plan = Arc::new(Plan::new(
        Instant::now(),
        (a.warmup, a.duration),
        a.keys_per_worker,
        a.seed,
    ));
    let monitor = server.pid.map(|pid| Monitor::start(pid, plan.t0));
    let progress = Arc::new(Progress::default());
    let workers = spawn_workers(&tenants, &plan, a.concurrency, &progress);
    let ctx = rogue_ctx(&server, &made, &plan).await?;
    let rogues = rogue::spawn(ctx, a.slow_readers, a.rogues);
    let data = server.dir().map(|d| d.join("data"));
    let ticker = tokio::spawn(tick(plan.clone(), progress, server.pid, data));
    let outs = join_workers(workers).await;
    let rogues = rogue::collect(rogues).await;
    ticker.abort();
    let settled = settle(&admin).await;
    println!("# load over; read-back of every key");
    let verified = verify::run(&tenants, jobs(&outs, &made)).await;
    let after_verify = admin.lane_gauges().await.ok();
    let samples = match monitor {
        Some(m) => m.finish().await,
        None => Vec::new(),
    };
    let (cells, ops) = tallies(&outs);
    let outcome = report::Outcome {
        tenants: TENANTS
            .iter()
            .map(|(n, w)| ((*n).to_owned(), *w, a.concurrency))
            .collect(),
        cells,
        ops,
        rogues,
        samples,
        settled,
        after_verify,
        verified,
        alive: server.alive(),
        data_bytes: server.data_bytes(),
    };
    print!("{}", report::figures(&plan, &outcome));
    let (text, pass) = report::verdicts(&report::checks(&plan, &outcome));
    print!("{text}");
    server.stop(pass).await;
    if pass {
        Ok(())
    } else {
        Err("soak: a check failed (see the FAIL lines)".to_owned())
    }
}

async fn open_server(a: &SoakArgs) -> Result<Server, String> {
    let (Some(endpoint), Some(admin), Some(token)) =
        (&a.endpoint, &a.admin_endpoint, &a.admin_token)
    else {
        return Server::start(&a.bin, a.partitions).await;
    };
    check_loopback("--endpoint", endpoint)?;
    check_loopback("--admin-endpoint", admin)?;
    Ok(Server::existing(
        endpoint.clone(),
        admin.clone(),
        token.clone(),
        a.server_pid,
    ))
}

fn print_method(a: &SoakArgs, s: &Server) {
    println!("# laneway-bench soak");
    println!("{}", crate::machine::describe());
    println!(
        "# endpoint={} admin={} server_pid={} warmup={}s duration={}s partitions={} concurrency={}/tenant (x2 in overload) keys/worker={} slow_readers={} rogues/kind={} timeout={}s seed={}",
        s.endpoint,
        s.admin,
        s.pid.map_or("none".to_owned(), |p| p.to_string()),
        a.warmup,
        a.duration,
        a.partitions
            .map_or("server default".to_owned(), |p| p.to_string()),
        a.concurrency,
        a.keys_per_worker,
        a.slow_readers,
        a.rogues,
        a.timeout,
        a.seed
    );
    let tenants: Vec<String> = TENANTS
        .iter()
        .map(|(n, w)| format!("{n} (weight {w})"))
        .collect();
    let mix: Vec<String> = tenant::MIX
        .iter()
        .map(|(op, w)| format!("{} {w}", op.name()))
        .collect();
    println!(
        "# tenants: {}; phases: warm-up (--warmup), then normal 40%, overload 2x 30%, normal 30% of --duration; RSS baseline at warm-up + duration/20",
        tenants.join(", ")
    );
    println!(
        "# polite mix (weights): {}; put sizes 1-64 KiB 85%, 64-512 KiB 14%, 1-4 MiB 1%; multipart 5-6 MiB in 2 parts; list = walk of the worker's prefix in pages of 5; every read checked against the ledger",
        mix.join(", ")
    );
    println!(
        "# misbehaving: slow readers (8 KiB rcvbuf; half 4 KiB/s, half stalled), GETs dropped mid-body, PUTs cut mid-body, unauthenticated junk; RSS and CPU sampled every 1 s; lanes gauges from /metrics"
    );
}

/// A tenant with its keys, as provisioned.
struct Made {
    tenant: Arc<Tenant>,
    access_key: String,
    secret_key: String,
    big: Blob,
}

async fn provision(a: &SoakArgs, s: &Server, admin: &AdminClient) -> Result<Vec<Made>, String> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let run = format!("soak{}", secs % 1_000_000);
    let mut out = Vec::new();
    for (i, (name, weight)) in TENANTS.iter().enumerate() {
        let created = admin
            .create_tenant(&format!("{run}-{name}"), *weight)
            .await?;
        let client = S3Client::new(&s.endpoint, &created.access_key, &created.secret_key)
            .map_err(|e| e.to_string())?
            .with_timeout(Duration::from_secs(a.timeout));
        let bucket = format!("{run}-{name}");
        client
            .ensure_bucket(&bucket)
            .await
            .map_err(|e| format!("{bucket}: create: {e}"))?;
        let big = Blob::new(a.seed ^ 0xb16 ^ i as u64, BIG_SIZE);
        s3x::put_blob(&client, &bucket, BIG_KEY, &big)
            .await
            .map_err(|e| format!("{bucket}/{BIG_KEY}: {e}"))?;
        let tenant = Tenant {
            name: (*name).to_owned(),
            weight: *weight,
            client,
            bucket,
        };
        out.push(Made {
            tenant: Arc::new(tenant),
            access_key: created.access_key,
            secret_key: created.secret_key,
            big,
        });
    }
    Ok(out)
}

type Workers = Vec<tokio::task::JoinHandle<WorkerOut>>;

fn spawn_workers(
    tenants: &[Arc<Tenant>],
    plan: &Arc<Plan>,
    conc: u64,
    p: &Arc<Progress>,
) -> Workers {
    let mut out = Vec::new();
    for (i, t) in tenants.iter().enumerate() {
        for w in 0..conc * 2 {
            let window = if w < conc {
                (plan.t0, plan.end())
            } else {
                plan.overload()
            };
            let fut = tenant::run(t.clone(), i, w, window, plan.clone(), p.clone());
            out.push(tokio::spawn(fut));
        }
    }
    out
}

async fn join_workers(workers: Workers) -> Vec<WorkerOut> {
    let mut outs = Vec::new();
    for w in workers {
        match w.await {
            Ok(o) => outs.push(o),
            Err(e) => println!("# worker task failed: {e}"),
        }
    }
    outs
}

async fn rogue_ctx(s: &Server, made: &[Made], plan: &Plan) -> Result<Arc<RogueCtx>, String> {
    let client = |key: &str, secret: &str| {
        S3Client::new(&s.endpoint, key, secret)
            .map(|c| c.with_timeout(Duration::from_secs(30)))
            .map_err(|e| e.to_string())
    };
    let mut targets = Vec::new();
    for m in made {
        targets.push(Target {
            client: client(&m.access_key, &m.secret_key)?,
            bucket: m.tenant.bucket.clone(),
            big: m.big.clone(),
            forger: client(&m.access_key, "wrong/secret/key/of/forty/characters/00")?,
        });
    }
    let stranger = client(
        "LWSOAKUNKNOWNKEY0001",
        "unknown/secret/key/of/forty/chars/00000",
    )?;
    let addr = raw::resolve(stranger.authority())
        .await
        .map_err(|e| format!("resolve {}: {e}", s.endpoint))?;
    Ok(Arc::new(RogueCtx {
        targets,
        addr,
        stranger,
        stop: plan.end(),
        hold: plan.hold(),
    }))
}

/// A progress line every 1/20 of the run (at least every 5 s).
async fn tick(plan: Arc<Plan>, p: Arc<Progress>, pid: Option<u32>, data: Option<PathBuf>) {
    let step = (plan.total() / 20).max(5);
    let mut at = step;
    while at < plan.total() {
        tokio::time::sleep_until(plan.at(at).into()).await;
        let rss = pid
            .and_then(|pid| crate::rss::read_rss_kib(pid).ok())
            .map_or("?".to_owned(), |k| format!("{:.1}", k as f64 / 1024.0));
        let disk = data.as_deref().map_or(String::new(), |d| {
            format!(", data dir {:.0} MiB", server::du(d) as f64 / 1048576.0)
        });
        println!(
            "# t={at}s phase {}: {} answered, {} 503, {} failures; server RSS {rss} MiB{disk}",
            plan.phase_of(Instant::now()),
            p.done.load(Ordering::Relaxed),
            p.busy.load(Ordering::Relaxed),
            p.failures.load(Ordering::Relaxed)
        );
        at += step;
    }
}

/// Polls the lanes' gauges until idle or [`SETTLE`]; the last reading and
/// the seconds waited.
async fn settle(admin: &AdminClient) -> Option<(LaneGauges, f64)> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < SETTLE {
        if let Ok(g) = admin.lane_gauges().await {
            last = Some((g, start.elapsed().as_secs_f64()));
            if g.idle() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last
}

/// The read-back jobs: every key of every ledger, and each big object.
fn jobs(outs: &[WorkerOut], made: &[Made]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for o in outs {
        for (key, state) in o.ledger.entries() {
            jobs.push(Job {
                tenant: o.tenant,
                key: key.clone(),
                state: state.clone(),
            });
        }
    }
    for (i, m) in made.iter().enumerate() {
        jobs.push(Job {
            tenant: i,
            key: BIG_KEY.to_owned(),
            state: KeyState {
                versions: vec![Version::Object {
                    seed: m.big.seed(),
                    size: m.big.size(),
                }],
                tags: Tags::None,
            },
        });
    }
    jobs
}

type Tallies = (Vec<Vec<Cell>>, BTreeMap<&'static str, Cell>);

/// The workers' cells merged per tenant and phase, and per operation.
fn tallies(outs: &[WorkerOut]) -> Tallies {
    let mut cells = vec![vec![Cell::default(); plan::PHASES.len()]; TENANTS.len()];
    let mut ops: BTreeMap<&'static str, Cell> = BTreeMap::new();
    for o in outs {
        for (p, c) in o.phases.iter().enumerate() {
            cells[o.tenant][p].merge(c);
        }
        for (name, c) in &o.ops {
            ops.entry(name).or_default().merge(c);
        }
    }
    (cells, ops)
}
