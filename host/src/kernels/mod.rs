//! The embedded GPU kernels and their typed launches.
//!
//! [`PTX`] is the committed PTX of the current `kernels-gpu` source
//! (`build.rs` picks it).
//! [`KernelModule`] loads it into one device's context and resolves every
//! entry point of `kernels_gpu::entries::Kernel` (the one list of the
//! kernels) once, into a table indexed by that key: a launch formats and
//! looks up no name, and goes through the one launch helper
//! (`launch.rs`).
//!
//! Under the feature `test-kernels`, `TestKernelModule` does the same for
//! the test PTX (`TEST_PTX`: the soak's fill and check kernels, the
//! benchmark's stamps and spins, the probes), which the production PTX
//! does not carry.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut, sys};
use kernels_gpu::entries::{Collective, Elem, Kernel};

use crate::error::{DriverContext, Error, Result};
pub(crate) use launch::Grid;
use launch::{Function, KernelArgs, Module};
pub use ptx_builder::entry_names;

pub use crate::types::{DType, ElemType};

mod decode;
#[cfg(feature = "test-kernels")]
mod fill;
mod launch;
mod norm;
mod ops;
#[cfg(feature = "test-kernels")]
mod soak;
#[cfg(feature = "test-kernels")]
mod test_kernels;
#[cfg(feature = "test-kernels")]
mod timing;
#[cfg(feature = "test-kernels")]
pub use soak::SoakCall;
#[cfg(feature = "test-kernels")]
pub use test_kernels::{TEST_PTX, TestKernelModule};

/// PTX of the `kernels-gpu` crate, for [`PTX_ARCH`]: the committed
/// `host/ptx/kernels-<arch>.ptx` (CI checks that it equals what the kernel
/// source emits), or the kernels built from source where `build.rs` says
/// why.
pub const PTX: &str = include_str!(env!("INTRANODE_EMBEDDED_PTX"));

/// GPU architecture of [`PTX`]: `INTRANODE_PTX_ARCH` at build time, default
/// `sm_90`.
pub const PTX_ARCH: &str = env!("INTRANODE_EMBEDDED_PTX_ARCH");

impl From<ElemType> for Elem {
    fn from(e: ElemType) -> Elem {
        match e {
            ElemType::Bf16 => Elem::Bf16,
            ElemType::F16 => Elem::F16,
            ElemType::F32 => Elem::F32,
        }
    }
}

/// The kernels loaded into one device's context.
#[derive(Debug)]
pub struct KernelModule {
    module: Module,
    /// Every `Kernel`, at `Kernel::index`.
    functions: Box<[Function]>,
    /// Whether collectives launch overlapped (NOTE [launch overlap] in
    /// `launch.rs`).
    overlap: bool,
}

impl KernelModule {
    /// Loads [`PTX`] into `ctx` and resolves every kernel entry point.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
        Self::load_with(ctx, false)
    }

    /// [`KernelModule::load`], its collectives launched overlapped where
    /// `overlap` asks for it and the PTX and device allow it (sm_90 and
    /// later, NOTE [launch overlap] in `launch.rs`).
    pub(crate) fn load_with(ctx: &Arc<CudaContext>, overlap: bool) -> Result<Self> {
        let module = Module::load(ctx, PTX)?;
        let functions = module.resolve(Kernel::all())?;
        let ptx_sm: u32 = PTX_ARCH
            .trim_start_matches("sm_")
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .parse()
            .unwrap_or(0);
        let device_major = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .ctx("cuDeviceGetAttribute", Some(ctx.ordinal()))?;
        Ok(KernelModule {
            module,
            functions,
            overlap: overlap && ptx_sm >= 90 && device_major >= 9,
        })
    }

    /// Whether this module's collectives launch overlapped.
    pub fn launch_overlap(&self) -> bool {
        self.overlap
    }

    /// The context the module lives in.
    pub fn context(&self) -> &Arc<CudaContext> {
        self.module.context()
    }

    /// Enqueues `kernel` on `stream` in `grid`, with `args` as its
    /// parameters. An error for a key without a kernel.
    ///
    /// # Safety
    /// As for `Module::launch`: `args` are exactly `kernel`'s parameters,
    /// their addresses stay valid until `stream` passes the kernel, and
    /// `grid` suits the kernel.
    pub(crate) unsafe fn launch(
        &self,
        kernel: Kernel,
        grid: Grid,
        stream: &CudaStream,
        args: impl KernelArgs,
    ) -> Result<()> {
        let f = kernel
            .index()
            .and_then(|i| self.functions.get(i))
            .ok_or_else(|| Error::MissingKernel {
                name: kernel.to_string(),
            })?;
        // SAFETY: forwarded from the caller; `f` is `kernel`'s entry point
        // (the table is in `Kernel::index` order).
        let overlap = self.overlap && waits_first(kernel);
        // SAFETY: as above; a kernel launched overlapped begins with
        // `griddepcontrol.wait` (`waits_first`).
        unsafe {
            self.module
                .launch(*f, launch_op(kernel), grid, stream, overlap, args)
        }
    }

    /// `out = a + b` elementwise, computed in f32 and rounded once, on
    /// `stream`. All three must have the same length; any length and any
    /// element offset work (misaligned views take the scalar path).
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
        let (pa, _ra) = a.device_ptr(stream);
        let (pb, _rb) = b.device_ptr(stream);
        let (po, _ro) = out.device_ptr_mut(stream);
        let grid = elementwise_grid(n, T::ELEM.bytes());
        // SAFETY: `add_<ty>(a, b, out: *T, n: usize)` takes exactly these
        // four arguments; the three buffers hold `n` elements each (checked
        // above) and stay alive until the stream passes the kernel (the
        // `_r*` guards record that).
        unsafe { self.launch(Kernel::Add(T::ELEM.into()), grid, stream, (pa, pb, po, n)) }
    }
}

