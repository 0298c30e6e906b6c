//! The all-reduce of ours over addresses (`IntraNodeComm::all_reduce_raw`
//! of a [`RawAllReduce`]): the kernel, grid and parameters of one call
//! (`launch_of`) and its fingerprint check, on the caller's stream,
//! through the one launch path of `launch.rs`; the grids come from
//! `launch_shape.rs`.
//!
//! NOTE [IntraNodeComm stream semantics] (from the seed): everything is
//! enqueued on the caller's stream; there is no communication stream and
//! no host synchronization on the path, so calls are CUDA-graph capturable
//! and cost the host one launch each. The kernels keep their own call
//! count in the signal pad (NOTE [double buffering] in
//! `kernels-gpu/src/all_reduce.rs`).

use std::sync::Arc;

use cudarc::driver::CudaStream;
use intranode_kernels_gpu::entries::Collective;
use intranode_kernels_gpu::layout::{AllReduceParams, MAX_RANKS};

use super::IntraNodeComm;
use super::debug::all_reduce_fingerprint;
use super::launch::Launch;
use super::launch_shape::{PushLaunch, launch_shape, push_launch, push_launch_rings};
use crate::config::{PushShape, PushUse};
use crate::decide::{
    IntraPath, lamport_max_message_bytes, lamport_two_shot_max_message_bytes,
    push_max_message_bytes,
};
use crate::error::{Error, Result};
use crate::kernels::{Grid, KernelKey};
use crate::types::AllReduceAlgo;
use crate::types::ElemType;
use crate::work::Work;

pub use crate::types::ReduceOp;

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

/// One all-reduce of ours over device addresses, as decided: what
/// [`IntraNodeComm::all_reduce_raw`] launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawAllReduce {
    /// Device address of this rank's input.
    pub input: u64,
    /// Device address of this rank's output (may be `input`).
    pub output: u64,
    /// Elements per rank.
    pub elems: usize,
    /// What the elements are.
    pub elem: ElemType,
    /// The reduction.
    pub op: ReduceOp,
    /// The form, as decided.
    pub algo: AllReduceAlgo,
}

impl IntraNodeComm {
    /// This group's intra-node path, as [`decide_all_reduce`] sees it.
    pub(crate) fn intra_path(&self) -> IntraPath {
        IntraPath {
            topology: self.topology,
            buffer_bytes: self.buffer_bytes,
            hcm_runnable: self.hcm_plan.is_ok(),
            push_runnable: self.push_runnable,
        }
    }

    /// Bytes of each half of the symmetric buffer (calls alternate halves),
    /// a multiple of 16: the most one kernel launch reduces.
    pub fn half_buffer_bytes(&self) -> usize {
        (self.buffer_bytes / 2) & !15
    }

