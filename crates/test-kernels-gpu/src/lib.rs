//! The test and probe kernels of intranode, in `no_std` Rust, compiled by
//! rustc's NVPTX back end to the test PTX (`host/ptx/test-kernels-<arch>.ptx`,
//! `cargo xtask build-ptx`, `intranode_ptx_builder::KernelSet::Test`).
//!
//! They stand on the production crate, `intranode-kernels-gpu` (its
//! `ptx`, `sync`, `packed`, `layout`, `pattern`, `decode` and the Lamport
//! forms), and are kept out of it so that its PTX, which the host crate
//! ships, carries none of them, and this PTX none of the production
//! kernels: a crate builds to one PTX file holding its own entry points
//! only.
//!
//! - `probes`: one kernel per ordering function of the production `ptx`
//!   module, never launched: `host/tests/ptx_scopes.rs` reads their
//!   bodies.
//! - `soak`: the soak's fill and check kernels (the pattern is
//!   `intranode_kernels_gpu::pattern`).
//! - `timing`: the benchmark's per-call stamps and spins, the probes of
//!   what polling and one NVLink hop cost, and the Lamport phase probes
//!   (the production one-shot and two-shot with each phase stamped).
//! - `fill`: the decode benchmark's random fill
//!   (`intranode_kernels_gpu::decode::uniform`).
//!
//! The host launches them through `intranode::kernels::TestKernelModule`
//! (feature `test-kernels` of the host crate), keyed by
//! `intranode::kernels::TestKernel`; a host test holds that list and this
//! PTX's entry points equal both ways. The rules of the production
//! kernels hold here too: every pointer comes from the host, and no
//! out-of-line `core` function is called (the PTX could not be loaded
//! without a linker).
//!
//! On the host the crate is empty.
#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

// No panic handler here: the production crate's, which stops the kernel
// (`trap`), serves both.
#[cfg(target_arch = "nvptx64")]
pub mod fill;
#[cfg(target_arch = "nvptx64")]
pub mod probes;
#[cfg(target_arch = "nvptx64")]
pub mod soak;
#[cfg(target_arch = "nvptx64")]
pub mod timing;
