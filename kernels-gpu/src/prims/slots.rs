//! The Lamport buffers of the signal pads (NOTE [lamport] in `lamport.rs`,
//! which argues the protocol): what every Lamport form does alike, the
//! one-shot and two-shot all-reduce, the reduce-scatter and all-gather
//! (`lamport.rs`) and the fused norm (`fused_norm.rs`). The call's set-up
//! ([`LamportCall`]: epoch, buffer `epoch & 1`), the encoding that makes
//! zero mean "not arrived", the push of this rank's slot into every rank,
//! the bounded wait for a vector of every slot, and the zeroing that
//! leaves the buffer empty for the next call that uses it.

use crate::index::{lamport_decode_word, lamport_encode_word};
use crate::layout::{
    AllReduceParams, LAMPORT_BUFFER_BYTES, LAMPORT_OFFSET_BYTES, MAX_RANKS, SLOT_LAMPORT,
};
use crate::packed::{Element, Lanes, load_vec};
use crate::prims::reduce::{combine_in_order, finish_op};
use crate::ptx;
use crate::sync::{ReportTo, Wait, pick, poll_until, report, start_lamport_call};

/// A Lamport call's set-up, the same in every form: the offset in every
/// pad of the buffer the call uses, `epoch & 1` (NOTE [lamport]), the
/// call's epoch coming from `sync::start_lamport_call`, which also counts
/// the call (so nothing is left to do at its end). Users address their
/// own area as `pick(&p.pads, p.rank) + offset`, not from a kept pad
/// pointer: that form took `lamport_rs_{bf16,f16}_w2` from 48 to 52
/// registers (ptxas, sm_90).
///
/// NOTE [loads before the count]: `begin` waits for an L2 round trip (the
/// count's `atom`, NOTE [call count] in `sync.rs`), and no store of the
/// call can go before it, since the epoch picks the buffer. The input's
/// loads do not need the epoch: the one-shot's push ([`push_slots`]) and
/// the two-shot's scatter (`lamport::lamport_two_shot`) issue their first ones
/// before `begin`, so the two latencies overlap instead of adding up. The
/// input is the previous kernel's output, so those loads come after
/// `griddepcontrol.wait` as before (the entries' prologue); only the
/// count moved behind them. Expected (not yet measured on a GPU): about one
/// L2 round trip less a call, 0.2-0.4 us, at the sizes where a thread
/// has one or two vectors (up to about 1 MiB at 4 ranks).
#[derive(Clone, Copy, Debug)]
pub struct LamportCall {
    /// Byte offset in every pad of the Lamport buffer this call uses.
    pub buffer_off: u64,
}

impl LamportCall {
    /// Starts the call and counts it (NOTE [call count] in `sync.rs`).
    ///
    /// # Safety
    /// `pads[rank]` must be this rank's mapped signal pad; every thread of
    /// the block calls it together, at the block's start.
    #[inline(always)]
    pub unsafe fn begin(pads: &[u64; MAX_RANKS], rank: u32) -> Self {
        let own_pad = pick(pads, rank) as *mut u32;
        // SAFETY: the caller passes this rank's mapped pad, in every
        // thread of the block together.
        let epoch = unsafe { start_lamport_call(own_pad) };
        LamportCall {
            buffer_off: LAMPORT_OFFSET_BYTES as u64
                + (epoch & 1) as u64 * LAMPORT_BUFFER_BYTES as u64,
        }
    }
}

/// NOTE [lamport]: -0.0 becomes +0.0, then the sign bits flip, so no
/// encoded word is zero (`index::lamport_encode_word`). The price: a result
/// that would be -0.0 (all inputs -0.0, or an average that underflows from
/// below) comes out +0.0; every rank gets the same bits.
#[inline(always)]
pub fn encode<T: Element>(v: [u32; 4]) -> [u32; 4] {
    [
        lamport_encode_word(v[0], T::BYTES),
        lamport_encode_word(v[1], T::BYTES),
        lamport_encode_word(v[2], T::BYTES),
        lamport_encode_word(v[3], T::BYTES),
    ]
}

