//! Step 3 of the rendezvous: [`validate`], the one function that decides
//! whether the group can use the intra-node fast path. It is pure: it sees
//! only the requests, the NVLink mesh and the config, so every rank
//! computes the same verdict from the same inputs, and the CPU tests cover
//! it with synthetic requests. [`Unsupported`] says why not, naming rank,
//! host and device.

use std::fmt;

use super::request::RendezvousRequest;
pub use crate::config::BUFFER_GRANULARITY_BYTES;
use crate::config::{ALLOW_OVERLAPPING_ENV, CommConfig, ENABLE_ENV, TEST_ENV};
use crate::intra::residency::Residency;
use crate::symm_mem::Backend;
use crate::topology::{self, MAX_DEVICES, NvlMesh, Topology};

/// Fewest ranks the fast path serves.
pub const MIN_WORLD: usize = 2;

/// Most ranks the fast path serves (PyTorch's `kMaxDevices`).
pub const MAX_WORLD: usize = MAX_DEVICES;

/// Why a group cannot use the intra-node fast path; the caller falls back
/// (to NCCL). Messages name rank, host and device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// The fast path is switched off.
    #[error("intra-node comm is disabled ({ENABLE_ENV}=0)")]
    Disabled,
    /// Too few or too many ranks.
    #[error("world size {world} is outside {MIN_WORLD}..={MAX_WORLD}")]
    WorldSize {
        /// The world size.
        world: usize,
    },
    /// A request does not match its position or the world size.
    #[error("rank {rank}: inconsistent rendezvous request: {detail}")]
    InconsistentRequest {
        /// Position of the request.
        rank: usize,
        /// What is wrong with it.
        detail: String,
    },
    /// Ranks speak different protocol versions.
    #[error(
        "rank {rank} (host {host}) speaks rendezvous protocol {version}, \
         rank 0 speaks {version0}"
    )]
    ProtocolMismatch {
        /// The first rank that differs from rank 0.
        rank: usize,
        /// Its host.
        host: String,
        /// Its version.
        version: u32,
        /// Rank 0's version.
        version0: u32,
    },
    /// Ranks run on different machines.
    #[error(
        "rank {rank} runs on host {host}, rank 0 on host {host0}: intra-node comm needs one host"
    )]
    DifferentHosts {
        /// The first rank on another host than rank 0.
        rank: usize,
        /// Its host.
        host: String,
        /// Rank 0's host.
        host0: String,
    },
    /// A rank asks for an empty buffer.
    #[error("rank {rank} (host {host}, {device}) asks for a symmetric buffer of 0 bytes")]
    ZeroBufferSize {
        /// The rank.
        rank: usize,
        /// Its host.
        host: String,
        /// Its device.
        device: String,
    },
    /// A rank asks for a buffer that is not a multiple of
    /// [`BUFFER_GRANULARITY_BYTES`].
    #[error(
        "rank {rank} (host {host}, {device}) asks for a symmetric buffer of {bytes} bytes, \
         not a multiple of {BUFFER_GRANULARITY_BYTES} bytes"
    )]
    BufferSizeGranularity {
        /// The rank.
        rank: usize,
        /// Its host.
        host: String,
        /// Its device.
        device: String,
        /// Its size.
        bytes: usize,
    },
    /// Ranks ask for different buffer sizes.
    #[error(
        "rank {rank} (host {host}, {device}) asks for a symmetric buffer of {bytes} bytes, \
         rank 0 for {bytes0} bytes"
    )]
    BufferSizeMismatch {
        /// The first rank that differs from rank 0.
        rank: usize,
        /// Its host.
        host: String,
        /// Its device.
        device: String,
        /// Its size.
        bytes: usize,
        /// Rank 0's size.
        bytes0: usize,
    },
    /// Ranks would use different symmetric-memory backends.
    #[error(
        "rank {rank} (host {host}) uses symmetric-memory backend {backend}, rank 0 uses {backend0}"
    )]
    BackendMismatch {
        /// The first rank that differs from rank 0.
        rank: usize,
        /// Its host.
        host: String,
        /// Its backend.
        backend: Backend,
        /// Rank 0's backend.
        backend0: Backend,
    },
    /// Two ranks share a GPU and that is not allowed.
    #[error(
        "ranks {rank_a} and {rank_b} on host {host} share one GPU ({device}); \
         set {ALLOW_OVERLAPPING_ENV}=1 to allow it"
    )]
    OverlappingDevices {
        /// The lower rank.
        rank_a: usize,
        /// The higher rank.
        rank_b: usize,
        /// Their host.
        host: String,
        /// The GPU.
        device: String,
    },
    /// The GPUs are neither fully connected nor a hybrid cube mesh.
    #[error(
        "the {world} GPUs on host {host} are neither fully NVLink-connected nor a hybrid cube mesh \
         (set {TEST_ENV}=1 to force); NVLink counts per rank:\n{mesh}"
    )]
    Topology {
        /// The world size.
        world: usize,
        /// The host.
        host: String,
        /// The mesh between the ranks, one row per rank.
        mesh: String,
    },
    /// Ranks validated the same requests to different topologies (their
    /// NVML views differ).
    #[error("rank {rank} sees topology {theirs}, rank {me} sees {ours}")]
    InconsistentTopology {
        /// The first rank that differs from us.
        rank: usize,
        /// Its verdict.
        theirs: String,
        /// Our rank.
        me: usize,
        /// Our verdict.
        ours: String,
    },
    /// Another rank could not take part or found the group unsupported.
    #[error("rank {rank} cannot use intra-node comm: {reason}")]
    PeerFailed {
        /// The first such rank.
        rank: usize,
        /// Its reason.
        reason: String,
    },
}

