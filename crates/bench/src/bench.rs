//! Latency and bus bandwidth of our all-reduce against NCCL, in the same
//! run, every timed configuration's output checked against the f64
//! reference. Rank 0 prints the tables and the check of auto against the
//! best of its choices, and writes JSON, CSV and a PNG plot.
//!
//! By default the calls run free (`free.rs`): no host barrier and no
//! extra all-reduce between timed calls, per-call distributions from
//! device stamps, in graphs of K calls, eager, with skew, and decode-like.
//! `--aligned` keeps the earlier method (ranks lined up before each
//! sample, the median of sample means), which hides what drifting ranks
//! cost: a slow mode that held every free-running call for milliseconds
//! (waits polling host memory) never showed there.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use cudarc::driver::CudaSlice;
use half::bf16;
use intranode::AllReduceAlgo;
use intranode::types::ReduceOp;
use intranode_harness::data;
use intranode_harness::free::median;
use intranode_harness::progress::Progress;
use intranode_harness::rank::Rank;

use crate::elem::{Dtype, Op};
use crate::results::{BenchFile, Row, fmt_bytes};

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Smallest message, bytes.
    #[arg(long, default_value_t = 1024)]
    pub min_bytes: usize,
    /// Largest message, bytes (default: 64 MiB free-running, 256 MiB
    /// aligned). `--max-bytes 1073741824` extends the sweep to 1 GiB
    /// (256 MiB and 1 GiB after the default sizes), the large-message
    /// range of the push form; free-running, the calls per size
    /// shrink past 64 MiB (`--large-calls`).
    #[arg(long)]
    pub max_bytes: Option<usize>,
    /// Lined-up samples (`--aligned`) per configuration (the median is
    /// reported).
    #[arg(long, default_value_t = 21)]
    pub repeats: usize,
    /// Line the ranks up before every sample (store barrier and a tiny
    /// all-reduce), the earlier method; it hides what drifting ranks cost.
    #[arg(long)]
    pub aligned: bool,
    /// Free-running: timed calls per configuration and mode, up to 4 MiB.
    #[arg(long, default_value_t = 10_000)]
    pub calls: usize,
    /// Free-running: timed calls per configuration and mode above 4 MiB
    /// (fewer, to keep a sweep to 64 MiB within minutes); above 64 MiB,
    /// this many times 64 MiB over the size (at least 20), so that each
    /// size of a sweep to 1 GiB moves about as many bytes as 64 MiB.
    #[arg(long, default_value_t = 2_000)]
    pub large_calls: usize,
    /// Free-running: calls per graph, one graph mode each.
    #[arg(long, value_delimiter = ',', default_value = "1,16,128")]
    pub ks: Vec<usize>,
    /// Free-running: skip the decode-like mode.
    #[arg(long)]
    pub no_decode: bool,
    /// Free-running: skip the skew mode.
    #[arg(long)]
    pub no_skew: bool,
    /// Which collective to time (free-running only).
    #[arg(long, value_enum, default_value_t = Collective::AllReduce)]
    pub collective: Collective,
    /// Keep cudarc's event tracking on (its default once a context has two
    /// streams, and candle's), as applications run; the free-running modes
    /// then capture and replay under it.
    #[arg(long)]
    pub cudarc_defaults: bool,
    /// Only these algorithms (names as `INTRANODE_ALL_REDUCE_ALGO`, and
    /// `auto`); default all.
    #[arg(long, value_delimiter = ',')]
    pub algos: Vec<String>,
    /// Directory for the JSON, CSV and PNG results.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Also write measured crossovers to this file (for INTRANODE_TUNING_FILE).
    #[arg(long)]
    pub tune: Option<PathBuf>,
    /// Skip the eager measurements.
    #[arg(long)]
    pub graph_only: bool,
    /// Element type of the free-running all-reduce sweep: bf16, f16 and
    /// f32 go where the communicator decides (ours or NCCL), the others
    /// (f64 and the integers) to NCCL, as `Communicator::all_reduce` sends
    /// them. The decode-like mode, `--aligned` and the reduce-scatter and
    /// all-gather sweeps time bf16 sums only.
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    pub dtype: Dtype,
    /// Reduction op of the free-running all-reduce sweep (`prod`: NCCL
    /// only; `avg`: floating-point types only).
    #[arg(long, value_enum, default_value_t = Op::Sum)]
    pub op: Op,
    /// Free-running all-reduce: also time every algorithm of ours (and
    /// auto) with its input in a symmetric buffer from
    /// `Communicator::alloc_symmetric` (rows `<algo>+sym`, beside the
    /// regular rows and NCCL): the one-shot and two-shot then read the
    /// peers' inputs in place, without the copy-in.
    #[arg(long)]
    pub symmetric: bool,
    /// Free-running all-reduce: also time NCCL's symmetric kernels (NCCL
    /// 2.27 and later): both buffers from `ncclMemAlloc`, registered as
    /// windows with `NCCL_WIN_COLL_SYMMETRIC` on a second NCCL
    /// communicator, beside plain NCCL, checked alike. The row is
    /// `nccl-sym`, or `nccl-sym-nomix` where the run's environment has
    /// `NCCL_GRAPH_MIXING_SUPPORT=0` (NCCL reads it at init: a run of its
    /// own). Sums of bf16, f16 and f32 only (what those kernels reduce);
    /// elsewhere, or where NCCL cannot register the windows, the row is
    /// reported unavailable with the reason.
    #[arg(long)]
    pub nccl_symmetric: bool,
}

