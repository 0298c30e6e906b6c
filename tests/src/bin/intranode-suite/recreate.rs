//! `recreate`: communicators built and dropped many times on one context
//! must leave nothing behind: after a warm-up cycle (libraries
//! loaded, NCCL's process-wide state, the socket directory), `--cycles`
//! more through the public API (`Communicator::new`, one all-reduce of
//! ours and one of NCCL's, drop) may not shrink free device memory
//! (`cuMemGetInfo`) by more than `--memory-slack-mib`, nor grow the open
//! file descriptors (`/proc/self/fd`) or threads (`/proc/self/task`) by
//! more than `--fd-slack` / `--thread-slack`, nor leave an error
//! recorded on the context.
//!
//! With `--pieces N`, first N cycles of each part alone (the kernel
//! module, the intra-node communicator, the NCCL communicator), with what
//! each leaves behind per cycle: where a leak of the whole comes from.
//! Those figures are reported, not judged; the whole is.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use cudarc::driver::CudaSlice;
use intranode::AllReduceAlgo;
use intranode::config::CommConfig;
use intranode::kernels::KernelModule;
use intranode::{Communicator, types::ReduceOp};
use intranode_harness::rank::Proc;
use intranode_store::StoreExchange;
use intranode_tests::{open_fd_count, thread_count};

#[derive(clap::Args, Debug)]
pub struct RecreateArgs {
    /// Create/drop cycles of the whole communicator, after the warm-up.
    #[arg(long, default_value_t = 50)]
    pub cycles: usize,
    /// Cycles of each part alone first (0: none).
    #[arg(long, default_value_t = 0)]
    pub pieces: usize,
    /// How far free device memory may fall over the cycles, in MiB
    /// (`cuMemGetInfo` moves in 2 MiB pages).
    #[arg(long, default_value_t = 4)]
    pub memory_slack_mib: usize,
    /// How many more open file descriptors there may be after the cycles.
    #[arg(long, default_value_t = 2)]
    pub fd_slack: usize,
    /// How many more threads there may be after the cycles.
    #[arg(long, default_value_t = 2)]
    pub thread_slack: usize,
    /// Cycles of the public-API variant: a new stream per
    /// cycle, `Communicator::new`, calls of every form's size class (9,
    /// 50 000 and 2 097 152 f32 elements with auto, 4 Mi forced to the
    /// push form), drop; judged as the whole cycles are. 0: none.
    #[arg(long, default_value_t = 20)]
    pub stream_cycles: usize,
}

/// Element counts (f32) of the variant's calls, and the form forced (the
/// push form: auto picks it only on some worlds, `Crossovers::push_min_bytes`).
const VARIANT_CALLS: [(usize, Option<AllReduceAlgo>); 4] = [
    (9, None),
    (50_000, None),
    (2_097_152, None),
    (4 << 20, Some(AllReduceAlgo::Push)),
];

/// One create/drop cycle of a part of a communicator.
type PieceCycle<'a> = dyn Fn(&mut Proc) -> Result<()> + 'a;

/// Where each open descriptor points (`/proc/self/fd`): a growth is named
/// by what the new descriptors are (a socket, `/dev/nvidia*`, an eventfd).
fn fd_targets() -> std::collections::BTreeMap<String, String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Default::default();
    };
    dir.flatten()
        .map(|e| {
            let target = std::fs::read_link(e.path())
                .map(|t| t.display().to_string())
                .unwrap_or_else(|err| format!("({err})"));
            (e.file_name().to_string_lossy().into_owned(), target)
        })
        .collect()
}

/// The descriptors open in `after` and not in `before`, with their targets.
fn new_fds(
    before: &std::collections::BTreeMap<String, String>,
    after: &std::collections::BTreeMap<String, String>,
) -> String {
    let new: Vec<String> = after
        .iter()
        .filter(|(fd, target)| before.get(*fd) != Some(*target))
        .map(|(fd, target)| format!("{fd} -> {target}"))
        .collect();
    if new.is_empty() {
        "none".into()
    } else {
        new.join(", ")
    }
}

