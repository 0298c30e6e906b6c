//! The fused all-reduce + residual add + RMSNorm (NOTE [fused norm] in
//! `kernels-gpu/src/fused_norm.rs`): one launch of the Lamport one-shot
//! with the norm folded in. `Communicator::all_reduce_residual_rmsnorm`
//! decides when it runs (`decide::decide_norm`) and sends the rest down the
//! unfused sequence.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use intranode_kernels_gpu::entries::FusedNorm;
use intranode_kernels_gpu::layout::{FusedNormParams, PREFETCH_PIECE_BYTES, fused_norm_threads};

use super::IntraNodeComm;
use super::debug::CallFingerprint;
use super::launch::Launch;
use crate::config::{L2Prefetch, MAX_LAMPORT_BLOCKS};
use crate::decide::{AllReduceCall, NormCall, fused_norm_runs};
use crate::error::{Error, Result};
use crate::kernels::{Grid, KernelKey};
use crate::types::NormPath;
use crate::types::{ElemType, ReduceOp};
use crate::work::Work;

/// The fused kernel of `elem` for a world of `world`, if there is one.
fn kernel(elem: ElemType, world: usize) -> Option<KernelKey<(FusedNormParams,)>> {
    FusedNorm::FusedNorm.key(elem.into(), world)
}

/// Blocks and threads of a fused launch over `rows` rows of `row_vecs`
/// 16-byte vectors on a GPU of `sms` SMs. Threads follow the row alone
/// (`layout::fused_norm_threads`: the same on every rank, so every rank
/// sums in the same order). Blocks: one per row, and at least enough for
/// one vector per thread in the push (a single row of 16384 bf16 is
/// pushed by 4 blocks, reduced by 1), at most one per SM (rows beyond
/// loop; NOTE [lamport launch shape] in `all_reduce.rs` for why the
/// Lamport forms spread over the SMs).
pub(crate) fn launch_shape(rows: usize, row_vecs: usize, sms: usize) -> (usize, usize) {
    let threads = fused_norm_threads(row_vecs);
    let push_blocks = rows.saturating_mul(row_vecs).div_ceil(threads);
    let blocks = rows
        .max(push_blocks)
        .clamp(1, sms.clamp(1, MAX_LAMPORT_BLOCKS));
    (blocks, threads)
}

/// A region of device memory a fused call asks L2 for while it waits
/// (NOTE [l2 prefetch] in `kernels-gpu/src/fused_norm.rs`): in a decode
/// step, the weights of the GEMM that follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefetchRegion {
    /// Device address of its first byte.
    pub ptr: u64,
    /// Its length in bytes.
    pub bytes: usize,
}

/// What a launch of `row_blocks` blocks on a GPU of `sms` SMs prefetches
/// of `region` under `setting`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PrefetchPlan {
    /// Extra blocks that prefetch (0: none).
    pub blocks: usize,
    /// Address of the first piece, 16-byte aligned.
    pub ptr: u64,
    /// Bytes asked for, in `PREFETCH_PIECE_BYTES` pieces.
    pub bytes: u64,
    /// Bytes from one piece's start to the next's.
    pub stride: u64,
}

/// The prefetch of `region` (NOTE [l2 prefetch]): cut to the whole 16-byte
/// words inside it (the instruction's alignment) and to
/// `setting.max_bytes`; a larger region gives its start, or with
/// `setting.spread` pieces spread evenly over it. The blocks are the
/// setting's, at most the SMs the rows' blocks leave (every block of a
/// Lamport launch must be resident at once: a block left waiting for an SM
/// would hold back its share of the push, which the peers wait for).
pub(crate) fn prefetch_plan(
    region: Option<PrefetchRegion>,
    setting: L2Prefetch,
    row_blocks: usize,
    sms: usize,
) -> PrefetchPlan {
    const WORD_BYTES: u64 = 16;
    let piece = PREFETCH_PIECE_BYTES as u64;
    let Some(region) = region.filter(|r| r.ptr != 0) else {
        return PrefetchPlan::default();
    };
    let blocks = setting.blocks.min(sms.saturating_sub(row_blocks));
    let start = region.ptr.div_ceil(WORD_BYTES) * WORD_BYTES;
    let end = region.ptr.saturating_add(region.bytes as u64) / WORD_BYTES * WORD_BYTES;
    let whole = end.saturating_sub(start);
    let max_bytes = setting.max_bytes as u64 / WORD_BYTES * WORD_BYTES;
    let bytes = whole.min(max_bytes);
    if blocks == 0 || bytes == 0 {
        return PrefetchPlan::default();
    }
    // Spread: whole pieces, evenly apart, the last one ending in the
    // region (`stride >= piece` as `whole > bytes >= pieces * piece`).
    let pieces = bytes / piece;
    let stride = if setting.spread && whole > bytes && pieces > 1 {
        (whole - piece) / (pieces - 1) / WORD_BYTES * WORD_BYTES
    } else {
        piece
    };
    PrefetchPlan {
        blocks,
        ptr: start,
        bytes: if stride > piece {
            pieces * piece
        } else {
            bytes
        },
        stride,
    }
}

