//! [`Communicator`]: what applications use. It owns an [`IntraNodeComm`]
//! when the rendezvous allowed one and an NCCL communicator when NCCL
//! loads, and routes each all-reduce to whichever
//! [`select_all_reduce_algo`] picks, so every size, element type, op and
//! topology works; broadcasts go where [`select_broadcast_algo`] says.
//!
//! Its API is that of `cudarc::nccl::Comm` (NOTE [nccl parity]): every
//! method of `Comm` exists here with the same arguments, so code written
//! for it switches by changing the type. Our kernels serve `all_reduce`,
//! `all_reduce_in_place` and `broadcast_in_place`; the rest goes to NCCL
//! through the `Comm` the communicator owns.
//!
//! NOTE [nccl parity]: the differences from `cudarc::nccl::Comm`, all of
//! them such that a caller's `comm.method(args)?;` compiles either way
//! (`host/tests/nccl_parity.rs` proves it at compile time):
//! - collectives return `Result<Work>` (`Result<()>` inside a [`Group`])
//!   instead of `Result<NcclStatus, NcclError>`;
//! - roots and peers are any [`RankIndex`] (`i32` as in cudarc, or
//!   `usize`), checked against the world before anything is enqueued;
//! - lengths are checked before NCCL sees them (`all_gather`: recv is
//!   world x send; `reduce_scatter`: send is world x recv; a root's send
//!   and recv of equal length), and a root without its buffer is an
//!   error, not a `debug_assert`;
//! - [`Communicator::group`] returns our [`Group`], whose end reports a
//!   failed `ncclGroupEnd` (from [`Group::end`], or from the next call
//!   once the group was dropped) instead of panicking in `Drop`;
//! - construction is collective through a store ([`Communicator::new`]),
//!   not `Comm::from_rank` with an `Id`.

use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{
    CudaContext, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop,
};
use cudarc::nccl::result::NcclError;
use cudarc::nccl::{Comm, NcclType, ReduceOp as NcclOp};
use intranode_store::{Store, StoreExchange};

use crate::algo::{
    AllReduceAlgo, Crossovers, scatter_gather_max_shard_bytes, scatter_gather_uses_ours,
    select_all_reduce_algo,
};
use crate::comm::all_reduce::ReduceOp;
use crate::comm::broadcast::{BroadcastAlgo, select_broadcast_algo};
use crate::comm::debug::{self, CallChecker, DebugLevel};
use crate::comm::scatter_gather::ScatterGather;
use crate::comm::tracked::{CallBuffers, CaptureSide};
use crate::comm::{IntraNodeComm, RendezvousError};
use crate::error::{Error, Result};
use crate::kernels::{DType, ElemType, KernelModule};
use crate::rendezvous::CommConfig;
use crate::topology::Topology;
use crate::work::Work;
use kernels_gpu::layout::NormParams;

mod layer;

/// The application-facing communicator of one rank.
pub struct Communicator {
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
    intra: Option<IntraNodeComm>,
    /// Why there is no [`IntraNodeComm`] (for logs and the benchmark).
    intra_reason: Option<String>,
    nccl: std::result::Result<Comm, String>,
    crossovers: Crossovers,
    forced: Option<AllReduceAlgo>,
    forced_broadcast: Option<BroadcastAlgo>,
    /// Call fingerprints of NCCL calls when there is no intra-node
    /// communicator (whose checker serves otherwise): NOTE [call
    /// fingerprints] in `comm/debug.rs`.
    call_checker: Option<CallChecker>,
    /// The kernels, for groups without the intra-node path (which has
    /// its own), loaded at the first call that needs them.
    kernels: std::sync::OnceLock<KernelModule>,
    /// The side stream of norm calls captured into CUDA graphs (NOTE
    /// [capture and event tracking] in `comm/tracked.rs`).
    capture_side: std::sync::OnceLock<CaptureSide>,
    /// Whether a [`Group`] is open, and the failure of a dropped group's
    /// `ncclGroupEnd`, for the next call.
    group_state: Mutex<GroupState>,
}

/// See [`Communicator::group`].
#[derive(Debug, Default)]
struct GroupState {
    open: bool,
    /// A dropped group's `ncclGroupEnd` failure, reported once.
    end_error: Option<String>,
}

/// Count of communicators without an intra-node path that check calls:
/// each gets its own fingerprint keys (ranks create communicators in the
/// same order).
static CHECKER_COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("intra", &self.intra.is_some())
            .field("intra_reason", &self.intra_reason)
            .field("nccl", &self.nccl.as_ref().map(|_| "ok"))
            .finish()
    }
}

