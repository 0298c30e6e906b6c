//! All-reduce kernels over symmetric memory: one-shot, two-shot and
//! hybrid cube mesh (HCM).
//!
//! Every kernel is monomorphized over the element type, the world size `W`
//! (so loops over peers unroll and the peer-pointer array stays in
//! registers) and the op (a `match` outside the hot loop picks it).
//! Accumulation is in f32, in the same order on every rank (rank order
//! 0..W; HCM: each group in rank order, then the lower group's partial
//! first), so results are bitwise identical across ranks. Between
//! algorithms they may differ in the last bit (HCM's order) and in the
//! sign of a zero result (the Lamport forms turn -0.0 into +0.0).
//!
//! NOTE [double buffering]: each symmetric buffer is used as two halves;
//! call `e` uses half `e & 1`, where `e` is the device-side call count
//! (`sync::call_epoch`), never a host counter, so graphs can replay. A rank
//! finishes call `e + 1` only once every peer has started it, hence
//! finished call `e` and its reads: one-shot and two-shot by a barrier of
//! call `e + 1` with every peer, HCM through the relay (NOTE [hcm groups]),
//! the Lamport forms by waiting for every peer's data (NOTE [lamport]),
//! the push form by the barrier it starts with (NOTE [push all-reduce] in
//! `push.rs`; its rings take the whole buffer, not a half). So
//! a rank starting call `e + 2` (which reuses half `e & 1`) overwrites
//! nothing a peer still reads, and no barrier is needed at the end of a
//! call: one-shot has one barrier, two-shot two.
//!
//! NOTE [block-local barriers]: barriers are per block, so block `b` may
//! only read what block `b` of the peer wrote before the barrier. Copy-in,
//! reduction and gather therefore walk the same index sets: vector
//! `start + b * blockDim + t + k * gridDim * blockDim` of each range.
//!
//! NOTE [hcm groups]: HCM splits the W ranks into two groups of G = W / 2
//! whose members are linked to each other, and pairs every rank with a
//! relay in the other group (on a DGX-1: the quads and the one cross-quad
//! link of each GPU). A rank sums its group's inputs (one-shot within the
//! group, in increasing rank order, kept in f32), writes that partial sum
//! after its input in its half, then, after a barrier with its relay only,
//! adds the relay's partial sum, the lower group's first. Every member of
//! a group computes the same partial, so results are bitwise identical on
//! all ranks. Data moves only over group and relay links.
//!
//! HCM has no barrier among all ranks, yet NOTE [double buffering] still
//! holds: passing the relay barrier of call `e` means the relay passed its
//! group barrier of call `e`, so every member of both groups (all W ranks)
//! started call `e` and had finished call `e - 1`. That is the guarantee a
//! full barrier gives, so HCM calls interleave freely with the others.
//!
//! NOTE [symmetric input]: when the caller's input lies in a symmetric
//! buffer it allocated (`intranode::SymmetricBuffer`, every rank's copy
//! mapped here; the host passes their addresses at the input's offset in
//! `AllReduceParams::in_bufs`), the one-shot and the two-shot skip the
//! copy-in and reduce straight from the peers' inputs. Two orderings make
//! that sound:
//! - *the input is ready before the start barrier says so*: the producer
//!   (a GEMM, a copy) ran earlier on the same stream, so its writes are
//!   performed before this kernel starts (`griddepcontrol.wait` waits for
//!   the previous grid's completion and memory flush); the barrier's
//!   release store is then ordered after them, and a peer that acquires
//!   the flag reads the finished input.
//! - *nobody still reads it when the caller writes it again*: the caller
//!   may overwrite its buffer as soon as this kernel ends (the next GEMM),
//!   so no peer may read it after that. Two-shot: a peer reads our input
//!   only in its reduce-scatter, before its middle barrier, which our
//!   block passes only after the peer's block arrived: by the end of our
//!   kernel every read of our input is done. One-shot: the peers read all
//!   of it during the whole reduction, so a second barrier (`SLOT_END`)
//!   ends the call. Barriers are per block (NOTE [block-local barriers]),
//!   and each block reads and writes only its own vectors, so each block's
//!   end barrier covers exactly the reads of its vectors.
//!
//! In place, the two-shot writes its reduced shard where only it reads
//! (its own shard of its own input) and the gathered shards after the
//! middle barrier, when their owners have read them; the one-shot keeps
//! its result in its own half until the end barrier, then copies it out.
//! HCM keeps its copy-in (its group and relay barriers would need a third
//! for the same guarantee); the Lamport forms have no copy-in to skip:
//! their push is the transfer itself. Every rank must pass the same kind
//! of input (symmetric or not) at the same offset: the host checks that
//! the input is 16-byte aligned and lies in one allocation; the rest is
//! the caller's contract (`intranode::symmetric` docs).

