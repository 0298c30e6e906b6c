//! Tensor-parallel Llama-shaped decode in candle, one process per GPU
//! under `intranode-run`, with the row-parallel all-reduce through
//! intranode or through cudarc's NCCL (`--backend`), and, with
//! intranode, also the fused form: each all-reduce, the residual add and
//! the next block's RMSNorm in one call. Checks the outputs first: against
//! a reference that rank 0 computes alone from every rank's shard, across
//! ranks (the replicated hidden states must be bitwise equal), and between
//! the back-ends. Then times decode in short windows in which every
//! back-end runs in turn, and prints each back-end's tokens per second and
//! its per-window ratio to NCCL with the spread of that ratio (`stats.rs`).
//!
//! ```sh
//! intranode-run --nproc-per-node 2 -- ./candle-tp --backend all
//! ```

mod model;
mod reduce;
mod stats;

use std::ffi::c_char;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use candle_core::{CudaDevice, DType, Device, Tensor};
use clap::{Parser, ValueEnum};
use cudarc::driver::CudaStream;
use cudarc::nccl::{Comm, Id, ReduceOp};
use half::bf16;
use intranode::Communicator;
use intranode::dist_env::DistEnv;
use intranode_store::{ClientConfig, Store, TcpStore};

use model::{Config, Replicated, Residual, Shard, Unfused};
use reduce::{AllReduce, Fused};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// intranode's all-reduce, then candle's residual add and RMSNorm.
    Intranode,
    /// intranode's all-reduce + residual add + RMSNorm in one call.
    Fused,
    /// cudarc's NCCL all-reduce, then candle's residual add and RMSNorm.
    Nccl,
    /// intranode and nccl, checked against each other and timed in turns.
    Both,
    /// intranode, fused and nccl.
    All,
}

impl BackendArg {
    fn includes(self, one: BackendArg) -> bool {
        self == one
            || self == BackendArg::All
            || (self == BackendArg::Both && matches!(one, BackendArg::Intranode | BackendArg::Nccl))
    }
}

/// What a step does between the blocks: one of the back-ends, or nothing
/// (the partials not summed: the steps' cost without communication).
#[derive(Clone, Copy)]
enum Mode<'a> {
    Unfused(&'a AllReduce),
    Fused(&'a Communicator, &'a CudaDevice),
    NoReduce,
}

impl<'a> Mode<'a> {
    fn name(&self) -> &'static str {
        match self {
            Mode::Unfused(b) => b.name(),
            Mode::Fused(..) => "intranode-fused",
            Mode::NoReduce => "none",
        }
    }

    fn residual(&self) -> Box<dyn Residual + 'a> {
        match *self {
            Mode::Unfused(b) => Box::new(Unfused::new(move |p| sum(p, b))),
            Mode::Fused(comm, device) => Box::new(Fused::new(comm, device.clone())),
            Mode::NoReduce => Box::new(Unfused::new(|p: Vec<Tensor>| {
                p.into_iter()
                    .next()
                    .ok_or_else(|| candle_core::Error::msg("no partial sum"))
            })),
        }
    }
}

#[derive(Debug, Parser)]
#[command(about = "Tensor-parallel Llama-shaped decode in candle: intranode against NCCL")]
struct Args {
    /// Who sums the row-parallel partials.
    #[arg(long, value_enum, default_value = "all")]
    backend: BackendArg,
    #[arg(long, default_value_t = 4096)]
    hidden: usize,
    #[arg(long, default_value_t = 14336)]
    intermediate: usize,
    #[arg(long, default_value_t = 8)]
    layers: usize,
    #[arg(long, default_value_t = 32)]
    heads: usize,
    #[arg(long, default_value_t = 8)]
    kv_heads: usize,
    /// Sequences decoded together (one token each per step).
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Positions in each layer's KV cache.
    #[arg(long, default_value_t = 512)]
    context: usize,
    /// Untimed steps per back-end before the first timed window.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Steps each back-end runs in each timed window.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Timed windows: in each, every back-end (and the steps without
    /// communication) runs `--steps` steps, in an order that rotates from
    /// window to window; each back-end is compared with NCCL within the
    /// window.
    #[arg(long, default_value_t = 40)]
    windows: usize,
    /// Also print every window's tokens/s per back-end.
    #[arg(long)]
    per_window: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Largest allowed max |a - b| / max |b| between outputs (bf16).
    #[arg(long, default_value_t = 2e-2)]
    tolerance: f64,
    /// Skip rank 0's single-GPU reference (it holds every rank's shard
    /// for a moment).
    #[arg(long)]
    no_reference: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let env = DistEnv::from_env().context("reading the launcher's variables")?;
    let (rank, world) = (env.rank, env.world_size);
    let cfg = Config {
        hidden: args.hidden,
        intermediate: args.intermediate,
        layers: args.layers,
        heads: args.heads,
        kv_heads: args.kv_heads,
        batch: args.batch,
        context: args.context,
        rope_theta: 500_000.0,
        eps: 1e-5,
        seed: args.seed,
    };
    cfg.validate(world)?;
    if args.steps == 0 || args.windows == 0 {
        bail!("--steps and --windows must be at least 1");
    }
    let store: Arc<TcpStore> = Arc::new(
        TcpStore::connect(env.store_addr()?, ClientConfig::from_env())
            .context("connecting to the launcher's store")?,
    );

