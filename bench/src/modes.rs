//! Running each `laneway-bench` mode and printing its method and figures.
//!
//! Every mode prints a `#`-prefixed method block first (what was measured,
//! how, with which parameters), then its figures, so a pasted result always
//! carries the information needed to reproduce it.

use std::time::Duration;

use crate::cli::{
    ConnArgs, FillArgs, FsyncArgs, ListArgs, LoadArgs, MixedArgs, Mode, NullArgs, WorkArgs,
};
use crate::client::S3Client;
use crate::cpu::CpuMeter;
use crate::fill::{self, KeySpace};
use crate::list::{self, ListBench};
use crate::null_server::NullServer;
use crate::report::{self, rate};
use crate::rss::RssSampler;
use crate::workload::{self, Op, Workload, parse_mix};
use crate::{fsync, histogram::Histogram};

pub(crate) const CLIENT_METHOD: &str = "# client: hyper-util legacy client, HTTP/1.1 keep-alive pool, TCP_NODELAY; \
SigV4 header auth (us-east-1, s3, UNSIGNED-PAYLOAD), path-style URLs; \
closed loop (each worker waits for the full answer); latency = request build to last body byte";

/// Runs one mode; `Err` is a message for the user.
pub async fn run(mode: Mode) -> Result<(), String> {
    match mode {
        Mode::Put(a) => timed("put", &a, vec![(Op::Put, 1)], false).await,
        Mode::Get(a) => timed("get", &a, vec![(Op::Get, 1)], true).await,
        Mode::Head(a) => timed("head", &a, vec![(Op::Head, 1)], true).await,
        Mode::Tag(a) => timed("tag", &a, vec![(Op::Tag, 1)], true).await,
        Mode::Mixed(a) => mixed(a).await,
        Mode::List(a) => list_mode(a).await,
        Mode::Fill(a) => fill_mode(a).await,
        Mode::Load(a) => crate::storeload::run(a).await,
        Mode::Null(a) => null_mode(a).await,
        Mode::Fsync(a) => fsync_mode(a).await,
        Mode::Tenants(a) => crate::tenants::run_mode(a).await,
        Mode::Soak(a) => crate::soak::run_mode(a).await,
    }
}

fn machine() -> String {
    crate::machine::describe()
}

fn client_for(conn: &ConnArgs, size: u64) -> Result<S3Client, String> {
    conn.validate()?;
    let client = S3Client::new(&conn.endpoint, &conn.access_key, &conn.secret_key)
        .map_err(|e| e.to_string())?;
    Ok(client.with_timeout(conn.timeout_for(size)))
}

pub(crate) fn workload_of(conn_bucket: &str, w: &WorkArgs, mix: Vec<(Op, u32)>) -> Workload {
    Workload {
        bucket: conn_bucket.to_owned(),
        keys: KeySpace {
            prefix: w.key_prefix.clone(),
            dirs: 0,
            count: w.objects,
        },
        size: w.size,
        concurrency: w.concurrency,
        duration: Duration::from_secs(w.duration),
        warmup: Duration::from_secs(w.warmup),
        max_ops: w.ops,
        mix,
        seed: w.seed,
        server_pid: None,
    }
}

fn print_work(mode: &str, endpoint: &str, bucket: &str, w: &WorkArgs, mix: &[(Op, u32)]) {
    let mix: Vec<String> = mix
        .iter()
        .map(|(op, n)| format!("{}:{n}", op.name()))
        .collect();
    println!("# laneway-bench {mode}");
    println!("{}", machine());
    println!(
        "# endpoint={endpoint} bucket={bucket} size={} concurrency={} duration={}s warmup={}s objects={} ops={} seed={} key_prefix={:?} mix={}",
        w.size,
        w.concurrency,
        w.duration,
        if w.ops.is_some() { 0 } else { w.warmup },
        w.objects,
        w.ops.map_or("unbounded".to_owned(), |n| n.to_string()),
        w.seed,
        w.key_prefix,
        mix.join(",")
    );
    println!("{CLIENT_METHOD}");
}

fn start_rss(pid: Option<u32>) -> Result<Option<RssSampler>, String> {
    pid.map(|p| RssSampler::start(p).map_err(|e| format!("--server-pid {p}: {e}")))
        .transpose()
}

async fn finish_rss(sampler: Option<RssSampler>, pid: Option<u32>) {
    if let (Some(s), Some(pid)) = (sampler, pid) {
        println!("{}", s.finish().await.line(pid));
    }
}

