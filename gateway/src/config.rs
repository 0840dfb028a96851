//! Command line and environment configuration of the `laneway` binary.
//!
//! Every flag has an environment variable (shown by `--help`); flags win
//! over the environment, which wins over the documented defaults. Values
//! are checked once, in [`ServeArgs::validate`], which turns them into a
//! [`ServeConfig`] or a message saying what is wrong. The secret key's
//! value is never echoed by `--help`, even when it comes from the
//! environment, and the argument structs do not implement `Debug` (the
//! validated config holds the secret as a redacting [`Secret`]).

use clap::{Args, Parser, Subcommand};
use laneway_qos::{LanesConfig, Mode};
use laneway_store::Engine;
use laneway_tenancy::Secret;
use std::path::PathBuf;
use std::time::Duration;

/// laneway: a multi-tenant, S3-compatible object store.
#[derive(Parser)]
#[command(name = "laneway", version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand)]
// Parsed once at startup: the size of the flag struct does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run everything in one process (gateway and every store partition)
    /// over a local data directory. The first start creates the directory
    /// and prints ready-to-paste credentials.
    Serve(ServeArgs),
    /// Manage tenants and access keys through the admin API of a running
    /// `laneway serve`.
    Admin(crate::admin::cli::AdminArgs),
    /// List by tag and run bulk tagging jobs, as a tenant (signed S3
    /// requests; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).
    Tags(crate::tagcli::TagsArgs),
    /// Write and check cluster files (the store nodes and the partition
    /// map; docs/architecture.md, "Cluster").
    Cluster(crate::cluster::cli::ClusterArgs),
    /// Run a store node of a cluster: the partitions the cluster file's
    /// map gives it, served to gateways over the cluster RPC.
    Store(crate::roles::node::StoreArgs),
    /// Run a stateless gateway of a cluster (S3, admin API, lanes) over its
    /// store nodes; it keeps no data, so any number can run. The S3 and
    /// admin flags are those of `serve`; the storage flags (--data-dir,
    /// --partitions, --engine, --disk-reserve, --index-memory) are the
    /// store nodes' and are not used here.
    Gateway(GatewayArgs),
}

/// Flags of `laneway gateway`.
#[derive(Args)]
pub struct GatewayArgs {
    /// The cluster file (store nodes, partition map; `laneway cluster init`).
    #[arg(long, env = "LANEWAY_CLUSTER")]
    pub cluster: PathBuf,
    /// The S3 and admin flags, as for `serve`.
    #[command(flatten)]
    pub serve: ServeArgs,
}

impl GatewayArgs {
    /// Check the flags; a gateway needs the admin token given (every
    /// gateway of a cluster must accept the same one, so none generates
    /// its own).
    pub fn validate(self) -> Result<ServeConfig, String> {
        let mut cfg = self.serve.validate()?;
        if cfg.admin_token.is_none() {
            return Err(
                "a gateway needs --admin-token or LANEWAY_ADMIN_TOKEN (the same on \
                        every gateway of the cluster)"
                    .into(),
            );
        }
        cfg.cluster = Some(self.cluster);
        Ok(cfg)
    }
}

