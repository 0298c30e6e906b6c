//! The free-running sweep of `intranode-bench bench` (the default; the
//! timing itself is `intranode_harness::free`): every size and algorithm
//! in graphs of K calls (`graph-K`), eager (`eager`) and with a rank
//! chosen at random spinning 0 to 20 us before each call (`skew`, the time
//! net of that spin), then the decode-like mode (`decode`: a graph
//! alternating a 20 us kernel, a GEMM's stand-in, with the call; the time
//! is the step's, spin included, the overhead the step over the same graph
//! without the call) at a Llama layer's sizes. Rank 0 prints per-mode median / p99 / max, the tail
//! check (p99 at most 1.5 x and max at most 3 x the median) and the
//! decode table, and writes the results file.

use anyhow::{Context, Result, bail};
use cudarc::driver::{CudaSlice, DevicePtr};
use half::{bf16, f16};
use intranode::AllReduceAlgo;
use intranode::internals::scatter_gather_uses_ours;
use intranode::internals::{ScatterGather, ScatterGatherForm};
use intranode::kernels::ElemType;
use intranode::types::ReduceOp;
use intranode_harness::data;
use intranode_harness::free::{self, Dist, Timer};
use intranode_harness::progress::Progress;
use intranode_harness::rank::Rank;

use crate::bench::{BenchArgs, enqueue, finish, sizes};
use crate::elem::{self, BenchElem, Dtype, Op};
use crate::results::{BenchFile, DecodeRow, ModeStats, Row, fmt_bytes, largest_graph_mean};

mod nccl_sym;
mod tables;
use tables::{print_decode_table, print_free_table, print_nccl_tests_table, print_tail_check};

/// Calls per graph in the skew and decode-like modes.
const SKEW_K: usize = 16;
/// The decode-like mode's stand-in for a GEMM: 20 us, about an 8B
/// layer's row-parallel GEMM at batch 1 as measured on one H200.
const DECODE_SPIN_NS: u64 = 20_000;
const DECODE_HIDDEN: [usize; 2] = [4096, 8192];
const DECODE_BATCH: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// Sizes above this take fewer calls than `--large-calls`, in proportion
/// (`calls_for`): the sweep's default largest size, so the defaults time
/// as before.
const HUGE_BYTES: usize = 64 << 20;
/// The fewest calls per configuration and mode past [`HUGE_BYTES`].
const MIN_HUGE_CALLS: usize = 20;

fn calls_for(args: &BenchArgs, bytes: usize) -> usize {
    if bytes <= 4 << 20 {
        args.calls
    } else if bytes <= HUGE_BYTES {
        args.large_calls
    } else {
        (args.large_calls.saturating_mul(HUGE_BYTES) / bytes).max(MIN_HUGE_CALLS)
    }
    .max(1)
}

/// How each rank's figures per mode travel to rank 0: mode, distribution,
/// mean per call of the graph without stamps.
type RankDists = Vec<(String, Dist, Option<f64>)>;

/// The worst rank's figures per mode, from every rank's.
fn merge(all: &[RankDists]) -> Vec<ModeStats> {
    let Some(first) = all.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .filter_map(|(i, (mode, _, _))| {
            let dists: Vec<Dist> = all.iter().filter_map(|d| d.get(i).map(|x| x.1)).collect();
            let means: Vec<f64> = all
                .iter()
                .filter_map(|d| d.get(i).and_then(|x| x.2))
                .collect();
            Some(ModeStats {
                mode: mode.clone(),
                dist: Dist::worst(&dists)?,
                mean_us: (!means.is_empty()).then(|| means.iter().copied().fold(0.0, f64::max)),
            })
        })
        .collect()
}

fn name(algo: Option<AllReduceAlgo>) -> &'static str {
    algo.map_or("auto", AllReduceAlgo::name)
}

