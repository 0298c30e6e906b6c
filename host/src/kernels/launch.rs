//! The safe side of a PTX module: [`Module`] loads a PTX image into one
//! context (and unloads it on drop), resolves entry points into
//! [`Function`]s, and [`Module::launch`] is the one place that builds a
//! kernel's argument array and calls `cuLaunchKernel`. Every launch of the
//! crate goes through it, so the launch's safety argument is written once;
//! each caller only vouches for its own kernel's contract.
//! `KernelModule::launch`, the launch of a kernel of the table by its
//! typed key, is here too: a call's launch enters this file alone.

use std::ffi::{CString, c_void};
use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cudarc::driver::{CudaContext, CudaStream, sys};
use intranode_kernels_gpu::layout::{
    AllReduceParams, BarrierParams, BroadcastParams, FusedNormParams, NormParams,
};

use crate::driver_ext;
use intranode_kernels_gpu::entries::KernelKey;

// NOTE [launch overlap] (programmatic dependent launch): a
// collective launched with programmatic stream serialization may be
// scheduled before the kernel ahead of it on the stream (a GEMM, in a
// decode step) has finished: its blocks are resident and past their launch
// when that kernel's last blocks drain. Every collective kernel begins
// with `griddepcontrol.wait` (which returns once the kernels ahead have
// completed and their writes are visible, at once without the attribute)
// and then `griddepcontrol.launch_dependents`, so the result is the same
// as a serialized launch and only the launch latency overlaps. Only
// kernels that begin so are launched this way (`Kernel::waits_first`),
// only where the PTX has the instructions (sm_90 and later) and the device
// is one (compute capability 9), and `INTRANODE_LAUNCH_OVERLAP=0` turns it
// off (`config::CommConfig::launch_overlap`).
use crate::error::{DriverContext, Error, Result};

/// Modules of this process loaded and not (successfully) unloaded: a
/// handle kept alive by mistake, or an unload that Drop skipped, shows
/// here (`intranode-suite module-probe`).
static LIVE_MODULES: AtomicUsize = AtomicUsize::new(0);

/// How many kernel modules this process has loaded and not unloaded.
pub(crate) fn live_modules() -> usize {
    LIVE_MODULES.load(Ordering::Relaxed)
}

/// A kernel image (PTX or cubin) loaded into one context, unloaded when
/// dropped.
#[derive(Debug)]
pub(crate) struct Module {
    ctx: Arc<CudaContext>,
    raw: sys::CUmodule,
    /// Whether dropping it unloads it: not for the production kernels,
    /// kept loaded for their context's life (NOTE [kept kernels] in
    /// `kernels/mod.rs`).
    unload: bool,
}

// SAFETY: a CUmodule and its CUfunctions are context-wide handles that the
// driver lets any thread use once the context is current; every method that
// uses them binds `ctx` first.
unsafe impl Send for Module {}
// SAFETY: as above; the handle is never mutated after `load`.
unsafe impl Sync for Module {}

/// A kernel entry point of a [`Module`], resolved once at load.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Function(sys::CUfunction);

// SAFETY: as for `Module`: a context-wide handle, used only by
// `Module::launch`, which binds the context first.
unsafe impl Send for Function {}
// SAFETY: as above; never mutated.
unsafe impl Sync for Function {}

/// The shape of one launch: a one-dimensional grid of `blocks` blocks of
/// `threads` threads, with `shared_bytes` of dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grid {
    pub blocks: u32,
    pub threads: u32,
    pub shared_bytes: u32,
}

impl Grid {
    /// `blocks` blocks of `threads` threads, no dynamic shared memory. A
    /// count past `u32` becomes `u32::MAX`, which the driver refuses, so
    /// the launch fails rather than running a wrapped grid.
    pub(crate) fn new(blocks: usize, threads: usize) -> Self {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Grid {
            blocks: clamp(blocks),
            threads: clamp(threads),
            shared_bytes: 0,
        }
    }
}