/// Flags of `laneway serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Data directory (created on first start).
    #[arg(long, env = "LANEWAY_DATA_DIR", default_value = "./laneway-data")]
    pub data_dir: PathBuf,

    /// Address to listen on for S3 requests (port 0 picks a free port; the
    /// bound address is printed as `laneway listening on http://ADDR`, or
    /// `https://ADDR` with --tls-cert).
    #[arg(long, env = "LANEWAY_LISTEN", default_value = "127.0.0.1:9000")]
    pub listen: String,

    /// Region this endpoint answers for (SigV4 scope, bucket location).
    #[arg(long, env = "LANEWAY_REGION", default_value = "us-east-1")]
    pub region: String,

    /// Access key id of the first key; used only when a new data directory
    /// is created (a random one is generated otherwise).
    #[arg(long, env = "LANEWAY_ACCESS_KEY", requires = "secret_key")]
    pub access_key: Option<String>,

    /// Secret of the first key; used only when a new data directory is
    /// created (a random one is generated otherwise).
    #[arg(
        long,
        env = "LANEWAY_SECRET_KEY",
        requires = "access_key",
        hide_env_values = true
    )]
    pub secret_key: Option<String>,

    /// Number of store partitions of a new data directory (a power of two,
    /// 1 to 4096) [default: 16]. An existing directory keeps its own;
    /// asking it for another count is refused.
    #[arg(long, env = "LANEWAY_PARTITIONS")]
    pub partitions: Option<u32>,

    /// Metadata engine of a new data directory [default: fjall]. An
    /// existing directory keeps its own; asking it for another is refused.
    #[arg(long, env = "LANEWAY_ENGINE", value_parser = ["fjall", "sled"])]
    pub engine: Option<String>,

    /// Free disk space kept for deletes and compaction: writes (PUT,
    /// UploadPart, copies, CompleteMultipartUpload, tagging) that would go
    /// below it are refused with 507 InsufficientStorage. `auto` is 5 % of
    /// the data directory's filesystem or 1 GiB, whichever is smaller; also
    /// `N%` (0 to 50), a size like `512M` or `2G` (powers of 1024), or `0`
    /// to turn the check off.
    #[arg(long, env = "LANEWAY_DISK_RESERVE", default_value = "auto")]
    pub disk_reserve: String,

    /// Memory the metadata indexes of all partitions share (block caches
    /// and memtables; each partition gets an equal share, 1 to 16 MiB of
    /// each), e.g. `128M` or `1G`. More memory flushes memtables less
    /// often (cheaper writes) and caches more of the index (cheaper cold
    /// reads).
    #[arg(long, env = "LANEWAY_INDEX_MEMORY", default_value = "128M")]
    pub index_memory: String,

    /// Log filter (tracing EnvFilter syntax, e.g. `info` or
    /// `laneway_gateway=debug`); falls back to RUST_LOG, then `info`.
    #[arg(long = "log", env = "LANEWAY_LOG")]
    pub log: Option<String>,

    /// Seconds to let in-flight requests finish after Ctrl-C / SIGTERM.
    #[arg(long, env = "LANEWAY_SHUTDOWN_GRACE", default_value_t = 30)]
    pub shutdown_grace: u64,

    /// Hours after which an unfinished multipart upload is aborted by the
    /// background task and its parts' space reclaimed (AWS lifecycle rules
    /// usually say 7 days).
    #[arg(long, env = "LANEWAY_UPLOAD_MAX_AGE_HOURS", default_value_t = 168)]
    pub upload_max_age_hours: u64,

    /// Address of the tenant admin API (JSON over HTTP; keep it private)
    /// [default: 127.0.0.1:9001, or 127.0.0.1:0 when --listen asks for
    /// port 0]. Port 0 picks a free port; the bound address is printed as
    /// `laneway admin listening on http://ADDR`.
    #[arg(long, env = "LANEWAY_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,

    /// Bearer token of the admin API. Without it, a token is generated on
    /// first start into <data-dir>/tenancy/admin.token (mode 0600) and
    /// printed once.
    #[arg(long, env = "LANEWAY_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Weighted fair-share admission of every S3 request ("lanes"): `on`
    /// schedules by tenant weight; `off` admits everything at once (rate
    /// caps and metrics still apply). See docs/qos.md.
    #[arg(long, env = "LANEWAY_LANES", default_value = "on", value_parser = ["on", "off"])]
    pub lanes: String,

    /// Cost units (byte-equivalents of backend work) in flight at once,
    /// over all tenants.
    #[arg(long, env = "LANEWAY_LANES_CAPACITY", default_value_t = DEFAULT_LANES_CAPACITY)]
    pub lanes_capacity: u64,

    /// Cost units charged per request on top of its body bytes: what one
    /// request costs the backend, in byte-equivalents.
    #[arg(long, env = "LANEWAY_LANES_BASE_COST", default_value_t = DEFAULT_LANES_BASE_COST)]
    pub lanes_base_cost: u64,

    /// Requests (and body chunks) a tenant may have waiting before new
    /// requests are refused with 503 SlowDown.
    #[arg(long, env = "LANEWAY_LANES_QUEUE", default_value_t = laneway_qos::DEFAULT_MAX_QUEUE_PER_TENANT)]
    pub lanes_queue: usize,

    /// Longest a request waits for admission before 503 SlowDown, in ms.
    #[arg(long, env = "LANEWAY_LANES_MAX_WAIT_MS", default_value_t = 5000)]
    pub lanes_max_wait_ms: u64,

    /// Longest a response's permit (or a paced chunk's grant) is held while
    /// the client has not taken the bytes, in ms: a client that stops
    /// reading holds no shared capacity past it.
    #[arg(long, env = "LANEWAY_LANES_MAX_HOLD_MS", default_value_t = 5)]
    pub lanes_max_hold_ms: u64,

    /// PEM certificate chain (leaf first): serve HTTPS instead of HTTP
    /// (the listening line then says `https://ADDR`). Needs --tls-key.
    #[arg(long, env = "LANEWAY_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, env = "LANEWAY_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Base domain for virtual-hosted-style requests: `Host: BUCKET.NAME`
    /// addresses BUCKET. Path-style requests keep working.
    #[arg(long, env = "LANEWAY_DOMAIN")]
    pub domain: Option<String>,

    /// Seconds a new connection (TLS handshake included), or the next
    /// request header on a kept-alive HTTP/1 connection, has to arrive
    /// complete. A browser form's fields count as header here.
    #[arg(long, env = "LANEWAY_HEADER_TIMEOUT_SECS", default_value_t = 20)]
    pub header_timeout_secs: u64,

    /// Seconds a connection may stay open with no request in flight.
    #[arg(long, env = "LANEWAY_IDLE_TIMEOUT_SECS", default_value_t = 60)]
    pub idle_timeout_secs: u64,

    /// Seconds a request body may go without a byte from the client, or a
    /// response without the client taking a byte, before it is ended.
    #[arg(long, env = "LANEWAY_STALL_TIMEOUT_SECS", default_value_t = 30)]
    pub stall_timeout_secs: u64,

    /// Connections open at once; a new one past it evicts the oldest idle
    /// connection. 0: derived from the open-files limit (see
    /// docs/architecture.md, "Connections").
    #[arg(long, env = "LANEWAY_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,

    /// HTTP/2 streams (requests) at once per connection.
    #[arg(long, env = "LANEWAY_H2_MAX_STREAMS", default_value_t = 100)]
    pub h2_max_streams: u32,

    /// Seconds between HTTP/2 keep-alive pings, and how long the client
    /// has to answer one before the connection is closed.
    #[arg(long, env = "LANEWAY_H2_KEEPALIVE_SECS", default_value_t = 30)]
    pub h2_keepalive_secs: u64,
}

