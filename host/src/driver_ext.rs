//! Thin wrappers over `cudarc::driver::sys` for what cudarc's safe layer
//! does not cover, one function per driver call (cudarc's `result` style).
//! Safe types ([`crate::kernels::KernelModule`], the symmetric-memory
//! types) are built on these; algorithm code never touches `sys`.

use std::ffi::{CStr, c_void};
use std::mem::MaybeUninit;

use cudarc::driver::{DriverError, sys};

/// Loads a NUL-terminated PTX image into the current context, the JIT
/// compiler held to `max_registers` registers a thread
/// (`CU_JIT_MAX_REGISTERS`, ptxas's `--maxrregcount`).
///
/// # Safety
/// A context must be current on this thread.
pub unsafe fn module_load_data(
    ptx: &CStr,
    max_registers: u32,
) -> Result<sys::CUmodule, DriverError> {
    let mut module = MaybeUninit::uninit();
    let mut options = [sys::CUjit_option::CU_JIT_MAX_REGISTERS];
    // The driver reads an integer option's value from the pointer-sized
    // slot itself, not through it (cuModuleLoadDataEx's documentation).
    let mut values = [max_registers as usize as *mut c_void];
    // SAFETY: `ptx` is NUL-terminated and outlives the call; the out
    // pointer is valid; `options` and `values` hold one entry each, as
    // the count says, and live across the call; a current context is the
    // caller's promise.
    unsafe {
        sys::cuModuleLoadDataEx(
            module.as_mut_ptr(),
            ptx.as_ptr() as *const c_void,
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
        .result()?;
        Ok(module.assume_init())
    }
}

/// Loads a module from a machine-code image (cubin or fatbin).
///
/// # Safety
/// A context must be current on this thread, and `image` must be a whole
/// cubin or fatbin: the driver reads it by the lengths in its own headers.
pub unsafe fn module_load_image(image: &[u8]) -> Result<sys::CUmodule, DriverError> {
    let mut module = MaybeUninit::uninit();
    // SAFETY: `image` outlives the call and is a whole image (caller's
    // promise); the out pointer is valid; a current context is the
    // caller's promise.
    unsafe {
        sys::cuModuleLoadData(module.as_mut_ptr(), image.as_ptr() as *const c_void).result()?;
        Ok(module.assume_init())
    }
}

/// Looks a kernel up by name.
///
/// # Safety
/// `module` must be loaded and not yet unloaded.
pub unsafe fn module_get_function(
    module: sys::CUmodule,
    name: &CStr,
) -> Result<sys::CUfunction, DriverError> {
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
/// measured on H200, docs/DESIGN.md section 3).
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
        sys::cuLaunchKernel(
            f,
            grid,
            1,
            1,
            block,
            1,
            1,
            shared_bytes,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
        .result()
    }
}

/// [`launch`] with programmatic stream serialization: `f` may start
/// before the stream's previous kernel ends, and waits for it with
/// `griddepcontrol.wait` (NOTE [launch overlap] in `kernels/launch.rs`).
///
/// # Safety
/// As for [`launch`]; besides, `f` must execute `griddepcontrol.wait`
/// before it touches any memory the previous kernels of `stream` write.
pub unsafe fn launch_overlapped(
    f: sys::CUfunction,
    grid: u32,
    block: u32,
    shared_bytes: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<(), DriverError> {
    // SAFETY: plain C data; every field is set below or zero is valid.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: shared_bytes,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: `config` and `attr` outlive the call; the rest is forwarded
    // from the caller.
    unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()).result() }
}

// ---------------------------------------------------------------------------
// Virtual memory management (VMM): the calls behind symmetric memory
// (`crate::symm_mem`), CUDA driver API "Virtual Memory Management" group.
// ---------------------------------------------------------------------------

/// `cuMemGetAllocationGranularity`: the granularity `cuMemCreate` and
/// `cuMemMap` sizes must be multiples of, for allocations like `prop`.
///
/// # Safety
/// The driver must be initialised (`cuInit`); `prop` must describe a valid
/// location (an existing device).
pub unsafe fn mem_get_allocation_granularity(
    prop: &sys::CUmemAllocationProp,
    option: sys::CUmemAllocationGranularity_flags,
) -> Result<usize, DriverError> {
    let mut granularity = MaybeUninit::uninit();
    // SAFETY: valid out pointer; `prop` is a live reference for the call;
    // an initialised driver is the caller's promise.
    unsafe {
        sys::cuMemGetAllocationGranularity(granularity.as_mut_ptr(), prop, option).result()?;
        Ok(granularity.assume_init())
    }
}

