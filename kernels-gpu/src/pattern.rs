//! The test pattern of `intranode-bench soak`: every input element is a
//! pure function of (seed, call, rank, index), so the GPU can both write a
//! call's inputs and check its output without the host touching a byte.
//! Plain functions shared by the soak kernels
//! (`crates/test-kernels-gpu/src/soak.rs`) and the host, where the unit
//! tests below and the soak's self-test use them.
//!
//! Inputs are multiples of 1/8 in [-8, 8]: exact in bf16, f16 and f32, and
//! any sum of up to 8 of them (at most 64 in magnitude, 10 significant
//! bits) is exact in f32, whatever the order. So the expected output is
//! the f32 reduction in rank order, rounded once like the kernels round;
//! only `Avg` (one f32 division, and NCCL's own way of averaging) and the
//! rounding to a 16-bit type need the tolerance of [`within_tolerance`].

use crate::layout::{OP_AVG, OP_MAX, OP_MIN};

/// Parameters of the soak kernels (one call's buffers and identity).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoakParams {
    /// The call's input buffer (`soak_fill` writes it).
    pub input: u64,
    /// The call's output buffer (`soak_fill` poisons it unless it is the
    /// input; `soak_check` reads it).
    pub output: u64,
    /// Elements of both.
    pub elems: u64,
    /// The run's seed: another seed, other inputs for the same calls.
    pub seed: u64,
    /// The call's number: fresh inputs for every call.
    pub call: u64,
    /// Device address of a u32 the check adds its mismatches to.
    pub mismatches: u64,
    /// This rank: whose inputs `soak_fill` writes.
    pub rank: u32,
    /// Ranks in the collective: how many inputs the expected output sums.
    pub world: u32,
    /// One of the `OP_*` codes of `layout`.
    pub op: u32,
    /// 2 (bf16 or f16) or 4 (f32): picks the tolerance.
    pub elem_bytes: u32,
    /// 1 for f16 (its tolerance differs from bf16's), else 0.
    pub is_f16: u32,
    /// Unused, zero: the tail padding as a field, so every byte copied
    /// into the launch's parameters is initialized.
    pub _pad: u32,
}

/// SplitMix64's finalizer.
#[inline(always)]
pub const fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Input element `i` of `rank` in call `call`: a multiple of 1/8 in
/// [-8, 8].
#[inline(always)]
pub fn input(seed: u64, call: u64, rank: u32, i: u64) -> f32 {
    let h = mix(seed ^ mix(call ^ ((rank as u64) << 48)) ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    ((h >> 40) % 129) as u32 as f32 / 8.0 - 8.0
}

/// The reduction of element `i` over `world` ranks, in f32 and rank
/// order, as the kernels compute it (before the rounding to the element
/// type).
#[inline(always)]
pub fn expected(seed: u64, call: u64, world: u32, i: u64, op: u32) -> f32 {
    let mut acc = input(seed, call, 0, i);
    let mut r = 1;
    while r < world {
        let v = input(seed, call, r, i);
        acc = match op {
            OP_MIN => {
                if v < acc {
                    v
                } else {
                    acc
                }
            }
            OP_MAX => {
                if v > acc {
                    v
                } else {
                    acc
                }
            }
            _ => acc + v,
        };
        r += 1;
    }
    if op == OP_AVG {
        acc /= world as f32;
    }
    acc
}

/// Whether `got` (an output element widened to f32) is close enough to
/// `want`: one rounding to the element type plus one f32 rounding of an
/// average, relative to `max(|want|, 1)`. That is below one step of the
/// input grid (1/8) wherever a 16-bit type can still tell such steps
/// apart, so wrong data (another call's, another element's, unwritten)
/// fails in all but a vanishing fraction of elements; NaN (the poison)
/// never passes.
#[inline(always)]
pub fn within_tolerance(got: f32, want: f32, elem_bytes: u32, is_f16: bool) -> bool {
    let rel = if elem_bytes == 4 {
        1.0e-6
    } else if is_f16 {
        1.0 / 1024.0
    } else {
        1.0 / 128.0
    };
    let magnitude = if want < 0.0 { -want } else { want };
    let scale = if magnitude > 1.0 { magnitude } else { 1.0 };
    let diff = got - want;
    let diff = if diff < 0.0 { -diff } else { diff };
    // `<=` is false for NaN, so a poisoned element fails.
    diff <= rel * scale
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::OP_SUM;

    #[test]
    fn inputs_are_exact_eighths_and_fresh() {
        let mut distinct = std::collections::HashSet::new();
        for i in 0..10_000u64 {
            let v = input(7, 3, 1, i);
            assert!((-8.0..=8.0).contains(&v), "{v}");
            assert_eq!((v * 8.0).fract(), 0.0, "{v}");
            distinct.insert((v * 8.0) as i32);
        }
        assert_eq!(distinct.len(), 129, "every value of the range occurs");
        // Another call, rank or seed gives other data.
        let a: Vec<f32> = (0..64).map(|i| input(7, 3, 1, i)).collect();
        for (seed, call, rank) in [(8, 3, 1), (7, 4, 1), (7, 3, 2)] {
            let b: Vec<f32> = (0..64).map(|i| input(seed, call, rank, i)).collect();
            assert_ne!(a, b, "{seed} {call} {rank}");
        }
    }

    #[test]
    fn expected_matches_an_f64_reference() {
        for world in 1..=8u32 {
            for op in [OP_SUM, OP_AVG, OP_MIN, OP_MAX] {
                for i in 0..500u64 {
                    let vals: Vec<f64> = (0..world).map(|r| input(1, 2, r, i) as f64).collect();
                    let want = match op {
                        OP_SUM => vals.iter().sum::<f64>(),
                        OP_AVG => vals.iter().sum::<f64>() / world as f64,
                        OP_MIN => vals.iter().cloned().fold(f64::INFINITY, f64::min),
                        _ => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    };
                    let got = expected(1, 2, world, i, op) as f64;
                    // Sums, mins and maxes are exact; an average is one f32
                    // rounding away.
                    let tol = if op == OP_AVG {
                        want.abs() * 1.0e-7
                    } else {
                        0.0
                    };
                    assert!(
                        (got - want).abs() <= tol,
                        "w{world} op{op} i{i}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn tolerance_accepts_roundings_and_rejects_wrong_data() {
        for i in 0..1000 {
            let want = expected(5, 9, 3, i, OP_AVG);
            // The bf16 truncation (within one bf16 ulp) and the exact value
            // pass.
            let bf16 = f32::from_bits(want.to_bits() & 0xffff_0000);
            assert!(within_tolerance(bf16, want, 2, false), "{want}");
            assert!(within_tolerance(want, want, 4, false));
            for (bytes, f16) in [(2, false), (2, true), (4, false)] {
                assert!(!within_tolerance(f32::NAN, want, bytes, f16));
                assert!(!within_tolerance(f32::INFINITY, want, bytes, f16));
            }
        }
        // One input step off fails in every type.
        for (bytes, f16) in [(2, false), (2, true), (4, false)] {
            assert!(!within_tolerance(1.625, 1.5, bytes, f16));
            assert!(!within_tolerance(-7.875, -7.75, bytes, f16));
        }
        // Near zero the floor of 1 keeps bf16 roundings of tiny averages in.
        assert!(within_tolerance(0.0, 0.003, 2, false));
        assert!(!within_tolerance(0.0, 0.003, 4, false));
    }

    #[test]
    fn params_are_plain_words() {
        assert_eq!(core::mem::size_of::<SoakParams>(), 6 * 8 + 6 * 4);
    }
}
