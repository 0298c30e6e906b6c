//! Typed launch of the decode benchmark's random fill
//! (`fill_uniform_*` in `crates/test-kernels-gpu/src/fill.rs`, of
//! `intranode_kernels_gpu::decode::uniform`), a test kernel: the
//! benchmark's weights and inputs, which the host can recompute element
//! by element.

use cudarc::driver::{CudaStream, DevicePtrMut};

use super::{DType, TestKernel, TestKernelModule, elementwise_grid};
use crate::error::{Error, Result};

impl TestKernelModule {
    /// Fills `out` with random values of standard deviation `std` on
    /// `stream`: element `i` is `intranode_kernels_gpu::decode::uniform(seed, i,
    /// std)` rounded to `T` (to nearest, ties to even), so the host can
    /// recompute any of them (the decode benchmark's weights).
    pub fn fill_uniform<T: DType>(
        &self,
        stream: &CudaStream,
        out: &mut impl DevicePtrMut<T>,
        seed: u64,
        std: f32,
    ) -> Result<()> {
        if !std.is_finite() {
            return Err(Error::InvalidArgument(format!(
                "fill_uniform: std {std} is not finite"
            )));
        }
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let (po, _ro) = out.device_ptr_mut(stream);
        // One element per work item: a 16-byte "element" makes the grid
        // helper count elements.
        let grid = elementwise_grid(n, intranode_kernels_gpu::index::VEC_BYTES);
        // SAFETY: `fill_uniform_<ty>(out: *T, n: usize, seed: u64, std:
        // f32)` takes these four arguments; `out` holds `n` elements and
        // stays alive until the stream passes the kernel (the guard
        // records that).
        unsafe {
            self.launch(
                TestKernel::FillUniform(T::ELEM.into()),
                grid,
                stream,
                (po, n, seed, std),
            )
        }
    }
}
