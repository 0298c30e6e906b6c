//! The push form of the all-reduce, for large messages: every
//! byte that crosses NVLink is a store into a peer, reduce-scatter and
//! all-gather are merged per chunk, and a ring of slots per block and
//! peer keeps several chunks in flight with no barrier between phases.
//!
//! NOTE [push all-reduce]: the message is cut into tiles of W chunks of
//! `chunk_vecs` 16-byte vectors, chunk `o` of a tile owned by rank `o`;
//! tiles go to blocks round robin (`index::push_chunk`). Block `b` of every
//! rank walks its tiles `t = 0, 1, ...` and, per tile:
//!
//! - **RS push** (`push_rs`): rank `s` loads its input's chunk `o` (read
//!   in place: no copy-in) and stores it into slot `t % S` of its ring on
//!   owner `o` (the reduce-scatter ring of `o`'s symmetric buffer, block
//!   `b`, peer `s`), for every owner `o != s`.
//! - **Reduce** (`reduce`): owner `o` sums its own input's chunk and the
//!   W - 1 pushed chunks in rank order, in f32 (`combine_in_order`, so
//!   every rank gets the very same bits), writes the result to its output
//!   and stores it into slot `t % S` of its all-gather ring on every peer.
//! - **Copy out** (`copy_out`): rank `p` copies every owner's reduced
//!   chunk from its all-gather ring into its output. When outputs are
//!   symmetric buffers, the reduce could store straight into the peers'
//!   outputs and this step and its credits would go away (not done): the
//!   all-gather destination is the one pointer `reduce` computes.
//!
//! The steps are software-pipelined in one block with a lookahead `D =
//! index::push_lookahead(S, requested)`, `1 <= D <= S - 1` (the launch
//! shape's `lookahead`; by default 1 below 4 slots, `S / 2` from 4 on):
//! iteration `t` waits, reduces tile `t`, pushes tile `t + D`'s chunks
//! and copies tile `t - D` out, then signals. So a wait is on data its
//! peers signalled D iterations earlier, and there is one signal point
//! (one block barrier, one fence) per tile. With `D = 1` the ranks' blocks
//! run in lockstep (iteration `t` waits for the peers' `t - 1`, so one
//! signal's latency is on every iteration's path); a larger `D` buys that
//! slack with `D - 1` more fill and drain iterations per call and more
//! slots (the host's `PushShape` holds the measured choice).

//! Counters, not epochs: each rank's signal pad holds, per block and
//! source rank, three cumulative counts of tiles (`layout::PUSH_*`),
//! written only by that source with `fence.acq_rel.sys` + relaxed stores
//! after a block barrier (the release pattern; the barrier makes the
//! whole block's stores part of it) and read with acquire loads:
//!
//! - `RS_READY`: chunks the source pushed into my reduce-scatter ring;
//! - `AG_READY`: reduced chunks the source (an owner) pushed into my
//!   all-gather ring. It is also the credit of my reduce-scatter slots on
//!   that owner: the owner's reduce of tile `t` read them before it
//!   signalled `t + 1`;
//! - `AG_FREE`: my all-gather chunks the source copied out (credits).
//!
//! Every rank's block `b` runs the same tiles in every call, so every
//! count of block `b` is the same on every rank at call boundaries: the
//! owner's `PUSH_TILES_DONE + b` word, updated at the end of each call, is
//! the base, and a wait asks for `base + need` with a wrapping compare
//! (`index::push_counter_reached`). A peer already in the next call can
//! only have counted further, never confused a wait of this one.
//!
//! Waits of iteration `t` (thread `k < W - 1` for the k-th peer):
//! `RS_READY >= t + 1` (tile `t`'s chunks arrived), `AG_FREE >= t + 1 - S`
//! (my all-gather slot `t % S` on the peer was copied out), `AG_READY >=
//! max(t + 1 - D, t + D + 1 - S)` (tile `t - D` reduced for me, and my
//! reduce-scatter slot `(t + D) % S` on the peer consumed). Each depends
//! on signals of strictly earlier iterations (`1 <= D <= S - 1`), so no
//! wait can close a cycle; each is bounded (`sync::poll_until`).
//!
//! Why the buffer is free: a call first meets every peer at a per-block
//! barrier (`SLOT_START`, the call's epoch), so every rank finished every
//! earlier call before anyone stores into a peer; the rings may then take
//! the whole buffer, not one half (NOTE [double buffering] in
//! `all_reduce.rs`: a rank that finishes this call has seen every peer
//! start it, which is what the next call of any form relies on). All
//! stores into a peer's buffer are waited for by that peer inside the
//! call, and no rank reads a peer's memory: the next call's copy-in into
//! this rank's own buffer follows in stream order. Within the call a slot
//! is reused only after its credit arrived (above).
//!
//! In place (`input == output`) is safe: tile `t`'s output is written by
//! `reduce(t)` (this rank's chunk, by the thread that just loaded the
//! same input vector) and `copy_out(t)` in iteration `t + D`, after
//! `push_rs(t)` (iteration `t - D`) read the other chunks' input.
//!
//! Every rank must launch the same grid and pass the same `chunk_vecs` and
//! slots (the host derives them from the call, the buffer size and the
//! launch shape of `config::PUSH_LAUNCH_ENV`).

