//! Typed launches of the RMSNorm kernels, with and without the residual
//! add (`kernels-gpu/src/norm.rs`).

use cudarc::driver::CudaStream;
use intranode_kernels_gpu::entries::Norm;
use intranode_kernels_gpu::layout::NormParams;

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
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_norm(stream, Norm::ResidualRmsNorm, elem, p) }
    }

    /// Enqueues `output = rmsnorm(input) * weight` over `p.rows` rows of
    /// `p.hidden` elements of `elem` (`p.residual` is not read).
    ///
    /// # Safety
    /// The addresses of `input`, `weight` and `output` in `p` must be
    /// device memory of this context holding what [`NormParams`] says,
    /// valid until the stream passes the kernel; `output` overlaps
    /// nothing else.
    pub(crate) unsafe fn rmsnorm_raw(
        &self,
        stream: &CudaStream,
        elem: ElemType,
        p: NormParams,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_norm(stream, Norm::RmsNorm, elem, p) }
    }

    /// # Safety
    /// `kernel` is one of the norm kernels, whose contract the caller
    /// upholds for `p`.
    unsafe fn launch_norm(
        &self,
        stream: &CudaStream,
        norm: Norm,
        elem: ElemType,
        p: NormParams,
    ) -> Result<()> {
        let kernel = super::present(norm.key(elem.into()), || {
            format!("{}_{}", norm.prefix(), elem.suffix())
        })?;
        if p.rows == 0 || p.hidden == 0 {
            return Ok(());
        }
        let warps_per_block = (THREADS / 32) as u64;
        let blocks = p.rows.div_ceil(warps_per_block).min(MAX_BLOCKS) as usize;
        // SAFETY: the norm kernels take one NormParams by value, launched
        // in whole warps; the addresses are the caller's promise.
        unsafe { self.launch(kernel, Grid::new(blocks, THREADS), stream, (p,)) }
    }
}
