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

use crate::all_reduce::{combine_in_order, finish_op};
use crate::elem::{Element, Lanes, load_vec, store_vec};
use crate::layout::{
    AllReduceParams, FORM_ALL_GATHER, FORM_LAMPORT, FORM_LAMPORT_TWO_SHOT, FORM_REDUCE_SCATTER,
    LAMPORT_BUFFER_BYTES, LAMPORT_OFFSET_BYTES, SLOT_LAMPORT, lamport_stride_bytes,
};
use crate::math::{lamport_decode_word, lamport_encode_word};
use crate::ptx;
use crate::sync::{ReportTo, Wait, call_epoch, finish_call, pick, poll_until, report};

/// NOTE [lamport]: -0.0 becomes +0.0, then the sign bits flip, so no
/// encoded word is zero (`math::lamport_encode_word`). The price: a result
/// that would be -0.0 (all inputs -0.0, or an average that underflows from
/// below) comes out +0.0; every rank gets the same bits.
#[inline(always)]
fn encode<T: Element>(v: [u32; 4]) -> [u32; 4] {
    [
        lamport_encode_word(v[0], T::BYTES),
        lamport_encode_word(v[1], T::BYTES),
        lamport_encode_word(v[2], T::BYTES),
        lamport_encode_word(v[3], T::BYTES),
    ]
}

#[inline(always)]
fn decode<T: Element>(v: [u32; 4]) -> [u32; 4] {
    [
        lamport_decode_word(v[0], T::BYTES),
        lamport_decode_word(v[1], T::BYTES),
        lamport_decode_word(v[2], T::BYTES),
        lamport_decode_word(v[3], T::BYTES),
    ]
}

#[inline(always)]
fn arrived(v: &[u32; 4]) -> bool {
    v[0] != 0 && v[1] != 0 && v[2] != 0 && v[3] != 0
}

/// Loads vector `i` of every slot of `own`, all W loads in flight at once.
///
/// # Safety
/// `own` must be a Lamport buffer of W slots of `slot_bytes` that holds
/// vector `i`.
#[inline(always)]
pub(crate) unsafe fn load_slots<const W: usize>(
    own: u64,
    slot_bytes: u64,
    i: usize,
) -> [[u32; 4]; W] {
    let mut raw = [[0u32; 4]; W];
    let mut r = 0;
    while r < W {
        // SAFETY: forwarded from the caller.
        raw[r] = unsafe {
            ptx::ld_relaxed_sys_v4_u32(((own + r as u64 * slot_bytes) as *const [u32; 4]).add(i))
        };
        r += 1;
    }
    raw
}

/// Which slot's vector has not fully arrived, if any.
#[inline(always)]
fn missing<const W: usize>(raw: &[[u32; 4]; W]) -> Option<u32> {
    let mut r = 0;
    while r < W {
        if !arrived(&raw[r]) {
            return Some(r as u32);
        }
        r += 1;
    }
    None
}

/// Zeroes vector `i` of every slot of `own`: the empty state for the next
/// call that uses this buffer (NOTE [lamport]).
///
/// # Safety
/// As for [`load_slots`].
#[inline(always)]
pub(crate) unsafe fn zero_slots<const W: usize>(own: u64, slot_bytes: u64, i: usize) {
    let mut r = 0;
    while r < W {
        // SAFETY: forwarded from the caller.
        unsafe {
            ptx::st_global_v4_u32(
                ((own + r as u64 * slot_bytes) as *mut [u32; 4]).add(i),
                [0; 4],
            )
        };
        r += 1;
    }
}

/// Loads of its input a thread keeps in flight ahead of the vector it
/// stores, in the one-shot's push. The loads and stores are `asm!` that
/// the compiler keeps in order, and a store waits for its load: without
/// loads ahead, each vector of a thread pays a full HBM latency before
/// the next load even issues. The same reasoning gave the two-shot's
/// scatter its measured gain (v9 in docs/PERF_NOTES.md); this window was
/// not measured apart (2 GPUs, 4 MiB: 16.85 us against v8's 16.60).
const PUSH_AHEAD: usize = 3;

