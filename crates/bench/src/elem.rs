//! The element types and ops `bench --dtype --op` times: every
//! `cudarc::nccl::NcclType` with a device representation and every NCCL
//! op, through `Communicator::all_reduce` as applications call it (ours
//! where `decide_all_reduce` picks our kernels: bf16, f16, f32 with sum,
//! avg, min or max; NCCL for the rest).
//!
//! Inputs are small integers (in -2..=2, or 0..=4 unsigned; 1, 2 or -1 for
//! products) that differ by element, rank and size, so that every result
//! but a float average is exact in every type on up to 8 ranks and is
//! counted wrong or right exactly (nccl-tests' `#wrong`); averages within
//! a relative 2^-7 (bf16's rounding).

use std::fmt::Debug;

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use cudarc::nccl::{NcclType, ReduceOp};
use half::{bf16, f16};

/// `--dtype`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Bf16,
    F16,
    F32,
    F64,
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
}

impl Dtype {
    /// Its name as `--dtype` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
            Dtype::I8 => "i8",
            Dtype::U8 => "u8",
            Dtype::I32 => "i32",
            Dtype::U32 => "u32",
            Dtype::I64 => "i64",
            Dtype::U64 => "u64",
        }
    }

    /// Whether our kernels reduce it (the others are NCCL's).
    pub fn ours(self) -> bool {
        matches!(self, Dtype::Bf16 | Dtype::F16 | Dtype::F32)
    }

    pub fn is_float(self) -> bool {
        matches!(self, Dtype::Bf16 | Dtype::F16 | Dtype::F32 | Dtype::F64)
    }
}

/// `--op`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

impl Op {
    pub fn nccl(self) -> ReduceOp {
        match self {
            Op::Sum => ReduceOp::Sum,
            Op::Prod => ReduceOp::Prod,
            Op::Max => ReduceOp::Max,
            Op::Min => ReduceOp::Min,
            Op::Avg => ReduceOp::Avg,
        }
    }

    /// Its name in tables and results files (nccl-tests' `redop`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Prod => "prod",
            Op::Max => "max",
            Op::Min => "min",
            Op::Avg => "avg",
        }
    }

    /// Whether our kernels have it (product: NCCL's alone).
    pub fn ours(self) -> bool {
        self != Op::Prod
    }
}

