//! `module-probe`: where does a kernel module's load and unload lose
//! device memory (4.4 MiB a cycle on H100, none measured on
//! H200 before the kernel-family table)? One process, one GPU, no
//! launcher: each part loads and unloads the production kernels a few
//! times in a different way and reports free device memory
//! (`cuMemGetInfo` after `cuCtxSynchronize`) after every cycle, with the
//! context's `Arc` count and the process's live-module count, so that a
//! loss of ours (a handle kept, an unload skipped) reads apart from one
//! of the driver's (the same loss through the bare driver calls).
//!
//! Parts (`--parts`, default all, in this order):
//! - `control`: nothing loaded (the measurement's own noise).
//! - `cudarc`: the embedded cubin through `cudarc::driver::result::module`
//!   (`load_data`, `unload`), no function resolved.
//! - `cudarc-resolve`: the same, every kernel resolved (`get_function`).
//! - `sys`: `cuModuleLoadData` / `cuModuleUnload` through `cudarc::driver::sys`.
//! - `sys-resolve`: the same, every kernel resolved.
//! - `kernel-module`: `KernelModule::load` + drop (what a communicator
//!   does: the kernels kept for the context's life, NOTE [kept kernels]).
//! - `kernel-module-unshared`: `KernelModule::load_unshared` + drop (a
//!   module of its own, unloaded on drop: what every communicator did).
//! - `kernel-module-launch`: the same with one `add` launched and finished.
//! - `small`: the test kernels' PTX (35 KB, 20-odd kernels) through
//!   `TestKernelModule` (does the loss scale with the image?).
//! - `hold`: `--hold` cubins loaded at once, then all unloaded (is the
//!   memory of a load given back at its unload at all?).
//! - `library`: the cubin through the context-independent library API
//!   (`cuLibraryLoadData`, `cuLibraryGetKernel` + `cuKernelGetFunction`
//!   for every kernel, `cuLibraryUnload`).
//! - `nvml-raw`: `Nvml::init` + drop (`nvmlInit`/`nvmlShutdown`), the open
//!   descriptors before and after (the bare communicator's fd a cycle).
//! - `nvml-mesh`: `topology::nvl_mesh_from_nvml` (what a rendezvous asks),
//!   descriptors before and after.
//! - `ptx`: `--ptx FILE` (the committed PTX, unzipped) through
//!   `cuModuleLoadData` + every kernel resolved, `--ptx-cycles` times (the
//!   driver JIT compiles the first, its cache serves the rest).

use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cudarc::driver::{CudaContext, DriverError, sys};
use intranode::kernels::{KernelModule, TestKernelModule};
use intranode_kernels_gpu::entries::Kernel;

#[derive(clap::Args, Debug)]
pub struct ModuleProbeArgs {
    /// Device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Measured cycles per part (after one warm-up cycle).
    #[arg(long, default_value_t = 5)]
    pub cycles: usize,
    /// Parts to run, comma-separated (see the module doc); default all.
    #[arg(long, value_delimiter = ',')]
    pub parts: Vec<String>,
    /// Modules held at once by the `hold` part.
    #[arg(long, default_value_t = 4)]
    pub hold: usize,
    /// The production PTX as text, for the `ptx` part (skipped without it).
    #[arg(long)]
    pub ptx: Option<std::path::PathBuf>,
    /// Measured cycles of the `ptx` part.
    #[arg(long, default_value_t = 2)]
    pub ptx_cycles: usize,
}

const ALL_PARTS: [&str; 14] = [
    "control",
    "cudarc",
    "cudarc-resolve",
    "sys",
    "sys-resolve",
    "kernel-module",
    "kernel-module-unshared",
    "kernel-module-launch",
    "small",
    "hold",
    "library",
    "nvml-raw",
    "nvml-mesh",
    "ptx",
];

const MIB: f64 = (1u64 << 20) as f64;

/// Free device memory once the context is idle.
fn free_bytes(ctx: &CudaContext) -> Result<usize> {
    ctx.bind_to_thread()?;
    ctx.synchronize().context("cuCtxSynchronize")?;
    Ok(ctx.mem_get_info().context("cuMemGetInfo")?.0)
}

fn check(r: sys::CUresult, what: &str) -> Result<()> {
    r.result()
        .map_err(|e: DriverError| anyhow::anyhow!("{what}: {e:?}"))
}

/// Every production kernel's name, NUL-terminated.
fn kernel_names() -> Result<Vec<CString>> {
    Kernel::all()
        .map(|k| CString::new(k.to_string()).context("kernel name holds a NUL"))
        .collect()
}

