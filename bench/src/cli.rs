//! Command-line arguments of the `laneway-bench` binary (clap derive).
//!
//! Shared argument groups are flattened into each mode: [`ConnArgs`] says
//! where to send requests and as whom, [`WorkArgs`] shapes a timed closed
//! loop. Validation happens once, in [`ConnArgs::validate`] and
//! [`WorkArgs::validate`]; the bench refuses non-loopback endpoints so it
//! can never be pointed at someone else's server by mistake.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use http::Uri;

use crate::size::parse_size;

/// laneway's load generator and probes.
#[derive(Debug, Parser)]
#[command(name = "laneway-bench", version, about)]
pub struct Cli {
    /// What to measure.
    #[command(subcommand)]
    pub mode: Mode,
}

/// Benchmark modes.
#[derive(Debug, Subcommand)]
pub enum Mode {
    /// Timed PutObject loop.
    Put(LoadArgs),
    /// Timed GetObject loop (PUTs the key space first unless --no-prepare).
    Get(LoadArgs),
    /// Timed HeadObject loop (PUTs the key space first unless --no-prepare).
    Head(LoadArgs),
    /// Timed PutObjectTagging loop (PUTs the key space first unless --no-prepare).
    Tag(LoadArgs),
    /// Timed loop over a weighted mix of operations.
    Mixed(MixedArgs),
    /// Full ListObjectsV2 walks and time to first page.
    List(ListArgs),
    /// Creates N objects as fast as possible.
    Fill(FillArgs),
    /// Builds a big bucket through the store API in process (no HTTP):
    /// the data dir must not be served meanwhile.
    Load(crate::storeload::StoreLoadArgs),
    /// Same client and workload against an in-process do-nothing server.
    Null(NullArgs),
    /// 4 KiB append + fdatasync loop: durable appends per second.
    Fsync(FsyncArgs),
    /// Several tenants at once, each with its own key, weight, concurrency
    /// and mix; per-tenant throughput, latency and share per phase.
    Tenants(TenantsArgs),
    /// Long mixed run of four tenants beside misbehaving clients, with an
    /// overload phase; checks leaks, memory, errors and read-back at the end.
    Soak(SoakArgs),
}

/// Where to send requests and as whom.
#[derive(Debug, Clone, Args)]
pub struct ConnArgs {
    /// Server endpoint; loopback addresses only.
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    pub endpoint: String,
    /// Access key id.
    #[arg(long, env = "AWS_ACCESS_KEY_ID", hide_env_values = true)]
    pub access_key: String,
    /// Secret access key.
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    pub secret_key: String,
    /// Bucket to use (created if missing, except by `list`).
    #[arg(long, default_value = "bench")]
    pub bucket: String,
    /// Per-request timeout in seconds (raised automatically for big objects).
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Sample this process's VmRSS every 50 ms and print start/peak.
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// Shape of a timed closed loop.
#[derive(Debug, Clone, Args)]
pub struct WorkArgs {
    /// Object size (4KiB, 64MiB, 1GiB, 4096 ...).
    #[arg(long, default_value = "4KiB", value_parser = parse_size)]
    pub size: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Measured seconds (after warm-up).
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Seconds of unmeasured load before measuring.
    #[arg(long, default_value_t = 1)]
    pub warmup: u64,
    /// Key space: keys are drawn uniformly from this many.
    #[arg(long, default_value_t = 1000)]
    pub objects: u64,
    /// Stop after this many requests in total (disables warm-up).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Prefix of every key.
    #[arg(long, default_value = "bench/")]
    pub key_prefix: String,
    /// Seed for key choice and payloads.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip PUTting the key space before get/head/tag/mixed.
    #[arg(long)]
    pub no_prepare: bool,
}

/// Arguments of the server-facing timed modes.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Connection.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Workload.
    #[command(flatten)]
    pub work: WorkArgs,
}

/// Arguments of `mixed`.
#[derive(Debug, Clone, Args)]
pub struct MixedArgs {
    /// Connection and workload.
    #[command(flatten)]
    pub load: LoadArgs,
    /// Weighted operations, `op:weight,...` (put, get, head, tag, list).
    #[arg(long, default_value = "get:70,put:20,head:5,tag:5")]
    pub mix: String,
}

