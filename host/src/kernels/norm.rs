//! Typed launch of the residual add + RMSNorm kernels
//! (`kernels-gpu/src/norm.rs`).

use std::ffi::c_void;

use cudarc::driver::CudaStream;
use kernels_gpu::layout::NormParams;

use super::{ElemType, KernelModule};
use crate::driver_ext;
use crate::error::{DriverContext, Result};

/// Threads of a block: 4 warps, one row each.
const THREADS: u32 = 128;
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
        mut p: NormParams,
    ) -> Result<()> {
        if p.rows == 0 || p.hidden == 0 {
            return Ok(());
        }
        let name = match elem {
            ElemType::Bf16 => "residual_rmsnorm_bf16",
            ElemType::F16 => "residual_rmsnorm_f16",
            ElemType::F32 => "residual_rmsnorm_f32",
        };
        let f = self.function(name)?;
        let warps_per_block = u64::from(THREADS / 32);
        let blocks = p.rows.div_ceil(warps_per_block).min(MAX_BLOCKS) as u32;
        let mut arg = (&mut p) as *mut NormParams as *mut c_void;
        self.bind()?;
        // SAFETY: the kernel takes one NormParams by value, launched in
        // whole warps; the addresses are the caller's promise.
        unsafe {
            driver_ext::launch(
                f,
                blocks,
                THREADS,
                0,
                stream.cu_stream(),
                std::slice::from_mut(&mut arg),
            )
        }
        .ctx(
            "cuLaunchKernel(residual_rmsnorm)",
            Some(self.context().ordinal()),
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn norm_kernels_are_in_the_ptx() {
        let names = super::super::entry_names(super::super::PTX);
        for t in ["bf16", "f16", "f32"] {
            let name = format!("residual_rmsnorm_{t}");
            assert!(names.contains(&name.as_str()), "{name}");
        }
    }
}
