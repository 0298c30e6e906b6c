// (Over 700 lines, 954: about half is the decision's unit tests, kept beside
// the rules they pin down.)

//! The one place that decides which all-reduce runs: ours (the Lamport
//! one-shot and two-shot, one-shot, two-shot, HCM, and the push form
//! when forced) or NCCL's.
//!
//! [`decide_all_reduce`] makes the whole decision, from one
//! [`AllReduceCall`] (element type, size, world, the intra-node path's
//! topology and buffer, the op, whether NCCL loaded, a forced algorithm)
//! and the measured [`Crossovers`] (built-in defaults, or a file written by
//! `intranode-bench bench --tune`): the size rule, the NCCL fallback, and
//! the Lamport forms' hand-over to their barrier twins above their
//! buffers. It is pure, and every path calls it: `Communicator`'s
//! automatic choice, a forced algorithm (`config::FORCE_ALGO_ENV`), and
//! `IntraNodeComm::all_reduce` with an explicit one.
//!
//! [`decide_norm`] likewise decides, for the all-reduce + residual add +
//! RMSNorm of the decode step, between the fused kernel (NOTE [fused
//! norm] in `kernels-gpu/src/fused_norm.rs`) and the unfused sequence
//! (the all-reduce [`decide_all_reduce`] picks, then the norm kernel).

use serde::{Deserialize, Serialize};

use crate::topology::{MAX_DEVICES, Topology};
use crate::types::ElemType;
pub use crate::types::{AllReduceAlgo, NormPath};

/// Message sizes (bytes, inclusive) up to which each of our algorithms is
/// the fastest, per world size (index = world size). Above
/// `two_shot_max_bytes`, NCCL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crossovers {
    /// Up to here the Lamport one-shot (files written before it existed
    /// lack the field and get the defaults).
    #[serde(default = "default_lamport_max_bytes")]
    pub lamport_max_bytes: [usize; MAX_DEVICES + 1],
    /// Then the Lamport two-shot, up to here (files written before it
    /// existed get the defaults).
    #[serde(default = "default_lamport_two_shot_max_bytes")]
    pub lamport_two_shot_max_bytes: [usize; MAX_DEVICES + 1],
    /// Then the one-shot, up to here (per world size).
    pub one_shot_max_bytes: [usize; MAX_DEVICES + 1],
    /// Then the two-shot, up to here (per world size); above it NCCL,
    /// or the push form from `push_min_bytes` on.
    pub two_shot_max_bytes: [usize; MAX_DEVICES + 1],
    /// From here on the push form (past the Lamport forms' ranges, which
    /// come first), `usize::MAX` where it never runs by size (files
    /// written before it existed get the defaults).
    #[serde(default = "default_push_min_bytes")]
    pub push_min_bytes: [usize; MAX_DEVICES + 1],
    /// Reduce-scatter and all-gather: our kernels up to here (the whole
    /// buffer, every shard), NCCL above (files written before it existed
    /// get the defaults).
    #[serde(default = "default_scatter_gather_max_bytes")]
    pub scatter_gather_max_bytes: [usize; MAX_DEVICES + 1],
    /// Reduce-scatter and all-gather: the push form of ours from here on
    /// (the whole buffer), the Lamport form below; `usize::MAX` where it
    /// never runs by size (files written before it existed get the
    /// defaults).
    #[serde(default = "default_scatter_gather_push_min_bytes")]
    pub scatter_gather_push_min_bytes: [usize; MAX_DEVICES + 1],
    /// The fused all-reduce + residual + RMSNorm: up to here where the
    /// all-reduce alone would be a Lamport form (files written before it
    /// existed get the defaults).
    #[serde(default = "default_fused_norm_max_bytes")]
    pub fused_norm_max_bytes: [usize; MAX_DEVICES + 1],
}

impl Default for Crossovers {
    /// Measured with `intranode-bench bench --tune` on 2 and 4 H200
    /// (NVSwitch), kernels v9, 2026-11-21 (docs/PERF_NOTES.md): the
    /// Lamport one-shot (`default_lamport_max_bytes`), then the Lamport
    /// two-shot up to 16 MiB, NCCL above. The one-shot and two-shot limits
    /// (v5 figures; v3 for the unmeasured world sizes) only matter where a
    /// tuning file lowers the Lamport ones: in the v6 and v7 runs the
    /// Lamport forms beat them at every size.
    fn default() -> Self {
        const KIB: usize = 1024;
        const MIB: usize = 1024 * KIB;
        Crossovers {
            lamport_max_bytes: default_lamport_max_bytes(),
            lamport_two_shot_max_bytes: default_lamport_two_shot_max_bytes(),
            push_min_bytes: default_push_min_bytes(),
            scatter_gather_max_bytes: default_scatter_gather_max_bytes(),
            scatter_gather_push_min_bytes: default_scatter_gather_push_min_bytes(),
            fused_norm_max_bytes: default_fused_norm_max_bytes(),
            one_shot_max_bytes: [
                0,
                0,
                512 * KIB,
                256 * KIB,
                512 * KIB,
                128 * KIB,
                128 * KIB,
                128 * KIB,
                128 * KIB,
            ],
            two_shot_max_bytes: [
                0,
                0,
                4 * MIB,
                4 * MIB,
                4 * MIB,
                4 * MIB,
                4 * MIB,
                4 * MIB,
                4 * MIB,
            ],
        }
    }
}

