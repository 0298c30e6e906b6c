//! The soak's fill and check kernels (`intranode-bench soak`): they write
//! a call's inputs from the pattern of [`intranode_kernels_gpu::pattern`] and count the
//! output elements off its expected value, so a million checked calls
//! never move data through the host. Plain grid-stride loops over scalar
//! elements: they run next to an all-reduce that moves the same bytes over
//! NVLink, so their speed hardly matters.

use intranode_kernels_gpu::packed::{Bf16, Element, F16};
use intranode_kernels_gpu::pattern::{self, SoakParams};
use intranode_kernels_gpu::ptx;

#[inline(always)]
fn grid() -> (usize, usize) {
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;
    (tid, stride)
}

/// # Safety
/// `p.input` and `p.output` must each hold `p.elems` elements of `T`.
#[inline(always)]
unsafe fn fill<T: Element>(p: &SoakParams) {
    let (tid, stride) = grid();
    let n = p.elems as usize;
    let input = p.input as *mut T;
    let output = p.output as *mut T;
    let mut i = tid;
    while i < n {
        // SAFETY: i < n, inside both buffers (caller's promise).
        unsafe {
            T::store(
                input.add(i),
                pattern::input(p.seed, p.call, p.rank, i as u64),
            );
            if p.output != p.input {
                // NaN: no reduction produces it, so an element the
                // all-reduce never writes fails the check.
                T::store(output.add(i), f32::NAN);
            }
        }
        i += stride;
    }
}

/// # Safety
/// `p.output` must hold `p.elems` elements of `T`; `p.mismatches` must be
/// a valid u32 in global memory.
#[inline(always)]
unsafe fn check<T: Element>(p: &SoakParams) {
    let (tid, stride) = grid();
    let n = p.elems as usize;
    let output = p.output as *const T;
    let mut bad = 0u32;
    let mut i = tid;
    while i < n {
        // SAFETY: i < n, inside the buffer (caller's promise).
        let got = unsafe { T::load(output.add(i)) };
        let want = pattern::expected(p.seed, p.call, p.world, i as u64, p.op);
        if !pattern::within_tolerance(got, want, p.elem_bytes, p.is_f16 != 0) {
            bad += 1;
        }
        i += stride;
    }
    if bad != 0 {
        // SAFETY: a valid global u32 (caller's promise).
        unsafe { ptx::atom_add_acq_rel_gpu_u32(p.mismatches as *mut u32, bad) };
    }
}

macro_rules! soak_kernels {
    ($($fill:ident, $check:ident: $t:ty;)*) => {$(
        /// # Safety
        /// See [`fill`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $fill(p: SoakParams) {
            // SAFETY: forwarded from the launcher.
            unsafe { fill::<$t>(&p) }
        }

        /// # Safety
        /// See [`check`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $check(p: SoakParams) {
            // SAFETY: forwarded from the launcher.
            unsafe { check::<$t>(&p) }
        }
    )*};
}

soak_kernels! {
    soak_fill_bf16, soak_check_bf16: Bf16;
    soak_fill_f16, soak_check_f16: F16;
    soak_fill_f32, soak_check_f32: f32;
}
