//! Symmetric memory: one block of device memory per rank that every rank
//! of the group has mapped into its own address space (PyTorch's
//! `CUDASymmetricMemory`).
//!
//! Main types: [`SymmetricMemory`] (the handle: per-rank buffer and
//! signal-pad addresses, device-side pointer tables, [`SymmetricMemory::get_buffer`]),
//! [`BufferView`] (a typed, bounds-checked view of one rank's buffer),
//! [`Backend`] (how blocks travel between processes) and [`BlockLayout`]
//! (where buffer and signal pad sit in a block).
//!
//! # Blocks
//!
//! Each rank allocates one block: its data buffer at offset 0, then the
//! signal pad at [`BlockLayout::signal_pad_offset`] (4 KiB aligned), the
//! whole rounded up to the allocation granularity. One allocation per rank
//! means one handle, one descriptor and one mapping per peer. The block is
//! zero-filled (signal pad included) and the fill has completed before
//! any rank returns from [`SymmetricMemory::rendezvous`]: see
//! `NOTE [signal pads start at zero]`.
//!
//! # Backends
//!
//! - [`Backend::Vmm`] (default, module `vmm`): `cuMemCreate` with a POSIX
//!   file-descriptor handle; descriptors travel over an
//!   [`IpcChannel`]; peers import and map
//!   them (`map_block`: reserve, `cuMemMap`, `cuMemSetAccess`).
//! - [`Backend::CudaIpc`] (`INTRANODE_SYMM_MEM_BACKEND=cuda-ipc`, module
//!   `cuda_ipc`): `cuMemAlloc` plus legacy `cuIpcGetMemHandle` handles
//!   exchanged through the store, for hosts where descriptor passing is
//!   impossible.
//!
//! # Every rank reaches the same outcome
//!
//! The rendezvous runs in phases; after each, every rank's outcome (ok or
//! the error text) is all-gathered through the store, so when one rank
//! fails (its allocation, its socket), every rank returns an error
//! ([`Error::PeerFailed`] on the others) instead of waiting for it. The
//! sequence of store collectives never depends on local state.
//!
//! # Multicast
//!
//! [`device_has_multicast_support`] only reads the device attribute. This
//! library never creates multicast objects (docs/DESIGN.md section 3).

mod cuda_ipc;
mod vmm;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::{CudaContext, DriverError, result, sys};
use intranode_store::{Store, StoreExchange};
use serde::{Deserialize, Serialize};

use crate::error::{DriverContext, Error, Result};
use crate::ipc_channel::IpcChannel;
use crate::kernels::DType;

/// Default size of each rank's data buffer: 10 MiB (PyTorch's
/// `kDefaultBufferSize`).
pub const DEFAULT_BUFFER_BYTES: usize = 10 << 20;

/// Size of each rank's signal pad: barrier flags and counters, then the
/// Lamport buffers (NOTE [signal pad layout] in `kernels_gpu::layout`).
pub const SIGNAL_PAD_BYTES: usize = kernels_gpu::layout::SIGNAL_PAD_BYTES;

const _: () = assert!(SIGNAL_PAD_BYTES >= kernels_gpu::layout::SIGNAL_PAD_MIN_BYTES);

/// Alignment of the signal pad inside a block.
pub const SIGNAL_PAD_ALIGN: usize = 4096;

/// Env variable choosing the backend: `vmm` (default) or `cuda-ipc`.
pub const BACKEND_ENV: &str = "INTRANODE_SYMM_MEM_BACKEND";

/// How blocks are shared between the ranks' processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Backend {
    /// CUDA virtual memory management with POSIX file descriptors.
    Vmm,
    /// Legacy `cuIpcGetMemHandle` / `cuIpcOpenMemHandle`.
    CudaIpc,
}

