//! The decode step's tail in one launch: the Lamport one-shot all-reduce
//! (sum) of this rank's partial sums, then, row by row, `residual +=
//! sum` and `normed = residual * rsqrt(mean(residual^2) + eps) * weight`
//! (the all-reduce fusion of TensorRT-LLM and FlashInfer).
//!
//! NOTE [fused norm]: the all-reduce is the Lamport one-shot's protocol
//! unchanged (NOTE [lamport] in `lamport.rs`): the same call count, buffer
//! `epoch & 1`, slot layout, encoding, zeroing and push, so fused calls
//! interleave freely with every other collective. What differs is who
//! takes the data out of this rank's buffer: a block per row (blocks
//! `b, b + grid, ...`), thread `t` taking the row's vectors `t, t +
//! threads, ...`. For each vector it waits for every rank's slot, reduces in
//! rank order and rounds to the element type (so the all-reduced sum has
//! the bits the unfused all-reduce gives, and is written to `ar.output`),
//! adds the residual in f32 and rounds (the new residual, written back),
//! and adds the squares of the rounded values to its sum. The row's sum is
//! a warp butterfly, then the warps' sums in warp order
//! (`ptx::block_gather_warp_f32`); the output pass reads the rounded
//! residual back. The order of every sum depends on the block's shape
//! only (`layout::fused_norm_threads`, a function of the row), never on
//! the grid, which follows each GPU's SM count: so every rank computes
//! bitwise the same outputs. Rows must be whole vectors (`hidden` a
//! multiple of the lanes) and every buffer 16-byte aligned; the host
//! sends other calls down the unfused path (`algo::decide_norm`).

use crate::elem::{Element, Lanes};
use crate::lamport::{load_slots, push_slots, reduce_slots, wait_slots, zero_slots};
use crate::layout::{
    FORM_FUSED_NORM, FusedNormParams, LAMPORT_BUFFER_BYTES, LAMPORT_OFFSET_BYTES, OP_SUM,
    lamport_stride_bytes,
};
use crate::ptx;
use crate::sync::{call_epoch, finish_call, pick};

const WARP: u32 = 32;

/// The sum of `v` over the block, the same bits in every thread: a warp
/// butterfly (IEEE addition commutes, so every lane of a warp ends with the
/// same value), then the warps' sums added in warp order.
///
/// # Safety
/// Every thread of the block calls it together; whole warps, at most
/// `32 * ptx::BLOCK_GATHER_WARPS` threads.
#[inline(always)]
unsafe fn block_sum(v: f32) -> f32 {
    let mut s = v;
    let mut mask = WARP / 2;
    while mask > 0 {
        // SAFETY: the whole block, so every lane of each warp, gets here.
        s += unsafe { ptx::shfl_bfly_f32(s, mask) };
        mask /= 2;
    }
    // SAFETY: forwarded from the caller.
    let parts = unsafe { ptx::block_gather_warp_f32(s) };
    let warps = ptx::block_dim_x() / WARP;
    let mut total = parts[0];
    // One statement per warp with a constant index: a loop over `parts`
    // that stayed rolled would move it to local memory.
    macro_rules! add {
        ($($w:literal)+) => {$(
            if $w < warps {
                total += parts[$w];
            }
        )+};
    }
    add!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    total
}

/// Lane-wise `a + b` over the first `T::LANES` lanes.
#[inline(always)]
fn add_lanes<T: Element>(a: Lanes, b: Lanes) -> Lanes {
    let mut out = [0.0f32; 8];
    let mut k = 0;
    while k < T::LANES {
        out[k] = a[k] + b[k];
        k += 1;
    }
    out
}

/// The sum of squares of the first `T::LANES` lanes, in lane order.
#[inline(always)]
fn sum_sq<T: Element>(h: Lanes) -> f32 {
    let mut s = 0.0f32;
    let mut k = 0;
    while k < T::LANES {
        s += h[k] * h[k];
        k += 1;
    }
    s
}

