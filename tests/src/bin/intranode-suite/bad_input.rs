//! Bad input at the GPU entry points, run under `intranode-run`:
//! every case must come back as a clear error (no launch, no hang, no
//! undefined behaviour), and the group must still reduce correctly
//! afterwards.
//!
//! - `--group normal` (builds its communicator with the call checks on,
//!   as `INTRANODE_DEBUG=detail` would): lengths that
//!   differ between send and receive, too-short buffers, views outside the
//!   symmetric buffer, an op our kernels do not have, barriers over ranks
//!   outside the group, a stream on another GPU, zero elements, and ranks
//!   that disagree on the length, element type, op or algorithm of a call
//!   (caught by the call fingerprints, on both `IntraNodeComm` and
//!   `Communicator`).
//! - `--group overlap` (two ranks on one GPU, `--gpus 0,0`): refused with
//!   the switch that allows it named, then accepted with it.
//! - `--group world-size` (1 rank, or more than 8): refused.
//! - `--group debug-mismatch`: rank 0 alone asks for the call checks
//!   (`INTRANODE_DEBUG=detail`): every rank fails its rendezvous at once,
//!   naming the switch, instead of rank 0 waiting out the store timeout;
//!   then all ranks ask alike and the group works.

use anyhow::{Result, bail};
use cudarc::driver::CudaSlice;
use cudarc::nccl::ReduceOp as NcclOp;
use half::{bf16, f16};
use intranode::AllReduceAlgo;
use intranode::config::{CommConfig, DebugLevel};
use intranode::internals::{ALLOW_OVERLAPPING_ENV, DEBUG_ENV, RendezvousError, Unsupported};
use intranode::types::ReduceOp;
use intranode_harness::data;
use intranode_harness::rank::{Proc, Rank};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// A valid group: bad calls.
    Normal,
    /// Ranks sharing a GPU (launch with `--gpus 0,0`).
    Overlap,
    /// 1 rank, or more than 8 (launch with overlapping `--gpus`).
    WorldSize,
    /// Ranks that disagree on `INTRANODE_DEBUG`.
    DebugMismatch,
}

#[derive(clap::Args, Debug)]
pub struct BadInputArgs {
    /// Which kind of group this launch is.
    #[arg(long, value_enum, default_value = "normal")]
    pub group: Group,
}

pub fn run(args: &BadInputArgs) -> Result<()> {
    match args.group {
        Group::Normal => normal(),
        Group::Overlap => overlap(),
        Group::WorldSize => world_size(),
        Group::DebugMismatch => debug_mismatch(),
    }
}

/// Checks that `result` is an error whose text contains every needle.
fn expect_err<T>(case: &str, result: intranode::Result<T>, needles: &[&str]) -> Result<String> {
    match result {
        Ok(_) => bail!("{case}: accepted, expected an error"),
        Err(e) => {
            let text = e.to_string();
            if let Some(missing) = needles.iter().find(|n| !text.contains(*n)) {
                bail!("{case}: error lacks {missing:?}: {text}");
            }
            Ok(format!("{case}: {text}"))
        }
    }
}

fn zeros<T: intranode::kernels::DType + cudarc::driver::ValidAsZeroBits>(
    r: &Rank,
    n: usize,
) -> Result<CudaSlice<T>> {
    Ok(r.stream.alloc_zeros::<T>(n)?)
}

