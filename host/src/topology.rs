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
//! - [`restrict_to_peer_access`] removes the pairs that CUDA says cannot
//!   access each other's memory (the caller passes the
//!   `cuDeviceCanAccessPeer` answer as a closure, so this module stays free
//!   of cudarc).
//! - [`detect_topology`] classifies the mesh as
//!   [`Topology::FullyConnected`], [`Topology::HybridCubeMesh`] (DGX-1
//!   style, 8 GPUs) or [`Topology::Unknown`]; [`hcm_neighbors`] gives the
//!   hybrid-cube-mesh peers the HCM all-reduce kernel needs.
//!
//! Policy stays out of this module: NVML missing or failing gives a
//! `tracing` warning and an all-zero mesh (which classifies as
//! [`Topology::Unknown`], so the caller falls back to NCCL), never an error
//! or a panic; switches such as `TEST_INTRA_NODE_COMM` belong to the caller.
//!
//! The NVML queries sit behind the small [`LinkSource`] trait, so the
//! counting in [`nvl_mesh_from_links`] is unit-tested without a GPU.

use std::fmt;

use nvml_wrapper::Nvml;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};

/// Most GPUs one mesh describes (PyTorch's `kMaxDevices`).
pub const MAX_DEVICES: usize = 8;

/// NVLink indices probed per GPU: `NVML_NVLINK_MAX_LINKS` in `nvml.h`
/// (CUDA 12 and 13). Hopper and Blackwell GPUs have 18 links.
pub const NVLINK_MAX_LINKS: u32 = 18;

/// Slot of the relay neighbour in each row of [`hcm_neighbors`]; slots
/// `0..HCM_RELAY_SLOT` hold the three one-shot neighbours.
pub const HCM_RELAY_SLOT: usize = 3;

/// NVLink counts between device pairs: `links(a, b)` is the number of
/// NVLinks over which device `a` reaches device `b` (directly or through
/// NVSwitches). Indices are ranks (positions in the list of devices the
/// mesh was built for), not CUDA ordinals. The diagonal is always zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NvlMesh(pub [[u32; MAX_DEVICES]; MAX_DEVICES]);

impl NvlMesh {
    /// The mesh with no links at all (PCIe only, or nothing known).
    pub const fn zero() -> Self {
        Self([[0; MAX_DEVICES]; MAX_DEVICES])
    }

    /// Number of links from `from` to `to`; zero for ranks outside the mesh.
    pub fn links(&self, from: usize, to: usize) -> u32 {
        self.0
            .get(from)
            .and_then(|row| row.get(to))
            .copied()
            .unwrap_or(0)
    }

    /// Whether `a` and `b` are distinct and linked in both directions.
    pub fn is_linked(&self, a: usize, b: usize) -> bool {
        a != b && self.links(a, b) > 0 && self.links(b, a) > 0
    }

    /// Whether the mesh holds no link at all.
    pub fn is_zero(&self) -> bool {
        self.0.iter().flatten().all(|&count| count == 0)
    }
}

impl fmt::Display for NvlMesh {
    /// One row per rank, link counts separated by spaces (PyTorch prints
    /// its `NvlMesh` the same way).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for row in &self.0 {
            let mut sep = "";
            for count in row {
                write!(f, "{sep}{count:>2}")?;
                sep = " ";
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// PCI address of a GPU: the identity ranks exchange at rendezvous, since
/// CUDA ordinals and NVML indices differ between processes
/// (`CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`). The function number is
/// not kept: GPUs are function 0, and NVML's link queries do not report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment), up to 32 bits in NVML.
    pub domain: u32,
    /// Bus number, 0 to 0xff.
    pub bus: u32,
    /// Device number on the bus, 0 to 0x1f.
    pub device: u32,
}

impl PciAddress {
    /// Parses `domain:bus:device.function` in hex, as CUDA
    /// (`0000:18:00.0`) and NVML (`00000000:18:00.0`) write it, or
    /// `bus:device.function` (domain 0). `None` if it is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (location, function) = text.rsplit_once('.')?;
        let function = u32::from_str_radix(function, 16).ok()?;
        let mut fields = location.rsplitn(3, ':');
        let device = u32::from_str_radix(fields.next()?, 16).ok()?;
        let bus = u32::from_str_radix(fields.next()?, 16).ok()?;
        let domain = match fields.next() {
            Some(domain) => u32::from_str_radix(domain, 16).ok()?,
            None => 0,
        };
        (bus <= 0xff && device <= 0x1f && function <= 7).then_some(Self {
            domain,
            bus,
            device,
        })
    }
}

impl fmt::Display for PciAddress {
    /// NVML's form, `NVML_DEVICE_PCI_BUS_ID_FMT` (`%08X:%02X:%02X.0`),
    /// which `nvmlDeviceGetHandleByPciBusId_v2` accepts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08X}:{:02X}:{:02X}.0",
            self.domain, self.bus, self.device
        )
    }
}