    /// Bytes a push launch in `shape` (a [`PushShape::for_use`] result)
    /// lays its rings out in: its own scratch, or the configured buffer
    /// where that is larger, within the allocation. The allocation holds
    /// the most any use takes (`PushShape::scratch_bytes_for`): at 4 ranks
    /// the 76 MiB of the all-reduce's and the all-gather's rings, where
    /// the reduce-scatter keeps to the default 33 MiB. Given the 76 MiB,
    /// its chunks grew from 42 to 64 KiB and it lost 2-3 % at 64 MiB on 4
    /// H100 (2026-11-27, 97703c9 and 52ec928).
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
        let mut shape = self.push_shape.for_use(what, self.world);
        // The push kernels take their tiles and rings from the grid they
        // get, so a shared GPU's cap only means more tiles per block.
        shape.max_blocks = shape.max_blocks.min(self.residency.max_blocks());
        let ring_bytes = self.push_ring_bytes(&shape);
        match what {
            PushUse::AllReduce => push_launch(&shape, vecs, self.world, ring_bytes),
            PushUse::ReduceScatter | PushUse::AllGather => {
                push_launch_rings(&shape, vecs, self.world, ring_bytes, 1)
            }
        }
    }

    /// All-reduce over raw device addresses, as decided
    /// ([`crate::decide::decide_all_reduce`]; not decided again here: an
    /// algorithm that cannot take the call, a Lamport form past its
    /// buffers, is an error).
    ///
    /// # Safety
    /// `call.input` and `call.output` must each be device memory of this
    /// comm's device holding `call.elems` elements of `call.elem` (they
    /// may be equal, not otherwise overlapping), valid until the stream
    /// passes the call.
    pub(crate) unsafe fn all_reduce_raw(
        &self,
        call: &RawAllReduce,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let build = || {
            let launch = self.launch_of(call)?;
            if self.call_checker.is_some() {
                self.check_all_reduce_call(call.elems, call.elem, call.op, call.algo)?;
            }
            self.increment_usage_counter();
            Ok(launch)
        };
        // SAFETY: the caller vouches for input and output, the peers'
        // buffers and pads live as long as `self`; `launch_of` keeps the
        // grid and the message within what the kernel takes (see there).
        unsafe { self.run("all_reduce", stream, build) }
    }

    /// The launch of one all-reduce of ours (as decided): the kernel
    /// (looked up once, here), the grid and the parameter block; `None`
    /// for an empty call. An error where `call.algo` cannot take the call.
    ///
    /// The grid: `blocks_for` and `push_launch` stay within MAX_BLOCKS
    /// for the kernels that count blocks in the pad (the Lamport ones do
    /// not); a push launch has chunks of a vector at least, 2 slots at
    /// least, rings inside the buffer and at least 32 threads
    /// (`push_launch`); the Lamport forms and the push form get no more
    /// than `most_bytes`.
    pub(super) fn launch_of(
        &self,
        call: &RawAllReduce,
    ) -> Result<Option<Launch<(AllReduceParams,)>>> {
        let RawAllReduce {
            input,
            output,
            elems,
            elem,
            op,
            algo,
        } = *call;
        let key = collective_kernel(algo, elem, self.world).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "all_reduce on rank {}: no intra-node kernel for {} on {} ranks (nccl runs through Communicator)",
                self.rank,
                algo.name(),
                self.world
            ))
        })?;
        let bytes = elems.saturating_mul(elem.bytes());
        if bytes > most_bytes(algo, self.world) {
            return Err(Error::InvalidArgument(format!(
                "all_reduce on rank {}: {bytes} bytes exceed the {} bytes {} takes on {} ranks (decide_all_reduce hands such calls to another form)",
                self.rank,
                most_bytes(algo, self.world),
                algo.name(),
                self.world
            )));
        }
        let mut params = self.params_template();
        // Elements one launch's grid is sized for: one chunk (the kernel
        // walks larger messages chunk by chunk, `run_chunks`); the push
        // form walks the whole message through its rings (below).
        let mut chunk_elems = self.half_buffer_bytes() / elem.bytes();
        if algo == AllReduceAlgo::Hcm {
            let plan = self.hcm_plan.as_ref().map_err(|why| {
                Error::InvalidArgument(format!("all_reduce on rank {}: {why}", self.rank))
            })?;
            params.hcm_group_mask = plan.group_mask;
            params.hcm_relay = plan.relay as u32;
            params.hcm_relay_first = u32::from(plan.relay_first);
            chunk_elems = intranode_kernels_gpu::index::hcm_chunk_elems(
                self.half_buffer_bytes(),
                elem.bytes(),
            );
        }
        let vecs_total = elems.div_ceil(intranode_kernels_gpu::index::elems_per_vec(elem.bytes()));
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
                self.rank,
                self.symm.buffer_bytes(),
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
                    .div_ceil(intranode_kernels_gpu::index::elems_per_vec(elem.bytes()));
                launch_shape(algo, vecs, self.world, &self.lamport_launch)
            }
        };
        Ok(Some(Launch {
            key,
            grid: Grid::new(blocks, threads),
            args: (params,),
        }))
    }

    /// Under `INTRANODE_DEBUG=detail`: checks that every rank makes this
    /// all-reduce call with the same arguments (NOTE [call fingerprints] in
    /// `debug.rs`).
    /// Without it: nothing.
    pub(crate) fn check_all_reduce_call(
        &self,
        elems: usize,
        elem: ElemType,
        op: ReduceOp,
        algo: AllReduceAlgo,
    ) -> Result<()> {
        match &self.call_checker {
            Some(c) => c.check(|call| all_reduce_fingerprint(call, elems, elem, op.name(), algo)),
            None => Ok(()),
        }
    }

    /// Every rank's copy of the `bytes` at `input`, when `algo` reads a
    /// symmetric input in place (one-shot, two-shot) and `input` lies in a
    /// symmetric buffer the user allocated, 16-byte aligned (NOTE
    /// [symmetric input] in `kernels-gpu/src/all_reduce.rs`).
    pub(super) fn symmetric_input(
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

    /// The parameters every launch shares (peers' buffers and pads, the
    /// wait bound, the error word), worked out once at the rendezvous.
    pub(super) fn params_template(&self) -> AllReduceParams {
        self.shared_params
    }

    /// [`params_template`](Self::params_template)'s value, from the
    /// mapped buffers and the error word; none of them moves while the
    /// communicator lives, so the rendezvous works it out once.
    pub(crate) fn work_out_shared_params(&self) -> AllReduceParams {
        let mut p = AllReduceParams::default();
        let symm = &self.symm;
        for (dst, src) in p.bufs.iter_mut().zip(symm.buffer_ptrs()) {
            *dst = *src;
        }
        for (dst, src) in p.pads.iter_mut().zip(symm.signal_pad_ptrs()) {
            *dst = *src;
        }
        p.half_bytes = self.half_buffer_bytes() as u64;
        p.timeout_ns = u64::try_from(self.barrier_timeout().as_nanos()).unwrap_or(u64::MAX);
        p.error = self.health.device_ptr();
        // NOTE [abandoned waits] in `kernels-gpu/src/sync.rs`.
        p.abort = p.pads[self.rank] + (intranode_kernels_gpu::layout::ABORT_WORD * 4) as u64;
        p.rank = self.rank as u32;
        p
    }
}

#[cfg(test)]
mod tests;
