//! Kernels of the benchmark and of the slow-mode probe, not of the
//! library's collectives: a `%globaltimer` stamp per call (the per-call
//! latency distribution of `intranode-bench bench`), a spin of a given
//! length (the stand-in for a GEMM in the decode-like mode, and the skew
//! of the skewed mode), and `probe_poll_storm`, which measures what a wait
//! that polls a word costs when every thread polls it (NOTE [abandoned
//! waits] in `sync.rs`).

use crate::layout::PollStormParams;
use crate::ptx;
use crate::sync::{ERROR_POLL_AFTER_NS, ERROR_POLL_INTERVAL_NS};

/// Writes `%globaltimer` to `out[idx]` (thread 0 of block 0): one stamp
/// per call, enqueued after it, so consecutive stamps on a stream bound
/// each call's time as the stream saw it.
///
/// # Safety
/// `out` must hold at least `idx + 1` u64.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn timing_stamp(out: *mut u64, idx: u32) {
    if ptx::thread_idx_x() == 0 && ptx::block_idx_x() == 0 {
        // SAFETY: idx is inside `out` (caller's promise).
        unsafe { *out.add(idx as usize) = ptx::globaltimer_ns() };
    }
}

/// Spins for `ns` nanoseconds of `%globaltimer`, then returns: it holds
/// the stream as a kernel of that length would.
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn timing_spin(ns: u64) {
    let start = ptx::globaltimer_ns();
    while ptx::globaltimer_ns().wrapping_sub(start) < ns {}
}

/// Every thread waits `p.wait_ns` as a Lamport wait on late data would,
/// polling `p.word` after [`ERROR_POLL_AFTER_NS`] and then every
/// [`ERROR_POLL_INTERVAL_NS`] exactly as the waits of `sync.rs` and
/// `lamport.rs` poll their abort word, and stops early if it reads
/// non-zero. Then it writes to `p.lag_ns[tid]` how long after the end of
/// its wait it got out: the cost of its polls.
///
/// # Safety
/// `p.word` must be a valid global address (device or mapped host
/// memory); `p.lag_ns` must hold one u64 per thread of the grid.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_poll_storm(p: PollStormParams) {
    let tid = (ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x()) as usize;
    let start = ptx::globaltimer_ns();
    let mut next_poll_ns = ERROR_POLL_AFTER_NS;
    loop {
        let waited_ns = ptx::globaltimer_ns().wrapping_sub(start);
        if waited_ns >= p.wait_ns {
            break;
        }
        if waited_ns > next_poll_ns {
            // SAFETY: a valid global address (caller's promise).
            if unsafe { ptx::ld_relaxed_sys_u32(p.word as *const u32) } != 0 {
                break;
            }
            next_poll_ns = waited_ns + ERROR_POLL_INTERVAL_NS;
        }
    }
    let lag_ns = ptx::globaltimer_ns()
        .wrapping_sub(start)
        .saturating_sub(p.wait_ns);
    // SAFETY: one u64 per thread (caller's promise).
    unsafe { *(p.lag_ns as *mut u64).add(tid) = lag_ns };
}
