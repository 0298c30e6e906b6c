//! The check suite's hog stage: every all-reduce form, eager and in a CUDA
//! graph, each call started while a "hog" on another stream of the same
//! rank (blocks of 1024 threads, two per SM, spinning for `--hog-us`)
//! holds the SMs. The hog starts at a different moment on every rank, so
//! the ranks' grids start late, a few blocks at a time and apart; with
//! several ranks on one GPU under MPS their grids also compete for the
//! SMs the hogs leave (NOTE [co-residency] in
//! `host/src/intra/residency.rs`). Every output element is checked against
//! the f64 reference; a wait that runs out fails the stage with the GPU's
//! report.

use anyhow::{Context, Result, anyhow};
use cudarc::driver::CudaSlice;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use half::bf16;
use intranode::AllReduceAlgo;
use intranode::kernels::TestKernelModule;
use intranode::types::ReduceOp;
use intranode_harness::data;
use intranode_harness::rank::Rank;

/// Message sizes in elements: the Lamport one-shot's range, the two-shot's
/// and push form's (1 Mi bf16 is where ranks sharing a GPU deadlocked).
const SIZES: [usize; 3] = [4095, 65_537, 1 << 20];
/// Threads of a hog block: two such blocks fill an SM's threads.
const HOG_THREADS: u32 = 1024;

/// What the stage ran, for the summary line.
pub struct Report {
    pub eager_calls: usize,
    pub graph_replays: usize,
}

/// Runs `rounds` eager rounds and `rounds` graph replays per form of
/// `algos` (auto for `None`), each under a hog of `hog_us` microseconds.
pub fn run(
    r: &mut Rank,
    algos: &[Option<AllReduceAlgo>],
    seed: u64,
    rounds: usize,
    hog_us: u64,
) -> Result<Report> {
    let module = TestKernelModule::load(&r.ctx).context("loading the hog kernel")?;
    let side = r.ctx.new_stream().context("the hog's stream")?;
    let sms = r.comm.intra().map_or(132, |c| c.residency().sms) as u32;
    let hog_blocks = 2 * sms;
    // Each rank's hog ends at its own time: 1 to 2 times `hog_us`.
    let hog_ns =
        |call: u64| hog_us * 1000 + (hog_us * 1000 * ((call * 7 + r.rank() as u64 * 13) % 16)) / 16;
    let ops = [ReduceOp::Sum, ReduceOp::Max];
    let mut ins: Vec<CudaSlice<bf16>> = Vec::new();
    let mut outs: Vec<CudaSlice<bf16>> = Vec::new();
    for &n in &SIZES {
        ins.push(r.stream.alloc_zeros::<bf16>(n)?);
        outs.push(r.stream.alloc_zeros::<bf16>(n)?);
    }
    let mut report = Report {
        eager_calls: 0,
        graph_replays: 0,
    };
    let mut call = 0u64;
    for &algo in algos {
        let name = algo.map_or("auto", AllReduceAlgo::name);
        // Eager: each round's calls queued behind nothing but the hog.
        for round in 0..rounds {
            call += 1;
            fill(r, seed, call, &mut ins, &mut outs)?;
            r.stream.synchronize()?;
            module.hog(&side, hog_ns(call), hog_blocks, HOG_THREADS)?;
            for (k, (d_in, d_out)) in ins.iter().zip(outs.iter_mut()).enumerate() {
                r.all_reduce(d_in, d_out, ops[k % ops.len()], algo)?;
            }
            check(r, seed, call, &outs, &ops)
                .map_err(|e| anyhow!("hog, {name}, eager round {round}: {e}"))?;
            report.eager_calls += SIZES.len();
        }
        side.synchronize()?;
        // The same calls captured in a graph, replayed under the hog.
        r.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .context("begin capture")?;
        for (k, (d_in, d_out)) in ins.iter().zip(outs.iter_mut()).enumerate() {
            r.all_reduce(d_in, d_out, ops[k % ops.len()], algo)?;
        }
        let graph = r
            .stream
            .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
            .context("end capture")?
            .context("capture produced no graph")?;
        for replay in 0..rounds {
            call += 1;
            fill(r, seed, call, &mut ins, &mut outs)?;
            r.stream.synchronize()?;
            module.hog(&side, hog_ns(call), hog_blocks, HOG_THREADS)?;
            graph.launch().context("graph launch")?;
            check(r, seed, call, &outs, &ops)
                .map_err(|e| anyhow!("hog, {name}, graph replay {replay}: {e}"))?;
            report.graph_replays += 1;
        }
        side.synchronize()?;
    }
    Ok(report)
}

/// Fresh inputs for `call` and poisoned outputs, on the rank's stream.
fn fill(
    r: &Rank,
    seed: u64,
    call: u64,
    ins: &mut [CudaSlice<bf16>],
    outs: &mut [CudaSlice<bf16>],
) -> Result<()> {
    for (k, d_in) in ins.iter_mut().enumerate() {
        let host = data::inputs::<bf16>(seed, call * 4 + k as u64, r.rank(), SIZES[k]);
        r.stream.memcpy_htod(&host, d_in)?;
    }
    for d_out in outs.iter_mut() {
        let poison = vec![data::poison::<bf16>(); d_out.len()];
        r.stream.memcpy_htod(&poison, d_out)?;
    }
    Ok(())
}

/// Every output of `call` against the reference, after the GPU's error
/// word (a wait that ran out leaves outputs unfinished: that is its
/// report, not a wrong value).
fn check(r: &Rank, seed: u64, call: u64, outs: &[CudaSlice<bf16>], ops: &[ReduceOp]) -> Result<()> {
    let mut host = Vec::with_capacity(outs.len());
    for d_out in outs {
        host.push(r.stream.clone_dtoh(d_out)?);
    }
    r.stream.synchronize()?;
    r.comm.check()?;
    for (k, out) in host.iter().enumerate() {
        data::verify(
            out,
            seed,
            call * 4 + k as u64,
            r.world(),
            ops[k % ops.len()],
        )
        .map_err(|e| anyhow!("all-reduce of {} elements: {e}", SIZES[k]))?;
    }
    Ok(())
}