/// Every mode for one (size, algorithm) on this rank, then the output
/// checked.
fn measure(
    r: &Rank,
    args: &BenchArgs,
    timer: &mut Timer,
    bytes: usize,
    call: &mut free::Enqueue<'_>,
    seed: u64,
) -> Result<RankDists> {
    let calls = calls_for(args, bytes);
    let (me, world) = (r.rank(), r.world());
    let mut out: RankDists = Vec::new();
    for &k in &args.ks {
        let k = k.max(1);
        let replays = (calls / k).max(1);
        let (us, mean) = free::graph_mode(r, k, replays, call, &|_| 0, &|_| 0.0, timer)?;
        if let Some(d) = Dist::of(us) {
            out.push((format!("graph-{k}"), d, Some(mean)));
        }
    }
    if !args.graph_only {
        let (us, mean) = free::eager_mode(r, calls, call)?;
        if let Some(d) = Dist::of(us) {
            out.push(("eager".into(), d, Some(mean)));
        }
    }
    if !args.no_skew {
        let spin = |j: usize| match free::skew_of(seed, world, j) {
            (rank, ns) if rank == me => ns,
            _ => 0,
        };
        let net = |j: usize| free::skew_of(seed, world, j).1 as f64 / 1000.0;
        let replays = (calls / SKEW_K).max(1);
        let (us, mean) = free::graph_mode(r, SKEW_K, replays, call, &spin, &net, timer)?;
        if let Some(d) = Dist::of(us) {
            out.push(("skew".into(), d, Some(mean)));
        }
    }
    Ok(out)
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let Some(mut r) = Rank::setup_with("intranode-bench bench", args.cudarc_defaults)? else {
        return Ok(());
    };
    if args.symmetric && (args.collective.scatter_gather().is_some() || args.tune.is_some()) {
        bail!(
            "--symmetric times the all-reduce beside the regular rows; it takes neither --collective \
             reduce-scatter/all-gather nor --tune (the crossovers are for regular buffers)"
        );
    }
    if let Some(what) = args.collective.scatter_gather() {
        return run_scatter_gather(&mut r, args, what);
    }
    match args.dtype {
        Dtype::Bf16 => sweep::<bf16>(&mut r, args),
        Dtype::F16 => sweep::<f16>(&mut r, args),
        Dtype::F32 => sweep::<f32>(&mut r, args),
        Dtype::F64 => sweep::<f64>(&mut r, args),
        Dtype::I8 => sweep::<i8>(&mut r, args),
        Dtype::U8 => sweep::<u8>(&mut r, args),
        Dtype::I32 => sweep::<i32>(&mut r, args),
        Dtype::U32 => sweep::<u32>(&mut r, args),
        Dtype::I64 => sweep::<i64>(&mut r, args),
        Dtype::U64 => sweep::<u64>(&mut r, args),
    }
}

/// The timed call of the sweep: `T` reduced by `op` through the
/// communicator, by `algo` (`None`: as it decides), from `input` (a plain
/// slice, or a symmetric buffer with `--symmetric`).
fn enqueue_typed<T: BenchElem, S: DevicePtr<T>>(
    r: &Rank,
    input: &S,
    d_out: &mut CudaSlice<T>,
    op: &cudarc::nccl::ReduceOp,
    algo: Option<AllReduceAlgo>,
) -> Result<()> {
    match algo {
        None => r.comm.all_reduce(input, d_out, op)?,
        Some(a) => r.comm.all_reduce_with(input, d_out, op, a)?,
    };
    Ok(())
}