use crate::index::{
    self, PUSH_RING_AG, PUSH_RING_RS, push_block_tiles, push_chunk, push_counter_reached,
    push_lookahead, push_peer_index, push_slot_offset, push_tiles,
};
use crate::layout::{
    AllReduceParams, FORM_PUSH, PUSH_AG_FREE, PUSH_AG_READY, PUSH_RS_READY, PUSH_TILES_DONE,
    SLOT_PUSH, SLOT_START, push_counter_index,
};
use crate::packed::{Element, load_vec, store_vec};
use crate::prims::grid::{Walk, copy4};
use crate::prims::reduce::{combine_in_order, finish_op};
use crate::ptx;
use crate::sync::{
    Peers, ReportTo, Wait, aborted, block_barrier, call_epoch, finish_call, pick, poll_until,
    report,
};

/// One call's geometry as this block sees it. Everything but the thread
/// fields is the same on every rank. Vector indices are u32
/// (`index::PUSH_MAX_VECS`), as in the old bandwidth form, where 64-bit
/// ones cost 50 % more registers.
pub(crate) struct Plan {
    pub(crate) elems: usize,
    pub(crate) vecs: u32,
    pub(crate) chunk_vecs: u32,
    pub(crate) slots: u32,
    pub(crate) blocks: u32,
    pub(crate) block: u32,
    pub(crate) aligned: bool,
    /// Vectors below this are whole and 16-byte aligned in the caller's
    /// buffers (0 when they are not aligned): the loops with four
    /// accesses in flight take those; the rest go one by one through
    /// `load_vec` and `store_vec`.
    pub(crate) whole: u32,
    pub(crate) tid: u32,
    pub(crate) threads: u32,
}

impl Plan {
    /// The plan of a call with `p` over `p.elems` elements of `T` as this
    /// thread sees it; `aligned`: whether the caller's buffers allow the
    /// 16-byte paths.
    #[inline(always)]
    pub(crate) fn new<T: Element>(p: &AllReduceParams, aligned: bool) -> Self {
        let elems = p.elems as usize;
        // At most PUSH_MAX_VECS (the host's promise), so u32 holds it.
        let vecs = index::div_ceil(elems, T::LANES) as u32;
        Plan {
            elems,
            vecs,
            chunk_vecs: p.push_chunk_vecs,
            slots: p.push_slots,
            blocks: ptx::grid_dim_x(),
            block: ptx::block_idx_x(),
            aligned,
            whole: if aligned {
                (elems / T::LANES) as u32
            } else {
                0
            },
            tid: ptx::thread_idx_x(),
            threads: ptx::block_dim_x(),
        }
    }

    /// Owner `owner`'s chunk of this block's tile `t`.
    #[inline(always)]
    pub(crate) fn chunk<const W: usize>(&self, t: u32, owner: u32) -> (u32, u32) {
        push_chunk(
            self.vecs,
            W as u32,
            self.chunk_vecs,
            self.blocks,
            self.block,
            t,
            owner,
        )
    }

