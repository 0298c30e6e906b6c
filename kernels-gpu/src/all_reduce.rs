//! All-reduce kernels over symmetric memory: one-shot and two-shot.
//!
//! Every kernel is monomorphized over the element type, the world size `W`
//! (so loops over peers unroll and the peer-pointer array stays in
//! registers) and the op (a `match` outside the hot loop picks it).
//! Accumulation is in f32 and always in rank order 0..W, on every rank, so
//! results are bitwise identical across ranks (and between algorithms).
//!
//! NOTE [double buffering]: each symmetric buffer is used as two halves;
//! call `e` uses half `e & 1`, where `e` is the device-side call count
//! (`sync::call_epoch`), never a host counter, so graphs can replay. A rank
//! starting call `e + 2` (which reuses half `e & 1`) has passed a barrier of
//! call `e + 1` with every peer, and a peer reaches that barrier only after
//! its kernel for call `e` finished reading. So no barrier is needed at the
//! end of a call: one-shot has one barrier, two-shot two.
//!
//! NOTE [block-local barriers]: barriers are per block, so block `b` may
//! only read what block `b` of the peer wrote before the barrier. Copy-in,
//! reduction and gather therefore walk the same index sets: vector
//! `start + b * blockDim + t + k * gridDim * blockDim` of each range.

use crate::elem::{Bf16, Element, F16, Lanes, load_vec, store_vec};
use crate::layout::{AllReduceParams, OP_AVG, OP_MAX, OP_MIN, OP_SUM, SLOT_MID, SLOT_START};
use crate::math;
use crate::ptx;
use crate::sync::{block_barrier, call_epoch, finish_call, pick};

#[inline(always)]
fn combine<const OP: u32>(a: Lanes, b: &Lanes) -> Lanes {
    let mut out = a;
    let mut k = 0;
    while k < 8 {
        out[k] = match OP {
            OP_MIN => a[k].min(b[k]),
            OP_MAX => a[k].max(b[k]),
            _ => a[k] + b[k],
        };
        k += 1;
    }
    out
}

/// Reduces vector `i` of every rank's half at `half_off`, in rank order.
///
/// # Safety
/// Every `bufs[r] + half_off` must hold vector `i`.
#[inline(always)]
unsafe fn reduce_vec<T: Element, const W: usize, const OP: u32>(bufs: &[u64; 8], half_off: u64, i: usize) -> [u32; 4] {
    // Issue all W loads before combining: they travel over NVLink in
    // parallel instead of one round trip after another.
    let mut raw = [[0u32; 4]; W];
    let mut r = 0;
    while r < W {
        // SAFETY: forwarded from the caller.
        raw[r] = unsafe { ptx::ld_global_v4_u32(((bufs[r] + half_off) as *const [u32; 4]).add(i)) };
        r += 1;
    }
    let mut acc = T::widen(raw[0]);
    let mut r = 1;
    while r < W {
        acc = combine::<OP>(acc, &T::widen(raw[r]));
        r += 1;
    }
    if OP == OP_AVG {
        let mut k = 0;
        while k < 8 {
            acc[k] /= W as f32;
            k += 1;
        }
    }
    T::narrow(acc)
}

struct Setup {
    own_pad: *mut u32,
    epoch: u32,
    half_off: u64,
    elems: usize,
    vecs: usize,
    aligned: bool,
    tid: usize,
    stride: usize,
}

