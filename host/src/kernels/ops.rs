//! Typed launches of the cast kernels (`kernels-gpu/src/cast.rs`) and of
//! `axpy_f32`: what gradient compression and the optimizer step of the
//! data-parallel example need.

use std::ffi::c_void;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use super::{DType, ElemType, KernelModule, elementwise_grid};
use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};

/// The kernel casting `src` to `dst`: f32 to and from the 16-bit types.
pub(crate) fn cast_kernel_name(src: ElemType, dst: ElemType) -> Option<&'static str> {
    match (src, dst) {
        (ElemType::F32, ElemType::Bf16) => Some("cast_f32_bf16"),
        (ElemType::F32, ElemType::F16) => Some("cast_f32_f16"),
        (ElemType::Bf16, ElemType::F32) => Some("cast_bf16_f32"),
        (ElemType::F16, ElemType::F32) => Some("cast_f16_f32"),
        _ => None,
    }
}

impl KernelModule {
    /// `dst[i] = src[i]` converted, on `stream`: f32 to bf16 or f16
    /// (rounded to nearest, ties to even, as `half`'s `from_f32`), or bf16
    /// or f16 to f32 (exact). Equal lengths; any length and alignment
    /// (misaligned views take the scalar path).
    pub fn cast<S: DType, D: DType>(
        &self,
        stream: &CudaStream,
        src: &impl DevicePtr<S>,
        dst: &mut impl DevicePtrMut<D>,
    ) -> Result<()> {
        let n = src.len();
        if dst.len() != n {
            return Err(Error::InvalidArgument(format!(
                "cast: lengths differ (src {n}, dst {})",
                dst.len()
            )));
        }
        let name = cast_kernel_name(S::ELEM, D::ELEM).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "cast: no kernel from {:?} to {:?} (only f32 to and from bf16/f16)",
                S::ELEM,
                D::ELEM
            ))
        })?;
        if n == 0 {
            return Ok(());
        }
        let f = self.function(name)?;
        let (mut ps, _rs) = src.device_ptr(stream);
        let (mut pd, _rd) = dst.device_ptr_mut(stream);
        let mut n_arg = n;
        // One work item per 16-byte vector of the 16-bit side.
        let (grid, block) = elementwise_grid(n, 2);
        let mut params: [*mut c_void; 3] = [
            (&mut ps) as *mut _ as *mut c_void,
            (&mut pd) as *mut _ as *mut c_void,
            (&mut n_arg) as *mut _ as *mut c_void,
        ];
        self.bind()?;
        // SAFETY: `cast_<s>_<d>(src: *S, dst: *D, n: usize)` takes exactly
        // these three 8-byte arguments; both buffers hold `n` elements
        // (checked above) and stay alive until the stream passes the
        // kernel (the guards record that); distinct element types, so the
        // two borrows are distinct buffers.
        unsafe { driver_ext::launch(f, grid, block, 0, stream.cu_stream(), &mut params) }
            .ctx("cuLaunchKernel(cast)", Some(self.context().ordinal()))
    }

    /// `y[i] += a * x[i]` in f32 on `stream`, multiply and add each
    /// rounded (no fused multiply-add). Equal lengths.
    pub fn axpy_f32(
        &self,
        stream: &CudaStream,
        a: f32,
        x: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
    ) -> Result<()> {
        let n = y.len();
        if x.len() != n {
            return Err(Error::InvalidArgument(format!(
                "axpy_f32: lengths differ (x {}, y {n})",
                x.len()
            )));
        }
        if n == 0 {
            return Ok(());
        }
        let f = self.function("axpy_f32")?;
        let (mut px, _rx) = x.device_ptr(stream);
        let (mut py, _ry) = y.device_ptr_mut(stream);
        let mut a_arg = a;
        let mut n_arg = n;
        // One work item per element: a 16-byte "element" makes the grid
        // helper count elements.
        let (grid, block) = elementwise_grid(n, kernels_gpu::math::VEC_BYTES);
        let mut params: [*mut c_void; 4] = [
            (&mut py) as *mut _ as *mut c_void,
            (&mut px) as *mut _ as *mut c_void,
            (&mut a_arg) as *mut _ as *mut c_void,
            (&mut n_arg) as *mut _ as *mut c_void,
        ];
        self.bind()?;
        // SAFETY: `axpy_f32(y: *f32, x: *f32, a: f32, n: usize)` takes these
        // four arguments (8, 8, 4 and 8 bytes); both buffers hold `n`
        // elements and stay alive until the stream passes the kernel.
        unsafe { driver_ext::launch(f, grid, block, 0, stream.cu_stream(), &mut params) }
            .ctx("cuLaunchKernel(axpy_f32)", Some(self.context().ordinal()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cast_kernels_exist_for_every_supported_pair() {
        let names = crate::kernels::entry_names(crate::kernels::PTX);
        let mut found = 0;
        for s in ElemType::ALL {
            for d in ElemType::ALL {
                if let Some(name) = cast_kernel_name(s, d) {
                    assert!(names.contains(&name), "{name} missing from the PTX");
                    found += 1;
                }
            }
        }
        assert_eq!(found, 4);
        assert_eq!(cast_kernel_name(ElemType::Bf16, ElemType::F16), None);
        assert_eq!(cast_kernel_name(ElemType::F32, ElemType::F32), None);
        assert!(names.contains(&"axpy_f32"));
    }
}