    /// Byte offset in a rank's buffer of the slot of tile `t` in ring
    /// `ring`, for the peer at `peer_index`.
    #[inline(always)]
    pub(crate) fn slot_off<const W: usize>(&self, ring: u32, peer_index: u32, t: u32) -> u64 {
        push_slot_offset(
            ring,
            self.blocks,
            W as u32,
            self.slots,
            self.chunk_vecs,
            self.block,
            peer_index,
            // `slots >= 2` (the host's promise); `checked_rem` keeps the
            // panicking path of `%` out of the PTX.
            t.checked_rem(self.slots).unwrap_or_default(),
        )
    }
}

/// The k-th peer of `me` (`k < W - 1`): every rank but `me`, in rank order.
#[inline(always)]
fn kth_peer(k: u32, me: u32) -> u32 {
    if k < me { k } else { k + 1 }
}

/// Copies vectors `[start, end)` from `src` to `dst`, both indexed by the
/// message vector (`src.add(i)`): four loads in flight before their
/// stores where both sides are whole and aligned (below `c.whole`, or
/// always on the side that is a ring slot), then one by one. `IN`: the
/// source is the caller's input (else a slot); `OUT`: the destination is
/// the caller's output (else a slot).
///
/// # Safety
/// `[start, end)` must lie in the message, and in the slots' span of the
/// side that is a slot.
#[inline(always)]
pub(crate) unsafe fn copy<T: Element, const IN: bool, const OUT: bool>(
    c: &Plan,
    src: *const [u32; 4],
    dst: *mut [u32; 4],
    start: u32,
    end: u32,
) {
    let walk = Walk {
        first: start + c.tid,
        end,
        stride: c.threads,
    };
    // SAFETY: the caller's promise; vectors below `whole` are whole and
    // aligned in the caller's buffers, slots always are.
    unsafe {
        copy4(
            walk,
            c.whole,
            |i| ptx::ld_global_v4_u32(src.add(i)),
            |i, v| ptx::st_global_v4_u32(dst.add(i), v),
            |i| {
                if IN {
                    load_vec(src as *const T, i, c.elems, c.aligned)
                } else {
                    ptx::ld_global_v4_u32(src.add(i))
                }
            },
            |i, v| {
                if OUT {
                    store_vec(dst as *mut T, i, c.elems, c.aligned, v);
                } else {
                    ptx::st_global_v4_u32(dst.add(i), v);
                }
            },
        )
    }
}

/// `push_rs(t)`: this rank's input chunk of every other owner of tile
/// `t`, into this rank's reduce-scatter slot on the owner. Owners in the
/// order `me + 1, me + 2, ...`, so the ranks' stores spread over all
/// destinations at any moment.
///
/// # Safety
/// See [`push`]; the slots must be free (their credits arrived).
#[inline(always)]
unsafe fn push_rs<T: Element, const W: usize>(p: &AllReduceParams, c: &Plan, t: u32) {
    let me = p.rank;
    let mut k = 1;
    while k < W as u32 {
        let owner = (me + k) % W as u32;
        let (start, end) = c.chunk::<W>(t, owner);
        // `dst.add(i)` is vector `i - start` of the slot.
        let dst = ((pick(&p.bufs, owner)
            + c.slot_off::<W>(PUSH_RING_RS, push_peer_index(me, owner), t))
            as *mut [u32; 4])
            .wrapping_sub(start as usize);
        // SAFETY: `[start, end)` is in the message and spans at most one
        // slot (`end - start <= chunk_vecs`).
        unsafe { copy::<T, true, false>(c, p.input as *const [u32; 4], dst, start, end) };
        k += 1;
    }
}

/// Worlds up to this store each reduced vector straight into every
/// peer's all-gather slot from registers; larger ones write the chunk to
/// the output first and then copy it to the peers ([`reduce`]): holding
/// W - 1 more slot addresses took ptxas to 128 to 172 registers a thread
/// at W = 5 to 8 (spills at 7 and 8, `cargo xtask check-ptx`), past what
/// a 512-thread block may use.
const DIRECT_MAX_WORLD: usize = 4;

