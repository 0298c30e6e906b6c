//! 04_from_rank: a cudarc NCCL program's construction, ported by its
//! imports alone: rank 0 makes an [`Id`], ships its 128 bytes to the other
//! ranks (here: processes this program starts itself, as an inference
//! server starts a daemon per GPU), and every rank calls
//! `Comm::from_rank(stream, rank, world, id)`.
//!
//! Each rank then runs a row-parallel layer's all-reduces as the client
//! does: out of place, into a freshly allocated output every call, two
//! per layer, bf16 (and f32), and checks every element of every call.
//! Values are small integers, exact in bf16 whatever the order of the sum.
//!
//! ```text
//! cargo build --release -p intranode-examples --example 04_from_rank
//! target/release/examples/04_from_rank --gpus 0,1,2,3
//! # several ranks on one GPU (development):
//! INTRANODE_ALLOW_OVERLAPPING_DEVICES=1 target/release/examples/04_from_rank --gpus 0,0
//! ```
//!
//! Exits 0 with a message and runs nothing where there is no GPU.

use std::ffi::c_char;
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use cudarc::driver::{CudaSlice, CudaStream};
use half::bf16;
// The port: these two lines were `use cudarc::nccl::{...}`.
use intranode::nccl::result::NcclError;
use intranode::nccl::{Comm, Id, NcclType, ReduceOp};

#[derive(Parser, Debug)]
#[command(about = "ranks made by Comm::from_rank from an Id rank 0 shipped to them")]
struct Args {
    /// The GPU of each rank, e.g. `0,1,2,3` (a GPU may repeat with
    /// INTRANODE_ALLOW_OVERLAPPING_DEVICES=1).
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    gpus: Vec<usize>,
    /// Decoder layers per step (two all-reduces each).
    #[arg(long, default_value_t = 32)]
    layers: usize,
    /// Steps of the layer loop.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Hidden size: elements per all-reduce of the layer loop.
    #[arg(long, default_value_t = 4096)]
    hidden: usize,
    /// Set by rank 0 for the ranks it starts: this process's rank.
    #[arg(long, hide = true)]
    rank: Option<usize>,
    /// Set by rank 0 for the ranks it starts: the id, as hex.
    #[arg(long, hide = true)]
    id: Option<String>,
}

fn main() -> Result<()> {
    intranode_examples::init_logging();
    let args = Args::parse();
    let world = args.gpus.len();
    ensure!(world >= 1, "--gpus names no GPU");
    let needed = args.gpus.iter().max().map_or(1, |g| g + 1);
    if !intranode::gpu::gpus_or_skip(needed, "04_from_rank")? {
        return Ok(());
    }
    match (args.rank, &args.id) {
        (Some(rank), Some(hex)) => {
            let id = Id::uninit(from_hex(hex)?);
            run_rank(&args, rank, world, id)
        }
        (None, None) => run_root(&args, world),
        _ => bail!("--rank and --id come together"),
    }
}

/// Rank 0: makes the id, starts the other ranks with it, runs its own
/// part, then waits for theirs.
fn run_root(args: &Args, world: usize) -> Result<()> {
    let id = Id::new().context("Id::new")?;
    let hex = to_hex(id.internal());
    let exe = std::env::current_exe()?;
    let gpus: Vec<String> = args.gpus.iter().map(ToString::to_string).collect();
    let mut children = Vec::new();
    for rank in 1..world {
        let child = Command::new(&exe)
            .args(["--gpus", &gpus.join(",")])
            .args(["--layers", &args.layers.to_string()])
            .args(["--steps", &args.steps.to_string()])
            .args(["--hidden", &args.hidden.to_string()])
            .args(["--rank", &rank.to_string(), "--id", &hex])
            .spawn()
            .with_context(|| format!("starting rank {rank}"))?;
        children.push((rank, child));
    }
    let mine = run_rank(args, 0, world, id);
    let mut failed = Vec::new();
    for (rank, mut child) in children {
        let status = child.wait()?;
        if !status.success() {
            failed.push(format!("rank {rank}: {status}"));
        }
    }
    mine?;
    ensure!(failed.is_empty(), "ranks failed: {}", failed.join("; "));
    println!("04_from_rank: all {world} ranks passed");
    Ok(())
}

