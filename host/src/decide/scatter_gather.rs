//! Reduce-scatter and all-gather: ours (the Lamport form while every
//! shard fits one slot, the push form past it) or NCCL's, by the size of
//! the whole buffer (every shard).

use super::Crossovers;
use crate::topology::MAX_DEVICES;

/// The largest shard (one rank's part) one launch of our Lamport
/// reduce-scatter or all-gather takes on `world` ranks: one slot of the
/// Lamport buffers (`intra::scatter_gather`; larger shards run slot by slot).
pub const fn scatter_gather_max_shard_bytes(world: usize) -> usize {
    intranode_kernels_gpu::layout::lamport_slot_bytes(world)
}

/// Whether a reduce-scatter or all-gather whose whole buffer (every
/// shard) is `total_bytes` runs on our kernels (else NCCL): up to the
/// crossover `scatter_gather_max_bytes`. Shards past a Lamport slot run
/// as several launches (`intra::scatter_gather`), so any size can.
pub fn scatter_gather_uses_ours(total_bytes: usize, world: usize, crossovers: &Crossovers) -> bool {
    (2..=MAX_DEVICES).contains(&world) && total_bytes <= crossovers.scatter_gather_max_bytes[world]
}

/// Whether a reduce-scatter or all-gather of ours whose whole buffer is
/// `total_bytes` takes the push form (where its rings fit the buffer:
/// `intra::scatter_gather`), not the Lamport one.
pub fn scatter_gather_uses_push(total_bytes: usize, world: usize, crossovers: &Crossovers) -> bool {
    (2..=MAX_DEVICES).contains(&world)
        && total_bytes >= crossovers.scatter_gather_push_min_bytes[world]
}

/// One reduce-scatter or all-gather, as [`scatter_gather_runs_ours`] sees
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScatterGatherCall {
    /// Bytes of the whole buffer (every shard).
    pub total_bytes: usize,
    pub world: usize,
    /// Whether the group has the intra-node path.
    pub intra: bool,
    /// Whether our kernels have the element type (bf16, f16, f32).
    pub elem_is_ours: bool,
    /// Whether our kernels have the op (the all-gather reduces nothing;
    /// NCCL's product is NCCL's alone).
    pub op_is_ours: bool,
    /// Whether NCCL loaded for this group.
    pub nccl_available: bool,
    /// Whether the configuration forces NCCL (`config::FORCE_ALGO_ENV`).
    pub forced_nccl: bool,
}

/// Whether `call` runs on our kernels (else NCCL): where ours can run it
/// at all, up to the crossover [`scatter_gather_uses_ours`], and at any
/// size where NCCL cannot run (ours take any shard, slot by slot).
pub fn scatter_gather_runs_ours(call: &ScatterGatherCall, crossovers: &Crossovers) -> bool {
    call.intra
        && call.elem_is_ours
        && call.op_is_ours
        && !call.forced_nccl
        && (scatter_gather_uses_ours(call.total_bytes, call.world, crossovers)
            || !call.nccl_available)
}