/// `reduce(t)`: this rank's chunk of tile `t`, from its own input and the
/// W - 1 chunks its peers pushed, in rank order; the result goes to the
/// output and into this rank's all-gather slot on every peer.
///
/// # Safety
/// See [`push`]; every peer's chunk of tile `t` must have arrived and
/// every peer's all-gather slot of tile `t` must be free.
#[inline(always)]
unsafe fn reduce<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams, c: &Plan, t: u32) {
    let me = p.rank;
    let (start, end) = c.chunk::<W>(t, me);
    let direct = W <= DIRECT_MAX_WORLD;
    // `rs[r]` / `ag[r]`, shifted so that `.add(i)` is vector `i - start`
    // of the slot: rank r's pushed chunk here, and my slot on rank r.
    // Indexed with constants only (the loops unroll over W).
    let shift = start as u64 * index::VEC_BYTES as u64;
    let mut rs = [0u64; W];
    let mut ag = [0u64; W];
    let mut r = 0;
    while r < W {
        let ru = r as u32;
        if ru != me {
            rs[r] = pick(&p.bufs, me) + c.slot_off::<W>(PUSH_RING_RS, push_peer_index(ru, me), t)
                - shift;
            if direct {
                ag[r] = pick(&p.bufs, ru)
                    + c.slot_off::<W>(PUSH_RING_AG, push_peer_index(me, ru), t)
                    - shift;
            }
        }
        r += 1;
    }
    let mut i = start + c.tid;
    while i < end {
        let iu = i as usize;
        // SAFETY: vector i lies in the input and output, and vector
        // `i - start` in every slot of this tile.
        unsafe {
            // All W loads in flight before combining, as in the two-shot.
            // The own one first: inside the loop, `load_vec`'s element-wise
            // path kept the loop from unrolling at W = 7 and 8 for 16-bit
            // types (the arrays went to local memory).
            let mine = load_vec(p.input as *const T, iu, c.elems, c.aligned);
            let mut raw = [[0u32; 4]; W];
            let mut r = 0;
            while r < W {
                raw[r] = if r as u32 == me {
                    mine
                } else {
                    ptx::ld_global_v4_u32((rs[r] as *const [u32; 4]).add(iu))
                };
                r += 1;
            }
            let v = T::narrow(finish_op::<OP>(combine_in_order::<T, W, OP>(&raw), W));
            if direct {
                let mut r = 0;
                while r < W {
                    if r as u32 != me {
                        ptx::st_global_v4_u32((ag[r] as *mut [u32; 4]).add(iu), v);
                    }
                    r += 1;
                }
            }
            store_vec(p.output as *mut T, iu, c.elems, c.aligned, v);
        }
        i += c.threads;
    }
    if !direct {
        // Each thread reads back the very vectors it just wrote (the same
        // index set), so program order suffices.
        let mut k = 1;
        while k < W as u32 {
            let peer = (me + k) % W as u32;
            let dst = ((pick(&p.bufs, peer)
                + c.slot_off::<W>(PUSH_RING_AG, push_peer_index(me, peer), t))
                as *mut [u32; 4])
                .wrapping_sub(start as usize);
            // SAFETY: `[start, end)` is in the message (the output) and
            // spans one slot.
            unsafe { copy::<T, true, false>(c, p.output as *const [u32; 4], dst, start, end) };
            k += 1;
        }
    }
}

/// `copy_out(t)`: every other owner's reduced chunk of tile `t`, from this
/// rank's all-gather ring into its output; owners as in [`push_rs`].
///
/// # Safety
/// See [`push`]; every owner's reduced chunk of tile `t` must be visible.
#[inline(always)]
unsafe fn copy_out<T: Element, const W: usize>(p: &AllReduceParams, c: &Plan, t: u32) {
    let me = p.rank;
    let mut k = 1;
    while k < W as u32 {
        let owner = (me + k) % W as u32;
        let (start, end) = c.chunk::<W>(t, owner);
        let src = ((pick(&p.bufs, me)
            + c.slot_off::<W>(PUSH_RING_AG, push_peer_index(owner, me), t))
            as *const [u32; 4])
            .wrapping_sub(start as usize);
        // SAFETY: as in `push_rs`, with the roles of input and slot swapped.
        unsafe { copy::<T, false, true>(c, src, p.output as *mut [u32; 4], start, end) };
        k += 1;
    }
}

