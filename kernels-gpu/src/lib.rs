//! GPU kernels of intranode, written in `no_std` Rust and compiled by
//! rustc's NVPTX back end to PTX (`cargo xtask build-ptx`).
//!
//! Layout (the linked modules are built for the host too, and documented
//! here; the others exist only in the nvptx64 build, where the kernels
//! live):
//! - `ptx`: the only inline PTX of the crate, as small named functions
//!   (acquire/release flags, fences, 16-byte vector accesses, conversions,
//!   `%globaltimer`). Each one's instruction and scope is checked by a test
//!   on the emitted PTX (`host/tests/ptx_scopes.rs`).
//! - [`index`]: index and chunk arithmetic, plain functions shared with the
//!   host (and unit-tested there).
//! - `packed`: element types (bf16, f16, f32) as packed 16-byte vectors,
//!   widened to f32 for arithmetic.
//! - `sync`: the peer barriers and flags over signal pads, with bounded
//!   waits.
//! - `schedule`: under feature `schedule-fuzz` only, random delays at the
//!   points where a block's progress meets its peers' (the schedule
//!   fuzzer); nothing in the shipped PTX.
//! - `prims`: the device primitives the collectives are made of (the
//!   rank-order reduction, the 4-in-flight strided copy, the Lamport
//!   buffers' call set-up, push, wait and zeroing, the norm's row ops):
//!   one floor below every collective, which import only downwards.
//! - `all_reduce`: one-shot, two-shot and HCM all-reduce; `lamport`:
//!   the barrier-free one-shot and two-shot, and the reduce-scatter and
//!   all-gather made of the two-shot's hops; `push`: the large-message
//!   form (every link byte a store, reduce-scatter and all-gather merged
//!   per chunk, rings of slots per block and peer).
//! - `elementwise`: the first kernels (`add_*`), used by the GPU smoke test,
//!   and `axpy_f32` (the example's optimizer step).
//! - `broadcast`: broadcast over symmetric memory, sharing the call count
//!   and halves with the all-reduce kernels.
//! - `cast`: f32 to and from bf16/f16, for gradient compression.
//! - [`pattern`]: the soak's input pattern and expected outputs (shared
//!   with the host); `soak`: its fill and check kernels.
//! - `norm`: RMSNorm, alone or after a residual add (the tail of an
//!   all-reduce); `fused_norm`: the Lamport one-shot all-reduce,
//!   residual add and RMSNorm in one kernel (NOTE [fused norm]).
//! - [`decode`]: the rest of a decode layer's elementwise steps (SiLU x
//!   mul) and the decode benchmark's random fill ([`decode::uniform`],
//!   shared with the host; its kernel is a test kernel).
//! - `timing`: the benchmark's per-call stamps and spins, and the probe
//!   of what polling costs (NOTE [abandoned waits] in `sync`); `probes`:
//!   one kernel per ordering function of `ptx`, for the test of their
//!   scopes.
//! - [`entries`]: the one list of the kernels' entry points, which the
//!   kernels take their names from and the host builds its kernel table
//!   from.
//!
//! Two PTX files are built from this crate: the production PTX (the
//! default), which the host crate ships, and the test PTX (feature
//! `test-kernels`), which holds only `probes`, `soak`, `timing` and the
//! decode benchmark's `fill_uniform_*`, and which only the test suites
//! and the benchmark load. The feature swaps one set of kernels for the
//! other rather than adding one, so that neither PTX carries the other's
//! kernels; that is safe from cargo's feature unification because the
//! kernel modules exist only on `nvptx64`, which only `intranode-ptx-builder`
//! builds, one set per invocation (on the host the feature changes
//! nothing).
//!
//! Kernels own nothing: every pointer they touch is passed by the host.
//! They must not call out-of-line `core` functions (the PTX could not be
//! loaded without a linker), so no bounds-checked indexing, no panicking
//! arithmetic and no formatting appear on kernel paths.
#![cfg_attr(not(test), no_std)]
// On both targets: the host build (docs.rs, `cargo xtask doc`) checks the
// shared modules, the nvptx64 builds (`build-ptx`, CI's kernel clippy)
// the kernels' own.
#![deny(missing_docs)]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, stdarch_nvptx, asm_experimental_arch)
)]

pub mod decode;
pub mod entries;
pub mod index;
pub mod layout;
pub mod pattern;

// Shared by the production and the test kernels.
#[cfg(target_arch = "nvptx64")]
pub mod packed;
#[cfg(target_arch = "nvptx64")]
pub mod ptx;
// The schedule fuzzer's delays (nothing outside feature `schedule-fuzz`).
#[cfg(target_arch = "nvptx64")]
pub mod schedule;
// The test PTX uses only the wait constants of `sync`.
#[cfg(target_arch = "nvptx64")]
pub mod sync;

// The production kernels (`entries::Kernel`): every build but the test
// PTX's.
#[cfg(all(target_arch = "nvptx64", not(feature = "test-kernels")))]
pub mod all_reduce;
#[cfg(all(target_arch = "nvptx64", not(feature = "test-kernels")))]
pub mod broadcast;
#[cfg(all(target_arch = "nvptx64", not(feature = "test-kernels")))]
pub mod cast;
#[cfg(all(target_arch = "nvptx64", not(feature = "test-kernels")))]
pub mod elementwise;
#[cfg(all(target_arch = "nvptx64", not(feature = "test-kernels")))]
pub mod fused_norm;
// The Lamport forms' functions are also the test PTX's phase probes'
// (`timing::probe_lamport*_phases_w*`), with the primitives below them.
#[cfg(target_arch = "nvptx64")]
pub mod lamport;
#[cfg(all(target_arch = "nvptx64", not(feature = "test-kernels")))]
pub mod norm;
// The primitives the production kernels are made of, below them.
#[cfg(target_arch = "nvptx64")]
pub mod prims;
#[cfg(all(target_arch = "nvptx64", not(feature = "test-kernels")))]
pub mod push;
#[cfg(all(target_arch = "nvptx64", not(feature = "test-kernels")))]
pub mod push_scatter_gather;

// The test and probe kernels (`entries::TestKernel`,
// `entries::SCOPE_PROBES`): the test PTX only.
#[cfg(all(target_arch = "nvptx64", feature = "test-kernels"))]
pub mod probes;
#[cfg(all(target_arch = "nvptx64", feature = "test-kernels"))]
pub mod soak;
#[cfg(all(target_arch = "nvptx64", feature = "test-kernels"))]
pub mod timing;

#[cfg(all(target_arch = "nvptx64", not(test)))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    // A panic on the GPU has nowhere to report to: stop the kernel so the
    // host sees a launch failure instead of a wrong result.
    ptx::trap()
}
