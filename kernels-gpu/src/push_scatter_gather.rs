//! Reduce-scatter and all-gather for large shards through the push form's
//! rings: the two halves of the push all-reduce, each a collective of
//! its own.
//!
//! NOTE [push reduce-scatter and all-gather]: the Lamport forms (NOTE
//! [lamport reduce-scatter and all-gather] in `lamport.rs`) write every
//! byte twice more on the reader's side (the poll and the zeroing) and
//! run a shard larger than a slot as one call per slice; at 64 MiB on 4
//! H100 that left the all-gather behind NCCL. Here every shard of
//! `n` elements (`p.elems`) is cut into tiles of one chunk of
//! `chunk_vecs` 16-byte vectors (`index::push_chunk` with a world of one:
//! tile `g` is vectors `[g x chunk, (g + 1) x chunk)` of every shard),
//! tiles go to blocks round robin, and block `b` of every rank walks its
//! tiles through the rings, counters, credits and waits of NOTE [push
//! all-reduce] in `push.rs`:
//!
//! - **Reduce-scatter** (`push_reduce_scatter`): rank `s` stores its
//!   input's shard `o` chunk of tile `t + D` into slot `(t + D) % S` of its
//!   reduce-scatter ring on owner `o`; owner `o` waits for the W - 1
//!   chunks of tile `t` and reduces them with its own in rank order into
//!   its output. The owner's `AG_READY` count is its reductions done: the
//!   credit of the pushers' slots, as in the all-reduce.
//! - **All-gather** (`push_all_gather`): in iteration `t` rank `s` stores
//!   its input's chunk of tile `t` into slot `t % S` of its all-gather ring
//!   on every peer (and into shard `s` of its output), then copies tile
//!   `t - D` of every peer's ring into that peer's shard of its output.
//!   `AG_READY` counts the pushed tiles, `AG_FREE` the tiles copied out
//!   (the credit of the slots).
//!
//! Each wait is on a signal of a strictly earlier iteration of the peer
//! (`1 <= D <= S - 1`, as in the all-reduce), so none closes a cycle. Every
//! call ends with all three counters of every block at `base +` its tiles
//! on every rank (counters a form does not wait on are signalled alongside
//! the others), which is the base the next push call of any of the three
//! forms takes from `PUSH_TILES_DONE`; the start barrier and the reuse
//! argument are the all-reduce's. Each form has one ring per block and
//! peer, not two: both lay it out where the all-reduce's reduce-scatter
//! ring starts ([`RING`]), with chunks up to twice as long for the same
//! buffer (the host's `push_launch_rings`). On 4 H100 the chunks that two
//! rings left in the default buffer (21 KiB) cost the reduce-scatter
//! 9-14 % and the all-gather 1-7 % at 64 MiB-1 GiB against chunks of 64
//! KiB.

use crate::index::{
    self, PUSH_RING_RS, push_block_tiles, push_lookahead, push_peer_index, push_tiles,
};
use crate::layout::{
    AllReduceParams, FORM_ALL_GATHER, FORM_REDUCE_SCATTER, PUSH_TILES_DONE, SLOT_START,
};
use crate::packed::{Element, load_vec, store_vec};
use crate::prims::reduce::{combine_in_order, finish_op};
use crate::ptx;
use crate::push::{Needs, Plan, copy, signal, wait};
use crate::sync::{Peers, block_barrier, call_epoch, finish_call, pick};

/// The one ring of either form, in the all-reduce's layout
/// (`index::push_slot_offset`): the first, so it spans the buffer the host
/// sized for one ring.
const RING: u32 = PUSH_RING_RS;

/// One shard-form call as this block sees it: the push plan over one
/// shard (`elems`, `vecs` and `whole` count a shard), and the bytes from
/// one shard's start to the next on the side that holds all W.
struct ShardPlan {
    c: Plan,
    shard_bytes: u64,
}

impl ShardPlan {
    /// The plan of a call with `p`, whose side at `whole_side` holds the
    /// W shards and whose side at `shard_side` one.
    #[inline(always)]
    fn new<T: Element>(p: &AllReduceParams, whole_side: u64, shard_side: u64) -> Self {
        let shard_bytes = if p.shard_stride_elems == 0 {
            p.elems
        } else {
            p.shard_stride_elems
        } * T::BYTES as u64;
        // Every shard start must be aligned for the 16-byte paths.
        let aligned = index::all_vec_aligned(&[
            whole_side as usize,
            (whole_side + shard_bytes) as usize,
            shard_side as usize,
        ]);
        ShardPlan {
            c: Plan::new::<T>(p, aligned),
            shard_bytes,
        }
    }

