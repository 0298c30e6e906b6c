//! The embedded GPU kernels and their typed launches.
//!
//! The production kernels are embedded twice (`build.rs` picks the
//! files): as PTX ([`ptx`], xz-compressed: the committed PTX of the
//! current `kernels-gpu` source) and as machine code for [`CUBIN_ARCH`] (a
//! cubin that the pinned ptxas assembled from that PTX, xz-compressed). A
//! device that can run the cubin loads it in milliseconds; any other gets
//! the PTX, which the driver JIT compiles (about 50 s for the production
//! kernels on an H200, or its cache's copy).
//! [`KernelModule`] loads one of them into one device's context and resolves every
//! entry point of `intranode_kernels_gpu::entries::Kernel` (the one list of the
//! kernels) once, into a table indexed by that key: a launch formats and
//! looks up no name, and goes through the one launch helper
//! (`launch.rs`).
//!
//! Under the feature `test-kernels`, `TestKernelModule` does the same for
//! the test PTX (`TEST_PTX`: the soak's fill and check kernels, the
//! benchmark's stamps and spins, the probes), which the production PTX
//! does not carry.

use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut, sys};
use intranode_kernels_gpu::entries::{Add, Elem, Kernel};

pub use crate::config::KernelImage;
use crate::error::{DriverContext, Error, Result};
pub(crate) use intranode_kernels_gpu::entries::KernelKey;
use launch::{Function, Module};
pub(crate) use launch::{Grid, KernelArgs};

pub use crate::types::{DType, ElemType};

mod decode;
#[cfg(feature = "test-kernels")]
mod fill;
mod launch;
mod norm;
mod ops;
#[cfg(feature = "test-kernels")]
mod soak;
#[cfg(feature = "test-kernels")]
mod test_kernels;
#[cfg(feature = "test-kernels")]
mod timing;
#[cfg(feature = "test-kernels")]
pub use soak::SoakCall;
#[cfg(feature = "test-kernels")]
pub use test_kernels::{SCOPE_PROBES, TEST_PTX, TestKernel, TestKernelModule};

/// The production kernels' PTX as embedded: the committed
/// `host/ptx/kernels-<arch>.ptx.xz` (CI checks that it equals what the
/// kernel source emits), or the text built from source where `build.rs`
/// says why. [`ptx`] unpacks it.
const PTX_IMAGE: &[u8] = include_bytes!(env!("INTRANODE_EMBEDDED_PTX"));

/// GPU architecture of the embedded PTX: `INTRANODE_PTX_ARCH` at build
/// time, default `sm_90`.
pub const PTX_ARCH: &str = env!("INTRANODE_EMBEDDED_PTX_ARCH");

/// The machine code of the embedded PTX for [`CUBIN_ARCH`], xz-compressed
/// (`host/ptx/kernels-<arch>.cubin.xz`, assembled by the pinned ptxas;
/// CI checks it against the PTX); empty where the PTX was built from
/// source or no cubin is committed for its architecture.
const CUBIN_IMAGE: &[u8] = include_bytes!(env!("INTRANODE_EMBEDDED_CUBIN"));

/// Architecture of the embedded cubin (`""` when there is none).
pub const CUBIN_ARCH: &str = env!("INTRANODE_EMBEDDED_CUBIN_ARCH");

/// Whether the embedded kernels carry the schedule fuzzer's random delays
/// (a build with `INTRANODE_SCHEDULE_FUZZ=1`, for the suite: timing
/// means nothing there).
pub fn schedule_fuzz() -> bool {
    env!("INTRANODE_EMBEDDED_SCHEDULE_FUZZ") == "1"
}

/// Whether this build embeds the production PTX (not when built with
/// `INTRANODE_EMBED_PTX=0`: machine code only, as the device bundle).
pub fn embeds_ptx() -> bool {
    !PTX_IMAGE.is_empty()
}

/// The production kernels' PTX text (unpacked from the embedded image:
/// about 34 MB; an error in a build that left it out, `INTRANODE_EMBED_PTX=0`).
pub fn ptx() -> Result<String> {
    if PTX_IMAGE.is_empty() {
        return Err(Error::KernelImage(format!(
            "this build embeds no PTX (built with INTRANODE_EMBED_PTX=0), only machine code \
             for {CUBIN_ARCH}: build without that setting to run on other GPUs"
        )));
    }
    let bytes = unpack(PTX_IMAGE, "the embedded PTX")?;
    String::from_utf8(bytes).map_err(|_| Error::KernelImage("the embedded PTX is not UTF-8".into()))
}

