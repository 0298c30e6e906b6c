//! Reduce-scatter and all-gather in two forms. The Lamport form (NOTE
//! [lamport reduce-scatter and all-gather] in `kernels-gpu/src/lamport.rs`):
//! one launch, no barrier, for shards up to
//! [`crate::decide::scatter_gather_max_shard_bytes`] (a Lamport slot), and
//! larger shards as one such launch per slot-sized slice of every shard.
//! The push form (NOTE [push reduce-scatter and all-gather] in
//! `kernels-gpu/src/push_scatter_gather.rs`): one launch of any size through the push
//! all-reduce's rings, from `Crossovers::scatter_gather_push_min_bytes`
//! on. `Communicator` decides when ours run and sends the rest to NCCL.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use intranode_kernels_gpu::entries::Collective;
use intranode_kernels_gpu::layout::AllReduceParams;

use super::IntraNodeComm;
use super::launch::Launch;
use crate::config::PushUse;
use crate::decide::{scatter_gather_max_shard_bytes, scatter_gather_uses_push};
use crate::error::{Error, Result};
use crate::kernels::{Grid, KernelKey};
use crate::types::AllReduceAlgo;
use crate::types::{ElemType, ReduceOp};
use crate::work::Work;

/// Which of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScatterGather {
    /// `recv` (n elements) = shard `rank` of op(`send` of every rank)
    /// (W x n elements).
    ReduceScatter,
    /// `recv` (W x n elements) = every rank's `send` (n elements), in rank
    /// order.
    AllGather,
}

impl ScatterGather {
    pub const fn name(self) -> &'static str {
        match self {
            ScatterGather::ReduceScatter => "reduce_scatter",
            ScatterGather::AllGather => "all_gather",
        }
    }
}

/// Which of our kernels run a reduce-scatter or all-gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScatterGatherForm {
    /// Through the Lamport buffers, a slot-sized slice of every shard per
    /// launch.
    Lamport,
    /// Through the push form's rings, one launch.
    Push,
}

impl ScatterGatherForm {
    #[cfg(intranode_internals)]
    pub const fn name(self) -> &'static str {
        match self {
            ScatterGatherForm::Lamport => "lamport",
            ScatterGatherForm::Push => "push",
        }
    }
}

/// The kernel of `what` in `form` for `elem` on `world` ranks, if there
/// is one.
fn scatter_gather_kernel(
    what: ScatterGather,
    form: ScatterGatherForm,
    elem: ElemType,
    world: usize,
) -> Option<KernelKey<(AllReduceParams,)>> {
    let family = match (what, form) {
        (ScatterGather::ReduceScatter, ScatterGatherForm::Lamport) => Collective::ReduceScatter,
        (ScatterGather::AllGather, ScatterGatherForm::Lamport) => Collective::AllGather,
        (ScatterGather::ReduceScatter, ScatterGatherForm::Push) => Collective::PushReduceScatter,
        (ScatterGather::AllGather, ScatterGatherForm::Push) => Collective::PushAllGather,
    };
    family.key(elem.into(), world)
}

impl IntraNodeComm {
    /// Reduce-scatter (`what` = `ReduceScatter`, `send` W x n elements,
    /// `recv` n) or all-gather (`AllGather`, `send` n, `recv` W x n) on
    /// `stream`, with our kernels in the form the crossovers pick
    /// (`sg_auto_push_launch`: the push form past a Lamport slot per
    /// shard); `elem` is the buffers' element type.
    pub(crate) fn scatter_gather<T>(
        &self,
        what: ScatterGather,
        elem: ElemType,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        self.scatter_gather_as(what, None, elem, send, recv, op, stream)
    }

    /// `scatter_gather` (what `Communicator` calls) in `form` (`None`: as
    /// the crossovers pick). The push form needs its rings
    /// to fit the symmetric buffer (`config::PushShape`); forced where they
    /// do not, it is an error.
    #[allow(clippy::too_many_arguments)]
    pub fn scatter_gather_as<T>(
        &self,
        what: ScatterGather,
        form: Option<ScatterGatherForm>,
        elem: ElemType,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        if std::mem::size_of::<T>() != elem.bytes() {
            return Err(Error::InvalidArgument(format!(
                "{} on rank {}: elements of {} bytes are not {elem:?}",
                what.name(),
                self.rank(),
                std::mem::size_of::<T>()
            )));
        }
        let world = self.world();
        let (whole, shard) = match what {
            ScatterGather::ReduceScatter => (send.len(), recv.len()),
            ScatterGather::AllGather => (recv.len(), send.len()),
        };
        if shard.checked_mul(world) != Some(whole) {
            return Err(Error::InvalidArgument(format!(
                "{} on rank {}: {} elements are not world size {world} x {shard}",
                what.name(),
                self.rank(),
                whole
            )));
        }
        self.with_buffers(
            stream,
            |bufs| Ok((bufs.input(send, "input")?, bufs.output(recv, "output")?)),
            // SAFETY: both pointers come from live device buffers of the
            // lengths checked above, ordered with `stream` by the call's
            // buffers.
            |(i, o)| unsafe { self.scatter_gather_raw(what, form, i, o, shard, elem, op, stream) },
        )
    }

