//! The check suite's reduce-scatter and all-gather: every element type
//! and op, lengths around a vector and a slot, through `Communicator`
//! (ours or NCCL, as it decides) and forced onto our kernels (as they
//! decide, and each form: Lamport and push); every
//! element against the f64 reference (reduce-scatter, within rounding) or
//! the inputs themselves (all-gather, exactly).

use anyhow::Result;
use cudarc::nccl::NcclType;
use half::{bf16, f16};
use intranode::internals::{ScatterGather, ScatterGatherForm};
use intranode::kernels::DType;
use intranode::types::ReduceOp;
use intranode_harness::data;
use intranode_harness::rank::Rank;

/// Elements per shard: tiny, odd, a vector, around 4096, past a cache
/// line's worth of slots, and 1 Mi elements plus an odd tail.
const SHARDS: [usize; 7] = [1, 7, 8, 4095, 4099, 65536, (1 << 20) + 3];

fn ops(what: ScatterGather) -> &'static [ReduceOp] {
    match what {
        ScatterGather::ReduceScatter => &ReduceOp::ALL,
        ScatterGather::AllGather => &[ReduceOp::Sum],
    }
}

fn one_type<T: DType + NcclType>(r: &mut Rank, seed: u64, call: &mut u64) -> Result<usize> {
    shards::<T>(r, seed, call, &SHARDS, true)
}

/// Shards of `lens` elements, every op (`all_ops`) or the sum alone.
fn shards<T: DType + NcclType>(
    r: &mut Rank,
    seed: u64,
    call: &mut u64,
    lens: &[usize],
    all_ops: bool,
) -> Result<usize> {
    let (me, world) = (r.rank(), r.world());
    let mut cases = 0;
    for what in [ScatterGather::ReduceScatter, ScatterGather::AllGather] {
        for &n in lens {
            let ops = if all_ops {
                ops(what)
            } else {
                &[ReduceOp::Sum][..]
            };
            for &op in ops {
                for forced in [
                    None,
                    Some(None),
                    Some(Some(ScatterGatherForm::Lamport)),
                    Some(Some(ScatterGatherForm::Push)),
                ] {
                    if forced.is_some() && !r.has_intra_path() {
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
                        (_, Some(form)) => {
                            let intra = r.comm.intra().ok_or_else(|| {
                                anyhow::anyhow!("forced path without the intra-node path")
                            })?;
                            intra.scatter_gather_as(
                                what,
                                form,
                                T::ELEM,
                                &send,
                                &mut recv,
                                op,
                                &r.stream,
                            )?;
                        }
                        (ScatterGather::ReduceScatter, None) => {
                            r.comm.reduce_scatter(&send, &mut recv, &op.to_nccl())?;
                        }
                        (ScatterGather::AllGather, None) => {
                            r.comm.all_gather(&send, &mut recv)?;
                        }
                    }
                    let out = r.stream.clone_dtoh(&recv)?;
                    r.stream.synchronize()?;
                    let how = match forced {
                        None => "as the communicator decides",
                        Some(None) => "forced onto ours",
                        Some(Some(ScatterGatherForm::Lamport)) => "forced onto our Lamport form",
                        Some(Some(ScatterGatherForm::Push)) => "forced onto our push form",
                    };
                    data::verify_scatter_gather(r, what, &out, seed, *call, n, op, how)?;
                    cases += 1;
                }
            }
        }
    }
    Ok(cases)
}

