//! Barriers between GPUs over signal pads (NOTE [signal pad layout] in
//! `layout.rs`), with bounded waits that report to a host-mapped error word
//! instead of hanging the GPU.

use crate::layout::{
    AllReduceParams, BLOCKS_DONE, CALL_COUNTER, ERR_BARRIER_TIMEOUT, MAX_RANKS, epoch_reached,
    flag_index,
};
use crate::ptx;

/// `arr[i]` for a run-time `i`, as a chain of selects: indexing the
/// parameter array with a run-time value would copy it to local memory.
#[inline(always)]
pub fn pick(arr: &[u64; MAX_RANKS], i: u32) -> u64 {
    let mut v = arr[0];
    let mut k = 1;
    while k < MAX_RANKS {
        if i as usize == k {
            v = arr[k];
        }
        k += 1;
    }
    v
}

/// Where a failed wait is reported: the host-mapped error word (0: none),
/// this rank's abort word (`layout::ABORT_WORD` of its pad; 0: none) and
/// the collective that waited (`layout::FORM_*`), so the host's error
/// names it.
#[derive(Clone, Copy, Debug)]
pub struct ReportTo {
    /// Device address of the host-mapped [`ErrorWord`](crate::layout::ErrorWord), or 0.
    pub word: u64,
    /// Device address of this rank's abort word, or 0.
    pub abort: u64,
    /// The waiting collective's `FORM_*` code.
    pub form: u32,
}

impl ReportTo {
    /// Where the waits of a collective with parameters `p` report, as
    /// `form`.
    #[inline(always)]
    pub fn of(p: &AllReduceParams, form: u32) -> Self {
        ReportTo {
            word: p.error,
            abort: p.abort,
            form,
        }
    }
}

/// What every barrier of a call passes alike: the pads of the ranks it
/// meets (mapped into this process), this rank, the bound of each wait
/// and where a failed wait reports. Built once per call
/// ([`Peers::of`]); the barriers take it with the slot and epoch that
/// differ between them.
#[derive(Clone, Copy, Debug)]
pub struct Peers<'a> {
    /// Every rank's signal pad, mapped into this process.
    pub pads: &'a [u64; MAX_RANKS],
    /// This rank: whose pad holds the flags it waits on.
    pub rank: u32,
    /// Bound of each wait, in nanoseconds of `%globaltimer`.
    pub timeout_ns: u64,
    /// Where a wait that runs out reports.
    pub to: ReportTo,
}

impl<'a> Peers<'a> {
    /// The peers of a collective with parameters `p`, reporting as `form`.
    #[inline(always)]
    pub fn of(p: &'a AllReduceParams, form: u32) -> Self {
        Peers {
            pads: &p.pads,
            rank: p.rank,
            timeout_ns: p.timeout_ns,
            to: ReportTo::of(p, form),
        }
    }
}

/// Records a failed wait: the rank's abort word first (so this rank's
/// other waits give up, NOTE [abandoned waits]), then the host-mapped
/// error word, `code` last, with release, so a host that sees the code
/// sees the other fields.
///
/// Only the first failed wait of the rank writes the error word: it is
/// the one whose increment of the abort word found it zero. Blocks whose
/// bounds run out in the same moment (every block waits at the same
/// barrier) used to write it one after another, so the host read one
/// block in the call's error and another in the next call's, which must
/// repeat it (seen in faults-suite, late one-shot at 16 MiB on 2 H200). Only
/// this GPU's waits read or write the abort word, so `.gpu` scope.
///
/// # Safety
/// `to.word` must be the device address of a mapped `ErrorWord` (or 0),
/// `to.abort` this rank's abort word (or 0).
#[inline(always)]
pub(crate) unsafe fn report(to: ReportTo, peer: u32, block: u32, slot: u32, rank: u32) {
    if to.abort != 0 {
        // SAFETY: this rank's abort word (caller's promise).
        let earlier = unsafe { ptx::atom_add_acq_rel_gpu_u32(to.abort as *mut u32, 1) };
        if earlier != 0 {
            return;
        }
    }
    if to.word == 0 {
        return;
    }
    let e = to.word as *mut u32;
    // SAFETY: `to.word` points to a mapped ErrorWord (caller's promise).
    unsafe {
        ptx::st_relaxed_sys_u32(e.add(1), peer);
        ptx::st_relaxed_sys_u32(e.add(2), block);
        ptx::st_relaxed_sys_u32(e.add(3), slot);
        ptx::st_relaxed_sys_u32(e.add(4), rank);
        ptx::st_relaxed_sys_u32(e.add(5), to.form);
        ptx::st_release_sys_u32(e, ERR_BARRIER_TIMEOUT);
    }
}