use crate::index;
use crate::index::hcm_chunk_elems;
use crate::layout::{
    AllReduceParams, FORM_HCM, FORM_ONE_SHOT, FORM_TWO_SHOT, SLOT_END, SLOT_MID, SLOT_START,
};
use crate::packed::{Element, Lanes, load_vec, store_vec};
use crate::prims::grid::{self, Walk, copy4_all};
use crate::prims::reduce::{combine, combine_in_order, finish_op, load_each, reduce_vec};
use crate::ptx;
use crate::sync::{Peers, block_barrier, call_epoch, finish_call, group_barrier, nth_rank, pick};

/// Whether the caller's input is a symmetric buffer every peer mapped
/// (NOTE [symmetric input]).
#[inline(always)]
fn symmetric_input(p: &AllReduceParams) -> bool {
    p.in_bufs[0] != 0
}

/// `bases[r] + off` for every rank `r < W`: what a chunk's reduction
/// reads, the peers' copies of a symmetric input (NOTE [symmetric input])
/// or every rank's half. Callers pick the array in a branch around their
/// whole loop: one loop that picked per rank at run time took the 2-rank
/// two-shot from 90 to 126 registers (ptxas, sm_90).
#[inline(always)]
fn offsets<const W: usize>(bases: &[u64; crate::layout::MAX_RANKS], off: u64) -> [u64; W] {
    let mut srcs = [0u64; W];
    let mut r = 0;
    while r < W {
        srcs[r] = pick(bases, r as u32) + off;
        r += 1;
    }
    srcs
}

/// One chunk of a call: at most half a symmetric buffer of elements.
struct Chunk {
    epoch: u32,
    half_off: u64,
    input: u64,
    output: u64,
    elems: usize,
    vecs: usize,
    /// Vectors the shard geometry is computed from: the same for every
    /// chunk of a launch (the first chunk's count), so that a vector index
    /// maps to the same block in every chunk, the last, shorter one too
    /// (NOTE [block-local barriers]).
    basis_vecs: usize,
    aligned: bool,
    tid: usize,
    stride: usize,
}

impl Chunk {
    /// Shard `r` of this chunk: `r`'s share of `basis_vecs`, cut at `vecs`.
    #[inline(always)]
    fn shard<const W: usize>(&self, r: usize) -> (usize, usize) {
        let (start, end) = index::even_split(self.basis_vecs, W, r);
        let cut = |x: usize| if x < self.vecs { x } else { self.vecs };
        (cut(start), cut(end))
    }
}

/// Copies the caller's vectors `[start, end)` of the chunk into this
/// rank's half.
///
/// # Safety
/// The chunk's input holds `c.elems` elements; the half holds `c.vecs`
/// vectors.
#[inline(always)]
unsafe fn copy_in<T: Element>(p: &AllReduceParams, c: &Chunk, start: usize, end: usize) {
    let own = (pick(&p.bufs, p.rank) + c.half_off) as *mut [u32; 4];
    let mut i = start + c.tid;
    while i < end {
        // SAFETY: i < vecs; see the function's contract.
        unsafe {
            ptx::st_global_v4_u32(
                own.add(i),
                load_vec(c.input as *const T, i, c.elems, c.aligned),
            )
        };
        i += c.stride;
    }
}