impl Communicator {
    /// Builds the communicator of `rank` on `stream` (collective: every
    /// rank calls it with the same store). Fails only when neither path
    /// can serve this group.
    pub fn new(
        stream: Arc<CudaStream>,
        store: Arc<dyn Store>,
        rank: usize,
        world: usize,
    ) -> Result<Self> {
        let config = CommConfig::from_env()
            .map_err(|e| Error::InvalidArgument(format!("rank {rank}: {e}")))?;
        let ctx = stream.context().clone();
        let (intra, intra_reason) =
            match IntraNodeComm::rendezvous(&ctx, store.clone(), rank, world, &config) {
                Ok(c) => (Some(c), None),
                Err(RendezvousError::Unsupported(why)) => (None, Some(why.to_string())),
                Err(RendezvousError::Failed(e)) => return Err(e),
            };
        let mut exchange = StoreExchange::new("intranode/nccl");
        let nccl = crate::nccl::nccl_comm(&stream, store.as_ref(), &mut exchange, rank, world)
            .map_err(|e| e.to_string());
        if let (None, Err(why)) = (&intra, &nccl) {
            return Err(Error::NcclUnavailable(format!(
                "rank {rank}: no path for this group: intra-node comm unsupported ({}), and {why}",
                intra_reason.as_deref().unwrap_or("unknown")
            )));
        }
        let call_checker = (config.debug == DebugLevel::Detail && intra.is_none()).then(|| {
            let n = CHECKER_COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            CallChecker::new(
                store,
                format!("intranode/communicator/{n}/debug"),
                rank,
                world,
            )
        });
        Ok(Communicator {
            stream,
            rank,
            world,
            intra,
            intra_reason,
            nccl,
            crossovers: Crossovers::from_env(),
            forced: config.forced_algo,
            forced_broadcast: config.forced_broadcast,
            call_checker,
            kernels: std::sync::OnceLock::new(),
            capture_side: std::sync::OnceLock::new(),
            group_state: Mutex::new(GroupState::default()),
        })
    }

    /// This process's rank in the group, like `cudarc::nccl::Comm::rank`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks, like `cudarc::nccl::Comm::world_size`.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// The context of the communicator's stream, like
    /// `cudarc::nccl::Comm::context`.
    pub fn context(&self) -> &Arc<CudaContext> {
        self.stream.context()
    }

    /// The device ordinal of the communicator's stream, like
    /// `cudarc::nccl::Comm::ordinal`.
    pub fn ordinal(&self) -> usize {
        self.stream.context().ordinal()
    }

    /// The stream every call is enqueued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The intra-node communicator, when the rendezvous allowed one.
    pub fn intra(&self) -> Option<&IntraNodeComm> {
        self.intra.as_ref()
    }

    /// Why there is no intra-node communicator, if there is none.
    pub fn intra_reason(&self) -> Option<&str> {
        self.intra_reason.as_deref()
    }

    /// The NCCL communicator, or why there is none.
    pub fn nccl(&self) -> std::result::Result<&Comm, &str> {
        self.nccl.as_ref().map_err(String::as_str)
    }

    /// The algorithm a call of `elems` elements of `T` with `op` would use.
    pub fn algo_for<T: DType>(&self, elems: usize, op: &NcclOp) -> AllReduceAlgo {
        let Some(intra) = &self.intra else {
            return AllReduceAlgo::Nccl;
        };
        if to_intra_op(op).is_none() {
            return AllReduceAlgo::Nccl;
        }
        if let Some(a) = self.forced {
            return a;
        }
        let topology = intra.topology();
        let algo = select_all_reduce_algo(
            T::ELEM,
            elems * T::ELEM.bytes(),
            self.world,
            topology,
            intra.symm().buffer_bytes(),
            &self.crossovers,
        );
        // A cube mesh whose table this rank cannot run HCM on (see
        // `comm::hcm::hcm_plan`) leaves the call to NCCL.
        let algo = if algo == AllReduceAlgo::Hcm && intra.hcm_plan().is_err() {
            AllReduceAlgo::Nccl
        } else {
            algo
        };
        // Where NCCL would win but cannot run (not loadable, or several
        // ranks share a GPU, which NCCL refuses), our kernels serve every
        // size: two-shot walks large messages chunk by chunk.
        if algo == AllReduceAlgo::Nccl && self.nccl.is_err() {
            return AllReduceAlgo::TwoShot;
        }
        algo
    }

