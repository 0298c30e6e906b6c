//! Typed launches of the benchmark's timing kernels
//! (`crates/test-kernels-gpu/src/timing.rs`): a `%globaltimer` stamp per
//! call, a spin of a given length, the poll-storm probe behind NOTE
//! [abandoned waits] in `kernels-gpu/src/sync.rs`, and the ping-pong probe
//! (one NVLink hop as a Lamport wait sees it).

use cudarc::driver::{CudaStream, DevicePtrMut};
use intranode_kernels_gpu::layout::{
    AllReduceParams, MAX_RANKS, PingPongParams, PollStormParams, StoreExitParams,
};

use super::launch::Grid;
use super::{TestKernel, TestKernelModule};
use crate::error::{Error, Result};

/// One warp: the stamp and the spin are one thread's work.
const ONE_WARP: Grid = Grid {
    blocks: 1,
    threads: 32,
    shared_bytes: 0,
};

impl TestKernelModule {
    /// Enqueues a stamp: `%globaltimer` in nanoseconds appended to `log`
    /// once the stream gets there. `log[0]` counts the stamps (zero it
    /// first), `log[1..]` holds them; stamps past its end are counted but
    /// not stored.
    pub fn stamp(&self, stream: &CudaStream, log: &mut impl DevicePtrMut<u64>) -> Result<()> {
        let Some(cap) = log.len().checked_sub(1) else {
            return Err(Error::InvalidArgument(
                "stamp: the log needs a word for its count".into(),
            ));
        };
        let (ptr, _guard) = log.device_ptr_mut(stream);
        // SAFETY: `ptr` holds `cap + 1` words, kept alive and ordered by
        // the guard.
        unsafe { self.stamp_raw(stream, ptr, cap as u64) }
    }

    /// [`stamp`](Self::stamp) on a raw log address: no event tracking, so
    /// a graph captured with cudarc's tracking on can hold it.
    ///
    /// # Safety
    /// `log` must be device memory of `cap + 1` u64, valid and written by
    /// nothing else until the stream passes the stamp.
    pub unsafe fn stamp_raw(&self, stream: &CudaStream, log: u64, cap: u64) -> Result<()> {
        // SAFETY: `timing_stamp(log: *mut u64, cap: u64)` with `log`
        // holding `cap + 1` words (caller's promise).
        unsafe { self.launch(TestKernel::TimingStamp, ONE_WARP, stream, (log, cap)) }
    }

    /// Enqueues a kernel that holds the stream for `ns` nanoseconds.
    pub fn spin(&self, stream: &CudaStream, ns: u64) -> Result<()> {
        // SAFETY: `timing_spin(ns: u64)` touches no memory.
        unsafe { self.launch(TestKernel::TimingSpin, ONE_WARP, stream, (ns,)) }
    }

    /// Enqueues a "hog": `blocks` blocks of `threads` threads that each
    /// spin `ns` nanoseconds, holding the SMs they land on the way other
    /// work (a GEMM on another stream, another process) holds them while
    /// a collective starts.
    pub fn hog(&self, stream: &CudaStream, ns: u64, blocks: u32, threads: u32) -> Result<()> {
        let grid = Grid {
            blocks: blocks.max(1),
            threads: threads.clamp(32, 1024),
            shared_bytes: 0,
        };
        // SAFETY: `timing_spin(ns: u64)` touches no memory, whatever the
        // grid.
        unsafe { self.launch(TestKernel::TimingSpin, grid, stream, (ns,)) }
    }

    /// Enqueues the poll-storm probe: `lag_ns.len()` threads in blocks of
    /// `block_threads` each wait `wait_ns` while polling the word at
    /// `word` as the collectives' waits poll their abort word, and write
    /// how late they got out.
    ///
    /// # Safety
    /// `word` must be a device address of a u32 that stays valid until the
    /// stream passes the kernel: device memory of this context, or
    /// page-locked host memory mapped into it.
    pub unsafe fn poll_storm(
        &self,
        stream: &CudaStream,
        word: u64,
        wait_ns: u64,
        lag_ns: &mut impl DevicePtrMut<u64>,
        block_threads: u32,
    ) -> Result<()> {
        let threads = lag_ns.len();
        if block_threads == 0 || threads == 0 || !threads.is_multiple_of(block_threads as usize) {
            return Err(Error::InvalidArgument(format!(
                "poll_storm: {threads} threads do not make whole blocks of {block_threads}"
            )));
        }
        let blocks = u32::try_from(threads / block_threads as usize).map_err(|_| {
            Error::InvalidArgument(format!("poll_storm: {threads} threads is too many"))
        })?;
        let (lag_ptr, _guard) = lag_ns.device_ptr_mut(stream);
        let p = PollStormParams {
            word,
            lag_ns: lag_ptr,
            wait_ns,
        };
        let grid = Grid {
            blocks,
            threads: block_threads,
            shared_bytes: 0,
        };
        // SAFETY: `probe_poll_storm(p: PollStormParams)`: one lag per
        // thread (the grid is exactly `threads`), `word` valid (caller's
        // promise).
        unsafe { self.launch(TestKernel::PollStorm, grid, stream, (p,)) }
    }