impl Backend {
    /// The backend named `text` (`vmm`, `cuda-ipc`; case-insensitive,
    /// `_` for `-` accepted).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "vmm" => Some(Self::Vmm),
            "cuda-ipc" | "ipc" => Some(Self::CudaIpc),
            _ => None,
        }
    }

    /// The backend [`BACKEND_ENV`] asks for; [`Backend::Vmm`] when unset
    /// or empty; an error naming the value when it is not a backend.
    pub fn from_env() -> Result<Self> {
        Self::from_var(std::env::var(BACKEND_ENV).ok().as_deref())
    }

    /// [`Backend::from_env`] on a given value of the variable.
    pub fn from_var(value: Option<&str>) -> Result<Self> {
        match value.map(str::trim) {
            None | Some("") => Ok(Self::Vmm),
            Some(v) => Self::parse(v).ok_or_else(|| {
                Error::InvalidArgument(format!("{BACKEND_ENV}={v:?}: expected `vmm` or `cuda-ipc`"))
            }),
        }
    }

    /// The name [`Backend::parse`] accepts.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Vmm => "vmm",
            Self::CudaIpc => "cuda-ipc",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `bytes` rounded up to a multiple of `granularity`; `None` on overflow
/// or a zero granularity.
pub fn round_up(bytes: usize, granularity: usize) -> Option<usize> {
    if granularity == 0 {
        return None;
    }
    bytes.checked_next_multiple_of(granularity)
}

/// Where buffer and signal pad sit in one rank's block. Identical on every
/// rank (checked at rendezvous).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlockLayout {
    /// Usable bytes of the data buffer, at offset 0 (what the caller asked
    /// for; views are checked against it).
    pub buffer_bytes: usize,
    /// Offset of the signal pad: `buffer_bytes` rounded up to
    /// [`SIGNAL_PAD_ALIGN`].
    pub signal_pad_offset: usize,
    /// Bytes of the signal pad.
    pub signal_pad_bytes: usize,
    /// Bytes actually allocated: the end of the signal pad rounded up to
    /// the allocation granularity.
    pub alloc_bytes: usize,
}

impl BlockLayout {
    /// The layout for a buffer of `buffer_bytes` and a pad of
    /// [`SIGNAL_PAD_BYTES`], allocated in multiples of `granularity`.
    pub fn new(buffer_bytes: usize, granularity: usize) -> Result<Self> {
        Self::with_signal_pad(buffer_bytes, SIGNAL_PAD_BYTES, granularity)
    }

    /// [`BlockLayout::new`] with a chosen signal-pad size.
    pub fn with_signal_pad(
        buffer_bytes: usize,
        signal_pad_bytes: usize,
        granularity: usize,
    ) -> Result<Self> {
        if buffer_bytes == 0 {
            return Err(Error::InvalidArgument(
                "symmetric memory buffer size must be positive, got 0 bytes".into(),
            ));
        }
        if granularity == 0 || !granularity.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "allocation granularity must be a power of two, got {granularity}"
            )));
        }
        let too_big = || {
            Error::InvalidArgument(format!(
                "symmetric memory buffer of {buffer_bytes} bytes plus a {signal_pad_bytes}-byte signal pad \
                 overflows the address space"
            ))
        };
        let signal_pad_offset = round_up(buffer_bytes, SIGNAL_PAD_ALIGN).ok_or_else(too_big)?;
        let end = signal_pad_offset
            .checked_add(signal_pad_bytes)
            .ok_or_else(too_big)?;
        let alloc_bytes = round_up(end, granularity).ok_or_else(too_big)?;
        Ok(Self {
            buffer_bytes,
            signal_pad_offset,
            signal_pad_bytes,
            alloc_bytes,
        })
    }
}

/// Number of driver errors met while releasing symmetric memory (in
/// `Drop`, which logs them and carries on). A leak test expects 0.
pub fn drop_error_count() -> u64 {
    DROP_ERRORS.load(Ordering::Relaxed)
}

static DROP_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Records an error met in a `Drop`: counted and logged, never a panic.
fn record_drop_error(op: &'static str, device: usize, error: DriverError) {
    DROP_ERRORS.fetch_add(1, Ordering::Relaxed);
    tracing::error!("releasing symmetric memory: {op} failed (device {device}): {error}");
}

/// Makes `ctx` current for a `Drop`; false (after recording) if it could
/// not be, in which case the caller leaks rather than acting on whatever
/// context happens to be current.
fn bind_for_drop(ctx: &CudaContext, op: &'static str) -> bool {
    match ctx.bind_to_thread() {
        Ok(()) => true,
        Err(e) => {
            record_drop_error(op, ctx.ordinal(), e);
            false
        }
    }
}

/// Device memory from plain `cuMemAlloc` (peers can reach it, unlike the
/// stream-ordered pool behind cudarc's `alloc`), freed on drop.
#[derive(Debug)]
struct DeviceAlloc {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
}