/// Calls `f(k, raw)` for this thread's vectors `k = first, first + stride,
/// ...` below `n`, with `raw` vector `k` of every slot of `own` once all
/// arrived (or the wait failed, see [`wait_slots`]) and already zeroed for
/// the next call that uses this buffer (NOTE [lamport]). Loading the next
/// vector's slots before waiting on this one was measured (v9 in
/// docs/PERF_NOTES.md, variant E): no difference from 64 KiB to 4 MiB on
/// 4 GPUs, for 32 more registers; dropped.
///
/// # Safety
/// `own` must be a Lamport buffer of W slots of `slot_bytes` that holds
/// `n` vectors; `p.error` is a mapped error word or 0.
#[inline(always)]
unsafe fn take_each<const W: usize, const FORM: u32>(
    own: u64,
    slot_bytes: u64,
    first: usize,
    stride: usize,
    n: usize,
    p: &AllReduceParams,
    mut f: impl FnMut(usize, [[u32; 4]; W]),
) {
    let mut k = first;
    while k < n {
        // SAFETY: k < n lies inside every slot (caller's promise).
        let raw = unsafe {
            let raw =
                wait_slots::<W, FORM>(load_slots::<W>(own, slot_bytes, k), own, slot_bytes, k, p);
            zero_slots::<W>(own, slot_bytes, k);
            raw
        };
        f(k, raw);
        k += stride;
    }
}

/// Decodes every slot's vector and reduces them in rank order.
#[inline(always)]
pub(crate) fn reduce_slots<T: Element, const W: usize, const OP: u32>(
    mut raw: [[u32; 4]; W],
) -> Lanes {
    let mut r = 0;
    while r < W {
        raw[r] = decode::<T>(raw[r]);
        r += 1;
    }
    finish_op::<OP>(combine_in_order::<T, W, OP>(&raw), W)
}

/// The rank a rank `me` stores to `k`-th: `me + 1, me + 2, ..., me`, so
/// that at any moment the ranks' stores spread over all destinations
/// instead of all going to rank 0 first (v9). On more than 4 ranks in rank
/// order: with a constant rank the pad's address is a kernel parameter,
/// not one of W registers, which keeps the 8-rank two-shot within 128.
#[inline(always)]
const fn kth_destination<const W: usize>(me: usize, k: usize) -> usize {
    if W <= 4 { (me + 1 + k) % W } else { k }
}

/// Where this rank stores its slot of a Lamport area on every rank: the
/// area at `area_off` in each pad, in the order of [`kth_destination`].
#[inline(always)]
pub(crate) fn slot_on_every_rank<const W: usize>(
    p: &AllReduceParams,
    area_off: u64,
    slot_bytes: u64,
) -> [u64; W] {
    let mut dst = [0u64; W];
    let mut k = 0;
    while k < W {
        let r = kth_destination::<W>(p.rank as usize, k);
        dst[k] = pick(&p.pads, r as u32) + area_off + p.rank as u64 * slot_bytes;
        k += 1;
    }
    dst
}

