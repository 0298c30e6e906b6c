//! Communication hooks (seed comm.hpp `CommHookInterface`): what DDP runs
//! on each [`GradBucket`] to reduce it, and the built-in ones.
//!
//! Futures here are stream-ordered, like everything in this crate:
//! [`CommHook::run_hook`] enqueues the reduction on the communicator's
//! stream and returns a [`HookFuture`] naming the buffer that holds the
//! result once the stream passes the work. Work on that stream may use the
//! result at once; another stream waits with [`HookFuture::wait_on`]; the
//! host with [`HookFuture::wait`].
//!
//! Built-ins (c10d `default_comm_hooks`):
//! - [`AllReduceHook`]: the mean over ranks (all-reduce, divided by the
//!   world size);
//! - [`CompressHook`]: f32 gradients cast to bf16 or f16, averaged in that
//!   type, cast back into the f32 bucket;
//! - [`StatefulHook`]: a user function with user state (c10d
//!   `CppCommHookInterface<T>`).
//!
//! c10d divides before the all-reduce, so that f16 sums cannot overflow.
//! Here the division is the all-reduce's `Avg` op: our kernels sum in f32
//! and divide before the one rounding to the bucket's type (no overflow,
//! one rounding less), and NCCL's `ncclAvg` pre-multiplies by
//! 1/world for floating types, which is c10d's order.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use cudarc::nccl::{NcclType, ReduceOp as NcclOp};

use super::bucket::GradBucket;
use super::buffer::{DeviceBuffer, FlatBuffer, with_slice};
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::kernels::KernelModule;
use crate::types::{DType, ElemType};
use crate::work::Work;

/// The pending result of a hook: the work on the communicator's stream and
/// the buffer that holds the reduced gradients once the stream passes it.
#[derive(Debug)]
pub struct HookFuture<'b> {
    work: Work,
    result: &'b FlatBuffer,
}

impl<'b> HookFuture<'b> {
    /// A future for work enqueued on `stream` whose result lands in
    /// `result` (for hooks written outside this crate).
    pub fn on_stream(stream: Arc<CudaStream>, result: &'b FlatBuffer) -> Self {
        HookFuture {
            work: Work::new(stream, None),
            result,
        }
    }

    /// The enqueued work.
    pub fn work(&self) -> &Work {
        &self.work
    }

    /// Makes `stream` wait for the hook's work (a no-op on its own stream).
    pub fn wait_on(&self, stream: &CudaStream) -> Result<()> {
        self.work.wait_on(stream)
    }

    /// Blocks the host until the work is done; then the result.
    pub fn wait(self) -> Result<&'b FlatBuffer> {
        self.work.synchronize()?;
        Ok(self.result)
    }

    /// The result buffer, valid in the order of the hook's stream.
    pub fn value(self) -> &'b FlatBuffer {
        self.result
    }
}

/// A DDP communication hook (seed comm.hpp `CommHookInterface`).
pub trait CommHook {
    /// Enqueues the reduction of `bucket` and returns the future of its
    /// result.
    fn run_hook<'b>(&mut self, bucket: &'b mut GradBucket) -> Result<HookFuture<'b>>;

    /// The reduced gradients from a future of [`run_hook`](Self::run_hook)
    /// (c10d `parseHookResult`), valid in the order of the hook's stream.
    fn parse_hook_result<'b>(&self, result: HookFuture<'b>) -> Result<&'b FlatBuffer> {
        Ok(result.value())
    }
}

/// All-reduces a flat buffer in place with `op` through `comm` (whichever
/// path the communicator picks), for hooks of any element type.
pub fn all_reduce_flat(comm: &Communicator, buffer: &mut FlatBuffer, op: &NcclOp) -> Result<()> {
    with_slice!(buffer, s => comm.all_reduce_in_place(s, op).map(|_| ()))
}

fn refuse_sparse(bucket: &GradBucket, hook: &str) -> Result<()> {
    if bucket.sparse_indices().is_some() {
        return Err(Error::InvalidArgument(format!(
            "{hook}: bucket {} holds a sparse gradient, which it does not reduce",
            bucket.index()
        )));
    }
    Ok(())
}

/// The mean of each gradient over all ranks (c10d `allreduce_hook` /
/// `AllReduceCommHook`), in the bucket's element type.
#[derive(Debug)]
pub struct AllReduceHook<'c> {
    comm: &'c Communicator,
}

impl<'c> AllReduceHook<'c> {
    /// A hook that averages each bucket over `comm`'s ranks.
    pub fn new(comm: &'c Communicator) -> Self {
        AllReduceHook { comm }
    }
}

impl CommHook for AllReduceHook<'_> {
    fn run_hook<'b>(&mut self, bucket: &'b mut GradBucket) -> Result<HookFuture<'b>> {
        refuse_sparse(bucket, "all-reduce hook")?;
        all_reduce_flat(self.comm, bucket.buffer_mut(), &NcclOp::Avg)?;
        Ok(HookFuture::on_stream(
            self.comm.stream().clone(),
            bucket.buffer(),
        ))
    }
}