/// A host element of the sweep.
pub trait BenchElem:
    NcclType + DeviceRepr + ValidAsZeroBits + Copy + Debug + Unpin + Send + Sync + 'static
{
    const NAME: &'static str;
    const SIGNED: bool;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

macro_rules! bench_elem {
    ($($t:ty: $name:literal, $signed:literal, $from:expr, $to:expr;)*) => {$(
        impl BenchElem for $t {
            const NAME: &'static str = $name;
            const SIGNED: bool = $signed;
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
        }
    )*};
}

bench_elem! {
    bf16: "bf16", true, bf16::from_f64, bf16::to_f64;
    f16: "f16", true, f16::from_f64, f16::to_f64;
    f32: "f32", true, |v| v as f32, |x| x as f64;
    f64: "f64", true, |v| v, |x| x;
    i8: "i8", true, |v| v as i8, |x| x as f64;
    u8: "u8", false, |v| v as u8, |x| x as f64;
    i32: "i32", true, |v| v as i32, |x| x as f64;
    u32: "u32", false, |v| v as u32, |x| x as f64;
    i64: "i64", true, |v| v as i64, |x| x as f64;
    u64: "u64", false, |v| v as u64, |x| x as f64;
}

/// Element `i` of `rank`'s input for call `call` (a size of the sweep).
pub fn input_value(op: Op, signed: bool, call: u64, rank: usize, i: usize) -> f64 {
    // Ranks step by 1 for products (at most 3 of 8 ranks hold a 2: |prod|
    // <= 8) and by 3 for the rest (5 values: every rank's differs from its
    // neighbours').
    let mix = |rank_step: u64| {
        (i as u64)
            .wrapping_mul(7)
            .wrapping_add(rank as u64 * rank_step)
            .wrapping_add(call)
    };
    match op {
        Op::Prod => match mix(1) % 3 {
            0 => 2.0,
            1 if signed => -1.0,
            _ => 1.0,
        },
        _ => {
            let v = (mix(3) % 5) as f64;
            if signed { v - 2.0 } else { v }
        }
    }
}

/// Every rank's `elems` inputs of call `call`, in `T`.
pub fn inputs<T: BenchElem>(op: Op, call: u64, rank: usize, elems: usize) -> Vec<T> {
    (0..elems)
        .map(|i| T::from_f64(input_value(op, T::SIGNED, call, rank, i)))
        .collect()
}

/// What an output holds before the call: outside every result's range.
pub fn poison<T: BenchElem>() -> T {
    T::from_f64(99.0)
}

/// The reduction of element `i` over `world` ranks.
pub fn reference(op: Op, signed: bool, call: u64, world: usize, i: usize) -> f64 {
    let vals = (0..world).map(|r| input_value(op, signed, call, r, i));
    match op {
        Op::Sum => vals.sum(),
        Op::Prod => vals.product(),
        Op::Max => vals.fold(f64::MIN, f64::max),
        Op::Min => vals.fold(f64::MAX, f64::min),
        Op::Avg => vals.sum::<f64>() / world as f64,
    }
}

/// The elements of `out` that differ from the reference (exactly; an
/// average within a relative 2^-7), and the first of them, described.
pub fn wrong<T: BenchElem>(out: &[T], op: Op, call: u64, world: usize) -> (usize, Option<String>) {
    let mut count = 0;
    let mut first = None;
    for (i, v) in out.iter().enumerate() {
        let want = reference(op, T::SIGNED, call, world, i);
        let tolerance = match op {
            Op::Avg => want.abs().max(1.0) / 128.0,
            _ => 0.0,
        };
        let got = v.to_f64();
        // NaN (a poisoned float) is never within it.
        if !(got - want).abs().le(&tolerance) {
            count += 1;
            if first.is_none() {
                first = Some(format!("element {i}: {v:?}, want {want}"));
            }
        }
    }
    (count, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inputs' reductions stay exact in the narrowest types on 8
    /// ranks, and a result is counted right exactly when it is.
    #[test]
    fn references_fit_every_type_and_wrong_counts_exactly() {
        for op in [Op::Sum, Op::Prod, Op::Max, Op::Min] {
            for world in 2..=8 {
                for i in 0..60 {
                    for signed in [false, true] {
                        let want = reference(op, signed, 3, world, i);
                        assert_eq!(want.fract(), 0.0);
                        let (lo, hi) = if signed {
                            (-128.0, 127.0)
                        } else {
                            (0.0, 255.0)
                        };
                        assert!((lo..=hi).contains(&want), "{op:?} {world} {i}: {want}");
                        // bf16 holds the integers up to 256 exactly.
                        assert_eq!(bf16::from_f64(want).to_f64(), want);
                    }
                }
            }
        }
        let world = 3;
        let mut out: Vec<i8> = (0..100)
            .map(|i| reference(Op::Sum, true, 5, world, i) as i8)
            .collect();
        assert_eq!(wrong(&out, Op::Sum, 5, world), (0, None));
        out[17] = poison();
        out[40] = out[40].wrapping_add(1);
        let (n, first) = wrong(&out, Op::Sum, 5, world);
        assert_eq!(n, 2);
        assert!(first.is_some_and(|f| f.starts_with("element 17: 99")));
        // A poisoned output is all wrong.
        let poisoned = vec![poison::<u64>(); 10];
        assert_eq!(wrong(&poisoned, Op::Max, 0, 2).0, 10);
    }

    /// `--dtype`'s names are clap's, and each is the Rust type's.
    #[test]
    fn dtype_names_match_the_types() {
        use clap::ValueEnum as _;
        for d in Dtype::value_variants() {
            let clap_name = d.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(clap_name.as_deref(), Some(d.name()));
        }
        assert_eq!(Dtype::I32.name(), <i32 as BenchElem>::NAME);
        assert_eq!(Dtype::Bf16.name(), <bf16 as BenchElem>::NAME);
    }

    #[test]
    fn averages_allow_the_rounding_of_bf16_only() {
        let world = 3;
        let exact: Vec<bf16> = (0..50)
            .map(|i| bf16::from_f64(reference(Op::Avg, true, 1, world, i)))
            .collect();
        assert_eq!(wrong(&exact, Op::Avg, 1, world).0, 0);
        let off: Vec<bf16> = (0..50)
            .map(|i| bf16::from_f64(reference(Op::Avg, true, 1, world, i) + 0.1))
            .collect();
        assert_eq!(wrong(&off, Op::Avg, 1, world).0, 50);
    }
}
