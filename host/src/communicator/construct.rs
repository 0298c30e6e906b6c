//! The constructors `cudarc::nccl::Comm` has: [`Communicator::from_rank`]
//! (one rank per process, meeting through an [`Id`]) and
//! [`Communicator::from_devices`] (one process, a rank per stream).

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::CudaStream;
use intranode_store::{ClientConfig, HashStore, Store};

use super::{Communicator, KeyScope};
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::id::Id;
use crate::setup_times::SetupTimes;

impl Communicator {
    /// Builds the communicator of `rank` of `world` on `stream`, meeting the
    /// other ranks through the store `id` names (collective: every rank
    /// calls it with the same id), as `cudarc::nccl::Comm::from_rank` does
    /// with NCCL's id. Settings come from the environment
    /// ([`CommConfig::from_env`]).
    ///
    /// Rank 0 makes the id with [`Id::new`] in its own process and sends
    /// the 128 bytes of [`Id::internal`] to the others, who rebuild it with
    /// [`Id::uninit`]. Bytes that are no id fail at once; a root process
    /// that is gone fails within [`ID_CONNECT_TIMEOUT`](crate::id::ID_CONNECT_TIMEOUT);
    /// ranks that never come fail within the store timeout
    /// (`INTRANODE_STORE_TIMEOUT_MS`), naming them.
    ///
    /// ```no_run
    /// use intranode::{Communicator, Id, ReduceOp};
    /// # fn send_to_other_ranks(_: &[std::ffi::c_char; 128]) {}
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let (rank, world) = (0, 2);
    /// let id = Id::new()?; // rank 0 only; the others: Id::uninit(bytes)
    /// send_to_other_ranks(id.internal());
    /// let stream = intranode::gpu::context(rank)?.new_stream()?;
    /// let comm = Communicator::from_rank(stream.clone(), rank, world, id)?;
    /// let mut x = stream.alloc_zeros::<f32>(1024)?;
    /// comm.all_reduce_in_place(&mut x, &ReduceOp::Sum)?.synchronize()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// `intranode::nccl::Comm::from_rank` is the same with cudarc's
    /// signature (`NcclError`).
    pub fn from_rank(stream: Arc<CudaStream>, rank: usize, world: usize, id: Id) -> Result<Self> {
        let started = Instant::now();
        let config = CommConfig::from_env()?;
        let mut times = SetupTimes::default();
        times.record("config", started.elapsed());
        let (store, fields) = id.connect(rank)?;
        // Rank 0 keeps the store its own process started (if it did):
        // taken before the build, so it goes when a failed build returns
        // and the other ranks learn at once that the group is gone.
        let server = (rank == 0).then(|| Id::take_server(fields.nonce)).flatten();
        let mut comm = Self::build(stream, store, rank, world, &config, times, KeyScope::Fresh)?;
        comm.id_store = server;
        Ok(comm)
    }

    /// One communicator per stream, all in this process (a rank per
    /// stream, in order), as `cudarc::nccl::Comm::from_devices` gives:
    /// each is then used from the thread that drives its GPU.
    ///
    /// The ranks meet through a store in this process's memory and are
    /// built on a thread each (the set-up is collective). Their symmetric
    /// memory is exported and mapped as between processes (CUDA VMM
    /// handles as file descriptors, passed over a Unix socket pair within
    /// the process), so the kernels and their checks are the same as with
    /// a process per rank; NCCL's communicators are made with
    /// `ncclCommInitRank`, one per thread.
    ///
    /// Streams on one GPU (a test of several ranks on one GPU, with
    /// `INTRANODE_ALLOW_OVERLAPPING_DEVICES=1`) share one context. There,
    /// a rank's thread that blocks in a copy to pageable host memory
    /// (`clone_dtoh`) right behind its collective, while the other ranks'
    /// threads still have copies and collectives to issue, was seen to
    /// stall them until the collective's waits ran out (on an H200):
    /// wait for the collective first ([`synchronize`](Self::synchronize)
    /// or [`Work::synchronize`](crate::work::Work::synchronize)), which then
    /// made every run exact. A GPU per stream, which `from_devices` is
    /// for, gives each rank a context of its own.
    ///
    /// Fails with every rank's communicator dropped if any rank fails
    /// (the error of the lowest failing rank).
    pub fn from_devices(streams: Vec<Arc<CudaStream>>) -> Result<Vec<Self>> {
        let world = streams.len();
        if world == 0 {
            return Err(Error::InvalidArgument(
                "from_devices needs at least one stream".into(),
            ));
        }
        let config = CommConfig::from_env()?;
        let timeout = ClientConfig::try_from_env()
            .map_err(|source| Error::Store {
                op: "reading the store settings",
                rank: 0,
                source,
            })?
            .timeout;
        let store: Arc<dyn Store> = Arc::new(HashStore::with_timeout(timeout));
        let built: Vec<Result<Self>> = std::thread::scope(|scope| {
            let handles: Vec<_> = streams
                .into_iter()
                .enumerate()
                .map(|(rank, stream)| {
                    let (store, config) = (store.clone(), &config);
                    std::thread::Builder::new()
                        .name(format!("intranode-from-devices-{rank}"))
                        .spawn_scoped(scope, move || {
                            Self::build(
                                stream,
                                store,
                                rank,
                                world,
                                config,
                                SetupTimes::default(),
                                KeyScope::Fresh,
                            )
                        })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(rank, h)| match h {
                    Ok(h) => h.join().unwrap_or_else(|_| {
                        Err(Error::InvalidArgument(format!(
                            "from_devices: rank {rank}'s set-up thread panicked"
                        )))
                    }),
                    Err(e) => Err(Error::InvalidArgument(format!(
                        "from_devices: starting rank {rank}'s set-up thread: {e}"
                    ))),
                })
                .collect()
        });
        built.into_iter().collect()
    }
}
