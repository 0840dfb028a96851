//! `laneway cluster ping --file F --node ID`: one signed RPC call
//! (`ping`) to a store node of the cluster file, under
//! the RPC deadline. Exit status 0 when the node answered it, 1 when it
//! did not (down, cut off, refused the signature, or the file or secret
//! cannot be read), 2 for an unknown node.
//!
//! Compose health checks run it in a store node's container: the image has
//! no shell or curl, and a port that accepts is not yet a node that serves
//! (nor one that holds the same secret).

use clap::Args;
use laneway_store::cluster::ClusterFile;
use laneway_store::rpc::{CallOptions, RpcClient, Signer};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The RPC method the store node answers.
pub const PING_METHOD: &str = "ping";

/// Flags of `laneway cluster ping`.
#[derive(Args, Debug)]
pub struct PingArgs {
    /// The cluster file (its secret beside it).
    #[arg(long, env = "LANEWAY_CLUSTER")]
    pub file: PathBuf,
    /// The store node to call (its id in the file).
    #[arg(long)]
    pub node: String,
    /// The answer must begin within this many seconds.
    #[arg(long, default_value_t = 5)]
    pub timeout_secs: u64,
}

/// Run `laneway cluster ping`.
pub fn run(args: PingArgs) -> ExitCode {
    let file = match ClusterFile::load(&args.file) {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string(), ExitCode::FAILURE),
    };
    let Some(node) = file.node(&args.node) else {
        let ids: Vec<&str> = file.nodes.iter().map(|n| n.id.as_str()).collect();
        let msg = format!(
            "{} names no node {:?} (it has {})",
            file.path.display(),
            args.node,
            ids.join(", ")
        );
        return fail(&msg, ExitCode::from(2));
    };
    let secret = match file.read_secret() {
        Ok(s) => s,
        Err(e) => return fail(&e.to_string(), ExitCode::FAILURE),
    };
    let runtime = match super::runtime() {
        Ok(rt) => rt,
        Err(msg) => return fail(&msg, ExitCode::FAILURE),
    };
    let client = RpcClient::new(node.rpc.clone(), Signer::new(&secret));
    let opts = CallOptions {
        deadline: Duration::from_secs(args.timeout_secs),
        ..CallOptions::default()
    };
    let started = Instant::now();
    let envelope = laneway_store::node::proto::Envelope {
        call: laneway_store::node::proto::Call::Ping,
        caller: None,
        map_version: file.map.version(),
        sender: 0,
        backlog: 0,
        hold: None,
        once: None,
        answer_within_ms: None,
    };
    let args_frame = match laneway_store::node::proto::encode(&envelope) {
        Ok(b) => bytes::Bytes::from(b),
        Err(e) => return fail(&e.to_string(), ExitCode::FAILURE),
    };
    match runtime.block_on(client.call(PING_METHOD, args_frame, None, &opts)) {
        Ok(_) => {
            println!(
                "{} at {} answered in {} ms",
                args.node,
                node.rpc,
                started.elapsed().as_millis()
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(&format!("{}: {e}", args.node), ExitCode::FAILURE),
    }
}

fn fail(msg: &str, code: ExitCode) -> ExitCode {
    eprintln!("laneway cluster ping: {msg}");
    code
}
