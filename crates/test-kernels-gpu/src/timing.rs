//! Kernels of the benchmark and of the slow-mode probe, not of the
//! library's collectives: a `%globaltimer` stamp per call (the per-call
//! latency distribution of `intranode-bench bench`), a spin of a given
//! length (the stand-in for a GEMM in the decode-like mode, and the skew
//! of the skewed mode), `probe_poll_storm`, which measures what a wait
//! that polls a word costs when every thread polls it (NOTE [abandoned
//! waits] in `sync.rs`), `probe_ping_pong`, the latency of one NVLink
//! hop as a Lamport wait sees it (a store into a peer, polled there),
//! `probe_store_exit`, a kernel that stores 16 bytes and ends (`hop`'s
//! store floor), and the phase probes of `intranode-bench phases`: the
//! collectives' own Lamport code with each phase stamped.

use intranode_kernels_gpu::lamport::{Marks, lamport_marked, lamport_two_shot_marked};
use intranode_kernels_gpu::layout::{
    AllReduceParams, MAX_RANKS, OP_SUM, PHASES, PingPongParams, PollStormParams, StoreExitParams,
};
use intranode_kernels_gpu::packed::Bf16;
use intranode_kernels_gpu::ptx;
use intranode_kernels_gpu::sync::{
    ERROR_POLL_AFTER_NS, ERROR_POLL_INTERVAL_NS, Wait, pick, poll_until,
};

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

/// Passes `p.first + k` back and forth with the partner, `p.warmup +
/// p.iters` times: the leader stores it into the partner's word and
/// waits for it in its own; the partner waits for it and stores it back.
/// The leader writes to `p.out` the nanoseconds the last `p.iters` round
/// trips took and the number of round trips done. A round trip is two
/// hops, each a strong store (`st.relaxed.sys`, as `prims::slots::put`)
/// polled with strong loads (`ld.relaxed.sys`, as the Lamport waits). A
/// wait longer than `p.timeout_ns` ends the loop, the count then short.
///
/// # Safety
/// One thread per rank; `p.own_word` must be this rank's device memory,
/// `p.peer_word` the partner's mapped memory, `p.out` two u64 of device
/// memory (read on the leader only).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_ping_pong(p: PingPongParams) {
    if ptx::thread_idx_x() != 0 || ptx::block_idx_x() != 0 {
        return;
    }
    let own = p.own_word as *const u32;
    let peer = p.peer_word as *mut u32;
    let total = p.warmup.wrapping_add(p.iters);
    // Waits for `v` in our word through the kernels' one poll loop, as
    // the Lamport waits do: false once `p.timeout_ns` passed.
    let wait = |v: u32| {
        let poll = || {
            // SAFETY: `own` is this rank's word (caller's promise).
            if unsafe { ptx::ld_relaxed_sys_u32(own) } == v {
                None
            } else {
                Some(())
            }
        };
        // SAFETY: no abort word (0).
        matches!(unsafe { poll_until(p.timeout_ns, 0, poll) }, Wait::Reached)
    };
    let mut timed_from = ptx::globaltimer_ns();
    let mut done = 0u32;
    while done < total {
        if done == p.warmup {
            timed_from = ptx::globaltimer_ns();
        }
        let v = p.first.wrapping_add(done);
        if p.leader != 0 {
            // SAFETY: `peer` is the partner's mapped word (caller's promise).
            unsafe { ptx::st_relaxed_sys_u32(peer, v) };
            if !wait(v) {
                break;
            }
        } else {
            if !wait(v) {
                break;
            }
            // SAFETY: as above.
            unsafe { ptx::st_relaxed_sys_u32(peer, v) };
        }
        done += 1;
    }
    if p.leader != 0 {
        let out = p.out as *mut u64;
        // SAFETY: two u64 of device memory (caller's promise).
        unsafe {
            *out = ptx::globaltimer_ns().wrapping_sub(timed_from);
            *out.add(1) = done as u64;
        }
    }
}

/// Thread `t < p.count` of block 0 stores `p.value` into the 16-byte
/// vector at `p.dst[t]` (`st.relaxed.sys`, as a Lamport form's `put`),
/// then the kernel ends. Its time in a graph, against an empty kernel's,
/// is what the end of a kernel costs after stores into peers: the grid
/// completes only once its stores are performed, which over NVLink takes
/// their acknowledgment (`intranode-bench hop`).
///
/// # Safety
/// `p.dst[t]` for `t < p.count` must be valid, 16-byte aligned global
/// addresses that nothing else accesses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_store_exit(p: StoreExitParams) {
    let t = ptx::thread_idx_x();
    if ptx::block_idx_x() == 0 && t < p.count && (t as usize) < MAX_RANKS {
        // SAFETY: `dst[t]` is valid and aligned (caller's promise).
        unsafe { ptx::st_relaxed_sys_v4_u32(pick(&p.dst, t) as *mut [u32; 4], [p.value; 4]) }
    }
}

/// The phase probes' marks: at the end of each phase, after a block
/// barrier (so the stamp is the block's last thread's), thread 0 writes
/// `%globaltimer` to `stamps[block * PHASES + phase]`. The barrier costs
/// each phase a few dozen ns, which the production kernels do not pay.
struct BlockMarks {
    /// `PHASES` u64 per block of the grid (the probes' contract).
    stamps: *mut u64,
}

impl Marks for BlockMarks {
    #[inline(always)]
    fn mark(&self, phase: usize) {
        ptx::sync_threads();
        if ptx::thread_idx_x() == 0 && phase < PHASES {
            let at = ptx::block_idx_x() as usize * PHASES + phase;
            // SAFETY: `stamps` holds PHASES words per block of the grid
            // (the probe's contract), and phase < PHASES.
            unsafe { *self.stamps.add(at) = ptx::globaltimer_ns() };
        }
    }
}

/// The phase probes of `intranode-bench phases`: the production Lamport
/// one-shot and two-shot (bf16 sum), every phase stamped per block
/// ([`BlockMarks`], `layout::PHASE_*`). Launched by the host with the
/// parameters and grid of a real call
/// (`IntraNodeComm::lamport_probe_launch`), so a probe counts itself and
/// leaves the buffers as a call does.
macro_rules! phase_probes {
    ($($one:ident $two:ident $w:literal),*) => {$(
        /// The Lamport one-shot with its phases stamped.
        ///
        /// # Safety
        /// As for `lamport::lamport` with `p` of bf16 elements on this
        /// many ranks; `stamps` must hold `PHASES` u64 per block.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $one(p: AllReduceParams, stamps: *mut u64) {
            // SAFETY: forwarded from the caller.
            unsafe { lamport_marked::<Bf16, $w, OP_SUM, _>(&p, &BlockMarks { stamps }) }
        }

        /// The Lamport two-shot with its phases stamped.
        ///
        /// # Safety
        /// As for `lamport::lamport_two_shot` with `p` of bf16 elements on this
        /// many ranks; `stamps` must hold `PHASES` u64 per block.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $two(p: AllReduceParams, stamps: *mut u64) {
            // SAFETY: forwarded from the caller.
            unsafe { lamport_two_shot_marked::<Bf16, $w, OP_SUM, _>(&p, &BlockMarks { stamps }) }
        }
    )*};
}

phase_probes!(
    probe_lamport_phases_w2 probe_lamport_two_shot_phases_w2 2,
    probe_lamport_phases_w4 probe_lamport_two_shot_phases_w4 4,
    probe_lamport_phases_w8 probe_lamport_two_shot_phases_w8 8
);