/// The largest message the Lamport one-shot takes on `world` ranks (one
/// slot of its buffers); larger ones run as one-shot.
pub const fn lamport_max_message_bytes(world: usize) -> usize {
    intranode_kernels_gpu::layout::lamport_slot_bytes(world)
}

/// The largest shard (one rank's part) our reduce-scatter and all-gather
/// take on `world` ranks: one slot of the Lamport buffers
/// (`comm::scatter_gather`).
pub const fn scatter_gather_max_shard_bytes(world: usize) -> usize {
    intranode_kernels_gpu::layout::lamport_slot_bytes(world)
}

/// Whether a reduce-scatter or all-gather whose whole buffer (every
/// shard) is `total_bytes` runs on our kernels (else NCCL): up to the
/// crossover `scatter_gather_max_bytes`. Shards past a Lamport slot run
/// as several launches (`comm::scatter_gather`), so any size can.
pub fn scatter_gather_uses_ours(total_bytes: usize, world: usize, crossovers: &Crossovers) -> bool {
    (2..=MAX_DEVICES).contains(&world) && total_bytes <= crossovers.scatter_gather_max_bytes[world]
}

/// Whether a reduce-scatter or all-gather of ours whose whole buffer is
/// `total_bytes` takes the push form (where its rings fit the buffer:
/// `comm::scatter_gather`), not the Lamport one.
pub fn scatter_gather_uses_push(total_bytes: usize, world: usize, crossovers: &Crossovers) -> bool {
    (2..=MAX_DEVICES).contains(&world)
        && total_bytes >= crossovers.scatter_gather_push_min_bytes[world]
}

/// Where the push form of the reduce-scatter and all-gather takes over
/// from the Lamport form: where the Lamport form would need a second
/// launch (a shard past one slot, `comm::scatter_gather::shard_slices`).
/// Measured at 2 ranks (2 H100 and 2 H200) and 4 (4 H100), v16,
/// docs/perf/v16/NOTES.md: at 16 MiB the Lamport form led (0.61-0.77x
/// NCCL against the push form's 0.71-0.97x), at 64 MiB the push form
/// (all-gather 0.70-0.72x NCCL at 2 ranks and 0.94x at 4, against
/// 0.89-1.04x). v17 confirmed it at 4 ranks with one ring (16 MiB: 0.68-
/// 0.77x against 0.88-0.97x; 64 MiB: 0.92-0.95x against 0.96-1.02x) and
/// at 3 (16 MiB: 0.65-0.73x against 0.79-0.88x; 64 MiB: 0.84-0.87x
/// against 0.94-1.02x); the other world sizes take the same rule
/// unmeasured.
fn default_scatter_gather_push_min_bytes() -> [usize; MAX_DEVICES + 1] {
    let mut x = [usize::MAX; MAX_DEVICES + 1];
    for (world, min) in x.iter_mut().enumerate().skip(2) {
        *min = world * scatter_gather_max_shard_bytes(world) + 1;
    }
    x
}

/// Reduce-scatter and all-gather limits (ours up to here, NCCL above).
/// Measured (Lamport form to 32 MiB, push form above, NCCL in the same
/// run):
/// - 2 ranks (v16, docs/perf/v16/NOTES.md): ours at every size to 1 GiB.
///   The push form was 0.70-0.89x NCCL from 64 MiB to 1 GiB on 2 H100 and
///   on 2 H200.
/// - 4 ranks (4 H100, v17, docs/perf/v17/NOTES.md, the default one-ring
///   shape): ours to 256 MiB. Auto's reduce-scatter was 0.77x NCCL at 16
///   MiB, 0.92x at 64 MiB and the push form 0.96x at 256 MiB; the
///   all-gather 0.68x, 0.95x and 0.98x. At 1 GiB the two were even with
///   NCCL (1.00x and 1.01x), so NCCL kept it until v20. Since v20 the
///   all-gather runs on its own rings (`config::PushShape::for_use`):
///   0.96x NCCL at 1 GiB on 4 H100 (docs/perf/v20/NOTES.md), where the
///   reduce-scatter stays even (0.99-1.00x). Ours at every size.
/// - 3 ranks (GPUs 0-2 of the same machine, same call): the Lamport form
///   0.65-0.73x NCCL at 16 MiB, the push form 0.84-0.90x from 64 to 256
///   MiB (v17). At 1 GiB (4 H100, v19 calls B and C,
///   docs/perf/v19/NOTES.md) the push reduce-scatter, doubled, was 0.90x
///   and 0.86x NCCL, and the all-gather 0.87x: ours at every size.
/// - Other world sizes: the Lamport two-shot's crossover with NCCL
///   ([`default_lamport_two_shot_max_bytes`]), as before.
fn default_scatter_gather_max_bytes() -> [usize; MAX_DEVICES + 1] {
    let mut x = default_lamport_two_shot_max_bytes();
    x[2] = usize::MAX;
    x[3] = usize::MAX;
    x[4] = usize::MAX;
    x
}

