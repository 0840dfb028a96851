//! `laneway-bench`: laneway's load generator and probes.
//!
//! See `docs/benchmarks.md` for what each mode measures and how the figures
//! in that document were produced. This file only parses the command line
//! and hands the chosen mode to `laneway_bench::modes`.

use std::process::ExitCode;

use clap::Parser;
use laneway_bench::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("laneway-bench: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(laneway_bench::modes::run(cli.mode)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("laneway-bench: {msg}");
            ExitCode::FAILURE
        }
    }
}
