//! [`IntraNodeComm`]: the intra-node communicator (PyTorch's
//! `c10d::intra_node_comm::IntraNodeComm`): the ranks' rendezvous, their
//! topology, the kernels and the symmetric memory every all-reduce uses.
//!
//! [`IntraNodeComm::rendezvous`] either returns a complete communicator or
//! says why not ([`RendezvousError`]): there is no half-initialised object.
//! Every rank reaches the same outcome, because each step's result is
//! all-gathered through the store before the next step starts:
//!
//! 1. every rank publishes its [`RendezvousRequest`] (or why it could not
//!    make one);
//! 2. every rank reads the NVLink mesh between the ranks' GPUs from NVML
//!    and publishes which peers its GPU can access (`cuDeviceCanAccessPeer`);
//!    the shared matrix restricts the mesh;
//! 3. every rank runs [`validate`] and loads the kernels, and publishes its
//!    verdict; any failure or refusal ends the rendezvous on every rank, and
//!    so do verdicts that disagree;
//! 4. [`SymmetricMemory::rendezvous_with`] allocates, exchanges and maps the
//!    blocks (its last phase all-gathers every rank's success).

pub mod all_reduce;
pub mod broadcast;
pub mod debug;
pub mod hcm;
mod health;
pub mod scatter_gather;
pub(crate) mod tracked;

pub use health::{BARRIER_TIMEOUT_ENV, DEFAULT_BARRIER_TIMEOUT_MS, HostErrorWord};

use std::ffi::CString;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{CudaContext, CudaStream};
use intranode_store::{Store, StoreExchange};
use serde::{Deserialize, Serialize};

use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};
use crate::kernels::KernelModule;
use crate::rendezvous::{
    CommConfig, RendezvousRequest, Unsupported, ValidatedGroup, exchange_requests, validate,
};
use crate::symm_mem::SymmetricMemory;
use crate::topology::{self, MAX_DEVICES, NvlMesh, PciAddress, Topology};
pub use all_reduce::LAMPORT_LAUNCH_ENV;
use all_reduce::LamportLaunch;

/// Why [`IntraNodeComm::rendezvous`] returned no communicator.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    /// The group cannot use the fast path: fall back (to NCCL).
    #[error("intra-node comm unsupported: {0}")]
    Unsupported(#[from] Unsupported),
    /// Something failed on the way (driver, store, allocation, a peer).
    #[error("intra-node comm rendezvous failed: {0}")]
    Failed(#[from] Error),
}

/// What each rank publishes after validating (step 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Verdict {
    /// The group works, with this topology and mesh.
    Ok {
        topology: String,
        mesh: Vec<[u32; MAX_DEVICES]>,
    },
    /// The group cannot use the fast path, and why.
    Unsupported(String),
    /// This rank failed (kernels did not load), and why.
    Failed(String),
}

/// Count of communicators this process has started to build: each gets
/// its own store prefix, so their keys never mix. All ranks create their
/// communicators in the same order (as with any collective API), so the
/// numbers agree.
static COMM_COUNT: AtomicU64 = AtomicU64::new(0);