/// `push_rs(t_push)` and `copy_out(t_out)` in one pass: per owner,
/// the thread's vectors of both chunks side by side, two of each in
/// flight, so the stores into the peers keep going while the reduced
/// chunks are copied out. Apart, every block spent the copy-out (W - 1
/// chunks read and written locally) with nothing on NVLink, in step
/// with its peers' blocks (326 GB/s at 1 GiB on 4 H100 against NCCL's
/// 355). The two touch different tiles (`t_push = t + D`, `t_out =
/// t - D`), so in place stays safe as NOTE [push all-reduce] argues.
///
/// # Safety
/// As for [`push_rs`] (tile `t_push`) and [`copy_out`] (tile `t_out`).
#[inline(always)]
unsafe fn push_and_copy_out<T: Element, const W: usize>(
    p: &AllReduceParams,
    c: &Plan,
    t_push: u32,
    t_out: u32,
) {
    let me = p.rank;
    let input = p.input as *const [u32; 4];
    let output = p.output as *mut [u32; 4];
    // Vector i of the caller's input / output: 16-byte accesses below
    // `c.whole`, element-wise past it (or everywhere when unaligned).
    let load_in = |i: u32| {
        if i < c.whole {
            // SAFETY: vector i is whole and aligned in the input.
            unsafe { ptx::ld_global_v4_u32(input.add(i as usize)) }
        } else {
            // SAFETY: vector i lies in the message.
            unsafe { load_vec(input as *const T, i as usize, c.elems, c.aligned) }
        }
    };
    let store_out = |i: u32, v: [u32; 4]| {
        if i < c.whole {
            // SAFETY: vector i is whole and aligned in the output.
            unsafe { ptx::st_global_v4_u32(output.add(i as usize), v) }
        } else {
            // SAFETY: vector i lies in the message.
            unsafe { store_vec(output as *mut T, i as usize, c.elems, c.aligned, v) }
        }
    };
    let mut k = 1;
    while k < W as u32 {
        let owner = (me + k) % W as u32;
        let (sa, ea) = c.chunk::<W>(t_push, owner);
        let (sb, eb) = c.chunk::<W>(t_out, owner);
        // Vector `o` of my reduce-scatter slot on the owner, and of the
        // owner's all-gather slot here.
        let dst = (pick(&p.bufs, owner)
            + c.slot_off::<W>(PUSH_RING_RS, push_peer_index(me, owner), t_push))
            as *mut [u32; 4];
        let src = (pick(&p.bufs, me)
            + c.slot_off::<W>(PUSH_RING_AG, push_peer_index(owner, me), t_out))
            as *const [u32; 4];
        let (la, lb) = (ea - sa, eb - sb);
        let n = if la > lb { la } else { lb };
        let s = c.threads;
        let mut o = c.tid;
        while o + s < n {
            let o2 = o + s;
            // SAFETY: offsets below `la` / `lb` lie in both chunks and in
            // their slots (`end - start <= chunk_vecs`).
            unsafe {
                let a0 = if o < la { load_in(sa + o) } else { [0; 4] };
                let a1 = if o2 < la { load_in(sa + o2) } else { [0; 4] };
                let b0 = if o < lb {
                    ptx::ld_global_v4_u32(src.add(o as usize))
                } else {
                    [0; 4]
                };
                let b1 = if o2 < lb {
                    ptx::ld_global_v4_u32(src.add(o2 as usize))
                } else {
                    [0; 4]
                };
                if o < la {
                    ptx::st_global_v4_u32(dst.add(o as usize), a0);
                }
                if o2 < la {
                    ptx::st_global_v4_u32(dst.add(o2 as usize), a1);
                }
                if o < lb {
                    store_out(sb + o, b0);
                }
                if o2 < lb {
                    store_out(sb + o2, b1);
                }
            }
            o += s + s;
        }
        if o < n {
            // SAFETY: as above.
            unsafe {
                if o < la {
                    ptx::st_global_v4_u32(dst.add(o as usize), load_in(sa + o));
                }
                if o < lb {
                    store_out(sb + o, ptx::ld_global_v4_u32(src.add(o as usize)));
                }
            }
        }
        k += 1;
    }
}

