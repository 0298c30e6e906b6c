//! Typed launches of the decode layer's SiLU x mul and of the random fill
//! (`kernels-gpu/src/decode.rs`).

use std::ffi::c_void;

use cudarc::driver::{CudaStream, DevicePtrMut};

use super::{DType, ElemType, KernelModule, elementwise_grid};
use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};

impl KernelModule {
    /// Enqueues `out[r][j] = silu(gate_up[r][j]) * gate_up[r][cols + j]`
    /// for `rows` rows of `cols` output elements of `elem`.
    ///
    /// # Safety
    /// `gate_up` must be device memory of this context holding `rows x 2
    /// x cols` elements and `out` `rows x cols`, not overlapping, both
    /// valid until the stream passes the kernel.
    pub(crate) unsafe fn silu_mul_raw(
        &self,
        stream: &CudaStream,
        elem: ElemType,
        gate_up: u64,
        out: u64,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        let n = rows * cols;
        if n == 0 {
            return Ok(());
        }
        let f = self.function(match elem {
            ElemType::Bf16 => "silu_mul_bf16",
            ElemType::F16 => "silu_mul_f16",
            ElemType::F32 => "silu_mul_f32",
        })?;
        let (mut g, mut o, mut r, mut c) = (gate_up, out, rows, cols);
        let (grid, block) = elementwise_grid(n, elem.bytes());
        let mut params: [*mut c_void; 4] = [
            (&mut g) as *mut _ as *mut c_void,
            (&mut o) as *mut _ as *mut c_void,
            (&mut r) as *mut _ as *mut c_void,
            (&mut c) as *mut _ as *mut c_void,
        ];
        self.bind()?;
        // SAFETY: `silu_mul_<ty>(gate_up: *T, out: *T, rows: usize, cols:
        // usize)` takes exactly these four 8-byte arguments; the buffers
        // are the caller's promise.
        unsafe { driver_ext::launch(f, grid, block, 0, stream.cu_stream(), &mut params) }
            .ctx("cuLaunchKernel(silu_mul)", Some(self.context().ordinal()))
    }

    /// Fills `out` with random values of standard deviation `std` on
    /// `stream`: element `i` is `kernels_gpu::decode::uniform(seed, i,
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
        let f = self.function(match T::ELEM {
            ElemType::Bf16 => "fill_uniform_bf16",
            ElemType::F16 => "fill_uniform_f16",
            ElemType::F32 => "fill_uniform_f32",
        })?;
        let (mut po, _ro) = out.device_ptr_mut(stream);
        let (mut n_arg, mut seed_arg, mut std_arg) = (n, seed, std);
        // One element per work item: a 16-byte "element" makes the grid
        // helper count elements.
        let (grid, block) = elementwise_grid(n, kernels_gpu::math::VEC_BYTES);
        let mut params: [*mut c_void; 4] = [
            (&mut po) as *mut _ as *mut c_void,
            (&mut n_arg) as *mut _ as *mut c_void,
            (&mut seed_arg) as *mut _ as *mut c_void,
            (&mut std_arg) as *mut _ as *mut c_void,
        ];
        self.bind()?;
        // SAFETY: `fill_uniform_<ty>(out: *T, n: usize, seed: u64, std:
        // f32)` takes these four arguments (8, 8, 8 and 4 bytes); `out`
        // holds `n` elements and stays alive until the stream passes the
        // kernel (the guard records that).
        unsafe { driver_ext::launch(f, grid, block, 0, stream.cu_stream(), &mut params) }.ctx(
            "cuLaunchKernel(fill_uniform)",
            Some(self.context().ordinal()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PTX, entry_names};

    #[test]
    fn decode_kernels_are_in_the_ptx() {
        let names = entry_names(PTX);
        for t in ["bf16", "f16", "f32"] {
            for name in [format!("silu_mul_{t}"), format!("fill_uniform_{t}")] {
                assert!(names.contains(&name.as_str()), "{name}");
            }
        }
    }

    #[test]
    fn silu_takes_the_hardware_exponential() {
        // The SiLU's exp is `ex2.approx` (ptx.rs), not a call into `core`.
        let body = PTX
            .split(".entry silu_mul_bf16(")
            .nth(1)
            .and_then(|rest| rest.split(".entry ").next())
            .unwrap_or_default();
        assert!(body.contains("ex2.approx.ftz.f32"), "{body}");
    }
}