    // candle's device on a stream of its own; both communicators enqueue
    // on that same stream (see `reduce.rs`).
    let ordinal = env.device.unwrap_or(env.local_rank);
    let cuda = CudaDevice::new_with_stream(ordinal)?;
    let device = Device::Cuda(cuda.clone());
    let stream = cuda.cuda_stream();

    let mut backends = Vec::new();
    if args.backend.includes(BackendArg::Intranode) || args.backend.includes(BackendArg::Fused) {
        let comm = Communicator::new(stream.clone(), store.clone(), rank, world)?;
        backends.push(AllReduce::Intranode(Box::new(comm)));
    }
    if args.backend.includes(BackendArg::Nccl) {
        backends.push(AllReduce::Nccl(nccl_comm(
            store.as_ref(),
            &stream,
            rank,
            world,
        )?));
    }

    let mut modes = Vec::new();
    for b in &backends {
        match b {
            AllReduce::Intranode(comm) => {
                if args.backend.includes(BackendArg::Intranode) {
                    modes.push(Mode::Unfused(b));
                }
                if args.backend.includes(BackendArg::Fused) {
                    modes.push(Mode::Fused(comm, &cuda));
                }
            }
            AllReduce::Nccl(_) => modes.push(Mode::Unfused(b)),
        }
    }

    let shard = Shard::new(&cfg, rank, world, &device)?;
    let rep = Replicated::new(&cfg, &device)?;
    device.synchronize()?;
    if rank == 0 {
        print_header(&cfg, world, &stream, &shard, &modes)?;
    }

    // Rank 0's reference: the same sharded model run serially on one GPU
    // from every rank's shard (rebuilt from the same seeds), the partials
    // added in f32 in rank order.
    let reference = if rank == 0 && !args.no_reference {
        let others = (0..world)
            .filter(|&r| r != rank)
            .map(|r| Shard::new(&cfg, r, world, &device))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let mut all: Vec<&Shard> = others.iter().chain([&shard]).collect();
        all.sort_by_key(|s| s.rank);
        let y = model::forward(
            &cfg,
            &all,
            &rep,
            &rep.input,
            &mut Unfused::new(model::local_sum),
        )?;
        Some(to_f32(&y)?)
    } else {
        None
    };

    // One step per back-end from the same input: the replicated output
    // must be bitwise equal on every rank, and match the reference and the
    // other back-end.
    let mut outputs = Vec::new();
    for m in &modes {
        let y = model::forward(&cfg, &[&shard], &rep, &rep.input, &mut *m.residual())?;
        let bits: Vec<u16> = y
            .flatten_all()?
            .to_vec1::<bf16>()?
            .iter()
            .map(|v| v.to_bits())
            .collect();
        same_on_every_rank(store.as_ref(), m.name(), rank, world, &bits)?;
        outputs.push((m.name(), to_f32(&y)?));
    }
    if rank == 0 {
        let mut failed = Vec::new();
        for (name, y) in &outputs {
            if let Some(r) = &reference {
                failed.extend(compare(
                    &format!("{name} vs reference"),
                    y,
                    r,
                    args.tolerance,
                ));
            }
        }
        if let [(a, ya), others @ ..] = &outputs[..] {
            for (b, yb) in others {
                failed.extend(compare(&format!("{b} vs {a}"), yb, ya, args.tolerance));
            }
        }
        if !failed.is_empty() {
            bail!("outputs disagree: {}", failed.join("; "));
        }
    }

    // Timing: warm-up, then windows in which every back-end (and the same
    // steps without any all-reduce, for the cost of the communication)
    // runs once, in rotating order (`stats.rs` says why).
    modes.push(Mode::NoReduce);
    for mode in &modes {
        line_up(&backends, &device)?;
        run_steps(&cfg, &shard, &rep, *mode, args.warmup)?;
        device.synchronize()?;
    }
    // Seconds of each window, per mode.
    let mut window_secs: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for w in 0..args.windows {
        for m in stats::window_order(modes.len(), w) {
            line_up(&backends, &device)?;
            let start = Instant::now();
            run_steps(&cfg, &shard, &rep, modes[m], args.steps)?;
            device.synchronize()?;
            window_secs[m].push(start.elapsed().as_secs_f64());
        }
    }
    if rank == 0 {
        report(&cfg, &args, world, &modes, &window_secs);
    }
    Ok(())
}