    /// The push form's launch where auto takes the push form
    /// (`decide::scatter_gather_uses_push`), else `None`.
    fn sg_auto_push_launch(
        &self,
        what: ScatterGather,
        shard: usize,
        elem: ElemType,
    ) -> Option<super::launch_shape::PushLaunch> {
        let whole_bytes = shard
            .saturating_mul(elem.bytes())
            .saturating_mul(self.world());
        if !scatter_gather_uses_push(whole_bytes, self.world(), &self.crossovers) {
            return None;
        }
        self.sg_push_launch(what, shard, elem)
    }

    /// The parameters of one launch of either form over `elems` elements
    /// of every shard (`shard` from one shard's start to the next).
    fn sg_params(
        &self,
        what: ScatterGather,
        op: ReduceOp,
        input: u64,
        output: u64,
        elems: usize,
        shard: usize,
    ) -> AllReduceParams {
        let mut params = self.params_template();
        params.op = match what {
            ScatterGather::ReduceScatter => op.code(),
            // The all-gather reduces nothing; its kernels are
            // instantiated per op like the others, and any will do.
            ScatterGather::AllGather => ReduceOp::Sum.code(),
        };
        params.input = input;
        params.output = output;
        params.elems = elems as u64;
        params.shard_stride_elems = shard as u64;
        params
    }

    /// The push form's launch for shards of `shard` elements: the launch
    /// of an all-reduce of W shards with one ring instead of two
    /// (`IntraNodeComm::push_launch_for`). `None` where it does not fit
    /// the buffer or the shard is too long for the kernels' u32 vector
    /// indices.
    fn sg_push_launch(
        &self,
        what: ScatterGather,
        shard: usize,
        elem: ElemType,
    ) -> Option<super::launch_shape::PushLaunch> {
        use intranode_kernels_gpu::index::{PUSH_MAX_VECS, elems_per_vec};
        let vecs = shard
            .div_ceil(elems_per_vec(elem.bytes()))
            .checked_mul(self.world())
            .filter(|&v| v <= PUSH_MAX_VECS as usize)?;
        self.push_launch_for(
            match what {
                ScatterGather::ReduceScatter => PushUse::ReduceScatter,
                ScatterGather::AllGather => PushUse::AllGather,
            },
            vecs,
        )
    }

    /// [`scatter_gather_as`](Self::scatter_gather_as) over raw addresses,
    /// with `shard` elements per rank. In the Lamport form a shard larger
    /// than a slot ([`scatter_gather_max_shard_bytes`]) runs as several
    /// calls, each over the same slice of every shard (`shard_slices`).
    ///
    /// # Safety
    /// `input` and `output` must be device memory of this comm's device,
    /// holding `W x shard` elements on the side that holds every shard and
    /// `shard` on the other, not overlapping, valid until the stream passes
    /// the call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn scatter_gather_raw(
        &self,
        what: ScatterGather,
        form: Option<ScatterGatherForm>,
        input: u64,
        output: u64,
        shard: usize,
        elem: ElemType,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        // The push launch is worked out once, here.
        let push = match form {
            Some(ScatterGatherForm::Lamport) => None,
            Some(ScatterGatherForm::Push) => Some(self.sg_push_launch(what, shard, elem).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{} on rank {}: the push form's rings for {shard} elements a shard do not fit the {}-byte symmetric buffer",
                    what.name(),
                    self.rank(),
                    self.symm().buffer_bytes(),
                ))
            })?),
            None => self.sg_auto_push_launch(what, shard, elem),
        };
        if let Some(launch) = push {
            // SAFETY: forwarded from the caller; `launch` is this call's.
            return unsafe {
                self.scatter_gather_push(what, launch, input, output, shard, elem, op, stream)
            };
        }
        let form = ScatterGatherForm::Lamport;
        let kernel = scatter_gather_kernel(what, form, elem, self.world()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} on rank {}: no kernel for a world of {}",
                what.name(),
                self.rank(),
                self.world()
            ))
        })?;
        let slices = shard_slices(shard, elem.bytes(), self.world());
        let eb = elem.bytes() as u64;
        let mut work = None;
        for (i, (first, elems)) in slices.enumerate() {
            let build = || -> Result<Option<Launch<_>>> {
                if i == 0 {
                    self.increment_usage_counter();
                }
                if elems == 0 {
                    return Ok(None);
                }
                // Slice `first..first + elems` of every shard: both sides
                // start `first` elements in; the side that holds every
                // shard steps `shard` elements from one to the next.
                let first_bytes = first as u64 * eb;
                let params = self.sg_params(
                    what,
                    op,
                    input + first_bytes,
                    output + first_bytes,
                    elems,
                    shard,
                );
                let vecs =
                    elems.div_ceil(intranode_kernels_gpu::index::elems_per_vec(elem.bytes()));
                // One vector per thread over every SM, as the Lamport
                // one-shot: each thread moves its vector of all W slots.
                let (blocks, threads) =
                    self.lamport_launch()
                        .shape_for(AllReduceAlgo::Lamport, vecs, self.world());
                Ok(Some(Launch {
                    key: kernel,
                    grid: Grid::new(blocks, threads),
                    args: (params,),
                }))
            };
            // SAFETY: the caller vouches for input and output, the peers'
            // pads live as long as `self`; each slice fits a Lamport slot
            // (`shard_slices`) and lies inside every shard; these kernels
            // keep no per-block flags. Each slice is a whole Lamport call
            // of its own (its own epoch and buffer, NOTE [lamport]).
            work = Some(unsafe { self.run(what.name(), stream, build) }?);
        }
        // `shard_slices` yields at least one slice.
        work.ok_or_else(|| {
            Error::InvalidArgument(format!("{} on rank {}: no slice", what.name(), self.rank()))
        })
    }

    /// The push form of [`scatter_gather_raw`](Self::scatter_gather_raw):
    /// one launch, `launch`.
    ///
    /// # Safety
    /// As for [`scatter_gather_raw`](Self::scatter_gather_raw), and
    /// `launch` must be `sg_push_launch`'s for this call's `what`, `shard`
    /// and `elem`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn scatter_gather_push(
        &self,
        what: ScatterGather,
        launch: super::launch_shape::PushLaunch,
        input: u64,
        output: u64,
        shard: usize,
        elem: ElemType,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let world = self.world();
        let kernel =
            scatter_gather_kernel(what, ScatterGatherForm::Push, elem, world).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{} on rank {}: no push kernel for a world of {world}",
                    what.name(),
                    self.rank(),
                ))
            })?;
        let build = || -> Result<Option<Launch<_>>> {
            self.increment_usage_counter();
            if shard == 0 {
                return Ok(None);
            }
            let mut params = self.sg_params(what, op, input, output, shard, shard);
            params.push_chunk_vecs = launch.chunk_vecs as u32;
            params.push_slots = launch.slots as u32;
            params.push_lookahead = launch.lookahead as u32;
            Ok(Some(Launch {
                key: kernel,
                grid: Grid::new(launch.blocks, launch.threads),
                args: (params,),
            }))
        };
        // SAFETY: the caller vouches for input and output, the peers'
        // buffers and pads live as long as `self`; `sg_push_launch` keeps
        // the rings inside the buffer, the grid within MAX_BLOCKS and the
        // vector indices within u32, and every rank derives the same
        // launch from the same call.
        unsafe { self.run(what.name(), stream, build) }
    }
}

