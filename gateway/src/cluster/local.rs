//! `laneway cluster local`: a whole cluster as child processes of one
//! supervisor on this machine, for development and demos (think `tiup
//! playground`).
//!
//! Layout, from `--base-port P` with G gateways and N store nodes: gateway
//! `i` serves S3 on `P+i-1` and its admin API on `P+G+i-1`; store node `j`
//! listens for the cluster RPC on `P+2G+j-1`, all at `--host`. The data
//! directory `D` holds `cluster.toml` and its secret (written on the first
//! start, reused and checked against the flags later: nodes, addresses,
//! partition count, replicas), each store node's
//! data in `store-j/`, the generated admin token in `admin.token` (mode
//! 0600) and every child's stdout and stderr in `logs/NAME.log` (appended
//! to, one header line per start).
//!
//! Start-up: the store nodes start together and each must print its
//! listening line within `--ready-timeout-secs`; then gateway 1, which
//! creates the tenant registry of a new cluster and prints its first key;
//! then the other gateways together. A child that exits or misses the
//! deadline ends the start: the children already running are stopped and
//! the error shows the tail of its log. Then a summary (every child with
//! its pid, address and log, the `export` lines for the aws CLI) and the
//! last stdout line, `laneway cluster local ready`.
//!
//! Running: a child that exits on its own is reported on stderr and the
//! others keep running. SIGINT (Ctrl-C) or SIGTERM stops the gateways,
//! then the store nodes: SIGTERM, then SIGKILL after `--stop-grace-secs`.
//! Children run in process groups of their own, so a terminal's Ctrl-C
//! reaches only the supervisor, which stops them in that order. Exit
//! status: 0 when every child ran until asked to stop and then stopped on
//! SIGTERM; 1 otherwise (or when the start failed); 2 for bad flags.

use clap::Args;
use laneway_store::cluster::file::REPLICA_CHOICES;
use laneway_store::cluster::{ClusterFile, InitSpec, init_cluster};
use rustix::process::{Pid, Signal, kill_process};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The last stdout line once every child is ready.
pub const READY_LINE: &str = "laneway cluster local ready";
/// Partitions of a new cluster when `--partitions` is not given.
const DEFAULT_PARTITIONS: u32 = 16;
/// How often children are checked for readiness and exits.
const POLL: Duration = Duration::from_millis(50);
/// Lines of a failed child's log shown in the error.
const TAIL_LINES: usize = 25;
/// Prefix of a store node's listening line (`... ID listening on rpc://ADDR`).
const STORE_READY: &str = "laneway store node ";
/// A gateway's S3 listening line, the last of its banner.
const GATEWAY_READY: &str = "laneway listening on http://";
/// A gateway's admin listening line.
const ADMIN_READY: &str = "laneway admin listening on http://";

/// Flags of `laneway cluster local`.
#[derive(Args, Debug)]
pub struct LocalArgs {
    /// Store nodes to run (store-1 .. store-N).
    #[arg(long, default_value_t = 3)]
    pub store_nodes: u16,
    /// Gateways to run (gateway-1 .. gateway-N).
    #[arg(long, default_value_t = 2)]
    pub gateways: u16,
    /// Directory of the cluster file, the store nodes' data and the logs
    /// (created on first start).
    #[arg(long, default_value = "./laneway-cluster")]
    pub data_dir: PathBuf,
    /// First port: the gateways' S3 ports from here, then their admin
    /// ports, then the store nodes' RPC ports.
    #[arg(long, default_value_t = 9000)]
    pub base_port: u16,
    /// Partitions of a new cluster (a power of two; default 16). An
    /// existing cluster keeps its count.
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Replicas of every partition and of the catalog: 1, or 3 (needs at
    /// least 3 store nodes). Fixed for the cluster's life: a reused
    /// cluster file must have been made with the same value.
    #[arg(long, env = "LANEWAY_REPLICAS", default_value_t = 1)]
    pub replicas: u32,
    /// Address every child listens on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Region of the gateways (SigV4 scope, bucket location).
    #[arg(long, env = "LANEWAY_REGION", default_value = "us-east-1")]
    pub region: String,
    /// Bearer token of every gateway's admin API (default: generated once,
    /// kept in DATA_DIR/admin.token).
    #[arg(long, env = "LANEWAY_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// The store nodes' --index-memory.
    #[arg(long)]
    pub index_memory: Option<String>,
    /// The store nodes' --disk-reserve.
    #[arg(long)]
    pub disk_reserve: Option<String>,
    /// Each child must print its listening line within this.
    #[arg(long, default_value_t = 60)]
    pub ready_timeout_secs: u64,
    /// A child gets this long to stop after SIGTERM before SIGKILL.
    #[arg(long, default_value_t = 15)]
    pub stop_grace_secs: u64,
}

/// Ports of one gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GatewayPorts {
    s3: u16,
    admin: u16,
}

/// Where every child listens.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Layout {
    gateways: Vec<GatewayPorts>,
    /// (node id, rpc host:port) of each store node.
    stores: Vec<(String, String)>,
}

