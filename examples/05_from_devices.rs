//! 05_from_devices: one process, a thread per GPU, as single-process
//! tensor-parallel servers run: `Comm::from_devices(streams)` makes every
//! rank's communicator at once, each thread takes its own (a `Comm` is
//! `Send`), warms up with eager all-reduces, then captures a decode step's
//! in-place bf16 all-reduces (two per layer) into a CUDA graph on its
//! compute stream and replays it, checking every element of every replay.
//!
//! Each replay's GPU time is measured with events around the graph, and
//! reported per all-reduce (median, p99, max over replays). `--backend
//! cudarc` runs the same loop on `cudarc::nccl::Comm::from_devices` in
//! the same program, for the comparison (with cudarc's event tracking
//! off there: its NCCL calls cannot be captured with it on, as buffers
//! written before the capture carry events recorded outside it).
//!
//! ```text
//! cargo build --release -p intranode-examples --example 05_from_devices
//! target/release/examples/05_from_devices --gpus 0,1,2,3
//! target/release/examples/05_from_devices --gpus 0,1,2,3 --backend cudarc
//! ```
//!
//! Several ranks on one GPU (a test): `INTRANODE_ALLOW_OVERLAPPING_DEVICES=1
//! ... --gpus 0,0,0,0`; each rank waits for its collective before it reads
//! back (see `Communicator::from_devices`).
//!
//! Exits 0 with a message and runs nothing where there is no GPU.

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use clap::{Parser, ValueEnum};
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, CudaStream};
use half::bf16;
use intranode::nccl::result::NcclError;
use intranode_examples::exact;

#[derive(Parser, Debug)]
#[command(about = "one process, a thread per GPU: Comm::from_devices, graph-captured all-reduces")]
struct Args {
    /// The GPU of each rank, e.g. `0,1,2,3` (a GPU may repeat with
    /// INTRANODE_ALLOW_OVERLAPPING_DEVICES=1).
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    gpus: Vec<usize>,
    /// Decoder layers in the captured step (two all-reduces each).
    #[arg(long, default_value_t = 8)]
    layers: usize,
    /// Replays of the captured step.
    #[arg(long, default_value_t = 50)]
    replays: usize,
    /// Hidden size: elements per all-reduce.
    #[arg(long, default_value_t = 8192)]
    hidden: usize,
    /// Eager all-reduces (each checked) before the capture.
    #[arg(long, default_value_t = 1)]
    eager: usize,
    /// Turn cudarc's event tracking off (on by default, as users have it;
    /// always off for `--backend cudarc`).
    #[arg(long)]
    no_event_tracking: bool,
    /// Read the results back before waiting for the collective (the
    /// health check then follows the copy): shows the stall
    /// `Communicator::from_devices` describes for ranks on one GPU.
    #[arg(long)]
    read_back_first: bool,
    /// Whose communicators run the loop.
    #[arg(long, value_enum, default_value_t = Backend::Intranode)]
    backend: Backend,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// `intranode::nccl::Comm`.
    Intranode,
    /// `cudarc::nccl::Comm` (NCCL).
    Cudarc,
}

/// What the loop needs of a communicator: the calls the client makes.
trait TpComm: Send {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    fn stream(&self) -> Arc<CudaStream>;
    fn all_reduce_in_place(&self, buf: &mut CudaSlice<bf16>) -> Result<(), NcclError>;
    fn check(&self) -> Result<()>;
}

impl TpComm for intranode::nccl::Comm {
    fn rank(&self) -> usize {
        intranode::nccl::Comm::rank(self)
    }
    fn world_size(&self) -> usize {
        intranode::nccl::Comm::world_size(self)
    }
    fn stream(&self) -> Arc<CudaStream> {
        intranode::nccl::Comm::stream(self)
    }
    fn all_reduce_in_place(&self, buf: &mut CudaSlice<bf16>) -> Result<(), NcclError> {
        intranode::nccl::Comm::all_reduce_in_place(self, buf, &intranode::nccl::ReduceOp::Sum)?;
        Ok(())
    }
    fn check(&self) -> Result<()> {
        Ok(self.communicator().synchronize()?)
    }
}

/// cudarc's NCCL communicator, moved to its rank's thread.
struct CudarcComm(cudarc::nccl::Comm);

// SAFETY: NCCL ties a communicator to no thread; this one is moved to one
// thread and used only there (cudarc's `Comm` is not `Send` because it
// holds a raw `ncclComm_t`).
unsafe impl Send for CudarcComm {}

impl TpComm for CudarcComm {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn world_size(&self) -> usize {
        self.0.world_size()
    }
    fn stream(&self) -> Arc<CudaStream> {
        self.0.stream()
    }
    fn all_reduce_in_place(&self, buf: &mut CudaSlice<bf16>) -> Result<(), NcclError> {
        self.0
            .all_reduce_in_place(buf, &cudarc::nccl::ReduceOp::Sum)?;
        Ok(())
    }
    fn check(&self) -> Result<()> {
        Ok(self.0.stream().synchronize()?)
    }
}

