//! The launch shapes of our collectives: how many blocks of how many
//! threads a call gets, and for the push form the rings it lays out in
//! the buffer. Functions of the call's size, the world and the shapes the
//! rendezvous agreed on alone, so every rank launches the same grid.

use intranode_kernels_gpu::layout::MAX_BLOCKS;

use crate::config::{LamportShapes, LaunchShape, MAX_LAMPORT_BLOCKS, PushShape};
use crate::types::AllReduceAlgo;

/// Threads per block of the collective kernels: 16 warps keep enough
/// 16-byte loads in flight per SM.
pub(super) const THREADS: usize = crate::config::MAX_THREADS_PER_BLOCK;
/// Most blocks per launch, per algorithm (at most `MAX_BLOCKS`, the
/// signal-pad layout's bound).
pub(super) const ONE_SHOT_MAX_BLOCKS: usize = 24;
pub(super) const TWO_SHOT_MAX_BLOCKS: usize = 64;
const _: () = assert!(ONE_SHOT_MAX_BLOCKS <= MAX_BLOCKS && TWO_SHOT_MAX_BLOCKS <= MAX_BLOCKS);

/// How one call of the push form is launched (NOTE [push all-reduce] in
/// `kernels-gpu/src/push.rs`): the grid, and the chunk (ring slot) and
/// slots per ring the kernels lay their rings out with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PushLaunch {
    pub blocks: usize,
    pub threads: usize,
    pub chunk_vecs: usize,
    pub slots: usize,
    /// `1..slots` (`intranode_kernels_gpu::index::push_lookahead`).
    pub lookahead: usize,
}

/// The push form's launch for a message of `vecs` 16-byte vectors on
/// `world` ranks with symmetric buffers of `buffer_bytes` (the rings take
/// the whole buffer: the call starts with a barrier), from `shape`
/// (`config::PUSH_LAUNCH_ENV`). A function of its arguments alone, which
/// are the same on every rank (the rendezvous checks the buffer size and
/// the shape), so every rank launches the same grid and rings. `None`
/// when the buffer cannot hold one vector per slot.
///
/// The chunk: at most `shape.max_chunk_bytes` and what the buffer holds
/// for `2 x max_blocks x (world - 1) x slots` slots; below that, small
/// enough that every block gets `slots` tiles where the message allows
/// (else a block would run fewer tiles than its pipeline is deep), but one
/// vector per thread at least; in whole 128-byte lines (NOTE [push chunks
/// in whole lines]). The defaults (`PushShape::default`) come
/// from the shape sweep on 2 H200; the buffer is the allocation, grown
/// to `shape.scratch_bytes` at the rendezvous.
pub(crate) fn push_launch(
    shape: &PushShape,
    vecs: usize,
    world: usize,
    buffer_bytes: usize,
) -> Option<PushLaunch> {
    push_launch_rings(shape, vecs, world, buffer_bytes, 2)
}

/// 16-byte vectors in a 128-byte line.
///
/// NOTE [push chunks in whole lines]: a push chunk is a whole number of
/// 128-byte lines, so every chunk of the message and every ring slot
/// starts on a line, and a warp's 512 contiguous bytes cover 4 lines, not
/// 5. Without it the chunk is whatever the buffer or the message gives:
/// below the chunk cap, `vecs / (W x blocks x slots)` vectors (993 for 8
/// MiB at 2 ranks, 331 for 16 MiB at 4), and at 4 ranks the
/// reduce-scatter's 33 MiB of rings cut it to 2730 vectors, 32 bytes past
/// a line. On 4 H100, in two turns (2026-11-27, 52ec928), whole lines
/// took the 4-rank push all-reduce from 103.2 to 98.7-99.1 us at 16 MiB
/// and from 174.3 to 171.1-171.9 at 32 MiB, and the 2-rank one from
/// 43.0-43.1 to 42.1-42.4 at 8 MiB; the sizes whose chunk was already
/// whole did not move, nor did 16 MiB at 2 ranks (1986 vectors to 1992).
/// The 4-rank all-gather did not gain from it: its 1 GiB was slow on 42.6
/// KiB chunks for another reason (`config::PushShape::for_use` gives it
/// 32 KiB).
pub(super) const LINE_VECS: usize = 8;

