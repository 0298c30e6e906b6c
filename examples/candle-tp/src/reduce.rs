//! The row-parallel all-reduce as a candle in-place op: the partial sums
//! of a row-parallel matmul are summed across ranks on candle's own
//! stream, through intranode's `Communicator` or cudarc's NCCL `Comm`.
//! Both back-ends sum in place: the partial is the matmul's fresh output,
//! and an out-of-place op (candle's multiprocess example allocates the
//! result) would time an allocation beside the communication.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CudaStorage, DType, InplaceOp1, Layout, Result, bail};
use cudarc::driver::{CudaStream, CudaViewMut};
use cudarc::nccl::{Comm, NcclType, ReduceOp};
use half::{bf16, f16};
use intranode::Communicator;

/// Who sums the partial results.
#[derive(Debug)]
pub enum AllReduce {
    /// intranode: our kernels where they win, NCCL underneath elsewhere
    /// (and in a world of one, where the intra-node path does not exist).
    Intranode(Box<Communicator>),
    /// cudarc's NCCL communicator, as candle's multiprocess Llama example
    /// uses it.
    Nccl(Comm),
}

impl AllReduce {
    pub fn name(&self) -> &'static str {
        match self {
            AllReduce::Intranode(_) => "intranode",
            AllReduce::Nccl(_) => "nccl",
        }
    }

    /// The stream every call is enqueued on.
    pub fn stream(&self) -> Arc<CudaStream> {
        match self {
            AllReduce::Intranode(c) => c.stream(),
            AllReduce::Nccl(c) => c.stream(),
        }
    }

    fn sum<T: intranode::kernels::DType + NcclType>(
        &self,
        buf: &mut CudaViewMut<'_, T>,
    ) -> Result<()> {
        match self {
            // The returned `Work` needs no waiting: the sum runs in the
            // stream's order, before candle's next op on that stream.
            AllReduce::Intranode(c) => c
                .all_reduce_in_place(buf, &ReduceOp::Sum)
                .map(drop)
                .map_err(candle_core::Error::wrap),
            AllReduce::Nccl(c) => c
                .all_reduce_in_place(buf, &ReduceOp::Sum)
                .map(drop)
                .map_err(|e| candle_core::Error::msg(format!("ncclAllReduce: {e:?}"))),
        }
    }
}

impl InplaceOp1 for AllReduce {
    fn name(&self) -> &'static str {
        match self {
            AllReduce::Intranode(_) => "intranode-all-reduce",
            AllReduce::Nccl(_) => "nccl-all-reduce",
        }
    }

    fn cpu_fwd(&self, _storage: &mut CpuStorage, _layout: &Layout) -> Result<()> {
        bail!(
            "{}: the all-reduce needs a CUDA tensor",
            InplaceOp1::name(self)
        )
    }

    fn cuda_fwd(&self, storage: &mut CudaStorage, layout: &Layout) -> Result<()> {
        let Some((start, end)) = layout.contiguous_offsets() else {
            bail!(
                "{}: the tensor must be contiguous (shape {:?}, stride {:?})",
                InplaceOp1::name(self),
                layout.shape(),
                layout.stride()
            );
        };
        // The communicator was built on candle's stream, so the sum is
        // ordered after the matmul that wrote the partials and before
        // whatever candle enqueues next: no event, no host wait. A tensor
        // of another device (another stream) would race; refuse it.
        let candle_stream = storage.device.cuda_stream();
        if candle_stream.cu_stream() != self.stream().cu_stream() {
            bail!(
                "{}: the tensor's device stream is not the communicator's",
                InplaceOp1::name(self)
            );
        }
        match storage.dtype() {
            DType::BF16 => {
                self.sum(&mut storage.as_cuda_slice_mut::<bf16>()?.slice_mut(start..end))
            }
            DType::F16 => self.sum(&mut storage.as_cuda_slice_mut::<f16>()?.slice_mut(start..end)),
            DType::F32 => self.sum(&mut storage.as_cuda_slice_mut::<f32>()?.slice_mut(start..end)),
            other => bail!("{}: no all-reduce for {other:?}", InplaceOp1::name(self)),
        }
    }
}
