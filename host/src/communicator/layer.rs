//! The steps of a tensor-parallel decode layer that need no communication
//! but run on the communicator's stream next to its collectives: the
//! RMSNorm that no residual add precedes (the first of a layer stack)
//! and the MLP's SiLU x mul. Like
//! [`residual_rmsnorm`](Communicator::residual_rmsnorm), they take their
//! buffers through `CallBuffers`, so they can be captured into a CUDA
//! graph under cudarc's event tracking (NOTE [capture and event
//! tracking] in `intra/tracked.rs`).

use cudarc::driver::{DevicePtr, DevicePtrMut};
use intranode_kernels_gpu::layout::NormParams;

use super::Communicator;
use crate::error::{Error, Result};
use crate::kernels::DType;
use crate::work::Work;

impl Communicator {
    /// `output = input * rsqrt(mean(input^2) + eps) * weight`, row by row,
    /// `hidden` being `weight.len()`, on this communicator's stream (no
    /// communication): the norm before a layer's first GEMM where no
    /// residual add comes first. Products in f32, each output rounded
    /// once to `T`.
    pub fn rmsnorm<T: DType>(
        &self,
        input: &impl DevicePtr<T>,
        weight: &impl DevicePtr<T>,
        eps: f32,
        output: &mut impl DevicePtrMut<T>,
    ) -> Result<Work> {
        let (rank, hidden) = (self.rank, weight.len());
        if hidden == 0 || !input.len().is_multiple_of(hidden) || output.len() != input.len() {
            return Err(Error::InvalidArgument(format!(
                "rmsnorm on rank {rank}: input {} and output {} elements must be equal rows of the weight's {hidden}",
                input.len(),
                output.len()
            )));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "rmsnorm on rank {rank}: eps {eps} is not a finite number >= 0"
            )));
        }
        self.check_group("rmsnorm")?;
        self.check_health()?;
        let kernels = self.own_kernels()?;
        let mut bufs = self.call_buffers()?;
        let p = NormParams {
            input: bufs.input(input, "norm input")?,
            residual: 0,
            weight: bufs.input(weight, "norm weight")?,
            output: bufs.output(output, "norm output")?,
            rows: (input.len() / hidden) as u64,
            hidden: hidden as u64,
            eps,
            _pad: 0,
        };
        bufs.ready()?;
        // SAFETY: the three buffers are live device buffers of the lengths
        // checked above (`rows x hidden`, `weight` `hidden`), ordered with
        // the stream by `bufs`; `output` is `&mut`, so it overlaps nothing
        // else.
        unsafe { kernels.rmsnorm_raw(&self.stream, T::ELEM, p) }?;
        bufs.finish()?;
        Ok(self.work())
    }

    /// `output[r][j] = silu(gate_up[r][j]) * gate_up[r][cols + j]` with
    /// `silu(g) = g / (1 + exp(-g))`, for rows of `cols` outputs: the
    /// MLP's activation on the gate-up GEMM's output, whose rows hold the
    /// gate half then the up half (`torch.chunk(2, -1)`). In f32 (the
    /// exponential is the GPU's `ex2.approx`, within 2 ulp), the product
    /// rounded once to `T`. On this communicator's stream, no
    /// communication.
    pub fn silu_mul<T: DType>(
        &self,
        gate_up: &impl DevicePtr<T>,
        output: &mut impl DevicePtrMut<T>,
        cols: usize,
    ) -> Result<Work> {
        let rank = self.rank;
        if cols == 0
            || !output.len().is_multiple_of(cols)
            || gate_up.len() != output.len().saturating_mul(2)
        {
            return Err(Error::InvalidArgument(format!(
                "silu_mul on rank {rank}: output {} elements must be rows of {cols} and gate_up {} twice as many",
                output.len(),
                gate_up.len()
            )));
        }
        self.check_group("silu_mul")?;
        self.check_health()?;
        let kernels = self.own_kernels()?;
        let mut bufs = self.call_buffers()?;
        let rows = output.len() / cols;
        let g = bufs.input(gate_up, "gate_up")?;
        let o = bufs.output(output, "silu_mul output")?;
        bufs.ready()?;
        // SAFETY: `gate_up` holds `rows x 2 x cols` elements and `output`
        // `rows x cols` (checked above), both live and ordered with the
        // stream by `bufs`; `output` is `&mut`, so they do not overlap.
        unsafe { kernels.silu_mul_raw(&self.stream, T::ELEM, g, o, rows, cols) }?;
        bufs.finish()?;
        Ok(self.work())
    }
}
