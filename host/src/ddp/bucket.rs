//! [`GradBucket`] (seed comm.hpp `GradBucket`): one flat buffer of
//! gradients and where each variable's gradient lies in it, what a
//! communication hook receives.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::buffer::{DeviceBuffer, FlatBuffer, copy_bytes};
use super::plan::BucketPlan;
use crate::error::{Error, Result};

/// One bucket of gradients: a flat buffer of one element type and, per
/// entry, which variable (parameter id) it holds, where, how much, and the
/// variable's shape.
///
/// As in c10d, except that an entry may hold a *piece* of a variable: a
/// variable larger than the bucket limit is cut across consecutive buckets
/// (see [`super::plan`]); [`variable_offsets`](Self::variable_offsets)
/// says where each piece starts inside its variable (0 for whole ones).
#[derive(Debug)]
pub struct GradBucket {
    index: usize,
    bucket_count: usize,
    buffer: FlatBuffer,
    offsets: Vec<usize>,
    lengths: Vec<usize>,
    variable_offsets: Vec<usize>,
    shapes: Vec<Vec<usize>>,
    variable_indices: Vec<usize>,
    sparse_indices: Option<CudaSlice<i64>>,
}

/// Whether `e` lies inside its variable of `shape` and inside a bucket of
/// `bucket_elems`. Shapes and plans come from the caller, so arithmetic
/// that overflows means bad input, not a panic.
fn entry_fits(e: &super::plan::BucketEntry, shape: &[usize], bucket_elems: usize) -> bool {
    let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let item_end = e.item_offset_elems.checked_add(e.elems);
    let bucket_end = e.offset_elems.checked_add(e.elems);
    matches!(
        (numel, item_end, bucket_end),
        (Some(n), Some(i), Some(b)) if i <= n && b <= bucket_elems
    )
}

