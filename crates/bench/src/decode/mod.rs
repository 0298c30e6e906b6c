//! `intranode-bench decode`: a Llama-shaped tensor-parallel decode layer
//! stack, the workload this library exists for.
//!
//! Each rank holds its shard of `--layers` layers (distinct random
//! weights, so the L2 cache keeps none between replays) and runs the
//! layer of `decode_step.py`, the PyTorch anchor it is compared with
//! (see `model.rs`): cuBLAS GEMMs (`blas.rs`), our RMSNorm,
//! residual and SiLU x mul kernels, and two all-reduces per layer. For
//! each model, batch and variant the whole step is captured into one CUDA
//! graph and replayed free-running (no host barrier between replays), an
//! event after each replay: time per layer is a replay's time over the
//! layers, as the anchor reports it. The anchor waits for each replay
//! before it launches the next, so its figures also hold the graph's
//! launch; these do not.
//!
//! Variants: `none` (no communication: the floor), `nccl`
//! (`ncclAllReduce` in place), `ours` (`Communicator::all_reduce_in_place`,
//! the algorithm it picks, then the residual + norm kernel) and `fused`
//! (`Communicator::all_reduce_residual_rmsnorm` with the fused path
//! forced: the all-reduce and the following residual norm in one launch
//! wherever the fused kernel can run, NOTE [fused norm] in
//! `kernels-gpu/src/fused_norm.rs`), and `fused-prefetch` (the same, its
//! kernel asking L2 for the next GEMM's weights while it waits, NOTE [l2
//! prefetch] there). Where launch overlap (PDL) lands,
//! the rows carry a `pdl` key for the on/off pair.
//!
//! `--check` (on by default) runs layer 0 op by op against host
//! references once per model, and after the timed replays compares every
//! variant's final residual stream with the NCCL variant's and across
//! ranks (`check.rs`).

mod blas;
mod check;
mod model;
mod report;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use cudarc::driver::sys::CUevent_flags;
use cudarc::nccl::ReduceOp;
use half::bf16;
use intranode::NormPath;
use intranode::kernels::TestKernelModule;
use intranode_store::StoreExchange;

use blas::Blas;
use check::FinalCheck;
use intranode_harness::Rank;
use intranode_harness::free::Dist;
use model::{Activations, Shape, Step, Weights};
use report::{DecodeFile, Row};

/// What carries the two all-reduces of each layer.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// No communication: each rank keeps its partial sums (the floor).
    None,
    /// `ncclAllReduce` in place.
    Nccl,
    /// `Communicator::all_reduce_in_place`, the algorithm it picks, then
    /// the residual + norm kernel.
    Ours,
    /// `Communicator::all_reduce_residual_rmsnorm`, fused path forced:
    /// one launch for the all-reduce, residual add and norm wherever the
    /// fused kernel can run (else as `ours`).
    Fused,
    /// `fused`, through `Communicator::all_reduce_residual_rmsnorm_prefetch`:
    /// while it waits, the fused kernel asks L2 for the next GEMM's weights
    /// (gate-up after the first tail, the next layer's QKV after the
    /// second; NOTE [l2 prefetch] in `kernels-gpu/src/fused_norm.rs`).
    FusedPrefetch,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::Nccl => "nccl",
            Variant::Ours => "ours",
            Variant::Fused => "fused",
            Variant::FusedPrefetch => "fused-prefetch",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct DecodeArgs {
    /// Model shapes (llama3-8b, llama3-70b).
    #[arg(long, value_delimiter = ',', default_value = "llama3-8b,llama3-70b")]
    pub models: Vec<String>,
    /// Batch sizes (tokens decoded at once).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    pub batches: Vec<usize>,
    /// Layers in each CUDA graph.
    #[arg(long, default_value_t = 8)]
    pub layers: usize,
    /// What carries the all-reduces; `nccl` is skipped, with a note, where
    /// NCCL cannot run (ranks sharing a GPU).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "none,nccl,ours,fused"
    )]
    pub variants: Vec<Variant>,
    /// Timed replays of each graph (the median, p99 and max are over them).
    #[arg(long, default_value_t = 100)]
    pub replays: usize,
    /// Directory for `decode_w<world>.json` and `.md`.
    #[arg(long, default_value = "decode-out")]
    pub out: PathBuf,
    /// Check the ops against host references and every variant's output
    /// against NCCL's and across ranks (`--check false` to skip).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub check: bool,
    /// Keep cudarc's event tracking on (its default once a context has two
    /// streams), as applications run; the graphs are the same (the
    /// communicator takes every buffer, NCCL's included, through
    /// `CallBuffers`: NOTE [nccl under capture] in
    /// `host/src/intra/tracked.rs`).
    #[arg(long)]
    pub cudarc_defaults: bool,
    /// Seed of the weights and inputs.
    #[arg(long, default_value_t = 0xDEC0DE)]
    pub seed: u64,
}