/// The production kernels' machine code for [`CUBIN_ARCH`] (the ELF image
/// [`KernelModule`] loads where the device runs it), unpacked; an error
/// where none is embedded (the PTX was built from source).
pub fn cubin() -> Result<Vec<u8>> {
    if CUBIN_IMAGE.is_empty() {
        return Err(Error::KernelImage(
            "this build embeds no cubin (the PTX was built from source)".into(),
        ));
    }
    unpack(CUBIN_IMAGE, "the embedded cubin")
}

// NOTE [kept kernels].
/// How many kernel modules (production and test) this process has loaded
/// and not unloaded: the production kernels kept for each context and
/// what a handle kept alive by mistake, or an unload skipped in Drop,
/// leaves.
pub fn live_modules() -> usize {
    launch::live_modules()
}

/// Kernel entry points (`.visible .entry NAME(`) declared in a PTX text.
pub fn entry_names(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|l| l.trim_start().strip_prefix(".visible .entry "))
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .collect()
}

/// The magic bytes that open an xz stream (PTX text and an ELF cubin never
/// start with them).
const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0];

/// `image` unpacked where it is xz-compressed (by its magic bytes), else as
/// it is (PTX built from source is text). The decoder checks the stream's
/// CRC64: a damaged image is an error, never a kernel with other bytes.
fn unpack(image: &[u8], what: &str) -> Result<Vec<u8>> {
    if !image.starts_with(XZ_MAGIC) {
        return Ok(image.to_vec());
    }
    let mut out = Vec::new();
    lzma_rust2::XzReader::new(image, false)
        .read_to_end(&mut out)
        .map_err(|e| Error::KernelImage(format!("unpacking {what}: {e}")))?;
    Ok(out)
}

/// `sm_90` -> 90 (`sm_90a` too); 0 for anything else.
fn sm_number(arch: &str) -> u32 {
    arch.trim_start_matches("sm_")
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .unwrap_or(0)
}

/// Whether a cubin for `arch` runs on a device of compute capability
/// `major.minor`: machine code runs on its own major version, at its minor
/// version or later (CUDA's binary compatibility); an `a` architecture
/// only on exactly its own.
fn cubin_runs_on(arch: &str, major: i32, minor: i32) -> bool {
    let sm = sm_number(arch);
    if sm == 0 {
        return false;
    }
    let (want_major, want_minor) = ((sm / 10) as i32, (sm % 10) as i32);
    if arch.ends_with('a') {
        major == want_major && minor == want_minor
    } else {
        major == want_major && minor >= want_minor
    }
}

/// How a [`KernelModule`] came to be: the image it loaded and where the
/// time went (part of `Communicator::setup_times`).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelLoad {
    /// `cubin sm_90` or `ptx sm_90` (the driver JIT compiled it, or found
    /// it in its cache).
    pub image: String,
    /// Unpacking the embedded image.
    pub unpack: std::time::Duration,
    /// `cuModuleLoadData` (for PTX: the JIT compile, or the cache lookup).
    pub load: std::time::Duration,
    /// Resolving every entry point (`cuModuleGetFunction`; with the
    /// driver's lazy loading this is where a cubin's functions are
    /// loaded).
    pub resolve: std::time::Duration,
}

impl From<ElemType> for Elem {
    fn from(e: ElemType) -> Elem {
        match e {
            ElemType::Bf16 => Elem::Bf16,
            ElemType::F16 => Elem::F16,
            ElemType::F32 => Elem::F32,
        }
    }
}

/// The kernels loaded into one device's context.
#[derive(Debug)]
pub struct KernelModule {
    module: Module,
    /// Every `Kernel`, at `Kernel::index`.
    functions: Box<[Function]>,
    /// Which image it loaded and how long that took.
    load: KernelLoad,
    /// Whether collectives launch overlapped (NOTE [launch overlap] in
    /// `launch.rs`).
    overlap: bool,
    /// Whether the fused norm's L2 prefetch runs here (NOTE [l2 prefetch]
    /// in `kernels-gpu/src/fused_norm.rs`).
    l2_prefetch: bool,
}

