//! The decode step's all-reduce followed by residual add and RMSNorm.

use super::*;
use crate::intra::fused_norm::PrefetchRegion;

impl Communicator {
    /// The decode step's tail, as TensorRT-LLM's and FlashInfer's
    /// all-reduce fusion define it: `input` (`rows x hidden`, this rank's
    /// partial sums) is all-reduced (sum) in place, then `residual +=
    /// input` and `output = residual * rsqrt(mean(residual^2) + eps) *
    /// weight`, row by row, `hidden` being `weight.len()`. Each stored
    /// value is rounded once to `T`; the norm reads the residual as
    /// stored. Works at every size: where `decide::decide_norm` says so,
    /// one launch of the fused kernel; elsewhere the all-reduce goes
    /// where [`Communicator::all_reduce_in_place`] sends it (our kernels
    /// or NCCL), then our residual + norm kernel runs. Both give the same
    /// `input` and `residual` bits; the normed output may differ in the
    /// last place (the sum of squares is added in another order), and is
    /// the same on every rank either way.
    ///
    /// # Example
    ///
    /// The end of a row-parallel layer at decode (8 tokens, hidden 4096):
    ///
    /// ```no_run
    /// # use intranode::{Communicator, dist_env::DistEnv};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let env = DistEnv::from_env()?;
    /// # let store = intranode::store::connect_env(&env)?;
    /// # let stream = intranode::gpu::context(env.local_rank)?.new_stream()?;
    /// # let comm = Communicator::new(stream.clone(), store, env.rank, env.world_size)?;
    /// let (rows, hidden) = (8, 4096);
    /// let mut partial = stream.alloc_zeros::<f32>(rows * hidden)?; // this rank's GEMM output
    /// let mut residual = stream.alloc_zeros::<f32>(rows * hidden)?; // the residual stream
    /// let weight = stream.clone_htod(&vec![1.0f32; hidden])?; // the norm's weight
    /// let mut normed = stream.alloc_zeros::<f32>(rows * hidden)?; // the next layer's input
    /// comm.all_reduce_residual_rmsnorm(&mut partial, &mut residual, &weight, 1e-5, &mut normed)?;
    /// // Which form ran: `Fused` (one launch) or `Unfused`.
    /// println!("{:?}", comm.norm_path_for::<f32>(rows, hidden, None));
    /// # Ok(())
    /// # }
    /// ```
    // NOTE [fused norm] in `kernels-gpu/src/fused_norm.rs`.
    pub fn all_reduce_residual_rmsnorm<T: DType + NcclType>(
        &self,
        input: &mut (impl DevicePtrMut<T> + DevicePtr<T>),
        residual: &mut impl DevicePtrMut<T>,
        weight: &impl DevicePtr<T>,
        eps: f32,
        output: &mut impl DevicePtrMut<T>,
    ) -> Result<Work> {
        self.all_reduce_residual_rmsnorm_with(input, residual, weight, eps, output, None)
    }

    /// [`all_reduce_residual_rmsnorm`](Self::all_reduce_residual_rmsnorm)
    /// with a path forced (tests and the benchmark; `None`: the
    /// configuration's `INTRANODE_NORM_PATH`, else the decision). A forced
    /// [`NormPath::Fused`] still falls back where the fused kernel cannot
    /// run (`decide::fused_norm_runs`: rows of whole 16-byte vectors,
    /// aligned buffers, a fully connected group, a message within a
    /// Lamport slot), so
    /// the call works at every size; [`norm_path_for`](Self::norm_path_for)
    /// says which path a call takes.
    pub fn all_reduce_residual_rmsnorm_with<T: DType + NcclType>(
        &self,
        input: &mut (impl DevicePtrMut<T> + DevicePtr<T>),
        residual: &mut impl DevicePtrMut<T>,
        weight: &impl DevicePtr<T>,
        eps: f32,
        output: &mut impl DevicePtrMut<T>,
        path: Option<NormPath>,
    ) -> Result<Work> {
        self.residual_rmsnorm_after_all_reduce(
            input,
            residual,
            weight,
            eps,
            output,
            path,
            None::<&cudarc::driver::CudaSlice<u8>>,
        )
    }

