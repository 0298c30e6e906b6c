//! Symmetric memory: one block of device memory per rank that every rank
//! of the group has mapped into its own address space (PyTorch's
//! `CUDASymmetricMemory`).
//!
//! Main types: [`SymmetricMemory`] (the handle: per-rank buffer and
//! signal-pad addresses), [`Backend`] (how blocks travel between processes) and [`BlockLayout`]
//! (where buffer and signal pad sit in a block).
//!
//! # Blocks
//!
//! Each rank allocates one block: its data buffer at offset 0, then the
//! signal pad at [`BlockLayout::signal_pad_offset`] (4 KiB aligned), the
//! whole rounded up to the allocation granularity. One allocation per rank
//! means one handle, one descriptor and one mapping per peer. The block is
//! zero-filled (signal pad included) and the fill has completed before
//! any rank returns from [`SymmetricMemory::rendezvous`]: see
//! `NOTE [signal pads start at zero]`.
//!
//! # Backends
//!
//! - [`Backend::Vmm`] (default, module `vmm`): `cuMemCreate` with a POSIX
//!   file-descriptor handle; descriptors travel over an
//!   [`IpcChannel`](intranode_ipc::IpcChannel); peers import and map
//!   them (`map_block`: reserve, `cuMemMap`, `cuMemSetAccess`).
//! - [`Backend::CudaIpc`] (`INTRANODE_SYMM_MEM_BACKEND=cuda-ipc`, module
//!   `cuda_ipc`): `cuMemAlloc` plus legacy `cuIpcGetMemHandle` handles
//!   exchanged through the store, for hosts where descriptor passing is
//!   impossible.
//!
//! # Every rank reaches the same outcome
//!
//! The rendezvous runs in phases; after each, every rank's outcome (ok or
//! the error text) is all-gathered through the store, so when one rank
//! fails (its allocation, its socket), every rank returns an error
//! ([`Error::PeerFailed`](crate::Error::PeerFailed) on the others) instead of waiting for it. The
//! sequence of store collectives never depends on local state.
//!
//! # Multicast
//!
//! This library never creates multicast objects (docs/DESIGN.md section 3).
//!
//! # Files
//!
//! `handle.rs` the handle ([`SymmetricMemory`]'s pointers, accessors and
//! teardown); `suite.rs` what only the project's suites check it through
//! (typed views of a rank's buffer and their bounds); `allocator.rs` the layout, the backend
//! choice, this rank's block and the types that own blocks, and the policy
//! for errors on `Drop` (NOTE [drop errors] in `error.rs`); `vmm.rs` and `cuda_ipc.rs`
//! the two backends; `exchange.rs` the rendezvous between ranks (handles
//! or descriptors out, the peers' blocks mapped in).

mod allocator;
mod block;
mod cuda_ipc;
mod exchange;
mod handle;
mod vmm;

#[cfg(intranode_internals)]
mod suite;

pub use allocator::Backend;
pub use handle::SymmetricMemory;