    /// Vectors `[start, end)` of every shard in this block's tile `t`.
    #[inline(always)]
    fn tile(&self, t: u32) -> (u32, u32) {
        self.c.chunk::<1>(t, 0)
    }

    /// Tiles this block runs.
    #[inline(always)]
    fn tiles(&self) -> u32 {
        push_block_tiles(
            push_tiles(self.c.vecs, 1, self.c.chunk_vecs),
            self.c.blocks,
            self.c.block,
        )
    }

    /// Shard `r` of the side that holds all W, at `base`.
    #[inline(always)]
    fn shard(&self, base: u64, r: u32) -> u64 {
        base + r as u64 * self.shard_bytes
    }
}

/// The reduce-scatter's push of tile `t`: this rank's input chunk of
/// every other owner into its reduce-scatter slot on that owner, owners
/// in the order `me + 1, me + 2, ...` (as in the all-reduce).
///
/// # Safety
/// See [`push_reduce_scatter`]; the slots must be free.
#[inline(always)]
unsafe fn rs_push<T: Element, const W: usize>(p: &AllReduceParams, s: &ShardPlan, t: u32) {
    let me = p.rank;
    let (start, end) = s.tile(t);
    let mut k = 1;
    while k < W as u32 {
        let owner = (me + k) % W as u32;
        // `dst.add(i)` is vector `i - start` of the slot.
        let dst = ((pick(&p.bufs, owner) + s.c.slot_off::<W>(RING, push_peer_index(me, owner), t))
            as *mut [u32; 4])
            .wrapping_sub(start as usize);
        let src = s.shard(p.input, owner) as *const [u32; 4];
        // SAFETY: `[start, end)` lies in the shard and spans one slot.
        unsafe { copy::<T, true, false>(&s.c, src, dst, start, end) };
        k += 1;
    }
}

/// The reduce-scatter's reduce of tile `t`: this rank's shard of its own
/// input and the W - 1 chunks its peers pushed, in rank order, into the
/// output.
///
/// # Safety
/// See [`push_reduce_scatter`]; every peer's chunk of tile `t` arrived.
#[inline(always)]
unsafe fn rs_reduce<T: Element, const W: usize, const OP: u32>(
    p: &AllReduceParams,
    s: &ShardPlan,
    t: u32,
) {
    let me = p.rank;
    let (start, end) = s.tile(t);
    let shift = start as u64 * index::VEC_BYTES as u64;
    // `rs[r]`, shifted so that `.add(i)` is vector `i - start` of rank r's
    // slot here; constant indices only (the loops unroll over W).
    let mut rs = [0u64; W];
    let mut r = 0;
    while r < W {
        if r as u32 != me {
            rs[r] = pick(&p.bufs, me) + s.c.slot_off::<W>(RING, push_peer_index(r as u32, me), t)
                - shift;
        }
        r += 1;
    }
    let mine_shard = s.shard(p.input, me) as *const T;
    // Vector i of every rank's chunk: this rank's input and the slots.
    let load = |i: u32| {
        let iu = i as usize;
        let mut raw = [[0u32; 4]; W];
        // SAFETY: vector i lies in this rank's input shard, and vector
        // `i - start` in every slot of the tile.
        unsafe {
            let mine = load_vec(mine_shard, iu, s.c.elems, s.c.aligned);
            let mut r = 0;
            while r < W {
                raw[r] = if r as u32 == me {
                    mine
                } else {
                    ptx::ld_global_v4_u32((rs[r] as *const [u32; 4]).add(iu))
                };
                r += 1;
            }
        }
        raw
    };
    let store = |i: u32, raw: [[u32; 4]; W]| {
        let v = T::narrow(finish_op::<OP>(combine_in_order::<T, W, OP>(&raw), W));
        // SAFETY: vector i lies in the output.
        unsafe { store_vec(p.output as *mut T, i as usize, s.c.elems, s.c.aligned, v) };
    };
    let step = s.c.threads;
    let mut i = start + s.c.tid;
    if W <= PAIRED_MAX_WORLD {
        while i + step < end {
            let (a, b) = (load(i), load(i + step));
            store(i, a);
            store(i + step, b);
            i += 2 * step;
        }
    }
    // One vector a round, written out rather than through `load` and
    // `store`: through them `push_rs_f32_w8` took a 16-byte stack frame
    // and 32 bytes of spills on sm_80 (`cargo xtask check-ptx`).
    while i < end {
        let iu = i as usize;
        // SAFETY: vector i lies in this rank's input shard and output, and
        // vector `i - start` in every slot of the tile.
        unsafe {
            let mine = load_vec(mine_shard, iu, s.c.elems, s.c.aligned);
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
            store_vec(p.output as *mut T, iu, s.c.elems, s.c.aligned, v);
        }
        i += step;
    }
}

