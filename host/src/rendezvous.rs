//! The rendezvous request every rank publishes, the settings that steer it
//! ([`CommConfig`]), and the one function that decides whether the group
//! can use the intra-node fast path ([`validate`]).
//!
//! Main types: [`RendezvousRequest`] (one per rank, all-gathered through
//! the store), [`CommConfig`] (the env switches, read in one place),
//! [`ValidatedGroup`] (what [`validate`] returns when the fast path
//! applies) and [`Unsupported`] (why it does not, naming rank, host and
//! device).
//!
//! [`validate`] is pure: it sees only the requests, the NVLink mesh and
//! the config, so every rank computes the same verdict from the same
//! inputs, and the CPU tests cover it with synthetic requests.
//! `IntraNodeComm::rendezvous` (in [`crate::comm`]) all-gathers the
//! verdicts as well, so a rank that fails locally takes the others with
//! it ([`Unsupported::PeerFailed`]).

use std::fmt;
use std::sync::Arc;

use cudarc::driver::CudaContext;
use intranode_store::{Store, StoreExchange};
use serde::{Deserialize, Serialize};

use crate::algo::{AllReduceAlgo, FORCE_ALGO_ENV};
use crate::comm::BARRIER_TIMEOUT_ENV;
use crate::comm::broadcast::{BroadcastAlgo, FORCE_BROADCAST_ENV};
use crate::comm::debug::{DEBUG_ENV, DebugLevel};
use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};
use crate::symm_mem::{BACKEND_ENV, Backend, DEFAULT_BUFFER_BYTES};
use crate::topology::{self, MAX_DEVICES, NvlMesh, PciAddress, Topology};

/// Version of [`RendezvousRequest`] and of the rendezvous sequence; ranks
/// of different versions refuse each other.
pub const PROTOCOL_VERSION: u32 = 2;

/// Fewest ranks the fast path serves.
pub const MIN_WORLD: usize = 2;

/// Most ranks the fast path serves (PyTorch's `kMaxDevices`).
pub const MAX_WORLD: usize = MAX_DEVICES;

/// `0` turns the fast path off (seed `ENABLE_INTRA_NODE_COMM`); on by
/// default.
pub const ENABLE_ENV: &str = "INTRANODE_ENABLE_INTRA_NODE_COMM";

/// `1` treats the topology as fully connected whatever NVML says (seed
/// `TEST_INTRA_NODE_COMM`), for tests on machines without NVLink.
pub const TEST_ENV: &str = "INTRANODE_TEST_INTRA_NODE_COMM";

/// `1` lets several ranks share one GPU (seed
/// `allow_overlapping_devices`); they count as fully connected.
pub const ALLOW_OVERLAPPING_ENV: &str = "INTRANODE_ALLOW_OVERLAPPING_DEVICES";

/// Size in bytes of each rank's symmetric buffer (default
/// [`DEFAULT_BUFFER_BYTES`]), a positive multiple of
/// [`BUFFER_GRANULARITY_BYTES`].
pub const BUFFER_BYTES_ENV: &str = "INTRANODE_SYMM_MEM_BUFFER_BYTES";

/// What the intra-node comm's symmetric buffer size must be a multiple of.
/// The kernels split the buffer into two halves of whole 16-byte vectors
/// and require a non-zero half (`run_chunks` divides by it), so anything
/// below 32 bytes, or not a multiple of it, would be undefined behaviour on
/// the GPU; one page is a round bound that keeps every half 16-byte
/// aligned with room to spare.
pub const BUFFER_GRANULARITY_BYTES: usize = 4096;

/// Settings of a rendezvous. [`CommConfig::from_env`] reads every env
/// switch of this module; nothing else reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommConfig {
    /// Whether the fast path may be used at all ([`ENABLE_ENV`]).
    pub enabled: bool,
    /// Whether ranks may share a GPU ([`ALLOW_OVERLAPPING_ENV`]).
    pub allow_overlapping_devices: bool,
    /// Whether to treat the topology as fully connected ([`TEST_ENV`]).
    pub force_fully_connected: bool,
    /// Bytes of each rank's symmetric buffer ([`BUFFER_BYTES_ENV`]).
    pub buffer_bytes: usize,
    /// How symmetric memory is shared ([`BACKEND_ENV`]).
    pub backend: Backend,
    /// Extra checks of every call ([`DEBUG_ENV`]).
    pub debug: DebugLevel,
    /// Bound of every GPU wait on a peer, in milliseconds
    /// (`comm::BARRIER_TIMEOUT_ENV`).
    pub barrier_timeout_ms: u64,
    /// The all-reduce algorithm every call must use
    /// (`algo::FORCE_ALGO_ENV`).
    pub forced_algo: Option<AllReduceAlgo>,
    /// The path every broadcast must take
    /// (`comm::broadcast::FORCE_BROADCAST_ENV`).
    pub forced_broadcast: Option<BroadcastAlgo>,
}

