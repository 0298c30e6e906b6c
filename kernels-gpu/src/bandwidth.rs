//! The bandwidth form of the all-reduce, for large messages: a
//! reduce-scatter by stores into the owners' symmetric buffers, then an
//! all-gather by loads from them, in rounds that stream the message
//! through the buffers (issue 20).
//!
//! NOTE [bandwidth all-reduce]: the two-shot (`all_reduce.rs`) copies the
//! whole input into its own buffer, meets every peer at a barrier, reduces
//! its shard by loading it from every peer, meets them again and gathers.
//! The copy-in is a pass over the input that crosses no link, and each
//! barrier stalls every block for a round trip between GPUs with nothing
//! else in flight. This form keeps what is good there (one kernel, the
//! halves and call count of NOTE [double buffering], per-block flags of
//! NOTE [block-local barriers], rank-order f32 accumulation) and changes
//! three things:
//!
//! - **Push, no copy-in.** In round `j`, rank `s` loads its input's part of
//!   owner `o`'s shard and stores it (16-byte stores, fire and forget over
//!   NVLink) straight into slot `s` of `o`'s buffer, then raises its
//!   `SLOT_START` flag on `o` (release, system scope; one writer per flag).
//!   Its own shard never leaves the input.
//! - **The owner reduces locally.** Once every rank's `SLOT_START` flag
//!   reached the round, `o` reduces its shard from its own input and the
//!   W - 1 slots (all in its own memory), in rank order in f32, so every
//!   rank gets the very same bits, writes the result to its output and to
//!   slot `o` of its buffer, and raises `SLOT_MID`. Peers then **pull**
//!   slot `o` (16-byte loads over NVLink) straight into their outputs.
//! - **Rounds pipeline.** A round takes at most half the buffer (the half
//!   of its epoch): `grid x W` slots of `slot_vecs` vectors
//!   (`math::bandwidth_slot_vecs`), block `b`'s W slots side by side, so
//!   the message needs `ceil(bytes / half)` rounds and no workspace grows
//!   with it (the buffer is `INTRANODE_SYMM_MEM_BUFFER_BYTES`). Round `j`
//!   is epoch `base + j` and uses half `(base + j) & 1`, so a call of R
//!   rounds takes R epochs of the call count, as a two-shot call of R
//!   chunks does. A block runs, per round:
//!
//!   ```text
//!   await START(j) -> reduce(j) -> arrive MID(j)
//!     -> push(j + 1) -> arrive START(j + 1) -> await MID(j) -> pull(j)
//!   ```
//!
//!   with `push(0); arrive START(0)` before the first. Each wait comes
//!   after a whole phase of link traffic that followed the matching
//!   arrival (`push(j + 1)` covers the peers' `MID(j)` flags on their way,
//!   `pull(j)` their `START(j + 1)` flags), where the two-shot waits right
//!   after arriving. What is still serial per block: the release of
//!   `START(j + 1)` waits for this block's pushes to land before the block
//!   meets for `MID(j)`, and `reduce(j)` moves no link bytes. The other
//!   blocks are at other points of their rounds, which fills some of that;
//!   how much is unmeasured.
//!
//! Why it is safe (arrive / await are the halves of `sync::block_barrier`,
//! per block). While a block awaits epoch `e` at a slot, a peer's flag
//! there may be one epoch ahead, which `layout::epoch_reached` accepts,
//! never two: the peer's arrival at `e + 2` follows its wait for this
//! block's arrival at `e + 1` at the same slot, which follows this wait.
//! The release order of a flag covers the earlier rounds' data too.
//!
//! - `push(j + 1)` writes slot `s` of `o`'s half `(base + j + 1) & 1`.
//!   Inside the call, only `o` read that slot, in `reduce(j - 1)`, before
//!   it arrived at `MID(j - 1)`, which this block awaited in round `j - 1`.
//!   For `j = 0` the half was last used by the epoch before this call:
//!   `push(1)` comes after `await START(0)` from every rank, and a block
//!   of rank `q` running this call means `q`'s stream finished every
//!   earlier kernel. `push(0)` goes to half `base & 1`, whose last user,
//!   epoch `base - 2`, every rank finished (NOTE [double buffering]).
//! - `reduce(j)` reads the slots after `await START(j)` and writes slot `o`
//!   of half `(base + j) & 1`, which peers last pulled in round `j - 2`:
//!   each did so before arriving at `START(j)` (its `pull(j - 2)` closes
//!   its round `j - 2`; the arrival is in its round `j - 1`). For `j < 2`
//!   the last users were the epochs before the call, finished by every
//!   rank whose arrival shows it runs this call.
//! - `pull(j)` reads slot `o` after `await MID(j)`; `o` rewrites it in
//!   `reduce(j + 2)`, after this rank's `START(j + 2)`, which comes after
//!   `pull(j)`.
//! - A round ends only once every rank arrived at its `MID`, so every rank
//!   started each epoch of the call before any rank finishes it, and
//!   after the last round every peer's pulls of the round before are done
//!   (they precede its last `MID`): calls of every kind interleave with
//!   this one as NOTE [double buffering] requires.
//! - In place (`input == output`) is safe: output elements of round `j`
//!   are written only in `reduce(j)` (this rank's shard, by the thread that
//!   just loaded the same vector of the input) and `pull(j)` (the other
//!   shards, which `push(j)` already read); `push(j + 1)` reads round
//!   `j + 1`'s input, which nothing of round `j` writes.
//!
//! Every rank must launch the same grid (flags are per block), which the
//! host does: its block count depends only on the world and the buffer.
//! Not done here, and worth measuring: TMA bulk copies (`cp.async.bulk`)
//! for the push and the pull, the copy engines for the all-gather, a
//! pull-only reduce-scatter (the two-shot's, without its copy-in), warp
//! roles so that one round's pull overlaps the next round's push inside a
//! block, and more than two rounds in flight.

