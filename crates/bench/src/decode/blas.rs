//! The decode layer's GEMMs on cuBLAS, through cudarc's bindings (the
//! library is loaded at run time, like the driver and NCCL): row-major
//! bf16 activations times row-major bf16 weights, f32 accumulation.
//!
//! The GEMMs take raw device addresses: they go into CUDA graphs that may
//! be captured under cudarc's event tracking, where a tracked use of a
//! buffer written before the capture is refused (NOTE [capture and event
//! tracking] in `host/src/intra/tracked.rs`). The addresses are taken once,
//! outside any capture, and every GEMM runs on the one stream that orders
//! all of the layer's work.

use std::ffi::c_void;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use cudarc::cublas::{result, sys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

/// cuBLAS's workspace: its own, given once, so a GEMM inside a capture
/// never asks for memory (cuBLAS's advice for CUDA graphs); 32 MiB is what
/// it recommends for Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLAS handle bound to one stream, with its workspace.
pub struct Blas {
    handle: sys::cublasHandle_t,
    /// Kept alive as long as the handle uses it.
    _workspace: CudaSlice<u8>,
}

impl Blas {
    /// A handle whose GEMMs run on `stream`; an error naming the library
    /// when libcublas cannot be loaded.
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self> {
        // SAFETY: only tries to open the library by its usual names.
        if !unsafe { sys::is_culib_present() } {
            bail!(
                "libcublas could not be loaded (cudarc looks for libcublas.so, libcublas.so.13, .so.12, ...): put the directory holding it on LD_LIBRARY_PATH (a CUDA toolkit's lib64, or the pip package nvidia-cublas's lib)"
            );
        }
        stream.context().bind_to_thread()?;
        let handle = result::create_handle().context("cublasCreate")?;
        let workspace = stream.alloc_zeros::<u8>(WORKSPACE_BYTES)?;
        let blas = Blas {
            handle,
            _workspace: workspace,
        };
        // SAFETY: a live handle and a live stream of the current context.
        unsafe { result::set_stream(blas.handle, stream.cu_stream() as _) }
            .context("cublasSetStream")?;
        // After the stream: setting a stream puts cuBLAS back on its
        // default workspace.
        let ws = {
            let (ptr, _guard) = blas._workspace.device_ptr(stream);
            ptr
        };
        // SAFETY: the workspace is device memory of this context that
        // lives as long as the handle (it is dropped after it).
        unsafe { sys::cublasSetWorkspace_v2(blas.handle, ws as *mut c_void, WORKSPACE_BYTES) }
            .result()
            .context("cublasSetWorkspace")?;
        Ok(blas)
    }

    /// Enqueues `c[m][n] = sum_k a[m][k] * b[k][n]`, all row-major bf16,
    /// accumulated in f32: `a`'s rows are `lda` elements apart (a view of
    /// the first `k` columns of a wider matrix), `b` is `k x n` and `c`
    /// `m x n`, both packed.
    ///
    /// cuBLAS is column-major: a row-major `m x n` matrix is, to it, the
    /// column-major `n x m` transpose, so `c^T = b^T a^T` is one GEMM of
    /// the buffers as they are, `b` first, nothing transposed.
    ///
    /// # Safety
    /// `a`, `b` and `c` must be device memory of the handle's context
    /// holding what is said above, valid until the stream passes the GEMM;
    /// `c` overlaps neither input.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm_bf16(
        &self,
        a: u64,
        lda: usize,
        b: u64,
        c: u64,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let dim = |v: usize, what: &str| {
            i32::try_from(v).with_context(|| format!("gemm: {what} {v} does not fit cuBLAS's int"))
        };
        let (m32, n32, k32, lda32) = (dim(m, "m")?, dim(n, "n")?, dim(k, "k")?, dim(lda, "lda")?);
        if lda < k {
            bail!("gemm: lda {lda} < k {k}");
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        let bf16 = sys::cudaDataType::CUDA_R_16BF;
        // SAFETY: the buffers are the caller's promise; the scalars are
        // host f32 (the handle's default pointer mode, and the scale type
        // of an f32 compute type), read before the call returns.
        unsafe {
            result::gemm_ex(
                self.handle,
                sys::cublasOperation_t::CUBLAS_OP_N,
                sys::cublasOperation_t::CUBLAS_OP_N,
                n32,
                m32,
                k32,
                (&alpha) as *const f32 as *const c_void,
                b as *const c_void,
                bf16,
                n32,
                a as *const c_void,
                bf16,
                lda32,
                (&beta) as *const f32 as *const c_void,
                c as *mut c_void,
                bf16,
                n32,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .context("cublasGemmEx")
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed only here; the workspace
        // field is dropped after this body runs.
        if let Err(e) = unsafe { result::destroy_handle(self.handle) } {
            // Drop must not panic; the benchmark is ending this handle's
            // use anyway.
            eprintln!("intranode-bench decode: cublasDestroy failed: {e}");
        }
    }
}
