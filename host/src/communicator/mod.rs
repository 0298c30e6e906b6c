//! [`Communicator`]: what applications use. It owns an `IntraNodeComm`
//! when the rendezvous allowed one and an NCCL communicator when NCCL
//! loads, and routes each all-reduce to whichever
//! `decide_all_reduce` picks, so every size, element type, op and
//! topology works; broadcasts go where `select_broadcast_algo` says.
//!
//! Its API is that of `cudarc::nccl::Comm`: every method of `Comm` exists
//! here with the same arguments and type parameters, for every `NcclType`,
//! so code written for it switches by changing the type. Our kernels serve
//! `all_reduce` and `all_reduce_in_place` (bf16, f16, f32:
//! `decide_all_reduce` sends the other types to NCCL), `broadcast_in_place`
//! (any type), and `all_gather` / `reduce_scatter` (bf16, f16, f32, up to a
//! size); the rest goes to NCCL through the `Comm` the communicator owns.
//!
// NOTE [nccl parity] is the paragraph below.
//! The differences from `cudarc::nccl::Comm`, all of them such that a
//! caller's `comm.method(args)?;` compiles either way
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

mod all_reduce;
mod alloc;
mod args;
mod construct;
mod group;
mod layer;
mod nccl_only;
mod norm;
mod scatter_gather;

pub use group::{Group, GroupInput, GroupOutput};

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use cudarc::driver::{
    CudaContext, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, SyncOnDrop,
};
use cudarc::nccl::result::NcclError;
use cudarc::nccl::{Comm, NcclType, ReduceOp as NcclOp};
use intranode_store::{Store, StoreExchange};

use crate::config::CommConfig;
use crate::decide::{AllReduceCall, Crossovers, NormCall, decide_norm, select_broadcast_algo};
use crate::error::{Error, Result};
use crate::intra::IntraNodeComm;
use crate::intra::debug::{CallChecker, DebugLevel};
use crate::intra::scatter_gather::ScatterGather;
use crate::intra::tracked::{CallBuffers, CaptureSide};
use crate::kernels::{KernelImage, KernelModule};
use crate::nccl_comm::nccl_error;
use crate::rendezvous::RendezvousError;
use crate::setup_times::SetupTimes;
use crate::topology::Topology;
use crate::types::BroadcastAlgo;
use crate::types::DType;
use crate::types::ReduceOp;
use crate::types::{AllReduceAlgo, NormPath};
use crate::work::Work;
use all_reduce::elem_of;
use intranode_kernels_gpu::layout::NormParams;

