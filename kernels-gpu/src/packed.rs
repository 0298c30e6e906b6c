//! Element types as the kernels see them: packed into 16-byte vectors on
//! the main path, widened to f32 for arithmetic, rounded once on the way
//! out (to nearest, ties to even, as `cvt.rn` does).

use crate::ptx;

/// bf16, stored as its bit pattern.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct Bf16(pub u16);

/// IEEE binary16, stored as its bit pattern.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct F16(pub u16);

/// f32 lanes of one widened 16-byte vector. f32 vectors use the first 4.
pub type Lanes = [f32; 8];

/// An element type the kernels reduce.
pub trait Element: Copy {
    /// Bytes per element.
    const BYTES: usize;
    /// Meaningful lanes of a widened vector (16 / `BYTES`).
    const LANES: usize;
    /// Widens one 16-byte vector to f32 lanes.
    fn widen(v: [u32; 4]) -> Lanes;
    /// Rounds f32 lanes back to one 16-byte vector.
    fn narrow(l: Lanes) -> [u32; 4];
    /// Loads one element as f32.
    ///
    /// # Safety
    /// `p` must be a valid, aligned global address.
    unsafe fn load(p: *const Self) -> f32;
    /// Rounds and stores one element.
    ///
    /// # Safety
    /// `p` must be a valid, aligned global address.
    unsafe fn store(p: *mut Self, v: f32);
}

#[inline(always)]
fn bf16_lo(w: u32) -> f32 {
    f32::from_bits(w << 16)
}

#[inline(always)]
fn bf16_hi(w: u32) -> f32 {
    f32::from_bits(w & 0xffff_0000)
}

impl Element for Bf16 {
    const BYTES: usize = 2;
    const LANES: usize = 8;

    #[inline(always)]
    fn widen(v: [u32; 4]) -> Lanes {
        [
            bf16_lo(v[0]),
            bf16_hi(v[0]),
            bf16_lo(v[1]),
            bf16_hi(v[1]),
            bf16_lo(v[2]),
            bf16_hi(v[2]),
            bf16_lo(v[3]),
            bf16_hi(v[3]),
        ]
    }

    #[inline(always)]
    fn narrow(l: Lanes) -> [u32; 4] {
        [
            ptx::cvt_rn_bf16x2_f32(l[0], l[1]),
            ptx::cvt_rn_bf16x2_f32(l[2], l[3]),
            ptx::cvt_rn_bf16x2_f32(l[4], l[5]),
            ptx::cvt_rn_bf16x2_f32(l[6], l[7]),
        ]
    }

    #[inline(always)]
    unsafe fn load(p: *const Self) -> f32 {
        // SAFETY: forwarded from the caller.
        bf16_lo(unsafe { (*p).0 } as u32)
    }

    #[inline(always)]
    unsafe fn store(p: *mut Self, v: f32) {
        let bits = ptx::cvt_rn_bf16x2_f32(v, 0.0) as u16;
        // SAFETY: forwarded from the caller.
        unsafe { *p = Bf16(bits) }
    }
}

impl Element for F16 {
    const BYTES: usize = 2;
    const LANES: usize = 8;

    #[inline(always)]
    fn widen(v: [u32; 4]) -> Lanes {
        let (a, b) = ptx::cvt_f32_f16x2(v[0]);
        let (c, d) = ptx::cvt_f32_f16x2(v[1]);
        let (e, f) = ptx::cvt_f32_f16x2(v[2]);
        let (g, h) = ptx::cvt_f32_f16x2(v[3]);
        [a, b, c, d, e, f, g, h]
    }

    #[inline(always)]
    fn narrow(l: Lanes) -> [u32; 4] {
        [
            ptx::cvt_rn_f16x2_f32(l[0], l[1]),
            ptx::cvt_rn_f16x2_f32(l[2], l[3]),
            ptx::cvt_rn_f16x2_f32(l[4], l[5]),
            ptx::cvt_rn_f16x2_f32(l[6], l[7]),
        ]
    }

