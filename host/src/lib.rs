//! intranode: fast all-reduce between the GPUs of one machine, with GPU
//! kernels written in Rust.
//!
//! Main types: [`kernels::KernelModule`] (the embedded Rust-built PTX,
//! loaded per device), [`dist_env::DistEnv`] (rank and world from the
//! launcher's environment), [`topology`] (NVLink mesh and its class),
//! [`ipc_channel::IpcChannel`] (file descriptors between ranks),
//! [`ddp`] (`broadcast_coalesced`, gradient buckets, communication hooks).
//! Every GPU entry point returns [`Error::NoDriver`] or
//! [`Error::TooFewGpus`] on machines without GPUs instead of panicking.

pub mod algo;
pub mod comm;
pub mod communicator;
pub mod ddp;
pub mod dist_env;
pub mod driver_ext;
pub mod error;
pub mod gpu;
pub mod ipc_channel;
pub mod kernels;
pub mod nccl;
pub mod rendezvous;
pub mod symm_mem;
pub mod topology;
pub mod work;

pub use algo::AllReduceAlgo;
pub use comm::IntraNodeComm;
pub use comm::all_reduce::ReduceOp;
pub use communicator::Communicator;
pub use error::{Error, Result};
pub use work::Work;
