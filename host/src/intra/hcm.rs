//! Which ranks a rank talks to in the hybrid-cube-mesh all-reduce (NOTE
//! [hcm groups] in `kernels-gpu/src/all_reduce.rs`): data only, derived
//! from the topology's neighbour table, checked here so the kernel can
//! trust it.

use crate::topology::{HCM_RELAY_SLOT, MAX_DEVICES, Topology};

/// One rank's part in HCM: its group (itself included) and its relay in
/// the other group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HcmPlan {
    /// Bit `r` set for every rank `r` of this rank's group.
    pub group_mask: u32,
    /// The rank of the other group this rank swaps partial sums with.
    pub relay: usize,
    /// Whether the relay's group holds the lower ranks (its partial sum is
    /// combined first, on every rank alike).
    pub relay_first: bool,
}

/// Why a rank cannot run HCM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HcmUnavailable {
    #[error("rank {rank} is outside the world of {world}")]
    RankOutsideWorld { rank: usize, world: usize },
    #[error("hcm needs a hybrid cube mesh or a fully connected group, not {topology}")]
    Topology { topology: Topology },
    #[error("hcm runs on 4, 6 or 8 ranks (two equal groups of 2 to 4), not {world}")]
    HalvesWorld { world: usize },
    #[error("a hybrid cube mesh has {MAX_DEVICES} ranks, not {world}")]
    CubeWorld { world: usize },
    #[error("hcm neighbour table names a rank outside the group")]
    TableOutOfRange,
    #[error("rank {rank}'s one-shot neighbours {neighbours:?} are not three distinct other ranks")]
    NotThreeNeighbours {
        rank: usize,
        neighbours: [usize; HCM_RELAY_SLOT],
    },
    #[error("the one-shot neighbours of ranks {rank} and {other} do not form one group of four")]
    GroupsDisagree { rank: usize, other: usize },
    #[error("rank {rank}'s relay {relay} is not a partner in the other group")]
    BadRelay { rank: usize, relay: usize },
}

/// The HCM plan of `rank`, if the group can run HCM:
/// - on a [`Topology::HybridCubeMesh`], from its neighbour table (each
///   rank's three one-shot neighbours and itself must form a clique, as the
///   quads of a DGX-1 do, so that every member computes the same partial
///   sum);
/// - on a fully connected group of 4, 6 or 8 ranks, with the halves
///   `0..W/2` and `W/2..W` as groups and rank `r`'s relay `r ± W/2`: the
///   cube-mesh pattern laid on links that exist anyway, so HCM can be
///   checked and measured there.
///
/// `Err` says why not.
pub fn hcm_plan(
    topology: Topology,
    world: usize,
    rank: usize,
    table: Option<&[[usize; 4]; MAX_DEVICES]>,
) -> Result<HcmPlan, HcmUnavailable> {
    if rank >= world {
        return Err(HcmUnavailable::RankOutsideWorld { rank, world });
    }
    match (topology, table) {
        (Topology::HybridCubeMesh, Some(table)) => plan_from_table(table, world, rank),
        (Topology::FullyConnected, _) => plan_from_halves(world, rank),
        _ => Err(HcmUnavailable::Topology { topology }),
    }
}

fn plan_from_halves(world: usize, rank: usize) -> Result<HcmPlan, HcmUnavailable> {
    if !matches!(world, 4 | 6 | 8) {
        return Err(HcmUnavailable::HalvesWorld { world });
    }
    let half = world / 2;
    let first = rank - rank % half;
    Ok(HcmPlan {
        group_mask: ((1u32 << half) - 1) << first,
        relay: (rank + half) % world,
        relay_first: first != 0,
    })
}

/// Bit set of `x` and its one-shot neighbours in `table`.
fn group_of(table: &[[usize; 4]; MAX_DEVICES], x: usize) -> u32 {
    let mut mask = 1u32 << x;
    for &n in &table[x][..HCM_RELAY_SLOT] {
        mask |= 1 << n;
    }
    mask
}