impl BenchArgs {
    /// The README's demo: a short sweep.
    pub fn demo() -> Self {
        BenchArgs {
            min_bytes: 4096,
            max_bytes: Some(16 << 20),
            repeats: 11,
            aligned: false,
            calls: 2_000,
            large_calls: 500,
            ks: vec![16],
            collective: Collective::AllReduce,
            cudarc_defaults: true,
            no_decode: true,
            no_skew: true,
            algos: Vec::new(),
            out: PathBuf::from("bench-out"),
            tune: None,
            graph_only: true,
            dtype: Dtype::Bf16,
            op: Op::Sum,
            symmetric: false,
            nccl_symmetric: false,
        }
    }
}

pub(crate) fn sizes(args: &BenchArgs) -> Vec<usize> {
    let max_bytes = args
        .max_bytes
        .unwrap_or(if args.aligned { 256 << 20 } else { 64 << 20 });
    let mut v = Vec::new();
    let mut s = args.min_bytes.max(16);
    while s <= max_bytes {
        v.push(s);
        // Steps of 4, halved where the crossovers lie (Lamport, one-shot
        // and two-shot change places between 16 KiB and 1 MiB).
        s *= if (16 << 10..1 << 20).contains(&s) {
            2
        } else {
            4
        };
    }
    v
}

/// Calls per timed sample: enough that launch gaps and event resolution
/// stay small against the total.
fn calls_per_sample(bytes: usize) -> usize {
    if bytes <= 1 << 20 {
        50
    } else if bytes <= 16 << 20 {
        10
    } else {
        3
    }
}

struct Measured {
    graph_us: f64,
    eager_us: Option<f64>,
    eager_host_us: Option<f64>,
}

/// The timed call: a bf16 sum by `algo` (`None`: auto).
pub(crate) fn enqueue(
    r: &Rank,
    d_in: &CudaSlice<bf16>,
    d_out: &mut CudaSlice<bf16>,
    algo: Option<AllReduceAlgo>,
) -> Result<()> {
    r.all_reduce(d_in, d_out, ReduceOp::Sum, algo)
}

/// Lines the ranks' GPUs up before a sample: a store barrier on the host,
/// then one tiny all-reduce that every GPU leaves within a microsecond of
/// the others.
fn align(r: &mut Rank, tiny_in: &CudaSlice<bf16>, tiny_out: &mut CudaSlice<bf16>) -> Result<()> {
    r.store_barrier()?;
    r.all_reduce(tiny_in, tiny_out, ReduceOp::Sum, None)
}