impl IntraNodeComm {
    /// The fused call over raw addresses: `input` (`rows x hidden`, this
    /// rank's partial sums) is all-reduced (sum) in place, `residual +=
    /// input` (rounded), `output = residual * rsqrt(mean(residual^2) +
    /// eps) * weight` (`weight` of `hidden` elements), in one launch on
    /// `stream`. Errors where the fused kernel cannot run this call
    /// (`decide::fused_norm_runs`: world, topology, row shape, alignment,
    /// size), so callers decide first (`decide::decide_norm`). While it
    /// waits on its peers, it asks L2 for `prefetch` where the setting
    /// (`config::L2_PREFETCH_ENV`), the kernel image and the GPU allow
    /// (NOTE [l2 prefetch] in `kernels-gpu/src/fused_norm.rs`).
    ///
    /// # Safety
    /// `input`, `residual` and `output` must be device memory of this
    /// comm's device holding `rows * hidden` elements of `elem`, `weight`
    /// `hidden`, not overlapping one another, valid until the stream
    /// passes the call; `prefetch`, if any, device memory of this context
    /// that is not freed before the stream passes the call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn all_reduce_residual_rmsnorm_raw(
        &self,
        input: u64,
        residual: u64,
        weight: u64,
        output: u64,
        rows: usize,
        hidden: usize,
        elem: ElemType,
        eps: f32,
        prefetch: Option<PrefetchRegion>,
        stream: &Arc<CudaStream>,
    ) -> Result<Work> {
        const WHAT: &str = "all_reduce_residual_rmsnorm";
        let build = || -> Result<Option<Launch<_>>> {
            let elems = rows.saturating_mul(hidden);
            let call = NormCall {
                all_reduce: AllReduceCall {
                    elem: Some(elem),
                    bytes: elems.saturating_mul(elem.bytes()),
                    world: self.world(),
                    intra: Some(self.intra_path()),
                    op_is_ours: true,
                    nccl_available: false,
                    forced: None,
                },
                hidden,
                aligned: intranode_kernels_gpu::index::all_vec_aligned(&[
                    input as usize,
                    residual as usize,
                    weight as usize,
                    output as usize,
                ]),
                forced: Some(NormPath::Fused),
            };
            // The kernel trusts the host on every one of these (a message
            // past the slot would store into the peers' pads).
            if !fused_norm_runs(&call) {
                return Err(Error::InvalidArgument(format!(
                    "{WHAT} on rank {}: the fused kernel does not take {rows} x {hidden} {elem:?} on {} ranks ({:?}, buffers {}aligned to 16 bytes); the communicator sends such calls down the unfused path",
                    self.rank(),
                    self.world(),
                    self.topology(),
                    if call.aligned { "" } else { "not " },
                )));
            }
            let kernel = kernel(elem, self.world()).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{WHAT} on rank {}: no kernel for a world of {}",
                    self.rank(),
                    self.world()
                ))
            })?;
            if let Some(c) = self.call_checker() {
                c.check(|n| CallFingerprint {
                    collective: WHAT.into(),
                    call: n,
                    elems: elems as u64,
                    elem: elem.suffix().into(),
                    op: ReduceOp::Sum.name().into(),
                    algo: NormPath::Fused.name().into(),
                })?;
            }
            self.increment_usage_counter();
            if elems == 0 {
                return Ok(None);
            }
            let mut ar = self.params_template();
            ar.op = ReduceOp::Sum.code();
            ar.input = input;
            ar.output = input;
            ar.elems = elems as u64;
            let row_vecs = hidden / intranode_kernels_gpu::index::elems_per_vec(elem.bytes());
            let sms = self.lamport_launch().sms;
            let (row_blocks, threads) = launch_shape(rows, row_vecs, sms);
            let plan = prefetch_plan(
                prefetch.filter(|_| self.kernels.l2_prefetch()),
                self.l2_prefetch,
                row_blocks,
                sms,
            );
            let params = FusedNormParams {
                ar,
                residual,
                weight,
                normed: output,
                rows: rows as u64,
                hidden: hidden as u64,
                eps,
                prefetch_blocks: plan.blocks as u32,
                prefetch: plan.ptr,
                prefetch_bytes: plan.bytes,
                prefetch_stride: plan.stride,
            };
            Ok(Some(Launch {
                key: kernel,
                grid: Grid::new(row_blocks + plan.blocks, threads),
                args: (params,),
            }))
        };
        // SAFETY: the caller vouches for the four buffers; `fused_norm_runs`
        // (in `build`) checked what the kernel trusts (whole vectors per
        // row, alignment, the message within a Lamport slot); the block
        // shape is the one every rank derives from `hidden`; these kernels
        // keep no per-block flags.
        unsafe { self.run(WHAT, stream, build) }
    }
}

#[cfg(test)]
mod tests {
    use intranode_kernels_gpu::layout::MAX_RANKS;

    use super::*;

    #[test]
    fn every_world_has_its_kernel() {
        for elem in ElemType::ALL {
            for world in 2..=MAX_RANKS {
                assert!(kernel(elem, world).is_some());
            }
            assert!(kernel(elem, 1).is_none());
            assert!(kernel(elem, MAX_RANKS + 1).is_none());
        }
    }

