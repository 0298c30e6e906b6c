//! Typed launch of the residual add + RMSNorm kernels
//! (`kernels-gpu/src/norm.rs`).

use cudarc::driver::CudaStream;
use kernels_gpu::entries::Kernel;
use kernels_gpu::layout::NormParams;

use super::launch::Grid;
use super::{ElemType, KernelModule};
use crate::error::Result;

/// Threads of a block: 4 warps, one row each.
const THREADS: usize = 128;
/// Most blocks of a launch (8 per SM of a 132-SM H200); the warps walk
/// further rows.
const MAX_BLOCKS: u64 = 132 * 8;

impl KernelModule {
    /// Enqueues `residual += input; output = rmsnorm(residual) * weight`
    /// over `p.rows` rows of `p.hidden` elements of `elem`.
    ///
    /// # Safety
    /// The addresses in `p` must be device memory of this context holding
    /// what [`NormParams`] says, valid until the stream passes the kernel;
    /// `residual` and `output` overlap nothing else.
    pub(crate) unsafe fn residual_rmsnorm_raw(
        &self,
        stream: &CudaStream,
        elem: ElemType,
        p: NormParams,
    ) -> Result<()> {
        if p.rows == 0 || p.hidden == 0 {
            return Ok(());
        }
        let warps_per_block = (THREADS / 32) as u64;
        let blocks = p.rows.div_ceil(warps_per_block).min(MAX_BLOCKS) as usize;
        let kernel = Kernel::ResidualRmsNorm(elem.into());
        // SAFETY: the kernel takes one NormParams by value, launched in
        // whole warps; the addresses are the caller's promise.
        unsafe { self.launch(kernel, Grid::new(blocks, THREADS), stream, (p,)) }
    }
}
