//! 01_data_parallel: data-parallel training across every local GPU, one
//! process per GPU under `intranode-run`.
//!
//! Each rank
//! 1. builds a `Communicator` (symmetric memory where the GPUs allow it,
//!    NCCL otherwise);
//! 2. draws the model's parameters from a seed of its own, then takes rank
//!    0's with `broadcast_coalesced`, as DDP does at start-up;
//! 3. trains for `--steps` steps on its own shard of synthetic data: the
//!    host computes the local gradients of the current parameters (the
//!    model is tiny; see `src/mlp.rs`), they are uploaded, packed into
//!    `GradBucket`s (parameters in reverse order, as DDP buckets them),
//!    reduced on the GPUs by the chosen `CommHook`, unpacked, and applied
//!    on the GPU (`axpy_f32`);
//! 4. checks that every rank ends with bitwise-identical parameters
//!    (fingerprints all-gathered through the store) and that the global
//!    loss fell below a quarter of where it started, and exits non-zero
//!    otherwise.
//!
//! ```sh
//! cargo build --release -p intranode-examples --example 01_data_parallel
//! intranode-run --nproc-per-node 4 -- target/release/examples/01_data_parallel --hook bf16
//! ```

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use cudarc::driver::{CudaSlice, CudaStream};
use intranode::Communicator;
use intranode::ddp::{
    AllReduceHook, CommHook, CompressHook, DeviceBuffer, GradBucket, PlanItem, StatefulHook,
    all_reduce_flat, broadcast_coalesced, plan_buckets,
};
use intranode::dist_env::DistEnv;
use intranode::kernels::{ElemType, KernelModule};
use intranode_examples::mlp::{self, SHAPES, numel};
use intranode_store::{Store, StoreExchange};

/// Seed of the teacher every rank's data comes from.
const TEACHER_SEED: u64 = 5;

