//! The decode step's tail, all-reduce + residual add + RMSNorm:
//! [`decide_norm`] picks the fused kernel (NOTE [fused norm] in
//! `kernels-gpu/src/fused_norm.rs`) or the unfused sequence (the
//! all-reduce [`decide_all_reduce`] picks, then the norm kernel).

use super::Crossovers;
use super::all_reduce::{AllReduceCall, decide_all_reduce, lamport_max_message_bytes};
use crate::topology::{MAX_DEVICES, Topology};
use crate::types::{AllReduceAlgo, NormPath};

/// One all-reduce + residual + RMSNorm call, as [`decide_norm`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormCall {
    /// The all-reduce of the call: `rows x hidden` elements, sum
    /// (`op_is_ours`), with the configuration's forced algorithm if any.
    pub all_reduce: AllReduceCall,
    /// Elements of a row (the weight's length).
    pub hidden: usize,
    /// Whether all four buffers (input, residual, weight, output) are
    /// 16-byte aligned.
    pub aligned: bool,
    /// A path the caller or the configuration (`config::NORM_PATH_ENV`) forces.
    pub forced: Option<NormPath>,
}

/// Whether the fused kernel can run `call` at all: an intra-node path
/// whose every rank stores into every peer (fully connected), 2..=8
/// ranks, rows of whole 16-byte vectors, aligned buffers, and a message
/// that fits one slot of the Lamport buffers (the kernel trusts the host
/// on this: a larger one would store past them into the peers' pads).
pub fn fused_norm_runs(call: &NormCall) -> bool {
    let ar = &call.all_reduce;
    let lanes = ar.elem.map_or(0, |e| {
        intranode_kernels_gpu::index::elems_per_vec(e.bytes())
    });
    ar.intra
        .is_some_and(|p| p.topology == Topology::FullyConnected)
        && (2..=MAX_DEVICES).contains(&ar.world)
        && call.hidden > 0
        && lanes > 0
        && call.hidden.is_multiple_of(lanes)
        && call.aligned
        && ar.bytes <= lamport_max_message_bytes(ar.world)
}

/// The path of `call`: never the fused kernel where it cannot run
/// ([`fused_norm_runs`]), whatever is forced; otherwise a forced path,
/// else fused where the all-reduce alone would be a Lamport form
/// ([`decide_all_reduce`]: a forced all-reduce algorithm or a tuning file
/// moves both alike) and the message is within
/// [`Crossovers::fused_norm_max_bytes`]: the fused kernel is the Lamport
/// one-shot with the norm folded in, so it pays where the one-shot does
/// and, measured, a little beyond (the built-in table of `decide`).
pub fn decide_norm(call: &NormCall, crossovers: &Crossovers) -> NormPath {
    if call.forced == Some(NormPath::Unfused) || !fused_norm_runs(call) {
        return NormPath::Unfused;
    }
    if call.forced == Some(NormPath::Fused) {
        return NormPath::Fused;
    }
    let ar = &call.all_reduce;
    match decide_all_reduce(ar, crossovers) {
        AllReduceAlgo::Lamport => NormPath::Fused,
        AllReduceAlgo::LamportTwoShot
            if ar.bytes
                <= crossovers
                    .fused_norm_max_bytes
                    .get(ar.world)
                    .copied()
                    .unwrap_or(0) =>
        {
            NormPath::Fused
        }
        _ => NormPath::Unfused,
    }
}
