//! The steps of a transformer decode layer besides the GEMMs, the norms
//! (`norm`) and the all-reduces: SiLU x mul of the MLP, and the values
//! of the decode benchmark's random tensors.
//!
//! - `silu_mul_<t>(gate_up, out, rows, cols)`: `out[r][j] =
//!   silu(gate_up[r][j]) * gate_up[r][cols + j]`, the gate and up halves
//!   of one gate-up GEMM's output row side by side (`torch.chunk(2,
//!   -1)`); `silu(g) = g / (1 + exp(-g))` in f32, the product rounded once
//!   to the element type.
//! - [`uniform`]: element `i` of a random tensor, a plain function shared
//!   with the host, so that it recomputes any weight element by element
//!   and a check never copies one back. The kernels that fill a tensor
//!   with it (`fill_uniform_<t>(out, n, seed, std)`) are the benchmark's,
//!   test kernels (`intranode-test-kernels-gpu`).

use crate::pattern::mix;

/// `sqrt(3)`: a uniform on `[-a, a)` has standard deviation `a / sqrt(3)`.
const SQRT_3: f32 = 1.732_050_8;

/// Element `i` of the random tensor `seed`, with standard deviation
/// `std`: uniform on `[-std sqrt(3), std sqrt(3))`, before the rounding
/// to the element type. The same f32 operations on the host and the GPU
/// (24 random bits, exact until the last product, which both round to
/// nearest), so both get the same value bit for bit.
#[inline(always)]
pub fn uniform(seed: u64, i: u64, std: f32) -> f32 {
    let h = mix(seed ^ mix(i));
    let u = (h >> 40) as u32 as f32 * (1.0 / 16_777_216.0);
    (u * 2.0 - 1.0) * (std * SQRT_3)
}

/// The grid-stride place of this thread: first index and stride.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn grid() -> (usize, usize) {
    use crate::ptx;
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;
    (tid, stride)
}

/// The SiLU x mul entry points; see the module's documentation.
#[cfg(target_arch = "nvptx64")]
pub mod kernels {
    use super::grid;
    use crate::index;
    use crate::packed::Element;
    use crate::ptx;

    /// `g / (1 + exp(-g))`, `exp(-g)` as `2^(-g log2(e))`: infinite for
    /// very negative `g`, which makes the quotient a signed zero, as
    /// SiLU's limit is.
    #[inline(always)]
    fn silu(g: f32) -> f32 {
        g / (1.0 + ptx::ex2_approx_ftz_f32(-g * core::f32::consts::LOG2_E))
    }

    /// See the module's documentation. One 16-byte vector of the output
    /// per thread and step when `cols` is a whole number of vectors and
    /// both buffers are 16-byte aligned, else one element.
    ///
    /// # Safety
    /// `gate_up` holds `rows * 2 * cols` elements, `out` `rows * cols`,
    /// not overlapping.
    #[inline(always)]
    pub(crate) unsafe fn silu_mul<T: Element>(
        gate_up: *const T,
        out: *mut T,
        rows: usize,
        cols: usize,
    ) {
        let (tid, stride) = grid();
        let aligned = cols.is_multiple_of(T::LANES)
            && index::all_vec_aligned(&[gate_up as usize, out as usize]);
        if aligned {
            let row_vecs = cols / T::LANES;
            let total = rows * row_vecs;
            let (gu, o) = (gate_up as *const [u32; 4], out as *mut [u32; 4]);
            let mut i = tid;
            while i < total {
                // `i < total` makes `row_vecs` non-zero; `checked_div` keeps
                // a panic path (an out-of-line call) out of the PTX.
                let Some(r) = i.checked_div(row_vecs) else {
                    return;
                };
                let c = i - r * row_vecs;
                let g_at = r * 2 * row_vecs + c;
                // SAFETY: row r < rows, vector c < row_vecs: the gate
                // vector and the up vector `row_vecs` later lie in row r of
                // `gate_up`; vector i lies in `out`.
                unsafe {
                    let g = T::widen(ptx::ld_global_v4_u32(gu.add(g_at)));
                    let u = T::widen(ptx::ld_global_v4_u32(gu.add(g_at + row_vecs)));
                    let mut s = [0.0f32; 8];
                    let mut k = 0;
                    while k < T::LANES {
                        s[k] = silu(g[k]) * u[k];
                        k += 1;
                    }
                    ptx::st_global_v4_u32(o.add(i), T::narrow(s));
                }
                i += stride;
            }
        } else {
            let total = rows * cols;
            let mut j = tid;
            while j < total {
                let Some(r) = j.checked_div(cols) else {
                    return;
                };
                let c = j - r * cols;
                // SAFETY: as above, element by element.
                unsafe {
                    let g = T::load(gate_up.add(r * 2 * cols + c));
                    let u = T::load(gate_up.add(r * 2 * cols + cols + c));
                    T::store(out.add(j), silu(g) * u);
                }
                j += stride;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::uniform;

    #[test]
    fn uniform_has_the_asked_spread_and_is_a_pure_function() {
        let n = 100_000u64;
        let xs: Vec<f32> = (0..n).map(|i| uniform(7, i, 0.01)).collect();
        assert_eq!(xs[123], uniform(7, 123, 0.01));
        assert_ne!(xs[123], uniform(8, 123, 0.01));
        let bound = 0.01 * 3f32.sqrt();
        assert!(xs.iter().all(|&x| (-bound..bound).contains(&x)));
        let mean = xs.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
        let var = xs
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        assert!(mean.abs() < 1e-4, "mean {mean}");
        assert!((var.sqrt() - 0.01).abs() < 2e-4, "std {}", var.sqrt());
    }
}