/// One row of the sweep: `algo` reducing `input` (the inputs of `call`)
/// into a poisoned output, timed (`config_seed` draws the skew), the
/// output checked on every rank and the distributions merged. A wrong
/// element is counted, not fatal at once (nccl-tests' `#wrong`): the run
/// fails once the tables are out. `label` names the row.
#[allow(clippy::too_many_arguments)]
fn timed_row<T: BenchElem, S: DevicePtr<T>>(
    r: &mut Rank,
    args: &BenchArgs,
    timer: &mut Timer,
    input: &S,
    (call, config_seed): (u64, u64),
    op: &cudarc::nccl::ReduceOp,
    algo: Option<AllReduceAlgo>,
    label: &str,
) -> Result<Row> {
    let (elems, world) = (input.len(), r.world());
    let bytes = elems * std::mem::size_of::<T>();
    let mut d_out = r.stream.clone_htod(&vec![elem::poison::<T>(); elems])?;
    let mine = {
        let mut enqueue = |r: &Rank, _j: usize| enqueue_typed(r, input, &mut d_out, op, algo);
        measure(r, args, timer, bytes, &mut enqueue, config_seed)?
    };
    let out = r.stream.clone_dtoh(&d_out)?;
    r.stream.synchronize()?;
    let (wrong, first) = elem::wrong(&out, args.op, call, world);
    if let Some(first) = first {
        eprintln!(
            "rank {}: {} {} {label} at {bytes} bytes: {wrong} wrong elements; first {first}",
            r.rank(),
            T::NAME,
            args.op.name(),
        );
    }
    let all = r.all_gather(&(mine, wrong as u64))?;
    let dists: Vec<RankDists> = all.iter().map(|(d, _)| d.clone()).collect();
    let mut row = row::<T>(r, world, bytes, algo, op, merge(&dists));
    row.wrong = all.iter().map(|(_, w)| w).sum();
    row.algo = label.to_owned();
    Ok(row)
}

/// The all-reduce sweep in `T` with `args.op`: the decode-like mode only
/// for bf16 sums (a layer's all-reduce), and our algorithms only where
/// they reduce `T` with the op.
fn sweep<T: BenchElem>(r: &mut Rank, args: &BenchArgs) -> Result<()> {
    let world = r.world();
    let seed = 0xBE7C_u64;
    let ours = args.dtype.ours() && args.op.ours();
    let algos: Vec<_> = crate::bench::algos(r, args)
        .into_iter()
        .filter(|a| ours || matches!(a, None | Some(AllReduceAlgo::Nccl)))
        .collect();
    let bf16_sum = args.dtype == Dtype::Bf16 && args.op == Op::Sum;
    let run_decode = !args.no_decode && bf16_sum;
    if !args.no_decode && !bf16_sum && r.rank() == 0 {
        println!("decode-like mode skipped: it times bf16 sums (a layer's all-reduce)");
    }
    let op = args.op.nccl();
    let elem_bytes = std::mem::size_of::<T>();
    let sizes: Vec<usize> = sizes(args)
        .into_iter()
        .filter(|b| *b >= elem_bytes)
        .collect();
    let max_calls = args.calls.max(args.large_calls).max(1);
    // Graph modes log replays x (K + 1) <= 2 x calls stamps.
    let mut timer = Timer::new(r, 2 * max_calls + 2 * SKEW_K + 256)?;
    let decode_algos = decode_algos(args, &algos);
    let sym_algos = if args.symmetric {
        algos
            .iter()
            .filter(|a| **a != Some(AllReduceAlgo::Nccl))
            .count()
    } else {
        0
    };
    let decode_configs = if !run_decode {
        0
    } else {
        DECODE_HIDDEN.len() * DECODE_BATCH.len() * (decode_algos.len() + 1)
    };
    let (nccl_sym, unavailable) = nccl_sym::Baseline::for_sweep(r, args, sizes.last().copied())?;
    let mut progress = Progress::new(
        "intranode-bench bench (free-running)",
        sizes.len() * (algos.len() + sym_algos + usize::from(nccl_sym.is_some())) + decode_configs,
        r.rank() == 0,
    );
    let mut rows: Vec<Row> = Vec::new();
    for (si, &bytes) in sizes.iter().enumerate() {
        let elems = bytes / elem_bytes;
        let bytes = elems * elem_bytes;
        let call = si as u64;
        let d_in = r
            .stream
            .clone_htod(&elem::inputs::<T>(args.op, call, r.rank(), elems))?;
        for &algo in &algos {
            let config_seed = data::mix(seed ^ bytes as u64 ^ ((rows.len() as u64) << 40));
            let row = timed_row(
                r,
                args,
                &mut timer,
                &d_in,
                (call, config_seed),
                &op,
                algo,
                name(algo),
            )?;
            rows.push(row);
            progress.step(&format!("{} {}", fmt_bytes(bytes), name(algo)));
        }
        if args.symmetric {
            symmetric_rows(
                r,
                args,
                &mut timer,
                bytes,
                &d_in,
                (seed, call),
                &op,
                &algos,
                &mut rows,
                &mut progress,
            )?;
        }
        if let Some(base) = &nccl_sym {
            rows.push(base.row(r, args, &mut timer, &d_in, (call, seed), &mut progress)?);
        }
        crate::results::fill_nccl_ratios(&mut rows, bytes);
    }
    let nccl_sym_line = nccl_sym.map(|base| base.close(r)).transpose()?;
    let decode = if run_decode {
        decode_mode(r, args, &mut timer, &decode_algos, &mut progress)?
    } else {
        Vec::new()
    };
    progress.finish();
    let wrong: u64 = rows.iter().map(|row| row.wrong).sum();
    if r.rank() == 0 {
        print_free_table(&rows);
        print_nccl_tests_table(&rows, T::NAME, args.op, elem_bytes);
        print_tail_check(&rows, &decode);
        print_decode_table(&decode);
        let mut file = BenchFile::new(world, r.ctx.name().ok(), T::NAME, rows);
        file.op = args.op.name().into();
        file.timing = "free".into();
        file.decode = decode;
        nccl_sym::report(&mut file, nccl_sym_line, unavailable);
        finish(args, file)?;
    }
    if wrong > 0 {
        bail!(
            "{wrong} wrong output elements over the sweep ({} {}; see #wrong above)",
            T::NAME,
            args.op.name()
        );
    }
    Ok(())
}

