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
use kernels_gpu::entries::{Collective, Kernel};
use kernels_gpu::layout::{AllReduceParams, BarrierParams, MAX_BLOCKS, MAX_RANKS};

use super::IntraNodeComm;
use crate::algo::{AllReduceAlgo, AllReduceCall, IntraPath, decide_all_reduce};
use crate::config::{LamportShapes, LaunchShape, MAX_LAMPORT_BLOCKS};
use crate::error::{Error, Result};
use crate::kernels::Grid;
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
/// Most blocks of the bandwidth form (NOTE [bandwidth all-reduce] in
/// `kernels-gpu/src/bandwidth.rs`), of `THREADS` (512) threads each. Its SM
/// footprint: at most this many SMs, 32 of an H100's or H200's 132 (on an
/// idle GPU the blocks go to distinct SMs); each block holds a quarter of
/// an SM's threads and, at 64 to 80 registers a thread (`cargo xtask
/// check-ptx`), 32 to 40 Ki of its 64 Ki registers.
/// NOT MEASURED: chosen as enough 16-byte accesses in flight for one
/// direction of NVLink 4 (32 blocks x 512 threads x 4 loads x 16 bytes =
/// 1 MiB in flight, against about 450 GB/s x 2 us), and as NCCL's
/// channel count on such machines is of that order. Smaller messages get
/// fewer blocks (one vector per thread and shard, as the two-shot), and a
/// small symmetric buffer fewer still (a slot holds one vector at least).
pub const BANDWIDTH_MAX_BLOCKS: usize = 32;
const _: () = assert!(
    ONE_SHOT_MAX_BLOCKS <= MAX_BLOCKS
        && TWO_SHOT_MAX_BLOCKS <= MAX_BLOCKS
        && BANDWIDTH_MAX_BLOCKS <= MAX_BLOCKS
);

/// Blocks of a bandwidth-form launch over a whole message of `vecs`
/// 16-byte vectors with halves of `half_bytes`: one vector per thread and
/// shard where the message is small, [`BANDWIDTH_MAX_BLOCKS`] at most, and
/// no more than leave every slot of a round one vector
/// (`kernels_gpu::math::bandwidth_slot_vecs`). The same on every rank
/// (the kernels' flags are per block): it depends on the call and the
/// buffer size only, which the rendezvous checks are equal. Zero when a
/// half cannot hold one vector per rank.
pub(crate) fn bandwidth_blocks(vecs: usize, world: usize, half_bytes: usize) -> usize {
    let world = world.max(1);
    let fit = half_bytes / kernels_gpu::math::VEC_BYTES / world;
    vecs.div_ceil(world * THREADS)
        .clamp(1, BANDWIDTH_MAX_BLOCKS)
        .min(fit)
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
    /// SMs of this rank's GPU.
    pub sms: usize,
    /// Shapes fixed by `config::LAMPORT_LAUNCH_ENV`.
    pub fixed: LamportShapes,
}

impl LamportLaunch {
    /// The rule for a GPU of `sms` SMs, with the shapes `fixed` overrides.
    pub fn new(sms: usize, fixed: LamportShapes) -> Self {
        LamportLaunch {
            sms: sms.max(1),
            fixed,
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
            work.div_ceil(shape.threads).clamp(1, shape.max_blocks),
            shape.threads,
        )
    }
}

/// Blocks and threads of a launch over `vecs` 16-byte vectors (for the
/// bandwidth form, the whole message; for the others, one chunk) with
/// halves of `half_bytes`.
fn launch_shape(
    algo: AllReduceAlgo,
    vecs: usize,
    world: usize,
    half_bytes: usize,
    lamport: &LamportLaunch,
) -> (usize, usize) {
    match algo {
        AllReduceAlgo::Lamport | AllReduceAlgo::LamportTwoShot => {
            lamport.shape_for(algo, vecs, world)
        }
        AllReduceAlgo::Push => (bandwidth_blocks(vecs, world, half_bytes), THREADS),
        _ => (blocks_for(algo, vecs, world), THREADS),
    }
}

