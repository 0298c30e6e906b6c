//! The exchange between ranks: [`SymmetricMemory::rendezvous`] runs the
//! phases (job id, local allocation, the peers' handles or descriptors,
//! mapping, pointer tables), each ending in an all-gather of every rank's
//! outcome through the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::CudaContext;
use intranode_store::{Store, StoreExchange};

use super::allocator::{self, Backend, Blocks, LocalBlock, LocalInfo};
use super::{SymmetricMemory, cuda_ipc, vmm};
use crate::error::{Error, Result};
use intranode_ipc::IpcChannel;

/// The first rank whose entry is an error, with its text.
fn first_failure<T>(outcomes: &[std::result::Result<T, String>]) -> Option<(usize, &str)> {
    outcomes
        .iter()
        .enumerate()
        .find_map(|(r, o)| o.as_ref().err().map(|e| (r, e.as_str())))
}

/// Process-local count of rendezvous, part of each job id so that several
/// groups in one process never share socket paths.
static RENDEZVOUS_COUNT: AtomicU64 = AtomicU64::new(0);

/// A short job id for the group's [`IpcChannel`], unique on this host:
/// rank 0's pid, the time, and a process-local counter.
fn new_job_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = RENDEZVOUS_COUNT.fetch_add(1, Ordering::Relaxed);
    format!("symm-{:x}-{:x}-{n}", std::process::id(), nanos)
}

impl SymmetricMemory {
    /// Allocates this rank's block of `buffer_bytes` (plus the signal
    /// pad), exchanges it with the other `world - 1` ranks and maps theirs,
    /// with `backend` (all ranks must pass the same one, as
    /// `config::CommConfig` reads it). Every rank of the group must call it
    /// with the same `exchange` prefix and sequence.
    pub fn rendezvous(
        ctx: &Arc<CudaContext>,
        store: &dyn Store,
        exchange: &mut StoreExchange,
        rank: usize,
        world: usize,
        buffer_bytes: usize,
        backend: Backend,
    ) -> Result<SymmetricMemory> {
        Self::rendezvous_inner(
            ctx,
            store,
            exchange,
            rank,
            world,
            buffer_bytes,
            super::block::SIGNAL_PAD_BYTES,
            backend,
        )
    }

    /// [`SymmetricMemory::rendezvous`] for a plain data buffer without a
    /// signal pad (the user's symmetric buffers, `crate::SymmetricBuffer`):
    /// the same phases, checks and outcome on every rank.
    pub fn rendezvous_buffer(
        ctx: &Arc<CudaContext>,
        store: &dyn Store,
        exchange: &mut StoreExchange,
        rank: usize,
        world: usize,
        buffer_bytes: usize,
        backend: Backend,
    ) -> Result<SymmetricMemory> {
        Self::rendezvous_inner(ctx, store, exchange, rank, world, buffer_bytes, 0, backend)
    }

