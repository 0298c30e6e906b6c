//! 02_cuda_graph: a decode-shaped loop captured into a CUDA graph, with
//! cudarc's default settings (event tracking on, two streams), one
//! process per GPU under `intranode-run`.
//!
//! Each rank
//! 1. makes a context as cudarc does by default and two streams: `upload`
//!    (where the host's data lands, as a model's inputs would) and the
//!    communicator's own;
//! 2. eagerly, reduces a buffer that `upload` writes only after a 2 ms
//!    kernel: cudarc's event tracking makes the communicator's stream wait
//!    for that write, with no join by hand, and the result is checked;
//! 3. captures `--steps` steps of (a `--busy-us` kernel standing in for a
//!    GEMM, then an all-reduce of `--elems` f32) on the communicator's
//!    stream; the inputs are written on `upload` before the capture, still
//!    in flight behind a 5 ms kernel when it starts (NOTE [capture and
//!    event tracking] in `host/src/intra/tracked.rs`);
//! 4. replays the graph `--replays` times; before each replay the host
//!    writes fresh inputs on `upload` and the communicator's stream joins
//!    it; after each replay it synchronizes, asks the communicator for
//!    failed waits (`Communicator::check`) and checks every output;
//! 5. exits non-zero on any wrong element or error.
//!
//! ```sh
//! cargo build --release -p intranode-launcher -p intranode-examples --example 02_cuda_graph
//! intranode-run --nproc-per-node 2 -- target/release/examples/02_cuda_graph
//! ```

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, CudaStream};
use cudarc::nccl::ReduceOp;
use intranode::Communicator;
use intranode::dist_env::DistEnv;
use intranode::kernels::TestKernelModule;
use intranode_store::Store;

#[derive(Parser, Debug)]
#[command(
    about = "a decode-shaped loop in a CUDA graph, cudarc defaults (run under intranode-run)"
)]
struct Args {
    /// Steps (busy kernel + all-reduce) in the graph.
    #[arg(long, default_value_t = 8)]
    steps: usize,
    /// Replays of the graph.
    #[arg(long, default_value_t = 50)]
    replays: usize,
    /// Elements of each all-reduce (f32): 8 x 4096, a batch of 8 tokens
    /// of a hidden size 4096 model.
    #[arg(long, default_value_t = 8 * 4096)]
    elems: usize,
    /// Length of the kernel before each all-reduce, in microseconds.
    #[arg(long, default_value_t = 20)]
    busy_us: u64,
}

/// Input element `i` of step `j` on `rank` at replay `replay`: a small
/// integer, so every sum is exact in f32 whatever the order.
fn input(rank: usize, j: usize, replay: usize, i: usize) -> f32 {
    ((rank * 3 + j * 5 + replay * 7 + i) % 17) as f32 - 8.0
}

fn expected(world: usize, j: usize, replay: usize, i: usize) -> f32 {
    (0..world).map(|r| input(r, j, replay, i)).sum()
}

