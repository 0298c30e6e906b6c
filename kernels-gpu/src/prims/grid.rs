//! A thread's walk over a message: its place in the grid, the
//! 4-in-flight strided copy, and the one unroll macro.

use core::ops::{Add, Mul};

use crate::ptx;

/// This thread's first index of a grid-stride walk and the stride: the
/// thread's index in the whole grid, and the grid's thread count.
#[inline(always)]
pub fn place() -> (usize, usize) {
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;
    (tid, stride)
}

/// `$body` once for each `$k` of the list, written out, with `$k` bound
/// to that constant (a `usize`). The kernels' arrays of vectors (per rank,
/// per lane, per warp) stay in registers only while every index into them
/// is a constant: a loop over them that LLVM leaves rolled moves the array
/// to local memory (the rolled loops it met: eight 16-byte vectors per
/// lane in the norm, a `load_vec` or `store_vec` per rank in the Lamport
/// forms, which have loops of their own). Bodies that index a `[_; W]`
/// array use `get` / `get_mut`, so list entries past `W` compile to
/// nothing and no bounds check (an out-of-line panic) enters the PTX.
macro_rules! unroll {
    ($k:ident in [$($n:literal)+] => $body:block) => {{
        $({
            let $k: usize = $n;
            $body
        })+
    }};
}
pub(crate) use unroll;

/// An index of a grid-stride walk: `usize`, or `u32` where 64-bit
/// indices cost registers (the push form, `index::PUSH_MAX_VECS`).
pub trait Index: Copy + PartialOrd + Add<Output = Self> + Mul<Output = Self> {
    /// 3 in this type: the offset of a round's last vector, in strides.
    const THREE: Self;
    /// 4 in this type: the vectors of one round of [`copy4`], in strides.
    const FOUR: Self;
    /// The index as a pointer offset.
    fn at(self) -> usize;
    /// `i, i + s, i + 2 s, i + 3 s` as pointer offsets: the four of one
    /// round of [`copy4`]. The same values either way; each type's form
    /// is the one ptxas kept every kernel at or below its registers with
    /// before the copy was shared (`cargo xtask check-ptx`, sm_90): with
    /// `2 * s` for `usize` the 16-bit two-shot at 4 ranks took 96
    /// registers instead of 80; with `s + s` for `u32` the f32 push at 5
    /// ranks took 118 instead of 102.
    fn four(self, s: Self) -> (usize, usize, usize, usize);
}

impl Index for usize {
    const THREE: Self = 3;
    const FOUR: Self = 4;
    #[inline(always)]
    fn at(self) -> usize {
        self
    }
    #[inline(always)]
    fn four(self, s: Self) -> (usize, usize, usize, usize) {
        (self, self + s, self + s + s, self + 3 * s)
    }
}

impl Index for u32 {
    const THREE: Self = 3;
    const FOUR: Self = 4;
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
    #[inline(always)]
    fn four(self, s: Self) -> (usize, usize, usize, usize) {
        (
            self as usize,
            (self + s) as usize,
            (self + 2 * s) as usize,
            (self + 3 * s) as usize,
        )
    }
}

/// A thread's share of vectors `[.., end)`: `first, first + stride, ...`
/// (`first` has the thread's place in it already).
#[derive(Clone, Copy, Debug)]
pub struct Walk<I> {
    /// The thread's first vector.
    pub first: I,
    /// One past the walk's last vector (the same for every thread).
    pub end: I,
    /// The threads that share the walk: the step from one of this
    /// thread's vectors to its next.
    pub stride: I,
}

/// Copies this thread's vectors of `walk`, `store(i, load(i))`: four
/// independent 16-byte loads in flight before their stores while all four
/// indices lie below `whole_end` (through `load_whole` / `store_whole`,
/// for vectors that are whole and aligned on both sides), then four at a
/// time again, each below the walk's end (`load` / `store`). Written out
/// as four named values, so no array goes to local memory. The loads and
/// stores are `asm!` the compiler keeps in order, and a store waits for
/// its load: without loads ahead, each vector pays a full memory (or
/// NVLink) latency before the next load issues.
///
/// # Safety
/// The four functions must be sound for every index of the walk below
/// `end` (the `_whole` ones below `whole_end`); they are called with no
/// other.
#[inline(always)]
pub unsafe fn copy4<I: Index>(
    walk: Walk<I>,
    whole_end: I,
    load_whole: impl Fn(usize) -> [u32; 4],
    store_whole: impl Fn(usize, [u32; 4]),
    load: impl Fn(usize) -> [u32; 4],
    store: impl Fn(usize, [u32; 4]),
) {
    let s = walk.stride;
    let fast_end = if walk.end < whole_end {
        walk.end
    } else {
        whole_end
    };
    let mut i = walk.first;
    while i + I::THREE * s < fast_end {
        let (i0, i1, i2, i3) = i.four(s);
        let a = load_whole(i0);
        let b = load_whole(i1);
        let d = load_whole(i2);
        let e = load_whole(i3);
        store_whole(i0, a);
        store_whole(i1, b);
        store_whole(i2, d);
        store_whole(i3, e);
        i = i + I::FOUR * s;
    }
    // The rest, also four at a time with every load before the first
    // store: the tail of a whole walk is at most three vectors, but past
    // `whole_end` (an unaligned message: all of it) it may be any number.
    // One by one, each paid a full latency (a chunk of 2728 vectors over
    // 512 threads left 1-2 a thread to this loop). Measured on 4 H100:
    // that all-gather -1.1 to -1.5 %, the push all-reduce at 32 MiB
    // -2.3 %, the barrier two-shot -8 to -14 %; the push all-reduce at 8
    // MiB +3 to +5 %, a size auto gives the Lamport two-shot.
    let end = walk.end.at();
    while i < walk.end {
        let (i0, i1, i2, i3) = i.four(s);
        let a = load(i0);
        let b = if i1 < end { load(i1) } else { [0; 4] };
        let d = if i2 < end { load(i2) } else { [0; 4] };
        let e = if i3 < end { load(i3) } else { [0; 4] };
        store(i0, a);
        if i1 < end {
            store(i1, b);
        }
        if i2 < end {
            store(i2, d);
        }
        if i3 < end {
            store(i3, e);
        }
        i = i + I::FOUR * s;
    }
}

/// [`copy4`] with the same functions on the whole walk.
///
/// # Safety
/// As for [`copy4`].
#[inline(always)]
pub unsafe fn copy4_all<I: Index>(
    walk: Walk<I>,
    load: impl Fn(usize) -> [u32; 4],
    store: impl Fn(usize, [u32; 4]),
) {
    // SAFETY: forwarded from the caller.
    unsafe { copy4(walk, walk.end, &load, &store, &load, &store) }
}