/// NOTE [no arrival after giving up]: a rank whose wait ran out reports
/// and carries on to the end of its queued calls (NOTE [abandoned
/// waits]), but it no longer tells any peer that it arrived anywhere: no
/// barrier flag (`arrive_with`), no push counter (`push::signal`), no
/// Lamport two-shot gather data reduced from a slot that never came
/// (`lamport::lamport_two_shot`). Before, its later flags carried real epochs: on
/// 8 ranks on 4 time-sliced GPUs with a 5 s bound, ranks 0, 2, 3 and 4
/// gave up on rank 1, went
/// on, and ranks 1, 5, 6 and 7, which came later, found every flag they
/// waited for and left the call with no error, after reading shards the
/// others had reduced from rank 1's stale buffer. Now a late peer waits
/// for what the rank that gave up never sends, and its own bound reports
/// it: every rank of the call gets an error, none a silent wrong result.
/// What a rank published before its wait ran out stays valid (its input,
/// copied or pushed before it waited), so a late peer of a one-shot may
/// still finish that call with the right sum; its next call then waits
/// for a rank whose host no longer calls and reports. The cost is one
/// read of the abort word (this rank's own pad, an L2 hit) per arrival or
/// push signal, issued before the block barrier that precedes the store.
///
/// After this long, a wait also looks at the rank's abort word (and again
/// every [`ERROR_POLL_INTERVAL_NS`]).
///
/// NOTE [abandoned waits]: once one wait has run out, the communicator is
/// dead (the host refuses further calls), but calls already queued on the
/// stream would each wait the whole bound again, so N queued calls would
/// hold the GPU for N timeouts. So a wait that lasts also polls whether an
/// earlier one failed. It polls the abort word in this rank's own signal
/// pad (`layout::ABORT_WORD`, an L2 hit; its address comes in the
/// parameters), never the host-mapped error
/// word: that caused a free-running slow mode. A Lamport wait is
/// one per thread, so when a peer ran more than 100 us behind (ranks
/// drift that far between graph replays), tens of thousands of threads
/// read the same word of page-locked host memory every 20 us. Such reads
/// cross PCIe one after another (`probe_poll_storm` measures it: about 1
/// us a warp), so a thread whose data had arrived first waited behind every
/// other warp's read: milliseconds, growing with the message (one read per
/// warp, one warp per 512 bytes). The late call made the peer wait more
/// than 100 us in the next call, whose polls stalled it in turn: once in,
/// a run never left the slow mode. The abort word keeps the same meaning
/// (set only by this rank's `report`) at the cost of a local load.
pub const ERROR_POLL_AFTER_NS: u64 = 100_000;
/// How often a wait past [`ERROR_POLL_AFTER_NS`] reads the abort word
/// (NOTE [abandoned waits]).
pub const ERROR_POLL_INTERVAL_NS: u64 = 20_000;

/// Whether an earlier wait of this rank ran out (NOTE [abandoned waits]):
/// `abort` is its abort word, or 0 for none.
///
/// # Safety
/// `abort` must be this rank's abort word, or 0.
#[inline(always)]
pub(crate) unsafe fn aborted(abort: u64) -> bool {
    // SAFETY: this rank's abort word (caller's promise).
    abort != 0 && unsafe { ptx::ld_relaxed_sys_u32(abort as *const u32) } != 0
}

/// How a bounded wait ended.
#[derive(Clone, Copy, Debug)]
pub enum Wait<P> {
    /// The wait is over: the flag reached the epoch, the data arrived.
    Reached,
    /// The bound ran out while the last poll still missed `P` (the peer
    /// waited for): report it.
    TimedOut(P),
    /// An earlier wait of this rank already timed out (the error word is
    /// set): give up without reporting, so the first report stands.
    Abandoned,
}

