//! The error type of the `intranode` crate.

use cudarc::driver::{CudaContext, DriverError};

/// Everything that can go wrong in the GPU entry points of the library.
///
/// `Debug` prints the message (which holds its causes), as `io::Error`
/// does, so `fn main() -> Result<(), intranode::Error>` reads like the
/// troubleshooting table. It converts from cudarc's `DriverError` and
/// `NcclError` (so `?` works on cudarc calls in the same function) and
/// into `NcclError` (for code written against `cudarc::nccl`; see
/// [`Error::last_message`] for what that loses).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `libcuda` could not be loaded: no NVIDIA driver on this machine.
    #[error("no CUDA driver: libcuda.so could not be loaded on this machine")]
    NoDriver,
    /// Fewer GPUs than the caller needs.
    #[error("{needed} GPU(s) needed, {found} found")]
    TooFewGpus {
        /// How many the caller needs.
        needed: usize,
        /// How many the driver reports.
        found: usize,
    },
    /// A CUDA driver call failed.
    #[error("{op} failed (device {device:?}): {source}")]
    Driver {
        /// The driver call (`"cuMemCreate"`, ...).
        op: &'static str,
        /// The device ordinal, where the call concerns one.
        device: Option<usize>,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// A kernel the library needs is not in the embedded PTX.
    #[error("kernel {name} is missing from the embedded PTX")]
    MissingKernel {
        /// The kernel's name.
        name: String,
    },
    /// The embedded kernel image could not be used (unpacking failed, or
    /// `INTRANODE_KERNEL_IMAGE=cubin` on a device without machine code).
    #[error("kernel image: {0}")]
    KernelImage(String),
    /// A setting (an environment switch, a tuning file) the library
    /// cannot use.
    #[error("configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    /// A buffer's length does not fit the call: `buffer` holds `elems`
    /// elements where the call needs `expected_elems` (`None`: more than
    /// `usize::MAX`), which follows from the other arguments as `rule`
    /// says (`"as many as send"`, `"world size 4 x send 3"`).
    #[error(
        "invalid argument: {op} on rank {rank}: {buffer} has {elems} elements, but must hold {rule} = {}",
        elems_text(*.expected_elems)
    )]
    BufferLength {
        /// The call (`"all_gather"`, ...).
        op: &'static str,
        /// The calling rank.
        rank: usize,
        /// Which buffer (`"recv"`, `"residual"`, ...).
        buffer: &'static str,
        /// Its length in elements.
        elems: usize,
        /// The length it must have (`None`: more than `usize::MAX`).
        expected_elems: Option<usize>,
        /// Why that length (`"world size 4 x send 3"`).
        rule: String,
    },
    /// A root or peer rank (`what`) outside the world of the call.
    #[error(
        "invalid argument: {op} on rank {rank}: {what} {value} is outside the world of {world}"
    )]
    RankOutOfWorld {
        /// The call.
        op: &'static str,
        /// The calling rank.
        rank: usize,
        /// `"root"` or `"peer"`.
        what: &'static str,
        /// As passed (an `i32` may be negative).
        value: i64,
        /// The world size.
        world: usize,
    },
    /// The root of a rooted call passed no buffer where only the root
    /// needs one (broadcast's send, reduce's recv).
    #[error(
        "invalid argument: {op} on rank {rank}: the root must pass a {buffer} buffer (got None)"
    )]
    MissingRootBuffer {
        /// The call.
        op: &'static str,
        /// The calling rank (the root).
        rank: usize,
        /// `"send"` or `"recv"`.
        buffer: &'static str,
    },
    /// The caller passed arguments the operation cannot accept, in a case
    /// the variants above do not name.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A key-value store operation of a rendezvous failed (a peer that
    /// never arrived shows up here as a store timeout).
    #[error("rank {rank}: store {op} failed: {source}")]
    Store {
        /// The store operation (`"get"`, `"barrier"`, ...).
        op: &'static str,
        /// The calling rank.
        rank: usize,
        /// The store's error.
        #[source]
        source: intranode_store::StoreError,
    },
    /// Passing file descriptors between the ranks failed. The source is
    /// an `intranode_ipc::IpcError` (`downcast_ref` reaches it); the
    /// variant holds it boxed so that this crate's API does not carry the
    /// type of a crate it uses only inside.
    #[error("file-descriptor exchange failed: {0}")]
    Ipc(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// Another rank failed a step of a collective set-up; every rank of
    /// the group reports the first failing rank, so none waits for it.
    #[error("rank {rank} failed during {phase}: {reason}")]
    PeerFailed {
        /// The first rank that failed.
        rank: usize,
        /// The set-up step it failed in.
        phase: &'static str,
        /// Its error, as text.
        reason: String,
    },
    /// A typed view of a symmetric buffer does not fit inside it.
    #[error(
        "buffer view out of bounds: rank {rank}, offset {offset_elems} + length {len_elems} \
         elements of {elem_bytes} bytes exceed the buffer of {buffer_bytes} bytes"
    )]
    OutOfBounds {
        /// The calling rank.
        rank: usize,
        /// The view's start, in elements.
        offset_elems: usize,
        /// The view's length, in elements.
        len_elems: usize,
        /// The size of one element.
        elem_bytes: usize,
        /// The buffer's size.
        buffer_bytes: usize,
    },
    // NOTE [abandoned waits] in `kernels-gpu/src/sync.rs`.
    /// A GPU wait on a peer ran out: the peer died, hung, skipped the
    /// call or took a different path. The communicator is unusable
    /// afterwards: every later call returns this error again; rebuild it.
    #[error(
        "rank {rank}: {form} waited {bound_ms} ms {phase} and peer rank {peer} never came (block {block}, slot {slot}); this communicator is unusable from now on: build a new one"
    )]
    PeerTimeout {
        /// The rank that waited.
        rank: usize,
        /// The peer it waited for.
        peer: usize,
        /// The GPU block that waited.
        block: u32,
        /// The signal slot it waited on.
        slot: u32,
        /// The collective that waited (`lamport`, `two-shot`, `barrier`...).
        form: &'static str,
        /// Where it waited.
        phase: &'static str,
        /// The bound (`INTRANODE_BARRIER_TIMEOUT_MS`).
        bound_ms: u64,
    },
    /// A CUDA-graph capture cannot hold this call: cudarc's event tracking
    /// would make the captured stream wait on work outside the capture.
    #[error("rank {rank}: {detail}")]
    Capture {
        /// The calling rank.
        rank: usize,
        /// What the capture cannot hold and what to do instead.
        detail: String,
    },
    // NOTE [call fingerprints] in `intra/debug.rs`.
    /// Ranks called a collective with different arguments (found by the
    /// call fingerprints of `INTRANODE_DEBUG=detail`); nothing was
    /// launched.
    #[error("rank {rank}: ranks disagree on a collective call (INTRANODE_DEBUG=detail): {detail}")]
    CallMismatch {
        /// The rank reporting.
        rank: usize,
        /// The disagreeing ranks and their calls.
        detail: String,
    },
    /// NCCL is needed for this call but could not be used.
    #[error("nccl unavailable: {0}")]
    NcclUnavailable(String),
    /// An NCCL call failed with NCCL's result `code` (match on it:
    /// `Error::Nccl { code: NcclCode::RemoteError, .. }`).
    #[error("nccl {op} failed on rank {rank}: {code}")]
    Nccl {
        /// The NCCL function (`"ncclAllReduce"`, `"ncclGroupEnd"`, ...).
        op: &'static str,
        /// The rank that made the call.
        rank: usize,
        /// NCCL's result code.
        code: NcclCode,
    },
    /// An NCCL call made outside this crate failed (converted from
    /// cudarc's `NcclError` by `?`).
    #[error("nccl call failed: {0}")]
    NcclResult(NcclCode),
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The messages already carry their sources' text.
        write!(f, "{self}")
    }
}