impl Default for CommConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allow_overlapping_devices: false,
            force_fully_connected: false,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            backend: Backend::Vmm,
            debug: DebugLevel::Off,
            barrier_timeout_ms: crate::comm::DEFAULT_BARRIER_TIMEOUT_MS,
            forced_algo: None,
            forced_broadcast: None,
        }
    }
}

/// An env switch with a value it cannot mean.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?}: expected {expected}")]
pub struct ConfigError {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What would have been accepted.
    pub expected: &'static str,
}

fn parse_bool(
    var: &'static str,
    value: Option<String>,
    default: bool,
) -> Result<bool, ConfigError> {
    let Some(value) = value else {
        return Ok(default);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "" => Ok(default),
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError {
            var,
            value,
            expected: "1/true/yes/on or 0/false/no/off",
        }),
    }
}

impl CommConfig {
    /// The settings from the process environment (see the `*_ENV`
    /// constants); unset variables take the [`Default`] values.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`CommConfig::from_env`] with variables looked up by `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let default = Self::default();
        let buffer_bytes = match var(BUFFER_BYTES_ENV) {
            Some(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
                Ok(bytes) if bytes > 0 && bytes % BUFFER_GRANULARITY_BYTES == 0 => bytes,
                _ => {
                    return Err(ConfigError {
                        var: BUFFER_BYTES_ENV,
                        value: v,
                        expected: "a positive multiple of 4096 bytes",
                    });
                }
            },
            _ => default.buffer_bytes,
        };
        let backend_value = var(BACKEND_ENV);
        let backend = Backend::from_var(backend_value.as_deref()).map_err(|_| ConfigError {
            var: BACKEND_ENV,
            value: backend_value.unwrap_or_default(),
            expected: "`vmm` or `cuda-ipc`",
        })?;
        let debug = match var(DEBUG_ENV) {
            None => default.debug,
            Some(v) => DebugLevel::parse(&v).ok_or(ConfigError {
                var: DEBUG_ENV,
                value: v,
                expected: "`detail` or `off`",
            })?,
        };
        let barrier_timeout_ms = match var(BARRIER_TIMEOUT_ENV) {
            Some(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => ms,
                _ => {
                    return Err(ConfigError {
                        var: BARRIER_TIMEOUT_ENV,
                        value: v,
                        expected: "a positive number of milliseconds",
                    });
                }
            },
            _ => default.barrier_timeout_ms,
        };
        let forced_algo = match var(FORCE_ALGO_ENV) {
            Some(v) if !v.trim().is_empty() => {
                Some(AllReduceAlgo::from_name(&v).ok_or(ConfigError {
                    var: FORCE_ALGO_ENV,
                    value: v,
                    expected: "lamport, lamport-two-shot, one-shot, two-shot, hcm or nccl",
                })?)
            }
            _ => None,
        };
        let forced_broadcast = match var(FORCE_BROADCAST_ENV) {
            Some(v) if !v.trim().is_empty() => {
                Some(BroadcastAlgo::from_name(&v).ok_or(ConfigError {
                    var: FORCE_BROADCAST_ENV,
                    value: v,
                    expected: "symm-mem or nccl",
                })?)
            }
            _ => None,
        };
        Ok(Self {
            enabled: parse_bool(ENABLE_ENV, var(ENABLE_ENV), default.enabled)?,
            allow_overlapping_devices: parse_bool(
                ALLOW_OVERLAPPING_ENV,
                var(ALLOW_OVERLAPPING_ENV),
                default.allow_overlapping_devices,
            )?,
            force_fully_connected: parse_bool(
                TEST_ENV,
                var(TEST_ENV),
                default.force_fully_connected,
            )?,
            buffer_bytes,
            backend,
            debug,
            barrier_timeout_ms,
            forced_algo,
            forced_broadcast,
        })
    }

    /// [`barrier_timeout_ms`](Self::barrier_timeout_ms) as a duration.
    pub fn barrier_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.barrier_timeout_ms)
    }
}

