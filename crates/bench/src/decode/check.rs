//! The decode benchmark's checks.
//!
//! - Op by op, once per model: the first layer run eagerly, every op's
//!   output against an f64 host reference of the op on its actual
//!   (copied back) input. The weights are never copied back: the host
//!   recomputes any element from its seed (`intranode_kernels_gpu::decode::uniform`).
//!   GEMMs are checked on two rows and a spread of columns (a wrong layout
//!   or stride would be off everywhere); the norms, the residual add and
//!   SiLU x mul on every element.
//! - After the timed replays, each variant's final residual stream: finite,
//!   the same bits on every rank (after an all-reduce every rank holds the
//!   same sums, so the same `x` follows), and within bf16 tolerance of the
//!   NCCL variant's.

use std::hash::Hasher;

use anyhow::{Result, bail};
use fnv::FnvHasher;
use half::bf16;
use serde::{Deserialize, Serialize};

use super::model::{Activations, EPS, Matrix, Op, Step, WEIGHT_STD, weight_seed};

/// Allowed relative error of a bf16 output computed in f32: one rounding
/// (2^-9) and the f32 arithmetic, with margin (`check_norm`'s figure).
const BF16_REL: f64 = 1.0 / 128.0;

/// The final residual stream of two variants may differ by this much
/// (relative L2 norm of the difference): the sums of bf16 partials in a
/// different order, rounded, carried through the layers.
pub const MAX_REL_DIFF: f64 = 2e-2;