/// The launch of a kernel of the table, here beside the one call of
/// `cuLaunchKernel` it ends in.
impl super::KernelModule {
    /// Enqueues the kernel of `key` on `stream` in `grid`, with `args` as
    /// its parameters: their types are the key's (`KernelKey<A>`, from the
    /// table in `kernels-gpu/src/entries.rs`), checked by the compiler.
    ///
    /// # Safety
    /// As for `Module::launch`: the values in `args` hold what the kernel
    /// expects (live device addresses, lengths), their addresses stay
    /// valid until `stream` passes the kernel, and `grid` suits the kernel.
    pub(crate) unsafe fn launch<A: KernelArgs>(
        &self,
        key: KernelKey<A>,
        grid: Grid,
        stream: &CudaStream,
        args: A,
    ) -> Result<()> {
        let f = self
            .functions
            .get(key.index())
            .ok_or_else(|| Error::MissingKernel {
                name: key.to_string(),
            })?;
        let family = key.kernel().family;
        // A kernel launched overlapped begins with `griddepcontrol.wait`:
        // the table's `overlapped` families, whose GPU side emits it.
        let overlap = self.overlap && family.overlapped();
        // SAFETY: forwarded from the caller; `f` is `key`'s entry point
        // (the table is in `Kernel::index` order) and `args` has the types
        // of its parameters (the key's).
        unsafe {
            self.module
                .launch(*f, family.launch_op(), grid, stream, overlap, args)
        }
    }
}

/// A type a kernel takes as one parameter, by value: plain data laid out
/// as the kernel declares it (integers, floats, device addresses, the
/// `#[repr(C)]` parameter blocks of `intranode_kernels_gpu::layout`).
pub(crate) trait KernelParam: Copy {}

impl KernelParam for u32 {}
impl KernelParam for u64 {}
impl KernelParam for usize {}
impl KernelParam for f32 {}
impl KernelParam for AllReduceParams {}
impl KernelParam for BarrierParams {}
impl KernelParam for BroadcastParams {}
impl KernelParam for NormParams {}
impl KernelParam for FusedNormParams {}
#[cfg(feature = "test-kernels")]
impl KernelParam for intranode_kernels_gpu::layout::PollStormParams {}
#[cfg(feature = "test-kernels")]
impl KernelParam for intranode_kernels_gpu::layout::PingPongParams {}
#[cfg(feature = "test-kernels")]
impl KernelParam for intranode_kernels_gpu::layout::StoreExitParams {}
#[cfg(feature = "test-kernels")]
impl KernelParam for intranode_kernels_gpu::pattern::SoakParams {}

/// The arguments of one launch: a tuple of the kernel's parameters, in
/// order.
pub(crate) trait KernelArgs {
    /// Calls `f` with the array `cuLaunchKernel` takes: one pointer per
    /// argument, to the argument's value in `self`.
    fn with_pointers<R>(&mut self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R;
}

macro_rules! kernel_args {
    ($($t:ident $v:ident),+) => {
        impl<$($t: KernelParam),+> KernelArgs for ($($t,)+) {
            fn with_pointers<R>(&mut self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
                let ($($v,)+) = self;
                let mut pointers = [$(($v as *mut $t).cast::<c_void>()),+];
                f(&mut pointers)
            }
        }
    };
}

kernel_args!(A a);
kernel_args!(A a, B b);
kernel_args!(A a, B b, C c);
kernel_args!(A a, B b, C c, D d);

/// Registers a thread of a kernel the driver JIT compiles from the PTX
/// may use: a block's 64 Ki registers (sm_80 to sm_120) over the most
/// threads a launch of ours has, so that no launch fails with
/// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` on a device the embedded machine
/// code does not run on (Blackwell and later JIT the sm_90 PTX). The
/// committed sm_90 cubin is assembled without this cap and checked to
/// stay within it (`cargo xtask check-ptx`); PTX built for any other
/// architecture also carries it as `.maxnreg` (`intranode-ptx-builder`).
pub(crate) const JIT_MAX_REGISTERS: u32 = (65536 / crate::config::MAX_THREADS_PER_BLOCK) as u32;

impl Module {
    /// Loads `ptx` into `ctx` (the driver's JIT compile, registers capped
    /// at [`JIT_MAX_REGISTERS`], or its cache).
    pub(crate) fn load(ctx: &Arc<CudaContext>, ptx: &str) -> Result<Self> {
        let device = Some(ctx.ordinal());
        crate::error::bind(ctx, device)?;
        let image = CString::new(ptx)
            .map_err(|_| Error::InvalidArgument("embedded PTX holds a NUL byte".into()))?;
        // SAFETY: the context was made current just above.
        let raw = unsafe { driver_ext::module_load_data(&image, JIT_MAX_REGISTERS) }
            .ctx("cuModuleLoadDataEx", device)?;
        LIVE_MODULES.fetch_add(1, Ordering::Relaxed);
        Ok(Module {
            ctx: ctx.clone(),
            raw,
            unload: true,
        })
    }