    /// [`all_reduce_residual_rmsnorm_with`](Self::all_reduce_residual_rmsnorm_with),
    /// and while the fused kernel waits on its peers, its spare blocks ask
    /// L2 for the start of `next` (at most `INTRANODE_L2_PREFETCH`'s bytes,
    /// 8 MiB by default): in a decode step, the weights of the GEMM that
    /// reads `output`, so that GEMM finds part of them in L2 instead of HBM.
    /// A hint: every result has the bits the call without it gives, and
    /// where the call takes the unfused path, the GPU is older than sm_90 or
    /// the setting is `off`, nothing is prefetched.
    ///
    /// # Example
    ///
    /// A layer's first tail, which the gate-up GEMM follows:
    ///
    /// ```no_run
    /// # use intranode::{Communicator, dist_env::DistEnv};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let env = DistEnv::from_env()?;
    /// # let store = intranode::store::connect_env(&env)?;
    /// # let stream = intranode::gpu::context(env.local_rank)?.new_stream()?;
    /// # let comm = Communicator::new(stream.clone(), store, env.rank, env.world_size)?;
    /// let (rows, hidden, inter) = (8, 4096, 3584);
    /// let mut o = stream.alloc_zeros::<f32>(rows * hidden)?; // o_proj's partial sums
    /// let mut residual = stream.alloc_zeros::<f32>(rows * hidden)?;
    /// let weight = stream.clone_htod(&vec![1.0f32; hidden])?;
    /// let mut normed = stream.alloc_zeros::<f32>(rows * hidden)?;
    /// let gate_up = stream.alloc_zeros::<f32>(hidden * 2 * inter)?; // the next GEMM's weights
    /// comm.all_reduce_residual_rmsnorm_prefetch(
    ///     &mut o, &mut residual, &weight, 1e-5, &mut normed, &gate_up, None,
    /// )?;
    /// # Ok(())
    /// # }
    /// ```
    // NOTE [l2 prefetch] in `kernels-gpu/src/fused_norm.rs`.
    #[allow(clippy::too_many_arguments)]
    pub fn all_reduce_residual_rmsnorm_prefetch<T: DType + NcclType, U>(
        &self,
        input: &mut (impl DevicePtrMut<T> + DevicePtr<T>),
        residual: &mut impl DevicePtrMut<T>,
        weight: &impl DevicePtr<T>,
        eps: f32,
        output: &mut impl DevicePtrMut<T>,
        next: &impl DevicePtr<U>,
        path: Option<NormPath>,
    ) -> Result<Work> {
        self.residual_rmsnorm_after_all_reduce(
            input,
            residual,
            weight,
            eps,
            output,
            path,
            Some(next),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn residual_rmsnorm_after_all_reduce<T: DType + NcclType, U, P: DevicePtr<U>>(
        &self,
        input: &mut (impl DevicePtrMut<T> + DevicePtr<T>),
        residual: &mut impl DevicePtrMut<T>,
        weight: &impl DevicePtr<T>,
        eps: f32,
        output: &mut impl DevicePtrMut<T>,
        path: Option<NormPath>,
        next: Option<&P>,
    ) -> Result<Work> {
        self.check_norm_args(input.len(), residual.len(), weight.len(), eps, output.len())?;
        self.check_group("all_reduce_residual_rmsnorm")?;
        let hidden = weight.len();
        let rows = input.len() / hidden;
        let forced = path.or(self.forced_norm);
        // Decided first as if the buffers were aligned, so the unfused
        // path takes no address it does not use; then again with their
        // alignment, once the fused path has their addresses.
        if let Some(intra) = &self.intra
            && self.decide_norm::<T>(rows, hidden, true, forced) == NormPath::Fused
        {
            let mut bufs = intra.call_buffers(&self.stream)?;
            let x = bufs.output(input, "norm input")?;
            let res = bufs.output(residual, "residual")?;
            let w = bufs.input(weight, "norm weight")?;
            let out = bufs.output(output, "norm output")?;
            let prefetch = match next {
                Some(next) => Some(PrefetchRegion {
                    ptr: bufs.input(next, "prefetch region")?,
                    bytes: next.len().saturating_mul(std::mem::size_of::<U>()),
                }),
                None => None,
            };
            let aligned = intranode_kernels_gpu::index::all_vec_aligned(&[
                x as usize,
                res as usize,
                w as usize,
                out as usize,
            ]);
            if self.decide_norm::<T>(rows, hidden, aligned, forced) == NormPath::Fused {
                bufs.ready()?;
                // SAFETY: the four buffers are live device buffers of the
                // lengths checked above (`rows x hidden`, `weight`
                // `hidden`), ordered with the stream by `bufs`; `input`,
                // `residual` and `output` are `&mut`, so they overlap
                // nothing else; the prefetch region is a live buffer of
                // `len` elements, ordered by `bufs` like an input.
                let work = unsafe {
                    intra.all_reduce_residual_rmsnorm_raw(
                        x,
                        res,
                        w,
                        out,
                        rows,
                        hidden,
                        T::ELEM,
                        eps,
                        prefetch,
                        &self.stream,
                    )
                }?;
                bufs.finish()?;
                return Ok(work);
            }
            // Misaligned views: nothing was launched; the guards record
            // their (empty) use and the unfused path takes them again.
            bufs.finish()?;
        }
        self.all_reduce_in_place(input, &NcclOp::Sum)?;
        self.residual_rmsnorm(&*input, residual, weight, eps, output)
    }

    /// The path an [`all_reduce_residual_rmsnorm`] of `rows x hidden`
    /// elements of `T` takes with aligned buffers (`path` as in
    /// [`all_reduce_residual_rmsnorm_with`]).
    ///
    /// [`all_reduce_residual_rmsnorm`]: Self::all_reduce_residual_rmsnorm
    /// [`all_reduce_residual_rmsnorm_with`]: Self::all_reduce_residual_rmsnorm_with
    pub fn norm_path_for<T: DType>(
        &self,
        rows: usize,
        hidden: usize,
        path: Option<NormPath>,
    ) -> NormPath {
        self.decide_norm::<T>(rows, hidden, true, path.or(self.forced_norm))
    }

    fn decide_norm<T: DType>(
        &self,
        rows: usize,
        hidden: usize,
        aligned: bool,
        forced: Option<NormPath>,
    ) -> NormPath {
        let elems = rows.saturating_mul(hidden);
        let call = NormCall {
            all_reduce: AllReduceCall {
                elem: Some(T::ELEM),
                bytes: elems.saturating_mul(T::ELEM.bytes()),
                world: self.world,
                intra: self.intra.as_ref().map(IntraNodeComm::intra_path),
                op_is_ours: true,
                nccl_available: self.nccl.is_ok(),
                forced: self.forced,
            },
            hidden,
            aligned,
            forced,
        };
        decide_norm(&call, &self.crossovers)
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
        for (buffer, elems) in [("residual", residual), ("output", output)] {
            if elems != input {
                return Err(Error::BufferLength {
                    op: "residual_rmsnorm",
                    rank,
                    buffer,
                    elems,
                    expected_elems: Some(input),
                    rule: "as many as input".into(),
                });
            }
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "residual_rmsnorm on rank {rank}: eps {eps} is not a finite number >= 0"
            )));
        }
        Ok(())
    }
}
