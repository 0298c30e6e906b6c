//! Residual add + RMSNorm after an all-reduce, the tail of a transformer
//! layer's row-parallel GEMM: `residual += input`, then `output =
//! residual * rsqrt(mean(residual^2) + eps) * weight`, row by row.
//!
//! One warp per row: the row's sum of squares is a warp butterfly
//! (`shfl.sync`), no shared memory and no second kernel. Lanes walk the
//! row element by element (`lane, lane + 32, ...`), so any hidden size and
//! any alignment work; the adds and products are in f32, each stored value
//! rounded once to the element type, and the norm reads the residual as
//! stored (what an unfused add-then-norm would read).

use crate::elem::{Bf16, Element, F16};
use crate::layout::NormParams;
use crate::ptx;

const WARP: u32 = 32;

/// # Safety
/// `p.input`, `p.residual` and `p.output` hold `p.rows * p.hidden`
/// elements of `T`, `p.weight` holds `p.hidden`; `residual` and `output`
/// do not overlap the others.
#[inline(always)]
unsafe fn residual_rmsnorm<T: Element>(p: &NormParams) {
    let tid = ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x();
    let lane = (tid % WARP) as usize;
    let warps = (ptx::grid_dim_x() * ptx::block_dim_x() / WARP) as u64;
    let hidden = p.hidden as usize;
    let (input, residual, weight, output) = (
        p.input as *const T,
        p.residual as *mut T,
        p.weight as *const T,
        p.output as *mut T,
    );
    // Every lane of a warp has the same row: the loops below are uniform
    // across the warp, so the shuffles see all 32 lanes.
    let mut row = (tid / WARP) as u64;
    while row < p.rows {
        let base = row as usize * hidden;
        let mut sum_sq = 0.0f32;
        let mut i = lane;
        while i < hidden {
            // SAFETY: i < hidden, inside row `row` (caller's promise).
            unsafe {
                let h = T::load(input.add(base + i)) + T::load(residual.add(base + i));
                T::store(residual.add(base + i), h);
                // The value as stored (rounded), as an unfused norm reads it.
                let h = T::load(residual.add(base + i));
                sum_sq += h * h;
            }
            i += WARP as usize;
        }
        let mut mask = WARP / 2;
        while mask > 0 {
            // SAFETY: all 32 lanes get here together (uniform loops).
            sum_sq += unsafe { ptx::shfl_bfly_f32(sum_sq, mask) };
            mask /= 2;
        }
        let inv_rms = 1.0 / ptx::sqrt_rn_f32(sum_sq / hidden as f32 + p.eps);
        let mut i = lane;
        while i < hidden {
            // SAFETY: as above; `weight` holds `hidden` elements.
            unsafe {
                let h = T::load(residual.add(base + i));
                let w = T::load(weight.add(i));
                T::store(output.add(base + i), h * inv_rms * w);
            }
            i += WARP as usize;
        }
        row += warps;
    }
}

macro_rules! norm_kernels {
    ($($name:ident = $ty:ty),+ $(,)?) => {$(
        /// # Safety
        /// See [`residual_rmsnorm`]; launched only by the host crate, in
        /// whole warps.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: NormParams) {
            // SAFETY: the host upholds the contract.
            unsafe { residual_rmsnorm::<$ty>(&p) }
        }
    )+};
}

norm_kernels!(
    residual_rmsnorm_bf16 = Bf16,
    residual_rmsnorm_f16 = F16,
    residual_rmsnorm_f32 = f32,
);
