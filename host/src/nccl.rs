//! `cudarc::nccl`'s names, served by intranode: code written against
//! cudarc's NCCL moves here by changing its `use cudarc::nccl::...` lines
//! to `use intranode::nccl::...` (docs/PARITY.md, "Porting").
//!
//! [`Comm`] has `cudarc::nccl::Comm`'s constructors and methods with the
//! same arguments and the same results (`Result<NcclStatus, NcclError>`);
//! each call goes where [`Communicator`] sends it (our kernels where they
//! win, NCCL elsewhere). [`Id`] is carried in the same 128 bytes.
//! [`group_start`] / [`group_end`] are NCCL's, with our calls made inside
//! a group going to NCCL too, so they keep their place among the grouped
//! calls.
//!
//! `NcclError` keeps only a result code: the message of an error of ours
//! turned into one is logged (`tracing`, at `warn`) and kept for
//! [`last_error`]. [`Comm`] dereferences to the [`Communicator`] it wraps,
//! whose methods return [`Work`](crate::Work) and [`Error`]
//! and add what NCCL has not (the fused norm, symmetric buffers).

use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};

pub use crate::id::Id;
pub use cudarc::nccl::{NcclType, ReduceOp};

use crate::communicator::Communicator;
use crate::error::Error;

/// cudarc's result types, under the path cudarc gives them.
pub mod result {
    pub use cudarc::nccl::result::{NcclError, NcclStatus};
}

use result::{NcclError, NcclStatus};