// NOTE [kept kernels]: the production kernels are loaded once per context
// and kept loaded for the context's life, as the CUDA runtime keeps a
// library's kernels: every later `KernelModule` of that context (every
// communicator built and dropped) shares them. Loading and unloading them
// cost device memory each time on H100 (driver 580, CUDA 13.0):
// `intranode-suite module-probe` measured 4.4 MiB kept by the driver per
// `cuModuleLoadData` + resolve of the 12 MB cubin + `cuModuleUnload` (none
// without the resolve under lazy loading, none for the 35 KB test PTX;
// four such modules loaded at once took 52 MiB and gave none of it back
// when unloaded), through the bare driver calls as through ours, with no
// handle of ours left (live modules 0). So re-creating communicators
// would lose 4.4 MiB a cycle. Kept, the loss is one module per context,
// at the first load. A kept module is found again by
// its context's handle and driver id (`cuCtxGetId`, unique for the
// program's life): a context destroyed and another created at the same
// address has another id, and its modules went with it.

/// A module kept loaded in one context (NOTE [kept kernels]).
struct Kept {
    context: usize,
    context_id: u64,
    raw: KeptModule,
    functions: Box<[Function]>,
    image: String,
}

/// A kept module's driver handle.
struct KeptModule(sys::CUmodule);

// SAFETY: a CUmodule is a context-wide handle any thread may use once its
// context is current; it is only turned back into a `Module` (which binds
// the context before every use) for a caller holding that context.
unsafe impl Send for KeptModule {}

/// The kept production modules, one per context and image.
static KEPT: std::sync::Mutex<Vec<Kept>> = std::sync::Mutex::new(Vec::new());

/// The driver's id of `ctx` (unique for the program's life).
fn context_id(ctx: &CudaContext) -> Result<u64> {
    // SAFETY: `ctx` is a live context (the caller's `Arc` keeps it).
    unsafe { crate::driver_ext::ctx_get_id(ctx.cu_ctx()) }.ctx("cuCtxGetId", Some(ctx.ordinal()))
}

/// Whether a module loaded as `label` (`cubin sm_90`, `ptx sm_90`) serves
/// a request for `image`.
fn serves(label: &str, image: KernelImage) -> bool {
    match image {
        KernelImage::Auto => true,
        KernelImage::Cubin => label.starts_with("cubin"),
        KernelImage::Ptx => label.starts_with("ptx"),
    }
}

