//! `intranode-bench`: the GPU side of the project, run under
//! `intranode-run` with one process per GPU.
//!
//! - `check`: the correctness suite (every algorithm x element type x op x
//!   awkward length, back-to-back mixed calls, CUDA-graph replay).
//! - `bench`: latency and bus bandwidth against NCCL in the same run,
//!   eager and CUDA-graph replay; `--tune` writes measured crossovers.
//! - `demo`: the README's main job: a short sweep with a correctness check.
//! - `ddp-check`: broadcast, `broadcast_coalesced`, gradient buckets and
//!   communication hooks against host references.

mod bench;
mod check;
mod data;
mod ddp_check;
mod rank;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(about = "intranode GPU correctness suite and benchmark (run under intranode-run)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Correctness suite against an f64 host reference.
    Check(check::CheckArgs),
    /// Benchmark against NCCL.
    Bench(bench::BenchArgs),
    /// Short sweep of ours against NCCL with a correctness check.
    Demo,
    /// Broadcast, broadcast_coalesced, gradient buckets and hooks.
    DdpCheck(ddp_check::DdpCheckArgs),
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.cmd {
        Cmd::Check(args) => check::run(&args),
        Cmd::Bench(args) => bench::run(&args),
        Cmd::Demo => bench::run(&bench::BenchArgs::demo()),
        Cmd::DdpCheck(args) => ddp_check::run(&args),
    };
    if let Err(e) = result {
        eprintln!("intranode-bench: {e:#}");
        std::process::exit(1);
    }
}
