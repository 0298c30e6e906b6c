//! 03_symmetric: a row-parallel linear layer whose GEMM writes straight
//! into a symmetric buffer (`Communicator::alloc_symmetric`), then an
//! all-reduce that reads the peers' copies in place (no copy-in), one
//! process per GPU under `intranode-run`.
//!
//! Each rank
//! 1. allocates `out`, `--tokens` x `--hidden` f32 that every peer maps
//!    (collective: every rank asks for the same length);
//! 2. runs a cuBLAS GEMM (`out = x_r * w_r`, its shard of the layer) whose
//!    output is `out` itself: the buffer is a cudarc `DevicePtrMut`;
//! 3. all-reduces `out` in place (the layer's sum over ranks), checks it
//!    against the host's sum, then again out of place from a view of the
//!    second half of the tokens into a plain cudarc buffer;
//! 4. repeats `--steps` times with new weights, without a host sync
//!    between the GEMM and the all-reduce, and exits non-zero on any wrong
//!    element.
//!
//! Inputs are small integers, so every product and sum is exact in f32
//! whatever the order of accumulation.
//!
//! ```sh
//! cargo build --release -p intranode-launcher -p intranode-examples --example 03_symmetric
//! intranode-run --nproc-per-node 2 -- target/release/examples/03_symmetric
//! ```

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::nccl::ReduceOp;
use intranode::Communicator;
use intranode::dist_env::DistEnv;
use intranode_store::{ClientConfig, Store, TcpStore};

#[derive(Parser, Debug)]
#[command(
    about = "a GEMM into a symmetric buffer, then an all-reduce on it (run under intranode-run)"
)]
struct Args {
    /// Rows of the activations (tokens).
    #[arg(long, default_value_t = 8)]
    tokens: usize,
    /// Columns of the layer's output.
    #[arg(long, default_value_t = 1024)]
    hidden: usize,
    /// This rank's share of the inner dimension.
    #[arg(long, default_value_t = 64)]
    inner: usize,
    /// GEMM + all-reduce steps.
    #[arg(long, default_value_t = 20)]
    steps: usize,
}

/// Small integers, so that f32 products and sums are exact.
fn x_of(rank: usize, t: usize, k: usize) -> f32 {
    ((rank + 2 * t + 3 * k) % 5) as f32 - 2.0
}

fn w_of(rank: usize, step: usize, k: usize, h: usize) -> f32 {
    ((rank * 7 + step + k + 2 * h) % 7) as f32 - 3.0
}

/// The layer's output row-major, `tokens` x `hidden`: the sum over ranks
/// of `x_r * w_r`.
fn expected(args: &Args, world: usize, step: usize) -> Vec<f32> {
    let mut out = vec![0f32; args.tokens * args.hidden];
    for r in 0..world {
        for t in 0..args.tokens {
            for h in 0..args.hidden {
                let dot: f32 = (0..args.inner)
                    .map(|k| x_of(r, t, k) * w_of(r, step, k, h))
                    .sum();
                out[t * args.hidden + h] += dot;
            }
        }
    }
    out
}

fn check(got: &[f32], want: &[f32], what: &str) -> Result<()> {
    if let Some((i, (g, w))) = got.iter().zip(want).enumerate().find(|(_, (g, w))| g != w) {
        bail!("{what}: element {i}: got {g}, want {w}");
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let env =
        DistEnv::from_env().context("reading the rank environment (run under intranode-run)")?;
    let (rank, world) = (env.rank, env.world_size);
    let device = env.device.unwrap_or(env.local_rank);
    if !intranode::gpu::gpus_or_skip(device + 1, "03_symmetric")? {
        return Ok(());
    }
    let addr = env.store_addr()?;
    let store: Arc<dyn Store> = Arc::new(
        TcpStore::connect(addr.as_str(), ClientConfig::from_env())
            .with_context(|| format!("connecting to the store at {addr}"))?,
    );
    let ctx = intranode::gpu::context(device)?;
    let stream = ctx.default_stream();
    let comm = Communicator::new(stream.clone(), store, rank, world)
        .with_context(|| format!("rank {rank}: building the communicator"))?;
    let blas = CudaBlas::new(stream.clone()).context("cuBLAS (libcublas must be loadable)")?;
    let (tokens, hidden, inner) = (args.tokens, args.hidden, args.inner);
    let n = tokens * hidden;

    // 1. The layer's output, mapped by every peer.
    let mut out = comm
        .alloc_symmetric::<f32>(n)
        .with_context(|| format!("rank {rank}: alloc_symmetric({n})"))?;
    // The activations, row-major tokens x inner: cuBLAS is column-major,
    // so row-major `out = x * w` is column-major `out^T = w^T * x^T`.
    let x_host: Vec<f32> = (0..tokens * inner)
        .map(|i| x_of(rank, i / inner, i % inner))
        .collect();
    let x = stream.clone_htod(&x_host)?;
    let mut w = stream.alloc_zeros::<f32>(inner * hidden)?;
    let mut half = stream.alloc_zeros::<f32>(n / 2)?;
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: i32::try_from(hidden)?,
        n: i32::try_from(tokens)?,
        k: i32::try_from(inner)?,
        alpha: 1.0f32,
        lda: i32::try_from(hidden)?,
        ldb: i32::try_from(inner)?,
        beta: 0.0f32,
        ldc: i32::try_from(hidden)?,
    };
    for step in 0..args.steps {
        let w_host: Vec<f32> = (0..inner * hidden)
            .map(|i| w_of(rank, step, i / hidden, i % hidden))
            .collect();
        stream.memcpy_htod(&w_host, &mut w)?;
        // 2. The GEMM writes the symmetric buffer directly.
        // SAFETY: `w` holds inner x hidden, `x` tokens x inner and `out`
        // tokens x hidden f32, as the configuration says (column-major).
        unsafe { blas.gemm(cfg, &w, &x, &mut out) }.context("cuBLAS sgemm")?;
        // 3. In place: the kernel reads the peers' GEMM outputs where the
        // GEMMs wrote them.
        comm.all_reduce_in_place(&mut out, &ReduceOp::Sum)?;
        let want = expected(&args, world, step);
        check(
            &stream.clone_dtoh(&out)?,
            &want,
            &format!("step {step}, in place"),
        )?;
        // Out of place, from a view at an offset (the second half of the
        // tokens, reduced once more: world times the sum).
        let first = (tokens / 2) * hidden;
        let view = out.slice(first..first + n / 2)?;
        comm.all_reduce(&view, &mut half, &ReduceOp::Sum)?;
        let want_half: Vec<f32> = want[first..first + n / 2]
            .iter()
            .map(|v| v * world as f32)
            .collect();
        check(
            &stream.clone_dtoh(&half)?,
            &want_half,
            &format!("step {step}, view at element {first}"),
        )?;
    }
    comm.synchronize()?;
    comm.check()?;
    println!(
        "03_symmetric rank {rank}/{world}: {} steps of a {tokens}x{inner} by {inner}x{hidden} GEMM into a symmetric buffer, all-reduced in place ({}) and from a view at an offset, exact",
        args.steps,
        comm.algo_for::<f32>(n, &ReduceOp::Sum).name()
    );
    Ok(())
}