/// The communicator of one rank: every collective of
/// `cudarc::nccl::Comm`, with the same arguments, run by our NVLink kernels
/// where they are faster and by NCCL elsewhere.
///
/// One process per GPU builds one, collectively: every rank calls
/// [`Communicator::new`] with the same store (from [`crate::store`]) and its
/// own rank. The rendezvous decides once whether the group has the
/// intra-node path (one host, distinct GPUs, NVLink fully connected or a
/// hybrid cube mesh, 2 to 8 ranks) and builds an NCCL communicator beside it;
/// construction fails only when neither can serve the group.
/// [`intra_reason`](Self::intra_reason) says why there is no intra-node path,
/// [`algo_for`](Self::algo_for) which algorithm a call would take.
///
/// Calls run on the stream the communicator was built with, in its order,
/// and return without waiting for the GPU: each returns a [`Work`]
/// ([`Work::wait_on`] makes another stream wait, [`Work::synchronize`] the
/// host). Calls may be captured into a CUDA graph on that stream. A peer
/// that never comes to a call is reported within
/// `INTRANODE_BARRIER_TIMEOUT_MS` as [`Error::PeerTimeout`]; the
/// communicator is unusable after that.
///
/// Like `cudarc::nccl::Comm` it is used from one thread at a time: it is
/// `Send` (build it on one thread, use it on another: see
/// [`from_devices`](Self::from_devices)) but not `Sync`, so two threads
/// never call it at once.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<intranode::Communicator>();
/// ```
///
/// Beyond `Comm`'s methods: [`alloc_symmetric`](Self::alloc_symmetric)
/// (buffers every peer maps), [`all_reduce_residual_rmsnorm`](Self::all_reduce_residual_rmsnorm)
/// (a tensor-parallel layer's tail in one call), and [`group`](Self::group)
/// (NCCL's groups).
///
/// # Example
///
/// ```no_run
/// use cudarc::nccl::ReduceOp;
/// use intranode::{Communicator, dist_env::DistEnv};
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     // Started by `intranode-run --nproc-per-node 4 -- ./prog` (or torchrun).
///     let env = DistEnv::from_env()?;
///     let store = intranode::store::connect_env(&env)?;
///     let ctx = intranode::gpu::context(env.device.unwrap_or(env.local_rank))?;
///     let stream = ctx.new_stream()?;
///     let comm = Communicator::new(stream.clone(), store, env.rank, env.world_size)?;
///     if let Some(why) = comm.intra_reason() {
///         eprintln!("rank {}: NCCL only: {why}", env.rank);
///     }
///
///     let send = stream.clone_htod(&vec![env.rank as f32; 4096])?;
///     let mut recv = stream.alloc_zeros::<f32>(4096)?;
///     let work = comm.all_reduce(&send, &mut recv, &ReduceOp::Sum)?;
///     work.synchronize()?; // or keep going on `stream`: no wait needed there
///     let world = env.world_size as f32;
///     assert_eq!(stream.clone_dtoh(&recv)?[0], world * (world - 1.0) / 2.0);
///     Ok(())
/// }
/// ```
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
    /// The path `all_reduce_residual_rmsnorm` must take where it can
    /// (`config::NORM_PATH_ENV`).
    forced_norm: Option<NormPath>,
    /// Call fingerprints of NCCL calls when there is no intra-node
    /// communicator (whose checker serves otherwise): NOTE [call
    /// fingerprints] in `intra/debug.rs`.
    call_checker: Option<CallChecker>,
    /// Which kernel image to load (`config::KERNEL_IMAGE_ENV`).
    kernel_image: KernelImage,
    /// Where the time of construction went.
    setup_times: SetupTimes,
    /// The kernels, for groups without the intra-node path (which has
    /// its own), loaded at the first call that needs them.
    kernels: std::sync::OnceLock<KernelModule>,
    /// The side stream of norm calls captured into CUDA graphs (NOTE
    /// [capture and event tracking] in `intra/tracked.rs`).
    capture_side: std::sync::OnceLock<CaptureSide>,
    /// Whether a [`Group`] is open, and the failure of a dropped group's
    /// `ncclGroupEnd`, for the next call.
    group_state: Mutex<GroupState>,
    /// The store an [`Id`](crate::id::Id) started in this process, kept by
    /// rank 0 while it lives (last: dropped after the paths that used it).
    id_store: Option<Arc<intranode_store::TcpStoreServer>>,
}

// SAFETY: the one member that is not `Send` is cudarc's NCCL `Comm`, a
// raw `ncclComm_t`. NCCL ties a communicator to no thread: any thread may
// use it, one at a time (NCCL's "thread safety": re-entrant, not
// thread-safe), which `Send` without `Sync` allows and `&self` methods
// cannot break, because `Communicator` is not `Sync`. The rest (contexts,
// streams, mapped device addresses, loaded modules) is process-wide and
// already `Send`.
unsafe impl Send for Communicator {}

/// Whose numbering a communicator's store keys follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyScope {
    /// A store shared with the process's other communicators: each gets
    /// the next number of this process's counters.
    Process,
    /// A store of this group alone (an [`Id`](crate::id::Id)'s, or
    /// `from_devices`' own): every rank uses number 0, whatever else the
    /// process built (ranks that are threads of one process would each
    /// draw a different number from the process's counters).
    Fresh,
}

/// See [`Communicator::group`].
#[derive(Debug, Default)]
struct GroupState {
    open: bool,
    /// A dropped group's `ncclGroupEnd` failure, reported once.
    end_error: Option<Error>,
}

