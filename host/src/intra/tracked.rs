//! The device addresses of a collective's buffers, with cudarc's event
//! tracking honoured eagerly and inside CUDA-graph capture.
//!
//! NOTE [capture and event tracking]: once a context has a second stream,
//! cudarc tracks every buffer with a read and a write event:
//! `device_ptr(stream)` makes `stream` wait on the buffer's last write
//! (and `device_ptr_mut` on its last read too), and dropping the returned
//! guard records the use on `stream`. Eagerly that is what we want: a
//! buffer written on another stream is waited for. Inside a capture it
//! breaks the common case: a buffer written before the capture (uploaded,
//! zeroed, or left by the last step) has its events recorded outside the
//! capture, and CUDA refuses a captured wait on such an event
//! (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`), which also invalidates the
//! capture. So while the stream captures:
//!
//! 1. the buffer's pointer is taken on a side stream of the communicator
//!    that never captures: cudarc's waits happen there, outside the
//!    capture, where they are legal;
//! 2. if those writes are still running (the side stream is not idle),
//!    its position is recorded into an event and the captured stream waits
//!    on it as an *external* event (`CU_EVENT_WAIT_EXTERNAL`): the graph
//!    gets a node that, at every replay, waits until those earlier writes
//!    are done (at once, after the first). Writes already done need no
//!    node, so the graph is the one an untracked capture makes;
//! 3. the use is recorded nowhere: not on the side stream (that would
//!    claim it done before the graph even runs), and not in the capture (an
//!    event last recorded in a capture cannot be waited on eagerly
//!    afterwards, `CUDA_ERROR_CAPTURED_EVENT`, so every eager use of the
//!    buffer after the capture would fail). So order what comes after a
//!    replay with the stream, as graphs need anyway: a later tracked
//!    launch inside the same capture that uses a buffer last written
//!    before it meets cudarc's own limit (isolation), ours or not.
//!
//! A buffer whose events were last recorded inside a capture (written by
//! an earlier captured kernel) makes the side stream's wait fail with
//! `CUDA_ERROR_CAPTURED_EVENT`, harmlessly (the side stream is not
//! capturing); then the normal path is legal and taken. One case remains
//! that no choice of stream fixes: a buffer written with one event last
//! recorded inside the capture and the other outside it. That call fails
//! with [`Error::Capture`], saying what to do.

use std::sync::Arc;

use cudarc::driver::sys::{
    self, CUevent_wait_flags, CUresult, CUstreamCaptureMode, CUstreamCaptureStatus, cudaError_enum,
};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, DriverError,
    SyncOnDrop, result,
};

use crate::error::{DriverContext, Error, Result};

/// What the side stream of a capture holds: the stream, and the event its
/// position is recorded into for the captured stream's external wait.
#[derive(Debug)]
pub(crate) struct CaptureSide {
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) event: CudaEvent,
}

impl CaptureSide {
    pub(crate) fn new(ctx: &Arc<CudaContext>, device: usize) -> Result<Self> {
        Ok(CaptureSide {
            stream: ctx
                .new_stream()
                .ctx("cuStreamCreate (capture side stream)", Some(device))?,
            event: ctx
                .new_event(None)
                .ctx("cuEventCreate (capture side event)", Some(device))?,
        })
    }
}

/// The buffers of one collective call on `stream`: take each one's
/// address with [`input`](Self::input) / [`output`](Self::output), call
/// [`ready`](Self::ready) right before the launch and
/// [`finish`](Self::finish) right after it.
pub(crate) struct CallBuffers<'a> {
    ctx: &'a Arc<CudaContext>,
    stream: &'a CudaStream,
    device: usize,
    rank: usize,
    /// Set while `stream` captures with cudarc tracking events.
    side: Option<&'a CaptureSide>,
    /// cudarc's guards of the buffers taken on `stream`: a fixed array,
    /// since the call path must not allocate (a call takes at most
    /// [`MAX_BUFFERS`]).
    guards: [Option<SyncOnDrop<'a>>; MAX_BUFFERS],
    external_wait: bool,
}

/// Buffers of one call at most (the residual + RMSNorm takes four, and a
/// fifth where it prefetches a region into L2).
const MAX_BUFFERS: usize = 5;

/// An error cudarc kept in the context, taken out and named.
fn take_stored(ctx: &CudaContext, op: &'static str, device: usize) -> Result<()> {
    ctx.check_err().ctx(op, Some(device))
}

fn is(e: &DriverError, code: cudaError_enum) -> bool {
    e.0 == code
}

