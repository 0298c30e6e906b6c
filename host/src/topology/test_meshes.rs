//! Meshes shared by the tests of the counting and the classification.

use super::NvlMesh;

/// Every distinct pair among the first `world` ranks gets `links`.
pub(super) fn uniform_mesh(world: usize, links: u32) -> NvlMesh {
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
pub(super) fn dgx1v_mesh() -> NvlMesh {
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
