//! [`Communicator`]: what applications use. It owns an [`IntraNodeComm`]
//! when the rendezvous allowed one and an NCCL communicator when NCCL
//! loads, and routes each all-reduce to whichever
//! [`select_all_reduce_algo`] picks, so every size, element type, op and
//! topology works; broadcasts go where [`select_broadcast_algo`] says. Its
//! API mirrors `cudarc::nccl::Comm` (`rank`, `world_size`, `all_reduce`,
//! `all_reduce_in_place`, `broadcast_in_place`), so code written for that
//! can swap it in.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};
use cudarc::nccl::{Comm, NcclType, ReduceOp as NcclOp};
use intranode_store::{Store, StoreExchange};

use crate::algo::{AllReduceAlgo, Crossovers, forced_algo, select_all_reduce_algo};
use crate::comm::all_reduce::ReduceOp;
use crate::comm::broadcast::{BroadcastAlgo, forced_broadcast_algo, select_broadcast_algo};
use crate::comm::debug::{self, CallChecker, DebugLevel};
use crate::comm::{IntraNodeComm, RendezvousError};
use crate::error::{Error, Result};
use crate::kernels::DType;
use crate::rendezvous::CommConfig;
use crate::topology::Topology;
use crate::work::Work;

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
            forced: forced_algo(),
            forced_broadcast: forced_broadcast_algo(),
            call_checker,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world
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
        let algo = self.algo_for::<T>(buf.len(), op);
        match (algo, &self.intra, to_intra_op(op)) {
            (AllReduceAlgo::Nccl, _, _) | (_, None, _) | (_, _, None) => {
                let comm = self.nccl_or_err()?;
                self.check_health()?;
                self.check_nccl_call::<T>(buf.len(), op)?;
                comm.all_reduce_in_place(buf, op)
                    .map(|_| self.work())
                    .map_err(|e| Error::Nccl {
                        op: "ncclAllReduce",
                        detail: format!("rank {}: {e:?}", self.rank),
                    })
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
        if send.len() != recv.len() {
            return Err(Error::InvalidArgument(format!(
                "all_reduce on rank {}: send has {} elements, recv {}",
                self.rank,
                send.len(),
                recv.len()
            )));
        }
        match (algo, &self.intra, to_intra_op(op)) {
            (AllReduceAlgo::Nccl, _, _) => {
                let comm = self.nccl_or_err()?;
                self.check_health()?;
                self.check_nccl_call::<T>(send.len(), op)?;
                comm.all_reduce(send, recv, op)
                    .map(|_| self.work())
                    .map_err(|e| Error::Nccl {
                        op: "ncclAllReduce",
                        detail: format!("rank {}: {e:?}", self.rank),
                    })
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
    /// length and root.
    pub fn broadcast_in_place<T: DeviceRepr + NcclType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        root: usize,
    ) -> Result<Work> {
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
        if root >= self.world {
            return Err(Error::InvalidArgument(format!(
                "broadcast on rank {}: root {root} is outside the world of {}",
                self.rank, self.world
            )));
        }
        match (algo, &self.intra) {
            (BroadcastAlgo::Nccl, _) => {
                let comm = self.nccl_or_err()?;
                self.check_health()?;
                // `root < world`, and a world fits in i32 (NCCL took it).
                comm.broadcast_in_place(buf, root as i32)
                    .map(|_| self.work())
                    .map_err(|e| Error::Nccl {
                        op: "ncclBroadcast",
                        detail: format!("rank {}: {e:?}", self.rank),
                    })
            }
            (BroadcastAlgo::SymmMem, None) => Err(Error::InvalidArgument(format!(
                "broadcast on rank {}: symm-mem needs the intra-node path, which is unavailable: {}",
                self.rank,
                self.intra_reason.as_deref().unwrap_or("unknown")
            ))),
            (BroadcastAlgo::SymmMem, Some(intra)) => intra.broadcast(buf, root, &self.stream),
        }
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

    /// Waits for everything enqueued on this communicator's stream, then
    /// reports a GPU wait on a peer that ran out since the communicator was
    /// built ([`Error::PeerTimeout`], naming the rank, the peer, the
    /// collective, where it waited and the bound). Once that happened the
    /// communicator stays unusable: every later call returns the same
    /// error; build a new one.
    pub fn synchronize(&self) -> Result<()> {
        self.work().synchronize()
    }

    /// Reports a GPU wait on a peer that ran out, without waiting for the
    /// stream: call it once the work you care about is known to be done
    /// (after a CUDA graph's replay, once the graph's stream or an event
    /// after it has synchronised). Work still queued may time out later.
    pub fn check(&self) -> Result<()> {
        self.check_health()
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
