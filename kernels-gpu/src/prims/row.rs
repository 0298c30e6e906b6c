//! The RMSNorm's row operations, shared by the unfused norm (`norm.rs`,
//! a warp per row) and the fused all-reduce + norm (`fused_norm.rs`, a
//! block per row): the residual add, the squares, the scale and the
//! weight product, each in f32 with every stored value rounded once to
//! the element type, and the row's sum over a warp or a block.
//!
//! One definition for both paths makes them agree by construction where
//! their inputs do: given the same all-reduced sum (the fused kernel's is
//! the Lamport one-shot's, rank order and rounding included), the new
//! residual is the same bits fused or not, and so is the normed output
//! wherever the row's sum of squares is (a fused block of one warp sums
//! the same vectors per lane, in the same order, with the same butterfly
//! as the unfused warp). With more warps per block the fused sum adds the
//! warps' sums in warp order, so the normed output may differ from the
//! unfused one in the last bit; every rank computes the same bits either
//! way.

use crate::packed::Element;
use crate::prims::grid::unroll;
use crate::ptx;

/// Lanes of a warp.
pub const WARP: u32 = 32;

/// The sum of `v` over the warp, on every lane: a butterfly (IEEE
/// addition commutes, so every lane ends with the same value).
///
/// # Safety
/// All 32 lanes must call it together.
#[inline(always)]
pub unsafe fn warp_sum(mut v: f32) -> f32 {
    let mut mask = WARP / 2;
    while mask > 0 {
        // SAFETY: the caller's promise: all 32 lanes get here together.
        v += unsafe { ptx::shfl_bfly_f32(v, mask) };
        mask /= 2;
    }
    v
}

/// The sum of `v` over the block, the same bits in every thread: a warp
/// butterfly ([`warp_sum`]), then the warps' sums added in warp order.
///
/// # Safety
/// Every thread of the block calls it together; whole warps, at most
/// `32 * ptx::BLOCK_GATHER_WARPS` threads.
#[inline(always)]
pub unsafe fn block_sum(v: f32) -> f32 {
    // SAFETY: the whole block, so every lane of each warp, gets here.
    let s = unsafe { warp_sum(v) };
    // SAFETY: forwarded from the caller.
    let parts = unsafe { ptx::block_gather_warp_f32(s) };
    let warps = ptx::block_dim_x() / WARP;
    let mut total = parts[0];
    // Constant indices (`unroll!`): a loop over `parts` that stayed rolled
    // would move it to local memory.
    const { assert!(ptx::BLOCK_GATHER_WARPS == 16) };
    unroll!(w in [1 2 3 4 5 6 7 8 9 10 11 12 13 14 15] => {
        if (w as u32) < warps {
            total += parts[w];
        }
    });
    total
}

/// `1 / sqrt(mean + eps)`, the scale of a row of `hidden` elements whose
/// squares sum to `sum_sq`.
#[inline(always)]
pub fn inv_rms(sum_sq: f32, hidden: usize, eps: f32) -> f32 {
    1.0 / ptx::sqrt_rn_f32(sum_sq / hidden as f32 + eps)
}

/// Adds `r` to `x` lane by lane, rounded once to `T`: the new residual.
#[inline(always)]
pub fn add_vec<T: Element>(x: [u32; 4], r: [u32; 4]) -> [u32; 4] {
    let (a, b) = (T::widen(x), T::widen(r));
    let mut s = [0.0f32; 8];
    let mut k = 0;
    while k < T::LANES {
        s[k] = a[k] + b[k];
        k += 1;
    }
    T::narrow(s)
}

/// The sum of squares of one vector's lanes, in lane order. Norms read
/// the value as stored (rounded), as an unfused norm after its add would.
#[inline(always)]
pub fn sum_sq_vec<T: Element>(v: [u32; 4]) -> f32 {
    let a = T::widen(v);
    let mut s = 0.0f32;
    let mut k = 0;
    while k < T::LANES {
        s += a[k] * a[k];
        k += 1;
    }
    s
}

/// One output element: `h * inv * w`, in that order.
#[inline(always)]
pub fn scale(h: f32, inv: f32, w: f32) -> f32 {
    h * inv * w
}

/// [`scale`] lane by lane, rounded once to `T`.
#[inline(always)]
pub fn scale_vec<T: Element>(h: [u32; 4], inv: f32, w: [u32; 4]) -> [u32; 4] {
    let (a, b) = (T::widen(h), T::widen(w));
    let mut s = [0.0f32; 8];
    let mut k = 0;
    while k < T::LANES {
        s[k] = scale(a[k], inv, b[k]);
        k += 1;
    }
    T::narrow(s)
}
