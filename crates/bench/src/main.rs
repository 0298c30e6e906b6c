//! `intranode-bench`: the GPU side of the project, run under
//! `intranode-run` with one process per GPU.
//!
//! - `check`: the correctness suite (every algorithm x element type x op x
//!   awkward length, back-to-back mixed calls, CUDA-graph replay).
//! - `bench`: latency and bus bandwidth against NCCL in the same run,
//!   eager and CUDA-graph replay; `--tune` writes measured crossovers.
//! - `demo`: the README's main job: a short sweep with a correctness check.
//! - `faults`: a rank SIGKILLs itself at a chosen phase; the survivors
//!   must name it within the bound and keep a working GPU context.
//! - `bad-input`: bad arguments at the GPU entry points, refused clearly.
//! - `faults-suite`: every `faults` and `bad-input` case under
//!   `intranode-run`, with the launcher's verdicts checked (run directly).
//! - `soak`: a long run of random checked all-reduces (eager and graphs),
//!   checked on the GPU, with device memory and fd counts watched.

mod bad_input;
mod bench;
mod check;
mod data;
mod faults;
mod rank;
mod soak;
mod suite;

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
    /// A rank SIGKILLs itself at a phase; survivors must name it.
    Faults(faults::FaultArgs),
    /// Bad input at the GPU entry points must be refused clearly.
    BadInput(bad_input::BadInputArgs),
    /// Every faults and bad-input case under intranode-run (run directly).
    FaultsSuite(suite::SuiteArgs),
    /// Many random all-reduces, every result checked on the GPU.
    Soak(soak::SoakArgs),
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.cmd {
        Cmd::Check(args) => check::run(&args),
        Cmd::Bench(args) => bench::run(&args),
        Cmd::Demo => bench::run(&bench::BenchArgs::demo()),
        Cmd::Faults(args) => faults::run(&args),
        Cmd::BadInput(args) => bad_input::run(&args),
        Cmd::FaultsSuite(args) => suite::run(&args),
        Cmd::Soak(args) => soak::run(&args),
    };
    if let Err(e) = result {
        eprintln!("intranode-bench: {e:#}");
        std::process::exit(1);
    }
}