/// Default of `--lanes-capacity`: 256 KiB, two small requests or one body
/// chunk in flight while tenants share, measured on the benchmark machine
/// (see docs/qos.md, "How the defaults were measured").
pub const DEFAULT_LANES_CAPACITY: u64 = 256 * 1024;

/// Default of `--lanes-base-cost`: 96 KiB, what a small request costs the
/// benchmark machine in bytes of streaming (see docs/qos.md).
pub const DEFAULT_LANES_BASE_COST: u64 = 96 * 1024;

/// Validated settings of `laneway serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// `laneway gateway`: the cluster file of the store nodes it serves
    /// (`None`: `laneway serve`, over the local data directory).
    pub cluster: Option<PathBuf>,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Listen address (host:port).
    pub listen: String,
    /// Region.
    pub region: String,
    /// First key (access key id, secret) for a new data directory.
    pub initial_key: Option<(String, Secret)>,
    /// Partitions asked for (None: the directory's own, 16 when new).
    pub partitions: Option<u32>,
    /// Engine asked for (None: the directory's own, fjall when new).
    pub engine: Option<Engine>,
    /// Free disk space kept for deletes and compaction.
    pub disk_reserve: laneway_store::DiskReserve,
    /// Bytes the partition indexes share ([`ServeArgs::index_memory`]).
    pub index_memory: u64,
    /// Log filter, if given.
    pub log: Option<String>,
    /// Grace period of a shutdown.
    pub shutdown_grace: Duration,
    /// Age at which unfinished multipart uploads are aborted.
    pub upload_max_age: Duration,
    /// Admin API listen address.
    pub admin_listen: String,
    /// Admin API token given by the operator.
    pub admin_token: Option<Secret>,
    /// Settings of the lanes.
    pub lanes: LanesConfig,
    /// HTTPS certificate chain and key files (PEM), if TLS is on.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Base domain of virtual-hosted-style requests, if any.
    pub domain: Option<crate::request::vhost::BucketDomain>,
    /// Connection timeouts and limits.
    pub conn: crate::server::conn::ConnConfig,
}