/// What a process holds at one moment.
#[derive(Clone, Copy, Debug)]
struct Held {
    free_bytes: usize,
    fds: usize,
    threads: usize,
}

impl Held {
    fn now(p: &Proc, label: &str) -> Result<Held> {
        let (free_bytes, _total) = p
            .ctx
            .mem_get_info()
            .with_context(|| format!("cuMemGetInfo {label}"))?;
        Ok(Held {
            free_bytes,
            fds: open_fd_count().context("counting open fds")?,
            threads: thread_count().context("counting threads")?,
        })
    }

    /// `after` less `self`: (MiB of device memory lost, fds gained,
    /// threads gained), negative where something was given back.
    fn growth(&self, after: &Held) -> (f64, i64, i64) {
        (
            (self.free_bytes as f64 - after.free_bytes as f64) / (1u64 << 20) as f64,
            after.fds as i64 - self.fds as i64,
            after.threads as i64 - self.threads as i64,
        )
    }
}

pub fn run(args: &RecreateArgs) -> Result<()> {
    let Some(mut p) = Proc::setup("intranode-suite recreate")? else {
        return Ok(());
    };
    let rank = p.rank();
    let config = CommConfig::from_env()?;
    let elems = 4096usize;
    let send = p.stream.clone_htod(&vec![1.0f32; elems])?;
    let mut recv: CudaSlice<f32> = p.stream.alloc_zeros(elems)?;

    if args.pieces > 0 {
        let pieces: [(&str, &PieceCycle); 3] = [
            ("kernel module", &|p: &mut Proc| {
                let k = KernelModule::load(&p.ctx)?;
                drop(k);
                Ok(())
            }),
            ("intra-node comm", &|p: &mut Proc| {
                let c = p.comm(&config)?;
                p.store_barrier()?;
                drop(c);
                Ok(())
            }),
            ("nccl comm", &|p: &mut Proc| {
                let (rank, world) = (p.rank(), p.world());
                let mut exchange = StoreExchange::new("intranode/recreate/nccl");
                let c = intranode::internals::nccl_comm(
                    &p.stream,
                    p.store.as_ref(),
                    &mut exchange,
                    rank,
                    world,
                )?;
                p.store_barrier()?;
                drop(c);
                Ok(())
            }),
        ];
        for (name, cycle) in pieces {
            cycle(&mut p).with_context(|| format!("{name}: warm-up"))?;
            p.store_barrier()?;
            let before = Held::now(&p, name)?;
            let fds_before = fd_targets();
            for i in 0..args.pieces {
                cycle(&mut p).with_context(|| format!("{name}: cycle {i}"))?;
            }
            p.store_barrier()?;
            let after = Held::now(&p, name)?;
            let (mib, fds, threads) = before.growth(&after);
            println!(
                "recreate rank {rank}: {name} alone, {} cycles: device memory {mib:+.1} MiB lost \
                 ({:.2} MiB a cycle), fds {fds:+}, threads {threads:+}",
                args.pieces,
                mib / args.pieces as f64,
            );
            if fds != 0 {
                println!(
                    "recreate rank {rank}: {name} alone: new fds: {}",
                    new_fds(&fds_before, &fd_targets())
                );
            }
        }
    }

    let mut cycle = |p: &mut Proc, i: usize| -> Result<(Duration, Communicator)> {
        let started = Instant::now();
        let comm = Communicator::new(p.stream.clone(), p.store.clone(), p.rank(), p.world())
            .with_context(|| format!("rank {rank}: cycle {i}: Communicator::new"))?;
        let took = started.elapsed();
        let op = ReduceOp::Sum.to_nccl();
        // One call of ours (where the group has the intra-node path) and
        // one of NCCL's: what a communicator keeps may be made at its
        // first call.
        if comm.intra_reason().is_none() {
            comm.all_reduce_with(&send, &mut recv, &op, AllReduceAlgo::Lamport)
                .with_context(|| format!("cycle {i}: our all-reduce"))?;
        }
        if comm.nccl().is_ok() {
            comm.all_reduce_with(&send, &mut recv, &op, AllReduceAlgo::Nccl)
                .with_context(|| format!("cycle {i}: nccl's all-reduce"))?;
        }
        p.stream.synchronize()?;
        let got = p.stream.clone_dtoh(&recv)?;
        let want = p.world() as f32;
        ensure!(
            got.iter().all(|&x| x == want),
            "cycle {i}: all-reduce of ones gave {:?}, want {want}",
            got.iter().find(|&&x| x != want)
        );
        // Nobody drops before every rank is done with the peers' blocks.
        p.store_barrier()?;
        Ok((took, comm))
    };

    // An error left recorded on the context after a cycle is one the
    // application's next call would get (and one that once made the next
    // communicator's teardown skip its releases).
    let mut pending: Vec<String> = Vec::new();
    let mut check_pending = |p: &Proc, i: usize| {
        if let Err(e) = p.ctx.check_err() {
            pending.push(format!("cycle {i}: {e}"));
        }
    };
    let (first, comm) = cycle(&mut p, 0)?;
    println!(
        "recreate rank {rank}: warm-up Communicator::new {:.1} ms: {}",
        first.as_secs_f64() * 1e3,
        comm.setup_times()
    );
    drop(comm);
    check_pending(&p, 0);
    p.store_barrier()?;
    let before = Held::now(&p, "before the cycles")?;
    let mut times = Vec::with_capacity(args.cycles);
    let mut last = None;
    for i in 1..=args.cycles {
        let (took, comm) = cycle(&mut p, i)?;
        times.push(took);
        last = Some(comm.setup_times().to_string());
        drop(comm);
        check_pending(&p, i);
    }
    p.store_barrier()?;
    let after = Held::now(&p, "after the cycles")?;
    let (mib, fds, threads) = before.growth(&after);
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = times.get(times.len() / 2).copied().unwrap_or_default();
    println!(
        "recreate rank {rank}: {} cycles of Communicator::new + 2 all-reduces + drop: \
         device memory {mib:+.1} MiB lost (free {} -> {} bytes), fds {} -> {}, threads {} -> {}; \
         Communicator::new min {:.1} / median {:.1} / max {:.1} ms",
        args.cycles,
        before.free_bytes,
        after.free_bytes,
        before.fds,
        after.fds,
        before.threads,
        after.threads,
        ms(times.first().copied().unwrap_or_default()),
        ms(median),
        ms(times.last().copied().unwrap_or_default()),
    );
    if let Some(last) = last {
        println!("recreate rank {rank}: last cycle's set-up: {last}");
    }
    if !pending.is_empty() {
        println!(
            "recreate rank {rank}: {} cycles left an error recorded on the context, first: {}",
            pending.len(),
            pending[0]
        );
    }
    let variant = if args.stream_cycles > 0 {
        Some(stream_variant(&mut p, args)?)
    } else {
        None
    };
    ensure!(
        mib <= args.memory_slack_mib as f64,
        "rank {rank}: {} create/drop cycles lost {mib:.1} MiB of device memory (slack {} MiB)",
        args.cycles,
        args.memory_slack_mib
    );
    ensure!(
        fds <= args.fd_slack as i64,
        "rank {rank}: {} create/drop cycles left {fds} more open fds (slack {})",
        args.cycles,
        args.fd_slack
    );
    ensure!(
        threads <= args.thread_slack as i64,
        "rank {rank}: {} create/drop cycles left {threads} more threads (slack {})",
        args.cycles,
        args.thread_slack
    );
    ensure!(
        pending.is_empty(),
        "rank {rank}: {} cycles left an error recorded on the context (the next call \
         would return it), first: {}",
        pending.len(),
        pending[0]
    );
    if let Some((mib, fds, threads)) = variant {
        let what = format!(
            "{} cycles of a new stream + Communicator::new + calls of every size class + drop",
            args.stream_cycles
        );
        ensure!(
            mib <= args.memory_slack_mib as f64,
            "rank {rank}: {what} lost {mib:.1} MiB of device memory (slack {} MiB)",
            args.memory_slack_mib
        );
        ensure!(
            fds <= args.fd_slack as i64,
            "rank {rank}: {what} left {fds} more open fds (slack {})",
            args.fd_slack
        );
        ensure!(
            threads <= args.thread_slack as i64,
            "rank {rank}: {what} left {threads} more threads (slack {})",
            args.thread_slack
        );
    }
    println!("recreate rank {rank}: PASS");
    Ok(())
}

