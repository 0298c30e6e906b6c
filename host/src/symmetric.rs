//! Symmetric buffers that applications allocate (PyTorch's
//! `symm_mem.empty` + `rendezvous`): [`SymmetricBuffer`], made by
//! [`Communicator::alloc_symmetric`](crate::Communicator::alloc_symmetric),
//! is device memory of this rank that every peer of the group has mapped.
//! It works wherever cudarc takes a `DevicePtr` / `DevicePtrMut` (a
//! cuBLAS GEMM or a cudarc copy can write into it; [`SymmetricView`] and
//! [`SymmetricViewMut`] are views at an offset), and an all-reduce whose
//! input lies in it reads the peers' copies in place instead of copying
//! the input into the communicator's own symmetric buffer first.
// NOTE [symmetric input] in `kernels-gpu/src/all_reduce.rs`.
//!
//! # Contract
//!
//! - Allocation is collective: every rank calls `alloc_symmetric` with
//!   the same length, in the same order relative to the communicator's
//!   other collective set-up calls. Lengths that differ give every rank an
//!   error (the rendezvous compares the layouts), a rank that never comes
//!   gives the others the store's timeout, not a hang.
//! - A collective on a symmetric input: every rank passes its own buffer
//!   of the same allocation at the same offset and length (the peers read
//!   theirs at the offset this rank's address implies). Mixing a
//!   symmetric input on one rank with a plain one on another gives wrong
//!   results or a reported timeout.
//! - Once a collective on it has ended on this rank's stream, no peer
//!   reads this rank's buffer any more (the kernels end with the barrier
//!   that says so), so the caller may overwrite it right away.
//! - Dropping is local: it waits for this context's work, then unmaps the
//!   peers' copies and releases this rank's memory. A peer whose work still
//!   maps this rank's memory keeps the pages alive through its own mapping
//!   (VMM), so a rank may drop its buffer while others still hold theirs;
//!   every collective that uses the buffer must have been enqueued on every
//!   rank before any of them drops it.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{
    CudaEvent, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop, sys,
};
use intranode_kernels_gpu::layout::MAX_RANKS;

use crate::error::{Error, Result};
use crate::symm_mem::SymmetricMemory;

/// Alignment an input must have, in bytes, for the kernels to read the
/// peers' copies in place (16-byte vector loads).
pub const SYMMETRIC_ALIGN_BYTES: usize = 16;

/// One registered allocation, as this process maps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) id: u64,
    /// This rank's base address and usable bytes.
    pub(crate) base: u64,
    pub(crate) bytes: usize,
    /// Every rank's base address in this process, index = rank (0 past
    /// the world).
    pub(crate) bases: [u64; MAX_RANKS],
}

impl Region {
    /// Every rank's address of `bytes` at `ptr` of this rank's copy, when
    /// they lie inside it and `ptr` is aligned for the kernels' vector
    /// loads. The bases come from the allocator, aligned to its
    /// granularity, so every rank's address has `ptr`'s alignment.
    pub(crate) fn peer_addresses(&self, ptr: u64, bytes: usize) -> Option<[u64; MAX_RANKS]> {
        let offset = ptr.checked_sub(self.base)?;
        let end = offset.checked_add(u64::try_from(bytes).ok()?)?;
        if end > self.bytes as u64 || !ptr.is_multiple_of(SYMMETRIC_ALIGN_BYTES as u64) {
            return None;
        }
        let mut out = [0u64; MAX_RANKS];
        for (dst, &base) in out.iter_mut().zip(&self.bases) {
            if base != 0 {
                *dst = base + offset;
            }
        }
        Some(out)
    }
}

/// The user's symmetric allocations of one communicator, for the
/// collectives' look-up of an input address. Shared by the communicator
/// and every buffer (which removes itself on drop).
#[derive(Debug, Default)]
pub(crate) struct SymmetricRegistry {
    regions: Mutex<Vec<Region>>,
    next_id: AtomicU64,
}