impl From<DriverError> for Error {
    fn from(source: DriverError) -> Self {
        Error::Driver {
            op: "a CUDA driver call",
            device: None,
            source,
        }
    }
}

impl From<cudarc::nccl::result::NcclError> for Error {
    fn from(e: cudarc::nccl::result::NcclError) -> Self {
        Error::NcclResult((&e).into())
    }
}

thread_local! {
    /// The message of the last [`Error`] this thread turned into an
    /// `NcclError`, which keeps only a code.
    static LAST_MESSAGE: std::cell::RefCell<Option<String>> =
        const { std::cell::RefCell::new(None) };
}

impl Error {
    /// The message of the last error this thread converted into cudarc's
    /// `NcclError` (by `?` or `into()`), which carries only a result code:
    /// the same role as NCCL's `ncclGetLastError`. The conversion also
    /// logs the message at `warn` through `tracing`.
    pub fn last_message() -> Option<String> {
        LAST_MESSAGE.with(|m| m.borrow().clone())
    }

    /// The NCCL result code closest to this error, for code that expects
    /// cudarc's `NcclError`.
    pub fn nccl_code(&self) -> NcclCode {
        match self {
            Error::Nccl { code, .. } | Error::NcclResult(code) => *code,
            Error::BufferLength { .. }
            | Error::RankOutOfWorld { .. }
            | Error::MissingRootBuffer { .. }
            | Error::InvalidArgument(_)
            | Error::OutOfBounds { .. } => NcclCode::InvalidArgument,
            Error::NcclUnavailable(_)
            | Error::Config(_)
            | Error::Capture { .. }
            | Error::CallMismatch { .. } => NcclCode::InvalidUsage,
            Error::PeerFailed { .. } | Error::PeerTimeout { .. } => NcclCode::RemoteError,
            Error::NoDriver
            | Error::TooFewGpus { .. }
            | Error::Driver { .. }
            | Error::MissingKernel { .. }
            | Error::KernelImage(_) => NcclCode::UnhandledCudaError,
            Error::Store { .. } | Error::Ipc(_) => NcclCode::SystemError,
        }
    }
}