/// The one poll loop of the kernels, behind every wait on a peer (the
/// barriers here, the Lamport waits of `prims::slots`): calls `poll` until
/// it misses nothing (returns `None`), `timeout_ns` of `%globaltimer`
/// pass, or, once the wait lasts, the abort word `abort` (0: none) says
/// that an earlier wait of this rank failed (NOTE [abandoned waits]:
/// never the host-mapped error word, which one reader per thread turned
/// into the free-running slow mode). `poll` returns what it still waits
/// for, which a timeout hands back for the report. It runs first, before
/// the clock is read: the clock and the abort word are only read after a
/// poll that missed something.
///
/// # Safety
/// `abort` must be this rank's abort word, or 0.
#[inline(always)]
pub unsafe fn poll_until<P>(
    timeout_ns: u64,
    abort: u64,
    mut poll: impl FnMut() -> Option<P>,
) -> Wait<P> {
    crate::schedule::delay(crate::schedule::SITE_WAIT);
    let start = ptx::globaltimer_ns();
    let mut next_poll_ns = ERROR_POLL_AFTER_NS;
    loop {
        let Some(missed) = poll() else {
            return Wait::Reached;
        };
        let waited_ns = ptx::globaltimer_ns().wrapping_sub(start);
        if waited_ns > timeout_ns {
            return Wait::TimedOut(missed);
        }
        if waited_ns > next_poll_ns {
            // SAFETY: forwarded from the caller.
            if unsafe { aborted(abort) } {
                return Wait::Abandoned;
            }
            next_poll_ns = waited_ns + ERROR_POLL_INTERVAL_NS;
        }
    }
}

/// Spins until `*flag` reaches `epoch`, `timeout_ns` passes, or the abort
/// word `abort` (0: none) reports an earlier failure.
///
/// # Safety
/// `flag` must be a valid global address; `abort` this rank's abort word
/// or 0.
#[inline(always)]
unsafe fn wait_epoch(flag: *const u32, epoch: u32, timeout_ns: u64, abort: u64) -> Wait<()> {
    let poll = || {
        // SAFETY: a valid global address (caller's promise).
        if epoch_reached(unsafe { ptx::ld_acquire_sys_u32(flag) }, epoch) {
            None
        } else {
            Some(())
        }
    };
    // SAFETY: `abort` is this rank's abort word or 0 (caller's promise).
    unsafe { poll_until(timeout_ns, abort, poll) }
}

/// A barrier between block `blockIdx.x` of every rank: thread `t < W`
/// tells rank `t` that this rank arrived, then waits for rank `t`'s word.
/// Every thread of the block must call it.
///
/// # Safety
/// `peers.pads` must hold the mapped signal pads of ranks `0..W`;
/// `peers.rank < W`.
#[inline(always)]
pub unsafe fn block_barrier<const W: usize>(peers: &Peers<'_>, slot: usize, epoch: u32) {
    // SAFETY: forwarded; thread t's peer is rank t < W.
    unsafe { barrier_with(peers, slot, epoch, W as u32, |t| t) }
}

/// A barrier between block `blockIdx.x` of this rank and of every rank
/// in `peer_mask` (bit `r` for rank `r`; it may include this rank). Every
/// thread of the block must call it.
///
/// # Safety
/// `peers.pads` must hold the mapped signal pads of `peers.rank` and of
/// every rank in `peer_mask`, whose bits are below `MAX_RANKS`.
#[inline(always)]
pub unsafe fn group_barrier(peers: &Peers<'_>, slot: usize, epoch: u32, peer_mask: u32) {
    let n = peer_mask.count_ones();
    // SAFETY: forwarded; thread t < n's peer is the t-th rank of the mask.
    unsafe { barrier_with(peers, slot, epoch, n, |t| nth_rank(peer_mask, t)) }
}

/// The `n`-th lowest rank in `mask` (bit arithmetic, not an array:
/// indexing a parameter array at run time would copy the whole parameter
/// block to local memory).
#[inline(always)]
pub fn nth_rank(mask: u32, n: u32) -> u32 {
    let mut m = mask;
    let mut k = 0;
    while k < n {
        m &= m.wrapping_sub(1);
        k += 1;
    }
    m.trailing_zeros()
}

/// The barrier behind [`block_barrier`] and [`group_barrier`]: thread
/// `t < n` tells rank `peer_of(t)` that this rank arrived, then waits for
/// that rank's word.
///
/// # Safety
/// `peers.pads` must hold the mapped signal pads of `peers.rank` and of
/// every `peer_of(t)`, `t < n`, each below `MAX_RANKS`.
#[inline(always)]
unsafe fn barrier_with(
    peers: &Peers<'_>,
    slot: usize,
    epoch: u32,
    n: u32,
    peer_of: impl Fn(u32) -> u32,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        arrive_with(peers, slot, epoch, n, &peer_of);
        await_with(peers, slot, epoch, n, &peer_of);
    }
}

