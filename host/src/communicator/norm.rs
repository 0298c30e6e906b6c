//! The decode step's all-reduce followed by residual add and RMSNorm.

use super::*;

impl Communicator {
    /// The decode step's tail, as TensorRT-LLM's and FlashInfer's
    /// all-reduce fusion define it: `input` (`rows x hidden`, this rank's
    /// partial sums) is all-reduced (sum) in place, then `residual +=
    /// input` and `output = residual * rsqrt(mean(residual^2) + eps) *
    /// weight`, row by row, `hidden` being `weight.len()`. Each stored
    /// value is rounded once to `T`; the norm reads the residual as
    /// stored. Works at every size: the all-reduce goes where
    /// [`Communicator::all_reduce_in_place`] sends it (our kernels or
    /// NCCL), then our residual + norm kernel runs (one warp per row); the
    /// fused one-launch form is not written yet.
    pub fn all_reduce_residual_rmsnorm<T: DType + NcclType>(
        &self,
        input: &mut (impl DevicePtrMut<T> + DevicePtr<T>),
        residual: &mut impl DevicePtrMut<T>,
        weight: &impl DevicePtr<T>,
        eps: f32,
        output: &mut impl DevicePtrMut<T>,
    ) -> Result<Work> {
        self.check_norm_args(input.len(), residual.len(), weight.len(), eps, output.len())?;
        self.all_reduce_in_place(input, &NcclOp::Sum)?;
        self.residual_rmsnorm(&*input, residual, weight, eps, output)
    }

    /// The residual add + RMSNorm of
    /// [`all_reduce_residual_rmsnorm`](Self::all_reduce_residual_rmsnorm)
    /// alone, on this communicator's stream (no communication).
    pub fn residual_rmsnorm<T: DType>(
        &self,
        input: &impl DevicePtr<T>,
        residual: &mut impl DevicePtrMut<T>,
        weight: &impl DevicePtr<T>,
        eps: f32,
        output: &mut impl DevicePtrMut<T>,
    ) -> Result<Work> {
        self.check_norm_args(input.len(), residual.len(), weight.len(), eps, output.len())?;
        self.check_group("residual_rmsnorm")?;
        self.check_health()?;
        let kernels = self.own_kernels()?;
        let mut bufs = self.call_buffers()?;
        let hidden = weight.len();
        let rows = (output.len() / hidden) as u64;
        let p = NormParams {
            input: bufs.input(input, "norm input")?,
            residual: bufs.output(residual, "residual")?,
            weight: bufs.input(weight, "norm weight")?,
            output: bufs.output(output, "norm output")?,
            rows,
            hidden: hidden as u64,
            eps,
            _pad: 0,
        };
        bufs.ready()?;
        // SAFETY: the four buffers are live device buffers of the lengths
        // checked above (`rows x hidden`, `weight` `hidden`), ordered with
        // the stream by `bufs`; `residual` and `output` are `&mut`, so
        // they overlap nothing else.
        unsafe { kernels.residual_rmsnorm_raw(&self.stream, T::ELEM, p) }?;
        bufs.finish()?;
        Ok(self.work())
    }

    fn check_norm_args(
        &self,
        input: usize,
        residual: usize,
        hidden: usize,
        eps: f32,
        output: usize,
    ) -> Result<()> {
        let rank = self.rank;
        if hidden == 0 || !input.is_multiple_of(hidden) {
            return Err(Error::InvalidArgument(format!(
                "residual_rmsnorm on rank {rank}: {input} elements are not rows of the weight's {hidden}"
            )));
        }
        if residual != input || output != input {
            return Err(Error::InvalidArgument(format!(
                "residual_rmsnorm on rank {rank}: input {input}, residual {residual} and output {output} elements must be equal"
            )));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "residual_rmsnorm on rank {rank}: eps {eps} is not a finite number >= 0"
            )));
        }
        Ok(())
    }
}
