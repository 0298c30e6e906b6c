//! The all-reduce's one road, from `Communicator`'s four entry points to a
//! launch: [`Communicator::decide`] works out the facts of the call once
//! (its form, and for ours the element type and op), then
//! [`Communicator::all_reduce_decided`] takes the caller's buffers once
//! and runs one of two engines, NCCL or ours
//! (`IntraNodeComm::all_reduce_raw`, over the buffers' addresses).
//!
//! The caller's `NcclType` reaches our kernels as an address and an
//! [`ElemType`]: where the decision picks ours, `T`'s NCCL data type is
//! bf16, f16 or f32 ([`elem_of`]), the data our kernels reduce, and an
//! address is all NCCL itself would read.

use cudarc::driver::{CudaView, DevicePtr, DevicePtrMut};
use cudarc::nccl::{NcclType, ReduceOp as NcclOp};

use super::{Communicator, args};
use crate::decide::{AllReduceCall, decide_all_reduce};
use crate::error::{Error, Result};
use crate::intra::IntraNodeComm;
use crate::intra::all_reduce::RawAllReduce;
use crate::intra::debug;
use crate::types::AllReduceAlgo;
use crate::types::{ElemType, ReduceOp};
use crate::work::Work;

/// The facts of one all-reduce, worked out once by
/// [`Communicator::decide`] and handed down: nothing below converts the
/// op or the element type again.
#[derive(Clone, Copy, Debug)]
pub(super) struct Decision {
    /// The form the call takes.
    pub(super) algo: AllReduceAlgo,
    /// Our element type for `T` (`None`: only NCCL reduces it).
    pub(super) elem: Option<ElemType>,
    /// Our op for the call's (`None`: only NCCL has it).
    pub(super) op: Option<ReduceOp>,
    /// Elements per rank.
    pub(super) elems: usize,
}

/// The caller's buffers of one all-reduce.
enum Buffers<'b, S, R> {
    /// `recv = op(send of every rank)`.
    Apart(&'b S, &'b mut R),
    /// `buf = op(buf of every rank)`.
    InPlace(&'b mut R),
}

impl Communicator {
    /// The algorithm a call of `elems` elements of `T` with `op` would use
    /// (NCCL for the types and ops only NCCL reduces).
    pub fn algo_for<T: NcclType>(&self, elems: usize, op: &NcclOp) -> AllReduceAlgo {
        self.decide::<T>(elems, op, self.forced).algo
    }

    /// The one decision of an all-reduce: [`decide_all_reduce`] for a call
    /// of `elems` elements of `T` with `op`, `forced` as named by the
    /// caller (`_with`) or the configuration.
    pub(super) fn decide<T: NcclType>(
        &self,
        elems: usize,
        op: &NcclOp,
        forced: Option<AllReduceAlgo>,
    ) -> Decision {
        let elem = elem_of::<T>();
        let our_op = ReduceOp::from_nccl(op);
        let call = AllReduceCall {
            elem,
            bytes: elems.saturating_mul(std::mem::size_of::<T>()),
            world: self.world,
            intra: self.intra.as_ref().map(IntraNodeComm::intra_path),
            op_is_ours: our_op.is_some(),
            nccl_available: self.nccl.is_ok(),
            forced,
        };
        Decision {
            algo: decide_all_reduce(&call, &self.crossovers),
            elem,
            op: our_op,
            elems,
        }
    }

    /// The decision for an explicit algorithm (the `_with` variants):
    /// [`Self::decide`] with `algo` forced, refused under the rule of
    /// [`args::explicit_algo`] where this group, op or type cannot run it.
    fn decide_with<T: NcclType>(
        &self,
        what: &str,
        elems: usize,
        op: &NcclOp,
        algo: AllReduceAlgo,
    ) -> Result<Decision> {
        let decision = self.decide::<T>(elems, op, Some(algo));
        self.explicit_rule::<T>(what, algo, &decision)?;
        Ok(decision)
    }

    /// The rule of an explicit algorithm ([`args::explicit_algo`]) for
    /// `algo` and the call's facts in `decision`.
    fn explicit_rule<T: NcclType>(
        &self,
        what: &str,
        algo: AllReduceAlgo,
        decision: &Decision,
    ) -> Result<()> {
        args::explicit_algo(
            what,
            self.rank,
            algo,
            match &self.intra {
                Some(_) => Ok(()),
                None => Err(self.intra_reason.as_deref().unwrap_or("unknown")),
            },
            decision.op.is_some(),
            decision.elem.map(|_| ()).ok_or(nccl_type_name::<T>()),
        )
    }

