//! `intranode-bench phases`: where a Lamport call's time goes. The
//! one-shot took 2.46 us at 1 KiB on 4 H100 and the two-shot 4.24,
//! against ~1.5 and ~2.2 us of launch and NVLink hops (measured by
//! `hop`).
//!
//! Each rank replays a graph of `--graph-calls` phase probes
//! (`probe_lamport{,_two_shot}_phases_w<n>` of the test PTX): the production
//! one-shot and two-shot code, bf16 sum, launched with the parameters
//! and grid of a real call (`IntraNodeComm::lamport_probe_launch`), each
//! block stamping `%globaltimer` at the end of every phase
//! (`layout::PHASE_*`) after a block barrier. Free-running, as the bench
//! replays its graphs; the last replay of each run is read back.
//!
//! Per call, every phase is reported as the slowest block's stamp less
//! the call's start (its first block's start), and the gap from this
//! call's end (its last block's) to the next call's start on the same
//! GPU, all on that GPU's clock. The gap is the kernel's end and the next
//! launch, to compare with `hop`'s launch floor and store floor. The
//! barriers the marks add cost a few dozen ns a phase, and the probes run
//! without launch overlap (as `hop`'s floors do).

use anyhow::{Context, Result, ensure};
use cudarc::driver::DevicePtr;
use intranode::AllReduceAlgo;
use intranode::kernels::{TestKernel, TestKernelModule};
use intranode_harness::Rank;
use intranode_kernels_gpu::layout::{
    PHASE_COUNTED, PHASE_END, PHASE_REDUCED, PHASE_START, PHASE_STORED, PHASES,
};

#[derive(clap::Args, Debug)]
pub struct PhasesArgs {
    /// Message sizes in bytes (bf16, a multiple of 2).
    #[arg(long, value_delimiter = ',', default_values_t = [1024usize, 65536, 1048576])]
    pub bytes: Vec<usize>,
    /// Probes (calls) in the graph.
    #[arg(long, default_value_t = 16)]
    pub graph_calls: usize,
    /// Replays of the graph in each run; the last one's stamps are kept.
    #[arg(long, default_value_t = 100)]
    pub replays: usize,
    /// Runs per size and form; their calls are pooled.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
}

/// One call's phases, us from its start (`None`: the form has no such
/// phase), and the gap to the next call's start.
struct CallPhases {
    at_us: [Option<f64>; PHASES],
    gap_us: Option<f64>,
}

pub fn run(args: &PhasesArgs) -> Result<()> {
    ensure!(
        args.graph_calls >= 2 && args.replays > 0 && args.runs > 0,
        "--graph-calls must be 2 or more, --replays and --runs positive"
    );
    ensure!(
        args.bytes.iter().all(|b| *b >= 2 && b % 2 == 0),
        "--bytes must be positive multiples of 2 (bf16)"
    );
    let Some(r) = Rank::setup("intranode-bench phases")? else {
        return Ok(());
    };
    let (rank, world) = (r.rank(), r.world());
    ensure!(
        TestKernel::phases(false, world).is_some(),
        "phases runs on {:?} ranks (got {world})",
        TestKernel::PHASE_WORLDS
    );
    let module = TestKernelModule::load(&r.ctx).context("loading the test kernels")?;
    let Rank {
        stream,
        store,
        mut exchange,
        comm,
        ..
    } = r;
    let mut barrier = || exchange.barrier(store.as_ref(), rank, world);
    let intra = comm
        .intra()
        .context("the intra-node path is off: no Lamport form to probe")?;
    if rank == 0 {
        println!(
            "phases: {world} ranks, graphs of {} calls, last of {} replays, {} runs; us from the call's start \
             (slowest block), median [p90]; gap: this call's end to the next one's start",
            args.graph_calls, args.replays, args.runs
        );
    }
    for &bytes in &args.bytes {
        for (two_shot, algo) in [
            (false, AllReduceAlgo::Lamport),
            (true, AllReduceAlgo::LamportTwoShot),
        ] {
            let elems = bytes / 2;
            let input = stream.alloc_zeros::<u16>(elems)?;
            let output = stream.alloc_zeros::<u16>(elems)?;
            let (in_ptr, _in_guard) = input.device_ptr(&stream);
            let (out_ptr, _out_guard) = output.device_ptr(&stream);
            let (params, blocks, threads) = intra
                .lamport_probe_launch(algo, in_ptr, out_ptr, elems)
                .with_context(|| format!("{} at {bytes} bytes", algo.name()))?;
            let per_call = blocks as usize * PHASES;
            let stamps = stream.alloc_zeros::<u64>(per_call * args.graph_calls)?;
            let (stamps_ptr, _stamps_guard) = stamps.device_ptr(&stream);
            let graph = crate::graph::capture(&stream, &mut || {
                for k in 0..args.graph_calls {
                    let at = stamps_ptr + (k * per_call * 8) as u64;
                    // SAFETY: the parameters and grid of this call from
                    // `lamport_probe_launch` on this communicator; every
                    // rank captures the same calls in the same order, and
                    // replays them in step with the others (the barrier
                    // before each run); the input, output and stamps live
                    // until the synchronize after the replays; `at` has
                    // `blocks * PHASES` words.
                    unsafe {
                        module
                            .lamport_phases(&stream, two_shot, world, params, blocks, threads, at)?
                    };
                }
                Ok(())
            })?;
            let mut calls = Vec::with_capacity(args.runs * args.graph_calls);
            for _ in 0..args.runs {
                barrier()?;
                for _ in 0..args.replays {
                    graph.launch()?;
                }
                stream.synchronize()?;
                let host = stream.clone_dtoh(&stamps)?;
                stream.synchronize()?;
                calls.extend(read_calls(&host, blocks as usize, args.graph_calls));
            }
            barrier()?;
            report(rank, algo, bytes, blocks, threads, &calls);
        }
    }
    Ok(())
}