/// Calls back to back with no host step between them, every result
/// checked once all ran: the push all-reduce and the push forms of the
/// reduce-scatter and all-gather share the push counters (NOTE [push
/// reduce-scatter and all-gather] in `kernels-gpu/src/push_scatter_gather.rs`: each
/// call leaves every counter at the base the next one takes, whatever
/// form it is), mixed with the Lamport forms, on shards of one tile to
/// several per block. The count of checked calls.
fn back_to_back(r: &mut Rank, seed: u64, call: &mut u64) -> Result<usize> {
    use intranode::AllReduceAlgo;
    let Some(intra) = r.comm.intra() else {
        return Ok(0);
    };
    let (me, world) = (r.rank(), r.world());
    let plan: Vec<(Option<ScatterGather>, Option<ScatterGatherForm>, usize)> = vec![
        (
            Some(ScatterGather::ReduceScatter),
            Some(ScatterGatherForm::Push),
            (1 << 20) + 3,
        ),
        (
            Some(ScatterGather::AllGather),
            Some(ScatterGatherForm::Push),
            (1 << 20) + 3,
        ),
        (None, None, 3 << 20),
        (
            Some(ScatterGather::AllGather),
            Some(ScatterGatherForm::Push),
            4099,
        ),
        (
            Some(ScatterGather::ReduceScatter),
            Some(ScatterGatherForm::Lamport),
            65536,
        ),
        (
            Some(ScatterGather::ReduceScatter),
            Some(ScatterGatherForm::Push),
            3 << 20,
        ),
        (None, None, 5000),
        (
            Some(ScatterGather::AllGather),
            Some(ScatterGatherForm::Lamport),
            4099,
        ),
        (
            Some(ScatterGather::AllGather),
            Some(ScatterGatherForm::Push),
            3 << 20,
        ),
        (
            Some(ScatterGather::ReduceScatter),
            Some(ScatterGatherForm::Push),
            7,
        ),
        (None, None, 1 << 20),
        (
            Some(ScatterGather::ReduceScatter),
            Some(ScatterGatherForm::Push),
            65536,
        ),
    ];
    let mut pending = Vec::new();
    for &(what, form, n) in &plan {
        *call += 1;
        let (send_len, recv_len) = match what {
            Some(ScatterGather::ReduceScatter) => (world * n, n),
            Some(ScatterGather::AllGather) => (n, world * n),
            None => (n, n),
        };
        let send = r
            .stream
            .clone_htod(&data::inputs::<bf16>(seed, *call, me, send_len))?;
        let mut recv = r
            .stream
            .clone_htod(&vec![data::poison::<bf16>(); recv_len])?;
        match what {
            Some(what) => {
                intra.scatter_gather_as(
                    what,
                    form,
                    bf16::ELEM,
                    &send,
                    &mut recv,
                    ReduceOp::Sum,
                    &r.stream,
                )?;
            }
            None => {
                intra.all_reduce(
                    &send,
                    &mut recv,
                    ReduceOp::Sum,
                    AllReduceAlgo::Push,
                    &r.stream,
                )?;
            }
        }
        pending.push((what, form, n, *call, send, recv));
    }
    r.stream.synchronize()?;
    for (what, form, n, c, _send, recv) in &pending {
        let out = r.stream.clone_dtoh(recv)?;
        let how = format!(
            "back to back, {}",
            form.map_or("push all-reduce", |f| f.name())
        );
        match what {
            Some(what) => {
                data::verify_scatter_gather(r, *what, &out, seed, *c, *n, ReduceOp::Sum, &how)?
            }
            None => data::verify(&out, seed, *c, world, ReduceOp::Sum)
                .map_err(|e| anyhow::anyhow!("rank {me}: {how}: {e}"))?,
        }
    }
    Ok(pending.len())
}

/// Every case; the count of checked calls.
pub fn run(r: &mut Rank, seed: u64) -> Result<usize> {
    let mut call = 1 << 40;
    let mut cases = one_type::<bf16>(r, seed, &mut call)?;
    cases += one_type::<f16>(r, seed, &mut call)?;
    cases += one_type::<f32>(r, seed, &mut call)?;
    // A shard past a Lamport slot runs as slot-sized slices, one launch
    // each (`intra::scatter_gather::shard_slices`): one slot and an odd
    // tail, bf16 sums only (the slices share every other code path with
    // the cases above).
    let slot_elems = intranode::internals::scatter_gather_max_shard_bytes(r.world()) / 2;
    cases += shards::<bf16>(r, seed, &mut call, &[slot_elems + 13], false)?;
    cases += back_to_back(r, seed, &mut call)?;
    Ok(cases)
}
