//! `intranode-bench hop`: the two latencies that set the fixed cost of
//! the Lamport forms (issue 34, item 2), measured apart from any
//! collective.
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
//!
//! The counter's words are the first cache lines of each rank's symmetric
//! buffer (one line per partner), zeroed first; nothing else runs on the
//! communicator meanwhile.

use anyhow::{Context, Result, bail, ensure};
use cudarc::driver::DevicePtr;
use cudarc::driver::sys::CUevent_flags;
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
    ensure!(
        symm.buffer_bytes() as u64 >= words_bytes,
        "the symmetric buffer ({} bytes) is too small for {world} words",
        symm.buffer_bytes()
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

/// Per-kernel time of a graph of `args.graph_kernels` empty kernels,
/// replayed `args.graph_replays` times, median of 5 runs; every rank
/// alone on its own GPU.
fn launch_floor(r: &Rank, module: &TestKernelModule, args: &HopArgs) -> Result<()> {
    let stream = &r.stream;
    let graph = crate::graph::capture(stream, &mut || {
        for _ in 0..args.graph_kernels {
            module.spin(stream, 0)?;
        }
        Ok(())
    })?;
    // Warm-up: the first replays upload the graph.
    for _ in 0..10 {
        graph.launch()?;
    }
    let mut us = Vec::with_capacity(5);
    for _ in 0..5 {
        let start = r.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let end = r.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
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
    println!(
        "hop: launch floor, a graph of {} empty kernels: {:.2} us per kernel (median of 5 runs of {} replays; {:.2}-{:.2})",
        args.graph_kernels, us[2], args.graph_replays, us[0], us[4]
    );
    Ok(())
}