/// Arguments of `list`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Connection.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Only keys under this prefix.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Roll keys up at this delimiter.
    #[arg(long)]
    pub delimiter: Option<String>,
    /// max-keys per page.
    #[arg(long, default_value_t = 1000)]
    pub page_size: u32,
    /// Full walks to time.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// First-page requests to time.
    #[arg(long, default_value_t = 50)]
    pub first_page_samples: u32,
    /// List by tag: only objects with these tags (`k=v&k2`, sent as
    /// `x-laneway-tag-filter`).
    #[arg(long)]
    pub tag_filter: Option<String>,
}

/// Arguments of `fill`.
#[derive(Debug, Clone, Args)]
pub struct FillArgs {
    /// Connection.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Objects to create.
    #[arg(long, default_value_t = 10_000)]
    pub objects: u64,
    /// Size of each object.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub size: u64,
    /// PUTs in flight.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Prefix of every key.
    #[arg(long, default_value = "fill/")]
    pub key_prefix: String,
    /// Spread keys over this many sub-prefixes `d0000/` ... (0 = flat).
    #[arg(long, default_value_t = 0)]
    pub dirs: u64,
}

/// Arguments of `tenants`.
#[derive(Debug, Clone, Args)]
pub struct TenantsArgs {
    /// S3 endpoint; loopback addresses only.
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    pub endpoint: String,
    /// Admin API endpoint (tenants are created there; `/metrics` is read
    /// for the cost each tenant was served); loopback only.
    #[arg(long, default_value = "http://127.0.0.1:9001")]
    pub admin_endpoint: String,
    /// Admin bearer token.
    #[arg(long, env = "LANEWAY_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: String,
    /// One tenant: `name,weight=N,conc=N,rate=R,size=S,mix=op:w+op:w,objects=N,start=S,stop=S,endpoints=URL+URL`
    /// (repeat the flag for each tenant); without `rate` a closed loop of
    /// `conc` workers, with it an open loop offering R requests/s.
    /// `endpoints` deals the tenant's workers over these S3 endpoints in
    /// turn (e.g. two gateways of one cluster; default: --endpoint); its
    /// bucket and keys are made through the first. The cost columns come
    /// from --admin-endpoint's server only.
    #[arg(long = "tenant", required = true)]
    pub tenants: Vec<String>,
    /// Measured seconds (after warm-up).
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Reuse a request's signature for identical requests within this
    /// many seconds (0: sign every request). The server still verifies
    /// every request; this only makes the loader cheaper, so that on a
    /// shared machine the server stays the bottleneck.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=300))]
    pub reuse_signatures_secs: u64,
    /// Also cut the phases at this second (repeatable): to line a run up
    /// with another bench process whose tenants start or stop then.
    #[arg(long = "cut")]
    pub cuts: Vec<u64>,
    /// Seconds of unmeasured load (by tenants starting at 0) first.
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Seed for key choice and payloads.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Per-request timeout in seconds (raised automatically for big objects).
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
}

