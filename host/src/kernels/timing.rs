//! Typed launches of the benchmark's timing kernels
//! (`kernels-gpu/src/timing.rs`): a `%globaltimer` stamp per call, a spin
//! of a given length, and the poll-storm probe behind NOTE [abandoned
//! waits] in `kernels-gpu/src/sync.rs`.

use std::ffi::c_void;

use cudarc::driver::{CudaStream, DevicePtrMut};
use kernels_gpu::layout::PollStormParams;

use super::KernelModule;
use crate::driver_ext;
use crate::error::{DriverContext, Error, Result};

impl KernelModule {
    /// # Safety
    /// `params` must be exactly the arguments of kernel `name`, and what
    /// they point to must stay valid until the stream passes the kernel.
    unsafe fn launch_one(
        &self,
        name: &'static str,
        what: &'static str,
        grid: u32,
        block: u32,
        stream: &CudaStream,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let f = self.function(name)?;
        self.bind()?;
        // SAFETY: forwarded from the caller.
        unsafe { driver_ext::launch(f, grid, block, 0, stream.cu_stream(), params) }
            .ctx(what, Some(self.context().ordinal()))
    }

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
        let (mut ptr, mut cap) = (log, cap);
        let mut params: [*mut c_void; 2] = [
            (&mut ptr) as *mut _ as *mut c_void,
            (&mut cap) as *mut _ as *mut c_void,
        ];
        // SAFETY: `timing_stamp(log: *mut u64, cap: u64)` with `log`
        // holding `cap + 1` words (caller's promise).
        unsafe {
            self.launch_one(
                "timing_stamp",
                "cuLaunchKernel(timing_stamp)",
                1,
                32,
                stream,
                &mut params,
            )
        }
    }

    /// Enqueues a kernel that holds the stream for `ns` nanoseconds.
    pub fn spin(&self, stream: &CudaStream, ns: u64) -> Result<()> {
        let mut ns = ns;
        let mut params: [*mut c_void; 1] = [(&mut ns) as *mut _ as *mut c_void];
        // SAFETY: `timing_spin(ns: u64)` touches no memory.
        unsafe {
            self.launch_one(
                "timing_spin",
                "cuLaunchKernel(timing_spin)",
                1,
                32,
                stream,
                &mut params,
            )
        }
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
        let mut p = PollStormParams {
            word,
            lag_ns: lag_ptr,
            wait_ns,
        };
        let mut params: [*mut c_void; 1] = [(&mut p) as *mut _ as *mut c_void];
        // SAFETY: `probe_poll_storm(p: PollStormParams)`: one lag per
        // thread (the grid is exactly `threads`), `word` valid (caller's
        // promise).
        unsafe {
            self.launch_one(
                "probe_poll_storm",
                "cuLaunchKernel(probe_poll_storm)",
                blocks,
                block_threads,
                stream,
                &mut params,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn timing_kernels_are_in_the_ptx() {
        let names = super::super::entry_names(super::super::PTX);
        for k in ["timing_stamp", "timing_spin", "probe_poll_storm"] {
            assert!(names.contains(&k), "{k}");
        }
    }
}
