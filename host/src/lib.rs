//! intranode: fast all-reduce between the GPUs of one machine, with GPU
//! kernels written in Rust.
//!
//! Main types: [`kernels::KernelModule`] (the embedded Rust-built PTX,
//! loaded per device), [`dist_env::DistEnv`] (rank and world from the
//! launcher's environment), [`topology`] (NVLink mesh and its class),
//! [`ipc_channel::IpcChannel`] (file descriptors between ranks).
//! Every GPU entry point returns [`Error::NoDriver`] or
//! [`Error::TooFewGpus`] on machines without GPUs instead of panicking.

pub mod comm;
pub mod dist_env;
pub mod driver_ext;
pub mod error;
pub mod gpu;
pub mod ipc_channel;
pub mod kernels;
pub mod rendezvous;
pub mod symm_mem;
pub mod topology;

pub use error::{Error, Result};
