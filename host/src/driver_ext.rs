//! Thin wrappers over `cudarc::driver::sys` for what cudarc's safe layer
//! does not cover, one function per driver call (cudarc's `result` style).
//! Safe types ([`crate::kernels::KernelModule`], the symmetric-memory
//! types) are built on these; algorithm code never touches `sys`.

use std::ffi::{CStr, c_void};
use std::mem::MaybeUninit;

use cudarc::driver::{DriverError, sys};

/// Loads a NUL-terminated PTX image into the current context.
///
/// # Safety
/// A context must be current on this thread.
pub unsafe fn module_load_data(ptx: &CStr) -> Result<sys::CUmodule, DriverError> {
    let mut module = MaybeUninit::uninit();
    // SAFETY: `ptx` is NUL-terminated and outlives the call; the out
    // pointer is valid; a current context is the caller's promise.
    unsafe {
        sys::cuModuleLoadData(module.as_mut_ptr(), ptx.as_ptr() as *const c_void).result()?;
        Ok(module.assume_init())
    }
}

/// Looks a kernel up by name.
///
/// # Safety
/// `module` must be loaded and not yet unloaded.
pub unsafe fn module_get_function(module: sys::CUmodule, name: &CStr) -> Result<sys::CUfunction, DriverError> {
    let mut f = MaybeUninit::uninit();
    // SAFETY: valid out pointer and NUL-terminated name; the module is live
    // (caller's promise).
    unsafe {
        sys::cuModuleGetFunction(f.as_mut_ptr(), module, name.as_ptr()).result()?;
        Ok(f.assume_init())
    }
}

/// Unloads a module.
///
/// # Safety
/// `module` must be loaded, and no kernel of it may still be running.
pub unsafe fn module_unload(module: sys::CUmodule) -> Result<(), DriverError> {
    // SAFETY: forwarded from the caller.
    unsafe { sys::cuModuleUnload(module).result() }
}

/// Enqueues a kernel on `stream`: the lean path, without the per-argument
/// event bookkeeping of cudarc's launch builder (about 3 us per launch
/// measured on H200, DESIGN.md section 3).
///
/// # Safety
/// `f` must be a live kernel whose parameters match `params` exactly in
/// number, order and size; each pointer in `params` must point to the
/// argument value and stay valid for the call; every device pointer passed
/// must be valid for what the kernel does with it until it completes.
pub unsafe fn launch(
    f: sys::CUfunction,
    grid: u32,
    block: u32,
    shared_bytes: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<(), DriverError> {
    // SAFETY: forwarded from the caller.
    unsafe {
        sys::cuLaunchKernel(f, grid, 1, 1, block, 1, 1, shared_bytes, stream, params.as_mut_ptr(), std::ptr::null_mut())
            .result()
    }
}
