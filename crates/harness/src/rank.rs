//! One process's set-up under `intranode-run`: environment, store, device,
//! stream ([`Proc`]), and a rank with its communicator ([`Rank`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::NcclType;
use intranode::AllReduceAlgo;
use intranode::config::CommConfig;
use intranode::dist_env::DistEnv;
use intranode::internals::IntraNodeComm;
use intranode::kernels::DType;
use intranode::{Communicator, types::ReduceOp};
use intranode_store::{ClientConfig, Store, StoreExchange};

/// One rank's process state, before any communicator: what the fault and
/// bad-input cases need, which build (or fail to build) their own.
pub struct Proc {
    pub env: DistEnv,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub store: Arc<dyn Store>,
    /// The store's wait bound, as the ranks' clients have it.
    pub store_timeout: Duration,
    pub exchange: StoreExchange,
}

impl Proc {
    /// `None` (after a visible message) where GPUs are missing and
    /// `INTRANODE_REQUIRE_GPUS` does not demand them.
    pub fn setup(what: &str) -> Result<Option<Proc>> {
        // Store key prefixes (here and in `Rank::setup_with`) as they were
        // when these programs were one: any prefix apart from the
        // communicator's own keys would do.
        Self::setup_with(what, false, "intranode/bench/faults")
    }

    /// As [`setup`](Self::setup); `cudarc_defaults` leaves cudarc's event
    /// tracking on, as applications have it; `exchange_prefix` names the
    /// store keys of [`exchange`](Self::exchange).
    fn setup_with(
        what: &str,
        cudarc_defaults: bool,
        exchange_prefix: &str,
    ) -> Result<Option<Proc>> {
        let env = DistEnv::from_env()
            .context("reading the rank environment (run under intranode-run)")?;
        let device = env.device.unwrap_or(env.local_rank);
        let config = ClientConfig::try_from_env()?;
        let store_timeout = config.timeout;
        let addr = env.store_addr()?;
        // intranode-run's store, or torchrun's TCPStore (NOTE [store
        // protocol decision] in intranode_dist_env).
        let store = intranode_store::connect(&addr, &env.store, config)
            .with_context(|| format!("joining the rendezvous store at {addr}"))?;
        // A named group (INTRANODE_GROUP) keeps the harness's own keys
        // apart too, so several groups of ranks can share one store.
        let exchange_prefix = match std::env::var(intranode::internals::GROUP_ENV) {
            Ok(name) if !name.trim().is_empty() => {
                format!("{exchange_prefix}/group/{}", name.trim().replace('/', "_"))
            }
            _ => exchange_prefix.to_owned(),
        };
        let mut exchange = StoreExchange::new(exchange_prefix);
        if !job_gpus_or_skip(store.as_ref(), &mut exchange, &env, what)? {
            return Ok(None);
        }
        let ctx = intranode::gpu::context(device)?;
        // The suite hands raw buffers to graphs and two paths; cudarc's
        // per-buffer event tracking would only add host time (and its
        // soak kernels, tracked, could not be captured on buffers written
        // before a capture). The benchmark can keep it, as users do.
        if !cudarc_defaults {
            // SAFETY: no buffer is shared between streams in these programs.
            unsafe { ctx.disable_event_tracking() };
        }
        let stream = ctx.new_stream().context("creating a stream")?;
        Ok(Some(Proc {
            env,
            ctx,
            stream,
            store,
            store_timeout,
            exchange,
        }))
    }

    pub fn rank(&self) -> usize {
        self.env.rank
    }

    pub fn world(&self) -> usize {
        self.env.world_size
    }

    /// A host-side barrier of all ranks through the store.
    pub fn store_barrier(&mut self) -> Result<()> {
        let (rank, world) = (self.rank(), self.world());
        Ok(self.exchange.barrier(self.store.as_ref(), rank, world)?)
    }

    /// The intra-node communicator of this group (which must allow one).
    pub fn comm(&self, config: &CommConfig) -> Result<IntraNodeComm> {
        IntraNodeComm::rendezvous(
            &self.ctx,
            self.store.clone(),
            self.rank(),
            self.world(),
            config,
        )
        .with_context(|| format!("rank {}: intra-node rendezvous", self.rank()))
    }
}

/// [`intranode::gpu::gpus_or_skip`] for the whole job: the GPUs it needs
/// are the highest device any rank uses, plus one (gathered through the
/// store), so every rank runs or every rank skips. A rank that went on
/// alone would wait in the rendezvous for ranks that had skipped, until
/// the store's bound: 4 ranks on 2 GPUs without `--gpus` once let ranks 0
/// and 1 wait 140 s for ranks 2 and 3. `Ok(false)` after the
/// visible skip message; an error where `INTRANODE_REQUIRE_GPUS` asks for
/// the GPUs.
pub fn job_gpus_or_skip(
    store: &dyn Store,
    exchange: &mut StoreExchange,
    env: &DistEnv,
    what: &str,
) -> Result<bool> {
    let device = env.device.unwrap_or(env.local_rank);
    let needs = exchange
        .all_gather(store, env.rank, env.world_size, &(device + 1))
        .context("gathering the ranks' GPUs")?;
    let needed = needs.into_iter().max().unwrap_or(device + 1);
    match intranode::gpu::gpus_or_skip(needed, what) {
        Ok(run) => Ok(run),
        Err(e) => bail!("rank {} (the job uses {needed} GPU(s)): {e}", env.rank),
    }
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proc")
            .field("rank", &self.rank())
            .field("world", &self.world())
            .field("device", &self.ctx.ordinal())
            .finish_non_exhaustive()
    }
}