/// Vector `i` of every slot, from `raw` (loaded by [`load_slots`]) once
/// all arrived or `timeout_ns` passed (then reported and used as it is:
/// the host fails the next call, see `comm/health.rs`), in the one poll
/// loop of the kernels (`sync::poll_until`). Re-polls only the slots
/// still missing, so polls take less of the L2 that the peers' stores
/// also go through (v8 in docs/PERF_NOTES.md: no speed-up beyond
/// run-to-run noise, kept because it does strictly less work). The loop
/// over W is unrolled, so the slots stay in registers.
///
/// # Safety
/// As for [`load_slots`]; `p.error` is a mapped error word or 0.
#[inline(always)]
pub(crate) unsafe fn wait_slots<const W: usize, const FORM: u32>(
    mut raw: [[u32; 4]; W],
    own: u64,
    slot_bytes: u64,
    i: usize,
    p: &AllReduceParams,
) -> [[u32; 4]; W] {
    if missing(&raw).is_none() {
        return raw;
    }
    // Re-polls the slots still missing; returns the first one still
    // missing, if any.
    let poll = || {
        let mut r = 0;
        while r < W {
            if !arrived(&raw[r]) {
                // SAFETY: the slot holds vector `i` (caller's promise).
                raw[r] = unsafe {
                    ptx::ld_relaxed_sys_v4_u32(
                        ((own + r as u64 * slot_bytes) as *const [u32; 4]).add(i),
                    )
                };
            }
            r += 1;
        }
        missing(&raw)
    };
    // SAFETY: `p.abort` is this rank's abort word or 0 (the host's
    // promise).
    let waited = unsafe { poll_until(p.timeout_ns, p.abort, poll) };
    // A timeout is reported, naming the peer the last poll still missed.
    // An abandoned wait is not (NOTE [abandoned waits] in `sync.rs`): an
    // earlier one failed, this call's result is void, and the first report
    // stands.
    if let Wait::TimedOut(peer) = waited {
        // SAFETY: `p.error` is a mapped error word or 0 (caller's promise).
        unsafe {
            report(
                ReportTo {
                    word: p.error,
                    abort: p.abort,
                    form: FORM,
                },
                peer,
                ptx::block_idx_x(),
                SLOT_LAMPORT as u32,
                p.rank,
            )
        };
    }
    raw
}

/// The one-shot's push (NOTE [lamport]): this thread's vectors `tid, tid
/// + stride, ...` below `vecs` of `p.input` (`p.elems` elements), encoded,
/// into this rank's slot of the buffer at `buffer_off` on every rank.
///
/// # Safety
/// `p.pads` must hold the mapped pads of W ranks (`rank < W`); `p.input`
/// holds `p.elems` elements in `vecs` vectors; W slots of `slot_bytes`
/// (which hold `vecs` vectors) fit the buffer at `buffer_off`.
#[inline(always)]
pub(crate) unsafe fn push_slots<T: Element, const W: usize>(
    p: &AllReduceParams,
    buffer_off: u64,
    slot_bytes: u64,
    vecs: usize,
    aligned: bool,
    tid: usize,
    stride: usize,
) {
    let elems = p.elems as usize;
    let dst = slot_on_every_rank::<W>(p, buffer_off, slot_bytes);
    let load = |i: usize| {
        if i < vecs {
            // SAFETY: i < vecs lies inside the caller's input.
            unsafe { load_vec(p.input as *const T, i, elems, aligned) }
        } else {
            [0; 4]
        }
    };
    // PUSH_AHEAD loads in flight at every store, as a window of variables:
    // an array indexed in a loop that stays rolled would move to local
    // memory.
    const { assert!(PUSH_AHEAD == 3) };
    let mut i = tid;
    let (mut v0, mut v1, mut v2) = (load(i), load(i + stride), load(i + 2 * stride));
    while i < vecs {
        let v3 = load(i + 3 * stride);
        let e = encode::<T>(v0);
        let mut k = 0;
        while k < W {
            // SAFETY: the slot holds the whole message (caller's promise).
            unsafe { ptx::st_relaxed_sys_v4_u32((dst[k] as *mut [u32; 4]).add(i), e) };
            k += 1;
        }
        (v0, v1, v2) = (v1, v2, v3);
        i += stride;
    }
}

/// # Safety
/// `p.pads` must hold the mapped pads of W ranks (`rank < W`), the caller
/// buffers `p.elems` elements with `p.elems * T::BYTES` at most
/// `lamport_slot_bytes(W)`; every rank passes the same `p.elems`.
#[inline(always)]
pub(crate) unsafe fn lamport<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    let own_pad = pick(&p.pads, p.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let epoch = unsafe { call_epoch(own_pad) };
    let buffer_off = LAMPORT_OFFSET_BYTES as u64 + (epoch & 1) as u64 * LAMPORT_BUFFER_BYTES as u64;
    let elems = p.elems as usize;
    let vecs = crate::math::div_ceil(elems, T::LANES);
    let slot_bytes = lamport_stride_bytes(vecs) as u64;
    let aligned = crate::math::all_vec_aligned(&[p.input as usize, p.output as usize]);
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;

    // Push: our slot on every rank, ourselves included.
    // SAFETY: the slots hold the whole message (caller's promise).
    unsafe { push_slots::<T, W>(p, buffer_off, slot_bytes, vecs, aligned, tid, stride) };

    // Poll our own buffer, reduce in rank order, zero what was read.
    let own = pick(&p.pads, p.rank) + buffer_off;
    let reduce_out = |i: usize, raw| {
        let acc = reduce_slots::<T, W, OP>(raw);
        // SAFETY: i < vecs lies inside the caller's output.
        unsafe { store_vec(p.output as *mut T, i, elems, aligned, T::narrow(acc)) };
    };
    // SAFETY: our buffer's slots hold `vecs` vectors (caller's promise).
    unsafe { take_each::<W, FORM_LAMPORT>(own, slot_bytes, tid, stride, vecs, p, reduce_out) };
    // SAFETY: `own_pad` is this rank's pad; every thread gets here.
    unsafe { finish_call(own_pad, epoch) };
}