/// Thread `t < n` stores `epoch` into this rank's word for `(slot,
/// blockIdx.x)` on rank `peer_of(t)`'s pad, unless a wait of this rank
/// ran out (NOTE [no arrival after giving up]).
///
/// Ordering: `bar.sync` orders the block's earlier writes before thread
/// `t`'s release store (release is cumulative), so a peer that acquires the
/// flag sees all of them, stores into its memory over NVLink included.
/// The abort word is read before the `bar.sync`, whose wait hides the
/// load; a report of this block's last wait came before that wait's own
/// `bar.sync`, so the load sees it.
///
/// # Safety
/// `peers.pads` must hold the mapped signal pads of every `peer_of(t)`,
/// `t < n`, each below `MAX_RANKS`; `peers.rank < MAX_RANKS`.
#[inline(always)]
unsafe fn arrive_with(
    peers: &Peers<'_>,
    slot: usize,
    epoch: u32,
    n: u32,
    peer_of: &impl Fn(u32) -> u32,
) {
    crate::schedule::delay(crate::schedule::SITE_ARRIVE);
    let t = ptx::thread_idx_x();
    // SAFETY: this rank's abort word or 0 (the caller's `peers`).
    let gave_up = t < n && unsafe { aborted(peers.to.abort) };
    ptx::sync_threads();
    if t < n && !gave_up {
        let peer_pad = pick(peers.pads, peer_of(t)) as *mut u32;
        // SAFETY: the pad is mapped (caller's promise) and the index is
        // inside the layout (slot < SLOTS, block < MAX_BLOCKS, rank <
        // MAX_RANKS: the host launches at most MAX_BLOCKS blocks).
        unsafe {
            ptx::st_release_sys_u32(
                peer_pad.add(flag_index(
                    slot,
                    ptx::block_idx_x() as usize,
                    peers.rank as usize,
                )),
                epoch,
            )
        };
    }
}

/// Thread `t < n` waits until rank `peer_of(t)`'s word for `(slot,
/// blockIdx.x)` on this rank's pad reached `epoch`, reporting a wait that
/// runs out; then the block meets at `bar.sync`.
///
/// Ordering: the acquire load plus the `bar.sync` order every later read
/// of the block after the peer's writes.
///
/// # Safety
/// `peers.pads` must hold this rank's mapped signal pad; `peers.rank`
/// and every `peer_of(t)`, `t < n`, are below `MAX_RANKS`.
#[inline(always)]
unsafe fn await_with(
    peers: &Peers<'_>,
    slot: usize,
    epoch: u32,
    n: u32,
    peer_of: &impl Fn(u32) -> u32,
) {
    let t = ptx::thread_idx_x();
    if t < n {
        let peer = peer_of(t);
        let block = ptx::block_idx_x();
        let own_pad = pick(peers.pads, peers.rank) as *const u32;
        // SAFETY: the pad is mapped (caller's promise) and the index is
        // inside the layout, as in `arrive_with`.
        unsafe {
            let waited = wait_epoch(
                own_pad.add(flag_index(slot, block as usize, peer as usize)),
                epoch,
                peers.timeout_ns,
                peers.to.abort,
            );
            if let Wait::TimedOut(()) = waited {
                report(peers.to, peer, block, slot as u32, peers.rank);
            }
        }
    }
    ptx::sync_threads();
}

/// This call's epoch: one more than the calls this rank finished.
///
/// # Safety
/// `own_pad` must be this rank's signal pad.
#[inline(always)]
pub unsafe fn call_epoch(own_pad: *const u32) -> u32 {
    // SAFETY: forwarded from the caller.
    unsafe { ptx::ld_relaxed_sys_u32(own_pad.add(CALL_COUNTER)).wrapping_add(1) }
}

