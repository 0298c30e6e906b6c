//! `symm_check`: checks symmetric memory across the ranks of one node.
//!
//! Run it under the launcher, one process per rank:
//!
//! ```text
//! intranode-run --nproc-per-node 4 -- ./symm_check
//! intranode-run --nproc-per-node 4 -- ./symm_check --backend cuda-ipc
//! INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 \
//!   intranode-run --nproc-per-node 4 --devices 0,0,0,0 -- ./symm_check
//! intranode-run --nproc-per-node 2 -- ./symm_check --cycles 100
//! ```
//!
//! Each rank builds an `IntraNodeComm`, then checks:
//!
//! 1. the pointer tables (pads sit at the layout's offset, every block has
//!    its own address);
//! 2. every peer's block reads back as zeros (signal pad included) before
//!    anyone writes;
//! 3. for each round: every rank fills its own buffer with a pattern
//!    seeded by (rank, round), store barrier, every rank copies every
//!    peer's whole buffer out through its mapping (`cuMemcpyDtoH` from the
//!    mapped address) and compares bitwise; then every rank writes a stamp
//!    into the next rank's buffer through the mapping, and each checks the
//!    stamp it received;
//! 4. `get_buffer` views (addresses, and out-of-bounds errors naming rank,
//!    offset and length);
//! 5. with `--cycles N`: N more create/drop cycles, after which the open
//!    descriptor count is unchanged, free device memory has not shrunk by
//!    more than a tolerance, and no release failed.
//!
//! Prints `SKIPPED ...` and exits 0 without GPUs (exit 1 instead when
//! `INTRANODE_REQUIRE_GPUS` asks for them); exits 2 when the group cannot
//! use intra-node comm (the reason is printed); 1 on any failure.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail, ensure};
use clap::Parser;
use cudarc::driver::{CudaContext, result};
use intranode::config::Backend;
use intranode::config::CommConfig;
use intranode::dist_env::DistEnv;
use intranode::internals::IntraNodeComm;
use intranode::internals::RendezvousError;
use intranode::{Error, gpu};
use intranode_store::Store;
use intranode_tests::{first_difference, open_fd_count, pattern};

/// Free device memory may shrink by this much over the create/drop cycles
/// without counting as a leak (driver bookkeeping; one leaked default
/// block is 12 MiB, so 100 leaked cycles are far above it).
const LEAK_TOLERANCE_BYTES: usize = 64 << 20;

#[derive(Debug, Parser)]
#[command(
    name = "symm_check",
    about = "Checks symmetric memory across the ranks of one node"
)]
struct Args {
    /// vmm or cuda-ipc (default: the configuration's).
    #[arg(long, value_parser = parse_backend)]
    backend: Option<Backend>,
    /// Symmetric buffer bytes per rank (default: the configuration's).
    #[arg(long)]
    buffer_bytes: Option<usize>,
    /// Write-and-read rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Create/drop cycles checked for leaks afterwards.
    #[arg(long, default_value_t = 0)]
    cycles: usize,
}

fn parse_backend(name: &str) -> Result<Backend, String> {
    Backend::parse(name).ok_or_else(|| format!("unknown backend {name:?} (vmm or cuda-ipc)"))
}

