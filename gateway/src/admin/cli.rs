//! `laneway admin ...`: the command line client of the admin API.
//!
//! Human-readable output by default (tables; `export` lines with fresh
//! credentials), the API's JSON with `--json`. Sizes accept units:
//! `10GiB`, `512MiB`, `5G` (binary), `10GB` (decimal), plain bytes.
//! `laneway admin tenant update` clears a limit given as `none`.

use super::client::{AdminClient, ClientError, seg};
use clap::{Args, Subcommand};
use http::Method;
use serde_json::{Map, Value, json};
use std::process::ExitCode;

/// Flags shared by every `laneway admin` command.
#[derive(Args)]
pub struct AdminArgs {
    /// Admin API endpoint.
    #[arg(
        long,
        env = "LANEWAY_ADMIN_ENDPOINT",
        default_value = "http://127.0.0.1:9001",
        global = true
    )]
    pub endpoint: String,
    /// Operator token (printed by `laneway serve` on first start and kept
    /// in <data-dir>/tenancy/admin.token).
    #[arg(
        long,
        env = "LANEWAY_ADMIN_TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub token: Option<String>,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub cmd: AdminCmd,
}

/// `laneway admin` subcommands.
#[derive(Subcommand)]
pub enum AdminCmd {
    /// Tenants.
    #[command(subcommand)]
    Tenant(TenantCmd),
    /// Access keys.
    #[command(subcommand)]
    Key(KeyCmd),
    /// Bytes and objects a tenant stores, per bucket.
    Usage {
        /// Tenant id or name.
        tenant: String,
    },
}

/// Limits of `tenant create` / `tenant update` (`none` clears on update).
#[derive(Args, Default)]
pub struct LimitArgs {
    /// QoS weight (1-1000).
    #[arg(long)]
    pub weight: Option<u32>,
    /// Byte quota, e.g. 10GiB.
    #[arg(long)]
    pub quota_bytes: Option<String>,
    /// Object-count quota.
    #[arg(long)]
    pub quota_objects: Option<String>,
    /// Request-rate cap (requests/s).
    #[arg(long)]
    pub max_requests_per_sec: Option<String>,
    /// Byte-rate cap (bytes/s, units allowed).
    #[arg(long)]
    pub max_bytes_per_sec: Option<String>,
}

/// What a new key may do.
#[derive(Args, Default)]
pub struct KeyArgs {
    /// Read-only key (writes are AccessDenied).
    #[arg(long)]
    pub read_only: bool,
    /// Limit the key to these buckets (comma separated).
    #[arg(long, value_delimiter = ',')]
    pub buckets: Option<Vec<String>>,
}

