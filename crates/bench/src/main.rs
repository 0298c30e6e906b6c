//! `intranode-bench`: the benchmark, run under `intranode-run` with one
//! process per GPU. (The GPU test suites are `intranode-suite`, in
//! `tests/`; what both share is `intranode-harness`.)
//!
//! - `bench`: latency and bus bandwidth against NCCL in the same run,
//!   eager and CUDA-graph replay; writes JSON, CSV and a PNG plot;
//!   `--tune` writes measured crossovers.
//! - `demo`: the README's main job: a short sweep with a correctness check.
//! - `plot`: the PNG from saved JSON results, on any machine (no GPU, no
//!   launcher); how the README's plot is made from its dated results
//!   folder (`docs/perf/results/`).
//! - `poll-storm`: one GPU, a probe of why no wait polls host memory
//!   (a host-mapped word polled from every thread, against a device word).
//! - `link`: what NVLink carries with every rank moving data to or from
//!   every peer at once, copy engines and SM stores, no collective: the
//!   ceiling of the large-message forms.
//! - `hop`: one NVLink hop as a Lamport wait sees it (a ping-pong between
//!   rank 0 and each peer) and the launch floor of a graph of empty
//!   kernels: the fixed costs under the Lamport forms; and the store floor
//!   of kernels that store into this GPU or into peers.
//! - `phases`: the Lamport one-shot and two-shot with every phase stamped
//!   on the GPU's clock, and the gap from a call's end to the next one's
//!   start: where a call's time goes.
//! - `decode`: a Llama-shaped tensor-parallel decode layer stack (cuBLAS
//!   GEMMs, our norms, two all-reduces per layer) in one CUDA graph: no
//!   communication against NCCL against ours, checked.

mod bench;
mod bench_free;
mod decode;
mod elem;
mod graph;
mod hop;
mod link;
mod phases;
mod plot;
mod poll_storm;
mod results;
mod tune;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(about = "intranode benchmark against NCCL (run under intranode-run)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Benchmark against NCCL.
    Bench(bench::BenchArgs),
    /// Short sweep of ours against NCCL with a correctness check.
    Demo,
    /// Plot saved `bench` results (JSON) as a PNG; needs no GPU.
    Plot(PlotArgs),
    /// One GPU: what polling a host-mapped word from every thread costs
    /// (the cause of a free-running slow mode) against a device word.
    PollStorm(poll_storm::PollStormArgs),
    /// A tensor-parallel decode layer stack in a CUDA graph: no
    /// communication, NCCL and ours.
    Decode(decode::DecodeArgs),
    /// Every rank moving data to (or from) every peer at once, copy
    /// engines or SM stores, no collective: what NVLink carries.
    Link(link::LinkArgs),
    /// One NVLink hop as a Lamport wait sees it (rank 0 with each peer),
    /// the launch floor of a graph of empty kernels and the store floor
    /// of kernels that store into this GPU or into peers.
    Hop(hop::HopArgs),
    /// The Lamport forms' phases stamped on each GPU's clock, and the gap
    /// from a call's end to the next one's start.
    Phases(phases::PhasesArgs),
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

/// The all-reduce sweep: lined up (`--aligned`) or free-running.
fn run_bench(args: &bench::BenchArgs) -> Result<()> {
    if args.aligned {
        bench::run_aligned(args)
    } else {
        bench::check_args(args)?;
        bench_free::run(args)
    }
}

fn main() {
    intranode_harness::logging::init();
    let cli = Cli::parse();
    let result: Result<()> = match cli.cmd {
        Cmd::Bench(args) => run_bench(&args),
        Cmd::Demo => run_bench(&bench::BenchArgs::demo()),
        Cmd::Plot(args) => plot(&args),
        Cmd::PollStorm(args) => poll_storm::run(&args),
        Cmd::Decode(args) => decode::run(&args),
        Cmd::Link(args) => link::run(&args),
        Cmd::Hop(args) => hop::run(&args),
        Cmd::Phases(args) => phases::run(&args),
    };
    if let Err(e) = result {
        eprintln!("intranode-bench: {e:#}");
        std::process::exit(1);
    }
}