fn run_rank(args: &Args, rank: usize, world: usize, id: Id) -> Result<()> {
    let ctx = intranode::gpu::context(args.gpus[rank])?;
    let stream = ctx.new_stream()?;
    let comm =
        Comm::from_rank(stream.clone(), rank, world, id).map_err(|e| nccl_failure(rank, e))?;
    let path = comm
        .intra_reason()
        .map_or("intranode kernels".to_string(), |why| {
            format!("NCCL only ({why})")
        });

    // A sweep of sizes, out of place and in place, bf16 and f32.
    let sizes = [1usize, 7, 1000, 4096, 65_536, 1 << 20, (4 << 20) + 3];
    let mut calls = 0;
    for &n in &sizes {
        for in_place in [false, true] {
            calls += one_call::<bf16>(&comm, &stream, n, in_place, calls as u32, to_bf16)?;
            calls += one_call::<f32>(&comm, &stream, n, in_place, calls as u32, |v| v)?;
        }
    }

    // The client's loop: two out-of-place all-reduces per layer into a
    // fresh output each, checked at the end of each step.
    for step in 0..args.steps {
        let mut outs = Vec::with_capacity(2 * args.layers);
        for layer in 0..2 * args.layers {
            let seed = (step * 2 * args.layers + layer) as u32;
            let x = stream.clone_htod(&pattern(rank, args.hidden, seed, to_bf16))?;
            let mut y = stream.alloc_zeros::<bf16>(args.hidden)?;
            all_reduce(&comm, &x, &mut y).map_err(|e| nccl_failure(rank, e))?;
            outs.push((seed, y));
        }
        for (seed, y) in &outs {
            check(
                &stream.clone_dtoh(y)?,
                world,
                *seed,
                |v| v.to_f32(),
                "layer loop",
            )
            .with_context(|| format!("rank {rank}, step {step}"))?;
        }
        calls += outs.len();
    }
    comm.synchronize()?;
    println!(
        "04_from_rank rank {rank}/{world} (GPU {}): {calls} all-reduces checked exact, {path}",
        args.gpus[rank]
    );
    Ok(())
}

/// A row-parallel layer's all-reduce, written as a cudarc program has it
/// (its errors are `NcclError`).
fn all_reduce<T: NcclType>(
    comm: &Comm,
    x: &CudaSlice<T>,
    y: &mut CudaSlice<T>,
) -> Result<(), NcclError> {
    comm.all_reduce(x, y, &ReduceOp::Sum)?;
    Ok(())
}

fn one_call<T: NcclType + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy>(
    comm: &Comm,
    stream: &Arc<CudaStream>,
    n: usize,
    in_place: bool,
    seed: u32,
    make: impl Fn(f32) -> T,
) -> Result<usize>
where
    T: Into<f64>,
{
    let rank = comm.rank();
    let host = pattern(rank, n, seed, &make);
    let got = if in_place {
        let mut x = stream.clone_htod(&host)?;
        comm.all_reduce_in_place(&mut x, &ReduceOp::Sum)
            .map_err(|e| nccl_failure(rank, e))?;
        stream.clone_dtoh(&x)?
    } else {
        let x = stream.clone_htod(&host)?;
        let mut y = stream.alloc_zeros::<T>(n)?;
        all_reduce(comm, &x, &mut y).map_err(|e| nccl_failure(rank, e))?;
        stream.clone_dtoh(&y)?
    };
    let what = format!(
        "{n} x {} {}",
        std::any::type_name::<T>(),
        if in_place { "in place" } else { "out of place" }
    );
    check(
        &got,
        comm.world_size(),
        seed,
        |v| Into::<f64>::into(v) as f32,
        &what,
    )
    .with_context(|| format!("rank {rank}"))?;
    Ok(1)
}

/// An `NcclError` (a code) with the message intranode kept for it.
fn nccl_failure(rank: usize, e: NcclError) -> anyhow::Error {
    let why = intranode::nccl::last_error().unwrap_or_default();
    anyhow::anyhow!("rank {rank}: {:?}: {why}", e.0)
}

/// Rank `rank`'s element `i` of call `seed`: a small integer, so every
/// partial sum is exact in bf16.
fn value(rank: usize, i: usize, seed: u32) -> f32 {
    ((i as u32)
        .wrapping_mul(7)
        .wrapping_add(seed * 3 + rank as u32 * 5)
        % 9) as f32
        - 4.0
}

fn pattern<T>(rank: usize, n: usize, seed: u32, make: impl Fn(f32) -> T) -> Vec<T> {
    (0..n).map(|i| make(value(rank, i, seed))).collect()
}

fn check<T: Copy>(
    got: &[T],
    world: usize,
    seed: u32,
    as_f32: impl Fn(T) -> f32,
    what: &str,
) -> Result<()> {
    for (i, &g) in got.iter().enumerate() {
        let want: f32 = (0..world).map(|r| value(r, i, seed)).sum();
        let g = as_f32(g);
        ensure!(g == want, "{what}: element {i}: got {g}, want {want}");
    }
    Ok(())
}

fn to_bf16(v: f32) -> bf16 {
    bf16::from_f32(v)
}

fn to_hex(bytes: &[c_char; 128]) -> String {
    bytes.iter().map(|&b| format!("{:02x}", b as u8)).collect()
}

fn from_hex(hex: &str) -> Result<[c_char; 128]> {
    ensure!(
        hex.len() == 256,
        "an id is 256 hex digits, got {}",
        hex.len()
    );
    let mut out = [0 as c_char; 128];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)? as c_char;
    }
    Ok(out)
}
