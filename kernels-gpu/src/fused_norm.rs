//! The decode step's tail in one launch: the Lamport one-shot all-reduce
//! (sum) of this rank's partial sums, then, row by row, `residual +=
//! sum` and `normed = residual * rsqrt(mean(residual^2) + eps) * weight`
//! (the all-reduce fusion of TensorRT-LLM and FlashInfer).
//!
//! NOTE [fused norm]: the all-reduce is the Lamport one-shot's protocol
//! unchanged (NOTE [lamport] in `lamport.rs`): the same call count, buffer
//! `epoch & 1`, slot layout, encoding, zeroing and push (the same
//! functions: `prims::slots`), so fused calls interleave freely with
//! every other collective. What differs is who
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
//! sends other calls down the unfused path (`algo::decide_norm`). The
//! add, squares, scale and sums are `prims::row`'s, the unfused norm's
//! (`norm.rs`) too: one definition for both paths.
//!
//! NOTE [l2 prefetch]: while a block waits for the peers' slots, HBM is
//! idle for the 2-3 us of a launch and an NVLink hop (0.86 us and 0.65 us
//! on H100, `intranode-bench hop`); the GEMM that follows the norm in a
//! decode step then streams its weights from HBM. Where the host passes
//! a region (the next GEMM's weights), the last `prefetch_blocks` blocks
//! of the grid, after their share of the push, ask L2 for it in
//! `PREFETCH_PIECE_BYTES` pieces (`cp.async.bulk.prefetch.L2`, one
//! instruction a piece, nothing waited for) and walk no rows: the rows'
//! blocks poll as before, and the pieces are dealt round-robin over the
//! prefetching blocks (piece `k` to block `k mod prefetch_blocks`), so as
//! many SMs' copy engines as the host gave ask at once (the technique of
//! PRESERVE, arXiv 2501.08192). Piece `k` starts `k * prefetch_stride`
//! bytes in: one run from the region's start, or pieces spread evenly
//! over a region larger than the bytes asked (a GEMM split over `k`
//! starts reading at several places at once). The prefetch changes no
//! value: every output has the bits it has without it. The blocks are
//! extra, so the rows' blocks and their sums do not change either.

use crate::layout::{
    FORM_FUSED_NORM, FusedNormParams, OP_SUM, PREFETCH_PIECE_BYTES, lamport_stride_bytes,
};
use crate::packed::Element;
use crate::prims::row::{WARP, add_vec, block_sum, inv_rms, scale_vec, sum_sq_vec};
use crate::prims::slots::{push_slots, reduce_slots, take};
use crate::ptx;
use crate::sync::pick;

/// # Safety
/// `p.ar.pads` must hold the mapped pads of W ranks (`rank < W`);
/// `p.ar.input` and `p.ar.output` (equal or not overlapping), `residual`
/// and `normed` hold `rows * hidden` elements, `weight` `hidden`, all five
/// 16-byte aligned and `residual` and `normed` overlapping nothing else;
/// `hidden` is a multiple of `T::LANES`, `p.ar.elems` is `rows * hidden`
/// and its bytes fit `lamport_slot_bytes(W)`; every rank passes the same
/// `rows` and `hidden` and launches blocks of the same shape
/// (`layout::fused_norm_threads`); `prefetch_blocks` is below the grid,
/// and a prefetch region (if any) is 16-byte aligned device memory of
/// whole 16-byte words holding every piece (`prefetch_stride` and
/// `prefetch_bytes` multiples of 16).
#[inline(always)]
pub(crate) unsafe fn lamport_rmsnorm<T: Element, const W: usize>(p: &FusedNormParams) {
    let a = &p.ar;
    let threads = ptx::block_dim_x() as usize;
    let hidden = p.hidden as usize;
    let row_vecs = hidden / T::LANES;
    // The host's promises the kernel cannot do without: whole vectors per
    // row, whole warps, no more warps than the gather scratch holds, and a
    // block left for the rows.
    if !hidden.is_multiple_of(T::LANES)
        || !threads.is_multiple_of(WARP as usize)
        || threads > WARP as usize * ptx::BLOCK_GATHER_WARPS
        || p.prefetch_blocks >= ptx::grid_dim_x()
    {
        ptx::trap();
    }
    let elems = a.elems as usize;
    let vecs = elems / T::LANES;
    let slot_bytes = lamport_stride_bytes(vecs) as u64;
    let t = ptx::thread_idx_x() as usize;
    let tid = ptx::block_idx_x() as usize * threads + t;
    let stride = ptx::grid_dim_x() as usize * threads;

    // SAFETY: the host passes this rank's mapped pad; every thread of the
    // block gets here (the check above traps whole blocks or none); the
    // slots hold the whole message (caller's promise).
    let call = unsafe { push_slots::<T, W>(a, slot_bytes, vecs, true, tid, stride) };
    let buffer_off = call.buffer_off;

    // The prefetching blocks are the grid's last (NOTE [l2 prefetch]).
    let grid = ptx::grid_dim_x() as usize;
    let prefetch_blocks = p.prefetch_blocks as usize;
    let row_blocks = grid - prefetch_blocks;
    let block = ptx::block_idx_x() as usize;
    if block >= row_blocks {
        let pieces = (p.prefetch_bytes as usize).div_ceil(PREFETCH_PIECE_BYTES);
        let mut k = t * prefetch_blocks + (block - row_blocks);
        while k < pieces {
            let bytes =
                (p.prefetch_bytes as usize - k * PREFETCH_PIECE_BYTES).min(PREFETCH_PIECE_BYTES);
            let off = k * p.prefetch_stride as usize;
            // SAFETY: the piece lies inside the region, which is 16-byte
            // aligned, as are the stride and the pieces' lengths (caller's
            // promise: the last piece ends inside it).
            unsafe { ptx::prefetch_bulk_l2((p.prefetch as *const u8).add(off), bytes as u32) };
            k += prefetch_blocks * threads;
        }
    }

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
    let mut row = block;
    while row < p.rows as usize && block < row_blocks {
        let first = row * row_vecs;
        let mut sq = 0.0f32;
        // Its own loop over `take` (through `prims::slots::take_each`,
        // `lamport_rmsnorm_f32_w5` took 56 registers instead of 48).
        let mut j = t;
        while j < row_vecs {
            let i = first + j;
            // SAFETY: i < vecs lies inside our buffer's slots and the
            // caller's buffers, which are 16-byte aligned.
            unsafe {
                let raw = take::<W, FORM_FUSED_NORM>(own, slot_bytes, i, a);
                let sum = T::narrow(reduce_slots::<T, W, OP_SUM>(raw));
                ptx::st_global_v4_u32(output.add(i), sum);
                let new = add_vec::<T>(sum, ptx::ld_global_v4_u32(residual.add(i)));
                ptx::st_global_v4_u32(residual.add(i), new);
                sq += sum_sq_vec::<T>(new);
            }
            j += threads;
        }
        // SAFETY: every thread of the block gets here (block-uniform
        // rows); the block's shape is the caller's promise.
        let total = unsafe { block_sum(sq) };
        let inv = inv_rms(total, hidden, p.eps);
        let mut j = t;
        while j < row_vecs {
            // SAFETY: j < row_vecs lies inside `weight`, and `first + j`
            // inside `residual` and `normed`; this thread stored that
            // residual vector above.
            unsafe {
                let x = ptx::ld_global_v4_u32(residual.add(first + j));
                let w = ptx::ld_global_v4_u32(weight.add(j));
                ptx::st_global_v4_u32(normed.add(first + j), scale_vec::<T>(x, inv, w));
            }
            j += threads;
        }
        row += row_blocks;
    }
}
