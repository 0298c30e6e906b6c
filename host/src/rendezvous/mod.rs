//! The rendezvous: how the ranks of one job meet through the store and
//! build their [`IntraNodeComm`]s, in one module: the request
//! (`request.rs`), the sequence (`run_scoped`, here) and the verdict
//! ([`validate`]).
//!
//! `run_scoped` either returns a complete communicator or
//! says why not ([`RendezvousError`]): there is no half-initialised object.
//! Every rank reaches the same outcome, because each step's result is
//! all-gathered through the store before the next step starts:
//!
//! 1. every rank publishes its [`RendezvousRequest`] (or why it could not
//!    make one);
//! 2. every rank reads the NVLink mesh between the ranks' GPUs from NVML
//!    and publishes which peers its GPU can access (`cuDeviceCanAccessPeer`);
//!    the shared matrix restricts the mesh;
//! 3. every rank runs [`validate()`] and loads the kernels, and publishes its
//!    verdict; any failure or refusal ends the rendezvous on every rank, and
//!    so do verdicts that disagree;
//! 4. [`SymmetricMemory::rendezvous`] allocates, exchanges and maps the
//!    blocks (its last phase all-gathers every rank's success).

mod request;
#[cfg(test)]
mod tests;
mod validate;

pub use request::{
    RendezvousRequest, debug_level_mismatch, exchange_requests, push_shape_mismatch,
};
pub use validate::{Unsupported, ValidatedGroup, validate};
// What the launcher's fault tests build their requests with
// (`crate::internals`).
#[cfg(intranode_internals)]
pub use request::{PROTOCOL_VERSION, hostname};

use std::ffi::CString;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use cudarc::driver::CudaContext;
use intranode_store::{Store, StoreExchange};
use serde::{Deserialize, Serialize};

use crate::config::{CommConfig, DebugLevel, PushUse};
use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};
use crate::intra::debug::CallChecker;
use crate::intra::launch_shape::LamportLaunch;
use crate::intra::{HostErrorWord, IntraNodeComm};
use crate::kernels::KernelModule;
use crate::setup_times::SetupTimes;
use crate::symm_mem::SymmetricMemory;
use crate::topology::{self, MAX_DEVICES, NvlMesh, PciAddress};

// The constructor lives here, above `comm`, so that `comm` does not
// import the rendezvous that builds it (no module cycle).
impl IntraNodeComm {
    /// Builds the communicator of `rank` in a group of `world` ranks on
    /// the device of `ctx`, meeting the others through `store`. Every rank
    /// of the group must call it (with the same `world`, in the same order
    /// relative to its other communicators). See the docs of this module (`rendezvous`).
    #[cfg(intranode_internals)]
    pub fn rendezvous(
        ctx: &Arc<CudaContext>,
        store: Arc<dyn Store>,
        rank: usize,
        world: usize,
        config: &CommConfig,
    ) -> Result<IntraNodeComm, RendezvousError> {
        run_scoped(
            ctx,
            store,
            rank,
            world,
            config,
            &mut SetupTimes::default(),
            None,
        )
    }
}

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

