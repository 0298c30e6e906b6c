//! `IntraNodeComm::broadcast`: the root's bytes to every rank, through the
//! root's symmetric buffer (kernel: `kernels-gpu/src/broadcast.rs`), on the
//! caller's stream (NOTE [IntraNodeComm stream semantics] in
//! `all_reduce.rs`). Broadcasts and all-reduces share the kernels' call
//! count and the buffer halves, so they may be enqueued in any order.
//!
//! Whether a broadcast comes here or goes to NCCL is decided in
//! `decide::broadcast`.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtrMut};
use intranode_kernels_gpu::entries::Broadcast;
use intranode_kernels_gpu::index::VEC_BYTES;
use intranode_kernels_gpu::layout::{BroadcastParams, MAX_BLOCKS};

use super::IntraNodeComm;
use super::launch::Launch;
use crate::error::{Error, Result};
use crate::kernels::{Grid, KernelKey};
use crate::work::Work;

use super::launch_shape::THREADS;
/// Most blocks per launch: like two-shot, a broadcast is bandwidth-bound
/// on one peer's buffer. Not tuned separately.
const BROADCAST_MAX_BLOCKS: usize = 64;
const _: () = assert!(BROADCAST_MAX_BLOCKS <= MAX_BLOCKS);

/// Blocks of a launch whose largest chunk holds `chunk_bytes` bytes.
fn blocks_for(chunk_bytes: usize) -> usize {
    chunk_bytes
        .div_ceil(VEC_BYTES)
        .div_ceil(THREADS)
        .clamp(1, BROADCAST_MAX_BLOCKS)
}

/// The broadcast kernel for `world` ranks, if there is one.
fn broadcast_kernel(world: usize) -> Option<KernelKey<(BroadcastParams,)>> {
    Broadcast::Broadcast.key(world)
}

impl IntraNodeComm {
    /// Broadcasts `buf` from `root` to every rank, in place, on `stream`:
    /// the root's elements are read, every other rank's overwritten. Every
    /// rank must call it with the same length and root.
    pub(crate) fn broadcast<T>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let bytes = buf.num_bytes();
        self.with_buffers(
            stream,
            |bufs| bufs.output(buf, "broadcast buffer"),
            // SAFETY: `ptr` is a live device buffer of `bytes` bytes that
            // the call's buffers keep ordered with `stream`.
            |ptr| unsafe { self.broadcast_raw(ptr, bytes, root, stream) },
        )
    }

    /// Broadcast over a raw device address: `bytes` bytes at `buf` of
    /// `root` land at `buf` of every rank. Any byte count and alignment
    /// (16-byte aligned buffers take the vector path); messages larger
    /// than half the symmetric buffer run chunk by chunk in one launch.
    ///
    /// # Safety
    /// `buf` must be device memory of this comm's device holding `bytes`
    /// bytes, valid until the stream passes the call, and not written by
    /// other work meanwhile.
    pub(crate) unsafe fn broadcast_raw(
        &self,
        buf: u64,
        bytes: usize,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        let build = || -> Result<Option<Launch<_>>> {
            if root >= self.world() {
                return Err(Error::InvalidArgument(format!(
                    "broadcast on rank {}: root {root} is outside the world of {}",
                    self.rank(),
                    self.world()
                )));
            }
            let half_bytes = self.half_buffer_bytes();
            if half_bytes == 0 {
                return Err(Error::InvalidArgument(format!(
                    "broadcast on rank {}: symmetric buffer of {} bytes is too small",
                    self.rank(),
                    self.symm().buffer_bytes()
                )));
            }
            let kernel = broadcast_kernel(self.world()).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "broadcast on rank {}: no kernel for a world of {}",
                    self.rank(),
                    self.world()
                ))
            })?;
            self.increment_usage_counter();
            let launch = (bytes > 0).then(|| Launch {
                key: kernel,
                grid: Grid::new(
                    blocks_for(bytes.min(half_bytes)).min(self.max_blocks()),
                    THREADS,
                ),
                args: (self.broadcast_params(buf, bytes, root),),
            });
            Ok(launch)
        };
        // SAFETY: the caller vouches for `buf`, the peers' buffers and pads
        // live as long as `self`; `blocks_for` stays within MAX_BLOCKS.
        unsafe { self.run("broadcast", stream, build) }
    }

    /// The launch parameters of one broadcast (the same buffers, pads,
    /// halves, bound and error word as the all-reduce's).
    fn broadcast_params(&self, buf: u64, bytes: usize, root: usize) -> BroadcastParams {
        let t = self.params_template();
        BroadcastParams {
            bufs: t.bufs,
            pads: t.pads,
            buf,
            bytes: bytes as u64,
            half_bytes: t.half_bytes,
            timeout_ns: t.timeout_ns,
            error: t.error,
            abort: t.abort,
            rank: t.rank,
            root: root as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use intranode_kernels_gpu::layout::MAX_RANKS;

    use super::*;

    #[test]
    fn every_world_has_its_kernel() {
        for world in 2..=MAX_RANKS {
            assert!(broadcast_kernel(world).is_some(), "w{world}");
        }
        assert_eq!(broadcast_kernel(1), None);
        assert_eq!(broadcast_kernel(MAX_RANKS + 1), None);
    }

    #[test]
    fn block_counts_stay_inside_the_pad_layout() {
        assert_eq!(blocks_for(1), 1);
        assert_eq!(blocks_for(16 * 512), 1);
        assert_eq!(blocks_for(16 * 512 + 1), 2);
        assert_eq!(blocks_for(5 << 20), BROADCAST_MAX_BLOCKS);
        for bytes in [0usize, 1, 15, 17, 1 << 30] {
            assert!((1..=MAX_BLOCKS).contains(&blocks_for(bytes)));
        }
    }
}
