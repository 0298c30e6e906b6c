//! Device buffers of any of the kernels' element types behind one trait
//! ([`DeviceBuffer`]), so one call takes a list of mixed bf16, f16 and f32
//! buffers, and [`FlatBuffer`], the owned flat storage of a bucket.

use std::ops::Range;

use cudarc::driver::{CudaSlice, CudaStream, CudaViewMut, DevicePtr, DevicePtrMut, SyncOnDrop};
use cudarc::nccl::NcclType;
use half::{bf16, f16};

use crate::communicator::Communicator;
use crate::error::{DriverContext, Error, Result};
use crate::types::BroadcastAlgo;
use crate::types::{DType, ElemType};

/// A device buffer of one of the kernels' element types, with its type
/// known at run time. Implemented for `CudaSlice<T>` and `CudaViewMut<T>`
/// of bf16, f16 and f32, and for [`FlatBuffer`].
pub trait DeviceBuffer {
    /// The element type of the buffer.
    fn elem_type(&self) -> ElemType;

    /// Length in elements.
    fn elems(&self) -> usize;

    /// Length in bytes.
    fn bytes(&self) -> usize {
        self.elems() * self.elem_type().bytes()
    }

    /// The device address, for reading on `stream` (as
    /// `DevicePtr::device_ptr`: keep the guard until the work is
    /// enqueued).
    fn device_addr<'a>(&'a self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>);

    /// The device address, for writing on `stream` (as
    /// `DevicePtrMut::device_ptr_mut`).
    fn device_addr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>);

    /// Broadcasts elements `range` from `root` in place through `comm` on
    /// `algo`'s path, typed (NCCL sees the element type).
    fn broadcast_range(
        &mut self,
        comm: &Communicator,
        range: Range<usize>,
        root: usize,
        algo: BroadcastAlgo,
    ) -> Result<()>;
}

fn range_error(range: &Range<usize>, elems: usize) -> Error {
    Error::InvalidArgument(format!(
        "elements {range:?} are outside a buffer of {elems} elements"
    ))
}

/// One implementation for owned slices and mutable views: both give typed
/// addresses and sub-views the same way.
macro_rules! device_buffer_impl {
    ($($ty:ty),+) => {$(
        impl<T: DType + NcclType> DeviceBuffer for $ty {
            fn elem_type(&self) -> ElemType {
                T::ELEM
            }

            fn elems(&self) -> usize {
                self.len()
            }

            fn device_addr<'a>(&'a self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
                self.device_ptr(stream)
            }

            fn device_addr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
                self.device_ptr_mut(stream)
            }

            fn broadcast_range(
                &mut self,
                comm: &Communicator,
                range: Range<usize>,
                root: usize,
                algo: BroadcastAlgo,
            ) -> Result<()> {
                let elems = self.len();
                let mut view = self
                    .try_slice_mut(range.clone())
                    .ok_or_else(|| range_error(&range, elems))?;
                comm.broadcast_in_place_with(&mut view, root, algo)
                    .map(|_| ())
            }
        }
    )+};
}

device_buffer_impl!(CudaSlice<T>, CudaViewMut<'_, T>);

/// Owned flat device storage of one element type: a bucket's buffer.
#[derive(Debug)]
#[non_exhaustive]
pub enum FlatBuffer {
    /// bf16 elements.
    Bf16(CudaSlice<bf16>),
    /// f16 elements.
    F16(CudaSlice<f16>),
    /// f32 elements.
    F32(CudaSlice<f32>),
}

/// Runs `$body` with `$b` bound to the typed slice inside a [`FlatBuffer`].
macro_rules! with_slice {
    ($self:expr, $b:ident => $body:expr) => {
        match $self {
            FlatBuffer::Bf16($b) => $body,
            FlatBuffer::F16($b) => $body,
            FlatBuffer::F32($b) => $body,
        }
    };
}
pub(crate) use with_slice;

impl FlatBuffer {
    /// `elems` zeroed elements of `elem` on `stream`.
    pub fn zeros(
        stream: &std::sync::Arc<CudaStream>,
        elem: ElemType,
        elems: usize,
    ) -> Result<Self> {
        let device = Some(stream.context().ordinal());
        Ok(match elem {
            ElemType::Bf16 => {
                FlatBuffer::Bf16(stream.alloc_zeros(elems).ctx("cuMemAllocAsync", device)?)
            }
            ElemType::F16 => {
                FlatBuffer::F16(stream.alloc_zeros(elems).ctx("cuMemAllocAsync", device)?)
            }
            ElemType::F32 => {
                FlatBuffer::F32(stream.alloc_zeros(elems).ctx("cuMemAllocAsync", device)?)
            }
        })
    }

    /// The f32 storage, if that is the type.
    pub fn as_f32(&self) -> Option<&CudaSlice<f32>> {
        match self {
            FlatBuffer::F32(s) => Some(s),
            _ => None,
        }
    }

    /// The f32 storage, mutable, if that is the type.
    pub fn as_f32_mut(&mut self) -> Option<&mut CudaSlice<f32>> {
        match self {
            FlatBuffer::F32(s) => Some(s),
            _ => None,
        }
    }

    /// The bf16 storage, if that is the type.
    pub fn as_bf16(&self) -> Option<&CudaSlice<bf16>> {
        match self {
            FlatBuffer::Bf16(s) => Some(s),
            _ => None,
        }
    }

    /// The f16 storage, if that is the type.
    pub fn as_f16(&self) -> Option<&CudaSlice<f16>> {
        match self {
            FlatBuffer::F16(s) => Some(s),
            _ => None,
        }
    }

    /// The contents as f64, copied to the host (synchronizes `stream`).
    pub fn to_host_f64(&self, stream: &std::sync::Arc<CudaStream>) -> Result<Vec<f64>> {
        let device = Some(stream.context().ordinal());
        with_slice!(self, s => {
            let host = stream.clone_dtoh(s).ctx("cuMemcpyDtoHAsync", device)?;
            stream.synchronize().ctx("cuStreamSynchronize", device)?;
            Ok(host.into_iter().map(DType::to_f64).collect())
        })
    }
}

impl DeviceBuffer for FlatBuffer {
    fn elem_type(&self) -> ElemType {
        match self {
            FlatBuffer::Bf16(_) => ElemType::Bf16,
            FlatBuffer::F16(_) => ElemType::F16,
            FlatBuffer::F32(_) => ElemType::F32,
        }
    }

    fn elems(&self) -> usize {
        with_slice!(self, s => s.len())
    }

    fn device_addr<'a>(&'a self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        with_slice!(self, s => s.device_ptr(stream))
    }

    fn device_addr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        with_slice!(self, s => s.device_ptr_mut(stream))
    }

    fn broadcast_range(
        &mut self,
        comm: &Communicator,
        range: Range<usize>,
        root: usize,
        algo: BroadcastAlgo,
    ) -> Result<()> {
        with_slice!(self, s => s.broadcast_range(comm, range, root, algo))
    }
}

/// Copies `bytes` bytes from `src` to `dst` on `stream` (device to
/// device, stream-ordered).
///
/// # Safety
/// Both addresses must be device memory of `stream`'s context holding
/// `bytes` bytes, valid until the stream passes the copy; the ranges must
/// not overlap.
pub(crate) unsafe fn copy_bytes(
    stream: &CudaStream,
    dst: u64,
    src: u64,
    bytes: usize,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let device = Some(stream.context().ordinal());
    crate::error::bind(stream.context(), device)?;
    // SAFETY: the caller vouches for both ranges; the context is current.
    unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }
        .ctx("cuMemcpyDtoDAsync", device)
}
