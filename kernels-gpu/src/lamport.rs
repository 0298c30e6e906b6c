//! Barrier-free all-reduce, one-shot and two-shot, up to a few MiB: the
//! flags travel with the data (the Lamport scheme of TensorRT-LLM's
//! one-shot kernel).
//!
//! NOTE [lamport]: each signal pad holds `LAMPORT_BUFFERS` (2) buffers. A
//! call lays W slots out back to back from the start of its buffer, each
//! the message rounded up to a cache line (`layout::lamport_stride_bytes`,
//! at most `layout::lamport_slot_bytes`). In call `e`, rank `s` stores its
//! input into slot `s` of buffer `e & 1` on every rank, and each rank polls
//! its own buffer until every word of every slot is non-zero, reduces in
//! rank order, and zeroes what it read. A word of zero means "not arrived":
//! data is stored encoded (sign bits flipped, after turning -0.0 into
//! +0.0), so no encoded word is zero, and the allocator's zero fill is the
//! empty state. So a call costs one trip over NVLink and no barrier.
//!
//! Reuse is safe: rank `s` writes buffer `e & 1` of rank `r` again at call
//! `e + 2` at the earliest, which it can only start after finishing call
//! `e + 1`; and no call ends before every rank started it (directly, by
//! data or flags from every rank, or for HCM through the relay, NOTE [hcm
//! groups]), so `r` had finished call `e`, zeroing included. That
//! zeroing is a plain store ordered only by the end of `r`'s kernel: the
//! stream starts `r`'s next kernel, whose data or flags `s` waits for,
//! only once the previous kernel's writes are performed. Writes of call
//! `e + 1` go to the other buffer, left all zero by the last call that
//! used it (each call zeroes everything written into its buffer). So
//! calls of different sizes, whose slots lie differently, share the
//! buffers freely: each finds its buffer all zero.
//!
//! NOTE [lamport two-shot]: the same scheme in two hops, for larger
//! messages. The message is cut into W shards of `L = ceil(vectors / W)`
//! vectors (the last ones padded with encoded zeros, so every slot
//! position is written every call and all loops are alike on all ranks).
//! Rank `s` stores shard `r` of its input into slot `s` of the scatter area
//! of rank `r`; rank `r` polls its W slots, reduces in rank order, writes
//! its shard of the output (decoded from its own encoding, so it holds the
//! very bits its peers will) and stores the result into slot `r` of the
//! gather area of every rank; each rank then polls its gather area for the
//! other shards. Each byte crosses NVLink twice, as in the two-shot, with
//! stores instead of loads and no barrier. Both areas are zeroed by their
//! reader, so the reuse argument above holds for them too, and the two
//! forms can share a buffer across calls (each leaves it all zero).

//!
//! NOTE [lamport reduce-scatter and all-gather]: the two hops of the
//! two-shot form, each as a collective of its own, on the user's shards
//! (`p.elems` elements each, the buffers `W * p.elems` long on the side
//! that holds all shards). Reduce-scatter: rank `s` stores shard `r` of
//! its input into slot `s` of rank `r`'s area, and rank `r` polls its W
//! slots and reduces them in rank order into its output. All-gather: rank
//! `s` stores its input into slot `s` of every rank's area (its own too),
//! and every rank polls its W slots and writes slot `r` to shard `r` of its
//! output. Same buffers, encoding, zeroing and reuse argument as NOTE
//! [lamport] (each call leaves its area all zero), so they interleave
//! freely with the all-reduces. The encoding makes an all-gathered -0.0
//! come out +0.0 (every other value, NaN payloads included, exactly).
//! Shards larger than a slot run as several calls, each over the same
//! slice of every shard: `p.shard_stride_elems` then gives the distance
//! between shards on the side that holds them all (at 4 ranks a slot is
//! 8 MiB).