use crate::all_reduce::{combine_in_order, finish_op, report_to};
use crate::elem::{Element, load_vec, store_vec};
use crate::layout::{AllReduceParams, FORM_BANDWIDTH, SLOT_MID, SLOT_START};
use crate::math::{
    self, bandwidth_rounds, bandwidth_shard, bandwidth_slot_offset, bandwidth_slot_vecs,
};
use crate::ptx;
use crate::sync::{block_arrive, block_await, call_epoch, finish_call, pick};

/// One call's geometry as this block sees it. Everything but the thread
/// fields is the same on every rank: it follows from the message length,
/// the half, the grid and W alone. Vector indices are u32
/// (`math::BANDWIDTH_MAX_VECS`): with 64-bit ones, ptxas wanted 168
/// registers a thread and fit 128 only by luck (one kernel took 140);
/// with u32 ones it gives 72 to 120.
struct Plan {
    elems: usize,
    vecs: u32,
    slot_vecs: u32,
    blocks: u32,
    block: u32,
    aligned: bool,
    /// Vectors below this are whole and 16-byte aligned in the caller's
    /// buffers (0 when they are not aligned): the loops with four
    /// accesses in flight take those, plain `ld`/`st` without the
    /// element-wise path of `load_vec` (four of which in flight cost
    /// registers for nothing); the rest go one by one through `load_vec`
    /// and `store_vec`.
    whole: u32,
    /// `threadIdx.x` and `blockDim.x`: a block walks its slots alone.
    tid: u32,
    threads: u32,
}

impl Plan {
    /// The message vectors that `owner` reduces for this block in `round`.
    #[inline(always)]
    fn shard<const W: usize>(&self, round: u32, owner: u32) -> (u32, u32) {
        bandwidth_shard(
            self.vecs,
            self.blocks,
            W as u32,
            self.slot_vecs,
            round,
            self.block,
            owner,
        )
    }

    /// Byte offset in a rank's buffer of this block's slot `s` in the half
    /// of `epoch`.
    #[inline(always)]
    fn slot_off<const W: usize>(&self, half_bytes: u64, epoch: u32, s: u32) -> u64 {
        bandwidth_slot_offset(half_bytes, epoch, self.block, W as u32, s, self.slot_vecs)
    }
}

