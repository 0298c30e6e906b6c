//! The cast kernels (f32 to and from bf16/f16) and `axpy_f32` against the
//! host, bit for bit, on awkward lengths, misaligned views and edge values
//! (overflow, subnormals, signed zeros, infinities, NaN). Skips visibly
//! without a GPU (see `gpu::gpus_or_skip`).

use std::sync::Arc;

use cudarc::driver::CudaStream;
use intranode::gpu;
use intranode::kernels::{DType, KernelModule};
use rand::Rng;

const LENGTHS: [usize; 8] = [1, 3, 7, 8, 9, 4095, 65_537, (1 << 20) + 3];

/// Values every cast must get right, then random ones of every magnitude.
fn inputs(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    let edges = [
        0.0f32,
        -0.0,
        1.0,
        -1.5,
        65_504.0, // f16 max
        65_520.0, // rounds to f16 infinity
        3.0e38,   // bf16: rounds to a finite value
        f32::MAX, // bf16: rounds to infinity
        6.0e-8,   // f16 subnormal
        1.0e-40,  // f32 subnormal, bf16 subnormal
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0 + 1.0 / 256.0, // a bf16 tie: to even
        1.0 + 3.0 / 256.0, // a bf16 tie: to even, upwards
    ];
    (0..n)
        .map(|i| match edges.get(i) {
            Some(&v) => v,
            None => {
                let mantissa: f32 = rng.random_range(-1.0..1.0);
                mantissa * 2f32.powi(rng.random_range(-30..30))
            }
        })
        .collect()
}

/// Same value, with every NaN counted equal to every NaN.
fn same_bits(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

fn check_round_trip<H: DType + std::fmt::Debug>(
    module: &KernelModule,
    stream: &Arc<CudaStream>,
    n: usize,
    offset: usize,
) -> Result<(), String> {
    let e = |e: cudarc::driver::DriverError| e.to_string();
    let mut rng = rand::rng();
    let host = inputs(&mut rng, n + offset);
    let src = stream.clone_htod(&host).map_err(e)?;
    // The sentinel as the narrow type stores it: 1234 is 1232 in bf16.
    let sentinel = H::from_f64(1234.0);
    let mut narrow = stream.clone_htod(&vec![sentinel; n + offset]).map_err(e)?;
    let mut wide = stream.clone_htod(&vec![-7.0f32; n + offset]).map_err(e)?;
    {
        let s = src.slice(offset..);
        let mut d = narrow.slice_mut(offset..);
        module.cast(stream, &s, &mut d).map_err(|e| e.to_string())?;
    }
    {
        let s = narrow.slice(offset..);
        let mut d = wide.slice_mut(offset..);
        module.cast(stream, &s, &mut d).map_err(|e| e.to_string())?;
    }
    let got_narrow = stream.clone_dtoh(&narrow).map_err(e)?;
    let got_wide = stream.clone_dtoh(&wide).map_err(e)?;
    stream.synchronize().map_err(e)?;
    for i in 0..offset {
        if !same_bits(got_narrow[i].to_f32(), sentinel.to_f32()) || got_wide[i] != -7.0 {
            return Err(format!(
                "{:?}: element {i} before the view was written",
                H::ELEM
            ));
        }
    }
    for i in offset..n + offset {
        let want = H::from_f32(host[i]);
        if !same_bits(got_narrow[i].to_f32(), want.to_f32()) {
            return Err(format!(
                "{:?} n={n} offset={offset}: cast of {:e} (element {}) gave {:?}, want {:?}",
                H::ELEM,
                host[i],
                i - offset,
                got_narrow[i],
                want
            ));
        }
        if !same_bits(got_wide[i], want.to_f32()) {
            return Err(format!(
                "{:?} n={n} offset={offset}: widening {:?} (element {}) gave {:e}",
                H::ELEM,
                want,
                i - offset,
                got_wide[i]
            ));
        }
    }
    Ok(())
}

#[test]
fn casts_match_the_host_bit_for_bit() -> Result<(), Box<dyn std::error::Error>> {
    if !gpu::gpus_or_skip(1, "casts_match_the_host_bit_for_bit")? {
        return Ok(());
    }
    let ctx = gpu::context(0)?;
    let module = KernelModule::load(&ctx)?;
    let stream = ctx.default_stream();
    for n in LENGTHS {
        for offset in [0, 1] {
            check_round_trip::<half::bf16>(&module, &stream, n, offset)?;
            check_round_trip::<half::f16>(&module, &stream, n, offset)?;
        }
    }
    // Same type on both sides, or two 16-bit types: refused.
    let a = stream.clone_htod(&[1.0f32; 4])?;
    let mut b = stream.clone_htod(&[0.0f32; 4])?;
    assert!(module.cast(&stream, &a, &mut b).is_err());
    let mut short = stream.clone_htod(&[half::bf16::ZERO; 3])?;
    assert!(module.cast(&stream, &a, &mut short).is_err());
    Ok(())
}

#[test]
fn axpy_matches_the_host_bit_for_bit() -> Result<(), Box<dyn std::error::Error>> {
    if !gpu::gpus_or_skip(1, "axpy_matches_the_host_bit_for_bit")? {
        return Ok(());
    }
    let ctx = gpu::context(0)?;
    let module = KernelModule::load(&ctx)?;
    let stream = ctx.default_stream();
    let mut rng = rand::rng();
    for n in LENGTHS {
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let y: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let a = -0.037f32;
        let dx = stream.clone_htod(&x)?;
        let mut dy = stream.clone_htod(&y)?;
        module.axpy_f32(&stream, a, &dx, &mut dy)?;
        let got = stream.clone_dtoh(&dy)?;
        stream.synchronize()?;
        for i in 0..n {
            let want = y[i] + a * x[i];
            assert_eq!(
                got[i].to_bits(),
                want.to_bits(),
                "n={n} element {i}: {} + {a} * {} gave {}, want {want}",
                y[i],
                x[i],
                got[i]
            );
        }
    }
    Ok(())
}