use crate::layout::{
    AllReduceParams, FORM_ALL_GATHER, FORM_LAMPORT, FORM_LAMPORT_TWO_SHOT, FORM_REDUCE_SCATTER,
    PHASE_COUNTED, PHASE_END, PHASE_REDUCED, PHASE_START, PHASE_STORED, lamport_stride_bytes,
};
use crate::packed::{Element, load_vec, store_vec};
use crate::prims::grid::{self, unroll};
use crate::prims::slots::{
    LamportCall, decode, encode, kth_destination, push_slots, put, reduce_slots,
    slot_on_every_rank, take_each, take_each_checked,
};
use crate::sync::pick;

/// Where a phase probe marks the end of each phase of a call
/// (`layout::PHASE_*`; the phase probes of `intranode-test-kernels-gpu`,
/// `probe_lamport{,_two_shot}_phases_w*`). The production kernels pass
/// `()`, which marks nothing and compiles to nothing.
pub trait Marks {
    /// Phase `phase` of this block is over. Called by every thread of the
    /// block together.
    fn mark(&self, phase: usize);
}

impl Marks for () {
    #[inline(always)]
    fn mark(&self, _phase: usize) {}
}

/// # Safety
/// `p.pads` must hold the mapped pads of W ranks (`rank < W`), the caller
/// buffers `p.elems` elements with `p.elems * T::BYTES` at most
/// `lamport_slot_bytes(W)`; every rank passes the same `p.elems`.
#[inline(always)]
pub(crate) unsafe fn lamport<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded from the caller.
    unsafe { lamport_marked::<T, W, OP, ()>(p, &()) }
}

/// [`lamport`], marking its phases with `marks`.
///
/// # Safety
/// As for [`lamport`].
#[inline(always)]
pub unsafe fn lamport_marked<T: Element, const W: usize, const OP: u32, M: Marks>(
    p: &AllReduceParams,
    marks: &M,
) {
    marks.mark(PHASE_START);
    let elems = p.elems as usize;
    let vecs = crate::index::div_ceil(elems, T::LANES);
    let slot_bytes = lamport_stride_bytes(vecs) as u64;
    let aligned = crate::index::all_vec_aligned(&[p.input as usize, p.output as usize]);
    let (tid, stride) = grid::place();

    // Start the call and push our slot on every rank, ourselves included.
    // SAFETY: the host passes this rank's mapped pad; every thread of the
    // block starts here; the slots hold the whole message (caller's
    // promise).
    let call = unsafe { push_slots::<T, W>(p, slot_bytes, vecs, aligned, tid, stride) };
    let buffer_off = call.buffer_off;
    marks.mark(PHASE_STORED);

    // Poll our own buffer, reduce in rank order, zero what was read.
    let own = pick(&p.pads, p.rank) + buffer_off;
    let reduce_out = |i: usize, raw| {
        let acc = reduce_slots::<T, W, OP>(raw);
        // SAFETY: i < vecs lies inside the caller's output.
        unsafe { store_vec(p.output as *mut T, i, elems, aligned, T::narrow(acc)) };
    };
    // SAFETY: our buffer's slots hold `vecs` vectors (caller's promise).
    unsafe { take_each::<W, FORM_LAMPORT>(own, slot_bytes, tid, stride, vecs, p, reduce_out) };
    marks.mark(PHASE_END);
}

/// # Safety
/// `p.pads` must hold the mapped pads of W ranks (`rank < W`), the caller
/// buffers `p.elems` elements with `ceil(vectors / W)` vectors at most
/// `lamport_two_shot_slot_bytes(W) / 16`; every rank passes the same `p.elems`.
#[inline(always)]
pub(crate) unsafe fn lamport_two_shot<T: Element, const W: usize, const OP: u32>(
    p: &AllReduceParams,
) {
    // SAFETY: forwarded from the caller.
    unsafe { lamport_two_shot_marked::<T, W, OP, ()>(p, &()) }
}