/// Where one active NVLink leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteEndpoint {
    /// A GPU, by PCI address (one of the ranks' GPUs or not).
    Gpu(PciAddress),
    /// An NVSwitch.
    Switch,
    /// Something else NVML knows (an IBM NPU on POWER hosts): not counted.
    Other,
    /// NVML did not say what the remote is, only its PCI address; counted
    /// as a direct link if it is one of the ranks' GPUs and as a switch
    /// link otherwise, as PyTorch's NVML detector does.
    Unclassified(PciAddress),
}

/// The NVLink queries the mesh needs, one link at a time; NVML implements
/// it on real machines, tests implement it with fixed tables.
pub trait LinkSource {
    /// Why a query failed.
    type Error: fmt::Display;

    /// Where NVLink `link` of the GPU of rank `rank` leads: `Ok(None)` if
    /// that link is inactive or the GPU has no link with that index. An
    /// error abandons the whole mesh.
    fn remote_endpoint(
        &self,
        rank: usize,
        link: u32,
    ) -> Result<Option<RemoteEndpoint>, Self::Error>;
}

/// Counts NVLinks between the GPUs at `devices` (one PCI address per rank)
/// through `source`. Direct GPU-to-GPU links are counted per direction;
/// each pair also gets the smaller of the two GPUs' switch-link counts.
/// On any failure, or more than [`MAX_DEVICES`] devices, it warns and
/// returns [`NvlMesh::zero`].
pub fn nvl_mesh_from_links<S: LinkSource>(source: &S, devices: &[PciAddress]) -> NvlMesh {
    match count_links(source, devices) {
        Ok(mesh) => mesh,
        Err(reason) => {
            tracing::warn!("NVLink mesh unknown, assuming no NVLink: {reason}");
            NvlMesh::zero()
        }
    }
}

/// The counting behind [`nvl_mesh_from_links`]; the error says why the
/// mesh could not be built.
fn count_links<S: LinkSource>(source: &S, devices: &[PciAddress]) -> Result<NvlMesh, String> {
    if devices.len() > MAX_DEVICES {
        return Err(format!(
            "{} devices given, at most {MAX_DEVICES} supported",
            devices.len()
        ));
    }
    let mut mesh = NvlMesh::zero();
    let mut switch_links = [0u32; MAX_DEVICES];
    for (rank, own_address) in devices.iter().enumerate() {
        for link in 0..NVLINK_MAX_LINKS {
            let endpoint = source
                .remote_endpoint(rank, link)
                .map_err(|e| format!("nvlink {link} of rank {rank} (gpu {own_address}): {e}"))?;
            let (remote, is_switch_if_foreign) = match endpoint {
                None | Some(RemoteEndpoint::Other) => continue,
                Some(RemoteEndpoint::Switch) => {
                    bump(&mut switch_links[rank]);
                    continue;
                }
                Some(RemoteEndpoint::Gpu(remote)) => (remote, false),
                Some(RemoteEndpoint::Unclassified(remote)) => (remote, true),
            };
            // A link back to our own GPU (or to the same GPU under another
            // rank, where ranks share devices) is not a link between ranks.
            if remote == *own_address {
                continue;
            }
            let mut is_ours = false;
            for (peer, peer_address) in devices.iter().enumerate() {
                if *peer_address == remote {
                    bump(&mut mesh.0[rank][peer]);
                    is_ours = true;
                }
            }
            if !is_ours && is_switch_if_foreign {
                bump(&mut switch_links[rank]);
            }
        }
    }
    // Switch links: all NVSwitches are assumed to be connected, so two GPUs
    // share as many links as the less connected of them has.
    for a in 0..devices.len() {
        for b in 0..devices.len() {
            if a != b {
                let shared = switch_links[a].min(switch_links[b]);
                mesh.0[a][b] = mesh.0[a][b].saturating_add(shared);
            }
        }
    }
    Ok(mesh)
}

fn bump(count: &mut u32) {
    *count = count.saturating_add(1);
}

/// Asks NVML for the NVLink mesh between the GPUs at `devices` (one PCI
/// address per rank, at most [`MAX_DEVICES`]). NVML missing
/// (`libnvidia-ml.so.1` not loadable), a GPU it does not know or a failed
/// query give a warning and [`NvlMesh::zero`]; GPUs without NVLink give
/// the zero mesh silently.
pub fn nvl_mesh_from_nvml(devices: &[PciAddress]) -> NvlMesh {
    if devices.len() > MAX_DEVICES {
        tracing::warn!(
            "NVLink mesh unknown, assuming no NVLink: {} devices given, at most {MAX_DEVICES} supported",
            devices.len()
        );
        return NvlMesh::zero();
    }
    let nvml = match Nvml::init() {
        Ok(nvml) => nvml,
        Err(e) => {
            tracing::warn!("NVLink mesh unknown, assuming no NVLink: NVML unavailable: {e}");
            return NvlMesh::zero();
        }
    };
    match NvmlLinks::new(&nvml, devices) {
        Ok(source) => nvl_mesh_from_links(&source, devices),
        Err(e) => {
            tracing::warn!("NVLink mesh unknown, assuming no NVLink: {e}");
            NvlMesh::zero()
        }
    }
}