/// Whether `kernel` begins with `griddepcontrol.wait` (and
/// `launch_dependents`), so it may be launched overlapped: the collectives,
/// whose entry points are generated with it (`kernels-gpu`: `all_reduce.rs`,
/// `broadcast.rs`, `fused_norm.rs`, the barrier).
fn waits_first(kernel: Kernel) -> bool {
    matches!(
        kernel,
        Kernel::Barrier
            | Kernel::Broadcast { .. }
            | Kernel::FusedNorm { .. }
            | Kernel::Collective { .. }
    )
}

/// How a launch of `kernel` is named in errors.
fn launch_op(kernel: Kernel) -> &'static str {
    match kernel {
        Kernel::Add(_) => "cuLaunchKernel(add)",
        Kernel::AxpyF32 => "cuLaunchKernel(axpy_f32)",
        Kernel::Barrier => "cuLaunchKernel(barrier)",
        Kernel::Broadcast { .. } => "cuLaunchKernel(broadcast)",
        Kernel::CastFromF32(_) | Kernel::CastToF32(_) => "cuLaunchKernel(cast)",
        Kernel::ResidualRmsNorm(_) => "cuLaunchKernel(residual_rmsnorm)",
        Kernel::RmsNorm(_) => "cuLaunchKernel(rmsnorm)",
        Kernel::SiluMul(_) => "cuLaunchKernel(silu_mul)",
        Kernel::FusedNorm { .. } => "cuLaunchKernel(all_reduce_residual_rmsnorm)",
        Kernel::Collective { algo, .. } => match algo {
            Collective::OneShot => "cuLaunchKernel(one_shot)",
            Collective::TwoShot => "cuLaunchKernel(two_shot)",
            Collective::Hcm => "cuLaunchKernel(hcm)",
            Collective::Lamport => "cuLaunchKernel(lamport)",
            Collective::LamportTwoShot => "cuLaunchKernel(lamport2)",
            Collective::ReduceScatter => "cuLaunchKernel(reduce_scatter)",
            Collective::AllGather => "cuLaunchKernel(all_gather)",
            Collective::Push => "cuLaunchKernel(push)",
        },
    }
}

/// Grid and block size of the elementwise kernels: one 16-byte vector per
/// thread per step, at most 4 blocks of 256 per SM of a 132-SM H200 (the
/// grid-stride loop covers the rest).
fn elementwise_grid(elems: usize, elem_bytes: usize) -> Grid {
    const BLOCK: usize = 256;
    const MAX_BLOCKS: usize = 132 * 4;
    let per_vec = kernels_gpu::math::elems_per_vec(elem_bytes).max(1);
    let work_items = kernels_gpu::math::div_ceil(elems, per_vec).max(1);
    let blocks = kernels_gpu::math::div_ceil(work_items, BLOCK).clamp(1, MAX_BLOCKS);
    Grid::new(blocks, BLOCK)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The one list and the PTX agree both ways: every kernel the host can
    /// launch is in the PTX, and the PTX holds nothing unlisted.
    #[test]
    fn the_kernel_list_is_exactly_the_ptx() {
        let listed: BTreeSet<String> = Kernel::all().map(|k| k.to_string()).collect();
        let in_ptx: BTreeSet<String> = entry_names(PTX).into_iter().map(str::to_owned).collect();
        assert_eq!(listed.len(), Kernel::COUNT);
        let missing: Vec<_> = listed.difference(&in_ptx).collect();
        let unlisted: Vec<_> = in_ptx.difference(&listed).collect();
        assert!(missing.is_empty(), "listed, not in the PTX: {missing:?}");
        assert!(unlisted.is_empty(), "in the PTX, not listed: {unlisted:?}");
    }

    #[test]
    fn the_production_ptx_has_no_test_kernels() {
        for name in entry_names(PTX) {
            assert!(
                !["probe_", "soak_", "timing_", "fill_uniform_"]
                    .iter()
                    .any(|p| name.starts_with(p)),
                "{name} in the production PTX"
            );
        }
    }

    #[test]
    fn element_types_map_to_the_kernels_names() {
        for e in ElemType::ALL {
            assert_eq!(Elem::from(e).name(), e.suffix());
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
        assert_eq!(elementwise_grid(1, 2), Grid::new(1, 256));
        assert_eq!(elementwise_grid(8 * 256, 2), Grid::new(1, 256));
        assert_eq!(elementwise_grid(8 * 256 + 1, 2), Grid::new(2, 256));
        assert_eq!(elementwise_grid(1 << 30, 4).blocks, 528);
    }
}
