//! The methods of `cudarc::nccl::Comm` that only NCCL serves (NOTE [nccl
//! parity] in the parent module): send, recv, broadcast into another
//! buffer, reduce.

use super::*;

impl Communicator {
    /// Sends `data` to `peer`, like `cudarc::nccl::Comm::send` (NCCL's
    /// `ncclSend`; `peer` must post the matching [`Communicator::recv`]).
    pub fn send<S: DevicePtr<T>, T: NcclType>(
        &self,
        data: &S,
        peer: impl RankIndex,
    ) -> Result<Work> {
        let peer = args::rank_in_world("send", self.rank, self.world, "peer", peer)?;
        let comm = self.nccl_for("send")?;
        let mut bufs = self.call_buffers()?;
        let data = bufs.input_view(data, "send buffer", &self.stream)?;
        bufs.ready()?;
        let r = comm.send(&data, nccl_rank(peer));
        bufs.finish()?;
        self.nccl_done("ncclSend", r)
    }

    /// Receives `buff.len()` elements from `peer` into `buff`, like
    /// `cudarc::nccl::Comm::recv` (NCCL's `ncclRecv`).
    pub fn recv<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buff: &mut R,
        peer: impl RankIndex,
    ) -> Result<Work> {
        let peer = args::rank_in_world("recv", self.rank, self.world, "peer", peer)?;
        let comm = self.nccl_for("recv")?;
        let mut bufs = self.call_buffers()?;
        let mut buff = bufs.output_view(buff, "receive buffer", &self.stream)?;
        bufs.ready()?;
        let r = comm.recv(&mut buff, nccl_rank(peer));
        bufs.finish()?;
        self.nccl_done("ncclRecv", r)
    }

    /// Broadcasts `sendbuff` of `root` into every rank's `recvbuff`, like
    /// `cudarc::nccl::Comm::broadcast` (NCCL). `sendbuff` is read only on
    /// `root`, which must pass one of `recvbuff`'s length; other ranks may
    /// pass `None`.
    pub fn broadcast<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: Option<&S>,
        recvbuff: &mut R,
        root: impl RankIndex,
    ) -> Result<Work> {
        let root = args::rank_in_world("broadcast", self.rank, self.world, "root", root)?;
        args::root_buffer(
            "broadcast",
            self.rank,
            root,
            "send",
            sendbuff.map(|s| s.len()),
            "recv",
            recvbuff.len(),
        )?;
        let comm = self.nccl_for("broadcast")?;
        let mut bufs = self.call_buffers()?;
        let send = match sendbuff {
            Some(s) => Some(bufs.input_view(s, "broadcast send buffer", &self.stream)?),
            None => None,
        };
        let mut recv = bufs.output_view(recvbuff, "broadcast receive buffer", &self.stream)?;
        bufs.ready()?;
        let r = comm.broadcast(send.as_ref(), &mut recv, nccl_rank(root));
        bufs.finish()?;
        self.nccl_done("ncclBroadcast", r)
    }

    /// Reduces every rank's `sendbuff` into `root`'s `recvbuff`, like
    /// `cudarc::nccl::Comm::reduce` (NCCL). `root` must pass a `recvbuff`
    /// of `sendbuff`'s length; other ranks may pass `None`.
    pub fn reduce<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: &S,
        recvbuff: Option<&mut R>,
        reduce_op: &NcclOp,
        root: impl RankIndex,
    ) -> Result<Work> {
        let root = args::rank_in_world("reduce", self.rank, self.world, "root", root)?;
        args::root_buffer(
            "reduce",
            self.rank,
            root,
            "recv",
            recvbuff.as_ref().map(|r| r.len()),
            "send",
            sendbuff.len(),
        )?;
        let comm = self.nccl_for("reduce")?;
        let mut bufs = self.call_buffers()?;
        let send = bufs.input_view(sendbuff, "reduce send buffer", &self.stream)?;
        let mut recv = match recvbuff {
            Some(r) => Some(bufs.output_view(r, "reduce receive buffer", &self.stream)?),
            None => None,
        };
        bufs.ready()?;
        let r = comm.reduce(&send, recv.as_mut(), reduce_op, nccl_rank(root));
        bufs.finish()?;
        self.nccl_done("ncclReduce", r)
    }

    /// In-place reduce into `root`'s `recvbuff`, like
    /// `cudarc::nccl::Comm::reduce_in_place` (NCCL).
    pub fn reduce_in_place<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        recvbuff: &mut R,
        reduce_op: &NcclOp,
        root: impl RankIndex,
    ) -> Result<Work> {
        let root = args::rank_in_world("reduce", self.rank, self.world, "root", root)?;
        let comm = self.nccl_for("reduce_in_place")?;
        let mut bufs = self.call_buffers()?;
        let mut buf = bufs.output_view(recvbuff, "reduce buffer", &self.stream)?;
        bufs.ready()?;
        let r = comm.reduce_in_place(&mut buf, reduce_op, nccl_rank(root));
        bufs.finish()?;
        self.nccl_done("ncclReduce", r)
    }
}