/// Builds the communicator of `rank` in a group of `world` ranks on the
/// device of `ctx`, meeting the others through `store` (every rank of the
/// group calls it, with the same `world`, in the same order relative to
/// its other communicators), recording the time of each step in `times`
/// (the phases of `Communicator::setup_times`; a step's all-gather
/// includes the wait for the slowest rank). `key_instance` is the number
/// of its store keys (`Some`: a store of this group alone, where every
/// rank uses the same number) or drawn from this process's count (`None`).
/// The steps are those of the module docs, one function each.
pub(crate) fn run_scoped(
    ctx: &Arc<CudaContext>,
    store: Arc<dyn Store>,
    rank: usize,
    world: usize,
    config: &CommConfig,
    times: &mut SetupTimes,
    key_instance: Option<u64>,
) -> Result<IntraNodeComm, RendezvousError> {
    if world == 0 || rank >= world {
        return Err(
            Error::InvalidArgument(format!("rank {rank} is not below world size {world}")).into(),
        );
    }
    let instance = key_instance.unwrap_or_else(|| COMM_COUNT.fetch_add(1, Ordering::Relaxed));
    let mut meeting = Meeting {
        ctx,
        store: &*store,
        exchange: StoreExchange::new(format!("{}/comm/{instance}", config.key_prefix())),
        rank,
        world,
        config,
        times,
        since: Instant::now(),
    };
    let requests = meeting.requests()?;
    let mesh = meeting.mesh(&requests)?;
    let (group, kernels, health, lamport_launch) = meeting.verdicts(&requests, &mesh)?;
    let symm = meeting.symmetric_memory(&group)?;
    let Meeting { exchange, .. } = meeting;
    tracing::info!(
        "intra-node comm ready: rank {rank}/{world}, device {}, {group}",
        ctx.ordinal()
    );
    let call_checker = (config.debug == DebugLevel::Detail).then(|| {
        CallChecker::new(
            store.clone(),
            format!("{}/debug", exchange.prefix()),
            rank,
            world,
        )
    });
    let mut comm = IntraNodeComm {
        ctx: ctx.clone(),
        kernels,
        store,
        exchange: Mutex::new(exchange),
        rank,
        world,
        device: ctx.ordinal(),
        topology: group.topology,
        hcm_neighbors: group.hcm_neighbors,
        hcm_plan: crate::intra::hcm::hcm_plan(
            group.topology,
            world,
            rank,
            group.hcm_neighbors.as_ref(),
        ),
        symm,
        buffer_bytes: group.buffer_bytes,
        usage_counter: AtomicU64::new(0),
        health: Arc::new(health),
        barrier_timeout: config.barrier_timeout(),
        call_checker,
        crossovers: config.crossovers.clone(),
        lamport_launch,
        residency: group.residency,
        push_shape: requests[rank].push_shape,
        l2_prefetch: config.l2_prefetch,
        capture_side: std::sync::OnceLock::new(),
        user_buffers: Default::default(),
        push_runnable: false,
        shared_params: Default::default(),
    };
    // Every input of these is fixed from here on (shape, world, cap,
    // buffers, error word), so every call reads them instead of working
    // them out again.
    comm.push_runnable = comm.push_launch_for(PushUse::AllReduce, 1).is_some();
    comm.shared_params = comm.work_out_shared_params();
    Ok(comm)
}

/// What a rank of the rendezvous carries from step to step.
struct Meeting<'a> {
    ctx: &'a Arc<CudaContext>,
    store: &'a dyn Store,
    exchange: StoreExchange,
    rank: usize,
    world: usize,
    config: &'a CommConfig,
    times: &'a mut SetupTimes,
    since: Instant,
}

/// What step 3 leaves a rank whose group passed.
type Validated = (ValidatedGroup, KernelModule, HostErrorWord, LamportLaunch);

