//! GPU kernels of intranode, written in `no_std` Rust and compiled by
//! rustc's NVPTX back end to PTX (`cargo xtask build-ptx`).
//!
//! Layout:
//! - [`ptx`]: the only inline PTX of the crate, as small named functions
//!   (acquire/release flags, fences, 16-byte vector accesses, conversions,
//!   `%globaltimer`). Each one's instruction and scope is checked by a test
//!   on the emitted PTX (`host/tests/ptx_scopes.rs`).
//! - [`math`]: index and chunk arithmetic, plain functions shared with the
//!   host (and unit-tested there).
//! - [`elem`]: element types (bf16, f16, f32) as packed 16-byte vectors,
//!   widened to f32 for arithmetic.
//! - [`all_reduce`]: one-shot, two-shot and HCM all-reduce; [`lamport`]:
//!   the barrier-free one-shot and two-shot, and the reduce-scatter and
//!   all-gather made of the two-shot's hops; [`bandwidth`]: the
//!   large-message form (pushed reduce-scatter, pulled all-gather, rounds
//!   pipelined through the symmetric buffers).
//! - [`elementwise`]: the first kernels (`add_*`), used by the GPU smoke test,
//!   and `axpy_f32` (the example's optimizer step).
//! - [`broadcast`]: broadcast over symmetric memory, sharing the call count
//!   and halves with the all-reduce kernels.
//! - [`cast`]: f32 to and from bf16/f16, for gradient compression.
//! - [`pattern`]: the soak's input pattern and expected outputs (shared
//!   with the host); [`soak`]: its fill and check kernels.
//! - [`norm`]: RMSNorm, alone or after a residual add (the tail of an
//!   all-reduce).
//! - [`decode`]: the rest of a decode layer's elementwise steps (SiLU x
//!   mul) and the decode benchmark's random fill ([`decode::uniform`],
//!   shared with the host).
//! - [`timing`]: the benchmark's per-call stamps and spins, and the probe
//!   of what polling costs (NOTE [abandoned waits] in [`sync`]).
//!
//! Kernels own nothing: every pointer they touch is passed by the host.
//! They must not call out-of-line `core` functions (the PTX could not be
//! loaded without a linker), so no bounds-checked indexing, no panicking
//! arithmetic and no formatting appear on kernel paths.
#![cfg_attr(not(test), no_std)]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, stdarch_nvptx, asm_experimental_arch)
)]

pub mod decode;
pub mod layout;
pub mod math;
pub mod pattern;

#[cfg(target_arch = "nvptx64")]
pub mod all_reduce;
#[cfg(target_arch = "nvptx64")]
pub mod bandwidth;
#[cfg(target_arch = "nvptx64")]
pub mod broadcast;
#[cfg(target_arch = "nvptx64")]
pub mod cast;
#[cfg(target_arch = "nvptx64")]
pub mod elem;
#[cfg(target_arch = "nvptx64")]
pub mod elementwise;
#[cfg(target_arch = "nvptx64")]
pub mod lamport;
#[cfg(target_arch = "nvptx64")]
pub mod norm;
#[cfg(target_arch = "nvptx64")]
pub mod probes;
#[cfg(target_arch = "nvptx64")]
pub mod ptx;
#[cfg(target_arch = "nvptx64")]
pub mod soak;
#[cfg(target_arch = "nvptx64")]
pub mod sync;
#[cfg(target_arch = "nvptx64")]
pub mod timing;

#[cfg(all(target_arch = "nvptx64", not(test)))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    // A panic on the GPU has nowhere to report to: stop the kernel so the
    // host sees a launch failure instead of a wrong result.
    ptx::trap()
}
