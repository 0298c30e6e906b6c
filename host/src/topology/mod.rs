//! NVLink topology between the GPUs of one machine: the link-count matrix
//! ([`NvlMesh`]) and its classification ([`Topology`]).
//!
//! This is the Rust form of PyTorch's `intra_node_comm` topology code and
//! of its NVML `NVLinkDetector`:
//!
//! - [`nvl_mesh_from_nvml`] asks NVML, for every rank's GPU (named by PCI
//!   address) and every NVLink index, where the link goes. A link to one
//!   of the ranks' GPUs counts as a direct link; a link to an NVSwitch
//!   counts as a switch link of that GPU, and two GPUs behind switches are
//!   joined by the smaller of their switch-link counts (all switches are
//!   assumed to be connected to each other, as PyTorch does).
//! - `restrict_to_peer_access` removes the pairs that CUDA says cannot
//!   access each other's memory (the caller passes the
//!   `cuDeviceCanAccessPeer` answer as a closure, so this module stays free
//!   of cudarc).
//! - [`detect_topology`] classifies the mesh as
//!   [`Topology::FullyConnected`], [`Topology::HybridCubeMesh`] (DGX-1
//!   style, 8 GPUs) or [`Topology::Unknown`]; `hcm_neighbors` gives the
//!   hybrid-cube-mesh peers the HCM all-reduce kernel needs.
//!
//! Policy stays out of this module: NVML missing or failing gives a
//! `tracing` warning and an all-zero mesh (which classifies as
//! [`Topology::Unknown`], so the caller falls back to NCCL), never an error
//! or a panic; switches such as `TEST_INTRA_NODE_COMM` belong to the caller.
//!
//! The NVML queries sit behind the small `LinkSource` trait, so the
//! counting in `nvl_mesh_from_links` is unit-tested without a GPU.
//!
//! # Files
//!
//! `mesh.rs` the matrix and the PCI address; `links.rs` the counting over
//! a `LinkSource`; `nvml.rs` the NVML queries (the only file that uses
//! `nvml-wrapper`); `classify.rs` peer access, [`Topology`] and the
//! hybrid cube mesh, all pure.

pub(crate) mod classify;
pub(crate) mod links;
mod mesh;
mod nvml;
#[cfg(test)]
mod test_meshes;

pub use classify::{Topology, detect_topology};
// The builders and the machinery's queries: crate-private.
pub(crate) use classify::{HCM_RELAY_SLOT, hcm_neighbors, restrict_to_peer_access};
pub(crate) use links::{LinkSource, RemoteEndpoint, nvl_mesh_from_links};
pub use mesh::{MAX_DEVICES, NvlMesh, PciAddress};
pub use nvml::nvl_mesh_from_nvml;
