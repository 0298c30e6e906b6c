//! The check suite's `all_reduce_residual_rmsnorm`: every element type,
//! several hidden sizes (odd ones too) and row counts, against an f64
//! reference of the unfused sequence (all-reduce, rounded; residual add,
//! rounded; RMSNorm in f64, rounded), and the residual written back
//! exactly.

use anyhow::{Result, bail};
use cudarc::nccl::NcclType;
use half::{bf16, f16};
use intranode::ReduceOp;
use intranode::kernels::{DType, ElemType};
use intranode_harness::data;
use intranode_harness::rank::Rank;

const HIDDEN: [usize; 4] = [4096, 8192, 16384, 777];
const ROWS: [usize; 3] = [1, 8, 33];
const EPS: f32 = 1e-5;

/// Allowed relative error of a normed output: one rounding to `T` plus
/// the f32 arithmetic of the sum of squares (up to 16384 terms).
fn tolerance(elem: ElemType) -> f64 {
    match elem {
        ElemType::Bf16 => 1.0 / 128.0,
        ElemType::F16 => 1.0 / 1024.0,
        ElemType::F32 => 1e-4,
    }
}

fn one_type<T: DType + NcclType>(r: &Rank, seed: u64, call: &mut u64) -> Result<usize> {
    let (me, world) = (r.rank(), r.world());
    let mut cases = 0;
    for hidden in HIDDEN {
        for rows in ROWS {
            *call += 1;
            let n = rows * hidden;
            let x = data::inputs::<T>(seed, *call, me, n);
            // Residual and weight are the same on every rank, as in
            // tensor parallelism (rank 0's pattern, other calls).
            let res = data::inputs::<T>(seed, *call + (1 << 32), 0, n);
            let w = data::inputs::<T>(seed, *call + (2 << 32), 0, hidden);
            let mut d_x = r.stream.clone_htod(&x)?;
            let mut d_res = r.stream.clone_htod(&res)?;
            let d_w = r.stream.clone_htod(&w)?;
            let mut d_out = r.stream.clone_htod(&vec![data::poison::<T>(); n])?;
            r.comm
                .all_reduce_residual_rmsnorm(&mut d_x, &mut d_res, &d_w, EPS, &mut d_out)?;
            let out = r.stream.clone_dtoh(&d_out)?;
            let res_out = r.stream.clone_dtoh(&d_res)?;
            r.stream.synchronize()?;
            for row in 0..rows {
                let base = row * hidden;
                let h: Vec<f64> = (0..hidden)
                    .map(|i| {
                        let ar = T::from_f64(data::reference(
                            seed,
                            *call,
                            world,
                            base + i,
                            ReduceOp::Sum,
                        ));
                        T::from_f64(ar.to_f64() + res[base + i].to_f64()).to_f64()
                    })
                    .collect();
                let mean_sq = h.iter().map(|v| v * v).sum::<f64>() / hidden as f64;
                let inv = 1.0 / (mean_sq + f64::from(EPS)).sqrt();
                for i in 0..hidden {
                    let got_res = res_out[base + i].to_f64();
                    if got_res != h[i] {
                        bail!(
                            "rank {me}: residual_rmsnorm {:?} {rows} x {hidden}: residual[{row}][{i}] = {got_res}, want {}",
                            T::ELEM,
                            h[i]
                        );
                    }
                    let want = h[i] * inv * w[i].to_f64();
                    let got = out[base + i].to_f64();
                    if (got - want).abs() > tolerance(T::ELEM) * want.abs().max(1e-3) {
                        bail!(
                            "rank {me}: residual_rmsnorm {:?} {rows} x {hidden}: out[{row}][{i}] = {got}, want {want}",
                            T::ELEM
                        );
                    }
                }
            }
            cases += 1;
        }
    }
    Ok(cases)
}

/// Every case; the count of checked calls.
pub fn run(r: &Rank, seed: u64) -> Result<usize> {
    let mut call = 1 << 44;
    let mut cases = one_type::<bf16>(r, seed, &mut call)?;
    cases += one_type::<f16>(r, seed, &mut call)?;
    cases += one_type::<f32>(r, seed, &mut call)?;
    Ok(cases)
}