/// The ports of `args`: gateways, then their admin listeners, then stores.
fn layout(args: &LocalArgs) -> Result<Layout, String> {
    let (g, n) = (u32::from(args.gateways), u32::from(args.store_nodes));
    if g == 0 || n == 0 {
        return Err("--gateways and --store-nodes must be at least 1".into());
    }
    if !REPLICA_CHOICES.contains(&args.replicas) {
        return Err(format!(
            "--replicas {} is not supported: pass 1 (no replication) or 3",
            args.replicas
        ));
    }
    if args.replicas > n {
        return Err(format!(
            "--replicas {} needs at least {} store nodes, --store-nodes is {n}",
            args.replicas, args.replicas
        ));
    }
    if args.base_port == 0 {
        return Err("--base-port must be a fixed port (the cluster file names them)".into());
    }
    let port = |offset: u32| {
        u16::try_from(u32::from(args.base_port) + offset).map_err(|_| {
            format!(
                "--base-port {} with {g} gateways and {n} store nodes needs ports past 65535",
                args.base_port
            )
        })
    };
    let gateways = (0..g)
        .map(|i| {
            Ok(GatewayPorts {
                s3: port(i)?,
                admin: port(g + i)?,
            })
        })
        .collect::<Result<_, String>>()?;
    let stores = (0..n)
        .map(|j| {
            Ok((
                format!("store-{}", j + 1),
                format!("{}:{}", args.host, port(2 * g + j)?),
            ))
        })
        .collect::<Result<_, String>>()?;
    Ok(Layout { gateways, stores })
}

/// `D/cluster.toml`: written for `layout` when missing, else loaded and
/// checked against it (same nodes at the same addresses, the same
/// replicas, and the same partition count when `--partitions` is given).
fn settle_cluster(
    path: &Path,
    layout: &Layout,
    partitions: Option<u32>,
    replicas: u32,
) -> Result<ClusterFile, String> {
    if !path.exists() {
        let spec = InitSpec {
            path: path.to_path_buf(),
            nodes: layout.stores.clone(),
            partitions: partitions.unwrap_or(DEFAULT_PARTITIONS),
            replicas,
        };
        return init_cluster(&spec).map_err(|e| e.to_string());
    }
    let file = ClusterFile::load(path).map_err(|e| e.to_string())?;
    check_reuse(&file, layout, partitions, replicas)?;
    Ok(file)
}

/// Why an existing cluster file does not fit the flags, if it does not.
fn check_reuse(
    file: &ClusterFile,
    layout: &Layout,
    partitions: Option<u32>,
    replicas: u32,
) -> Result<(), String> {
    let shown = file.path.display();
    let have: Vec<(String, String)> = file
        .nodes
        .iter()
        .map(|n| (n.id.as_str().to_string(), n.rpc.clone()))
        .collect();
    if have.len() != layout.stores.len() {
        return Err(format!(
            "{shown} has {} store nodes, --store-nodes is {}: pass --store-nodes {} or use another --data-dir",
            have.len(),
            layout.stores.len(),
            have.len()
        ));
    }
    if let Some(((id, had), (_, want))) = have.iter().zip(&layout.stores).find(|(h, w)| h != w) {
        return Err(format!(
            "{shown} puts {id} at {had}, these flags put it at {want}: pass the --base-port, \
             --gateways and --host it was made with, or use another --data-dir"
        ));
    }
    // The map places every partition on `replicas` nodes when the file is
    // made; changing it later would need a membership change, not a flag.
    if file.replicas != replicas {
        return Err(format!(
            "{shown} has {} replicas (fixed for the cluster's life), --replicas is {replicas}: \
             pass --replicas {} or use another --data-dir",
            file.replicas, file.replicas
        ));
    }
    let count = file.map.partition_count();
    match partitions {
        Some(p) if p != count => Err(format!(
            "{shown} has {count} partitions (fixed for the cluster's life), --partitions is {p}"
        )),
        _ => Ok(()),
    }
}

/// Where the admin token came from.
#[derive(Debug, PartialEq, Eq)]
enum TokenSource {
    /// `--admin-token` / `LANEWAY_ADMIN_TOKEN`.
    Given,
    /// Read from this file, made by an earlier start.
    Kept(PathBuf),
    /// Generated now into this file.
    New(PathBuf),
}

