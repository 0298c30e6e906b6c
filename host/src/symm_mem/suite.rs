//! What the project's GPU suites check symmetric memory through
//! (`intranode::internals`, under `--cfg intranode_internals`): typed
//! views of a rank's buffer (seed `getBuffer`) with their bounds, and the
//! facts of the mapping. The library's collectives take addresses from
//! [`SymmetricMemory::buffer_ptrs`] and never reach these.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::CudaContext;

use super::SymmetricMemory;
use super::block::BlockLayout;
use crate::error::{Error, Result};
use crate::types::DType;

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

impl SymmetricMemory {
    /// CUDA ordinal of this rank's device (in this process).
    pub fn device(&self) -> usize {
        self.ctx.ordinal()
    }

    /// The context the blocks are mapped in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Where buffer and signal pad sit in each block.
    pub fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// Bytes of each rank's signal pad.
    pub fn signal_pad_bytes(&self) -> usize {
        self.layout.signal_pad_bytes
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