/// [`lamport_two_shot`], marking its phases with `marks`.
///
/// # Safety
/// As for [`lamport_two_shot`].
#[inline(always)]
pub unsafe fn lamport_two_shot_marked<T: Element, const W: usize, const OP: u32, M: Marks>(
    p: &AllReduceParams,
    marks: &M,
) {
    marks.mark(PHASE_START);
    let elems = p.elems as usize;
    let vecs = crate::index::div_ceil(elems, T::LANES);
    let shard = crate::index::div_ceil(vecs, W);
    let slot_bytes = lamport_stride_bytes(shard) as u64;
    let aligned = crate::index::all_vec_aligned(&[p.input as usize, p.output as usize]);
    let (tid, stride) = grid::place();
    let me = p.rank as usize;

    // Scatter: shard r of our input into our slot of rank r's scatter
    // area. A thread loads its vector of every shard before it stores any
    // (one HBM latency per vector position, not W): all loads of a
    // group of ranks in flight before its stores, one group of up to 4
    // ranks; on more, groups of two (four or eight loads in flight take
    // the kernel past 128 registers). Constant indices (`unroll!`, and
    // macros rather than closures): a loop around `load_vec` stays rolled
    // and moves `v` to local memory. The first group's loads of the first
    // position go before the call is counted (NOTE [loads before the
    // count] in `prims/slots.rs`), and each position's before the loop
    // comes back to store them.
    let group = if W <= 4 { 4 } else { 2 };
    let mut v = [[0u32; 4]; W];
    macro_rules! load_group {
        ($g:expr, $j:expr) => {
            unroll!(k in [0 1 2 3] => {
                if k < group
                    && let Some(v) = v.get_mut($g * group + k)
                {
                    let i = kth_destination::<W>(me, $g * group + k) * shard + $j;
                    // Past the message: encoded zeros (NOTE [lamport
                    // two-shot]).
                    *v = if i < vecs {
                        // SAFETY: vector i lies inside the input.
                        unsafe { load_vec(p.input as *const T, i, elems, aligned) }
                    } else {
                        [0; 4]
                    };
                }
            })
        };
    }
    let mut j = tid;
    if j < shard {
        load_group!(0, j);
    }
    // SAFETY: the host passes this rank's mapped pad; every thread of the
    // block starts here (the loads above touch no pad).
    let call = unsafe { LamportCall::begin(&p.pads, p.rank) };
    marks.mark(PHASE_COUNTED);
    let scatter_off = call.buffer_off;
    let gather_off = scatter_off + W as u64 * slot_bytes;
    let dst = slot_on_every_rank::<W>(p, scatter_off, slot_bytes);
    while j < shard {
        unroll!(g in [0 1 2 3] => {
            if g * group < W {
                if g > 0 {
                    load_group!(g, j);
                }
                unroll!(k in [0 1 2 3] => {
                    if k < group
                        && let (Some(v), Some(dst)) = (v.get(g * group + k), dst.get(g * group + k))
                    {
                        // SAFETY: j < shard fits the slot (caller's promise).
                        unsafe { put((*dst as *mut [u32; 4]).add(j), encode::<T>(*v)) };
                    }
                });
            }
        });
        j += stride;
        if j < shard {
            load_group!(0, j);
        }
    }
    marks.mark(PHASE_STORED);

    // Reduce our shard; write it out and store it into our slot of every
    // rank's gather area (ours too, so the gather polls all W alike).
    let own_scatter = pick(&p.pads, p.rank) + scatter_off;
    let gather_dst = slot_on_every_rank::<W>(p, gather_off, slot_bytes);
    let reduce_share = |j: usize, raw, whole: bool| {
        // Our own shard gets what the peers will decode: the encoding
        // turns a -0.0 result (an average that underflows from below)
        // into +0.0, and every rank must hold the same bits.
        let e = encode::<T>(T::narrow(reduce_slots::<T, W, OP>(raw)));
        let i = me * shard + j;
        if i < vecs {
            // SAFETY: vector i lies inside the output.
            unsafe { store_vec(p.output as *mut T, i, elems, aligned, decode::<T>(e)) };
        }
        // A slot that never came (this rank's wait ran out) leaves the
        // vector unreduced for the peers: they wait for it and report,
        // rather than take a sum without it (NOTE [no arrival after
        // giving up] in `sync.rs`).
        if whole {
            let mut k = 0;
            while k < W {
                // SAFETY: j < shard fits the slot (caller's promise).
                unsafe { put((gather_dst[k] as *mut [u32; 4]).add(j), e) };
                k += 1;
            }
        }
    };
    // SAFETY: our scatter area's slots hold `shard` vectors (caller's
    // promise).
    unsafe {
        take_each_checked::<W, FORM_LAMPORT_TWO_SHOT>(
            own_scatter,
            slot_bytes,
            tid,
            stride,
            shard,
            p,
            reduce_share,
        )
    };
    marks.mark(PHASE_REDUCED);

    // Gather the other shards from our gather area.
    let own_gather = pick(&p.pads, p.rank) + gather_off;
    let write_out = |j: usize, raw: [[u32; 4]; W]| {
        // Constant indices (`unroll!`): a loop over `raw` around
        // `store_vec` (which has loops of its own) stays rolled and would
        // move `raw` to local memory.
        unroll!(r in [0 1 2 3 4 5 6 7] => {
            if let Some(v) = raw.get(r) {
                let i = r * shard + j;
                if r != me && i < vecs {
                    // SAFETY: vector i lies inside the output.
                    unsafe { store_vec(p.output as *mut T, i, elems, aligned, decode::<T>(*v)) };
                }
            }
        });
    };
    // SAFETY: as above, for the gather area.
    unsafe {
        take_each::<W, FORM_LAMPORT_TWO_SHOT>(
            own_gather, slot_bytes, tid, stride, shard, p, write_out,
        )
    };
    marks.mark(PHASE_END);
}

