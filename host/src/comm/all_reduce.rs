// (Over 700 lines, 892: a quarter of them are tests; the launch shapes (push,
// Lamport, block counts) and the launches that use them are one
// decision, and the tests pin the two together. If it grows, the shapes
// (up to `most_bytes`) are the seam for a `launch_shape.rs`.)

//! `IntraNodeComm::all_reduce` and `barrier`: typed launches of the Rust
//! kernels on the caller's stream.
//!
//! NOTE [IntraNodeComm stream semantics] (from the seed): everything is
//! enqueued on the caller's stream; there is no communication stream and
//! no host synchronization on the path, so calls are CUDA-graph capturable
//! and cost the host one launch each. The kernels keep their own call
//! count in the signal pad (NOTE [double buffering] in
//! `kernels-gpu/src/all_reduce.rs`).

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use intranode_kernels_gpu::entries::{Barrier, Collective};
use intranode_kernels_gpu::layout::{AllReduceParams, BarrierParams, MAX_BLOCKS, MAX_RANKS};

use super::{IntraNodeComm, Launch};
use crate::algo::{
    AllReduceAlgo, AllReduceCall, IntraPath, decide_all_reduce, lamport_max_message_bytes,
    lamport_two_shot_max_message_bytes, push_max_message_bytes,
};
use crate::config::{LamportShapes, LaunchShape, MAX_LAMPORT_BLOCKS, PushShape, PushUse};
use crate::error::{Error, Result};
use crate::kernels::{Grid, KernelKey};
use crate::types::{DType, ElemType};
use crate::work::Work;

pub use crate::types::ReduceOp;

/// Threads per block of the collective kernels: 16 warps keep enough
/// 16-byte loads in flight per SM.
pub(super) const THREADS: usize = crate::config::MAX_THREADS_PER_BLOCK;
/// Most blocks per launch, per algorithm (at most `MAX_BLOCKS`, the
/// signal-pad layout's bound).
const ONE_SHOT_MAX_BLOCKS: usize = 24;
const TWO_SHOT_MAX_BLOCKS: usize = 64;
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
    /// `1..slots` (`intranode_kernels_gpu::math::push_lookahead`).
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
/// from the issue-28 sweep on 2 H200; the buffer is the allocation, grown
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
/// 5. Before v20 the chunk was whatever the buffer or the message gave:
/// below the chunk cap, `vecs / (W x blocks x slots)` vectors (993 for 8
/// MiB at 2 ranks, 331 for 16 MiB at 4), and at 4 ranks the
/// reduce-scatter's 33 MiB of rings cut it to 2730 vectors, 32 bytes past
/// a line. On 4 H100, in two turns (v20 calls B and C,
/// docs/perf/v20/NOTES.md), whole lines took the 4-rank push all-reduce
/// from 103.2 to 98.7-99.1 us at 16 MiB and from 174.3 to 171.1-171.9 at
/// 32 MiB, and the 2-rank one from 43.0-43.1 to 42.1-42.4 at 8 MiB; the
/// sizes whose chunk was already whole did not move, nor did 16 MiB at 2
/// ranks (1986 vectors to 1992). The 4-rank all-gather did not gain from
/// it: its 1 GiB was slow on 42.6 KiB chunks for another reason
/// (`config::PushShape::for_use` gives it 32 KiB).
const LINE_VECS: usize = 8;

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
    use intranode_kernels_gpu::math::{PUSH_MAX_TILE_VECS, VEC_BYTES};
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
        lookahead: intranode_kernels_gpu::math::push_lookahead(slots as u32, shape.lookahead as u32)
            as usize,
    })
}

