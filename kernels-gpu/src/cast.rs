//! Element-type casts between f32 and the 16-bit types, for gradient
//! compression (`host/src/ddp/hooks.rs`: cast down, all-reduce, cast back).
//!
//! Rounding is to nearest, ties to even (`cvt.rn`), as `half`'s
//! `from_f32` on the host, so a host reference can compare bit for bit:
//! overflow gives infinity, subnormals are kept. Eight elements per thread
//! and step on the main path: one 16-byte vector of the 16-bit type against
//! two of f32.

use crate::index;
use crate::packed::{Bf16, Element, F16};
use crate::ptx;

/// `dst[i] = round(src[i])` for `i < n`.
///
/// # Safety
/// `src` must hold `n` f32 and `dst` `n` elements of `T`, both device
/// memory; they must not overlap.
#[inline(always)]
unsafe fn narrow<T: Element>(src: *const f32, dst: *mut T, n: usize) {
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;
    let aligned = index::all_vec_aligned(&[src as usize, dst as usize]);
    let (vecs, tail_start) = if aligned {
        index::split_vec_tail(n, T::BYTES)
    } else {
        (0, 0)
    };
    let sv = src as *const [u32; 4];
    let dv = dst as *mut [u32; 4];
    let mut i = tid;
    while i < vecs {
        // SAFETY: vector `i` of `dst` (8 elements) and vectors `2i`, `2i+1`
        // of `src` (the same 8 elements) are whole and aligned.
        unsafe {
            let a = ptx::ld_global_v4_u32(sv.add(2 * i));
            let b = ptx::ld_global_v4_u32(sv.add(2 * i + 1));
            let lanes = [
                f32::from_bits(a[0]),
                f32::from_bits(a[1]),
                f32::from_bits(a[2]),
                f32::from_bits(a[3]),
                f32::from_bits(b[0]),
                f32::from_bits(b[1]),
                f32::from_bits(b[2]),
                f32::from_bits(b[3]),
            ];
            ptx::st_global_v4_u32(dv.add(i), T::narrow(lanes));
        }
        i += stride;
    }
    let mut j = tail_start + tid;
    while j < n {
        // SAFETY: j < n, inside both buffers.
        unsafe { T::store(dst.add(j), *src.add(j)) };
        j += stride;
    }
}

/// `dst[i] = src[i]` widened exactly to f32, for `i < n`.
///
/// # Safety
/// `src` must hold `n` elements of `T` and `dst` `n` f32, both device
/// memory; they must not overlap.
#[inline(always)]
unsafe fn widen<T: Element>(src: *const T, dst: *mut f32, n: usize) {
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;
    let aligned = index::all_vec_aligned(&[src as usize, dst as usize]);
    let (vecs, tail_start) = if aligned {
        index::split_vec_tail(n, T::BYTES)
    } else {
        (0, 0)
    };
    let sv = src as *const [u32; 4];
    let dv = dst as *mut [u32; 4];
    let mut i = tid;
    while i < vecs {
        // SAFETY: as in `narrow`, with the roles of the buffers swapped.
        unsafe {
            let l = T::widen(ptx::ld_global_v4_u32(sv.add(i)));
            ptx::st_global_v4_u32(
                dv.add(2 * i),
                [
                    l[0].to_bits(),
                    l[1].to_bits(),
                    l[2].to_bits(),
                    l[3].to_bits(),
                ],
            );
            ptx::st_global_v4_u32(
                dv.add(2 * i + 1),
                [
                    l[4].to_bits(),
                    l[5].to_bits(),
                    l[6].to_bits(),
                    l[7].to_bits(),
                ],
            );
        }
        i += stride;
    }
    let mut j = tail_start + tid;
    while j < n {
        // SAFETY: j < n, inside both buffers.
        unsafe { *dst.add(j) = T::load(src.add(j)) };
        j += stride;
    }
}

/// # Safety
/// See [`narrow`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn cast_f32_bf16(src: *const f32, dst: *mut Bf16, n: usize) {
    // SAFETY: forwarded from the launcher.
    unsafe { narrow(src, dst, n) }
}

/// # Safety
/// See [`narrow`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn cast_f32_f16(src: *const f32, dst: *mut F16, n: usize) {
    // SAFETY: forwarded from the launcher.
    unsafe { narrow(src, dst, n) }
}

/// # Safety
/// See [`widen`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn cast_bf16_f32(src: *const Bf16, dst: *mut f32, n: usize) {
    // SAFETY: forwarded from the launcher.
    unsafe { widen(src, dst, n) }
}

/// # Safety
/// See [`widen`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn cast_f16_f32(src: *const F16, dst: *mut f32, n: usize) {
    // SAFETY: forwarded from the launcher.
    unsafe { widen(src, dst, n) }
}