/// What the reduce-scatter and the all-gather derive alike from their
/// parameters: this call's Lamport set-up (its area is the call's buffer),
/// the shard of `n` elements in `vecs` vectors, its slot stride, the bytes
/// from one shard's start to the next on the side that holds every shard
/// (`p.shard_stride_elems`, or `n` when 0) and this thread's place.
struct ShardCall {
    call: LamportCall,
    n: usize,
    vecs: usize,
    slot_bytes: u64,
    shard_bytes: u64,
    tid: usize,
    stride: usize,
}

impl ShardCall {
    /// # Safety
    /// `p.pads` must hold this rank's mapped pad at `p.rank`.
    #[inline(always)]
    unsafe fn new<T: Element>(p: &AllReduceParams) -> Self {
        // SAFETY: the host passes this rank's mapped pad; every thread of
        // the block starts here (`ShardCall::new` opens each kernel).
        let call = unsafe { LamportCall::begin(&p.pads, p.rank) };
        let n = p.elems as usize;
        let vecs = crate::index::div_ceil(n, T::LANES);
        let (tid, stride) = grid::place();
        ShardCall {
            call,
            n,
            vecs,
            slot_bytes: lamport_stride_bytes(vecs) as u64,
            shard_bytes: if p.shard_stride_elems == 0 {
                (n * T::BYTES) as u64
            } else {
                p.shard_stride_elems * T::BYTES as u64
            },
            tid,
            stride,
        }
    }
}