/// The first failing rank of an all-gathered list of requests, and why.
fn first_failed_request(
    requests: &[std::result::Result<RendezvousRequest, String>],
) -> Option<(usize, &str)> {
    requests
        .iter()
        .enumerate()
        .find_map(|(r, q)| q.as_ref().err().map(|e| (r, e.as_str())))
}

/// Step 1 of `IntraNodeComm::rendezvous`, the part that needs no GPU:
/// all-gathers every rank's request (or why it could not make one,
/// `published`) through `store` and returns them, index = rank.
///
/// A rank that never publishes (dead, hung) makes the others fail after
/// the store's timeout with [`Error::Store`] whose source names it
/// ([`intranode_store::StoreError::MissingRanks`]); a rank that published a
/// failure makes them fail with [`Error::PeerFailed`] naming it.
pub fn exchange_requests(
    store: &dyn Store,
    exchange: &mut StoreExchange,
    rank: usize,
    world: usize,
    published: &std::result::Result<RendezvousRequest, String>,
) -> Result<Vec<RendezvousRequest>> {
    let requests = exchange
        .all_gather(store, rank, world, published)
        .map_err(|source| Error::Store {
            op: "all-gather of rendezvous requests",
            rank,
            source,
        })?;
    if let Some((r, reason)) = first_failed_request(&requests) {
        return Err(Error::PeerFailed {
            rank: r,
            phase: "rendezvous request",
            reason: reason.to_owned(),
        });
    }
    Ok(requests.into_iter().flatten().collect())
}

/// What one rank tells the others at rendezvous.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RendezvousRequest {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub protocol_version: u32,
    /// Host name of the sender's machine.
    pub hostname: String,
    /// The sender's rank.
    pub rank: usize,
    /// The world size the sender expects.
    pub world: usize,
    /// CUDA ordinal of the sender's device, in the sender's process.
    pub device: usize,
    /// PCI address of the device (`0000:18:00.0`), the same in every
    /// process.
    pub pci_bus_id: String,
    /// The device's UUID.
    pub uuid: [u8; 16],
    /// The sender's process id.
    pub pid: u32,
    /// Bytes of symmetric buffer the sender asks for.
    pub buffer_bytes: usize,
    /// The symmetric-memory backend the sender will use.
    pub backend: Backend,
    /// The sender's [`DEBUG_ENV`] level.
    pub debug: DebugLevel,
}

impl RendezvousRequest {
    /// This process's request for the device of `ctx`.
    pub fn local(
        ctx: &Arc<CudaContext>,
        rank: usize,
        world: usize,
        config: &CommConfig,
    ) -> Result<Self> {
        let device = ctx.ordinal();
        crate::error::bind(ctx, Some(device))?;
        // SAFETY: the driver is initialised (the context exists) and
        // `cu_device` is its valid device handle.
        let pci_bus_id = unsafe { driver_ext::device_get_pci_bus_id(ctx.cu_device()) }
            .ctx("cuDeviceGetPCIBusId", Some(device))?;
        let uuid = ctx
            .uuid()
            .ctx("cuDeviceGetUuid", Some(device))?
            .bytes
            .map(|c| c as u8);
        Ok(Self {
            protocol_version: PROTOCOL_VERSION,
            hostname: hostname(),
            rank,
            world,
            device,
            pci_bus_id,
            uuid,
            pid: std::process::id(),
            buffer_bytes: config.buffer_bytes,
            backend: config.backend,
            debug: config.debug,
        })
    }

    /// The device's PCI address, when `pci_bus_id` parses as one.
    pub fn pci_address(&self) -> Option<PciAddress> {
        PciAddress::parse(&self.pci_bus_id)
    }

    /// Whether `self` and `other` name the same GPU (same UUID, or same
    /// PCI address).
    pub fn same_device(&self, other: &Self) -> bool {
        let same_uuid = self.uuid != [0; 16] && self.uuid == other.uuid;
        let same_pci = match (self.pci_address(), other.pci_address()) {
            (Some(a), Some(b)) => a == b,
            _ => {
                !self.pci_bus_id.is_empty()
                    && self.pci_bus_id.eq_ignore_ascii_case(&other.pci_bus_id)
            }
        };
        same_uuid || same_pci
    }

    /// `device N (pci P)`, for messages.
    fn device_label(&self) -> String {
        format!("device {} (pci {})", self.device, self.pci_bus_id)
    }
}