/// The public-API variant: every cycle a new stream, a
/// `Communicator` on it, the calls of [`VARIANT_CALLS`] (each checked),
/// then both dropped. Returns what the cycles after a warm-up one left:
/// (MiB of device memory lost, fds gained, threads gained).
fn stream_variant(p: &mut Proc, args: &RecreateArgs) -> Result<(f64, i64, i64)> {
    let rank = p.rank();
    let world = p.world();
    let biggest = VARIANT_CALLS.iter().map(|c| c.0).max().unwrap_or(1);
    let send = p.stream.clone_htod(&vec![1.0f32; biggest])?;
    let mut recvs = VARIANT_CALLS
        .iter()
        .map(|&(n, _)| p.stream.alloc_zeros::<f32>(n))
        .collect::<Result<Vec<_>, _>>()?;
    p.stream.synchronize()?;
    let op = ReduceOp::Sum.to_nccl();
    // Where a cycle is, on stderr with the time since the variant began:
    // a cycle that never ends (the first 4-H100 run timed out in here
    // with nothing printed) shows its last step.
    let began = Instant::now();
    let step = |i: usize, what: &str| {
        if i < 2 {
            eprintln!(
                "recreate rank {rank}: stream cycle {i}: {what} ({:.3} s)",
                began.elapsed().as_secs_f64()
            );
        }
    };
    let mut cycle = |p: &mut Proc, i: usize| -> Result<()> {
        step(i, "new stream");
        let stream = p.ctx.new_stream()?;
        let comm = Communicator::new(stream.clone(), p.store.clone(), rank, world)
            .with_context(|| format!("rank {rank}: stream cycle {i}: Communicator::new"))?;
        step(i, "communicator made");
        for (&(n, forced), recv) in VARIANT_CALLS.iter().zip(recvs.iter_mut()) {
            step(i, &format!("all-reduce of {n} f32"));
            let sent = send.slice(..n);
            match forced {
                Some(algo) if comm.intra_reason().is_none() => {
                    comm.all_reduce_with(&sent, recv, &op, algo)
                }
                _ => comm.all_reduce(&sent, recv, &op),
            }
            .with_context(|| format!("stream cycle {i}: all-reduce of {n} f32"))?;
        }
        step(i, "synchronize");
        stream.synchronize()?;
        step(i, "check");
        for (&(n, forced), recv) in VARIANT_CALLS.iter().zip(recvs.iter()) {
            let got = stream.clone_dtoh(recv)?;
            let want = world as f32;
            ensure!(
                got.iter().all(|&x| x == want),
                "stream cycle {i}: all-reduce of {n} f32 ({}) gave {:?}, want {want}",
                forced.map_or("auto", |a| a.name()),
                got.iter().find(|&&x| x != want)
            );
        }
        step(i, "store barrier");
        p.store_barrier()?;
        step(i, "drop");
        drop(comm);
        drop(stream);
        eprintln!(
            "recreate rank {rank}: stream cycle {i} done ({:.3} s)",
            began.elapsed().as_secs_f64()
        );
        Ok(())
    };
    cycle(p, 0)?;
    p.store_barrier()?;
    let before = Held::now(p, "before the stream cycles")?;
    let fds_before = fd_targets();
    for i in 1..=args.stream_cycles {
        cycle(p, i)?;
    }
    p.store_barrier()?;
    let after = Held::now(p, "after the stream cycles")?;
    let (mib, fds, threads) = before.growth(&after);
    println!(
        "recreate rank {rank}: {} cycles of a new stream + Communicator::new + all-reduces of \
         9, 50000, 2097152 f32 (auto) and 4194304 f32 (push) + drop: device memory {mib:+.1} MiB \
         lost, fds {fds:+}, threads {threads:+}",
        args.stream_cycles
    );
    if fds != 0 {
        println!(
            "recreate rank {rank}: stream cycles: new fds: {}",
            new_fds(&fds_before, &fd_targets())
        );
    }
    Ok((mib, fds, threads))
}