/// Everything a rank of the suite or the benchmark uses.
pub struct Rank {
    pub env: DistEnv,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub store: Arc<dyn Store>,
    pub exchange: StoreExchange,
    pub comm: Communicator,
}

impl Rank {
    /// `None` (after a visible message) when this machine has too few GPUs
    /// and `INTRANODE_REQUIRE_GPUS` does not demand them.
    pub fn setup(what: &str) -> Result<Option<Rank>> {
        Self::setup_with(what, false)
    }

    /// As [`setup`](Self::setup); `cudarc_defaults` leaves cudarc's event
    /// tracking on, as applications have it.
    pub fn setup_with(what: &str, cudarc_defaults: bool) -> Result<Option<Rank>> {
        let Some(p) = Proc::setup_with(what, cudarc_defaults, "intranode/bench")? else {
            return Ok(None);
        };
        let comm = Communicator::new(p.stream.clone(), p.store.clone(), p.rank(), p.world())
            .with_context(|| format!("rank {}: building the communicator", p.rank()))?;
        Ok(Some(Rank {
            env: p.env,
            ctx: p.ctx,
            stream: p.stream,
            store: p.store,
            exchange: p.exchange,
            comm,
        }))
    }

    /// As [`setup`](Self::setup), the communicator built with `config`
    /// instead of the environment's settings (a suite that needs one, as
    /// `bad-input` needs the call checks, sets it rather than asking the
    /// caller to).
    pub fn setup_with_config(what: &str, config: &CommConfig) -> Result<Option<Rank>> {
        let Some(p) = Proc::setup_with(what, false, "intranode/bench")? else {
            return Ok(None);
        };
        let comm = Communicator::with_config(
            p.stream.clone(),
            p.store.clone(),
            p.rank(),
            p.world(),
            config,
        )
        .with_context(|| format!("rank {}: building the communicator", p.rank()))?;
        Ok(Some(Rank {
            env: p.env,
            ctx: p.ctx,
            stream: p.stream,
            store: p.store,
            exchange: p.exchange,
            comm,
        }))
    }

    pub fn rank(&self) -> usize {
        self.env.rank
    }

    pub fn world(&self) -> usize {
        self.env.world_size
    }

    /// Whether the communicator has the intra-node path (our kernels);
    /// `comm.intra_reason()` says why not where it has none.
    pub fn has_intra_path(&self) -> bool {
        self.comm.intra_reason().is_none()
    }

    /// Our algorithms this group can run (none without the intra-node
    /// path; HCM only where its plan holds), in the order the sweeps use.
    pub fn intra_algos(&self) -> Vec<AllReduceAlgo> {
        use AllReduceAlgo::*;
        let Some(intra) = self.comm.intra() else {
            return Vec::new();
        };
        let mut v = vec![Lamport, LamportTwoShot, OneShot, TwoShot, Push];
        if intra.hcm_plan().is_ok() {
            v.push(Hcm);
        }
        v
    }

    /// Every algorithm this group can run, NCCL where it loaded, then
    /// `None`: auto (the communicator's choice).
    pub fn algos(&self) -> Vec<Option<AllReduceAlgo>> {
        let mut v: Vec<_> = self.intra_algos().into_iter().map(Some).collect();
        if self.comm.nccl().is_ok() {
            v.push(Some(AllReduceAlgo::Nccl));
        }
        v.push(None);
        v
    }

    /// One all-reduce through the communicator: `algo`, or its own choice
    /// for `None`.
    pub fn all_reduce<T: DType + NcclType>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        algo: Option<AllReduceAlgo>,
    ) -> Result<()> {
        let op = op.to_nccl();
        match algo {
            None => self.comm.all_reduce(send, recv, &op)?,
            Some(a) => self.comm.all_reduce_with(send, recv, &op, a)?,
        };
        Ok(())
    }

    /// One in-place all-reduce of `buf` through the communicator: `algo`,
    /// or its own choice for `None`.
    pub fn all_reduce_in_place<T: DType + NcclType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        algo: Option<AllReduceAlgo>,
    ) -> Result<()> {
        let op = op.to_nccl();
        match algo {
            None => self.comm.all_reduce_in_place(buf, &op)?,
            Some(a) => self.comm.all_reduce_in_place_with(buf, &op, a)?,
        };
        Ok(())
    }

    /// A host-side barrier of all ranks through the store.
    pub fn store_barrier(&mut self) -> Result<()> {
        let (rank, world) = (self.rank(), self.world());
        Ok(self.exchange.barrier(self.store.as_ref(), rank, world)?)
    }

    /// Gathers one value per rank.
    pub fn all_gather<T: serde::Serialize + serde::de::DeserializeOwned>(
        &mut self,
        v: &T,
    ) -> Result<Vec<T>> {
        let (rank, world) = (self.rank(), self.world());
        Ok(self
            .exchange
            .all_gather(self.store.as_ref(), rank, world, v)?)
    }
}

impl std::fmt::Debug for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rank")
            .field("rank", &self.rank())
            .field("world", &self.world())
            .field("device", &self.ctx.ordinal())
            .finish_non_exhaustive()
    }
}
