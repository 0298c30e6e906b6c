//! Reproducible random inputs every rank can regenerate for every other
//! rank, an f64 reference, tolerances and output fingerprints.

use half::{bf16, f16};
use intranode::kernels::{DType, ElemType};

/// SplitMix64 of a counter: input element `i` of `rank` in call `call`
/// (the soak's finalizer, one copy).
pub(crate) use kernels_gpu::pattern::mix;

/// Input value: a multiple of 1/8 in [-8, 8], exact in every element type,
/// fresh for every (seed, call, rank, element).
pub fn input_value(seed: u64, call: u64, rank: usize, i: usize) -> f64 {
    let h = mix(seed
        ^ mix(call ^ ((rank as u64) << 48))
        ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    ((h >> 40) % 129) as f64 / 8.0 - 8.0
}

pub fn inputs<T: DType>(seed: u64, call: u64, rank: usize, n: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f64(input_value(seed, call, rank, i)))
        .collect()
}

/// Reduction ops of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Sum,
    Avg,
    Min,
    Max,
}

impl Op {
    pub const ALL: [Op; 4] = [Op::Sum, Op::Avg, Op::Min, Op::Max];

    pub fn nccl(self) -> cudarc::nccl::ReduceOp {
        match self {
            Op::Sum => cudarc::nccl::ReduceOp::Sum,
            Op::Avg => cudarc::nccl::ReduceOp::Avg,
            Op::Min => cudarc::nccl::ReduceOp::Min,
            Op::Max => cudarc::nccl::ReduceOp::Max,
        }
    }
}

/// The exact reduction of element `i` over `world` ranks.
pub fn reference(seed: u64, call: u64, world: usize, i: usize, op: Op) -> f64 {
    let vals = (0..world).map(|r| input_value(seed, call, r, i));
    match op {
        Op::Sum => vals.sum(),
        Op::Avg => vals.sum::<f64>() / world as f64,
        Op::Min => vals.fold(f64::INFINITY, f64::min),
        Op::Max => vals.fold(f64::NEG_INFINITY, f64::max),
    }
}

/// Allowed |out - ref|: one rounding to the output type (half an ulp,
/// bounded by the relative precision) plus one f32 rounding of an average.
pub fn tolerance(elem: ElemType, reference: f64) -> f64 {
    let rel = match elem {
        ElemType::Bf16 => 1.0 / 128.0,
        ElemType::F16 => 1.0 / 1024.0,
        ElemType::F32 => 1.0e-6,
    };
    rel * reference.abs().max(1.0 / 8.0)
}

/// The first element of `out` off the reference, as a message.
pub fn verify<T: DType>(
    out: &[T],
    seed: u64,
    call: u64,
    world: usize,
    op: Op,
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

/// FNV-1a over the bit patterns of `out`: equal on every rank when the
/// outputs are bitwise identical.
pub fn fingerprint<T: DType>(out: &[T]) -> u64 {
    // SAFETY-free view of the bits through each type's to_bits.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in out {
        let bits = bits_of(*v);
        for b in bits.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn bits_of<T: DType>(v: T) -> u32 {
    match T::ELEM {
        ElemType::Bf16 => bf16::from_f32(v.to_f32()).to_bits() as u32,
        ElemType::F16 => f16::from_f32(v.to_f32()).to_bits() as u32,
        ElemType::F32 => v.to_f32().to_bits(),
    }
}

/// A value no reduction of the inputs produces: outputs start as this so
/// an element the kernel never wrote fails the check.
pub fn poison<T: DType>() -> T {
    T::from_f64(f64::NAN)
}
