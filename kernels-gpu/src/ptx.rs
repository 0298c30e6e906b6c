//! All inline PTX of the crate, as small named functions.
//!
//! Each function's name states the instruction, its semantics and its
//! scope; `host/tests/ptx_scopes.rs` assembles nothing but reads the emitted
//! PTX and checks, through the `probe_*` kernels of [`crate::probes`], that
//! every function here produces exactly the instruction its name claims.
//! Rust-CUDA's `cuda_std` shipped wrong scopes in hand-written asm for
//! years; that test is what keeps this module honest.
//!
//! Scopes: `.sys` is needed for flags that peers on other GPUs read over
//! NVLink; `.gpu` suffices between blocks of one kernel.

use core::arch::asm;
use core::arch::nvptx;

/// `threadIdx.x`.
#[inline(always)]
pub fn thread_idx_x() -> u32 {
    // SAFETY: reads a special register; no memory is touched.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// `blockIdx.x`.
#[inline(always)]
pub fn block_idx_x() -> u32 {
    // SAFETY: reads a special register; no memory is touched.
    unsafe { nvptx::_block_idx_x() as u32 }
}

/// `blockDim.x`.
#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: reads a special register; no memory is touched.
    unsafe { nvptx::_block_dim_x() as u32 }
}

/// `gridDim.x`.
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    // SAFETY: reads a special register; no memory is touched.
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// `bar.sync 0`: every thread of the block must reach it.
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: a block-wide barrier; callers keep it out of divergent code.
    unsafe { nvptx::_syncthreads() }
}

/// `griddepcontrol.wait`: waits until the grids this one depends on
/// programmatically (launched with programmatic stream serialization, NOTE
/// [launch overlap] in `host/src/kernels/launch.rs`) have completed and
/// their writes are visible; at once for a launch without such a
/// dependency. The collective kernels call it before touching any memory.
/// Built only for sm_90 and later (`intranode_pdl`, set by `intranode-ptx-builder`);
/// elsewhere the host never asks for the overlap, so nothing is to wait for.
#[inline(always)]
pub fn griddepcontrol_wait() {
    // SAFETY: a wait on the launch's dependencies; it touches no memory of
    // ours. Not `nomem`: loads must not move above it.
    #[cfg(intranode_pdl)]
    unsafe {
        asm!("griddepcontrol.wait;", options(nostack))
    }
}

/// `griddepcontrol.launch_dependents`: the next kernel of the stream, if
/// launched for overlap, may be scheduled once every block of this grid
/// has run this (it still waits for this grid's end at its own
/// `griddepcontrol_wait`). So every block of this grid is resident before
/// a dependent takes SM room: no dependent can starve it.
#[inline(always)]
pub fn griddepcontrol_launch_dependents() {
    // SAFETY: a scheduling hint; it touches no memory.
    #[cfg(intranode_pdl)]
    unsafe {
        asm!("griddepcontrol.launch_dependents;", options(nostack))
    }
}

