//! A caller's buffer of any `NcclType`, seen as the [`DType`] our kernels
//! reduce, for the types where the two are the same data.
//!
//! `Communicator`'s methods take every `NcclType` (as `cudarc::nccl::Comm`
//! does); the intra-node path takes a [`DType`]. Where
//! [`decide_all_reduce`](crate::algo::decide_all_reduce) picks one of our
//! kernels, `T`'s NCCL data type is bf16, f16 or f32 ([`elem_of`]), and
//! the wrappers here hand the same buffer on as `half::bf16`, `half::f16`
//! or `f32`: what NCCL itself would read (it knows only the data type and
//! the address). Safe code: they forward the address, length, stream and
//! event tracking of the buffer they borrow.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use cudarc::nccl::NcclType;

use crate::types::{DType, ElemType};

/// Our element type for an NCCL one; `None` for those only NCCL reduces
/// (and for a user's `NcclType` whose size is not its data type's).
pub(super) fn elem_of<T: NcclType>() -> Option<ElemType> {
    use cudarc::nccl::sys::ncclDataType_t as D;
    let elem = match T::as_nccl_type() {
        D::ncclBfloat16 => ElemType::Bf16,
        D::ncclFloat16 => ElemType::F16,
        D::ncclFloat32 => ElemType::F32,
        _ => return None,
    };
    (std::mem::size_of::<T>() == elem.bytes()).then_some(elem)
}

/// NCCL's data type of `T`, as fingerprints and messages name it.
pub(super) fn nccl_type_name<T: NcclType>() -> &'static str {
    use cudarc::nccl::sys::ncclDataType_t as D;
    match T::as_nccl_type() {
        D::ncclInt8 => "i8",
        D::ncclUint8 => "u8",
        D::ncclInt32 => "i32",
        D::ncclUint32 => "u32",
        D::ncclInt64 => "i64",
        D::ncclUint64 => "u64",
        D::ncclFloat16 => "f16",
        D::ncclFloat32 => "f32",
        D::ncclFloat64 => "f64",
        D::ncclBfloat16 => "bf16",
        _ => "other",
    }
}

/// The two element types of a wrapper (neither owned: `fn() ->` keeps the
/// wrapper `Send` and `Sync` whatever they are).
type Types<T, U> = PhantomData<(fn() -> T, fn() -> U)>;

/// A buffer of `T` read as one of `U` (same NCCL data type and size).
pub(super) struct AsElem<'p, P, T, U> {
    inner: &'p P,
    _types: Types<T, U>,
}

/// A buffer of `T` written as one of `U` (same NCCL data type and size).
pub(super) struct AsElemMut<'p, P, T, U> {
    inner: &'p mut P,
    _types: Types<T, U>,
}

impl<'p, P: DevicePtr<T>, T: NcclType, U: DType> AsElem<'p, P, T, U> {
    /// `None` unless `T` is the data `U` is.
    pub(super) fn new(inner: &'p P) -> Option<Self> {
        (elem_of::<T>() == Some(U::ELEM)).then_some(AsElem {
            inner,
            _types: PhantomData,
        })
    }
}

impl<'p, P: DevicePtrMut<T>, T: NcclType, U: DType> AsElemMut<'p, P, T, U> {
    /// `None` unless `T` is the data `U` is.
    pub(super) fn new(inner: &'p mut P) -> Option<Self> {
        (elem_of::<T>() == Some(U::ELEM)).then_some(AsElemMut {
            inner,
            _types: PhantomData,
        })
    }
}

impl<P: DevicePtr<T>, T, U> DeviceSlice<U> for AsElem<'_, P, T, U> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn stream(&self) -> &Arc<CudaStream> {
        self.inner.stream()
    }
}

impl<P: DevicePtr<T>, T, U> DevicePtr<U> for AsElem<'_, P, T, U> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        self.inner.device_ptr(stream)
    }
}

impl<P: DevicePtrMut<T>, T, U> DeviceSlice<U> for AsElemMut<'_, P, T, U> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn stream(&self) -> &Arc<CudaStream> {
        self.inner.stream()
    }
}

impl<P: DevicePtrMut<T>, T, U> DevicePtrMut<U> for AsElemMut<'_, P, T, U> {
    fn device_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        self.inner.device_ptr_mut(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_kernels_types_are_ours() {
        assert_eq!(elem_of::<half::bf16>(), Some(ElemType::Bf16));
        assert_eq!(elem_of::<half::f16>(), Some(ElemType::F16));
        assert_eq!(elem_of::<f32>(), Some(ElemType::F32));
        assert_eq!(elem_of::<f64>(), None);
        assert_eq!(elem_of::<i8>(), None);
        assert_eq!(elem_of::<u8>(), None);
        assert_eq!(elem_of::<i32>(), None);
        assert_eq!(elem_of::<u32>(), None);
        assert_eq!(elem_of::<i64>(), None);
        assert_eq!(elem_of::<u64>(), None);
        // cudarc's `char` is ncclUint8 (and 4 bytes): NCCL's.
        assert_eq!(elem_of::<char>(), None);
    }

    /// A user's type claiming f32 with another size is not taken as f32.
    #[test]
    fn a_type_of_another_size_is_not_ours() {
        struct Wide(#[allow(dead_code)] [u8; 8]);
        impl NcclType for Wide {
            fn as_nccl_type() -> cudarc::nccl::sys::ncclDataType_t {
                cudarc::nccl::sys::ncclDataType_t::ncclFloat32
            }
        }
        assert_eq!(elem_of::<Wide>(), None);
    }
}