/// This machine's host name (`gethostname`), or `unknown-host`.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_owned())
}

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
    UnsupportedTopology {
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
    /// Whether some ranks share a GPU.
    pub overlapping_devices: bool,
    /// Bytes of each rank's symmetric buffer.
    pub buffer_bytes: usize,
    /// The symmetric-memory backend all ranks use.
    pub backend: Backend,
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

/// Why the ranks that sent `requests` cannot work together at all, if
/// they disagree on [`DEBUG_ENV`]: a rank that checks every call would wait
/// in the store for fingerprints its peers never publish (until the store
/// timeout, minutes), on the fast path and on NCCL alike. So this is a
/// failure on every rank, not a reason to fall back.
pub fn debug_level_mismatch(requests: &[RendezvousRequest]) -> Option<String> {
    let first = requests.first()?;
    let other = requests.iter().find(|r| r.debug != first.debug)?;
    Some(format!(
        "{DEBUG_ENV} differs between ranks: rank {} (host {}) runs with {:?}, rank {} with {:?}; set it alike on every rank",
        other.rank, other.hostname, other.debug, first.rank, first.debug
    ))
}

/// Decides whether the ranks that sent `requests` (index = rank) can use
/// the fast path over `mesh` (link counts between their GPUs, index =
/// rank, already restricted to pairs with CUDA peer access). Checks, in
/// order: enabled, world size, request consistency, protocol version, one
/// host, buffer size, backend, overlapping devices, topology.
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

    // Pairs of ranks on one GPU: refused unless allowed; when allowed they
    // count as linked (the same GPU reaches its own memory).
    let mut effective = *mesh;
    let mut overlapping = false;
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
            overlapping = true;
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

    let topology = if config.force_fully_connected {
        Topology::FullyConnected
    } else {
        topology::detect_topology(&effective, world)
    };
    let hcm_neighbors = match topology {
        Topology::FullyConnected => None,
        Topology::HybridCubeMesh => topology::hcm_neighbors(&effective),
        Topology::Unknown => {
            return Err(Unsupported::UnsupportedTopology {
                world,
                host: first.hostname.clone(),
                mesh: mesh_rows(&effective, world),
            });
        }
    };
    if topology == Topology::HybridCubeMesh && hcm_neighbors.is_none() {
        // detect_topology promises a table for this class; be loud if not.
        return Err(Unsupported::UnsupportedTopology {
            world,
            host: first.hostname.clone(),
            mesh: mesh_rows(&effective, world),
        });
    }
    Ok(ValidatedGroup {
        world,
        topology,
        mesh: effective,
        hcm_neighbors,
        overlapping_devices: overlapping,
        buffer_bytes: first.buffer_bytes,
        backend: first.backend,
    })
}

