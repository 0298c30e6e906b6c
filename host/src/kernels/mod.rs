//! The embedded GPU kernels and their typed launches.
//!
//! [`PTX`] is the committed PTX of the current `kernels-gpu` source
//! (`build.rs` picks it).
//! [`KernelModule`] loads it into one device's context and resolves every
//! entry point once, so a launch is a table lookup and one driver call.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut, sys};

use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};
pub use ptx_builder::entry_names;

pub use crate::types::{DType, ElemType};

mod decode;
mod norm;
mod ops;
mod soak;
mod timing;
pub use soak::SoakCall;

/// PTX of the `kernels-gpu` crate, for [`PTX_ARCH`]: the committed
/// `host/ptx/kernels-<arch>.ptx` (CI checks that it equals what the kernel
/// source emits), or the kernels built from source where `build.rs` says
/// why.
pub const PTX: &str = include_str!(env!("INTRANODE_EMBEDDED_PTX"));

/// GPU architecture of [`PTX`]: `INTRANODE_PTX_ARCH` at build time, default
/// `sm_90`.
pub const PTX_ARCH: &str = env!("INTRANODE_EMBEDDED_PTX_ARCH");

/// The kernels loaded into one device's context.
#[derive(Debug)]
pub struct KernelModule {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
    functions: HashMap<&'static str, sys::CUfunction>,
}

// SAFETY: a CUmodule and its CUfunctions are context-wide handles that the
// driver lets any thread use once the context is current; every method that
// uses them binds `ctx` first.
unsafe impl Send for KernelModule {}
// SAFETY: as above; the handles are never mutated after `load`.
unsafe impl Sync for KernelModule {}

impl KernelModule {
    /// Loads [`PTX`] into `ctx` and resolves every kernel entry point.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
        let device = Some(ctx.ordinal());
        crate::error::bind(ctx, device)?;
        let image = CString::new(PTX)
            .map_err(|_| Error::InvalidArgument("embedded PTX holds a NUL byte".into()))?;
        // SAFETY: the context was made current just above.
        let module =
            unsafe { driver_ext::module_load_data(&image) }.ctx("cuModuleLoadData", device)?;
        let mut this = KernelModule {
            ctx: ctx.clone(),
            module,
            functions: HashMap::new(),
        };
        for name in entry_names(PTX) {
            let cname = CString::new(name).map_err(|_| Error::MissingKernel {
                name: name.to_owned(),
            })?;
            // SAFETY: `module` was loaded above and is unloaded only in Drop.
            let f = unsafe { driver_ext::module_get_function(this.module, &cname) }
                .ctx("cuModuleGetFunction", device)?;
            this.functions.insert(name, f);
        }
        Ok(this)
    }

    /// The context the module lives in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A kernel by name.
    pub fn function(&self, name: &str) -> Result<sys::CUfunction> {
        self.functions
            .get(name)
            .copied()
            .ok_or_else(|| Error::MissingKernel {
                name: name.to_owned(),
            })
    }

    /// `out = a + b` elementwise, computed in f32 and rounded once, on
    /// `stream`. All three must have the same length; any length and any
    /// element offset work (misaligned views take the scalar path).
    /// Makes the module's context current before a launch: the functions
    /// belong to it, and the calling thread may have another one current.
    pub(crate) fn bind(&self) -> Result<()> {
        crate::error::bind(&self.ctx, Some(self.ctx.ordinal()))
    }

    pub fn add<T: DType>(
        &self,
        stream: &CudaStream,
        a: &impl DevicePtr<T>,
        b: &impl DevicePtr<T>,
        out: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        let n = out.len();
        if a.len() != n || b.len() != n {
            return Err(Error::InvalidArgument(format!(
                "add: lengths differ (a {}, b {}, out {n})",
                a.len(),
                b.len()
            )));
        }
        if n == 0 {
            return Ok(());
        }
        let name = format!("add_{}", T::ELEM.suffix());
        let f = self.function(&name)?;
        let (mut pa, _ra) = a.device_ptr(stream);
        let (mut pb, _rb) = b.device_ptr(stream);
        let (mut po, _ro) = out.device_ptr_mut(stream);
        let mut n_arg = n;
        let (grid, block) = elementwise_grid(n, T::ELEM.bytes());
        let mut params: [*mut c_void; 4] = [
            (&mut pa) as *mut _ as *mut c_void,
            (&mut pb) as *mut _ as *mut c_void,
            (&mut po) as *mut _ as *mut c_void,
            (&mut n_arg) as *mut _ as *mut c_void,
        ];
        self.bind()?;
        // SAFETY: `add_<ty>(a, b, out: *T, n: usize)` takes exactly these
        // four 8-byte arguments; the three buffers hold `n` elements each
        // (checked above) and stay alive until the stream passes the
        // kernel (the `_r*` guards record that).
        unsafe { driver_ext::launch(f, grid, block, 0, stream.cu_stream(), &mut params) }
            .ctx("cuLaunchKernel(add)", Some(self.ctx.ordinal()))
    }
}

impl Drop for KernelModule {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded in `load`, unloaded only here; kernels already
            // enqueued keep their code alive per the driver's rules for
            // module unload after synchronization, so wait first.
            let result = self
                .ctx
                .synchronize()
                .and_then(|()| unsafe { driver_ext::module_unload(self.module) });
            // Drop must not panic: keep the error for the context's next call.
            self.ctx.record_err(result);
        }
    }
}

/// Grid and block size of the elementwise kernels: one 16-byte vector per
/// thread per step, at most 4 blocks of 256 per SM of a 132-SM H200 (the
/// grid-stride loop covers the rest).
fn elementwise_grid(elems: usize, elem_bytes: usize) -> (u32, u32) {
    const BLOCK: usize = 256;
    const MAX_BLOCKS: usize = 132 * 4;
    let per_vec = kernels_gpu::math::elems_per_vec(elem_bytes).max(1);
    let work_items = kernels_gpu::math::div_ceil(elems, per_vec).max(1);
    let blocks = kernels_gpu::math::div_ceil(work_items, BLOCK).clamp(1, MAX_BLOCKS);
    (blocks as u32, BLOCK as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_ptx_has_the_elementwise_kernels() {
        let names = entry_names(PTX);
        for ty in ElemType::ALL {
            let want = format!("add_{}", ty.suffix());
            assert!(
                names.contains(&want.as_str()),
                "{want} missing from {names:?}"
            );
        }
    }

    #[test]
    fn embedded_ptx_calls_nothing_out_of_line() {
        assert!(
            !PTX.contains(".extern .func"),
            "the PTX calls into core out of line"
        );
    }

    #[test]
    fn grid_sizes() {
        assert_eq!(elementwise_grid(1, 2), (1, 256));
        assert_eq!(elementwise_grid(8 * 256, 2), (1, 256));
        assert_eq!(elementwise_grid(8 * 256 + 1, 2), (2, 256));
        assert_eq!(elementwise_grid(1 << 30, 4).0, 528);
    }
}