    /// Enqueues one side of the ping-pong probe (`probe_ping_pong`): one
    /// thread passes a counter `p.warmup + p.iters` times through
    /// `p.own_word` and `p.peer_word` with the partner rank, which
    /// enqueues the other side at about the same time; the leader writes
    /// the timed nanoseconds and the count of round trips to `p.out`.
    ///
    /// # Safety
    /// `p.own_word` must be a u32 of this context's device memory,
    /// `p.peer_word` a u32 of the partner's memory mapped into this
    /// context, `p.out` two u64 of this context's device memory; all stay
    /// valid until the stream passes the kernel, and nothing else writes
    /// the two words meanwhile.
    pub unsafe fn ping_pong(&self, stream: &CudaStream, p: PingPongParams) -> Result<()> {
        // SAFETY: `probe_ping_pong(p: PingPongParams)`, one thread's work;
        // the addresses are the caller's promise.
        unsafe { self.launch(TestKernel::PingPong, ONE_WARP, stream, (p,)) }
    }

    /// Enqueues `probe_store_exit`: one thread per address of `dst` stores
    /// a 16-byte vector of `value` there, then the kernel ends.
    ///
    /// # Safety
    /// Every address of `dst` must be 16-byte aligned memory of this
    /// context's device or of a peer's mapped into it, valid until the
    /// stream passes the kernel, that nothing else accesses meanwhile.
    pub unsafe fn store_exit(&self, stream: &CudaStream, dst: &[u64], value: u32) -> Result<()> {
        if dst.len() > MAX_RANKS {
            return Err(Error::InvalidArgument(format!(
                "store_exit: {} addresses, at most {MAX_RANKS}",
                dst.len()
            )));
        }
        let mut p = StoreExitParams {
            count: dst.len() as u32,
            value,
            ..StoreExitParams::default()
        };
        p.dst[..dst.len()].copy_from_slice(dst);
        // SAFETY: `probe_store_exit(p: StoreExitParams)`: one store per
        // address, `count` of them, each valid (caller's promise).
        unsafe { self.launch(TestKernel::StoreExit, ONE_WARP, stream, (p,)) }
    }

    /// Enqueues the phase probe of the Lamport one-shot or two-shot
    /// (`probe_lamport{,_two_shot}_phases_w<world>`, bf16 sum) with the parameter
    /// block and grid of a real call (`IntraNodeComm::lamport_probe_launch`):
    /// each block stamps `layout::PHASES` `%globaltimer` values into
    /// `stamps` (`stamps[block * PHASES + phase]`).
    ///
    /// # Safety
    /// `params`, `blocks` and `threads` must come from
    /// `IntraNodeComm::lamport_probe_launch` with the same form on a
    /// communicator of `world` ranks, whose buffers and the call's input
    /// and output stay valid until the stream passes the kernel, with
    /// every rank launching its probe of the same call; `stamps` must be
    /// `blocks * PHASES` u64 of this context's device memory.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn lamport_phases(
        &self,
        stream: &CudaStream,
        two_shot: bool,
        world: usize,
        params: AllReduceParams,
        blocks: u32,
        threads: u32,
        stamps: u64,
    ) -> Result<()> {
        let kernel = TestKernel::phases(two_shot, world).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "lamport_phases: no phase probe for {world} ranks (built for {:?})",
                TestKernel::PHASE_WORLDS
            ))
        })?;
        let grid = Grid {
            blocks,
            threads,
            shared_bytes: 0,
        };
        // SAFETY: `probe_lamport{,_two_shot}_phases_w<n>(p: AllReduceParams,
        // stamps: *mut u64)`; the call's parameters, grid and stamps are
        // the caller's promise.
        unsafe { self.launch(kernel, grid, stream, (params, stamps)) }
    }
}