impl ServeArgs {
    /// Check the flags and build the configuration.
    pub fn validate(self) -> Result<ServeConfig, String> {
        let lanes = self.lanes_config()?;
        let conn = self.conn_config()?;
        if let Some(n) = self.partitions
            && (!n.is_power_of_two() || n > 4096)
        {
            return Err(format!(
                "--partitions must be a power of two from 1 to 4096 (got {n})"
            ));
        }
        let region_ok = !self.region.is_empty()
            && self.region.len() <= 32
            && self
                .region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !region_ok {
            return Err(format!(
                "--region must look like us-east-1 (got {:?})",
                self.region
            ));
        }
        let disk_reserve = laneway_store::DiskReserve::parse(&self.disk_reserve)
            .map_err(|e| format!("--disk-reserve: {e}"))?;
        let index_memory = crate::admin::cli::parse_size(&self.index_memory)
            .ok()
            .filter(|n| *n >= 1 << 20)
            .ok_or_else(|| {
                format!(
                    "--index-memory: {:?} is not a size of at least 1 MiB (like 128M or 1G)",
                    self.index_memory
                )
            })?;
        let engine = self
            .engine
            .map(|e| {
                Engine::parse(&e)
                    .ok_or_else(|| format!("--engine must be fjall or sled (got {e:?})"))
            })
            .transpose()?;
        if self.upload_max_age_hours == 0 || self.upload_max_age_hours > 24 * 365 * 10 {
            return Err(format!(
                "--upload-max-age-hours must be from 1 to 87600 (got {})",
                self.upload_max_age_hours
            ));
        }
        if self.listen.trim().is_empty() {
            return Err("--listen must be host:port".into());
        }
        let admin_listen = match self.admin_listen {
            Some(a) if a.trim().is_empty() => return Err("--admin-listen must be host:port".into()),
            Some(a) => a,
            // Tests and scripts that ask for a free S3 port must not
            // collide on a fixed admin port.
            None if self.listen.ends_with(":0") => "127.0.0.1:0".to_string(),
            None => "127.0.0.1:9001".to_string(),
        };
        if let Some(t) = &self.admin_token
            && (t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err("--admin-token must be at least 16 printable characters".into());
        }
        let domain = self
            .domain
            .as_deref()
            .map(crate::request::vhost::BucketDomain::new)
            .transpose()?;
        Ok(ServeConfig {
            cluster: None,
            lanes,
            conn,
            tls: self.tls_cert.zip(self.tls_key),
            domain,
            data_dir: self.data_dir,
            listen: self.listen,
            region: self.region,
            initial_key: self.access_key.zip(self.secret_key.map(Secret::new)),
            partitions: self.partitions,
            engine,
            disk_reserve,
            index_memory,
            log: self.log,
            shutdown_grace: Duration::from_secs(self.shutdown_grace),
            upload_max_age: Duration::from_secs(self.upload_max_age_hours * 3600),
            admin_listen,
            admin_token: self.admin_token.map(Secret::new),
        })
    }

    /// The connection flags as a [`crate::server::conn::ConnConfig`].
    fn conn_config(&self) -> Result<crate::server::conn::ConnConfig, String> {
        let secs = |flag: &str, v: u64| {
            if (1..=3600).contains(&v) {
                Ok(Duration::from_secs(v))
            } else {
                Err(format!("--{flag} must be from 1 to 3600 seconds (got {v})"))
            }
        };
        if !(1..=10_000).contains(&self.h2_max_streams) {
            return Err(format!(
                "--h2-max-streams must be from 1 to 10000 (got {})",
                self.h2_max_streams
            ));
        }
        Ok(crate::server::conn::ConnConfig {
            header_timeout: secs("header-timeout-secs", self.header_timeout_secs)?,
            idle_timeout: secs("idle-timeout-secs", self.idle_timeout_secs)?,
            stall_timeout: secs("stall-timeout-secs", self.stall_timeout_secs)?,
            max_connections: (self.max_connections > 0).then_some(self.max_connections),
            h2_max_streams: self.h2_max_streams,
            h2_keepalive: secs("h2-keepalive-secs", self.h2_keepalive_secs)?,
        })
    }