fn plan_from_table(
    table: &[[usize; 4]; MAX_DEVICES],
    world: usize,
    rank: usize,
) -> Result<HcmPlan, HcmUnavailable> {
    if world != MAX_DEVICES {
        return Err(HcmUnavailable::CubeWorld { world });
    }
    if table.iter().flatten().any(|&n| n >= MAX_DEVICES) {
        return Err(HcmUnavailable::TableOutOfRange);
    }
    let group = group_of(table, rank);
    if group.count_ones() != 4 {
        let mut neighbours = [0; HCM_RELAY_SLOT];
        neighbours.copy_from_slice(&table[rank][..HCM_RELAY_SLOT]);
        return Err(HcmUnavailable::NotThreeNeighbours { rank, neighbours });
    }
    // Every member must see the same group, else members would compute
    // different partial sums and results would differ across ranks.
    for m in (0..MAX_DEVICES).filter(|m| group & (1 << m) != 0) {
        if group_of(table, m) != group {
            return Err(HcmUnavailable::GroupsDisagree { rank, other: m });
        }
    }
    let relay = table[rank][HCM_RELAY_SLOT];
    let relay_group = group_of(table, relay);
    if relay_group & group != 0 || table[relay][HCM_RELAY_SLOT] != rank {
        return Err(HcmUnavailable::BadRelay { rank, relay });
    }
    Ok(HcmPlan {
        group_mask: group,
        relay,
        relay_first: relay_group.trailing_zeros() < group.trailing_zeros(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank's group and relay, for a plan function: groups partition
    /// the ranks, relays pair them across groups, and both halves agree on
    /// the combine order.
    fn check_partition(plans: &[HcmPlan]) {
        let world = plans.len();
        for (r, p) in plans.iter().enumerate() {
            assert!(p.group_mask & (1 << r) != 0, "rank {r} in its own group");
            assert_eq!(p.group_mask.count_ones() as usize * 2, world);
            for (m, q) in plans.iter().enumerate() {
                if p.group_mask & (1 << m) != 0 {
                    assert_eq!(q.group_mask, p.group_mask, "{r} and {m}");
                    assert_eq!(q.relay_first, p.relay_first);
                }
            }
            let q = &plans[p.relay];
            assert_eq!(q.relay, r, "relay pairs are mutual");
            assert_eq!(q.group_mask & p.group_mask, 0);
            assert_eq!(q.group_mask | p.group_mask, (1u32 << world) - 1);
            assert_ne!(q.relay_first, p.relay_first);
        }
    }

    #[test]
    fn halves_on_fully_connected_groups() {
        for world in [4, 6, 8] {
            let plans: Vec<_> = (0..world)
                .map(|r| hcm_plan(Topology::FullyConnected, world, r, None).unwrap())
                .collect();
            check_partition(&plans);
        }
        let p = hcm_plan(Topology::FullyConnected, 8, 5, None).unwrap();
        assert_eq!(
            p,
            HcmPlan {
                group_mask: 0xf0,
                relay: 1,
                relay_first: true
            }
        );
    }

    #[test]
    fn odd_small_and_unknown_groups_are_refused() {
        for world in [1, 2, 3, 5, 7] {
            let e = hcm_plan(Topology::FullyConnected, world, 0, None).unwrap_err();
            assert!(e.to_string().contains("4, 6 or 8"), "{e}");
        }
        assert!(hcm_plan(Topology::Unknown, 8, 0, None).is_err());
        assert!(hcm_plan(Topology::HybridCubeMesh, 8, 0, None).is_err());
        assert!(hcm_plan(Topology::FullyConnected, 4, 4, None).is_err());
    }

    /// DGX-1V: quads {0,1,2,3} and {4,5,6,7}, GPU x linked to x ^ 4.
    fn dgx1_table() -> [[usize; 4]; MAX_DEVICES] {
        let mut t = [[0usize; 4]; MAX_DEVICES];
        for (x, row) in t.iter_mut().enumerate() {
            let quad = x & !3;
            let mut k = 0;
            for n in quad..quad + 4 {
                if n != x {
                    row[k] = n;
                    k += 1;
                }
            }
            row[HCM_RELAY_SLOT] = x ^ 4;
        }
        t
    }

    #[test]
    fn cube_mesh_table_gives_quads() {
        let t = dgx1_table();
        let plans: Vec<_> = (0..8)
            .map(|r| hcm_plan(Topology::HybridCubeMesh, 8, r, Some(&t)).unwrap())
            .collect();
        check_partition(&plans);
        assert_eq!(plans[2].group_mask, 0x0f);
        assert_eq!(plans[2].relay, 6);
        assert!(!plans[2].relay_first);
    }

    #[test]
    fn the_table_of_the_topology_module_is_accepted() {
        // The DGX-1V mesh as `topology` detects it (its own tests build the
        // same links); the plan must accept whatever table it derives.
        let mut mesh = crate::topology::NvlMesh::zero();
        for x in 0..8 {
            for n in dgx1_table()[x] {
                mesh.0[x][n] = 1;
            }
        }
        let table = crate::topology::hcm_neighbors(&mesh).expect("hcm");
        let plans: Vec<_> = (0..8)
            .map(|r| hcm_plan(Topology::HybridCubeMesh, 8, r, Some(&table)).unwrap())
            .collect();
        check_partition(&plans);
    }

    #[test]
    fn broken_tables_are_refused() {
        let mut t = dgx1_table();
        // Rank 0's neighbours no longer form a clique with it.
        t[0][0] = 5;
        assert!(
            hcm_plan(Topology::HybridCubeMesh, 8, 0, Some(&t))
                .unwrap_err()
                .to_string()
                .contains("one group of four")
        );
        let mut t = dgx1_table();
        t[0][HCM_RELAY_SLOT] = 5; // 5's relay is 1, not 0
        assert!(
            hcm_plan(Topology::HybridCubeMesh, 8, 0, Some(&t))
                .unwrap_err()
                .to_string()
                .contains("relay")
        );
        let mut t = dgx1_table();
        t[3][1] = 9;
        assert!(hcm_plan(Topology::HybridCubeMesh, 8, 0, Some(&t)).is_err());
        assert!(hcm_plan(Topology::HybridCubeMesh, 4, 0, Some(&dgx1_table())).is_err());
    }
}
