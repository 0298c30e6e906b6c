//! The GPU correctness suite (issue: all-reduce correctness on GPUs).

use std::sync::Arc;

use anyhow::{Result, bail};
use cudarc::driver::{CudaSlice, CudaStream};
use cudarc::nccl::NcclType;
use half::{bf16, f16};
use intranode::AllReduceAlgo;
use intranode::kernels::DType;
use intranode::types::ReduceOp;
use intranode_harness::data;
use intranode_harness::progress::Progress;
use intranode_harness::rank::Rank;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Back-to-back calls of mixed sizes, types, ops and algorithms.
    #[arg(long, default_value_t = 10_000)]
    pub stress_calls: usize,
    /// Replays of the captured graph of 10 all-reduces.
    #[arg(long, default_value_t = 1000)]
    pub graph_replays: usize,
    /// Replays of each free-running stress graph (16 back-to-back calls
    /// with skew, per algorithm and size class; 0 skips them).
    #[arg(long, default_value_t = 50)]
    pub free_replays: usize,
    /// Run only the free-running stresses.
    #[arg(long)]
    pub only_free: bool,
    /// Rounds of the hog stage per form (eager, then as many graph
    /// replays): every call started while a kernel on another stream holds
    /// the SMs (0 skips the stage).
    #[arg(long, default_value_t = 20)]
    pub hog_rounds: usize,
    /// How long the hog holds the SMs, in microseconds (each rank's hog
    /// lasts 1 to 2 times this).
    #[arg(long, default_value_t = 2000)]
    pub hog_us: u64,
    /// Run only the hog stage.
    #[arg(long)]
    pub only_hog: bool,
    /// Run only the back-to-back calls of mixed sizes, types, ops and
    /// algorithms (`--stress-calls`, then 60 of up to four buffers), in
    /// batches of 50 with no host step between calls, every call checked.
    #[arg(long)]
    pub only_stress: bool,
    /// Run only the replays of the captured graph of 10 all-reduces
    /// (`--graph-replays`).
    #[arg(long)]
    pub only_graph: bool,
    /// Run only the reduce-scatter and all-gather checks.
    #[arg(long)]
    pub only_scatter_gather: bool,
    /// Run only the all-reduce + residual + RMSNorm checks.
    #[arg(long)]
    pub only_norm: bool,
    /// Run only the element-type checks (every `NcclType` through every
    /// collective: ours or NCCL as the communicator decides).
    #[arg(long)]
    pub only_types: bool,
    /// Run only the checks of symmetric buffers users allocate
    /// (`alloc_symmetric`; `--algos` narrows them too).
    #[arg(long)]
    pub only_symmetric: bool,
    /// Run only the GPU barriers, then the one a rank never joins (the
    /// full check's last stage; it leaves the communicator unusable).
    #[arg(long)]
    pub only_barriers: bool,
    /// Seed of every input (all ranks must agree).
    #[arg(long, default_value_t = 0x1234_5678)]
    pub seed: u64,
    /// Only these all-reduce algorithms in the sweep, the back-to-back
    /// calls, the graph and the free-running stresses (names as
    /// `INTRANODE_ALL_REDUCE_ALGO`, and `auto`; default every one the
    /// group can run), for a quick check of one form.
    #[arg(long, value_delimiter = ',')]
    pub algos: Vec<String>,
    /// Fail unless every form of ours is checked: the intra-node path up,
    /// every all-reduce form in the sweep (HCM included, so a world of 4,
    /// 6 or 8), reduce-scatter and all-gather forced onto ours, the fused
    /// norm kernel; the summary names the forms and the GPU of each rank
    /// (for a world of 8 on 4 GPUs, two ranks per GPU).
    #[arg(
        long,
        conflicts_with_all = ["algos", "only_free", "only_hog", "only_stress", "only_graph", "only_norm", "only_scatter_gather", "only_types", "only_symmetric", "only_barriers"]
    )]
    pub require_forms: bool,
}

/// Every all-reduce form of ours (`AllReduceAlgo` less NCCL; the enum is
/// non-exhaustive, so a new form must be added here by hand).
const FORMS: [AllReduceAlgo; 6] = [
    AllReduceAlgo::Lamport,
    AllReduceAlgo::LamportTwoShot,
    AllReduceAlgo::OneShot,
    AllReduceAlgo::TwoShot,
    AllReduceAlgo::Push,
    AllReduceAlgo::Hcm,
];

