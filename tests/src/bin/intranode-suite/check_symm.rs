//! All-reduce on symmetric buffers the user allocated
//! (`Communicator::alloc_symmetric`): every algorithm,
//! in place and out of place, views at offsets (aligned: the peers'
//! inputs read in place; unaligned: the copy-in path), several lengths and
//! element types, back-to-back calls that overwrite the input right after
//! each all-reduce, a CUDA graph, and lengths that differ across ranks.

use anyhow::{Result, bail};
use cudarc::driver::{DevicePtr, DeviceSlice};
use cudarc::nccl::NcclType;
use half::{bf16, f16};
use intranode::AllReduceAlgo;
use intranode::kernels::DType;
use intranode::types::ReduceOp;
use intranode_harness::data;
use intranode_harness::rank::Rank;

/// What the symmetric checks covered.
#[derive(Debug, Default)]
pub struct SymmReport {
    /// Checked all-reduces.
    pub calls: usize,
    /// Of them, those whose kernel read the peers' inputs in place.
    pub in_place_reads: usize,
    /// Graph replays checked.
    pub replays: usize,
}

/// Whether this call reads the peers' inputs in place, as the
/// communicator decides it.
fn reads_in_place<T: DType>(r: &Rank, algo: Option<AllReduceAlgo>, ptr: u64, elems: usize) -> bool {
    let (Some(intra), Some(algo)) = (r.comm.intra(), algo) else {
        return false;
    };
    intra.reads_input_in_place(algo, ptr, elems, T::ELEM)
}

/// The device address of `buf` (for the look-up above), without keeping
/// its tracking guard.
fn address<T>(buf: &impl DevicePtr<T>, r: &Rank) -> u64 {
    let (ptr, _guard) = buf.device_ptr(&r.stream);
    ptr
}

#[allow(clippy::too_many_arguments)]
fn one<T: DType + NcclType>(
    r: &mut Rank,
    sym: &mut intranode::SymmetricBuffer<T>,
    algo: Option<AllReduceAlgo>,
    op: ReduceOp,
    offset: usize,
    elems: usize,
    in_place: bool,
    seed: u64,
    call: u64,
    report: &mut SymmReport,
) -> Result<()> {
    let input = data::inputs::<T>(seed, call, r.rank(), elems);
    let name = algo.map_or("auto", AllReduceAlgo::name);
    let how = format!(
        "{:?} {op:?} {name} n={elems} at offset {offset}{}",
        T::ELEM,
        if in_place { " in place" } else { "" }
    );
    let out = {
        let mut view = sym.slice_mut(offset..offset + elems)?;
        r.stream.memcpy_htod(&input, &mut view)?;
        let ptr = address(&view, r);
        let expect_in_place = reads_in_place::<T>(r, algo, ptr, elems);
        let should = matches!(
            algo.map(|a| r.comm.intra().map(|c| c.resolve(a, T::ELEM, elems))),
            Some(Some(AllReduceAlgo::OneShot | AllReduceAlgo::TwoShot))
        ) && (offset * T::ELEM.bytes()).is_multiple_of(16);
        if should != expect_in_place {
            bail!(
                "rank {}: {how}: reads in place is {expect_in_place}, expected {should}",
                r.rank()
            );
        }
        report.in_place_reads += usize::from(expect_in_place);
        if in_place {
            r.all_reduce_in_place(&mut view, op, algo)?;
            r.stream.clone_dtoh(&view)?
        } else {
            let mut d_out = r.stream.clone_htod(&vec![data::poison::<T>(); elems])?;
            r.all_reduce(&view, &mut d_out, op, algo)?;
            r.stream.clone_dtoh(&d_out)?
        }
    };
    r.stream.synchronize()?;
    data::verify(&out, seed, call, r.world(), op)
        .map_err(|e| anyhow::anyhow!("rank {}: {how}: {e}", r.rank()))?;
    let fp = data::fingerprint(&out);
    let all = r.all_gather(&fp)?;
    if all.iter().any(|&f| f != fp) {
        bail!("{how}: outputs differ between ranks (fingerprints {all:x?})");
    }
    report.calls += 1;
    Ok(())
}