/// Stops the kernel; the launch fails with an illegal-instruction error.
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` ends the thread; nothing runs after it.
    unsafe { nvptx::trap() }
}

/// `ld.acquire.sys.global.u32`: reads a flag written by a release store on
/// any GPU or the host; later loads are ordered after it.
///
/// # Safety
/// `p` must be a valid, 4-byte aligned global address.
#[inline(always)]
pub unsafe fn ld_acquire_sys_u32(p: *const u32) -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees `p` is a valid global address.
    unsafe {
        asm!("ld.acquire.sys.global.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p, options(nostack));
    }
    v
}

/// `ld.relaxed.sys.global.u32`: a coherent read with no ordering, for
/// polling before a fence.
///
/// # Safety
/// `p` must be a valid, 4-byte aligned global address.
#[inline(always)]
pub unsafe fn ld_relaxed_sys_u32(p: *const u32) -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees `p` is a valid global address.
    unsafe {
        asm!("ld.relaxed.sys.global.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p, options(nostack));
    }
    v
}

/// `st.release.sys.global.u32`: publishes every earlier write of this
/// thread to whoever acquires the flag, on any GPU.
///
/// # Safety
/// `p` must be a valid, 4-byte aligned global address.
#[inline(always)]
pub unsafe fn st_release_sys_u32(p: *mut u32, v: u32) {
    // SAFETY: the caller guarantees `p` is a valid global address.
    unsafe {
        asm!("st.release.sys.global.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack));
    }
}

/// `st.relaxed.sys.global.u32`: a coherent write with no ordering.
///
/// # Safety
/// `p` must be a valid, 4-byte aligned global address.
#[inline(always)]
pub unsafe fn st_relaxed_sys_u32(p: *mut u32, v: u32) {
    // SAFETY: the caller guarantees `p` is a valid global address.
    unsafe {
        asm!("st.relaxed.sys.global.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack));
    }
}

/// `fence.acq_rel.sys`: orders this thread's accesses before and after it
/// for observers on every GPU and the host.
#[inline(always)]
pub fn fence_acq_rel_sys() {
    // SAFETY: a fence touches no memory.
    unsafe { asm!("fence.acq_rel.sys;", options(nostack)) }
}

/// `fence.acq_rel.gpu`: as [`fence_acq_rel_sys`], for observers on this GPU.
#[inline(always)]
pub fn fence_acq_rel_gpu() {
    // SAFETY: a fence touches no memory.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) }
}

/// `ld.global.v4.u32`: one 16-byte load.
///
/// # Safety
/// `p` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn ld_global_v4_u32(p: *const [u32; 4]) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees `p` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "ld.global.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            p = in(reg64) p,
            options(nostack, readonly),
        );
    }
    [a, b, c, d]
}

/// `st.global.v4.u32`: one 16-byte store.
///
/// # Safety
/// `p` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn st_global_v4_u32(p: *mut [u32; 4], v: [u32; 4]) {
    // SAFETY: the caller guarantees `p` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "st.global.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
            p = in(reg64) p,
            a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(nostack),
        );
    }
}

/// `ld.relaxed.sys.global.v4.u32`: one 16-byte strong load, for polling
/// memory that peers write (it is never served from a stale L1 line).
///
/// # Safety
/// `p` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn ld_relaxed_sys_v4_u32(p: *const [u32; 4]) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees `p` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "ld.relaxed.sys.global.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            p = in(reg64) p,
            options(nostack),
        );
    }
    [a, b, c, d]
}

/// `st.relaxed.sys.global.v4.u32`: one 16-byte strong store, for data a
/// peer polls for.
///
/// # Safety
/// `p` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn st_relaxed_sys_v4_u32(p: *mut [u32; 4], v: [u32; 4]) {
    // SAFETY: the caller guarantees `p` is valid and 16-byte aligned.
    unsafe {
        asm!(
            "st.relaxed.sys.global.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
            p = in(reg64) p,
            a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(nostack),
        );
    }
}

/// `cp.async.bulk.prefetch.L2.global [p], bytes;`: asks the copy engine
/// of this SM (TMA) to bring `bytes` from `p` into L2, and returns at
/// once; nothing waits for it and nothing is ordered by it. A hint: the
/// PTX ISA (8.0) makes no access of it, so it has no memory-ordering
/// scope. Built only for sm_90 and later (`intranode_pdl`, as
/// [`griddepcontrol_wait`]); elsewhere it is nothing (the host asks for
/// no prefetch there: `KernelModule::l2_prefetch`).
///
/// # Safety
/// `p` must be 16-byte aligned and `bytes` a multiple of 16; the range
/// should be device memory of this context (a hint to memory it does not
/// map is, as far as the ISA says, undefined).
#[inline(always)]
pub unsafe fn prefetch_bulk_l2(p: *const u8, bytes: u32) {
    // SAFETY: the caller's promise on `p` and `bytes`; the instruction
    // reads into L2 only, no register or memory of ours changes.
    #[cfg(intranode_pdl)]
    unsafe {
        asm!(
            "cp.async.bulk.prefetch.L2.global [{p}], {n};",
            p = in(reg64) p,
            n = in(reg32) bytes,
            options(nostack, readonly),
        );
    }
    #[cfg(not(intranode_pdl))]
    let _ = (p, bytes);
}

/// `%globaltimer`: nanoseconds of a clock shared by the GPU's SMs, for
/// deadlines of bounded waits.
#[inline(always)]
pub fn globaltimer_ns() -> u64 {
    let t: u64;
    // SAFETY: reads a special register; no memory is touched.
    unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nostack, nomem)) }
    t
}

/// `%smid`: the SM this thread runs on (it may change under preemption;
/// a hint, for the schedule fuzzer's randomness).
#[inline(always)]
pub fn sm_id() -> u32 {
    let s: u32;
    // SAFETY: reads a special register; no memory is touched.
    unsafe { asm!("mov.u32 {s}, %smid;", s = out(reg32) s, options(nostack, nomem)) }
    s
}

/// `nanosleep.u32`: suspends the thread for about `ns` nanoseconds (at
/// most 1 ms; the hardware picks the exact time). Orders nothing.
#[inline(always)]
pub fn nanosleep(ns: u32) {
    // SAFETY: a pause; no register or memory of ours changes.
    unsafe { asm!("nanosleep.u32 {n};", n = in(reg32) ns, options(nostack, nomem)) }
}

/// `shfl.sync.bfly.b32` over the whole warp: this lane gets the value of
/// lane `lane ^ mask`. A butterfly of masks 16, 8, 4, 2, 1 sums a warp.
///
/// # Safety
/// Every lane of the warp must execute it together (the member mask is
/// the full warp).
#[inline(always)]
pub unsafe fn shfl_bfly_f32(v: f32, mask: u32) -> f32 {
    let out: u32;
    // SAFETY: no memory is touched; convergence is the caller's promise.
    unsafe {
        asm!(
            "shfl.sync.bfly.b32 {o}, {v}, {m}, 0x1f, 0xffffffff;",
            o = out(reg32) out,
            v = in(reg32) v.to_bits(),
            m = in(reg32) mask,
            options(nostack, nomem),
        )
    };
    f32::from_bits(out)
}

/// Words of the scratch [`block_gather_warp_f32`] shares in a block: one
/// per warp of the largest block it serves (512 threads).
pub const BLOCK_GATHER_WARPS: usize = 16;

/// Every thread of the block gets the value lane 0 of each warp passed:
/// `bar.sync 0`, lane 0 of warp `w` stores `v` into word `w` of a scratch
/// in shared memory (`st.shared.f32`), `bar.sync 0`, then every thread
/// loads all [`BLOCK_GATHER_WARPS`] words (`ld.shared.v4.f32`). Words of
/// warps the block lacks hold whatever was there. The scratch is declared
/// inside the asm's own scope (rustc cannot place a static in shared
/// memory), so each place this is inlined gets its own 64 bytes; the first
/// barrier keeps a store of one call from overtaking a load of the
/// previous call at the same place.
///
/// # Safety
/// Every thread of the block must call it together (block-uniform control
/// flow: it holds two block barriers), and the block must have at most
/// `32 * BLOCK_GATHER_WARPS` threads.
#[inline(always)]
pub unsafe fn block_gather_warp_f32(v: f32) -> [f32; BLOCK_GATHER_WARPS] {
    let (o0, o1, o2, o3, o4, o5, o6, o7): (f32, f32, f32, f32, f32, f32, f32, f32);
    let (o8, o9, o10, o11, o12, o13, o14, o15): (f32, f32, f32, f32, f32, f32, f32, f32);
    // SAFETY: touches only the scratch it declares; the barriers'
    // convergence and the block size are the caller's promise.
    unsafe {
        asm!(
            "{{",
            ".shared .align 16 .b32 gather_scratch[16];",
            ".reg .pred gather_lane0;",
            ".reg .b32 gather_tid, gather_addr;",
            "mov.u32 gather_tid, %tid.x;",
            "bar.sync 0;",
            "and.b32 gather_addr, gather_tid, 31;",
            "setp.eq.u32 gather_lane0, gather_addr, 0;",
            "shr.u32 gather_addr, gather_tid, 5;",
            "shl.b32 gather_addr, gather_addr, 2;",
            "mov.u32 gather_tid, gather_scratch;",
            "add.u32 gather_addr, gather_addr, gather_tid;",
            "@gather_lane0 st.shared.f32 [gather_addr], {v};",
            "bar.sync 0;",
            "ld.shared.v4.f32 {{{o0}, {o1}, {o2}, {o3}}}, [gather_scratch];",
            "ld.shared.v4.f32 {{{o4}, {o5}, {o6}, {o7}}}, [gather_scratch+16];",
            "ld.shared.v4.f32 {{{o8}, {o9}, {o10}, {o11}}}, [gather_scratch+32];",
            "ld.shared.v4.f32 {{{o12}, {o13}, {o14}, {o15}}}, [gather_scratch+48];",
            "}}",
            v = in(reg32) v,
            o0 = out(reg32) o0, o1 = out(reg32) o1, o2 = out(reg32) o2, o3 = out(reg32) o3,
            o4 = out(reg32) o4, o5 = out(reg32) o5, o6 = out(reg32) o6, o7 = out(reg32) o7,
            o8 = out(reg32) o8, o9 = out(reg32) o9, o10 = out(reg32) o10, o11 = out(reg32) o11,
            o12 = out(reg32) o12, o13 = out(reg32) o13, o14 = out(reg32) o14, o15 = out(reg32) o15,
            options(nostack),
        );
    }
    [
        o0, o1, o2, o3, o4, o5, o6, o7, o8, o9, o10, o11, o12, o13, o14, o15,
    ]
}

/// Thread 0's `v`, for every thread of the block: `bar.sync 0`, thread 0
/// stores `v` into a word of shared memory (`st.shared.u32`), `bar.sync
/// 0`, every thread loads it (`ld.shared.u32`). The word is declared in
/// the asm's own scope, as [`block_gather_warp_f32`]'s scratch; the first
/// barrier keeps a store from overtaking an earlier call's loads.
///
/// # Safety
/// Every thread of the block must call it together (block-uniform control
/// flow: it holds two block barriers).
#[inline(always)]
pub unsafe fn block_broadcast_u32(v: u32) -> u32 {
    let out: u32;
    // SAFETY: touches only the word it declares; the barriers' convergence
    // is the caller's promise.
    unsafe {
        asm!(
            "{{",
            ".shared .align 4 .b32 bcast_word;",
            ".reg .pred bcast_first;",
            ".reg .b32 bcast_tid;",
            "mov.u32 bcast_tid, %tid.x;",
            "setp.eq.u32 bcast_first, bcast_tid, 0;",
            "bar.sync 0;",
            "@bcast_first st.shared.u32 [bcast_word], {v};",
            "bar.sync 0;",
            "ld.shared.u32 {o}, [bcast_word];",
            "}}",
            v = in(reg32) v,
            o = out(reg32) out,
            options(nostack),
        );
    }
    out
}