impl DeviceAlloc {
    fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        let device = Some(ctx.ordinal());
        crate::error::bind(ctx, device)?;
        // SAFETY: the context is current; the memory is uninitialised
        // bytes, which this type never reads as anything.
        let ptr = unsafe { result::malloc_sync(bytes) }.ctx("cuMemAlloc", device)?;
        Ok(Self {
            ctx: ctx.clone(),
            ptr,
        })
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        if !bind_for_drop(&self.ctx, "cuCtxSetCurrent before cuMemFree") {
            return;
        }
        // SAFETY: `ptr` came from cuMemAlloc in this context and is freed
        // only here; the owner synchronized the context before dropping.
        if let Err(e) = unsafe { result::free_sync(self.ptr) } {
            record_drop_error("cuMemFree", self.ctx.ordinal(), e);
        }
    }
}

/// The peers' blocks as this process holds them, per backend.
#[derive(Debug)]
enum Blocks {
    Vmm(vmm::Blocks),
    CudaIpc(cuda_ipc::Blocks),
}

impl Blocks {
    /// Base address of each rank's block in this process, index = rank.
    fn bases(&self) -> Vec<u64> {
        match self {
            Self::Vmm(b) => b.bases(),
            Self::CudaIpc(b) => b.bases(),
        }
    }
}

/// Our own block after phase 1, before the peers' are known.
#[derive(Debug)]
enum LocalBlock {
    Vmm(vmm::LocalBlock),
    CudaIpc(cuda_ipc::LocalBlock),
}

/// What each rank publishes after phase 1 (local allocation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LocalInfo {
    pid: u32,
    device: usize,
    backend: Backend,
    layout: BlockLayout,
    /// The legacy IPC handle's 64 bytes ([`Backend::CudaIpc`] only).
    ipc_handle: Option<Vec<u8>>,
}

/// Every rank's block of a group, mapped into this process.
///
/// Dropping it waits for this context's work, then unmaps every peer's
/// block and releases this rank's. The caller must make sure no peer still
/// runs work on this rank's block when it drops (a store barrier before
/// the drop does it). With [`Backend::Vmm`] a peer's late access still hits
/// valid memory, since its own mapping keeps the physical pages alive.
pub struct SymmetricMemory {
    ctx: Arc<CudaContext>,
    rank: usize,
    world: usize,
    backend: Backend,
    layout: BlockLayout,
    buffer_ptrs: Vec<u64>,
    signal_pad_ptrs: Vec<u64>,
    buffer_ptrs_dev: DeviceAlloc,
    signal_pad_ptrs_dev: DeviceAlloc,
    /// Held for its `Drop` (unmap, release), after the context sync in
    /// `SymmetricMemory::drop`.
    #[allow(dead_code)]
    blocks: Blocks,
}

impl fmt::Debug for SymmetricMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymmetricMemory")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("device", &self.ctx.ordinal())
            .field("backend", &self.backend)
            .field("layout", &self.layout)
            .field("buffer_ptrs", &format_args!("{:#x?}", self.buffer_ptrs))
            .field(
                "signal_pad_ptrs",
                &format_args!("{:#x?}", self.signal_pad_ptrs),
            )
            .finish_non_exhaustive()
    }
}

impl Drop for SymmetricMemory {
    fn drop(&mut self) {
        // Our own kernels may still read the peers' blocks or the pointer
        // tables: wait for them before the fields unmap and free.
        if bind_for_drop(&self.ctx, "cuCtxSetCurrent before teardown")
            && let Err(e) = self.ctx.synchronize()
        {
            record_drop_error("cuCtxSynchronize before teardown", self.ctx.ordinal(), e);
        }
    }
}

/// A typed view of `len` elements of one rank's symmetric buffer, as a
/// device address valid in this process (seed `getBuffer`). It borrows
/// the [`SymmetricMemory`], so it cannot outlive the mapping.
pub struct BufferView<'a, T> {
    ptr: u64,
    len: usize,
    rank: usize,
    _memory: PhantomData<(&'a SymmetricMemory, T)>,
}

impl<T> Clone for BufferView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for BufferView<'_, T> {}

