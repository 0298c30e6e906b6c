//! The check suite's `all_reduce_residual_rmsnorm`: every element type,
//! hidden sizes 1024 to 16384 (and an odd one, which the fused kernel
//! leaves to the unfused path), 1 to 64 rows, each as decided, forced
//! fused and forced unfused, plus a misaligned input; then fused and
//! unfused calls captured in a CUDA graph and replayed with fresh inputs.
//! Every call against an f64 reference of the unfused sequence
//! (all-reduce, rounded; residual add, rounded; RMSNorm in f64, rounded):
//! the all-reduced input and the residual exactly, the normed output
//! within rounding, and all three bitwise identical across ranks.

use anyhow::{Context, Result, bail};
use cudarc::driver::CudaSlice;
use cudarc::nccl::NcclType;
use half::{bf16, f16};
use intranode::NormPath;
use intranode::kernels::{DType, ElemType};
use intranode::types::ReduceOp;
use intranode_harness::data;
use intranode_harness::rank::Rank;

const HIDDEN: [usize; 5] = [1024, 4096, 8192, 16384, 777];
const ROWS: [usize; 4] = [1, 8, 32, 64];
/// As decided, then each path forced.
const PATHS: [Option<NormPath>; 3] = [None, Some(NormPath::Fused), Some(NormPath::Unfused)];
const EPS: f32 = 1e-5;
/// Graph replays of the captured calls (each checked).
const GRAPH_REPLAYS: usize = 20;

/// Allowed relative error of a normed output: one rounding to `T` plus
/// the f32 arithmetic of the sum of squares (up to 16384 terms).
fn tolerance(elem: ElemType) -> f64 {
    match elem {
        ElemType::Bf16 => 1.0 / 128.0,
        ElemType::F16 => 1.0 / 1024.0,
        ElemType::F32 => 1e-4,
        other => panic!("no norm tolerance for {other:?}"),
    }
}

/// What the checks counted.
#[derive(Debug, Default)]
pub struct NormReport {
    /// Calls checked (eager and replayed).
    pub calls: usize,
    /// Of those, calls the decision sent down the fused kernel.
    pub fused: usize,
    /// Graph replays checked.
    pub replays: usize,
}

/// One call's host-side inputs: this rank's partial sums, the residual
/// and the weight (the same on every rank, as in tensor parallelism:
/// rank 0's pattern of other calls).
struct Inputs<T> {
    x: Vec<T>,
    res: Vec<T>,
    w: Vec<T>,
}

fn inputs<T: DType>(seed: u64, call: u64, me: usize, rows: usize, hidden: usize) -> Inputs<T> {
    let n = rows * hidden;
    Inputs {
        x: data::inputs::<T>(seed, call, me, n),
        res: data::inputs::<T>(seed, call + (1 << 32), 0, n),
        w: data::inputs::<T>(seed, call + (2 << 32), 0, hidden),
    }
}

/// What a call left on the device, read back.
struct Outputs<T> {
    sum: Vec<T>,
    res: Vec<T>,
    out: Vec<T>,
}

