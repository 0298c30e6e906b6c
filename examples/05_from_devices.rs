//! 05_from_devices: one process, a thread per GPU, as single-process
//! tensor-parallel servers run: `Comm::from_devices(streams)` makes every
//! rank's communicator at once, each thread takes its own (a `Comm` is
//! `Send`), warms up with one all-reduce, then captures a decode step's
//! in-place bf16 all-reduces (two per layer) into a CUDA graph on its
//! compute stream and replays it, checking every element of every replay.
//!
//! ```text
//! cargo build --release -p intranode-examples --example 05_from_devices
//! target/release/examples/05_from_devices --gpus 0,1,2,3
//! ```
//!
//! A GPU per rank: two ranks of one process on one GPU are refused (see
//! `Communicator::from_devices`); 04_from_rank runs several ranks on one
//! GPU, a process each.
//!
//! Exits 0 with a message and runs nothing where there is no GPU.

use anyhow::{Context, Result, ensure};
use clap::Parser;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use half::bf16;
// The port: this line was `use cudarc::nccl::{Comm, ReduceOp};`.
use intranode::nccl::{Comm, ReduceOp};

#[derive(Parser, Debug)]
#[command(about = "one process, a thread per GPU: Comm::from_devices, graph-captured all-reduces")]
struct Args {
    /// The GPU of each rank, e.g. `0,1,2,3`, a GPU each.
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
    /// Turn cudarc's event tracking off (on by default, as users have it).
    #[arg(long)]
    no_event_tracking: bool,
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
        if args.no_event_tracking {
            // SAFETY: each rank's buffers are used on its own stream only.
            unsafe { ctx.disable_event_tracking() };
        }
        streams.push(ctx.new_stream()?);
    }
    let comms = Comm::from_devices(streams).map_err(|e| {
        anyhow::anyhow!(
            "Comm::from_devices: {e:?}: {:?}",
            intranode::nccl::last_error()
        )
    })?;
    let results: Vec<Result<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|comm| {
                let args = &args;
                s.spawn(move || run_rank(args, comm))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a rank's thread panicked")))
            })
            .collect()
    });
    let mut failed = false;
    for r in results {
        match r {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("05_from_devices: {e:#}");
                failed = true;
            }
        }
    }
    ensure!(!failed, "a rank failed");
    println!("05_from_devices: all {world} ranks passed");
    Ok(())
}

fn run_rank(args: &Args, comm: Comm) -> Result<String> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let stream = comm.stream();
    stream.context().bind_to_thread()?;
    let nccl = |e| anyhow::anyhow!("rank {rank}: {e:?}: {:?}", intranode::nccl::last_error());
    let n = args.hidden;
    let calls = 2 * args.layers;
    // One buffer per all-reduce of the step, in place, as the model's
    // activations are; its input written before every replay.
    let mut bufs = Vec::with_capacity(calls);
    for _ in 0..calls {
        bufs.push(stream.alloc_zeros::<bf16>(n)?);
    }
    // Warm-up outside the capture (the client does one per batch size).
    let mut warm = stream.clone_htod(&pattern(rank, n, 0))?;
    comm.all_reduce_in_place(&mut warm, &ReduceOp::Sum)
        .map_err(nccl)?;
    check(&stream.clone_dtoh(&warm)?, world, 0, "warm-up")
        .with_context(|| format!("rank {rank}"))?;

    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = (|| -> Result<()> {
        for b in bufs.iter_mut() {
            comm.all_reduce_in_place(b, &ReduceOp::Sum).map_err(nccl)?;
        }
        Ok(())
    })();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    captured.context("capturing the step")?;
    let graph = graph?.context("the capture made no graph")?;

    for replay in 0..args.replays {
        for (j, b) in bufs.iter_mut().enumerate() {
            stream.memcpy_htod(&pattern(rank, n, seed(replay, j)), b)?;
        }
        graph.launch()?;
        for (j, b) in bufs.iter().enumerate() {
            check(
                &stream.clone_dtoh(b)?,
                world,
                seed(replay, j),
                "graph replay",
            )
            .with_context(|| format!("rank {rank}, replay {replay}, all-reduce {j}"))?;
        }
    }
    comm.synchronize()?;
    let path = comm
        .intra_reason()
        .map_or("intranode kernels".to_string(), |why| {
            format!("NCCL only ({why})")
        });
    Ok(format!(
        "05_from_devices rank {rank}/{world} (GPU {}): warm-up + {} replays of {calls} in-place bf16 all-reduces of {n} checked exact, {path}",
        comm.ordinal(),
        args.replays
    ))
}

fn seed(replay: usize, j: usize) -> u32 {
    (replay * 1000 + j + 1) as u32
}

/// Small integers: every partial sum is exact in bf16.
fn value(rank: usize, i: usize, seed: u32) -> f32 {
    ((i as u32)
        .wrapping_mul(7)
        .wrapping_add(seed * 3 + rank as u32 * 5)
        % 9) as f32
        - 4.0
}

fn pattern(rank: usize, n: usize, seed: u32) -> Vec<bf16> {
    (0..n)
        .map(|i| bf16::from_f32(value(rank, i, seed)))
        .collect()
}

fn check(got: &[bf16], world: usize, seed: u32, what: &str) -> Result<()> {
    for (i, g) in got.iter().enumerate() {
        let want: f32 = (0..world).map(|r| value(r, i, seed)).sum();
        ensure!(
            g.to_f32() == want,
            "{what}: element {i}: got {g}, want {want}"
        );
    }
    Ok(())
}
