//! The check suite's element types: every `cudarc::nccl::NcclType` with a
//! device representation (f32, f64, f16, bf16, i8, u8, i32, u32, i64,
//! u64) through every `Communicator` collective, as a cudarc program calls
//! them (the types our kernels lack go to NCCL, decided by
//! `decide_all_reduce`). Inputs are small integers, so every result but
//! a float average is exact in every type and is compared exactly with a
//! host reference; averages within the type's rounding.
//!
//! Where NCCL is not available (two ranks sharing one GPU), the types only
//! NCCL reduces must be refused with `Error::NcclUnavailable`, which is
//! checked instead, and said.

use std::fmt::Debug;

use anyhow::{Result, anyhow, bail, ensure};
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use cudarc::nccl::{NcclType, ReduceOp};
use half::{bf16, f16};
use intranode::AllReduceAlgo;
use intranode_harness::rank::Rank;

/// A host element with the conversions the reference needs.
trait Elem: NcclType + DeviceRepr + ValidAsZeroBits + Copy + PartialEq + Debug + Unpin {
    const NAME: &'static str;
    const SIGNED: bool;
    const FLOAT: bool;
    /// Our kernels reduce it (where the communicator picks them).
    const OURS: bool;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

macro_rules! elem {
    ($t:ty, $name:literal, signed $s:literal, float $f:literal, ours $o:literal, $from:expr, $to:expr) => {
        impl Elem for $t {
            const NAME: &'static str = $name;
            const SIGNED: bool = $s;
            const FLOAT: bool = $f;
            const OURS: bool = $o;
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
        }
    };
}

elem!(f32, "f32", signed true, float true, ours true, |v| v as f32, |x| x as f64);
elem!(f64, "f64", signed true, float true, ours false, |v| v, |x| x);
elem!(f16, "f16", signed true, float true, ours true, f16::from_f64, f16::to_f64);
elem!(bf16, "bf16", signed true, float true, ours true, bf16::from_f64, bf16::to_f64);
elem!(i8, "i8", signed true, float false, ours false, |v| v as i8, |x| x as f64);
elem!(u8, "u8", signed false, float false, ours false, |v| v as u8, |x| x as f64);
elem!(i32, "i32", signed true, float false, ours false, |v| v as i32, |x| x as f64);
elem!(u32, "u32", signed false, float false, ours false, |v| v as u32, |x| x as f64);
elem!(i64, "i64", signed true, float false, ours false, |v| v as i64, |x| x as f64);
elem!(u64, "u64", signed false, float false, ours false, |v| v as u64, |x| x as f64);

/// Lengths: one, odd, past a vector, and past a Lamport slot (1 Mi + 3),
/// so the floats run on several of our forms where the size rule says.
const LENGTHS: [usize; 4] = [1, 7, 4099, (1 << 20) + 3];

/// Written into outputs before a call: outside every result's range.
const POISON: f64 = 99.0;

/// Rank `rank`'s element `i` for `op`: in -2..=2 (0..=4 unsigned) for
/// sums, minima and maxima, and 1, 2 or -1 for products, so that eight
/// ranks' results stay exact in every type (|sum| <= 32, |prod| <= 8).
fn input(op: &ReduceOp, signed: bool, i: usize, rank: usize) -> f64 {
    match op {
        ReduceOp::Prod => match (i + rank) % 3 {
            0 => 2.0,
            1 if signed => -1.0,
            _ => 1.0,
        },
        _ => {
            let v = ((i * 7 + rank * 3 + 1) % 5) as f64;
            if signed { v - 2.0 } else { v }
        }
    }
}

fn reference(op: &ReduceOp, signed: bool, i: usize, world: usize) -> f64 {
    let vals = (0..world).map(|r| input(op, signed, i, r));
    match op {
        ReduceOp::Sum => vals.sum(),
        ReduceOp::Prod => vals.product(),
        ReduceOp::Max => vals.fold(f64::MIN, f64::max),
        ReduceOp::Min => vals.fold(f64::MAX, f64::min),
        ReduceOp::Avg => vals.sum::<f64>() / world as f64,
    }
}

fn op_name(op: &ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Prod => "prod",
        ReduceOp::Max => "max",
        ReduceOp::Min => "min",
        ReduceOp::Avg => "avg",
    }
}