/// Loads `image` (a cubin, or NUL-terminated PTX) into the current context
/// through `sys`.
fn sys_load(image: &[u8]) -> Result<sys::CUmodule> {
    let mut m = std::ptr::null_mut();
    // SAFETY: valid out pointer; `image` is a whole cubin or NUL-terminated
    // PTX that outlives the call; the caller made a context current.
    let r = unsafe { sys::cuModuleLoadData(&mut m, image.as_ptr().cast::<c_void>()) };
    check(r, "cuModuleLoadData")?;
    Ok(m)
}

/// Resolves every name in `m` through `sys`.
fn sys_resolve(m: sys::CUmodule, names: &[CString]) -> Result<Vec<sys::CUfunction>> {
    names
        .iter()
        .map(|n| {
            let mut f = std::ptr::null_mut();
            // SAFETY: `m` is loaded (the caller's), `n` NUL-terminated, the
            // out pointer valid.
            let r = unsafe { sys::cuModuleGetFunction(&mut f, m, n.as_ptr()) };
            check(r, "cuModuleGetFunction")?;
            Ok(f)
        })
        .collect()
}

fn sys_unload(m: sys::CUmodule) -> Result<()> {
    // SAFETY: `m` was loaded by `sys_load` and is unloaded once; the
    // context is idle (nothing of it was launched).
    let r = unsafe { sys::cuModuleUnload(m) };
    check(r, "cuModuleUnload")
}

