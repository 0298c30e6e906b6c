//! 04_from_rank: a cudarc NCCL program's construction, ported by its
//! imports alone: rank 0 makes an `Id`, ships its 128 bytes to the other
//! ranks (here: processes this program starts itself, as an inference
//! server starts a daemon per GPU), and every rank calls
//! `Comm::from_rank(stream, rank, world, id)`.
//!
//! Each rank then runs a row-parallel layer's all-reduces as the client
//! does: out of place, into a freshly allocated output every call, two
//! per layer, bf16 (and a sweep of sizes in f32 and in place), eagerly,
//! then a decode step of them captured in a CUDA graph and replayed, and
//! checks every element of every call. Values are small integers, exact
//! in bf16 whatever the order of the sum. Each replay's GPU time is
//! measured with events around the graph and reported per all-reduce.
//!
//! The rank's code is written once (`rank_main!`) and compiled twice:
//! after `use intranode::nccl::...` and after `use cudarc::nccl::...`
//! (`--backend cudarc`, NCCL, for the comparison in the same program;
//! cudarc's event tracking is turned off there, as its NCCL calls cannot
//! be captured with it on).
//!
//! ```text
//! cargo build --release -p intranode-examples --example 04_from_rank
//! target/release/examples/04_from_rank --gpus 0,1,2,3
//! target/release/examples/04_from_rank --gpus 0,1,2,3 --backend cudarc
//! # several ranks on one GPU (development; intranode only, NCCL refuses):
//! INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 target/release/examples/04_from_rank --gpus 0,0
//! ```
//!
//! Exits 0 with a message and runs nothing where there is no GPU.

use std::ffi::c_char;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use clap::{Parser, ValueEnum};
use half::bf16;
use intranode_examples::exact::{check, pattern, quantiles};

#[derive(Parser, Debug, Clone)]
#[command(about = "ranks made by Comm::from_rank from an Id rank 0 shipped to them")]
struct Args {
    /// The GPU of each rank, e.g. `0,1,2,3` (a GPU may repeat with
    /// INTRANODE_ALLOW_OVERLAPPING_DEVICES=1).
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    gpus: Vec<usize>,
    /// Decoder layers per step (two all-reduces each).
    #[arg(long, default_value_t = 32)]
    layers: usize,
    /// Eager steps of the layer loop.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Replays of the graph of one step.
    #[arg(long, default_value_t = 50)]
    replays: usize,
    /// Hidden size: elements per all-reduce of the layer loop.
    #[arg(long, default_value_t = 4096)]
    hidden: usize,
    /// Whose communicators run the loop.
    #[arg(long, value_enum, default_value_t = Backend::Intranode)]
    backend: Backend,
    /// Set by rank 0 for the ranks it starts: this process's rank.
    #[arg(long, hide = true)]
    rank: Option<usize>,
    /// Set by rank 0 for the ranks it starts: the id, as hex.
    #[arg(long, hide = true)]
    id: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// `intranode::nccl::Comm`.
    Intranode,
    /// `cudarc::nccl::Comm` (NCCL).
    Cudarc,
}

fn main() -> Result<()> {
    intranode_examples::init_logging();
    let args = Args::parse();
    let world = args.gpus.len();
    ensure!(world >= 1, "--gpus names no GPU");
    let needed = args.gpus.iter().max().map_or(1, |g| g + 1);
    if !intranode::gpu::gpus_or_skip(needed, "04_from_rank")? {
        return Ok(());
    }
    match (args.rank, &args.id) {
        (Some(rank), Some(hex)) => run_rank(&args, rank, world, from_hex(hex)?),
        (None, None) => {
            // Rank 0 makes the id before it starts the others.
            let id = match args.backend {
                Backend::Intranode => with_intranode::new_id()?,
                Backend::Cudarc => with_cudarc::new_id()?,
            };
            run_root(&args, world, id)
        }
        _ => bail!("--rank and --id come together"),
    }
}

fn run_rank(args: &Args, rank: usize, world: usize, id: [c_char; 128]) -> Result<()> {
    match args.backend {
        Backend::Intranode => with_intranode::rank_main(args, rank, world, id),
        Backend::Cudarc => with_cudarc::rank_main(args, rank, world, id),
    }
}

