//! The decode benchmark's random fill: `fill_uniform_<t>(out, n, seed,
//! std)` writes `out[i] = uniform(seed, i, std)` rounded to the element
//! type (`intranode_kernels_gpu::decode::uniform`, a plain function the
//! host shares, so it recomputes any weight element by element and a
//! check never copies one back).

use intranode_kernels_gpu::decode::uniform;
use intranode_kernels_gpu::packed::{Bf16, Element, F16};
use intranode_kernels_gpu::ptx;

/// The grid-stride place of this thread: first index and stride.
#[inline(always)]
fn grid() -> (usize, usize) {
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;
    (tid, stride)
}

/// # Safety
/// `out` holds `n` elements.
#[inline(always)]
unsafe fn fill_uniform<T: Element>(out: *mut T, n: usize, seed: u64, std: f32) {
    let (tid, stride) = grid();
    let mut i = tid;
    while i < n {
        // SAFETY: i < n.
        unsafe { T::store(out.add(i), uniform(seed, i as u64, std)) };
        i += stride;
    }
}

macro_rules! fill_kernels {
    ($($fill:ident = $ty:ty);+ $(;)?) => {$(
        /// # Safety
        /// See `fill_uniform`; launched only by the test suites and
        /// the benchmark.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $fill(out: *mut $ty, n: usize, seed: u64, std: f32) {
            // SAFETY: the host upholds the contract.
            unsafe { fill_uniform(out, n, seed, std) }
        }
    )+};
}

fill_kernels!(
    fill_uniform_bf16 = Bf16;
    fill_uniform_f16 = F16;
    fill_uniform_f32 = f32;
);