/// `cuMemCreate`: allocates `size` bytes of physical memory described by
/// `prop` and returns its generic handle (release with [`mem_release`]).
///
/// # Safety
/// A context must be current on this thread; `size` must be a multiple of
/// the granularity for `prop`.
pub unsafe fn mem_create(
    size: usize,
    prop: &sys::CUmemAllocationProp,
) -> Result<sys::CUmemGenericAllocationHandle, DriverError> {
    let mut handle = MaybeUninit::uninit();
    // SAFETY: valid out pointer; `prop` is live for the call; flags must be
    // 0; the rest is the caller's promise.
    unsafe {
        sys::cuMemCreate(handle.as_mut_ptr(), size, prop, 0).result()?;
        Ok(handle.assume_init())
    }
}

/// `cuMemRelease`: drops this process's reference to an allocation handle;
/// the memory is freed once no mapping and no handle refers to it.
///
/// # Safety
/// `handle` must come from [`mem_create`] or
/// [`mem_import_from_shareable_handle_fd`] and not have been released yet.
pub unsafe fn mem_release(handle: sys::CUmemGenericAllocationHandle) -> Result<(), DriverError> {
    // SAFETY: forwarded from the caller.
    unsafe { sys::cuMemRelease(handle).result() }
}

/// `cuMemExportToShareableHandle` with
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`: returns a new file
/// descriptor for the allocation, owned by the caller (close it).
///
/// # Safety
/// `handle` must be live and created with `requestedHandleTypes`
/// including `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
pub unsafe fn mem_export_to_shareable_handle_fd(
    handle: sys::CUmemGenericAllocationHandle,
) -> Result<std::ffi::c_int, DriverError> {
    let mut fd: std::ffi::c_int = -1;
    // SAFETY: for the POSIX fd handle type the driver writes one `int`
    // through the pointer, which points at a live `c_int`; flags must be 0;
    // a live handle is the caller's promise.
    unsafe {
        sys::cuMemExportToShareableHandle(
            (&raw mut fd).cast::<c_void>(),
            handle,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
        .result()?;
    }
    Ok(fd)
}

/// `cuMemImportFromShareableHandle` with
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`: a handle for the allocation
/// behind `fd` (release with [`mem_release`]). The descriptor stays owned
/// by the caller and may be closed afterwards.
///
/// # Safety
/// A context must be current on this thread; `fd` must be an open
/// descriptor (the driver rejects ones that are not CUDA allocations).
pub unsafe fn mem_import_from_shareable_handle_fd(
    fd: std::ffi::c_int,
) -> Result<sys::CUmemGenericAllocationHandle, DriverError> {
    let mut handle = MaybeUninit::uninit();
    // SAFETY: for the POSIX fd handle type the driver takes the descriptor
    // itself, cast to a pointer-sized value (as the CUDA samples do), and
    // does not take ownership of it; the out pointer is valid.
    unsafe {
        sys::cuMemImportFromShareableHandle(
            handle.as_mut_ptr(),
            fd as isize as *mut c_void,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        )
        .result()?;
        Ok(handle.assume_init())
    }
}

/// `cuMemAddressReserve`: reserves `size` bytes of virtual address space
/// aligned to `alignment` (0: the default), anywhere (no fixed address).
///
/// # Safety
/// A context must be current on this thread; `size` must be a multiple of
/// the allocation granularity.
pub unsafe fn mem_address_reserve(
    size: usize,
    alignment: usize,
) -> Result<sys::CUdeviceptr, DriverError> {
    let mut ptr = MaybeUninit::uninit();
    // SAFETY: valid out pointer; address hint 0 and flags 0 mean "anywhere";
    // the rest is the caller's promise.
    unsafe {
        sys::cuMemAddressReserve(ptr.as_mut_ptr(), size, alignment, 0, 0).result()?;
        Ok(ptr.assume_init())
    }
}

/// `cuMemAddressFree`: returns a range reserved by [`mem_address_reserve`].
///
/// # Safety
/// `ptr` and `size` must be exactly a reserved range, with nothing mapped
/// in it any more.
pub unsafe fn mem_address_free(ptr: sys::CUdeviceptr, size: usize) -> Result<(), DriverError> {
    // SAFETY: forwarded from the caller.
    unsafe { sys::cuMemAddressFree(ptr, size).result() }
}

/// `cuMemMap`: maps `size` bytes of the allocation `handle` (from offset
/// 0) at `ptr`. The mapping is not accessible until [`mem_set_access`].
///
/// # Safety
/// `ptr..ptr + size` must lie in a reserved, unmapped range; `handle` must
/// be live and at least `size` bytes; `size` a multiple of the granularity.
pub unsafe fn mem_map(
    ptr: sys::CUdeviceptr,
    size: usize,
    handle: sys::CUmemGenericAllocationHandle,
) -> Result<(), DriverError> {
    // SAFETY: offset and flags must be 0; the rest is the caller's promise.
    unsafe { sys::cuMemMap(ptr, size, 0, handle, 0).result() }
}

/// `cuMemUnmap`: unmaps a range mapped with [`mem_map`].
///
/// # Safety
/// `ptr` and `size` must be exactly one mapped range, and no work that
/// uses it may still be running.
pub unsafe fn mem_unmap(ptr: sys::CUdeviceptr, size: usize) -> Result<(), DriverError> {
    // SAFETY: forwarded from the caller.
    unsafe { sys::cuMemUnmap(ptr, size).result() }
}

/// `cuMemSetAccess`: grants the access in `descs` (per location) to the
/// mapped range `ptr..ptr + size`.
///
/// # Safety
/// The range must be mapped (by [`mem_map`]); each descriptor must name an
/// existing device.
pub unsafe fn mem_set_access(
    ptr: sys::CUdeviceptr,
    size: usize,
    descs: &[sys::CUmemAccessDesc],
) -> Result<(), DriverError> {
    // SAFETY: `descs` is a live slice of `descs.len()` descriptors; the rest
    // is the caller's promise.
    unsafe { sys::cuMemSetAccess(ptr, size, descs.as_ptr(), descs.len()).result() }
}

// ---------------------------------------------------------------------------
// Legacy CUDA IPC (the `cuda-ipc` symmetric-memory backend).
// ---------------------------------------------------------------------------

/// `cuIpcGetMemHandle`: an interprocess handle for the `cuMemAlloc`
/// allocation that starts at `dptr`.
///
/// # Safety
/// `dptr` must be the base of a live allocation from `cuMemAlloc` (not
/// from a stream-ordered pool, not VMM).
pub unsafe fn ipc_get_mem_handle(
    dptr: sys::CUdeviceptr,
) -> Result<sys::CUipcMemHandle, DriverError> {
    let mut handle = MaybeUninit::uninit();
    // SAFETY: valid out pointer; the allocation is the caller's promise.
    unsafe {
        sys::cuIpcGetMemHandle(handle.as_mut_ptr(), dptr).result()?;
        Ok(handle.assume_init())
    }
}

/// `cuIpcOpenMemHandle_v2`: maps another process's allocation into this
/// context and returns its address here (close with
/// [`ipc_close_mem_handle`]). It fails for a handle of this process's own
/// allocation.
///
/// # Safety
/// A context must be current on this thread; `handle` must come from
/// [`ipc_get_mem_handle`] in another process, whose allocation is live.
pub unsafe fn ipc_open_mem_handle(
    handle: sys::CUipcMemHandle,
    flags: sys::CUipcMem_flags,
) -> Result<sys::CUdeviceptr, DriverError> {
    let mut dptr = MaybeUninit::uninit();
    // SAFETY: valid out pointer; the handle is passed by value; the rest is
    // the caller's promise.
    unsafe {
        sys::cuIpcOpenMemHandle_v2(dptr.as_mut_ptr(), handle, flags as std::ffi::c_uint)
            .result()?;
        Ok(dptr.assume_init())
    }
}

/// `cuIpcCloseMemHandle`: unmaps an allocation opened with
/// [`ipc_open_mem_handle`].
///
/// # Safety
/// `dptr` must be an address returned by [`ipc_open_mem_handle`], not yet
/// closed, and no work that uses it may still be running.
pub unsafe fn ipc_close_mem_handle(dptr: sys::CUdeviceptr) -> Result<(), DriverError> {
    // SAFETY: forwarded from the caller.
    unsafe { sys::cuIpcCloseMemHandle(dptr).result() }
}

// ---------------------------------------------------------------------------
// Device identity and peer access.
// ---------------------------------------------------------------------------

/// `cuDeviceCanAccessPeer`: whether `dev` can access memory on `peer`.
///
/// # Safety
/// The driver must be initialised; both must be valid device handles.
pub unsafe fn device_can_access_peer(
    dev: sys::CUdevice,
    peer: sys::CUdevice,
) -> Result<bool, DriverError> {
    let mut can: std::ffi::c_int = 0;
    // SAFETY: valid out pointer; the handles are the caller's promise.
    unsafe { sys::cuDeviceCanAccessPeer(&raw mut can, dev, peer).result()? };
    Ok(can != 0)
}

/// `cuDeviceGetPCIBusId`: the device's PCI address as
/// `domain:bus:device.function` in hex (`0000:18:00.0`).
///
/// # Safety
/// The driver must be initialised; `dev` must be a valid device handle.
pub unsafe fn device_get_pci_bus_id(dev: sys::CUdevice) -> Result<String, DriverError> {
    // 13 characters plus NUL is the documented minimum; leave room.
    let mut buf = [0 as std::ffi::c_char; 64];
    // SAFETY: the buffer is writable for its whole length, which is passed;
    // the driver NUL-terminates within it.
    unsafe {
        sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as std::ffi::c_int, dev).result()?
    };
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `cuDeviceGetByPCIBusId`: the device handle (= ordinal in this process)
/// of the GPU at `pci_bus_id`; an error when this process cannot see it
/// (`CUDA_VISIBLE_DEVICES`).
///
/// # Safety
/// The driver must be initialised.
pub unsafe fn device_get_by_pci_bus_id(pci_bus_id: &CStr) -> Result<sys::CUdevice, DriverError> {
    let mut dev = MaybeUninit::uninit();
    // SAFETY: valid out pointer; NUL-terminated string live for the call.
    unsafe {
        sys::cuDeviceGetByPCIBusId(dev.as_mut_ptr(), pci_bus_id.as_ptr()).result()?;
        Ok(dev.assume_init())
    }
}

/// Allocates page-locked host memory mapped into every context's address
/// space (`CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE`).
///
/// # Safety
/// A context must be current; free the result with [`mem_free_host`].
pub unsafe fn mem_host_alloc_mapped(bytes: usize) -> Result<*mut c_void, DriverError> {
    let mut p = MaybeUninit::uninit();
    let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
    // SAFETY: valid out pointer; a current context is the caller's promise.
    unsafe {
        sys::cuMemHostAlloc(p.as_mut_ptr(), bytes, flags).result()?;
        Ok(p.assume_init())
    }
}

/// The device address of mapped host memory.
///
/// # Safety
/// `p` must come from [`mem_host_alloc_mapped`] and not be freed.
pub unsafe fn mem_host_get_device_pointer(p: *mut c_void) -> Result<sys::CUdeviceptr, DriverError> {
    let mut d = MaybeUninit::uninit();
    // SAFETY: valid out pointer; `p` is mapped host memory (caller's promise).
    unsafe {
        sys::cuMemHostGetDevicePointer_v2(d.as_mut_ptr(), p, 0).result()?;
        Ok(d.assume_init())
    }
}

/// Frees memory from [`mem_host_alloc_mapped`].
///
/// # Safety
/// `p` must come from [`mem_host_alloc_mapped`], be freed once, and no
/// kernel may still use it.
pub unsafe fn mem_free_host(p: *mut c_void) -> Result<(), DriverError> {
    // SAFETY: forwarded from the caller.
    unsafe { sys::cuMemFreeHost(p).result() }
}

/// `cuCtxGetId`: the driver's id of a context, unique for the program's
/// life (a context created later at the same address gets another).
///
/// # Safety
/// `ctx` must be a live context.
pub unsafe fn ctx_get_id(ctx: sys::CUcontext) -> Result<u64, DriverError> {
    let mut id = MaybeUninit::<std::ffi::c_ulonglong>::uninit();
    // SAFETY: forwarded from the caller; valid out pointer.
    unsafe { sys::cuCtxGetId(ctx, id.as_mut_ptr()).result()? };
    // SAFETY: written by the successful call.
    Ok(unsafe { id.assume_init() })
}

/// `cuStreamQuery`: `Ok(true)` when every operation on `stream` has
/// finished, `Ok(false)` while some are still running.
///
/// # Safety
/// `stream` must be a live stream of the current context.
pub unsafe fn stream_query(stream: sys::CUstream) -> Result<bool, DriverError> {
    // SAFETY: forwarded from the caller.
    match unsafe { sys::cuStreamQuery(stream) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        e => Err(DriverError(e)),
    }
}