/// Fused all-reduce + residual + RMSNorm limits: the Lamport one-shot's,
/// and on 4 ranks 1 MiB, past it. The decode stack on 4 H100 (46eeda2,
/// `../shared/results/2026-11-27/h100x4/decode_w4.md`, us per layer over
/// no communication) had the fused one-shot ahead of the Lamport
/// two-shot followed by the norm where the all-reduce alone ran the
/// two-shot: 512 KiB (llama3-8b, batch 64) +13.0 against +19.0, and
/// 1 MiB (70b, batch 64) +19.9 against +25.1; so when v15 moved 512 KiB
/// of the plain all-reduce to the two-shot at 4 ranks, the fused path
/// kept its range. Above 1 MiB the one-shot's traffic, (W - 1) x the
/// message, loses to the two-shot's (4 MiB: 42.5 against 23.6 us).
fn default_fused_norm_max_bytes() -> [usize; MAX_DEVICES + 1] {
    let mut x = default_lamport_max_bytes();
    x[4] = x[4].max(1 << 20).min(lamport_max_message_bytes(4));
    x
}

/// The largest message the push form takes (its kernels index
/// vectors in u32, `intranode_kernels_gpu::math::PUSH_MAX_VECS`); larger ones
/// run as two-shot.
pub const fn push_max_message_bytes() -> usize {
    intranode_kernels_gpu::math::PUSH_MAX_VECS as usize * intranode_kernels_gpu::math::VEC_BYTES
}

/// The largest message the Lamport two-shot takes on `world` ranks;
/// larger ones run as two-shot.
pub const fn lamport_two_shot_max_message_bytes(world: usize) -> usize {
    intranode_kernels_gpu::layout::lamport2_max_bytes(world)
}

/// Lamport one-shot limits, measured with `intranode-bench bench --tune`
/// on 2 and 4 H200 (docs/PERF_NOTES.md, v9): on 2 GPUs it wins up to 1
/// MiB (6.31 us against the Lamport two-shot's 7.59, 0.46 x NCCL; at 4
/// MiB the two are even, 17.56 and 17.50 us), on 4 GPUs up to 256 KiB.
/// On 4 H100 (v14, docs/perf/v14/NOTES.md) it also won at 512 KiB, in
/// three runs: 7.78, 7.80, 7.80 us against the two-shot's 7.90, 7.92,
/// 7.92 (and lost at 1 MiB, 12.5 against 9.7). v15's Lamport two-shot
/// (36924c0, docs/perf/v15/NOTES.md) took 512 KiB back on 4 H100: 7.31
/// us against the one-shot's 7.79 (at 256 KiB 6.10 against 5.52), so 4
/// ranks take 256 KiB again. On 3 H100 the one-shot holds to 512 KiB
/// (v15: 6.27 against 6.24 there, even; 4.75 against 5.38 at 256 KiB;
/// 9.39 against 7.86 at 1 MiB). Other world sizes were not measured and
/// take 64 KiB, since its traffic grows with the world size.
fn default_lamport_max_bytes() -> [usize; MAX_DEVICES + 1] {
    let mut x = [0; MAX_DEVICES + 1];
    for (world, max) in x.iter_mut().enumerate().skip(2) {
        let measured = match world {
            2 => 1 << 20,
            3 => 512 << 10,
            4 => 256 << 10,
            _ => 64 << 10,
        };
        *max = lamport_max_message_bytes(world).min(measured);
    }
    x
}

/// Lamport two-shot limits (v9): on 2 and 4 GPUs it beats everything from
/// the Lamport one-shot's limit up to its largest message, 16 MiB (4 GPUs:
/// 9.55 us at 1 MiB, 0.54 x NCCL; 83.5 us at 16 MiB, 0.86 x; 2 GPUs: 56.1
/// us at 16 MiB, 0.73 x). The unmeasured world sizes keep the 4 MiB of v7,
/// where it led NCCL by a wide margin on 4 GPUs.
fn default_lamport_two_shot_max_bytes() -> [usize; MAX_DEVICES + 1] {
    let mut x = [0; MAX_DEVICES + 1];
    for (world, max) in x.iter_mut().enumerate().skip(2) {
        let measured = match world {
            2 | 4 => 16 << 20,
            _ => 4 << 20,
        };
        *max = lamport_two_shot_max_message_bytes(world).min(measured);
    }
    x
}