/// Every rank reads every peer's whole input and reduces it: one barrier,
/// W times the bytes over NVLink; the latency path for small messages.
/// On a symmetric input (NOTE [symmetric input]) no copy-in and a second
/// barrier at the end.
///
/// # Safety
/// See [`run_chunks`].
#[inline(always)]
unsafe fn one_shot_chunk<T: Element, const W: usize, const OP: u32>(
    p: &AllReduceParams,
    c: &Chunk,
) {
    let sym = symmetric_input(p);
    let peers = Peers::of(p, FORM_ONE_SHOT);
    // SAFETY: forwarded from the caller throughout.
    unsafe {
        if !sym {
            copy_in::<T>(p, c, 0, c.vecs);
        }
        block_barrier::<W>(&peers, SLOT_START, c.epoch);
        // In place on a symmetric input, the peers still read our input
        // (= output) until the end barrier: the result waits in our own
        // half, which no peer reads on this path.
        let staged = sym && p.output == p.input;
        let own = (pick(&p.bufs, p.rank) + c.half_off) as *mut [u32; 4];
        let reduce_all = |srcs: &[u64; W]| {
            let mut i = c.tid;
            while i < c.vecs {
                let v = reduce_vec::<T, W, OP>(srcs, i);
                if staged {
                    ptx::st_global_v4_u32(own.add(i), v);
                } else {
                    store_vec(c.output as *mut T, i, c.elems, c.aligned, v);
                }
                i += c.stride;
            }
        };
        if sym {
            reduce_all(&offsets::<W>(&p.in_bufs, c.input - p.input));
        } else {
            reduce_all(&offsets::<W>(&p.bufs, c.half_off));
        }
        if sym {
            block_barrier::<W>(&peers, SLOT_END, c.epoch);
        }
        if staged {
            // Each thread reads back only the vectors it staged itself.
            let mut i = c.tid;
            while i < c.vecs {
                store_vec(
                    c.output as *mut T,
                    i,
                    c.elems,
                    c.aligned,
                    ptx::ld_global_v4_u32(own.add(i)),
                );
                i += c.stride;
            }
        }
    }
}

/// Reduce-scatter then all-gather, both by peer loads: each rank reduces
/// one W-th of the vectors and reads the other shards from their owners;
/// about 2 bytes over NVLink per byte of input, for medium and large
/// messages.
///
/// # Safety
/// See [`run_chunks`].
#[inline(always)]
unsafe fn two_shot_chunk<T: Element, const W: usize, const OP: u32>(
    p: &AllReduceParams,
    c: &Chunk,
) {
    let peers = Peers::of(p, FORM_TWO_SHOT);
    // SAFETY: forwarded from the caller throughout.
    unsafe {
        if !symmetric_input(p) {
            let mut r = 0;
            while r < W {
                let (start, end) = c.shard::<W>(r);
                copy_in::<T>(p, c, start, end);
                r += 1;
            }
        }
        block_barrier::<W>(&peers, SLOT_START, c.epoch);

        let own = (pick(&p.bufs, p.rank) + c.half_off) as *mut [u32; 4];
        let (start, end) = c.shard::<W>(p.rank as usize);
        let reduce_shard = |srcs: &[u64; W]| {
            let mut i = start + c.tid;
            while i < end {
                let v = reduce_vec::<T, W, OP>(srcs, i);
                ptx::st_global_v4_u32(own.add(i), v);
                store_vec(c.output as *mut T, i, c.elems, c.aligned, v);
                i += c.stride;
            }
        };
        if symmetric_input(p) {
            reduce_shard(&offsets::<W>(&p.in_bufs, c.input - p.input));
        } else {
            reduce_shard(&offsets::<W>(&p.bufs, c.half_off));
        }
        block_barrier::<W>(&peers, SLOT_MID, c.epoch);

        // Gather, shard by shard, four loads in flight (`grid::copy4`).
        let mut r = 0;
        while r < W {
            if r != p.rank as usize {
                let (start, end) = c.shard::<W>(r);
                let src = (pick(&p.bufs, r as u32) + c.half_off) as *const [u32; 4];
                let out = c.output as *mut T;
                let walk = Walk {
                    first: start + c.tid,
                    end,
                    stride: c.stride,
                };
                // SAFETY: the walk stays in `[start, end)`: inside the
                // owner's half and the chunk's output.
                copy4_all(
                    walk,
                    |i| ptx::ld_global_v4_u32(src.add(i)),
                    |i, v| store_vec(out, i, c.elems, c.aligned, v),
                );
            }
            r += 1;
        }
    }
}