/// For `--require-forms`: an error naming what this group cannot check
/// (no intra-node path, a form it cannot run), before any call; else the
/// summary's description of the group (every rank's GPU, gathered).
fn require_forms(r: &mut Rank, algos: &[Option<AllReduceAlgo>]) -> Result<String> {
    let Some(intra) = r.comm.intra() else {
        bail!(
            "rank {}: --require-forms: no intra-node path ({})",
            r.rank(),
            r.comm.intra_reason().unwrap_or("?")
        );
    };
    let topology = r.comm.topology();
    let missing: Vec<&str> = FORMS
        .iter()
        .filter(|f| !algos.contains(&Some(**f)))
        .map(|f| f.name())
        .collect();
    if !missing.is_empty() {
        bail!(
            "rank {}: --require-forms: this group ({} ranks, {topology:?}) cannot run {}{}",
            r.rank(),
            r.world(),
            missing.join(", "),
            match intra.hcm_plan() {
                Err(why) if missing.contains(&"hcm") => format!(" (hcm: {why})"),
                _ => String::new(),
            }
        );
    }
    let device = r.comm.ordinal();
    let devices: Vec<usize> = r.all_gather(&device)?;
    let mut distinct = devices.clone();
    distinct.sort_unstable();
    distinct.dedup();
    Ok(format!(
        "world {} on {} GPU(s) (rank -> GPU {devices:?}), {topology:?}",
        r.world(),
        distinct.len()
    ))
}

