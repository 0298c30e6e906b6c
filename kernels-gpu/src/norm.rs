//! RMSNorm, alone or after a residual add: the norms of a transformer
//! layer. `residual_rmsnorm_*` is the tail of the row-parallel GEMM,
//! after its all-reduce: `residual += input`, then `output = residual *
//! rsqrt(mean(residual^2) + eps) * weight`, row by row. `rmsnorm_*` is the
//! norm alone (`output = input * rsqrt(mean(input^2) + eps) * weight`),
//! for the first norm of a layer stack, whose input no add precedes.
//!
//! One warp per row: the row's sum of squares is a warp butterfly
//! (`shfl.sync`), no shared memory and no second kernel. The per-vector
//! math and the butterfly are `prims::row`'s, shared with the fused norm
//! (`fused_norm.rs`). The adds and
//! products are in f32, each stored value rounded once to the element
//! type, and the norm reads the residual as stored (what an unfused
//! add-then-norm would read).
//!
//! Rows whose length is a whole number of 16-byte vectors, in buffers
//! that are 16-byte aligned, take the vector path: each lane keeps
//! [`UNROLL`] vectors in flight before it uses any, so a decode batch of
//! one row (one warp on the whole GPU) waits for memory about `hidden /
//! (32 x UNROLL x LANES)` times per pass instead of once per element
//! (`hidden / 32` times: a scalar loop of dependent loads took tens of
//! microseconds for one row of 4096). Other rows (odd hidden sizes,
//! misaligned views) walk element by element.

use crate::index;
use crate::layout::NormParams;
use crate::packed::Element;
use crate::prims::row::{WARP, add_vec, inv_rms, scale, scale_vec, sum_sq_vec, warp_sum};
use crate::prims::unroll;
use crate::ptx;

/// Vectors each lane loads before it uses the first: enough loads in
/// flight to cover a row of 4096 bf16 in two rounds, few enough registers
/// (`UNROLL x 4` words per loaded buffer) to stay far from spilling; the
/// loops below write out that many copies (`unroll!`: with constant
/// indices the per-lane arrays live in registers; LLVM left the loop over
/// eight 16-byte vectors of eight lanes rolled, the arrays on the stack).
const UNROLL: usize = 8;

/// The row this thread's warp starts at, the stride between its rows,
/// and its lane.
#[inline(always)]
fn warp_rows() -> (u64, u64, usize) {
    let tid = ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x();
    let warps = (ptx::grid_dim_x() * ptx::block_dim_x() / WARP) as u64;
    ((tid / WARP) as u64, warps, (tid % WARP) as usize)
}

/// The vector path: every pointer 16-byte aligned and `hidden` a whole
/// number of vectors. `RESIDUAL` adds `input` into `residual` first and
/// norms the sum; otherwise the norm reads `input` and `residual` is not
/// touched.
///
/// # Safety
/// As [`residual_rmsnorm`], plus the alignment above.
#[inline(always)]
unsafe fn rows_vec<T: Element, const RESIDUAL: bool>(p: &NormParams) {
    let (first_row, stride, lane) = warp_rows();
    let hidden = p.hidden as usize;
    let vecs = hidden / T::LANES;
    let input = p.input as *const [u32; 4];
    let residual = p.residual as *mut [u32; 4];
    let weight = p.weight as *const [u32; 4];
    let output = p.output as *mut [u32; 4];
    // What the norm reads: the updated residual, or the input.
    let normed = if RESIDUAL {
        residual as *const [u32; 4]
    } else {
        input
    };
    const { assert!(UNROLL == 8) };
    let chunk = WARP as usize * UNROLL;
    // Every lane of a warp has the same row and the same trip counts: the
    // loops are uniform across the warp, so the shuffles see all 32 lanes.
    let mut row = first_row;
    while row < p.rows {
        let base = row as usize * vecs;
        let mut sum_sq = 0.0f32;
        let mut c = 0;
        while c + chunk <= vecs {
            let mut x = [[0u32; 4]; UNROLL];
            unroll!(k in [0 1 2 3 4 5 6 7] => {
                // SAFETY: c + chunk <= vecs: every vector of the chunk lies
                // in row `row` (caller's promise on the buffers).
                x[k] = unsafe { ptx::ld_global_v4_u32(input.add(base + c + lane + k * 32)) };
            });
            if RESIDUAL {
                let mut r = [[0u32; 4]; UNROLL];
                unroll!(k in [0 1 2 3 4 5 6 7] => {
                    // SAFETY: as above.
                    r[k] = unsafe { ptx::ld_global_v4_u32(residual.add(base + c + lane + k * 32)) };
                });
                unroll!(k in [0 1 2 3 4 5 6 7] => {
                    // The sum as stored (rounded), as an unfused norm reads it.
                    x[k] = add_vec::<T>(x[k], r[k]);
                    // SAFETY: as above; `residual` overlaps no other buffer.
                    unsafe { ptx::st_global_v4_u32(residual.add(base + c + lane + k * 32), x[k]) };
                });
            }
            unroll!(k in [0 1 2 3 4 5 6 7] => {
                sum_sq += sum_sq_vec::<T>(x[k]);
            });
            c += chunk;
        }
        let mut v = c + lane;
        while v < vecs {
            // SAFETY: v < vecs, inside row `row`.
            unsafe {
                let mut x = ptx::ld_global_v4_u32(input.add(base + v));
                if RESIDUAL {
                    x = add_vec::<T>(x, ptx::ld_global_v4_u32(residual.add(base + v)));
                    ptx::st_global_v4_u32(residual.add(base + v), x);
                }
                sum_sq += sum_sq_vec::<T>(x);
            }
            v += WARP as usize;
        }
        // SAFETY: the loops above are uniform: all 32 lanes get here.
        let inv = inv_rms(unsafe { warp_sum(sum_sq) }, hidden, p.eps);
        let mut c = 0;
        while c + chunk <= vecs {
            let mut h = [[0u32; 4]; UNROLL];
            let mut w = [[0u32; 4]; UNROLL];
            unroll!(k in [0 1 2 3 4 5 6 7] => {
                let v = c + lane + k * 32;
                // SAFETY: v < vecs; `weight` holds one row's vectors. This
                // lane stored the residual vectors it reads back here.
                unsafe {
                    h[k] = ptx::ld_global_v4_u32(normed.add(base + v));
                    w[k] = ptx::ld_global_v4_u32(weight.add(v));
                }
            });
            unroll!(k in [0 1 2 3 4 5 6 7] => {
                let out = scale_vec::<T>(h[k], inv, w[k]);
                // SAFETY: as above; `output` overlaps no other buffer.
                unsafe { ptx::st_global_v4_u32(output.add(base + c + lane + k * 32), out) };
            });
            c += chunk;
        }
        let mut v = c + lane;
        while v < vecs {
            // SAFETY: v < vecs, as above.
            unsafe {
                let h = ptx::ld_global_v4_u32(normed.add(base + v));
                let w = ptx::ld_global_v4_u32(weight.add(v));
                ptx::st_global_v4_u32(output.add(base + v), scale_vec::<T>(h, inv, w));
            }
            v += WARP as usize;
        }
        row += stride;
    }
}

