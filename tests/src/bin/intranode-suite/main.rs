//! `intranode-suite`: the GPU test suites, run under `intranode-run` with
//! one process per GPU (`faults-suite` directly: it starts the launcher
//! itself).
//!
//! - `check`: the correctness suite (every algorithm x element type x op x
//!   awkward length, back-to-back mixed calls, CUDA-graph replay,
//!   free-running stresses, reduce-scatter and all-gather, all-reduce +
//!   residual + RMSNorm, every `NcclType` through every collective,
//!   symmetric buffers users allocate, barriers).
//! - `ddp-check`: broadcast, `broadcast_coalesced`, gradient buckets and
//!   communication hooks against host references.
//! - `faults`: a rank SIGKILLs itself at a chosen phase; the survivors
//!   must name it within the bound and keep a working GPU context.
//! - `bad-input`: bad arguments at the GPU entry points, refused clearly.
//! - `faults-suite`: every `faults` and `bad-input` case under
//!   `intranode-run`, with the launcher's verdicts checked (run directly).
//! - `recreate`: communicators created and dropped 50 times; device
//!   memory, open fds and threads must not grow.
//! - `module-probe`: one GPU, no launcher: the kernel module loaded and
//!   unloaded in several ways, free device memory after each.
//! - `soak`: a long run of random checked all-reduces (eager and graphs),
//!   checked on the GPU, with device memory and fd counts watched.
//!
//! What the suites share with the benchmark (a rank's set-up, the input
//! pattern and its checks, device timing) is `intranode-harness`.

mod bad_input;
mod check;
mod check_barriers;
mod check_free;
mod check_graph;
mod check_hog;
mod check_norm;
mod check_sg;
mod check_symm;
mod check_types;
mod ddp_check;
mod faults;
mod faults_suite;
mod module_probe;
mod recreate;
mod soak;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(about = "intranode GPU test suites (run under intranode-run)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Correctness suite against an f64 host reference.
    Check(check::CheckArgs),
    /// Broadcast, broadcast_coalesced, gradient buckets and hooks.
    DdpCheck(ddp_check::DdpCheckArgs),
    /// A rank SIGKILLs itself at a phase; survivors must name it.
    Faults(faults::FaultArgs),
    /// Bad input at the GPU entry points must be refused clearly.
    BadInput(bad_input::BadInputArgs),
    /// Every faults and bad-input case under intranode-run (run directly).
    FaultsSuite(faults_suite::SuiteArgs),
    /// Many random all-reduces, every result checked on the GPU.
    Soak(soak::SoakArgs),
    /// Communicators created and dropped: nothing may be left behind.
    Recreate(recreate::RecreateArgs),
    /// One GPU, no launcher: where a kernel module's load/unload loses memory.
    ModuleProbe(module_probe::ModuleProbeArgs),
}

fn main() {
    intranode_harness::logging::init();
    let cli = Cli::parse();
    let result: Result<()> = match cli.cmd {
        Cmd::Check(args) => check::run(&args),
        Cmd::DdpCheck(args) => ddp_check::run(&args),
        Cmd::Faults(args) => faults::run(&args),
        Cmd::BadInput(args) => bad_input::run(&args),
        Cmd::FaultsSuite(args) => faults_suite::run(&args),
        Cmd::Soak(args) => soak::run(&args),
        Cmd::Recreate(args) => recreate::run(&args),
        Cmd::ModuleProbe(args) => module_probe::run(&args),
    };
    if let Err(e) = result {
        eprintln!("intranode-suite: {e:#}");
        std::process::exit(1);
    }
}