/// `sqrt.rn.f32`: the square root, rounded to nearest (`core` has no
/// `sqrt` without `std`).
#[inline(always)]
pub fn sqrt_rn_f32(v: f32) -> f32 {
    let out: f32;
    // SAFETY: arithmetic on registers only.
    unsafe {
        asm!("sqrt.rn.f32 {o}, {v};", o = out(reg32) out, v = in(reg32) v, options(nostack, nomem, pure))
    };
    out
}

/// `ex2.approx.ftz.f32`: `2^v`, to about 2 ulp (subnormal results flush
/// to zero); `core` has no `exp2` without `std`. SiLU's `exp(-x)` is
/// `ex2(-x * log2(e))`.
#[inline(always)]
pub fn ex2_approx_ftz_f32(v: f32) -> f32 {
    let out: f32;
    // SAFETY: arithmetic on registers only.
    unsafe {
        asm!("ex2.approx.ftz.f32 {o}, {v};", o = out(reg32) out, v = in(reg32) v, options(nostack, nomem, pure))
    };
    out
}

/// `cvt.rn.bf16x2.f32`: rounds two f32 to bf16 (to nearest, ties to even)
/// and packs them, `lo` in the low half.
#[inline(always)]
pub fn cvt_rn_bf16x2_f32(lo: f32, hi: f32) -> u32 {
    let d: u32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("cvt.rn.bf16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi, lo = in(reg32) lo, options(nostack, nomem, pure));
    }
    d
}