fn main() -> Result<()> {
    intranode_examples::init_logging();
    let args = Args::parse();
    let world = args.gpus.len();
    ensure!(world >= 1, "--gpus names no GPU");
    let needed = args.gpus.iter().max().map_or(1, |g| g + 1);
    if !intranode::gpu::gpus_or_skip(needed, "05_from_devices")? {
        return Ok(());
    }
    let mut streams = Vec::with_capacity(world);
    for &gpu in &args.gpus {
        let ctx = intranode::gpu::context(gpu)?;
        if args.no_event_tracking || args.backend == Backend::Cudarc {
            // SAFETY: each rank's buffers are used on its own stream only.
            unsafe { ctx.disable_event_tracking() };
        }
        streams.push(ctx.new_stream()?);
    }
    let lines = match args.backend {
        Backend::Intranode => {
            let comms = intranode::nccl::Comm::from_devices(streams)
                .map_err(|e| failure("Comm::from_devices", e))?;
            run_all(&args, comms)?
        }
        Backend::Cudarc => {
            let comms = cudarc::nccl::Comm::from_devices(streams)
                .map_err(|e| anyhow::anyhow!("cudarc Comm::from_devices: {:?}", e.0))?;
            run_all(&args, comms.into_iter().map(CudarcComm).collect())?
        }
    };
    for line in lines {
        println!("{line}");
    }
    println!(
        "05_from_devices ({:?}): all {world} ranks passed",
        args.backend
    );
    Ok(())
}

/// Runs every rank on a thread of its own; the lines of all, or the
/// failures.
fn run_all<C: TpComm>(args: &Args, comms: Vec<C>) -> Result<Vec<String>> {
    let results: Vec<Result<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|comm| s.spawn(move || run_rank(args, comm)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a rank's thread panicked")))
            })
            .collect()
    });
    let mut lines = Vec::new();
    let mut failed = false;
    for r in results {
        match r {
            Ok(line) => lines.push(line),
            Err(e) => {
                eprintln!("05_from_devices: {e:#}");
                failed = true;
            }
        }
    }
    ensure!(!failed, "a rank failed");
    Ok(lines)
}

/// An `NcclError` (a code) with the message intranode kept for it.
fn failure(what: &str, e: NcclError) -> anyhow::Error {
    let why = intranode::nccl::last_error().unwrap_or_default();
    anyhow::anyhow!("{what}: {:?}: {why}", e.0)
}

fn run_rank<C: TpComm>(args: &Args, comm: C) -> Result<String> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let stream = comm.stream();
    stream.context().bind_to_thread()?;
    let ar = |what: &str, e| failure(&format!("rank {rank}: {what}"), e);
    let n = args.hidden;
    let calls = 2 * args.layers;
    // One buffer per all-reduce of the step, in place, as the model's
    // activations are; its input written before every replay.
    let mut bufs = Vec::with_capacity(calls);
    for _ in 0..calls {
        bufs.push(stream.alloc_zeros::<bf16>(n)?);
    }
    // Warm-up outside the capture (the client does one per batch size).
    for call in 0..args.eager {
        let seed = 100_000 + call as u32;
        let mut warm = stream.clone_htod(&pattern(rank, n, seed))?;
        comm.all_reduce_in_place(&mut warm)
            .map_err(|e| ar("warm-up", e))?;
        // A wait on a peer that ran out is reported before the data.
        let got = if args.read_back_first {
            let got = stream.clone_dtoh(&warm);
            comm.check()
                .with_context(|| format!("rank {rank}, eager call {call}"))?;
            got?
        } else {
            comm.check()
                .with_context(|| format!("rank {rank}, eager call {call}"))?;
            stream.clone_dtoh(&warm)?
        };
        check(&got, world, seed, "warm-up")
            .with_context(|| format!("rank {rank}, eager call {call}"))?;
    }

    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = (|| -> Result<()> {
        for b in bufs.iter_mut() {
            comm.all_reduce_in_place(b).map_err(|e| ar("capture", e))?;
        }
        Ok(())
    })();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    captured.context("capturing the step")?;
    let graph = graph?.context("the capture made no graph")?;

    let mut per_call_us = Vec::with_capacity(args.replays);
    for replay in 0..args.replays {
        for (j, b) in bufs.iter_mut().enumerate() {
            stream.memcpy_htod(&pattern(rank, n, seed(replay, j)), b)?;
        }
        let start = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        graph.launch()?;
        let end = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        comm.check()
            .with_context(|| format!("rank {rank}, replay {replay}"))?;
        for (j, b) in bufs.iter().enumerate() {
            check(
                &stream.clone_dtoh(b)?,
                world,
                seed(replay, j),
                "graph replay",
            )
            .with_context(|| format!("rank {rank}, replay {replay}, all-reduce {j}"))?;
        }
        per_call_us.push(f64::from(start.elapsed_ms(&end)?) * 1000.0 / calls as f64);
    }
    comm.check()?;
    Ok(format!(
        "05_from_devices rank {rank}/{world} ({:?}): warm-up {} + {} replays of {calls} in-place bf16 all-reduces of {n} checked exact; {} (the uploads and checks run between replays)",
        args.backend,
        args.eager,
        args.replays,
        exact::quantiles(per_call_us),
    ))
}

fn seed(replay: usize, j: usize) -> u32 {
    (replay * 1000 + j + 1) as u32
}

/// Rank `rank`'s bf16 input of call `seed`.
fn pattern(rank: usize, n: usize, seed: u32) -> Vec<bf16> {
    exact::pattern(rank, n, seed, bf16::from_f32)
}

/// Checks a bf16 result against the sum over `world` ranks.
fn check(got: &[bf16], world: usize, seed: u32, what: &str) -> Result<()> {
    let got: Vec<f32> = got.iter().map(|v| v.to_f32()).collect();
    exact::check(&got, world, seed, what)
}