fn normal() -> Result<()> {
    // The mismatch cases need the call fingerprints: every rank asks for
    // them alike here, whatever INTRANODE_DEBUG says, so the suite runs
    // as shipped, with nothing set.
    let mut config = CommConfig::from_env()?;
    config.debug = DebugLevel::Detail;
    let Some(mut r) = Rank::setup_with_config("intranode-suite bad-input", &config)? else {
        return Ok(());
    };
    let (rank, world) = (r.rank(), r.world());
    let Some(intra) = r.comm.intra() else {
        bail!(
            "bad-input rank {rank}: FAIL: needs the intra-node path ({})",
            r.comm.intra_reason().unwrap_or("?")
        );
    };
    if intra.call_checker().is_none() {
        bail!(
            "bad-input rank {rank}: FAIL: the call checks are off although the communicator was built with debug=detail"
        );
    }
    let s = r.stream.clone();
    let n = 10_000usize;
    let a = zeros::<bf16>(&r, n)?;
    let mut short = zeros::<bf16>(&r, n - 1)?;
    let mut half_len = zeros::<bf16>(&r, n / 2)?;
    let mut out = zeros::<bf16>(&r, n)?;
    let mut report = Vec::new();
    let sum = ReduceOp::Sum;

    // Local mistakes: refused before anything is launched or exchanged.
    report.push(expect_err(
        "Communicator: send and recv lengths differ",
        r.comm
            .all_reduce_with(&a, &mut short, &NcclOp::Sum, AllReduceAlgo::TwoShot),
        &["recv has 9999 elements, but must hold as many as send = 10000"],
    )?);
    report.push(expect_err(
        "Communicator: recv too short (auto algorithm)",
        r.comm.all_reduce(&a, &mut half_len, &NcclOp::Sum),
        &["recv has 5000 elements"],
    )?);
    report.push(expect_err(
        "IntraNodeComm: output too short",
        intra.all_reduce(&a, &mut short, sum, AllReduceAlgo::OneShot, &s),
        &["input has 10000 elements, output 9999"],
    )?);
    let buffer_elems = intra.symm().buffer_bytes() / 2;
    report.push(expect_err(
        "get_buffer longer than the symmetric buffer",
        intra.symm().get_buffer::<bf16>(rank, buffer_elems + 1, 0),
        &["out of bounds"],
    )?);
    report.push(expect_err(
        "get_buffer offset that overflows",
        intra.symm().get_buffer::<bf16>(rank, 8, usize::MAX),
        &[],
    )?);
    report.push(expect_err(
        "get_buffer of a rank outside the group",
        intra.symm().get_buffer::<bf16>(world, 1, 0),
        &["not in the group"],
    )?);
    report.push(expect_err(
        "product on our kernels",
        r.comm
            .all_reduce_with(&a, &mut out, &NcclOp::Prod, AllReduceAlgo::OneShot),
        &["only served by nccl"],
    )?);
    report.push(expect_err(
        "barrier over a rank outside the world",
        intra.barrier(Some(&[rank, world]), &s),
        &["outside the world"],
    )?);
    let other = (rank + 1) % world;
    report.push(expect_err(
        "barrier that leaves the caller out",
        intra.barrier(Some(&[other]), &s),
        &["not in"],
    )?);
    let gpus = intranode::gpu::device_count()?;
    if gpus > 1 {
        let device = intra.device();
        let other_ctx = intranode::gpu::context((device + 1) % gpus)?;
        let other_stream = other_ctx.new_stream()?;
        report.push(expect_err(
            "stream on another GPU",
            intra.all_reduce(&a, &mut out, sum, AllReduceAlgo::OneShot, &other_stream),
            &["stream is on device"],
        )?);
        // Creating the other context made it current on this thread.
        r.ctx.bind_to_thread()?;
    }

    // Disagreements between ranks: every rank must get the same verdict,
    // naming the odd rank and both calls, and nothing is launched.
    let odd = world - 1;
    let n_odd = if rank == 0 { n - 1 } else { n };
    let mut a_odd = zeros::<bf16>(&r, n_odd)?;
    let mut o_odd = zeros::<bf16>(&r, n_odd)?;
    report.push(expect_err(
        "ranks disagree on the length",
        intra.all_reduce(&a_odd, &mut o_odd, sum, AllReduceAlgo::TwoShot, &s),
        &[
            "rank [0] called all_reduce",
            "of 9999 x bf16",
            "of 10000 x bf16",
        ],
    )?);
    report.push(expect_err(
        "ranks disagree on the length, in place",
        intra.all_reduce_in_place(&mut a_odd, sum, AllReduceAlgo::OneShot, &s),
        &["of 9999 x bf16", "of 10000 x bf16"],
    )?);
    let typed = if rank == odd {
        let a16 = zeros::<f16>(&r, n)?;
        let mut o16 = zeros::<f16>(&r, n)?;
        intra.all_reduce(&a16, &mut o16, sum, AllReduceAlgo::TwoShot, &s)
    } else {
        intra.all_reduce(&a, &mut out, sum, AllReduceAlgo::TwoShot, &s)
    };
    report.push(expect_err(
        "ranks disagree on the element type",
        typed,
        &[&format!("rank [{odd}] called"), "x f16", "x bf16"],
    )?);
    let op = if rank == odd { ReduceOp::Max } else { sum };
    report.push(expect_err(
        "ranks disagree on the op",
        intra.all_reduce(&a, &mut out, op, AllReduceAlgo::TwoShot, &s),
        &["op max", "op sum"],
    )?);
    let algo = if rank == odd {
        AllReduceAlgo::OneShot
    } else {
        AllReduceAlgo::TwoShot
    };
    report.push(expect_err(
        "ranks disagree on the algorithm",
        intra.all_reduce(&a, &mut out, sum, algo, &s),
        &["algorithm one-shot", "algorithm two-shot"],
    )?);
    if r.comm.nccl().is_ok() {
        let algo = if rank == odd {
            AllReduceAlgo::Nccl
        } else {
            AllReduceAlgo::TwoShot
        };
        report.push(expect_err(
            "Communicator: one rank on NCCL, the others on our kernels",
            r.comm.all_reduce_with(&a, &mut out, &NcclOp::Sum, algo),
            &["algorithm nccl", "algorithm two-shot"],
        )?);
    }
    drop((a_odd, o_odd));

    // Zero elements: a valid no-op.
    let empty = zeros::<f32>(&r, 0)?;
    let mut empty_out = zeros::<f32>(&r, 0)?;
    intra.all_reduce(&empty, &mut empty_out, sum, AllReduceAlgo::TwoShot, &s)?;
    intra.all_reduce(&empty, &mut empty_out, sum, AllReduceAlgo::Push, &s)?;
    report.push("zero elements: accepted as a no-op (two-shot, bandwidth)".into());

    // The group still works: checked all-reduces on both paths.
    let mut checked = 0;
    for (call, algo) in [
        (1u64, Some(AllReduceAlgo::OneShot)),
        (2, Some(AllReduceAlgo::TwoShot)),
        (3, Some(AllReduceAlgo::Push)),
        (4, None),
    ] {
        let input = data::inputs::<bf16>(9, call, rank, n + 3);
        let d_in = r.stream.clone_htod(&input)?;
        let mut d_out = zeros::<bf16>(&r, n + 3)?;
        r.all_reduce(&d_in, &mut d_out, ReduceOp::Sum, algo)?;
        let got = r.stream.clone_dtoh(&d_out)?;
        r.stream.synchronize()?;
        data::verify(&got, 9, call, world, ReduceOp::Sum).map_err(|e| {
            anyhow::anyhow!(
                "bad-input rank {rank}: FAIL: the group no longer reduces correctly: {e}"
            )
        })?;
        checked += 1;
    }
    intra.health().check()?;
    r.store_barrier()?;
    for line in &report {
        println!("bad-input rank {rank}: refused as expected: {line}");
    }
    println!(
        "bad-input rank {rank}: PASS {} cases refused with clear errors; {checked} checked all-reduces afterwards",
        report.len()
    );
    Ok(())
}

