//! The entry points the project's GPU suites and benchmark drive the
//! intra-node communicator through (`intranode::internals`, under `--cfg
//! intranode_internals`): an all-reduce that names its form, the GPU
//! barrier and the facts a suite checks. `Communicator` decides the form
//! itself and never reaches these; they exist only in the project's own
//! builds, so the crate as users build it carries none of them.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};
use intranode_kernels_gpu::entries::Barrier;
use intranode_kernels_gpu::layout::{BarrierParams, MAX_RANKS};

use super::IntraNodeComm;
use super::all_reduce::RawAllReduce;
use super::launch::Launch;
use crate::decide::{AllReduceCall, decide_all_reduce};
use crate::error::{Error, Result};
use crate::kernels::Grid;
use crate::types::AllReduceAlgo;
use crate::types::{DType, ElemType, ReduceOp};
use crate::work::Work;

impl IntraNodeComm {
    /// The decision for a call of `elems` elements of `elem` that names
    /// `algo` (the entry points of this type that take an explicit
    /// algorithm: tests and the benchmark): `decide_all_reduce` with
    /// `algo` forced, so a Lamport form hands messages larger than its
    /// buffers to its barrier twin. `Communicator` decides itself
    /// (`communicator/all_reduce.rs`) and calls `all_reduce_raw`, which
    /// does not decide again.
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

    /// Bytes of the symmetric buffer the configuration asked for
    /// (`config::BUFFER_BYTES_ENV`), which every form but the push form
    /// works in; the allocation (`symm().buffer_bytes()`) may be larger,
    /// for the push form's rings (`config::PushShape::scratch_bytes`).
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
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
            |(input, output)| unsafe {
                let call = RawAllReduce {
                    input,
                    output,
                    elems,
                    elem: T::ELEM,
                    op,
                    algo,
                };
                self.all_reduce_raw(&call, stream)
            },
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
        let elems = buf.len();
        self.with_buffers(
            stream,
            |bufs| bufs.output(buf, "all-reduce buffer"),
            // SAFETY: `ptr` is a live device buffer of `elems` elements.
            |ptr| unsafe {
                let call = RawAllReduce {
                    input: ptr,
                    output: ptr,
                    elems,
                    elem: T::ELEM,
                    op,
                    algo,
                };
                self.all_reduce_raw(&call, stream)
            },
        )
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

    /// CUDA ordinal of this rank's device (in this process).
    pub fn device(&self) -> usize {
        self.device
    }

    /// This rank's context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A host-side barrier of all ranks through the store (not ordered
    /// with GPU work: synchronize first where that matters).
    pub fn store_barrier(&self) -> Result<()> {
        let (rank, world) = (self.rank, self.world);
        self.with_exchange(|store, exchange| exchange.barrier(store, rank, world))
            .map_err(|source| Error::Store {
                op: "barrier",
                rank,
                source,
            })
    }
}
