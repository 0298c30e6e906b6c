//! The all-reduce's decision: [`decide_all_reduce`] picks ours (the
//! Lamport one-shot and two-shot, one-shot, two-shot, HCM, the push form)
//! or NCCL's for one [`AllReduceCall`], from the crossovers
//! ([`Crossovers`](super::Crossovers)): the size rule, the NCCL fallback,
//! and the hand-over of forms past their buffers to their twins. Pure, and
//! every path calls it: `Communicator`'s automatic choice, a forced
//! algorithm (`config::FORCE_ALGO_ENV`), and the suites' explicit one.

use super::Crossovers;
use crate::topology::{MAX_DEVICES, Topology};
use crate::types::{AllReduceAlgo, ElemType};

/// The largest message the Lamport one-shot takes on `world` ranks (one
/// slot of its buffers); larger ones run as one-shot.
pub const fn lamport_max_message_bytes(world: usize) -> usize {
    intranode_kernels_gpu::layout::lamport_slot_bytes(world)
}

/// The largest message the Lamport two-shot takes on `world` ranks;
/// larger ones run as two-shot.
pub const fn lamport_two_shot_max_message_bytes(world: usize) -> usize {
    intranode_kernels_gpu::layout::lamport_two_shot_max_bytes(world)
}

/// The largest message the push form takes (its kernels index
/// vectors in u32, `intranode_kernels_gpu::index::PUSH_MAX_VECS`); larger ones
/// run as two-shot.
pub const fn push_max_message_bytes() -> usize {
    intranode_kernels_gpu::index::PUSH_MAX_VECS as usize * intranode_kernels_gpu::index::VEC_BYTES
}

/// Largest message HCM takes on a hybrid cube mesh; NCCL above. PyTorch's
/// `kHcmThreshBytes` (256 KiB): no DGX-1 was at hand to measure ours, and
/// on NVSwitch machines HCM is never chosen (one-shot and two-shot read
/// every peer directly).
pub const HCM_MAX_BYTES: usize = 256 * 1024;

/// The intra-node path of a group, as the decision sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntraPath {
    pub topology: Topology,
    /// Bytes of each rank's symmetric buffer.
    pub buffer_bytes: usize,
    /// Whether this rank can run HCM (`intra::hcm::hcm_plan` found its
    /// place in the cube mesh).
    pub hcm_runnable: bool,
    /// Whether the symmetric buffer holds the push form's rings
    /// (`intra::launch_shape::push_launch`); the size rule picks it only then.
    pub push_runnable: bool,
}

/// One all-reduce call, as the decision sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllReduceCall {
    /// `None` for element types only NCCL reduces (every `NcclType` but
    /// bf16, f16 and f32: integers, f64).
    pub elem: Option<ElemType>,
    pub bytes: usize,
    pub world: usize,
    /// `None` when the group has no intra-node path.
    pub intra: Option<IntraPath>,
    /// Whether our kernels have the op (NCCL's product: no).
    pub op_is_ours: bool,
    /// Whether NCCL loaded for this group.
    pub nccl_available: bool,
    /// An algorithm the caller or the configuration forces.
    pub forced: Option<AllReduceAlgo>,
}

/// The algorithm that runs `call` (see the module docs).
pub fn decide_all_reduce(call: &AllReduceCall, crossovers: &Crossovers) -> AllReduceAlgo {
    let Some(intra) = call.intra else {
        return AllReduceAlgo::Nccl;
    };
    if !call.op_is_ours || call.elem.is_none() {
        return AllReduceAlgo::Nccl;
    }
    let algo = match call.forced {
        Some(forced) => forced,
        None => {
            let algo = by_size(
                call.bytes,
                call.world,
                intra.topology,
                intra.buffer_bytes,
                crossovers,
            );
            let algo = if algo == AllReduceAlgo::Push && !intra.push_runnable {
                AllReduceAlgo::Nccl
            } else {
                algo
            };
            if algo == AllReduceAlgo::Hcm && !intra.hcm_runnable {
                // A cube mesh whose table this rank cannot run HCM on.
                AllReduceAlgo::Nccl
            } else if algo == AllReduceAlgo::Nccl && !call.nccl_available {
                // Where NCCL would win but cannot run (not loadable, or
                // several ranks share a GPU, which NCCL refuses), our
                // kernels serve every size: two-shot walks large messages
                // chunk by chunk.
                AllReduceAlgo::TwoShot
            } else {
                algo
            }
        }
    };
    // The Lamport forms take messages up to their buffers and hand larger
    // ones to their barrier twins (the variants' documented contract). The
    // kernels trust the host on this: a larger one would store past the
    // buffers into the peers' pads. The push form hands messages past
    // its u32 indices to the two-shot.
    match algo {
        AllReduceAlgo::Lamport if call.bytes > lamport_max_message_bytes(call.world) => {
            AllReduceAlgo::OneShot
        }
        AllReduceAlgo::LamportTwoShot
            if call.bytes > lamport_two_shot_max_message_bytes(call.world) =>
        {
            AllReduceAlgo::TwoShot
        }
        AllReduceAlgo::Push if call.bytes > push_max_message_bytes() => AllReduceAlgo::TwoShot,
        other => other,
    }
}

/// The size rule: what a call of `bytes` on `world` ranks should use.
///
/// Ours needs a fully connected topology (HCM: the cube mesh) and a world
/// of 2..=8; sizes beyond the symmetric buffer's half are run in chunks,
/// so the buffer size only matters through the crossovers. Every element
/// type is served by every kernel.
pub(super) fn by_size(
    bytes: usize,
    world: usize,
    topology: Topology,
    buffer_bytes: usize,
    crossovers: &Crossovers,
) -> AllReduceAlgo {
    if !(2..=MAX_DEVICES).contains(&world) || buffer_bytes < 64 {
        return AllReduceAlgo::Nccl;
    }
    match topology {
        Topology::FullyConnected => {
            if bytes <= crossovers.lamport_max_bytes[world] {
                AllReduceAlgo::Lamport
            } else if bytes <= crossovers.lamport_two_shot_max_bytes[world] {
                AllReduceAlgo::LamportTwoShot
            } else if bytes >= crossovers.push_min_bytes[world] {
                AllReduceAlgo::Push
            } else if bytes <= crossovers.one_shot_max_bytes[world] {
                AllReduceAlgo::OneShot
            } else if bytes <= crossovers.two_shot_max_bytes[world] {
                AllReduceAlgo::TwoShot
            } else {
                AllReduceAlgo::Nccl
            }
        }
        Topology::HybridCubeMesh if world == MAX_DEVICES && bytes <= HCM_MAX_BYTES => {
            AllReduceAlgo::Hcm
        }
        Topology::HybridCubeMesh => AllReduceAlgo::Nccl,
        Topology::Unknown => AllReduceAlgo::Nccl,
    }
}