/// Checks one call's outputs against the f64 reference of the unfused
/// sequence; `how` names the call in errors.
#[allow(clippy::too_many_arguments)]
fn verify<T: DType>(
    me: usize,
    world: usize,
    seed: u64,
    call: u64,
    hidden: usize,
    inp: &Inputs<T>,
    got: &Outputs<T>,
    how: &str,
) -> Result<()> {
    let rows = inp.res.len() / hidden;
    let fail = |what: &str, row: usize, i: usize, got: f64, want: f64| {
        anyhow::anyhow!(
            "rank {me}: all_reduce_residual_rmsnorm {:?} {rows} x {hidden} {how}: {what}[{row}][{i}] = {got}, want {want}",
            T::ELEM
        )
    };
    for row in 0..rows {
        let base = row * hidden;
        let mut h = Vec::with_capacity(hidden);
        for i in 0..hidden {
            let ar = T::from_f64(data::reference(seed, call, world, base + i, ReduceOp::Sum));
            let got_sum = got.sum[base + i].to_f64();
            if got_sum != ar.to_f64() {
                return Err(fail("input (all-reduced)", row, i, got_sum, ar.to_f64()));
            }
            let want_res = T::from_f64(ar.to_f64() + inp.res[base + i].to_f64()).to_f64();
            let got_res = got.res[base + i].to_f64();
            if got_res != want_res {
                return Err(fail("residual", row, i, got_res, want_res));
            }
            h.push(want_res);
        }
        let mean_sq = h.iter().map(|v| v * v).sum::<f64>() / hidden as f64;
        let inv = 1.0 / (mean_sq + f64::from(EPS)).sqrt();
        for (i, hv) in h.iter().enumerate() {
            let want = hv * inv * inp.w[i].to_f64();
            let got_out = got.out[base + i].to_f64();
            // `le` so that a NaN (the poison left unwritten) fails.
            if !(got_out - want)
                .abs()
                .le(&(tolerance(T::ELEM) * want.abs().max(1e-3)))
            {
                return Err(fail("out", row, i, got_out, want));
            }
        }
    }
    Ok(())
}

/// Bitwise agreement of every rank's outputs of one call.
fn same_on_every_rank<T: DType>(r: &mut Rank, got: &Outputs<T>, how: &str) -> Result<()> {
    let fp = (
        data::fingerprint(&got.sum),
        data::fingerprint(&got.res),
        data::fingerprint(&got.out),
    );
    let all = r.all_gather(&fp)?;
    if all.iter().any(|f| *f != fp) {
        bail!(
            "all_reduce_residual_rmsnorm {:?} {how}: outputs differ between ranks (fingerprints of sum, residual, out: {all:x?})",
            T::ELEM
        );
    }
    Ok(())
}

/// Bytes of the region the prefetching calls name: 32 pieces. The default
/// cap's 8 MiB would be slow to allocate on every call.
const PREFETCH_REGION_BYTES: usize = 1 << 20;

/// One eager call of `rows x hidden` with `path` forced (or not);
/// `misaligned` passes the input as a view one element into its buffer.
/// Returns whether it was the fused kernel's.
#[allow(clippy::too_many_arguments)]
fn one_call<T: DType + NcclType>(
    r: &mut Rank,
    seed: u64,
    call: u64,
    rows: usize,
    hidden: usize,
    path: Option<NormPath>,
    misaligned: bool,
) -> Result<bool> {
    let (me, world) = (r.rank(), r.world());
    let n = rows * hidden;
    let inp = inputs::<T>(seed, call, me, rows, hidden);
    let mut padded = vec![data::poison::<T>(); usize::from(misaligned)];
    padded.extend_from_slice(&inp.x);
    let mut d_x = r.stream.clone_htod(&padded)?;
    let mut d_x = d_x.slice_mut(usize::from(misaligned)..);
    let mut d_res = r.stream.clone_htod(&inp.res)?;
    let d_w = r.stream.clone_htod(&inp.w)?;
    let mut d_out = r.stream.clone_htod(&vec![data::poison::<T>(); n])?;
    let fused = r.comm.norm_path_for::<T>(rows, hidden, path) == NormPath::Fused && !misaligned;
    // Every other call asks L2 for a region while it waits (NOTE [l2
    // prefetch]): a view that starts and ends off the 16-byte words, so the
    // host cuts it; the outputs must not change by a bit.
    let prefetch = call.is_multiple_of(2);
    if prefetch {
        let region = r.stream.alloc_zeros::<u8>(PREFETCH_REGION_BYTES + 8)?;
        let view = region.slice(3..PREFETCH_REGION_BYTES + 5);
        r.comm.all_reduce_residual_rmsnorm_prefetch(
            &mut d_x, &mut d_res, &d_w, EPS, &mut d_out, &view, path,
        )?;
    } else {
        r.comm
            .all_reduce_residual_rmsnorm_with(&mut d_x, &mut d_res, &d_w, EPS, &mut d_out, path)?;
    }
    let got = Outputs {
        sum: r.stream.clone_dtoh(&d_x)?,
        res: r.stream.clone_dtoh(&d_res)?,
        out: r.stream.clone_dtoh(&d_out)?,
    };
    r.stream.synchronize()?;
    let how = format!(
        "{} ({}){}{}",
        path.map_or("as decided", NormPath::name),
        if fused { "fused" } else { "unfused" },
        if misaligned { ", misaligned input" } else { "" },
        if prefetch { ", L2 prefetch" } else { "" }
    );
    verify(me, world, seed, call, hidden, &inp, &got, &how)?;
    same_on_every_rank(r, &got, &how)?;
    Ok(fused)
}

