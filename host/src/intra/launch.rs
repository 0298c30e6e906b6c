//! How a call of ours reaches the GPU, one path for every collective:
//! the caller's buffers taken ([`IntraNodeComm::with_buffers`], over
//! `tracked::CallBuffers`), the checks every call makes, the collective's
//! own [`Launch`], then the launch ([`IntraNodeComm::run`]), refused past
//! the blocks this rank may hold resident. The grids themselves come from
//! `launch_shape.rs`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cudarc::driver::CudaStream;

use super::IntraNodeComm;
use super::tracked::{CallBuffers, CaptureSide};
use crate::error::{Error, Result};
use crate::kernels::{Grid, KernelArgs, KernelKey};

/// One launch of a collective of ours, decided: the kernel (typed by the
/// arguments it takes, from the table in `kernels-gpu/src/entries.rs`),
/// the grid, and the arguments. Built once per call by the collective's
/// own builder (the all-reduce's `launch_of`; the ones in
/// `broadcast_raw`, `scatter_gather_raw`,
/// `all_reduce_residual_rmsnorm_raw`, `barrier`), enqueued by
/// [`IntraNodeComm::run`] / [`IntraNodeComm::launch`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Launch<A> {
    pub(crate) key: KernelKey<A>,
    pub(crate) grid: Grid,
    pub(crate) args: A,
}

impl IntraNodeComm {
    /// The buffers of one call on `stream` (NOTE [capture and event
    /// tracking] in `tracked.rs`).
    pub(crate) fn call_buffers<'a>(
        &'a self,
        stream: &'a Arc<CudaStream>,
    ) -> Result<CallBuffers<'a>> {
        CallBuffers::new(&self.ctx, stream, self.device, self.rank, || {
            if let Some(side) = self.capture_side.get() {
                return Ok(side);
            }
            let side = CaptureSide::new(&self.ctx, self.device)?;
            // Another thread may have won the race: either side will do.
            let _ = self.capture_side.set(side);
            self.capture_side.get().ok_or_else(|| {
                Error::InvalidArgument("the capture side stream could not be kept".into())
            })
        })
    }

    /// The one path of a call of ours over a caller's buffers: `take`
    /// registers them with the call's [`CallBuffers`] (NOTE
    /// [capture and event tracking] in `tracked.rs`) and returns their addresses,
    /// `run` enqueues the call on them (usually through
    /// [`run`](Self::run): checks, launch, `Work`), then the buffers'
    /// uses are recorded.
    pub(crate) fn with_buffers<'a, P>(
        &'a self,
        stream: &'a Arc<CudaStream>,
        take: impl FnOnce(&mut CallBuffers<'a>) -> Result<P>,
        run: impl FnOnce(P) -> Result<crate::work::Work>,
    ) -> Result<crate::work::Work> {
        let mut bufs = self.call_buffers(stream)?;
        let addresses = take(&mut bufs)?;
        bufs.ready()?;
        let work = run(addresses)?;
        bufs.finish()?;
        Ok(work)
    }
    /// The one path from a decided call of ours to its [`Work`]: the
    /// checks every call makes ([`check_call`](Self::check_call), named
    /// `what`), then `build` (the collective's own checks and its
    /// [`Launch`], `None` for an empty call), then the launch.
    ///
    /// # Safety
    /// As for [`launch`](Self::launch), for what `build` returns.
    pub(crate) unsafe fn run<A: KernelArgs>(
        &self,
        what: &str,
        stream: &Arc<CudaStream>,
        build: impl FnOnce() -> Result<Option<Launch<A>>>,
    ) -> Result<crate::work::Work> {
        self.check_call(what, stream)?;
        let launch = build()?;
        // SAFETY: forwarded from the caller.
        unsafe { self.launch(launch, stream) }
    }

    /// Enqueues `launch` on `stream` (nothing for `None`: an empty call)
    /// and returns the call's [`Work`](crate::work::Work): the one launch
    /// of every collective of ours.
    ///
    /// # Safety
    /// The arguments hold what the kernel expects (live device addresses
    /// of this comm's device, valid until the stream passes the kernel;
    /// lengths within the kernel's limits) and the grid suits it.
    pub(crate) unsafe fn launch<A: KernelArgs>(
        &self,
        launch: Option<Launch<A>>,
        stream: &Arc<CudaStream>,
    ) -> Result<crate::work::Work> {
        if let Some(l) = launch {
            // Every builder sizes its grid within the cap (NOTE
            // [co-residency]); one that did not would deadlock ranks
            // sharing a GPU, so it is refused here, loudly, not launched.
            if l.grid.blocks as usize > self.residency.max_blocks() {
                return Err(Error::InvalidArgument(format!(
                    "rank {}: a launch of {} blocks exceeds the {} this rank may hold resident ({} ranks share its GPU); this is a bug in intranode",
                    self.rank,
                    l.grid.blocks,
                    self.residency.max_blocks(),
                    self.residency.ranks_per_gpu
                )));
            }
            // SAFETY: forwarded from the caller.
            unsafe { self.kernels.launch(l.key, l.grid, stream, l.args) }?;
        }
        Ok(crate::work::Work::new(
            stream.clone(),
            Some(self.health_arc()),
        ))
    }

    /// Counts one use (each collective calls it once); returns the new
    /// count.
    pub(crate) fn increment_usage_counter(&self) -> u64 {
        self.usage_counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// What every collective checks before it enqueues anything: no
    /// earlier wait of this communicator ran out, and `stream` belongs to
    /// its device. `what` names the call in the error.
    pub(crate) fn check_call(&self, what: &str, stream: &CudaStream) -> Result<()> {
        self.health.check()?;
        if stream.context().ordinal() != self.device {
            return Err(Error::InvalidArgument(format!(
                "{what} on rank {}: stream is on device {}, the communicator on device {}",
                self.rank,
                stream.context().ordinal(),
                self.device
            )));
        }
        Ok(())
    }
}
