//! `broadcast_coalesced` (seed comm.hpp, c10d `broadcast_coalesced`): many
//! buffers of mixed element types broadcast from one rank through a few
//! flat buckets, as DDP does to make every rank start from rank 0's
//! parameters.

use cudarc::driver::{CudaSlice, DevicePtrMut};

use super::buffer::{DeviceBuffer, copy_bytes};
use super::plan::{BucketPlan, PlanItem, plan_buckets};
use crate::communicator::Communicator;
use crate::error::{DriverContext, Error, Result};
use crate::types::BroadcastAlgo;

/// Broadcasts every buffer of `buffers` from `root` to every rank, in
/// place, on the communicator's stream, through flat buckets of at most
/// `buffer_size_bytes` bytes each (one element type per bucket, see
/// [`plan_buckets`]). The path is the communicator's
/// ([`Communicator::broadcast_algo`]).
///
/// Every rank must pass buffers of the same element types and lengths, in
/// the same order (as with c10d; it is not checked: a mismatch ends in a
/// [`Error::PeerTimeout`] on the symmetric-memory path and in NCCL's
/// behaviour on the other).
pub fn broadcast_coalesced(
    comm: &Communicator,
    buffers: &mut [&mut dyn DeviceBuffer],
    buffer_size_bytes: usize,
    root: usize,
) -> Result<()> {
    broadcast_coalesced_with(
        comm,
        buffers,
        buffer_size_bytes,
        root,
        comm.broadcast_algo(),
    )
}

/// [`broadcast_coalesced`] on an explicit path (tests, benchmarks).
pub fn broadcast_coalesced_with(
    comm: &Communicator,
    buffers: &mut [&mut dyn DeviceBuffer],
    buffer_size_bytes: usize,
    root: usize,
    algo: BroadcastAlgo,
) -> Result<()> {
    if root >= comm.world_size() {
        return Err(Error::InvalidArgument(format!(
            "broadcast_coalesced on rank {}: root {root} is outside the world of {}",
            comm.rank(),
            comm.world_size()
        )));
    }
    let items: Vec<PlanItem> = buffers
        .iter()
        .map(|b| PlanItem::new(b.elem_type(), b.elems()))
        .collect();
    let plan = plan_buckets(&items, buffer_size_bytes)?;
    let stream = comm.stream().clone();
    let device = Some(stream.context().ordinal());
    // One scratch bucket, reused: every use is ordered on the one stream.
    let scratch_bytes = plan
        .iter()
        .filter(|b| b.entries.len() > 1)
        .map(BucketPlan::bytes)
        .max()
        .unwrap_or(0);
    let mut scratch: CudaSlice<u8> = stream
        .alloc_zeros(scratch_bytes.max(1))
        .ctx("cuMemAllocAsync", device)?;
    let is_root = comm.rank() == root;
    for bucket in &plan {
        // A bucket of one piece is broadcast where it lies: packing it
        // would only add two copies.
        if let [e] = bucket.entries[..] {
            let range = e.item_offset_elems..e.item_offset_elems + e.elems;
            buffers[e.item].broadcast_range(comm, range, root, algo)?;
            continue;
        }
        let elem_bytes = bucket.elem.bytes();
        if is_root {
            let (flat, _flat_guard) = scratch.device_ptr_mut(&stream);
            for e in &bucket.entries {
                let (src, _src_guard) = buffers[e.item].device_addr(&stream);
                // SAFETY: the plan keeps the piece inside its buffer (its
                // length came from the buffer) and inside the scratch (the
                // largest packed bucket's size); the guards order both
                // with the stream.
                unsafe {
                    copy_bytes(
                        &stream,
                        flat + (e.offset_elems * elem_bytes) as u64,
                        src + (e.item_offset_elems * elem_bytes) as u64,
                        e.elems * elem_bytes,
                    )?
                };
            }
        }
        let mut view = scratch
            .try_slice_mut(..bucket.bytes())
            .ok_or_else(|| Error::InvalidArgument("bucket larger than its scratch".into()))?;
        comm.broadcast_in_place_with(&mut view, root, algo)?;
        if !is_root {
            let (flat, _flat_guard) = scratch.device_ptr_mut(&stream);
            for e in &bucket.entries {
                let (dst, _dst_guard) = buffers[e.item].device_addr_mut(&stream);
                // SAFETY: as for packing, in the other direction.
                unsafe {
                    copy_bytes(
                        &stream,
                        dst + (e.item_offset_elems * elem_bytes) as u64,
                        flat + (e.offset_elems * elem_bytes) as u64,
                        e.elems * elem_bytes,
                    )?
                };
            }
        }
    }
    Ok(())
}
