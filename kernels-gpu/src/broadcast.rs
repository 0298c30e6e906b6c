//! Broadcast over symmetric memory: the root copies its bytes into its own
//! symmetric half, every rank meets at a barrier, and every other rank
//! reads the root's half over NVLink into its buffer.
//!
//! Broadcasts share the call count, the barrier slot and the halves with
//! the all-reduce kernels, so the two can be enqueued in any interleaving:
//! every chunk is an epoch of its own (`sync::call_epoch` + k), uses half
//! `epoch & 1` (NOTE [double buffering] in `all_reduce.rs`) and holds one
//! barrier among *all* ranks, non-roots included. That barrier is what the
//! double-buffering argument needs: a rank passing it at epoch `e + 1` knows
//! every peer finished its kernel of epoch `e`, whatever kind that call was
//! and whichever rank's half it read. A barrier among root and readers only
//! would not tell a rank that a third rank finished reading its half in a
//! preceding all-reduce.
//!
//! Any byte count: 16-byte vectors, the last one partial. The caller's
//! buffer may have any alignment (a misaligned one moves byte by byte); the
//! halves are always 16-byte aligned, so the partial vector travels whole
//! (padded with zeros) and only its valid bytes are stored.
//!
//! NOTE [block-local barriers] (`all_reduce.rs`) holds here too: the root's
//! copy-in and the readers' copy-out walk the same grid-stride index sets,
//! so block `b` of a reader only reads what block `b` of the root wrote
//! before their barrier; the mapping of a vector to a block depends only on
//! its index, never on the chunk's length.

use crate::index::{self, VEC_BYTES};
use crate::layout::{BroadcastParams, FORM_BROADCAST, SLOT_START};
use crate::prims::grid::{self, Walk, copy4_all};
use crate::ptx;
use crate::sync::{Peers, ReportTo, block_barrier, call_epoch, finish_call, pick};

/// Bytes `16 i .. 16 i + 16` of `p` as one vector: one 16-byte load when
/// `aligned` and the vector is whole, else byte by byte with zeros past
/// `bytes`.
///
/// # Safety
/// `p` must hold `bytes` bytes; `16 i < bytes`.
#[inline(always)]
unsafe fn load_bytes(p: *const u8, i: usize, bytes: usize, aligned: bool) -> [u32; 4] {
    let first = i * VEC_BYTES;
    if aligned && first + VEC_BYTES <= bytes {
        // SAFETY: a whole, 16-byte aligned vector inside the buffer.
        return unsafe { ptx::ld_global_v4_u32((p as *const [u32; 4]).add(i)) };
    }
    let mut w = [0u32; 4];
    let mut k = 0;
    while k < VEC_BYTES {
        if first + k < bytes {
            // SAFETY: byte `first + k` is inside the buffer.
            let b = unsafe { *p.add(first + k) } as u32;
            w[k / 4] |= b << ((k % 4) * 8);
        }
        k += 1;
    }
    w
}

/// Stores vector `v` as bytes `16 i ..` of `p`, the counterpart of
/// [`load_bytes`]: bytes past `bytes` are not written.
///
/// # Safety
/// `p` must hold `bytes` bytes; `16 i < bytes`.
#[inline(always)]
unsafe fn store_bytes(p: *mut u8, i: usize, bytes: usize, aligned: bool, v: [u32; 4]) {
    let first = i * VEC_BYTES;
    if aligned && first + VEC_BYTES <= bytes {
        // SAFETY: a whole, 16-byte aligned vector inside the buffer.
        unsafe { ptx::st_global_v4_u32((p as *mut [u32; 4]).add(i), v) };
        return;
    }
    let mut k = 0;
    while k < VEC_BYTES {
        if first + k < bytes {
            // SAFETY: byte `first + k` is inside the buffer.
            unsafe { *p.add(first + k) = (v[k / 4] >> ((k % 4) * 8)) as u8 };
        }
        k += 1;
    }
}

/// Runs a broadcast as chunks of at most half a symmetric buffer, all in
/// this one launch (chunk `k` is epoch `base + k`, as in the all-reduce's
/// `run_chunks`, whose argument for reusing a half inside one launch
/// applies unchanged).
///
/// # Safety
/// `p` must describe mapped buffers and pads of W ranks (`rank`, `root` <
/// W), a caller buffer of `p.bytes` bytes, and `p.half_bytes` a non-zero
/// multiple of 16 inside every buffer's halves.
#[inline(always)]
pub(crate) unsafe fn broadcast<const W: usize>(p: &BroadcastParams) {
    let own_pad = pick(&p.pads, p.rank) as *mut u32;
    // SAFETY: the host passes this rank's mapped pad.
    let base = unsafe { call_epoch(own_pad) };
    let bytes = p.bytes as usize;
    let chunk_bytes = p.half_bytes as usize;
    let chunks = index::div_ceil(bytes, chunk_bytes).max(1);
    // Chunks start at multiples of `half_bytes` (a multiple of 16), so the
    // buffer's own alignment decides for every chunk.
    let aligned = index::all_vec_aligned(&[p.buf as usize]);
    let (tid, s) = grid::place();
    let peers = Peers {
        pads: &p.pads,
        rank: p.rank,
        timeout_ns: p.timeout_ns,
        to: ReportTo {
            word: p.error,
            abort: p.abort,
            form: FORM_BROADCAST,
        },
    };
    let is_root = p.rank == p.root;
    let root_buf = pick(&p.bufs, p.root);
    let mut k = 0;
    while k < chunks {
        let epoch = base.wrapping_add(k as u32);
        let half = (root_buf + (epoch & 1) as u64 * p.half_bytes) as *mut [u32; 4];
        let first = k * chunk_bytes;
        let n = if bytes - first < chunk_bytes {
            bytes - first
        } else {
            chunk_bytes
        };
        let vecs = index::div_ceil(n, VEC_BYTES);
        let user = (p.buf + first as u64) as *mut u8;
        // SAFETY: `half` holds `half_bytes >= 16 * vecs` bytes; `user` holds
        // `n` bytes (the caller's promise); the pads are mapped.
        unsafe {
            if is_root {
                let mut i = tid;
                while i < vecs {
                    ptx::st_global_v4_u32(half.add(i), load_bytes(user, i, n, aligned));
                    i += s;
                }
            }
            block_barrier::<W>(&peers, SLOT_START, epoch);
            if !is_root {
                // Four loads in flight per thread, as in the two-shot
                // gather (`grid::copy4`).
                let src = half as *const [u32; 4];
                let walk = Walk {
                    first: tid,
                    end: vecs,
                    stride: s,
                };
                copy4_all(
                    walk,
                    |i| ptx::ld_global_v4_u32(src.add(i)),
                    |i, v| store_bytes(user, i, n, aligned, v),
                );
            }
        }
        k += 1;
    }
    // SAFETY: `own_pad` is this rank's pad; every thread gets here.
    unsafe { finish_call(own_pad, base.wrapping_add(chunks as u32 - 1)) };
}