impl fmt::Display for ValidatedGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ranks, {}{}, {} bytes per rank, backend {}",
            self.world,
            self.topology,
            if self.overlapping_devices {
                " (overlapping devices)"
            } else {
                ""
            },
            self.buffer_bytes,
            self.backend
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(rank: usize, world: usize, bus: u32) -> RendezvousRequest {
        RendezvousRequest {
            protocol_version: PROTOCOL_VERSION,
            hostname: "node-a".into(),
            rank,
            world,
            device: rank,
            pci_bus_id: format!("0000:{bus:02x}:00.0"),
            uuid: [bus as u8 + 1; 16],
            pid: 1000 + rank as u32,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            backend: Backend::Vmm,
            debug: DebugLevel::Off,
        }
    }

    #[test]
    fn debug_levels_must_agree() {
        let mut g = group(4);
        assert_eq!(debug_level_mismatch(&g), None);
        for r in &mut g {
            r.debug = DebugLevel::Detail;
        }
        assert_eq!(debug_level_mismatch(&g), None);
        g[2].debug = DebugLevel::Off;
        let why = debug_level_mismatch(&g).unwrap();
        assert!(why.contains("rank 2") && why.contains(DEBUG_ENV), "{why}");
        assert_eq!(debug_level_mismatch(&[]), None);
    }

    /// `world` ranks on distinct GPUs (bus 0x10 + rank).
    fn group(world: usize) -> Vec<RendezvousRequest> {
        (0..world).map(|r| req(r, world, 0x10 + r as u32)).collect()
    }

    fn full_mesh(world: usize, links: u32) -> NvlMesh {
        let mut m = NvlMesh::zero();
        for a in 0..world {
            for b in 0..world {
                if a != b {
                    m.0[a][b] = links;
                }
            }
        }
        m
    }

    /// DGX-1 hybrid cube mesh: two quads (0-3, 4-7) fully linked inside,
    /// plus i <-> i + 4.
    fn dgx1() -> NvlMesh {
        let mut m = NvlMesh::zero();
        let mut link = |a: usize, b: usize| {
            m.0[a][b] = 1;
            m.0[b][a] = 1;
        };
        for base in [0, 4] {
            for a in 0..4 {
                for b in a + 1..4 {
                    link(base + a, base + b);
                }
            }
        }
        for i in 0..4 {
            link(i, i + 4);
        }
        m
    }

    fn cfg() -> CommConfig {
        CommConfig::default()
    }

    #[test]
    fn fully_connected_group_is_accepted() {
        for world in 2..=8 {
            let g =
                validate(&group(world), &full_mesh(world, 18), &cfg()).expect("fully connected");
            assert_eq!(g.world, world);
            assert_eq!(g.topology, Topology::FullyConnected);
            assert_eq!(g.hcm_neighbors, None);
            assert!(!g.overlapping_devices);
            assert_eq!(g.buffer_bytes, DEFAULT_BUFFER_BYTES);
            assert_eq!(g.backend, Backend::Vmm);
        }
    }

    #[test]
    fn hybrid_cube_mesh_is_accepted_with_neighbors() {
        // DGX-1 has 3 in-quad neighbours plus one cross link: 4 each.
        let g = validate(&group(8), &dgx1(), &cfg()).expect("hcm");
        assert_eq!(g.topology, Topology::HybridCubeMesh);
        let hcm = g.hcm_neighbors.expect("hcm table");
        for (x, row) in hcm.iter().enumerate() {
            for &y in row {
                assert!(dgx1().is_linked(x, y), "{x} -> {y}");
            }
        }
    }

    #[test]
    fn disabled_comes_first() {
        let config = CommConfig {
            enabled: false,
            ..cfg()
        };
        assert_eq!(
            validate(&group(1), &NvlMesh::zero(), &config),
            Err(Unsupported::Disabled)
        );
        assert_eq!(
            validate(&group(4), &full_mesh(4, 1), &config),
            Err(Unsupported::Disabled)
        );
    }

    #[test]
    fn world_size_bounds() {
        for world in [0usize, 1, 9, 16] {
            let requests: Vec<_> = (0..world).map(|r| req(r, world, r as u32)).collect();
            let e = validate(&requests, &full_mesh(8, 1), &cfg()).expect_err("bad world");
            assert_eq!(e, Unsupported::WorldSize { world });
            assert!(
                e.to_string().contains(&format!("world size {world}")),
                "{e}"
            );
        }
    }

    #[test]
    fn inconsistent_requests() {
        let mut g = group(3);
        g.swap(1, 2);
        let e = validate(&g, &full_mesh(3, 1), &cfg()).expect_err("swapped");
        assert!(
            matches!(e, Unsupported::InconsistentRequest { rank: 1, .. }),
            "{e}"
        );
        let mut g = group(3);
        g[2].world = 4;
        let e = validate(&g, &full_mesh(3, 1), &cfg()).expect_err("world");
        assert!(
            matches!(e, Unsupported::InconsistentRequest { rank: 2, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("world 4"), "{e}");
    }

    #[test]
    fn protocol_mismatch_names_rank_and_host() {
        let mut g = group(4);
        g[3].protocol_version = PROTOCOL_VERSION + 1;
        g[3].hostname = "node-a".into();
        let e = validate(&g, &full_mesh(4, 1), &cfg()).expect_err("version");
        assert!(
            matches!(e, Unsupported::ProtocolMismatch { rank: 3, .. }),
            "{e}"
        );
        let text = e.to_string();
        assert!(text.contains("rank 3") && text.contains("node-a"), "{text}");
    }

    #[test]
    fn different_hosts() {
        let mut g = group(4);
        g[2].hostname = "node-b".into();
        g[3].hostname = "node-c".into();
        let e = validate(&g, &full_mesh(4, 1), &cfg()).expect_err("hosts");
        assert_eq!(
            e,
            Unsupported::DifferentHosts {
                rank: 2,
                host: "node-b".into(),
                host0: "node-a".into()
            }
        );
        assert!(e.to_string().contains("node-b") && e.to_string().contains("node-a"));
    }

    #[test]
    fn buffer_sizes() {
        let mut g = group(2);
        g[1].buffer_bytes = 1 << 20;
        let e = validate(&g, &full_mesh(2, 1), &cfg()).expect_err("sizes");
        assert!(matches!(
            e,
            Unsupported::BufferSizeMismatch {
                rank: 1,
                bytes: 1048576,
                bytes0: DEFAULT_BUFFER_BYTES,
                ..
            }
        ));
        let text = e.to_string();
        assert!(
            text.contains("pci 0000:11:00.0") && text.contains("node-a"),
            "{text}"
        );

        let mut g = group(2);
        g[0].buffer_bytes = 0;
        g[1].buffer_bytes = 0;
        let e = validate(&g, &full_mesh(2, 1), &cfg()).expect_err("zero");
        assert!(
            matches!(e, Unsupported::ZeroBufferSize { rank: 0, .. }),
            "{e}"
        );

        // Sizes the kernels cannot split into two halves of whole vectors
        // (17 bytes would make a zero half: a division by zero on the GPU).
        for bytes in [17, 4095, 4097, (1 << 20) + 16] {
            let mut g = group(3);
            for r in &mut g {
                r.buffer_bytes = bytes;
            }
            let e = validate(&g, &full_mesh(3, 1), &cfg()).expect_err("granularity");
            assert!(
                matches!(e, Unsupported::BufferSizeGranularity { rank: 0, bytes: b, .. } if b == bytes),
                "{e}"
            );
            assert!(e.to_string().contains("multiple of 4096"), "{e}");
        }
        let mut g = group(2);
        for r in &mut g {
            r.buffer_bytes = 3 * BUFFER_GRANULARITY_BYTES;
        }
        assert!(validate(&g, &full_mesh(2, 1), &cfg()).is_ok());
    }

    #[test]
    fn backend_mismatch() {
        let mut g = group(2);
        g[1].backend = Backend::CudaIpc;
        let e = validate(&g, &full_mesh(2, 1), &cfg()).expect_err("backend");
        assert!(
            matches!(e, Unsupported::BackendMismatch { rank: 1, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("cuda-ipc"), "{e}");
        // All on the legacy backend is fine.
        let mut g = group(2);
        for r in &mut g {
            r.backend = Backend::CudaIpc;
        }
        assert_eq!(
            validate(&g, &full_mesh(2, 1), &cfg()).expect("ipc").backend,
            Backend::CudaIpc
        );
    }

    #[test]
    fn overlapping_devices_refused_by_default() {
        // Same PCI address, written differently (NVML vs CUDA spelling).
        let mut g = group(3);
        g[2].pci_bus_id = "00000000:11:00.0".into();
        let e = validate(&g, &full_mesh(3, 1), &cfg()).expect_err("overlap");
        assert!(
            matches!(
                e,
                Unsupported::OverlappingDevices {
                    rank_a: 1,
                    rank_b: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains(ALLOW_OVERLAPPING_ENV), "{e}");
        // Same UUID, different PCI text.
        let mut g = group(2);
        g[1].uuid = g[0].uuid;
        assert!(matches!(
            validate(&g, &full_mesh(2, 1), &cfg()),
            Err(Unsupported::OverlappingDevices {
                rank_a: 0,
                rank_b: 1,
                ..
            })
        ));
    }

    #[test]
    fn all_ranks_on_one_gpu_allowed_are_fully_connected() {
        // Four ranks on one H100: NVML gives no links at all.
        let g: Vec<_> = (0..4)
            .map(|r| RendezvousRequest {
                device: 0,
                ..req(r, 4, 0x42)
            })
            .collect();
        let config = CommConfig {
            allow_overlapping_devices: true,
            ..cfg()
        };
        let v = validate(&g, &NvlMesh::zero(), &config).expect("overlap allowed");
        assert_eq!(v.topology, Topology::FullyConnected);
        assert!(v.overlapping_devices);
        assert!(v.to_string().contains("overlapping devices"), "{v}");
    }

    #[test]
    fn partial_overlap_needs_links_between_gpus() {
        // Ranks 0,1 on GPU A, ranks 2,3 on GPU B.
        let g: Vec<_> = (0..4)
            .map(|r| req(r, 4, if r < 2 { 0x10 } else { 0x20 }))
            .collect();
        let config = CommConfig {
            allow_overlapping_devices: true,
            ..cfg()
        };
        let e = validate(&g, &NvlMesh::zero(), &config).expect_err("no NVLink between A and B");
        assert!(
            matches!(e, Unsupported::UnsupportedTopology { world: 4, .. }),
            "{e}"
        );
        // With A-B links (as NVML reports them for each rank's GPU).
        let mut m = NvlMesh::zero();
        for a in 0..4 {
            for b in 0..4 {
                if (a < 2) != (b < 2) {
                    m.0[a][b] = 4;
                }
            }
        }
        let v = validate(&g, &m, &config).expect("linked");
        assert_eq!(v.topology, Topology::FullyConnected);
    }

    #[test]
    fn unknown_topology_refused_with_mesh() {
        // PCIe only.
        let e = validate(&group(4), &NvlMesh::zero(), &cfg()).expect_err("pcie");
        let text = e.to_string();
        assert!(matches!(
            e,
            Unsupported::UnsupportedTopology { world: 4, .. }
        ));
        assert!(text.contains("node-a") && text.contains(TEST_ENV), "{text}");
        assert!(text.contains("rank 3:"), "{text}");
        // One missing pair.
        let mut m = full_mesh(4, 2);
        m.0[1][3] = 0;
        m.0[3][1] = 0;
        assert!(validate(&group(4), &m, &cfg()).is_err());
        // One direction only is not a link.
        let mut m = full_mesh(2, 2);
        m.0[1][0] = 0;
        assert!(validate(&group(2), &m, &cfg()).is_err());
        // DGX-1 with one cross link gone.
        let mut m = dgx1();
        m.0[0][4] = 0;
        m.0[4][0] = 0;
        assert!(validate(&group(8), &m, &cfg()).is_err());
        // DGX-1 mesh but only 4 ranks of another quad mix: 0,1,4,5.
        let mut sub = NvlMesh::zero();
        let ranks = [0usize, 1, 4, 5];
        for (i, &a) in ranks.iter().enumerate() {
            for (j, &b) in ranks.iter().enumerate() {
                sub.0[i][j] = dgx1().0[a][b];
            }
        }
        assert!(validate(&group(4), &sub, &cfg()).is_err());
    }

    #[test]
    fn mesh_entries_outside_the_world_are_ignored() {
        // Links to a ninth... or to ranks beyond the world do not matter.
        let mut m = full_mesh(2, 1);
        m.0[0][5] = 7;
        m.0[6][6] = 3;
        let v = validate(&group(2), &m, &cfg()).expect("fine");
        assert_eq!(v.mesh.links(0, 5), 0);
        assert_eq!(v.mesh.links(6, 6), 0);
    }

    #[test]
    fn test_switch_forces_fully_connected() {
        let config = CommConfig {
            force_fully_connected: true,
            ..cfg()
        };
        let v = validate(&group(4), &NvlMesh::zero(), &config).expect("forced");
        assert_eq!(v.topology, Topology::FullyConnected);
        assert_eq!(v.hcm_neighbors, None);
        // It does not lift the other checks.
        let mut g = group(4);
        g[1].hostname = "elsewhere".into();
        assert!(matches!(
            validate(&g, &NvlMesh::zero(), &config),
            Err(Unsupported::DifferentHosts { rank: 1, .. })
        ));
        assert!(matches!(
            validate(&group(1), &NvlMesh::zero(), &config),
            Err(Unsupported::WorldSize { world: 1 })
        ));
    }

    #[test]
    fn config_from_vars() {
        let none = |_: &str| None;
        assert_eq!(
            CommConfig::from_vars(none).expect("defaults"),
            CommConfig::default()
        );
        let vars = |name: &str| {
            Some(
                match name {
                    ENABLE_ENV => "0",
                    TEST_ENV => "1",
                    ALLOW_OVERLAPPING_ENV => "true",
                    BUFFER_BYTES_ENV => "4096",
                    BACKEND_ENV => "cuda-ipc",
                    DEBUG_ENV => "Detail",
                    BARRIER_TIMEOUT_ENV => " 2500 ",
                    FORCE_ALGO_ENV => "lamport-two-shot",
                    FORCE_BROADCAST_ENV => "nccl",
                    _ => return None,
                }
                .to_owned(),
            )
        };
        let c = CommConfig::from_vars(vars).expect("all set");
        assert_eq!(
            c,
            CommConfig {
                enabled: false,
                allow_overlapping_devices: true,
                force_fully_connected: true,
                buffer_bytes: 4096,
                backend: Backend::CudaIpc,
                debug: DebugLevel::Detail,
                barrier_timeout_ms: 2500,
                forced_algo: Some(AllReduceAlgo::LamportTwoShot),
                forced_broadcast: Some(BroadcastAlgo::Nccl),
            }
        );
        // Empty values mean unset.
        let empty = |_: &str| Some(String::new());
        assert_eq!(
            CommConfig::from_vars(empty).expect("empty"),
            CommConfig::default()
        );
    }

    #[test]
    fn config_errors_name_the_variable() {
        for (var, value) in [
            (ENABLE_ENV, "maybe"),
            (TEST_ENV, "2"),
            (ALLOW_OVERLAPPING_ENV, "yes please"),
            (BUFFER_BYTES_ENV, "0"),
            (BUFFER_BYTES_ENV, "10MiB"),
            (BARRIER_TIMEOUT_ENV, "abc"),
            (BARRIER_TIMEOUT_ENV, "0"),
            (FORCE_ALGO_ENV, "lamprot"),
            (FORCE_BROADCAST_ENV, "symm"),
            (BUFFER_BYTES_ENV, "4097"),
            (BUFFER_BYTES_ENV, "-4096"),
            (BACKEND_ENV, "nvshmem"),
            (DEBUG_ENV, "verbose"),
        ] {
            let e = CommConfig::from_vars(|name| (name == var).then(|| value.to_owned()))
                .expect_err(var);
            assert_eq!(e.var, var);
            assert!(
                e.to_string().contains(var) && e.to_string().contains(value),
                "{e}"
            );
        }
    }

    #[test]
    fn requests_round_trip_through_the_store() {
        let store = intranode_store::HashStore::new();
        let mut exchange = intranode_store::StoreExchange::new("t");
        let r = req(0, 1, 0x1b);
        let published: std::result::Result<RendezvousRequest, String> = Ok(r.clone());
        let back = exchange
            .all_gather(&store, 0, 1, &published)
            .expect("all_gather");
        assert_eq!(back, vec![Ok(r)]);
    }

    #[test]
    fn same_device_rules() {
        let a = req(0, 2, 0x10);
        let mut b = req(1, 2, 0x11);
        assert!(!a.same_device(&b));
        b.pci_bus_id = "0000:10:00.0".into();
        assert!(a.same_device(&b));
        // Zero UUIDs (unknown) never match by themselves.
        let mut c = req(0, 2, 0x30);
        let mut d = req(1, 2, 0x31);
        c.uuid = [0; 16];
        d.uuid = [0; 16];
        assert!(!c.same_device(&d));
        // Unparseable PCI text compares case-insensitively.
        c.pci_bus_id = "weird-X".into();
        d.pci_bus_id = "WEIRD-x".into();
        assert!(c.same_device(&d));
    }

    #[test]
    fn failed_requests_name_the_first_rank() {
        let list = vec![
            Ok(req(0, 3, 0x10)),
            Err("no driver".to_owned()),
            Err("later".to_owned()),
        ];
        assert_eq!(first_failed_request(&list), Some((1, "no driver")));
        assert_eq!(
            first_failed_request(&[Ok(req(0, 2, 0x10)), Ok(req(1, 2, 0x11))]),
            None
        );
    }

    #[test]
    fn exchange_requests_reports_failed_and_missing_ranks() {
        use intranode_store::{HashStore, StoreError};
        // Everyone fine (one rank: the exchange completes at once).
        let store = HashStore::new();
        let mut ex = StoreExchange::new("rq");
        let got = exchange_requests(&store, &mut ex, 0, 1, &Ok(req(0, 1, 0x10))).expect("ok");
        assert_eq!(got, vec![req(0, 1, 0x10)]);

        // Rank 1 published a failure: rank 0 names it.
        let store = HashStore::new();
        let mut ex1 = StoreExchange::new("rq");
        std::thread::scope(|s| {
            let peer = s.spawn(|| {
                exchange_requests(&store, &mut ex1, 1, 2, &Err("cuInit failed".to_owned()))
            });
            let mut ex0 = StoreExchange::new("rq");
            let e = exchange_requests(&store, &mut ex0, 0, 2, &Ok(req(0, 2, 0x10)))
                .expect_err("peer failed");
            assert!(
                matches!(&e, Error::PeerFailed { rank: 1, reason, .. } if reason == "cuInit failed"),
                "{e}"
            );
            assert!(peer.join().expect("peer").is_err());
        });

        // Rank 2 never comes: the store timeout names it.
        let store = HashStore::with_timeout(std::time::Duration::from_millis(50));
        let mut ex = StoreExchange::new("rq");
        let e =
            exchange_requests(&store, &mut ex, 0, 3, &Ok(req(0, 3, 0x10))).expect_err("missing");
        match &e {
            Error::Store {
                rank: 0,
                source: StoreError::MissingRanks { missing, .. },
                ..
            } => assert_eq!(missing, &[1, 2]),
            other => panic!("{other}"),
        }
        assert!(e.to_string().contains("rank(s) [1, 2]"), "{e}");
    }

    #[test]
    fn hostname_is_not_empty() {
        assert!(!hostname().is_empty());
    }
}