    /// `recv = op(send of every rank)`, like `cudarc::nccl::Comm::all_reduce`.
    pub fn all_reduce<T: DType + NcclType>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: &NcclOp,
    ) -> Result<Work> {
        let algo = self.algo_for::<T>(send.len(), op);
        self.all_reduce_with(send, recv, op, algo)
    }

    /// In-place all-reduce, like `cudarc::nccl::Comm::all_reduce_in_place`.
    pub fn all_reduce_in_place<T: DType + NcclType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: &NcclOp,
    ) -> Result<Work> {
        self.check_group("all_reduce_in_place")?;
        let algo = self.algo_for::<T>(buf.len(), op);
        match (algo, &self.intra, to_intra_op(op)) {
            (AllReduceAlgo::Nccl, _, _) | (_, None, _) | (_, _, None) => {
                let comm = self.nccl_or_err()?;
                self.check_health()?;
                self.check_nccl_call::<T>(buf.len(), op)?;
                let r = comm.all_reduce_in_place(buf, op);
                self.nccl_done("ncclAllReduce", r)
            }
            (algo, Some(intra), Some(iop)) => {
                intra.all_reduce_in_place(buf, iop, algo, &self.stream)
            }
        }
    }

    /// All-reduce with an explicit algorithm (tests and the benchmark).
    pub fn all_reduce_with<T: DType + NcclType>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: &NcclOp,
        algo: AllReduceAlgo,
    ) -> Result<Work> {
        args::same_len("all_reduce", self.rank, send.len(), recv.len())?;
        self.check_group("all_reduce")?;
        match (algo, &self.intra, to_intra_op(op)) {
            (AllReduceAlgo::Nccl, _, _) => {
                let comm = self.nccl_or_err()?;
                self.check_health()?;
                self.check_nccl_call::<T>(send.len(), op)?;
                let r = comm.all_reduce(send, recv, op);
                self.nccl_done("ncclAllReduce", r)
            }
            (_, None, _) => Err(Error::InvalidArgument(format!(
                "all_reduce on rank {}: {} needs the intra-node path, which is unavailable: {}",
                self.rank,
                algo.name(),
                self.intra_reason.as_deref().unwrap_or("unknown")
            ))),
            (_, _, None) => Err(Error::InvalidArgument(format!(
                "all_reduce on rank {}: product is only served by nccl",
                self.rank
            ))),
            (algo, Some(intra), Some(iop)) => intra.all_reduce(send, recv, iop, algo, &self.stream),
        }
    }

    /// The path a broadcast takes.
    pub fn broadcast_algo(&self) -> BroadcastAlgo {
        select_broadcast_algo(
            self.intra.as_ref().map(IntraNodeComm::topology),
            self.nccl.is_ok(),
            self.forced_broadcast,
        )
    }

    /// Broadcasts `buf` from `root` to every rank, in place, like
    /// `cudarc::nccl::Comm::broadcast_in_place`: over symmetric memory when
    /// the group has it, else NCCL. Every rank must call it with the same
    /// length and root. `root` is an `i32` as in cudarc, or a `usize`
    /// ([`RankIndex`]).
    pub fn broadcast_in_place<T: DeviceRepr + NcclType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        root: impl RankIndex,
    ) -> Result<Work> {
        let root = args::rank_in_world("broadcast", self.rank, self.world, "root", root)?;
        self.broadcast_in_place_with(buf, root, self.broadcast_algo())
    }

    /// Broadcast with an explicit path (tests); an error where that path
    /// does not exist.
    pub fn broadcast_in_place_with<T: DeviceRepr + NcclType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        root: usize,
        algo: BroadcastAlgo,
    ) -> Result<Work> {
        let root = args::rank_in_world("broadcast", self.rank, self.world, "root", root)?;
        self.check_group("broadcast_in_place")?;
        match (algo, &self.intra) {
            (BroadcastAlgo::Nccl, _) => {
                let comm = self.nccl_or_err()?;
                self.check_health()?;
                let r = comm.broadcast_in_place(buf, nccl_rank(root));
                self.nccl_done("ncclBroadcast", r)
            }
            (BroadcastAlgo::SymmMem, None) => Err(Error::InvalidArgument(format!(
                "broadcast on rank {}: symm-mem needs the intra-node path, which is unavailable: {}",
                self.rank,
                self.intra_reason.as_deref().unwrap_or("unknown")
            ))),
            (BroadcastAlgo::SymmMem, Some(intra)) => intra.broadcast(buf, root, &self.stream),
        }
    }

    /// Sends `data` to `peer`, like `cudarc::nccl::Comm::send` (NCCL's
    /// `ncclSend`; `peer` must post the matching [`Communicator::recv`]).
    pub fn send<S: DevicePtr<T>, T: NcclType>(
        &self,
        data: &S,
        peer: impl RankIndex,
    ) -> Result<Work> {
        let peer = args::rank_in_world("send", self.rank, self.world, "peer", peer)?;
        let comm = self.nccl_for("send")?;
        let r = comm.send(data, nccl_rank(peer));
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
        let r = comm.recv(buff, nccl_rank(peer));
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
        let r = comm.broadcast(sendbuff, recvbuff, nccl_rank(root));
        self.nccl_done("ncclBroadcast", r)
    }

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
        let r = comm.all_gather(sendbuff, recvbuff);
        self.nccl_done("ncclAllGather", r)
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
        let r = comm.reduce(sendbuff, recvbuff, reduce_op, nccl_rank(root));
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
        let r = comm.reduce_in_place(recvbuff, reduce_op, nccl_rank(root));
        self.nccl_done("ncclReduce", r)
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
        let r = comm.reduce_scatter(sendbuff, recvbuff, reduce_op);
        self.nccl_done("ncclReduceScatter", r)
    }

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

    /// A reduce-scatter or all-gather on our kernels where
    /// [`scatter_gather_uses_ours`] says so (or where NCCL cannot run and
    /// the shard fits them); `None` sends the call to NCCL.
    fn scatter_gather_ours<T: NcclType>(
        &self,
        what: ScatterGather,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: Option<&NcclOp>,
    ) -> Result<Option<Work>> {
        self.check_group(what.name())?;
        let (Some(intra), Some(elem)) = (&self.intra, elem_of::<T>()) else {
            return Ok(None);
        };
        let op = match (what, op.map(to_intra_op)) {
            (ScatterGather::AllGather, _) => ReduceOp::Sum,
            (ScatterGather::ReduceScatter, Some(Some(op))) => op,
            // Prod: NCCL's alone.
            (ScatterGather::ReduceScatter, _) => return Ok(None),
        };
        if self.forced == Some(AllReduceAlgo::Nccl) {
            return Ok(None);
        }
        let total_bytes = send.len().max(recv.len()).saturating_mul(elem.bytes());
        let ours = scatter_gather_uses_ours(total_bytes, self.world, &self.crossovers)
            || (self.nccl.is_err()
                && total_bytes / self.world <= scatter_gather_max_shard_bytes(self.world));
        if !ours {
            return Ok(None);
        }
        intra
            .scatter_gather(what, elem, send, recv, op, &self.stream)
            .map(Some)
    }

    /// The NCCL communicator for a call of `what`, after the checks every
    /// NCCL call makes: no group open, no pending group failure, the
    /// health word clean.
    fn nccl_for(&self, what: &str) -> Result<&Comm> {
        self.check_group(what)?;
        let comm = self.nccl_or_err()?;
        self.check_health()?;
        Ok(comm)
    }

    /// A [`Work`] for an NCCL call that succeeded, or the error naming it.
    fn nccl_done<S>(&self, op: &'static str, r: std::result::Result<S, NcclError>) -> Result<Work> {
        r.map(|_| self.work())
            .map_err(|e| nccl_error(self.rank, op, &e))
    }

    /// Refuses a communicator call while a [`Group`] is open, and reports
    /// (once) a dropped group's failed `ncclGroupEnd`.
    fn check_group(&self, what: &str) -> Result<()> {
        let state = self.lock_group();
        if state.open {
            return Err(Error::InvalidArgument(format!(
                "{what} on rank {}: a group is open; call the group's methods, or end it first",
                self.rank
            )));
        }
        drop(state);
        self.take_group_end_error()
    }

    fn lock_group(&self) -> std::sync::MutexGuard<'_, GroupState> {
        // The state is two plain fields, consistent at every point a
        // panic could leave it.
        self.group_state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Under `INTRANODE_DEBUG=detail`, the fingerprint check of a call
    /// that goes to NCCL (calls to our kernels are checked inside
    /// [`IntraNodeComm`], through the same checker).
    fn check_nccl_call<T: DType>(&self, elems: usize, op: &NcclOp) -> Result<()> {
        let checker = self
            .intra
            .as_ref()
            .and_then(IntraNodeComm::call_checker)
            .or(self.call_checker.as_ref());
        match checker {
            Some(c) => c.check(|call| {
                debug::all_reduce_fingerprint(
                    call,
                    elems,
                    T::ELEM,
                    nccl_op_name(op),
                    AllReduceAlgo::Nccl,
                )
            }),
            None => Ok(()),
        }
    }

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
        let device = self.stream.context().ordinal();
        let kernels = match &self.intra {
            Some(intra) => intra.kernels(),
            None => match self.kernels.get() {
                Some(k) => k,
                None => {
                    let k = KernelModule::load(self.stream.context())?;
                    // Another thread may have won the race: either will do.
                    let _ = self.kernels.set(k);
                    self.kernels.get().ok_or_else(|| {
                        Error::InvalidArgument("the kernels could not be kept".into())
                    })?
                }
            },
        };
        let ctx = self.stream.context();
        let mut bufs = CallBuffers::new(ctx, &self.stream, device, self.rank, || {
            if let Some(side) = self.capture_side.get() {
                return Ok(side);
            }
            let side = CaptureSide::new(ctx, device)?;
            let _ = self.capture_side.set(side);
            self.capture_side.get().ok_or_else(|| {
                Error::InvalidArgument("the capture side stream could not be kept".into())
            })
        })?;
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

    /// Waits for everything enqueued on this communicator's stream, then
    /// reports a GPU wait on a peer that ran out since the communicator was
    /// built ([`Error::PeerTimeout`], naming the rank, the peer, the
    /// collective, where it waited and the bound). Once that happened the
    /// communicator stays unusable: every later call returns the same
    /// error; build a new one.
    ///
    /// A dropped [`Group`]'s failed `ncclGroupEnd` is reported here too
    /// (once), as by the next call.
    pub fn synchronize(&self) -> Result<()> {
        self.work().synchronize()?;
        self.take_group_end_error()
    }

    /// Reports a GPU wait on a peer that ran out, without waiting for the
    /// stream: call it once the work you care about is known to be done
    /// (after a CUDA graph's replay, once the graph's stream or an event
    /// after it has synchronised). Work still queued may time out later.
    /// Also reports (once) a dropped [`Group`]'s failed `ncclGroupEnd`.
    pub fn check(&self) -> Result<()> {
        self.take_group_end_error()?;
        self.check_health()
    }

    fn take_group_end_error(&self) -> Result<()> {
        match self.lock_group().end_error.take() {
            Some(detail) => Err(Error::Nccl {
                op: "ncclGroupEnd",
                detail,
            }),
            None => Ok(()),
        }
    }

    fn check_health(&self) -> Result<()> {
        match &self.intra {
            Some(intra) => intra.health().check(),
            None => Ok(()),
        }
    }

    /// A handle on this communicator's stream that knows its health word.
    fn work(&self) -> Work {
        Work::new(
            self.stream.clone(),
            self.intra.as_ref().map(IntraNodeComm::health_arc),
        )
    }

    fn nccl_or_err(&self) -> Result<&Comm> {
        self.nccl
            .as_ref()
            .map_err(|why| Error::NcclUnavailable(format!("rank {}: {why}", self.rank)))
    }

    /// The topology the intra-node path found ([`Topology::Unknown`] when
    /// there is no intra-node path).
    pub fn topology(&self) -> Topology {
        self.intra
            .as_ref()
            .map_or(Topology::Unknown, IntraNodeComm::topology)
    }
}