/// # Safety
/// `p.pads` must hold the mapped pads of W ranks (`rank < W`), the caller
/// buffers `p.elems` elements with `ceil(vectors / W)` vectors at most
/// `lamport2_slot_bytes(W) / 16`; every rank passes the same `p.elems`.
#[inline(always)]
pub(crate) unsafe fn lamport2<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    let own_pad = pick(&p.pads, p.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let epoch = unsafe { call_epoch(own_pad) };
    let scatter_off =
        LAMPORT_OFFSET_BYTES as u64 + (epoch & 1) as u64 * LAMPORT_BUFFER_BYTES as u64;
    let elems = p.elems as usize;
    let vecs = crate::math::div_ceil(elems, T::LANES);
    let shard = crate::math::div_ceil(vecs, W);
    let slot_bytes = lamport_stride_bytes(shard) as u64;
    let gather_off = scatter_off + W as u64 * slot_bytes;
    let aligned = crate::math::all_vec_aligned(&[p.input as usize, p.output as usize]);
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let stride = (ptx::grid_dim_x() * ptx::block_dim_x()) as usize;
    let me = p.rank as usize;

    // Scatter: shard r of our input into our slot of rank r's scatter
    // area. A thread loads its vector of every shard before it stores any
    // (v9: one HBM latency per vector position, not W).
    let dst = slot_on_every_rank::<W>(p, scatter_off, slot_bytes);
    let mut j = tid;
    while j < shard {
        let mut v = [[0u32; 4]; W];
        // One statement per rank with a constant index (see the gather
        // below): a loop around `load_vec` stays rolled and moves `v` to
        // local memory.
        macro_rules! load {
            ($($k:literal)+) => {$(
                if let Some(v) = v.get_mut($k) {
                    let i = kth_destination::<W>(me, $k) * shard + j;
                    if i < vecs {
                        // SAFETY: vector i lies inside the input.
                        *v = unsafe { load_vec(p.input as *const T, i, elems, aligned) };
                    }
                }
            )+};
        }
        macro_rules! store {
            ($($k:literal)+) => {$(
                if let (Some(v), Some(dst)) = (v.get($k), dst.get($k)) {
                    // SAFETY: j < shard fits the slot (caller's promise).
                    unsafe {
                        ptx::st_relaxed_sys_v4_u32((*dst as *mut [u32; 4]).add(j), encode::<T>(*v))
                    };
                }
            )+};
        }
        // All loads in flight on up to 4 ranks; on more, two at a time:
        // four or eight take the kernel past 128 registers.
        if W <= 4 {
            load!(0 1 2 3);
            store!(0 1 2 3);
        } else {
            load!(0 1);
            store!(0 1);
            load!(2 3);
            store!(2 3);
            load!(4 5);
            store!(4 5);
            load!(6 7);
            store!(6 7);
        }
        j += stride;
    }

    // Reduce our shard; write it out and store it into our slot of every
    // rank's gather area (ours too, so the gather polls all W alike).
    let own_scatter = pick(&p.pads, p.rank) + scatter_off;
    let gather_dst = slot_on_every_rank::<W>(p, gather_off, slot_bytes);
    let reduce_share = |j: usize, raw| {
        // Our own shard gets what the peers will decode: the encoding
        // turns a -0.0 result (an average that underflows from below)
        // into +0.0, and every rank must hold the same bits.
        let e = encode::<T>(T::narrow(reduce_slots::<T, W, OP>(raw)));
        let i = me * shard + j;
        if i < vecs {
            // SAFETY: vector i lies inside the output.
            unsafe { store_vec(p.output as *mut T, i, elems, aligned, decode::<T>(e)) };
        }
        let mut k = 0;
        while k < W {
            // SAFETY: j < shard fits the slot (caller's promise).
            unsafe { ptx::st_relaxed_sys_v4_u32((gather_dst[k] as *mut [u32; 4]).add(j), e) };
            k += 1;
        }
    };
    // SAFETY: our scatter area's slots hold `shard` vectors (caller's
    // promise).
    unsafe {
        take_each::<W, FORM_LAMPORT_TWO_SHOT>(
            own_scatter,
            slot_bytes,
            tid,
            stride,
            shard,
            p,
            reduce_share,
        )
    };

    // Gather the other shards from our gather area.
    let own_gather = pick(&p.pads, p.rank) + gather_off;
    let write_out = |j: usize, raw: [[u32; 4]; W]| {
        // One statement per rank with a constant index: a loop over `raw`
        // around `store_vec` (which has loops of its own) stays rolled and
        // would move `raw` to local memory.
        macro_rules! out {
            ($($r:literal)+) => {$(
                if let Some(v) = raw.get($r) {
                    let i = $r * shard + j;
                    if $r != me && i < vecs {
                        // SAFETY: vector i lies inside the output.
                        unsafe {
                            store_vec(p.output as *mut T, i, elems, aligned, decode::<T>(*v))
                        };
                    }
                }
            )+};
        }
        out!(0 1 2 3 4 5 6 7);
    };
    // SAFETY: as above, for the gather area.
    unsafe {
        take_each::<W, FORM_LAMPORT_TWO_SHOT>(
            own_gather, slot_bytes, tid, stride, shard, p, write_out,
        )
    };
    // SAFETY: `own_pad` is this rank's pad; every thread gets here.
    unsafe { finish_call(own_pad, epoch) };
}