/// Stores f32 lanes as `T::LANES` f32 words at vector `i` of `base`.
///
/// # Safety
/// `base` must hold vector `i` of `4 * T::LANES` bytes, 16-byte aligned.
#[inline(always)]
unsafe fn store_partial<T: Element>(base: u64, i: usize, l: &Lanes) {
    let p = (base as *mut [u32; 4]).wrapping_add(i * (T::LANES / 4));
    // SAFETY: forwarded from the caller; the second store only for
    // 8-lane types, whose vectors are 32 bytes.
    unsafe {
        ptx::st_global_v4_u32(
            p,
            [
                l[0].to_bits(),
                l[1].to_bits(),
                l[2].to_bits(),
                l[3].to_bits(),
            ],
        );
        if T::LANES == 8 {
            ptx::st_global_v4_u32(
                p.add(1),
                [
                    l[4].to_bits(),
                    l[5].to_bits(),
                    l[6].to_bits(),
                    l[7].to_bits(),
                ],
            );
        }
    }
}

/// Loads what [`store_partial`] stored.
///
/// # Safety
/// As for [`store_partial`].
#[inline(always)]
unsafe fn load_partial<T: Element>(base: u64, i: usize) -> Lanes {
    let p = (base as *const [u32; 4]).wrapping_add(i * (T::LANES / 4));
    let mut l = [0f32; 8];
    // SAFETY: forwarded from the caller, as in `store_partial`.
    unsafe {
        let a = ptx::ld_global_v4_u32(p);
        l[0] = f32::from_bits(a[0]);
        l[1] = f32::from_bits(a[1]);
        l[2] = f32::from_bits(a[2]);
        l[3] = f32::from_bits(a[3]);
        if T::LANES == 8 {
            let b = ptx::ld_global_v4_u32(p.add(1));
            l[4] = f32::from_bits(b[0]);
            l[5] = f32::from_bits(b[1]);
            l[6] = f32::from_bits(b[2]);
            l[7] = f32::from_bits(b[3]);
        }
    }
    l
}

/// HCM (NOTE [hcm groups]): group one-shot into an f32 partial sum, then
/// a swap of partial sums with the relay. The half holds the chunk's input
/// vectors, then their partials (`index::hcm_chunk_elems`).
///
/// # Safety
/// See [`run_chunks`]; `p.hcm_group_mask` holds G ranks and `p.hcm_relay`
/// is a rank (NOTE [hcm groups]).
#[inline(always)]
unsafe fn hcm_chunk<T: Element, const G: usize, const OP: u32>(p: &AllReduceParams, c: &Chunk) {
    // The partials start after a full chunk's input vectors, the same
    // offset on every rank and for every chunk.
    let partial_off = (hcm_chunk_elems(p.half_bytes as usize, T::BYTES) / T::LANES * 16) as u64;
    let mut srcs = [0u64; G];
    let mut k = 0;
    while k < G {
        srcs[k] = pick(&p.bufs, nth_rank(p.hcm_group_mask, k as u32)) + c.half_off;
        k += 1;
    }
    let own_partial = pick(&p.bufs, p.rank) + c.half_off + partial_off;
    let relay_partial = pick(&p.bufs, p.hcm_relay) + c.half_off + partial_off;
    let peers = Peers::of(p, FORM_HCM);
    // SAFETY: forwarded from the caller throughout.
    unsafe {
        copy_in::<T>(p, c, 0, c.vecs);
        group_barrier(&peers, SLOT_START, c.epoch, p.hcm_group_mask);
        let mut i = c.tid;
        while i < c.vecs {
            let raw = load_each::<G>(&srcs, i);
            store_partial::<T>(own_partial, i, &combine_in_order::<T, G, OP>(&raw));
            i += c.stride;
        }
        group_barrier(&peers, SLOT_MID, c.epoch, 1 << p.hcm_relay);
        let mut i = c.tid;
        while i < c.vecs {
            let theirs = load_partial::<T>(relay_partial, i);
            let mine = load_partial::<T>(own_partial, i);
            let acc = finish_op::<OP>(
                if p.hcm_relay_first != 0 {
                    combine::<OP>(theirs, &mine)
                } else {
                    combine::<OP>(mine, &theirs)
                },
                2 * G,
            );
            store_vec(c.output as *mut T, i, c.elems, c.aligned, T::narrow(acc));
            i += c.stride;
        }
    }
}

const ALGO_ONE_SHOT: u32 = 0;
const ALGO_TWO_SHOT: u32 = 1;
const ALGO_HCM: u32 = 2;