/// [`push_launch`] for kernels with `rings` rings per block and peer in
/// the buffer: the all-reduce has two (reduce-scatter and all-gather),
/// the reduce-scatter and all-gather of NOTE [push reduce-scatter and
/// all-gather] one each, so their chunks may be twice as long.
pub(crate) fn push_launch_rings(
    shape: &PushShape,
    vecs: usize,
    world: usize,
    buffer_bytes: usize,
    rings: usize,
) -> Option<PushLaunch> {
    use intranode_kernels_gpu::index::{PUSH_MAX_TILE_VECS, VEC_BYTES};
    let peers = world.checked_sub(1).filter(|&p| p > 0)?;
    let slots = shape.slots.max(2);
    let max_blocks = shape.max_blocks.clamp(1, MAX_BLOCKS);
    let threads = shape.threads.clamp(32, THREADS);
    let fit = buffer_bytes / VEC_BYTES / (rings.max(1) * max_blocks * peers * slots);
    let most = (shape.max_chunk_bytes / VEC_BYTES)
        .min(fit)
        .min(PUSH_MAX_TILE_VECS as usize / world);
    if most == 0 {
        return None;
    }
    // Whole 128-byte lines (NOTE [push chunks in whole lines]) where
    // there is room for one.
    let most = if most >= LINE_VECS {
        most - most % LINE_VECS
    } else {
        most
    };
    let wanted = vecs
        .div_ceil(world * max_blocks * slots)
        .max(threads)
        .next_multiple_of(LINE_VECS);
    let chunk_vecs = wanted.min(most);
    let tiles = vecs.div_ceil(world * chunk_vecs);
    Some(PushLaunch {
        blocks: tiles.clamp(1, max_blocks),
        threads,
        chunk_vecs,
        slots,
        lookahead: intranode_kernels_gpu::index::push_lookahead(
            slots as u32,
            shape.lookahead as u32,
        ) as usize,
    })
}

/// Blocks for a launch over `vecs` 16-byte vectors.
pub(super) fn blocks_for(algo: AllReduceAlgo, vecs: usize, world: usize) -> usize {
    let (work, cap) = match algo {
        AllReduceAlgo::TwoShot | AllReduceAlgo::LamportTwoShot => {
            (vecs.div_ceil(world.max(1)), TWO_SHOT_MAX_BLOCKS)
        }
        _ => (vecs, ONE_SHOT_MAX_BLOCKS),
    };
    work.div_ceil(THREADS).clamp(1, cap)
}

/// How the Lamport one-shot and two-shot are launched.
///
/// NOTE [lamport launch shape]: one 16-byte vector per thread where the
/// message allows, spread over every SM: threads per block are the work
/// per SM rounded up to a power of two between 64 and 512, and there are
/// as many blocks as SMs at most. Measured on 4 and 2 H200 (132 SMs,
/// 2026-11-21, 74fb30a, a sweep of shapes): against the fixed 24
/// (one-shot) or 64 (two-shot) blocks of 512 threads, the Lamport one-shot went from
/// 4.28 to 3.53 us at 16 KiB and from 6.99 to 6.0 us at 256 KiB on 4 GPUs,
/// and from 8.08 to 6.40 us at 1 MiB on 2; the two-shot from 32.1 to 29.9
/// us at 4 MiB on 4. Each rank polls its own buffer, so small blocks on
/// many SMs poll and store in parallel, and large messages want every
/// thread busy with one vector rather than a few threads looping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LamportLaunch {
    /// SMs the launch spreads over: the GPU's, or the rank's share of it
    /// where ranks share one (`residency::Residency::launch_sms`).
    pub sms: usize,
    /// Shapes fixed by `config::LAMPORT_LAUNCH_ENV`.
    pub fixed: LamportShapes,
    /// Blocks at most, fixed shapes included
    /// (`residency::Residency::max_blocks`).
    pub max_blocks: usize,
}

impl LamportLaunch {
    /// The rule for a GPU of `sms` SMs, with the shapes `fixed` overrides.
    pub fn new(sms: usize, fixed: LamportShapes) -> Self {
        LamportLaunch {
            sms: sms.max(1),
            fixed,
            max_blocks: usize::MAX,
        }
    }

    /// The same rule, never above `max_blocks` blocks (NOTE
    /// [co-residency] in `residency.rs`).
    pub fn capped(self, max_blocks: usize) -> Self {
        LamportLaunch {
            max_blocks: max_blocks.max(1),
            ..self
        }
    }

    /// Blocks and threads of a Lamport launch over `vecs` 16-byte vectors.
    pub(crate) fn shape_for(
        &self,
        algo: AllReduceAlgo,
        vecs: usize,
        world: usize,
    ) -> (usize, usize) {
        let (work, fixed) = match algo {
            AllReduceAlgo::LamportTwoShot => (vecs.div_ceil(world.max(1)), self.fixed.two_shot),
            _ => (vecs, self.fixed.one_shot),
        };
        let shape = fixed.unwrap_or_else(|| LaunchShape {
            max_blocks: self.sms.min(MAX_LAMPORT_BLOCKS),
            threads: work
                .div_ceil(self.sms)
                .next_power_of_two()
                .clamp(64, THREADS),
        });
        (
            work.div_ceil(shape.threads)
                .clamp(1, shape.max_blocks.clamp(1, self.max_blocks)),
            shape.threads,
        )
    }
}

/// Blocks and threads of a launch over `vecs` 16-byte vectors (one
/// chunk) of every form but the push form ([`push_launch`]).
pub(super) fn launch_shape(
    algo: AllReduceAlgo,
    vecs: usize,
    world: usize,
    lamport: &LamportLaunch,
) -> (usize, usize) {
    match algo {
        AllReduceAlgo::Lamport | AllReduceAlgo::LamportTwoShot => {
            lamport.shape_for(algo, vecs, world)
        }
        // The barrier forms walk their vectors with the grid's stride, so
        // fewer blocks only loop more (NOTE [co-residency]).
        _ => (
            blocks_for(algo, vecs, world).min(lamport.max_blocks),
            THREADS,
        ),
    }
}