fn measure(
    r: &mut Rank,
    args: &BenchArgs,
    d_in: &CudaSlice<bf16>,
    d_out: &mut CudaSlice<bf16>,
    algo: Option<AllReduceAlgo>,
    tiny: &mut (CudaSlice<bf16>, CudaSlice<bf16>),
) -> Result<Measured> {
    let bytes = d_in.len() * 2;
    let k = calls_per_sample(bytes);
    let start = r
        .ctx
        .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = r
        .ctx
        .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;

    // CUDA-graph replay.
    let graph = crate::graph::capture(&r.stream, &mut || {
        for _ in 0..k {
            enqueue(r, d_in, d_out, algo)?;
        }
        Ok(())
    })?;
    for _ in 0..3 {
        graph.launch()?;
    }
    r.stream.synchronize()?;
    let mut samples = Vec::with_capacity(args.repeats);
    for _ in 0..args.repeats {
        align(r, &tiny.0, &mut tiny.1)?;
        start.record(&r.stream)?;
        graph.launch()?;
        end.record(&r.stream)?;
        end.synchronize()?;
        samples.push(start.elapsed_ms(&end)? as f64 * 1000.0 / k as f64);
    }
    let graph_us = median(samples).context("no timed repeats")?;
    drop(graph);

    // Eager: the same calls launched one by one from the host.
    let (mut eager_us, mut eager_host_us) = (None, None);
    if !args.graph_only {
        for _ in 0..3 {
            enqueue(r, d_in, d_out, algo)?;
        }
        r.stream.synchronize()?;
        let mut dev = Vec::with_capacity(args.repeats);
        let mut host = Vec::with_capacity(args.repeats);
        for _ in 0..args.repeats {
            align(r, &tiny.0, &mut tiny.1)?;
            start.record(&r.stream)?;
            let t = Instant::now();
            for _ in 0..k {
                enqueue(r, d_in, d_out, algo)?;
            }
            host.push(t.elapsed().as_secs_f64() * 1e6 / k as f64);
            end.record(&r.stream)?;
            end.synchronize()?;
            dev.push(start.elapsed_ms(&end)? as f64 * 1000.0 / k as f64);
        }
        eager_us = median(dev);
        eager_host_us = median(host);
    }
    Ok(Measured {
        graph_us,
        eager_us,
        eager_host_us,
    })
}

/// The collective `bench` times.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    AllReduce,
    ReduceScatter,
    AllGather,
}

impl Collective {
    /// The reduce-scatter or all-gather, if it is one of them.
    pub fn scatter_gather(self) -> Option<intranode::internals::ScatterGather> {
        use intranode::internals::ScatterGather;
        match self {
            Collective::AllReduce => None,
            Collective::ReduceScatter => Some(ScatterGather::ReduceScatter),
            Collective::AllGather => Some(ScatterGather::AllGather),
        }
    }
}

/// The algorithms to time (`None`: auto), in table order.
pub(crate) fn algos(r: &Rank, args: &BenchArgs) -> Vec<Option<AllReduceAlgo>> {
    let mut algos = r.algos();
    if !args.algos.is_empty() {
        algos.retain(|a| {
            let name = a.map_or("auto", AllReduceAlgo::name);
            args.algos.iter().any(|x| x == name)
        });
    }
    algos
}

/// The lined-up sweep (`--aligned`); the free-running one is
/// `bench_free::run`, which builds on this module's sizes, algorithms and
/// calls (`main.rs` picks).
pub fn run_aligned(args: &BenchArgs) -> Result<()> {
    check_args(args)?;
    aligned(args)
}

/// The combinations of switches the sweeps do not have, refused before
/// any GPU work.
pub(crate) fn check_args(args: &BenchArgs) -> Result<()> {
    if args.aligned && args.collective != Collective::AllReduce {
        anyhow::bail!("--aligned times the all-reduce only");
    }
    let bf16_sum = args.dtype == Dtype::Bf16 && args.op == Op::Sum;
    if !bf16_sum && (args.aligned || args.collective != Collective::AllReduce) {
        anyhow::bail!(
            "--dtype and --op choose the free-running all-reduce sweep's type and op; \
             --aligned and --collective reduce-scatter/all-gather time bf16 sums only"
        );
    }
    if args.aligned && args.symmetric {
        anyhow::bail!("--symmetric runs free-running only (drop --aligned)");
    }
    if args.symmetric && args.collective != Collective::AllReduce {
        anyhow::bail!("--symmetric times the all-reduce only");
    }
    if args.nccl_symmetric && (args.aligned || args.collective != Collective::AllReduce) {
        anyhow::bail!(
            "--nccl-symmetric adds a row to the free-running all-reduce sweep; it takes neither \
             --aligned nor --collective reduce-scatter/all-gather"
        );
    }
    if args.op == Op::Avg && !args.dtype.is_float() {
        anyhow::bail!(
            "--op avg: only floating-point types are averaged here (NCCL's integer \
             average truncates, which this benchmark does not check)"
        );
    }
    let ours = args.dtype.ours() && args.op.ours();
    if !ours && args.tune.is_some() {
        anyhow::bail!(
            "--tune: {} {} runs on NCCL only, so there is no crossover to measure",
            args.dtype.name(),
            args.op.name()
        );
    }
    if let Some(a) = args
        .algos
        .iter()
        .find(|a| !ours && !matches!(a.as_str(), "nccl" | "auto"))
    {
        anyhow::bail!(
            "--algos {a}: {} {} is reduced by NCCL only (nccl and auto time it)",
            args.dtype.name(),
            args.op.name()
        );
    }
    Ok(())
}

