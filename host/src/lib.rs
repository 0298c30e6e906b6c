//! intranode: fast all-reduce between the GPUs of one machine, with GPU
//! kernels written in Rust.
//!
//! Start with [`Communicator`]: one per rank, built collectively through a
//! key-value store; every method of `cudarc::nccl::Comm` with the same
//! arguments, our kernels where they win and NCCL elsewhere, each call
//! returning a [`Work`]. Around it: [`CommConfig`] (every setting, from
//! the environment or by hand), [`types`] ([`ReduceOp`], [`DType`],
//! [`AllReduceAlgo`]), [`Error`], [`dist_env::DistEnv`] (rank and world
//! from the launcher's environment), [`topology`] (NVLink mesh and its
//! class), [`ddp`] (`broadcast_coalesced`, gradient buckets,
//! communication hooks), [`kernels::KernelModule`] (the embedded
//! Rust-built PTX and its elementwise kernels), [`gpu`] (driver and
//! devices).
//! Every GPU entry point returns [`Error::NoDriver`] or
//! [`Error::TooFewGpus`] on machines without GPUs instead of panicking.
//!
//! # Example
//!
//! One process per GPU (started by `intranode-run --nproc-per-node 4 --
//! ./your-program`, or torchrun, Open MPI, Slurm; under torchrun the store
//! is torchrun's PyTorch `TCPStore`): each builds a
//! [`Communicator`] and all-reduces on its own stream, as with
//! `cudarc::nccl::Comm`. Sizes where NCCL is faster go to NCCL.
//!
//! ```no_run
//! use cudarc::nccl::ReduceOp;
//! use intranode::Communicator;
//! use intranode::dist_env::DistEnv;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Rank, world size and store address from the launcher's variables;
//!     // the store in the protocol its launcher speaks.
//!     let env = DistEnv::from_env()?;
//!     let store = intranode_store::connect_env(&env)?;
//!     // Error::NoDriver or Error::TooFewGpus where there is no such GPU.
//!     let ctx = intranode::gpu::context(env.device.unwrap_or(env.local_rank))?;
//!     let stream = ctx.new_stream()?;
//!     let comm = Communicator::new(stream.clone(), store, env.rank, env.world_size)?;
//!
//!     let mut grads = stream.clone_htod(&vec![1.0f32; 1 << 20])?;
//!     comm.all_reduce_in_place(&mut grads, &ReduceOp::Sum)?;
//!     let sum = stream.clone_dtoh(&grads)?;
//!     assert_eq!(sum[0], env.world_size as f32);
//!     Ok(())
//! }
//! ```
//!
//! # Building
//!
//! The crate builds on stable Rust: it embeds the committed kernels, PTX
//! (`host/ptx/kernels-sm_90.ptx.gz`, for H100/H200 and later) and its
//! machine code for sm_90 (`host/ptx/kernels-sm_90.cubin.gz`, which
//! H100/H200 load without a JIT compile), which CI checks against what the
//! `kernels-gpu` source emits and what the pinned ptxas makes of it. Two build-time
//! environment variables change what is embedded (both need the
//! workspace's nightly tool chain, since they build the kernels from
//! source):
//!
//! - `INTRANODE_PTX_ARCH=sm_80` (or any `sm_XX`): PTX for another
//!   architecture (A100: `sm_80`); [`kernels::PTX_ARCH`] says which one a
//!   build embeds.
//! - `INTRANODE_PTX_REBUILD=1`: build the kernels from source even where
//!   the committed PTX is current.
//!
//! # Features
//!
//! - `dynamic-loading` (default): cudarc loads CUDA (`libcuda`) and NCCL at
//!   run time, so building needs neither and a machine without them gets
//!   an error from the first GPU call. An application that picks cudarc's
//!   link mode itself turns it off: candle's `cuda` feature links
//!   (`dynamic-linking`), and cudarc refuses two modes, so a candle
//!   application depends on `intranode = { ..., default-features = false }`
//!   and shares candle's cudarc, streams and `CudaSlice`s.
//! - `test-kernels` (off): for the project's own test suites, benchmark
//!   and examples. It also embeds the test and probe kernels
//!   (`host/ptx/test-kernels-sm_90.ptx`, loaded by
//!   `kernels::TestKernelModule`: the soak's fill and check, the
//!   benchmark's stamps and spins), which the production PTX does not
//!   carry.

pub mod communicator;
pub mod config;
pub mod ddp;
pub mod error;
pub mod gpu;
pub mod kernels;
pub mod setup_times;
pub mod symmetric;
pub mod topology;
pub mod types;

pub(crate) mod driver_ext;
pub(crate) mod health;
mod work;

// The crate's machinery: crate-private modules, reached from outside only
// through `internals` (the project's GPU suites and benchmark drive the
// intra-node communicator, symmetric memory and the rendezvous directly).
// Without it, what only the suites use is unused.
/// The all-reduce decision and the crossovers.
#[cfg_attr(not(intranode_internals), allow(dead_code, unused_imports))]
pub(crate) mod algo;
/// The intra-node communicator and its collectives.
#[cfg_attr(not(intranode_internals), allow(dead_code, unused_imports))]
pub(crate) mod comm;
/// The NCCL communicator built through the store.
#[cfg_attr(not(intranode_internals), allow(dead_code, unused_imports))]
pub(crate) mod nccl;
/// How the ranks meet and decide on the fast path.
#[cfg_attr(not(intranode_internals), allow(dead_code, unused_imports))]
pub(crate) mod rendezvous;
/// Per-rank buffers every peer maps, and signal pads.
#[cfg_attr(not(intranode_internals), allow(dead_code, unused_imports))]
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
    /// The all-reduce decision and the crossovers.
    pub mod algo {
        pub use crate::algo::*;
    }
    /// The intra-node communicator and its collectives.
    pub mod comm {
        pub use crate::comm::*;
    }
    /// The NCCL communicator built through the store.
    pub mod nccl {
        pub use crate::nccl::*;
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

pub use communicator::{Communicator, Group, RankIndex};

/// The crate README's Rust blocks (`host/README.md`, inside the package),
/// compiled as doc tests: its "Using it"
/// snippet compiles as shown.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
pub use config::CommConfig;
pub use error::{Error, Result};
pub use setup_times::SetupTimes;
pub use symmetric::{SymmetricBuffer, SymmetricView, SymmetricViewMut};
pub use types::{AllReduceAlgo, BroadcastAlgo, DType, ElemType, NormPath, ReduceOp};
pub use work::Work;
