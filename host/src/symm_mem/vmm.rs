//! The VMM backend: blocks from `cuMemCreate` with POSIX file-descriptor
//! handles, descriptors passed over an [`IpcChannel`], peers' blocks
//! imported and mapped with [`map_block`].

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};

use super::block::BlockLayout;
use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};
use crate::error::{bind_for_drop, record_drop_error};
use intranode_ipc::IpcChannel;

/// Pinned device memory on `device`, exportable as a POSIX descriptor.
fn allocation_prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes:
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// Fails with a hint towards the other backend when the device cannot do
/// VMM with POSIX descriptors.
fn check_support(ctx: &CudaContext) -> Result<()> {
    let device = ctx.ordinal();
    for (attribute, what) in [
        (
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            "virtual memory management",
        ),
        (
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
            "POSIX file-descriptor memory handles",
        ),
    ] {
        let supported = ctx.attribute(attribute).ctx("cuDeviceGetAttribute", Some(device))?;
        if supported == 0 {
            return Err(Error::InvalidArgument(format!(
                "device {device} does not support {what}; set {}=cuda-ipc to use legacy CUDA IPC",
                crate::config::BACKEND_ENV
            )));
        }
    }
    Ok(())
}

/// One generic allocation handle of this process, released on drop.
#[derive(Debug)]
struct Allocation {
    ctx: Arc<CudaContext>,
    handle: sys::CUmemGenericAllocationHandle,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if !bind_for_drop(&self.ctx, "cuCtxSetCurrent before cuMemRelease") {
            return;
        }
        // SAFETY: the handle came from cuMemCreate or an import and is
        // released only here; mappings of it were unmapped first (a
        // `Mapping` drops its `Allocation` after unmapping).
        if let Err(e) = unsafe { driver_ext::mem_release(self.handle) } {
            record_drop_error(&self.ctx, "cuMemRelease", e);
        }
    }
}

/// A block mapped into this process: a reserved address range with the
/// allocation mapped over all of it, read-write for the local device.
/// Drop unmaps, frees the range, then releases the handle.
#[derive(Debug)]
pub(super) struct Mapping {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    size: usize,
    mapped: bool,
    alloc: Allocation,
}

impl Mapping {
    pub(super) fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if !bind_for_drop(&self.ctx, "cuCtxSetCurrent before cuMemUnmap") {
            return;
        }
        if self.mapped {
            // SAFETY: exactly the range `map_block` mapped; the owner
            // synchronized the context, so no work of ours still uses it.
            if let Err(e) = unsafe { driver_ext::mem_unmap(self.ptr, self.size) } {
                // Freeing a range that is still mapped is not allowed:
                // leak the range rather than try.
                record_drop_error(&self.ctx, "cuMemUnmap", e);
                return;
            }
        }
        // SAFETY: exactly the range reserved in `map_block`, now unmapped.
        if let Err(e) = unsafe { driver_ext::mem_address_free(self.ptr, self.size) } {
            record_drop_error(&self.ctx, "cuMemAddressFree", e);
        }
        // `self.alloc` is released when the fields drop, after this.
    }
}

/// Maps `size` bytes of `alloc` at a fresh address range and grants the
/// local device read-write access (PyTorch's `map_block`). On failure
/// everything done so far is undone (by `Mapping`'s drop).
///
/// The caller has made `ctx` current and checked that `size` is the
/// allocation's size, a multiple of the granularity.
fn map_block(ctx: &Arc<CudaContext>, alloc: Allocation, size: usize) -> Result<Mapping> {
    let device = ctx.ordinal();
    // SAFETY: the context is current (caller); `size` is a multiple of the
    // granularity (every block size comes from `BlockLayout`).
    let ptr = unsafe { driver_ext::mem_address_reserve(size, 0) }
        .ctx("cuMemAddressReserve", Some(device))?;
    let mut mapping = Mapping {
        ctx: ctx.clone(),
        ptr,
        size,
        mapped: false,
        alloc,
    };
    // SAFETY: `ptr..ptr + size` was just reserved and is unmapped; the
    // handle is live (owned by `mapping`) and holds `size` bytes.
    unsafe { driver_ext::mem_map(ptr, size, mapping.alloc.handle) }
        .ctx("cuMemMap", Some(device))?;
    mapping.mapped = true;
    let access = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ctx.cu_device(),
        },
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: the range is mapped just above; the descriptor names our
    // own, existing device.
    unsafe { driver_ext::mem_set_access(ptr, size, &[access]) }
        .ctx("cuMemSetAccess", Some(device))?;
    Ok(mapping)
}

