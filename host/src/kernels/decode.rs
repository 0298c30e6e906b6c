//! Typed launch of the decode layer's SiLU x mul
//! (`kernels-gpu/src/decode.rs`); the decode benchmark's random fill is a
//! test kernel (`fill.rs`).

use cudarc::driver::CudaStream;
use intranode_kernels_gpu::entries::SiluMul;

use super::{ElemType, KernelModule, elementwise_grid};
use crate::error::Result;

impl KernelModule {
    /// Enqueues `out[r][j] = silu(gate_up[r][j]) * gate_up[r][cols + j]`
    /// for `rows` rows of `cols` output elements of `elem`.
    ///
    /// # Safety
    /// `gate_up` must be device memory of this context holding `rows x 2
    /// x cols` elements and `out` `rows x cols`, not overlapping, both
    /// valid until the stream passes the kernel.
    pub(crate) unsafe fn silu_mul_raw(
        &self,
        stream: &CudaStream,
        elem: ElemType,
        gate_up: u64,
        out: u64,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        let n = rows * cols;
        if n == 0 {
            return Ok(());
        }
        let key = super::present(SiluMul::SiluMul.key(elem.into()), || {
            format!("silu_mul_{}", elem.suffix())
        })?;
        let grid = elementwise_grid(n, elem.bytes());
        // SAFETY: `silu_mul_<ty>(gate_up: *T, out: *T, rows: usize, cols:
        // usize)` takes exactly these four arguments; the buffers are the
        // caller's promise.
        unsafe { self.launch(key, grid, stream, (gate_up, out, rows, cols)) }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::embedded_ptx;

    #[test]
    fn silu_takes_the_hardware_exponential() {
        // The SiLU's exp is `ex2.approx` (ptx.rs), not a call into `core`.
        let Some(ptx) = embedded_ptx() else { return };
        let body = ptx
            .split(".entry silu_mul_bf16(")
            .nth(1)
            .and_then(|rest| rest.split(".entry ").next())
            .unwrap_or_default();
        assert!(body.contains("ex2.approx.ftz.f32"), "{body}");
    }
}
