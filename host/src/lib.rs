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

// The crate's machinery: crate-private modules, reached from outside only
// through `internals` (the project's GPU suites and benchmark drive the
// intra-node communicator, symmetric memory and the rendezvous directly;
// what only they reach is compiled under `intranode_internals` alone).
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

/// The crate's machinery and the hooks of its test suites and benchmark,
/// for the project's own crates (`--cfg intranode_internals`, which
/// `build.rs` sets when `INTRANODE_INTERNALS=1`). Not a stable API:
/// anything here may change in any release.
///
/// Each module re-exports the crate-private module of the same name
/// (a glob, since a crate-private module cannot itself be re-exported).
#[cfg(intranode_internals)]
pub mod internals {
    /// Every decision between our kernels and NCCL's, and the crossovers.
    pub mod decide {
        pub use crate::decide::*;
    }
    /// The intra-node communicator and its collectives.
    pub mod intra {
        pub use crate::intra::*;
    }
    /// The NCCL communicator built through the store.
    pub mod nccl_comm {
        pub use crate::nccl_comm::*;
    }
    /// How the ranks meet and decide on the fast path.
    pub mod rendezvous {
        pub use crate::rendezvous::*;
    }
    /// Per-rank buffers every peer maps, and signal pads.
    pub mod symm_mem {
        pub use crate::symm_mem::*;
    }
    /// The environment switches' names (`FORCE_ALGO_ENV`, ...) and
    /// `required_gpus`, the GPU suites' requirement.
    pub mod switches {
        pub use crate::config::switches::*;
    }
    /// The topology's builders (link counting over any [`LinkSource`](topology::LinkSource))
    /// and the machinery's queries (HCM neighbours, peer access).
    pub mod topology {
        pub use crate::topology::classify::{
            HCM_RELAY_SLOT, hcm_neighbors, restrict_to_peer_access,
        };
        pub use crate::topology::links::{
            LinkSource, NVLINK_MAX_LINKS, RemoteEndpoint, nvl_mesh_from_links,
        };
    }
    /// File descriptors between the ranks of one host (`intranode-ipc`).
    pub use intranode_ipc as ipc_channel;
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
