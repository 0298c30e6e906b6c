//! Typed launches of the RMSNorm kernels, with and without the residual
//! add (`kernels-gpu/src/norm.rs`).

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
        p: NormParams,
    ) -> Result<()> {
        let name = match elem {
            ElemType::Bf16 => "residual_rmsnorm_bf16",
            ElemType::F16 => "residual_rmsnorm_f16",
            ElemType::F32 => "residual_rmsnorm_f32",
        };
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_norm(stream, name, p) }
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
        let name = match elem {
            ElemType::Bf16 => "rmsnorm_bf16",
            ElemType::F16 => "rmsnorm_f16",
            ElemType::F32 => "rmsnorm_f32",
        };
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_norm(stream, name, p) }
    }

    /// # Safety
    /// `name` is one of the norm kernels, whose contract the caller
    /// upholds for `p`.
    unsafe fn launch_norm(
        &self,
        stream: &CudaStream,
        name: &'static str,
        mut p: NormParams,
    ) -> Result<()> {
        if p.rows == 0 || p.hidden == 0 {
            return Ok(());
        }
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
        .ctx("cuLaunchKernel(rmsnorm)", Some(self.context().ordinal()))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn norm_kernels_are_in_the_ptx() {
        let names = super::super::entry_names(super::super::PTX);
        for t in ["bf16", "f16", "f32"] {
            for name in [format!("residual_rmsnorm_{t}"), format!("rmsnorm_{t}")] {
                assert!(names.contains(&name.as_str()), "{name}");
            }
        }
    }
}