/// The row-parallel sum of one rank's partial (`parts` holds one tensor):
/// candle's in-place op on the matmul's fresh output.
fn sum(parts: Vec<Tensor>, backend: &AllReduce) -> candle_core::Result<Tensor> {
    let Some(p) = parts.into_iter().next() else {
        candle_core::bail!("no partial sum");
    };
    p.inplace_op1(backend)?;
    Ok(p)
}

/// Rank 0's table: each mode's tokens/s over the windows, and each
/// back-end's per-window ratio to NCCL with its spread.
fn report(cfg: &Config, args: &Args, world: usize, modes: &[Mode], window_secs: &[Vec<f64>]) {
    let tokens = cfg.batch * args.steps;
    let label = |m: &Mode| match m {
        Mode::NoReduce if world == 1 => "none (no all-reduce)".to_owned(),
        Mode::NoReduce => "none (no all-reduce, sums wrong)".to_owned(),
        m => m.name().to_owned(),
    };
    let nccl = modes
        .iter()
        .position(|m| matches!(m, Mode::Unfused(AllReduce::Nccl(_))));
    if args.per_window {
        let names: Vec<String> = modes.iter().map(|m| format!("{:>12}", m.name())).collect();
        println!("window  tokens/s: {}", names.join(" "));
        for w in 0..args.windows {
            let row: Vec<String> = window_secs
                .iter()
                .map(|s| {
                    format!(
                        "{:>12.1}",
                        s.get(w).map_or(f64::NAN, |&x| tokens as f64 / x)
                    )
                })
                .collect();
            println!("{w:>6}            {}", row.join(" "));
        }
    }
    println!(
        "{} windows of {} steps per back-end, back-ends in rotating order; rank 0's wall clock; \
         tokens/s: median [p10, p90] over the windows; vs nccl: each window's tokens/s over \
         nccl's in the same window, median [p10, p90] (min-max), windows faster than nccl",
        args.windows, args.steps
    );
    println!(
        "{:<34} {:>9} {:>10} {:>21}   vs nccl",
        "back-end", "ms/step", "tokens/s", "[p10, p90]"
    );
    for (m, (mode, secs)) in modes.iter().zip(window_secs).enumerate() {
        let Some(rate) = stats::Spread::of(&stats::rates(tokens, secs)) else {
            println!("{:<34} (a window without a finite rate)", label(mode));
            continue;
        };
        let versus = match nccl {
            Some(n) if n != m => {
                let ratios = stats::window_ratios(secs, &window_secs[n]);
                match stats::Spread::of(&ratios) {
                    Some(r) => format!(
                        "{:.3}x [{:.3}, {:.3}] ({:.3}-{:.3}), {}/{} windows faster: {}",
                        r.median,
                        r.p10,
                        r.p90,
                        r.min,
                        r.max,
                        stats::faster_windows(&ratios),
                        ratios.len(),
                        stats::Verdict::of(&r).describe()
                    ),
                    None => "-".to_owned(),
                }
            }
            Some(_) => "(the baseline)".to_owned(),
            None => "(nccl not run)".to_owned(),
        };
        println!(
            "{:<34} {:>9.3} {:>10.1} {:>21}   {versus}",
            label(mode),
            cfg.batch as f64 / rate.median * 1e3,
            rate.median,
            format!("[{:.1}, {:.1}]", rate.p10, rate.p90),
        );
    }
}

/// `n` decode steps, each step's output the next one's input.
fn run_steps(cfg: &Config, shard: &Shard, rep: &Replicated, mode: Mode, n: usize) -> Result<()> {
    let mut x = rep.input.clone();
    for _ in 0..n {
        x = model::forward(cfg, &[shard], rep, &x, &mut *mode.residual())?;
    }
    Ok(())
}

/// Lines the ranks up before a timed run: an all-reduce of one element,
/// waited for, so that no rank's clock starts while another is still
/// busy with the previous run.
fn line_up(backends: &[AllReduce], device: &Device) -> Result<()> {
    if let Some(b) = backends.first() {
        let t = Tensor::zeros(1, DType::F32, device)?;
        t.inplace_op1(b)?;
    }
    device.synchronize()?;
    Ok(())
}