/// What the reduce-scatter and the all-gather derive alike from their
/// parameters: this call's pad, epoch and Lamport area, the shard of `n`
/// elements in `vecs` vectors, its slot stride and this thread's place.
struct ShardCall {
    own_pad: *mut u32,
    epoch: u32,
    area: u64,
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
        let own_pad = pick(&p.pads, p.rank) as *mut u32;
        // SAFETY: the host passes this rank's mapped pad.
        let epoch = unsafe { call_epoch(own_pad) };
        let n = p.elems as usize;
        let vecs = crate::math::div_ceil(n, T::LANES);
        ShardCall {
            own_pad,
            epoch,
            area: LAMPORT_OFFSET_BYTES as u64 + (epoch & 1) as u64 * LAMPORT_BUFFER_BYTES as u64,
            n,
            vecs,
            slot_bytes: lamport_stride_bytes(vecs) as u64,
            shard_bytes: (n * T::BYTES) as u64,
            tid: (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize,
            stride: (ptx::grid_dim_x() * ptx::block_dim_x()) as usize,
        }
    }
}

/// Reduce-scatter, Lamport style (NOTE [lamport reduce-scatter and
/// all-gather]): the scatter hop of [`lamport2`] with the user's shards.
///
/// # Safety
/// `p.pads` must hold the mapped pads of W ranks (`rank < W`); `p.input`
/// holds `W * p.elems` elements and `p.output` `p.elems`;
/// `ceil(p.elems / LANES)` vectors fit `lamport_slot_bytes(W)`; every rank
/// passes the same `p.elems`.
#[inline(always)]
pub(crate) unsafe fn lamport_rs<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded from the caller.
    let ShardCall {
        own_pad,
        epoch,
        area,
        n,
        vecs,
        slot_bytes,
        shard_bytes,
        tid,
        stride,
    } = unsafe { ShardCall::new::<T>(p) };
    // Every shard start must be aligned for the vector path.
    let aligned = crate::math::all_vec_aligned(&[
        p.input as usize,
        (p.input + shard_bytes) as usize,
        p.output as usize,
    ]);
    let me = p.rank as usize;
    let dst = slot_on_every_rank::<W>(p, area, slot_bytes);
    let mut j = tid;
    while j < vecs {
        // One statement per destination with a constant index (see
        // `lamport2`'s scatter): a rolled loop over `dst` puts it in local
        // memory.
        macro_rules! push {
            ($($k:literal)+) => {$(
                if let Some(d) = dst.get($k) {
                    let r = kth_destination::<W>(me, $k);
                    let shard = (p.input + r as u64 * shard_bytes) as *const T;
                    // SAFETY: shard r holds n elements (caller's promise);
                    // the slot holds `vecs` vectors.
                    unsafe {
                        let v = load_vec(shard, j, n, aligned);
                        ptx::st_relaxed_sys_v4_u32((*d as *mut [u32; 4]).add(j), encode::<T>(v));
                    }
                }
            )+};
        }
        push!(0 1 2 3 4 5 6 7);
        j += stride;
    }
    let own = pick(&p.pads, p.rank) + area;
    let reduce_out = |j: usize, raw| {
        let acc = reduce_slots::<T, W, OP>(raw);
        // SAFETY: j < vecs lies inside the output shard.
        unsafe { store_vec(p.output as *mut T, j, n, aligned, T::narrow(acc)) };
    };
    // SAFETY: our area's slots hold `vecs` vectors (caller's promise).
    unsafe {
        take_each::<W, FORM_REDUCE_SCATTER>(own, slot_bytes, tid, stride, vecs, p, reduce_out)
    };
    // SAFETY: `own_pad` is this rank's pad; every thread gets here.
    unsafe { finish_call(own_pad, epoch) };
}

