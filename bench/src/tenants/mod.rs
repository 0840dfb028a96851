//! `laneway-bench tenants`: several tenants at once, each with its own
//! credentials, weight, concurrency and operation mix, to measure lanes
//! (weighted fair sharing) from the outside.
//!
//! The mode provisions one fresh tenant per `--tenant` through the admin
//! API (named `<run id>-<name>`, with the spec's weight), creates its
//! bucket and PUTs its key space, then runs every tenant's loop (closed,
//! or open with `rate`) over its own window and prints one table per
//! phase (see [`report`]). The secrets it gets back are used for signing
//! only and never printed.
//!
//! - [`spec`]: the `--tenant` syntax and phases;
//! - [`run`]: the workers and the cost scraper;
//! - [`report`]: the tables.

pub mod report;
pub mod run;
pub mod spec;

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::admin::AdminClient;
use crate::cli::{TenantsArgs, WorkArgs, check_loopback};
use crate::client::S3Client;
use crate::fill::KeySpace;
use crate::modes::{CLIENT_METHOD, prepare};
use crate::workload::Workload;
use run::{Clock, Lane};
use spec::{TenantSpec, phases};

const BUCKET: &str = "bench";
const KEY_PREFIX: &str = "bench/";

/// Runs the `tenants` mode.
pub async fn run_mode(a: TenantsArgs) -> Result<(), String> {
    check_loopback("--endpoint", &a.endpoint)?;
    check_loopback("--admin-endpoint", &a.admin_endpoint)?;
    if a.duration == 0 || a.duration + a.warmup > crate::cli::MAX_DURATION {
        return Err("--duration must be 1..=3600 s including warm-up".to_owned());
    }
    let specs = a
        .tenants
        .iter()
        .map(|s| TenantSpec::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let admin = AdminClient::new(&a.admin_endpoint, &a.admin_token)?;
    let clock = Clock {
        duration: a.duration,
        warmup: Duration::from_secs(a.warmup),
        phases: phases(&specs, &a.cuts, a.duration),
    };
    print_method(&a, &specs, &clock);
    let run_id = run_id();
    let mut lanes = Vec::with_capacity(specs.len());
    for spec in &specs {
        lanes.push(provision(&a, &admin, &run_id, spec).await?);
    }
    let outcome = run::run(lanes, &clock, &admin).await;
    print!(
        "{}",
        report::render(&specs, &clock.phases, a.duration, &outcome)
    );
    Ok(())
}

/// A short id that keeps tenant names of successive runs apart.
fn run_id() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("b{}", secs % 1_000_000)
}

fn print_method(a: &TenantsArgs, specs: &[TenantSpec], clock: &Clock) {
    println!("# laneway-bench tenants");
    println!("{}", crate::machine::describe());
    println!(
        "# endpoint={} admin={} duration={}s warmup={}s seed={} reuse-signatures={}s",
        a.endpoint, a.admin_endpoint, a.duration, a.warmup, a.seed, a.reuse_signatures_secs
    );
    for s in specs {
        let (start, stop) = s.window(a.duration);
        println!(
            "# tenant {}: weight={} conc={} rate={} size={} mix={} objects={} window={start}-{stop}s endpoints={}",
            s.name,
            s.weight,
            s.concurrency,
            s.rate
                .map_or("closed-loop".to_owned(), |r| format!("{r}/s")),
            s.size,
            s.mix_text(),
            s.objects,
            if s.endpoints.is_empty() {
                a.endpoint.clone()
            } else {
                s.endpoints.join("+")
            }
        );
    }
    let cuts: Vec<String> = clock
        .phases
        .iter()
        .map(|(f, t)| format!("{f}-{t}"))
        .collect();
    println!("# phases (s): {}", cuts.join(", "));
    println!(
        "# method: a fresh tenant per --tenant (admin API), own bucket and keys; closed loop per tenant (open loop with rate=, latency from the due time); \
a request counts in the phase it completes in; cost = the server's laneway_cost_units_total per tenant, read at each phase boundary"
    );
    println!("{CLIENT_METHOD}");
}

/// Creates the tenant, its bucket and (if it reads) its objects.
async fn provision(
    a: &TenantsArgs,
    admin: &AdminClient,
    run_id: &str,
    spec: &TenantSpec,
) -> Result<Lane, String> {
    let name = format!("{run_id}-{}", spec.name);
    let created = admin.create_tenant(&name, spec.weight).await?;
    let endpoints = if spec.endpoints.is_empty() {
        std::slice::from_ref(&a.endpoint)
    } else {
        &spec.endpoints[..]
    };
    let mut clients = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        let mut client = S3Client::new(endpoint, &created.access_key, &created.secret_key)
            .map_err(|e| e.to_string())?
            .with_timeout(Duration::from_secs(
                a.timeout.max(spec.size / 10_000_000 + 30),
            ));
        if a.reuse_signatures_secs > 0 {
            client = client.reusing_signatures(Duration::from_secs(a.reuse_signatures_secs));
        }
        clients.push(client);
    }
    // The bucket and the key space go in through the first endpoint;
    // the others see them through the shared store once they know the
    // new key (a cluster's gateways learn one within 5 s).
    for client in &clients {
        ensure_bucket_when_known(client, &name).await?;
    }
    let client = &clients[0];
    let work = workload(spec, a.seed);
    if spec.reads() {
        prepare(client, BUCKET, &work_args(spec, a.seed)).await?;
    }
    Ok(Lane {
        spec: spec.clone(),
        id: created.id,
        clients,
        work,
        issued: AtomicU64::new(0),
    })
}

/// Creates (or finds) the tenant's bucket through `client`, retrying for
/// up to 10 s while the endpoint does not know the new key yet.
async fn ensure_bucket_when_known(client: &S3Client, name: &str) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match client.ensure_bucket(BUCKET).await {
            Ok(()) => return Ok(()),
            Err(e)
                if e.code() == Some("InvalidAccessKeyId")
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(format!("{name}: create bucket: {e}")),
        }
    }
}

fn workload(spec: &TenantSpec, seed: u64) -> Workload {
    Workload {
        bucket: BUCKET.to_owned(),
        keys: KeySpace {
            prefix: KEY_PREFIX.to_owned(),
            dirs: 0,
            count: spec.objects,
        },
        size: spec.size,
        concurrency: spec.concurrency,
        duration: Duration::ZERO,
        warmup: Duration::ZERO,
        max_ops: None,
        mix: spec.mix.clone(),
        seed,
        server_pid: None,
    }
}

/// The arguments `prepare` needs to PUT the tenant's key space.
fn work_args(spec: &TenantSpec, seed: u64) -> WorkArgs {
    WorkArgs {
        size: spec.size,
        concurrency: spec.concurrency.min(16),
        duration: 1,
        warmup: 0,
        objects: spec.objects,
        ops: None,
        key_prefix: KEY_PREFIX.to_owned(),
        seed,
        no_prepare: false,
    }
}