impl SymmetricRegistry {
    fn insert(&self, base: u64, bytes: usize, ranks: &[u64]) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut bases = [0u64; MAX_RANKS];
        for (dst, &b) in bases.iter_mut().zip(ranks) {
            *dst = b;
        }
        self.lock().push(Region {
            id,
            base,
            bytes,
            bases,
        });
        id
    }

    fn remove(&self, id: u64) {
        self.lock().retain(|r| r.id != id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Region>> {
        // A panic elsewhere while holding the lock leaves a valid Vec.
        self.regions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every rank's address of the `bytes` at `ptr`, when they lie in one
    /// registered allocation (see [`Region::peer_addresses`]).
    pub(crate) fn peer_addresses(&self, ptr: u64, bytes: usize) -> Option<[u64; MAX_RANKS]> {
        self.lock()
            .iter()
            .find_map(|r| r.peer_addresses(ptr, bytes))
    }
}

/// Device memory of `len` elements of `T` on this rank that every peer of
/// the communicator has mapped. See the module docs for the contract.
///
/// # Example
///
/// Write into the buffer (here a copy; a cuBLAS GEMM or a kernel of yours
/// works the same), then all-reduce it in place and a view of it: the
/// kernels read the peers' copies where they lie.
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
/// // Collective: the same length on every rank, in the same order.
/// let mut out = comm.alloc_symmetric::<f32>(1 << 20)?;
/// stream.memcpy_htod(&vec![1.0f32; 1 << 20], &mut out)?;
/// comm.all_reduce_in_place(&mut out, &ReduceOp::Sum)?;
///
/// // A view at the same offset on every rank.
/// let mut plain = stream.alloc_zeros::<f32>(1024)?;
/// let view = out.slice(4096..4096 + 1024)?;
/// comm.all_reduce(&view, &mut plain, &ReduceOp::Sum)?;
/// # Ok(())
/// # }
/// ```
pub struct SymmetricBuffer<T> {
    // Declared first: `Drop` removes the registration, then the events
    // drop, then the memory (which synchronizes the context before it
    // unmaps and releases).
    registry: Arc<SymmetricRegistry>,
    id: u64,
    len: usize,
    stream: Arc<CudaStream>,
    read: Option<CudaEvent>,
    write: Option<CudaEvent>,
    memory: SymmetricMemory,
    _elem: PhantomData<T>,
}

impl<T> fmt::Debug for SymmetricBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymmetricBuffer")
            .field("rank", &self.memory.rank())
            .field("world", &self.memory.world())
            .field("len", &self.len)
            .field("ptr", &format_args!("{:#x}", self.base()))
            .finish_non_exhaustive()
    }
}

impl<T> Drop for SymmetricBuffer<T> {
    fn drop(&mut self) {
        // Later collectives must not find the address once it is gone.
        self.registry.remove(self.id);
    }
}

impl<T> SymmetricBuffer<T> {
    /// Wraps an allocation made by `SymmetricMemory::rendezvous_buffer`
    /// and registers it; `len` elements of `T` fit its buffer (checked by
    /// the caller).
    pub(crate) fn new(
        memory: SymmetricMemory,
        len: usize,
        stream: Arc<CudaStream>,
        registry: Arc<SymmetricRegistry>,
    ) -> Result<Self> {
        let ctx = stream.context();
        let device = Some(ctx.ordinal());
        let (read, write) = if ctx.is_event_tracking() {
            use crate::error::DriverContext;
            (
                Some(ctx.new_event(None).ctx("cuEventCreate", device)?),
                Some(ctx.new_event(None).ctx("cuEventCreate", device)?),
            )
        } else {
            (None, None)
        };
        let rank = memory.rank();
        let base = memory.buffer_ptrs()[rank];
        let bytes = len * std::mem::size_of::<T>();
        let id = registry.insert(base, bytes, memory.buffer_ptrs());
        Ok(SymmetricBuffer {
            registry,
            id,
            len,
            stream,
            read,
            write,
            memory,
            _elem: PhantomData,
        })
    }

    fn base(&self) -> u64 {
        self.memory.buffer_ptrs()[self.memory.rank()]
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.memory.rank()
    }

    /// Ranks of the group.
    pub fn world_size(&self) -> usize {
        self.memory.world()
    }

    /// Elements of `T`.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element (never: allocations are not empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The element range `range` as `(offset, len)`, or an error naming
    /// the bounds.
    fn bounds(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
        view_bounds(self.rank(), range, self.len, std::mem::size_of::<T>())
    }

    /// A read-only view of the elements in `range` (cudarc's `slice`, but
    /// an error instead of a panic out of bounds).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<SymmetricView<'_, T>> {
        let (offset, len) = self.bounds(range)?;
        Ok(SymmetricView {
            ptr: self.base() + (offset * std::mem::size_of::<T>()) as u64,
            len,
            read: &self.read,
            write: &self.write,
            stream: &self.stream,
            _elem: PhantomData,
        })
    }

    /// A writable view of the elements in `range`.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<SymmetricViewMut<'_, T>> {
        let (offset, len) = self.bounds(range)?;
        Ok(SymmetricViewMut {
            ptr: self.base() + (offset * std::mem::size_of::<T>()) as u64,
            len,
            read: &self.read,
            write: &self.write,
            stream: &self.stream,
            _elem: PhantomData,
        })
    }
}