/// The algorithms `args` asks for, of those the group can run (`None`:
/// auto); an error naming a requested one it cannot run.
fn algos(r: &Rank, args: &CheckArgs) -> Result<Vec<Option<AllReduceAlgo>>> {
    let all = r.algos();
    if args.algos.is_empty() {
        return Ok(all);
    }
    let name = |a: &Option<AllReduceAlgo>| a.map_or("auto", AllReduceAlgo::name);
    if let Some(unknown) = args
        .algos
        .iter()
        .find(|x| !all.iter().any(|a| name(a) == x.as_str()))
    {
        bail!(
            "--algos {unknown}: not one this group runs ({})",
            all.iter().map(name).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(all
        .into_iter()
        .filter(|a| args.algos.iter().any(|x| x == name(a)))
        .collect())
}

/// One checked call: upload fresh inputs, poison the output (or reduce
/// the input in place), reduce, compare with the f64 reference and across
/// ranks.
struct Case {
    algo: AllReduceAlgo,
    op: ReduceOp,
    elems: usize,
    call: u64,
    in_place: bool,
}

pub(crate) fn upload<T: DType>(stream: &Arc<CudaStream>, host: &[T]) -> Result<CudaSlice<T>> {
    Ok(stream.clone_htod(host)?)
}

fn run_case<T: DType + NcclType>(r: &mut Rank, seed: u64, case: &Case, auto: bool) -> Result<u64> {
    let input = data::inputs::<T>(seed, case.call, r.rank(), case.elems);
    let algo = (!auto).then_some(case.algo);
    let out = if case.in_place {
        let mut d_buf = upload(&r.stream, &input)?;
        r.all_reduce_in_place(&mut d_buf, case.op, algo)?;
        r.stream.clone_dtoh(&d_buf)?
    } else {
        let d_in = upload(&r.stream, &input)?;
        let mut d_out = upload(&r.stream, &vec![data::poison::<T>(); case.elems])?;
        r.all_reduce(&d_in, &mut d_out, case.op, algo)?;
        r.stream.clone_dtoh(&d_out)?
    };
    r.stream.synchronize()?;
    data::verify(&out, seed, case.call, r.world(), case.op).map_err(|e| {
        anyhow::anyhow!(
            "rank {}: {} n={}{}: {e}",
            r.rank(),
            if auto { "auto" } else { case.algo.name() },
            case.elems,
            if case.in_place { " in place" } else { "" }
        )
    })?;
    Ok(data::fingerprint(&out))
}

/// Lengths of the sweep: tiny, odd, around a vector, and at and past one
/// symmetric buffer of `buffer_elems`.
fn sweep_lengths(buffer_elems: usize, lamport_elems: usize) -> [usize; 9] {
    [
        1,
        7,
        8,
        4095,
        4096,
        (1 << 20) + 3,
        buffer_elems,
        buffer_elems + 5,
        lamport_elems,
    ]
}

/// Cases of one element type's sweep.
fn sweep_cases(algos: &[Option<AllReduceAlgo>]) -> usize {
    algos.len() * ReduceOp::ALL.len() * sweep_lengths(0, 0).len()
}

/// Every algorithm x op x length, out of place and in place by turns (an
/// odd sum of the op's and the length's indices runs in place), so every
/// algorithm runs both ways at every length and with every op, for every
/// element type.
fn sweep<T: DType + NcclType>(
    r: &mut Rank,
    args: &CheckArgs,
    algos: &[Option<AllReduceAlgo>],
    call: &mut u64,
    progress: &mut Progress,
) -> Result<usize> {
    let buffer_elems = r
        .comm
        .intra()
        .map_or(5 << 20, |c| c.buffer_bytes() / T::ELEM.bytes());
    // The largest message of the Lamport two-shot: the fullest its
    // buffers get, several vectors per thread.
    let lamport_elems =
        intranode::internals::lamport_two_shot_max_message_bytes(r.world()) / T::ELEM.bytes();
    let lengths = sweep_lengths(buffer_elems, lamport_elems);
    let mut cases = 0;
    for &algo in algos {
        for (oi, op) in ReduceOp::ALL.into_iter().enumerate() {
            for (li, &elems) in lengths.iter().enumerate() {
                *call += 1;
                let case = Case {
                    algo: algo.unwrap_or(AllReduceAlgo::Nccl),
                    op,
                    elems,
                    call: *call,
                    in_place: (oi + li) % 2 == 1,
                };
                let fp = run_case::<T>(r, args.seed, &case, algo.is_none())?;
                let all = r.all_gather(&fp)?;
                let how = if case.in_place { " in place" } else { "" };
                if all.iter().any(|&f| f != fp) {
                    bail!(
                        "{:?} {op:?} n={elems}{how} {}: outputs differ between ranks (fingerprints {all:x?})",
                        T::ELEM,
                        algo.map_or("auto", AllReduceAlgo::name)
                    );
                }
                cases += 1;
                progress.step(&format!(
                    "{:?} {op:?} n={elems}{how} {}",
                    T::ELEM,
                    algo.map_or("auto", AllReduceAlgo::name)
                ));
            }
        }
    }
    Ok(cases)
}

/// Back-to-back calls without synchronizing in between, then a check of
/// every one: catches barrier and double-buffering races.
#[allow(clippy::too_many_arguments)]
fn stress<T: DType + NcclType>(
    r: &mut Rank,
    args: &CheckArgs,
    choices: &[Option<AllReduceAlgo>],
    calls: usize,
    max_elems: usize,
    call: &mut u64,
    rng: &mut u64,
) -> Result<()> {
    const BATCH: usize = 50;
    let mut remaining = calls;
    while remaining > 0 {
        let n_batch = remaining.min(BATCH);
        let mut pending = Vec::with_capacity(n_batch);
        for _ in 0..n_batch {
            *rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = *rng >> 16;
            let elems = 1 + (x as usize % max_elems);
            let op = ReduceOp::ALL[(x >> 20) as usize % 4];
            let algo = choices[(x >> 24) as usize % choices.len()];
            *call += 1;
            let input = data::inputs::<T>(args.seed, *call, r.rank(), elems);
            let d_in = upload(&r.stream, &input)?;
            let mut d_out = upload(&r.stream, &vec![data::poison::<T>(); elems])?;
            r.all_reduce(&d_in, &mut d_out, op, algo)?;
            pending.push((d_in, d_out, op, *call, algo));
        }
        r.stream.synchronize()?;
        for (_, d_out, op, c, algo) in &pending {
            let out = r.stream.clone_dtoh(d_out)?;
            data::verify(&out, args.seed, *c, r.world(), *op).map_err(|e| {
                anyhow::anyhow!(
                    "stress call {c} ({}): {e}",
                    algo.map_or("auto", AllReduceAlgo::name)
                )
            })?;
        }
        remaining -= n_batch;
    }
    Ok(())
}

/// The back-to-back stage: `--stress-calls` calls of up to 70000
/// elements over the three types, then 60 bf16 calls of up to four
/// symmetric buffers (returned: their largest length), where every call
/// runs several chunks in one launch and a block running ahead of its
/// peers would show any reuse race.
fn stress_all(
    r: &mut Rank,
    args: &CheckArgs,
    algos: &[Option<AllReduceAlgo>],
    call: &mut u64,
    rng: &mut u64,
) -> Result<usize> {
    let per_type = args.stress_calls / 3;
    stress::<bf16>(r, args, algos, per_type, 70_000, call, rng)?;
    stress::<f16>(r, args, algos, per_type, 70_000, call, rng)?;
    let rest = args.stress_calls - 2 * per_type;
    stress::<f32>(r, args, algos, rest, 70_000, call, rng)?;
    let big = r.comm.intra().map_or(5 << 20, |c| c.buffer_bytes() / 2) * 4;
    stress::<bf16>(r, args, algos, 60, big, call, rng)?;
    Ok(big)
}

/// The hog stage's summary line.
fn hog_line(h: &crate::check_hog::Report, hog_us: u64) -> String {
    format!(
        "{} eager calls and {} graph replays of 3 all-reduces, each started while a {hog_us}-us hog on another stream held the SMs, every element checked",
        h.eager_calls, h.graph_replays
    )
}

/// The symmetric checks' summary line.
fn symm_line(s: &crate::check_symm::SymmReport, took: std::time::Duration) -> String {
    format!(
        "{} all-reduces on symmetric buffers (every algorithm, type, op, in place and out of place, views at aligned and unaligned offsets, back to back, {} CUDA-graph replays), {} of them reading the peers' inputs in place, every element against the f64 reference, bitwise identical across ranks; lengths that differ across ranks refused on every rank ({:.1} s)",
        s.calls,
        s.replays,
        s.in_place_reads,
        took.as_secs_f64()
    )
}

/// Runs one stage alone (an `--only-*` flag) and prints its line: what
/// `stage` says it checked, and how long it took.
fn only(r: &mut Rank, what: &str, stage: impl FnOnce(&mut Rank) -> Result<String>) -> Result<()> {
    let t0 = std::time::Instant::now();
    let checked = stage(r)?;
    println!(
        "check rank {}/{} ok ({what} only): {checked} ({:.1} s)",
        r.rank(),
        r.world(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn run(args: &CheckArgs) -> Result<()> {
    let Some(mut r) = Rank::setup("intranode-suite check")? else {
        return Ok(());
    };
    run_stages(&mut r, args).map_err(|e| with_gpu_report(&r, e))
}

/// `e`, with what the GPU reported first where it did: a wait of ours that
/// ran out (a peer that never came) leaves the call's output unfinished,
/// so a check that reads the output before the error word would report a
/// wrong value for what was a reported timeout.
fn with_gpu_report(r: &Rank, e: anyhow::Error) -> anyhow::Error {
    match r.comm.check() {
        Err(reported) => e.context(format!("the communicator had already reported: {reported}")),
        Ok(()) => e,
    }
}

/// The stages `args` selects, on rank `r`.
fn run_stages(r: &mut Rank, args: &CheckArgs) -> Result<()> {
    if r.rank() == 0 && intranode::kernels::schedule_fuzz() {
        println!(
            "check rank 0: the kernels carry the schedule fuzzer's delays (INTRANODE_SCHEDULE_FUZZ=1)"
        );
    }
    if let (0, Some(c)) = (r.rank(), r.comm.intra()) {
        let res = c.residency();
        println!(
            "check rank 0: {} rank(s) per GPU at most, {} SMs, at most {} blocks a launch",
            res.ranks_per_gpu,
            res.sms,
            match res.max_blocks() {
                usize::MAX => "any number of".to_owned(),
                n => n.to_string(),
            }
        );
    }
    if args.only_norm {
        return only(r, "all-reduce + residual + RMSNorm", |r| {
            let n = crate::check_norm::run(r, args.seed)?;
            Ok(format!(
                "{} calls ({} fused; {} CUDA-graph replays), every element against the f64 reference, bitwise identical across ranks",
                n.calls, n.fused, n.replays
            ))
        });
    }
    if args.only_types {
        return only(r, "element types", |r| {
            let (calls, how) = crate::check_types::run(r)?;
            Ok(format!("{calls} calls, {how}, every element checked"))
        });
    }
    if args.only_scatter_gather {
        return only(r, "reduce-scatter and all-gather", |r| {
            let cases = crate::check_sg::run(r, args.seed)?;
            Ok(format!("{cases} calls, every element checked"))
        });
    }
    let algos = algos(r, args)?;
    let forms = if args.require_forms {
        Some(require_forms(r, &algos)?)
    } else {
        None
    };
    if args.only_stress {
        return only(r, "back-to-back calls", |r| {
            let mut rng = args.seed;
            let big = stress_all(r, args, &algos, &mut 0u64, &mut rng)?;
            Ok(format!(
                "{} calls of up to 70000 elements and 60 of up to {big} bf16 elements ({}), every element checked",
                args.stress_calls,
                algos
                    .iter()
                    .map(|a| a.map_or("auto", AllReduceAlgo::name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        });
    }
    if args.only_graph {
        return only(r, "CUDA-graph replays", |r| {
            crate::check_graph::run::<bf16>(r, args, &algos, &mut 0u64)?;
            Ok(format!(
                "{} replays x 10 all-reduces, every result checked",
                args.graph_replays
            ))
        });
    }
    if args.only_symmetric {
        let t0 = std::time::Instant::now();
        let s = crate::check_symm::run(r, &algos, args.seed)?;
        println!(
            "check rank {}/{} ok (symmetric buffers only): {}",
            r.rank(),
            r.world(),
            symm_line(&s, t0.elapsed())
        );
        return Ok(());
    }
    if args.only_barriers {
        return only(r, "barriers", crate::check_barriers::run);
    }
    if args.only_hog {
        return only(r, "hog on another stream", |r| {
            let h = crate::check_hog::run(r, &algos, args.seed, args.hog_rounds, args.hog_us)?;
            Ok(hog_line(&h, args.hog_us))
        });
    }
    if args.only_free {
        return only(r, "free-running stress", |r| {
            let f = crate::check_free::run(r, &algos, args.seed, args.free_replays.max(1))?;
            Ok(format!(
                "{} configurations, {} calls back to back with skew checked exact on the GPU, {} timed: the slowest call {:.1} x its median (limit {} x)",
                f.configs,
                f.checked_calls,
                f.timed_calls,
                f.worst_ratio,
                crate::check_free::SLOW_FACTOR
            ))
        });
    }
    let mut call = 0u64;
    let t0 = std::time::Instant::now();
    let mut cases = 0;
    // Three element types below.
    let mut progress = Progress::new(
        "intranode-suite check sweep",
        3 * sweep_cases(&algos),
        r.rank() == 0,
    );
    cases += sweep::<bf16>(r, args, &algos, &mut call, &mut progress)?;
    cases += sweep::<f16>(r, args, &algos, &mut call, &mut progress)?;
    cases += sweep::<f32>(r, args, &algos, &mut call, &mut progress)?;
    progress.finish();
    let t_sweep = t0.elapsed();
    // Each stage starts with the ranks lined up on the host: the sweep's
    // host-side checks take each rank its own time (seconds on a loaded
    // machine), which the first call of the next stage would otherwise
    // spend inside a GPU wait, against the wait bound (seen with a 2 s
    // bound and two ranks sharing one GPU).
    r.store_barrier()?;
    let mut rng = args.seed;
    // A line as each stage passes, so a run cut short by a timeout shows
    // how far it got (the summary at the end restates them).
    println!(
        "check rank {}: sweep passed ({:.1} s)",
        r.rank(),
        t_sweep.as_secs_f64()
    );
    stress_all(r, args, &algos, &mut call, &mut rng)?;
    let t_stress = t0.elapsed() - t_sweep;
    println!(
        "check rank {}: back-to-back calls passed ({:.1} s)",
        r.rank(),
        t_stress.as_secs_f64()
    );
    r.store_barrier()?;
    crate::check_graph::run::<bf16>(r, args, &algos, &mut call)?;
    let t_graph = t0.elapsed() - t_sweep - t_stress;
    println!(
        "check rank {}: graph replays passed ({:.1} s)",
        r.rank(),
        t_graph.as_secs_f64()
    );
    if args.hog_rounds > 0 {
        r.store_barrier()?;
        let t_hog = std::time::Instant::now();
        let h = crate::check_hog::run(r, &algos, args.seed, args.hog_rounds, args.hog_us)?;
        println!(
            "check rank {}: {} ({:.1} s)",
            r.rank(),
            hog_line(&h, args.hog_us),
            t_hog.elapsed().as_secs_f64()
        );
    }
    r.store_barrier()?;
    let free_report = if args.free_replays > 0 {
        Some(crate::check_free::run(
            r,
            &algos,
            args.seed,
            args.free_replays,
        )?)
    } else {
        None
    };
    let t_free = t0.elapsed() - t_sweep - t_stress - t_graph;
    r.store_barrier()?;
    let n = crate::check_norm::run(r, args.seed)?;
    let norm_fused = n.fused;
    println!(
        "check rank {}: all-reduce + residual + RMSNorm: {} calls ({} fused; {} CUDA-graph replays; every type, hidden 777 to 16384, 1 to 64 rows, as decided and each path forced), every element against the f64 reference, bitwise identical across ranks",
        r.rank(),
        n.calls,
        n.fused,
        n.replays
    );
    r.store_barrier()?;
    let sg_cases = crate::check_sg::run(r, args.seed)?;
    println!(
        "check rank {}: reduce-scatter and all-gather: {sg_cases} calls (every type, op and shard length, ours forced and as decided), every element checked",
        r.rank()
    );
    r.store_barrier()?;
    let (type_calls, how) = crate::check_types::run(r)?;
    println!(
        "check rank {}: element types: {type_calls} calls, {how}, every element checked",
        r.rank()
    );
    let t_symm = std::time::Instant::now();
    let s = crate::check_symm::run(r, &algos, args.seed)?;
    println!(
        "check rank {}: symmetric buffers: {}",
        r.rank(),
        symm_line(&s, t_symm.elapsed())
    );
    let barrier_report = crate::check_barriers::run(r)?;
    let intra = match r.comm.intra_reason() {
        None => format!("intra-node {:?}", r.comm.topology()),
        Some(why) => format!("no intra-node path ({why})"),
    };
    println!(
        "check rank {}/{} ok: {intra}; {cases} sweep cases ({:.1} s), {} back-to-back calls ({:.1} s), {} graph replays x 10 all-reduces ({:.1} s), all bitwise identical across ranks and within tolerance of the f64 reference",
        r.rank(),
        r.world(),
        t_sweep.as_secs_f64(),
        args.stress_calls,
        t_stress.as_secs_f64(),
        args.graph_replays,
        t_graph.as_secs_f64()
    );
    if let Some(f) = free_report {
        println!(
            "check rank {}: free-running stress: {} configurations (algorithm x size class), {} calls back to back with skew checked exact on the GPU, {} timed: the slowest call {:.1} x its median (limit {} x) ({:.1} s)",
            r.rank(),
            f.configs,
            f.checked_calls,
            f.timed_calls,
            f.worst_ratio,
            crate::check_free::SLOW_FACTOR,
            t_free.as_secs_f64()
        );
    }
    println!("check rank {}: {barrier_report}", r.rank());
    if let Some(group) = forms {
        // Each part above fails the run on its own (the norm check when
        // the fused kernel never ran); reaching here is the pass.
        println!(
            "check rank {}: every form checked, {group}: all-reduce {} (sweep, back to back, graph{}, symmetric buffers), reduce-scatter and all-gather forced onto ours, fused all-reduce + residual + RMSNorm ({} fused calls)",
            r.rank(),
            FORMS.map(AllReduceAlgo::name).join(", "),
            if args.free_replays > 0 {
                ", free-running"
            } else {
                ""
            },
            norm_fused
        );
    }
    Ok(())
}