/// `nvmlIntNvLinkDeviceType_t` values from `nvml.h`.
const NVML_NVLINK_DEVICE_TYPE_GPU: u32 = 0;
const NVML_NVLINK_DEVICE_TYPE_IBMNPU: u32 = 1;
const NVML_NVLINK_DEVICE_TYPE_SWITCH: u32 = 2;
const NVML_NVLINK_DEVICE_TYPE_UNKNOWN: u32 = 255;

/// [`LinkSource`] over NVML, for the GPUs of one rendezvous.
struct NvmlLinks<'nvml> {
    /// NVML handle of each rank's GPU.
    devices: Vec<nvml_wrapper::Device<'nvml>>,
    /// Every GPU NVML sees, so that a remote NVML will not classify can
    /// still be told apart from a switch. Empty if the listing failed.
    system_gpus: Vec<PciAddress>,
}

impl<'nvml> NvmlLinks<'nvml> {
    fn new(nvml: &'nvml Nvml, devices: &[PciAddress]) -> Result<Self, String> {
        let devices = devices
            .iter()
            .enumerate()
            .map(|(rank, address)| {
                nvml.device_by_pci_bus_id(address.to_string())
                    .map_err(|e| format!("NVML does not know gpu {address} of rank {rank}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let system_gpus = list_system_gpus(nvml).unwrap_or_else(|e| {
            tracing::debug!("NVML could not list the GPUs: {e}");
            Vec::new()
        });
        Ok(Self {
            devices,
            system_gpus,
        })
    }
}

fn list_system_gpus(nvml: &Nvml) -> Result<Vec<PciAddress>, NvmlError> {
    (0..nvml.device_count()?)
        .map(|index| Ok(pci_address(&nvml.device_by_index(index)?.pci_info()?)))
        .collect()
}

fn pci_address(info: &nvml_wrapper::struct_wrappers::device::PciInfo) -> PciAddress {
    PciAddress {
        domain: info.domain,
        bus: info.bus,
        device: info.device,
    }
}

impl LinkSource for NvmlLinks<'_> {
    type Error = NvmlError;

    fn remote_endpoint(&self, rank: usize, link: u32) -> Result<Option<RemoteEndpoint>, NvmlError> {
        let Some(device) = self.devices.get(rank) else {
            return Ok(None);
        };
        let nvlink = device.link_wrapper_for(link);
        match nvlink.is_active() {
            Ok(true) => {}
            // No NVLink on this GPU, or no link with this index on it.
            Ok(false) | Err(NvmlError::NotSupported | NvmlError::InvalidArg) => return Ok(None),
            Err(e) => return Err(e),
        }
        let remote_type =
            remote_device_type(device, link).unwrap_or(NVML_NVLINK_DEVICE_TYPE_UNKNOWN);
        Ok(Some(match remote_type {
            NVML_NVLINK_DEVICE_TYPE_SWITCH => RemoteEndpoint::Switch,
            NVML_NVLINK_DEVICE_TYPE_GPU => {
                RemoteEndpoint::Gpu(pci_address(&nvlink.remote_pci_info()?))
            }
            NVML_NVLINK_DEVICE_TYPE_IBMNPU => RemoteEndpoint::Other,
            _ => {
                let remote = pci_address(&nvlink.remote_pci_info()?);
                if self.system_gpus.contains(&remote) {
                    RemoteEndpoint::Gpu(remote)
                } else {
                    RemoteEndpoint::Unclassified(remote)
                }
            }
        }))
    }
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType`, called directly: nvml-wrapper
/// 0.13's `NvLink::remote_device_type` lets NVML write into a temporary
/// and always returns `Unknown`, so it cannot tell a switch from a GPU.
fn remote_device_type(device: &nvml_wrapper::Device<'_>, link: u32) -> Result<u32, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetNvLinkRemoteDeviceType
            .as_ref(),
    )?;
    let mut remote_type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    // SAFETY: `sym` was resolved from the loaded libnvidia-ml with the
    // signature nvml.h declares. The handle is live: `device` borrows the
    // `Nvml` that keeps NVML initialised for this whole call. The out
    // pointer is a valid, aligned `u32` (`nvmlIntNvLinkDeviceType_t` is
    // `unsigned int`) that NVML only writes.
    let ret = unsafe { sym(device.handle(), link, &mut remote_type) };
    nvml_try(ret)?;
    Ok(remote_type)
}

/// Zeroes the mesh entries (both directions) of every pair among the first
/// `world` ranks that cannot access each other's memory both ways, and
/// warns for each such pair that had NVLinks. `can_access_peer(a, b)` is
/// CUDA's answer (`cuDeviceCanAccessPeer`) for rank `a`'s GPU reading rank
/// `b`'s; the caller maps ranks to its CUDA ordinals.
pub fn restrict_to_peer_access(
    mesh: &NvlMesh,
    world: usize,
    can_access_peer: impl Fn(usize, usize) -> bool,
) -> NvlMesh {
    let world = world.min(MAX_DEVICES);
    let mut restricted = *mesh;
    for a in 0..world {
        for b in a + 1..world {
            if can_access_peer(a, b) && can_access_peer(b, a) {
                continue;
            }
            if mesh.0[a][b] > 0 || mesh.0[b][a] > 0 {
                tracing::warn!(
                    "ranks {a} and {b} share {} NVLink(s) but CUDA peer access between them is off; \
                     treating them as unlinked",
                    mesh.0[a][b].max(mesh.0[b][a])
                );
            }
            restricted.0[a][b] = 0;
            restricted.0[b][a] = 0;
        }
    }
    restricted
}

/// How the GPUs of a rendezvous are connected, which decides the
/// all-reduce algorithms that can run on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    /// Every pair of ranks is NVLinked (directly or through NVSwitch):
    /// one-shot and two-shot all-reduce can run.
    FullyConnected,
    /// 8 GPUs in the DGX-1 hybrid cube mesh (see [`hcm_neighbors`]).
    HybridCubeMesh,
    /// Anything else: leave the collective to NCCL.
    Unknown,
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::FullyConnected => "fully connected",
            Self::HybridCubeMesh => "hybrid cube mesh",
            Self::Unknown => "unknown",
        })
    }
}

/// Classifies the mesh between the first `world` ranks: fully connected if
/// every pair is linked both ways, else the hybrid cube mesh if `world` is
/// 8 and [`hcm_neighbors`] finds one, else unknown. A single rank counts as
/// fully connected; `world` of 0 or above [`MAX_DEVICES`] is unknown.
pub fn detect_topology(mesh: &NvlMesh, world: usize) -> Topology {
    if world == 0 || world > MAX_DEVICES {
        return Topology::Unknown;
    }
    let fully_connected = (0..world).all(|a| (a + 1..world).all(|b| mesh.is_linked(a, b)));
    if fully_connected {
        Topology::FullyConnected
    } else if world == MAX_DEVICES && hcm_neighbors(mesh).is_some() {
        Topology::HybridCubeMesh
    } else {
        Topology::Unknown
    }
}

/// The hybrid cube mesh of 8 GPUs, if the mesh is one (PyTorch's
/// `getHybridCubeMesh`, see its NOTE [hybrid cube mesh]).
///
/// In a hybrid cube mesh every GPU X has exactly 4 NVLink neighbours, and
/// exactly one GPU shares no neighbour with X: its relay Y, which must be
/// one of X's neighbours (the relation is symmetric). The HCM all-reduce
/// runs a one-shot all-reduce between X and its 3 other neighbours, then
/// swaps the partial sums with the relay, so every byte moves over NVLink.
///
/// Row X of the result: slots `0..3` are X's three one-shot neighbours,
/// slot [`HCM_RELAY_SLOT`] its relay. For load balance, `hcm[x][k] == y`
/// exactly when `hcm[y][k] == x`: each slot is a perfect matching. The
/// order is deterministic (the first such assignment when edges are taken
/// in increasing rank order and slots in increasing order), so every rank
/// computes the same table.
///
/// Stricter than PyTorch in two places: links must exist in both
/// directions, and the relay must itself be a neighbour (PyTorch's check
/// does not require it, but the kernel reads the relay's buffer directly).
pub fn hcm_neighbors(mesh: &NvlMesh) -> Option<[[usize; 4]; MAX_DEVICES]> {
    let mut neighbor_masks = [0u8; MAX_DEVICES];
    for (a, mask) in neighbor_masks.iter_mut().enumerate() {
        for b in 0..MAX_DEVICES {
            if mesh.is_linked(a, b) {
                *mask |= 1 << b;
            }
        }
    }
    if neighbor_masks.iter().any(|mask| mask.count_ones() != 4) {
        return None;
    }

    let mut relays = [0usize; MAX_DEVICES];
    for (a, relay) in relays.iter_mut().enumerate() {
        let mut candidates =
            (0..MAX_DEVICES).filter(|&b| neighbor_masks[a] & neighbor_masks[b] == 0);
        let candidate = candidates.next()?;
        if candidates.next().is_some() || neighbor_masks[a] & (1 << candidate) == 0 {
            return None;
        }
        *relay = candidate;
    }

    // The one-shot links (neighbours minus relay) form a 3-regular graph
    // on 8 vertices, 12 edges; colour its edges with the 3 slots so that
    // no GPU uses a slot twice.
    let mut edges = [(0usize, 0usize); 12];
    let mut edge_count = 0;
    for a in 0..MAX_DEVICES {
        for b in a + 1..MAX_DEVICES {
            if neighbor_masks[a] & (1 << b) != 0 && relays[a] != b {
                *edges.get_mut(edge_count)? = (a, b);
                edge_count += 1;
            }
        }
    }
    if edge_count != edges.len() {
        return None;
    }
    let mut slot_of_edge = [0usize; 12];
    if !colour_edges(&edges, 0, &mut [0u8; MAX_DEVICES], &mut slot_of_edge) {
        return None;
    }

    let mut hcm = [[0usize; 4]; MAX_DEVICES];
    for (&(a, b), &slot) in edges.iter().zip(&slot_of_edge) {
        hcm[a][slot] = b;
        hcm[b][slot] = a;
    }
    for (row, &relay) in hcm.iter_mut().zip(&relays) {
        row[HCM_RELAY_SLOT] = relay;
    }
    Some(hcm)
}

/// Backtracking edge colouring with [`HCM_RELAY_SLOT`] colours: gives
/// `edges[next..]` slots such that no vertex has two edges in one slot
/// (`used_slots[v]` is the bit set of slots vertex `v` already has).
/// Tries slots in increasing order, so the first colouring found is the
/// deterministic one [`hcm_neighbors`] promises.
fn colour_edges(
    edges: &[(usize, usize)],
    next: usize,
    used_slots: &mut [u8; MAX_DEVICES],
    slot_of_edge: &mut [usize],
) -> bool {
    let Some(&(a, b)) = edges.get(next) else {
        return true;
    };
    for slot in 0..HCM_RELAY_SLOT {
        let bit = 1u8 << slot;
        if (used_slots[a] | used_slots[b]) & bit != 0 {
            continue;
        }
        used_slots[a] |= bit;
        used_slots[b] |= bit;
        if let Some(entry) = slot_of_edge.get_mut(next) {
            *entry = slot;
        }
        if colour_edges(edges, next + 1, used_slots, slot_of_edge) {
            return true;
        }
        used_slots[a] &= !bit;
        used_slots[b] &= !bit;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Every distinct pair among the first `world` ranks gets `links`.
    fn uniform_mesh(world: usize, links: u32) -> NvlMesh {
        let mut mesh = NvlMesh::zero();
        for a in 0..world {
            for b in 0..world {
                if a != b {
                    mesh.0[a][b] = links;
                }
            }
        }
        mesh
    }

    /// DGX-1V (`nvidia-smi topo -m`): GPUs 0-3 and 4-7 each fully
    /// connected, plus i <-> i+4; NV1/NV2 counts, 6 links per GPU.
    fn dgx1v_mesh() -> NvlMesh {
        NvlMesh([
            [0, 1, 1, 2, 2, 0, 0, 0],
            [1, 0, 2, 1, 0, 2, 0, 0],
            [1, 2, 0, 2, 0, 0, 1, 0],
            [2, 1, 2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 1, 1, 2],
            [0, 2, 0, 0, 1, 0, 2, 1],
            [0, 0, 1, 0, 1, 2, 0, 2],
            [0, 0, 0, 1, 2, 1, 2, 0],
        ])
    }

    fn check_hcm_properties(mesh: &NvlMesh, hcm: &[[usize; 4]; MAX_DEVICES]) {
        for (x, row) in hcm.iter().enumerate() {
            let mut peers = row.to_vec();
            peers.sort_unstable();
            peers.dedup();
            assert_eq!(peers.len(), 4, "rank {x}: peers {row:?} not distinct");
            for (k, &y) in row.iter().enumerate() {
                assert!(mesh.is_linked(x, y), "rank {x} slot {k}: {y} not linked");
                assert_eq!(hcm[y][k], x, "slot {k} not a matching at {x} <-> {y}");
            }
            // The relay shares no neighbour with x.
            let relay = row[HCM_RELAY_SLOT];
            for &one_shot_peer in &row[..HCM_RELAY_SLOT] {
                assert!(
                    !mesh.is_linked(relay, one_shot_peer),
                    "rank {x}: relay {relay}"
                );
            }
        }
    }

    #[test]
    fn nvswitch_8_is_fully_connected_not_hcm() {
        let mesh = uniform_mesh(8, 18);
        assert_eq!(detect_topology(&mesh, 8), Topology::FullyConnected);
        assert_eq!(hcm_neighbors(&mesh), None);
        for world in 1..=8 {
            assert_eq!(detect_topology(&mesh, world), Topology::FullyConnected);
        }
    }

    #[test]
    fn nvswitch_4_is_fully_connected() {
        let mesh = uniform_mesh(4, 18);
        assert_eq!(detect_topology(&mesh, 4), Topology::FullyConnected);
        assert_eq!(detect_topology(&mesh, 5), Topology::Unknown);
    }

    #[test]
    fn dgx1v_is_hybrid_cube_mesh() {
        let mesh = dgx1v_mesh();
        assert_eq!(detect_topology(&mesh, 8), Topology::HybridCubeMesh);
        // The first four GPUs alone are fully connected; five are not.
        assert_eq!(detect_topology(&mesh, 4), Topology::FullyConnected);
        assert_eq!(detect_topology(&mesh, 5), Topology::Unknown);

        let hcm = hcm_neighbors(&mesh).expect("DGX-1V is a hybrid cube mesh");
        check_hcm_properties(&mesh, &hcm);
        // Deterministic order: edges (0,1),(0,2),(0,3),(1,2),(1,3),(2,3)
        // take slots 0,1,2,2,1,0; the relay of i is i+4 (mod 8).
        assert_eq!(
            hcm,
            [
                [1, 2, 3, 4],
                [0, 3, 2, 5],
                [3, 0, 1, 6],
                [2, 1, 0, 7],
                [5, 6, 7, 0],
                [4, 7, 6, 1],
                [7, 4, 5, 2],
                [6, 5, 4, 3],
            ]
        );
    }

    #[test]
    fn relabelled_hcm_is_still_found() {
        let dgx1 = dgx1v_mesh();
        let perm = [5, 2, 7, 0, 3, 6, 1, 4];
        let mut mesh = NvlMesh::zero();
        for a in 0..8 {
            for b in 0..8 {
                mesh.0[perm[a]][perm[b]] = dgx1.0[a][b];
            }
        }
        assert_eq!(detect_topology(&mesh, 8), Topology::HybridCubeMesh);
        let hcm = hcm_neighbors(&mesh).expect("relabelled DGX-1V");
        check_hcm_properties(&mesh, &hcm);
        assert_eq!(hcm, hcm_neighbors(&mesh).expect("same input, same table"));
    }

    #[test]
    fn four_regular_without_relay_is_not_hcm() {
        // Circulant C8(1, 2): 4 neighbours each (PyTorch's first check
        // passes) but no GPU has a neighbour-disjoint partner.
        let mut mesh = NvlMesh::zero();
        for a in 0..8 {
            for step in [1, 2, 6, 7] {
                mesh.0[a][(a + step) % 8] = 1;
            }
        }
        assert_eq!(hcm_neighbors(&mesh), None);
        assert_eq!(detect_topology(&mesh, 8), Topology::Unknown);
    }

    #[test]
    fn hcm_with_a_missing_link_is_unknown() {
        let mut mesh = dgx1v_mesh();
        mesh.0[0][4] = 0;
        mesh.0[4][0] = 0;
        assert_eq!(hcm_neighbors(&mesh), None);
        assert_eq!(detect_topology(&mesh, 8), Topology::Unknown);
    }

    #[test]
    fn partial_mesh_is_unknown() {
        let mut mesh = uniform_mesh(4, 18);
        mesh.0[1][3] = 0;
        mesh.0[3][1] = 0;
        assert_eq!(detect_topology(&mesh, 4), Topology::Unknown);
        assert_eq!(detect_topology(&mesh, 3), Topology::FullyConnected);

        let mut mesh = uniform_mesh(8, 18);
        mesh.0[2][6] = 0;
        mesh.0[6][2] = 0;
        assert_eq!(detect_topology(&mesh, 8), Topology::Unknown);
    }

    #[test]
    fn one_way_link_is_not_a_link() {
        let mut mesh = NvlMesh::zero();
        mesh.0[0][1] = 4;
        assert_eq!(detect_topology(&mesh, 2), Topology::Unknown);
        mesh.0[1][0] = 4;
        assert_eq!(detect_topology(&mesh, 2), Topology::FullyConnected);
    }

    #[test]
    fn pcie_only_is_unknown() {
        let mesh = NvlMesh::zero();
        assert!(mesh.is_zero());
        for world in 2..=8 {
            assert_eq!(detect_topology(&mesh, world), Topology::Unknown);
        }
        assert_eq!(hcm_neighbors(&mesh), None);
    }

    #[test]
    fn world_2_linked() {
        let mut mesh = NvlMesh::zero();
        mesh.0[0][1] = 18;
        mesh.0[1][0] = 18;
        assert_eq!(detect_topology(&mesh, 2), Topology::FullyConnected);
        assert_eq!(detect_topology(&mesh, 3), Topology::Unknown);
    }

    #[test]
    fn degenerate_worlds() {
        let mesh = uniform_mesh(8, 18);
        assert_eq!(detect_topology(&mesh, 0), Topology::Unknown);
        assert_eq!(
            detect_topology(&NvlMesh::zero(), 1),
            Topology::FullyConnected
        );
        assert_eq!(detect_topology(&mesh, 9), Topology::Unknown);
        assert_eq!(mesh.links(8, 0), 0);
        assert_eq!(mesh.links(0, 99), 0);
        assert!(!mesh.is_linked(3, 3));
    }

    #[test]
    fn peer_access_zeroes_pairs() {
        let mesh = uniform_mesh(4, 18);
        let all = restrict_to_peer_access(&mesh, 4, |_, _| true);
        assert_eq!(all, mesh);

        // 2 -> 3 denied: the pair goes, in both directions.
        let restricted = restrict_to_peer_access(&mesh, 4, |a, b| (a, b) != (2, 3));
        assert_eq!(restricted.links(2, 3), 0);
        assert_eq!(restricted.links(3, 2), 0);
        assert_eq!(restricted.links(0, 1), 18);
        assert_eq!(detect_topology(&restricted, 4), Topology::Unknown);
        assert_eq!(detect_topology(&restricted, 3), Topology::FullyConnected);

        // Ranks past `world` are not asked about.
        let untouched = restrict_to_peer_access(&mesh, 2, |a, b| a < 2 && b < 2);
        assert_eq!(untouched, mesh);
    }

    #[test]
    fn mesh_display_has_one_row_per_rank() {
        let text = dgx1v_mesh().to_string();
        assert_eq!(text.lines().count(), MAX_DEVICES);
        assert_eq!(text.lines().next(), Some(" 0  1  1  2  2  0  0  0"));
    }

    #[test]
    fn pci_address_parse_and_display() {
        let cuda = PciAddress::parse("0000:18:00.0");
        let nvml = PciAddress::parse("00000000:18:00.0");
        let short = PciAddress::parse("18:00.0");
        let expected = PciAddress {
            domain: 0,
            bus: 0x18,
            device: 0,
        };
        assert_eq!(cuda, Some(expected));
        assert_eq!(nvml, Some(expected));
        assert_eq!(short, Some(expected));
        assert_eq!(expected.to_string(), "00000000:18:00.0");
        let odd = PciAddress::parse("0001:9a:1f.0");
        assert_eq!(
            odd.map(|a| a.to_string()).as_deref(),
            Some("00000001:9A:1F.0")
        );
        for bad in [
            "",
            "18:00",
            "0000:100:00.0",
            "0000:18:20.0",
            "0000:18:00.8",
            "zz:00.0",
        ] {
            assert_eq!(PciAddress::parse(bad), None, "{bad:?}");
        }
    }

    fn gpu(bus: u32) -> PciAddress {
        PciAddress {
            domain: 0,
            bus,
            device: 0,
        }
    }

    /// Fixed link table: `(rank, link) -> endpoint`; missing links are
    /// inactive; `failing` makes one query fail.
    #[derive(Default)]
    struct FakeLinks {
        links: HashMap<(usize, u32), RemoteEndpoint>,
        failing: Option<(usize, u32)>,
    }

    impl FakeLinks {
        /// Gives `rank` `count` more links to `endpoint`, from its next
        /// free link index on.
        fn add(&mut self, rank: usize, endpoint: RemoteEndpoint, count: u32) {
            let first = (0..NVLINK_MAX_LINKS)
                .find(|&link| !self.links.contains_key(&(rank, link)))
                .unwrap_or(NVLINK_MAX_LINKS);
            for link in first..first + count {
                self.links.insert((rank, link), endpoint);
            }
        }
    }

    impl LinkSource for FakeLinks {
        type Error = &'static str;

        fn remote_endpoint(
            &self,
            rank: usize,
            link: u32,
        ) -> Result<Option<RemoteEndpoint>, &'static str> {
            if self.failing == Some((rank, link)) {
                return Err("fake failure");
            }
            Ok(self.links.get(&(rank, link)).copied())
        }
    }

    #[test]
    fn switch_links_give_the_smaller_count() {
        let devices: Vec<_> = (0..4).map(|i| gpu(0x10 + i)).collect();
        let mut source = FakeLinks::default();
        for rank in 0..4 {
            // Rank 3 lost 6 of its 18 links.
            let count = if rank == 3 { 12 } else { 18 };
            source.add(rank, RemoteEndpoint::Switch, count);
        }
        let mesh = nvl_mesh_from_links(&source, &devices);
        let mut expected = uniform_mesh(4, 18);
        for other in 0..3 {
            expected.0[3][other] = 12;
            expected.0[other][3] = 12;
        }
        assert_eq!(mesh, expected);
        assert_eq!(detect_topology(&mesh, 4), Topology::FullyConnected);
    }

    #[test]
    fn nvswitch_8_from_links() {
        let devices: Vec<_> = (0..8).map(|i| gpu(0x10 + i)).collect();
        let mut source = FakeLinks::default();
        for rank in 0..8 {
            source.add(rank, RemoteEndpoint::Switch, NVLINK_MAX_LINKS);
        }
        assert_eq!(nvl_mesh_from_links(&source, &devices), uniform_mesh(8, 18));
    }

    #[test]
    fn direct_links_reproduce_dgx1v() {
        let devices: Vec<_> = (0..8).map(|i| gpu(0x10 + i)).collect();
        let dgx1 = dgx1v_mesh();
        let mut source = FakeLinks::default();
        for (a, row) in dgx1.0.iter().enumerate() {
            for (&remote, &count) in devices.iter().zip(row) {
                source.add(a, RemoteEndpoint::Gpu(remote), count);
            }
        }
        let mesh = nvl_mesh_from_links(&source, &devices);
        assert_eq!(mesh, dgx1);
        assert_eq!(detect_topology(&mesh, 8), Topology::HybridCubeMesh);
    }

    #[test]
    fn gpus_outside_the_group_are_ignored() {
        // Ranks on GPUs 0 and 1 of a DGX-1V: their links to 2, 3 and 4
        // lead to GPUs that are not ranks.
        let all: Vec<_> = (0..8).map(|i| gpu(0x10 + i)).collect();
        let devices = [all[0], all[1]];
        let dgx1 = dgx1v_mesh();
        let mut source = FakeLinks::default();
        for (rank, row) in dgx1.0.iter().take(2).enumerate() {
            for (b, &count) in row.iter().enumerate() {
                source.add(rank, RemoteEndpoint::Gpu(all[b]), count);
            }
        }
        let mesh = nvl_mesh_from_links(&source, &devices);
        let mut expected = NvlMesh::zero();
        expected.0[0][1] = 1;
        expected.0[1][0] = 1;
        assert_eq!(mesh, expected);
    }

    #[test]
    fn unclassified_remotes_follow_the_bus_id() {
        // NVML did not report remote types: a remote that is a rank's GPU
        // is a direct link, anything else a switch.
        let devices = [gpu(0x10), gpu(0x20), gpu(0x30)];
        let switch = gpu(0xa0);
        let mut source = FakeLinks::default();
        source.add(0, RemoteEndpoint::Unclassified(devices[1]), 2);
        source.add(1, RemoteEndpoint::Unclassified(devices[0]), 2);
        for rank in 0..3 {
            source.add(rank, RemoteEndpoint::Unclassified(switch), 4);
        }
        // Loopback and IBM NPU links count for nothing.
        source.add(2, RemoteEndpoint::Unclassified(devices[2]), 1);
        source.add(2, RemoteEndpoint::Other, 1);
        let mesh = nvl_mesh_from_links(&source, &devices);
        let mut expected = uniform_mesh(3, 4);
        expected.0[0][1] = 6;
        expected.0[1][0] = 6;
        assert_eq!(mesh, expected);
    }

    #[test]
    fn inactive_links_are_skipped() {
        let devices = [gpu(0x10), gpu(0x20)];
        let mut source = FakeLinks::default();
        // Links 0..3 inactive (absent from the table), 3..5 active.
        source.links.insert((0, 3), RemoteEndpoint::Gpu(devices[1]));
        source
            .links
            .insert((0, 17), RemoteEndpoint::Gpu(devices[1]));
        source.links.insert((1, 9), RemoteEndpoint::Gpu(devices[0]));
        let mesh = nvl_mesh_from_links(&source, &devices);
        assert_eq!(mesh.links(0, 1), 2);
        assert_eq!(mesh.links(1, 0), 1);
    }

    #[test]
    fn shared_gpu_counts_for_every_rank_on_it() {
        // Ranks 0 and 1 share a GPU (overlapping devices); rank 2 is
        // directly linked to it.
        let devices = [gpu(0x10), gpu(0x10), gpu(0x20)];
        let mut source = FakeLinks::default();
        for rank in 0..2 {
            source.add(rank, RemoteEndpoint::Gpu(devices[2]), 4);
        }
        source.add(2, RemoteEndpoint::Gpu(devices[0]), 4);
        let mesh = nvl_mesh_from_links(&source, &devices);
        assert_eq!(mesh.links(0, 1), 0);
        assert_eq!(mesh.links(0, 2), 4);
        assert_eq!(mesh.links(1, 2), 4);
        assert_eq!(mesh.links(2, 0), 4);
        assert_eq!(mesh.links(2, 1), 4);
    }

    #[test]
    fn failed_query_gives_zero_mesh() {
        let devices = [gpu(0x10), gpu(0x20)];
        let mut source = FakeLinks::default();
        source.add(0, RemoteEndpoint::Switch, 18);
        source.add(1, RemoteEndpoint::Switch, 18);
        source.failing = Some((1, 5));
        assert_eq!(nvl_mesh_from_links(&source, &devices), NvlMesh::zero());
    }

    #[test]
    fn too_many_devices_give_zero_mesh() {
        let devices: Vec<_> = (0..9).map(|i| gpu(0x10 + i)).collect();
        let mut source = FakeLinks::default();
        for rank in 0..9 {
            source.add(rank, RemoteEndpoint::Switch, 18);
        }
        assert_eq!(nvl_mesh_from_links(&source, &devices), NvlMesh::zero());
        assert_eq!(nvl_mesh_from_nvml(&devices), NvlMesh::zero());
    }

    #[test]
    fn nvml_with_unknown_gpus_gives_zero_mesh() {
        // No driver here: NVML fails to load. With a driver: NVML knows
        // no GPU at these addresses. Either way a warning, no panic.
        let devices = [
            PciAddress {
                domain: 0xfffe,
                bus: 0xff,
                device: 0x1f,
            },
            PciAddress {
                domain: 0xfffe,
                bus: 0xfe,
                device: 0x1f,
            },
        ];
        assert_eq!(nvl_mesh_from_nvml(&devices), NvlMesh::zero());
        assert_eq!(nvl_mesh_from_nvml(&[]), NvlMesh::zero());
    }

    /// Prints the NVML mesh of every GPU on this machine; run on a GPU
    /// machine with `--ignored --nocapture`.
    #[test]
    #[ignore = "needs an NVIDIA driver; prints this machine's mesh"]
    fn nvml_mesh_of_this_machine() {
        let nvml = Nvml::init().expect("NVML loads on a GPU machine");
        let devices = list_system_gpus(&nvml).expect("NVML lists the GPUs");
        let devices = &devices[..devices.len().min(MAX_DEVICES)];
        let source = NvmlLinks::new(&nvml, devices).expect("NVML knows its own GPUs");
        for link in 0..NVLINK_MAX_LINKS {
            println!("rank 0 link {link}: {:?}", source.remote_endpoint(0, link));
        }
        drop(source);
        drop(nvml);
        println!(
            "gpus: {:?}",
            devices.iter().map(ToString::to_string).collect::<Vec<_>>()
        );
        let mesh = nvl_mesh_from_nvml(devices);
        println!("{mesh}");
        println!("topology: {}", detect_topology(&mesh, devices.len()));
        assert!(
            !mesh.is_zero() || devices.len() < 2,
            "expected NVLink between the GPUs"
        );
    }
}
