#![doc = include_str!("../README.md")]
//!
//! # Where to start
//!
//! [`Communicator`]: one per rank, built collectively through a key-value
//! store ([`store`]); every method of `cudarc::nccl::Comm` with the same
//! arguments, our kernels where they win and NCCL elsewhere, each call
//! returning a [`Work`]. Around it: [`CommConfig`] (every setting, from
//! the environment or by hand), [`ReduceOp`] (cudarc's), [`types`] ([`DType`],
//! [`AllReduceAlgo`]), [`Error`] (with NCCL's result code as
//! [`NcclCode`]), [`dist_env::DistEnv`] (rank and world from the
//! launcher's environment), [`SymmetricBuffer`] (memory every peer maps),
//! [`topology`] (NVLink mesh and its class), [`ddp`]
//! (`broadcast_coalesced`, gradient buckets, communication hooks),
//! [`kernels::KernelModule`] (the embedded Rust-built kernels and their
//! elementwise kernels), [`gpu`] (driver and devices).

// Every public item is documented; CI keeps it so (`cargo xtask doc`).
// Not under `internals`, the project's own hooks into the machinery,
// which is not a public API.
#![cfg_attr(not(intranode_internals), deny(missing_docs))]

pub mod communicator;
pub mod config;
pub mod ddp;
pub mod error;
pub mod gpu;
pub mod id;
pub mod kernels;
pub mod nccl;
pub mod setup_times;
pub mod symmetric;
pub mod topology;
pub mod types;

pub(crate) mod driver_ext;
pub(crate) mod health;
mod work;

// The crate's machinery: crate-private modules. The few items the
// project's suites, benchmark and harness need of them are named in
// `internals` (under `intranode_internals`); what only those reach is
// compiled under that cfg alone.
/// Every decision between our kernels and NCCL's, and the crossovers.
pub(crate) mod decide;
/// The intra-node communicator and its collectives.
pub(crate) mod intra;
/// The NCCL communicator built through the store.
pub(crate) mod nccl_comm;
/// How the ranks meet and decide on the fast path.
pub(crate) mod rendezvous;
/// Per-rank buffers every peer maps, and signal pads.
pub(crate) mod symm_mem;