/// `--symmetric`: the rows `<algo>+sym` of one size, every algorithm of
/// ours and auto with `d_in`'s data (the inputs of `call`) in a symmetric
/// buffer allocated for this size (on every rank alike), each output
/// checked as the regular rows' are.
#[allow(clippy::too_many_arguments)]
fn symmetric_rows<T: BenchElem>(
    r: &mut Rank,
    args: &BenchArgs,
    timer: &mut Timer,
    bytes: usize,
    d_in: &CudaSlice<T>,
    (seed, call): (u64, u64),
    op: &cudarc::nccl::ReduceOp,
    algos: &[Option<AllReduceAlgo>],
    rows: &mut Vec<Row>,
    progress: &mut Progress,
) -> Result<()> {
    let mut sym = r.comm.alloc_symmetric::<T>(d_in.len())?;
    r.stream.memcpy_dtod(d_in, &mut sym)?;
    for &algo in algos.iter().filter(|a| **a != Some(AllReduceAlgo::Nccl)) {
        let config_seed = data::mix(seed ^ 0x5E77 ^ bytes as u64 ^ ((rows.len() as u64) << 40));
        let label = format!("{}+sym", name(algo));
        let row = timed_row(r, args, timer, &sym, (call, config_seed), op, algo, &label)?;
        rows.push(row);
        progress.step(&format!("{} {label}", fmt_bytes(bytes)));
    }
    Ok(())
}

/// The decode-like mode's algorithms: the sweep's, less the push
/// form unless `--algos` names it (a form for large messages; the decode
/// sizes are 8 KiB to 1 MiB, and the default run stays as long as before
/// it).
fn decode_algos(args: &BenchArgs, algos: &[Option<AllReduceAlgo>]) -> Vec<Option<AllReduceAlgo>> {
    let named = args.algos.iter().any(|a| a == AllReduceAlgo::Push.name());
    algos
        .iter()
        .copied()
        .filter(|a| named || *a != Some(AllReduceAlgo::Push))
        .collect()
}

