//! The check suite's CUDA-graph stage: 10 all-reduces of awkward sizes,
//! every form of ours in turn (or auto), captured once and replayed with
//! fresh inputs, every output checked against the f64 reference.

use anyhow::{Context, Result};
use cudarc::nccl::NcclType;
use intranode::AllReduceAlgo;
use intranode::kernels::DType;
use intranode::types::ReduceOp;
use intranode_harness::data;
use intranode_harness::rank::Rank;

use crate::check::{CheckArgs, upload};

/// Captures 10 all-reduces in a CUDA graph and replays it with new inputs.
pub fn run<T: DType + NcclType>(
    r: &mut Rank,
    args: &CheckArgs,
    algos: &[Option<AllReduceAlgo>],
    call: &mut u64,
) -> Result<()> {
    let sizes = [
        1usize,
        7,
        8,
        100,
        4095,
        4096,
        10_000,
        65_537,
        200_003,
        1 << 20,
    ];
    // Every algorithm of ours, then NCCL where it loaded (not auto; auto
    // alone asked for: the communicator's choice for each size).
    let algos_cycle: Vec<Option<AllReduceAlgo>> = match algos.iter().flatten().count() {
        0 => vec![None],
        _ => algos.iter().filter(|a| a.is_some()).copied().collect(),
    };
    let ops = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg, ReduceOp::Min];
    let mut ins = Vec::new();
    let mut outs = Vec::new();
    for &n in &sizes {
        ins.push(upload(&r.stream, &vec![T::from_f64(0.0); n])?);
        outs.push(upload(&r.stream, &vec![data::poison::<T>(); n])?);
    }
    r.stream.synchronize()?;
    r.stream
        .begin_capture(
            cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
        .context("begin capture")?;
    for (k, (d_in, d_out)) in ins.iter().zip(outs.iter_mut()).enumerate() {
        let algo = algos_cycle[k % algos_cycle.len()];
        r.all_reduce(d_in, d_out, ops[k % ops.len()], algo)?;
    }
    let graph = r
        .stream
        .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        .context("end capture")?
        .context("capture produced no graph")?;
    for _ in 0..args.graph_replays {
        *call += 1;
        for (k, d_in) in ins.iter_mut().enumerate() {
            let host = data::inputs::<T>(args.seed, *call * 16 + k as u64, r.rank(), sizes[k]);
            r.stream.memcpy_htod(&host, d_in)?;
        }
        for d_out in outs.iter_mut() {
            let poison = vec![data::poison::<T>(); d_out.len()];
            r.stream.memcpy_htod(&poison, d_out)?;
        }
        graph.launch().context("graph launch")?;
        for (k, d_out) in outs.iter().enumerate() {
            let out = r.stream.clone_dtoh(d_out)?;
            r.stream.synchronize()?;
            // A wait that ran out leaves the output unfinished: its report
            // first, never a wrong value in its place.
            r.comm.check()?;
            data::verify(
                &out,
                args.seed,
                *call * 16 + k as u64,
                r.world(),
                ops[k % ops.len()],
            )
            .map_err(|e| anyhow::anyhow!("graph replay, all-reduce {k}: {e}"))?;
        }
    }
    Ok(())
}