/// `cvt.rn.f16x2.f32`: rounds two f32 to f16 (to nearest, ties to even)
/// and packs them, `lo` in the low half.
#[inline(always)]
pub fn cvt_rn_f16x2_f32(lo: f32, hi: f32) -> u32 {
    let d: u32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("cvt.rn.f16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi, lo = in(reg32) lo, options(nostack, nomem, pure));
    }
    d
}

/// `cvt.f32.f16` on both halves of a packed f16 pair: `(lo, hi)`.
#[inline(always)]
pub fn cvt_f32_f16x2(v: u32) -> (f32, f32) {
    let (lo, hi): (f32, f32);
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!(
            "{{ .reg .b16 l, h; mov.b32 {{l, h}}, {v}; cvt.f32.f16 {lo}, l; cvt.f32.f16 {hi}, h; }}",
            v = in(reg32) v, lo = out(reg32) lo, hi = out(reg32) hi,
            options(nostack, nomem, pure),
        );
    }
    (lo, hi)
}

/// `atom.add.acq_rel.gpu.global.u32`: counts finished blocks of one grid;
/// acquire/release so the last block sees every other block's writes.
///
/// # Safety
/// `p` must be a valid, 4-byte aligned global address.
#[inline(always)]
pub unsafe fn atom_add_acq_rel_gpu_u32(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees `p` is a valid global address.
    unsafe {
        asm!("atom.add.acq_rel.gpu.global.u32 {old}, [{p}], {v};", old = out(reg32) old, p = in(reg64) p, v = in(reg32) v, options(nostack));
    }
    old
}