fn aligned(args: &BenchArgs) -> Result<()> {
    let Some(mut r) = Rank::setup("intranode-bench bench")? else {
        return Ok(());
    };
    let world = r.world();
    let seed = 0xBE7C_u64;
    let algos = algos(&r, args);
    let mut tiny = (
        r.stream.clone_htod(&[bf16::ONE])?,
        r.stream.clone_htod(&[bf16::ZERO])?,
    );
    let mut rows: Vec<Row> = Vec::new();
    let sizes = sizes(args);
    let mut progress = Progress::new(
        "intranode-bench bench",
        sizes.len() * algos.len(),
        r.rank() == 0,
    );
    for (si, bytes) in sizes.into_iter().enumerate() {
        let elems = bytes / 2;
        let call = si as u64;
        let d_in = r
            .stream
            .clone_htod(&data::inputs::<bf16>(seed, call, r.rank(), elems))?;
        for &algo in &algos {
            let mut d_out = r.stream.clone_htod(&vec![data::poison::<bf16>(); elems])?;
            let m = measure(&mut r, args, &d_in, &mut d_out, algo, &mut tiny)?;
            let out = r.stream.clone_dtoh(&d_out)?;
            r.stream.synchronize()?;
            let name = algo.map_or("auto", AllReduceAlgo::name);
            data::verify(&out, seed, call, world, ReduceOp::Sum).map_err(|e| {
                anyhow::anyhow!(
                    "rank {}: {name} at {bytes} bytes gave a wrong result: {e}",
                    r.rank()
                )
            })?;
            // The slowest rank's median is the collective's time.
            let all = r.all_gather(&(m.graph_us, m.eager_us, m.eager_host_us))?;
            let graph_us = all.iter().map(|a| a.0).fold(0.0, f64::max);
            let eager_us = m
                .eager_us
                .map(|_| all.iter().filter_map(|a| a.1).fold(0.0, f64::max));
            let eager_host_us = m
                .eager_host_us
                .map(|_| all.iter().filter_map(|a| a.2).fold(0.0, f64::max));
            let chosen = r
                .comm
                .algo_for::<bf16>(elems, &cudarc::nccl::ReduceOp::Sum)
                .name()
                .to_owned();
            rows.push(Row {
                world,
                bytes,
                algo: name.to_owned(),
                chosen: if algo.is_none() {
                    chosen
                } else {
                    name.to_owned()
                },
                graph_us,
                eager_us,
                eager_host_us,
                busbw_gbps: crate::results::busbw_gbps(world, bytes, graph_us),
                graph_vs_nccl: None,
                eager_vs_nccl: None,
                wrong: 0,
                free: Vec::new(),
            });
            progress.step(&format!("{} {name}", fmt_bytes(bytes)));
        }
        crate::results::fill_nccl_ratios(&mut rows, bytes);
    }
    progress.finish();
    if r.rank() == 0 {
        print_table(&rows);
        finish(args, BenchFile::new(world, r.ctx.name().ok(), "bf16", rows))?;
    }
    Ok(())
}

/// Rank 0's end of a run: the auto check, the files, the crossovers.
pub(crate) fn finish(args: &BenchArgs, file: BenchFile) -> Result<()> {
    let world = file.world;
    print!("{}", file.auto_check_table());
    let json = write_files(&file, &args.out)?;
    println!("results: {} (and .csv, .png)", json.display());
    let Some(path) = &args.tune else {
        return Ok(());
    };
    if file.collective != "all-reduce" {
        let x = crate::tune::tune_scatter_gather(&file.rows, world, path)?;
        std::fs::write(path, serde_json::to_string_pretty(&x)?)?;
        println!(
            "crossovers for world {world} ({}; shared by the reduce-scatter and the all-gather): \
             ours up to {} bytes, the push form from {} bytes -> {}",
            file.collective,
            x.scatter_gather_max_bytes[world],
            x.scatter_gather_push_min_bytes[world],
            path.display()
        );
        return Ok(());
    }
    let x = crate::tune::tune(&file.rows, world, path)?;
    std::fs::write(path, serde_json::to_string_pretty(&x)?)?;
    println!(
        "crossovers for world {world}: lamport up to {} bytes, lamport-two-shot up to {} bytes, one-shot up to {} bytes, two-shot up to {} bytes -> {}",
        x.lamport_max_bytes[world],
        x.lamport_two_shot_max_bytes[world],
        x.one_shot_max_bytes[world],
        x.two_shot_max_bytes[world],
        path.display()
    );
    Ok(())
}

