//! Counting links: [`nvl_mesh_from_links`] builds the mesh from any
//! [`LinkSource`] (NVML on real machines, fixed tables in the tests).

use std::fmt;

use super::{MAX_DEVICES, NvlMesh, PciAddress};

/// NVLink indices probed per GPU: `NVML_NVLINK_MAX_LINKS` in `nvml.h`
/// (CUDA 12 and 13). Hopper and Blackwell GPUs have 18 links.
pub const NVLINK_MAX_LINKS: u32 = 18;

/// Where one active NVLink leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::topology::test_meshes::{dgx1v_mesh, uniform_mesh};
    use crate::topology::{Topology, detect_topology, nvl_mesh_from_nvml};

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
}