/// Worlds up to this reduce two vectors a thread per round, all 2 W loads
/// in flight before the first add: at 2 ranks the reduce is half of a
/// tile's work, and with one vector's W loads per round the reduce-scatter
/// moved 289 GB/s at 1 GiB on 2 H100 against the all-gather's 353, whose
/// copies keep four in flight. Measured on 2 H200 (two turns): 2.4-2.9 %
/// faster from 64 MiB to 1
/// GiB (289 -> 296 GB/s at 1 GiB), 16 MiB unchanged; so the load count
/// was not what held it. Larger worlds keep one vector: at 3 ranks the
/// pair took ptxas past 128 registers (sm_90), and 4 was not measured.
const PAIRED_MAX_WORLD: usize = 2;

/// The all-gather's push of tile `t`: this rank's input chunk into its
/// all-gather slot on every peer, and into its own shard of the output.
///
/// # Safety
/// See [`push_all_gather`]; the slots must be free.
#[inline(always)]
unsafe fn ag_push<T: Element, const W: usize>(p: &AllReduceParams, s: &ShardPlan, t: u32) {
    let me = p.rank;
    let (start, end) = s.tile(t);
    let src = p.input as *const [u32; 4];
    let mut k = 1;
    while k < W as u32 {
        let peer = (me + k) % W as u32;
        let dst = ((pick(&p.bufs, peer) + s.c.slot_off::<W>(RING, push_peer_index(me, peer), t))
            as *mut [u32; 4])
            .wrapping_sub(start as usize);
        // SAFETY: `[start, end)` lies in the input and spans one slot.
        unsafe { copy::<T, true, false>(&s.c, src, dst, start, end) };
        k += 1;
    }
    let own = s.shard(p.output, me) as *mut [u32; 4];
    // SAFETY: `[start, end)` lies in the input and in the output's shard.
    unsafe { copy::<T, true, true>(&s.c, src, own, start, end) };
}

/// The all-gather's copy-out of tile `t`: every peer's chunk, from its
/// slot in this rank's all-gather ring into that peer's shard of the
/// output.
///
/// # Safety
/// See [`push_all_gather`]; every peer's chunk of tile `t` is visible.
#[inline(always)]
unsafe fn ag_copy_out<T: Element, const W: usize>(p: &AllReduceParams, s: &ShardPlan, t: u32) {
    let me = p.rank;
    let (start, end) = s.tile(t);
    let mut k = 1;
    while k < W as u32 {
        let owner = (me + k) % W as u32;
        let src = ((pick(&p.bufs, me) + s.c.slot_off::<W>(RING, push_peer_index(owner, me), t))
            as *const [u32; 4])
            .wrapping_sub(start as usize);
        let dst = s.shard(p.output, owner) as *mut [u32; 4];
        // SAFETY: as in `ag_push`, with the roles of slot and buffer swapped.
        unsafe { copy::<T, false, true>(&s.c, src, dst, start, end) };
        k += 1;
    }
}

/// `v` clamped to `0..=n`.
#[inline(always)]
fn clamp(v: i32, n: u32) -> u32 {
    if v < 0 {
        0
    } else if v as u32 > n {
        n
    } else {
        v as u32
    }
}