/// Gradient compression (c10d `fp16_compress_hook`, `bf16_compress_hook`):
/// the f32 bucket is cast to the 16-bit type, averaged over the ranks in
/// that type (half the bytes on the wire), and cast back into the bucket.
#[derive(Debug)]
pub struct CompressHook<'c> {
    comm: &'c Communicator,
    /// The 16-bit type on the wire (bf16 or f16).
    wire: ElemType,
    /// The cast kernels, loaded here only when the communicator has no
    /// intra-node path (which would have them loaded already).
    own_kernels: Option<KernelModule>,
    /// The compressed copy, grown to the largest bucket and reused: every
    /// use is ordered on the communicator's stream.
    scratch: Option<FlatBuffer>,
}

impl<'c> CompressHook<'c> {
    /// Compression to bf16.
    pub fn bf16(comm: &'c Communicator) -> Result<Self> {
        Self::new(comm, ElemType::Bf16)
    }

    /// Compression to f16.
    pub fn f16(comm: &'c Communicator) -> Result<Self> {
        Self::new(comm, ElemType::F16)
    }

    fn new(comm: &'c Communicator, wire: ElemType) -> Result<Self> {
        let own_kernels = match comm.intra() {
            Some(_) => None,
            None => Some(KernelModule::load(comm.stream().context())?),
        };
        Ok(CompressHook {
            comm,
            wire,
            own_kernels,
            scratch: None,
        })
    }

    /// The type on the wire.
    pub fn wire_type(&self) -> ElemType {
        self.wire
    }
}

/// Cast down into `scratch[..n]`, average, cast back into `grads`.
fn compress_round_trip<H: DType + NcclType>(
    comm: &Communicator,
    kernels: &KernelModule,
    grads: &mut CudaSlice<f32>,
    scratch: &mut CudaSlice<H>,
) -> Result<()> {
    let n = grads.len();
    let stream = comm.stream();
    let mut wire = scratch.try_slice_mut(..n).ok_or_else(|| {
        Error::InvalidArgument("compression scratch smaller than the bucket".into())
    })?;
    kernels.cast(&stream, grads, &mut wire)?;
    comm.all_reduce_in_place(&mut wire, &NcclOp::Avg)?;
    kernels.cast(&stream, &wire, grads)
}

impl CommHook for CompressHook<'_> {
    fn run_hook<'b>(&mut self, bucket: &'b mut GradBucket) -> Result<HookFuture<'b>> {
        let name = match self.wire {
            ElemType::Bf16 => "bf16 compression hook",
            _ => "f16 compression hook",
        };
        refuse_sparse(bucket, name)?;
        let index = bucket.index();
        let Some(grads) = bucket.buffer_mut().as_f32_mut() else {
            return Err(Error::InvalidArgument(format!(
                "{name}: bucket {index} holds {:?} gradients; compression takes f32",
                bucket.buffer().elem_type()
            )));
        };
        let n = grads.len();
        let stream = self.comm.stream().clone();
        let too_small = self.scratch.as_ref().is_none_or(|s| s.elems() < n);
        if too_small {
            self.scratch = Some(FlatBuffer::zeros(&stream, self.wire, n)?);
        }
        let kernels = match (&self.own_kernels, self.comm.intra()) {
            (Some(k), _) => k,
            (None, Some(intra)) => intra.kernels(),
            (None, None) => {
                return Err(Error::InvalidArgument(format!("{name}: no kernels loaded")));
            }
        };
        match self.scratch.as_mut() {
            Some(FlatBuffer::Bf16(s)) => compress_round_trip(self.comm, kernels, grads, s)?,
            Some(FlatBuffer::F16(s)) => compress_round_trip(self.comm, kernels, grads, s)?,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "{name}: wire type {:?} is not a 16-bit type",
                    self.wire
                )));
            }
        }
        Ok(HookFuture::on_stream(stream, bucket.buffer()))
    }
}

/// A hook made of a user function and user state (c10d
/// `CppCommHookInterface<T>`): `run` gets the state, the communicator and
/// the bucket, enqueues its reduction on the communicator's stream (every
/// collective of [`Communicator`] does) and leaves the result in the
/// bucket's buffer. The state stays readable between steps.
pub struct StatefulHook<'c, S, F> {
    comm: &'c Communicator,
    state: S,
    run: F,
}

impl<S: std::fmt::Debug, F> std::fmt::Debug for StatefulHook<'_, S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatefulHook")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<'c, S, F> StatefulHook<'c, S, F>
where
    F: FnMut(&mut S, &Communicator, &mut GradBucket) -> Result<()>,
{
    /// A hook that calls `run(&mut state, comm, bucket)` for each bucket.
    pub fn new(comm: &'c Communicator, state: S, run: F) -> Self {
        StatefulHook { comm, state, run }
    }

    /// The hook's state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The hook's state, to change between steps.
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }

    /// The hook's state, the hook consumed.
    pub fn into_state(self) -> S {
        self.state
    }
}

impl<S, F> CommHook for StatefulHook<'_, S, F>
where
    F: FnMut(&mut S, &Communicator, &mut GradBucket) -> Result<()>,
{
    fn run_hook<'b>(&mut self, bucket: &'b mut GradBucket) -> Result<HookFuture<'b>> {
        (self.run)(&mut self.state, self.comm, bucket)?;
        Ok(HookFuture::on_stream(
            self.comm.stream().clone(),
            bucket.buffer(),
        ))
    }
}