/// `got` against `want` element by element: exactly, or for a float
/// average within the type's rounding (a relative 2^-7, bf16's).
fn compare<T: Elem>(what: &str, op: &ReduceOp, got: &[T], want: &[f64]) -> Result<()> {
    ensure!(
        got.len() == want.len(),
        "{what}: {} elements, want {}",
        got.len(),
        want.len()
    );
    let tolerance = |w: f64| match op {
        ReduceOp::Avg => w.abs().max(1.0) / 128.0,
        _ => 0.0,
    };
    let wrong = got
        .iter()
        .zip(want)
        .filter(|(g, w)| (g.to_f64() - **w).abs() > tolerance(**w))
        .count();
    if wrong > 0 {
        let (i, (g, w)) = got
            .iter()
            .zip(want)
            .enumerate()
            .find(|(_, (g, w))| (g.to_f64() - **w).abs() > tolerance(**w))
            .ok_or_else(|| anyhow!("{what}: a wrong element that is not found"))?;
        bail!(
            "{what}: {wrong} of {} wrong; first at {i}: {g:?}, want {w}",
            got.len()
        );
    }
    Ok(())
}

fn upload<T: Elem>(r: &Rank, v: impl Iterator<Item = f64>) -> Result<CudaSlice<T>> {
    let host: Vec<T> = v.map(T::from_f64).collect();
    Ok(r.stream.clone_htod(&host)?)
}

fn download<T: Elem>(r: &Rank, d: &CudaSlice<T>) -> Result<Vec<T>> {
    let v = r.stream.clone_dtoh(d)?;
    r.stream.synchronize()?;
    Ok(v)
}

fn ops<T: Elem>() -> Vec<ReduceOp> {
    let mut v = vec![ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];
    // NCCL's integer average truncates; the floats' is the one checked.
    if T::FLOAT {
        v.push(ReduceOp::Avg);
    }
    v
}