/// # Safety
/// `p.ar.pads` must hold the mapped pads of W ranks (`rank < W`);
/// `p.ar.input` and `p.ar.output` (equal or not overlapping), `residual`
/// and `normed` hold `rows * hidden` elements, `weight` `hidden`, all five
/// 16-byte aligned and `residual` and `normed` overlapping nothing else;
/// `hidden` is a multiple of `T::LANES`, `p.ar.elems` is `rows * hidden`
/// and its bytes fit `lamport_slot_bytes(W)`; every rank passes the same
/// `rows` and `hidden` and launches blocks of the same shape
/// (`layout::fused_norm_threads`).
#[inline(always)]
pub(crate) unsafe fn lamport_rmsnorm<T: Element, const W: usize>(p: &FusedNormParams) {
    let a = &p.ar;
    let threads = ptx::block_dim_x() as usize;
    let hidden = p.hidden as usize;
    let row_vecs = hidden / T::LANES;
    // The host's promises the kernel cannot do without: whole vectors per
    // row, whole warps, and no more warps than the gather scratch holds.
    if !hidden.is_multiple_of(T::LANES)
        || !threads.is_multiple_of(WARP as usize)
        || threads > WARP as usize * ptx::BLOCK_GATHER_WARPS
    {
        ptx::trap();
    }
    let own_pad = pick(&a.pads, a.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let epoch = unsafe { call_epoch(own_pad) };
    let buffer_off = LAMPORT_OFFSET_BYTES as u64 + (epoch & 1) as u64 * LAMPORT_BUFFER_BYTES as u64;
    let elems = a.elems as usize;
    let vecs = elems / T::LANES;
    let slot_bytes = lamport_stride_bytes(vecs) as u64;
    let t = ptx::thread_idx_x() as usize;
    let tid = ptx::block_idx_x() as usize * threads + t;
    let stride = ptx::grid_dim_x() as usize * threads;

    // SAFETY: the slots hold the whole message (caller's promise).
    unsafe { push_slots::<T, W>(a, buffer_off, slot_bytes, vecs, true, tid, stride) };

    let own = pick(&a.pads, a.rank) + buffer_off;
    let (output, residual, weight, normed) = (
        a.output as *mut [u32; 4],
        p.residual as *mut [u32; 4],
        p.weight as *const [u32; 4],
        p.normed as *mut [u32; 4],
    );
    // Every thread of a block walks the same rows: `block_sum` sees the
    // whole block. The loops over a row's vectors stay loops: unrolled to
    // keep the row in registers, the kernels took 96 to 128 registers
    // (against 48 to 86 so); the output pass reads the residual back
    // beside the weight, whose load it waits for anyway.
    let mut row = ptx::block_idx_x() as usize;
    while row < p.rows as usize {
        let first = row * row_vecs;
        let mut sq = 0.0f32;
        let mut j = t;
        while j < row_vecs {
            let i = first + j;
            // SAFETY: i < vecs lies inside our buffer's slots and the
            // caller's buffers, which are 16-byte aligned.
            unsafe {
                let raw = wait_slots::<W, FORM_FUSED_NORM>(
                    load_slots::<W>(own, slot_bytes, i),
                    own,
                    slot_bytes,
                    i,
                    a,
                );
                zero_slots::<W>(own, slot_bytes, i);
                let sum = T::narrow(reduce_slots::<T, W, OP_SUM>(raw));
                ptx::st_global_v4_u32(output.add(i), sum);
                let old = ptx::ld_global_v4_u32(residual.add(i));
                let new = T::narrow(add_lanes::<T>(T::widen(sum), T::widen(old)));
                ptx::st_global_v4_u32(residual.add(i), new);
                // The value as stored (rounded), as an unfused norm reads
                // it.
                sq += sum_sq::<T>(T::widen(new));
            }
            j += threads;
        }
        // SAFETY: every thread of the block gets here (block-uniform
        // rows); the block's shape is the caller's promise.
        let total = unsafe { block_sum(sq) };
        let inv_rms = 1.0 / ptx::sqrt_rn_f32(total / hidden as f32 + p.eps);
        let mut j = t;
        while j < row_vecs {
            // SAFETY: j < row_vecs lies inside `weight`, and `first + j`
            // inside `residual` and `normed`; this thread stored that
            // residual vector above.
            unsafe {
                let x = T::widen(ptx::ld_global_v4_u32(residual.add(first + j)));
                let w = T::widen(ptx::ld_global_v4_u32(weight.add(j)));
                let mut o = [0.0f32; 8];
                let mut l = 0;
                while l < T::LANES {
                    o[l] = x[l] * inv_rms * w[l];
                    l += 1;
                }
                ptx::st_global_v4_u32(normed.add(first + j), T::narrow(o));
            }
            j += threads;
        }
        row += ptx::grid_dim_x() as usize;
    }
    // SAFETY: `own_pad` is this rank's pad; every thread gets here.
    unsafe { finish_call(own_pad, epoch) };
}