/// The admin token: the given one, else `D/admin.token`, generated (mode
/// 0600) on first use.
fn settle_token(given: Option<&str>, dir: &Path) -> Result<(String, TokenSource), String> {
    if let Some(t) = given.filter(|t| !t.is_empty()) {
        return Ok((t.to_string(), TokenSource::Given));
    }
    let path = dir.join("admin.token");
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => {
            Ok((text.trim().to_string(), TokenSource::Kept(path)))
        }
        Ok(_) => Err(format!(
            "{} is empty: remove it to get a new token",
            path.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let rng = ring::rand::SystemRandom::new();
            let token = laneway_tenancy::keygen::new_secret_key(&rng).map_err(|e| e.to_string())?;
            laneway_tenancy::persist::write_private_file(&path, token.as_bytes())
                .map_err(|e| e.to_string())?;
            Ok((token, TokenSource::New(path)))
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// How to start one child.
#[derive(Clone, Debug)]
struct ChildSpec {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    /// The line that says it is ready starts with this.
    ready: String,
}

/// A started child, its log, and how it ended (once it has).
struct Child {
    spec: ChildSpec,
    proc: std::process::Child,
    /// Where this start's output begins in the (appended) log.
    log_start: u64,
    exit: Option<ExitStatus>,
    /// It ended before it was asked to stop.
    died: bool,
}

impl Child {
    /// Start `spec` with stdin closed and stdout and stderr appended to
    /// its log, in a process group of its own.
    fn spawn(spec: ChildSpec) -> Result<Child, String> {
        let shown = spec.log.display().to_string();
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(|e| format!("cannot open {shown}: {e}"))?;
        writeln!(
            log,
            "--- laneway cluster local: {} {}",
            spec.program.display(),
            spec.args.join(" ")
        )
        .map_err(|e| format!("cannot write {shown}: {e}"))?;
        let log_start = log.stream_position().map_err(|e| format!("{shown}: {e}"))?;
        let err = log.try_clone().map_err(|e| format!("{shown}: {e}"))?;
        let proc = Command::new(&spec.program)
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {} ({}): {e}",
                    spec.name,
                    spec.program.display()
                )
            })?;
        Ok(Child {
            spec,
            proc,
            log_start,
            exit: None,
            died: false,
        })
    }

    fn pid(&self) -> u32 {
        self.proc.id()
    }

    /// What it wrote since it started (lossy UTF-8).
    fn output(&self) -> String {
        let mut text = Vec::new();
        let read = File::open(&self.spec.log).and_then(|mut f| {
            f.seek(SeekFrom::Start(self.log_start))?;
            f.read_to_end(&mut text)
        });
        match read {
            Ok(_) => String::from_utf8_lossy(&text).into_owned(),
            Err(e) => format!("<cannot read {}: {e}>", self.spec.log.display()),
        }
    }

    /// The rest of the first complete line starting with `prefix`.
    fn line_after(&self, prefix: &str) -> Option<String> {
        let out = self.output();
        let complete = &out[..out.rfind('\n')?];
        complete
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|rest| rest.trim().to_string())
    }

    /// Its exit status, once it has exited (reaped here).
    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.proc.try_wait().ok().flatten();
        }
        self.exit
    }

    fn signal(&self, sig: Signal) {
        let pid = i32::try_from(self.pid()).ok().and_then(Pid::from_raw);
        if let Some(pid) = pid {
            // It may have exited since it was polled: nothing to do then.
            let _ = kill_process(pid, sig);
        }
    }

    /// The last lines of its output, for an error.
    fn tail(&self) -> String {
        let out = self.output();
        let lines: Vec<&str> = out.lines().collect();
        lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
    }

    fn failure(&self, what: &str) -> String {
        format!(
            "{} (pid {}) {what}; last lines of {}:\n{}",
            self.spec.name,
            self.pid(),
            self.spec.log.display(),
            self.tail()
        )
    }
}

/// Why waiting ended early: the child's failure, or a stop request.
#[derive(Debug, PartialEq, Eq)]
enum Interrupted {
    Failed(String),
    Stop(&'static str),
}

/// Wait until `child` prints its ready line (returns the rest of it),
/// exits, passes `deadline`, or a stop is requested.
async fn wait_ready(
    child: &mut Child,
    deadline: Instant,
    stop: &mut watch::Receiver<Option<&'static str>>,
) -> Result<String, Interrupted> {
    loop {
        if let Some(rest) = child.line_after(&child.spec.ready) {
            return Ok(rest);
        }
        if let Some(status) = child.poll_exit() {
            return Err(Interrupted::Failed(
                child.failure(&format!("exited ({status}) before it was ready")),
            ));
        }
        if Instant::now() >= deadline {
            return Err(Interrupted::Failed(
                child.failure("did not print its listening line in time"),
            ));
        }
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(POLL) => {}
        }
        if let Some(name) = *stop.borrow() {
            return Err(Interrupted::Stop(name));
        }
    }
}

/// SIGTERM every child still running, then SIGKILL those still running
/// after `grace`. True when each stopped by itself with a success status.
fn stop_group(children: &mut [Child], grace: Duration) -> bool {
    let running: Vec<usize> = (0..children.len())
        .filter(|&i| children[i].poll_exit().is_none())
        .collect();
    for &i in &running {
        children[i].signal(Signal::TERM);
    }
    let deadline = Instant::now() + grace;
    while running.iter().any(|&i| children[i].poll_exit().is_none()) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    let mut clean = true;
    for &i in &running {
        let c = &mut children[i];
        let status = match c.poll_exit() {
            Some(s) => s,
            None => {
                eprintln!(
                    "laneway cluster local: {} did not stop within {grace:?} of SIGTERM; killing it",
                    c.spec.name
                );
                let _ = c.proc.kill();
                let status = c.proc.wait().ok();
                c.exit = status;
                clean = false;
                continue;
            }
        };
        clean &= status.success();
        println!("laneway cluster local: stopped {} ({status})", c.spec.name);
    }
    clean
}

/// Report children that exit on their own until a stop is requested
/// (returns its name) or every child has exited (returns None).
async fn supervise(
    children: &mut [Child],
    stop: &mut watch::Receiver<Option<&'static str>>,
) -> Option<&'static str> {
    loop {
        if let Some(name) = *stop.borrow() {
            return Some(name);
        }
        for c in children.iter_mut().filter(|c| c.exit.is_none()) {
            if let Some(status) = c.poll_exit() {
                c.died = true;
                eprintln!(
                    "laneway cluster local: {} (pid {}) exited on its own ({status}); the others keep running; its log: {}",
                    c.spec.name,
                    c.pid(),
                    c.spec.log.display()
                );
            }
        }
        if children.iter().all(|c| c.exit.is_some()) {
            eprintln!("laneway cluster local: every child has exited");
            return None;
        }
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(POLL * 4) => {}
        }
    }
}

