//! The reduction every all-reduce form shares: accumulation in f32, in
//! the same order on every rank (rank order 0..W), so results are bitwise
//! identical across ranks.

use crate::layout::{OP_AVG, OP_MAX, OP_MIN};
use crate::packed::{Element, Lanes};
use crate::ptx;

/// `a op b`, lane by lane.
#[inline(always)]
pub fn combine<const OP: u32>(a: Lanes, b: &Lanes) -> Lanes {
    let mut out = a;
    let mut k = 0;
    while k < 8 {
        out[k] = match OP {
            OP_MIN => a[k].min(b[k]),
            OP_MAX => a[k].max(b[k]),
            _ => a[k] + b[k],
        };
        k += 1;
    }
    out
}

/// `raw[0] op raw[1] op ...`, widened to f32, in index (rank) order: the
/// one accumulation order every kernel uses, so ranks agree bitwise.
#[inline(always)]
pub fn combine_in_order<T: Element, const N: usize, const OP: u32>(raw: &[[u32; 4]; N]) -> Lanes {
    let mut acc = T::widen(raw[0]);
    let mut r = 1;
    while r < N {
        acc = combine::<OP>(acc, &T::widen(raw[r]));
        r += 1;
    }
    acc
}

/// For [`OP_AVG`], divides the sum of `ranks` inputs by `ranks`.
#[inline(always)]
pub fn finish_op<const OP: u32>(mut acc: Lanes, ranks: usize) -> Lanes {
    if OP == OP_AVG {
        let mut k = 0;
        while k < 8 {
            acc[k] /= ranks as f32;
            k += 1;
        }
    }
    acc
}

/// Vector `i` of every source (`srcs[r]`, a rank's memory), all N loads
/// issued before any is used: they travel over NVLink in parallel instead
/// of one round trip after another.
///
/// # Safety
/// Every `srcs[r]` must hold vector `i`, 16-byte aligned.
#[inline(always)]
pub unsafe fn load_each<const N: usize>(srcs: &[u64; N], i: usize) -> [[u32; 4]; N] {
    let mut raw = [[0u32; 4]; N];
    let mut r = 0;
    while r < N {
        // SAFETY: forwarded from the caller.
        raw[r] = unsafe { ptx::ld_global_v4_u32((srcs[r] as *const [u32; 4]).add(i)) };
        r += 1;
    }
    raw
}

/// Reduces vector `i` of every rank's source (`srcs[r]`: rank `r`'s
/// half, or its copy of a symmetric input), in rank order, rounded to `T`.
///
/// # Safety
/// As for [`load_each`].
#[inline(always)]
pub unsafe fn reduce_vec<T: Element, const W: usize, const OP: u32>(
    srcs: &[u64; W],
    i: usize,
) -> [u32; 4] {
    // SAFETY: forwarded from the caller.
    let raw = unsafe { load_each::<W>(srcs, i) };
    T::narrow(finish_op::<OP>(combine_in_order::<T, W, OP>(&raw), W))
}
