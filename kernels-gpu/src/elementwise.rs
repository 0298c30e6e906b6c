//! Elementwise kernels: the smallest typed kernels, used by the first GPU
//! test to prove the whole pipeline (Rust -> PTX -> cudarc launch).

use crate::index;
use crate::packed::{Bf16, Element, F16};
use crate::ptx;

/// `out[i] = a[i] + b[i]`, computed in f32 and rounded once.
///
/// Grid-stride over 16-byte vectors when all three pointers are 16-byte
/// aligned, then a scalar tail (or scalar throughout when they are not).
///
/// # Safety
/// `a`, `b` and `out` must each hold `n` elements of device memory.
#[inline(always)]
unsafe fn add<T: Element>(a: *const T, b: *const T, out: *mut T, n: usize) {
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;
    let aligned = index::all_vec_aligned(&[a as usize, b as usize, out as usize]);
    let (vecs, tail_start) = if aligned {
        index::split_vec_tail(n, T::BYTES)
    } else {
        (0, 0)
    };

    let av = a as *const [u32; 4];
    let bv = b as *const [u32; 4];
    let ov = out as *mut [u32; 4];
    let mut i = tid;
    while i < vecs {
        // SAFETY: i < vecs, and vecs whole vectors lie inside all three
        // buffers, which are 16-byte aligned.
        unsafe {
            let x = T::widen(ptx::ld_global_v4_u32(av.add(i)));
            let y = T::widen(ptx::ld_global_v4_u32(bv.add(i)));
            let mut z = [0.0f32; 8];
            let mut k = 0;
            while k < T::LANES {
                z[k] = x[k] + y[k];
                k += 1;
            }
            ptx::st_global_v4_u32(ov.add(i), T::narrow(z));
        }
        i += stride;
    }

    let mut j = tail_start + tid;
    while j < n {
        // SAFETY: j < n, inside all three buffers.
        unsafe { T::store(out.add(j), T::load(a.add(j)) + T::load(b.add(j))) };
        j += stride;
    }
}

/// # Safety
/// See [`add`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn add_bf16(
    a: *const Bf16,
    b: *const Bf16,
    out: *mut Bf16,
    n: usize,
) {
    // SAFETY: forwarded from the launcher.
    unsafe { add(a, b, out, n) }
}

/// # Safety
/// See [`add`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn add_f16(a: *const F16, b: *const F16, out: *mut F16, n: usize) {
    // SAFETY: forwarded from the launcher.
    unsafe { add(a, b, out, n) }
}

/// # Safety
/// See [`add`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn add_f32(a: *const f32, b: *const f32, out: *mut f32, n: usize) {
    // SAFETY: forwarded from the launcher.
    unsafe { add(a, b, out, n) }
}

/// `y[i] += a * x[i]` in f32, the multiply and the add each rounded (no
/// fused multiply-add, so a host reference `y + a * x` matches bit for
/// bit): the optimizer step of the data-parallel example.
///
/// # Safety
/// `x` and `y` must each hold `n` f32 of device memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn axpy_f32(y: *mut f32, x: *const f32, a: f32, n: usize) {
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;
    let mut i = tid;
    while i < n {
        // SAFETY: i < n, inside both buffers.
        unsafe { *y.add(i) += a * *x.add(i) };
        i += stride;
    }
}