    #[test]
    fn prefetch_plan_cuts_to_words_the_cap_and_free_sms() {
        let setting = L2Prefetch {
            blocks: 16,
            max_bytes: 8 << 20,
            spread: false,
        };
        let region = |ptr, bytes| Some(PrefetchRegion { ptr, bytes });
        let plan = |blocks, ptr, bytes| PrefetchPlan {
            blocks,
            ptr,
            bytes,
            stride: PREFETCH_PIECE_BYTES as u64,
        };
        // A whole aligned region within the cap.
        assert_eq!(
            prefetch_plan(region(0x1000, 4096), setting, 1, 132),
            plan(16, 0x1000, 4096)
        );
        // Capped, and cut to the 16-byte words inside it.
        assert_eq!(
            prefetch_plan(region(0x1008, 64 << 20), setting, 1, 132),
            plan(16, 0x1010, 8 << 20)
        );
        assert_eq!(
            prefetch_plan(region(0x1008, 40), setting, 1, 132),
            plan(16, 0x1010, 32)
        );
        // Fewer blocks where the rows leave fewer SMs; none where none.
        assert_eq!(
            prefetch_plan(region(0x1000, 4096), setting, 120, 132).blocks,
            12
        );
        let none = PrefetchPlan::default();
        assert_eq!(prefetch_plan(region(0x1000, 4096), setting, 132, 132), none);
        // Nothing asked, nothing whole, null, or the setting off.
        assert_eq!(prefetch_plan(None, setting, 1, 132), none);
        assert_eq!(prefetch_plan(region(0x1001, 20), setting, 1, 132), none);
        assert_eq!(prefetch_plan(region(0, 4096), setting, 1, 132), none);
        let off = L2Prefetch {
            blocks: 0,
            ..setting
        };
        assert_eq!(prefetch_plan(region(0x1000, 4096), off, 1, 132), none);
    }

    #[test]
    fn spread_prefetch_keeps_every_piece_inside_the_region() {
        let piece = PREFETCH_PIECE_BYTES as u64;
        let setting = L2Prefetch {
            blocks: 8,
            max_bytes: 8 << 20,
            spread: true,
        };
        for (ptr, bytes) in [
            (0x10_0000u64, 56usize << 20),
            (0x10_0008, 12 << 20),
            (0x10_0000, (8 << 20) + 16),
            (0x10_0000, 9 << 20),
        ] {
            let p = prefetch_plan(Some(PrefetchRegion { ptr, bytes }), setting, 1, 132);
            let pieces = p.bytes.div_ceil(piece);
            assert_eq!(pieces, (8 << 20) / piece, "{bytes}");
            assert!(p.stride >= piece && p.stride.is_multiple_of(16), "{p:?}");
            assert!(p.ptr.is_multiple_of(16) && p.ptr >= ptr);
            let last_end = p.ptr + (pieces - 1) * p.stride + piece;
            assert!(last_end <= ptr + bytes as u64, "{p:?} {bytes}");
        }
        // 56 MiB in 8 MiB: a piece every 7 pieces' room (a little more,
        // the last piece ending at the region's end).
        let p = prefetch_plan(
            Some(PrefetchRegion {
                ptr: 0x10_0000,
                bytes: 56 << 20,
            }),
            setting,
            1,
            132,
        );
        assert!((7 * piece..8 * piece).contains(&p.stride), "{p:?}");
        // A region within the cap is one run, spread or not.
        let p = prefetch_plan(
            Some(PrefetchRegion {
                ptr: 0x10_0000,
                bytes: 4 << 20,
            }),
            setting,
            1,
            132,
        );
        assert_eq!((p.bytes, p.stride), (4 << 20, piece));
    }

    #[test]
    fn launch_shape_holds_every_row_and_spreads_the_push() {
        // bf16 rows of hidden 4096, 8192 and 16384 on a 132-SM H200.
        assert_eq!(launch_shape(1, 512, 132), (1, 512));
        assert_eq!(launch_shape(1, 2048, 132), (4, 512));
        assert_eq!(launch_shape(8, 1024, 132), (16, 512));
        assert_eq!(launch_shape(64, 512, 132), (64, 512));
        assert_eq!(launch_shape(64, 2048, 132), (132, 512));
        assert_eq!(launch_shape(1000, 512, 132), (132, 512));
        // Small rows: a warp per block.
        assert_eq!(launch_shape(3, 16, 132), (3, 32));
        // Never an empty grid, never more blocks than SMs.
        assert_eq!(launch_shape(0, 512, 132), (1, 512));
        assert_eq!(launch_shape(5, 512, 0), (1, 512));
        for sms in [1, 8, 132] {
            for rows in [1, 7, 64, 200] {
                for row_vecs in [1, 100, 512, 2048, 4096] {
                    let (b, t) = launch_shape(rows, row_vecs, sms);
                    assert!((1..=sms).contains(&b) && b >= rows.min(sms));
                    assert_eq!(t, fused_norm_threads(row_vecs));
                }
            }
        }
    }
}