/// What the project's own crates (the GPU suites `intranode-suite` and
/// `symm_check`, the benchmark, the harness, the launcher's tests) need
/// beyond the public API: each item below names who uses it and why
/// [`Communicator`] does not do it. Everything else they do goes through
/// the public API (the `_with` variants for an explicit algorithm or
/// path, [`Communicator::check`] for the GPU's reports, [`Communicator::topology`],
/// [`Communicator::intra_reason`] for whether there is an intra-node path).
/// Not a stable API: anything here may change in any release.
///
/// It exists only under `--cfg intranode_internals`, which `build.rs` sets
/// when `INTRANODE_INTERNALS=1` (the workspace's `.cargo/config.toml` sets
/// it; a user's build does not read that file). A cfg rather than a
/// `#[doc(hidden)] pub` module: the crate as users build it (and as it is
/// published) carries neither these items nor the code only they reach,
/// so nothing outside the project can come to depend on them, and the
/// users' build's dead-code lints still see what only the suites use.
/// [`Communicator::intra`] (under the same cfg) hands out the
/// communicator's [`IntraNodeComm`](internals::IntraNodeComm).
#[cfg(intranode_internals)]
pub mod internals {
    /// `INTRANODE_ALLOW_OVERLAPPING_DEVICES`: `bad-input` checks a
    /// refusal names it. The public API documents the variables, not
    /// their names as constants.
    pub use crate::config::switches::ALLOW_OVERLAPPING_ENV;
    /// `INTRANODE_DEBUG`: `bad-input` checks a mismatch names it.
    pub use crate::config::switches::DEBUG_ENV;
    /// `INTRANODE_GROUP`: the harness keeps its own store keys of a named
    /// group apart.
    pub use crate::config::switches::GROUP_ENV;
    /// `INTRANODE_REQUIRE_GPUS`: `symm_check`'s CPU test removes it from
    /// the ranks' environment.
    pub use crate::config::switches::REQUIRE_GPUS_ENV;
    /// The largest message the Lamport one-shot takes at a world size:
    /// the benchmark's tuner caps its crossover there.
    pub use crate::decide::lamport_max_message_bytes;
    /// The largest message the Lamport two-shot takes at a world size:
    /// `check` sweeps up to it, the tuner caps its crossover there.
    pub use crate::decide::lamport_two_shot_max_message_bytes;
    /// Whether the automatic scatter-gather picks ours, for the
    /// benchmark's table (`Communicator` has no `algo_for` for it).
    pub use crate::decide::scatter_gather::scatter_gather_uses_ours;
    /// The largest scatter-gather shard of one Lamport slot: `check-sg`
    /// sizes its sliced shards past it.
    pub use crate::decide::scatter_gather_max_shard_bytes;
    /// The host-mapped word kernels report failed waits in, alone:
    /// `intranode-bench poll-storm` times how kernels poll it.
    pub use crate::intra::HostErrorWord;
    /// The intra-node communicator alone: the suites drive its forms over
    /// raw addresses (`scatter_gather_as`, `barrier`, the symmetric
    /// buffer's views), its own argument checks (`bad-input`) and its
    /// rendezvous alone (`faults`, `symm_check`, `recreate`); the
    /// benchmark its peers' mappings and probe launches. `Communicator`
    /// decides the form itself and hides the addresses.
    pub use crate::intra::IntraNodeComm;
    /// Which of the two scatter-gather collectives, for
    /// `IntraNodeComm::scatter_gather_as` (`check-sg`, the benchmark's
    /// tables, the harness's expected values); the public API has one
    /// method each.
    pub use crate::intra::scatter_gather::ScatterGather;
    /// A scatter-gather form of ours forced (`check-sg`, `intranode-bench
    /// all-gather`/`reduce-scatter`); `Communicator` has no `_with`
    /// variant for them.
    pub use crate::intra::scatter_gather::ScatterGatherForm;
    /// The NCCL communicator alone (built through the store), for
    /// `recreate`'s leak count of each piece; `Communicator` builds it
    /// only as a part of itself.
    pub use crate::nccl_comm::nccl_comm;
    /// The rendezvous protocol's version, for the launcher's fault tests'
    /// hand-built requests.
    pub use crate::rendezvous::PROTOCOL_VERSION;
    /// Why `IntraNodeComm::rendezvous` refused or failed: `faults`,
    /// `bad-input` and `symm_check` check which (`Communicator` falls
    /// back to NCCL on a refusal).
    pub use crate::rendezvous::RendezvousError;
    /// A rank's rendezvous request, built by hand by the launcher's fault
    /// tests to run the GPU-free first step of the rendezvous.
    pub use crate::rendezvous::RendezvousRequest;
    /// A refusal's reason, matched by `bad-input` (shared GPUs, world
    /// size); `Communicator` reports it as text (`intra_reason`).
    pub use crate::rendezvous::Unsupported;
    /// The rendezvous's first step alone (the requests all-gathered
    /// through the store), for the launcher's fault tests: a rank killed
    /// there must fail every survivor.
    pub use crate::rendezvous::exchange_requests;
    /// This host's name as the rendezvous compares it, for the launcher's
    /// fault tests' hand-built requests.
    pub use crate::rendezvous::hostname;
}

// CUDA-free crates of their own, under their old paths.
pub use intranode_dist_env as dist_env;
/// The key-value store the ranks meet through (`intranode-store`):
/// [`store::connect_env`] connects to the launcher's store, in the
/// protocol it speaks (`intranode-run`'s, or torchrun's `TCPStore`).
pub use intranode_store as store;

pub use communicator::{Communicator, Group, GroupInput, GroupOutput, RankIndex};

pub use config::CommConfig;
/// The op every collective takes: cudarc's, as `cudarc::nccl::Comm`'s
/// methods take it (the kernels' own subset is [`types::ReduceOp`]).
pub use cudarc::nccl::ReduceOp;
pub use error::{Error, NcclCode, Result};
pub use id::Id;
pub use setup_times::SetupTimes;
pub use symmetric::{SymmetricBuffer, SymmetricView, SymmetricViewMut};
pub use types::{AllReduceAlgo, BroadcastAlgo, DType, ElemType, NormPath};
pub use work::Work;
