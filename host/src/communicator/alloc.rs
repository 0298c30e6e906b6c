//! [`Communicator::alloc_symmetric`]: symmetric buffers for users
//! (`crate::symmetric`).

use super::Communicator;
use crate::error::{Error, Result};
use crate::symmetric::SymmetricBuffer;

impl Communicator {
    /// Allocates `len` elements of `T` on this rank that every peer maps
    /// (PyTorch's `symm_mem.empty` + `rendezvous`), for work on this
    /// communicator's stream. Collective: every rank calls it with the
    /// same `len`, in the same order; lengths that differ fail on every
    /// rank. An all-reduce whose input is such a buffer (or a view of it,
    /// at the same offset on every rank) reads the peers' copies in place
    /// instead of copying the input first. The memory starts zero-filled.
    /// See [`crate::symmetric`] for the contract, drop included.
    ///
    /// `T` is a type the device can hold as plain bytes (cudarc's
    /// `DeviceRepr`): `alloc_symmetric::<String>` does not compile.
    ///
    /// ```compile_fail
    /// fn strings(comm: &intranode::Communicator) {
    ///     let _ = comm.alloc_symmetric::<String>(4);
    /// }
    /// ```
    ///
    /// Needs the intra-node path: a group that runs on NCCL alone gets an
    /// error naming why it has none.
    pub fn alloc_symmetric<T: cudarc::driver::DeviceRepr>(
        &self,
        len: usize,
    ) -> Result<SymmetricBuffer<T>> {
        let intra = self.intra.as_ref().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "alloc_symmetric on rank {}: symmetric buffers need the intra-node path, which is unavailable: {}",
                self.rank,
                self.intra_reason.as_deref().unwrap_or("unknown")
            ))
        })?;
        intra.alloc_symmetric(len, &self.stream)
    }
}