fn widen(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// The weight element the GPU filled at `index` of layer `l`'s `m` on
/// `rank`, rounded to bf16 as the fill kernel rounds.
fn weight(seed: u64, l: usize, m: Matrix, rank: usize, index: usize) -> f64 {
    let s = weight_seed(seed, l, m, rank);
    bf16::from_f32(intranode_kernels_gpu::decode::uniform(
        s,
        index as u64,
        WEIGHT_STD,
    ))
    .to_f64()
}

/// Columns of an `n`-wide output to check: the first and last eight and
/// sixteen spread between.
fn sample_cols(n: usize) -> Vec<usize> {
    let mut cols: Vec<usize> = (0..n.min(8)).collect();
    cols.extend((0..16).map(|i| i * n / 16 + 5).filter(|&j| j < n));
    cols.extend(n.saturating_sub(8)..n);
    cols.sort_unstable();
    cols.dedup();
    cols
}

/// `x * rsqrt(mean(x^2) + eps)` per row of `hidden` (weights are ones),
/// against `got`; the worst error as a fraction of its tolerance.
fn check_rmsnorm(what: &str, x: &[f64], got: &[bf16], hidden: usize) -> Result<f64> {
    let mut worst = 0.0f64;
    for (row, (xs, gs)) in x.chunks(hidden).zip(got.chunks(hidden)).enumerate() {
        let mean_sq = xs.iter().map(|v| v * v).sum::<f64>() / hidden as f64;
        let inv = 1.0 / (mean_sq + f64::from(EPS)).sqrt();
        for (i, (&xv, g)) in xs.iter().zip(gs).enumerate() {
            let want = xv * inv;
            let tol = BF16_REL * want.abs().max(1e-3);
            let err = (g.to_f64() - want).abs();
            if err > tol {
                bail!("{what}: row {row}, element {i}: got {g}, want {want}");
            }
            worst = worst.max(err / tol);
        }
    }
    Ok(worst)
}

/// One GEMM of layer 0, `c = a w` (`a` rows `lda` apart), on rows 0 and
/// `batch - 1` and [`sample_cols`]; the worst error as a fraction of its
/// tolerance: `|ref| / 128` (bf16 output) plus `1e-3` of the root sum of
/// squares of the products (the f32 accumulation, with room; a misplaced
/// element is off by about that root sum itself).
#[allow(clippy::too_many_arguments)]
fn check_gemm(
    m: Matrix,
    a: &[bf16],
    lda: usize,
    c: &[bf16],
    k: usize,
    n: usize,
    batch: usize,
    weight_at: &dyn Fn(usize) -> f64,
) -> Result<f64> {
    let mut rows = vec![0, batch - 1];
    rows.dedup();
    let mut worst = 0.0f64;
    for j in sample_cols(n) {
        let col: Vec<f64> = (0..k).map(|kk| weight_at(kk * n + j)).collect();
        for &row in &rows {
            let (mut sum, mut sum_sq) = (0.0f64, 0.0f64);
            for (kk, w) in col.iter().enumerate() {
                let p = a[row * lda + kk].to_f64() * w;
                sum += p;
                sum_sq += p * p;
            }
            let got = c[row * n + j].to_f64();
            let tol = sum.abs() * BF16_REL + 1e-3 * sum_sq.sqrt() + 1e-6;
            let err = (got - sum).abs();
            if err > tol {
                bail!("{m:?} GEMM: row {row}, column {j}: got {got}, want {sum} (k {k}, n {n})");
            }
            worst = worst.max(err / tol);
        }
    }
    Ok(worst)
}

/// Layer 0 op by op (no all-reduce: this checks the ops, the variants'
/// comparison checks the communication), every output against the host.
/// Returns one line for the log.
pub fn check_ops(step: &Step, acts: &mut Activations, seed: u64) -> Result<String> {
    let r = step.r;
    let s = step.weights.shard;
    let (b, rank) = (acts.batch, r.rank());
    let down = |buf: &cudarc::driver::CudaSlice<bf16>| -> Result<Vec<bf16>> {
        let v = r.stream.clone_dtoh(buf)?;
        r.stream.synchronize()?;
        Ok(v)
    };
    let mut worst: Vec<(&str, f64)> = Vec::new();

    step.start(acts)?;
    let x0 = down(&acts.x0)?;
    if down(&acts.x)? != x0 {
        bail!("rank {rank}: x is not a copy of x0 at the step's start");
    }
    worst.push((
        "rmsnorm",
        check_rmsnorm("rmsnorm", &widen(&x0), &down(&acts.h)?, s.hidden)?,
    ));
    let h = down(&acts.h)?;

    let gemm = |m: Matrix, a: &[bf16], lda: usize, c: &[bf16]| -> Result<f64> {
        let (k, n) = m.dims(&s);
        check_gemm(m, a, lda, c, k, n, b, &|i| weight(seed, 0, m, rank, i))
    };
    step.op(acts, 0, Op::Qkv)?;
    let qkv = down(&acts.qkv)?;
    worst.push(("qkv", gemm(Matrix::Qkv, &h, s.hidden, &qkv)?));
    step.op(acts, 0, Op::O)?;
    let o = down(&acts.o)?;
    worst.push(("o", gemm(Matrix::O, &qkv, s.qkv_cols, &o)?));

    step.op(acts, 0, Op::ResidualNorm1)?;
    let x = down(&acts.x)?;
    for (i, ((&x0v, &ov), &xv)) in x0.iter().zip(&o).zip(&x).enumerate() {
        // One f32 add rounded once, as the kernel does: bit for bit.
        let want = bf16::from_f32(x0v.to_f32() + ov.to_f32());
        if xv.to_bits() != want.to_bits() {
            bail!("rank {rank}: residual add, element {i}: got {xv}, want {want}");
        }
    }
    let h = down(&acts.h)?;
    worst.push((
        "residual_rmsnorm",
        check_rmsnorm("residual_rmsnorm", &widen(&x), &h, s.hidden)?,
    ));

    step.op(acts, 0, Op::GateUp)?;
    let gate_up = down(&acts.gate_up)?;
    worst.push(("gate_up", gemm(Matrix::GateUp, &h, s.hidden, &gate_up)?));
    step.op(acts, 0, Op::SiluMul)?;
    let act = down(&acts.act)?;
    let mut w = 0.0f64;
    let cols = s.inter_cols;
    for (i, got) in act.iter().enumerate() {
        let (row, j) = (i / cols, i % cols);
        let g = gate_up[row * 2 * cols + j].to_f64();
        let u = gate_up[row * 2 * cols + cols + j].to_f64();
        let want = g / (1.0 + (-g).exp()) * u;
        let tol = BF16_REL * want.abs() + 1e-6;
        let err = (got.to_f64() - want).abs();
        if err > tol {
            bail!("rank {rank}: silu_mul, row {row}, column {j}: got {got}, want {want}");
        }
        w = w.max(err / tol);
    }
    worst.push(("silu_mul", w));
    step.op(acts, 0, Op::Down)?;
    let m = down(&acts.m)?;
    worst.push(("down", gemm(Matrix::Down, &act, s.inter_cols, &m)?));

    let parts: Vec<String> = worst
        .iter()
        .map(|(what, w)| format!("{what} {w:.2}"))
        .collect();
    Ok(format!(
        "layer 0 op by op against the host (worst error / tolerance): {}",
        parts.join(", ")
    ))
}

/// FNV-1a over the bits: equal on every rank when the ranks agree.
pub fn checksum(x: &[bf16]) -> u64 {
    let mut h = FnvHasher::default();
    for v in x {
        h.write(&v.to_bits().to_le_bytes());
    }
    h.finish()
}

/// `(|x - reference| / |reference|, max |x_i - reference_i|)`, L2 norms.
pub fn compare(x: &[bf16], reference: &[bf16]) -> (f64, f64) {
    let (mut d2, mut r2, mut max_abs) = (0.0f64, 0.0f64, 0.0f64);
    for (a, b) in x.iter().zip(reference) {
        let (a, b) = (a.to_f64(), b.to_f64());
        d2 += (a - b) * (a - b);
        r2 += b * b;
        max_abs = max_abs.max((a - b).abs());
    }
    let rel = if r2 > 0.0 {
        (d2 / r2).sqrt()
    } else {
        d2.sqrt()
    };
    (rel, max_abs)
}

/// One rank's view of one variant's final residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FinalCheck {
    pub checksum: u64,
    pub finite: bool,
    /// Against the NCCL variant's, where it ran: relative L2 difference
    /// and largest absolute difference.
    pub vs_nccl: Option<(f64, f64)>,
}