/// What the loaded cubin's kernels ask of the device, and the context's
/// limits: local memory per thread is reserved for every resident thread
/// of the device, so a kernel with any raises the context's reservation.
fn describe(ctx: &Arc<CudaContext>, cubin: &[u8], names: &[CString]) -> Result<()> {
    ctx.bind_to_thread()?;
    let m = sys_load(cubin)?;
    let fs = sys_resolve(m, names)?;
    let attr = |f: sys::CUfunction, a: sys::CUfunction_attribute| -> i32 {
        let mut v = 0i32;
        // SAFETY: `f` is a live function of `m`; valid out pointer.
        let r = unsafe { sys::cuFuncGetAttribute(&mut v, a, f) };
        if r == sys::CUresult::CUDA_SUCCESS {
            v
        } else {
            -1
        }
    };
    use sys::CUfunction_attribute::*;
    let (mut local_max, mut local_n, mut const_max, mut shared_max, mut regs_max) = (0, 0, 0, 0, 0);
    for &f in &fs {
        let local = attr(f, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
        local_max = local_max.max(local);
        local_n += usize::from(local > 0);
        const_max = const_max.max(attr(f, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES));
        shared_max = shared_max.max(attr(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
        regs_max = regs_max.max(attr(f, CU_FUNC_ATTRIBUTE_NUM_REGS));
    }
    let mut count = 0u32;
    // SAFETY: `m` is loaded; valid out pointer.
    let counted = unsafe { sys::cuModuleGetFunctionCount(&mut count, m) };
    println!(
        "module-probe: cubin {} bytes, {} kernels resolved (driver counts {}): local bytes a \
         thread max {local_max} ({local_n} kernels with any), const bytes max {const_max}, \
         static shared bytes max {shared_max}, registers max {regs_max}",
        cubin.len(),
        fs.len(),
        if counted == sys::CUresult::CUDA_SUCCESS {
            count.to_string()
        } else {
            format!("{counted:?}")
        }
    );
    sys_unload(m)?;
    limits(ctx, "after describing")
}

fn limits(ctx: &Arc<CudaContext>, when: &str) -> Result<()> {
    ctx.bind_to_thread()?;
    let limit = |l: sys::CUlimit| -> String {
        let mut v = 0usize;
        // SAFETY: a context is current; valid out pointer.
        let r = unsafe { sys::cuCtxGetLimit(&mut v, l) };
        if r == sys::CUresult::CUDA_SUCCESS {
            v.to_string()
        } else {
            format!("{r:?}")
        }
    };
    use sys::CUlimit::*;
    println!(
        "module-probe: limits {when}: stack bytes {}, malloc heap bytes {}, printf fifo bytes {}",
        limit(CU_LIMIT_STACK_SIZE),
        limit(CU_LIMIT_MALLOC_HEAP_SIZE),
        limit(CU_LIMIT_PRINTF_FIFO_SIZE),
    );
    Ok(())
}

/// One part: a warm-up cycle, then `cycles` measured ones.
fn part(
    ctx: &Arc<CudaContext>,
    name: &str,
    cycles: usize,
    mut cycle: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let started = Instant::now();
    cycle().with_context(|| format!("{name}: warm-up"))?;
    let warm_s = started.elapsed().as_secs_f64();
    let before = free_bytes(ctx)?;
    let (arcs, live) = (Arc::strong_count(ctx), intranode::kernels::live_modules());
    let mut last = before;
    let mut steps = Vec::with_capacity(cycles);
    for i in 0..cycles {
        cycle().with_context(|| format!("{name}: cycle {i}"))?;
        let now = free_bytes(ctx)?;
        steps.push(format!("{:+.1}", (last as f64 - now as f64) / MIB));
        last = now;
    }
    let lost = (before as f64 - last as f64) / MIB;
    println!(
        "module-probe: {name:<21} {cycles} cycles: {lost:+7.1} MiB lost ({:+.2} a cycle; per \
         cycle [{}]); context Arc count {arcs} -> {}, live modules {live} -> {}; warm-up {:.1} s",
        lost / cycles.max(1) as f64,
        steps.join(" "),
        Arc::strong_count(ctx),
        intranode::kernels::live_modules(),
        warm_s,
    );
    Ok(lost)
}

/// A part that counts open descriptors instead of device memory.
fn fd_part(name: &str, cycles: usize, mut cycle: impl FnMut() -> Result<()>) -> Result<()> {
    cycle().with_context(|| format!("{name}: warm-up"))?;
    let before = intranode_tests::open_fd_count()?;
    let mut steps = Vec::with_capacity(cycles);
    let mut last = before;
    for i in 0..cycles {
        cycle().with_context(|| format!("{name}: cycle {i}"))?;
        let now = intranode_tests::open_fd_count()?;
        steps.push(format!("{:+}", now as i64 - last as i64));
        last = now;
    }
    println!(
        "module-probe: {name:<21} {cycles} cycles: fds {before} -> {last} ({:+}; per cycle [{}])",
        last as i64 - before as i64,
        steps.join(" ")
    );
    Ok(())
}

pub fn run(args: &ModuleProbeArgs) -> Result<()> {
    let parts: Vec<String> = if args.parts.is_empty() {
        ALL_PARTS.iter().map(|s| s.to_string()).collect()
    } else {
        args.parts.clone()
    };
    if let Some(bad) = parts.iter().find(|p| !ALL_PARTS.contains(&p.as_str())) {
        bail!("unknown part {bad:?}; parts: {}", ALL_PARTS.join(","));
    }
    let ctx = intranode::gpu::context(args.device)?;
    ctx.bind_to_thread()?;
    let mut driver = 0i32;
    // SAFETY: valid out pointer.
    let r = unsafe { sys::cuDriverGetVersion(&mut driver) };
    check(r, "cuDriverGetVersion")?;
    let mut mode = sys::CUmoduleLoadingMode::CU_MODULE_LAZY_LOADING;
    // SAFETY: valid out pointer; the driver is initialised (a context exists).
    let mode_r = unsafe { sys::cuModuleGetLoadingMode(&mut mode) };
    let (free, total) = ctx.mem_get_info()?;
    println!(
        "module-probe: device {} ({}), driver {driver}, loading mode {:?} (CUDA_MODULE_LOADING={:?}), \
         free {:.1} of {:.1} MiB",
        args.device,
        ctx.name().unwrap_or_default(),
        if mode_r == sys::CUresult::CUDA_SUCCESS {
            format!("{mode:?}")
        } else {
            format!("{mode_r:?}")
        },
        std::env::var("CUDA_MODULE_LOADING").ok(),
        free as f64 / MIB,
        total as f64 / MIB,
    );
    let cubin = intranode::kernels::cubin()?;
    let names = kernel_names()?;
    limits(&ctx, "at start")?;
    describe(&ctx, &cubin, &names)?;
    let stream = ctx.new_stream()?;
    let a = stream.clone_htod(&[1.0f32; 1024])?;
    let b = stream.clone_htod(&[2.0f32; 1024])?;
    let mut out = stream.alloc_zeros::<f32>(1024)?;
    let n = args.cycles;
    let bind = || -> Result<()> { Ok(ctx.bind_to_thread()?) };
    for p in &parts {
        match p.as_str() {
            "control" => part(&ctx, p, n, || Ok(()))?,
            "cudarc" => part(&ctx, p, n, || {
                bind()?;
                // SAFETY: a context is current; `cubin` is a whole image.
                let m = unsafe {
                    cudarc::driver::result::module::load_data(cubin.as_ptr().cast::<c_void>())
                }?;
                // SAFETY: loaded just above, unloaded once, nothing launched.
                unsafe { cudarc::driver::result::module::unload(m) }?;
                Ok(())
            })?,
            "cudarc-resolve" => part(&ctx, p, n, || {
                bind()?;
                // SAFETY: as for `cudarc`.
                let m = unsafe {
                    cudarc::driver::result::module::load_data(cubin.as_ptr().cast::<c_void>())
                }?;
                for name in &names {
                    // SAFETY: `m` is loaded.
                    unsafe { cudarc::driver::result::module::get_function(m, name.clone()) }?;
                }
                // SAFETY: as for `cudarc`.
                unsafe { cudarc::driver::result::module::unload(m) }?;
                Ok(())
            })?,
            "sys" => part(&ctx, p, n, || {
                bind()?;
                sys_unload(sys_load(&cubin)?)
            })?,
            "sys-resolve" => part(&ctx, p, n, || {
                bind()?;
                let m = sys_load(&cubin)?;
                sys_resolve(m, &names)?;
                sys_unload(m)
            })?,
            "kernel-module" => part(&ctx, p, n, || {
                drop(KernelModule::load(&ctx)?);
                Ok(())
            })?,
            "kernel-module-unshared" => part(&ctx, p, n, || {
                drop(KernelModule::load_unshared(&ctx)?);
                Ok(())
            })?,
            "kernel-module-launch" => part(&ctx, p, n, || {
                let k = KernelModule::load(&ctx)?;
                k.add(&stream, &a, &b, &mut out)?;
                stream.synchronize()?;
                drop(k);
                Ok(())
            })?,
            "small" => part(&ctx, p, n, || {
                drop(TestKernelModule::load(&ctx)?);
                Ok(())
            })?,
            "hold" => {
                bind()?;
                let before = free_bytes(&ctx)?;
                for round in 0..2 {
                    let mut held = Vec::with_capacity(args.hold);
                    for _ in 0..args.hold {
                        let m = sys_load(&cubin)?;
                        sys_resolve(m, &names)?;
                        held.push(m);
                    }
                    let loaded = free_bytes(&ctx)?;
                    for m in held {
                        sys_unload(m)?;
                    }
                    let unloaded = free_bytes(&ctx)?;
                    println!(
                        "module-probe: hold round {round}: {} modules loaded and resolved take \
                         {:.1} MiB ({:.2} each); after unloading them all {:+.1} MiB lost since \
                         the part began",
                        args.hold,
                        (before as f64 - loaded as f64) / MIB,
                        (before as f64 - loaded as f64) / MIB / args.hold.max(1) as f64,
                        (before as f64 - unloaded as f64) / MIB,
                    );
                }
                0.0
            }
            "library" => part(&ctx, p, n, || {
                bind()?;
                let mut lib = std::ptr::null_mut();
                // SAFETY: valid out pointer; `cubin` a whole image that
                // outlives the call; no options (null arrays, count 0).
                let r = unsafe {
                    sys::cuLibraryLoadData(
                        &mut lib,
                        cubin.as_ptr().cast::<c_void>(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        0,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        0,
                    )
                };
                check(r, "cuLibraryLoadData")?;
                for name in &names {
                    let mut k = std::ptr::null_mut();
                    let mut f = std::ptr::null_mut();
                    // SAFETY: `lib` is loaded; NUL-terminated name; valid
                    // out pointers; a context is current (the function is
                    // this context's).
                    unsafe {
                        check(
                            sys::cuLibraryGetKernel(&mut k, lib, name.as_ptr()),
                            "cuLibraryGetKernel",
                        )?;
                        check(sys::cuKernelGetFunction(&mut f, k), "cuKernelGetFunction")?;
                    }
                }
                // SAFETY: loaded above, unloaded once, nothing launched.
                let r = unsafe { sys::cuLibraryUnload(lib) };
                check(r, "cuLibraryUnload")
            })?,
            "nvml-raw" => {
                fd_part(p, n, || {
                    let nvml = nvml_wrapper::Nvml::init()?;
                    nvml.device_count()?;
                    drop(nvml);
                    Ok(())
                })?;
                0.0
            }
            "nvml-mesh" => {
                fd_part(p, n, || {
                    intranode::topology::nvl_mesh_from_nvml(&[]);
                    Ok(())
                })?;
                0.0
            }
            "ptx" => {
                let Some(path) = &args.ptx else {
                    println!("module-probe: ptx skipped: no --ptx FILE");
                    continue;
                };
                let mut text = std::fs::read(path)
                    .with_context(|| format!("reading the PTX {}", path.display()))?;
                if text.starts_with(&[0x1f, 0x8b]) {
                    bail!("{}: give the PTX unzipped", path.display());
                }
                text.push(0);
                part(&ctx, p, args.ptx_cycles, || {
                    bind()?;
                    let m = sys_load(&text)?;
                    sys_resolve(m, &names)?;
                    sys_unload(m)
                })?
            }
            other => bail!("unknown part {other:?}"),
        };
    }
    limits(&ctx, "at the end")?;
    if let Err(e) = ctx.check_err() {
        bail!("an error was left recorded on the context: {e:?}");
    }
    println!("module-probe: done");
    Ok(())
}