/// The name of an NCCL op in call fingerprints.
fn nccl_op_name(op: &NcclOp) -> &'static str {
    match to_intra_op(op) {
        Some(op) => debug::op_name(op),
        None => "prod",
    }
}

/// Our element type for an NCCL one; `None` for those only NCCL moves.
fn elem_of<T: NcclType>() -> Option<ElemType> {
    use cudarc::nccl::sys::ncclDataType_t as D;
    match T::as_nccl_type() {
        D::ncclBfloat16 => Some(ElemType::Bf16),
        D::ncclFloat16 => Some(ElemType::F16),
        D::ncclFloat32 => Some(ElemType::F32),
        _ => None,
    }
}

/// The kernels' op for an NCCL op; `None` for the ops only NCCL has.
fn to_intra_op(op: &NcclOp) -> Option<ReduceOp> {
    match op {
        NcclOp::Sum => Some(ReduceOp::Sum),
        NcclOp::Avg => Some(ReduceOp::Avg),
        NcclOp::Min => Some(ReduceOp::Min),
        NcclOp::Max => Some(ReduceOp::Max),
        NcclOp::Prod => None,
    }
}

/// A root or peer as NCCL takes it (`i32`, what `cudarc::nccl::Comm`'s
/// methods take) or as the rest of this crate does (`usize`). An unsuffixed
/// literal (`comm.reduce_in_place(&mut buf, &op, 0)`) is an `i32`.
pub trait RankIndex: Copy + std::fmt::Display + sealed::Sealed {
    /// The rank as an index, `None` when negative.
    fn index(self) -> Option<usize>;
}

