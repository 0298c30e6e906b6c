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

/// Appends `%globaltimer` to a stamp log: `log[0]` counts the stamps
/// taken, `log[1..=cap]` holds them (those past `cap` are counted, not
/// stored). One stamp per call, enqueued after it, so consecutive stamps
/// on a stream bound each call's time as the stream saw it; the count on
/// the device lets a graph replayed many times log every replay without
/// the host stepping in. Kernels of one stream run one after another, so
/// the plain read-modify-write of the count races with nothing.
///
/// # Safety
/// `log` must hold `cap + 1` u64.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn timing_stamp(log: *mut u64, cap: u64) {
    if ptx::thread_idx_x() == 0 && ptx::block_idx_x() == 0 {
        let now = ptx::globaltimer_ns();
        // SAFETY: `log` holds `cap + 1` words (caller's promise) and the
        // stamp goes to `1 + n` only when `n < cap`.
        unsafe {
            let n = *log;
            if n < cap {
                *log.add(1 + n as usize) = now;
            }
            *log = n + 1;
        }
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