/// What a wait of one iteration needs, relative to the call's base: each
/// counter of every peer must reach `base + need` (`need <= 0`: nothing).
#[derive(Clone, Copy)]
pub(crate) struct Needs {
    pub(crate) rs_ready: i32,
    pub(crate) ag_ready: i32,
    pub(crate) ag_free: i32,
}

/// Thread `k < W - 1` waits until the k-th peer's counters on this rank's
/// pad reach `needs` (bounded, reported as every wait is); then the block
/// meets at `bar.sync`, which with the acquire loads orders every later
/// read of the block after the peers' stores. Every thread must call it;
/// `needs` is the same in every thread.
///
/// # Safety
/// `own_pad` must be this rank's signal pad; `block < MAX_BLOCKS`.
#[inline(always)]
pub(crate) unsafe fn wait<const W: usize>(
    p: &AllReduceParams,
    own_pad: *const u32,
    block: u32,
    base: u32,
    needs: Needs,
    to: ReportTo,
) {
    if needs.rs_ready <= 0 && needs.ag_ready <= 0 && needs.ag_free <= 0 {
        return;
    }
    let k = ptx::thread_idx_x();
    if k < W as u32 - 1 {
        let peer = kth_peer(k, p.rank);
        let (b, src) = (block as usize, peer as usize);
        // SAFETY: indices inside the pad's push counters (block <
        // MAX_BLOCKS, src < MAX_RANKS), which the caller's pad holds.
        unsafe {
            let rs = own_pad.add(push_counter_index(PUSH_RS_READY, b, src));
            let ag = own_pad.add(push_counter_index(PUSH_AG_READY, b, src));
            let free = own_pad.add(push_counter_index(PUSH_AG_FREE, b, src));
            // Three named words, not an array: a run-time index would put
            // it in local memory.
            let missing = |word: *const u32, need: i32| {
                need > 0 && !push_counter_reached(ptx::ld_acquire_sys_u32(word), base, need)
            };
            let poll = || {
                if missing(rs, needs.rs_ready)
                    || missing(ag, needs.ag_ready)
                    || missing(free, needs.ag_free)
                {
                    Some(())
                } else {
                    None
                }
            };
            if let Wait::TimedOut(()) = poll_until(p.timeout_ns, to.abort, poll) {
                report(to, peer, block, SLOT_PUSH as u32, p.rank);
            }
        }
    }
    ptx::sync_threads();
}

/// After a block barrier, thread `k < W - 1` publishes this rank's counts
/// (`base +` the relative ones) to the k-th peer: one `fence.acq_rel.sys`
/// and three relaxed stores, the release pattern, covering every store
/// and load the block made before the barrier; nothing once a wait of
/// this rank ran out (NOTE [no arrival after giving up] in `sync.rs`).
/// Every thread must call it.
///
/// # Safety
/// `p.pads` must hold the peers' mapped pads; `block < MAX_BLOCKS`.
#[inline(always)]
pub(crate) unsafe fn signal<const W: usize>(
    p: &AllReduceParams,
    block: u32,
    base: u32,
    rs_ready: u32,
    ag_ready: u32,
    ag_free: u32,
) {
    crate::schedule::delay(crate::schedule::SITE_ARRIVE);
    let k = ptx::thread_idx_x();
    // SAFETY: this rank's abort word or 0 (the host's promise). Read
    // before the barrier, whose wait hides the load.
    let gave_up = k < W as u32 - 1 && unsafe { aborted(p.abort) };
    ptx::sync_threads();
    if k < W as u32 - 1 && !gave_up {
        let peer = kth_peer(k, p.rank);
        let pad = pick(&p.pads, peer) as *mut u32;
        let (b, me) = (block as usize, p.rank as usize);
        ptx::fence_acq_rel_sys();
        // SAFETY: indices inside the peer's push counters; this rank is
        // the only writer of its words there.
        unsafe {
            ptx::st_relaxed_sys_u32(
                pad.add(push_counter_index(PUSH_RS_READY, b, me)),
                base.wrapping_add(rs_ready),
            );
            ptx::st_relaxed_sys_u32(
                pad.add(push_counter_index(PUSH_AG_READY, b, me)),
                base.wrapping_add(ag_ready),
            );
            ptx::st_relaxed_sys_u32(
                pad.add(push_counter_index(PUSH_AG_FREE, b, me)),
                base.wrapping_add(ag_free),
            );
        }
    }
}