/// PUTs the key space so reads find every key.
pub(crate) async fn prepare(client: &S3Client, bucket: &str, w: &WorkArgs) -> Result<(), String> {
    let keys = KeySpace {
        prefix: w.key_prefix.clone(),
        dirs: 0,
        count: w.objects,
    };
    let size = usize::try_from(w.size).map_err(|_| "--size too large for this machine")?;
    if w.size > 1 << 20 {
        // Big objects: stream each one rather than holding a buffer per key.
        return prepare_streamed(client, bucket, &keys, w).await;
    }
    let r = fill::fill(client, bucket, &keys, size, w.concurrency, None).await;
    println!(
        "# prepare: PUT {} objects of {} bytes in {:.1}s, {} errors",
        r.stats.ok_count(),
        size,
        r.elapsed.as_secs_f64(),
        r.stats.err_count()
    );
    if r.stats.err_count() > 0 {
        return Err(report::summary([("prep", &r.stats)], r.elapsed));
    }
    Ok(())
}

async fn prepare_streamed(
    client: &S3Client,
    bucket: &str,
    keys: &KeySpace,
    w: &WorkArgs,
) -> Result<(), String> {
    let payload = crate::content::pattern(w.seed, 1 << 20);
    for idx in 0..keys.count {
        workload::put_sized(client, bucket, &keys.key(idx), w.size, &payload)
            .await
            .map_err(|e| format!("prepare {}: {e}", keys.key(idx)))?;
    }
    println!(
        "# prepare: PUT {} objects of {} bytes (streamed)",
        keys.count, w.size
    );
    Ok(())
}

async fn timed(
    mode: &str,
    a: &LoadArgs,
    mix: Vec<(Op, u32)>,
    needs_data: bool,
) -> Result<(), String> {
    a.work.validate()?;
    let client = client_for(&a.conn, a.work.size)?;
    print_work(mode, &a.conn.endpoint, &a.conn.bucket, &a.work, &mix);
    client
        .ensure_bucket(&a.conn.bucket)
        .await
        .map_err(|e| format!("create bucket: {e}"))?;
    if needs_data && !a.work.no_prepare {
        prepare(&client, &a.conn.bucket, &a.work).await?;
    }
    let rss = start_rss(a.conn.server_pid)?;
    let mut work = workload_of(&a.conn.bucket, &a.work, mix);
    work.server_pid = a.conn.server_pid;
    let result = workload::run(&client, &work).await;
    print_result(&result);
    finish_rss(rss, a.conn.server_pid).await;
    Ok(())
}

fn print_result(result: &workload::RunResult) {
    let rows = result.ops.iter().map(|(op, s)| (op.name(), s));
    println!("# measured window {:.2}s", result.elapsed.as_secs_f64());
    println!("{}", report::summary(rows, result.elapsed));
    println!("{}", result.cpu);
}

async fn mixed(a: MixedArgs) -> Result<(), String> {
    let mix = parse_mix(&a.mix)?;
    let reads = mix.iter().any(|(op, _)| *op != Op::Put);
    timed("mixed", &a.load, mix, reads).await
}

async fn list_mode(a: ListArgs) -> Result<(), String> {
    let client = client_for(&a.conn, 0)?;
    let lb = ListBench {
        bucket: a.conn.bucket.clone(),
        prefix: a.prefix,
        delimiter: a.delimiter,
        page_size: a.page_size.max(1),
        rounds: a.rounds.max(1),
        first_page_samples: a.first_page_samples,
        tag_filter: a.tag_filter,
    };
    println!("# laneway-bench list");
    println!("{}", machine());
    println!(
        "# endpoint={} bucket={} prefix={:?} delimiter={:?} page_size={} rounds={} first_page_samples={}",
        a.conn.endpoint,
        lb.bucket,
        lb.prefix,
        lb.delimiter,
        lb.page_size,
        lb.rounds,
        lb.first_page_samples
    );
    println!(
        "# method: sequential full walks with continuation tokens (one request in flight); entries/s = (keys + common prefixes) / walk time"
    );
    println!("{CLIENT_METHOD}");
    let rss = start_rss(a.conn.server_pid)?;
    let res = list_rounds(&client, &lb, a.conn.server_pid).await;
    finish_rss(rss, a.conn.server_pid).await;
    res
}

