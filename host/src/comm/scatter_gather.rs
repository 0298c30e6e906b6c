//! Reduce-scatter and all-gather over the Lamport buffers (NOTE [lamport
//! reduce-scatter and all-gather] in `kernels-gpu/src/lamport.rs`): one
//! launch each, no barrier, for shards up to
//! [`crate::algo::scatter_gather_max_shard_bytes`]. `Communicator` decides
//! when they run and sends the rest to NCCL.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use intranode_kernels_gpu::entries::Collective;
use intranode_kernels_gpu::layout::AllReduceParams;

use super::{IntraNodeComm, Launch};
use crate::algo::{AllReduceAlgo, scatter_gather_max_shard_bytes};
use crate::error::{Error, Result};
use crate::kernels::{Grid, KernelKey};
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

/// The kernel of `what` for `elem` on `world` ranks, if there is one.
fn scatter_gather_kernel(
    what: ScatterGather,
    elem: ElemType,
    world: usize,
) -> Option<KernelKey<(AllReduceParams,)>> {
    let family = match what {
        ScatterGather::ReduceScatter => Collective::ReduceScatter,
        ScatterGather::AllGather => Collective::AllGather,
    };
    family.key(elem.into(), world)
}

impl IntraNodeComm {
    /// Reduce-scatter (`what` = `ReduceScatter`, `send` W x n elements,
    /// `recv` n) or all-gather (`AllGather`, `send` n, `recv` W x n) on
    /// `stream`, with our kernels; `elem` is the buffers' element type.
    /// The shard of n elements must fit
    /// [`scatter_gather_max_shard_bytes`].
    pub fn scatter_gather<T>(
        &self,
        what: ScatterGather,
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
            |(i, o)| unsafe { self.scatter_gather_raw(what, i, o, shard, elem, op, stream) },
        )
    }

    /// [`scatter_gather`](Self::scatter_gather) over raw addresses, with
    /// `shard` elements per rank.
    ///
    /// # Safety
    /// `input` and `output` must be device memory of this comm's device,
    /// holding `W x shard` elements on the side that holds every shard and
    /// `shard` on the other, not overlapping, valid until the stream passes
    /// the call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn scatter_gather_raw(
        &self,
        what: ScatterGather,
        input: u64,
        output: u64,
        shard: usize,
        elem: ElemType,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let build = || -> Result<Option<Launch<_>>> {
            let shard_bytes = shard.saturating_mul(elem.bytes());
            let max_bytes = scatter_gather_max_shard_bytes(self.world());
            if shard_bytes > max_bytes {
                // The kernels trust the host on this: a larger shard would
                // store past the Lamport buffer into the peers' pads.
                return Err(Error::InvalidArgument(format!(
                    "{} on rank {}: a shard of {shard_bytes} bytes exceeds the {max_bytes} bytes our kernels take on {} ranks (the communicator sends those to NCCL)",
                    what.name(),
                    self.rank(),
                    self.world()
                )));
            }
            let kernel = scatter_gather_kernel(what, elem, self.world()).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{} on rank {}: no kernel for a world of {}",
                    what.name(),
                    self.rank(),
                    self.world()
                ))
            })?;
            self.increment_usage_counter();
            if shard == 0 {
                return Ok(None);
            }
            let mut params = self.params_template();
            params.op = match what {
                ScatterGather::ReduceScatter => op.code(),
                // The all-gather reduces nothing; its kernels are instantiated
                // per op like the others, and any will do.
                ScatterGather::AllGather => ReduceOp::Sum.code(),
            };
            params.input = input;
            params.output = output;
            params.elems = shard as u64;
            let vecs = shard.div_ceil(intranode_kernels_gpu::math::elems_per_vec(elem.bytes()));
            // One vector per thread over every SM, as the Lamport one-shot: each
            // thread moves its vector of all W slots.
            let (blocks, threads) =
                self.lamport_launch()
                    .shape_for(AllReduceAlgo::Lamport, vecs, self.world());
            Ok(Some(Launch {
                key: kernel,
                grid: Grid::new(blocks, threads),
                args: (params,),
            }))
        };
        // SAFETY: the caller vouches for input and output, the peers' pads
        // live as long as `self`; the shard fits the Lamport buffer
        // (checked in `build`); these kernels keep no per-block flags.
        unsafe { self.run(what.name(), stream, build) }
    }
}

#[cfg(test)]
mod tests {
    use intranode_kernels_gpu::layout::MAX_RANKS;

    use super::*;

    #[test]
    fn every_world_has_its_kernels() {
        for what in [ScatterGather::ReduceScatter, ScatterGather::AllGather] {
            for elem in ElemType::ALL {
                for world in 2..=MAX_RANKS {
                    assert!(scatter_gather_kernel(what, elem, world).is_some());
                }
                assert!(scatter_gather_kernel(what, elem, 1).is_none());
                assert!(scatter_gather_kernel(what, elem, MAX_RANKS + 1).is_none());
            }
        }
    }
}