/// Rank 0: starts the other ranks with the id, runs its own part, then
/// waits for theirs.
fn run_root(args: &Args, world: usize, id: [c_char; 128]) -> Result<()> {
    let hex = to_hex(&id);
    let exe = std::env::current_exe()?;
    let gpus: Vec<String> = args.gpus.iter().map(ToString::to_string).collect();
    let backend = match args.backend {
        Backend::Intranode => "intranode",
        Backend::Cudarc => "cudarc",
    };
    let mut children = Vec::new();
    for rank in 1..world {
        let child = Command::new(&exe)
            .args(["--gpus", &gpus.join(",")])
            .args(["--layers", &args.layers.to_string()])
            .args(["--steps", &args.steps.to_string()])
            .args(["--replays", &args.replays.to_string()])
            .args(["--hidden", &args.hidden.to_string()])
            .args(["--backend", backend])
            .args(["--rank", &rank.to_string(), "--id", &hex])
            .spawn()
            .with_context(|| format!("starting rank {rank}"))?;
        children.push((rank, child));
    }
    let mine = run_rank(args, 0, world, id);
    let mut failed = Vec::new();
    for (rank, mut child) in children {
        let status = child.wait()?;
        if !status.success() {
            failed.push(format!("rank {rank}: {status}"));
        }
    }
    mine?;
    ensure!(failed.is_empty(), "ranks failed: {}", failed.join("; "));
    println!(
        "04_from_rank ({:?}): all {world} ranks passed",
        args.backend
    );
    Ok(())
}

/// One rank's program, as a cudarc NCCL program writes it; expanded
/// after each backend's imports, which are all that differs.
macro_rules! rank_main {
    () => {
        /// Rank 0's id, as the 128 bytes it ships.
        pub fn new_id() -> Result<[c_char; 128]> {
            let id = Id::new().map_err(|e| anyhow::anyhow!("Id::new: {e:?}"))?;
            Ok(*id.internal())
        }

        /// A row-parallel layer's all-reduce, as the client writes it.
        fn all_reduce<T: NcclType>(
            comm: &Comm,
            x: &CudaSlice<T>,
            y: &mut CudaSlice<T>,
        ) -> Result<(), NcclError> {
            comm.all_reduce(x, y, &ReduceOp::Sum)?;
            Ok(())
        }

        /// One checked call of the sweep: rank `rank`'s values of call
        /// `seed` made into `T`, all-reduced in place or into a fresh
        /// output, read back as f32.
        #[allow(clippy::too_many_arguments)]
        fn one_call<T: NcclType + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
            comm: &Comm,
            rank: usize,
            n: usize,
            in_place: bool,
            seed: u32,
            what: &str,
            make: impl Fn(f32) -> T,
            back: impl Fn(T) -> f32,
        ) -> Result<Vec<f32>> {
            let stream = comm.stream();
            let mut x = stream.clone_htod(&pattern(rank, n, seed, make))?;
            let out = if in_place {
                comm.all_reduce_in_place(&mut x, &ReduceOp::Sum)
                    .map_err(|e| failure(rank, what, e))?;
                x
            } else {
                let mut y = stream.alloc_zeros::<T>(n)?;
                all_reduce(comm, &x, &mut y).map_err(|e| failure(rank, what, e))?;
                y
            };
            settle(comm)?;
            Ok(stream.clone_dtoh(&out)?.into_iter().map(back).collect())
        }

        pub fn rank_main(
            args: &Args,
            rank: usize,
            world: usize,
            id: [c_char; 128],
        ) -> Result<()> {
            let id = Id::uninit(id);
            let ctx = intranode::gpu::context(args.gpus[rank])?;
            prepare(&ctx);
            let stream = ctx.new_stream()?;
            let comm = Comm::from_rank(stream.clone(), rank, world, id)
                .map_err(|e| failure(rank, "Comm::from_rank", e))?;

            // A sweep of sizes, out of place and in place, bf16 and f32.
            let mut calls = 0;
            for n in [1usize, 7, 1000, 4096, 65_536, 1 << 20, (4 << 20) + 3] {
                for in_place in [false, true] {
                    let seed = calls as u32;
                    let what = format!("{n} bf16, in place {in_place}");
                    let got = one_call(&comm, rank, n, in_place, seed, &what, bf16::from_f32, bf16::to_f32)?;
                    check(&got, world, seed, &what).with_context(|| format!("rank {rank}"))?;
                    let what = format!("{n} f32, in place {in_place}");
                    let got = one_call(&comm, rank, n, in_place, seed + 1, &what, |v| v, |v| v)?;
                    check(&got, world, seed + 1, &what).with_context(|| format!("rank {rank}"))?;
                    calls += 2;
                }
            }

            // The client's loop: two out-of-place all-reduces per layer
            // into a fresh output each.
            let per_step = 2 * args.layers;
            for step in 0..args.steps {
                let mut outs = Vec::with_capacity(per_step);
                for layer in 0..per_step {
                    let seed = (1000 + step * per_step + layer) as u32;
                    let x = stream.clone_htod(&pattern(rank, args.hidden, seed, bf16::from_f32))?;
                    let mut y = stream.alloc_zeros::<bf16>(args.hidden)?;
                    all_reduce(&comm, &x, &mut y).map_err(|e| failure(rank, "layer loop", e))?;
                    outs.push((seed, y));
                }
                settle(&comm)?;
                for (seed, y) in &outs {
                    let got: Vec<f32> = stream.clone_dtoh(y)?.iter().map(|v| v.to_f32()).collect();
                    check(&got, world, *seed, "layer loop")
                        .with_context(|| format!("rank {rank}, step {step}"))?;
                }
                calls += per_step;
            }

            // The same step captured in a CUDA graph: the inputs written
            // before each replay, the outputs allocated inside the
            // capture (graph allocations; uninitialized, as the
            // all-reduce writes every element).
            let mut xs = Vec::with_capacity(per_step);
            for _ in 0..per_step {
                xs.push(stream.alloc_zeros::<bf16>(args.hidden)?);
            }
            stream.synchronize()?;
            stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
            let captured = (|| -> Result<Vec<CudaSlice<bf16>>> {
                let mut ys = Vec::with_capacity(per_step);
                for x in &xs {
                    // SAFETY: the all-reduce writes every element before
                    // anything reads one.
                    let mut y = unsafe { stream.alloc::<bf16>(args.hidden) }?;
                    all_reduce(&comm, x, &mut y).map_err(|e| failure(rank, "capture", e))?;
                    ys.push(y);
                }
                Ok(ys)
            })();
            let graph = stream.end_capture(
                CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
            );
            let ys = captured.context("capturing the step")?;
            let graph = graph?.context("the capture made no graph")?;
            let mut per_call_us = Vec::with_capacity(args.replays);
            for replay in 0..args.replays {
                let seed = |j: usize| (1_000_000 + replay * per_step + j) as u32;
                for (j, x) in xs.iter_mut().enumerate() {
                    stream.memcpy_htod(&pattern(rank, args.hidden, seed(j), bf16::from_f32), x)?;
                }
                let start = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                graph.launch()?;
                let end = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                settle(&comm)?;
                for (j, y) in ys.iter().enumerate() {
                    let got: Vec<f32> = stream.clone_dtoh(y)?.iter().map(|v| v.to_f32()).collect();
                    check(&got, world, seed(j), "graph replay")
                        .with_context(|| format!("rank {rank}, replay {replay}, all-reduce {j}"))?;
                }
                per_call_us.push(f64::from(start.elapsed_ms(&end)?) * 1000.0 / per_step as f64);
                calls += per_step;
            }
            drop(graph);
            drop(ys);
            settle(&comm)?;
            println!(
                "04_from_rank rank {rank}/{world} (GPU {}, {:?}): {calls} all-reduces checked exact; {}",
                args.gpus[rank],
                args.backend,
                quantiles(per_call_us),
            );
            Ok(())
        }
    };
}