/// The group `config` admits builds a communicator whose `algo` sums a
/// bf16 pattern of `seed` correctly.
fn reduces_correctly(p: &Proc, config: &CommConfig, algo: AllReduceAlgo, seed: u64) -> Result<()> {
    let comm = p.comm(config)?;
    let n = 4099;
    let input = data::inputs::<bf16>(seed, 0, p.rank(), n);
    let d_in = p.stream.clone_htod(&input)?;
    let mut d_out = p.stream.alloc_zeros::<bf16>(n)?;
    comm.all_reduce(&d_in, &mut d_out, ReduceOp::Sum, algo, &p.stream)?;
    let got = p.stream.clone_dtoh(&d_out)?;
    p.stream.synchronize()?;
    data::verify(&got, seed, 0, p.world(), ReduceOp::Sum).map_err(anyhow::Error::msg)?;
    Ok(())
}

fn overlap() -> Result<()> {
    let Some(p) = Proc::setup("intranode-suite bad-input --group overlap")? else {
        return Ok(());
    };
    let rank = p.rank();
    let mut config = CommConfig::from_env()?;
    if config.allow_overlapping_devices {
        bail!("bad-input rank {rank}: FAIL: unset {ALLOW_OVERLAPPING_ENV} for this case");
    }
    match intranode::internals::IntraNodeComm::rendezvous(
        &p.ctx,
        p.store.clone(),
        rank,
        p.world(),
        &config,
    ) {
        Err(RendezvousError::Unsupported(u @ Unsupported::OverlappingDevices { .. }))
            if u.to_string().contains(ALLOW_OVERLAPPING_ENV) =>
        {
            println!("bad-input rank {rank}: refused as expected: {u}");
        }
        Err(e) => bail!("bad-input rank {rank}: FAIL: expected OverlappingDevices, got {e}"),
        Ok(_) => bail!(
            "bad-input rank {rank}: FAIL: ranks sharing a GPU were accepted without {ALLOW_OVERLAPPING_ENV}=1 (launch with --gpus 0,0)"
        ),
    }
    config.allow_overlapping_devices = true;
    reduces_correctly(&p, &config, AllReduceAlgo::TwoShot, 3)
        .map_err(|e| anyhow::anyhow!("bad-input rank {rank}: FAIL: with overlap allowed: {e}"))?;
    println!(
        "bad-input rank {rank}: PASS overlapping devices refused by default, accepted and correct with the switch"
    );
    Ok(())
}