fn main() -> ExitCode {
    intranode_harness::logging::init();
    let rank_label = std::env::var("RANK").unwrap_or_else(|_| "?".into());
    match try_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("symm_check rank {rank_label}: FAILED: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn try_main() -> Result<ExitCode> {
    // try_parse: a bad command line fails with exit 1 like any other
    // failure (clap would exit 2, which means "unsupported" here).
    // clap's message already names the cause: no source chain after it.
    let args = Args::try_parse().map_err(|e| anyhow!("{e}"))?;
    let env = DistEnv::from_env().context("reading the launcher's environment")?;
    let (rank, world) = (env.rank, env.world_size);
    let who = format!("symm_check rank {rank}/{world}");
    let store: Arc<dyn Store> =
        intranode_store::connect_env(&env).context("joining the rendezvous store")?;
    let device = env.device.unwrap_or(env.local_rank);
    let mut gate = intranode_store::StoreExchange::new("symm_check/gpus");
    // The skip's reason goes to stderr (`gpu::gpus_or_skip`); callers
    // that read the result (tests/tests/symm_check_cpu.rs) read stdout.
    if !intranode_harness::rank::job_gpus_or_skip(store.as_ref(), &mut gate, &env, &who)? {
        println!("SKIPPED {who}: the job's GPUs are not here (the reason is on stderr)");
        return Ok(ExitCode::SUCCESS);
    }
    let ctx = gpu::context(device)?;
    let mut config = CommConfig::from_env()?;
    if let Some(backend) = args.backend {
        config.backend = backend;
    }
    if let Some(bytes) = args.buffer_bytes {
        config.buffer_bytes = bytes;
    }

    let comm = match IntraNodeComm::rendezvous(&ctx, store.clone(), rank, world, &config) {
        Ok(comm) => comm,
        Err(RendezvousError::Unsupported(why)) => {
            println!("UNSUPPORTED {who}: {why}");
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(e).context("IntraNodeComm::rendezvous"),
    };
    check_tables(&comm)?;
    check_initially_zero(&comm)?;
    for round in 0..args.rounds {
        check_round(&comm, round).with_context(|| format!("round {round}"))?;
    }
    check_views(&comm)?;
    let summary = format!(
        "{who} ok: backend {}, topology {:?}, {} peers x {} bytes verified in {} rounds, device {device}",
        comm.symm().backend(),
        comm.topology(),
        world,
        comm.symm().buffer_bytes(),
        args.rounds,
    );
    comm.store_barrier()?;
    drop(comm);

    let cycles = if args.cycles > 0 {
        format!(
            ", {}",
            check_cycles(&ctx, &store, rank, world, &config, args.cycles)?
        )
    } else {
        String::new()
    };
    // A release that failed in a Drop is recorded on the context
    // (NOTE [drop errors] in host/src/symm_mem/allocator.rs).
    ctx.check_err()
        .context("a driver error while releasing symmetric memory (see the log)")?;
    println!("{summary}{cycles}");
    Ok(ExitCode::SUCCESS)
}

/// Copies `len` bytes from device address `src` (any mapping valid in
/// this process) to the host.
fn read_device(ctx: &CudaContext, src: u64, len: usize) -> Result<Vec<u8>> {
    ctx.bind_to_thread()?;
    let mut host = vec![0u8; len];
    // SAFETY: the context is current; `src..src + len` lies inside a
    // block mapped (or opened) in this process, kept alive by the
    // communicator the caller borrows.
    unsafe { result::memcpy_dtoh_sync(&mut host, src) }
        .with_context(|| format!("cuMemcpyDtoH from {src:#x}"))?;
    Ok(host)
}

/// Copies `data` to device address `dst` (any mapping valid in this
/// process).
fn write_device(ctx: &CudaContext, dst: u64, data: &[u8]) -> Result<()> {
    ctx.bind_to_thread()?;
    // SAFETY: the context is current; `dst..dst + data.len()` lies inside a
    // block mapped read-write in this process, kept alive by the
    // communicator the caller borrows.
    unsafe { result::memcpy_htod_sync(dst, data) }
        .with_context(|| format!("cuMemcpyHtoD to {dst:#x}"))?;
    // The copy from pageable memory may return before it has landed.
    ctx.synchronize()?;
    Ok(())
}

/// Check 1: the pointer tables.
fn check_tables(comm: &IntraNodeComm) -> Result<()> {
    let symm = comm.symm();
    let world = comm.world();
    ensure!(
        symm.rank() == comm.rank() && symm.world() == world,
        "symm rank/world differ from the comm's"
    );
    ensure!(
        symm.device() == comm.device(),
        "symm device differs from the comm's"
    );
    let buffers = symm.buffer_ptrs();
    let pads = symm.signal_pad_ptrs();
    ensure!(
        buffers.len() == world && pads.len() == world,
        "pointer tables have the wrong length"
    );
    let layout = symm.layout();
    ensure!(symm.signal_pad_bytes() == layout.signal_pad_bytes && symm.signal_pad_bytes() > 0);
    for r in 0..world {
        ensure!(buffers[r] != 0, "rank {r}'s buffer address is null");
        ensure!(
            pads[r] == buffers[r] + layout.signal_pad_offset as u64,
            "rank {r}'s pad {:#x} is not at buffer {:#x} + {}",
            pads[r],
            buffers[r],
            layout.signal_pad_offset
        );
        ensure!(
            buffers[r].is_multiple_of(16),
            "rank {r}'s buffer {:#x} is not 16-byte aligned",
            buffers[r]
        );
        for p in r + 1..world {
            ensure!(
                buffers[r] != buffers[p],
                "ranks {r} and {p} share address {:#x}",
                buffers[r]
            );
        }
    }
    Ok(())
}

/// Check 2: every block (buffer and pad) starts zeroed, as seen through
/// this process's mappings; then a barrier so nobody writes before all
/// have looked.
fn check_initially_zero(comm: &IntraNodeComm) -> Result<()> {
    let symm = comm.symm();
    for peer in 0..comm.world() {
        for (what, ptr, len) in [
            ("buffer", symm.buffer_ptrs()[peer], symm.buffer_bytes()),
            (
                "signal pad",
                symm.signal_pad_ptrs()[peer],
                symm.signal_pad_bytes(),
            ),
        ] {
            let got = read_device(comm.context(), ptr, len)?;
            if let Some(i) = got.iter().position(|&b| b != 0) {
                bail!(
                    "rank {peer}'s {what} is not zero at byte {i} (0x{:02x}) before any write",
                    got[i]
                );
            }
        }
    }
    comm.store_barrier()?;
    Ok(())
}

/// Check 3: one round of pattern writes and peer reads, then stamps
/// written into the next rank's buffer.
fn check_round(comm: &IntraNodeComm, round: usize) -> Result<()> {
    let symm = comm.symm();
    let (rank, world, bytes) = (comm.rank(), comm.world(), symm.buffer_bytes());
    let ctx = comm.context();
    write_device(ctx, symm.buffer_ptrs()[rank], &pattern(rank, round, bytes))?;
    comm.store_barrier()?;
    for peer in 0..world {
        let got = read_device(ctx, symm.buffer_ptrs()[peer], bytes)?;
        let want = pattern(peer, round, bytes);
        if let Some((i, g, w)) = first_difference(&got, &want) {
            let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            bail!(
                "rank {peer}'s buffer as seen by rank {rank}: byte {i} is {g:02x?}, want {w:02x?} \
                 ({wrong} of {bytes} bytes differ)"
            );
        }
    }
    // Everyone has read; now write a stamp into the next rank's buffer
    // through its mapping (one writer per buffer).
    comm.store_barrier()?;
    let next = (rank + 1) % world;
    let stamp_len = bytes.min(4096);
    let stamp = pattern(1000 + rank, round, stamp_len);
    write_device(ctx, symm.buffer_ptrs()[next], &stamp)?;
    comm.store_barrier()?;
    let prev = (rank + world - 1) % world;
    let got = read_device(ctx, symm.buffer_ptrs()[rank], bytes)?;
    let mut want = pattern(rank, round, bytes);
    want[..stamp_len].copy_from_slice(&pattern(1000 + prev, round, stamp_len));
    if let Some((i, g, w)) = first_difference(&got, &want) {
        bail!(
            "rank {rank}'s own buffer after rank {prev} wrote its stamp: byte {i} is {g:02x?}, want {w:02x?}"
        );
    }
    comm.store_barrier()?;
    Ok(())
}

/// Check 4: `get_buffer` addresses and bounds errors.
fn check_views(comm: &IntraNodeComm) -> Result<()> {
    let symm = comm.symm();
    let (world, bytes) = (comm.world(), symm.buffer_bytes());
    for peer in 0..world {
        let base = symm.buffer_ptrs()[peer];
        let whole = symm.get_buffer::<f32>(peer, bytes / 4, 0)?;
        ensure!(whole.device_ptr() == base && whole.len() == bytes / 4 && whole.rank() == peer);
        if bytes >= 2 {
            let last = symm.get_buffer::<half::bf16>(peer, 1, bytes / 2 - 1)?;
            ensure!(
                last.device_ptr() == base + (bytes / 2 - 1) as u64 * 2,
                "last bf16 at the wrong address"
            );
        }
        let empty = symm.get_buffer::<half::f16>(peer, 0, bytes / 2)?;
        ensure!(empty.is_empty());

        let past = bytes / 4 + 1;
        match symm.get_buffer::<f32>(peer, 1, past) {
            Err(e @ Error::OutOfBounds { .. }) => {
                let text = e.to_string();
                for needle in [
                    format!("rank {peer}"),
                    format!("offset {past}"),
                    "length 1".to_owned(),
                    format!("{bytes} bytes"),
                ] {
                    ensure!(
                        text.contains(&needle),
                        "bounds error {text:?} lacks {needle:?}"
                    );
                }
            }
            other => bail!("get_buffer past the end of rank {peer}'s buffer gave {other:?}"),
        }
        ensure!(
            matches!(
                symm.get_buffer::<f32>(peer, usize::MAX, 1),
                Err(Error::OutOfBounds { .. })
            ),
            "an overflowing length must be out of bounds"
        );
        ensure!(
            matches!(
                symm.get_buffer::<f32>(peer, bytes / 4 + 1, 0),
                Err(Error::OutOfBounds { .. })
            ),
            "one element too many must be out of bounds"
        );
    }
    ensure!(
        symm.get_buffer::<f32>(world, 1, 0).is_err(),
        "rank {world} must be refused"
    );
    Ok(())
}

/// Check 5: `cycles` create/drop cycles leak neither descriptors nor
/// device memory.
fn check_cycles(
    ctx: &Arc<CudaContext>,
    store: &Arc<dyn Store>,
    rank: usize,
    world: usize,
    config: &CommConfig,
    cycles: usize,
) -> Result<String> {
    // One warm-up cycle: the first one loads libraries and creates the
    // socket directory, which stay.
    let measure = |label: &str| -> Result<(usize, usize)> {
        let fds = open_fd_count()?;
        let (free, _total) = ctx
            .mem_get_info()
            .with_context(|| format!("cuMemGetInfo {label}"))?;
        Ok((fds, free))
    };
    let one_cycle = |i: usize| -> Result<()> {
        let comm = IntraNodeComm::rendezvous(ctx, store.clone(), rank, world, config)
            .with_context(|| format!("cycle {i}"))?;
        // Nobody drops before everyone is done with the blocks.
        comm.store_barrier()?;
        drop(comm);
        Ok(())
    };
    one_cycle(0)?;
    barrier(store.as_ref(), rank, world, "before")?;
    let (fds_before, free_before) = measure("before the cycles")?;
    barrier(store.as_ref(), rank, world, "measured-before")?;
    for i in 1..=cycles {
        one_cycle(i)?;
    }
    barrier(store.as_ref(), rank, world, "after")?;
    let (fds_after, free_after) = measure("after the cycles")?;
    barrier(store.as_ref(), rank, world, "measured-after")?;
    ensure!(
        fds_after == fds_before,
        "{cycles} create/drop cycles changed the open descriptor count from {fds_before} to {fds_after}"
    );
    ensure!(
        free_after + LEAK_TOLERANCE_BYTES >= free_before,
        "{cycles} create/drop cycles shrank free device memory from {free_before} to {free_after} bytes"
    );
    Ok(format!(
        "{cycles} create/drop cycles: fds {fds_before} -> {fds_after}, free device memory {free_before} -> \
         {free_after} bytes"
    ))
}

/// A store barrier outside any communicator (keys under `symm_check/`).
fn barrier(store: &dyn Store, rank: usize, world: usize, name: &str) -> Result<()> {
    let mut exchange = intranode_store::StoreExchange::new(format!("symm_check/{name}"));
    exchange
        .barrier(store, rank, world)
        .with_context(|| format!("store barrier {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("symm_check").chain(list.iter().copied()))
    }

    #[test]
    fn argument_parsing() {
        let a = args(&[]).expect("defaults");
        assert_eq!(
            (a.backend, a.buffer_bytes, a.rounds, a.cycles),
            (None, None, 3, 0)
        );
        let a = args(&[
            "--backend",
            "cuda-ipc",
            "--buffer-bytes",
            "4097",
            "--rounds",
            "1",
            "--cycles",
            "100",
        ])
        .expect("all");
        assert_eq!(
            (a.backend, a.buffer_bytes, a.rounds, a.cycles),
            (Some(Backend::CudaIpc), Some(4097), 1, 100)
        );
        assert!(args(&["--backend", "nccl"]).is_err());
        assert!(args(&["--backend"]).is_err());
        assert!(args(&["--rounds", "x"]).is_err());
        assert!(args(&["--frobnicate"]).is_err());
    }
}