    #[allow(clippy::too_many_arguments)]
    fn rendezvous_inner(
        ctx: &Arc<CudaContext>,
        store: &dyn Store,
        exchange: &mut StoreExchange,
        rank: usize,
        world: usize,
        buffer_bytes: usize,
        signal_pad_bytes: usize,
        backend: Backend,
    ) -> Result<SymmetricMemory> {
        if world == 0 || rank >= world {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is not below world size {world}"
            )));
        }
        let store_err = |op: &'static str| move |source| Error::Store { op, rank, source };
        let device = ctx.ordinal();

        // Phase 0: rank 0 names the descriptor channel of this group, and
        // the directory every rank binds it in: decided once, so that a
        // squat on the default directory that comes and goes cannot split
        // the group (NOTE [hijacked socket directory] in intranode-ipc).
        let job = (rank == 0).then(|| {
            let job_id = new_job_id();
            let dir = match backend {
                Backend::Vmm => IpcChannel::job_dir(&job_id),
                Backend::CudaIpc => IpcChannel::default_dir(),
            };
            (job_id, dir)
        });
        let (job_id, ipc_dir): (String, std::path::PathBuf) = exchange
            .broadcast(store, rank, world, 0, job.as_ref())
            .map_err(store_err("broadcast of the symmetric-memory job id"))?;

        // Phase 1: our own block (and, for VMM, our socket), all local.
        let local = allocator::allocate_local(
            ctx,
            rank,
            world,
            buffer_bytes,
            signal_pad_bytes,
            backend,
            &job_id,
            &ipc_dir,
            store,
        );
        let published = match &local {
            Ok((_, info, _)) => Ok(info.clone()),
            Err(e) => Err(e.to_string()),
        };
        let infos: Vec<std::result::Result<LocalInfo, String>> = exchange
            .all_gather(store, rank, world, &published)
            .map_err(store_err("all-gather of symmetric-memory allocations"))?;
        let (local_block, own_info, channel) = local?;
        if let Some((r, reason)) = first_failure(&infos) {
            return Err(Error::PeerFailed {
                rank: r,
                phase: "symmetric-memory allocation",
                reason: reason.to_owned(),
            });
        }
        let infos: Vec<LocalInfo> = infos.into_iter().flatten().collect();
        // Every rank sees the same `infos`, so every rank fails here alike.
        for (r, info) in infos.iter().enumerate() {
            if info.backend != own_info.backend || info.layout != infos[0].layout {
                return Err(Error::InvalidArgument(format!(
                    "ranks disagree on symmetric memory: rank {r} (device {}) has backend {} and \
                     {:?}, rank 0 (device {}) has backend {} and {:?}",
                    info.device,
                    info.backend,
                    info.layout,
                    infos[0].device,
                    infos[0].backend,
                    infos[0].layout
                )));
            }
        }

        // Phase 2: import and map the peers' blocks.
        let mapped = Self::map_peers(ctx, local_block, channel, &infos, rank, world);
        let outcome = match &mapped {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        };
        let outcomes: Vec<std::result::Result<(), String>> = exchange
            .all_gather(store, rank, world, &outcome)
            .map_err(store_err("all-gather of symmetric-memory mappings"))?;
        let (blocks, buffer_ptrs, signal_pad_ptrs) = mapped?;
        if let Some((r, reason)) = first_failure(&outcomes) {
            return Err(Error::PeerFailed {
                rank: r,
                phase: "symmetric-memory mapping",
                reason: reason.to_owned(),
            });
        }
        tracing::debug!(
            "symmetric memory ready: rank {rank}/{world}, device {device}, backend {}, {:?}",
            own_info.backend,
            own_info.layout
        );
        Ok(SymmetricMemory {
            ctx: ctx.clone(),
            rank,
            world,
            backend: own_info.backend,
            layout: own_info.layout,
            buffer_ptrs,
            signal_pad_ptrs,
            blocks,
        })
    }

    /// Phase 2: the peers' blocks and our own, with every rank's buffer
    /// and signal-pad address in this process.
    fn map_peers(
        ctx: &Arc<CudaContext>,
        local: LocalBlock,
        channel: Option<IpcChannel>,
        infos: &[LocalInfo],
        rank: usize,
        world: usize,
    ) -> Result<(Blocks, Vec<u64>, Vec<u64>)> {
        let device = ctx.ordinal();
        crate::error::bind(ctx, Some(device))?;
        let layout = infos[rank].layout;
        let blocks = match (local, channel) {
            (LocalBlock::Vmm(block), Some(mut channel)) => {
                channel.set_allowed_pids(infos.iter().map(|i| i.pid as i32).collect());
                Blocks::Vmm(vmm::exchange_and_map(
                    ctx,
                    block,
                    &mut channel,
                    rank,
                    world,
                )?)
                // The channel closes here: every descriptor has arrived.
            }
            (LocalBlock::CudaIpc(block), _) => {
                let handles = infos
                    .iter()
                    .enumerate()
                    .map(|(r, i)| {
                        i.ipc_handle.clone().ok_or_else(|| {
                            Error::InvalidArgument(format!("rank {r} published no CUDA IPC handle"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Blocks::CudaIpc(cuda_ipc::open_peers(ctx, block, &handles, rank)?)
            }
            (LocalBlock::Vmm(_), None) => {
                return Err(Error::InvalidArgument(
                    "internal: VMM block without a descriptor channel".into(),
                ));
            }
        };
        let bases = blocks.bases();
        let buffer_ptrs = bases.clone();
        let signal_pad_ptrs: Vec<u64> = bases
            .iter()
            .map(|&b| b + layout.signal_pad_offset as u64)
            .collect();
        Ok((blocks, buffer_ptrs, signal_pad_ptrs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_failure_picks_lowest_rank() {
        let v: Vec<std::result::Result<(), String>> =
            vec![Ok(()), Err("b".into()), Err("c".into())];
        assert_eq!(first_failure(&v), Some((1, "b")));
        let ok: Vec<std::result::Result<u8, String>> = vec![Ok(1), Ok(2)];
        assert_eq!(first_failure(&ok), None);
    }

    #[test]
    fn job_ids_are_unique_and_valid() {
        let a = new_job_id();
        let b = new_job_id();
        assert_ne!(a, b);
        for id in [&a, &b] {
            assert!(id.len() < 48, "{id}");
            assert!(
                id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'),
                "{id}"
            );
        }
    }
}