fn debug_mismatch() -> Result<()> {
    let Some(p) = Proc::setup("intranode-suite bad-input --group debug-mismatch")? else {
        return Ok(());
    };
    let rank = p.rank();
    let mut config = CommConfig::from_env()?;
    config.debug = if rank == 0 {
        DebugLevel::Detail
    } else {
        DebugLevel::Off
    };
    let start = std::time::Instant::now();
    match intranode::internals::IntraNodeComm::rendezvous(
        &p.ctx,
        p.store.clone(),
        rank,
        p.world(),
        &config,
    ) {
        Err(RendezvousError::Failed(e)) if e.to_string().contains(DEBUG_ENV) => {
            // Well under any store timeout: the requests already tell.
            println!(
                "bad-input rank {rank}: refused as expected after {:.1} s: {e}",
                start.elapsed().as_secs_f64()
            );
        }
        Err(e) => bail!("bad-input rank {rank}: FAIL: expected a {DEBUG_ENV} mismatch, got {e}"),
        Ok(_) => {
            bail!("bad-input rank {rank}: FAIL: ranks disagreeing on {DEBUG_ENV} were accepted")
        }
    }
    config.debug = DebugLevel::Detail;
    reduces_correctly(&p, &config, AllReduceAlgo::Lamport, 5)
        .map_err(|e| anyhow::anyhow!("bad-input rank {rank}: FAIL: with {DEBUG_ENV} alike: {e}"))?;
    println!(
        "bad-input rank {rank}: PASS a {DEBUG_ENV} mismatch fails every rank at once; alike, the group reduces correctly"
    );
    Ok(())
}

fn world_size() -> Result<()> {
    let Some(p) = Proc::setup("intranode-suite bad-input --group world-size")? else {
        return Ok(());
    };
    let (rank, world) = (p.rank(), p.world());
    if (2..=8).contains(&world) {
        bail!(
            "bad-input rank {rank}: FAIL: launch 1 rank or more than 8 for this case, not {world}"
        );
    }
    let config = CommConfig {
        allow_overlapping_devices: true,
        ..CommConfig::from_env()?
    };
    match intranode::internals::IntraNodeComm::rendezvous(
        &p.ctx,
        p.store.clone(),
        rank,
        world,
        &config,
    ) {
        Err(RendezvousError::Unsupported(u @ Unsupported::WorldSize { .. })) => {
            println!("bad-input rank {rank}: PASS world size {world} refused: {u}");
            Ok(())
        }
        Err(e) => bail!("bad-input rank {rank}: FAIL: expected a world-size refusal, got {e}"),
        Ok(_) => bail!("bad-input rank {rank}: FAIL: a world of {world} was accepted"),
    }
}