/// The element path, for any hidden size and alignment: lanes walk the
/// row element by element (`lane, lane + 32, ...`).
///
/// # Safety
/// As [`residual_rmsnorm`].
#[inline(always)]
unsafe fn rows_scalar<T: Element, const RESIDUAL: bool>(p: &NormParams) {
    let (first_row, stride, lane) = warp_rows();
    let hidden = p.hidden as usize;
    let (input, residual, weight, output) = (
        p.input as *const T,
        p.residual as *mut T,
        p.weight as *const T,
        p.output as *mut T,
    );
    let normed = if RESIDUAL {
        residual as *const T
    } else {
        input
    };
    // Uniform loops, as on the vector path.
    let mut row = first_row;
    while row < p.rows {
        let base = row as usize * hidden;
        let mut sum_sq = 0.0f32;
        let mut i = lane;
        while i < hidden {
            // SAFETY: i < hidden, inside row `row` (caller's promise).
            unsafe {
                if RESIDUAL {
                    let h = T::load(input.add(base + i)) + T::load(residual.add(base + i));
                    T::store(residual.add(base + i), h);
                }
                // The value as stored (rounded), as an unfused norm reads it.
                let h = T::load(normed.add(base + i));
                sum_sq += h * h;
            }
            i += WARP as usize;
        }
        // SAFETY: all 32 lanes get here together (uniform loops).
        let inv = inv_rms(unsafe { warp_sum(sum_sq) }, hidden, p.eps);
        let mut i = lane;
        while i < hidden {
            // SAFETY: as above; `weight` holds `hidden` elements.
            unsafe {
                let h = T::load(normed.add(base + i));
                let w = T::load(weight.add(i));
                T::store(output.add(base + i), scale(h, inv, w));
            }
            i += WARP as usize;
        }
        row += stride;
    }
}

/// # Safety
/// `p.input`, `p.residual` (when `RESIDUAL`) and `p.output` hold `p.rows
/// * p.hidden` elements of `T`, `p.weight` holds `p.hidden`; `output`
/// (and `residual`, when `RESIDUAL`) do not overlap the others.
#[inline(always)]
pub(crate) unsafe fn residual_rmsnorm<T: Element, const RESIDUAL: bool>(p: &NormParams) {
    let residual = if RESIDUAL { p.residual } else { p.input };
    let aligned = (p.hidden as usize).is_multiple_of(T::LANES)
        && index::all_vec_aligned(&[
            p.input as usize,
            residual as usize,
            p.weight as usize,
            p.output as usize,
        ]);
    // SAFETY: the caller's contract; the vector path's alignment is
    // checked just above.
    unsafe {
        if aligned {
            rows_vec::<T, RESIDUAL>(p)
        } else {
            rows_scalar::<T, RESIDUAL>(p)
        }
    }
}