/// The slices `(first element, elements)` of a shard of `shard` elements
/// of `elem_bytes` each on `world` ranks, one Lamport call each: the whole
/// shard when it fits a slot ([`scatter_gather_max_shard_bytes`]), else
/// slot-sized slices (whole 16-byte vectors, so every slice starts as
/// aligned as the shard) and the rest. At least one slice, empty for an
/// empty shard.
pub(crate) fn shard_slices(
    shard: usize,
    elem_bytes: usize,
    world: usize,
) -> impl Iterator<Item = (usize, usize)> {
    let slot_elems = (scatter_gather_max_shard_bytes(world) / elem_bytes.max(1)).max(1);
    let count = shard.div_ceil(slot_elems).max(1);
    (0..count).map(move |k| {
        let first = k * slot_elems;
        (first, slot_elems.min(shard - first.min(shard)))
    })
}

#[cfg(test)]
mod tests {
    use intranode_kernels_gpu::layout::MAX_RANKS;

    use super::*;

    #[test]
    fn every_world_has_its_kernels() {
        for what in [ScatterGather::ReduceScatter, ScatterGather::AllGather] {
            for form in [ScatterGatherForm::Lamport, ScatterGatherForm::Push] {
                for elem in ElemType::ALL {
                    for world in 2..=MAX_RANKS {
                        assert!(scatter_gather_kernel(what, form, elem, world).is_some());
                    }
                    assert!(scatter_gather_kernel(what, form, elem, 1).is_none());
                    assert!(scatter_gather_kernel(what, form, elem, MAX_RANKS + 1).is_none());
                }
            }
        }
    }

    #[test]
    fn slices_cover_the_shard_in_slots() {
        for world in 2..=MAX_RANKS {
            for elem_bytes in [2, 4] {
                let slot = scatter_gather_max_shard_bytes(world) / elem_bytes;
                for shard in [0, 1, 7, slot - 1, slot, slot + 1, 2 * slot, 5 * slot + 3] {
                    let slices: Vec<_> = shard_slices(shard, elem_bytes, world).collect();
                    assert!(!slices.is_empty());
                    let mut next = 0;
                    for &(first, elems) in &slices {
                        assert_eq!(first, next, "shard {shard}: slices back to back");
                        assert!(elems <= slot, "shard {shard}: a slice fits a slot");
                        // Every slice starts on a whole 16-byte vector.
                        assert_eq!(first * elem_bytes % 16, 0);
                        next += elems;
                    }
                    assert_eq!(next, shard, "shard {shard}: every element once");
                    assert_eq!(slices.len(), shard.div_ceil(slot).max(1));
                }
            }
        }
    }
}