/// `range` of a buffer of `len` elements of `elem_bytes` as `(offset,
/// len)`; errors as [`Error::OutOfBounds`].
pub(crate) fn view_bounds(
    rank: usize,
    range: impl RangeBounds<usize>,
    len: usize,
    elem_bytes: usize,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    let out_of_bounds = |offset: usize, n: usize| Error::OutOfBounds {
        rank,
        offset_elems: offset,
        len_elems: n,
        elem_bytes,
        buffer_bytes: len.saturating_mul(elem_bytes),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e - s)),
        (s, e) => {
            let s = s.unwrap_or(usize::MAX);
            Err(out_of_bounds(s, e.unwrap_or(usize::MAX).saturating_sub(s)))
        }
    }
}

/// A read-only view of part of a [`SymmetricBuffer`]; collectives on it
/// read the peers' copies at the same offset.
pub struct SymmetricView<'a, T> {
    ptr: u64,
    len: usize,
    read: &'a Option<CudaEvent>,
    write: &'a Option<CudaEvent>,
    stream: &'a Arc<CudaStream>,
    _elem: PhantomData<&'a [T]>,
}

/// A writable view of part of a [`SymmetricBuffer`].
pub struct SymmetricViewMut<'a, T> {
    ptr: u64,
    len: usize,
    read: &'a Option<CudaEvent>,
    write: &'a Option<CudaEvent>,
    stream: &'a Arc<CudaStream>,
    _elem: PhantomData<&'a mut [T]>,
}

impl<T> fmt::Debug for SymmetricView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymmetricView")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl<T> fmt::Debug for SymmetricViewMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymmetricViewMut")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

// cudarc's event tracking, as its `CudaSlice` / `CudaView` do it: a read
// waits for the last write and is recorded in `read`; a write waits for
// the last read and write and is recorded in `write`. Only when the
// context manages stream synchronization (several streams, tracking on).

/// Makes `stream` wait for the last write (`for_write`: and read).
fn wait_tracked(
    stream: &CudaStream,
    owner: &CudaStream,
    read: &Option<CudaEvent>,
    write: &Option<CudaEvent>,
    for_write: bool,
) {
    if !owner.context().is_managing_stream_synchronization() {
        return;
    }
    if for_write && let Some(read) = read.as_ref() {
        stream.context().record_err(stream.wait(read));
    }
    if let Some(write) = write.as_ref() {
        stream.context().record_err(stream.wait(write));
    }
}

impl<'a, T> SymmetricView<'a, T> {
    /// cudarc's `view_ptr` for a group call: waits on `stream` for the
    /// last write, and the record of this read on `stream`.
    pub(crate) fn read_record<'g>(self, stream: &'g CudaStream) -> SyncOnDrop<'g>
    where
        'a: 'g,
    {
        wait_tracked(stream, self.stream, self.read, self.write, false);
        SyncOnDrop::record_event(self.read, stream)
    }
}

impl<'a, T> SymmetricViewMut<'a, T> {
    /// cudarc's `view_ptr_mut` for a group call: waits on `stream` for the
    /// last read and write, and the record of this write on `stream`.
    pub(crate) fn write_record<'g>(self, stream: &'g CudaStream) -> SyncOnDrop<'g>
    where
        'a: 'g,
    {
        wait_tracked(stream, self.stream, self.read, self.write, true);
        SyncOnDrop::record_event(self.write, stream)
    }
}

macro_rules! tracked_impls {
    ($ty:ident $(<$lt:lifetime>)?, $stream:expr, $read:expr, $write:expr) => {
        impl<$($lt,)? T> DeviceSlice<T> for $ty<$($lt,)? T> {
            fn len(&self) -> usize {
                self.len
            }
            fn stream(&self) -> &Arc<CudaStream> {
                #[allow(clippy::needless_borrow)]
                &self.stream
            }
        }

        impl<$($lt,)? T> DevicePtr<T> for $ty<$($lt,)? T> {
            fn device_ptr<'b>(&'b self, stream: &'b CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'b>) {
                #[allow(clippy::needless_borrow)]
                wait_tracked(stream, &self.stream, &self.read, &self.write, false);
                (self.device_address(), SyncOnDrop::record_event(&self.read, stream))
            }
        }
    };
}

impl<T> SymmetricBuffer<T> {
    fn device_address(&self) -> u64 {
        self.base()
    }
}

