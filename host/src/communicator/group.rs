//! [`Group`]: NCCL's group semantics on a [`Communicator`].

use super::*;

impl Communicator {
    /// Opens an NCCL group, like `cudarc::nccl::Comm::group`: the
    /// [`Group`]'s calls are enqueued together when it ends ([`Group::end`],
    /// or its drop). Every call in a group goes to NCCL (grouping is
    /// NCCL's); while it is open, the communicator's own methods refuse
    /// to run (ours would overtake the grouped calls on the stream).
    /// Where NCCL is unavailable the group's calls return
    /// [`Error::NcclUnavailable`].
    pub fn group(&self) -> Group<'_> {
        let mut state = self.lock_group();
        let start = if state.open {
            Err(Error::InvalidArgument(format!(
                "group on rank {}: a group of this communicator is already open",
                self.rank
            )))
        } else {
            match self.nccl_or_err() {
                Err(e) => Err(e),
                Ok(_) => match cudarc::nccl::group_start() {
                    Ok(_) => {
                        state.open = true;
                        Ok(())
                    }
                    Err(e) => Err(nccl_error(self.rank, "ncclGroupStart", &e)),
                },
            }
        };
        Group {
            comm: self,
            not_open: start.err(),
            syncs: Vec::new(),
        }
    }
}

/// An NCCL group on a [`Communicator`] (from [`Communicator::group`]),
/// like `cudarc::nccl::Group`: the same methods with the same arguments
/// (views that outlive the group, made before it opens), enqueued
/// together when the group ends. Like cudarc's, it keeps each view's
/// event-tracking record until after `ncclGroupEnd`, so another stream
/// that later uses a buffer waits for the grouped call itself.
///
/// Unlike cudarc's, ending never panics: [`Group::end`] returns a failed
/// `ncclGroupEnd`; a group that is just dropped leaves the failure for
/// the communicator's next call (or [`Communicator::check`]). A call on a
/// group that could not open (NCCL unavailable, a group already open)
/// returns why.
///
/// # Example
///
/// A ring exchange: every rank sends to the next and receives from the
/// previous, both enqueued together (they would deadlock one by one).
///
/// ```no_run
/// # use intranode::{Communicator, dist_env::DistEnv};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let env = DistEnv::from_env()?;
/// # let store = intranode::store::connect_env(&env)?;
/// # let stream = intranode::gpu::context(env.local_rank)?.new_stream()?;
/// # let comm = Communicator::new(stream.clone(), store, env.rank, env.world_size)?;
/// let (rank, world) = (comm.rank(), comm.world_size());
/// let send = stream.clone_htod(&vec![rank as f32; 1024])?;
/// let mut recv = stream.alloc_zeros::<f32>(1024)?;
/// let mut group = comm.group();
/// group.send(send.as_view(), (rank + 1) % world)?;
/// group.recv(recv.as_view_mut(), (rank + world - 1) % world)?;
/// group.end()?.synchronize()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Group<'g> {
    comm: &'g Communicator,
    /// Why this group could not open (then it enqueues nothing).
    not_open: Option<Error>,
    syncs: Vec<SyncOnDrop<'g>>,
}