impl Meeting<'_> {
    fn store_err(&self, op: &'static str) -> impl FnOnce(intranode_store::StoreError) -> Error {
        let rank = self.rank;
        move |source| Error::Store { op, rank, source }
    }

    /// Step 1: every rank's request (or why it could not make one).
    fn requests(&mut self) -> Result<Vec<RendezvousRequest>, RendezvousError> {
        let (rank, world) = (self.rank, self.world);
        let local = RendezvousRequest::local(self.ctx, rank, world, self.config);
        let published = match &local {
            Ok(r) => Ok(r.clone()),
            Err(e) => Err(e.to_string()),
        };
        let requests = exchange_requests(self.store, &mut self.exchange, rank, world, &published);
        local?;
        let requests = requests?;
        // Every rank sees the same requests, so every rank fails here alike.
        if let Some(why) =
            debug_level_mismatch(&requests).or_else(|| push_shape_mismatch(&requests))
        {
            return Err(Error::InvalidArgument(format!("rank {rank}: {why}")).into());
        }
        self.times.lap("requests", &mut self.since);
        Ok(requests)
    }

    /// Step 2: the NVLink mesh, restricted to the pairs whose GPUs can
    /// access each other. A disabled or oversized group skips the queries
    /// but still takes part in the exchange.
    fn mesh(&mut self, requests: &[RendezvousRequest]) -> Result<NvlMesh, RendezvousError> {
        let (rank, world) = (self.rank, self.world);
        let queries_useful = self.config.enabled && (2..=MAX_DEVICES).contains(&world);
        let row = if queries_useful {
            peer_access_row(self.ctx, requests, rank)
        } else {
            vec![true; world]
        };
        let rows: Vec<Vec<bool>> = self
            .exchange
            .all_gather(self.store, rank, world, &row)
            .map_err(self.store_err("all-gather of peer access"))?;
        let mesh = if queries_useful {
            let access = |a: usize, b: usize| {
                rows.get(a)
                    .and_then(|row| row.get(b))
                    .copied()
                    .unwrap_or(false)
            };
            topology::restrict_to_peer_access(&nvml_mesh(requests), world, access)
        } else {
            NvlMesh::zero()
        };
        self.times.lap("topology", &mut self.since);
        Ok(mesh)
    }

    /// Step 3: this rank's verdict (validation, kernels loaded), then
    /// every rank's; a failure, a refusal or verdicts that disagree end
    /// the rendezvous on every rank alike.
    fn verdicts(
        &mut self,
        requests: &[RendezvousRequest],
        mesh: &NvlMesh,
    ) -> Result<Validated, RendezvousError> {
        let (ctx, config) = (self.ctx, self.config);
        let local: std::result::Result<Validated, RendezvousError> =
            match validate(requests, mesh, config) {
                Err(u) => Err(u.into()),
                Ok(group) => {
                    let lamport =
                        LamportLaunch::new(group.residency.launch_sms(), config.lamport_shapes)
                            .capped(group.residency.max_blocks());
                    KernelModule::load_with(
                        ctx,
                        group.residency.launch_overlap(config.launch_overlap),
                        config.kernel_image,
                    )
                    .map(|k| (k, lamport))
                    .and_then(|(k, l)| {
                        HostErrorWord::new(ctx, config.barrier_timeout()).map(|h| (group, k, h, l))
                    })
                    .map_err(RendezvousError::from)
                }
            };
        if let Ok((_, kernels, _, _)) = &local {
            let load = kernels.load_report();
            self.times.set_kernel_image(&load.image);
            self.times.record("kernels: unpack", load.unpack);
            self.times.record("kernels: load", load.load);
            self.times.record("kernels: resolve", load.resolve);
            self.since = Instant::now();
        } else {
            self.times.lap("validate", &mut self.since);
        }
        let verdict = match &local {
            Ok((group, _, _, _)) => Verdict::Ok {
                topology: group.topology.to_string(),
                mesh: group.mesh.0.to_vec(),
            },
            Err(RendezvousError::Unsupported(u)) => Verdict::Unsupported(u.to_string()),
            Err(RendezvousError::Failed(e)) => Verdict::Failed(e.to_string()),
        };
        let verdicts: Vec<Verdict> = self
            .exchange
            .all_gather(self.store, self.rank, self.world, &verdict)
            .map_err(self.store_err("all-gather of rendezvous verdicts"))?;
        self.times.lap("verdicts", &mut self.since);
        let validated = local?;
        agree(&verdicts, &verdict, self.rank)?;
        Ok(validated)
    }

    /// Step 4: symmetric memory (its last phase is the final all-gather).
    /// The allocation also holds the push form's rings (its scratch,
    /// `config::PushShape::scratch_bytes_for` the world, a multiple of the
    /// granularity and the same on every rank: the rendezvous checked the
    /// shapes); the other forms keep to `group.buffer_bytes`.
    fn symmetric_memory(&mut self, group: &ValidatedGroup) -> Result<SymmetricMemory, Error> {
        let symm = SymmetricMemory::rendezvous(
            self.ctx,
            self.store,
            &mut self.exchange,
            self.rank,
            self.world,
            group
                .buffer_bytes
                .max(self.config.push_shape.scratch_bytes_for(self.world)),
            group.backend,
        )?;
        self.times.lap("symmetric memory", &mut self.since);
        Ok(symm)
    }
}

/// Whether every rank's verdict lets the group go on: a peer that failed
/// or refused ends it (a failure first, so its reason is the one
/// reported), and so does a verdict that differs from `ours`.
fn agree(verdicts: &[Verdict], ours: &Verdict, me: usize) -> Result<(), RendezvousError> {
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
            Verdict::Ok { .. } if v != ours => {
                return Err(Unsupported::InconsistentTopology {
                    rank: r,
                    theirs: format!("{v:?}"),
                    me,
                    ours: format!("{ours:?}"),
                }
                .into());
            }
            _ => {}
        }
    }
    Ok(())
}