/// Reduce-scatter through the push rings: NOTE [push reduce-scatter and
/// all-gather]. `p.input` holds W shards of `p.elems` elements, each
/// `p.shard_stride_elems` (or `p.elems` when 0) after the last; `p.output`
/// one.
///
/// # Safety
/// As for `push::push`, with a message of W shards: mapped buffers and
/// pads of W ranks, `ceil(p.elems / LANES)` vectors at most
/// `index::PUSH_MAX_VECS / W`, the rings of the grid inside every rank's
/// buffer, the same grid, chunk and slots on every rank.
#[inline(always)]
pub(crate) unsafe fn push_reduce_scatter<T: Element, const W: usize, const OP: u32>(
    p: &AllReduceParams,
) {
    let own_pad = pick(&p.pads, p.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let epoch = unsafe { call_epoch(own_pad) };
    let s = ShardPlan::new::<T>(p, p.input, p.output);
    let n = s.tiles();
    let d = push_lookahead(s.c.slots, p.push_lookahead);
    let slots = s.c.slots as i32;
    let peers = Peers::of(p, FORM_REDUCE_SCATTER);
    let to = peers.to;
    let done_word = own_pad.wrapping_add(PUSH_TILES_DONE + s.c.block as usize);
    // SAFETY: forwarded from the caller; the order of steps, waits and
    // signals is the one NOTE [push reduce-scatter and all-gather] argues.
    unsafe {
        block_barrier::<W>(&peers, SLOT_START, epoch);
        let base = ptx::ld_relaxed_sys_u32(done_word);
        if n > 0 {
            let first = if d < n { d } else { n };
            let mut u = 0;
            while u < first {
                rs_push::<T, W>(p, &s, u);
                u += 1;
            }
            signal::<W>(p, s.c.block, base, first, 0, 0);
            let mut t = 0;
            while t < n {
                let (ti, di) = (t as i32, d as i32);
                let needs = Needs {
                    rs_ready: ti + 1,
                    // The owner reduced tile `t + D - S`: my slot of tile
                    // `t + D` on it is free.
                    ag_ready: if t + d < n { ti + di + 1 - slots } else { 0 },
                    ag_free: 0,
                };
                wait::<W>(p, own_pad, s.c.block, base, needs, to);
                rs_reduce::<T, W, OP>(p, &s, t);
                if t + d < n {
                    rs_push::<T, W>(p, &s, t + d);
                }
                // `AG_FREE` follows `AG_READY`: nobody waits on it here,
                // but it must end the call at `base + n` (the next call's
                // base).
                signal::<W>(p, s.c.block, base, clamp(ti + di + 1, n), t + 1, t + 1);
                t += 1;
            }
        }
        if s.c.tid == 0 {
            // Read by this block's next push call only, after this kernel
            // ended (stream order).
            ptx::st_relaxed_sys_u32(done_word, base.wrapping_add(n));
        }
        finish_call(own_pad, epoch);
    }
}

/// All-gather through the push rings: NOTE [push reduce-scatter and
/// all-gather]. `p.input` holds `p.elems` elements, `p.output` W shards of
/// them, each `p.shard_stride_elems` (or `p.elems` when 0) after the last.
///
/// # Safety
/// As for [`push_reduce_scatter`], with the sides swapped.
#[inline(always)]
pub(crate) unsafe fn push_all_gather<T: Element, const W: usize, const OP: u32>(
    p: &AllReduceParams,
) {
    let own_pad = pick(&p.pads, p.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let epoch = unsafe { call_epoch(own_pad) };
    let s = ShardPlan::new::<T>(p, p.output, p.input);
    let n = s.tiles();
    let d = push_lookahead(s.c.slots, p.push_lookahead);
    let slots = s.c.slots as i32;
    let peers = Peers::of(p, FORM_ALL_GATHER);
    let to = peers.to;
    let done_word = own_pad.wrapping_add(PUSH_TILES_DONE + s.c.block as usize);
    // SAFETY: as in `push_reduce_scatter`.
    unsafe {
        block_barrier::<W>(&peers, SLOT_START, epoch);
        let base = ptx::ld_relaxed_sys_u32(done_word);
        let mut t = 0;
        while n > 0 && t < n + d {
            let (ti, di) = (t as i32, d as i32);
            let needs = Needs {
                rs_ready: 0,
                // Every peer pushed tile `t - D` here.
                ag_ready: if t >= d { ti - di + 1 } else { 0 },
                // Every peer copied tile `t - S` out: my slot of tile `t`
                // on it is free.
                ag_free: if t < n { ti + 1 - slots } else { 0 },
            };
            wait::<W>(p, own_pad, s.c.block, base, needs, to);
            if t < n {
                ag_push::<T, W>(p, &s, t);
            }
            if t >= d {
                ag_copy_out::<T, W>(p, &s, t - d);
            }
            // `RS_READY` follows `AG_READY`: nobody waits on it here, but it
            // must end the call at `base + n` (the next call's base).
            signal::<W>(
                p,
                s.c.block,
                base,
                clamp(ti + 1, n),
                clamp(ti + 1, n),
                clamp(ti - di + 1, n),
            );
            t += 1;
        }
        if s.c.tid == 0 {
            // As in `push_reduce_scatter`.
            ptx::st_relaxed_sys_u32(done_word, base.wrapping_add(n));
        }
        finish_call(own_pad, epoch);
    }
}