impl<T> SymmetricView<'_, T> {
    fn device_address(&self) -> u64 {
        self.ptr
    }
}

impl<T> SymmetricViewMut<'_, T> {
    fn device_address(&self) -> u64 {
        self.ptr
    }
}

tracked_impls!(SymmetricBuffer, stream, read, write);
tracked_impls!(SymmetricView<'a>, stream, read, write);
tracked_impls!(SymmetricViewMut<'a>, stream, read, write);

impl<T> DevicePtrMut<T> for SymmetricBuffer<T> {
    fn device_ptr_mut<'b>(
        &'b mut self,
        stream: &'b CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'b>) {
        wait_tracked(stream, &self.stream, &self.read, &self.write, true);
        (self.base(), SyncOnDrop::record_event(&self.write, stream))
    }
}

impl<T> DevicePtrMut<T> for SymmetricViewMut<'_, T> {
    fn device_ptr_mut<'b>(
        &'b mut self,
        stream: &'b CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'b>) {
        wait_tracked(stream, self.stream, self.read, self.write, true);
        (self.ptr, SyncOnDrop::record_event(self.write, stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region() -> Region {
        let mut bases = [0u64; MAX_RANKS];
        bases[0] = 0x7000_0000;
        bases[1] = 0x9000_0000;
        Region {
            id: 0,
            base: 0x9000_0000,
            bytes: 4096,
            bases,
        }
    }

    #[test]
    fn peer_addresses_at_the_same_offset() {
        let r = region();
        let a = r.peer_addresses(0x9000_0000, 4096).expect("whole");
        assert_eq!(&a[..3], &[0x7000_0000, 0x9000_0000, 0]);
        let a = r.peer_addresses(0x9000_0100, 256).expect("view");
        assert_eq!(&a[..2], &[0x7000_0100, 0x9000_0100]);
        let a = r.peer_addresses(0x9000_0ff0, 16).expect("last vector");
        assert_eq!(a[0], 0x7000_0ff0);
        assert!(r.peer_addresses(0x9000_0000, 0).is_some());
    }

    #[test]
    fn outside_or_misaligned_is_not_symmetric() {
        let r = region();
        assert_eq!(r.peer_addresses(0x9000_0000, 4097), None, "past the end");
        assert_eq!(r.peer_addresses(0x9000_0ff0, 32), None, "runs past the end");
        assert_eq!(r.peer_addresses(0x8fff_fff0, 16), None, "before the start");
        assert_eq!(
            r.peer_addresses(0x9000_0002, 2),
            None,
            "not 16-byte aligned"
        );
        // An empty view at the end is inside; one vector past it is not.
        assert!(r.peer_addresses(0x9000_1000, 0).is_some());
        assert_eq!(r.peer_addresses(0x9000_1010, 0), None, "past the end");
        assert_eq!(r.peer_addresses(u64::MAX, usize::MAX), None, "overflow");
    }

    #[test]
    fn registry_finds_and_forgets() {
        let reg = SymmetricRegistry::default();
        let a = reg.insert(0x1000, 64, &[0x1000, 0x5000]);
        let b = reg.insert(0x2000, 64, &[0x2000, 0x6000]);
        assert_ne!(a, b);
        assert_eq!(reg.peer_addresses(0x2010, 16).map(|p| p[1]), Some(0x6010));
        assert_eq!(reg.peer_addresses(0x1020, 32).map(|p| p[1]), Some(0x5020));
        reg.remove(a);
        assert_eq!(reg.peer_addresses(0x1020, 32), None);
        assert!(reg.peer_addresses(0x2000, 64).is_some());
    }

    #[test]
    fn view_ranges() {
        assert_eq!(view_bounds(0, .., 10, 2).expect("all"), (0, 10));
        assert_eq!(view_bounds(0, 3..7, 10, 2).expect("mid"), (3, 4));
        assert_eq!(view_bounds(0, 3..=9, 10, 2).expect("incl"), (3, 7));
        assert_eq!(view_bounds(0, 10.., 10, 2).expect("empty end"), (10, 0));
        let e = view_bounds(1, 4..11, 10, 2).expect_err("past");
        assert!(
            matches!(
                e,
                Error::OutOfBounds {
                    rank: 1,
                    offset_elems: 4,
                    len_elems: 7,
                    ..
                }
            ),
            "{e}"
        );
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 7..3;
        assert!(view_bounds(0, reversed, 10, 2).is_err());
        assert!(view_bounds(0, ..=usize::MAX, 10, 2).is_err());
        assert!(view_bounds(0, 11.., 10, 2).is_err());
    }
}