/// Where the push form takes over, per world size: on 2 ranks above the
/// Lamport two-shot's 16 MiB (which `by_size` tries first: it took 56.2
/// us at 16 MiB against the push form's 62.3 and NCCL's 76.4), since the
/// push form beat NCCL and every other form from 16 MiB to 1 GiB on 2
/// H200 (issue-28 sweep, 3c13f91 + branch push, docs/PERF_NOTES.md: 317
/// / 343 / 348 GB/s bus bandwidth against NCCL's 272 / 301 / 331 at 64
/// / 256 MiB / 1 GiB). On 3 H100 (v15, `bench --tune` with the default
/// shape) it led NCCL from 16 to 256 MiB: 84.8 / 277.8 / 1026 us against
/// 91.6 / 293.8 / 1085 (0.93-0.95x), where the Lamport two-shot no longer
/// takes the message; 1 GiB was not measured there. On 4 H100, from 64
/// MiB: on its own rings (3 slots of 16 KiB, doubled:
/// `config::PushShape::for_use`) the push form ran 0.96x / 0.98x / 0.98-
/// 0.99x / 1.00x / 1.01x NCCL at 64 / 128 / 256 / 512 MiB / 1 GiB, and
/// 1.01x at 32 MiB and 1.04x at 16 MiB (v19 calls A and B,
/// docs/perf/v19/NOTES.md). With the copies' tails four at a time (v21
/// call A, `prims::grid::copy4`) 32 MiB went from 171.3 to 167.4 us in
/// two turns, and in v21 call D it ran 0.96-0.97x NCCL in three, so the
/// push form takes 32 MiB too (the Lamport two-shot takes 16, NCCL what
/// lies between). Before v19 NCCL kept every size there: the push form
/// trailed it by 2-9 % (docs/perf/v15/NOTES.md). 5 to 8 ranks: not
/// measured, NCCL.
/// `docs/perf/v12/push2.sh` measures 16 to 256 MiB to place the 2-rank
/// crossover; `bench --tune` can move it per machine
/// (`config::TUNING_FILE_ENV`).
fn default_push_min_bytes() -> [usize; MAX_DEVICES + 1] {
    let mut x = [usize::MAX; MAX_DEVICES + 1];
    x[2] = 16 << 20;
    x[3] = 16 << 20;
    x[4] = 32 << 20;
    x
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
    /// Whether this rank can run HCM (`comm::hcm::hcm_plan` found its
    /// place in the cube mesh).
    pub hcm_runnable: bool,
    /// Whether the symmetric buffer holds the push form's rings
    /// (`comm::all_reduce::push_launch`); the size rule picks it only then.
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

/// The algorithm that runs `call`. See the module docs.
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

/// One all-reduce + residual + RMSNorm call, as [`decide_norm`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormCall {
    /// The all-reduce of the call: `rows x hidden` elements, sum
    /// (`op_is_ours`), with the configuration's forced algorithm if any.
    pub all_reduce: AllReduceCall,
    /// Elements of a row (the weight's length).
    pub hidden: usize,
    /// Whether all four buffers (input, residual, weight, output) are
    /// 16-byte aligned.
    pub aligned: bool,
    /// A path the caller or the configuration (`config::NORM_PATH_ENV`) forces.
    pub forced: Option<NormPath>,
}

/// Whether the fused kernel can run `call` at all: an intra-node path
/// whose every rank stores into every peer (fully connected), 2..=8
/// ranks, rows of whole 16-byte vectors, aligned buffers, and a message
/// that fits one slot of the Lamport buffers (the kernel trusts the host
/// on this: a larger one would store past them into the peers' pads).
pub fn fused_norm_runs(call: &NormCall) -> bool {
    let ar = &call.all_reduce;
    let lanes = ar
        .elem
        .map_or(0, |e| intranode_kernels_gpu::math::elems_per_vec(e.bytes()));
    ar.intra
        .is_some_and(|p| p.topology == Topology::FullyConnected)
        && (2..=MAX_DEVICES).contains(&ar.world)
        && call.hidden > 0
        && lanes > 0
        && call.hidden.is_multiple_of(lanes)
        && call.aligned
        && ar.bytes <= lamport_max_message_bytes(ar.world)
}

/// The path of `call`: never the fused kernel where it cannot run
/// ([`fused_norm_runs`]), whatever is forced; otherwise a forced path,
/// else fused where the all-reduce alone would be a Lamport form
/// ([`decide_all_reduce`]: a forced all-reduce algorithm or a tuning file
/// moves both alike) and the message is within
/// [`Crossovers::fused_norm_max_bytes`]: the fused kernel is the Lamport
/// one-shot with the norm folded in, so it pays where the one-shot does
/// and, measured, a little beyond (`default_fused_norm_max_bytes`).
pub fn decide_norm(call: &NormCall, crossovers: &Crossovers) -> NormPath {
    if call.forced == Some(NormPath::Unfused) || !fused_norm_runs(call) {
        return NormPath::Unfused;
    }
    if call.forced == Some(NormPath::Fused) {
        return NormPath::Fused;
    }
    let ar = &call.all_reduce;
    match decide_all_reduce(ar, crossovers) {
        AllReduceAlgo::Lamport => NormPath::Fused,
        AllReduceAlgo::LamportTwoShot
            if ar.bytes
                <= crossovers
                    .fused_norm_max_bytes
                    .get(ar.world)
                    .copied()
                    .unwrap_or(0) =>
        {
            NormPath::Fused
        }
        _ => NormPath::Unfused,
    }
}

