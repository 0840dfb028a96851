//! The `laneway` binary: parse the command line, set up logging (stderr),
//! run the chosen role (`serve`; `store` and `gateway`, the roles of a
//! cluster; `admin`, the client of the tenant admin
//! API; `cluster`, which writes and checks cluster files). Exit status: 0
//! after a clean shutdown (or a successful command), 2 for bad flags, 1
//! when the server cannot start (or the command failed).

use clap::Parser;
use laneway_gateway::config::{Cli, Command};
use laneway_gateway::server::serve;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

/// mimalloc instead of glibc's malloc: per-request buffers and rows are
/// allocated and freed on different threads all the time, where glibc's
/// arenas spend their time consolidating (docs/benchmarks.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Default log filter: our own crates at info; s3s's per-request error
/// logs (every 404 would be an ERROR line) are silenced, since the gateway
/// logs what matters itself; the engines' per-tree chatter is kept to
/// warnings, and openraft's to errors (its warnings are the routine of
/// elections: stale votes ignored, peers not reached while they start).
const DEFAULT_LOG: &str =
    "info,s3s=off,hyper=warn,fjall=warn,lsm_tree=warn,sled=warn,openraft=error";

fn init_tracing(filter: Option<&str>) {
    let filter = filter
        .map(str::to_string)
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| DEFAULT_LOG.to_string());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("laneway: bad log filter {filter:?} ({e}); using {DEFAULT_LOG:?}");
        EnvFilter::new(DEFAULT_LOG)
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Admin(args) => laneway_gateway::admin::cli::run(args),
        Command::Cluster(args) => laneway_gateway::cluster::cli::run(args),
        Command::Tags(args) => laneway_gateway::tagcli::run(args),
        Command::Store(args) => {
            init_tracing(args.log());
            match runtime().map(|rt| rt.block_on(laneway_gateway::roles::node::run(args))) {
                Some(Ok(())) => ExitCode::SUCCESS,
                Some(Err(e)) => {
                    eprintln!("laneway: {e}");
                    ExitCode::FAILURE
                }
                None => ExitCode::FAILURE,
            }
        }
        Command::Gateway(args) => run_serve(args.validate()),
        Command::Serve(args) => run_serve(args.validate()),
    }
}

fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("laneway: cannot start the async runtime: {e}");
            None
        }
    }
}

/// `serve` or `gateway`: the same server, over a local or a remote store.
fn run_serve(cfg: Result<laneway_gateway::config::ServeConfig, String>) -> ExitCode {
    let cfg = match cfg {
        Ok(cfg) => cfg,
        Err(msg) => {
            eprintln!("laneway: {msg}");
            return ExitCode::from(2);
        }
    };
    init_tracing(cfg.log.as_deref());
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(serve::run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("laneway: {e}");
            ExitCode::FAILURE
        }
    }
}