/// Eager steps before the capture: NCCL makes its connections at its
/// first call and cuBLAS loads its kernels at theirs, neither of which a
/// capture may hold.
const EAGER_STEPS: usize = 2;
/// Replays between the capture and the timed ones.
const WARMUP_REPLAYS: usize = 5;

pub fn run(args: &DecodeArgs) -> Result<()> {
    if args.layers == 0 || args.replays == 0 || args.batches.contains(&0) {
        bail!("--layers, --replays and every batch must be at least 1");
    }
    if args.batches.is_empty() || args.variants.is_empty() || args.models.is_empty() {
        bail!("nothing to run: give at least one model, batch and variant");
    }
    let shapes = args
        .models
        .iter()
        .map(|m| Shape::by_name(m))
        .collect::<Result<Vec<_>>>()?;
    let Some(r) = Rank::setup_with("intranode-bench decode", args.cudarc_defaults)? else {
        return Ok(());
    };
    let (me, world) = (r.rank(), r.world());
    let mut exchange = StoreExchange::new("intranode/decode");
    let kernels =
        TestKernelModule::load(&r.ctx).context("loading the test kernels (the random fill)")?;
    let blas = Blas::new(&r.stream).with_context(|| format!("rank {me}: cuBLAS"))?;
    let mut notes = Vec::new();
    let mut variants = args.variants.clone();
    if let (Err(why), true) = (r.comm.nccl(), variants.contains(&Variant::Nccl)) {
        notes.push(format!("nccl: skipped: NCCL cannot run here ({why})"));
        variants.retain(|&v| v != Variant::Nccl);
    }
    if (variants.contains(&Variant::Ours)
        || variants.contains(&Variant::Fused)
        || variants.contains(&Variant::FusedPrefetch))
        && !r.has_intra_path()
    {
        notes.push(format!(
            "ours, fused: no intra-node path ({}), so the communicator sends every all-reduce to NCCL, unfused",
            r.comm.intra_reason().unwrap_or("unknown")
        ));
    }
    let gpu = r.ctx.name().unwrap_or_else(|_| "unknown GPU".into());
    if me == 0 {
        for n in &notes {
            println!("decode: {n}");
        }
    }

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for shape in &shapes {
        let shard = shape.shard(world)?;
        let weights = Weights::new(&r, &kernels, shard, args.layers, args.seed)
            .with_context(|| format!("rank {me}: {} weights", shape.name))?;
        for (bi, &batch) in args.batches.iter().enumerate() {
            let mut acts = Activations::new(&r, &kernels, &shard, batch, args.seed)?;
            if args.check && bi == 0 {
                let step = Step {
                    r: &r,
                    blas: &blas,
                    weights: &weights,
                    variant: Variant::None,
                };
                let line = check::check_ops(&step, &mut acts, args.seed)
                    .with_context(|| format!("rank {me}: {} batch {batch}", shape.name))?;
                if me == 0 {
                    println!("decode: {} batch {batch}: {line}", shape.name);
                }
            }
            let mut finals: Vec<(Variant, Vec<bf16>, Vec<f64>)> = Vec::new();
            for &variant in &variants {
                let step = Step {
                    r: &r,
                    blas: &blas,
                    weights: &weights,
                    variant,
                };
                let us =
                    measure(&step, &mut acts, &mut exchange, args.replays).with_context(|| {
                        format!("rank {me}: {} batch {batch} {}", shape.name, variant.name())
                    })?;
                let x = r.stream.clone_dtoh(&acts.x)?;
                r.stream.synchronize()?;
                finals.push((variant, x, us));
            }
            let nccl_x = finals
                .iter()
                .find(|f| f.0 == Variant::Nccl)
                .map(|f| f.1.clone());
            for (variant, x, us) in finals {
                let mine = (Dist::of(us), FinalCheck::of(&x, nccl_x.as_deref()));
                let all: Vec<(Option<Dist>, FinalCheck)> =
                    exchange.all_gather(r.store.as_ref(), me, world, &mine)?;
                let dists: Vec<Dist> = all.iter().filter_map(|a| a.0).collect();
                let per_layer = Dist::worst(&dists).context("no timings")?;
                let checks: Vec<FinalCheck> = all.iter().map(|a| a.1).collect();
                let must_match = variant != Variant::None || world == 1;
                let check = if !args.check {
                    "not checked".to_owned()
                } else {
                    match check::verdict(&checks, must_match) {
                        Ok(line) => line,
                        Err(e) => {
                            failures.push(format!(
                                "{} batch {batch} {}: {e}",
                                shape.name,
                                variant.name()
                            ));
                            format!("FAILED: {e}")
                        }
                    }
                };
                let algo = match variant {
                    Variant::None => "-".to_owned(),
                    Variant::Nccl => "nccl".to_owned(),
                    Variant::Ours => r
                        .comm
                        .algo_for::<bf16>(batch * shape.hidden, &ReduceOp::Sum)
                        .name()
                        .to_owned(),
                    Variant::Fused | Variant::FusedPrefetch => {
                        match r.comm.norm_path_for::<bf16>(
                            batch,
                            shape.hidden,
                            Some(NormPath::Fused),
                        ) {
                            NormPath::Fused => "fused lamport".to_owned(),
                            NormPath::Unfused => format!(
                                "unfused {}",
                                r.comm
                                    .algo_for::<bf16>(batch * shape.hidden, &ReduceOp::Sum)
                                    .name()
                            ),
                            other => format!("{other:?}"),
                        }
                    }
                };
                if me == 0 {
                    println!(
                        "decode: {} batch {batch} {} ({algo}): {:.1} us/layer (p99 {:.1}, max {:.1}); {check}",
                        shape.name,
                        variant.name(),
                        per_layer.median_us,
                        per_layer.p99_us,
                        per_layer.max_us
                    );
                }
                rows.push(Row {
                    model: shape.name.to_owned(),
                    batch,
                    variant: variant.name().to_owned(),
                    pdl: false,
                    algo,
                    model_us_per_token: per_layer.median_us * shape.model_layers as f64,
                    per_layer,
                    overhead_us: None,
                    overhead_vs_nccl: None,
                    check,
                });
            }
        }
    }
    report::fill_overheads(&mut rows);
    if me == 0 {
        let file = DecodeFile {
            world,
            gpu,
            layers: args.layers,
            replays: args.replays,
            cudarc_tracking: args.cudarc_defaults,
            notes,
            rows,
        };
        write(&args.out, &file)?;
    }
    if !failures.is_empty() {
        bail!(
            "rank {me}: {} check(s) failed:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    Ok(())
}

/// Captures the step into a graph and returns the time per layer (us) of
/// each of `replays` free-running replays; the last replay's output stays
/// in `acts`.
fn measure(
    step: &Step,
    acts: &mut Activations,
    exchange: &mut StoreExchange,
    replays: usize,
) -> Result<Vec<f64>> {
    let r = step.r;
    for _ in 0..EAGER_STEPS {
        step.enqueue(acts)?;
    }
    r.comm.synchronize()?;
    let graph = crate::graph::capture(&r.stream, &mut || step.enqueue(acts))?;
    for _ in 0..WARMUP_REPLAYS {
        graph.launch()?;
    }
    r.stream.synchronize()?;
    r.comm.check()?;
    // Start the timed replays together; from here the ranks run free.
    exchange.all_gather(r.store.as_ref(), r.rank(), r.world(), &0u8)?;
    let events = (0..=replays)
        .map(|_| r.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))
        .collect::<Result<Vec<_>, _>>()?;
    events[0].record(&r.stream)?;
    for e in &events[1..] {
        graph.launch()?;
        e.record(&r.stream)?;
    }
    events[replays].synchronize()?;
    r.comm.check()?;
    let layers = step.weights.layers.len() as f64;
    events
        .windows(2)
        .map(|w| Ok(w[0].elapsed_ms(&w[1])? as f64 * 1000.0 / layers))
        .collect()
}

fn write(out: &std::path::Path, file: &DecodeFile) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = out.join(format!("decode_w{}.json", file.world));
    std::fs::write(&json, serde_json::to_string_pretty(file)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let md_path = out.join(format!("decode_w{}.md", file.world));
    let md = report::markdown(file);
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    println!(
        "\n{md}\ndecode: wrote {} and {}",
        json.display(),
        md_path.display()
    );
    Ok(())
}
