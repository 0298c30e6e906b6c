//! The check suite's free-running stresses, for every
//! algorithm and auto at one size of each class (Lamport one-shot, Lamport
//! two-shot, one-shot, several symmetric buffers):
//!
//! - exactness: a graph of [`K`] back-to-back calls, each reducing its own
//!   input into its own output, a rank chosen at random spinning 0 to 20 us
//!   before each call; replayed with no host step between replays; the
//!   inputs are written and every output element of every call of every
//!   replay is checked on the GPU (the soak's kernels), so a call that
//!   read a stale or half-written buffer shows up as a mismatch;
//! - the slow mode: the same calls timed by stamps, failing when any call
//!   (net of the injected spin) takes more than [`SLOW_FACTOR`] times the
//!   median: a run that falls into a slow mode fails every device run.

use anyhow::{Result, bail};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use half::bf16;
use intranode::AllReduceAlgo;
use intranode::kernels::{SoakCall, TestKernelModule};
use intranode::types::ReduceOp;

use intranode_harness::data;
use intranode_harness::free::{self, Dist, Timer};
use intranode_harness::rank::Rank;

/// Calls per graph.
const K: usize = 16;
/// A call slower than this many medians fails the check.
pub const SLOW_FACTOR: f64 = 50.0;

/// What the stresses ran, for the suite's summary line.
pub struct Report {
    pub configs: usize,
    pub checked_calls: usize,
    pub timed_calls: usize,
    /// The largest max / median seen.
    pub worst_ratio: f64,
}

/// One size of each class: Lamport one-shot, Lamport two-shot (and
/// one-shot / two-shot's middle), past the Lamport buffers' slot on 2
/// ranks, several symmetric buffers.
fn sizes_bytes(r: &Rank) -> Vec<usize> {
    let buffer = r.comm.intra().map_or(10 << 20, |c| c.buffer_bytes());
    vec![4 << 10, 256 << 10, 2 << 20, 12 << 20, 2 * buffer + 4096]
}

pub fn run(
    r: &mut Rank,
    algos: &[Option<AllReduceAlgo>],
    seed: u64,
    replays: usize,
) -> Result<Report> {
    let module = TestKernelModule::load(&r.ctx)?;
    let mut timer = Timer::new(r, replays.max(1) * (K + 1) + 64)?;
    let (me, world) = (r.rank(), r.world());
    let mut report = Report {
        configs: 0,
        checked_calls: 0,
        timed_calls: 0,
        worst_ratio: 0.0,
    };
    for (si, bytes) in sizes_bytes(r).into_iter().enumerate() {
        let elems = bytes / 2;
        for (ai, &algo) in algos.iter().enumerate() {
            let name = algo.map_or("auto", AllReduceAlgo::name);
            let config_seed = data::mix(seed ^ ((si as u64) << 32) ^ ai as u64);
            let calls: Vec<SoakCall> = (0..K)
                .map(|j| SoakCall {
                    seed,
                    call: ((si * 64 + ai) * K + j) as u64,
                    rank: me,
                    world,
                    op: ReduceOp::Sum,
                })
                .collect();
            let mut inputs = (0..K)
                .map(|_| r.stream.alloc_zeros::<bf16>(elems))
                .collect::<Result<Vec<_>, _>>()?;
            let mut outputs = (0..K)
                .map(|_| r.stream.alloc_zeros::<bf16>(elems))
                .collect::<Result<Vec<_>, _>>()?;
            let mut mismatches = r.stream.alloc_zeros::<u32>(K)?;
            let spin = |j: usize| match free::skew_of(config_seed, world, j) {
                (rank, ns) if rank == me => ns,
                _ => 0,
            };
            let net = |j: usize| free::skew_of(config_seed, world, j).1 as f64 / 1000.0;

            // Exactness: fill, K skewed calls back to back, check, in one
            // graph replayed free.
            r.stream.synchronize()?;
            r.stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
            let body = (|| -> Result<()> {
                for (j, call) in calls.iter().enumerate() {
                    module.soak_fill(&r.stream, &mut inputs[j], Some(&mut outputs[j]), call)?;
                }
                for j in 0..K {
                    let ns = spin(j);
                    if ns > 0 {
                        timer.spin(r, ns)?;
                    }
                    r.all_reduce(&inputs[j], &mut outputs[j], ReduceOp::Sum, algo)?;
                }
                for (j, call) in calls.iter().enumerate() {
                    module.soak_check(&r.stream, &outputs[j], call, &mut mismatches, j)?;
                }
                Ok(())
            })();
            let graph = r.stream.end_capture(
                CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
            );
            body?;
            let Some(graph) = graph? else {
                bail!("capture produced no graph");
            };
            for _ in 0..replays {
                graph.launch()?;
            }
            let counts = r.stream.clone_dtoh(&mismatches)?;
            r.stream.synchronize()?;
            drop(graph);
            if let Some((j, n)) = counts.iter().enumerate().find(|(_, n)| **n != 0) {
                bail!(
                    "rank {me}: {name} at {bytes} bytes, back to back with skew: call {j} of {K} had {n} wrong elements over {replays} replays"
                );
            }
            report.checked_calls += K * replays;

            // The slow mode: the same calls on fixed inputs, timed.
            let mut call =
                |r: &Rank, j: usize| r.all_reduce(&inputs[j], &mut outputs[j], ReduceOp::Sum, algo);
            let (us, _) = free::graph_mode(r, K, replays, &mut call, &spin, &net, &mut timer)?;
            let mine = Dist::of(us);
            let all: Vec<Option<Dist>> = r.all_gather(&mine)?;
            let Some(d) = Dist::worst(&all.into_iter().flatten().collect::<Vec<_>>()) else {
                bail!("{name} at {bytes} bytes: no timed calls");
            };
            report.timed_calls += d.calls;
            let ratio = d.max_us / d.median_us.max(1e-3);
            report.worst_ratio = report.worst_ratio.max(ratio);
            // The schedule fuzzer's delays are slow calls by design.
            if !intranode::kernels::schedule_fuzz()
                && d.max_us > SLOW_FACTOR * d.median_us.max(1e-3)
            {
                bail!(
                    "{name} at {bytes} bytes, back to back with skew: a call took {:.1} us, {ratio:.0} x the median {:.2} us (limit {SLOW_FACTOR} x): a slow mode",
                    d.max_us,
                    d.median_us
                );
            }
            report.configs += 1;
        }
    }
    Ok(report)
}