impl<T: DType> fmt::Debug for BufferView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferView")
            .field("rank", &self.rank)
            .field("elem", &T::ELEM)
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl<T: DType> BufferView<'_, T> {
    /// Device address of the first element, valid in this process.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The rank whose buffer this is.
    pub fn rank(&self) -> usize {
        self.rank
    }
}

/// Checks that `len_elems` elements of `elem_bytes` bytes at element
/// offset `offset_elems` fit in a buffer of `buffer_bytes`; returns the
/// byte offset. Errors name rank, offset, length and buffer size.
pub fn check_view_bounds(
    rank: usize,
    offset_elems: usize,
    len_elems: usize,
    elem_bytes: usize,
    buffer_bytes: usize,
) -> Result<usize> {
    let out_of_bounds = || Error::OutOfBounds {
        rank,
        offset_elems,
        len_elems,
        elem_bytes,
        buffer_bytes,
    };
    let offset_bytes = offset_elems
        .checked_mul(elem_bytes)
        .ok_or_else(out_of_bounds)?;
    let len_bytes = len_elems
        .checked_mul(elem_bytes)
        .ok_or_else(out_of_bounds)?;
    let end = offset_bytes
        .checked_add(len_bytes)
        .ok_or_else(out_of_bounds)?;
    if end > buffer_bytes {
        return Err(out_of_bounds());
    }
    Ok(offset_bytes)
}

/// The first rank whose entry is an error, with its text.
fn first_failure<T>(outcomes: &[std::result::Result<T, String>]) -> Option<(usize, &str)> {
    outcomes
        .iter()
        .enumerate()
        .find_map(|(r, o)| o.as_ref().err().map(|e| (r, e.as_str())))
}

/// Process-local count of rendezvous, part of each job id so that several
/// groups in one process never share socket paths.
static RENDEZVOUS_COUNT: AtomicU64 = AtomicU64::new(0);

/// A short job id for the group's [`IpcChannel`], unique on this host:
/// rank 0's pid, the time, and a process-local counter.
fn new_job_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = RENDEZVOUS_COUNT.fetch_add(1, Ordering::Relaxed);
    format!("symm-{:x}-{:x}-{n}", std::process::id(), nanos)
}

impl SymmetricMemory {
    /// Allocates this rank's block of `buffer_bytes` (plus the signal
    /// pad), exchanges it with the other `world - 1` ranks and maps theirs,
    /// with the backend [`Backend::from_env`] picks. Every rank of the
    /// group must call it with the same `exchange` prefix and sequence.
    pub fn rendezvous(
        ctx: &Arc<CudaContext>,
        store: &dyn Store,
        exchange: &mut StoreExchange,
        rank: usize,
        world: usize,
        buffer_bytes: usize,
    ) -> Result<SymmetricMemory> {
        // A bad variable is a local error; still take part, so the peers
        // hear about it instead of waiting.
        let backend = Backend::from_env();
        Self::rendezvous_inner(ctx, store, exchange, rank, world, buffer_bytes, backend)
    }

    /// [`SymmetricMemory::rendezvous`] with an explicit backend (all ranks
    /// must pass the same one).
    pub fn rendezvous_with(
        ctx: &Arc<CudaContext>,
        store: &dyn Store,
        exchange: &mut StoreExchange,
        rank: usize,
        world: usize,
        buffer_bytes: usize,
        backend: Backend,
    ) -> Result<SymmetricMemory> {
        Self::rendezvous_inner(ctx, store, exchange, rank, world, buffer_bytes, Ok(backend))
    }