    /// `recv = op(send of every rank)`, like `cudarc::nccl::Comm::all_reduce`:
    /// every `NcclType`, on our kernels where [`Communicator::algo_for`]
    /// says (bf16, f16 and f32 with sum, avg, min or max), else NCCL.
    pub fn all_reduce<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        send: &S,
        recv: &mut R,
        op: &NcclOp,
    ) -> Result<Work> {
        args::same_len("all_reduce", self.rank, send.len(), recv.len())?;
        let decision = self.decide::<T>(send.len(), op, self.forced);
        self.all_reduce_decided(Buffers::Apart(send, recv), op, decision)
    }

    /// In-place all-reduce, like `cudarc::nccl::Comm::all_reduce_in_place`
    /// (every `NcclType`; ours or NCCL's as for [`Communicator::all_reduce`]).
    pub fn all_reduce_in_place<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buf: &mut R,
        op: &NcclOp,
    ) -> Result<Work> {
        let decision = self.decide::<T>(buf.len(), op, self.forced);
        self.all_reduce_decided(Buffers::<CudaView<T>, R>::InPlace(buf), op, decision)
    }

    /// In-place all-reduce with an explicit algorithm (tests and the
    /// benchmark): the algorithm named runs (a Lamport form hands messages
    /// larger than its buffers to its barrier twin), or an error where
    /// this group, op or element type cannot run it; no fallback to NCCL
    /// (the rule of every `_with` variant).
    pub fn all_reduce_in_place_with<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buf: &mut R,
        op: &NcclOp,
        algo: AllReduceAlgo,
    ) -> Result<Work> {
        let decision = self.decide_with::<T>("all_reduce_in_place", buf.len(), op, algo)?;
        self.all_reduce_decided(Buffers::<CudaView<T>, R>::InPlace(buf), op, decision)
    }

    /// All-reduce with an explicit algorithm (tests and the benchmark),
    /// under the same rule as
    /// [`all_reduce_in_place_with`](Self::all_reduce_in_place_with).
    pub fn all_reduce_with<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        send: &S,
        recv: &mut R,
        op: &NcclOp,
        algo: AllReduceAlgo,
    ) -> Result<Work> {
        args::same_len("all_reduce", self.rank, send.len(), recv.len())?;
        let decision = self.decide_with::<T>("all_reduce", send.len(), op, algo)?;
        self.all_reduce_decided(Buffers::Apart(send, recv), op, decision)
    }

    /// The one path of every all-reduce once decided: the caller's buffers
    /// taken once, then NCCL's engine or ours.
    fn all_reduce_decided<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buffers: Buffers<'_, S, R>,
        nccl_op: &NcclOp,
        decision: Decision,
    ) -> Result<Work> {
        let what = match buffers {
            Buffers::Apart(..) => "all_reduce",
            Buffers::InPlace(_) => "all_reduce_in_place",
        };
        self.check_group(what)?;
        if decision.algo == AllReduceAlgo::Nccl {
            let comm = self.nccl_or_err()?;
            self.check_health()?;
            self.check_nccl_all_reduce::<T>(&decision)?;
            let mut bufs = self.call_buffers()?;
            let r = match buffers {
                Buffers::Apart(send, recv) => {
                    let src = bufs.input_view(send, "all-reduce input", &self.stream)?;
                    let mut dst = bufs.output_view(recv, "all-reduce output", &self.stream)?;
                    bufs.ready()?;
                    comm.all_reduce(&src, &mut dst, nccl_op)
                }
                Buffers::InPlace(buf) => {
                    let mut view = bufs.output_view(buf, "all-reduce buffer", &self.stream)?;
                    bufs.ready()?;
                    comm.all_reduce_in_place(&mut view, nccl_op)
                }
            };
            bufs.finish()?;
            return self.nccl_done("ncclAllReduce", r);
        }
        let (Some(intra), Some(elem), Some(op)) = (&self.intra, decision.elem, decision.op) else {
            // The decision picks ours only where all three exist; an error
            // naming what is missing rather than a panic otherwise.
            self.explicit_rule::<T>(what, decision.algo, &decision)?;
            return Err(Error::InvalidArgument(format!(
                "{what} on rank {}: {} cannot run this call",
                self.rank,
                decision.algo.name()
            )));
        };
        let stream = &self.stream;
        intra.with_buffers(
            stream,
            |bufs| match buffers {
                Buffers::Apart(send, recv) => {
                    let input = bufs.input(send, "all-reduce input")?;
                    Ok((input, bufs.output(recv, "all-reduce output")?))
                }
                Buffers::InPlace(buf) => {
                    let both = bufs.output(buf, "all-reduce buffer")?;
                    Ok((both, both))
                }
            },
            |(input, output)| {
                let call = RawAllReduce {
                    input,
                    output,
                    elems: decision.elems,
                    elem,
                    op,
                    algo: decision.algo,
                };
                // SAFETY: both addresses come from live device buffers of
                // `decision.elems` elements of `T`, whose NCCL data type
                // is `elem` (`elem_of`: same data, same size), kept
                // ordered with `stream` by the call's buffers (NOTE
                // [capture and event tracking] in `intra/tracked.rs`);
                // `Buffers::Apart`'s two are distinct borrows, so they do
                // not overlap.
                unsafe { intra.all_reduce_raw(&call, stream) }
            },
        )
    }

    /// Under `INTRANODE_DEBUG=detail`, the fingerprint check of an
    /// all-reduce that goes to NCCL (calls to our kernels are checked
    /// inside [`IntraNodeComm`], through the same checker).
    fn check_nccl_all_reduce<T: NcclType>(&self, decision: &Decision) -> Result<()> {
        let checker = self
            .intra
            .as_ref()
            .and_then(IntraNodeComm::call_checker)
            .or(self.call_checker.as_ref());
        match checker {
            // The element as NCCL names it (any `NcclType`, not only the
            // kernels' three; the same names for those three).
            Some(c) => c.check(|call| debug::CallFingerprint {
                elem: nccl_type_name::<T>().into(),
                ..debug::all_reduce_fingerprint(
                    call,
                    decision.elems,
                    ElemType::F32,
                    decision.op.map_or("prod", ReduceOp::name),
                    AllReduceAlgo::Nccl,
                )
            }),
            None => Ok(()),
        }
    }
}

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