/// The kernel of `algo` for `elem` on `world` ranks: `None` for NCCL's
/// algorithm and for worlds without a kernel (HCM on an odd number of
/// ranks, more than `MAX_RANKS`).
fn collective_kernel(algo: AllReduceAlgo, elem: ElemType, world: usize) -> Option<Kernel> {
    let algo = match algo {
        AllReduceAlgo::OneShot => Collective::OneShot,
        AllReduceAlgo::TwoShot => Collective::TwoShot,
        AllReduceAlgo::Hcm => Collective::Hcm,
        AllReduceAlgo::Lamport => Collective::Lamport,
        AllReduceAlgo::LamportTwoShot => Collective::LamportTwoShot,
        AllReduceAlgo::Push => Collective::Push,
        AllReduceAlgo::Nccl => return None,
    };
    let kernel = Kernel::Collective {
        algo,
        elem: elem.into(),
        world,
    };
    kernel.index().map(|_| kernel)
}

impl IntraNodeComm {
    /// The algorithm a call of `elems` elements of `elem` asking for
    /// `algo` runs: [`decide_all_reduce`] with `algo` forced (a Lamport
    /// form hands messages larger than its buffers to its barrier twin).
    pub fn resolve(&self, algo: AllReduceAlgo, elem: ElemType, elems: usize) -> AllReduceAlgo {
        let call = AllReduceCall {
            elem,
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
            buffer_bytes: self.symm.buffer_bytes(),
            hcm_runnable: self.hcm_plan.is_ok(),
        }
    }

    /// Bytes of each half of the symmetric buffer (calls alternate halves),
    /// a multiple of 16: the most one kernel launch reduces.
    pub fn half_buffer_bytes(&self) -> usize {
        (self.symm().buffer_bytes() / 2) & !15
    }