/// The calls of one replay from its stamps (`calls` calls of `blocks`
/// blocks, `PHASES` stamps each; a phase no block stamped is `None`).
fn read_calls(stamps: &[u64], blocks: usize, calls: usize) -> Vec<CallPhases> {
    let per_call = blocks * PHASES;
    let phase = |k: usize, p: usize| -> Vec<u64> {
        (0..blocks)
            .map(|b| stamps[k * per_call + b * PHASES + p])
            .filter(|&t| t != 0)
            .collect()
    };
    (0..calls)
        .map(|k| {
            let start = phase(k, PHASE_START).into_iter().min();
            let end = phase(k, PHASE_END).into_iter().max();
            let mut at_us = [None; PHASES];
            if let Some(start) = start {
                for (p, at) in at_us.iter_mut().enumerate() {
                    *at = phase(k, p)
                        .into_iter()
                        .max()
                        .map(|t| t.saturating_sub(start) as f64 / 1000.0);
                }
            }
            let next_start = (k + 1 < calls)
                .then(|| phase(k + 1, PHASE_START).into_iter().min())
                .flatten();
            let gap_us = match (end, next_start) {
                (Some(end), Some(next)) => Some((next as f64 - end as f64) / 1000.0),
                _ => None,
            };
            CallPhases { at_us, gap_us }
        })
        .collect()
}

/// Median and 90th percentile of `values`, or `None` when empty.
fn median_p90(mut values: Vec<f64>) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), at(0.9)))
}

fn report(
    rank: usize,
    algo: AllReduceAlgo,
    bytes: usize,
    blocks: u32,
    threads: u32,
    calls: &[CallPhases],
) {
    let show = |values: Vec<f64>| match median_p90(values) {
        Some((median, p90)) => format!("{median:.2} [{p90:.2}]"),
        None => "-".to_owned(),
    };
    let phase = |p: usize| show(calls.iter().filter_map(|c| c.at_us[p]).collect());
    println!(
        "phases rank {rank}: {} {bytes} B ({blocks} x {threads}): counted {}, stored {}, reduced {}, end {}; gap {} ({} calls)",
        algo.name(),
        phase(PHASE_COUNTED),
        phase(PHASE_STORED),
        phase(PHASE_REDUCED),
        phase(PHASE_END),
        show(calls.iter().filter_map(|c| c.gap_us).collect()),
        calls.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_read_per_block_and_phase() {
        // 2 calls of 2 blocks; the second block of call 0 starts later
        // and ends last; no block marks PHASE_COUNTED.
        let mut stamps = vec![0u64; 2 * 2 * PHASES];
        let mut set = |k: usize, b: usize, p: usize, t: u64| stamps[(k * 2 + b) * PHASES + p] = t;
        set(0, 0, PHASE_START, 1000);
        set(0, 1, PHASE_START, 1200);
        set(0, 0, PHASE_STORED, 1500);
        set(0, 1, PHASE_STORED, 1700);
        set(0, 0, PHASE_END, 2500);
        set(0, 1, PHASE_END, 3000);
        set(1, 0, PHASE_START, 4000);
        set(1, 1, PHASE_START, 4100);
        set(1, 0, PHASE_END, 5000);
        set(1, 1, PHASE_END, 5200);
        let calls = read_calls(&stamps, 2, 2);
        assert_eq!(calls[0].at_us[PHASE_START], Some(0.2));
        assert_eq!(calls[0].at_us[PHASE_COUNTED], None);
        assert_eq!(calls[0].at_us[PHASE_STORED], Some(0.7));
        assert_eq!(calls[0].at_us[PHASE_END], Some(2.0));
        assert_eq!(calls[0].gap_us, Some(1.0));
        assert_eq!(calls[1].at_us[PHASE_END], Some(1.2));
        assert_eq!(calls[1].gap_us, None);
    }

    #[test]
    fn median_and_p90_of_ten() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(median_p90(v), Some((6.0, 9.0)));
        assert_eq!(median_p90(Vec::new()), None);
    }
}