fn check(out: &[f32], world: usize, j: usize, replay: usize, what: &str) -> Result<()> {
    for (i, &got) in out.iter().enumerate() {
        let want = expected(world, j, replay, i);
        if got != want {
            bail!("{what}: step {j}, element {i}: got {got}, want {want}");
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    intranode_examples::init_logging();
    let args = Args::parse();
    let env =
        DistEnv::from_env().context("reading the rank environment (run under intranode-run)")?;
    let (rank, world) = (env.rank, env.world_size);
    let device = env.device.unwrap_or(env.local_rank);
    if !intranode::gpu::gpus_or_skip(device + 1, "02_cuda_graph")? {
        return Ok(());
    }
    // intranode-run's store, or torchrun's TCPStore (NOTE [store protocol
    // decision] in intranode_dist_env).
    let store: Arc<dyn Store> =
        intranode_store::connect_env(&env).context("joining the rendezvous store")?;
    // cudarc's defaults: with two streams the context tracks every
    // buffer's reads and writes with events.
    let ctx = intranode::gpu::context(device)?;
    let upload = ctx.new_stream()?;
    let stream = ctx.new_stream()?;
    let comm = Communicator::new(stream.clone(), store, rank, world)
        .with_context(|| format!("rank {rank}: building the communicator"))?;
    let module = TestKernelModule::load(&ctx)?;
    let n = args.elems;

    // 2. Eager, across streams: `upload` writes the input only after a
    // 2 ms kernel; the all-reduce on the communicator's stream must wait.
    let mut x = upload.alloc_zeros::<f32>(n)?;
    let mut y = stream.alloc_zeros::<f32>(n)?;
    module.spin(&upload, 2_000_000)?;
    let host: Vec<f32> = (0..n).map(|i| input(rank, 0, 0, i)).collect();
    upload.memcpy_htod(&host, &mut x)?;
    comm.all_reduce(&x, &mut y, &ReduceOp::Sum)?.synchronize()?;
    check(
        &stream.clone_dtoh(&y)?,
        world,
        0,
        0,
        "eager, input written on another stream",
    )?;

    // 3. Capture. Inputs and outputs are written before the capture, on
    // `upload` and on the communicator's stream.
    let mut inputs: Vec<CudaSlice<f32>> = (0..args.steps)
        .map(|_| upload.alloc_zeros::<f32>(n))
        .collect::<Result<_, _>>()?;
    let mut outputs: Vec<CudaSlice<f32>> = (0..args.steps)
        .map(|_| stream.alloc_zeros::<f32>(n))
        .collect::<Result<_, _>>()?;
    // The first inputs land only after a 5 ms kernel on `upload`: still in
    // flight when the capture starts, so the graph must wait for them.
    let mut staging: Vec<CudaSlice<f32>> = (0..args.steps)
        .map(|_| upload.alloc_zeros::<f32>(n))
        .collect::<Result<_, _>>()?;
    fill(
        &upload,
        &module,
        &mut staging,
        &mut inputs,
        rank,
        0,
        5_000_000,
    )?;
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = (|| -> Result<()> {
        for (x, y) in inputs.iter().zip(outputs.iter_mut()) {
            module.spin(&stream, args.busy_us * 1000)?;
            comm.all_reduce(x, y, &ReduceOp::Sum)?;
        }
        Ok(())
    })();
    // End the capture whatever happened, so its error is the one we see.
    let graph = stream
        .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    captured.context("capturing the steps")?;
    let graph = graph?.context("the capture made no graph")?;

    // 4. Replays, each on fresh inputs, checked.
    for replay in 0..args.replays {
        if replay > 0 {
            fill(&upload, &module, &mut staging, &mut inputs, rank, replay, 0)?;
        }
        stream.join(&upload)?;
        graph.launch()?;
        stream.synchronize()?;
        comm.check()
            .with_context(|| format!("rank {rank}: replay {replay}"))?;
        for (j, y) in outputs.iter().enumerate() {
            check(&stream.clone_dtoh(y)?, world, j, replay, "graph replay")?;
        }
    }
    comm.synchronize()?;
    println!(
        "02_cuda_graph rank {rank}/{world}: eager cross-stream all-reduce exact; {} replays of a graph of {} steps ({} us kernel + all-reduce of {n} f32, {}) exact, no failed wait",
        args.replays,
        args.steps,
        args.busy_us,
        comm.algo_for::<f32>(n, &ReduceOp::Sum).name()
    );
    Ok(())
}

/// Writes replay `replay`'s inputs on `upload`: from the host into
/// `staging`, then (after a kernel of `delay_ns`, if any) into `inputs`.
fn fill(
    upload: &Arc<CudaStream>,
    module: &TestKernelModule,
    staging: &mut [CudaSlice<f32>],
    inputs: &mut [CudaSlice<f32>],
    rank: usize,
    replay: usize,
    delay_ns: u64,
) -> Result<()> {
    for (j, s) in staging.iter_mut().enumerate() {
        let host: Vec<f32> = (0..s.len()).map(|i| input(rank, j, replay, i)).collect();
        upload.memcpy_htod(&host, s)?;
    }
    if delay_ns > 0 {
        module.spin(upload, delay_ns)?;
    }
    for (s, x) in staging.iter().zip(inputs.iter_mut()) {
        upload.memcpy_dtod(s, x)?;
    }
    Ok(())
}