    /// The lanes flags as a [`LanesConfig`] (qos defaults elsewhere).
    fn lanes_config(&self) -> Result<LanesConfig, String> {
        if self.lanes_capacity == 0 || self.lanes_capacity > 1 << 40 {
            return Err(format!(
                "--lanes-capacity must be from 1 to 1099511627776 units (got {})",
                self.lanes_capacity
            ));
        }
        if self.lanes_base_cost == 0 || self.lanes_base_cost > 1 << 40 {
            return Err(format!(
                "--lanes-base-cost must be from 1 to 1099511627776 units (got {})",
                self.lanes_base_cost
            ));
        }
        if self.lanes_queue == 0 || self.lanes_queue > 1_000_000 {
            return Err(format!(
                "--lanes-queue must be from 1 to 1000000 (got {})",
                self.lanes_queue
            ));
        }
        if self.lanes_max_wait_ms == 0 || self.lanes_max_wait_ms > 600_000 {
            return Err(format!(
                "--lanes-max-wait-ms must be from 1 to 600000 (got {})",
                self.lanes_max_wait_ms
            ));
        }
        if self.lanes_max_hold_ms == 0 || self.lanes_max_hold_ms > 60_000 {
            return Err(format!(
                "--lanes-max-hold-ms must be from 1 to 60000 (got {})",
                self.lanes_max_hold_ms
            ));
        }
        let max_wait = Duration::from_millis(self.lanes_max_wait_ms);
        let defaults = LanesConfig::default();
        Ok(LanesConfig {
            mode: if self.lanes == "off" {
                Mode::Off
            } else {
                Mode::Fair
            },
            capacity_units: self.lanes_capacity,
            base_cost: self.lanes_base_cost,
            max_queue_per_tenant: self.lanes_queue,
            max_wait,
            // A body chunk may wait longer than a new request, never less.
            stream_max_wait: defaults.stream_max_wait.max(max_wait),
            max_hold: Duration::from_millis(self.lanes_max_hold_ms),
            ..defaults
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<ServeConfig, String> {
        let cli = Cli::try_parse_from(args).map_err(|e| e.to_string())?;
        match cli.command {
            Command::Serve(a) => a.validate(),
            Command::Gateway(a) => a.validate(),
            Command::Admin(_) | Command::Cluster(_) | Command::Store(_) | Command::Tags(_) => {
                Err("not serve".into())
            }
        }
    }

    #[test]
    fn a_gateway_needs_its_cluster_file_and_the_admin_token() {
        let no_token = parse(&["laneway", "gateway", "--cluster", "c.toml"]);
        let err = no_token.err().unwrap_or_default();
        assert!(err.contains("--admin-token"), "{err}");
        let ok = parse(&[
            "laneway",
            "gateway",
            "--cluster",
            "c.toml",
            "--admin-token",
            "0123456789abcdef",
        ])
        .expect("valid");
        assert_eq!(ok.cluster, Some(PathBuf::from("c.toml")));
        let serve = parse(&["laneway", "serve"]).expect("valid");
        assert_eq!(serve.cluster, None);
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_and_overrides() {
        let c = parse(&[
            "laneway",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--partitions",
            "4",
        ])
        .expect("ok");
        assert_eq!(c.listen, "127.0.0.1:0");
        assert_eq!(c.admin_listen, "127.0.0.1:0");
        let d = parse(&["laneway", "serve"]).expect("ok");
        assert_eq!(d.admin_listen, "127.0.0.1:9001");
        assert_eq!(c.partitions, Some(4));
        assert_eq!(c.engine, None);
        let c = parse(&["laneway", "serve", "--engine", "sled"]).expect("ok");
        assert_eq!(c.engine, Some(Engine::Sled));
        assert_eq!(c.upload_max_age, Duration::from_secs(168 * 3600));
        let c = parse(&["laneway", "serve", "--upload-max-age-hours", "2"]).expect("ok");
        assert_eq!(c.upload_max_age, Duration::from_secs(2 * 3600));
        assert!(c.initial_key.is_none());
        let c = parse(&[
            "laneway",
            "serve",
            "--access-key",
            "AKIAX1",
            "--secret-key",
            "s3cr3t-value",
        ])
        .expect("ok");
        assert!(!format!("{c:?}").contains("s3cr3t-value"));
    }

    #[test]
    fn lanes_flags() {
        let d = parse(&["laneway", "serve"]).expect("ok");
        assert_eq!(d.lanes.mode, Mode::Fair);
        assert_eq!(d.lanes.capacity_units, DEFAULT_LANES_CAPACITY);
        assert_eq!(d.lanes.max_wait, Duration::from_secs(5));
        let c = parse(&[
            "laneway",
            "serve",
            "--lanes",
            "off",
            "--lanes-capacity",
            "1",
            "--lanes-queue",
            "2",
            "--lanes-max-wait-ms",
            "50",
            "--lanes-base-cost",
            "7",
        ])
        .expect("ok");
        assert_eq!(c.lanes.base_cost, 7);
        assert_eq!(d.lanes.base_cost, DEFAULT_LANES_BASE_COST);
        assert_eq!(c.lanes.mode, Mode::Off);
        assert_eq!(c.lanes.capacity_units, 1);
        assert_eq!(c.lanes.max_queue_per_tenant, 2);
        assert_eq!(c.lanes.max_wait, Duration::from_millis(50));
        assert!(parse(&["laneway", "serve", "--lanes", "maybe"]).is_err());
        assert!(parse(&["laneway", "serve", "--lanes-capacity", "0"]).is_err());
        assert!(parse(&["laneway", "serve", "--lanes-queue", "0"]).is_err());
        assert!(parse(&["laneway", "serve", "--lanes-base-cost", "0"]).is_err());
        assert!(parse(&["laneway", "serve", "--lanes-max-wait-ms", "0"]).is_err());
    }

    #[test]
    fn nonsense_is_refused() {
        assert!(parse(&["laneway", "serve", "--partitions", "3"]).is_err());
        assert!(parse(&["laneway", "serve", "--region", "US East"]).is_err());
        assert!(parse(&["laneway", "serve", "--engine", "rocks"]).is_err());
        assert!(parse(&["laneway", "serve", "--upload-max-age-hours", "0"]).is_err());
        assert!(parse(&["laneway", "serve", "--access-key", "AKIAX"]).is_err());
        assert!(parse(&["laneway", "serve", "--tls-cert", "c.pem"]).is_err());
        assert!(parse(&["laneway", "serve", "--domain", "s3.example.com:9000"]).is_err());
    }

    #[test]
    fn connection_flags() {
        let d = parse(&["laneway", "serve"]).expect("ok");
        assert_eq!(d.conn.header_timeout, Duration::from_secs(20));
        assert_eq!(d.conn.idle_timeout, Duration::from_secs(60));
        assert_eq!(d.conn.stall_timeout, Duration::from_secs(30));
        assert_eq!(d.conn.max_connections, None);
        let c = parse(&[
            "laneway",
            "serve",
            "--header-timeout-secs",
            "1",
            "--max-connections",
            "50",
            "--h2-max-streams",
            "8",
        ])
        .expect("ok");
        assert_eq!(c.conn.header_timeout, Duration::from_secs(1));
        assert_eq!(c.conn.max_connections, Some(50));
        assert_eq!(c.conn.h2_max_streams, 8);
        assert!(parse(&["laneway", "serve", "--idle-timeout-secs", "0"]).is_err());
        assert!(parse(&["laneway", "serve", "--stall-timeout-secs", "99999"]).is_err());
        assert!(parse(&["laneway", "serve", "--h2-max-streams", "0"]).is_err());
    }

    #[test]
    fn disk_reserve_flag() {
        use laneway_store::DiskReserve;
        let d = parse(&["laneway", "serve"]).expect("ok");
        assert_eq!(d.disk_reserve, DiskReserve::Auto);
        assert_eq!(d.index_memory, 128 << 20);
        let c = parse(&["laneway", "serve", "--index-memory", "1G"]).expect("ok");
        assert_eq!(c.index_memory, 1 << 30);
        assert!(parse(&["laneway", "serve", "--index-memory", "12"]).is_err());
        assert!(parse(&["laneway", "serve", "--index-memory", "lots"]).is_err());
        let c = parse(&["laneway", "serve", "--disk-reserve", "8M"]).expect("ok");
        assert_eq!(c.disk_reserve, DiskReserve::Bytes(8 << 20));
        let c = parse(&["laneway", "serve", "--disk-reserve", "2%"]).expect("ok");
        assert_eq!(c.disk_reserve, DiskReserve::Percent(2));
        assert!(parse(&["laneway", "serve", "--disk-reserve", "lots"]).is_err());
        assert!(parse(&["laneway", "serve", "--disk-reserve", "90%"]).is_err());
    }

    #[test]
    fn tls_and_domain_flags() {
        let d = parse(&["laneway", "serve"]).expect("ok");
        assert!(d.tls.is_none() && d.domain.is_none());
        let c = parse(&[
            "laneway",
            "serve",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--domain",
            "s3.example.com",
        ])
        .expect("ok");
        assert_eq!(
            c.tls,
            Some((PathBuf::from("c.pem"), PathBuf::from("k.pem")))
        );
        let domain = c.domain.expect("domain");
        assert_eq!(domain.bucket_of("b.s3.example.com:1"), Some("b"));
    }
}