impl RankIndex for i32 {
    fn index(self) -> Option<usize> {
        usize::try_from(self).ok()
    }
}

impl RankIndex for usize {
    fn index(self) -> Option<usize> {
        Some(self)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for i32 {}
    impl Sealed for usize {}
}

/// A rank already checked against the world, as NCCL takes it.
fn nccl_rank(rank: usize) -> i32 {
    // Checked below the world size, which NCCL took as an i32.
    i32::try_from(rank).unwrap_or(i32::MAX)
}

/// The crate's error for a failed NCCL call (`NcclError`'s own `Debug`
/// says only "NcclError": the code is in its field).
fn nccl_error(rank: usize, op: &'static str, e: &NcclError) -> Error {
    Error::Nccl {
        op,
        detail: format!("rank {rank}: {:?}", e.0),
    }
}

/// The argument checks of the collectives, made before anything is
/// enqueued, so a bad call never reaches NCCL or a kernel. Pure: tested
/// without a GPU. Every message names the call, the rank and the lengths.
mod args {
    use super::RankIndex;
    use crate::error::{Error, Result};

    /// `value` (a root or peer, named `what`) as an index below `world`.
    pub(super) fn rank_in_world(
        op: &str,
        rank: usize,
        world: usize,
        what: &str,
        value: impl RankIndex,
    ) -> Result<usize> {
        match value.index() {
            Some(i) if i < world => Ok(i),
            _ => Err(Error::InvalidArgument(format!(
                "{op} on rank {rank}: {what} {value} is outside the world of {world}"
            ))),
        }
    }