    fn rendezvous_inner(
        ctx: &Arc<CudaContext>,
        store: &dyn Store,
        exchange: &mut StoreExchange,
        rank: usize,
        world: usize,
        buffer_bytes: usize,
        backend: Result<Backend>,
    ) -> Result<SymmetricMemory> {
        if world == 0 || rank >= world {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is not below world size {world}"
            )));
        }
        let store_err = |op: &'static str| move |source| Error::Store { op, rank, source };
        let device = ctx.ordinal();

        // Phase 0: rank 0 names the descriptor channel of this group.
        let job_id = if rank == 0 { Some(new_job_id()) } else { None };
        let job_id: String = exchange
            .broadcast(store, rank, world, 0, job_id.as_ref())
            .map_err(store_err("broadcast of the symmetric-memory job id"))?;

        // Phase 1: our own block (and, for VMM, our socket), all local.
        let local = backend.and_then(|backend| {
            Self::allocate_local(ctx, rank, world, buffer_bytes, backend, &job_id, store)
        });
        let published = match &local {
            Ok((_, info, _)) => Ok(info.clone()),
            Err(e) => Err(e.to_string()),
        };
        let infos: Vec<std::result::Result<LocalInfo, String>> = exchange
            .all_gather(store, rank, world, &published)
            .map_err(store_err("all-gather of symmetric-memory allocations"))?;
        let (local_block, own_info, channel) = local?;
        if let Some((r, reason)) = first_failure(&infos) {
            return Err(Error::PeerFailed {
                rank: r,
                phase: "symmetric-memory allocation",
                reason: reason.to_owned(),
            });
        }
        let infos: Vec<LocalInfo> = infos.into_iter().flatten().collect();
        // Every rank sees the same `infos`, so every rank fails here alike.
        for (r, info) in infos.iter().enumerate() {
            if info.backend != own_info.backend || info.layout != infos[0].layout {
                return Err(Error::InvalidArgument(format!(
                    "ranks disagree on symmetric memory: rank {r} (device {}) has backend {} and \
                     {:?}, rank 0 (device {}) has backend {} and {:?}",
                    info.device,
                    info.backend,
                    info.layout,
                    infos[0].device,
                    infos[0].backend,
                    infos[0].layout
                )));
            }
        }

        // Phase 2: import and map the peers' blocks; publish the pointer
        // tables on the device.
        let mapped = Self::map_peers(ctx, local_block, channel, &infos, rank, world);
        let outcome = match &mapped {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        };
        let outcomes: Vec<std::result::Result<(), String>> = exchange
            .all_gather(store, rank, world, &outcome)
            .map_err(store_err("all-gather of symmetric-memory mappings"))?;
        let (blocks, buffer_ptrs_dev, signal_pad_ptrs_dev, buffer_ptrs, signal_pad_ptrs) = mapped?;
        if let Some((r, reason)) = first_failure(&outcomes) {
            return Err(Error::PeerFailed {
                rank: r,
                phase: "symmetric-memory mapping",
                reason: reason.to_owned(),
            });
        }
        tracing::debug!(
            "symmetric memory ready: rank {rank}/{world}, device {device}, backend {}, {:?}",
            own_info.backend,
            own_info.layout
        );
        Ok(SymmetricMemory {
            ctx: ctx.clone(),
            rank,
            world,
            backend: own_info.backend,
            layout: own_info.layout,
            buffer_ptrs,
            signal_pad_ptrs,
            buffer_ptrs_dev,
            signal_pad_ptrs_dev,
            blocks,
        })
    }

    /// Phase 1: allocate, zero and export our block; for VMM also bind the
    /// descriptor channel (a local step that can fail, so it belongs here).
    #[allow(clippy::type_complexity)]
    fn allocate_local(
        ctx: &Arc<CudaContext>,
        rank: usize,
        world: usize,
        buffer_bytes: usize,
        backend: Backend,
        job_id: &str,
        store: &dyn Store,
    ) -> Result<(LocalBlock, LocalInfo, Option<IpcChannel>)> {
        let device = ctx.ordinal();
        crate::error::bind(ctx, Some(device))?;
        let (block, layout, ipc_handle, channel) = match backend {
            Backend::Vmm => {
                let block = vmm::LocalBlock::new(ctx, buffer_bytes)?;
                let layout = block.layout();
                let channel = IpcChannel::new(
                    &IpcChannel::default_dir(),
                    job_id,
                    rank,
                    world,
                    store.timeout(),
                )?;
                (LocalBlock::Vmm(block), layout, None, Some(channel))
            }
            Backend::CudaIpc => {
                let block = cuda_ipc::LocalBlock::new(ctx, buffer_bytes)?;
                let layout = block.layout();
                let handle = block.handle_bytes();
                (LocalBlock::CudaIpc(block), layout, Some(handle), None)
            }
        };
        // NOTE [signal pads start at zero]: the block was zero-filled with
        // cuMemsetD8, which returns before the fill is done for device
        // memory. Wait for it here, before we report success: peers use our
        // pad only after the last all-gather, which follows this.
        ctx.synchronize().ctx("cuCtxSynchronize", Some(device))?;
        let info = LocalInfo {
            pid: std::process::id(),
            device,
            backend,
            layout,
            ipc_handle,
        };
        Ok((block, info, channel))
    }

    /// Phase 2: the peers' blocks, our own, and the device pointer tables.
    #[allow(clippy::type_complexity)]
    fn map_peers(
        ctx: &Arc<CudaContext>,
        local: LocalBlock,
        channel: Option<IpcChannel>,
        infos: &[LocalInfo],
        rank: usize,
        world: usize,
    ) -> Result<(Blocks, DeviceAlloc, DeviceAlloc, Vec<u64>, Vec<u64>)> {
        let device = ctx.ordinal();
        crate::error::bind(ctx, Some(device))?;
        let layout = infos[rank].layout;
        let blocks = match (local, channel) {
            (LocalBlock::Vmm(block), Some(mut channel)) => {
                channel.set_allowed_pids(infos.iter().map(|i| i.pid as i32).collect());
                Blocks::Vmm(vmm::exchange_and_map(
                    ctx,
                    block,
                    &mut channel,
                    rank,
                    world,
                )?)
                // The channel closes here: every descriptor has arrived.
            }
            (LocalBlock::CudaIpc(block), _) => {
                let handles = infos
                    .iter()
                    .enumerate()
                    .map(|(r, i)| {
                        i.ipc_handle.clone().ok_or_else(|| {
                            Error::InvalidArgument(format!("rank {r} published no CUDA IPC handle"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Blocks::CudaIpc(cuda_ipc::open_peers(ctx, block, &handles, rank)?)
            }
            (LocalBlock::Vmm(_), None) => {
                return Err(Error::InvalidArgument(
                    "internal: VMM block without a descriptor channel".into(),
                ));
            }
        };
        let bases = blocks.bases();
        let buffer_ptrs = bases.clone();
        let signal_pad_ptrs: Vec<u64> = bases
            .iter()
            .map(|&b| b + layout.signal_pad_offset as u64)
            .collect();
        let table_bytes = world * std::mem::size_of::<u64>();
        let buffer_ptrs_dev = DeviceAlloc::new(ctx, table_bytes)?;
        let signal_pad_ptrs_dev = DeviceAlloc::new(ctx, table_bytes)?;
        // SAFETY: both allocations hold `world` u64s, the sources have
        // `world` elements, and the context is current.
        unsafe {
            result::memcpy_htod_sync(buffer_ptrs_dev.ptr, &buffer_ptrs)
                .ctx("cuMemcpyHtoD", Some(device))?;
            result::memcpy_htod_sync(signal_pad_ptrs_dev.ptr, &signal_pad_ptrs)
                .ctx("cuMemcpyHtoD", Some(device))?;
        }
        // A copy from pageable memory may return before the data has
        // landed; make the tables visible to any stream before we return.
        ctx.synchronize().ctx("cuCtxSynchronize", Some(device))?;
        Ok((
            blocks,
            buffer_ptrs_dev,
            signal_pad_ptrs_dev,
            buffer_ptrs,
            signal_pad_ptrs,
        ))
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the group.
    pub fn world(&self) -> usize {
        self.world
    }

    /// CUDA ordinal of this rank's device (in this process).
    pub fn device(&self) -> usize {
        self.ctx.ordinal()
    }

    /// The context the blocks are mapped in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Where buffer and signal pad sit in each block.
    pub fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// Usable bytes of each rank's data buffer.
    pub fn buffer_bytes(&self) -> usize {
        self.layout.buffer_bytes
    }

    /// Bytes of each rank's signal pad.
    pub fn signal_pad_bytes(&self) -> usize {
        self.layout.signal_pad_bytes
    }

    /// Each rank's data buffer as a device address valid in this process,
    /// index = rank.
    pub fn buffer_ptrs(&self) -> &[u64] {
        &self.buffer_ptrs
    }

    /// Each rank's signal pad as a device address valid in this process,
    /// index = rank.
    pub fn signal_pad_ptrs(&self) -> &[u64] {
        &self.signal_pad_ptrs
    }

    /// Device address of an array of `world` u64: [`Self::buffer_ptrs`]
    /// on the device, for kernels.
    pub fn buffer_ptrs_dev(&self) -> u64 {
        self.buffer_ptrs_dev.ptr
    }

    /// Device address of an array of `world` u64:
    /// [`Self::signal_pad_ptrs`] on the device, for kernels.
    pub fn signal_pad_ptrs_dev(&self) -> u64 {
        self.signal_pad_ptrs_dev.ptr
    }

    /// A view of `len_elems` elements of `T` of `rank`'s buffer, starting
    /// `offset_elems` elements in (seed `getBuffer`). Errors when `rank`
    /// is not in the group or the view does not fit in the buffer.
    pub fn get_buffer<T: DType>(
        &self,
        rank: usize,
        len_elems: usize,
        offset_elems: usize,
    ) -> Result<BufferView<'_, T>> {
        let Some(&base) = self.buffer_ptrs.get(rank) else {
            return Err(Error::InvalidArgument(format!(
                "get_buffer: rank {rank} is not in the group of {} ranks",
                self.world
            )));
        };
        let offset_bytes = check_view_bounds(
            rank,
            offset_elems,
            len_elems,
            std::mem::size_of::<T>(),
            self.layout.buffer_bytes,
        )?;
        Ok(BufferView {
            ptr: base + offset_bytes as u64,
            len: len_elems,
            rank,
            _memory: PhantomData,
        })
    }
}

/// Whether `device` (a CUDA ordinal) supports multicast objects
/// (`CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`). Reads the attribute and
/// nothing more: this library never creates multicast objects.
pub fn device_has_multicast_support(device: usize) -> Result<bool> {
    crate::gpu::require_devices(device + 1)?;
    let ordinal = i32::try_from(device)
        .map_err(|_| Error::InvalidArgument(format!("device {device} out of range")))?;
    result::init().ctx("cuInit", Some(device))?;
    let dev = result::device::get(ordinal).ctx("cuDeviceGet", Some(device))?;
    // SAFETY: the driver is initialised and `dev` is a valid device handle.
    let value = unsafe {
        result::device::get_attribute(
            dev,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
        )
    }
    .ctx("cuDeviceGetAttribute(MULTICAST_SUPPORTED)", Some(device))?;
    Ok(value != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_up_math() {
        assert_eq!(round_up(0, 4096), Some(0));
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(4096, 4096), Some(4096));
        assert_eq!(round_up(4097, 4096), Some(8192));
        assert_eq!(round_up(10 << 20, 2 << 20), Some(10 << 20));
        assert_eq!(round_up((10 << 20) + 1, 2 << 20), Some(12 << 20));
        assert_eq!(round_up(7, 3), Some(9));
        assert_eq!(round_up(5, 0), None);
        assert_eq!(round_up(usize::MAX, 2), None);
        assert_eq!(round_up(usize::MAX - 1, 2), Some(usize::MAX - 1));
    }

    #[test]
    fn default_layout_on_2mib_granularity() {
        let l = BlockLayout::new(DEFAULT_BUFFER_BYTES, 2 << 20).expect("layout");
        assert_eq!(l.buffer_bytes, 10 << 20);
        assert_eq!(l.signal_pad_offset, 10 << 20);
        assert_eq!(l.signal_pad_bytes, SIGNAL_PAD_BYTES);
        // 10 MiB + 64 KiB of flags + 64 MiB of Lamport buffers rounds up
        // to 76 MiB.
        assert_eq!(l.alloc_bytes, 76 << 20);
    }

    #[test]
    fn odd_buffer_sizes() {
        let l = BlockLayout::new(1, 2 << 20).expect("layout");
        assert_eq!(
            (l.signal_pad_offset, l.alloc_bytes),
            (4096, (4096 + SIGNAL_PAD_BYTES).next_multiple_of(2 << 20))
        );
        let l = BlockLayout::new(4097, 1).expect("layout");
        assert_eq!(
            (l.signal_pad_offset, l.alloc_bytes),
            (8192, 8192 + SIGNAL_PAD_BYTES)
        );
        let l = BlockLayout::with_signal_pad(100, 0, 512).expect("layout");
        assert_eq!((l.signal_pad_offset, l.alloc_bytes), (4096, 4096));
        // The pad never overlaps the buffer and everything fits.
        for bytes in [1usize, 255, 4095, 4096, 65_537, 3 << 20, (10 << 20) - 1] {
            for gran in [1usize, 4096, 2 << 20] {
                let l = BlockLayout::new(bytes, gran).expect("layout");
                assert!(l.signal_pad_offset >= l.buffer_bytes);
                assert_eq!(l.signal_pad_offset % SIGNAL_PAD_ALIGN, 0);
                assert!(l.signal_pad_offset + l.signal_pad_bytes <= l.alloc_bytes);
                assert_eq!(l.alloc_bytes % gran, 0);
                assert!(l.alloc_bytes - (l.signal_pad_offset + l.signal_pad_bytes) < gran);
            }
        }
    }

    #[test]
    fn layout_errors() {
        let e = BlockLayout::new(0, 4096).expect_err("zero buffer");
        assert!(e.to_string().contains("must be positive"), "{e}");
        assert!(BlockLayout::new(10, 0).is_err());
        assert!(BlockLayout::new(10, 3000).is_err());
        let e = BlockLayout::new(usize::MAX - 10, 4096).expect_err("overflow");
        assert!(e.to_string().contains("overflows"), "{e}");
    }

    #[test]
    fn view_bounds() {
        let buf = 1024;
        assert_eq!(check_view_bounds(0, 0, 256, 4, buf).expect("whole"), 0);
        assert_eq!(check_view_bounds(1, 255, 1, 4, buf).expect("last"), 1020);
        assert_eq!(
            check_view_bounds(1, 256, 0, 4, buf).expect("empty at end"),
            1024
        );
        assert_eq!(check_view_bounds(2, 3, 509, 2, buf).expect("odd"), 6);
        let e = check_view_bounds(3, 1, 256, 4, buf).expect_err("one past");
        let text = e.to_string();
        assert!(matches!(
            e,
            Error::OutOfBounds {
                rank: 3,
                offset_elems: 1,
                len_elems: 256,
                elem_bytes: 4,
                buffer_bytes: 1024
            }
        ));
        for needle in ["rank 3", "offset 1", "length 256", "1024 bytes"] {
            assert!(text.contains(needle), "{text} lacks {needle}");
        }
        assert!(check_view_bounds(0, 257, 0, 4, buf).is_err());
        assert!(check_view_bounds(0, usize::MAX, 1, 2, buf).is_err());
        assert!(check_view_bounds(0, 1, usize::MAX, 2, buf).is_err());
        assert!(check_view_bounds(0, usize::MAX / 2, usize::MAX / 2, 1, buf).is_err());
    }

    #[test]
    fn backend_names() {
        assert_eq!(Backend::from_var(None).expect("unset"), Backend::Vmm);
        assert_eq!(Backend::from_var(Some("")).expect("empty"), Backend::Vmm);
        assert_eq!(Backend::from_var(Some("VMM")).expect("vmm"), Backend::Vmm);
        assert_eq!(
            Backend::from_var(Some("cuda-ipc")).expect("ipc"),
            Backend::CudaIpc
        );
        assert_eq!(
            Backend::from_var(Some("cuda_ipc")).expect("ipc"),
            Backend::CudaIpc
        );
        let e = Backend::from_var(Some("nvshmem")).expect_err("unknown");
        assert!(e.to_string().contains("INTRANODE_SYMM_MEM_BACKEND"), "{e}");
        for b in [Backend::Vmm, Backend::CudaIpc] {
            assert_eq!(Backend::parse(b.as_str()), Some(b));
        }
    }

    #[test]
    fn first_failure_picks_lowest_rank() {
        let v: Vec<std::result::Result<(), String>> =
            vec![Ok(()), Err("b".into()), Err("c".into())];
        assert_eq!(first_failure(&v), Some((1, "b")));
        let ok: Vec<std::result::Result<u8, String>> = vec![Ok(1), Ok(2)];
        assert_eq!(first_failure(&ok), None);
    }

    #[test]
    fn job_ids_are_unique_and_valid() {
        let a = new_job_id();
        let b = new_job_id();
        assert_ne!(a, b);
        for id in [&a, &b] {
            assert!(id.len() < 48, "{id}");
            assert!(
                id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'),
                "{id}"
            );
        }
    }

    #[test]
    fn no_gpu_gives_an_error_not_a_panic() {
        if crate::gpu::driver_available() {
            return;
        }
        assert!(matches!(
            device_has_multicast_support(0),
            Err(Error::NoDriver)
        ));
    }
}