impl<'g> Group<'g> {
    /// The communicator the group belongs to.
    pub fn comm(&self) -> &'g Communicator {
        self.comm
    }

    /// Ends the group (`ncclGroupEnd`), enqueuing its calls; the
    /// returned [`Work`] covers them all.
    /// A group that could not open returns why.
    pub fn end(mut self) -> Result<Work> {
        if let Some(e) = self.not_open_error() {
            return Err(e);
        }
        self.finish()?;
        Ok(self.comm.work())
    }

    /// `ncclGroupEnd` once, then the tracking records (after the grouped
    /// calls are enqueued).
    fn finish(&mut self) -> Result<()> {
        if self.not_open.is_some() {
            return Ok(());
        }
        let mut state = self.comm.lock_group();
        if !state.open {
            return Ok(());
        }
        state.open = false;
        drop(state);
        let end = cudarc::nccl::group_end();
        self.syncs.clear();
        end.map(|_| ())
            .map_err(|e| nccl_error(self.comm.rank, "ncclGroupEnd", &e))
    }

    /// The NCCL communicator for a grouped call, once the group is known
    /// to be open and the health word clean.
    fn nccl(&self) -> Result<&'g Comm> {
        if let Some(e) = self.not_open_error() {
            return Err(e);
        }
        self.comm.check_health()?;
        self.comm.nccl_or_err()
    }

    /// Why the group could not open, as an error of the same kind.
    fn not_open_error(&self) -> Option<Error> {
        self.not_open.as_ref().map(|e| match e {
            Error::NcclUnavailable(why) => Error::NcclUnavailable(why.clone()),
            Error::Nccl { op, rank, code } => Error::Nccl {
                op,
                rank: *rank,
                code: *code,
            },
            other => Error::InvalidArgument(format!("the group could not open: {other}")),
        })
    }

    fn done<S>(&self, op: &'static str, r: std::result::Result<S, NcclError>) -> Result<()> {
        r.map(|_| ())
            .map_err(|e| nccl_error(self.comm.rank, op, &e))
    }

    fn stream(&self) -> &'g CudaStream {
        &self.comm.stream
    }

    /// Grouped [`Communicator::send`].
    pub fn send<'s: 'g, T: NcclType>(
        &mut self,
        data: impl GroupInput<'s, T>,
        peer: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let peer = args::rank_in_world("send", c.rank, c.world, "peer", peer)?;
        let r = self.nccl()?.send(&data, nccl_rank(peer));
        self.done("ncclSend", r)?;
        self.syncs.push(data.into_read(self.stream()));
        Ok(())
    }

    /// Grouped [`Communicator::recv`].
    pub fn recv<'r: 'g, T: NcclType>(
        &mut self,
        mut buff: impl GroupOutput<'r, T>,
        peer: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let peer = args::rank_in_world("recv", c.rank, c.world, "peer", peer)?;
        let r = self.nccl()?.recv(&mut buff, nccl_rank(peer));
        self.done("ncclRecv", r)?;
        self.syncs.push(buff.into_write(self.stream()));
        Ok(())
    }

    /// Grouped [`Communicator::broadcast`].
    pub fn broadcast<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: Option<CudaView<'s, T>>,
        mut recvbuff: impl GroupOutput<'r, T>,
        root: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let root = args::rank_in_world("broadcast", c.rank, c.world, "root", root)?;
        let send_len = sendbuff.as_ref().map(|s| s.len());
        args::root_buffer(
            "broadcast",
            c.rank,
            root,
            "send",
            send_len,
            "recv",
            recvbuff.len(),
        )?;
        let r = self
            .nccl()?
            .broadcast(sendbuff.as_ref(), &mut recvbuff, nccl_rank(root));
        self.done("ncclBroadcast", r)?;
        if let Some(s) = sendbuff {
            self.syncs.push(s.into_read(self.stream()));
        }
        self.syncs.push(recvbuff.into_write(self.stream()));
        Ok(())
    }

    /// Grouped [`Communicator::broadcast_in_place`] (NCCL).
    pub fn broadcast_in_place<'r: 'g, T: NcclType>(
        &mut self,
        mut recvbuff: impl GroupOutput<'r, T>,
        root: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let root = args::rank_in_world("broadcast", c.rank, c.world, "root", root)?;
        let r = self
            .nccl()?
            .broadcast_in_place(&mut recvbuff, nccl_rank(root));
        self.done("ncclBroadcast", r)?;
        self.syncs.push(recvbuff.into_write(self.stream()));
        Ok(())
    }

    /// Grouped [`Communicator::all_gather`].
    pub fn all_gather<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: impl GroupInput<'s, T>,
        mut recvbuff: impl GroupOutput<'r, T>,
    ) -> Result<()> {
        let c = self.comm;
        args::all_gather(c.rank, c.world, sendbuff.len(), recvbuff.len())?;
        let r = self.nccl()?.all_gather(&sendbuff, &mut recvbuff);
        self.done("ncclAllGather", r)?;
        self.syncs.push(sendbuff.into_read(self.stream()));
        self.syncs.push(recvbuff.into_write(self.stream()));
        Ok(())
    }

    /// Grouped [`Communicator::all_reduce`] (NCCL).
    pub fn all_reduce<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: impl GroupInput<'s, T>,
        mut recvbuff: impl GroupOutput<'r, T>,
        reduce_op: &NcclOp,
    ) -> Result<()> {
        let c = self.comm;
        args::same_len("all_reduce", c.rank, sendbuff.len(), recvbuff.len())?;
        let r = self.nccl()?.all_reduce(&sendbuff, &mut recvbuff, reduce_op);
        self.done("ncclAllReduce", r)?;
        self.syncs.push(sendbuff.into_read(self.stream()));
        self.syncs.push(recvbuff.into_write(self.stream()));
        Ok(())
    }

    /// Grouped [`Communicator::all_reduce_in_place`] (NCCL).
    pub fn all_reduce_in_place<'r: 'g, T: NcclType>(
        &mut self,
        mut buff: impl GroupOutput<'r, T>,
        reduce_op: &NcclOp,
    ) -> Result<()> {
        let r = self.nccl()?.all_reduce_in_place(&mut buff, reduce_op);
        self.done("ncclAllReduce", r)?;
        self.syncs.push(buff.into_write(self.stream()));
        Ok(())
    }

    /// Grouped [`Communicator::reduce`].
    pub fn reduce<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: impl GroupInput<'s, T>,
        mut recvbuff: Option<CudaViewMut<'r, T>>,
        reduce_op: &NcclOp,
        root: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let root = args::rank_in_world("reduce", c.rank, c.world, "root", root)?;
        let recv_len = recvbuff.as_ref().map(|r| r.len());
        args::root_buffer(
            "reduce",
            c.rank,
            root,
            "recv",
            recv_len,
            "send",
            sendbuff.len(),
        )?;
        let r = self
            .nccl()?
            .reduce(&sendbuff, recvbuff.as_mut(), reduce_op, nccl_rank(root));
        self.done("ncclReduce", r)?;
        self.syncs.push(sendbuff.into_read(self.stream()));
        if let Some(r) = recvbuff {
            self.syncs.push(r.into_write(self.stream()));
        }
        Ok(())
    }

    /// Grouped [`Communicator::reduce_in_place`].
    pub fn reduce_in_place<'r: 'g, T: NcclType>(
        &mut self,
        mut recvbuff: impl GroupOutput<'r, T>,
        reduce_op: &NcclOp,
        root: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let root = args::rank_in_world("reduce", c.rank, c.world, "root", root)?;
        let r = self
            .nccl()?
            .reduce_in_place(&mut recvbuff, reduce_op, nccl_rank(root));
        self.done("ncclReduce", r)?;
        self.syncs.push(recvbuff.into_write(self.stream()));
        Ok(())
    }

    /// Grouped [`Communicator::reduce_scatter`].
    pub fn reduce_scatter<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: impl GroupInput<'s, T>,
        mut recvbuff: impl GroupOutput<'r, T>,
        reduce_op: &NcclOp,
    ) -> Result<()> {
        let c = self.comm;
        args::reduce_scatter(c.rank, c.world, sendbuff.len(), recvbuff.len())?;
        let r = self
            .nccl()?
            .reduce_scatter(&sendbuff, &mut recvbuff, reduce_op);
        self.done("ncclReduceScatter", r)?;
        self.syncs.push(sendbuff.into_read(self.stream()));
        self.syncs.push(recvbuff.into_write(self.stream()));
        Ok(())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A buffer a [`Group`] call reads: cudarc's `CudaView`, or a
/// [`SymmetricView`](crate::symmetric::SymmetricView) of a symmetric buffer.
pub trait GroupInput<'a, T>: DevicePtr<T> + sealed::Sealed {
    /// Waits on `stream` for the buffer's last write (cudarc's event
    /// tracking) and gives the record of this read, which the group keeps
    /// until its calls are enqueued.
    fn into_read<'g>(self, stream: &'g CudaStream) -> SyncOnDrop<'g>
    where
        'a: 'g;
}