async fn list_rounds(
    client: &S3Client,
    lb: &ListBench,
    server_pid: Option<u32>,
) -> Result<(), String> {
    let mut rates = Vec::new();
    for round in 1..=lb.rounds {
        let meter = CpuMeter::start(server_pid);
        let w = list::walk(client, lb)
            .await
            .map_err(|e| format!("list walk: {e}"))?;
        let entries = w.keys + w.prefixes;
        rates.push(rate(entries, w.elapsed));
        println!(
            "round {round}: {} keys + {} prefixes in {} pages, {:.2}s, {:.0} entries/s; first page {:.2} ms; page p50 {:.2} ms p99 {:.2} ms; order violations {}",
            w.keys,
            w.prefixes,
            w.pages,
            w.elapsed.as_secs_f64(),
            rate(entries, w.elapsed),
            w.first_page.as_secs_f64() * 1e3,
            w.page_latency.quantile(0.5) as f64 / 1e3,
            w.page_latency.quantile(0.99) as f64 / 1e3,
            w.order_violations
        );
        println!("{} (per page)", meter.line(w.pages));
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "walk entries/s: median {:.0}, best {:.0}",
        rates[rates.len() / 2],
        rates[rates.len() - 1]
    );
    if lb.first_page_samples > 0 {
        let h = list::first_pages(client, lb)
            .await
            .map_err(|e| format!("first page: {e}"))?;
        println!(
            "time to first page ({} samples): {}",
            h.count(),
            latency_line(&h)
        );
    }
    Ok(())
}

fn latency_line(h: &Histogram) -> String {
    let ms = |us: u64| us as f64 / 1e3;
    format!(
        "p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        ms(h.quantile(0.5)),
        ms(h.quantile(0.9)),
        ms(h.quantile(0.99)),
        ms(h.max())
    )
}

async fn fill_mode(a: FillArgs) -> Result<(), String> {
    let client = client_for(&a.conn, a.size)?;
    let size = usize::try_from(a.size.min(1 << 30)).map_err(|_| "--size too large")?;
    let keys = KeySpace {
        prefix: a.key_prefix.clone(),
        dirs: a.dirs,
        count: a.objects,
    };
    println!("# laneway-bench fill");
    println!("{}", machine());
    println!(
        "# endpoint={} bucket={} objects={} size={} concurrency={} key_prefix={:?} dirs={}",
        a.conn.endpoint, a.conn.bucket, a.objects, size, a.concurrency, a.key_prefix, a.dirs
    );
    println!("{CLIENT_METHOD}");
    client
        .ensure_bucket(&a.conn.bucket)
        .await
        .map_err(|e| format!("create bucket: {e}"))?;
    let rss = start_rss(a.conn.server_pid)?;
    let meter = CpuMeter::start(a.conn.server_pid);
    let r = fill::fill(
        &client,
        &a.conn.bucket,
        &keys,
        size,
        a.concurrency.clamp(1, 4096),
        Some(Duration::from_secs(10)),
    )
    .await;
    println!("{}", report::summary([("put", &r.stats)], r.elapsed));
    println!("{}", meter.line(r.stats.ok_count()));
    finish_rss(rss, a.conn.server_pid).await;
    Ok(())
}

async fn null_mode(a: NullArgs) -> Result<(), String> {
    a.work.validate()?;
    let op = Op::parse(&a.op).filter(|op| matches!(op, Op::Get | Op::Put | Op::Head));
    let op = op.ok_or("--op must be get, put or head")?;
    let body_len = usize::try_from(a.work.size.min(1 << 30)).map_err(|_| "--size too large")?;
    let server =
        NullServer::start(body_len, a.server_threads).map_err(|e| format!("null server: {e}"))?;
    let endpoint = server.endpoint();
    let client = S3Client::new(
        &endpoint,
        "NULLACCESSKEY",
        "null-secret-key-null-secret-key-0000000",
    )
    .map_err(|e| e.to_string())?;
    print_work("null", &endpoint, "null", &a.work, &[(op, 1)]);
    println!(
        "# server: in-process hyper http1 server on its own {}-thread tokio runtime; GET returns {} fixed bytes, PUT drains the body; no auth, no disk",
        a.server_threads, body_len
    );
    let result = workload::run(&client, &workload_of("null", &a.work, vec![(op, 1)])).await;
    print_result(&result);
    drop(server);
    Ok(())
}

async fn fsync_mode(a: FsyncArgs) -> Result<(), String> {
    let block =
        usize::try_from(a.block_size.clamp(1, 64 << 20)).map_err(|_| "--block-size too large")?;
    let duration = Duration::from_secs(a.duration.clamp(1, crate::cli::MAX_DURATION));
    println!("# laneway-bench fsync");
    println!("{}", machine());
    println!(
        "# dir={} block={} duration={}s; one writer: write(block) appended + fdatasync, repeated",
        a.dir.display(),
        block,
        duration.as_secs()
    );
    let dir = a.dir.clone();
    let r = tokio::task::spawn_blocking(move || fsync::run(&dir, duration, block))
        .await
        .map_err(|e| format!("fsync probe: {e}"))?
        .map_err(|e| format!("fsync probe in {}: {e}", a.dir.display()))?;
    println!(
        "syncs: {} in {:.2}s = {:.0} syncs/s; latency {}",
        r.syncs,
        r.elapsed.as_secs_f64(),
        rate(r.syncs, r.elapsed),
        latency_line(&r.latency)
    );
    Ok(())
}