/// This rank's block, allocated, mapped, zeroed and exported, before the
/// exchange.
#[derive(Debug)]
pub(super) struct LocalBlock {
    mapping: Mapping,
    fd: OwnedFd,
    layout: BlockLayout,
}

impl LocalBlock {
    /// Allocates and maps a block for `buffer_bytes` plus a signal pad of
    /// `signal_pad_bytes`, zero-fills it (asynchronously: the caller
    /// synchronizes, NOTE [signal pads start at zero]) and exports a
    /// descriptor for it. The caller has made `ctx` current.
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        buffer_bytes: usize,
        signal_pad_bytes: usize,
    ) -> Result<Self> {
        let device = ctx.ordinal();
        check_support(ctx)?;
        let prop = allocation_prop(ctx.cu_device());
        // SAFETY: the driver is initialised (a context exists); `prop`
        // names our existing device.
        let granularity = unsafe {
            driver_ext::mem_get_allocation_granularity(
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        }
        .ctx("cuMemGetAllocationGranularity", Some(device))?;
        let layout = BlockLayout::with_signal_pad(buffer_bytes, signal_pad_bytes, granularity)?;
        // SAFETY: the context is current; `alloc_bytes` is a multiple of
        // the granularity for `prop` (BlockLayout).
        let handle = unsafe { driver_ext::mem_create(layout.alloc_bytes, &prop) }
            .ctx("cuMemCreate", Some(device))?;
        let alloc = Allocation {
            ctx: ctx.clone(),
            handle,
        };
        let mapping = map_block(ctx, alloc, layout.alloc_bytes)?;
        // SAFETY: the whole range is mapped read-write for this device and
        // the context is current.
        unsafe { result::memset_d8_sync(mapping.ptr, 0, layout.alloc_bytes) }
            .ctx("cuMemsetD8", Some(device))?;
        // SAFETY: the handle is live (owned by `mapping`) and was created
        // with the POSIX descriptor handle type.
        let raw = unsafe { driver_ext::mem_export_to_shareable_handle_fd(mapping.alloc.handle) }
            .ctx("cuMemExportToShareableHandle", Some(device))?;
        if raw < 0 {
            return Err(Error::InvalidArgument(format!(
                "cuMemExportToShareableHandle returned descriptor {raw} on device {device}"
            )));
        }
        // SAFETY: the driver just created this descriptor for us; nothing
        // else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self {
            mapping,
            fd,
            layout,
        })
    }

    pub(super) fn layout(&self) -> BlockLayout {
        self.layout
    }
}

/// Every rank's block mapped in this process, index = rank (ours too).
#[derive(Debug)]
pub(super) struct Blocks {
    mappings: Vec<Mapping>,
}

impl Blocks {
    pub(super) fn bases(&self) -> Vec<u64> {
        self.mappings.iter().map(Mapping::ptr).collect()
    }
}

/// All-gathers the blocks' descriptors over `channel`, imports and maps
/// every peer's block. All blocks have `local`'s layout (checked by the
/// caller). The caller has made `ctx` current.
pub(super) fn exchange_and_map(
    ctx: &Arc<CudaContext>,
    local: LocalBlock,
    channel: &mut IpcChannel,
    rank: usize,
    world: usize,
) -> Result<Blocks> {
    let device = ctx.ordinal();
    let fds = channel
        .all_gather_fds(local.fd.as_fd())
        .map_err(Error::ipc)?;
    if fds.len() != world {
        return Err(Error::InvalidArgument(format!(
            "descriptor all-gather returned {} descriptors for {world} ranks",
            fds.len()
        )));
    }
    let LocalBlock {
        mapping: own,
        fd: own_fd,
        layout,
    } = local;
    // Our exported descriptor is no longer needed: the peers hold copies.
    drop(own_fd);
    let mut mappings = Vec::with_capacity(world);
    for (peer, fd) in fds.into_iter().enumerate() {
        if peer == rank {
            continue;
        }
        // SAFETY: the context is current; `fd` is an open descriptor the
        // peer exported from its block (checked by the driver). The import
        // does not take the descriptor, which closes when `fd` drops.
        let handle = unsafe { driver_ext::mem_import_from_shareable_handle_fd(fd.as_raw_fd()) }
            .ctx("cuMemImportFromShareableHandle", Some(device))?;
        let alloc = Allocation {
            ctx: ctx.clone(),
            handle,
        };
        mappings.push(map_block(ctx, alloc, layout.alloc_bytes)?);
    }
    mappings.insert(rank, own);
    Ok(Blocks { mappings })
}
