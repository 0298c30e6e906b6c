//! Typed launches of the cast kernels (`kernels-gpu/src/cast.rs`) and of
//! `axpy_f32`: what gradient compression and the optimizer step of the
//! data-parallel example need.

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use intranode_kernels_gpu::entries::{Axpy, Cast, KernelKey};

use super::{DType, ElemType, KernelModule, elementwise_grid};
use crate::error::{Error, Result};

/// The kernel casting `src` to `dst`: f32 to and from the 16-bit types.
pub(crate) fn cast_kernel(src: ElemType, dst: ElemType) -> Option<KernelKey<(u64, u64, usize)>> {
    // `None` for f32 to f32: no kernel.
    match (src, dst) {
        (ElemType::F32, to) => Cast::CastFromF32.key(to.into()),
        (from, ElemType::F32) => Cast::CastToF32.key(from.into()),
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
        let kernel = cast_kernel(S::ELEM, D::ELEM).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "cast: no kernel from {:?} to {:?} (only f32 to and from bf16/f16)",
                S::ELEM,
                D::ELEM
            ))
        })?;
        if n == 0 {
            return Ok(());
        }
        let (ps, _rs) = src.device_ptr(stream);
        let (pd, _rd) = dst.device_ptr_mut(stream);
        // One work item per 16-byte vector of the 16-bit side.
        let grid = elementwise_grid(n, 2);
        // SAFETY: `cast_<s>_<d>(src: *S, dst: *D, n: usize)` takes exactly
        // these three arguments; both buffers hold `n` elements (checked
        // above) and stay alive until the stream passes the kernel (the
        // guards record that); distinct element types, so the two borrows
        // are distinct buffers.
        unsafe { self.launch(kernel, grid, stream, (ps, pd, n)) }
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
        let (px, _rx) = x.device_ptr(stream);
        let (py, _ry) = y.device_ptr_mut(stream);
        // One work item per element: a 16-byte "element" makes the grid
        // helper count elements.
        let grid = elementwise_grid(n, intranode_kernels_gpu::index::VEC_BYTES);
        // SAFETY: `axpy_f32(y: *f32, x: *f32, a: f32, n: usize)` takes these
        // four arguments; both buffers hold `n` elements and stay alive
        // until the stream passes the kernel.
        let key = super::present(Axpy::AxpyF32.key(), || "axpy_f32".into())?;
        // SAFETY: as above.
        unsafe { self.launch(key, grid, stream, (py, px, a, n)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_exist_exactly_between_f32_and_the_16_bit_types() {
        let mut found = 0;
        for s in ElemType::ALL {
            for d in ElemType::ALL {
                if cast_kernel(s, d).is_some() {
                    found += 1;
                }
            }
        }
        assert_eq!(found, 4);
        assert_eq!(cast_kernel(ElemType::Bf16, ElemType::F16), None);
        assert_eq!(cast_kernel(ElemType::F32, ElemType::F32), None);
        assert_eq!(
            cast_kernel(ElemType::F32, ElemType::Bf16).map(|k| k.to_string()),
            Some("cast_f32_bf16".into())
        );
    }
}