/// `push(round)`: this rank's part of every other owner's shard, from the
/// input into this rank's slot on the owner. Owners in the order `me + 1,
/// me + 2, ...`, so that at any moment the ranks' stores spread over all
/// destinations (as the Lamport forms' `kth_destination`). Four loads in
/// flight before their stores (a store waits for its load), as in the
/// two-shot's gather.
///
/// # Safety
/// See [`bandwidth`]; the owners' slots of `epoch`'s half must be free
/// (NOTE [bandwidth all-reduce]).
#[inline(always)]
unsafe fn push<T: Element, const W: usize>(p: &AllReduceParams, c: &Plan, round: u32, epoch: u32) {
    let me = p.rank;
    let s = c.threads;
    let mut k = 1;
    while k < W as u32 {
        let owner = (me + k) % W as u32;
        let (start, end) = c.shard::<W>(round, owner);
        // `dst.add(i)` is vector `i - start` of the slot: one index for
        // both sides of the copy.
        let dst = ((pick(&p.bufs, owner) + c.slot_off::<W>(p.half_bytes, epoch, me))
            as *mut [u32; 4])
            .wrapping_sub(start as usize);
        let src = p.input as *const [u32; 4];
        let fast_end = if end < c.whole { end } else { c.whole };
        let mut i = start + c.tid;
        // SAFETY: vectors `[start, end)` lie in the input (they are below
        // `vecs`; those below `whole` are whole and aligned) and in the
        // slot (`end - start <= slot_vecs`).
        unsafe {
            while i + 3 * s < fast_end {
                let (i0, i1, i2, i3) = (
                    i as usize,
                    (i + s) as usize,
                    (i + 2 * s) as usize,
                    (i + 3 * s) as usize,
                );
                let a = ptx::ld_global_v4_u32(src.add(i0));
                let b = ptx::ld_global_v4_u32(src.add(i1));
                let d = ptx::ld_global_v4_u32(src.add(i2));
                let e = ptx::ld_global_v4_u32(src.add(i3));
                ptx::st_global_v4_u32(dst.add(i0), a);
                ptx::st_global_v4_u32(dst.add(i1), b);
                ptx::st_global_v4_u32(dst.add(i2), d);
                ptx::st_global_v4_u32(dst.add(i3), e);
                i += 4 * s;
            }
            while i < end {
                let v = load_vec(p.input as *const T, i as usize, c.elems, c.aligned);
                ptx::st_global_v4_u32(dst.add(i as usize), v);
                i += s;
            }
        }
        k += 1;
    }
}

/// `reduce(round)`: this rank's shard, from its own input and the W - 1
/// slots its peers pushed, in rank order (the same order, hence the same
/// bits, as the two-shot's); the result goes to the output and to this
/// rank's own slot, where the peers pull it.
///
/// # Safety
/// See [`bandwidth`]; every peer's push of `round` must have arrived.
#[inline(always)]
unsafe fn reduce<T: Element, const W: usize, const OP: u32>(
    p: &AllReduceParams,
    c: &Plan,
    round: u32,
    epoch: u32,
) {
    let me = p.rank;
    let (start, end) = c.shard::<W>(round, me);
    let slot_vecs = c.slot_vecs as usize;
    // Slot `r`'s vector `i - start` is `slots.add(r * slot_vecs + i)`.
    let slots = ((pick(&p.bufs, me) + c.slot_off::<W>(p.half_bytes, epoch, 0)) as *mut [u32; 4])
        .wrapping_sub(start as usize);
    let mut i = start + c.tid;
    while i < end {
        let iu = i as usize;
        // SAFETY: vector i lies in the input and output, and vector
        // `i - start` in every slot of this block.
        unsafe {
            let mine = load_vec(p.input as *const T, iu, c.elems, c.aligned);
            // All W loads in flight before combining, as in the two-shot.
            let mut raw = [[0u32; 4]; W];
            let mut r = 0;
            while r < W {
                raw[r] = if r as u32 == me {
                    mine
                } else {
                    ptx::ld_global_v4_u32(slots.add(r * slot_vecs + iu))
                };
                r += 1;
            }
            let v = T::narrow(finish_op::<OP>(combine_in_order::<T, W, OP>(&raw), W));
            ptx::st_global_v4_u32(slots.add(me as usize * slot_vecs + iu), v);
            store_vec(p.output as *mut T, iu, c.elems, c.aligned, v);
        }
        i += c.threads;
    }
}