/// Every algorithm x length x offset x op, in place and out of place by
/// turns, for one element type.
fn sweep<T: DType + NcclType>(
    r: &mut Rank,
    algos: &[Option<AllReduceAlgo>],
    seed: u64,
    call: &mut u64,
    report: &mut SymmReport,
) -> Result<()> {
    let half_elems = r
        .comm
        .intra()
        .map_or(1 << 20, |c| c.half_buffer_bytes() / T::ELEM.bytes());
    // Tiny, odd, one vector, a few blocks' worth, and past half the
    // communicator's buffer (the barrier forms walk it in chunks).
    let lengths = [1usize, 7, 8, 4095, 4096, 65_537, half_elems + 5];
    // Offsets: none, one aligned vector in, and one element in (not
    // 16-byte aligned: the copy-in path, still correct).
    let vec_elems = 16 / T::ELEM.bytes();
    let offsets = [0usize, 4 * vec_elems, 1];
    let capacity = half_elems + 5 + 4 * vec_elems + 1;
    let mut sym = r.comm.alloc_symmetric::<T>(capacity)?;
    let mut k = 0usize;
    for &algo in algos {
        for &elems in &lengths {
            for &offset in &offsets {
                *call += 1;
                let op = ReduceOp::ALL[k % ReduceOp::ALL.len()];
                let in_place = k % 2 == 1;
                k += 1;
                one::<T>(
                    r, &mut sym, algo, op, offset, elems, in_place, seed, *call, report,
                )?;
            }
        }
    }
    Ok(())
}

/// Back to back without a host sync: upload, all-reduce, upload the next
/// input into the same buffer at once, ... Catches a rank overwriting
/// its input while a peer still reads it (the end barrier's job).
fn back_to_back<T: DType + NcclType>(
    r: &mut Rank,
    algos: &[Option<AllReduceAlgo>],
    seed: u64,
    call: &mut u64,
    report: &mut SymmReport,
) -> Result<()> {
    const CALLS: usize = 64;
    for &algo in algos {
        for elems in [1000usize, 100_003] {
            let mut sym = r.comm.alloc_symmetric::<T>(elems)?;
            let mut outs = Vec::with_capacity(CALLS);
            let first = *call + 1;
            for k in 0..CALLS {
                *call += 1;
                let input = data::inputs::<T>(seed, *call, r.rank(), elems);
                r.stream.memcpy_htod(&input, &mut sym)?;
                let mut d_out = r.stream.clone_htod(&vec![data::poison::<T>(); elems])?;
                if k % 2 == 0 {
                    r.all_reduce(&sym, &mut d_out, ReduceOp::Sum, algo)?;
                } else {
                    r.all_reduce_in_place(&mut sym, ReduceOp::Sum, algo)?;
                    r.stream.memcpy_dtod(&sym, &mut d_out)?;
                }
                outs.push(d_out);
            }
            r.stream.synchronize()?;
            for (k, d_out) in outs.iter().enumerate() {
                let out = r.stream.clone_dtoh(d_out)?;
                data::verify(&out, seed, first + k as u64, r.world(), ReduceOp::Sum).map_err(
                    |e| {
                        anyhow::anyhow!(
                            "rank {}: back-to-back {} n={elems} call {k}: {e}",
                            r.rank(),
                            algo.map_or("auto", AllReduceAlgo::name)
                        )
                    },
                )?;
                report.calls += 1;
            }
            r.store_barrier()?;
        }
    }
    Ok(())
}