/// The program after intranode's imports.
mod with_intranode {
    use super::*;
    use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
    use cudarc::driver::{CudaContext, CudaSlice};
    use intranode::nccl::result::NcclError;
    use intranode::nccl::{Comm, Id, NcclType, ReduceOp};

    /// cudarc's defaults, as applications have them.
    fn prepare(_ctx: &std::sync::Arc<CudaContext>) {}

    /// Waits for the rank's collectives, reporting a wait on a peer that
    /// ran out before the data is looked at.
    fn settle(comm: &Comm) -> Result<()> {
        Ok(comm.communicator().synchronize()?)
    }

    /// An `NcclError` (a code) with the message intranode kept for it.
    fn failure(rank: usize, what: &str, e: NcclError) -> anyhow::Error {
        let why = intranode::nccl::last_error().unwrap_or_default();
        anyhow::anyhow!("rank {rank}: {what}: {:?}: {why}", e.0)
    }

    rank_main!();
}

/// The same program after cudarc's imports.
mod with_cudarc {
    use super::*;
    use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
    use cudarc::driver::{CudaContext, CudaSlice};
    use cudarc::nccl::result::NcclError;
    use cudarc::nccl::{Comm, Id, NcclType, ReduceOp};

    /// Event tracking off: cudarc's NCCL calls cannot be captured with it
    /// on (buffers written before the capture carry events recorded
    /// outside it).
    fn prepare(ctx: &std::sync::Arc<CudaContext>) {
        // SAFETY: every buffer of this rank is used on its one stream.
        unsafe { ctx.disable_event_tracking() };
    }

    fn settle(comm: &Comm) -> Result<()> {
        Ok(comm.stream().synchronize()?)
    }

    fn failure(rank: usize, what: &str, e: NcclError) -> anyhow::Error {
        anyhow::anyhow!("rank {rank}: {what}: {:?}", e.0)
    }

    rank_main!();
}

fn to_hex(bytes: &[c_char; 128]) -> String {
    bytes.iter().map(|&b| format!("{:02x}", b as u8)).collect()
}

fn from_hex(hex: &str) -> Result<[c_char; 128]> {
    ensure!(
        hex.len() == 256,
        "an id is 256 hex digits, got {}",
        hex.len()
    );
    let mut out = [0 as c_char; 128];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)? as c_char;
    }
    Ok(out)
}