impl From<Error> for cudarc::nccl::result::NcclError {
    fn from(e: Error) -> Self {
        use cudarc::nccl::sys::ncclResult_t as R;
        let message = e.to_string();
        tracing::warn!("intranode error reported as an NcclError: {message}");
        LAST_MESSAGE.with(|m| *m.borrow_mut() = Some(message));
        // cudarc's result enum, by number: a value outside it cannot be
        // made, so codes NCCL may add later become an internal error.
        let code = match e.nccl_code() {
            NcclCode::UnhandledCudaError => R::ncclUnhandledCudaError,
            NcclCode::SystemError => R::ncclSystemError,
            NcclCode::InvalidArgument => R::ncclInvalidArgument,
            NcclCode::InvalidUsage => R::ncclInvalidUsage,
            NcclCode::RemoteError => R::ncclRemoteError,
            NcclCode::InProgress => R::ncclInProgress,
            NcclCode::InternalError | NcclCode::Timeout | NcclCode::Other(_) => {
                R::ncclInternalError
            }
        };
        cudarc::nccl::result::NcclError(code)
    }
}

/// NCCL's result code (`ncclResult_t`) of a failed call, as
/// [`Error::Nccl`] keeps it. `raw()` gives the number NCCL returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NcclCode {
    /// `ncclUnhandledCudaError` (1): a CUDA call inside NCCL failed.
    UnhandledCudaError,
    /// `ncclSystemError` (2): a system call failed (sockets, shared
    /// memory, `/dev/shm` too small, ...).
    SystemError,
    /// `ncclInternalError` (3): an NCCL bug or a corrupted state.
    InternalError,
    /// `ncclInvalidArgument` (4): an argument NCCL refused.
    InvalidArgument,
    /// `ncclInvalidUsage` (5): a call in the wrong order or state (for
    /// example two ranks on one GPU).
    InvalidUsage,
    /// `ncclRemoteError` (6): a peer failed or went away.
    RemoteError,
    /// `ncclInProgress` (7): a non-blocking call has not finished.
    InProgress,
    /// `ncclTimeout` (8, NCCL 2.30 and later).
    Timeout,
    /// Any other value NCCL returned.
    Other(u32),
}

impl NcclCode {
    /// The code of NCCL's numeric `ncclResult_t`.
    pub fn from_raw(raw: u32) -> Self {
        match raw {
            1 => Self::UnhandledCudaError,
            2 => Self::SystemError,
            3 => Self::InternalError,
            4 => Self::InvalidArgument,
            5 => Self::InvalidUsage,
            6 => Self::RemoteError,
            7 => Self::InProgress,
            8 => Self::Timeout,
            other => Self::Other(other),
        }
    }

    /// The numeric `ncclResult_t`.
    pub fn raw(self) -> u32 {
        match self {
            Self::UnhandledCudaError => 1,
            Self::SystemError => 2,
            Self::InternalError => 3,
            Self::InvalidArgument => 4,
            Self::InvalidUsage => 5,
            Self::RemoteError => 6,
            Self::InProgress => 7,
            Self::Timeout => 8,
            Self::Other(raw) => raw,
        }
    }

    /// NCCL's name for the code (`"ncclRemoteError"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::UnhandledCudaError => "ncclUnhandledCudaError",
            Self::SystemError => "ncclSystemError",
            Self::InternalError => "ncclInternalError",
            Self::InvalidArgument => "ncclInvalidArgument",
            Self::InvalidUsage => "ncclInvalidUsage",
            Self::RemoteError => "ncclRemoteError",
            Self::InProgress => "ncclInProgress",
            Self::Timeout => "ncclTimeout",
            Self::Other(_) => "unknown ncclResult_t",
        }
    }
}