/// The row of one configuration: `graph_us` is the mean per call of the
/// largest graph (no stamps), `eager_us` the eager mean.
fn row<T: BenchElem>(
    r: &Rank,
    world: usize,
    bytes: usize,
    algo: Option<AllReduceAlgo>,
    op: &cudarc::nccl::ReduceOp,
    free: Vec<ModeStats>,
) -> Row {
    let graph_us = largest_graph_mean(&free);
    let eager_us = free
        .iter()
        .find(|m| m.mode == "eager")
        .and_then(|m| m.mean_us);
    let chosen = match algo {
        Some(a) => a.name().to_owned(),
        None => r
            .comm
            .algo_for::<T>(bytes / std::mem::size_of::<T>(), op)
            .name()
            .to_owned(),
    };
    Row {
        world,
        bytes,
        algo: name(algo).to_owned(),
        chosen,
        graph_us,
        eager_us,
        eager_host_us: None,
        busbw_gbps: crate::results::busbw_gbps(world, bytes, graph_us),
        graph_vs_nccl: None,
        eager_vs_nccl: None,
        wrong: 0,
        free,
    }
}

/// A graph of [`SKEW_K`] steps (a [`DECODE_SPIN_NS`] spin, then the call)
/// per Llama size, the floor being the same graph without the call.
fn decode_mode(
    r: &mut Rank,
    args: &BenchArgs,
    timer: &mut Timer,
    algos: &[Option<AllReduceAlgo>],
    progress: &mut Progress,
) -> Result<Vec<DecodeRow>> {
    let seed = 0xDEC0_u64;
    let world = r.world();
    let replays = (args.calls / SKEW_K).max(1);
    let mut rows = Vec::new();
    for hidden in DECODE_HIDDEN {
        for batch in DECODE_BATCH {
            let elems = batch * hidden;
            let bytes = elems * 2;
            let call = ((hidden as u64) << 8) | batch as u64;
            let d_in = r
                .stream
                .clone_htod(&data::inputs::<bf16>(seed, call, r.rank(), elems))?;
            let spin = |_j: usize| DECODE_SPIN_NS;
            let mut none = |_r: &Rank, _j: usize| Ok(());
            let (us, _) = free::graph_mode(r, SKEW_K, replays, &mut none, &spin, &|_| 0.0, timer)?;
            let floor_mine = Dist::of(us);
            let floor_all = r.all_gather(&floor_mine)?;
            let floor = Dist::worst(&floor_all.into_iter().flatten().collect::<Vec<_>>());
            progress.step(&format!("decode {hidden}x{batch} floor"));
            let mut configs: Vec<(String, Dist)> = Vec::new();
            for &algo in algos {
                let mut d_out = r.stream.clone_htod(&vec![data::poison::<bf16>(); elems])?;
                let mut step = |r: &Rank, _j: usize| enqueue(r, &d_in, &mut d_out, algo);
                let (us, _) =
                    free::graph_mode(r, SKEW_K, replays, &mut step, &spin, &|_| 0.0, timer)?;
                let out = r.stream.clone_dtoh(&d_out)?;
                r.stream.synchronize()?;
                data::verify(&out, seed, call, world, ReduceOp::Sum).map_err(|e| {
                    anyhow::anyhow!(
                        "rank {}: decode {} at {hidden} x {batch} gave a wrong result: {e}",
                        r.rank(),
                        name(algo)
                    )
                })?;
                let mine = Dist::of(us);
                let all = r.all_gather(&mine)?;
                if let Some(d) = Dist::worst(&all.into_iter().flatten().collect::<Vec<_>>()) {
                    configs.push((name(algo).to_owned(), d));
                }
                progress.step(&format!("decode {hidden}x{batch} {}", name(algo)));
            }
            let Some(floor) = floor else { continue };
            let overhead = |d: &Dist| d.median_us - floor.median_us;
            let nccl = configs
                .iter()
                .find(|(a, _)| a == "nccl")
                .map(|(_, d)| overhead(d));
            rows.push(DecodeRow {
                hidden,
                batch,
                bytes,
                algo: "floor".into(),
                step: floor,
                overhead_us: 0.0,
                overhead_vs_nccl: None,
            });
            for (algo, d) in configs {
                rows.push(DecodeRow {
                    hidden,
                    batch,
                    bytes,
                    algo,
                    step: d,
                    overhead_us: overhead(&d),
                    overhead_vs_nccl: nccl.map(|n| overhead(&d) / n),
                });
            }
        }
    }
    Ok(rows)
}

