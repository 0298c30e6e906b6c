//! [`IntraNodeComm`]: the intra-node communicator of one rank (PyTorch's
//! `c10d::intra_node_comm::IntraNodeComm`): its peers, their topology, the
//! kernels and the symmetric memory every collective uses. It is built by
//! the rendezvous ([`crate::rendezvous`]), complete or not at all.

pub mod all_reduce;
pub mod broadcast;
pub mod debug;
pub mod fused_norm;
pub mod hcm;
pub mod launch;
pub mod launch_shape;
#[cfg(feature = "test-kernels")]
pub mod probe;
pub mod residency;
pub mod scatter_gather;
#[cfg(intranode_internals)]
mod suite;
pub(crate) mod tracked;

pub use crate::health::HostErrorWord;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{CudaContext, CudaStream};
use intranode_store::{Store, StoreExchange};

use crate::error::{Error, Result};
use crate::kernels::KernelModule;
use crate::symm_mem::SymmetricMemory;
use crate::topology::{MAX_DEVICES, Topology};
use launch_shape::LamportLaunch;

/// The intra-node communicator of one rank. See the module docs.
pub struct IntraNodeComm {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) kernels: KernelModule,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) exchange: Mutex<StoreExchange>,
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) device: usize,
    pub(crate) topology: Topology,
    pub(crate) hcm_neighbors: Option<[[usize; 4]; MAX_DEVICES]>,
    /// This rank's part in HCM, or why the group cannot run it.
    pub(crate) hcm_plan: std::result::Result<hcm::HcmPlan, hcm::HcmUnavailable>,
    /// Symmetric memory, its buffer allocated `buffer_bytes` or the push
    /// form's scratch where that is larger
    /// (`config::PushShape::scratch_bytes`).
    pub(crate) symm: SymmetricMemory,
    /// The symmetric buffer the configuration asked for
    /// (`config::BUFFER_BYTES_ENV`): every form but the push form works in
    /// its halves ([`half_buffer_bytes`](Self::half_buffer_bytes)).
    pub(crate) buffer_bytes: usize,
    pub(crate) usage_counter: AtomicU64,
    /// Where kernels report a peer that never arrived.
    pub(crate) health: Arc<HostErrorWord>,
    /// Bound of every GPU wait on a peer.
    pub(crate) barrier_timeout: std::time::Duration,
    /// Call fingerprints, under `INTRANODE_DEBUG=detail` (NOTE [call
    /// fingerprints] in `debug.rs`).
    pub(crate) call_checker: Option<debug::CallChecker>,
    /// Where each algorithm takes over (`config::TUNING_FILE_ENV`).
    pub(crate) crossovers: crate::decide::Crossovers,
    /// Launch shapes of the Lamport kernels (`config::LAMPORT_LAUNCH_ENV`).
    pub(crate) lamport_launch: LamportLaunch,
    /// The most blocks a launch may have (NOTE [co-residency] in
    /// `residency.rs`).
    pub(crate) residency: residency::Residency,
    /// The push form's launch shape (`config::PUSH_LAUNCH_ENV`), the same
    /// on every rank (the rendezvous checks).
    pub(crate) push_shape: crate::config::PushShape,
    /// The fused norm's L2 prefetch (`config::L2_PREFETCH_ENV`).
    pub(crate) l2_prefetch: crate::config::L2Prefetch,
    /// The side stream of calls captured into CUDA graphs, made at the
    /// first such call (NOTE [capture and event tracking] in `tracked.rs`).
    pub(crate) capture_side: std::sync::OnceLock<tracked::CaptureSide>,
    /// The symmetric buffers users allocated on this communicator
    /// (`crate::symmetric`), looked up by the collectives' inputs.
    pub(crate) user_buffers: Arc<crate::symmetric::SymmetricRegistry>,
    /// Whether the push form can run an all-reduce here at all (a launch
    /// for one vector exists), worked out once at the rendezvous.
    pub(crate) push_runnable: bool,
    /// The parameters every launch shares
    /// ([`work_out_shared_params`](Self::work_out_shared_params)), worked
    /// out once at the rendezvous.
    pub(crate) shared_params: intranode_kernels_gpu::layout::AllReduceParams,
}