/// Every collective with `T`; the count of checked calls.
fn one_type<T: Elem>(r: &Rank) -> Result<usize> {
    let (me, world) = (r.rank(), r.world());
    let comm = &r.comm;
    let nccl = comm.nccl().is_ok();
    let mut calls = 0;
    for &n in &LENGTHS {
        for op in ops::<T>() {
            let what = format!("rank {me}: all_reduce {} {} n={n}", T::NAME, op_name(&op));
            let algo = comm.algo_for::<T>(n, &op);
            // The one decision: ours only for our types and ops.
            let ours_possible = T::OURS && !matches!(op, ReduceOp::Prod);
            ensure!(
                ours_possible || algo == AllReduceAlgo::Nccl,
                "{what}: decided {}, which cannot reduce it",
                algo.name()
            );
            let inputs = || (0..n).map(|i| input(&op, T::SIGNED, i, me));
            let want: Vec<f64> = (0..n)
                .map(|i| reference(&op, T::SIGNED, i, world))
                .collect();
            let send = upload::<T>(r, inputs())?;
            let mut recv = upload::<T>(r, (0..n).map(|_| POISON))?;
            let out = comm.all_reduce(&send, &mut recv, &op);
            if algo == AllReduceAlgo::Nccl && !nccl {
                match out {
                    Err(intranode::Error::NcclUnavailable(_)) => continue,
                    other => bail!("{what}: without NCCL, want NcclUnavailable, got {other:?}"),
                }
            }
            out?;
            compare(
                &format!("{what} ({})", algo.name()),
                &op,
                &download(r, &recv)?,
                &want,
            )?;
            let mut buf = upload::<T>(r, inputs())?;
            comm.all_reduce_in_place::<_, T>(&mut buf, &op)?;
            compare(&format!("{what} in place"), &op, &download(r, &buf)?, &want)?;
            calls += 2;
        }
    }
    if !nccl && !T::OURS {
        return Ok(calls);
    }
    let n = 4099;
    let sum = ReduceOp::Sum;
    let value = |i: usize, rank: usize| input(&sum, T::SIGNED, i, rank);
    let root = world - 1;

    // all_gather: rank by rank.
    let send = upload::<T>(r, (0..n).map(|i| value(i, me)))?;
    let mut gathered = upload::<T>(r, (0..n * world).map(|_| POISON))?;
    comm.all_gather(&send, &mut gathered)?;
    let want: Vec<f64> = (0..n * world).map(|j| value(j % n, j / n)).collect();
    compare(
        &format!("rank {me}: all_gather {}", T::NAME),
        &sum,
        &download(r, &gathered)?,
        &want,
    )?;

    // reduce_scatter: block `me` of the sum.
    let big = upload::<T>(r, (0..n * world).map(|i| value(i, me)))?;
    let mut shard = upload::<T>(r, (0..n).map(|_| POISON))?;
    comm.reduce_scatter(&big, &mut shard, &sum)?;
    let want: Vec<f64> = (0..n)
        .map(|i| (0..world).map(|rk| value(me * n + i, rk)).sum())
        .collect();
    compare(
        &format!("rank {me}: reduce_scatter {}", T::NAME),
        &sum,
        &download(r, &shard)?,
        &want,
    )?;
    calls += 2;
    if !nccl {
        // The rest is NCCL's; the floats' all-gather and reduce-scatter
        // above ran on ours.
        return Ok(calls);
    }

    // broadcast (out of place and in place) from the last rank.
    let want: Vec<f64> = (0..n).map(|i| value(i, root)).collect();
    let mut recv = upload::<T>(r, (0..n).map(|_| POISON))?;
    let sendbuf = (me == root).then_some(&send);
    comm.broadcast(sendbuf, &mut recv, root as i32)?;
    compare(
        &format!("rank {me}: broadcast {}", T::NAME),
        &sum,
        &download(r, &recv)?,
        &want,
    )?;
    let mut buf = upload::<T>(r, (0..n).map(|i| value(i, me)))?;
    comm.broadcast_in_place(&mut buf, root as i32)?;
    compare(
        &format!("rank {me}: broadcast_in_place {}", T::NAME),
        &sum,
        &download(r, &buf)?,
        &want,
    )?;

    // reduce to rank 0 (the others pass no receive buffer).
    let want: Vec<f64> = (0..n)
        .map(|i| reference(&sum, T::SIGNED, i, world))
        .collect();
    let mut recv = upload::<T>(r, (0..n).map(|_| POISON))?;
    comm.reduce(&send, (me == 0).then_some(&mut recv), &sum, 0)?;
    if me == 0 {
        compare(
            &format!("rank {me}: reduce {}", T::NAME),
            &sum,
            &download(r, &recv)?,
            &want,
        )?;
    }
    let mut buf = upload::<T>(r, (0..n).map(|i| value(i, me)))?;
    comm.reduce_in_place(&mut buf, &sum, 0)?;
    if me == 0 {
        let got = download(r, &buf)?;
        compare(
            &format!("rank {me}: reduce_in_place {}", T::NAME),
            &sum,
            &got,
            &want,
        )?;
    }

    // send/recv around the ring, in one group (NCCL pairs them there).
    let next = (me + 1) % world;
    let prev = (me + world - 1) % world;
    let mut got = upload::<T>(r, (0..n).map(|_| POISON))?;
    {
        let (s, g) = (send.slice(..), got.slice_mut(..));
        let mut group = comm.group();
        group.send(s, next as i32)?;
        group.recv(g, prev as i32)?;
        group.end()?;
    }
    let want: Vec<f64> = (0..n).map(|i| value(i, prev)).collect();
    compare(
        &format!("rank {me}: send/recv {}", T::NAME),
        &sum,
        &download(r, &got)?,
        &want,
    )?;
    calls += 6;
    Ok(calls)
}

/// Every type; the count of checked calls and a line on how NCCL's part ran.
pub fn run(r: &mut Rank) -> Result<(usize, String)> {
    let mut calls = 0;
    calls += one_type::<f32>(r)?;
    calls += one_type::<bf16>(r)?;
    calls += one_type::<f16>(r)?;
    calls += one_type::<f64>(r)?;
    calls += one_type::<i8>(r)?;
    calls += one_type::<u8>(r)?;
    calls += one_type::<i32>(r)?;
    calls += one_type::<u32>(r)?;
    calls += one_type::<i64>(r)?;
    calls += one_type::<u64>(r)?;
    r.comm.synchronize()?;
    let how = match r.comm.nccl() {
        Ok(_) => "every type through every collective".to_string(),
        Err(why) => format!(
            "NCCL unavailable ({why}): bf16/f16/f32 on ours only; the other types refused with NcclUnavailable, as they must"
        ),
    };
    Ok((calls, how))
}