/// The whole call: NOTE [push all-reduce]. Its kernels, one per element
/// type and world size, come from the list in `entries.rs`
/// (`push_<elem>_w<world>`), instantiated in `all_reduce.rs`.
///
/// # Safety
/// `p` must describe mapped buffers and pads of W ranks (`rank < W`),
/// caller buffers of `p.elems` elements (at most `index::PUSH_MAX_VECS`
/// vectors), `p.push_slots >= 2` and `p.push_chunk_vecs >= 1` with
/// `W x chunk_vecs <= index::PUSH_MAX_TILE_VECS`, and both rings
/// (`index::push_ring_bytes` of the grid) inside every rank's buffer;
/// every rank launches the same grid, of at most `layout::MAX_BLOCKS`
/// blocks of at least W - 1 threads, with the same chunk and slots.
#[inline(always)]
pub(crate) unsafe fn push<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    let own_pad = pick(&p.pads, p.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let epoch = unsafe { call_epoch(own_pad) };
    let aligned = index::all_vec_aligned(&[p.input as usize, p.output as usize]);
    let c = Plan::new::<T>(p, aligned);
    let n = push_block_tiles(
        push_tiles(c.vecs, W as u32, c.chunk_vecs),
        c.blocks,
        c.block,
    );
    let d = push_lookahead(c.slots, p.push_lookahead);
    let s = c.slots as i32;
    let peers = Peers::of(p, FORM_PUSH);
    let to = peers.to;
    let done_word = own_pad.wrapping_add(PUSH_TILES_DONE + c.block as usize);
    // SAFETY: forwarded from the caller; the order of steps, waits and
    // signals is the one NOTE [push all-reduce] argues safe.
    unsafe {
        // Every rank finished every earlier call before anyone writes a
        // peer's buffer or counters.
        block_barrier::<W>(&peers, SLOT_START, epoch);
        let base = ptx::ld_relaxed_sys_u32(done_word);
        if n > 0 {
            let first = if d < n { d } else { n };
            let mut u = 0;
            while u < first {
                push_rs::<T, W>(p, &c, u);
                u += 1;
            }
            signal::<W>(p, c.block, base, first, 0, 0);
            let mut t = 0;
            while t < n + d {
                let ti = t as i32;
                let (di, ni) = (d as i32, n as i32);
                let needs = Needs {
                    rs_ready: if t < n { ti + 1 } else { 0 },
                    ag_free: if t < n { ti + 1 - s } else { 0 },
                    ag_ready: {
                        let out = if t >= d { ti - di + 1 } else { 0 };
                        let credit = if t + d < n { ti + di + 1 - s } else { 0 };
                        if out > credit { out } else { credit }
                    },
                };
                wait::<W>(p, own_pad, c.block, base, needs, to);
                if t < n {
                    reduce::<T, W, OP>(p, &c, t);
                }
                if t + d < n && t >= d {
                    push_and_copy_out::<T, W>(p, &c, t + d, t - d);
                } else if t + d < n {
                    push_rs::<T, W>(p, &c, t + d);
                } else if t >= d {
                    copy_out::<T, W>(p, &c, t - d);
                }
                let clamp = |v: i32| {
                    (if v < 0 {
                        0
                    } else if v > ni {
                        ni
                    } else {
                        v
                    }) as u32
                };
                signal::<W>(
                    p,
                    c.block,
                    base,
                    clamp(ti + di + 1),
                    clamp(ti + 1),
                    clamp(ti - di + 1),
                );
                t += 1;
            }
        }
        if c.tid == 0 {
            // Read by this block's next push call only, after this kernel
            // ended (stream order).
            ptx::st_relaxed_sys_u32(done_word, base.wrapping_add(n));
        }
        finish_call(own_pad, epoch);
    }
}
