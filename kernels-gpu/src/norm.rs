//! RMSNorm, alone or after a residual add: the norms of a transformer
//! layer. `residual_rmsnorm_*` is the tail of the row-parallel GEMM,
//! after its all-reduce: `residual += input`, then `output = residual *
//! rsqrt(mean(residual^2) + eps) * weight`, row by row. `rmsnorm_*` is the
//! norm alone (`output = input * rsqrt(mean(input^2) + eps) * weight`),
//! for the first norm of a layer stack, whose input no add precedes.
//!
//! One warp per row: the row's sum of squares is a warp butterfly
//! (`shfl.sync`), no shared memory and no second kernel. The adds and
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

use crate::elem::Element;
use crate::layout::NormParams;
use crate::math;
use crate::ptx;

const WARP: u32 = 32;

/// Vectors each lane loads before it uses the first: enough loads in
/// flight to cover a row of 4096 bf16 in two rounds, few enough registers
/// (`UNROLL x 4` words per loaded buffer) to stay far from spilling; the
/// macro below writes out that many copies.
const UNROLL: usize = 8;

/// `$body` once for each `$k` in `0..UNROLL`, written out: with constant
/// indices the per-lane arrays live in registers (LLVM left the loop over
/// eight 16-byte vectors of eight lanes rolled, the arrays on the stack).
macro_rules! unrolled {
    ($k:ident => $body:block) => {{
        {
            let $k: usize = 0;
            $body
        }
        {
            let $k: usize = 1;
            $body
        }
        {
            let $k: usize = 2;
            $body
        }
        {
            let $k: usize = 3;
            $body
        }
        {
            let $k: usize = 4;
            $body
        }
        {
            let $k: usize = 5;
            $body
        }
        {
            let $k: usize = 6;
            $body
        }
        {
            let $k: usize = 7;
            $body
        }
    }};
}

/// The row this thread's warp starts at, the stride between its rows,
/// and its lane.
#[inline(always)]
fn warp_rows() -> (u64, u64, usize) {
    let tid = ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x();
    let warps = (ptx::grid_dim_x() * ptx::block_dim_x() / WARP) as u64;
    ((tid / WARP) as u64, warps, (tid % WARP) as usize)
}

/// The sum of `v` over the warp, on every lane.
///
/// # Safety
/// All 32 lanes must call it together.
#[inline(always)]
unsafe fn warp_sum(mut v: f32) -> f32 {
    let mut mask = WARP / 2;
    while mask > 0 {
        // SAFETY: the caller's promise: all 32 lanes get here together.
        v += unsafe { ptx::shfl_bfly_f32(v, mask) };
        mask /= 2;
    }
    v
}

/// `1 / sqrt(mean + eps)`, the scale of a row whose squares sum to
/// `sum_sq` (the same expression on both paths).
#[inline(always)]
fn inv_rms(sum_sq: f32, hidden: usize, eps: f32) -> f32 {
    1.0 / ptx::sqrt_rn_f32(sum_sq / hidden as f32 + eps)
}

/// Adds `r` to `x` lane by lane, rounded once to `T`.
#[inline(always)]
fn add_vec<T: Element>(x: [u32; 4], r: [u32; 4]) -> [u32; 4] {
    let (a, b) = (T::widen(x), T::widen(r));
    let mut s = [0.0f32; 8];
    let mut k = 0;
    while k < T::LANES {
        s[k] = a[k] + b[k];
        k += 1;
    }
    T::narrow(s)
}

/// The sum of squares of one vector's lanes.
#[inline(always)]
fn sum_sq_vec<T: Element>(v: [u32; 4]) -> f32 {
    let a = T::widen(v);
    let mut s = 0.0f32;
    let mut k = 0;
    while k < T::LANES {
        s += a[k] * a[k];
        k += 1;
    }
    s
}

/// `h * inv * w` lane by lane, rounded once to `T`.
#[inline(always)]
fn scale_vec<T: Element>(h: [u32; 4], inv: f32, w: [u32; 4]) -> [u32; 4] {
    let (a, b) = (T::widen(h), T::widen(w));
    let mut s = [0.0f32; 8];
    let mut k = 0;
    while k < T::LANES {
        s[k] = a[k] * inv * b[k];
        k += 1;
    }
    T::narrow(s)
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
            unrolled!(k => {
                // SAFETY: c + chunk <= vecs: every vector of the chunk lies
                // in row `row` (caller's promise on the buffers).
                x[k] = unsafe { ptx::ld_global_v4_u32(input.add(base + c + lane + k * 32)) };
            });
            if RESIDUAL {
                let mut r = [[0u32; 4]; UNROLL];
                unrolled!(k => {
                    // SAFETY: as above.
                    r[k] = unsafe { ptx::ld_global_v4_u32(residual.add(base + c + lane + k * 32)) };
                });
                unrolled!(k => {
                    // The sum as stored (rounded), as an unfused norm reads it.
                    x[k] = add_vec::<T>(x[k], r[k]);
                    // SAFETY: as above; `residual` overlaps no other buffer.
                    unsafe { ptx::st_global_v4_u32(residual.add(base + c + lane + k * 32), x[k]) };
                });
            }
            unrolled!(k => {
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
            unrolled!(k => {
                let v = c + lane + k * 32;
                // SAFETY: v < vecs; `weight` holds one row's vectors. This
                // lane stored the residual vectors it reads back here.
                unsafe {
                    h[k] = ptx::ld_global_v4_u32(normed.add(base + v));
                    w[k] = ptx::ld_global_v4_u32(weight.add(v));
                }
            });
            unrolled!(k => {
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
                T::store(output.add(base + i), h * inv * w);
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
        && math::all_vec_aligned(&[
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