    #[inline(always)]
    unsafe fn load(p: *const Self) -> f32 {
        // SAFETY: forwarded from the caller.
        let bits = unsafe { (*p).0 } as u32;
        ptx::cvt_f32_f16x2(bits).0
    }

    #[inline(always)]
    unsafe fn store(p: *mut Self, v: f32) {
        let bits = ptx::cvt_rn_f16x2_f32(v, 0.0) as u16;
        // SAFETY: forwarded from the caller.
        unsafe { *p = F16(bits) }
    }
}

impl Element for f32 {
    const BYTES: usize = 4;
    const LANES: usize = 4;

    #[inline(always)]
    fn widen(v: [u32; 4]) -> Lanes {
        [
            f32::from_bits(v[0]),
            f32::from_bits(v[1]),
            f32::from_bits(v[2]),
            f32::from_bits(v[3]),
            0.0,
            0.0,
            0.0,
            0.0,
        ]
    }

    #[inline(always)]
    fn narrow(l: Lanes) -> [u32; 4] {
        [
            l[0].to_bits(),
            l[1].to_bits(),
            l[2].to_bits(),
            l[3].to_bits(),
        ]
    }

    #[inline(always)]
    unsafe fn load(p: *const Self) -> f32 {
        // SAFETY: forwarded from the caller.
        unsafe { *p }
    }

    #[inline(always)]
    unsafe fn store(p: *mut Self, v: f32) {
        // SAFETY: forwarded from the caller.
        unsafe { *p = v }
    }
}

/// Loads vector `i` of `p` (elements `i * LANES ..`), as one 16-byte load
/// when `aligned` and the vector is whole, else element by element with
/// zeros past `elems` (the tail, or a misaligned caller buffer).
///
/// # Safety
/// `p` must hold `elems` elements; `i * LANES < elems`.
#[inline(always)]
pub unsafe fn load_vec<T: Element>(p: *const T, i: usize, elems: usize, aligned: bool) -> [u32; 4] {
    let first = i * T::LANES;
    if aligned && first + T::LANES <= elems {
        // SAFETY: whole vector inside the buffer, 16-byte aligned.
        return unsafe { ptx::ld_global_v4_u32((p as *const [u32; 4]).add(i)) };
    }
    let mut w = [0u32; 4];
    let mut k = 0;
    while k < T::LANES {
        if first + k < elems {
            // SAFETY: element `first + k` is inside the buffer.
            unsafe {
                if T::BYTES == 2 {
                    let bits = *(p as *const u16).add(first + k) as u32;
                    w[k / 2] |= bits << ((k & 1) * 16);
                } else {
                    w[k] = *(p as *const u32).add(first + k);
                }
            }
        }
        k += 1;
    }
    w
}

/// Stores vector `i` to `p`, the counterpart of [`load_vec`]: elements past
/// `elems` are not written.
///
/// # Safety
/// `p` must hold `elems` elements; `i * LANES < elems`.
#[inline(always)]
pub unsafe fn store_vec<T: Element>(p: *mut T, i: usize, elems: usize, aligned: bool, v: [u32; 4]) {
    let first = i * T::LANES;
    if aligned && first + T::LANES <= elems {
        // SAFETY: whole vector inside the buffer, 16-byte aligned.
        unsafe { ptx::st_global_v4_u32((p as *mut [u32; 4]).add(i), v) };
        return;
    }
    let mut k = 0;
    while k < T::LANES {
        if first + k < elems {
            // SAFETY: element `first + k` is inside the buffer.
            unsafe {
                if T::BYTES == 2 {
                    *(p as *mut u16).add(first + k) = (v[k / 2] >> ((k & 1) * 16)) as u16;
                } else {
                    *(p as *mut u32).add(first + k) = v[k];
                }
            }
        }
        k += 1;
    }
}