/// Runs a call as chunks of at most half a symmetric buffer, all in this
/// one launch: chunk `k` is its own epoch (`base + k`) and uses half
/// `epoch & 1`. Reuse of a half inside the launch is safe for the same
/// reason as across calls (NOTE [double buffering]), block by block: block
/// `b` starts chunk `k + 2` only after passing chunk `k + 1`'s barrier with
/// block `b` of every peer, which had finished chunk `k`, and block `b` only
/// touches block `b`'s vectors (NOTE [block-local barriers]).
///
/// # Safety
/// `p` must describe mapped buffers and pads of W ranks (`rank < W`),
/// caller buffers of `p.elems` elements, and `p.half_bytes` a non-zero
/// multiple of 16 inside every buffer's halves.
#[inline(always)]
unsafe fn run_chunks<T: Element, const W: usize, const OP: u32, const ALGO: u32>(
    p: &AllReduceParams,
) {
    let own_pad = pick(&p.pads, p.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let base = unsafe { call_epoch(own_pad) };
    let elems = p.elems as usize;
    let chunk_elems = if ALGO == ALGO_HCM {
        hcm_chunk_elems(p.half_bytes as usize, T::BYTES)
    } else {
        (p.half_bytes as usize) / T::BYTES
    };
    let chunks = index::div_ceil(elems, chunk_elems).max(1);
    let aligned = index::all_vec_aligned(&[p.input as usize, p.output as usize]);
    let (tid, stride) = grid::place();
    let basis_vecs = index::div_ceil(
        if elems < chunk_elems {
            elems
        } else {
            chunk_elems
        },
        T::LANES,
    );
    let mut k = 0;
    while k < chunks {
        let epoch = base.wrapping_add(k as u32);
        let first = k * chunk_elems;
        let n = if elems - first < chunk_elems {
            elems - first
        } else {
            chunk_elems
        };
        let c = Chunk {
            epoch,
            half_off: (epoch & 1) as u64 * p.half_bytes,
            input: p.input + (first * T::BYTES) as u64,
            output: p.output + (first * T::BYTES) as u64,
            elems: n,
            vecs: index::div_ceil(n, T::LANES),
            basis_vecs,
            aligned,
            tid,
            stride,
        };
        // SAFETY: forwarded from the caller.
        unsafe {
            match ALGO {
                ALGO_TWO_SHOT => two_shot_chunk::<T, W, OP>(p, &c),
                // For HCM, `W` is the group size G (see `hcm`).
                ALGO_HCM => hcm_chunk::<T, W, OP>(p, &c),
                _ => one_shot_chunk::<T, W, OP>(p, &c),
            }
        }
        k += 1;
    }
    // SAFETY: `own_pad` is this rank's pad; every thread gets here.
    unsafe { finish_call(own_pad, base.wrapping_add(chunks as u32 - 1)) };
}

/// # Safety
/// See [`run_chunks`].
#[inline(always)]
pub(crate) unsafe fn one_shot<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded.
    unsafe { run_chunks::<T, W, OP, ALGO_ONE_SHOT>(p) }
}

/// # Safety
/// See [`run_chunks`].
#[inline(always)]
pub(crate) unsafe fn two_shot<T: Element, const W: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded.
    unsafe { run_chunks::<T, W, OP, ALGO_TWO_SHOT>(p) }
}

/// HCM over 2 G ranks: `run_chunks` gets the group size G as its `W`.
///
/// # Safety
/// See [`run_chunks`] and [`hcm_chunk`].
#[inline(always)]
pub(crate) unsafe fn hcm<T: Element, const G: usize, const OP: u32>(p: &AllReduceParams) {
    // SAFETY: forwarded.
    unsafe { run_chunks::<T, G, OP, ALGO_HCM>(p) }
}

/// Explicit barrier among the ranks of `p.rank_mask`: one block of
/// `MAX_RANKS` threads.
///
/// # Safety
/// `p.pads` must hold the mapped pads of every rank in the mask.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn barrier(p: crate::layout::BarrierParams) {
    crate::ptx::griddepcontrol_wait();
    crate::ptx::griddepcontrol_launch_dependents();
    // SAFETY: forwarded from the host.
    unsafe {
        let to = crate::sync::ReportTo {
            word: p.error,
            abort: p.abort,
            form: crate::layout::FORM_BARRIER,
        };
        crate::sync::pair_barrier(&p.pads, p.rank_mask, p.rank, p.timeout_ns, to)
    }
}