impl<'a> CallBuffers<'a> {
    /// `side` gives the communicator's capture side stream; it is asked
    /// for only when `stream` captures.
    pub(crate) fn new(
        ctx: &'a Arc<CudaContext>,
        stream: &'a CudaStream,
        device: usize,
        rank: usize,
        side: impl FnOnce() -> Result<&'a CaptureSide>,
    ) -> Result<Self> {
        // An error cudarc kept from an earlier call would otherwise surface
        // under the name of whatever driver call comes next.
        take_stored(
            ctx,
            "an earlier CUDA call made through cudarc (cudarc keeps such errors in the context)",
            device,
        )?;
        let capturing = ctx.is_managing_stream_synchronization()
            && stream
                .capture_status()
                .ctx("cuStreamIsCapturing", Some(device))?
                == CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
        Ok(CallBuffers {
            ctx,
            stream,
            device,
            rank,
            side: if capturing { Some(side()?) } else { None },
            guards: [const { None }; MAX_BUFFERS],
            external_wait: false,
        })
    }

    /// The address of a buffer the call reads (`what` names it in errors).
    pub(crate) fn input<T>(&mut self, buf: &'a impl DevicePtr<T>, what: &str) -> Result<u64> {
        if let Some(side) = self.side {
            let (ptr, guard) = buf.device_ptr(&side.stream);
            if self.on_side(guard)? {
                return Ok(ptr);
            }
        }
        let (ptr, guard) = buf.device_ptr(self.stream);
        self.on_stream(ptr, guard, what)
    }

    /// The address of a buffer the call writes (and may read).
    pub(crate) fn output<T>(
        &mut self,
        buf: &'a mut impl DevicePtrMut<T>,
        what: &str,
    ) -> Result<u64> {
        if let Some(side) = self.side {
            let (ptr, guard) = buf.device_ptr_mut(&side.stream);
            if self.on_side(guard)? {
                return Ok(ptr);
            }
        }
        let (ptr, guard) = buf.device_ptr_mut(self.stream);
        self.on_stream(ptr, guard, what)
    }

    /// [`input`](Self::input) as a view for cudarc's NCCL calls (NOTE
    /// [nccl under capture]).
    pub(crate) fn input_view<T>(
        &mut self,
        buf: &'a impl DevicePtr<T>,
        what: &str,
        stream: &Arc<CudaStream>,
    ) -> Result<Ordered<T>> {
        let ptr = self.input(buf, what)?;
        // SAFETY: `ptr` is `buf`'s address, `buf.len()` elements, borrowed
        // for `'a` and ordered with the stream by `self`.
        Ok(unsafe { Ordered::new(ptr, buf.len(), stream) })
    }

    /// [`output`](Self::output) as a view for cudarc's NCCL calls.
    pub(crate) fn output_view<T>(
        &mut self,
        buf: &'a mut impl DevicePtrMut<T>,
        what: &str,
        stream: &Arc<CudaStream>,
    ) -> Result<Ordered<T>> {
        let len = buf.len();
        let ptr = self.output(buf, what)?;
        // SAFETY: as in `input_view`; `buf` is borrowed mutably for `'a`,
        // so the view is its only user.
        Ok(unsafe { Ordered::new(ptr, len, stream) })
    }

    /// Step 1 of NOTE [capture and event tracking] for the guard of a
    /// pointer taken on the side stream: `true` when the side stream's
    /// waits held (step 2 then covers them), `false` when the buffer's
    /// events were last recorded inside a capture (take it on the stream
    /// instead).
    fn on_side(&mut self, guard: SyncOnDrop<'_>) -> Result<bool> {
        // Step 3: no record of this use, neither on the side stream (it
        // would claim the use done before the graph runs) nor in the
        // capture (an event recorded there cannot be waited on eagerly
        // afterwards).
        std::mem::forget(guard);
        match self.ctx.check_err() {
            Ok(()) => {
                self.external_wait = true;
                Ok(true)
            }
            Err(e) if is(&e, cudaError_enum::CUDA_ERROR_CAPTURED_EVENT) => Ok(false),
            Err(source) => Err(Error::Driver {
                op: "cuStreamWaitEvent (cudarc's wait for the buffer's last use, on the capture side stream)",
                device: Some(self.device),
                source,
            }),
        }
    }

