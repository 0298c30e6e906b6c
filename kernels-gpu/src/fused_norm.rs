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
//! threads, ...` (at most [`FUSED_NORM_VECS_PER_THREAD`], kept in
//! registers). For each vector it waits for every rank's slot, reduces in
//! rank order and rounds to the element type (so the all-reduced sum has
//! the bits the unfused all-reduce gives, and is written to `ar.output`),
//! adds the residual in f32 and rounds (the new residual, written back),
//! and adds the squares of the rounded values to its sum. The row's sum is
//! a warp butterfly, then the warps' sums in warp order
//! (`ptx::block_gather_warp_f32`); the output reads the rounded residual
//! from registers. The order of every sum depends on the block's shape
//! only (`layout::fused_norm_threads`, a function of the row), never on
//! the grid, which follows each GPU's SM count: so every rank computes
//! bitwise the same outputs. Rows must be whole vectors (`hidden` a
//! multiple of the lanes); the host sends other shapes down the unfused
//! path (`algo::decide_norm`).

use crate::elem::{Bf16, Element, F16, Lanes, load_vec, store_vec};
use crate::lamport::{load_slots, push_slots, reduce_slots, wait_slots, zero_slots};
use crate::layout::{
    FORM_FUSED_NORM, FUSED_NORM_VECS_PER_THREAD, FusedNormParams, LAMPORT_BUFFER_BYTES,
    LAMPORT_OFFSET_BYTES, OP_SUM, lamport_stride_bytes,
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
/// 16-byte aligned; `hidden`
/// is a multiple of `T::LANES`, `p.ar.elems` is `rows * hidden` and its
/// bytes fit `lamport_slot_bytes(W)`; the block has
/// `layout::fused_norm_threads(hidden / LANES)` threads; every rank passes
/// the same `rows` and `hidden`.
#[inline(always)]
unsafe fn lamport_rmsnorm<T: Element, const W: usize>(p: &FusedNormParams) {
    let a = &p.ar;
    let threads = ptx::block_dim_x() as usize;
    let hidden = p.hidden as usize;
    let row_vecs = hidden / T::LANES;
    // The host's promises the kernel cannot do without: whole vectors per
    // row and a row within one block's registers and gather scratch.
    if hidden % T::LANES != 0
        || threads % WARP as usize != 0
        || threads > WARP as usize * ptx::BLOCK_GATHER_WARPS
        || row_vecs > threads * FUSED_NORM_VECS_PER_THREAD
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
    // Every buffer is 16-byte aligned (the host's promise): whole vectors
    // only, no element-by-element path to carry in registers.
    let aligned = true;
    let t = ptx::thread_idx_x() as usize;
    let tid = ptx::block_idx_x() as usize * threads + t;
    let stride = ptx::grid_dim_x() as usize * threads;

    // SAFETY: the slots hold the whole message (caller's promise).
    unsafe { push_slots::<T, W>(a, buffer_off, slot_bytes, vecs, aligned, tid, stride) };

    let own = pick(&a.pads, a.rank) + buffer_off;
    let (residual, weight, normed) = (
        p.residual as *mut T,
        p.weight as *const T,
        p.normed as *mut T,
    );
    // Every thread of a block walks the same rows: `block_sum` sees the
    // whole block.
    let mut row = ptx::block_idx_x() as usize;
    while row < p.rows as usize {
        let first = row * row_vecs;
        let mut sq = 0.0f32;
        // The row's new residual, rounded, vector `t + k * threads` in
        // `h[k]`. One statement per vector with a constant index (see
        // `lamport2`'s scatter): a rolled loop would put `h` in local
        // memory.
        let mut h = [[0u32; 4]; FUSED_NORM_VECS_PER_THREAD];
        macro_rules! take {
            ($($k:literal)+) => {$(
                let j = t + $k * threads;
                if j < row_vecs {
                    let i = first + j;
                    // SAFETY: i < vecs lies inside our buffer's slots and
                    // the caller's buffers.
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
                        store_vec(a.output as *mut T, i, elems, aligned, sum);
                        let old = load_vec(residual as *const T, i, elems, aligned);
                        let new = T::narrow(add_lanes::<T>(T::widen(sum), T::widen(old)));
                        store_vec(residual, i, elems, aligned, new);
                        // The value as stored (rounded), as an unfused norm
                        // reads it.
                        sq += sum_sq::<T>(T::widen(new));
                        h[$k] = new;
                    }
                }
            )+};
        }
        const { assert!(FUSED_NORM_VECS_PER_THREAD == 4) };
        take!(0 1 2 3);
        // SAFETY: every thread of the block gets here (block-uniform
        // rows); the block's shape is the caller's promise.
        let total = unsafe { block_sum(sq) };
        let inv_rms = 1.0 / ptx::sqrt_rn_f32(total / hidden as f32 + p.eps);
        macro_rules! out {
            ($($k:literal)+) => {$(
                let j = t + $k * threads;
                if j < row_vecs {
                    let x = T::widen(h[$k]);
                    // SAFETY: j < row_vecs lies inside `weight`, and
                    // `first + j` inside `normed`.
                    unsafe {
                        let w = T::widen(load_vec(weight, j, hidden, aligned));
                        let mut o = [0.0f32; 8];
                        let mut l = 0;
                        while l < T::LANES {
                            o[l] = x[l] * inv_rms * w[l];
                            l += 1;
                        }
                        store_vec(normed, first + j, elems, aligned, T::narrow(o));
                    }
                }
            )+};
        }
        out!(0 1 2 3);
        row += ptx::grid_dim_x() as usize;
    }
    // SAFETY: `own_pad` is this rank's pad; every thread gets here.
    unsafe { finish_call(own_pad, epoch) };
}

macro_rules! fused_norm_kernels {
    ($ty:ty, $($name:ident = $w:literal),+ $(,)?) => {$(
        /// # Safety
        /// See [`lamport_rmsnorm`]; launched only by the host crate.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FusedNormParams) {
            // SAFETY: the host upholds the contract.
            unsafe { lamport_rmsnorm::<$ty, $w>(&p) }
        }
    )+};
}

fused_norm_kernels!(
    Bf16,
    lamport_rmsnorm_bf16_w2 = 2,
    lamport_rmsnorm_bf16_w3 = 3,
    lamport_rmsnorm_bf16_w4 = 4,
    lamport_rmsnorm_bf16_w5 = 5,
    lamport_rmsnorm_bf16_w6 = 6,
    lamport_rmsnorm_bf16_w7 = 7,
    lamport_rmsnorm_bf16_w8 = 8,
);
fused_norm_kernels!(
    F16,
    lamport_rmsnorm_f16_w2 = 2,
    lamport_rmsnorm_f16_w3 = 3,
    lamport_rmsnorm_f16_w4 = 4,
    lamport_rmsnorm_f16_w5 = 5,
    lamport_rmsnorm_f16_w6 = 6,
    lamport_rmsnorm_f16_w7 = 7,
    lamport_rmsnorm_f16_w8 = 8,
);
fused_norm_kernels!(
    f32,
    lamport_rmsnorm_f32_w2 = 2,
    lamport_rmsnorm_f32_w3 = 3,
    lamport_rmsnorm_f32_w4 = 4,
    lamport_rmsnorm_f32_w5 = 5,
    lamport_rmsnorm_f32_w6 = 6,
    lamport_rmsnorm_f32_w7 = 7,
    lamport_rmsnorm_f32_w8 = 8,
);