impl std::fmt::Display for NcclCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.raw())
    }
}

impl From<&cudarc::nccl::result::NcclError> for NcclCode {
    fn from(e: &cudarc::nccl::result::NcclError) -> Self {
        // By number: the enum's variants differ between cudarc's NCCL
        // versions (`ncclTimeout` only from 2.30), the numbers do not.
        Self::from_raw(e.0 as u32)
    }
}

fn elems_text(elems: Option<usize>) -> String {
    elems.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string())
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Makes `ctx` current on this thread. cudarc's `bind_to_thread` first
/// returns any error it kept from an earlier call that could not return
/// one (its event tracking's waits and records, drops); that error is
/// reported as such, never under `cuCtxSetCurrent`'s name.
impl Error {
    /// An fd exchange's failure as [`Error::Ipc`] (crate-private, where a
    /// `From` impl would put `IpcError` into the public API).
    pub(crate) fn ipc(error: intranode_ipc::IpcError) -> Self {
        Error::Ipc(Box::new(error))
    }
}

pub(crate) fn bind(ctx: &cudarc::driver::CudaContext, device: Option<usize>) -> Result<()> {
    ctx.check_err().ctx(
        "an earlier CUDA call made through cudarc (cudarc keeps such errors in the context)",
        device,
    )?;
    ctx.bind_to_thread().ctx("cuCtxSetCurrent", device)
}

/// Attaches the driver call's name (and device, when known) to a
/// [`DriverError`].
pub(crate) trait DriverContext<T> {
    fn ctx(self, op: &'static str, device: Option<usize>) -> Result<T>;
}

impl<T> DriverContext<T> for std::result::Result<T, DriverError> {
    fn ctx(self, op: &'static str, device: Option<usize>) -> Result<T> {
        self.map_err(|source| Error::Driver { op, device, source })
    }
}

// NOTE [drop errors]: a release that fails in a `Drop` is logged and
// recorded on the context (`CudaContext::record_err`), as cudarc's own
// types and the rest of this crate do, so that the context's next call
// returns it; `Drop` never panics. Making the context current for a
// release checks (and clears) an error recorded earlier, so
// `bind_for_drop` puts that one back: otherwise one failed release would
// make every later release of the same teardown skip its work (a leak)
// and the error would be lost. For the same reason a release that must
// wait for the context first waits through `sync_for_drop` (the driver's
// own synchronize), never cudarc's `CudaContext::synchronize`, which
// returns a recorded error instead of waiting.

/// Records an error met in a `Drop` on `ctx` (NOTE [drop errors]): logged,
/// kept for the context's next call, never a panic.
pub(crate) fn record_drop_error(ctx: &CudaContext, op: &'static str, error: DriverError) {
    tracing::error!(
        "releasing GPU resources in Drop: {op} failed (device {}): {error}",
        ctx.ordinal()
    );
    ctx.record_err::<()>(Err(error));
}

/// Makes `ctx` current and waits for all of its work, for a `Drop` that
/// releases what kernels may still use (NOTE [drop errors]). An error
/// recorded earlier stays recorded and does not stop the wait: cudarc's
/// `CudaContext::synchronize` would return that error instead of waiting,
/// and a release behind it would be skipped (a kernel module, 10 MB of
/// machine code, leaked on every communicator dropped while an error was
/// pending). False (after recording the failure) when the
/// context could not be bound or the wait failed; the caller then leaks
/// rather than free what a kernel may still touch.
pub(crate) fn sync_for_drop(ctx: &CudaContext, op: &'static str) -> bool {
    if !bind_for_drop(ctx, op) {
        return false;
    }
    match cudarc::driver::result::ctx::synchronize() {
        Ok(()) => true,
        Err(e) => {
            record_drop_error(ctx, "cuCtxSynchronize in Drop", e);
            false
        }
    }
}

/// Makes `ctx` current for a `Drop`, keeping an error recorded earlier
/// recorded; false (after recording) if it could not be, in which case the
/// caller leaks rather than acting on whatever context happens to be
/// current.
pub(crate) fn bind_for_drop(ctx: &CudaContext, op: &'static str) -> bool {
    let earlier = ctx.check_err();
    let bound = ctx.bind_to_thread();
    ctx.record_err(earlier);
    match bound {
        Ok(()) => true,
        Err(e) => {
            record_drop_error(ctx, op, e);
            false
        }
    }
}