/// Undoes [`encode`]: every value comes back, but -0.0 as +0.0.
#[inline(always)]
pub fn decode<T: Element>(v: [u32; 4]) -> [u32; 4] {
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
unsafe fn load_slots<const W: usize>(own: u64, slot_bytes: u64, i: usize) -> [[u32; 4]; W] {
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
unsafe fn zero_slots<const W: usize>(own: u64, slot_bytes: u64, i: usize) {
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

/// Stores one encoded vector into a slot, on a peer or on this rank: the
/// one store of every Lamport form (the push, the two-shot's scatter and
/// gather, the reduce-scatter and the all-gather).
///
/// A strong `st.relaxed.sys`: the data words are their own flags, polled
/// with strong loads (`ld.relaxed.sys`), and a strong pair is what the
/// PTX memory model orders. Weak `st.global.v4` stores were measured
/// instead (4 H100, two turns each): the two-shot at
/// 4 MiB on 4 ranks 23.54 -> 23.22 us, every other Lamport row within
/// 0.5 %; not worth leaving the model for 1.4 % at one size.
///
/// # Safety
/// `dst` must be a valid, 16-byte aligned address of a mapped slot.
#[inline(always)]
pub unsafe fn put(dst: *mut [u32; 4], v: [u32; 4]) {
    // SAFETY: forwarded from the caller.
    unsafe { ptx::st_relaxed_sys_v4_u32(dst, v) }
}

/// Loads of its input a thread keeps in flight ahead of the vector it
/// stores, in the one-shot's push. The loads and stores are `asm!` that
/// the compiler keeps in order, and a store waits for its load: without
/// loads ahead, each vector of a thread pays a full HBM latency before
/// the next load even issues. The same reasoning gave the two-shot's
/// scatter its measured gain; this window was not measured apart (2 GPUs,
/// 4 MiB: 16.85 us against 16.60 for the code before the change).
const PUSH_AHEAD: usize = 3;

/// Vector `i` of every slot of `own` once all arrived (or the wait
/// failed, see [`wait_slots`]), already zeroed for the next call that uses
/// this buffer (NOTE [lamport]).
///
/// # Safety
/// As for [`load_slots`]; `p.error` is a mapped error word or 0.
#[inline(always)]
pub unsafe fn take<const W: usize, const FORM: u32>(
    own: u64,
    slot_bytes: u64,
    i: usize,
    p: &AllReduceParams,
) -> [[u32; 4]; W] {
    // SAFETY: forwarded from the caller.
    unsafe { take_checked::<W, FORM>(own, slot_bytes, i, p).0 }
}

/// [`take`], with whether every slot's vector arrived (false: the wait
/// for it failed, and the vector is what the slots held then).
///
/// # Safety
/// As for [`take`].
#[inline(always)]
pub unsafe fn take_checked<const W: usize, const FORM: u32>(
    own: u64,
    slot_bytes: u64,
    i: usize,
    p: &AllReduceParams,
) -> ([[u32; 4]; W], bool) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let got = wait_slots::<W, FORM>(load_slots::<W>(own, slot_bytes, i), own, slot_bytes, i, p);
        zero_slots::<W>(own, slot_bytes, i);
        got
    }
}

/// Calls `f(k, raw)` for this thread's vectors `k = first, first + stride,
/// ...` below `n`, with `raw` vector `k` of every slot of `own` once all
/// arrived (or the wait failed, see [`wait_slots`]) and already zeroed for
/// the next call that uses this buffer (NOTE [lamport]). Loading the next
/// vector's slots before waiting on this one was measured: no difference
/// from 64 KiB to 4 MiB on 4 GPUs, for 32 more registers; dropped.
///
/// # Safety
/// `own` must be a Lamport buffer of W slots of `slot_bytes` that holds
/// `n` vectors; `p.error` is a mapped error word or 0.
#[inline(always)]
pub unsafe fn take_each<const W: usize, const FORM: u32>(
    own: u64,
    slot_bytes: u64,
    first: usize,
    stride: usize,
    n: usize,
    p: &AllReduceParams,
    mut f: impl FnMut(usize, [[u32; 4]; W]),
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        take_each_checked::<W, FORM>(own, slot_bytes, first, stride, n, p, |k, raw, _| f(k, raw))
    }
}

/// [`take_each`], with `f(k, raw, arrived)`: whether every slot's vector
/// arrived ([`take_checked`]).
///
/// # Safety
/// As for [`take_each`].
#[inline(always)]
pub unsafe fn take_each_checked<const W: usize, const FORM: u32>(
    own: u64,
    slot_bytes: u64,
    first: usize,
    stride: usize,
    n: usize,
    p: &AllReduceParams,
    mut f: impl FnMut(usize, [[u32; 4]; W], bool),
) {
    let mut k = first;
    while k < n {
        // SAFETY: k < n lies inside every slot (caller's promise).
        let (raw, arrived) = unsafe { take_checked::<W, FORM>(own, slot_bytes, k, p) };
        f(k, raw, arrived);
        k += stride;
    }
}