#[derive(Parser, Debug)]
#[command(
    about = "data-parallel training of a small MLP on every local GPU (run under intranode-run)"
)]
struct Args {
    /// Optimizer steps.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.5)]
    lr: f32,
    /// How each gradient bucket is reduced.
    #[arg(long, value_enum, default_value_t = HookKind::AllReduce)]
    hook: HookKind,
    /// Bucket limit: small by default, so that the model takes several
    /// buckets and its largest weight (4 KiB) is cut across two.
    #[arg(long, default_value_t = 2048)]
    bucket_bytes: usize,
    /// Training samples per rank.
    #[arg(long, default_value_t = 256)]
    samples: usize,
    /// Steps between loss reports.
    #[arg(long, default_value_t = 20)]
    log_every: usize,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum HookKind {
    /// Mean over ranks in f32.
    AllReduce,
    /// bf16 on the wire.
    Bf16,
    /// f16 on the wire.
    F16,
    /// A user hook with state: counts what it reduces, then averages.
    Stateful,
}

/// The stateful hook's state.
#[derive(Debug, Default)]
struct Counts {
    buckets: usize,
    elems: usize,
}

type CountingFn = fn(&mut Counts, &Communicator, &mut GradBucket) -> intranode::Result<()>;

fn counting_mean(
    state: &mut Counts,
    comm: &Communicator,
    bucket: &mut GradBucket,
) -> intranode::Result<()> {
    state.buckets += 1;
    state.elems += bucket.buffer().elems();
    all_reduce_flat(comm, bucket.buffer_mut(), &cudarc::nccl::ReduceOp::Avg)
}

enum Hook<'c> {
    AllReduce(AllReduceHook<'c>),
    Compress(CompressHook<'c>),
    Stateful(StatefulHook<'c, Counts, CountingFn>),
}

impl<'c> Hook<'c> {
    fn new(kind: HookKind, comm: &'c Communicator) -> Result<Self> {
        Ok(match kind {
            HookKind::AllReduce => Hook::AllReduce(AllReduceHook::new(comm)),
            HookKind::Bf16 => Hook::Compress(CompressHook::bf16(comm)?),
            HookKind::F16 => Hook::Compress(CompressHook::f16(comm)?),
            HookKind::Stateful => Hook::Stateful(StatefulHook::new(
                comm,
                Counts::default(),
                counting_mean as CountingFn,
            )),
        })
    }

    fn get(&mut self) -> &mut dyn CommHook {
        match self {
            Hook::AllReduce(h) => h,
            Hook::Compress(h) => h,
            Hook::Stateful(h) => h,
        }
    }
}

fn download(stream: &Arc<CudaStream>, params: &[CudaSlice<f32>]) -> Result<Vec<Vec<f32>>> {
    let host = params
        .iter()
        .map(|p| stream.clone_dtoh(p))
        .collect::<Result<Vec<_>, _>>()?;
    stream.synchronize()?;
    Ok(host)
}

fn main() {
    intranode_examples::init_logging();
    if let Err(e) = try_main() {
        eprintln!("01_data_parallel: {e:#}");
        std::process::exit(1);
    }
}

fn try_main() -> Result<()> {
    let args = Args::parse();
    let env =
        DistEnv::from_env().context("reading the rank environment (run under intranode-run)")?;
    let device = env.device.unwrap_or(env.local_rank);
    if !intranode::gpu::gpus_or_skip(device + 1, "01_data_parallel")? {
        return Ok(());
    }
    let (rank, world) = (env.rank, env.world_size);
    // intranode-run's store, or torchrun's TCPStore (NOTE [store protocol
    // decision] in intranode_dist_env).
    let store: Arc<dyn Store> =
        intranode_store::connect_env(&env).context("joining the rendezvous store")?;
    let ctx = intranode::gpu::context(device)?;
    let stream = ctx.new_stream()?;
    let comm = Communicator::new(stream.clone(), store.clone(), rank, world)
        .with_context(|| format!("rank {rank}: building the communicator"))?;
    let mut exchange = StoreExchange::new("intranode/examples/01");
    // The optimizer step's kernel (an application would have its own).
    let kernels = KernelModule::load(&ctx)?;

    // Every rank starts from its own draw; rank 0's wins.
    let mut params = mlp::init_params(1000 + rank as u64)
        .iter()
        .map(|p| stream.clone_htod(p))
        .collect::<Result<Vec<_>, _>>()?;
    {
        let mut list: Vec<&mut dyn DeviceBuffer> = params
            .iter_mut()
            .map(|p| p as &mut dyn DeviceBuffer)
            .collect();
        broadcast_coalesced(&comm, &mut list, 1 << 20, 0)?;
    }

    // Buckets over the parameters in reverse order (gradients of the last
    // layers are ready first in a real backward pass); `grads[k]` is the
    // gradient of parameter `order[k]`.
    let order: Vec<usize> = (0..SHAPES.len()).rev().collect();
    let items: Vec<PlanItem> = order
        .iter()
        .map(|&p| PlanItem::new(ElemType::F32, numel(SHAPES[p])))
        .collect();
    let shapes: Vec<Vec<usize>> = order.iter().map(|&p| SHAPES[p].to_vec()).collect();
    let plans = plan_buckets(&items, args.bucket_bytes)?;
    let mut buckets = GradBucket::from_plans(&plans, &shapes, &stream)?;
    let mut grads = order
        .iter()
        .map(|&p| stream.alloc_zeros::<f32>(numel(SHAPES[p])))
        .collect::<Result<Vec<_>, _>>()?;
    let mut hook = Hook::new(args.hook, &comm)?;
    let data = mlp::shard(TEACHER_SEED, rank, args.samples);
    if rank == 0 {
        println!(
            "01_data_parallel: {world} ranks, path {}, hook {:?}, {} buckets of <= {} bytes",
            match comm.intra_reason() {
                None => format!("intra-node {:?}", comm.topology()),
                Some(why) => format!("nccl (no intra-node path: {why})"),
            },
            args.hook,
            buckets.len(),
            args.bucket_bytes
        );
    }

    let mut first_loss = None;
    let mut last_loss = f64::NAN;
    for step in 0..=args.steps {
        let host = download(&stream, &params)?;
        let (loss, local_grads) = mlp::loss_and_grads(&host, &data);
        if step % args.log_every.max(1) == 0 || step == args.steps {
            let losses: Vec<f64> = exchange.all_gather(store.as_ref(), rank, world, &loss)?;
            let global = losses.iter().sum::<f64>() / world as f64;
            if rank == 0 {
                println!("step {step:5}  loss {global:.6}");
            }
            first_loss.get_or_insert(global);
            last_loss = global;
        }
        if step == args.steps {
            break;
        }
        for (k, &p) in order.iter().enumerate() {
            stream.memcpy_htod(&local_grads[p], &mut grads[k])?;
        }
        {
            let refs: Vec<&dyn DeviceBuffer> =
                grads.iter().map(|g| g as &dyn DeviceBuffer).collect();
            for b in buckets.iter_mut() {
                b.pack(&refs, &stream)?;
            }
        }
        let h = hook.get();
        for b in buckets.iter_mut() {
            let fut = h.run_hook(b)?;
            h.parse_hook_result(fut)?;
        }
        {
            let mut refs: Vec<&mut dyn DeviceBuffer> = grads
                .iter_mut()
                .map(|g| g as &mut dyn DeviceBuffer)
                .collect();
            for b in &buckets {
                b.unpack(&mut refs, &stream)?;
            }
        }
        for (k, &p) in order.iter().enumerate() {
            kernels.axpy_f32(&stream, -args.lr, &grads[k], &mut params[p])?;
        }
    }

    let fingerprint = mlp::fingerprint(&download(&stream, &params)?);
    let all: Vec<u64> = exchange.all_gather(store.as_ref(), rank, world, &fingerprint)?;
    let first_loss = first_loss.unwrap_or(f64::NAN);
    if let Hook::Stateful(h) = &hook {
        println!(
            "rank {rank}: stateful hook reduced {} buckets, {} elements",
            h.state().buckets,
            h.state().elems
        );
    }
    if let Some(r) = all.iter().position(|&f| f != fingerprint) {
        bail!(
            "rank {rank}: parameters differ from rank {r}'s after {} steps (fingerprints {fingerprint:#x} and {:#x})",
            args.steps,
            all[r]
        );
    }
    let fell = last_loss < 0.25 * first_loss; // false for a NaN loss too
    if !fell {
        bail!(
            "rank {rank}: the loss did not fall below a quarter in {} steps: {first_loss:.6} -> {last_loss:.6}",
            args.steps
        );
    }
    println!(
        "rank {rank}: ok: parameters bitwise identical on all {world} ranks (fingerprint {fingerprint:#018x}); loss {first_loss:.6} -> {last_loss:.6}"
    );
    Ok(())
}