/// cudarc's NCCL communicator, its unique id sent from rank 0 through the
/// launcher's store (candle's own example passes it through a file).
fn nccl_comm(
    store: &dyn Store,
    stream: &Arc<CudaStream>,
    rank: usize,
    world: usize,
) -> Result<Comm> {
    const KEY: &str = "candle-tp/nccl-id";
    let id = if rank == 0 {
        let id = Id::new().map_err(|e| anyhow::anyhow!("ncclGetUniqueId: {e:?}"))?;
        let bytes: Vec<u8> = id.internal().iter().map(|&c| c as u8).collect();
        store.set(KEY, &bytes)?;
        id
    } else {
        let bytes = store.get(KEY)?;
        let mut internal = [0 as c_char; 128];
        if bytes.len() != internal.len() {
            bail!(
                "the NCCL id in the store has {} bytes, not 128",
                bytes.len()
            );
        }
        for (d, s) in internal.iter_mut().zip(&bytes) {
            *d = *s as c_char;
        }
        Id::uninit(internal)
    };
    Comm::from_rank(stream.clone(), rank, world, id)
        .map_err(|e| anyhow::anyhow!("ncclCommInitRank on rank {rank}: {e:?}"))
}

/// Fails unless every rank's `bits` are the same (FNV-1a hashes through
/// the store; rank 0 compares).
fn same_on_every_rank(
    store: &dyn Store,
    name: &str,
    rank: usize,
    world: usize,
    bits: &[u16],
) -> Result<()> {
    let hash = bits.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    store.set(
        &format!("candle-tp/check/{name}/{rank}"),
        &hash.to_le_bytes(),
    )?;
    if rank != 0 {
        return Ok(());
    }
    let mut differ = Vec::new();
    for r in 1..world {
        let theirs = store.get(&format!("candle-tp/check/{name}/{r}"))?;
        if theirs != hash.to_le_bytes() {
            differ.push(r);
        }
    }
    if !differ.is_empty() {
        bail!(
            "{name}: the output of ranks {differ:?} differs from rank 0's (it must be replicated)"
        );
    }
    println!("check {name}: output bitwise equal on all {world} ranks");
    Ok(())
}

fn to_f32(y: &Tensor) -> Result<Vec<f32>> {
    Ok(y.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?)
}

/// Prints max |a - b| / max |b| and returns a failure line when it is over
/// `tolerance` or anything is not finite.
fn compare(what: &str, a: &[f32], b: &[f32], tolerance: f64) -> Option<String> {
    let scale = b.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
    let mut max_diff = 0f64;
    let mut equal = 0usize;
    let mut finite = a.len() == b.len();
    for (x, y) in a.iter().zip(b) {
        finite &= x.is_finite() && y.is_finite();
        max_diff = max_diff.max(f64::from((x - y).abs()));
        equal += usize::from(x.to_bits() == y.to_bits());
    }
    let rel = if scale > 0.0 {
        max_diff / scale
    } else {
        max_diff
    };
    let ok = finite && rel <= tolerance && scale > 0.0;
    println!(
        "check {what}: max |diff| {max_diff:.3e} (relative {rel:.3e}, tolerance {tolerance:.1e}), \
         {equal}/{} bitwise equal: {}",
        b.len(),
        if ok { "ok" } else { "FAILED" }
    );
    (!ok).then(|| format!("{what}: relative difference {rel:.3e}"))
}

fn print_header(
    cfg: &Config,
    world: usize,
    stream: &Arc<CudaStream>,
    shard: &Shard,
    modes: &[Mode],
) -> Result<()> {
    let gpu = stream
        .context()
        .name()
        .unwrap_or_else(|e| format!("? ({e:?})"));
    println!(
        "candle-tp: world {world}, {gpu}; hidden {}, intermediate {}, {} layers, {} heads / {} kv \
         heads, batch {}, context {}, bf16; {:.2} GiB of weights and cache per rank",
        cfg.hidden,
        cfg.intermediate,
        cfg.layers,
        cfg.heads,
        cfg.kv_heads,
        cfg.batch,
        cfg.context,
        shard.bytes() as f64 / f64::from(1u32 << 30)
    );
    println!(
        "all-reduce: {} calls per step of {} bf16 ({} bytes) each",
        2 * cfg.layers,
        cfg.batch * cfg.hidden,
        cfg.batch * cfg.hidden * 2
    );
    for m in modes {
        match m {
            Mode::Unfused(AllReduce::Intranode(c)) => {
                let algo = c.algo_for::<bf16>(cfg.batch * cfg.hidden, &ReduceOp::Sum);
                match c.intra_reason() {
                    None => println!("intranode: algorithm {}", algo.name()),
                    Some(why) => println!("intranode: NCCL underneath ({why})"),
                }
            }
            Mode::Fused(c, _) => println!(
                "intranode-fused: path {:?}",
                Fused::path(c, cfg.batch, cfg.hidden)
            ),
            _ => {}
        }
    }
    Ok(())
}