    /// Loads the machine code `image` (a cubin: an ELF image) into `ctx`.
    pub(crate) fn load_image(ctx: &Arc<CudaContext>, image: &[u8]) -> Result<Self> {
        let device = Some(ctx.ordinal());
        if !image.starts_with(b"\x7fELF") {
            return Err(Error::KernelImage(
                "the embedded cubin is not an ELF image".into(),
            ));
        }
        crate::error::bind(ctx, device)?;
        // SAFETY: the context was made current just above; `image` is a
        // whole ELF image (checked magic; the bytes ptxas wrote, checked
        // against it in CI) that outlives the call.
        let raw = unsafe { driver_ext::module_load_image(image) }
            .ctx("cuModuleLoadData(cubin)", device)?;
        LIVE_MODULES.fetch_add(1, Ordering::Relaxed);
        Ok(Module {
            ctx: ctx.clone(),
            raw,
            unload: true,
        })
    }

    /// The context the module lives in.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Keeps the module loaded when this handle drops; its raw handle, for
    /// [`Module::kept`].
    pub(crate) fn keep(&mut self) -> sys::CUmodule {
        self.unload = false;
        self.raw
    }

    /// A handle on `raw`, a module kept loaded in `ctx` ([`Module::keep`]);
    /// dropping it leaves the module loaded.
    ///
    /// # Safety
    /// `raw` must be a module loaded into `ctx` and kept (never unloaded).
    pub(crate) unsafe fn kept(ctx: &Arc<CudaContext>, raw: sys::CUmodule) -> Self {
        Module {
            ctx: ctx.clone(),
            raw,
            unload: false,
        }
    }

    /// The entry points `names`, in order: the table a module type
    /// indexes. A name the PTX lacks is [`Error::MissingKernel`].
    pub(crate) fn resolve<N: Display>(
        &self,
        names: impl Iterator<Item = N>,
    ) -> Result<Box<[Function]>> {
        let device = Some(self.ctx.ordinal());
        crate::error::bind(&self.ctx, device)?;
        names
            .map(|name| {
                let name = name.to_string();
                let cname = CString::new(name.as_str())
                    .map_err(|_| Error::MissingKernel { name: name.clone() })?;
                // SAFETY: `raw` was loaded in `load` and is unloaded only in
                // Drop; the context was made current above.
                match unsafe { driver_ext::module_get_function(self.raw, &cname) } {
                    Ok(f) => Ok(Function(f)),
                    Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => {
                        Err(Error::MissingKernel { name })
                    }
                    Err(e) => Err(e).ctx("cuModuleGetFunction", device),
                }
            })
            .collect()
    }