/// The size rule: what a call of `bytes` on `world` ranks should use.
///
/// Ours needs a fully connected topology (HCM: the cube mesh) and a world
/// of 2..=8; sizes beyond the symmetric buffer's half are run in chunks,
/// so the buffer size only matters through the crossovers. Every element
/// type is served by every kernel.
fn by_size(
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

#[cfg(test)]
mod tests {

    fn call(bytes: usize, world: usize) -> AllReduceCall {
        AllReduceCall {
            elem: Some(ElemType::Bf16),
            bytes,
            world,
            intra: Some(IntraPath {
                topology: Topology::FullyConnected,
                buffer_bytes: 64 << 20,
                hcm_runnable: true,
                push_runnable: true,
            }),
            op_is_ours: true,
            nccl_available: true,
            forced: None,
        }
    }

    #[test]
    fn the_decision_covers_every_path() {
        let x = Crossovers::default();
        let c = call(4096, 2);
        assert_eq!(decide_all_reduce(&c, &x), AllReduceAlgo::Lamport);
        // No intra-node path, or an op only NCCL has: NCCL, forced or not.
        for forced in [None, Some(AllReduceAlgo::OneShot)] {
            let none = AllReduceCall {
                intra: None,
                forced,
                ..c
            };
            assert_eq!(decide_all_reduce(&none, &x), AllReduceAlgo::Nccl);
            let prod = AllReduceCall {
                op_is_ours: false,
                forced,
                ..c
            };
            assert_eq!(decide_all_reduce(&prod, &x), AllReduceAlgo::Nccl);
            // An element type only NCCL reduces (integers, f64).
            let int = AllReduceCall {
                elem: None,
                forced,
                ..c
            };
            assert_eq!(decide_all_reduce(&int, &x), AllReduceAlgo::Nccl);
        }
        // Above every crossover on 5 ranks (no push form by size): NCCL,
        // or two-shot where NCCL is missing.
        let big = call(1 << 30, 5);
        assert_eq!(decide_all_reduce(&big, &x), AllReduceAlgo::Nccl);
        let no_nccl = AllReduceCall {
            nccl_available: false,
            ..big
        };
        assert_eq!(decide_all_reduce(&no_nccl, &x), AllReduceAlgo::TwoShot);
        // A cube mesh this rank cannot run HCM on goes to NCCL.
        let mut cube = call(4096, 8);
        cube.intra = Some(IntraPath {
            topology: Topology::HybridCubeMesh,
            buffer_bytes: 64 << 20,
            hcm_runnable: false,
            push_runnable: true,
        });
        assert_eq!(decide_all_reduce(&cube, &x), AllReduceAlgo::Nccl);
        cube.intra = cube.intra.map(|p| IntraPath {
            hcm_runnable: true,
            ..p
        });
        assert_eq!(decide_all_reduce(&cube, &x), AllReduceAlgo::Hcm);
        // A forced algorithm wins over the size rule...
        let forced = AllReduceCall {
            forced: Some(AllReduceAlgo::TwoShot),
            ..c
        };
        assert_eq!(decide_all_reduce(&forced, &x), AllReduceAlgo::TwoShot);
        // ... the push form at every size, which the size rule picks only
        // where it was measured ahead: past the Lamport two-shot's 16 MiB
        // on 2 ranks, from 16 MiB on 3 (where the Lamport two-shot stops
        // at 4 MiB), from 32 MiB on 4; and only where its rings fit.
        for bytes in [
            16,
            4096,
            16 << 20,
            (16 << 20) + 16,
            24 << 20,
            32 << 20,
            64 << 20,
            1 << 30,
        ] {
            for world in 2..=MAX_DEVICES {
                let c = call(bytes, world);
                let by_size = (world == 2 && bytes > 16 << 20)
                    || (world == 3 && bytes >= 16 << 20)
                    || (world == 4 && bytes >= 32 << 20);
                assert_eq!(
                    decide_all_reduce(&c, &x) == AllReduceAlgo::Push,
                    by_size,
                    "{bytes} {world}"
                );
                let mut cramped = c;
                cramped.intra = c.intra.map(|p| IntraPath {
                    push_runnable: false,
                    ..p
                });
                assert_ne!(decide_all_reduce(&cramped, &x), AllReduceAlgo::Push);
                let forced = AllReduceCall {
                    forced: Some(AllReduceAlgo::Push),
                    ..c
                };
                assert_eq!(decide_all_reduce(&forced, &x), AllReduceAlgo::Push);
            }
        }
        // Past its u32 indices, the two-shot.
        let at = |bytes| AllReduceCall {
            forced: Some(AllReduceAlgo::Push),
            ..call(bytes, 2)
        };
        let most = push_max_message_bytes();
        assert_eq!(most, 16 << 30);
        assert_eq!(decide_all_reduce(&at(most), &x), AllReduceAlgo::Push);
        assert_eq!(decide_all_reduce(&at(most + 2), &x), AllReduceAlgo::TwoShot);
    }

    #[test]
    fn lamport_forms_never_take_more_than_their_buffers() {
        let x = Crossovers::default();
        let decide = |algo: AllReduceAlgo, bytes: usize, world: usize| {
            let c = AllReduceCall {
                forced: Some(algo),
                ..call(bytes, world)
            };
            decide_all_reduce(&c, &x)
        };
        for world in 2..=MAX_DEVICES {
            let one = lamport_max_message_bytes(world);
            let two = lamport_two_shot_max_message_bytes(world);
            let l = AllReduceAlgo::Lamport;
            let l2 = AllReduceAlgo::LamportTwoShot;
            assert_eq!(decide(l, one, world), l);
            assert_eq!(decide(l, one + 1, world), AllReduceAlgo::OneShot);
            assert_eq!(decide(l2, two, world), l2);
            assert_eq!(decide(l2, two + 1, world), AllReduceAlgo::TwoShot);
            // The kernel's own condition: every shard fits a slot.
            let slot = intranode_kernels_gpu::layout::lamport2_slot_bytes(world);
            assert!(two.div_ceil(16).div_ceil(world) * 16 <= slot);
            assert_eq!(
                decide(AllReduceAlgo::TwoShot, 1 << 30, world),
                AllReduceAlgo::TwoShot
            );
            // The size rule never picks a Lamport form past its buffers,
            // whatever a tuning file says.
            let mut lax = Crossovers::default();
            lax.lamport_max_bytes[world] = usize::MAX;
            let c = call(one + 16, world);
            assert_ne!(decide_all_reduce(&c, &lax), l);
        }
    }

    fn norm(rows: usize, hidden: usize, world: usize) -> NormCall {
        NormCall {
            all_reduce: call(rows * hidden * 2, world),
            hidden,
            aligned: true,
            forced: None,
        }
    }

    #[test]
    fn norm_fuses_where_the_lamport_one_shot_runs() {
        let x = Crossovers::default();
        // Decode shapes on 2 GPUs: hidden 4096 to 16384, 1 to 64 rows of
        // bf16, all within the one-shot's 1 MiB crossover but the largest.
        for hidden in [4096, 8192, 16384] {
            for rows in [1, 8, 32] {
                assert_eq!(decide_norm(&norm(rows, hidden, 2), &x), NormPath::Fused);
            }
        }
        assert_eq!(decide_norm(&norm(64, 8192, 2), &x), NormPath::Fused);
        assert_eq!(decide_norm(&norm(64, 16384, 2), &x), NormPath::Unfused);
        // On 4 GPUs the plain all-reduce of 512 KiB and 1 MiB is the
        // Lamport two-shot; the fused path keeps them (measured ahead
        // there), and stops past 1 MiB.
        for (rows, hidden) in [(64, 4096), (32, 8192), (64, 8192)] {
            let c = norm(rows, hidden, 4);
            assert_eq!(
                decide_all_reduce(&c.all_reduce, &x),
                AllReduceAlgo::LamportTwoShot
            );
            assert_eq!(decide_norm(&c, &x), NormPath::Fused, "{rows} x {hidden}");
        }
        assert_eq!(decide_norm(&norm(64, 16384, 4), &x), NormPath::Unfused);
        // Past the crossover a forced fused path still runs (it fits the
        // buffers); past the buffers nothing forces it.
        let forced = |mut c: NormCall, path| {
            c.forced = Some(path);
            c
        };
        let big = norm(64, 16384, 2);
        assert_eq!(
            decide_norm(&forced(big, NormPath::Fused), &x),
            NormPath::Fused
        );
        let slot = lamport_max_message_bytes(4);
        let huge = norm(slot / (2 * 4096) + 1, 4096, 4);
        assert!(huge.all_reduce.bytes > slot);
        assert_eq!(
            decide_norm(&forced(huge, NormPath::Fused), &x),
            NormPath::Unfused
        );
        let at_slot = norm(slot / (2 * 4096), 4096, 4);
        assert_eq!(
            decide_norm(&forced(at_slot, NormPath::Fused), &x),
            NormPath::Fused
        );
        // Forced unfused wins everywhere.
        let small = norm(1, 4096, 2);
        assert_eq!(
            decide_norm(&forced(small, NormPath::Unfused), &x),
            NormPath::Unfused
        );
        // A forced all-reduce algorithm other than the Lamport one-shot
        // turns fusion off; forcing that one turns it on past the
        // crossover.
        let mut nccl = small;
        nccl.all_reduce.forced = Some(AllReduceAlgo::Nccl);
        assert_eq!(decide_norm(&nccl, &x), NormPath::Unfused);
        let mut lamport = big;
        lamport.all_reduce.forced = Some(AllReduceAlgo::Lamport);
        assert_eq!(decide_norm(&lamport, &x), NormPath::Fused);
    }

    #[test]
    fn norm_falls_back_where_the_fused_kernel_cannot_run() {
        let x = Crossovers::default();
        let ok = NormCall {
            forced: Some(NormPath::Fused),
            ..norm(8, 4096, 4)
        };
        assert!(fused_norm_runs(&ok));
        assert_eq!(decide_norm(&ok, &x), NormPath::Fused);
        let mut cases = Vec::new();
        // Rows that are not whole vectors (8 bf16 or f16, 4 f32).
        cases.push(NormCall { hidden: 777, ..ok });
        cases.push(NormCall { hidden: 4092, ..ok });
        let mut f32_odd = NormCall { hidden: 4094, ..ok };
        f32_odd.all_reduce.elem = Some(ElemType::F32);
        cases.push(f32_odd);
        cases.push(NormCall {
            aligned: false,
            ..ok
        });
        cases.push(NormCall { hidden: 0, ..ok });
        let mut no_intra = ok;
        no_intra.all_reduce.intra = None;
        cases.push(no_intra);
        let mut cube = ok;
        cube.all_reduce.world = 8;
        cube.all_reduce.intra = Some(IntraPath {
            topology: Topology::HybridCubeMesh,
            buffer_bytes: 64 << 20,
            hcm_runnable: true,
            push_runnable: true,
        });
        cases.push(cube);
        for world in [1, MAX_DEVICES + 1] {
            let mut w = ok;
            w.all_reduce.world = world;
            cases.push(w);
        }
        for c in cases {
            assert!(!fused_norm_runs(&c), "{c:?}");
            assert_eq!(decide_norm(&c, &x), NormPath::Unfused, "{c:?}");
        }
        // f32 rows of whole 4-lane vectors fuse.
        let mut f32_ok = NormCall { hidden: 4092, ..ok };
        f32_ok.all_reduce.elem = Some(ElemType::F32);
        f32_ok.all_reduce.bytes = 8 * 4092 * 4;
        assert!(fused_norm_runs(&f32_ok));
    }

    #[test]
    fn norm_path_names_round_trip() {
        for p in [NormPath::Fused, NormPath::Unfused] {
            assert_eq!(NormPath::from_name(p.name()), Some(p));
        }
        assert_eq!(NormPath::from_name("auto"), None);
    }

    #[test]
    fn scatter_gather_takes_what_fits_and_pays() {
        let x = Crossovers::default();
        assert!(scatter_gather_uses_ours(4096, 2, &x));
        // At 2, 3 and 4 ranks ours at every size (the push form past a
        // slot per shard); elsewhere to the Lamport two-shot's crossover.
        assert!(scatter_gather_uses_ours(1 << 30, 2, &x));
        assert!(scatter_gather_uses_ours(4 << 30, 4, &x));
        assert!(scatter_gather_uses_ours(3 << 30, 3, &x));
        assert!(!scatter_gather_uses_ours(1 << 30, 5, &x));
        assert!(!scatter_gather_uses_ours(4096, 1, &x));
        assert!(!scatter_gather_uses_ours(4096, MAX_DEVICES + 1, &x));
        // The Lamport form while every shard fits a slot, the push form
        // past it.
        for world in 2..=MAX_DEVICES {
            let one_slot = world * scatter_gather_max_shard_bytes(world);
            assert!(!scatter_gather_uses_push(one_slot, world, &x));
            assert!(scatter_gather_uses_push(one_slot + 1, world, &x));
        }
        assert!(!scatter_gather_uses_push(1 << 30, 1, &x));
    }

    use super::*;

    const MIB: usize = 1 << 20;

    /// With the Lamport forms capped by a tuning file, one-shot and
    /// two-shot take their ranges again.
    fn x_lowered_sends_mid_sizes_to_one_shot(x: &Crossovers) {
        let mut x = x.clone();
        x.lamport_max_bytes[4] = 4096;
        x.lamport_two_shot_max_bytes[4] = 0;
        let fc = Topology::FullyConnected;
        assert_eq!(
            by_size(256 << 10, 4, fc, 10 * MIB, &x),
            AllReduceAlgo::OneShot
        );
        assert_eq!(
            by_size(4 * MIB, 4, fc, 10 * MIB, &x),
            AllReduceAlgo::TwoShot
        );
    }

    #[test]
    fn small_messages_go_one_shot_large_to_nccl() {
        let x = Crossovers::default();
        let fc = Topology::FullyConnected;
        assert_eq!(by_size(4096, 4, fc, 10 * MIB, &x), AllReduceAlgo::Lamport);
        assert_eq!(
            by_size(256 << 10, 4, fc, 10 * MIB, &x),
            AllReduceAlgo::Lamport
        );
        assert_eq!(
            by_size((256 << 10) + 16, 4, fc, 10 * MIB, &x),
            AllReduceAlgo::LamportTwoShot
        );
        assert_eq!(
            by_size(512 << 10, 3, fc, 10 * MIB, &x),
            AllReduceAlgo::Lamport
        );
        x_lowered_sends_mid_sizes_to_one_shot(&x);
        for world in 2..=MAX_DEVICES {
            assert!(x.lamport_max_bytes[world] <= lamport_max_message_bytes(world));
            assert!(
                x.lamport_two_shot_max_bytes[world] <= lamport_two_shot_max_message_bytes(world)
            );
        }
        assert_eq!(
            by_size(4 * MIB, 4, fc, 10 * MIB, &x),
            AllReduceAlgo::LamportTwoShot
        );
        // 4 ranks: NCCL between the Lamport two-shot and the push form.
        assert_eq!(by_size(24 * MIB, 4, fc, 10 * MIB, &x), AllReduceAlgo::Nccl);
        assert_eq!(by_size(32 * MIB, 4, fc, 10 * MIB, &x), AllReduceAlgo::Push);
        assert_eq!(by_size(64 * MIB, 4, fc, 10 * MIB, &x), AllReduceAlgo::Push);
        assert_eq!(by_size(1 << 30, 4, fc, 10 * MIB, &x), AllReduceAlgo::Push);
        assert_eq!(by_size(1 << 30, 5, fc, 10 * MIB, &x), AllReduceAlgo::Nccl);
    }

    #[test]
    fn cube_meshes_use_hcm_for_small_messages() {
        let x = Crossovers::default();
        let hcm = Topology::HybridCubeMesh;
        assert_eq!(
            by_size(HCM_MAX_BYTES, 8, hcm, 10 * MIB, &x),
            AllReduceAlgo::Hcm
        );
        assert_eq!(
            by_size(HCM_MAX_BYTES + 2, 8, hcm, 10 * MIB, &x),
            AllReduceAlgo::Nccl
        );
        // Never on NVSwitch machines.
        for bytes in [16, 4096, MIB, 64 * MIB] {
            assert_ne!(
                by_size(bytes, 8, Topology::FullyConnected, 10 * MIB, &x),
                AllReduceAlgo::Hcm
            );
        }
    }

    #[test]
    fn unusable_groups_fall_back() {
        let x = Crossovers::default();
        assert_eq!(
            by_size(8, 1, Topology::FullyConnected, MIB, &x),
            AllReduceAlgo::Nccl
        );
        assert_eq!(
            by_size(8, 9, Topology::FullyConnected, MIB, &x),
            AllReduceAlgo::Nccl
        );
        assert_eq!(
            by_size(8, 4, Topology::Unknown, MIB, &x),
            AllReduceAlgo::Nccl
        );
        assert_eq!(
            by_size(8, 4, Topology::FullyConnected, 0, &x),
            AllReduceAlgo::Nccl
        );
    }

    #[test]
    fn names_round_trip() {
        for a in [
            AllReduceAlgo::Lamport,
            AllReduceAlgo::LamportTwoShot,
            AllReduceAlgo::OneShot,
            AllReduceAlgo::TwoShot,
            AllReduceAlgo::Hcm,
            AllReduceAlgo::Push,
            AllReduceAlgo::Nccl,
        ] {
            assert_eq!(AllReduceAlgo::from_name(a.name()), Some(a));
        }
        assert_eq!(AllReduceAlgo::from_name("three-shot"), None);
    }

    #[test]
    fn crossover_file_round_trips() {
        let dir = std::env::temp_dir().join(format!("intranode-xo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("xo.json");
        let mut x = Crossovers::default();
        x.one_shot_max_bytes[4] = 12345;
        // A file from before the Lamport crossovers still reads.
        std::fs::write(
            &path,
            r#"{"one_shot_max_bytes":[0,0,1,1,1,1,1,1,1],"two_shot_max_bytes":[0,0,2,2,2,2,2,2,2]}"#,
        )
        .unwrap();
        let old = crate::config::read_crossovers(&path).unwrap();
        assert_eq!(
            old.lamport_max_bytes,
            Crossovers::default().lamport_max_bytes
        );
        assert_eq!(old.two_shot_max_bytes[8], 2);
        std::fs::write(&path, serde_json::to_string(&x).unwrap()).unwrap();
        assert_eq!(crate::config::read_crossovers(&path).unwrap(), x);
        std::fs::write(&path, "{").unwrap();
        assert!(
            crate::config::read_crossovers(&path)
                .unwrap_err()
                .to_string()
                .contains("parsing")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