/// Blocks for a launch over `vecs` 16-byte vectors.
fn blocks_for(algo: AllReduceAlgo, vecs: usize, world: usize) -> usize {
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
/// docs/PERF_NOTES.md, v7 shape sweep): against the fixed 24 (one-shot) or
/// 64 (two-shot) blocks of 512 threads, the Lamport one-shot went from
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
fn launch_shape(
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

/// The table's family of `algo` (`kernels-gpu/src/entries.rs`,
/// `Collective`): `None` for NCCL's algorithm.
const fn family(algo: AllReduceAlgo) -> Option<Collective> {
    match algo {
        AllReduceAlgo::OneShot => Some(Collective::OneShot),
        AllReduceAlgo::TwoShot => Some(Collective::TwoShot),
        AllReduceAlgo::Hcm => Some(Collective::Hcm),
        AllReduceAlgo::Lamport => Some(Collective::Lamport),
        AllReduceAlgo::LamportTwoShot => Some(Collective::LamportTwoShot),
        AllReduceAlgo::Push => Some(Collective::Push),
        AllReduceAlgo::Nccl => None,
    }
}

/// The kernel of `algo` for `elem` on `world` ranks: `None` for NCCL's
/// algorithm and for worlds without a kernel (HCM on an odd number of
/// ranks, more than `MAX_RANKS`).
fn collective_kernel(
    algo: AllReduceAlgo,
    elem: ElemType,
    world: usize,
) -> Option<KernelKey<(AllReduceParams,)>> {
    family(algo)?.key(elem.into(), world)
}

/// The most bytes `algo` takes in one call on `world` ranks, where the
/// kernels trust the host on it (`decide_all_reduce` hands larger messages
/// to another form): the Lamport forms' buffers, the push form's u32
/// indices.
fn most_bytes(algo: AllReduceAlgo, world: usize) -> usize {
    match algo {
        AllReduceAlgo::Lamport => lamport_max_message_bytes(world),
        AllReduceAlgo::LamportTwoShot => lamport_two_shot_max_message_bytes(world),
        AllReduceAlgo::Push => push_max_message_bytes(),
        _ => usize::MAX,
    }
}

impl IntraNodeComm {
    /// The decision for a call of `elems` elements of `elem` that names
    /// `algo` (the entry points of this type that take an explicit
    /// algorithm: tests and the benchmark): [`decide_all_reduce`] with
    /// `algo` forced, so a Lamport form hands messages larger than its
    /// buffers to its barrier twin. `Communicator` decides itself and
    /// calls the `_decided` functions, which do not decide again.
    pub fn resolve(&self, algo: AllReduceAlgo, elem: ElemType, elems: usize) -> AllReduceAlgo {
        let call = AllReduceCall {
            elem: Some(elem),
            bytes: elems.saturating_mul(elem.bytes()),
            world: self.world(),
            intra: Some(self.intra_path()),
            op_is_ours: true,
            // Not consulted for a forced algorithm: this communicator has
            // no NCCL of its own (`Communicator` holds it).
            nccl_available: false,
            forced: Some(algo),
        };
        decide_all_reduce(&call, &self.crossovers)
    }

    /// This group's intra-node path, as [`decide_all_reduce`] sees it.
    pub(crate) fn intra_path(&self) -> IntraPath {
        IntraPath {
            topology: self.topology,
            buffer_bytes: self.buffer_bytes,
            hcm_runnable: self.hcm_plan.is_ok(),
            push_runnable: self.push_launch_for(PushUse::AllReduce, 1).is_some(),
        }
    }

    /// Bytes of each half of the symmetric buffer (calls alternate halves),
    /// a multiple of 16: the most one kernel launch reduces.
    pub fn half_buffer_bytes(&self) -> usize {
        (self.buffer_bytes / 2) & !15
    }

    /// Bytes of the symmetric buffer the configuration asked for
    /// (`config::BUFFER_BYTES_ENV`), which every form but the push form
    /// works in; the allocation (`symm().buffer_bytes()`) may be larger,
    /// for the push form's rings (`config::PushShape::scratch_bytes`).
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// Bytes a push launch in `shape` (a [`PushShape::for_use`] result)
    /// lays its rings out in: its own scratch, or the configured buffer
    /// where that is larger, within the allocation. The allocation holds
    /// the most any use takes (`PushShape::scratch_bytes_for`): at 4 ranks
    /// the 76 MiB of the all-reduce's and the all-gather's rings, where
    /// the reduce-scatter keeps to the default 33 MiB. Given the 76 MiB,
    /// its chunks grew from 42 to 64 KiB and it lost 2-3 % at 64 MiB on 4
    /// H100 (v19 call B and v20 calls A and B, docs/perf/v19/NOTES.md and
    /// docs/perf/v20/NOTES.md).
    pub(crate) fn push_ring_bytes(&self, shape: &PushShape) -> usize {
        self.buffer_bytes
            .max(shape.scratch_bytes)
            .min(self.symm.buffer_bytes())
    }

    /// The push launch of `what` over `vecs` 16-byte vectors (for the
    /// reduce-scatter and all-gather, all W shards): the shape
    /// `PushShape::for_use` gives the use on this world, its rings (two
    /// for the all-reduce, one for the others) laid out in
    /// [`push_ring_bytes`](Self::push_ring_bytes). `None` where they do
    /// not fit.
    pub(crate) fn push_launch_for(&self, what: PushUse, vecs: usize) -> Option<PushLaunch> {
        let mut shape = self.push_shape.for_use(what, self.world());
        // The push kernels take their tiles and rings from the grid they
        // get, so a shared GPU's cap only means more tiles per block.
        shape.max_blocks = shape.max_blocks.min(self.max_blocks());
        let ring_bytes = self.push_ring_bytes(&shape);
        match what {
            PushUse::AllReduce => push_launch(&shape, vecs, self.world(), ring_bytes),
            PushUse::ReduceScatter | PushUse::AllGather => {
                push_launch_rings(&shape, vecs, self.world(), ring_bytes, 1)
            }
        }
    }

    /// `output = op(input of every rank)`, on `stream`, with `algo` as
    /// [`resolve`](Self::resolve) decides it. `input` and `output` may be
    /// the same buffer ([`all_reduce_in_place`]). Messages larger than
    /// half the symmetric buffer run in one launch that walks them chunk
    /// by chunk.
    ///
    /// [`all_reduce_in_place`]: Self::all_reduce_in_place
    pub fn all_reduce<T: DType>(
        &self,
        input: &impl DevicePtr<T>,
        output: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        algo: AllReduceAlgo,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let algo = self.resolve(algo, T::ELEM, input.len());
        self.all_reduce_decided(input, output, op, algo, stream)
    }

    /// [`all_reduce`](Self::all_reduce) with `algo` as decided
    /// (`Communicator` decides once, through [`decide_all_reduce`]).
    pub(crate) fn all_reduce_decided<T: DType>(
        &self,
        input: &impl DevicePtr<T>,
        output: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        algo: AllReduceAlgo,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let elems = input.len();
        if output.len() != elems {
            return Err(Error::InvalidArgument(format!(
                "all_reduce on rank {}: input has {elems} elements, output {}",
                self.rank(),
                output.len()
            )));
        }
        self.with_buffers(
            stream,
            |bufs| {
                let i = bufs.input(input, "all-reduce input")?;
                Ok((i, bufs.output(output, "all-reduce output")?))
            },
            // SAFETY: both pointers come from live device buffers of
            // `elems` elements that the call's buffers keep ordered with
            // `stream` (NOTE [capture and event tracking] in `tracked.rs`).
            |(i, o)| unsafe { self.all_reduce_raw(i, o, elems, T::ELEM, op, algo, stream) },
        )
    }

    /// In-place all-reduce of `buf` on `stream`, with `algo` as
    /// [`resolve`](Self::resolve) decides it.
    pub fn all_reduce_in_place<T: DType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        algo: AllReduceAlgo,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let algo = self.resolve(algo, T::ELEM, buf.len());
        self.all_reduce_in_place_decided(buf, op, algo, stream)
    }

    /// [`all_reduce_in_place`](Self::all_reduce_in_place) with `algo` as
    /// decided.
    pub(crate) fn all_reduce_in_place_decided<T: DType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        algo: AllReduceAlgo,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let elems = buf.len();
        self.with_buffers(
            stream,
            |bufs| bufs.output(buf, "all-reduce buffer"),
            // SAFETY: `ptr` is a live device buffer of `elems` elements.
            |ptr| unsafe { self.all_reduce_raw(ptr, ptr, elems, T::ELEM, op, algo, stream) },
        )
    }

    /// All-reduce over raw device addresses with `algo` as decided
    /// ([`decide_all_reduce`]; not decided again here: an algorithm that
    /// cannot take the call, a Lamport form past its buffers, is an
    /// error).
    ///
    /// # Safety
    /// `input` and `output` must each be device memory of this comm's
    /// device holding `elems` elements of `elem` (they may be equal, not
    /// otherwise overlapping), valid until the stream passes the call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_reduce_raw(
        &self,
        input: u64,
        output: u64,
        elems: usize,
        elem: ElemType,
        op: ReduceOp,
        algo: AllReduceAlgo,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let build = || {
            let launch = self.all_reduce_launch(algo, input, output, elems, elem, op)?;
            self.check_all_reduce_call(elems, elem, op, algo)?;
            self.increment_usage_counter();
            Ok(launch)
        };
        // SAFETY: the caller vouches for input and output, the peers'
        // buffers and pads live as long as `self`; `all_reduce_launch`
        // keeps the grid and the message within what the kernel takes (see
        // there).
        unsafe { self.run("all_reduce", stream, build) }
    }

    /// The launch of one all-reduce with `algo` (as decided): the kernel
    /// (looked up once, here), the grid and the parameter block; `None`
    /// for an empty call. An error where `algo` cannot take the call.
    ///
    /// The grid: `blocks_for` and `push_launch` stay within MAX_BLOCKS
    /// for the kernels that count blocks in the pad (the Lamport ones do
    /// not); a push launch has chunks of a vector at least, 2 slots at
    /// least, rings inside the buffer and at least 32 threads
    /// (`push_launch`); the Lamport forms and the push form get no more
    /// than `most_bytes`.
    pub(super) fn all_reduce_launch(
        &self,
        algo: AllReduceAlgo,
        input: u64,
        output: u64,
        elems: usize,
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<Option<Launch<(AllReduceParams,)>>> {
        let key = collective_kernel(algo, elem, self.world()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "all_reduce on rank {}: no intra-node kernel for {} on {} ranks (nccl runs through Communicator)",
                self.rank(),
                algo.name(),
                self.world()
            ))
        })?;
        let bytes = elems.saturating_mul(elem.bytes());
        if bytes > most_bytes(algo, self.world()) {
            return Err(Error::InvalidArgument(format!(
                "all_reduce on rank {}: {bytes} bytes exceed the {} bytes {} takes on {} ranks (decide_all_reduce hands such calls to another form)",
                self.rank(),
                most_bytes(algo, self.world()),
                algo.name(),
                self.world()
            )));
        }
        let mut params = self.params_template();
        // Elements one launch's grid is sized for: one chunk (the kernel
        // walks larger messages chunk by chunk, `run_chunks`); the push
        // form walks the whole message through its rings (below).
        let mut chunk_elems = self.half_buffer_bytes() / elem.bytes();
        if algo == AllReduceAlgo::Hcm {
            let plan = self.hcm_plan().map_err(|why| {
                Error::InvalidArgument(format!("all_reduce on rank {}: {why}", self.rank()))
            })?;
            params.hcm_group_mask = plan.group_mask;
            params.hcm_relay = plan.relay as u32;
            params.hcm_relay_first = u32::from(plan.relay_first);
            chunk_elems = intranode_kernels_gpu::math::hcm_chunk_elems(
                self.half_buffer_bytes(),
                elem.bytes(),
            );
        }
        let vecs_total = elems.div_ceil(intranode_kernels_gpu::math::elems_per_vec(elem.bytes()));
        let push = if algo == AllReduceAlgo::Push {
            let launch = self.push_launch_for(PushUse::AllReduce, vecs_total);
            chunk_elems = if launch.is_some() { elems.max(1) } else { 0 };
            launch
        } else {
            None
        };
        if chunk_elems == 0 {
            return Err(Error::InvalidArgument(format!(
                "all_reduce on rank {}: the {}-byte symmetric buffer holds no chunk for {}",
                self.rank(),
                self.symm().buffer_bytes(),
                algo.name()
            )));
        }
        if elems == 0 {
            return Ok(None);
        }
        params.op = op.code();
        params.input = input;
        params.output = output;
        params.elems = elems as u64;
        if let Some(in_bufs) = self.symmetric_input(algo, input, bytes) {
            params.in_bufs = in_bufs;
        }
        let (blocks, threads) = match push {
            Some(launch) => {
                params.push_chunk_vecs = launch.chunk_vecs as u32;
                params.push_slots = launch.slots as u32;
                params.push_lookahead = launch.lookahead as u32;
                (launch.blocks, launch.threads)
            }
            None => {
                let vecs = elems
                    .min(chunk_elems)
                    .div_ceil(intranode_kernels_gpu::math::elems_per_vec(elem.bytes()));
                launch_shape(algo, vecs, self.world(), self.lamport_launch())
            }
        };
        Ok(Some(Launch {
            key,
            grid: Grid::new(blocks, threads),
            args: (params,),
        }))
    }

    /// Every rank's copy of the `bytes` at `input`, when `algo` reads a
    /// symmetric input in place (one-shot, two-shot) and `input` lies in a
    /// symmetric buffer the user allocated, 16-byte aligned (NOTE
    /// [symmetric input] in `kernels-gpu/src/all_reduce.rs`).
    fn symmetric_input(
        &self,
        algo: AllReduceAlgo,
        input: u64,
        bytes: usize,
    ) -> Option<[u64; MAX_RANKS]> {
        match algo {
            AllReduceAlgo::OneShot | AllReduceAlgo::TwoShot => {
                self.user_buffers.peer_addresses(input, bytes)
            }
            _ => None,
        }
    }

    /// Whether an all-reduce of `elems` elements of `elem` at `input` with
    /// `algo` (as resolved) reads the peers' inputs in place.
    pub fn reads_input_in_place(
        &self,
        algo: AllReduceAlgo,
        input: u64,
        elems: usize,
        elem: ElemType,
    ) -> bool {
        let algo = self.resolve(algo, elem, elems);
        self.symmetric_input(algo, input, elems.saturating_mul(elem.bytes()))
            .is_some()
    }

    /// A GPU barrier among `ranks` (all ranks when `None`) on `stream`:
    /// returns at once; the stream waits until every listed rank's stream
    /// reached its barrier. A rank that never arrives turns into
    /// [`Error::PeerTimeout`] on the next call, not a hung GPU.
    pub fn barrier(&self, ranks: Option<&[usize]>, stream: &Arc<CudaStream>) -> Result<Work> {
        self.health().check()?;
        let mut mask = 0u32;
        match ranks {
            None => mask = (1u32 << self.world()) - 1,
            Some(list) => {
                for &r in list {
                    if r >= self.world() {
                        return Err(Error::InvalidArgument(format!(
                            "barrier on rank {}: rank {r} is outside the world of {}",
                            self.rank(),
                            self.world()
                        )));
                    }
                    mask |= 1 << r;
                }
                if mask & (1 << self.rank()) == 0 {
                    return Err(Error::InvalidArgument(format!(
                        "barrier on rank {}: the calling rank is not in {list:?}",
                        self.rank()
                    )));
                }
            }
        }
        let template = self.params_template();
        let params = BarrierParams {
            pads: template.pads,
            rank_mask: mask,
            rank: self.rank() as u32,
            timeout_ns: template.timeout_ns,
            error: template.error,
            abort: template.abort,
        };
        let key = crate::kernels::present(Barrier::Barrier.key(), || "barrier".into())?;
        let launch = Launch {
            key,
            grid: Grid::new(1, MAX_RANKS),
            args: (params,),
        };
        // SAFETY: `barrier` takes one BarrierParams, one block of
        // MAX_RANKS threads; the pads live as long as `self`.
        unsafe { self.launch(Some(launch), stream) }
    }

    /// The parameters every launch shares: peers' buffers and pads, the
    /// wait bound, the error word.
    pub(super) fn params_template(&self) -> AllReduceParams {
        let mut p = AllReduceParams::default();
        let symm = self.symm();
        for (dst, src) in p.bufs.iter_mut().zip(symm.buffer_ptrs()) {
            *dst = *src;
        }
        for (dst, src) in p.pads.iter_mut().zip(symm.signal_pad_ptrs()) {
            *dst = *src;
        }
        p.half_bytes = self.half_buffer_bytes() as u64;
        p.timeout_ns = u64::try_from(self.barrier_timeout().as_nanos()).unwrap_or(u64::MAX);
        p.error = self.health().device_ptr();
        // NOTE [abandoned waits] in `kernels-gpu/src/sync.rs`.
        p.abort = p.pads[self.rank()] + (intranode_kernels_gpu::layout::ABORT_WORD * 4) as u64;
        p.rank = self.rank() as u32;
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_has_its_kernels() {
        for elem in ElemType::ALL {
            for world in 2..=MAX_RANKS {
                for algo in [
                    AllReduceAlgo::Lamport,
                    AllReduceAlgo::LamportTwoShot,
                    AllReduceAlgo::OneShot,
                    AllReduceAlgo::TwoShot,
                    AllReduceAlgo::Push,
                ] {
                    assert!(collective_kernel(algo, elem, world).is_some());
                }
                let hcm = collective_kernel(AllReduceAlgo::Hcm, elem, world);
                assert_eq!(hcm.is_some(), [4, 6, 8].contains(&world), "hcm w{world}");
            }
            assert_eq!(collective_kernel(AllReduceAlgo::OneShot, elem, 1), None);
            assert_eq!(
                collective_kernel(AllReduceAlgo::OneShot, elem, MAX_RANKS + 1),
                None
            );
        }
        assert_eq!(
            collective_kernel(AllReduceAlgo::Nccl, ElemType::F32, 2),
            None
        );
        let k = collective_kernel(AllReduceAlgo::Hcm, ElemType::Bf16, 6);
        assert_eq!(k.map(|k| k.to_string()), Some("hcm_bf16_w6".into()));
        let k = collective_kernel(AllReduceAlgo::Push, ElemType::F32, 8);
        assert_eq!(k.map(|k| k.to_string()), Some("push_f32_w8".into()));
    }

    #[test]
    fn lamport_launch_follows_the_measured_rule() {
        let l = LamportLaunch::new(132, LamportShapes::parse("").unwrap());
        let one = AllReduceAlgo::Lamport;
        let two = AllReduceAlgo::LamportTwoShot;
        // The shapes that won the v7 sweep on 132-SM H200s.
        assert_eq!(l.shape_for(one, 1024, 4), (16, 64));
        assert_eq!(l.shape_for(one, 16384, 4), (128, 128));
        assert_eq!(l.shape_for(one, 65536, 2), (128, 512));
        assert_eq!(l.shape_for(two, 65536, 4), (128, 128));
        assert_eq!(l.shape_for(two, 262144, 4), (128, 512));
        // Never more blocks than SMs, never an empty grid.
        assert_eq!(l.shape_for(one, 1 << 20, 2), (132, 512));
        assert_eq!(l.shape_for(one, 0, 2), (1, 64));
        assert_eq!(l.shape_for(two, 1, 8), (1, 64));
        for sms in [1, 8, 132, 5000] {
            let l = LamportLaunch::new(sms, LamportShapes::parse("").unwrap());
            for vecs in [1usize, 63, 64, 1000, 1 << 16, 1 << 22] {
                for world in 2..=8 {
                    for algo in [one, two] {
                        let (b, t) = l.shape_for(algo, vecs, world);
                        assert!((1..=MAX_LAMPORT_BLOCKS.min(sms)).contains(&b));
                        assert!(t.is_power_of_two() && (64..=THREADS).contains(&t));
                    }
                }
            }
        }
    }

    #[test]
    fn lamport_launch_env_fixes_shapes_or_says_why_not() {
        let l = LamportLaunch::new(
            132,
            LamportShapes::parse(" lamport-two-shot=128x256 ").unwrap(),
        );
        assert_eq!(l.fixed.one_shot, None);
        let fixed = LaunchShape {
            max_blocks: 128,
            threads: 256,
        };
        assert_eq!(l.fixed.two_shot, Some(fixed));
        assert_eq!(
            l.shape_for(AllReduceAlgo::LamportTwoShot, 4 << 20, 4),
            (128, 256)
        );
        assert_eq!(
            l.shape_for(AllReduceAlgo::LamportTwoShot, 1024, 4),
            (1, 256)
        );
        let l = LamportLaunch::new(
            132,
            LamportShapes::parse("lamport=24x512,lamport-two-shot=64x512").unwrap(),
        );
        assert_eq!(l.shape_for(AllReduceAlgo::Lamport, 1 << 16, 4), (24, 512));
        for bad in [
            "lamport",
            "lamport=12",
            "lamport=0x256",
            "lamport=2000x256",
            "lamport=12x48",
            "lamport=12x2048",
            "lamport=12x1024",
            "lamport=ax64",
            "one-shot=12x64",
        ] {
            let err = LamportShapes::parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn block_counts_stay_inside_the_pad_layout() {
        for world in 2..=8 {
            for vecs in [1usize, 7, 512, 513, 1 << 20, 1 << 30] {
                for algo in [AllReduceAlgo::OneShot, AllReduceAlgo::TwoShot] {
                    let b = blocks_for(algo, vecs, world);
                    assert!(
                        (1..=MAX_BLOCKS).contains(&b),
                        "{algo:?} {vecs} {world}: {b}"
                    );
                }
            }
        }
        assert_eq!(blocks_for(AllReduceAlgo::OneShot, 512, 4), 1);
        assert_eq!(blocks_for(AllReduceAlgo::OneShot, 513, 4), 2);
    }

    #[test]
    fn push_launch_fits_the_buffer_and_the_kernels() {
        use intranode_kernels_gpu::math::{
            PUSH_MAX_TILE_VECS, push_block_tiles, push_ring_bytes, push_tiles,
        };
        let shapes = [
            PushShape::default(),
            PushShape::parse("blocks=64,threads=256,chunk=1048576,slots=16").unwrap(),
            PushShape::parse("blocks=1,threads=32,chunk=16,slots=2").unwrap(),
            PushShape::parse("blocks=160,chunk=262144,slots=4").unwrap(),
            PushShape::parse("blocks=264,threads=256").unwrap(),
            PushShape::parse("blocks=132,chunk=131072,slots=3,lookahead=2").unwrap(),
        ];
        for (shape, rings) in shapes.iter().flat_map(|s| [(s, 1usize), (s, 2)]) {
            for world in 2..=8 {
                for buffer in [4096usize, 10 << 20, 256 << 20] {
                    for vecs in [1usize, 7, 512, 4096, 1 << 20, 1 << 26, 1 << 30] {
                        let Some(l) = push_launch_rings(shape, vecs, world, buffer, rings) else {
                            // Only a buffer without a vector per slot.
                            assert!(
                                buffer / 16 < rings * shape.max_blocks * (world - 1) * shape.slots,
                                "{shape:?} {world} {buffer}"
                            );
                            continue;
                        };
                        let (b, w, s, c) = (
                            l.blocks as u32,
                            world as u32,
                            l.slots as u32,
                            l.chunk_vecs as u32,
                        );
                        assert!((1..=shape.max_blocks).contains(&l.blocks));
                        assert!(l.blocks <= MAX_BLOCKS && l.threads >= world - 1);
                        assert!(l.chunk_vecs >= 1 && l.slots >= 2);
                        assert!((1..l.slots).contains(&l.lookahead));
                        assert!(l.chunk_vecs * 16 <= shape.max_chunk_bytes);
                        // Whole lines, unless a slot holds less than one.
                        assert!(
                            l.chunk_vecs.is_multiple_of(LINE_VECS) || l.chunk_vecs < LINE_VECS,
                            "{shape:?} {world} {buffer} {vecs}: {l:?}"
                        );
                        assert!(w * c <= PUSH_MAX_TILE_VECS);
                        // `push_ring_bytes` counts two rings.
                        assert!(push_ring_bytes(b, w, s, c) / 2 * rings as u64 <= buffer as u64);
                        // No idle block: each gets a tile at least.
                        let tiles = push_tiles(vecs as u32, w, c);
                        assert!((0..b).all(|k| push_block_tiles(tiles, b, k) >= 1));
                    }
                }
            }
        }
        // The default on 2 ranks and its 33 MiB scratch: 132 blocks of 512
        // threads, 2 slots of 64 KiB (the issue-28 sweep's best at 64 MiB),
        // a chunk of one vector per thread for small messages.
        let d = PushShape::default();
        let big = push_launch(&d, 1 << 26, 2, d.scratch_bytes).unwrap();
        assert_eq!(
            big,
            PushLaunch {
                blocks: 132,
                threads: 512,
                chunk_vecs: 4096,
                slots: 2,
                lookahead: 1
            }
        );
        let small = push_launch(&d, 1 << 16, 2, d.scratch_bytes).unwrap();
        assert_eq!((small.blocks, small.chunk_vecs), (64, 512));
        let tiny = push_launch(&d, 100, 2, d.scratch_bytes).unwrap();
        assert_eq!((tiny.blocks, tiny.chunk_vecs), (1, 512));
        // On 8 ranks the chunk shrinks to what the scratch holds.
        let eight = push_launch(&d, 1 << 26, 8, d.scratch_bytes).unwrap();
        assert_eq!((eight.blocks, eight.chunk_vecs), (132, 584));
        // One ring per block and peer (the reduce-scatter and all-gather
        // forms): twice the chunk where the scratch is what cuts it.
        let one = push_launch_rings(&d, 1 << 26, 8, d.scratch_bytes, 1).unwrap();
        assert_eq!((one.blocks, one.chunk_vecs), (132, 1168));
        // 4 ranks, one ring, 33 MiB: 2730 vectors fit, 2728 are whole
        // lines (NOTE [push chunks in whole lines]).
        let four = push_launch_rings(&d, 1 << 26, 4, d.scratch_bytes, 1).unwrap();
        assert_eq!(four.chunk_vecs, 2728);
        // No ring fits: refused.
        assert_eq!(push_launch(&d, 1 << 20, 8, 4096), None);
        assert_eq!(push_launch(&d, 1 << 20, 1, 10 << 20), None);
    }
}