thread_local! {
    /// Depth of [`group_start`] calls on this thread not yet ended.
    static GROUP_DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// The message of the last intranode error this thread returned as an
/// `NcclError` (which carries only a code), like NCCL's
/// `ncclGetLastError`.
pub fn last_error() -> Option<String> {
    Error::last_message()
}

/// NCCL's `ncclGroupStart`, as `cudarc::nccl::group_start`; until the
/// matching [`group_end`], this thread's calls on any [`Comm`] go to NCCL,
/// so that they are enqueued with the group's other calls, in order.
///
/// cudarc's own `group_start` cannot be seen from here: around our calls
/// it groups only those that go to NCCL, while ours run at once. Use this
/// one.
pub fn group_start() -> Result<NcclStatus, NcclError> {
    let status = cudarc::nccl::group_start()?;
    GROUP_DEPTH.with(|d| d.set(d.get() + 1));
    Ok(status)
}

/// NCCL's `ncclGroupEnd`, as `cudarc::nccl::group_end`.
pub fn group_end() -> Result<NcclStatus, NcclError> {
    GROUP_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    cudarc::nccl::group_end()
}

fn in_group() -> bool {
    GROUP_DEPTH.with(|d| d.get() > 0)
}

/// `cudarc::nccl::Comm`'s interface over a [`Communicator`].
///
/// Like cudarc's (and NCCL's) communicators, one is used from one thread
/// at a time: it is `Send` (build it on one thread, use it on another) but
/// not `Sync`.
#[derive(Debug)]
pub struct Comm {
    inner: Communicator,
}

impl std::ops::Deref for Comm {
    type Target = Communicator;
    fn deref(&self) -> &Communicator {
        &self.inner
    }
}

impl From<Communicator> for Comm {
    fn from(inner: Communicator) -> Self {
        Comm { inner }
    }
}

/// A collective's result as cudarc gives it: enqueued, or the error as a
/// code (its message kept for [`last_error`]).
fn status(r: crate::Result<crate::Work>) -> Result<NcclStatus, NcclError> {
    r.map(|_| NcclStatus::Success).map_err(NcclError::from)
}

impl Comm {
    /// As `cudarc::nccl::Comm::from_rank`; see [`Communicator::from_rank`].
    pub fn from_rank(
        stream: Arc<CudaStream>,
        rank: usize,
        world_size: usize,
        id: Id,
    ) -> Result<Self, NcclError> {
        Ok(Communicator::from_rank(stream, rank, world_size, id)?.into())
    }

    /// As `cudarc::nccl::Comm::from_devices`; see
    /// [`Communicator::from_devices`].
    pub fn from_devices(streams: Vec<Arc<CudaStream>>) -> Result<Vec<Self>, NcclError> {
        Ok(Communicator::from_devices(streams)?
            .into_iter()
            .map(Comm::from)
            .collect())
    }

    /// The [`Communicator`] behind this one.
    pub fn communicator(&self) -> &Communicator {
        &self.inner
    }

    /// The stream every call is enqueued on.
    pub fn stream(&self) -> Arc<CudaStream> {
        self.inner.stream()
    }

    /// The stream's context.
    pub fn context(&self) -> &Arc<CudaContext> {
        self.inner.context()
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.inner.world_size()
    }

    /// See `cudarc::nccl::Comm::send`.
    pub fn send<S: DevicePtr<T>, T: NcclType>(&self, data: &S, peer: i32) -> Result<(), NcclError> {
        self.inner
            .send(data, peer)
            .map(|_| ())
            .map_err(NcclError::from)
    }

    /// See `cudarc::nccl::Comm::recv`.
    pub fn recv<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buff: &mut R,
        peer: i32,
    ) -> Result<NcclStatus, NcclError> {
        status(self.inner.recv(buff, peer))
    }

    /// See `cudarc::nccl::Comm::broadcast`.
    pub fn broadcast<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: Option<&S>,
        recvbuff: &mut R,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        status(self.inner.broadcast(sendbuff, recvbuff, root))
    }

    /// See `cudarc::nccl::Comm::broadcast_in_place`.
    pub fn broadcast_in_place<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        recvbuff: &mut R,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        if in_group() {
            return status(self.nccl_call(|c| c.broadcast_in_place(recvbuff, root)));
        }
        status(self.inner.broadcast_in_place(recvbuff, root))
    }

    /// See `cudarc::nccl::Comm::all_gather`.
    pub fn all_gather<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: &S,
        recvbuff: &mut R,
    ) -> Result<NcclStatus, NcclError> {
        if in_group() {
            return status(self.nccl_call(|c| c.all_gather(sendbuff, recvbuff)));
        }
        status(self.inner.all_gather(sendbuff, recvbuff))
    }

    /// See `cudarc::nccl::Comm::all_reduce`.
    pub fn all_reduce<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: &S,
        recvbuff: &mut R,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        if in_group() {
            return status(self.nccl_call(|c| c.all_reduce(sendbuff, recvbuff, reduce_op)));
        }
        status(self.inner.all_reduce(sendbuff, recvbuff, reduce_op))
    }

    /// See `cudarc::nccl::Comm::all_reduce_in_place`.
    pub fn all_reduce_in_place<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buff: &mut R,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        if in_group() {
            return status(self.nccl_call(|c| c.all_reduce_in_place(buff, reduce_op)));
        }
        status(self.inner.all_reduce_in_place(buff, reduce_op))
    }

    /// See `cudarc::nccl::Comm::reduce`.
    pub fn reduce<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: &S,
        recvbuff: Option<&mut R>,
        reduce_op: &ReduceOp,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        status(self.inner.reduce(sendbuff, recvbuff, reduce_op, root))
    }

    /// See `cudarc::nccl::Comm::reduce_in_place`.
    pub fn reduce_in_place<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        recvbuff: &mut R,
        reduce_op: &ReduceOp,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        status(self.inner.reduce_in_place(recvbuff, reduce_op, root))
    }

    /// See `cudarc::nccl::Comm::reduce_scatter`.
    pub fn reduce_scatter<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: &S,
        recvbuff: &mut R,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        if in_group() {
            return status(self.nccl_call(|c| c.reduce_scatter(sendbuff, recvbuff, reduce_op)));
        }
        status(self.inner.reduce_scatter(sendbuff, recvbuff, reduce_op))
    }

    /// As `cudarc::nccl::Comm::group`: the returned [`Group`]'s calls are
    /// enqueued together when it is dropped.
    pub fn group(&self) -> Group<'_> {
        Group {
            inner: self.inner.group(),
        }
    }

    /// A call inside [`group_start`]..[`group_end`]: NCCL's, so it joins
    /// the group (the checks of our own path still apply first).
    fn nccl_call(
        &self,
        call: impl FnOnce(&cudarc::nccl::Comm) -> Result<NcclStatus, NcclError>,
    ) -> crate::Result<crate::Work> {
        self.inner.check()?;
        let comm = self.inner.nccl().map_err(|why| {
            Error::NcclUnavailable(format!(
                "rank {}: a call inside group_start/group_end needs NCCL: {why}",
                self.inner.rank()
            ))
        })?;
        call(comm)
            .map_err(|e| crate::nccl_comm::nccl_error(self.inner.rank(), "a grouped call", &e))?;
        Ok(self.inner.work())
    }
}

