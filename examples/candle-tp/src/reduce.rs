//! The row-parallel all-reduce as a candle in-place op: the partial sums
//! of a row-parallel matmul are summed across ranks on candle's own
//! stream, through intranode's `Communicator` or cudarc's NCCL `Comm`.
//! Both back-ends sum in place: the partial is the matmul's fresh output,
//! and an out-of-place op (candle's multiprocess example allocates the
//! result) would time an allocation beside the communication.
//!
//! [`Fused`] is the third way: intranode's all-reduce + residual add +
//! RMSNorm in one call, the residual stream kept in a buffer of its own.

use std::cell::RefCell;
use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::op::BackpropOp;
use candle_core::{
    CpuStorage, CudaDevice, CudaStorage, DType, InplaceOp1, Layout, Result, Storage, Tensor, bail,
};
use cudarc::driver::{CudaSlice, CudaStream, CudaViewMut};
use cudarc::nccl::{Comm, NcclType, ReduceOp};
use half::{bf16, f16};
use intranode::{Communicator, NormPath};

use crate::model::{Residual, rms_norm};

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

/// The residual stream through intranode's fused call: `residual +=
/// all_reduce(partial)` and `rms_norm(residual)` in one
/// `Communicator::all_reduce_residual_rmsnorm` (one kernel where
/// `Communicator::norm_path_for` says `Fused`; an all-reduce and one
/// residual + norm kernel elsewhere). The residual lives in a buffer of its
/// own for the whole step, written in place by each call; candle sees only
/// the normed outputs, which the next block's matmuls read.
pub struct Fused<'a> {
    comm: &'a Communicator,
    device: CudaDevice,
    residual: Option<CudaSlice<bf16>>,
    rows: usize,
    hidden: usize,
}

impl<'a> Fused<'a> {
    pub fn new(comm: &'a Communicator, device: CudaDevice) -> Self {
        Fused {
            comm,
            device,
            residual: None,
            rows: 0,
            hidden: 0,
        }
    }

    /// The path the step's calls take (`rows x hidden` bf16).
    pub fn path(comm: &Communicator, rows: usize, hidden: usize) -> NormPath {
        comm.norm_path_for::<bf16>(rows, hidden, None)
    }
}

impl Residual for Fused<'_> {
    fn start(&mut self, x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
        let (rows, hidden) = x.dims2()?;
        if x.dtype() != DType::BF16 {
            bail!("the fused residual is bf16, not {:?}", x.dtype());
        }
        // A copy: the calls write the residual in place, and candle's `x`
        // may be shared (a step's input is the caller's tensor).
        let copy = {
            let (storage, layout) = x.storage_and_layout();
            let Storage::Cuda(cuda) = &*storage else {
                bail!("the fused residual needs a CUDA tensor");
            };
            let Some((start, end)) = layout.contiguous_offsets() else {
                bail!("the residual must be contiguous");
            };
            let src = cuda.as_cuda_slice::<bf16>()?.slice(start..end);
            self.device
                .cuda_stream()
                .clone_dtod(&src)
                .map_err(candle_core::Error::wrap)?
        };
        self.residual = Some(copy);
        (self.rows, self.hidden) = (rows, hidden);
        rms_norm(x, weight, eps)
    }

    fn add_norm(&mut self, parts: Vec<Tensor>, weight: &Tensor, eps: f64) -> Result<Tensor> {
        let [partial] = <[Tensor; 1]>::try_from(parts)
            .map_err(|p| candle_core::Error::msg(format!("{} partials, not 1", p.len())))?;
        let Some(residual) = self.residual.as_mut() else {
            bail!("add_norm before start");
        };
        if partial.dims2()? != (self.rows, self.hidden) || weight.dims1()? != self.hidden {
            bail!(
                "partial {:?} and weight {:?} do not match the residual ({} x {})",
                partial.dims(),
                weight.dims(),
                self.rows,
                self.hidden
            );
        }
        let stream = self.device.cuda_stream();
        // SAFETY: `bf16` is plain bits, and the call below writes every
        // one of the `rows x hidden` outputs (on either path) before
        // anything reads them, in the stream's order: what candle does
        // for the outputs of its own ops.
        let output = unsafe { stream.alloc::<bf16>(self.rows * self.hidden) }
            .map_err(candle_core::Error::wrap)?;
        let op = FusedOp {
            comm: self.comm,
            residual: RefCell::new(residual),
            weight,
            output: RefCell::new(output),
            eps: eps as f32,
        };
        // The partial is the matmul's fresh output: the sum lands in it
        // in place, and nobody reads it afterwards.
        partial.inplace_op1(&op)?;
        let output = op.output.into_inner();
        Ok(Tensor::from_storage(
            Storage::Cuda(CudaStorage::wrap_cuda_slice(output, self.device.clone())),
            (self.rows, self.hidden),
            BackpropOp::none(),
            false,
        ))
    }
}

/// One fused call, as candle's in-place op on the partial (the only one of
/// the four buffers candle owns and the call writes).
struct FusedOp<'a> {
    comm: &'a Communicator,
    residual: RefCell<&'a mut CudaSlice<bf16>>,
    weight: &'a Tensor,
    output: RefCell<CudaSlice<bf16>>,
    eps: f32,
}

impl InplaceOp1 for FusedOp<'_> {
    fn name(&self) -> &'static str {
        "intranode-all-reduce-residual-rmsnorm"
    }

    fn cpu_fwd(&self, _storage: &mut CpuStorage, _layout: &Layout) -> Result<()> {
        bail!("{}: needs a CUDA tensor", InplaceOp1::name(self))
    }

    fn cuda_fwd(&self, storage: &mut CudaStorage, layout: &Layout) -> Result<()> {
        let name = InplaceOp1::name(self);
        let Some((start, end)) = layout.contiguous_offsets() else {
            bail!("{name}: the partial must be contiguous");
        };
        if storage.device.cuda_stream().cu_stream() != self.comm.stream().cu_stream() {
            bail!("{name}: the tensor's device stream is not the communicator's");
        }
        let (w_storage, w_layout) = self.weight.storage_and_layout();
        let Storage::Cuda(w_cuda) = &*w_storage else {
            bail!("{name}: the norm weight must be a CUDA tensor");
        };
        let Some((w_start, w_end)) = w_layout.contiguous_offsets() else {
            bail!("{name}: the norm weight must be contiguous");
        };
        let weight = w_cuda.as_cuda_slice::<bf16>()?.slice(w_start..w_end);
        let mut partial = storage.as_cuda_slice_mut::<bf16>()?.slice_mut(start..end);
        let mut residual = self.residual.borrow_mut();
        let mut output = self.output.borrow_mut();
        // Ordered on the communicator's stream, which is candle's: no
        // wait needed on the returned `Work`.
        self.comm
            .all_reduce_residual_rmsnorm(
                &mut partial,
                &mut **residual,
                &weight,
                self.eps,
                &mut *output,
            )
            .map(drop)
            .map_err(candle_core::Error::wrap)
    }
}
