//! The classification, pure functions of the mesh: which pairs CUDA lets
//! talk (`restrict_to_peer_access`), the [`Topology`] class, and the
//! hybrid-cube-mesh table (`hcm_neighbors`).

use std::fmt;

use super::{MAX_DEVICES, NvlMesh};

/// Slot of the relay neighbour in each row of `hcm_neighbors`; slots
/// `0..HCM_RELAY_SLOT` hold the three one-shot neighbours.
pub const HCM_RELAY_SLOT: usize = 3;

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
#[non_exhaustive]
pub enum Topology {
    /// Every pair of ranks is NVLinked (directly or through NVSwitch):
    /// one-shot and two-shot all-reduce can run.
    FullyConnected,
    /// 8 GPUs in the DGX-1 hybrid cube mesh (see `hcm_neighbors`).
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
/// 8 and `hcm_neighbors` finds one, else unknown. A single rank counts as
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
/// deterministic one `hcm_neighbors` promises.
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
    use crate::topology::test_meshes::{dgx1v_mesh, uniform_mesh};

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
}