/// Reduce-scatter, Lamport style (NOTE [lamport reduce-scatter and
/// all-gather]): the scatter hop of [`lamport_two_shot`] with the user's shards.
///
/// # Safety
/// `p.pads` must hold the mapped pads of W ranks (`rank < W`); `p.input`
/// holds W shards of `p.elems` elements, each `p.shard_stride_elems` (or
/// `p.elems` when 0) after the last, and `p.output` `p.elems`;
/// `ceil(p.elems / LANES)` vectors fit `lamport_slot_bytes(W)`; every rank
/// passes the same `p.elems`.
#[inline(always)]
pub(crate) unsafe fn lamport_rs<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded from the caller.
    let c = unsafe { ShardCall::new::<T>(p) };
    // Every shard start must be aligned for the vector path.
    let aligned = crate::index::all_vec_aligned(&[
        p.input as usize,
        (p.input + c.shard_bytes) as usize,
        p.output as usize,
    ]);
    let me = p.rank as usize;
    let area = c.call.buffer_off;
    let dst = slot_on_every_rank::<W>(p, area, c.slot_bytes);
    let mut j = c.tid;
    while j < c.vecs {
        // Constant indices (`unroll!`, see `lamport_two_shot`'s scatter): a rolled
        // loop over `dst` puts it in local memory.
        unroll!(k in [0 1 2 3 4 5 6 7] => {
            if let Some(d) = dst.get(k) {
                let r = kth_destination::<W>(me, k);
                let shard = (p.input + r as u64 * c.shard_bytes) as *const T;
                // SAFETY: shard r holds `c.n` elements (caller's promise); the
                // slot holds `c.vecs` vectors.
                unsafe {
                    let v = load_vec(shard, j, c.n, aligned);
                    put((*d as *mut [u32; 4]).add(j), encode::<T>(v));
                }
            }
        });
        j += c.stride;
    }
    let own = pick(&p.pads, p.rank) + area;
    let reduce_out = |j: usize, raw| {
        let acc = reduce_slots::<T, W, OP>(raw);
        // SAFETY: j < c.vecs lies inside the output shard.
        unsafe { store_vec(p.output as *mut T, j, c.n, aligned, T::narrow(acc)) };
    };
    // SAFETY: our area's slots hold `c.vecs` vectors (caller's promise).
    unsafe {
        take_each::<W, FORM_REDUCE_SCATTER>(
            own,
            c.slot_bytes,
            c.tid,
            c.stride,
            c.vecs,
            p,
            reduce_out,
        )
    };
}

/// All-gather, Lamport style (NOTE [lamport reduce-scatter and
/// all-gather]): the gather hop of [`lamport_two_shot`] with the user's input as
/// this rank's shard.
///
/// # Safety
/// As for [`lamport_rs`], with `p.input` holding `p.elems` elements and
/// `p.output` the W shards.
#[inline(always)]
pub(crate) unsafe fn lamport_ag<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded from the caller.
    let c = unsafe { ShardCall::new::<T>(p) };
    let aligned = crate::index::all_vec_aligned(&[
        p.input as usize,
        p.output as usize,
        (p.output + c.shard_bytes) as usize,
    ]);
    let area = c.call.buffer_off;
    let dst = slot_on_every_rank::<W>(p, area, c.slot_bytes);
    let mut j = c.tid;
    while j < c.vecs {
        // SAFETY: j < c.vecs lies inside the input; every slot holds `c.vecs`.
        unsafe {
            let e = encode::<T>(load_vec(p.input as *const T, j, c.n, aligned));
            let mut k = 0;
            while k < W {
                put((dst[k] as *mut [u32; 4]).add(j), e);
                k += 1;
            }
        }
        j += c.stride;
    }
    let own = pick(&p.pads, p.rank) + area;
    let write_out = |j: usize, raw: [[u32; 4]; W]| {
        // Constant indices, as in `lamport_two_shot`'s gather: a loop around
        // `store_vec` would move `raw` to local memory.
        unroll!(r in [0 1 2 3 4 5 6 7] => {
            if let Some(v) = raw.get(r) {
                let shard = (p.output + r as u64 * c.shard_bytes) as *mut T;
                // SAFETY: shard r of the output holds `c.n` elements.
                unsafe { store_vec(shard, j, c.n, aligned, decode::<T>(*v)) };
            }
        });
    };
    // SAFETY: our area's slots hold `c.vecs` vectors (caller's promise).
    unsafe {
        take_each::<W, FORM_ALL_GATHER>(own, c.slot_bytes, c.tid, c.stride, c.vecs, p, write_out)
    };
}