fn one_type<T: DType + NcclType>(r: &mut Rank, seed: u64, call: &mut u64) -> Result<NormReport> {
    let mut report = NormReport::default();
    for hidden in HIDDEN {
        for rows in ROWS {
            for path in PATHS {
                *call += 1;
                report.fused +=
                    usize::from(one_call::<T>(r, seed, *call, rows, hidden, path, false)?);
                report.calls += 1;
            }
        }
    }
    // A view whose address is not 16-byte aligned: the fused kernel's
    // vectors would not fit it, so even forced fused it takes the
    // unfused path.
    *call += 1;
    one_call::<T>(r, seed, *call, 8, 4096, Some(NormPath::Fused), true)?;
    report.calls += 1;
    Ok(report)
}

/// The device buffers of one captured call.
struct GraphCall<T> {
    rows: usize,
    hidden: usize,
    path: NormPath,
    x: CudaSlice<T>,
    res: CudaSlice<T>,
    w: CudaSlice<T>,
    out: CudaSlice<T>,
}

/// Fused and unfused calls (and a plain all-reduce between them, on the
/// same Lamport buffers) captured in one CUDA graph, replayed with fresh
/// inputs, each replay checked.
fn graph<T: DType + NcclType>(r: &mut Rank, seed: u64, call: &mut u64) -> Result<NormReport> {
    let (me, world) = (r.rank(), r.world());
    let shapes = [
        (8, 4096, NormPath::Fused),
        (1, 16384, NormPath::Fused),
        (32, 8192, NormPath::Unfused),
        (64, 1024, NormPath::Fused),
    ];
    let mut calls = Vec::new();
    for (rows, hidden, path) in shapes {
        let n = rows * hidden;
        calls.push(GraphCall {
            rows,
            hidden,
            path,
            x: r.stream.clone_htod(&vec![T::from_f64(0.0); n])?,
            res: r.stream.clone_htod(&vec![T::from_f64(0.0); n])?,
            w: r.stream.clone_htod(&vec![T::from_f64(0.0); hidden])?,
            out: r.stream.clone_htod(&vec![T::from_f64(0.0); n])?,
        });
    }
    let plain_n = 4096;
    let mut plain_in = r.stream.clone_htod(&vec![T::from_f64(0.0); plain_n])?;
    let mut plain_out = r.stream.clone_htod(&vec![T::from_f64(0.0); plain_n])?;
    r.stream.synchronize()?;
    r.stream
        .begin_capture(
            cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
        .context("begin capture")?;
    let captured = (|| -> Result<()> {
        for (k, c) in calls.iter_mut().enumerate() {
            if k == 0 {
                // Captured with a prefetch (of the plain all-reduce's
                // input: any live buffer will do).
                r.comm.all_reduce_residual_rmsnorm_prefetch(
                    &mut c.x,
                    &mut c.res,
                    &c.w,
                    EPS,
                    &mut c.out,
                    &plain_in,
                    Some(c.path),
                )?;
            } else {
                r.comm.all_reduce_residual_rmsnorm_with(
                    &mut c.x,
                    &mut c.res,
                    &c.w,
                    EPS,
                    &mut c.out,
                    Some(c.path),
                )?;
            }
            if k == 1 {
                r.all_reduce(&plain_in, &mut plain_out, ReduceOp::Sum, None)?;
            }
        }
        Ok(())
    })();
    // End the capture whatever happened, so the stream stays usable.
    let graph = r.stream.end_capture(
        cudarc::driver::sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
    );
    captured?;
    let graph = graph
        .context("end capture")?
        .context("capture produced no graph")?;
    let mut report = NormReport::default();
    for replay in 0..GRAPH_REPLAYS {
        *call += 1;
        let base = *call * 16;
        let mut host = Vec::new();
        for (k, c) in calls.iter_mut().enumerate() {
            let inp = inputs::<T>(seed, base + k as u64, me, c.rows, c.hidden);
            r.stream.memcpy_htod(&inp.x, &mut c.x)?;
            r.stream.memcpy_htod(&inp.res, &mut c.res)?;
            r.stream.memcpy_htod(&inp.w, &mut c.w)?;
            let poison = vec![data::poison::<T>(); c.out.len()];
            r.stream.memcpy_htod(&poison, &mut c.out)?;
            host.push(inp);
        }
        let plain = data::inputs::<T>(seed, base + 15, me, plain_n);
        r.stream.memcpy_htod(&plain, &mut plain_in)?;
        graph.launch().context("graph launch")?;
        for (k, c) in calls.iter().enumerate() {
            let got = Outputs {
                sum: r.stream.clone_dtoh(&c.x)?,
                res: r.stream.clone_dtoh(&c.res)?,
                out: r.stream.clone_dtoh(&c.out)?,
            };
            r.stream.synchronize()?;
            let fused =
                r.comm.norm_path_for::<T>(c.rows, c.hidden, Some(c.path)) == NormPath::Fused;
            let how = format!(
                "graph replay {replay}, call {k} ({})",
                if fused { "fused" } else { "unfused" }
            );
            verify(
                me,
                world,
                seed,
                base + k as u64,
                c.hidden,
                &host[k],
                &got,
                &how,
            )?;
            same_on_every_rank(r, &got, &how)?;
            report.calls += 1;
            report.fused += usize::from(fused);
        }
        let out = r.stream.clone_dtoh(&plain_out)?;
        r.stream.synchronize()?;
        data::verify(&out, seed, base + 15, world, ReduceOp::Sum)
            .map_err(|e| anyhow::anyhow!("graph replay {replay}, the plain all-reduce: {e}"))?;
        report.replays += 1;
    }
    Ok(report)
}

/// Every case; what was checked. Fails when the group has an intra-node
/// path of 2 or more fully connected ranks and the fused kernel never
/// ran: the check would otherwise pass on the unfused path alone.
pub fn run(r: &mut Rank, seed: u64) -> Result<NormReport> {
    let mut call = 1 << 44;
    let mut report = NormReport::default();
    let mut add = |part: NormReport| {
        report.calls += part.calls;
        report.fused += part.fused;
        report.replays += part.replays;
    };
    add(one_type::<bf16>(r, seed, &mut call)?);
    add(one_type::<f16>(r, seed, &mut call)?);
    add(one_type::<f32>(r, seed, &mut call)?);
    r.store_barrier()?;
    add(graph::<bf16>(r, seed, &mut call)?);
    add(graph::<f16>(r, seed, &mut call)?);
    // Without the intra-node path the topology is `Unknown`.
    let expect_fused = r.comm.topology() == intranode::topology::Topology::FullyConnected
        && r.comm.world_size() >= 2;
    if expect_fused && report.fused == 0 {
        bail!(
            "rank {}: the fused all-reduce + residual + RMSNorm never ran, though the group is fully connected",
            r.rank()
        );
    }
    Ok(report)
}