/// NOTE [call count]: the Lamport forms count their calls at the start,
/// not the end. One 8-byte word of the pad holds the blocks of the current
/// call that started (low half, [`BLOCKS_DONE`]) and the calls counted
/// (high half, [`CALL_COUNTER`]). Thread 0 of each block adds 1 to it
/// (`atom.add.relaxed.gpu.u64`): the old value gives the block its epoch
/// (calls + 1) and tells the last block to arrive that it is last; that
/// block adds `2^32 - grid` (a `red`: nothing waits for it), which
/// zeroes the count of blocks and counts the call. Every access to the two
/// halves within a call goes through that word, so coherence orders them
/// (every block's add, then the last one's): no block can see the new
/// count, and no fence is needed. The add's answer is an L2 round trip
/// that every store of the call waits for (the epoch picks the buffer), so
/// the forms issue their first loads of the input before it (NOTE [loads
/// before the count] in `prims/slots.rs`).
/// Counting at the end instead, each block with an
/// `atom.add.acq_rel.gpu` after a block barrier as the barrier forms do
/// ([`finish_call`]), makes the release wait for the block's NVLink
/// stores to be acknowledged: 0.30-0.37 us a call at every size of the
/// Lamport forms (measured on 4 H100). The next kernel reads
/// the new count only once this one has ended (stream order, or
/// `griddepcontrol.wait` under launch overlap), as before; the barrier
/// forms keep their count in the same halves (u32 accesses of another
/// kernel, never concurrent with these).
///
/// Returns the call's epoch (one more than the calls counted before it),
/// the same in every thread.
///
/// # Safety
/// `own_pad` must be this rank's signal pad (8-byte aligned, as every
/// mapping is); every thread of the block calls it together, at the
/// block's start (block-uniform control flow: it holds block barriers).
#[inline(always)]
pub unsafe fn start_lamport_call(own_pad: *mut u32) -> u32 {
    let mut epoch = 0;
    if ptx::thread_idx_x() == 0 {
        // SAFETY: both halves are inside this rank's pad; `BLOCKS_DONE` is
        // even, so the word is 8-byte aligned (`layout`'s tests).
        unsafe {
            let word = own_pad.add(BLOCKS_DONE) as *mut u64;
            let old = ptx::atom_add_relaxed_gpu_u64(word, 1);
            epoch = ((old >> 32) as u32).wrapping_add(1);
            let grid = ptx::grid_dim_x();
            if (old as u32).wrapping_add(1) == grid {
                // No old value wanted: a `red`, which returns nothing to
                // wait for (an `atom`'s unused answer may still hold the
                // thread at the block barrier right after, for one more L2
                // round trip before the block's first store).
                ptx::red_add_relaxed_gpu_u64(word, (1u64 << 32).wrapping_sub(grid as u64));
            }
        }
    }
    // SAFETY: every thread of the block gets here together (caller).
    unsafe { ptx::block_broadcast_u32(epoch) }
}

/// Ends a call: the last block to finish publishes `epoch` as the count of
/// finished calls. Every block read the counter at its start, before its
/// own increment of `BLOCKS_DONE`, so none can read the new value.
///
/// # Safety
/// `own_pad` must be this rank's signal pad; every thread calls it.
#[inline(always)]
pub unsafe fn finish_call(own_pad: *mut u32, epoch: u32) {
    ptx::sync_threads();
    if ptx::thread_idx_x() == 0 {
        // SAFETY: both words are inside this rank's pad.
        unsafe {
            let done = ptx::atom_add_acq_rel_gpu_u32(own_pad.add(BLOCKS_DONE), 1);
            if done + 1 == ptx::grid_dim_x() {
                ptx::st_relaxed_sys_u32(own_pad.add(BLOCKS_DONE), 0);
                ptx::st_relaxed_sys_u32(own_pad.add(CALL_COUNTER), epoch);
            }
        }
    }
}

/// Explicit barrier among the ranks of `rank_mask`, counted per pair of
/// ranks so that barriers over different subsets never confuse each other
/// (both ranks of a pair count the barriers they share). One block;
/// thread `t` handles peer `t`.
///
/// # Safety
/// `pads` must hold the mapped signal pads of every rank in `rank_mask`.
#[inline(always)]
pub unsafe fn pair_barrier(
    pads: &[u64; MAX_RANKS],
    rank_mask: u32,
    rank: u32,
    timeout_ns: u64,
    to: ReportTo,
) {
    use crate::layout::{PAIR_COUNTER, SLOT_EXPLICIT};
    let t = ptx::thread_idx_x();
    if (t as usize) < MAX_RANKS && (rank_mask >> t) & 1 == 1 {
        let own_pad = pick(pads, rank) as *mut u32;
        let peer_pad = pick(pads, t) as *mut u32;
        // SAFETY: the pads are mapped; indices are inside the layout.
        unsafe {
            let epoch =
                ptx::ld_relaxed_sys_u32(own_pad.add(PAIR_COUNTER + t as usize)).wrapping_add(1);
            ptx::fence_acq_rel_sys();
            ptx::st_release_sys_u32(
                peer_pad.add(flag_index(SLOT_EXPLICIT, 0, rank as usize)),
                epoch,
            );
            let waited = wait_epoch(
                own_pad.add(flag_index(SLOT_EXPLICIT, 0, t as usize)),
                epoch,
                timeout_ns,
                to.abort,
            );
            if let Wait::TimedOut(()) = waited {
                report(to, t, 0, SLOT_EXPLICIT as u32, rank);
            }
            ptx::st_relaxed_sys_u32(own_pad.add(PAIR_COUNTER + t as usize), epoch);
        }
    }
}
