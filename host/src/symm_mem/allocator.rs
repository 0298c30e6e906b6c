//! The allocator: block layout, the backend choice, this rank's block
//! (phase 1 of the rendezvous) and the per-backend types that own the
//! blocks (`vmm`, `cuda_ipc`); the policy for errors met while releasing any of them (NOTE [drop errors] in
//! `error.rs`).

use std::sync::Arc;

use cudarc::driver::CudaContext;
use intranode_store::Store;
use serde::{Deserialize, Serialize};

pub use super::block::BlockLayout;
use super::{cuda_ipc, vmm};
pub use crate::config::Backend;
use crate::error::{DriverContext, Error, Result};
use intranode_ipc::IpcChannel;

/// The peers' blocks as this process holds them, per backend.
#[derive(Debug)]
pub(super) enum Blocks {
    Vmm(vmm::Blocks),
    CudaIpc(cuda_ipc::Blocks),
}

impl Blocks {
    /// Base address of each rank's block in this process, index = rank.
    pub(super) fn bases(&self) -> Vec<u64> {
        match self {
            Self::Vmm(b) => b.bases(),
            Self::CudaIpc(b) => b.bases(),
        }
    }
}

/// Our own block after phase 1, before the peers' are known.
#[derive(Debug)]
pub(super) enum LocalBlock {
    Vmm(vmm::LocalBlock),
    CudaIpc(cuda_ipc::LocalBlock),
}

/// What each rank publishes after phase 1 (local allocation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LocalInfo {
    pub(super) pid: u32,
    pub(super) device: usize,
    pub(super) backend: Backend,
    pub(super) layout: BlockLayout,
    /// The legacy IPC handle's 64 bytes ([`Backend::CudaIpc`] only).
    pub(super) ipc_handle: Option<Vec<u8>>,
}

/// Phase 1: allocate, zero and export our block; for VMM also bind the
/// descriptor channel (a local step that can fail, so it belongs here).
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
pub(super) fn allocate_local(
    ctx: &Arc<CudaContext>,
    rank: usize,
    world: usize,
    buffer_bytes: usize,
    signal_pad_bytes: usize,
    backend: Backend,
    job_id: &str,
    ipc_dir: &std::path::Path,
    store: &dyn Store,
) -> Result<(LocalBlock, LocalInfo, Option<IpcChannel>)> {
    let device = ctx.ordinal();
    crate::error::bind(ctx, Some(device))?;
    let (block, layout, ipc_handle, channel) = match backend {
        Backend::Vmm => {
            let block = vmm::LocalBlock::new(ctx, buffer_bytes, signal_pad_bytes)?;
            let layout = block.layout();
            // Rank 0 chose the directory for the whole group (phase 0).
            let channel = IpcChannel::new(ipc_dir, job_id, rank, world, store.timeout())
                .map_err(Error::ipc)?;
            (LocalBlock::Vmm(block), layout, None, Some(channel))
        }
        Backend::CudaIpc => {
            let block = cuda_ipc::LocalBlock::new(ctx, buffer_bytes, signal_pad_bytes)?;
            let layout = block.layout();
            let handle = block.handle_bytes();
            (LocalBlock::CudaIpc(block), layout, Some(handle), None)
        }
    };
    // NOTE [signal pads start at zero]: the block was zero-filled with
    // cuMemsetD8, which returns before the fill is done for device
    // memory. Wait for it here, before we report success: peers use our
    // pad only after the last all-gather, which follows this.
    ctx.synchronize().ctx("cuCtxSynchronize", Some(device))?;
    let info = LocalInfo {
        pid: std::process::id(),
        device,
        backend,
        layout,
        ipc_handle,
    };
    Ok((block, info, channel))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_BUFFER_BYTES;
    use crate::symm_mem::block::{SIGNAL_PAD_ALIGN, SIGNAL_PAD_BYTES, round_up};

    #[test]
    fn round_up_math() {
        assert_eq!(round_up(0, 4096), Some(0));
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(4096, 4096), Some(4096));
        assert_eq!(round_up(4097, 4096), Some(8192));
        assert_eq!(round_up(10 << 20, 2 << 20), Some(10 << 20));
        assert_eq!(round_up((10 << 20) + 1, 2 << 20), Some(12 << 20));
        assert_eq!(round_up(7, 3), Some(9));
        assert_eq!(round_up(5, 0), None);
        assert_eq!(round_up(usize::MAX, 2), None);
        assert_eq!(round_up(usize::MAX - 1, 2), Some(usize::MAX - 1));
    }

    #[test]
    fn default_layout_on_2mib_granularity() {
        let l = BlockLayout::new(DEFAULT_BUFFER_BYTES, 2 << 20).expect("layout");
        assert_eq!(l.buffer_bytes, 10 << 20);
        assert_eq!(l.signal_pad_offset, 10 << 20);
        assert_eq!(l.signal_pad_bytes, SIGNAL_PAD_BYTES);
        // 10 MiB + 64 KiB of flags + 64 MiB of Lamport buffers rounds up
        // to 76 MiB.
        assert_eq!(l.alloc_bytes, 76 << 20);
    }

    #[test]
    fn odd_buffer_sizes() {
        let l = BlockLayout::new(1, 2 << 20).expect("layout");
        assert_eq!(
            (l.signal_pad_offset, l.alloc_bytes),
            (4096, (4096 + SIGNAL_PAD_BYTES).next_multiple_of(2 << 20))
        );
        let l = BlockLayout::new(4097, 1).expect("layout");
        assert_eq!(
            (l.signal_pad_offset, l.alloc_bytes),
            (8192, 8192 + SIGNAL_PAD_BYTES)
        );
        let l = BlockLayout::with_signal_pad(100, 0, 512).expect("layout");
        assert_eq!((l.signal_pad_offset, l.alloc_bytes), (4096, 4096));
        // The pad never overlaps the buffer and everything fits.
        for bytes in [1usize, 255, 4095, 4096, 65_537, 3 << 20, (10 << 20) - 1] {
            for gran in [1usize, 4096, 2 << 20] {
                let l = BlockLayout::new(bytes, gran).expect("layout");
                assert!(l.signal_pad_offset >= l.buffer_bytes);
                assert_eq!(l.signal_pad_offset % SIGNAL_PAD_ALIGN, 0);
                assert!(l.signal_pad_offset + l.signal_pad_bytes <= l.alloc_bytes);
                assert_eq!(l.alloc_bytes % gran, 0);
                assert!(l.alloc_bytes - (l.signal_pad_offset + l.signal_pad_bytes) < gran);
            }
        }
    }

    #[test]
    fn layout_errors() {
        let e = BlockLayout::new(0, 4096).expect_err("zero buffer");
        assert!(e.to_string().contains("must be positive"), "{e}");
        assert!(BlockLayout::new(10, 0).is_err());
        assert!(BlockLayout::new(10, 3000).is_err());
        let e = BlockLayout::new(usize::MAX - 10, 4096).expect_err("overflow");
        assert!(e.to_string().contains("overflows"), "{e}");
    }

    #[test]
    fn backend_names() {
        assert_eq!(Backend::parse("VMM"), Some(Backend::Vmm));
        assert_eq!(Backend::parse("cuda-ipc"), Some(Backend::CudaIpc));
        assert_eq!(Backend::parse(" cuda_ipc "), Some(Backend::CudaIpc));
        assert_eq!(Backend::parse("nvshmem"), None);
        for b in [Backend::Vmm, Backend::CudaIpc] {
            assert_eq!(Backend::parse(b.as_str()), Some(b));
        }
    }
}