    /// `output = op(input of every rank)`, on `stream`. `input` and
    /// `output` may be the same buffer ([`all_reduce_in_place`]). Messages
    /// larger than half the symmetric buffer run in one launch that walks
    /// them chunk by chunk.
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
        let elems = input.len();
        if output.len() != elems {
            return Err(Error::InvalidArgument(format!(
                "all_reduce on rank {}: input has {elems} elements, output {}",
                self.rank(),
                output.len()
            )));
        }
        let mut bufs = self.call_buffers(stream)?;
        let in_ptr = bufs.input(input, "all-reduce input")?;
        let out_ptr = bufs.output(output, "all-reduce output")?;
        bufs.ready()?;
        // SAFETY: both pointers come from live device buffers of `elems`
        // elements that `bufs` keeps ordered with `stream` (NOTE [capture
        // and event tracking] in `tracked.rs`).
        let work =
            unsafe { self.all_reduce_raw(in_ptr, out_ptr, elems, T::ELEM, op, algo, stream) }?;
        bufs.finish()?;
        Ok(work)
    }

    /// In-place all-reduce of `buf` on `stream`.
    pub fn all_reduce_in_place<T: DType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        algo: AllReduceAlgo,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let elems = buf.len();
        let mut bufs = self.call_buffers(stream)?;
        let ptr = bufs.output(buf, "all-reduce buffer")?;
        bufs.ready()?;
        // SAFETY: `ptr` is a live device buffer of `elems` elements.
        let work = unsafe { self.all_reduce_raw(ptr, ptr, elems, T::ELEM, op, algo, stream) }?;
        bufs.finish()?;
        Ok(work)
    }

    /// All-reduce over raw device addresses.
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
        self.check_call("all_reduce", stream)?;
        let algo = self.resolve(algo, elem, elems);
        let mut params = self.params_template();
        // Elements one launch's grid is sized for: one chunk (the kernel
        // walks larger messages chunk by chunk, `run_chunks`); for the
        // bandwidth form, the whole message (below).
        let mut chunk_elems = self.half_buffer_bytes() / elem.bytes();
        if algo == AllReduceAlgo::Hcm {
            let plan = self.hcm_plan().map_err(|why| {
                Error::InvalidArgument(format!("all_reduce on rank {}: {why}", self.rank()))
            })?;
            params.hcm_group_mask = plan.group_mask;
            params.hcm_relay = plan.relay as u32;
            params.hcm_relay_first = u32::from(plan.relay_first);
            chunk_elems =
                kernels_gpu::math::hcm_chunk_elems(self.half_buffer_bytes(), elem.bytes());
        }
        if algo == AllReduceAlgo::Push {
            // The kernel walks the whole message in rounds of its own
            // (`kernels_gpu::math::bandwidth_rounds`); a round is at most a
            // half, and needs one vector per rank and block.
            let half_vecs = self.half_buffer_bytes() / kernels_gpu::math::VEC_BYTES;
            chunk_elems = if half_vecs >= self.world() {
                elems.max(1)
            } else {
                0
            };
        }
        if chunk_elems == 0 {
            return Err(Error::InvalidArgument(format!(
                "all_reduce on rank {}: a half of the {}-byte symmetric buffer holds no chunk for {}",
                self.rank(),
                self.symm().buffer_bytes(),
                algo.name()
            )));
        }
        let kernel = collective_kernel(algo, elem, self.world()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "all_reduce on rank {}: no intra-node kernel for {} on {} ranks (nccl runs through Communicator)",
                self.rank(),
                algo.name(),
                self.world()
            ))
        })?;
        self.check_all_reduce_call(elems, elem, op, algo)?;
        self.increment_usage_counter();
        if elems == 0 {
            return Ok(Work::new(stream.clone(), Some(self.health_arc())));
        }
        params.op = op.code();
        params.input = input;
        params.output = output;
        params.elems = elems as u64;
        let vecs = elems
            .min(chunk_elems)
            .div_ceil(kernels_gpu::math::elems_per_vec(elem.bytes()));
        let (blocks, threads) = launch_shape(
            algo,
            vecs,
            self.world(),
            self.half_buffer_bytes(),
            self.lamport_launch(),
        );
        // SAFETY: every all-reduce kernel takes one AllReduceParams by
        // value; the caller vouches for input and output, the peers'
        // buffers and pads live as long as `self`; `blocks_for` and
        // `bandwidth_blocks` stay within MAX_BLOCKS for the kernels that
        // count blocks in the pad (the Lamport ones do not), and a
        // bandwidth launch has at least one vector per slot (checked
        // above: `bandwidth_blocks` leaves it so).
        unsafe {
            self.kernels()
                .launch(kernel, Grid::new(blocks, threads), stream, (params,))
        }?;
        Ok(Work::new(stream.clone(), Some(self.health_arc())))
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
        // SAFETY: `barrier` takes one BarrierParams by value, one block of
        // MAX_RANKS threads; the pads live as long as `self`.
        unsafe {
            self.kernels()
                .launch(Kernel::Barrier, Grid::new(1, MAX_RANKS), stream, (params,))
        }?;
        Ok(Work::new(stream.clone(), Some(self.health_arc())))
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
        p.abort = p.pads[self.rank()] + (kernels_gpu::layout::ABORT_WORD * 4) as u64;
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
    fn bandwidth_blocks_fit_the_pad_and_leave_every_slot_a_vector() {
        use kernels_gpu::math::{bandwidth_rounds, bandwidth_slot_vecs};
        for world in 2..=8 {
            for half_bytes in [2048usize, 32 << 10, 5 << 20] {
                for vecs in [1usize, 7, 512, 4096, 1 << 20, 1 << 26] {
                    let b = bandwidth_blocks(vecs, world, half_bytes);
                    assert!(
                        (1..=BANDWIDTH_MAX_BLOCKS).contains(&b),
                        "{world} {half_bytes} {vecs}"
                    );
                    let (b, w, v) = (b as u32, world as u32, vecs as u32);
                    let l = bandwidth_slot_vecs(half_bytes as u64, b, w, v);
                    assert!(l >= 1 && bandwidth_rounds(v, b, w, l) >= 1);
                }
            }
            // Large messages take every block; small ones one vector per
            // thread and shard.
            assert_eq!(
                bandwidth_blocks(1 << 26, world, 5 << 20),
                BANDWIDTH_MAX_BLOCKS
            );
            assert_eq!(bandwidth_blocks(world * THREADS, world, 5 << 20), 1);
            assert_eq!(bandwidth_blocks(world * THREADS + 1, world, 5 << 20), 2);
            // A half too small for one vector per rank: none (refused).
            assert_eq!(bandwidth_blocks(1 << 20, world, 16 * world - 16), 0);
        }
        // A small buffer caps the blocks: 2 KiB halves hold 128 vectors.
        assert_eq!(bandwidth_blocks(1 << 20, 8, 2048), 16);
    }
}