/// A CUDA graph of one all-reduce per algorithm on views of one
/// symmetric buffer (out of place and in place by turns), replayed with
/// fresh inputs.
fn graph<T: DType + NcclType>(
    r: &mut Rank,
    algos: &[Option<AllReduceAlgo>],
    seed: u64,
    call: &mut u64,
    report: &mut SymmReport,
) -> Result<()> {
    const ELEMS: usize = 10_000;
    const REPLAYS: usize = 20;
    let algos: Vec<_> = algos.iter().copied().filter(Option::is_some).collect();
    if algos.is_empty() {
        return Ok(());
    }
    let n = algos.len();
    let mut sym = r.comm.alloc_symmetric::<T>(n * ELEMS)?;
    let mut outs = Vec::with_capacity(n);
    for _ in 0..n {
        outs.push(r.stream.clone_htod(&vec![data::poison::<T>(); ELEMS])?);
    }
    r.stream.synchronize()?;
    r.stream.begin_capture(
        cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    )?;
    for (k, algo) in algos.iter().enumerate() {
        let mut view = sym.slice_mut(k * ELEMS..(k + 1) * ELEMS)?;
        if k % 2 == 0 {
            r.all_reduce(&view, &mut outs[k], ReduceOp::Sum, *algo)?;
        } else {
            r.all_reduce_in_place(&mut view, ReduceOp::Sum, *algo)?;
            r.stream.memcpy_dtod(&view, &mut outs[k])?;
        }
    }
    let graph = r
        .stream
        .end_capture(
            cudarc::driver::sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
        )?
        .ok_or_else(|| anyhow::anyhow!("capture produced no graph"))?;
    for _ in 0..REPLAYS {
        let base = *call + 1;
        for k in 0..n {
            *call += 1;
            let input = data::inputs::<T>(seed, *call, r.rank(), ELEMS);
            let mut view = sym.slice_mut(k * ELEMS..(k + 1) * ELEMS)?;
            r.stream.memcpy_htod(&input, &mut view)?;
        }
        graph.launch()?;
        for (k, d_out) in outs.iter().enumerate() {
            let out = r.stream.clone_dtoh(d_out)?;
            data::verify(&out, seed, base + k as u64, r.world(), ReduceOp::Sum).map_err(|e| {
                anyhow::anyhow!(
                    "rank {}: graph replay, {}: {e}",
                    r.rank(),
                    algos[k].map_or("auto", AllReduceAlgo::name)
                )
            })?;
        }
        report.replays += 1;
    }
    r.stream.synchronize()?;
    Ok(())
}

/// Lengths that differ across ranks: every rank gets an error, none hangs.
fn mismatched_lengths(r: &mut Rank) -> Result<()> {
    let len = 1000 + r.rank();
    match r.comm.alloc_symmetric::<f32>(len) {
        Ok(_) => bail!(
            "rank {}: alloc_symmetric with a length that differs across ranks succeeded",
            r.rank()
        ),
        Err(e) => {
            let text = e.to_string();
            if !text.contains("disagree") {
                bail!(
                    "rank {}: lengths that differ gave an unclear error: {text}",
                    r.rank()
                );
            }
        }
    }
    Ok(())
}

/// The symmetric-buffer checks; `algos` as the suite's `--algos`.
pub fn run(r: &mut Rank, algos: &[Option<AllReduceAlgo>], seed: u64) -> Result<SymmReport> {
    let mut report = SymmReport::default();
    if !r.has_intra_path() {
        return Ok(report);
    }
    let mut call = 1u64 << 40;
    sweep::<bf16>(r, algos, seed, &mut call, &mut report)?;
    sweep::<f16>(r, algos, seed, &mut call, &mut report)?;
    sweep::<f32>(r, algos, seed, &mut call, &mut report)?;
    r.store_barrier()?;
    back_to_back::<bf16>(r, algos, seed, &mut call, &mut report)?;
    graph::<bf16>(r, algos, seed, &mut call, &mut report)?;
    r.store_barrier()?;
    mismatched_lengths(r)?;
    r.store_barrier()?;
    // The last buffer is gone on every rank: nothing of it is registered.
    let probe = r.comm.alloc_symmetric::<f32>(64)?;
    if probe.len() != 64 || DeviceSlice::len(&probe) != 64 {
        bail!(
            "rank {}: a 64-element buffer reports {}",
            r.rank(),
            probe.len()
        );
    }
    Ok(report)
}