impl fmt::Debug for IntraNodeComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntraNodeComm")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("device", &self.device)
            .field("topology", &self.topology)
            .field("hcm_neighbors", &self.hcm_neighbors)
            .field("symm", &self.symm)
            .field("usage_counter", &self.usage_counter.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl IntraNodeComm {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// How the ranks' GPUs are connected.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// This rank's part in the hybrid-cube-mesh all-reduce, or why the
    /// group cannot run it (see `hcm::hcm_plan`). For the suites: the
    /// all-reduce reads the field.
    #[cfg(intranode_internals)]
    pub fn hcm_plan(&self) -> std::result::Result<&hcm::HcmPlan, &hcm::HcmUnavailable> {
        self.hcm_plan.as_ref()
    }

    /// The symmetric memory of the group.
    pub fn symm(&self) -> &SymmetricMemory {
        &self.symm
    }

    /// The kernels, loaded in this rank's context.
    pub fn kernels(&self) -> &KernelModule {
        &self.kernels
    }

    /// Where this communicator's kernels report failed waits.
    pub fn health(&self) -> &HostErrorWord {
        &self.health
    }

    /// The same, shared (work handles keep it).
    pub(crate) fn health_arc(&self) -> Arc<HostErrorWord> {
        self.health.clone()
    }

    /// Bound of every GPU wait on a peer.
    pub fn barrier_timeout(&self) -> std::time::Duration {
        self.barrier_timeout
    }

    /// Launch shapes of the Lamport kernels.
    pub(crate) fn lamport_launch(&self) -> &LamportLaunch {
        &self.lamport_launch
    }

    /// Where the group's ranks run, as far as block residency goes (NOTE
    /// [co-residency] in `residency.rs`).
    pub fn residency(&self) -> residency::Residency {
        self.residency
    }

    /// The most blocks one launch of this communicator may have.
    pub(crate) fn max_blocks(&self) -> usize {
        self.residency.max_blocks()
    }

    /// The call-fingerprint checker, under `INTRANODE_DEBUG=detail`.
    pub fn call_checker(&self) -> Option<&debug::CallChecker> {
        self.call_checker.as_ref()
    }

    /// Runs `f` with the store and the group's exchange (for further
    /// host-side collectives; every rank must make the same calls).
    pub(crate) fn with_exchange<R>(
        &self,
        f: impl FnOnce(&dyn Store, &mut StoreExchange) -> R,
    ) -> R {
        let mut exchange = self.exchange.lock().unwrap_or_else(PoisonError::into_inner);
        f(&*self.store, &mut exchange)
    }

    /// Allocates `len` elements of `T` that every peer maps (collective:
    /// every rank calls it with the same `len`, in the same order), for
    /// work on `stream`. See [`crate::symmetric`].
    pub(crate) fn alloc_symmetric<T>(
        &self,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<crate::symmetric::SymmetricBuffer<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "alloc_symmetric on rank {}: {len} elements of {} bytes overflow",
                self.rank,
                std::mem::size_of::<T>()
            ))
        })?;
        // A zero length still takes part in the rendezvous, whose layout
        // check then fails on every rank alike (rather than this rank
        // leaving the others waiting for the store's timeout).
        let (rank, world, backend) = (self.rank, self.world, self.symm.backend());
        let memory = self.with_exchange(|store, exchange| {
            SymmetricMemory::rendezvous_buffer(
                &self.ctx, store, exchange, rank, world, bytes, backend,
            )
        })?;
        crate::symmetric::SymmetricBuffer::new(
            memory,
            len,
            stream.clone(),
            self.user_buffers.clone(),
        )
    }
}