    /// Send and receive buffers of one length (all-reduce).
    pub(super) fn same_len(op: &str, rank: usize, send: usize, recv: usize) -> Result<()> {
        if send == recv {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "{op} on rank {rank}: send has {send} elements, recv {recv}"
        )))
    }

    /// The buffer only the root uses (`name`: broadcast's send, reduce's
    /// recv): on the root it must be there, with `other_len` elements
    /// (the length of the buffer every rank passes, `other`); elsewhere it
    /// is ignored, as NCCL ignores it.
    pub(super) fn root_buffer(
        op: &str,
        rank: usize,
        root: usize,
        name: &str,
        len: Option<usize>,
        other: &str,
        other_len: usize,
    ) -> Result<()> {
        if rank != root {
            return Ok(());
        }
        match len {
            None => Err(Error::InvalidArgument(format!(
                "{op} on rank {rank}: the root must pass a {name} buffer (got None)"
            ))),
            Some(n) if n != other_len => Err(Error::InvalidArgument(format!(
                "{op} on rank {rank} (the root): {name} has {n} elements, {other} {other_len}"
            ))),
            Some(_) => Ok(()),
        }
    }

    /// All-gather: `recv` holds `world` x `send` elements.
    pub(super) fn all_gather(rank: usize, world: usize, send: usize, recv: usize) -> Result<()> {
        if world.checked_mul(send) == Some(recv) {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "all_gather on rank {rank}: recv has {recv} elements, but must hold world size {world} x send {send} = {}",
            times(world, send)
        )))
    }

    /// Reduce-scatter: `send` holds `world` x `recv` elements.
    pub(super) fn reduce_scatter(
        rank: usize,
        world: usize,
        send: usize,
        recv: usize,
    ) -> Result<()> {
        if world.checked_mul(recv) == Some(send) {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "reduce_scatter on rank {rank}: send has {send} elements, but must hold world size {world} x recv {recv} = {}",
            times(world, recv)
        )))
    }

    fn times(a: usize, b: usize) -> String {
        a.checked_mul(b)
            .map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string())
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
            Error::Nccl { op, detail } => Error::Nccl {
                op,
                detail: detail.clone(),
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
        data: CudaView<'s, T>,
        peer: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let peer = args::rank_in_world("send", c.rank, c.world, "peer", peer)?;
        let r = self.nccl()?.send(&data, nccl_rank(peer));
        self.done("ncclSend", r)?;
        self.syncs.push(data.view_ptr(self.stream()).1);
        Ok(())
    }

    /// Grouped [`Communicator::recv`].
    pub fn recv<'r: 'g, T: NcclType>(
        &mut self,
        mut buff: CudaViewMut<'r, T>,
        peer: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let peer = args::rank_in_world("recv", c.rank, c.world, "peer", peer)?;
        let r = self.nccl()?.recv(&mut buff, nccl_rank(peer));
        self.done("ncclRecv", r)?;
        self.syncs.push(buff.view_ptr_mut(self.stream()).1);
        Ok(())
    }

    /// Grouped [`Communicator::broadcast`].
    pub fn broadcast<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: Option<CudaView<'s, T>>,
        mut recvbuff: CudaViewMut<'r, T>,
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
            self.syncs.push(s.view_ptr(self.stream()).1);
        }
        self.syncs.push(recvbuff.view_ptr_mut(self.stream()).1);
        Ok(())
    }

    /// Grouped [`Communicator::broadcast_in_place`] (NCCL).
    pub fn broadcast_in_place<'r: 'g, T: NcclType>(
        &mut self,
        mut recvbuff: CudaViewMut<'r, T>,
        root: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let root = args::rank_in_world("broadcast", c.rank, c.world, "root", root)?;
        let r = self
            .nccl()?
            .broadcast_in_place(&mut recvbuff, nccl_rank(root));
        self.done("ncclBroadcast", r)?;
        self.syncs.push(recvbuff.view_ptr_mut(self.stream()).1);
        Ok(())
    }

    /// Grouped [`Communicator::all_gather`].
    pub fn all_gather<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        mut recvbuff: CudaViewMut<'r, T>,
    ) -> Result<()> {
        let c = self.comm;
        args::all_gather(c.rank, c.world, sendbuff.len(), recvbuff.len())?;
        let r = self.nccl()?.all_gather(&sendbuff, &mut recvbuff);
        self.done("ncclAllGather", r)?;
        self.syncs.push(sendbuff.view_ptr(self.stream()).1);
        self.syncs.push(recvbuff.view_ptr_mut(self.stream()).1);
        Ok(())
    }

    /// Grouped [`Communicator::all_reduce`] (NCCL).
    pub fn all_reduce<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        mut recvbuff: CudaViewMut<'r, T>,
        reduce_op: &NcclOp,
    ) -> Result<()> {
        let c = self.comm;
        args::same_len("all_reduce", c.rank, sendbuff.len(), recvbuff.len())?;
        let r = self.nccl()?.all_reduce(&sendbuff, &mut recvbuff, reduce_op);
        self.done("ncclAllReduce", r)?;
        self.syncs.push(sendbuff.view_ptr(self.stream()).1);
        self.syncs.push(recvbuff.view_ptr_mut(self.stream()).1);
        Ok(())
    }

    /// Grouped [`Communicator::all_reduce_in_place`] (NCCL).
    pub fn all_reduce_in_place<'r: 'g, T: NcclType>(
        &mut self,
        mut buff: CudaViewMut<'r, T>,
        reduce_op: &NcclOp,
    ) -> Result<()> {
        let r = self.nccl()?.all_reduce_in_place(&mut buff, reduce_op);
        self.done("ncclAllReduce", r)?;
        self.syncs.push(buff.view_ptr_mut(self.stream()).1);
        Ok(())
    }

    /// Grouped [`Communicator::reduce`].
    pub fn reduce<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
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
        self.syncs.push(sendbuff.view_ptr(self.stream()).1);
        if let Some(r) = recvbuff {
            self.syncs.push(r.view_ptr_mut(self.stream()).1);
        }
        Ok(())
    }

    /// Grouped [`Communicator::reduce_in_place`].
    pub fn reduce_in_place<'r: 'g, T: NcclType>(
        &mut self,
        mut recvbuff: CudaViewMut<'r, T>,
        reduce_op: &NcclOp,
        root: impl RankIndex,
    ) -> Result<()> {
        let c = self.comm;
        let root = args::rank_in_world("reduce", c.rank, c.world, "root", root)?;
        let r = self
            .nccl()?
            .reduce_in_place(&mut recvbuff, reduce_op, nccl_rank(root));
        self.done("ncclReduce", r)?;
        self.syncs.push(recvbuff.view_ptr_mut(self.stream()).1);
        Ok(())
    }

    /// Grouped [`Communicator::reduce_scatter`].
    pub fn reduce_scatter<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        mut recvbuff: CudaViewMut<'r, T>,
        reduce_op: &NcclOp,
    ) -> Result<()> {
        let c = self.comm;
        args::reduce_scatter(c.rank, c.world, sendbuff.len(), recvbuff.len())?;
        let r = self
            .nccl()?
            .reduce_scatter(&sendbuff, &mut recvbuff, reduce_op);
        self.done("ncclReduceScatter", r)?;
        self.syncs.push(sendbuff.view_ptr(self.stream()).1);
        self.syncs.push(recvbuff.view_ptr_mut(self.stream()).1);
        Ok(())
    }
}