#[inline(always)]
unsafe fn setup<T: Element>(p: &AllReduceParams) -> Setup {
    let own_pad = pick(&p.pads, p.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let epoch = unsafe { call_epoch(own_pad) };
    let elems = p.elems as usize;
    Setup {
        own_pad,
        epoch,
        half_off: (epoch & 1) as u64 * p.half_bytes,
        elems,
        vecs: math::div_ceil(elems, T::LANES),
        aligned: math::all_vec_aligned(&[p.input as usize, p.output as usize]),
        tid: (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize,
        stride: (ptx::grid_dim_x() * ptx::block_dim_x()) as usize,
    }
}

/// Copies the caller's vectors `[start, end)` into this rank's half.
///
/// # Safety
/// The input holds `s.elems` elements; the half holds `s.vecs` vectors.
#[inline(always)]
unsafe fn copy_in<T: Element>(p: &AllReduceParams, s: &Setup, start: usize, end: usize) {
    let own = (pick(&p.bufs, p.rank) + s.half_off) as *mut [u32; 4];
    let mut i = start + s.tid;
    while i < end {
        // SAFETY: i < vecs; see the function's contract.
        unsafe { ptx::st_global_v4_u32(own.add(i), load_vec(p.input as *const T, i, s.elems, s.aligned)) };
        i += s.stride;
    }
}

/// Every rank reads every peer's whole input and reduces it: one barrier,
/// W times the bytes over NVLink; the latency path for small messages.
///
/// # Safety
/// `p` must describe mapped buffers and pads of W ranks, caller buffers of
/// `p.elems` elements, and halves of at least `p.elems` rounded up to 16
/// bytes.
#[inline(always)]
unsafe fn one_shot<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded from the caller throughout.
    unsafe {
        let s = setup::<T>(p);
        copy_in::<T>(p, &s, 0, s.vecs);
        block_barrier::<W>(&p.pads, p.rank, SLOT_START, s.epoch, p.timeout_ns, p.error);
        let mut i = s.tid;
        while i < s.vecs {
            let v = reduce_vec::<T, W, OP>(&p.bufs, s.half_off, i);
            store_vec(p.output as *mut T, i, s.elems, s.aligned, v);
            i += s.stride;
        }
        finish_call(s.own_pad, s.epoch);
    }
}

/// Reduce-scatter then all-gather, both by peer loads: each rank reduces
/// one W-th of the vectors and reads the other shards from their owners;
/// about 2 bytes over NVLink per byte of input, for medium and large
/// messages.
///
/// # Safety
/// As for [`one_shot`].
#[inline(always)]
unsafe fn two_shot<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded from the caller throughout.
    unsafe {
        let s = setup::<T>(p);
        let mut r = 0;
        while r < W {
            let (start, end) = math::even_split(s.vecs, W, r);
            copy_in::<T>(p, &s, start, end);
            r += 1;
        }
        block_barrier::<W>(&p.pads, p.rank, SLOT_START, s.epoch, p.timeout_ns, p.error);

        let own = (pick(&p.bufs, p.rank) + s.half_off) as *mut [u32; 4];
        let (start, end) = math::even_split(s.vecs, W, p.rank as usize);
        let mut i = start + s.tid;
        while i < end {
            let v = reduce_vec::<T, W, OP>(&p.bufs, s.half_off, i);
            ptx::st_global_v4_u32(own.add(i), v);
            store_vec(p.output as *mut T, i, s.elems, s.aligned, v);
            i += s.stride;
        }
        block_barrier::<W>(&p.pads, p.rank, SLOT_MID, s.epoch, p.timeout_ns, p.error);

        let mut r = 0;
        while r < W {
            if r != p.rank as usize {
                let (start, end) = math::even_split(s.vecs, W, r);
                let src = (pick(&p.bufs, r as u32) + s.half_off) as *const [u32; 4];
                let mut i = start + s.tid;
                while i < end {
                    store_vec(p.output as *mut T, i, s.elems, s.aligned, ptx::ld_global_v4_u32(src.add(i)));
                    i += s.stride;
                }
            }
            r += 1;
        }
        finish_call(s.own_pad, s.epoch);
    }
}

/// Defines one kernel per (algorithm, element type, world size); the op
/// is a run-time parameter dispatched once, outside the loops.
macro_rules! all_reduce_kernels {
    ($algo:ident, $ty:ty, $($name:ident = $w:literal),+ $(,)?) => {$(
        /// # Safety
        /// See the algorithm's function; launched only by the host crate.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: AllReduceParams) {
            // SAFETY: the host upholds the algorithm's contract.
            unsafe {
                match p.op {
                    OP_SUM => $algo::<$ty, $w, OP_SUM>(&p),
                    OP_AVG => $algo::<$ty, $w, OP_AVG>(&p),
                    OP_MIN => $algo::<$ty, $w, OP_MIN>(&p),
                    OP_MAX => $algo::<$ty, $w, OP_MAX>(&p),
                    _ => ptx::trap(),
                }
            }
        }
    )+};
}

all_reduce_kernels!(one_shot, Bf16, one_shot_bf16_w2 = 2, one_shot_bf16_w3 = 3, one_shot_bf16_w4 = 4, one_shot_bf16_w5 = 5, one_shot_bf16_w6 = 6, one_shot_bf16_w7 = 7, one_shot_bf16_w8 = 8);
all_reduce_kernels!(one_shot, F16, one_shot_f16_w2 = 2, one_shot_f16_w3 = 3, one_shot_f16_w4 = 4, one_shot_f16_w5 = 5, one_shot_f16_w6 = 6, one_shot_f16_w7 = 7, one_shot_f16_w8 = 8);
all_reduce_kernels!(one_shot, f32, one_shot_f32_w2 = 2, one_shot_f32_w3 = 3, one_shot_f32_w4 = 4, one_shot_f32_w5 = 5, one_shot_f32_w6 = 6, one_shot_f32_w7 = 7, one_shot_f32_w8 = 8);
all_reduce_kernels!(two_shot, Bf16, two_shot_bf16_w2 = 2, two_shot_bf16_w3 = 3, two_shot_bf16_w4 = 4, two_shot_bf16_w5 = 5, two_shot_bf16_w6 = 6, two_shot_bf16_w7 = 7, two_shot_bf16_w8 = 8);
all_reduce_kernels!(two_shot, F16, two_shot_f16_w2 = 2, two_shot_f16_w3 = 3, two_shot_f16_w4 = 4, two_shot_f16_w5 = 5, two_shot_f16_w6 = 6, two_shot_f16_w7 = 7, two_shot_f16_w8 = 8);
all_reduce_kernels!(two_shot, f32, two_shot_f32_w2 = 2, two_shot_f32_w3 = 3, two_shot_f32_w4 = 4, two_shot_f32_w5 = 5, two_shot_f32_w6 = 6, two_shot_f32_w7 = 7, two_shot_f32_w8 = 8);

/// Explicit barrier among the ranks of `p.rank_mask`: one block of
/// `MAX_RANKS` threads.
///
/// # Safety
/// `p.pads` must hold the mapped pads of every rank in the mask.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn barrier(p: crate::layout::BarrierParams) {
    // SAFETY: forwarded from the host.
    unsafe { crate::sync::pair_barrier(&p.pads, p.rank_mask, p.rank, p.timeout_ns, p.error) }
}
