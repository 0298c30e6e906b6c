//! Reproducible random inputs every rank can regenerate for every other
//! rank, an f64 reference, tolerances, the checks of outputs and their
//! fingerprints.
//!
//! The inputs are the soak kernels' own pattern (`intranode_kernels_gpu::pattern`,
//! host-tested there): one generator, whether the host or the GPU writes
//! them.

use std::hash::Hasher;

use anyhow::{Result, bail};
use fnv::FnvHasher;
use half::{bf16, f16};
use intranode::internals::ScatterGather;
use intranode::kernels::{DType, ElemType};
use intranode::types::ReduceOp;

use crate::rank::Rank;

/// SplitMix64's finalizer: the one copy, shared with the kernels.
pub use intranode_kernels_gpu::pattern::mix;

/// Input value: a multiple of 1/8 in [-8, 8], exact in every element type,
/// fresh for every (seed, call, rank, element).
pub fn input_value(seed: u64, call: u64, rank: usize, i: usize) -> f64 {
    f64::from(intranode_kernels_gpu::pattern::input(
        seed,
        call,
        rank as u32,
        i as u64,
    ))
}

pub fn inputs<T: DType>(seed: u64, call: u64, rank: usize, n: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f64(input_value(seed, call, rank, i)))
        .collect()
}

/// The exact reduction of element `i` over `world` ranks.
pub fn reference(seed: u64, call: u64, world: usize, i: usize, op: ReduceOp) -> f64 {
    let vals = (0..world).map(|r| input_value(seed, call, r, i));
    match op {
        ReduceOp::Sum => vals.sum(),
        ReduceOp::Avg => vals.sum::<f64>() / world as f64,
        ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
        ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
        // `ReduceOp` is non-exhaustive: a new op needs its reference here.
        other => panic!("no f64 reference for {other:?}"),
    }
}

/// Allowed |out - ref|: one rounding to the output type (half an ulp,
/// bounded by the relative precision) plus one f32 rounding of an average.
pub fn tolerance(elem: ElemType, reference: f64) -> f64 {
    let rel = match elem {
        ElemType::Bf16 => 1.0 / 128.0,
        ElemType::F16 => 1.0 / 1024.0,
        ElemType::F32 => 1.0e-6,
        // `ElemType` is non-exhaustive: a new type needs its tolerance here.
        other => panic!("no tolerance for {other:?}"),
    };
    rel * reference.abs().max(1.0 / 8.0)
}

/// The first element of `out` off the reference, as a message.
pub fn verify<T: DType>(
    out: &[T],
    seed: u64,
    call: u64,
    world: usize,
    op: ReduceOp,
) -> Result<(), String> {
    for (i, v) in out.iter().enumerate() {
        let want = reference(seed, call, world, i, op);
        let got = v.to_f64();
        if !(got - want).abs().le(&tolerance(T::ELEM, want)) {
            return Err(format!(
                "element {i} of {}: got {got}, want {want} ({:?} {op:?})",
                out.len(),
                T::ELEM
            ));
        }
    }
    Ok(())
}

/// Checks one reduce-scatter or all-gather output of `r` (shards of `n`
/// elements): every element against the f64 reference (reduce-scatter,
/// within rounding) or the inputs themselves (all-gather, exactly); `how`
/// names the call in errors.
#[allow(clippy::too_many_arguments)]
pub fn verify_scatter_gather<T: DType>(
    r: &Rank,
    what: ScatterGather,
    out: &[T],
    seed: u64,
    call: u64,
    n: usize,
    op: ReduceOp,
    how: &str,
) -> Result<()> {
    let (me, world) = (r.rank(), r.world());
    for (i, v) in out.iter().enumerate() {
        let got = v.to_f64();
        let (want, ok) = match what {
            ScatterGather::ReduceScatter => {
                let want = reference(seed, call, world, me * n + i, op);
                (want, (got - want).abs() <= tolerance(T::ELEM, want))
            }
            ScatterGather::AllGather => {
                let want = input_value(seed, call, i / n, i % n);
                (want, got == want)
            }
        };
        if !ok {
            bail!(
                "rank {me}: {} {how} {:?} {op:?}, shard of {n}: element {i}: got {got}, want {want}",
                what.name(),
                T::ELEM
            );
        }
    }
    Ok(())
}

/// FNV-1a over the bit patterns of `out`: equal on every rank when the
/// outputs are bitwise identical.
pub fn fingerprint<T: DType>(out: &[T]) -> u64 {
    let mut h = FnvHasher::default();
    for v in out {
        h.write(&bits_of(*v).to_le_bytes());
    }
    h.finish()
}

fn bits_of<T: DType>(v: T) -> u32 {
    match T::ELEM {
        ElemType::Bf16 => bf16::from_f32(v.to_f32()).to_bits() as u32,
        ElemType::F16 => f16::from_f32(v.to_f32()).to_bits() as u32,
        ElemType::F32 => v.to_f32().to_bits(),
        other => panic!("no bit pattern for {other:?}"),
    }
}

/// A value no reduction of the inputs produces: outputs start as this so
/// an element the kernel never wrote fails the check.
pub fn poison<T: DType>() -> T {
    T::from_f64(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank's inputs for one call, rounded to `T`.
    fn reduced<T: DType>(seed: u64, call: u64, world: usize, n: usize, op: ReduceOp) -> Vec<T> {
        (0..n)
            .map(|i| T::from_f64(reference(seed, call, world, i, op)))
            .collect()
    }

    #[test]
    fn the_reference_rounded_passes_and_wrong_data_fails() {
        for op in ReduceOp::ALL {
            let good: Vec<bf16> = reduced(7, 3, 4, 1000, op);
            assert_eq!(verify(&good, 7, 3, 4, op), Ok(()), "{op:?}");
            // Another call's result, an unwritten (poisoned) element, one
            // input step off: each fails.
            let other: Vec<bf16> = reduced(7, 4, 4, 1000, op);
            assert!(verify(&other, 7, 3, 4, op).is_err(), "{op:?}");
            let mut poisoned = good.clone();
            poisoned[999] = poison();
            let err = verify(&poisoned, 7, 3, 4, op).expect_err("poison passed");
            assert!(err.starts_with("element 999 of 1000"), "{err}");
            let mut off: Vec<f32> = reduced(7, 3, 4, 1000, op);
            off[5] += 0.125;
            assert!(verify(&off, 7, 3, 4, op).is_err(), "{op:?}");
        }
    }

    #[test]
    fn inputs_are_the_kernels_pattern() {
        for i in 0..1000 {
            let v = input_value(11, 2, 3, i);
            assert_eq!(
                v,
                f64::from(intranode_kernels_gpu::pattern::input(11, 2, 3, i as u64))
            );
            assert_eq!((v * 8.0).fract(), 0.0, "{v}");
        }
        assert_eq!(inputs::<f16>(11, 2, 3, 5).len(), 5);
    }

    #[test]
    fn fingerprints_tell_bit_patterns_apart() {
        let a: Vec<bf16> = inputs(1, 1, 0, 64);
        let mut b = a.clone();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        b[63] = bf16::from_f32(b[63].to_f32() + 0.125);
        assert_ne!(fingerprint(&a), fingerprint(&b));
    }
}