/// A channel set to the signal's name on the first SIGINT or SIGTERM.
fn stop_signals() -> std::io::Result<watch::Receiver<Option<&'static str>>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        let _ = tx.send(Some(name));
        // Keep the handlers (a second signal must not kill the supervisor
        // while it stops the children).
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
    });
    Ok(rx)
}

/// Everything the children share.
struct Plan {
    program: PathBuf,
    dir: PathBuf,
    cluster: PathBuf,
    layout: Layout,
    token: String,
    args: LocalArgs,
}

impl Plan {
    fn log(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    fn store(&self, id: &str, addr: &str) -> ChildSpec {
        let mut args: Vec<String> = vec![
            "store".into(),
            "--data-dir".into(),
            self.dir.join(id).display().to_string(),
            "--listen".into(),
            addr.into(),
            "--cluster".into(),
            self.cluster.display().to_string(),
            "--node".into(),
            id.into(),
        ];
        for (flag, value) in [
            ("--index-memory", &self.args.index_memory),
            ("--disk-reserve", &self.args.disk_reserve),
        ] {
            if let Some(v) = value {
                args.extend([flag.to_string(), v.clone()]);
            }
        }
        self.spec(
            id,
            args,
            Vec::new(),
            format!("{STORE_READY}{id} listening on rpc://"),
        )
    }

    fn gateway(&self, i: usize) -> ChildSpec {
        let ports = self.layout.gateways[i];
        let host = &self.args.host;
        let args = vec![
            "gateway".into(),
            "--listen".into(),
            format!("{host}:{}", ports.s3),
            "--admin-listen".into(),
            format!("{host}:{}", ports.admin),
            "--cluster".into(),
            self.cluster.display().to_string(),
            "--region".into(),
            self.args.region.clone(),
        ];
        let env = vec![("LANEWAY_ADMIN_TOKEN".to_string(), self.token.clone())];
        self.spec(
            &format!("gateway-{}", i + 1),
            args,
            env,
            GATEWAY_READY.into(),
        )
    }

    fn spec(
        &self,
        name: &str,
        args: Vec<String>,
        mut env: Vec<(String, String)>,
        ready: String,
    ) -> ChildSpec {
        env.push(("NO_COLOR".into(), "1".into()));
        ChildSpec {
            name: name.into(),
            program: self.program.clone(),
            args,
            env,
            log: self.log(name),
            ready,
        }
    }
}

/// Start every spec of `specs` at once, then wait for each to be ready
/// (one deadline for all). Started children are pushed to `children`
/// even when a later one fails, so the caller can stop them.
async fn start_all(
    specs: Vec<ChildSpec>,
    children: &mut Vec<Child>,
    timeout: Duration,
    stop: &mut watch::Receiver<Option<&'static str>>,
) -> Result<(), Interrupted> {
    let first = children.len();
    for spec in specs {
        children.push(Child::spawn(spec).map_err(Interrupted::Failed)?);
    }
    let deadline = Instant::now() + timeout;
    for c in &mut children[first..] {
        wait_ready(c, deadline, stop).await?;
    }
    Ok(())
}

/// The summary printed once the cluster is up, with the `export` lines
/// for the aws CLI (the first gateway's, as its banner printed them).
fn summary(plan: &Plan, file: &ClusterFile, children: &[Child], source: &TokenSource) -> String {
    let mut out = format!(
        "\nlaneway cluster local: {} store nodes, {} gateways, {} partitions, {} replicas, data in {}\n\n",
        plan.layout.stores.len(),
        plan.layout.gateways.len(),
        file.map.partition_count(),
        file.replicas,
        plan.dir.display()
    );
    out.push_str(&format!(
        "{:<12} {:>8}  {:<28} {:<28} LOG\n",
        "NAME", "PID", "LISTENS", "ADMIN"
    ));
    let (stores, gateways) = children.split_at(plan.layout.stores.len().min(children.len()));
    for c in gateways.iter().chain(stores) {
        let scheme = c.spec.ready.rsplit(' ').next().unwrap_or("");
        let listens = format!(
            "{scheme}{}",
            c.line_after(&c.spec.ready).unwrap_or_default()
        );
        let admin = c
            .line_after(ADMIN_READY)
            .map_or("-".into(), |a| format!("http://{a}"));
        out.push_str(&format!(
            "{:<12} {:>8}  {listens:<28} {admin:<28} {}\n",
            c.spec.name,
            c.pid(),
            c.spec.log.display()
        ));
    }
    out.push_str(&format!(
        "\ncluster file {} (secret {})\n",
        file.path.display(),
        file.secret_file.display()
    ));
    out.push_str(&credentials(
        plan,
        &children[plan.layout.stores.len()],
        source,
    ));
    out
}

/// The credential and endpoint lines from gateway 1's banner.
fn credentials(plan: &Plan, first: &Child, source: &TokenSource) -> String {
    let host = &plan.args.host;
    let [g1, rest @ ..] = plan.layout.gateways.as_slice() else {
        return String::new();
    };
    let banner = first.output();
    let mut out = String::new();
    let exports: Vec<&str> = banner
        .lines()
        .filter(|l| {
            l.starts_with("export AWS_ACCESS_KEY_ID=")
                || l.starts_with("export AWS_SECRET_ACCESS_KEY=")
        })
        .collect();
    if exports.is_empty() {
        if let Some(l) = banner
            .lines()
            .find(|l| l.contains("default tenant's access key id"))
        {
            out.push_str(&format!("{l}\n"));
        }
    } else {
        out.push_str("new tenant registry; the first key (shown once):\n");
    }
    match source {
        TokenSource::Given => {
            out.push_str("admin token: from --admin-token / LANEWAY_ADMIN_TOKEN\n")
        }
        TokenSource::Kept(p) => out.push_str(&format!("admin token: {}\n", p.display())),
        TokenSource::New(p) => out.push_str(&format!(
            "admin token: new, saved to {} (mode 0600)\n",
            p.display()
        )),
    }
    out.push_str("\nPaste into your shell:\n\n");
    for l in exports {
        out.push_str(&format!("{l}\n"));
    }
    out.push_str(&format!("export AWS_DEFAULT_REGION={}\n", plan.args.region));
    out.push_str(&format!(
        "export AWS_ENDPOINT_URL=http://{host}:{}\n",
        g1.s3
    ));
    out.push_str(&format!(
        "export LANEWAY_ADMIN_ENDPOINT=http://{host}:{}\n",
        g1.admin
    ));
    if *source != TokenSource::Given {
        out.push_str(&format!("export LANEWAY_ADMIN_TOKEN={}\n", plan.token));
    }
    out.push_str("\nthen try:\n\n  aws s3 ls\n");
    for (i, g) in rest.iter().enumerate() {
        out.push_str(&format!(
            "  aws --endpoint-url http://{host}:{} s3 ls    # gateway-{}\n",
            g.s3,
            i + 2
        ));
    }
    out.push_str("\nCtrl-C stops the cluster.\n");
    out
}

/// Run `laneway cluster local`.
pub fn run(args: LocalArgs) -> ExitCode {
    let layout = match layout(&args) {
        Ok(l) => l,
        Err(msg) => {
            eprintln!("laneway: {msg}");
            return ExitCode::from(2);
        }
    };
    let runtime = match super::runtime() {
        Ok(rt) => rt,
        Err(msg) => return fail(&msg),
    };
    match runtime.block_on(run_cluster(args, layout)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(msg) => fail(&msg),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("laneway cluster local: {msg}");
    ExitCode::FAILURE
}

/// Prepare the directory, start the cluster, supervise it, stop it.
/// Ok(clean) once stopped; Err when it could not start.
async fn run_cluster(args: LocalArgs, layout: Layout) -> Result<bool, String> {
    let mut stop = stop_signals().map_err(|e| format!("cannot handle signals: {e}"))?;
    let dir = args.data_dir.clone();
    std::fs::create_dir_all(dir.join("logs"))
        .map_err(|e| format!("cannot create {}/logs: {e}", dir.display()))?;
    let cluster = dir.join("cluster.toml");
    let file = settle_cluster(&cluster, &layout, args.partitions, args.replicas)?;
    let (token, source) = settle_token(args.admin_token.as_deref(), &dir)?;
    let program = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let plan = Plan {
        program,
        dir,
        cluster,
        layout,
        token,
        args,
    };
    let grace = Duration::from_secs(plan.args.stop_grace_secs);
    let mut children = Vec::new();
    if let Err(why) = start(&plan, &mut children, &mut stop).await {
        stop_all(&mut children, plan.layout.stores.len(), grace);
        return match why {
            Interrupted::Failed(msg) => Err(format!("start failed: {msg}")),
            Interrupted::Stop(name) => Err(format!("{name} during the start; stopped")),
        };
    }
    let text = format!(
        "{}{READY_LINE}\n",
        summary(&plan, &file, &children, &source)
    );
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))?;
    drop(out);
    let asked = supervise(&mut children, &mut stop).await;
    if let Some(name) = asked {
        println!("laneway cluster local: {name}, stopping the gateways, then the store nodes");
    }
    let clean = stop_all(&mut children, plan.layout.stores.len(), grace);
    Ok(asked.is_some() && clean && children.iter().all(|c| !c.died))
}