/// `cudarc::nccl::Group`'s interface over a [`crate::Group`].
#[derive(Debug)]
pub struct Group<'g> {
    inner: crate::Group<'g>,
}

fn unit(r: crate::Result<()>) -> Result<NcclStatus, NcclError> {
    r.map(|()| NcclStatus::Success).map_err(NcclError::from)
}

impl<'g> Group<'g> {
    /// See `cudarc::nccl::Group::send`.
    pub fn send<'s: 'g, T: NcclType>(
        &mut self,
        data: CudaView<'s, T>,
        peer: i32,
    ) -> Result<(), NcclError> {
        self.inner.send(data, peer).map_err(NcclError::from)
    }

    /// See `cudarc::nccl::Group::recv`.
    pub fn recv<'r: 'g, T: NcclType>(
        &mut self,
        buff: CudaViewMut<'r, T>,
        peer: i32,
    ) -> Result<NcclStatus, NcclError> {
        unit(self.inner.recv(buff, peer))
    }

    /// See `cudarc::nccl::Group::broadcast`.
    pub fn broadcast<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: Option<CudaView<'s, T>>,
        recvbuff: CudaViewMut<'r, T>,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        unit(self.inner.broadcast(sendbuff, recvbuff, root))
    }

    /// See `cudarc::nccl::Group::broadcast_in_place`.
    pub fn broadcast_in_place<'r: 'g, T: NcclType>(
        &mut self,
        recvbuff: CudaViewMut<'r, T>,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        unit(self.inner.broadcast_in_place(recvbuff, root))
    }

    /// See `cudarc::nccl::Group::all_gather`.
    pub fn all_gather<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        recvbuff: CudaViewMut<'r, T>,
    ) -> Result<NcclStatus, NcclError> {
        unit(self.inner.all_gather(sendbuff, recvbuff))
    }

    /// See `cudarc::nccl::Group::all_reduce`.
    pub fn all_reduce<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        recvbuff: CudaViewMut<'r, T>,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        unit(self.inner.all_reduce(sendbuff, recvbuff, reduce_op))
    }

    /// See `cudarc::nccl::Group::all_reduce_in_place`.
    pub fn all_reduce_in_place<'r: 'g, T: NcclType>(
        &mut self,
        buff: CudaViewMut<'r, T>,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        unit(self.inner.all_reduce_in_place(buff, reduce_op))
    }

    /// See `cudarc::nccl::Group::reduce`.
    pub fn reduce<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        recvbuff: Option<CudaViewMut<'r, T>>,
        reduce_op: &ReduceOp,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        unit(self.inner.reduce(sendbuff, recvbuff, reduce_op, root))
    }

    /// See `cudarc::nccl::Group::reduce_in_place`.
    pub fn reduce_in_place<'s: 'g, T: NcclType>(
        &mut self,
        recvbuff: CudaViewMut<'s, T>,
        reduce_op: &ReduceOp,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        unit(self.inner.reduce_in_place(recvbuff, reduce_op, root))
    }

    /// See `cudarc::nccl::Group::reduce_scatter`.
    pub fn reduce_scatter<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        recvbuff: CudaViewMut<'r, T>,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        unit(self.inner.reduce_scatter(sendbuff, recvbuff, reduce_op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_errors_become_nccl_codes_keeping_the_message() {
        let e: NcclError = Error::InvalidArgument("seven is not a rank".into()).into();
        assert_eq!(e.0, cudarc::nccl::sys::ncclResult_t::ncclInvalidArgument);
        assert_eq!(
            last_error().as_deref(),
            Some("invalid argument: seven is not a rank")
        );
        let back: Error = e.into();
        assert!(matches!(
            back,
            Error::NcclResult(crate::NcclCode::InvalidArgument)
        ));
    }

    #[test]
    fn communicators_move_between_threads() {
        fn send<T: Send>() {}
        send::<Comm>();
        send::<Communicator>();
    }

    #[test]
    fn debug_of_an_error_is_its_message() {
        assert_eq!(
            format!("{:?}", Error::NoDriver),
            "no CUDA driver: libcuda.so could not be loaded on this machine"
        );
    }
}