/// The free-running sweep of reduce-scatter or all-gather: `ours` (our
/// kernels, forced), `nccl` (cudarc's NCCL communicator) and `auto` (the
/// `Communicator`'s choice), sizes being the whole buffer (every shard).
fn run_scatter_gather(r: &mut Rank, args: &BenchArgs, what: ScatterGather) -> Result<()> {
    let world = r.world();
    let seed = 0x5CA7_u64;
    let crossovers = intranode::config::CommConfig::from_env()?.crossovers;
    let max_calls = args.calls.max(args.large_calls).max(1);
    let mut timer = Timer::new(r, 2 * max_calls + 2 * SKEW_K + 256)?;
    let mut algos: Vec<&str> = Vec::new();
    if r.has_intra_path() {
        // Our two forms forced only on request (`--algos lamport,push`).
        algos.extend(["ours", "lamport", "push"]);
    }
    if r.comm.nccl().is_ok() {
        algos.push("nccl");
    }
    algos.push("auto");
    algos.retain(|a| match args.algos.is_empty() {
        true => !matches!(*a, "lamport" | "push"),
        false => args.algos.iter().any(|x| x == a),
    });
    let sizes: Vec<usize> = sizes(args)
        .into_iter()
        .map(|b| b - b % (world * 16))
        .filter(|&b| b > 0)
        .collect();
    let mut progress = Progress::new(
        "intranode-bench bench (free-running)",
        sizes.len() * algos.len(),
        r.rank() == 0,
    );
    let mut rows: Vec<Row> = Vec::new();
    for (si, &bytes) in sizes.iter().enumerate() {
        let n = bytes / 2 / world;
        let call_no = si as u64;
        let (send_len, recv_len) = match what {
            ScatterGather::ReduceScatter => (world * n, n),
            ScatterGather::AllGather => (n, world * n),
        };
        let send = r
            .stream
            .clone_htod(&data::inputs::<bf16>(seed, call_no, r.rank(), send_len))?;
        for &algo in &algos {
            let mut recv = r
                .stream
                .clone_htod(&vec![data::poison::<bf16>(); recv_len])?;
            let config_seed = data::mix(seed ^ bytes as u64 ^ ((rows.len() as u64) << 40));
            let mine = {
                let mut call = |r: &Rank, _j: usize| -> Result<()> {
                    let sum = cudarc::nccl::ReduceOp::Sum;
                    match (algo, what) {
                        ("ours" | "lamport" | "push", _) => {
                            let intra = r.comm.intra().context("no intra-node path")?;
                            let form = match algo {
                                "lamport" => Some(ScatterGatherForm::Lamport),
                                "push" => Some(ScatterGatherForm::Push),
                                _ => None,
                            };
                            intra.scatter_gather_as(
                                what,
                                form,
                                ElemType::Bf16,
                                &send,
                                &mut recv,
                                ReduceOp::Sum,
                                &r.stream,
                            )?;
                        }
                        ("nccl", ScatterGather::ReduceScatter) => {
                            let comm = r.comm.nccl().map_err(|e| anyhow::anyhow!("{e}"))?;
                            comm.reduce_scatter(&send, &mut recv, &sum)
                                .map_err(|e| anyhow::anyhow!("ncclReduceScatter: {:?}", e.0))?;
                        }
                        ("nccl", ScatterGather::AllGather) => {
                            let comm = r.comm.nccl().map_err(|e| anyhow::anyhow!("{e}"))?;
                            comm.all_gather(&send, &mut recv)
                                .map_err(|e| anyhow::anyhow!("ncclAllGather: {:?}", e.0))?;
                        }
                        (_, ScatterGather::ReduceScatter) => {
                            r.comm.reduce_scatter(&send, &mut recv, &sum)?;
                        }
                        (_, ScatterGather::AllGather) => {
                            r.comm.all_gather(&send, &mut recv)?;
                        }
                    }
                    Ok(())
                };
                measure(r, args, &mut timer, bytes, &mut call, config_seed)?
            };
            let out = r.stream.clone_dtoh(&recv)?;
            r.stream.synchronize()?;
            data::verify_scatter_gather(r, what, &out, seed, call_no, n, ReduceOp::Sum, algo)?;
            let all = r.all_gather(&mine)?;
            let modes = merge(&all);
            let chosen = match algo {
                "auto"
                    if scatter_gather_uses_ours(bytes, world, &crossovers)
                        || r.comm.nccl().is_err() =>
                {
                    "ours"
                }
                "auto" => "nccl",
                other => other,
            };
            let graph_us = largest_graph_mean(&modes);
            rows.push(Row {
                world,
                bytes,
                algo: algo.to_owned(),
                chosen: chosen.to_owned(),
                graph_us,
                eager_us: modes
                    .iter()
                    .find(|m| m.mode == "eager")
                    .and_then(|m| m.mean_us),
                eager_host_us: None,
                // Each byte of the whole buffer but this rank's shard
                // crosses NVLink once: (W - 1) / W, nccl-tests' convention.
                busbw_gbps: (world as f64 - 1.0) / world as f64 * bytes as f64 / (graph_us * 1e3),
                graph_vs_nccl: None,
                eager_vs_nccl: None,
                wrong: 0,
                free: modes,
            });
            progress.step(&format!("{} {} {algo}", fmt_bytes(bytes), what.name()));
        }
        crate::results::fill_nccl_ratios(&mut rows, bytes);
    }
    progress.finish();
    if r.rank() == 0 {
        println!(
            "{} (bf16 sum; bytes = the whole buffer, every shard):",
            what.name()
        );
        print_free_table(&rows);
        print_tail_check(&rows, &[]);
        let mut file = BenchFile::new(world, r.ctx.name().ok(), "bf16", rows);
        file.timing = "free".into();
        file.collective = what.name().replace('_', "-");
        finish(args, file)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_mode_takes_the_push_form_only_when_named() {
        let algos = [
            Some(AllReduceAlgo::Lamport),
            Some(AllReduceAlgo::Push),
            None,
        ];
        let mut a = BenchArgs::demo();
        assert_eq!(
            decode_algos(&a, &algos),
            vec![Some(AllReduceAlgo::Lamport), None]
        );
        a.algos = vec!["push".into(), "auto".into()];
        assert_eq!(decode_algos(&a, &algos), algos.to_vec());
    }

    #[test]
    fn calls_shrink_past_64_mib_only() {
        let mut a = BenchArgs::demo();
        a.calls = 10_000;
        a.large_calls = 2_000;
        assert_eq!(calls_for(&a, 4 << 20), 10_000);
        assert_eq!(calls_for(&a, 64 << 20), 2_000);
        assert_eq!(calls_for(&a, 256 << 20), 500);
        assert_eq!(calls_for(&a, 1 << 30), 125);
        a.large_calls = 100;
        assert_eq!(calls_for(&a, 1 << 30), MIN_HUGE_CALLS);
        // The sweep to 1 GiB: the default sizes, then 256 MiB and 1 GiB.
        a.max_bytes = Some(1 << 30);
        a.min_bytes = 1024;
        let sizes = crate::bench::sizes(&a);
        assert_eq!(sizes.last(), Some(&(1 << 30)));
        a.max_bytes = None;
        assert_eq!(crate::bench::sizes(&a).last(), Some(&(64 << 20)));
        assert_eq!(&sizes[..sizes.len() - 2], &crate::bench::sizes(&a)[..]);
    }

    #[test]
    fn merge_takes_the_worst_rank() {
        let a = Dist::of(vec![1.0, 2.0, 3.0]).expect("a");
        let b = Dist::of(vec![2.0, 2.0, 9.0]).expect("b");
        let m = merge(&[
            vec![("eager".into(), a, Some(2.0))],
            vec![("eager".into(), b, Some(4.0))],
        ]);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].dist.median_us, m[0].dist.max_us), (2.0, 9.0));
        assert_eq!(m[0].mean_us, Some(4.0));
    }
}