/// Writes `bench_w{world}.json`, `.csv` and `.png` under `out`; returns
/// the JSON file's path.
pub(crate) fn write_files(file: &BenchFile, out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let stem = out.join(format!("bench_w{}", file.world));
    let json = stem.with_extension("json");
    std::fs::write(&json, serde_json::to_string_pretty(file)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let csv_path = stem.with_extension("csv");
    std::fs::File::create(&csv_path)
        .map_err(csv::Error::from)
        .and_then(|f| file.write_csv(f))
        .with_context(|| format!("writing {}", csv_path.display()))?;
    let png_path = stem.with_extension("png");
    let png = crate::plot::render_png(std::slice::from_ref(file), None)?;
    std::fs::write(&png_path, png).with_context(|| format!("writing {}", png_path.display()))?;
    Ok(json)
}

pub(crate) fn print_table(rows: &[Row]) {
    println!(
        "{:>10} {:>9} {:>9} {:>10} {:>8} {:>10} {:>8} {:>9} {:>9}",
        "bytes", "algo", "chosen", "graph_us", "x_nccl", "eager_us", "x_nccl", "host_us", "busbw"
    );
    for r in rows {
        println!(
            "{:>10} {:>9} {:>9} {:>10.2} {:>8} {:>10} {:>8} {:>9} {:>9.1}",
            r.bytes,
            r.algo,
            r.chosen,
            r.graph_us,
            r.graph_vs_nccl.map_or("-".into(), |v| format!("{v:.2}")),
            r.eager_us.map_or("-".into(), |v| format!("{v:.2}")),
            r.eager_vs_nccl.map_or("-".into(), |v| format!("{v:.2}")),
            r.eager_host_us.map_or("-".into(), |v| format!("{v:.2}")),
            r.busbw_gbps
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{load, tests::row};

    #[derive(clap::Parser)]
    struct Parsed {
        #[command(flatten)]
        args: BenchArgs,
    }

    /// `--nccl-symmetric` parses, and only the free-running all-reduce
    /// sweep takes it.
    #[test]
    fn nccl_symmetric_is_a_row_of_the_free_running_all_reduce() {
        use clap::Parser as _;
        let parsed = Parsed::try_parse_from(["bench", "--nccl-symmetric", "--algos", "nccl,auto"])
            .unwrap()
            .args;
        assert!(parsed.nccl_symmetric && !parsed.symmetric);
        assert!(check_args(&parsed).is_ok());
        assert!(
            !Parsed::try_parse_from(["bench"])
                .unwrap()
                .args
                .nccl_symmetric
        );
        assert!(!BenchArgs::demo().nccl_symmetric);
        let mut a = parsed.clone();
        a.aligned = true;
        assert!(check_args(&a).is_err());
        let mut a = parsed;
        a.collective = Collective::ReduceScatter;
        let e = check_args(&a).unwrap_err().to_string();
        assert!(e.contains("--nccl-symmetric"), "{e}");
    }

    /// What `bench` writes reads back, and the PNG is there.
    #[test]
    fn writes_json_csv_and_png() {
        let dir = std::env::temp_dir().join(format!("intranode-bench-{}", std::process::id()));
        let rows = vec![
            row(4, 1024, "nccl", 6.0),
            row(4, 1024, "auto", 4.2),
            row(4, 4096, "nccl", 6.5),
            row(4, 4096, "auto", 4.4),
        ];
        let file = BenchFile::new(4, Some("NVIDIA H200".into()), "bf16", rows);
        let json = write_files(&file, &dir).unwrap();
        assert_eq!(json, dir.join("bench_w4.json"));
        assert_eq!(load(&json).unwrap(), file);
        let csv = std::fs::read_to_string(dir.join("bench_w4.csv")).unwrap();
        assert_eq!(csv.lines().count(), 5);
        let png = std::fs::read(dir.join("bench_w4.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
