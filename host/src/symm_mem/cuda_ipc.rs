//! The legacy backend: blocks from plain `cuMemAlloc`, shared with
//! `cuIpcGetMemHandle` handles that travel through the store, opened with
//! `cuIpcOpenMemHandle`. For hosts where descriptor passing is impossible.
//!
//! A process cannot open a handle to its own allocation, so each rank uses
//! its own pointer for its own block. Ranks sharing one device (overlapping
//! devices) are separate processes, where opening works.

use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};

use super::block::{BlockLayout, DeviceAlloc, SIGNAL_PAD_ALIGN};
use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};
use crate::error::{bind_for_drop, record_drop_error};

/// Size in bytes of a `CUipcMemHandle`.
pub(super) const IPC_HANDLE_BYTES: usize = 64;

/// This rank's block and its IPC handle, before the exchange.
#[derive(Debug)]
pub(super) struct LocalBlock {
    alloc: DeviceAlloc,
    handle: [u8; IPC_HANDLE_BYTES],
    layout: BlockLayout,
}

impl LocalBlock {
    /// Allocates a block for `buffer_bytes` plus a signal pad of
    /// `signal_pad_bytes` with `cuMemAlloc`, zero-fills it
    /// (asynchronously: the caller synchronizes, NOTE [signal pads start
    /// at zero]) and takes its IPC handle. The caller has made `ctx`
    /// current.
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        buffer_bytes: usize,
        signal_pad_bytes: usize,
    ) -> Result<Self> {
        let device = ctx.ordinal();
        // cuMemAlloc has no granularity of its own to respect; round to the
        // pad alignment so the layout is the same on every rank.
        let layout =
            BlockLayout::with_signal_pad(buffer_bytes, signal_pad_bytes, SIGNAL_PAD_ALIGN)?;
        let alloc = DeviceAlloc::new(ctx, layout.alloc_bytes)?;
        // SAFETY: `alloc` holds `alloc_bytes` bytes of device memory in the
        // current context.
        unsafe { result::memset_d8_sync(alloc.ptr, 0, layout.alloc_bytes) }
            .ctx("cuMemsetD8", Some(device))?;
        // SAFETY: `alloc.ptr` is the base of a live cuMemAlloc allocation.
        let handle = unsafe { driver_ext::ipc_get_mem_handle(alloc.ptr) }
            .ctx("cuIpcGetMemHandle", Some(device))?;
        Ok(Self {
            alloc,
            handle: handle.reserved.map(|c| c as u8),
            layout,
        })
    }

    pub(super) fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// The handle's bytes, as they travel through the store.
    pub(super) fn handle_bytes(&self) -> Vec<u8> {
        self.handle.to_vec()
    }
}

/// A peer's block opened in this process, closed on drop.
#[derive(Debug)]
struct Opened {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
}

impl Drop for Opened {
    fn drop(&mut self) {
        if !bind_for_drop(&self.ctx, "cuCtxSetCurrent before cuIpcCloseMemHandle") {
            return;
        }
        // SAFETY: `ptr` came from cuIpcOpenMemHandle and is closed only
        // here; the owner synchronized the context before dropping.
        if let Err(e) = unsafe { driver_ext::ipc_close_mem_handle(self.ptr) } {
            record_drop_error(&self.ctx, "cuIpcCloseMemHandle", e);
        }
    }
}

/// Our block and every peer's, index = rank.
#[derive(Debug)]
pub(super) struct Blocks {
    bases: Vec<u64>,
    #[allow(dead_code)] // held for its Drop
    own: DeviceAlloc,
    #[allow(dead_code)] // held for its Drop
    peers: Vec<Opened>,
}

impl Blocks {
    pub(super) fn bases(&self) -> Vec<u64> {
        self.bases.clone()
    }
}

/// The `CUipcMemHandle` whose bytes are `bytes`.
fn handle_from_bytes(peer: usize, bytes: &[u8]) -> Result<sys::CUipcMemHandle> {
    let bytes: [u8; IPC_HANDLE_BYTES] = bytes.try_into().map_err(|_| {
        Error::InvalidArgument(format!(
            "rank {peer} published a CUDA IPC handle of {} bytes, expected {IPC_HANDLE_BYTES}",
            bytes.len()
        ))
    })?;
    Ok(sys::CUipcMemHandle {
        reserved: bytes.map(|b| b as std::ffi::c_char),
    })
}

/// Opens every peer's block from its published handle (`handles[r]` is
/// rank `r`'s). The caller has made `ctx` current.
pub(super) fn open_peers(
    ctx: &Arc<CudaContext>,
    local: LocalBlock,
    handles: &[Vec<u8>],
    rank: usize,
) -> Result<Blocks> {
    let device = ctx.ordinal();
    let mut bases = Vec::with_capacity(handles.len());
    let mut peers = Vec::with_capacity(handles.len().saturating_sub(1));
    for (peer, bytes) in handles.iter().enumerate() {
        if peer == rank {
            bases.push(local.alloc.ptr);
            continue;
        }
        let handle = handle_from_bytes(peer, bytes)?;
        // SAFETY: the context is current; the handle came from the peer's
        // cuIpcGetMemHandle on its live block (the peer keeps it alive until
        // the group is dropped).
        let ptr = unsafe {
            driver_ext::ipc_open_mem_handle(
                handle,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
            )
        }
        .ctx("cuIpcOpenMemHandle", Some(device))?;
        peers.push(Opened {
            ctx: ctx.clone(),
            ptr,
        });
        bases.push(ptr);
    }
    Ok(Blocks {
        bases,
        own: local.alloc,
        peers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_bytes_round_trip() {
        let bytes: Vec<u8> = (0..64u8)
            .map(|b| b.wrapping_mul(7).wrapping_add(200))
            .collect();
        let h = handle_from_bytes(1, &bytes).expect("64 bytes");
        assert_eq!(h.reserved.map(|c| c as u8).to_vec(), bytes);
        let e = handle_from_bytes(3, &bytes[..10]).expect_err("short");
        assert!(
            e.to_string().contains("rank 3") && e.to_string().contains("10 bytes"),
            "{e}"
        );
    }
}