/// `pull(round)`: every other owner's reduced shard, from its slot into
/// the output; owners in the order of [`push`], four loads in flight.
///
/// # Safety
/// See [`bandwidth`]; every owner's reduction of `round` must be visible.
#[inline(always)]
unsafe fn pull<T: Element, const W: usize>(p: &AllReduceParams, c: &Plan, round: u32, epoch: u32) {
    let me = p.rank;
    let out = p.output as *mut [u32; 4];
    let s = c.threads;
    let mut k = 1;
    while k < W as u32 {
        let owner = (me + k) % W as u32;
        let (start, end) = c.shard::<W>(round, owner);
        let src = ((pick(&p.bufs, owner) + c.slot_off::<W>(p.half_bytes, epoch, owner))
            as *const [u32; 4])
            .wrapping_sub(start as usize);
        let fast_end = if end < c.whole { end } else { c.whole };
        let mut i = start + c.tid;
        // SAFETY: as in `push`, with the roles of input and slot swapped.
        unsafe {
            while i + 3 * s < fast_end {
                let (i0, i1, i2, i3) = (
                    i as usize,
                    (i + s) as usize,
                    (i + 2 * s) as usize,
                    (i + 3 * s) as usize,
                );
                let a = ptx::ld_global_v4_u32(src.add(i0));
                let b = ptx::ld_global_v4_u32(src.add(i1));
                let d = ptx::ld_global_v4_u32(src.add(i2));
                let e = ptx::ld_global_v4_u32(src.add(i3));
                ptx::st_global_v4_u32(out.add(i0), a);
                ptx::st_global_v4_u32(out.add(i1), b);
                ptx::st_global_v4_u32(out.add(i2), d);
                ptx::st_global_v4_u32(out.add(i3), e);
                i += 4 * s;
            }
            while i < end {
                let v = ptx::ld_global_v4_u32(src.add(i as usize));
                store_vec(p.output as *mut T, i as usize, c.elems, c.aligned, v);
                i += s;
            }
        }
        k += 1;
    }
}

/// The whole call: NOTE [bandwidth all-reduce]. Its kernels, one per
/// element type and world size, come from the list in `entries.rs`
/// (`bandwidth_<elem>_w<world>`), instantiated in `all_reduce.rs`.
///
/// # Safety
/// `p` must describe mapped buffers and pads of W ranks (`rank < W`),
/// caller buffers of `p.elems > 0` elements, and `p.half_bytes` a multiple
/// of 16 inside every buffer's halves that holds at least one vector per
/// slot (`math::bandwidth_slot_vecs` is non-zero); every rank launches the
/// same grid, of at most `layout::MAX_BLOCKS` blocks.
#[inline(always)]
pub(crate) unsafe fn bandwidth<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    let own_pad = pick(&p.pads, p.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let base = unsafe { call_epoch(own_pad) };
    let elems = p.elems as usize;
    // At most BANDWIDTH_MAX_VECS (the host's promise), so u32 holds it.
    let vecs = math::div_ceil(elems, T::LANES) as u32;
    let blocks = ptx::grid_dim_x();
    let slot_vecs = bandwidth_slot_vecs(p.half_bytes, blocks, W as u32, vecs);
    // At least one round, so that the flags and the call count move the
    // same way on every rank whatever the host passed.
    let rounds = bandwidth_rounds(vecs, blocks, W as u32, slot_vecs).max(1);
    let aligned = math::all_vec_aligned(&[p.input as usize, p.output as usize]);
    let c = Plan {
        elems,
        vecs,
        slot_vecs,
        blocks,
        block: ptx::block_idx_x(),
        aligned,
        whole: if aligned {
            (elems / T::LANES) as u32
        } else {
            0
        },
        tid: ptx::thread_idx_x(),
        threads: ptx::block_dim_x(),
    };
    let to = report_to(p, FORM_BANDWIDTH);
    // SAFETY: forwarded from the caller; the order of phases and flags is
    // the one NOTE [bandwidth all-reduce] argues safe.
    unsafe {
        push::<T, W>(p, &c, 0, base);
        block_arrive::<W>(&p.pads, p.rank, SLOT_START, base);
        let mut j = 0;
        while j < rounds {
            let epoch = base.wrapping_add(j);
            block_await::<W>(&p.pads, p.rank, SLOT_START, epoch, p.timeout_ns, to);
            reduce::<T, W, OP>(p, &c, j, epoch);
            block_arrive::<W>(&p.pads, p.rank, SLOT_MID, epoch);
            if j + 1 < rounds {
                let next = epoch.wrapping_add(1);
                push::<T, W>(p, &c, j + 1, next);
                block_arrive::<W>(&p.pads, p.rank, SLOT_START, next);
            }
            block_await::<W>(&p.pads, p.rank, SLOT_MID, epoch, p.timeout_ns, to);
            pull::<T, W>(p, &c, j, epoch);
            j += 1;
        }
        finish_call(own_pad, base.wrapping_add(rounds - 1));
    }
}