/// Decodes every slot's vector and reduces them in rank order.
#[inline(always)]
pub fn reduce_slots<T: Element, const W: usize, const OP: u32>(mut raw: [[u32; 4]; W]) -> Lanes {
    let mut r = 0;
    while r < W {
        raw[r] = decode::<T>(raw[r]);
        r += 1;
    }
    finish_op::<OP>(combine_in_order::<T, W, OP>(&raw), W)
}

/// The rank a rank `me` stores to `k`-th: `me + 1, me + 2, ..., me`, so
/// that at any moment the ranks' stores spread over all destinations
/// instead of all going to rank 0 first. On more than 4 ranks in rank
/// order: with a constant rank the pad's address is a kernel parameter,
/// not one of W registers, which keeps the 8-rank two-shot within 128.
#[inline(always)]
pub const fn kth_destination<const W: usize>(me: usize, k: usize) -> usize {
    if W <= 4 { (me + 1 + k) % W } else { k }
}

/// Where this rank stores its slot of a Lamport area on every rank: the
/// area at `area_off` in each pad, in the order of [`kth_destination`].
#[inline(always)]
pub fn slot_on_every_rank<const W: usize>(
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
/// the host fails the next call, see `host/src/health.rs`), in the one poll
/// loop of the kernels (`sync::poll_until`). Re-polls only the slots
/// still missing, so polls take less of the L2 that the peers' stores
/// also go through (measured: no speed-up beyond run-to-run noise, kept
/// because it does strictly less work). The loop
/// over W is unrolled, so the slots stay in registers.
///
/// # Safety
/// As for [`load_slots`]; `p.error` is a mapped error word or 0. The
/// flag is whether every slot's vector arrived (false: the wait failed).
#[inline(always)]
unsafe fn wait_slots<const W: usize, const FORM: u32>(
    mut raw: [[u32; 4]; W],
    own: u64,
    slot_bytes: u64,
    i: usize,
    p: &AllReduceParams,
) -> ([[u32; 4]; W], bool) {
    if missing(&raw).is_none() {
        return (raw, true);
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
    let arrived = matches!(waited, Wait::Reached);
    // A timeout is reported, naming the peer the last poll still missed.
    // An abandoned wait is not (NOTE [abandoned waits] in `sync.rs`): an
    // earlier one failed, this call's result is void, and the first report
    // stands.
    if let Wait::TimedOut(peer) = waited {
        // SAFETY: `p.error` is a mapped error word or 0 (caller's promise).
        unsafe {
            report(
                ReportTo::of(p, FORM),
                peer,
                ptx::block_idx_x(),
                SLOT_LAMPORT as u32,
                p.rank,
            )
        };
    }
    (raw, arrived)
}

/// Starts the call ([`LamportCall::begin`]) and does the one-shot's push
/// (NOTE [lamport]): this thread's vectors `tid, tid + stride, ...` below
/// `vecs` of `p.input` (`p.elems` elements), encoded, into this rank's
/// slot of the call's buffer on every rank. The first [`PUSH_AHEAD`] loads
/// issue before the call is counted (NOTE [loads before the count]).
///
/// # Safety
/// `p.pads` must hold the mapped pads of W ranks (`rank < W`); `p.input`
/// holds `p.elems` elements in `vecs` vectors; W slots of `slot_bytes`
/// (which hold `vecs` vectors) fit a Lamport buffer; every thread of the
/// block calls it together, at the block's start.
#[inline(always)]
pub unsafe fn push_slots<T: Element, const W: usize>(
    p: &AllReduceParams,
    slot_bytes: u64,
    vecs: usize,
    aligned: bool,
    tid: usize,
    stride: usize,
) -> LamportCall {
    let elems = p.elems as usize;
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
    // SAFETY: the caller passes this rank's mapped pad, in every thread of
    // the block together, at its start (the loads above touch no pad).
    let call = unsafe { LamportCall::begin(&p.pads, p.rank) };
    let dst = slot_on_every_rank::<W>(p, call.buffer_off, slot_bytes);
    while i < vecs {
        let v3 = load(i + 3 * stride);
        let e = encode::<T>(v0);
        let mut k = 0;
        while k < W {
            // SAFETY: the slot holds the whole message (caller's promise).
            unsafe { put((dst[k] as *mut [u32; 4]).add(i), e) };
            k += 1;
        }
        (v0, v1, v2) = (v1, v2, v3);
        i += stride;
    }
    call
}