impl Drop for Group<'_> {
    /// Ends the group; a failure waits for the communicator's next call
    /// (`Drop` never panics).
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            let detail = match e {
                Error::Nccl { detail, .. } => detail,
                other => other.to_string(),
            };
            self.comm.lock_group().end_error = Some(detail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{RankIndex, args};

    fn message(r: crate::Result<impl std::fmt::Debug>) -> String {
        r.expect_err("should be refused").to_string()
    }

    #[test]
    fn roots_and_peers_are_checked_against_the_world() {
        assert_eq!(
            args::rank_in_world("reduce", 1, 4, "root", 3i32).unwrap(),
            3
        );
        assert_eq!(
            args::rank_in_world("send", 1, 4, "peer", 0usize).unwrap(),
            0
        );
        assert_eq!(
            message(args::rank_in_world("reduce", 1, 4, "root", 4i32)),
            "invalid argument: reduce on rank 1: root 4 is outside the world of 4"
        );
        assert_eq!(
            message(args::rank_in_world("send", 2, 4, "peer", -1i32)),
            "invalid argument: send on rank 2: peer -1 is outside the world of 4"
        );
        assert!(args::rank_in_world("recv", 0, 2, "peer", usize::MAX).is_err());
        assert_eq!((-1i32).index(), None);
        assert_eq!(i32::MAX.index(), Some(i32::MAX as usize));
    }

    #[test]
    fn all_gather_recv_is_world_times_send() {
        args::all_gather(0, 4, 3, 12).unwrap();
        args::all_gather(0, 4, 0, 0).unwrap();
        assert_eq!(
            message(args::all_gather(1, 4, 3, 10)),
            "invalid argument: all_gather on rank 1: recv has 10 elements, but must hold world size 4 x send 3 = 12"
        );
        // The recv of the send's length (an all-reduce's shape) is refused.
        assert!(args::all_gather(0, 2, 8, 8).is_err());
        let huge = message(args::all_gather(0, 8, usize::MAX / 2, 0));
        assert!(huge.contains("more than usize::MAX"), "{huge}");
    }

    #[test]
    fn reduce_scatter_send_is_world_times_recv() {
        args::reduce_scatter(3, 4, 12, 3).unwrap();
        assert_eq!(
            message(args::reduce_scatter(3, 4, 12, 4)),
            "invalid argument: reduce_scatter on rank 3: send has 12 elements, but must hold world size 4 x recv 4 = 16"
        );
        assert!(args::reduce_scatter(0, 2, 7, 3).is_err());
    }

    #[test]
    fn only_the_root_needs_its_buffer() {
        // Not the root: whatever it passes is ignored, as NCCL ignores it.
        args::root_buffer("reduce", 1, 0, "recv", None, "send", 5).unwrap();
        args::root_buffer("reduce", 1, 0, "recv", Some(3), "send", 5).unwrap();
        args::root_buffer("broadcast", 0, 0, "send", Some(5), "recv", 5).unwrap();
        assert_eq!(
            message(args::root_buffer(
                "broadcast",
                2,
                2,
                "send",
                None,
                "recv",
                5
            )),
            "invalid argument: broadcast on rank 2: the root must pass a send buffer (got None)"
        );
        assert_eq!(
            message(args::root_buffer(
                "reduce",
                0,
                0,
                "recv",
                Some(4),
                "send",
                5
            )),
            "invalid argument: reduce on rank 0 (the root): recv has 4 elements, send 5"
        );
    }

    #[test]
    fn all_reduce_lengths_match() {
        args::same_len("all_reduce", 0, 7, 7).unwrap();
        assert_eq!(
            message(args::same_len("all_reduce", 1, 10000, 9999)),
            "invalid argument: all_reduce on rank 1: send has 10000 elements, recv 9999"
        );
    }
}
