//! `intranode-bench hop`: the two latencies that set the fixed cost of
//! the Lamport forms, measured apart from any collective.
//!
//! - **One NVLink hop as a Lamport wait sees it.** Rank 0 and each peer in
//!   turn pass a counter back and forth, one thread each
//!   (`probe_ping_pong`): a strong store into the other's symmetric
//!   buffer, polled there with strong loads, as `prims::slots::put` and
//!   the Lamport waits do. Half a round trip is one hop. The one-shot pays
//!   one hop after its launch, the two-shot two.
//! - **The launch floor.** A CUDA graph of `--graph-kernels` empty kernels
//!   (`timing_spin(0)`) replayed: what a kernel that does nothing costs
//!   back to back in a graph, the way the bench replays its graphs of
//!   all-reduces.
//! - **The store floor.** The same graph of kernels that each store one
//!   16-byte vector (`probe_store_exit`): into this GPU, into the next
//!   rank, into every rank. If a grid completes only once its stores
//!   into a peer are acknowledged over NVLink, the difference to the
//!   local store is what every collective that stores into peers pays at
//!   its end, beside the hop (the one-shot's 2.46 us at 1 KiB on 4 H100
//!   against 1.5 us of launch and hop left about 1 us unexplained).
//!
//! The counter's words are the first cache lines of each rank's symmetric
//! buffer (one line per partner), zeroed first; the store floors' the
//! next ones (one line per writer). Nothing else runs on the communicator
//! meanwhile.

use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaStream, DevicePtr};
use intranode::kernels::TestKernelModule;
use intranode_harness::Rank;
use intranode_kernels_gpu::layout::PingPongParams;

/// Bytes between two partners' words: one cache line each, so the two
/// ranks' stores never share a line.
const WORD_STRIDE_BYTES: u64 = 128;

/// A wait in the probe longer than this ends it (the run then fails
/// with the count it reached): the partners start within milliseconds
/// of each other after the host barrier.
const WAIT_TIMEOUT_NS: u64 = 5_000_000_000;

#[derive(clap::Args, Debug)]
pub struct HopArgs {
    /// Timed round trips per run.
    #[arg(long, default_value_t = 10_000)]
    pub iters: u32,
    /// Round trips before the timed ones in each run.
    #[arg(long, default_value_t = 1_000)]
    pub warmup: u32,
    /// Runs per pair of ranks; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Empty kernels in the launch-floor graph.
    #[arg(long, default_value_t = 16)]
    pub graph_kernels: usize,
    /// Replays of that graph per run (5 runs, the median reported).
    #[arg(long, default_value_t = 500)]
    pub graph_replays: usize,
}

pub fn run(args: &HopArgs) -> Result<()> {
    ensure!(
        args.iters > 0 && args.runs > 0 && args.graph_kernels > 0 && args.graph_replays > 0,
        "--iters, --runs, --graph-kernels and --graph-replays must be positive"
    );
    let per_run = u64::from(args.warmup) + u64::from(args.iters);
    ensure!(
        per_run * (args.runs as u64) < u64::from(u32::MAX),
        "--runs x (--warmup + --iters) must stay below 2^32 (the counter is a u32)"
    );
    let Some(r) = Rank::setup("intranode-bench hop")? else {
        return Ok(());
    };
    let (rank, world) = (r.rank(), r.world());
    ensure!(world >= 2, "hop needs at least 2 ranks (got {world})");
    let module = TestKernelModule::load(&r.ctx).context("loading the test kernels")?;
    launch_floor(&r, &module, args)?;
    let Rank {
        stream: main,
        store,
        mut exchange,
        comm,
        ..
    } = r;
    let mut barrier = || exchange.barrier(store.as_ref(), rank, world);
    let intra = comm
        .intra()
        .context("the intra-node path is off: no peer mappings to probe")?;
    let symm = intra.symm();
    let buffers = symm.buffer_ptrs().to_vec();
    let words_bytes = WORD_STRIDE_BYTES * world as u64;
    // The ping-pong's words, then the store floors' (one line per writer
    // in every buffer).
    ensure!(
        symm.buffer_bytes() as u64 >= 2 * words_bytes,
        "the symmetric buffer ({} bytes) is too small for {} words",
        symm.buffer_bytes(),
        2 * world
    );
    // SAFETY: the first `words_bytes` of this rank's own buffer; no
    // collective runs on the communicator while the probe does, and the
    // barrier below orders the zeroing before any peer's store.
    unsafe {
        cudarc::driver::result::memset_d8_async(
            buffers[rank],
            0,
            words_bytes as usize,
            main.cu_stream(),
        )?;
    }
    main.synchronize()?;
    let out = main.alloc_zeros::<u64>(2)?;
    let (out_ptr, _out_guard) = out.device_ptr(&main);
    barrier()?;
    let store_words: Vec<u64> = buffers
        .iter()
        .map(|b| b + words_bytes + WORD_STRIDE_BYTES * rank as u64)
        .collect();
    store_floors(&main, &module, args, rank, &store_words)?;
    barrier()?;
    if rank == 0 {
        println!(
            "hop: {world} ranks, rank 0 with each peer, {} round trips after {} warm-up, median of {} runs",
            args.iters, args.warmup, args.runs
        );
        println!(
            "{:>8} {:>14} {:>14} {:>22}",
            "pair", "one hop ns", "round trip ns", "one hop ns, all runs"
        );
    }
    for partner in 1..world {
        let mut hop_ns = Vec::with_capacity(args.runs);
        for run in 0..args.runs {
            barrier()?;
            if rank != 0 && rank != partner {
                continue;
            }
            let other = if rank == 0 { partner } else { 0 };
            let p = PingPongParams {
                own_word: buffers[rank] + WORD_STRIDE_BYTES * other as u64,
                peer_word: buffers[other] + WORD_STRIDE_BYTES * rank as u64,
                out: out_ptr,
                // Past every value an earlier run on these words passed.
                first: (1 + per_run * run as u64) as u32,
                warmup: args.warmup,
                iters: args.iters,
                leader: u32::from(rank == 0),
                timeout_ns: WAIT_TIMEOUT_NS,
            };
            // SAFETY: `own_word` lies in this rank's buffer and
            // `peer_word` in the partner's, both mapped here for the
            // communicator's life; `out` holds two u64 and outlives the
            // synchronize below; only this pair touches these two words.
            unsafe { module.ping_pong(&main, p)? };
            main.synchronize()?;
            if rank == 0 {
                let got = main.clone_dtoh(&out)?;
                main.synchronize()?;
                if got[1] != per_run {
                    bail!(
                        "hop: rank {partner} stopped answering after {} of {per_run} round trips \
                         (a wait passed {} s)",
                        got[1],
                        WAIT_TIMEOUT_NS / 1_000_000_000
                    );
                }
                hop_ns.push(got[0] as f64 / f64::from(args.iters) / 2.0);
            }
        }
        if rank == 0 {
            let all: Vec<String> = hop_ns.iter().map(|ns| format!("{ns:.0}")).collect();
            hop_ns.sort_by(f64::total_cmp);
            let median = hop_ns[hop_ns.len() / 2];
            println!(
                "{:>8} {:>14.0} {:>14.0} {:>22}",
                format!("0<->{partner}"),
                median,
                2.0 * median,
                all.join(" ")
            );
        }
    }
    barrier()?;
    Ok(())
}