/// A group that can use the fast path, as [`validate`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedGroup {
    /// Number of ranks.
    pub world: usize,
    /// How the ranks' GPUs are connected (never [`Topology::Unknown`]).
    pub topology: Topology,
    /// The mesh the topology was read from (same-GPU pairs count as
    /// linked).
    pub mesh: NvlMesh,
    /// The hybrid-cube-mesh neighbour table, for [`Topology::HybridCubeMesh`].
    pub hcm_neighbors: Option<[[usize; 4]; MAX_DEVICES]>,
    /// How many blocks a launch may have so that every rank's launch is
    /// resident at once (NOTE [co-residency] in `intra/residency.rs`).
    pub residency: Residency,
    /// Bytes of each rank's symmetric buffer.
    pub buffer_bytes: usize,
    /// The symmetric-memory backend all ranks use.
    pub backend: Backend,
}

/// The residency of the ranks that sent `requests`: the most ranks on one
/// GPU and the fewest SMs any rank sees.
pub fn residency(requests: &[RendezvousRequest]) -> Residency {
    let ranks_per_gpu = requests
        .iter()
        .map(|a| requests.iter().filter(|b| a.same_device(b)).count())
        .max()
        .unwrap_or(1);
    let sms = requests.iter().map(|r| r.sms).min().unwrap_or(1).max(1);
    Residency {
        sms,
        ranks_per_gpu: ranks_per_gpu.max(1),
    }
}

/// The first `world` rows and columns of `mesh`, one row per line.
fn mesh_rows(mesh: &NvlMesh, world: usize) -> String {
    let mut out = String::new();
    for a in 0..world.min(MAX_DEVICES) {
        let row: Vec<String> = (0..world.min(MAX_DEVICES))
            .map(|b| format!("{:>2}", mesh.links(a, b)))
            .collect();
        out.push_str(&format!("  rank {a}: {}\n", row.join(" ")));
    }
    out
}

/// Decides whether the ranks that sent `requests` (index = rank) can use
/// the fast path over `mesh` (link counts between their GPUs, index =
/// rank, already restricted to pairs with CUDA peer access). Checks, in
/// order: enabled, world size, the requests agree (consistency, protocol
/// version, one host, buffer size, backend: `requests_agree`),
/// overlapping devices (`effective_mesh`), topology (`classify`).
pub fn validate(
    requests: &[RendezvousRequest],
    mesh: &NvlMesh,
    config: &CommConfig,
) -> Result<ValidatedGroup, Unsupported> {
    if !config.enabled {
        return Err(Unsupported::Disabled);
    }
    let world = requests.len();
    if !(MIN_WORLD..=MAX_WORLD).contains(&world) {
        return Err(Unsupported::WorldSize { world });
    }
    requests_agree(requests)?;
    let effective = effective_mesh(requests, mesh, config)?;
    let (topology, hcm_neighbors) = classify(&effective, world, &requests[0].hostname, config)?;
    let first = &requests[0];
    Ok(ValidatedGroup {
        world,
        topology,
        mesh: effective,
        hcm_neighbors,
        residency: residency(requests),
        buffer_bytes: first.buffer_bytes,
        backend: first.backend,
    })
}

