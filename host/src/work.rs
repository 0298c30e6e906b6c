//! [`Work`]: the handle a collective returns.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;

use crate::driver_ext;
use crate::error::{DriverContext, Result};
use crate::health::HostErrorWord;

/// How long [`Work::synchronize`] polls with `yield_now` between queries
/// before it sleeps [`POLL_SLEEP`] between them: about what the driver's
/// own spin-then-yield synchronize spends on a short collective.
const POLL_SPIN: Duration = Duration::from_millis(2);

/// Pause between queries of a long wait: how late, at most, a failed wait
/// is reported after the GPU wrote it.
const POLL_SLEEP: Duration = Duration::from_micros(50);

/// A collective enqueued on a stream (seed: `Work`). The collective runs in
/// the stream's order, so the stream it ran on needs no waiting; another
/// stream waits with [`Work::wait_on`]. [`Work::synchronize`] also reports
/// a wait on a peer that ran out.
///
/// # Example
///
/// All-reduce on the communicator's stream, consume the result on
/// another one:
///
/// ```no_run
/// # use intranode::{Communicator, dist_env::DistEnv};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let env = DistEnv::from_env()?;
/// # let store = intranode::store::connect_env(&env)?;
/// # let stream = intranode::gpu::context(env.local_rank)?.new_stream()?;
/// # let comm = Communicator::new(stream.clone(), store, env.rank, env.world_size)?;
/// use cudarc::nccl::ReduceOp;
///
/// let mut grads = stream.alloc_zeros::<f32>(1 << 20)?;
/// let work = comm.all_reduce_in_place(&mut grads, &ReduceOp::Sum)?;
/// let optimizer = stream.context().new_stream()?;
/// work.wait_on(&optimizer)?; // `optimizer` now runs after the all-reduce
/// // ... launch the optimizer step on `optimizer` ...
/// work.synchronize()?; // or block the host, reporting a peer that never came
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Work {
    stream: Arc<CudaStream>,
    /// Where the communicator's kernels report failed waits (none for a
    /// group without the intra-node path).
    health: Option<Arc<HostErrorWord>>,
}

impl Work {
    pub(crate) fn new(stream: Arc<CudaStream>, health: Option<Arc<HostErrorWord>>) -> Self {
        Work { stream, health }
    }

    /// The stream the collective was enqueued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Makes `other` wait for the collective: an event is recorded on the
    /// collective's stream now (so it also covers work enqueued there
    /// since) and `other` waits on it. A no-op when `other` is that stream.
    pub fn wait_on(&self, other: &CudaStream) -> Result<()> {
        if other.cu_stream() == self.stream.cu_stream() {
            return Ok(());
        }
        let device = Some(self.stream.context().ordinal());
        let event = self
            .stream
            .record_event(None)
            .ctx("cuEventRecord", device)?;
        other.wait(&event).ctx("cuStreamWaitEvent", device)
    }

    /// Blocks the host until the collective (and everything before it on
    /// its stream) finished, then reports a wait on a peer that ran out
    /// ([`crate::Error::PeerTimeout`]: this collective's or an earlier
    /// one's; the communicator is unusable after it).
    ///
    /// A wait that ran out is reported as soon as the GPU writes it, not
    /// when the stream has drained: the calls still queued behind it then
    /// end without waiting, on their own.
    // NOTE [early report].
    pub fn synchronize(&self) -> Result<()> {
        let device = Some(self.stream.context().ordinal());
        let Some(health) = &self.health else {
            return self.stream.synchronize().ctx("cuStreamSynchronize", device);
        };
        // NOTE [early report]: the bound of a wait on a peer
        // holds on the GPU from the moment that wait began, but the stream
        // only drains after every call queued behind the failed one has
        // given up too (each wait of each of them checks the abort word
        // after 100 us, NOTE [abandoned waits]): for a 1 GB message in
        // hundreds of chunks, or many queued calls, that tail grows with
        // the size. So the host polls the stream and the error word
        // together and reports the error as soon as it is written: within
        // the bound plus a poll interval whatever the size.
        self.stream
            .context()
            .bind_to_thread()
            .ctx("cuCtxSetCurrent", device)?;
        let started = Instant::now();
        loop {
            // SAFETY: a live stream of the current context (`self` holds
            // it). A capturing stream is refused by the driver, as
            // cuStreamSynchronize refused it.
            if unsafe { driver_ext::stream_query(self.stream.cu_stream()) }
                .ctx("cuStreamQuery", device)?
            {
                return health.check();
            }
            health.check()?;
            if started.elapsed() < POLL_SPIN {
                std::thread::yield_now();
            } else {
                std::thread::sleep(POLL_SLEEP);
            }
        }
    }
}