/// Arguments of `soak` (see `bench/src/soak/mod.rs`).
#[derive(Debug, Clone, Args)]
pub struct SoakArgs {
    /// Seconds of load (normal 40 %, 2x overload 30 %, normal 30 %).
    #[arg(long, default_value_t = 1200, value_parser = clap::value_parser!(u64).range(20..=3600))]
    pub duration: u64,
    /// Seconds of normal load before that, to fill the server's caches
    /// before its RSS baseline (taken at warm-up + duration/20) is read.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub warmup: u64,
    /// Store partitions of the server the soak starts (its default if
    /// unset; each partition has its own index memtable and block cache).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub partitions: Option<u32>,
    /// `laneway` binary to start (ignored with --endpoint).
    #[arg(long, env = "LANEWAY_BIN", default_value = "target/release/laneway")]
    pub bin: PathBuf,
    /// Use this running server instead of starting one; loopback only
    /// (needs --admin-endpoint and --admin-token; --server-pid for RSS/CPU).
    #[arg(long, requires_all = ["admin_endpoint", "admin_token"])]
    pub endpoint: Option<String>,
    /// Admin endpoint of the running server.
    #[arg(long)]
    pub admin_endpoint: Option<String>,
    /// Admin token of the running server.
    #[arg(long, env = "LANEWAY_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Pid of the running server (RSS and CPU checks are skipped without it).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Closed-loop workers per tenant in the normal phases (doubled in the
    /// overload phase).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub concurrency: u64,
    /// Keys each worker owns.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub keys_per_worker: u64,
    /// Slow readers open at any time (half read 4 KiB/s, half read nothing).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=512))]
    pub slow_readers: u64,
    /// Workers of each other misbehaving kind (GET dropped mid-body, PUT
    /// cut mid-body, unauthenticated junk).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=64))]
    pub rogues: u64,
    /// Client-side timeout of a polite request, seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub timeout: u64,
    /// Seed for keys, sizes, operations and contents.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Arguments of `null`.
#[derive(Debug, Clone, Args)]
pub struct NullArgs {
    /// Workload (the server's GET body is --size bytes).
    #[command(flatten)]
    pub work: WorkArgs,
    /// Operation to drive: get, put or head.
    #[arg(long, default_value = "get")]
    pub op: String,
    /// Runtime threads of the in-process server.
    #[arg(long, default_value_t = 2)]
    pub server_threads: usize,
}

/// Arguments of `fsync`.
#[derive(Debug, Clone, Args)]
pub struct FsyncArgs {
    /// Directory for the probe file (use the server's data disk).
    #[arg(long)]
    pub dir: PathBuf,
    /// Seconds to run.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Bytes per append.
    #[arg(long, default_value = "4KiB", value_parser = parse_size)]
    pub block_size: u64,
}

/// Largest object the bench will send or expect.
pub const MAX_SIZE: u64 = 64 << 30;
/// Longest run, seconds.
pub const MAX_DURATION: u64 = 3600;
/// Most requests in flight.
pub const MAX_CONCURRENCY: usize = 4096;

impl ConnArgs {
    /// Rejects endpoints that are not http on a loopback address.
    pub fn validate(&self) -> Result<(), String> {
        check_loopback("--endpoint", &self.endpoint)?;
        if self.bucket.is_empty() {
            return Err("--bucket must not be empty".to_owned());
        }
        Ok(())
    }

    /// The request timeout for objects of `size` bytes: at least the
    /// configured one, and long enough to move `size` at 10 MB/s.
    pub fn timeout_for(&self, size: u64) -> Duration {
        Duration::from_secs(self.timeout.max(size / 10_000_000 + 30))
    }
}

/// Refuses `endpoint` (given as `flag`) unless it is on a loopback address.
pub fn check_loopback(flag: &str, endpoint: &str) -> Result<(), String> {
    let uri: Uri = endpoint.parse().map_err(|e| format!("{flag}: {e}"))?;
    let host = uri.host().ok_or(format!("{flag}: no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(format!(
            "{flag} {endpoint}: only loopback addresses are allowed"
        ));
    }
    Ok(())
}

impl WorkArgs {
    /// Rejects sizes, counts and durations outside sane bounds.
    pub fn validate(&self) -> Result<(), String> {
        if self.size > MAX_SIZE {
            return Err(format!("--size over {MAX_SIZE} bytes"));
        }
        if self.concurrency == 0 || self.concurrency > MAX_CONCURRENCY {
            return Err(format!("--concurrency must be 1..={MAX_CONCURRENCY}"));
        }
        if self.duration == 0 || self.duration + self.warmup > MAX_DURATION {
            return Err(format!(
                "--duration must be 1..={MAX_DURATION} s including warm-up"
            ));
        }
        if self.objects == 0 {
            return Err("--objects must be at least 1".to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_a_get_run() {
        let cli = Cli::try_parse_from([
            "laneway-bench",
            "get",
            "--access-key",
            "a",
            "--secret-key",
            "b",
            "--size",
            "64MiB",
        ])
        .expect("parse");
        let Mode::Get(args) = cli.mode else {
            panic!("not get");
        };
        assert_eq!(args.work.size, 64 << 20);
        assert!(args.conn.validate().is_ok());
        assert!(args.work.validate().is_ok());
    }

    #[test]
    fn refuses_remote_endpoints() {
        let conn = |endpoint: &str| ConnArgs {
            endpoint: endpoint.to_owned(),
            access_key: String::new(),
            secret_key: String::new(),
            bucket: "b".to_owned(),
            timeout: 1,
            server_pid: None,
        };
        assert!(conn("http://10.0.0.1:9000").validate().is_err());
        assert!(conn("http://example.com").validate().is_err());
        assert!(conn("http://[::1]:9000").validate().is_ok());
        assert!(conn("http://localhost:9000").validate().is_ok());
    }
}
