//! The check suite's reduce-scatter and all-gather: every element type
//! and op, lengths around a vector and a slot, through `Communicator`
//! (ours or NCCL, as it decides) and forced onto our kernels; every
//! element against the f64 reference (reduce-scatter, within rounding) or
//! the inputs themselves (all-gather, exactly).

use anyhow::{Result, bail};
use cudarc::nccl::NcclType;
use half::{bf16, f16};
use intranode::comm::scatter_gather::ScatterGather;
use intranode::kernels::DType;

use crate::data::{self, Op};
use crate::rank::Rank;

/// Elements per shard: tiny, odd, a vector, around 4096, past a cache
/// line's worth of slots, and 1 Mi elements plus an odd tail.
const SHARDS: [usize; 7] = [1, 7, 8, 4095, 4099, 65536, (1 << 20) + 3];

fn ops(what: ScatterGather) -> &'static [Op] {
    match what {
        ScatterGather::ReduceScatter => &Op::ALL,
        ScatterGather::AllGather => &[Op::Sum],
    }
}

/// Checks one call's output; `what` and `how` name it in errors.
#[allow(clippy::too_many_arguments)]
pub(crate) fn verify<T: DType>(
    r: &Rank,
    what: ScatterGather,
    out: &[T],
    seed: u64,
    call: u64,
    n: usize,
    op: Op,
    how: &str,
) -> Result<()> {
    let (me, world) = (r.rank(), r.world());
    for (i, v) in out.iter().enumerate() {
        let got = v.to_f64();
        let (want, ok) = match what {
            ScatterGather::ReduceScatter => {
                let want = data::reference(seed, call, world, me * n + i, op);
                (want, (got - want).abs() <= data::tolerance(T::ELEM, want))
            }
            ScatterGather::AllGather => {
                let want = data::input_value(seed, call, i / n, i % n);
                (want, got == want)
            }
        };
        if !ok {
            bail!(
                "rank {me}: {} {how} {:?} {op:?}, shard of {n}: element {i}: got {got}, want {want}",
                what.name(),
                T::ELEM
            );
        }
    }
    Ok(())
}

fn one_type<T: DType + NcclType>(r: &mut Rank, seed: u64, call: &mut u64) -> Result<usize> {
    let (me, world) = (r.rank(), r.world());
    let mut cases = 0;
    for what in [ScatterGather::ReduceScatter, ScatterGather::AllGather] {
        for &n in &SHARDS {
            for &op in ops(what) {
                for forced in [false, true] {
                    if forced && r.comm.intra().is_none() {
                        continue;
                    }
                    *call += 1;
                    let (send_len, recv_len) = match what {
                        ScatterGather::ReduceScatter => (world * n, n),
                        ScatterGather::AllGather => (n, world * n),
                    };
                    let input = data::inputs::<T>(seed, *call, me, send_len);
                    let send = r.stream.clone_htod(&input)?;
                    let mut recv = r.stream.clone_htod(&vec![data::poison::<T>(); recv_len])?;
                    match (what, forced) {
                        (_, true) => {
                            let intra = r.comm.intra().ok_or_else(|| {
                                anyhow::anyhow!("forced path without the intra-node path")
                            })?;
                            let iop = match op {
                                Op::Sum => intranode::ReduceOp::Sum,
                                Op::Avg => intranode::ReduceOp::Avg,
                                Op::Min => intranode::ReduceOp::Min,
                                Op::Max => intranode::ReduceOp::Max,
                            };
                            intra.scatter_gather(
                                what,
                                T::ELEM,
                                &send,
                                &mut recv,
                                iop,
                                &r.stream,
                            )?;
                        }
                        (ScatterGather::ReduceScatter, false) => {
                            r.comm.reduce_scatter(&send, &mut recv, &op.nccl())?;
                        }
                        (ScatterGather::AllGather, false) => {
                            r.comm.all_gather(&send, &mut recv)?;
                        }
                    }
                    let out = r.stream.clone_dtoh(&recv)?;
                    r.stream.synchronize()?;
                    let how = if forced {
                        "forced onto ours"
                    } else {
                        "as the communicator decides"
                    };
                    verify(r, what, &out, seed, *call, n, op, how)?;
                    cases += 1;
                }
            }
        }
    }
    Ok(cases)
}

/// Every case; the count of checked calls.
pub fn run(r: &mut Rank, seed: u64) -> Result<usize> {
    let mut call = 1 << 40;
    let mut cases = one_type::<bf16>(r, seed, &mut call)?;
    cases += one_type::<f16>(r, seed, &mut call)?;
    cases += one_type::<f32>(r, seed, &mut call)?;
    Ok(cases)
}