    fn on_stream(&mut self, ptr: u64, guard: SyncOnDrop<'a>, what: &str) -> Result<u64> {
        match self.guards.iter_mut().find(|g| g.is_none()) {
            Some(slot) => *slot = Some(guard),
            None => {
                return Err(Error::InvalidArgument(format!(
                    "rank {}: a call takes at most {MAX_BUFFERS} buffers ({what} is one more)",
                    self.rank
                )));
            }
        }
        match self.ctx.check_err() {
            Ok(()) => Ok(ptr),
            Err(e) if is(&e, cudaError_enum::CUDA_ERROR_STREAM_CAPTURE_ISOLATION) => {
                Err(Error::Capture {
                    rank: self.rank,
                    detail: format!(
                        "the {what} was used both before this CUDA-graph capture and inside it, on another stream: cudarc's event tracking needs the captured stream to wait on a use outside the capture, which CUDA forbids (CUDA_ERROR_STREAM_CAPTURE_ISOLATION) and which has ended the capture. Synchronize the stream that last used it before capturing and use it inside the capture on the communicator's stream only, or give the capture its own buffer"
                    ),
                })
            }
            Err(source) => Err(Error::Driver {
                op: "cuStreamWaitEvent (cudarc's wait for the buffer's last use on another stream)",
                device: Some(self.device),
                source,
            }),
        }
    }

    /// Right before the launch: step 2, the captured stream's external
    /// wait for the side stream.
    pub(crate) fn ready(&mut self) -> Result<()> {
        let Some(side) = self.side.filter(|_| self.external_wait) else {
            return Ok(());
        };
        // Most often the writes waited for finished long ago (an upload,
        // a zero fill): then the graph needs no node for them. A query is
        // one of the calls a thread capturing in global or thread-local
        // mode may not make (it would end the capture), so this thread
        // asks it in relaxed mode, as PyTorch's caching allocator does.
        let mut mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: exchanges this thread's capture mode; restored below.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }
            .result()
            .ctx("cuThreadExchangeStreamCaptureMode", Some(self.device))?;
        // SAFETY: a live stream of this context, not capturing.
        let idle = unsafe { sys::cuStreamQuery(side.stream.cu_stream()) };
        // SAFETY: puts back the mode the exchange above returned.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }
            .result()
            .ctx("cuThreadExchangeStreamCaptureMode", Some(self.device))?;
        match idle {
            CUresult::CUDA_SUCCESS => return Ok(()),
            CUresult::CUDA_ERROR_NOT_READY => {}
            e => {
                return Err(Error::Driver {
                    op: "cuStreamQuery (capture side stream)",
                    device: Some(self.device),
                    source: DriverError(e),
                });
            }
        }
        side.event
            .record(&side.stream)
            .ctx("cuEventRecord (capture side stream)", Some(self.device))?;
        // SAFETY: both handles are live (the stream and the event belong
        // to `self`'s borrows); the flag is legal on a capturing stream.
        unsafe {
            result::stream::wait_event(
                self.stream.cu_stream(),
                side.event.cu_event(),
                CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL,
            )
        }
        .ctx(
            "cuStreamWaitEvent (external, for writes before the capture)",
            Some(self.device),
        )
    }

    /// Right after the launch: records the uses on the stream (cudarc's
    /// guards; none on the capture path) and reports an error cudarc kept
    /// while doing so.
    pub(crate) fn finish(self) -> Result<()> {
        let CallBuffers {
            ctx,
            device,
            guards,
            ..
        } = self;
        drop(guards);
        take_stored(
            ctx,
            "cuEventRecord (cudarc's record of the buffer's use, at guard drop)",
            device,
        )
    }
}

// NOTE [nccl under capture]: cudarc's NCCL calls take their buffers'
// addresses with `device_ptr(stream)`, so under event tracking a call
// captured into a CUDA graph waits on events recorded before the capture,
// which CUDA refuses (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, seen on an
// H100 with the decode benchmark). The communicator takes the addresses
// through `CallBuffers` instead, as for its own kernels, and hands NCCL
// [`Ordered`] views of them: their guards do nothing, since `CallBuffers`
// already ordered the buffers with the stream and records their use.

/// A device buffer's address and length, already ordered with `stream` by
/// a [`CallBuffers`]: what cudarc's NCCL calls take in its place (NOTE
/// [nccl under capture]).
#[derive(Debug)]
pub(crate) struct Ordered<T> {
    ptr: u64,
    len: usize,
    stream: Arc<CudaStream>,
    _elem: std::marker::PhantomData<T>,
}

impl<T> Ordered<T> {
    /// # Safety
    /// `ptr` must be device memory of `len` elements of `T`, live and
    /// ordered with `stream` (by a [`CallBuffers`]) until the work
    /// enqueued with the view is done.
    pub(crate) unsafe fn new(ptr: u64, len: usize, stream: &Arc<CudaStream>) -> Self {
        Ordered {
            ptr,
            len,
            stream: stream.clone(),
            _elem: std::marker::PhantomData,
        }
    }
}

impl<T> DeviceSlice<T> for Ordered<T> {
    fn len(&self) -> usize {
        self.len
    }

    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T> DevicePtr<T> for Ordered<T> {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

impl<T> DevicePtrMut<T> for Ordered<T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        _stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}