/// The intra-node communicator of one rank. See the module docs.
pub struct IntraNodeComm {
    ctx: Arc<CudaContext>,
    kernels: KernelModule,
    store: Arc<dyn Store>,
    exchange: Mutex<StoreExchange>,
    rank: usize,
    world: usize,
    device: usize,
    topology: Topology,
    mesh: NvlMesh,
    hcm_neighbors: Option<[[usize; 4]; MAX_DEVICES]>,
    /// This rank's part in HCM, or why the group cannot run it.
    hcm_plan: std::result::Result<hcm::HcmPlan, String>,
    symm: SymmetricMemory,
    usage_counter: AtomicU64,
    /// Where kernels report a peer that never arrived.
    health: Arc<HostErrorWord>,
    /// Bound of every GPU wait on a peer.
    barrier_timeout: std::time::Duration,
    /// Call fingerprints, under `INTRANODE_DEBUG=detail` (NOTE [call
    /// fingerprints] in `debug.rs`).
    call_checker: Option<debug::CallChecker>,
    /// Launch shapes of the Lamport kernels ([`LAMPORT_LAUNCH_ENV`]).
    lamport_launch: LamportLaunch,
    /// The side stream of calls captured into CUDA graphs, made at the
    /// first such call (NOTE [capture and event tracking] in `tracked.rs`).
    capture_side: std::sync::OnceLock<tracked::CaptureSide>,
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

/// Step 2, local half: which peers our GPU can access, index = rank. A
/// peer on our own GPU counts as accessible. A peer GPU this process cannot
/// see (`CUDA_VISIBLE_DEVICES`) cannot be asked about; it counts as
/// accessible, so the NVML mesh alone decides for that pair.
fn peer_access_row(ctx: &CudaContext, requests: &[RendezvousRequest], rank: usize) -> Vec<bool> {
    let me = ctx.cu_device();
    let own = &requests[rank];
    requests
        .iter()
        .enumerate()
        .map(|(peer, req)| {
            if peer == rank || req.same_device(own) {
                return true;
            }
            let Ok(pci) = CString::new(req.pci_bus_id.as_str()) else {
                return false;
            };
            // SAFETY: the driver is initialised (our context exists); the
            // string is NUL-terminated.
            match unsafe { driver_ext::device_get_by_pci_bus_id(&pci) } {
                // SAFETY: both are valid device handles of this process.
                Ok(dev) => match unsafe { driver_ext::device_can_access_peer(me, dev) } {
                    Ok(can) => can,
                    Err(e) => {
                        tracing::warn!("cuDeviceCanAccessPeer for rank {peer} (gpu {}) failed: {e}", req.pci_bus_id);
                        false
                    }
                },
                Err(e) => {
                    tracing::debug!(
                        "gpu {} of rank {peer} is not visible here ({e}); NVML alone decides its links",
                        req.pci_bus_id
                    );
                    true
                }
            }
        })
        .collect()
}

/// SMs of the context's GPU: the Lamport launch shape spreads over them.
fn multiprocessors(ctx: &CudaContext) -> Result<usize> {
    let sms = ctx
        .attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
        .ctx(
            "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
            Some(ctx.ordinal()),
        )?;
    Ok(usize::try_from(sms).unwrap_or(1).max(1))
}

/// The NVML mesh between the ranks' GPUs (zero when a PCI address does
/// not parse: the topology is then unknown).
fn nvml_mesh(requests: &[RendezvousRequest]) -> NvlMesh {
    let addresses: Option<Vec<PciAddress>> = requests
        .iter()
        .map(RendezvousRequest::pci_address)
        .collect();
    match addresses {
        Some(addresses) => topology::nvl_mesh_from_nvml(&addresses),
        None => {
            tracing::warn!("a rank's PCI bus id does not parse; assuming no NVLink");
            NvlMesh::zero()
        }
    }
}

impl IntraNodeComm {
    /// Builds the communicator of `rank` in a group of `world` ranks on
    /// the device of `ctx`, meeting the others through `store`. Every rank
    /// of the group must call it (with the same `world`, in the same order
    /// relative to its other communicators).
    pub fn rendezvous(
        ctx: &Arc<CudaContext>,
        store: Arc<dyn Store>,
        rank: usize,
        world: usize,
        config: &CommConfig,
    ) -> Result<IntraNodeComm, RendezvousError> {
        if world == 0 || rank >= world {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is not below world size {world}"
            ))
            .into());
        }
        let device = ctx.ordinal();
        let instance = COMM_COUNT.fetch_add(1, Ordering::Relaxed);
        let mut exchange = StoreExchange::new(format!("intranode/comm/{instance}"));
        let s: &dyn Store = &*store;
        let store_err = |op: &'static str| move |source| Error::Store { op, rank, source };

        // Step 1: requests.
        let local = RendezvousRequest::local(ctx, rank, world, config);
        let published = match &local {
            Ok(r) => Ok(r.clone()),
            Err(e) => Err(e.to_string()),
        };
        let requests = exchange_requests(s, &mut exchange, rank, world, &published);
        local?;
        let requests = requests?;
        // Every rank sees the same requests, so every rank fails here alike.
        if let Some(why) = crate::rendezvous::debug_level_mismatch(&requests) {
            return Err(Error::InvalidArgument(format!("rank {rank}: {why}")).into());
        }

        // Step 2: mesh and peer access. A disabled or oversized group
        // skips the queries but still takes part in the exchange.
        let queries_useful = config.enabled && (2..=MAX_DEVICES).contains(&world);
        let row = if queries_useful {
            peer_access_row(ctx, &requests, rank)
        } else {
            vec![true; world]
        };
        let rows: Vec<Vec<bool>> = exchange
            .all_gather(s, rank, world, &row)
            .map_err(store_err("all-gather of peer access"))?;
        let mesh = if queries_useful {
            let access = |a: usize, b: usize| {
                rows.get(a)
                    .and_then(|row| row.get(b))
                    .copied()
                    .unwrap_or(false)
            };
            topology::restrict_to_peer_access(&nvml_mesh(&requests), world, access)
        } else {
            NvlMesh::zero()
        };

        // Step 3: verdicts.
        let local: std::result::Result<
            (ValidatedGroup, KernelModule, HostErrorWord, LamportLaunch),
            RendezvousError,
        > = match validate(&requests, &mesh, config) {
            Err(u) => Err(u.into()),
            Ok(group) => multiprocessors(ctx)
                .and_then(|sms| {
                    LamportLaunch::from_env(sms).map_err(|why| {
                        Error::InvalidArgument(format!("rank {rank}, device {device}: {why}"))
                    })
                })
                .and_then(|l| KernelModule::load(ctx).map(|k| (k, l)))
                .and_then(|(k, l)| {
                    HostErrorWord::new(ctx, config.barrier_timeout()).map(|h| (group, k, h, l))
                })
                .map_err(RendezvousError::from),
        };
        let verdict = match &local {
            Ok((group, _, _, _)) => Verdict::Ok {
                topology: group.topology.to_string(),
                mesh: group.mesh.0.to_vec(),
            },
            Err(RendezvousError::Unsupported(u)) => Verdict::Unsupported(u.to_string()),
            Err(RendezvousError::Failed(e)) => Verdict::Failed(e.to_string()),
        };
        let verdicts: Vec<Verdict> = exchange
            .all_gather(s, rank, world, &verdict)
            .map_err(store_err("all-gather of rendezvous verdicts"))?;
        let (group, kernels, health, lamport_launch) = local?;
        for (r, v) in verdicts.iter().enumerate() {
            if let Verdict::Failed(reason) = v {
                return Err(Error::PeerFailed {
                    rank: r,
                    phase: "intra-node comm set-up",
                    reason: reason.clone(),
                }
                .into());
            }
        }
        for (r, v) in verdicts.iter().enumerate() {
            match v {
                Verdict::Unsupported(reason) => {
                    return Err(Unsupported::PeerFailed {
                        rank: r,
                        reason: reason.clone(),
                    }
                    .into());
                }
                Verdict::Ok { .. } if *v != verdict => {
                    return Err(Unsupported::InconsistentTopology {
                        rank: r,
                        theirs: format!("{v:?}"),
                        me: rank,
                        ours: format!("{verdict:?}"),
                    }
                    .into());
                }
                _ => {}
            }
        }

        // Step 4: symmetric memory (its last phase is the final all-gather).
        let symm = SymmetricMemory::rendezvous_with(
            ctx,
            s,
            &mut exchange,
            rank,
            world,
            group.buffer_bytes,
            group.backend,
        )?;
        tracing::info!("intra-node comm ready: rank {rank}/{world}, device {device}, {group}");
        let call_checker = (config.debug == debug::DebugLevel::Detail).then(|| {
            debug::CallChecker::new(
                store.clone(),
                format!("{}/debug", exchange.prefix()),
                rank,
                world,
            )
        });
        Ok(IntraNodeComm {
            ctx: ctx.clone(),
            kernels,
            store,
            exchange: Mutex::new(exchange),
            rank,
            world,
            device,
            topology: group.topology,
            mesh: group.mesh,
            hcm_neighbors: group.hcm_neighbors,
            hcm_plan: hcm::hcm_plan(group.topology, world, rank, group.hcm_neighbors.as_ref()),
            symm,
            usage_counter: AtomicU64::new(0),
            health: Arc::new(health),
            barrier_timeout: config.barrier_timeout(),
            call_checker,
            lamport_launch,
            capture_side: std::sync::OnceLock::new(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// CUDA ordinal of this rank's device (in this process).
    pub fn device(&self) -> usize {
        self.device
    }

    /// How the ranks' GPUs are connected.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// The NVLink mesh between the ranks (index = rank; pairs on one GPU
    /// count as linked).
    pub fn mesh(&self) -> &NvlMesh {
        &self.mesh
    }

    /// The hybrid-cube-mesh neighbour table, for
    /// [`Topology::HybridCubeMesh`] (see [`topology::hcm_neighbors`]).
    pub fn hcm_neighbors(&self) -> Option<&[[usize; 4]; MAX_DEVICES]> {
        self.hcm_neighbors.as_ref()
    }

    /// This rank's part in the hybrid-cube-mesh all-reduce, or why the
    /// group cannot run it (see [`hcm::hcm_plan`]).
    pub fn hcm_plan(&self) -> std::result::Result<&hcm::HcmPlan, &str> {
        self.hcm_plan.as_ref().map_err(String::as_str)
    }

    /// The symmetric memory of the group.
    pub fn symm(&self) -> &SymmetricMemory {
        &self.symm
    }

    /// The kernels, loaded in this rank's context.
    pub fn kernels(&self) -> &KernelModule {
        &self.kernels
    }

    /// This rank's context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The store the group met through.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// How many collectives this communicator has run (seed
    /// `getIntraNodeCommUsageCounter`).
    pub fn usage_counter(&self) -> u64 {
        self.usage_counter.load(Ordering::Relaxed)
    }

    /// Where this communicator's kernels report failed waits.
    pub fn health(&self) -> &HostErrorWord {
        &self.health
    }

    /// The buffers of one call on `stream` (NOTE [capture and event
    /// tracking] in `tracked.rs`).
    pub(crate) fn call_buffers<'a>(
        &'a self,
        stream: &'a Arc<CudaStream>,
    ) -> Result<tracked::CallBuffers<'a>> {
        tracked::CallBuffers::new(&self.ctx, stream, self.device, self.rank, || {
            if let Some(side) = self.capture_side.get() {
                return Ok(side);
            }
            let side = tracked::CaptureSide::new(&self.ctx, self.device)?;
            // Another thread may have won the race: either side will do.
            let _ = self.capture_side.set(side);
            self.capture_side.get().ok_or_else(|| {
                Error::InvalidArgument("the capture side stream could not be kept".into())
            })
        })
    }

    /// What every collective checks before it enqueues anything: no
    /// earlier wait of this communicator ran out, and `stream` belongs to
    /// its device. `what` names the call in the error.
    pub(crate) fn check_call(&self, what: &str, stream: &CudaStream) -> Result<()> {
        self.health().check()?;
        if stream.context().ordinal() != self.device {
            return Err(Error::InvalidArgument(format!(
                "{what} on rank {}: stream is on device {}, the communicator on device {}",
                self.rank,
                stream.context().ordinal(),
                self.device
            )));
        }
        Ok(())
    }

    /// The same, shared (work handles keep it).
    pub fn health_arc(&self) -> Arc<HostErrorWord> {
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

    /// The call-fingerprint checker, under `INTRANODE_DEBUG=detail`.
    pub fn call_checker(&self) -> Option<&debug::CallChecker> {
        self.call_checker.as_ref()
    }

    /// Counts one use (each collective calls it once); returns the new
    /// count.
    pub fn increment_usage_counter(&self) -> u64 {
        self.usage_counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Runs `f` with the store and the group's exchange (for further
    /// host-side collectives; every rank must make the same calls).
    pub fn with_exchange<R>(&self, f: impl FnOnce(&dyn Store, &mut StoreExchange) -> R) -> R {
        let mut exchange = self.exchange.lock().unwrap_or_else(PoisonError::into_inner);
        f(&*self.store, &mut exchange)
    }

    /// A host-side barrier of all ranks through the store (not ordered
    /// with GPU work: synchronize first where that matters).
    pub fn store_barrier(&self) -> Result<()> {
        let (rank, world) = (self.rank, self.world);
        self.with_exchange(|store, exchange| exchange.barrier(store, rank, world))
            .map_err(|source| Error::Store {
                op: "barrier",
                rank,
                source,
            })
    }

    /// Waits for all work in this rank's context (host side).
    pub fn synchronize(&self) -> Result<()> {
        self.ctx
            .synchronize()
            .ctx("cuCtxSynchronize", Some(self.device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_compare_by_value() {
        let a = Verdict::Ok {
            topology: "fully connected".into(),
            mesh: vec![[1; MAX_DEVICES]; MAX_DEVICES],
        };
        let mut b = a.clone();
        assert_eq!(a, b);
        if let Verdict::Ok { mesh, .. } = &mut b {
            mesh[0][1] = 2;
        }
        assert_ne!(a, b);
    }

    #[test]
    fn rendezvous_error_messages() {
        let e = RendezvousError::from(Unsupported::WorldSize { world: 9 });
        assert!(
            e.to_string().contains("unsupported") && e.to_string().contains("9"),
            "{e}"
        );
        let e = RendezvousError::from(Error::PeerFailed {
            rank: 2,
            phase: "symmetric-memory allocation",
            reason: "out of memory".into(),
        });
        let text = e.to_string();
        assert!(
            text.contains("rank 2") && text.contains("out of memory"),
            "{text}"
        );
    }
}