impl GradBucket {
    /// Bucket `index` of `bucket_count`, laid out as `plan` (one bucket of
    /// [`plan_buckets`](super::plan_buckets) over the variables), with a
    /// zeroed buffer on `stream`. `shapes[v]` is variable `v`'s shape; each
    /// entry must lie inside its variable.
    pub fn new(
        index: usize,
        bucket_count: usize,
        plan: &BucketPlan,
        shapes: &[Vec<usize>],
        stream: &Arc<CudaStream>,
    ) -> Result<Self> {
        if index >= bucket_count {
            return Err(Error::InvalidArgument(format!(
                "bucket index {index} is not below the bucket count {bucket_count}"
            )));
        }
        let mut bucket = GradBucket {
            index,
            bucket_count,
            buffer: FlatBuffer::zeros(stream, plan.elem, plan.elems)?,
            offsets: Vec::with_capacity(plan.entries.len()),
            lengths: Vec::with_capacity(plan.entries.len()),
            variable_offsets: Vec::with_capacity(plan.entries.len()),
            shapes: Vec::with_capacity(plan.entries.len()),
            variable_indices: Vec::with_capacity(plan.entries.len()),
            sparse_indices: None,
        };
        for e in &plan.entries {
            let shape = shapes.get(e.item).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "bucket {index}: variable {} has no shape ({} given)",
                    e.item,
                    shapes.len()
                ))
            })?;
            if !entry_fits(e, shape, plan.elems) {
                return Err(Error::InvalidArgument(format!(
                    "bucket {index}: entry of {} elements at {} does not fit variable {} of shape {shape:?} or the bucket of {} elements",
                    e.elems, e.item_offset_elems, e.item, plan.elems
                )));
            }
            bucket.offsets.push(e.offset_elems);
            bucket.lengths.push(e.elems);
            bucket.variable_offsets.push(e.item_offset_elems);
            bucket.shapes.push(shape.clone());
            bucket.variable_indices.push(e.item);
        }
        Ok(bucket)
    }

    /// One bucket per plan, numbered in order.
    pub fn from_plans(
        plans: &[BucketPlan],
        shapes: &[Vec<usize>],
        stream: &Arc<CudaStream>,
    ) -> Result<Vec<Self>> {
        plans
            .iter()
            .enumerate()
            .map(|(i, p)| GradBucket::new(i, plans.len(), p, shapes, stream))
            .collect()
    }

    /// Position of this bucket among the buckets of a step.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Buckets per step.
    pub fn bucket_count(&self) -> usize {
        self.bucket_count
    }

    /// Whether this is the last bucket of the step (c10d `isLast`).
    pub fn is_last(&self) -> bool {
        self.index + 1 == self.bucket_count
    }

    /// The flat gradient buffer.
    pub fn buffer(&self) -> &FlatBuffer {
        &self.buffer
    }

    /// The flat gradient buffer, to write gradients or results into.
    pub fn buffer_mut(&mut self) -> &mut FlatBuffer {
        &mut self.buffer
    }

    /// Where each entry starts in the buffer, in elements (16-byte
    /// aligned).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Each entry's length, in elements.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// Where each entry starts inside its variable, in elements.
    pub fn variable_offsets(&self) -> &[usize] {
        &self.variable_offsets
    }

    /// Each entry's variable's shape (c10d `getSizesVec`).
    pub fn shapes(&self) -> &[Vec<usize>] {
        &self.shapes
    }

    /// Each entry's variable: its index in the parameter list (c10d
    /// `getParameters`, as ids).
    pub fn variable_indices(&self) -> &[usize] {
        &self.variable_indices
    }

    /// Indices of a sparse gradient, when the bucket holds one.
    pub fn sparse_indices(&self) -> Option<&CudaSlice<i64>> {
        self.sparse_indices.as_ref()
    }

    /// Marks the bucket as holding a sparse gradient with these indices
    /// (the built-in hooks refuse such buckets).
    pub fn set_sparse_indices(&mut self, indices: Option<CudaSlice<i64>>) {
        self.sparse_indices = indices;
    }

    /// Copies each entry's piece of its variable into the buffer, on
    /// `stream`. `variables` is the whole list the plan was made from.
    pub fn pack(
        &mut self,
        variables: &[&dyn DeviceBuffer],
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        for (k, &v) in self.variable_indices.iter().enumerate() {
            self.variable(variables.get(v).copied(), k)?;
        }
        let elem_bytes = self.buffer.elem_type().bytes();
        let (flat, _flat_guard) = self.buffer.device_addr_mut(stream);
        for k in 0..self.offsets.len() {
            let Some(var) = variables.get(self.variable_indices[k]) else {
                continue;
            };
            let (src, _src_guard) = var.device_addr(stream);
            // SAFETY: `variable` checked above that the piece lies inside
            // the variable and has the bucket's type; `new` that it lies
            // inside the buffer; the guards order both with the stream.
            unsafe {
                copy_bytes(
                    stream,
                    flat + (self.offsets[k] * elem_bytes) as u64,
                    src + (self.variable_offsets[k] * elem_bytes) as u64,
                    self.lengths[k] * elem_bytes,
                )?
            };
        }
        Ok(())
    }

    /// Copies each entry back into its variable, on `stream` (after a hook
    /// reduced the buffer).
    pub fn unpack(
        &self,
        variables: &mut [&mut dyn DeviceBuffer],
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let elem_bytes = self.buffer.elem_type().bytes();
        let (flat, _flat_guard) = self.buffer.device_addr(stream);
        for k in 0..self.offsets.len() {
            let v = self.variable_indices[k];
            self.variable(variables.get(v).map(|b| &**b), k)?;
            let Some(var) = variables.get_mut(v) else {
                continue;
            };
            let (dst, _dst_guard) = var.device_addr_mut(stream);
            // SAFETY: as in `pack`, in the other direction.
            unsafe {
                copy_bytes(
                    stream,
                    dst + (self.variable_offsets[k] * elem_bytes) as u64,
                    flat + (self.offsets[k] * elem_bytes) as u64,
                    self.lengths[k] * elem_bytes,
                )?
            };
        }
        Ok(())
    }

    /// Checks that entry `k`'s variable exists, has the bucket's type and
    /// holds the piece.
    fn variable<'v>(
        &self,
        var: Option<&'v dyn DeviceBuffer>,
        k: usize,
    ) -> Result<&'v dyn DeviceBuffer> {
        let v = self.variable_indices[k];
        let var = var.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "bucket {}: variable {v} is missing from the list",
                self.index
            ))
        })?;
        let end = self.variable_offsets[k] + self.lengths[k];
        if var.elem_type() != self.buffer.elem_type() || var.elems() < end {
            return Err(Error::InvalidArgument(format!(
                "bucket {}: variable {v} is {:?} of {} elements; the bucket needs {:?} of at least {end}",
                self.index,
                var.elem_type(),
                var.elems(),
                self.buffer.elem_type()
            )));
        }
        Ok(var)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddp::plan::BucketEntry;

    fn entry(item_offset_elems: usize, elems: usize, offset_elems: usize) -> BucketEntry {
        BucketEntry {
            item: 0,
            item_offset_elems,
            elems,
            offset_elems,
        }
    }

    #[test]
    fn entries_must_fit_variable_and_bucket() {
        assert!(entry_fits(&entry(0, 6, 0), &[2, 3], 6));
        assert!(entry_fits(&entry(2, 4, 8), &[2, 3], 12));
        assert!(!entry_fits(&entry(2, 5, 0), &[2, 3], 12));
        assert!(!entry_fits(&entry(0, 6, 7), &[2, 3], 12));
        assert!(entry_fits(&entry(0, 0, 0), &[0], 0));
    }

    #[test]
    fn overflowing_input_is_refused_not_a_panic() {
        assert!(!entry_fits(&entry(0, 1, 0), &[usize::MAX, 2], usize::MAX));
        assert!(!entry_fits(&entry(usize::MAX, 1, 0), &[4], 8));
        assert!(!entry_fits(&entry(0, 1, usize::MAX), &[4], usize::MAX));
    }
}
