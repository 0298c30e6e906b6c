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
//!   with the host and the soak's kernels).
//! - `norm`: RMSNorm, alone or after a residual add (the tail of an
//!   all-reduce); `fused_norm`: the Lamport one-shot all-reduce,
//!   residual add and RMSNorm in one kernel (NOTE [fused norm]).
//! - [`decode`]: the rest of a decode layer's elementwise steps (SiLU x
//!   mul) and the values of the decode benchmark's random tensors
//!   ([`decode::uniform`], shared with the host).
//! - [`entries`]: the one list of the kernels' entry points, which the
//!   kernels take their names from and the host builds its kernel table
//!   from.
//!
//! The crate builds to one PTX, the production PTX, which the host crate
//! ships. The test and probe kernels (the soak's fill and check, the
//! benchmark's stamps and spins, the probes of polling, of one NVLink hop,
//! of the Lamport phases and of `ptx`'s scopes, the decode benchmark's
//! random fill) live in a crate of their own, `intranode-test-kernels-gpu`
//! (`crates/test-kernels-gpu`, never published), which stands on this
//! one's modules and builds to the test PTX: each PTX holds only its own
//! crate's entry points. What that crate uses of this one (`sync`'s poll
//! loop and wait constants, the Lamport forms' `*_marked` functions and
//! `lamport::Marks`, `packed`, `ptx`, `layout`, `pattern`) is
//! public on `nvptx64` for it.
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

// The floors under the kernels, shared with the test kernels
// (`intranode-test-kernels-gpu`).
#[cfg(target_arch = "nvptx64")]
pub mod packed;
#[cfg(target_arch = "nvptx64")]
pub mod ptx;
// The schedule fuzzer's delays (nothing outside feature `schedule-fuzz`).
#[cfg(target_arch = "nvptx64")]
pub mod schedule;
#[cfg(target_arch = "nvptx64")]
pub mod sync;

// The kernels (`entries::Kernel`).
#[cfg(target_arch = "nvptx64")]
pub mod all_reduce;
#[cfg(target_arch = "nvptx64")]
pub mod broadcast;
#[cfg(target_arch = "nvptx64")]
pub mod cast;
#[cfg(target_arch = "nvptx64")]
pub mod elementwise;
#[cfg(target_arch = "nvptx64")]
pub mod fused_norm;
// The Lamport forms' functions are also the test kernels' phase probes'
// (`probe_lamport{,_two_shot}_phases_w*`).
#[cfg(target_arch = "nvptx64")]
pub mod lamport;
#[cfg(target_arch = "nvptx64")]
pub mod norm;
// The primitives the kernels are made of, below them.
#[cfg(target_arch = "nvptx64")]
pub mod prims;
#[cfg(target_arch = "nvptx64")]
pub mod push;
#[cfg(target_arch = "nvptx64")]
pub mod push_scatter_gather;

#[cfg(all(target_arch = "nvptx64", not(test)))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    // A panic on the GPU has nowhere to report to: stop the kernel so the
    // host sees a launch failure instead of a wrong result.
    ptx::trap()
}