/// The requests of a group (at least one) agree: each names its own rank
/// and the world, and all share the protocol version, the host, a buffer
/// size (non-zero, a multiple of the granularity) and the backend.
fn requests_agree(requests: &[RendezvousRequest]) -> Result<(), Unsupported> {
    let world = requests.len();
    for (index, req) in requests.iter().enumerate() {
        if req.rank != index || req.world != world {
            return Err(Unsupported::InconsistentRequest {
                rank: index,
                detail: format!(
                    "request at position {index} says rank {} of world {}, expected rank {index} of world {world}",
                    req.rank, req.world
                ),
            });
        }
    }
    let first = &requests[0];
    if let Some(req) = requests
        .iter()
        .find(|r| r.protocol_version != first.protocol_version)
    {
        return Err(Unsupported::ProtocolMismatch {
            rank: req.rank,
            host: req.hostname.clone(),
            version: req.protocol_version,
            version0: first.protocol_version,
        });
    }
    if let Some(req) = requests.iter().find(|r| r.hostname != first.hostname) {
        return Err(Unsupported::DifferentHosts {
            rank: req.rank,
            host: req.hostname.clone(),
            host0: first.hostname.clone(),
        });
    }
    if let Some(req) = requests.iter().find(|r| r.buffer_bytes == 0) {
        return Err(Unsupported::ZeroBufferSize {
            rank: req.rank,
            host: req.hostname.clone(),
            device: req.device_label(),
        });
    }
    if let Some(req) = requests
        .iter()
        .find(|r| r.buffer_bytes % BUFFER_GRANULARITY_BYTES != 0)
    {
        return Err(Unsupported::BufferSizeGranularity {
            rank: req.rank,
            host: req.hostname.clone(),
            device: req.device_label(),
            bytes: req.buffer_bytes,
        });
    }
    if let Some(req) = requests
        .iter()
        .find(|r| r.buffer_bytes != first.buffer_bytes)
    {
        return Err(Unsupported::BufferSizeMismatch {
            rank: req.rank,
            host: req.hostname.clone(),
            device: req.device_label(),
            bytes: req.buffer_bytes,
            bytes0: first.buffer_bytes,
        });
    }
    if let Some(req) = requests.iter().find(|r| r.backend != first.backend) {
        return Err(Unsupported::BackendMismatch {
            rank: req.rank,
            host: req.hostname.clone(),
            backend: req.backend,
            backend0: first.backend,
        });
    }

    Ok(())
}

/// `mesh` as the group sees it: pairs of ranks on one GPU refused unless
/// allowed, and when allowed counted as linked (the same GPU reaches its
/// own memory); only the ranks' part of the mesh kept.
fn effective_mesh(
    requests: &[RendezvousRequest],
    mesh: &NvlMesh,
    config: &CommConfig,
) -> Result<NvlMesh, Unsupported> {
    let world = requests.len();
    let first = &requests[0];
    let mut effective = *mesh;
    for a in 0..world {
        for b in a + 1..world {
            if !requests[a].same_device(&requests[b]) {
                continue;
            }
            if !config.allow_overlapping_devices {
                return Err(Unsupported::OverlappingDevices {
                    rank_a: a,
                    rank_b: b,
                    host: first.hostname.clone(),
                    device: requests[a].device_label(),
                });
            }
            effective.0[a][b] = effective.0[a][b].max(1);
            effective.0[b][a] = effective.0[b][a].max(1);
        }
    }
    // Only the ranks' part of the mesh matters.
    for (a, row) in effective.0.iter_mut().enumerate() {
        for (b, count) in row.iter_mut().enumerate() {
            if a >= world || b >= world || a == b {
                *count = 0;
            }
        }
    }

    Ok(effective)
}

/// Each rank's three neighbours and itself in a hybrid cube mesh.
type HcmNeighbors = [[usize; 4]; MAX_DEVICES];

/// The topology of the group's `effective` mesh (fully connected, or a
/// hybrid cube mesh with its neighbour table), or why it has none we run.
fn classify(
    effective: &NvlMesh,
    world: usize,
    host: &str,
    config: &CommConfig,
) -> Result<(Topology, Option<HcmNeighbors>), Unsupported> {
    let topology = if config.force_fully_connected {
        Topology::FullyConnected
    } else {
        topology::detect_topology(effective, world)
    };
    let hcm_neighbors = match topology {
        Topology::FullyConnected => None,
        Topology::HybridCubeMesh => topology::hcm_neighbors(effective),
        Topology::Unknown => {
            return Err(Unsupported::Topology {
                world,
                host: host.to_owned(),
                mesh: mesh_rows(effective, world),
            });
        }
    };
    if topology == Topology::HybridCubeMesh && hcm_neighbors.is_none() {
        // detect_topology promises a table for this class; be loud if not.
        return Err(Unsupported::Topology {
            world,
            host: host.to_owned(),
            mesh: mesh_rows(effective, world),
        });
    }
    Ok((topology, hcm_neighbors))
}

impl ValidatedGroup {
    /// Whether some ranks share a GPU.
    pub fn overlapping_devices(&self) -> bool {
        self.residency.shared()
    }
}

impl fmt::Display for ValidatedGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ranks, {}{}, {} bytes per rank, backend {}",
            self.world,
            self.topology,
            if self.overlapping_devices() {
                " (overlapping devices)"
            } else {
                ""
            },
            self.buffer_bytes,
            self.backend
        )
    }
}
