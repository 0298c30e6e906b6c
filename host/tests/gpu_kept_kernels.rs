//! The production kernels are loaded once per context and kept
//! (NOTE [kept kernels] in `kernels/mod.rs`): loading them again, as every
//! communicator built after the first does, loads nothing, and cycles of
//! load and drop cost no device memory. Skips visibly without a GPU.

use intranode::gpu;
use intranode::kernels::{KernelModule, live_modules};

#[test]
fn kernels_are_loaded_once_per_context() -> Result<(), Box<dyn std::error::Error>> {
    if !gpu::gpus_or_skip(1, "kernels_are_loaded_once_per_context")? {
        return Ok(());
    }
    let ctx = gpu::context(0)?;
    let stream = ctx.new_stream()?;
    let first = KernelModule::load(&ctx)?;
    let kept = live_modules();
    drop(first);
    assert_eq!(live_modules(), kept, "the first module was unloaded");
    // The buffers first: the memory measured is the kernels' alone.
    let a = stream.clone_htod(&[1.0f32; 33])?;
    let b = stream.clone_htod(&[2.0f32; 33])?;
    let mut out = stream.alloc_zeros::<f32>(33)?;
    ctx.synchronize()?;
    let (free_before, _) = ctx.mem_get_info()?;
    for cycle in 0..10 {
        let k = KernelModule::load(&ctx)?;
        let load = k.load_report();
        assert!(
            load.load.is_zero() && load.resolve.is_zero(),
            "cycle {cycle} loaded again: {load:?}"
        );
        // The kept kernels launch.
        k.add(&stream, &a, &b, &mut out)?;
        assert_eq!(stream.clone_dtoh(&out)?, vec![3.0f32; 33]);
        drop(k);
        assert_eq!(live_modules(), kept, "cycle {cycle} left a module");
    }
    ctx.synchronize()?;
    let (free_after, _) = ctx.mem_get_info()?;
    // cuMemGetInfo moves in 2 MiB pages; a load of the kernels cost 4 MiB
    // or more on H100.
    assert!(
        free_after + (2 << 20) >= free_before,
        "10 loads of the kept kernels took {} bytes",
        free_before - free_after
    );
    // A module of its own is loaded afresh and unloaded on drop.
    let own = KernelModule::load_unshared(&ctx)?;
    assert_eq!(live_modules(), kept + 1);
    assert!(!own.load_report().resolve.is_zero() || !own.load_report().load.is_zero());
    drop(own);
    assert_eq!(live_modules(), kept);
    Ok(())
}
