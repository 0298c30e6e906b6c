//! First GPU test: the Rust-built `add_*` kernels against a host reference
//! on fresh random data, for every element type and awkward lengths and
//! offsets. Skips visibly without a GPU (see `gpu::gpus_or_skip`).

use std::sync::Arc;

use cudarc::driver::CudaStream;
use intranode::gpu;
use intranode::kernels::{DType, KernelModule};
use rand::Rng;

/// Lengths around the 16-byte vector width (8 halves, 4 floats), a page,
/// and a large odd one.
const LENGTHS: [usize; 9] = [1, 3, 7, 8, 9, 4095, 4096, 65_537, (1 << 20) + 3];

fn random_vec<T: DType>(rng: &mut impl Rng, n: usize) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f64(rng.random_range(-8.0..8.0)))
        .collect()
}

/// Checks `add` for one type; `offset` shifts every view by that many
/// elements so the kernel sees misaligned pointers.
fn check_add<T: DType + PartialEq + std::fmt::Debug>(
    module: &KernelModule,
    stream: &Arc<CudaStream>,
    n: usize,
    offset: usize,
) -> Result<(), String> {
    let mut rng = rand::rng();
    let a = random_vec::<T>(&mut rng, n + offset);
    let b = random_vec::<T>(&mut rng, n + offset);
    // Poison: a value no sum of the inputs can produce.
    let poison = vec![T::from_f64(1.0e4); n + offset];
    let da = stream.clone_htod(&a).map_err(|e| e.to_string())?;
    let db = stream.clone_htod(&b).map_err(|e| e.to_string())?;
    let mut dout = stream.clone_htod(&poison).map_err(|e| e.to_string())?;
    {
        let va = da.slice(offset..);
        let vb = db.slice(offset..);
        let mut vo = dout.slice_mut(offset..);
        module
            .add(stream, &va, &vb, &mut vo)
            .map_err(|e| e.to_string())?;
    }
    let out = stream.clone_dtoh(&dout).map_err(|e| e.to_string())?;
    stream.synchronize().map_err(|e| e.to_string())?;
    for i in offset..n + offset {
        let want = T::from_f32(a[i].to_f32() + b[i].to_f32());
        if out[i] != want {
            return Err(format!(
                "{:?} n={n} offset={offset}: element {} is {:?}, want {:?} ({:?} + {:?})",
                T::ELEM,
                i - offset,
                out[i],
                want,
                a[i],
                b[i]
            ));
        }
    }
    Ok(())
}

#[test]
fn add_matches_host_reference() -> Result<(), Box<dyn std::error::Error>> {
    if !gpu::gpus_or_skip(1, "add_matches_host_reference")? {
        return Ok(());
    }
    let ctx = gpu::context(0)?;
    let module = KernelModule::load(&ctx)?;
    let stream = ctx.default_stream();
    let mut checked = 0;
    for n in LENGTHS {
        for offset in [0, 1] {
            check_add::<half::bf16>(&module, &stream, n, offset)?;
            check_add::<half::f16>(&module, &stream, n, offset)?;
            check_add::<f32>(&module, &stream, n, offset)?;
            checked += 3;
        }
    }
    println!(
        "add: {checked} cases (bf16, f16, f32 x {} lengths x 2 offsets) bitwise equal to the host reference",
        LENGTHS.len()
    );
    Ok(())
}

#[test]
fn add_rejects_mismatched_lengths() -> Result<(), Box<dyn std::error::Error>> {
    if !gpu::gpus_or_skip(1, "add_rejects_mismatched_lengths")? {
        return Ok(());
    }
    let ctx = gpu::context(0)?;
    let module = KernelModule::load(&ctx)?;
    let stream = ctx.default_stream();
    let a = stream.alloc_zeros::<f32>(10)?;
    let b = stream.alloc_zeros::<f32>(11)?;
    let mut out = stream.alloc_zeros::<f32>(10)?;
    let err = module
        .add(&stream, &a, &b, &mut out)
        .expect_err("lengths differ");
    assert!(err.to_string().contains("lengths differ"), "{err}");
    Ok(())
}

#[test]
fn no_driver_is_an_error_not_a_panic() {
    // On a machine without a driver this is the path every entry point
    // takes; with one, it must simply succeed.
    match gpu::device_count() {
        Ok(n) => println!("{n} GPU(s) found"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("no CUDA driver"), "{msg}");
        }
    }
}
