//! The handle: [`SymmetricMemory`] (every rank's block as mapped here,
//! its pointers and accessors, and its teardown).

use std::fmt;
use std::sync::Arc;

use cudarc::driver::CudaContext;

use super::allocator::{Backend, BlockLayout, Blocks};
use crate::error::sync_for_drop;

/// Every rank's block of a group, mapped into this process.
///
/// Dropping it waits for this context's work, then unmaps every peer's
/// block and releases this rank's. The caller must make sure no peer still
/// runs work on this rank's block when it drops (a store barrier before
/// the drop does it). With [`Backend::Vmm`] a peer's late access still hits
/// valid memory, since its own mapping keeps the physical pages alive.
pub struct SymmetricMemory {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) rank: usize,
    pub(super) world: usize,
    pub(super) backend: Backend,
    pub(super) layout: BlockLayout,
    pub(super) buffer_ptrs: Vec<u64>,
    pub(super) signal_pad_ptrs: Vec<u64>,
    /// Held for its `Drop` (unmap, release), after the context sync in
    /// `SymmetricMemory::drop`.
    #[allow(dead_code)]
    pub(super) blocks: Blocks,
}

impl fmt::Debug for SymmetricMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymmetricMemory")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("device", &self.ctx.ordinal())
            .field("backend", &self.backend)
            .field("layout", &self.layout)
            .field("buffer_ptrs", &format_args!("{:#x?}", self.buffer_ptrs))
            .field(
                "signal_pad_ptrs",
                &format_args!("{:#x?}", self.signal_pad_ptrs),
            )
            .finish_non_exhaustive()
    }
}

impl Drop for SymmetricMemory {
    fn drop(&mut self) {
        // Our own kernels may still read the peers' blocks or the pointer
        // tables: wait for them before the fields unmap and free (an error
        // recorded earlier must not skip the wait: NOTE [drop errors]). A
        // failed wait is recorded; the fields still release.
        let _idle = sync_for_drop(&self.ctx, "cuCtxSetCurrent before teardown");
    }
}

impl SymmetricMemory {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the group.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Usable bytes of each rank's data buffer.
    pub fn buffer_bytes(&self) -> usize {
        self.layout.buffer_bytes
    }

    /// Each rank's data buffer as a device address valid in this process,
    /// index = rank.
    pub fn buffer_ptrs(&self) -> &[u64] {
        &self.buffer_ptrs
    }

    /// Each rank's signal pad as a device address valid in this process,
    /// index = rank.
    pub fn signal_pad_ptrs(&self) -> &[u64] {
        &self.signal_pad_ptrs
    }
}