    /// Enqueues `f` on `stream` in `grid`, with `args` as its parameters;
    /// `op` names the launch in errors. This module's context is made
    /// current first: `f` belongs to it, and the calling thread may have
    /// another GPU's context current.
    ///
    /// # Safety
    /// `f` must be an entry point of this module whose parameters are
    /// exactly `args`, in number, order and type; every device address in
    /// `args` must stay valid for what the kernel does with it until
    /// `stream` passes the kernel; `grid` must be one the kernel is
    /// written for (the kernels with flags per block in the signal pad
    /// take at most `layout::MAX_BLOCKS` blocks).
    ///
    /// With `overlap`, the launch may start before the stream's previous
    /// kernel ends (NOTE [launch overlap]); `f` must then wait for it with
    /// `griddepcontrol.wait` before touching memory.
    pub(crate) unsafe fn launch(
        &self,
        f: Function,
        op: &'static str,
        grid: Grid,
        stream: &CudaStream,
        overlap: bool,
        mut args: impl KernelArgs,
    ) -> Result<()> {
        let device = Some(self.ctx.ordinal());
        crate::error::bind(&self.ctx, device)?;
        args.with_pointers(|params| {
            // SAFETY: the one launch of the crate. `params` holds one
            // pointer per argument, each to a value that outlives this call
            // (the driver copies the values at launch); `f` is live while
            // `self` is (unloaded only in Drop) and its context is current;
            // that `args` match `f`'s parameters, that their addresses
            // stay valid and that `grid` suits the kernel is the caller's
            // promise.
            unsafe {
                if overlap {
                    driver_ext::launch_overlapped(
                        f.0,
                        grid.blocks,
                        grid.threads,
                        grid.shared_bytes,
                        stream.cu_stream(),
                        params,
                    )
                } else {
                    driver_ext::launch(
                        f.0,
                        grid.blocks,
                        grid.threads,
                        grid.shared_bytes,
                        stream.cu_stream(),
                        params,
                    )
                }
            }
        })
        .ctx(op, device)
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if !self.unload {
            // Kept for the context's life (NOTE [kept kernels]).
            return;
        }
        // NOTE [drop errors] in `error.rs`. Kernels already enqueued keep
        // running from the module's code: wait for them first (an error
        // recorded earlier must not skip the wait, nor the unload).
        if crate::error::sync_for_drop(&self.ctx, "cuCtxSetCurrent before cuModuleUnload") {
            // SAFETY: loaded in `load`, unloaded only here; the context is
            // current and idle (just synchronized).
            match unsafe { driver_ext::module_unload(self.raw) } {
                Ok(()) => {
                    LIVE_MODULES.fetch_sub(1, Ordering::Relaxed);
                }
                Err(e) => crate::error::record_drop_error(&self.ctx, "cuModuleUnload", e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cap the loader gives the JIT, the `.maxnreg` the builder writes
    /// and the bound `check-ptx` enforces come from one block size.
    #[test]
    fn jit_register_cap_is_the_builders() {
        assert_eq!(
            crate::config::MAX_THREADS_PER_BLOCK as u32,
            intranode_ptx_builder::MAX_THREADS_PER_BLOCK
        );
        assert_eq!(
            JIT_MAX_REGISTERS,
            intranode_ptx_builder::MAX_REGISTERS_PER_THREAD
        );
    }

    #[test]
    fn every_argument_gets_a_pointer_to_its_value() {
        let mut args = (7u64, 2.5f32, 9usize);
        let seen = args.with_pointers(|p| {
            assert_eq!(p.len(), 3);
            // SAFETY: the pointers point at the tuple's fields, of these
            // types, alive for the closure.
            unsafe {
                (
                    *p[0].cast::<u64>(),
                    *p[1].cast::<f32>(),
                    *p[2].cast::<usize>(),
                )
            }
        });
        assert_eq!(seen, (7, 2.5, 9));
    }

    #[test]
    fn grids_never_wrap() {
        assert_eq!(
            Grid::new(3, 512),
            Grid {
                blocks: 3,
                threads: 512,
                shared_bytes: 0
            }
        );
        assert_eq!(Grid::new(usize::MAX, 1).blocks, u32::MAX);
    }
}