/// Count of communicators without an intra-node path that check calls:
/// each gets its own fingerprint keys (ranks create communicators in the
/// same order).
static CHECKER_COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Communicators built by this process: each one's NCCL exchange gets a
/// prefix of its own, so a fast rank's next communicator never writes a
/// key a slow rank of the last one has still to read (the exchange refuses
/// a key that is taken: NOTE [one group per prefix] in
/// `intranode_store`'s `exchange.rs`). Every rank builds its communicators
/// in the same order, so they agree on the number.
static NCCL_EXCHANGE_COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
        let started = Instant::now();
        let config = CommConfig::from_env()?;
        let mut times = SetupTimes::default();
        times.record("config", started.elapsed());
        Self::build(
            stream,
            store,
            rank,
            world,
            &config,
            times,
            KeyScope::Process,
        )
    }

    /// [`Communicator::new`] with settings made by hand instead of read
    /// from the environment (every rank must pass settings that agree
    /// where the rendezvous checks them: buffer size, backend, debug level).
    pub fn with_config(
        stream: Arc<CudaStream>,
        store: Arc<dyn Store>,
        rank: usize,
        world: usize,
        config: &CommConfig,
    ) -> Result<Self> {
        Self::build(
            stream,
            store,
            rank,
            world,
            config,
            SetupTimes::default(),
            KeyScope::Process,
        )
    }

    /// [`Communicator::with_config`], adding its phases to `times`.
    fn build(
        stream: Arc<CudaStream>,
        store: Arc<dyn Store>,
        rank: usize,
        world: usize,
        config: &CommConfig,
        mut times: SetupTimes,
        scope: KeyScope,
    ) -> Result<Self> {
        let config = config.clone();
        let ctx = stream.context().clone();
        let fresh = (scope == KeyScope::Fresh).then_some(0);
        let (intra, intra_reason) = match crate::rendezvous::run_scoped(
            &ctx,
            store.clone(),
            rank,
            world,
            &config,
            &mut times,
            fresh,
        ) {
            Ok(c) => (Some(c), None),
            Err(RendezvousError::Unsupported(why)) => (None, Some(why.to_string())),
            Err(RendezvousError::Failed(e)) => return Err(e),
        };
        let nccl_started = Instant::now();
        let instance = fresh.unwrap_or_else(|| {
            NCCL_EXCHANGE_COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        });
        let mut exchange = StoreExchange::new(format!("{}/nccl/{instance}", config.key_prefix()));
        // NCCL refuses ranks that share a GPU ("Duplicate GPU detected",
        // ncclInvalidUsage), and an init that fails that way leaves its
        // sockets and device memory behind: where the rendezvous saw
        // shared GPUs, NCCL is not tried. Every rank sees the same
        // residency, so all skip together and none waits on the store.
        let nccl = match &intra {
            Some(c) if c.residency().shared() => Err(format!(
                "rank {rank}: NCCL not started: {} ranks share a GPU (INTRANODE_ALLOW_OVERLAPPING_DEVICES), which NCCL refuses",
                c.residency().ranks_per_gpu
            )),
            _ => crate::nccl_comm::nccl_comm(&stream, store.as_ref(), &mut exchange, rank, world)
                .map_err(|e| e.to_string()),
        };
        times.record("nccl", nccl_started.elapsed());
        tracing::debug!("rank {rank}: communicator set up: {times}");
        if config.print_setup_times {
            // Asked for by `INTRANODE_TIMING=1`: the one line a device
            // run reads, without a tracing subscriber.
            eprintln!("intranode: rank {rank} set-up: {times}");
        }
        if let (None, Err(why)) = (&intra, &nccl) {
            return Err(Error::NcclUnavailable(format!(
                "rank {rank}: no path for this group: intra-node comm unsupported ({}), and {why}",
                intra_reason.as_deref().unwrap_or("unknown")
            )));
        }
        let call_checker = (config.debug == DebugLevel::Detail && intra.is_none()).then(|| {
            let n = fresh.unwrap_or_else(|| {
                CHECKER_COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            });
            CallChecker::new(
                store,
                format!("{}/communicator/{n}/debug", config.key_prefix()),
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
            crossovers: config.crossovers.clone(),
            forced: config.forced_algo,
            forced_broadcast: config.forced_broadcast,
            forced_norm: config.forced_norm,
            call_checker,
            kernel_image: config.kernel_image,
            setup_times: times,
            kernels: std::sync::OnceLock::new(),
            capture_side: std::sync::OnceLock::new(),
            group_state: Mutex::new(GroupState::default()),
            id_store: None,
        })
    }

    /// Where the time of this communicator's construction went (per
    /// phase; `INTRANODE_TIMING=1` also prints it to stderr).
    pub fn setup_times(&self) -> &SetupTimes {
        &self.setup_times
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

    /// The stream every call is enqueued on, like
    /// `cudarc::nccl::Comm::stream` (a clone of the `Arc`).
    pub fn stream(&self) -> Arc<CudaStream> {
        self.stream.clone()
    }

    /// The intra-node communicator, when the rendezvous allowed one
    /// (public under `--cfg intranode_internals`).
    #[cfg(intranode_internals)]
    pub fn intra(&self) -> Option<&IntraNodeComm> {
        self.intra.as_ref()
    }

    #[cfg(not(intranode_internals))]
    pub(crate) fn intra(&self) -> Option<&IntraNodeComm> {
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
    pub fn broadcast_in_place<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buf: &mut R,
        root: impl RankIndex,
    ) -> Result<Work> {
        let root = args::rank_in_world("broadcast", self.rank, self.world, "root", root)?;
        self.broadcast_in_place_with(buf, root, self.broadcast_algo())
    }

    /// Broadcast with an explicit path (tests); an error where that path
    /// does not exist.
    pub fn broadcast_in_place_with<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buf: &mut R,
        root: usize,
        algo: BroadcastAlgo,
    ) -> Result<Work> {
        let root = args::rank_in_world("broadcast", self.rank, self.world, "root", root)?;
        self.check_group("broadcast_in_place")?;
        match (algo, &self.intra) {
            (BroadcastAlgo::Nccl, _) => {
                let comm = self.nccl_or_err()?;
                self.check_health()?;
                let mut bufs = self.call_buffers()?;
                let mut view = bufs.output_view(buf, "broadcast buffer", &self.stream)?;
                bufs.ready()?;
                let r = comm.broadcast_in_place(&mut view, nccl_rank(root));
                bufs.finish()?;
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
            Some(e) => Err(e),
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
    /// The kernels for calls on this communicator's stream: the
    /// intra-node path's, or the communicator's own, loaded at the first
    /// call that needs them.
    pub(super) fn own_kernels(&self) -> Result<&KernelModule> {
        if let Some(intra) = &self.intra {
            return Ok(intra.kernels());
        }
        if let Some(k) = self.kernels.get() {
            return Ok(k);
        }
        let k = KernelModule::load_with(self.stream.context(), false, self.kernel_image)?;
        // Another thread may have won the race: either will do.
        let _ = self.kernels.set(k);
        self.kernels
            .get()
            .ok_or_else(|| Error::InvalidArgument("the kernels could not be kept".into()))
    }

    /// The buffers of one call on this communicator's stream, with the
    /// capture side stream made at the first capture that needs it.
    pub(super) fn call_buffers(&self) -> Result<CallBuffers<'_>> {
        let ctx = self.stream.context();
        let device = ctx.ordinal();
        CallBuffers::new(ctx, &self.stream, device, self.rank, || {
            if let Some(side) = self.capture_side.get() {
                return Ok(side);
            }
            let side = CaptureSide::new(ctx, device)?;
            let _ = self.capture_side.set(side);
            self.capture_side.get().ok_or_else(|| {
                Error::InvalidArgument("the capture side stream could not be kept".into())
            })
        })
    }

    pub(crate) fn work(&self) -> Work {
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

/// A root or peer as NCCL takes it (`i32`, what `cudarc::nccl::Comm`'s
/// methods take) or as the rest of this crate does (`usize`). An unsuffixed
/// literal (`comm.reduce_in_place(&mut buf, &op, 0)`) is an `i32`.
pub trait RankIndex: Copy + std::fmt::Display + sealed::Sealed {
    /// The rank as an index, `None` when negative.
    fn index(self) -> Option<usize>;
    /// The rank as passed, for [`Error::RankOutOfWorld`] (saturated at
    /// `i64::MAX`).
    fn as_i64(self) -> i64;
}

impl RankIndex for i32 {
    fn index(self) -> Option<usize> {
        usize::try_from(self).ok()
    }

    fn as_i64(self) -> i64 {
        i64::from(self)
    }
}

impl RankIndex for usize {
    fn index(self) -> Option<usize> {
        Some(self)
    }

    fn as_i64(self) -> i64 {
        i64::try_from(self).unwrap_or(i64::MAX)
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