/// `laneway admin tenant ...`
#[derive(Subcommand)]
pub enum TenantCmd {
    /// Create a tenant and its first key (prints its credentials once).
    Create {
        /// Unique name.
        name: String,
        /// Weight, quotas, caps.
        #[command(flatten)]
        limits: LimitArgs,
        /// Rights of the key.
        #[command(flatten)]
        key: KeyArgs,
    },
    /// List tenants.
    List,
    /// Show one tenant.
    Show {
        /// Tenant id or name.
        tenant: String,
    },
    /// Change name, weight, quotas or caps.
    Update {
        /// Tenant id or name.
        tenant: String,
        /// New name.
        #[arg(long)]
        name: Option<String>,
        /// Weight, quotas, caps.
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Refuse every S3 request of the tenant.
    Suspend {
        /// Tenant id or name.
        tenant: String,
    },
    /// Serve the tenant again.
    Resume {
        /// Tenant id or name.
        tenant: String,
    },
    /// Delete a tenant (refused while it owns buckets, unless --purge).
    Delete {
        /// Tenant id or name.
        tenant: String,
        /// Also delete all its buckets and objects.
        #[arg(long)]
        purge: bool,
    },
}

/// `laneway admin key ...`
#[derive(Subcommand)]
pub enum KeyCmd {
    /// Add a key to a tenant (prints its secret once).
    Create {
        /// Tenant id or name.
        tenant: String,
        /// Rights of the key.
        #[command(flatten)]
        key: KeyArgs,
    },
    /// List a tenant's keys (never their secrets).
    List {
        /// Tenant id or name.
        tenant: String,
    },
    /// Revoke a key (stops working within 5 s everywhere).
    Revoke {
        /// Tenant id or name.
        tenant: String,
        /// Access key id.
        access_key: String,
    },
    /// New key with the same rights; the old one works until revoked.
    Rotate {
        /// Tenant id or name.
        tenant: String,
        /// Access key id.
        access_key: String,
    },
}

/// Parse a size: digits with an optional unit (K/M/G/T binary, KB/MB/GB/TB
/// decimal, KiB/MiB/GiB/TiB binary, B).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => return Err(format!("unknown size unit {other:?} in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

fn limit_value(s: &str, clearable: bool) -> Result<Value, String> {
    if clearable && s == "none" {
        return Ok(Value::Null);
    }
    parse_size(s).map(Value::from)
}

fn limits_json(l: &LimitArgs, clearable: bool) -> Result<Map<String, Value>, String> {
    let mut m = Map::new();
    if let Some(w) = l.weight {
        m.insert("weight".into(), w.into());
    }
    let fields = [
        ("quota_bytes", &l.quota_bytes),
        ("quota_objects", &l.quota_objects),
        ("max_requests_per_sec", &l.max_requests_per_sec),
        ("max_bytes_per_sec", &l.max_bytes_per_sec),
    ];
    for (name, v) in fields {
        if let Some(v) = v {
            m.insert(name.into(), limit_value(v, clearable)?);
        }
    }
    Ok(m)
}

fn key_json(k: &KeyArgs, m: &mut Map<String, Value>) {
    let access = if k.read_only {
        "read-only"
    } else {
        "read-write"
    };
    m.insert("access".into(), access.into());
    if let Some(b) = &k.buckets {
        m.insert("buckets".into(), json!(b));
    }
}

/// The request a command makes: method, path, body.
pub fn request(cmd: &AdminCmd) -> Result<(Method, String, Option<Value>), String> {
    let t = |s: &str| format!("/v1/tenants/{}", seg(s));
    Ok(match cmd {
        AdminCmd::Usage { tenant } => (Method::GET, format!("{}/usage", t(tenant)), None),
        AdminCmd::Tenant(c) => match c {
            TenantCmd::Create { name, limits, key } => {
                let mut m = limits_json(limits, false)?;
                m.insert("name".into(), name.clone().into());
                key_json(key, &mut m);
                (Method::POST, "/v1/tenants".into(), Some(Value::Object(m)))
            }
            TenantCmd::List => (Method::GET, "/v1/tenants".into(), None),
            TenantCmd::Show { tenant } => (Method::GET, t(tenant), None),
            TenantCmd::Update {
                tenant,
                name,
                limits,
            } => {
                let mut m = limits_json(limits, true)?;
                if let Some(n) = name {
                    m.insert("name".into(), n.clone().into());
                }
                (Method::PATCH, t(tenant), Some(Value::Object(m)))
            }
            TenantCmd::Suspend { tenant } => (Method::POST, format!("{}/suspend", t(tenant)), None),
            TenantCmd::Resume { tenant } => (Method::POST, format!("{}/resume", t(tenant)), None),
            TenantCmd::Delete { tenant, purge } => {
                let q = if *purge { "?purge=true" } else { "" };
                (Method::DELETE, format!("{}{q}", t(tenant)), None)
            }
        },
        AdminCmd::Key(c) => match c {
            KeyCmd::Create { tenant, key } => {
                let mut m = Map::new();
                key_json(key, &mut m);
                (
                    Method::POST,
                    format!("{}/keys", t(tenant)),
                    Some(Value::Object(m)),
                )
            }
            KeyCmd::List { tenant } => (Method::GET, format!("{}/keys", t(tenant)), None),
            KeyCmd::Revoke { tenant, access_key } => (
                Method::DELETE,
                format!("{}/keys/{}", t(tenant), seg(access_key)),
                None,
            ),
            KeyCmd::Rotate { tenant, access_key } => (
                Method::POST,
                format!("{}/keys/{}/rotate", t(tenant), seg(access_key)),
                None,
            ),
        },
    })
}

/// Run `laneway admin ...`; the process exit code.
pub fn run(args: AdminArgs) -> ExitCode {
    let Some(token) = args.token.clone() else {
        eprintln!(
            "laneway admin: no token; pass --token or set LANEWAY_ADMIN_TOKEN \
             (see <data-dir>/tenancy/admin.token)"
        );
        return ExitCode::from(2);
    };
    let (method, path, body) = match request(&args.cmd) {
        Ok(r) => r,
        Err(msg) => {
            eprintln!("laneway admin: {msg}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("laneway admin: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<Value, ClientError> = runtime.block_on(async {
        let client = AdminClient::new(&args.endpoint, &token)?;
        client
            .call(method, &path, body.as_ref())
            .await
            .map(|(_, v)| v)
    });
    match result {
        Ok(v) if args.json => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(v) => {
            print!("{}", super::cli_output::human(&args.cmd, &v));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("laneway admin: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("10GiB"), Ok(10 << 30));
        assert_eq!(parse_size("5G"), Ok(5 << 30));
        assert_eq!(parse_size("10GB"), Ok(10_000_000_000));
        assert_eq!(parse_size("123"), Ok(123));
        assert!(parse_size("ten").is_err());
        assert!(parse_size("10XB").is_err());
        assert!(parse_size("99999999999TiB").is_err());
    }
}
