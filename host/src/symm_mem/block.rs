//! A rank's block as every backend lays it out: the signal pad's size and
//! alignment, [`BlockLayout`], and [`DeviceAlloc`] (plain `cuMemAlloc`);
//! below the allocator and both backends (`vmm`, `cuda_ipc`), which share
//! it.

use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};
use serde::{Deserialize, Serialize};

use crate::error::{DriverContext, Error, Result, bind_for_drop, record_drop_error};

/// Size of each rank's signal pad: barrier flags and counters, then the
/// Lamport buffers (NOTE [signal pad layout] in `intranode_kernels_gpu::layout`).
pub const SIGNAL_PAD_BYTES: usize = intranode_kernels_gpu::layout::SIGNAL_PAD_BYTES;

const _: () = assert!(SIGNAL_PAD_BYTES >= intranode_kernels_gpu::layout::SIGNAL_PAD_MIN_BYTES);

/// Alignment of the signal pad inside a block.
pub const SIGNAL_PAD_ALIGN: usize = 4096;

/// `bytes` rounded up to a multiple of `granularity`; `None` on overflow
/// or a zero granularity.
pub fn round_up(bytes: usize, granularity: usize) -> Option<usize> {
    if granularity == 0 {
        return None;
    }
    bytes.checked_next_multiple_of(granularity)
}

/// Where buffer and signal pad sit in one rank's block. Identical on every
/// rank (checked at rendezvous).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlockLayout {
    /// Usable bytes of the data buffer, at offset 0 (what the caller asked
    /// for; views are checked against it).
    pub buffer_bytes: usize,
    /// Offset of the signal pad: `buffer_bytes` rounded up to
    /// [`SIGNAL_PAD_ALIGN`].
    pub signal_pad_offset: usize,
    /// Bytes of the signal pad.
    pub signal_pad_bytes: usize,
    /// Bytes actually allocated: the end of the signal pad rounded up to
    /// the allocation granularity.
    pub alloc_bytes: usize,
}

impl BlockLayout {
    /// The layout for a buffer of `buffer_bytes` and a pad of
    /// [`SIGNAL_PAD_BYTES`], allocated in multiples of `granularity`.
    #[cfg(test)]
    pub fn new(buffer_bytes: usize, granularity: usize) -> Result<Self> {
        Self::with_signal_pad(buffer_bytes, SIGNAL_PAD_BYTES, granularity)
    }

    /// [`BlockLayout::new`] with a chosen signal-pad size.
    pub fn with_signal_pad(
        buffer_bytes: usize,
        signal_pad_bytes: usize,
        granularity: usize,
    ) -> Result<Self> {
        if buffer_bytes == 0 {
            return Err(Error::InvalidArgument(
                "symmetric memory buffer size must be positive, got 0 bytes".into(),
            ));
        }
        if granularity == 0 || !granularity.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "allocation granularity must be a power of two, got {granularity}"
            )));
        }
        let too_big = || {
            Error::InvalidArgument(format!(
                "symmetric memory buffer of {buffer_bytes} bytes plus a {signal_pad_bytes}-byte signal pad \
                 overflows the address space"
            ))
        };
        let signal_pad_offset = round_up(buffer_bytes, SIGNAL_PAD_ALIGN).ok_or_else(too_big)?;
        let end = signal_pad_offset
            .checked_add(signal_pad_bytes)
            .ok_or_else(too_big)?;
        let alloc_bytes = round_up(end, granularity).ok_or_else(too_big)?;
        Ok(Self {
            buffer_bytes,
            signal_pad_offset,
            signal_pad_bytes,
            alloc_bytes,
        })
    }
}

/// Device memory from plain `cuMemAlloc` (peers can reach it, unlike the
/// stream-ordered pool behind cudarc's `alloc`), freed on drop.
#[derive(Debug)]
pub(super) struct DeviceAlloc {
    ctx: Arc<CudaContext>,
    pub(super) ptr: sys::CUdeviceptr,
}

impl DeviceAlloc {
    pub(super) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        let device = Some(ctx.ordinal());
        crate::error::bind(ctx, device)?;
        // SAFETY: the context is current; the memory is uninitialised
        // bytes, which this type never reads as anything.
        let ptr = unsafe { result::malloc_sync(bytes) }.ctx("cuMemAlloc", device)?;
        Ok(Self {
            ctx: ctx.clone(),
            ptr,
        })
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        if !bind_for_drop(&self.ctx, "cuCtxSetCurrent before cuMemFree") {
            return;
        }
        // SAFETY: `ptr` came from cuMemAlloc in this context and is freed
        // only here; the owner synchronized the context before dropping.
        if let Err(e) = unsafe { result::free_sync(self.ptr) } {
            record_drop_error(&self.ctx, "cuMemFree", e);
        }
    }
}