/// The store nodes, then gateway 1, then the other gateways.
async fn start(
    plan: &Plan,
    children: &mut Vec<Child>,
    stop: &mut watch::Receiver<Option<&'static str>>,
) -> Result<(), Interrupted> {
    let timeout = Duration::from_secs(plan.args.ready_timeout_secs);
    let stores = plan
        .layout
        .stores
        .iter()
        .map(|(id, addr)| plan.store(id, addr))
        .collect();
    start_all(stores, children, timeout, stop).await?;
    start_all(vec![plan.gateway(0)], children, timeout, stop).await?;
    let rest = (1..plan.layout.gateways.len())
        .map(|i| plan.gateway(i))
        .collect();
    start_all(rest, children, timeout, stop).await
}

/// Stop the gateways (`children[stores..]`), then the store nodes.
fn stop_all(children: &mut [Child], stores: usize, grace: Duration) -> bool {
    let split = stores.min(children.len());
    let (store_nodes, gateways) = children.split_at_mut(split);
    let gateways_clean = stop_group(gateways, grace);
    stop_group(store_nodes, grace) && gateways_clean
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::ExitStatusExt;

    fn args(base_port: u16, gateways: u16, store_nodes: u16) -> LocalArgs {
        LocalArgs {
            store_nodes,
            gateways,
            data_dir: PathBuf::from("unused"),
            base_port,
            partitions: None,
            replicas: 1,
            host: "127.0.0.1".into(),
            region: "us-east-1".into(),
            admin_token: None,
            index_memory: None,
            disk_reserve: None,
            ready_timeout_secs: 60,
            stop_grace_secs: 1,
        }
    }

    /// A child running `script` under /bin/sh, ready when it prints a
    /// line starting with `ready`.
    fn fake(dir: &Path, name: &str, script: &str, ready: &str) -> Child {
        Child::spawn(ChildSpec {
            name: name.into(),
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
            log: dir.join(format!("{name}.log")),
            ready: ready.into(),
        })
        .expect("spawn /bin/sh")
    }

    /// Exits 0 on SIGTERM (sh runs the trap once `wait` is interrupted).
    const OBEYS_TERM: &str = "trap 'exit 0' TERM; sleep 30 & wait $!";

    fn no_stop() -> (
        watch::Sender<Option<&'static str>>,
        watch::Receiver<Option<&'static str>>,
    ) {
        watch::channel(None)
    }

    #[test]
    fn gateways_then_their_admin_ports_then_the_store_nodes() {
        let l = layout(&args(9000, 2, 3)).expect("layout");
        let g = |s3, admin| GatewayPorts { s3, admin };
        assert_eq!(l.gateways, vec![g(9000, 9002), g(9001, 9003)]);
        let stores: Vec<(&str, &str)> = l
            .stores
            .iter()
            .map(|(i, a)| (i.as_str(), a.as_str()))
            .collect();
        assert_eq!(
            stores,
            [
                ("store-1", "127.0.0.1:9004"),
                ("store-2", "127.0.0.1:9005"),
                ("store-3", "127.0.0.1:9006")
            ]
        );
    }

    #[test]
    fn ports_past_65535_a_zero_base_and_empty_roles_are_refused() {
        assert!(
            layout(&args(65530, 2, 3))
                .expect_err("overflow")
                .contains("65535")
        );
        assert!(layout(&args(65529, 2, 3)).is_ok(), "65529 + 6 = 65535 fits");
        assert!(layout(&args(0, 2, 3)).is_err());
        assert!(layout(&args(9000, 0, 3)).is_err());
        assert!(layout(&args(9000, 2, 0)).is_err());
    }

    #[test]
    fn the_cluster_file_is_written_once_then_checked_against_the_flags() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cluster.toml");
        let l = layout(&args(9000, 2, 3)).expect("layout");
        let made = settle_cluster(&path, &l, Some(4), 1).expect("init");
        assert_eq!((made.nodes.len(), made.map.partition_count()), (3, 4));
        let secret = made.read_secret().expect("secret");

        let again = settle_cluster(&path, &l, None, 1).expect("reuse");
        assert_eq!(
            again.map.partition_count(),
            4,
            "an existing cluster keeps its count"
        );
        assert_eq!(again.read_secret().expect("secret"), secret);

        let err = settle_cluster(&path, &l, Some(8), 1).expect_err("partitions");
        assert!(err.contains("has 4 partitions"), "{err}");
        let err = settle_cluster(&path, &layout(&args(9000, 2, 4)).expect("l"), None, 1)
            .expect_err("count");
        assert!(
            err.contains("has 3 store nodes, --store-nodes is 4"),
            "{err}"
        );
        let err = settle_cluster(&path, &layout(&args(9100, 2, 3)).expect("l"), None, 1)
            .expect_err("ports");
        assert!(err.contains("puts store-1 at 127.0.0.1:9004"), "{err}");
        let err = settle_cluster(&path, &l, None, 3).expect_err("replicas");
        assert!(
            err.contains("has 1 replicas") && err.contains("--replicas is 3"),
            "{err}"
        );
    }

    #[test]
    fn replicas_are_one_or_three_and_three_need_three_store_nodes() {
        let with = |replicas, store_nodes| {
            let mut a = args(9000, 2, store_nodes);
            a.replicas = replicas;
            layout(&a)
        };
        assert!(with(1, 1).is_ok());
        assert!(with(3, 3).is_ok());
        assert!(with(3, 5).is_ok());
        for bad in [0, 2, 4, 5] {
            let err = with(bad, 5).expect_err("not 1 or 3");
            assert!(
                err.contains(&format!("--replicas {bad} is not supported")),
                "{err}"
            );
        }
        let err = with(3, 2).expect_err("too few nodes");
        assert!(
            err.contains("--replicas 3 needs at least 3 store nodes, --store-nodes is 2"),
            "{err}"
        );
    }

    #[test]
    fn a_three_replica_cluster_file_places_each_partition_on_three_nodes_and_is_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cluster.toml");
        let l = layout(&args(9000, 2, 3)).expect("layout");
        let made = settle_cluster(&path, &l, Some(4), 3).expect("init");
        assert_eq!(made.replicas, 3);
        assert_eq!(made.map.catalog().len(), 3);
        assert!(
            made.map
                .partitions()
                .all(|p| made.map.replicas(p).len() == 3)
        );
        assert_eq!(
            settle_cluster(&path, &l, None, 3).expect("reuse").replicas,
            3
        );
        let err = settle_cluster(&path, &l, None, 1).expect_err("replicas");
        assert!(
            err.contains("has 3 replicas") && err.contains("pass --replicas 3"),
            "{err}"
        );
    }

    #[test]
    fn a_generated_token_is_kept_private_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (token, source) = settle_token(None, dir.path()).expect("new");
        let file = dir.path().join("admin.token");
        assert_eq!(source, TokenSource::New(file.clone()));
        assert!(token.len() >= 16 && token.bytes().all(|b| b.is_ascii_graphic()));
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            settle_token(None, dir.path()).expect("kept"),
            (token, TokenSource::Kept(file))
        );

        let other = tempfile::tempdir().expect("tempdir");
        let given = settle_token(Some("given-token-0123456789"), other.path()).expect("given");
        assert_eq!(given, ("given-token-0123456789".into(), TokenSource::Given));
        assert!(
            !other.path().join("admin.token").exists(),
            "a given token is never written"
        );
        let (_, source) = settle_token(Some(""), other.path()).expect("empty");
        assert!(
            matches!(source, TokenSource::New(_)),
            "an empty variable counts as unset"
        );
    }

    #[test]
    fn children_get_the_role_flags_and_the_admin_token() {
        let mut a = args(9000, 2, 3);
        a.index_memory = Some("32M".into());
        let plan = Plan {
            program: PathBuf::from("/bin/laneway"),
            dir: PathBuf::from("/d"),
            cluster: PathBuf::from("/d/cluster.toml"),
            layout: layout(&a).expect("layout"),
            token: "tok".into(),
            args: a,
        };
        let store = plan.store("store-2", "127.0.0.1:9005");
        assert_eq!(
            store.args.join(" "),
            "store --data-dir /d/store-2 --listen 127.0.0.1:9005 --cluster /d/cluster.toml --node store-2 --index-memory 32M"
        );
        assert_eq!(
            store.ready,
            "laneway store node store-2 listening on rpc://"
        );
        assert_eq!(store.log, PathBuf::from("/d/logs/store-2.log"));
        assert!(!store.env.iter().any(|(k, _)| k == "LANEWAY_ADMIN_TOKEN"));

        let gw = plan.gateway(1);
        assert_eq!(gw.name, "gateway-2");
        assert_eq!(
            gw.args.join(" "),
            "gateway --listen 127.0.0.1:9001 --admin-listen 127.0.0.1:9003 --cluster /d/cluster.toml --region us-east-1"
        );
        let token = ("LANEWAY_ADMIN_TOKEN".to_string(), "tok".to_string());
        assert!(gw.env.contains(&token), "{:?}", gw.env);
    }

    #[tokio::test]
    async fn a_ready_child_gives_its_address_and_stops_on_sigterm() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = format!(
            "trap 'exit 0' TERM; echo noise; echo 'laneway store node s1 listening on rpc://127.0.0.1:1234'; {OBEYS_TERM}"
        );
        let mut children = vec![fake(
            dir.path(),
            "s1",
            &script,
            "laneway store node s1 listening on rpc://",
        )];
        let (_tx, mut rx) = no_stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = wait_ready(&mut children[0], deadline, &mut rx)
            .await
            .expect("ready");
        assert_eq!(addr, "127.0.0.1:1234");
        assert!(
            stop_group(&mut children, Duration::from_secs(10)),
            "stopped cleanly"
        );
        assert_eq!(children[0].exit.and_then(|s| s.code()), Some(0));
    }

    #[tokio::test]
    async fn a_child_that_exits_early_fails_the_start_with_its_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = fake(
            dir.path(),
            "s1",
            "echo 'cannot bind: address in use' >&2; exit 3",
            "never ",
        );
        let (_tx, mut rx) = no_stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        let Err(Interrupted::Failed(msg)) = wait_ready(&mut child, deadline, &mut rx).await else {
            panic!("expected a failure");
        };
        assert!(
            msg.contains("exited (exit status: 3) before it was ready"),
            "{msg}"
        );
        assert!(
            msg.contains("cannot bind: address in use"),
            "the log's tail: {msg}"
        );
    }

    #[tokio::test]
    async fn a_child_that_never_gets_ready_fails_at_the_deadline() {
        let dir = tempfile::tempdir().expect("tempdir");
        // The ready line without its newline does not count yet.
        let script = format!("printf 'laneway listening on http://1.2.3.4:5'; {OBEYS_TERM}");
        let mut children = vec![fake(dir.path(), "g1", &script, GATEWAY_READY)];
        let (_tx, mut rx) = no_stop();
        let started = Instant::now();
        let res = wait_ready(
            &mut children[0],
            started + Duration::from_millis(500),
            &mut rx,
        )
        .await;
        let Err(Interrupted::Failed(msg)) = res else {
            panic!("expected a failure, got {res:?}");
        };
        assert!(
            msg.contains("did not print its listening line in time"),
            "{msg}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(stop_group(&mut children, Duration::from_secs(10)));
    }

    #[tokio::test]
    async fn a_stop_request_ends_the_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = format!("trap 'exit 0' TERM; echo armed; {OBEYS_TERM}");
        let mut children = vec![fake(dir.path(), "g1", &script, GATEWAY_READY)];
        let (tx, mut rx) = no_stop();
        tx.send(Some("SIGINT")).expect("send");
        let deadline = Instant::now() + Duration::from_secs(30);
        let res = wait_ready(&mut children[0], deadline, &mut rx).await;
        assert_eq!(res, Err(Interrupted::Stop("SIGINT")));
        // The stop came before the shell set its trap, maybe: a SIGTERM
        // then would kill it rather than let it exit 0.
        let armed = Instant::now() + Duration::from_secs(10);
        while children[0].line_after("armed").is_none() && Instant::now() < armed {
            std::thread::sleep(POLL);
        }
        assert!(stop_group(&mut children, Duration::from_secs(10)));
    }

    #[test]
    fn a_child_that_ignores_sigterm_is_killed_after_the_grace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = "trap '' TERM; echo up; while :; do sleep 0.1; done";
        let mut children = vec![fake(dir.path(), "stubborn", script, "up")];
        let deadline = Instant::now() + Duration::from_secs(10);
        while children[0].line_after("up").is_none() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        let started = Instant::now();
        assert!(
            !stop_group(&mut children, Duration::from_millis(300)),
            "not a clean stop"
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(
            children[0].exit.and_then(|s| s.signal()),
            Some(9),
            "SIGKILL"
        );
    }

    #[tokio::test]
    async fn a_child_that_dies_is_reported_and_the_others_keep_running() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut children = vec![
            fake(dir.path(), "dies", "sleep 0.2; exit 7", "x"),
            fake(dir.path(), "lives", OBEYS_TERM, "x"),
        ];
        let (tx, mut rx) = no_stop();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let _ = tx.send(Some("SIGTERM"));
        });
        assert_eq!(supervise(&mut children, &mut rx).await, Some("SIGTERM"));
        assert!(children[0].died && !children[1].died);
        assert_eq!(children[0].exit.and_then(|s| s.code()), Some(7));
        assert!(children[1].poll_exit().is_none(), "still running");
        assert!(
            stop_group(&mut children, Duration::from_secs(10)),
            "the dead one is not stopped again"
        );
    }

    #[tokio::test]
    async fn supervision_ends_when_every_child_has_exited() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut children = vec![
            fake(dir.path(), "a", "exit 0", "x"),
            fake(dir.path(), "b", "exit 1", "x"),
        ];
        let (_tx, mut rx) = no_stop();
        let run = supervise(&mut children, &mut rx);
        let ended = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("ends");
        assert_eq!(ended, None);
        assert!(children.iter().all(|c| c.died));
    }

    #[tokio::test]
    async fn the_summary_repeats_gateway_1s_exports() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plan = Plan {
            program: PathBuf::from("/bin/sh"),
            dir: dir.path().to_path_buf(),
            cluster: dir.path().join("cluster.toml"),
            layout: layout(&args(9000, 2, 1)).expect("layout"),
            token: "the-token".into(),
            args: args(9000, 2, 1),
        };
        let banner = "laneway: new tenant default (t1) ...\n\nexport AWS_ACCESS_KEY_ID=AKNEW\n\
                      export AWS_SECRET_ACCESS_KEY=SECRETNEW\nexport AWS_DEFAULT_REGION=us-east-1\n\
                      laneway admin listening on http://127.0.0.1:9002\nlaneway listening on http://127.0.0.1:9000\n";
        let mut g1 = fake(
            dir.path(),
            "gateway-1",
            &format!("printf '{banner}'"),
            GATEWAY_READY,
        );
        let (_tx, mut rx) = no_stop();
        wait_ready(&mut g1, Instant::now() + Duration::from_secs(10), &mut rx)
            .await
            .expect("ready");
        let text = credentials(
            &plan,
            &g1,
            &TokenSource::New(dir.path().join("admin.token")),
        );
        for line in [
            "export AWS_ACCESS_KEY_ID=AKNEW\n",
            "export AWS_SECRET_ACCESS_KEY=SECRETNEW\n",
            "export AWS_ENDPOINT_URL=http://127.0.0.1:9000\n",
            "export LANEWAY_ADMIN_ENDPOINT=http://127.0.0.1:9002\n",
            "export LANEWAY_ADMIN_TOKEN=the-token\n",
            "aws --endpoint-url http://127.0.0.1:9001 s3 ls    # gateway-2\n",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }

        let later = "laneway: default tenant's access key id AKOLD (secret shown at first start)\n\
                     laneway admin listening on http://127.0.0.1:9002\nlaneway listening on http://127.0.0.1:9000\n";
        let mut g1 = fake(
            dir.path(),
            "gateway-1b",
            &format!("printf \"{later}\""),
            GATEWAY_READY,
        );
        wait_ready(&mut g1, Instant::now() + Duration::from_secs(10), &mut rx)
            .await
            .expect("ready");
        let text = credentials(&plan, &g1, &TokenSource::Given);
        assert!(
            text.contains("default tenant's access key id AKOLD"),
            "{text}"
        );
        assert!(
            !text.contains("AWS_SECRET_ACCESS_KEY") && !text.contains("export LANEWAY_ADMIN_TOKEN"),
            "{text}"
        );
    }
}
