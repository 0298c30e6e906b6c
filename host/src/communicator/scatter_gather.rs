//! Reduce-scatter and all-gather, as `cudarc::nccl::Comm` has them: on
//! our kernels where `decide::scatter_gather_runs_ours` says, else NCCL's.

use super::*;
use crate::decide::{ScatterGatherCall, scatter_gather_runs_ours};

impl Communicator {
    /// Gathers every rank's `sendbuff` into `recvbuff`, rank by rank, like
    /// `cudarc::nccl::Comm::all_gather` (NCCL): `recvbuff` holds world
    /// size x `sendbuff.len()` elements.
    pub fn all_gather<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: &S,
        recvbuff: &mut R,
    ) -> Result<Work> {
        args::all_gather(self.rank, self.world, sendbuff.len(), recvbuff.len())?;
        if let Some(work) =
            self.scatter_gather_ours(ScatterGather::AllGather, sendbuff, recvbuff, None)?
        {
            return Ok(work);
        }
        let comm = self.nccl_for("all_gather")?;
        let mut bufs = self.call_buffers()?;
        let send = bufs.input_view(sendbuff, "all-gather send buffer", &self.stream)?;
        let mut recv = bufs.output_view(recvbuff, "all-gather receive buffer", &self.stream)?;
        bufs.ready()?;
        let r = comm.all_gather(&send, &mut recv);
        bufs.finish()?;
        self.nccl_done("ncclAllGather", r)
    }

    /// Reduces every rank's `sendbuff` and leaves block `rank` of the
    /// result in `recvbuff`, like `cudarc::nccl::Comm::reduce_scatter`
    /// (NCCL): `sendbuff` holds world size x `recvbuff.len()` elements.
    pub fn reduce_scatter<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: &S,
        recvbuff: &mut R,
        reduce_op: &NcclOp,
    ) -> Result<Work> {
        args::reduce_scatter(self.rank, self.world, sendbuff.len(), recvbuff.len())?;
        if let Some(work) = self.scatter_gather_ours(
            ScatterGather::ReduceScatter,
            sendbuff,
            recvbuff,
            Some(reduce_op),
        )? {
            return Ok(work);
        }
        let comm = self.nccl_for("reduce_scatter")?;
        let mut bufs = self.call_buffers()?;
        let send = bufs.input_view(sendbuff, "reduce-scatter send buffer", &self.stream)?;
        let mut recv = bufs.output_view(recvbuff, "reduce-scatter receive buffer", &self.stream)?;
        bufs.ready()?;
        let r = comm.reduce_scatter(&send, &mut recv, reduce_op);
        bufs.finish()?;
        self.nccl_done("ncclReduceScatter", r)
    }

    /// A reduce-scatter or all-gather on our kernels where
    /// [`scatter_gather_runs_ours`] says so; `None` sends the call to NCCL.
    fn scatter_gather_ours<T: NcclType>(
        &self,
        what: ScatterGather,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: Option<&NcclOp>,
    ) -> Result<Option<Work>> {
        self.check_group(what.name())?;
        let elem = elem_of::<T>();
        // The all-gather reduces nothing: its kernels take any op, sum.
        let our_op = match what {
            ScatterGather::AllGather => Some(ReduceOp::Sum),
            ScatterGather::ReduceScatter => op.and_then(ReduceOp::from_nccl),
        };
        let call = ScatterGatherCall {
            total_bytes: send
                .len()
                .max(recv.len())
                .saturating_mul(std::mem::size_of::<T>()),
            world: self.world,
            intra: self.intra.is_some(),
            elem_is_ours: elem.is_some(),
            op_is_ours: our_op.is_some(),
            nccl_available: self.nccl.is_ok(),
            forced_nccl: self.forced == Some(AllReduceAlgo::Nccl),
        };
        let (true, Some(intra), Some(elem), Some(op)) = (
            scatter_gather_runs_ours(&call, &self.crossovers),
            &self.intra,
            elem,
            our_op,
        ) else {
            return Ok(None);
        };
        intra
            .scatter_gather(what, elem, send, recv, op, &self.stream)
            .map(Some)
    }
}