/// `atom.add.relaxed.gpu.global.u64`: an atomic add on one 8-byte word
/// with no ordering of any other access: for a counter whose every
/// reader and writer goes through this word alone (NOTE [call count] in
/// `sync.rs`), which coherence orders by itself.
///
/// # Safety
/// `p` must be a valid, 8-byte aligned global address.
#[inline(always)]
pub unsafe fn atom_add_relaxed_gpu_u64(p: *mut u64, v: u64) -> u64 {
    let old: u64;
    // SAFETY: the caller guarantees `p` is a valid, aligned global address.
    unsafe {
        asm!("atom.add.relaxed.gpu.global.u64 {old}, [{p}], {v};", old = out(reg64) old, p = in(reg64) p, v = in(reg64) v, options(nostack));
    }
    old
}

/// `red.relaxed.gpu.global.add.u64`: [`atom_add_relaxed_gpu_u64`] without
/// the old value, so the thread does not wait for the L2's answer (NOTE
/// [call count] in `sync.rs`: the last block's add, whose old value is
/// known already).
///
/// # Safety
/// `p` must be a valid, 8-byte aligned global address.
#[inline(always)]
pub unsafe fn red_add_relaxed_gpu_u64(p: *mut u64, v: u64) {
    // SAFETY: the caller guarantees `p` is a valid, aligned global address.
    unsafe {
        asm!("red.relaxed.gpu.global.add.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v, options(nostack));
    }
}