/// Per-kernel time of a graph of `args.graph_kernels` kernels that
/// `enqueue_one` enqueues one at a time, replayed `args.graph_replays`
/// times: the median, least and most of 5 runs, in us.
fn kernel_floor(
    stream: &Arc<CudaStream>,
    args: &HopArgs,
    enqueue_one: &mut dyn FnMut() -> Result<()>,
) -> Result<[f64; 3]> {
    let graph = crate::graph::capture(stream, &mut || {
        for _ in 0..args.graph_kernels {
            enqueue_one()?;
        }
        Ok(())
    })?;
    // Warm-up: the first replays upload the graph.
    for _ in 0..10 {
        graph.launch()?;
    }
    let ctx = stream.context();
    let mut us = Vec::with_capacity(5);
    for _ in 0..5 {
        let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        start.record(stream)?;
        for _ in 0..args.graph_replays {
            graph.launch()?;
        }
        end.record(stream)?;
        stream.synchronize()?;
        let kernels = (args.graph_replays * args.graph_kernels) as f64;
        us.push(start.elapsed_ms(&end)? as f64 * 1000.0 / kernels);
    }
    us.sort_by(f64::total_cmp);
    Ok([us[2], us[0], us[4]])
}

/// The launch floor: a graph of empty kernels; every rank alone on its
/// own GPU.
fn launch_floor(r: &Rank, module: &TestKernelModule, args: &HopArgs) -> Result<()> {
    let [median, least, most] = kernel_floor(&r.stream, args, &mut || {
        module.spin(&r.stream, 0)?;
        Ok(())
    })?;
    println!(
        "hop: launch floor, a graph of {} empty kernels: {median:.2} us per kernel (median of 5 runs of {} replays; {least:.2}-{most:.2})",
        args.graph_kernels, args.graph_replays
    );
    Ok(())
}

/// The store floors: graphs of kernels that store one 16-byte vector
/// each (`probe_store_exit`) into this rank's memory, into the next
/// rank's, and into every rank's (the one-shot's push of one vector),
/// against the launch floor (see the module's comment). `words[k]` is
/// this rank's line in rank `k`'s buffer, which only this rank touches.
fn store_floors(
    stream: &Arc<CudaStream>,
    module: &TestKernelModule,
    args: &HopArgs,
    rank: usize,
    words: &[u64],
) -> Result<()> {
    let world = words.len();
    let next = (rank + 1) % world;
    let mut value = 0u32;
    let mut floor = |dst: &[u64]| {
        kernel_floor(stream, args, &mut || {
            value = value.wrapping_add(1);
            // SAFETY: each address is this rank's own 16-byte aligned
            // line of a mapped symmetric buffer (`words`), which nothing
            // else touches while the probe runs.
            unsafe { module.store_exit(stream, dst, value)? };
            Ok(())
        })
    };
    let local = floor(&words[rank..=rank])?;
    let peer = floor(&words[next..=next])?;
    let every = floor(words)?;
    println!(
        "hop: store floor, graphs of {} kernels storing 16 bytes, us per kernel (median of 5 runs of {} replays): \
         into this GPU {:.2} ({:.2}-{:.2}), into rank {next} {:.2} ({:.2}-{:.2}), into every rank {:.2} ({:.2}-{:.2})",
        args.graph_kernels,
        args.graph_replays,
        local[0],
        local[1],
        local[2],
        peer[0],
        peer[1],
        peer[2],
        every[0],
        every[1],
        every[2]
    );
    Ok(())
}