impl KernelModule {
    /// The embedded kernels in `ctx` (the cubin where the device can run
    /// it, else the PTX), every kernel entry point resolved: loaded at the
    /// context's first call and kept loaded for its life, shared by every
    /// later call.
    // NOTE [kept kernels].
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
        Self::load_with(ctx, false, KernelImage::Auto)
    }

    /// The embedded kernels loaded afresh into `ctx`, unloaded when the
    /// value drops (not kept: a check that the context can still load a
    /// module; each such load and unload may cost device memory).
    // NOTE [kept kernels].
    pub fn load_unshared(ctx: &Arc<CudaContext>) -> Result<Self> {
        Self::load_image(ctx, false, KernelImage::Auto)
    }

    /// [`KernelModule::load`] of the image `image` asks for, its
    /// collectives launched overlapped where `overlap` asks for it and the
    /// image and device allow it (sm_90 and later, NOTE [launch overlap]
    /// in `launch.rs`).
    pub(crate) fn load_with(
        ctx: &Arc<CudaContext>,
        overlap: bool,
        image: KernelImage,
    ) -> Result<Self> {
        let context = ctx.cu_ctx() as usize;
        let context_id = context_id(ctx)?;
        let find = |kept: &[Kept]| {
            kept.iter().position(|k| {
                k.context == context && k.context_id == context_id && serves(&k.image, image)
            })
        };
        {
            let kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = find(&kept) {
                let k = &kept[i];
                // SAFETY: `k.raw` was loaded into this very context (same
                // handle and id, and the caller's `Arc` keeps it alive)
                // and is never unloaded.
                let module = unsafe { Module::kept(ctx, k.raw.0) };
                let functions = k.functions.clone();
                let label = k.image.clone();
                drop(kept);
                return Self::from_parts(
                    ctx,
                    module,
                    functions,
                    overlap,
                    KernelLoad {
                        image: label,
                        unpack: std::time::Duration::ZERO,
                        load: std::time::Duration::ZERO,
                        resolve: std::time::Duration::ZERO,
                    },
                );
            }
        }
        // Loaded outside the lock (the PTX's JIT may take a minute); a
        // module another thread kept meanwhile wins, and ours is unloaded.
        let mut fresh = Self::load_image(ctx, overlap, image)?;
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = find(&kept) {
            let k = &kept[i];
            // SAFETY: as above.
            let module = unsafe { Module::kept(ctx, k.raw.0) };
            fresh.functions = k.functions.clone();
            fresh.module = module;
            return Ok(fresh);
        }
        let raw = fresh.module.keep();
        kept.push(Kept {
            context,
            context_id,
            raw: KeptModule(raw),
            functions: fresh.functions.clone(),
            image: fresh.load.image.clone(),
        });
        Ok(fresh)
    }

    /// A module of `module` and its `functions` in `ctx`, its collectives
    /// overlapped where `overlap` asks for it and the device allows it.
    fn from_parts(
        ctx: &Arc<CudaContext>,
        module: Module,
        functions: Box<[Function]>,
        overlap: bool,
        load: KernelLoad,
    ) -> Result<Self> {
        let major = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .ctx(
                "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
                Some(ctx.ordinal()),
            )?;
        Ok(KernelModule {
            module,
            functions,
            load,
            overlap: overlap && sm_number(PTX_ARCH) >= 90 && major >= 9,
            l2_prefetch: sm_number(PTX_ARCH) >= 90 && major >= 9,
        })
    }

    /// Loads the image `image` asks for into `ctx` and resolves every
    /// entry point: a module of its own, unloaded when it drops unless
    /// kept.
    fn load_image(ctx: &Arc<CudaContext>, overlap: bool, image: KernelImage) -> Result<Self> {
        let device = Some(ctx.ordinal());
        let attribute = |a, name| ctx.attribute(a).ctx(name, device);
        let major = attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
        )?;
        let minor = attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)",
        )?;
        let cubin_fits = !CUBIN_IMAGE.is_empty() && cubin_runs_on(CUBIN_ARCH, major, minor);
        let started = Instant::now();
        let (module, label, unpack) = match image {
            KernelImage::Cubin if !cubin_fits => {
                return Err(Error::KernelImage(format!(
                    "INTRANODE_KERNEL_IMAGE=cubin, but the embedded machine code ({}) does not \
                     run on device {} (compute capability {major}.{minor})",
                    if CUBIN_ARCH.is_empty() {
                        "none: the PTX was built from source"
                    } else {
                        CUBIN_ARCH
                    },
                    ctx.ordinal()
                )));
            }
            KernelImage::Cubin | KernelImage::Auto if cubin_fits => {
                let cubin = unpack(CUBIN_IMAGE, "the embedded cubin")?;
                let unpacked = started.elapsed();
                match Module::load_image(ctx, &cubin) {
                    Ok(m) => (m, format!("cubin {CUBIN_ARCH}"), unpacked),
                    Err(e) if image == KernelImage::Auto => {
                        tracing::warn!(
                            "the embedded {CUBIN_ARCH} cubin did not load on device {} \
                             (compute capability {major}.{minor}): {e}; JIT compiling the PTX",
                            ctx.ordinal()
                        );
                        let again = Instant::now();
                        let text = ptx()?;
                        (
                            Module::load(ctx, &text)?,
                            format!("ptx {PTX_ARCH}"),
                            again.elapsed(),
                        )
                    }
                    Err(e) => return Err(e),
                }
            }
            _ => {
                let text = ptx().map_err(|e| match e {
                    // Name the device whose architecture needed the PTX.
                    Error::KernelImage(why) => Error::KernelImage(format!(
                        "device {} (compute capability {major}.{minor}): {why}",
                        ctx.ordinal()
                    )),
                    other => other,
                })?;
                let unpacked = started.elapsed();
                (
                    Module::load(ctx, &text)?,
                    format!("ptx {PTX_ARCH}"),
                    unpacked,
                )
            }
        };
        let load = started.elapsed().saturating_sub(unpack);
        // Every entry point now, not at its first launch: under the
        // driver's lazy loading (the default since CUDA 12.2) resolving a
        // function loads its code, which may synchronize the context, and
        // a collective of ours spinning on a peer must never wait on that
        // (CUDA's lazy-loading notes: kernels assumed concurrent can
        // deadlock). Construction runs before any of our kernels.
        let resolving = Instant::now();
        let functions = module.resolve(Kernel::all())?;
        let resolve = resolving.elapsed();
        // Both images are of the same architecture's kernels, so the PTX's
        // says whether they hold `griddepcontrol`.
        let image_sm = sm_number(PTX_ARCH);
        Ok(KernelModule {
            module,
            functions,
            load: KernelLoad {
                image: label,
                unpack,
                load,
                resolve,
            },
            overlap: overlap && image_sm >= 90 && major >= 9,
            l2_prefetch: image_sm >= 90 && major >= 9,
        })
    }

    /// Which image this module loaded and how long that took.
    pub fn load_report(&self) -> &KernelLoad {
        &self.load
    }

    /// Whether this module's collectives launch overlapped.
    pub fn launch_overlap(&self) -> bool {
        self.overlap
    }

    /// Whether this module's fused norm can prefetch into L2: its image
    /// holds `cp.async.bulk.prefetch.L2` (sm_90 and later, as
    /// `griddepcontrol`) and the device runs it.
    pub fn l2_prefetch(&self) -> bool {
        self.l2_prefetch
    }

    /// The context the module lives in.
    pub fn context(&self) -> &Arc<CudaContext> {
        self.module.context()
    }

    /// `out = a + b` elementwise, computed in f32 and rounded once, on
    /// `stream`. All three must have the same length; any length and any
    /// element offset work (misaligned views take the scalar path).
    pub fn add<T: DType>(
        &self,
        stream: &CudaStream,
        a: &impl DevicePtr<T>,
        b: &impl DevicePtr<T>,
        out: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        let n = out.len();
        if a.len() != n || b.len() != n {
            return Err(Error::InvalidArgument(format!(
                "add: lengths differ (a {}, b {}, out {n})",
                a.len(),
                b.len()
            )));
        }
        if n == 0 {
            return Ok(());
        }
        let (pa, _ra) = a.device_ptr(stream);
        let (pb, _rb) = b.device_ptr(stream);
        let (po, _ro) = out.device_ptr_mut(stream);
        let grid = elementwise_grid(n, T::ELEM.bytes());
        // SAFETY: `add_<ty>(a, b, out: *T, n: usize)` takes exactly these
        // four arguments; the three buffers hold `n` elements each (checked
        // above) and stay alive until the stream passes the kernel (the
        // `_r*` guards record that).
        let key = present(Add::Add.key(T::ELEM.into()), || {
            format!("add_{}", T::ELEM.suffix())
        })?;
        // SAFETY: as above.
        unsafe { self.launch(key, grid, stream, (pa, pb, po, n)) }
    }
}

/// `key`, or the error naming `what` where the table has no such kernel.
pub(crate) fn present<A>(
    key: Option<KernelKey<A>>,
    what: impl FnOnce() -> String,
) -> Result<KernelKey<A>> {
    key.ok_or_else(|| Error::MissingKernel { name: what() })
}

/// Grid and block size of the elementwise kernels: one 16-byte vector per
/// thread per step, at most 4 blocks of 256 per SM of a 132-SM H200 (the
/// grid-stride loop covers the rest).
fn elementwise_grid(elems: usize, elem_bytes: usize) -> Grid {
    const BLOCK: usize = 256;
    const MAX_BLOCKS: usize = 132 * 4;
    let per_vec = intranode_kernels_gpu::index::elems_per_vec(elem_bytes).max(1);
    let work_items = intranode_kernels_gpu::index::div_ceil(elems, per_vec).max(1);
    let blocks = intranode_kernels_gpu::index::div_ceil(work_items, BLOCK).clamp(1, MAX_BLOCKS);
    Grid::new(blocks, BLOCK)
}

#[cfg(test)]
mod tests;
