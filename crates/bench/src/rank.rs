//! One rank's setup: environment, store, device, stream, communicator.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use cudarc::driver::{CudaContext, CudaStream};
use intranode::Communicator;
use intranode::dist_env::DistEnv;
use intranode_store::{ClientConfig, Store, StoreExchange, TcpStore};

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
    /// Our algorithms this group can run (none without the intra-node
    /// path; HCM only where its plan holds), in the order the sweeps use.
    pub fn intra_algos(&self) -> Vec<intranode::algo::AllReduceAlgo> {
        use intranode::algo::AllReduceAlgo::*;
        let Some(intra) = self.comm.intra() else {
            return Vec::new();
        };
        let mut v = vec![Lamport, LamportTwoShot, OneShot, TwoShot];
        if intra.hcm_plan().is_ok() {
            v.push(Hcm);
        }
        v
    }

    /// `None` (after a visible message) when this machine has too few GPUs
    /// and `INTRANODE_REQUIRE_GPUS` does not demand them.
    pub fn setup(what: &str) -> Result<Option<Rank>> {
        Self::setup_with(what, false)
    }

    /// As [`setup`](Self::setup); `cudarc_defaults` leaves cudarc's event
    /// tracking on, as applications have it.
    pub fn setup_with(what: &str, cudarc_defaults: bool) -> Result<Option<Rank>> {
        let env = DistEnv::from_env()
            .context("reading the rank environment (run under intranode-run)")?;
        let device = env.device.unwrap_or(env.local_rank);
        match intranode::gpu::gpus_or_skip(device + 1, what) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => bail!("rank {}: {e}", env.rank),
        }
        let addr = env.store_addr()?;
        let store: Arc<dyn Store> = Arc::new(
            TcpStore::connect(addr.as_str(), ClientConfig::try_from_env()?)
                .with_context(|| format!("connecting to the store at {addr}"))?,
        );
        let ctx = intranode::gpu::context(device)?;
        // The suite hands raw buffers to graphs and two paths; cudarc's
        // per-buffer event tracking would only add host time (and its
        // soak kernels, tracked, could not be captured on buffers written
        // before a capture). The benchmark can keep it, as users do.
        if !cudarc_defaults {
            // SAFETY: no buffer is shared between streams in this program.
            unsafe { ctx.disable_event_tracking() };
        }
        let stream = ctx.new_stream().context("creating a stream")?;
        let comm = Communicator::new(stream.clone(), store.clone(), env.rank, env.world_size)
            .with_context(|| format!("rank {}: building the communicator", env.rank))?;
        Ok(Some(Rank {
            env,
            ctx,
            stream,
            store,
            exchange: StoreExchange::new("intranode/bench"),
            comm,
        }))
    }

    pub fn rank(&self) -> usize {
        self.env.rank
    }

    pub fn world(&self) -> usize {
        self.env.world_size
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