/// A buffer a [`Group`] call writes: cudarc's `CudaViewMut`, or a
/// [`SymmetricViewMut`](crate::symmetric::SymmetricViewMut).
pub trait GroupOutput<'a, T>: DevicePtrMut<T> + sealed::Sealed {
    /// As [`GroupInput::into_read`], for a write (waits for the last read
    /// and write).
    fn into_write<'g>(self, stream: &'g CudaStream) -> SyncOnDrop<'g>
    where
        'a: 'g;
}

impl<T> sealed::Sealed for CudaView<'_, T> {}
impl<T> sealed::Sealed for CudaViewMut<'_, T> {}
impl<T> sealed::Sealed for crate::symmetric::SymmetricView<'_, T> {}
impl<T> sealed::Sealed for crate::symmetric::SymmetricViewMut<'_, T> {}

impl<'a, T> GroupInput<'a, T> for CudaView<'a, T> {
    fn into_read<'g>(self, stream: &'g CudaStream) -> SyncOnDrop<'g>
    where
        'a: 'g,
    {
        let view: CudaView<'g, T> = self;
        view.view_ptr(stream).1
    }
}

impl<'a, T> GroupOutput<'a, T> for CudaViewMut<'a, T> {
    fn into_write<'g>(self, stream: &'g CudaStream) -> SyncOnDrop<'g>
    where
        'a: 'g,
    {
        let view: CudaViewMut<'g, T> = self;
        view.view_ptr_mut(stream).1
    }
}

impl<'a, T> GroupInput<'a, T> for crate::symmetric::SymmetricView<'a, T> {
    fn into_read<'g>(self, stream: &'g CudaStream) -> SyncOnDrop<'g>
    where
        'a: 'g,
    {
        self.read_record(stream)
    }
}

impl<'a, T> GroupOutput<'a, T> for crate::symmetric::SymmetricViewMut<'a, T> {
    fn into_write<'g>(self, stream: &'g CudaStream) -> SyncOnDrop<'g>
    where
        'a: 'g,
    {
        self.write_record(stream)
    }
}

impl Drop for Group<'_> {
    /// Ends the group; a failure waits for the communicator's next call
    /// (`Drop` never panics).
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            self.comm.lock_group().end_error = Some(e);
        }
    }
}