/// All-gather, Lamport style (NOTE [lamport reduce-scatter and
/// all-gather]): the gather hop of [`lamport2`] with the user's input as
/// this rank's shard.
///
/// # Safety
/// As for [`lamport_rs`], with `p.input` holding `p.elems` elements and
/// `p.output` `W * p.elems`.
#[inline(always)]
pub(crate) unsafe fn lamport_ag<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded from the caller.
    let ShardCall {
        own_pad,
        epoch,
        area,
        n,
        vecs,
        slot_bytes,
        shard_bytes,
        tid,
        stride,
    } = unsafe { ShardCall::new::<T>(p) };
    let aligned = crate::math::all_vec_aligned(&[
        p.input as usize,
        p.output as usize,
        (p.output + shard_bytes) as usize,
    ]);
    let dst = slot_on_every_rank::<W>(p, area, slot_bytes);
    let mut j = tid;
    while j < vecs {
        // SAFETY: j < vecs lies inside the input; every slot holds `vecs`.
        unsafe {
            let e = encode::<T>(load_vec(p.input as *const T, j, n, aligned));
            let mut k = 0;
            while k < W {
                ptx::st_relaxed_sys_v4_u32((dst[k] as *mut [u32; 4]).add(j), e);
                k += 1;
            }
        }
        j += stride;
    }
    let own = pick(&p.pads, p.rank) + area;
    let write_out = |j: usize, raw: [[u32; 4]; W]| {
        // One statement per rank with a constant index, as in `lamport2`'s
        // gather: a loop around `store_vec` would move `raw` to local
        // memory.
        macro_rules! out {
            ($($r:literal)+) => {$(
                if let Some(v) = raw.get($r) {
                    let shard = (p.output + $r * shard_bytes) as *mut T;
                    // SAFETY: shard r of the output holds n elements.
                    unsafe { store_vec(shard, j, n, aligned, decode::<T>(*v)) };
                }
            )+};
        }
        out!(0 1 2 3 4 5 6 7);
    };
    // SAFETY: our area's slots hold `vecs` vectors (caller's promise).
    unsafe { take_each::<W, FORM_ALL_GATHER>(own, slot_bytes, tid, stride, vecs, p, write_out) };
    // SAFETY: `own_pad` is this rank's pad; every thread gets here.
    unsafe { finish_call(own_pad, epoch) };
}