impl FinalCheck {
    pub fn of(x: &[bf16], nccl: Option<&[bf16]>) -> FinalCheck {
        FinalCheck {
            checksum: checksum(x),
            finite: x.iter().all(|v| v.is_finite()),
            vs_nccl: nccl.map(|n| compare(x, n)),
        }
    }
}

/// The verdict over every rank's [`FinalCheck`]: a line for the table,
/// or the failure. `communicates`: the variant all-reduced (so the ranks
/// must agree, and it must match NCCL); without communication (`none`,
/// world > 1) each rank's stream is its own and only finiteness counts.
pub fn verdict(all: &[FinalCheck], communicates: bool) -> std::result::Result<String, String> {
    if let Some(rank) = all.iter().position(|c| !c.finite) {
        return Err(format!("rank {rank}: the output is not finite"));
    }
    if !communicates {
        return Ok("finite (no communication: ranks differ)".into());
    }
    if let Some(rank) = all.iter().position(|c| c.checksum != all[0].checksum) {
        return Err(format!(
            "ranks disagree: rank {rank}'s output differs from rank 0's"
        ));
    }
    let worst =
        all.iter()
            .filter_map(|c| c.vs_nccl)
            .fold(None, |acc: Option<(f64, f64)>, (rel, abs)| {
                Some(acc.map_or((rel, abs), |(r, a)| (r.max(rel), a.max(abs))))
            });
    match worst {
        None => Ok("ranks agree, finite (no NCCL to compare with)".into()),
        Some((rel, abs)) if rel <= MAX_REL_DIFF => Ok(format!(
            "ranks agree; vs nccl: rel {rel:.1e}, max |diff| {abs:.3}"
        )),
        Some((rel, abs)) => Err(format!(
            "differs from nccl: rel {rel:.2e} > {MAX_REL_DIFF:.0e} (max |diff| {abs:.3})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[f32]) -> Vec<bf16> {
        xs.iter().map(|&x| bf16::from_f32(x)).collect()
    }

    #[test]
    fn sample_cols_stay_inside_and_cover_both_ends() {
        for n in [1, 7, 16, 1024, 3072] {
            let c = sample_cols(n);
            assert!(c.iter().all(|&j| j < n));
            assert_eq!(c[0], 0);
            assert_eq!(*c.last().expect("columns"), n - 1);
            assert!(c.windows(2).all(|w| w[0] < w[1]));
        }
        assert!(sample_cols(4096).len() >= 30);
    }

    #[test]
    fn compare_and_checksum() {
        let a = v(&[1.0, 2.0, -3.0]);
        assert_eq!(compare(&a, &a), (0.0, 0.0));
        let b = v(&[1.0, 2.0, -2.0]);
        let (rel, abs) = compare(&b, &a);
        assert_eq!(abs, 1.0);
        assert!((rel - 1.0 / 14f64.sqrt()).abs() < 1e-12);
        assert_eq!(checksum(&a), checksum(&v(&[1.0, 2.0, -3.0])));
        assert_ne!(checksum(&a), checksum(&b));
        // Bits, not values: -0 and 0 differ.
        assert_ne!(checksum(&v(&[0.0])), checksum(&v(&[-0.0])));
    }

    #[test]
    fn verdicts() {
        let ok = FinalCheck::of(&v(&[1.0, 2.0]), Some(&v(&[1.0, 2.0])));
        assert!(verdict(&[ok, ok], true).is_ok());
        let other = FinalCheck::of(&v(&[1.0, 2.5]), Some(&v(&[1.0, 2.0])));
        let e = verdict(&[ok, other], true).expect_err("ranks disagree");
        assert!(e.contains("rank 1"), "{e}");
        // Both ranks agree but are far from NCCL.
        assert!(verdict(&[other, other], true).is_err());
        // Without communication the ranks may differ.
        assert!(verdict(&[ok, other], false).is_ok());
        let inf = FinalCheck::of(&v(&[f32::INFINITY]), None);
        assert!(verdict(&[inf], false).is_err());
        let alone = FinalCheck::of(&v(&[1.0]), None);
        assert!(
            verdict(&[alone, alone], true)
                .expect("ok")
                .contains("no NCCL")
        );
    }

    #[test]
    fn rmsnorm_reference_accepts_the_rounded_norm_and_refuses_a_wrong_one() {
        let x = [3.0f64, -4.0];
        let inv = 1.0 / ((25.0 / 2.0) + f64::from(EPS)).sqrt();
        let good: Vec<bf16> = x.iter().map(|v| bf16::from_f64(v * inv)).collect();
        assert!(check_rmsnorm("t", &x, &good, 2).expect("within") <= 1.0);
        let bad = v(&[0.9, -1.2]);
        assert!(check_rmsnorm("t", &x, &bad, 2).is_err());
    }

    #[test]
    fn gemm_reference_finds_a_transposed_weight() {
        // a (2 x 3) times w (3 x 2), row-major; then the same with w read
        // as its transpose.
        let a = v(&[1.0, 2.0, 3.0, -1.0, 0.5, 2.0]);
        let w = [0.5f64, -1.0, 2.0, 0.25, -0.5, 1.0];
        let c: Vec<bf16> = (0..2)
            .flat_map(|r| {
                let a = &a;
                (0..2).map(move |j| {
                    bf16::from_f64((0..3).map(|k| a[r * 3 + k].to_f64() * w[k * 2 + j]).sum())
                })
            })
            .collect();
        let at = |i: usize| w[i];
        assert!(check_gemm(Matrix::Qkv, &a, 3, &c, 3, 2, 2, &at).is_ok());
        let transposed = |i: usize| w[(i % 2) * 3 + i / 2];
        assert!(check_gemm(Matrix::Qkv, &a, 3, &c, 3, 2, 2, &transposed).is_err());
    }
}
