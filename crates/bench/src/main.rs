//! `intranode-bench`: the GPU side of the project, run under
//! `intranode-run` with one process per GPU.
//!
//! - `check`: the correctness suite (every algorithm x element type x op x
//!   awkward length, back-to-back mixed calls, CUDA-graph replay).
//! - `bench`: latency and bus bandwidth against NCCL in the same run,
//!   eager and CUDA-graph replay; writes JSON, CSV and a PNG plot;
//!   `--tune` writes measured crossovers.
//! - `demo`: the README's main job: a short sweep with a correctness check.
//! - `plot`: the PNG from saved JSON results, on any machine (no GPU, no
//!   launcher); how `docs/allreduce_h200.png` is made.
//! - `ddp-check`: broadcast, `broadcast_coalesced`, gradient buckets and
//!   communication hooks against host references.
//! - `faults`: a rank SIGKILLs itself at a chosen phase; the survivors
//!   must name it within the bound and keep a working GPU context.
//! - `bad-input`: bad arguments at the GPU entry points, refused clearly.
//! - `faults-suite`: every `faults` and `bad-input` case under
//!   `intranode-run`, with the launcher's verdicts checked (run directly).
//! - `soak`: a long run of random checked all-reduces (eager and graphs),
//!   checked on the GPU, with device memory and fd counts watched.
//! - `decode`: a Llama-shaped tensor-parallel decode layer stack (cuBLAS
//!   GEMMs, our norms, two all-reduces per layer) in one CUDA graph, no
//!   communication against NCCL against ours, checked.

mod bad_input;
mod bench;
mod bench_free;
mod check;
mod check_free;
mod check_norm;
mod check_sg;
mod data;
mod ddp_check;
mod decode;
mod faults;
mod free;
mod plot;
mod poll_storm;
mod progress;
mod rank;
mod results;
mod soak;
mod suite;

use std::path::PathBuf;

use anyhow::{Context, Result};
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
    /// Plot saved `bench` results (JSON) as a PNG; needs no GPU.
    Plot(PlotArgs),
    /// Broadcast, broadcast_coalesced, gradient buckets and hooks.
    DdpCheck(ddp_check::DdpCheckArgs),
    /// A rank SIGKILLs itself at a phase; survivors must name it.
    Faults(faults::FaultArgs),
    /// Bad input at the GPU entry points must be refused clearly.
    BadInput(bad_input::BadInputArgs),
    /// Every faults and bad-input case under intranode-run (run directly).
    FaultsSuite(suite::SuiteArgs),
    /// Many random all-reduces, every result checked on the GPU.
    Soak(soak::SoakArgs),
    /// A tensor-parallel decode layer stack in a CUDA graph: no
    /// communication, NCCL and ours.
    Decode(decode::DecodeArgs),
    /// One GPU: what polling a host-mapped word from every thread costs
    /// (the free-running slow mode of issue 16) against a device word.
    PollStorm(poll_storm::PollStormArgs),
}

#[derive(clap::Args, Debug)]
struct PlotArgs {
    /// A results file written by `bench` (one row of panels each, in order).
    #[arg(long = "json", required = true, value_name = "FILE")]
    json: Vec<PathBuf>,
    /// The PNG to write.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// GPU name for the titles of files that do not record it (`H200`).
    #[arg(long)]
    gpu: Option<String>,
}

fn plot(args: &PlotArgs) -> Result<()> {
    let files = args
        .json
        .iter()
        .map(|p| results::load(p))
        .collect::<Result<Vec<_>>>()?;
    for (path, file) in args.json.iter().zip(&files) {
        println!(
            "{}: world {}: {}",
            path.display(),
            file.world,
            file.auto_verdict()
        );
    }
    let png = plot::render_png(&files, args.gpu.as_deref())?;
    std::fs::write(&args.out, &png).with_context(|| format!("writing {}", args.out.display()))?;
    println!("{} ({} bytes)", args.out.display(), png.len());
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.cmd {
        Cmd::Check(args) => check::run(&args),
        Cmd::Bench(args) => bench::run(&args),
        Cmd::Demo => bench::run(&bench::BenchArgs::demo()),
        Cmd::Plot(args) => plot(&args),
        Cmd::DdpCheck(args) => ddp_check::run(&args),
        Cmd::Faults(args) => faults::run(&args),
        Cmd::BadInput(args) => bad_input::run(&args),
        Cmd::FaultsSuite(args) => suite::run(&args),
        Cmd::Soak(args) => soak::run(&args),
        Cmd::Decode(args) => decode::run(&args),
        Cmd::PollStorm(args) => poll_storm::run(&args),
    };
    if let Err(e) = result {
        eprintln!("intranode-bench: {e:#}");
        std::process::exit(1);
    }
}
