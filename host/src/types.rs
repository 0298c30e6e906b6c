//! The value types every layer shares: [`ElemType`] (what the kernels
//! compute on), [`DType`] (the host types behind it), [`ReduceOp`], and
//! the names of the algorithms ([`AllReduceAlgo`], [`BroadcastAlgo`],
//! [`NormPath`]).
//! Each is defined here once; the kernels' codes for them live in
//! `intranode_kernels_gpu::layout`.

use cudarc::driver::DeviceRepr;
use cudarc::nccl::ReduceOp as NcclOp;
use intranode_kernels_gpu::layout;
use serde::{Deserialize, Serialize};

/// Element types the kernels handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElemType {
    /// bfloat16 (`half::bf16`).
    Bf16,
    /// IEEE half precision (`half::f16`).
    F16,
    /// IEEE single precision.
    F32,
}

impl ElemType {
    /// Every element type, in a fixed order.
    pub const ALL: [ElemType; 3] = [ElemType::Bf16, ElemType::F16, ElemType::F32];

    /// Bytes per element.
    pub const fn bytes(self) -> usize {
        match self {
            ElemType::Bf16 | ElemType::F16 => 2,
            ElemType::F32 => 4,
        }
    }

    /// Suffix of kernel names (`add_bf16`).
    pub const fn suffix(self) -> &'static str {
        match self {
            ElemType::Bf16 => "bf16",
            ElemType::F16 => "f16",
            ElemType::F32 => "f32",
        }
    }
}

/// A host type with a device counterpart the kernels handle.
pub trait DType: DeviceRepr + Copy + Send + Sync + 'static {
    /// The kernels' name for it.
    const ELEM: ElemType;
    /// Widens to f64 (for host references).
    fn to_f64(self) -> f64;
    /// Rounds from f64 to nearest, ties to even.
    fn from_f64(v: f64) -> Self;
    /// Rounds from f32 to nearest, ties to even, as the kernels' `cvt.rn`.
    fn from_f32(v: f32) -> Self;
    /// Widens to f32 exactly.
    fn to_f32(self) -> f32;
}

impl DType for half::bf16 {
    const ELEM: ElemType = ElemType::Bf16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        self.to_f32()
    }
}

impl DType for half::f16 {
    const ELEM: ElemType = ElemType::F16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        self.to_f32()
    }
}

impl DType for f32 {
    const ELEM: ElemType = ElemType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}

/// Reduction operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
    /// Sum divided by the world size.
    Avg,
    /// Element-wise minimum.
    Min,
    /// Element-wise maximum.
    Max,
}

impl ReduceOp {
    /// Every op, in a fixed order.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max];

    /// The kernels' `layout::OP_*` code.
    pub(crate) const fn code(self) -> u32 {
        match self {
            ReduceOp::Sum => layout::OP_SUM,
            ReduceOp::Avg => layout::OP_AVG,
            ReduceOp::Min => layout::OP_MIN,
            ReduceOp::Max => layout::OP_MAX,
        }
    }

    /// Its name in call fingerprints and messages.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }

    /// Ours for an NCCL op; `None` for the ops only NCCL has (product).
    pub const fn from_nccl(op: &NcclOp) -> Option<ReduceOp> {
        match op {
            NcclOp::Sum => Some(ReduceOp::Sum),
            NcclOp::Avg => Some(ReduceOp::Avg),
            NcclOp::Min => Some(ReduceOp::Min),
            NcclOp::Max => Some(ReduceOp::Max),
            NcclOp::Prod => None,
        }
    }

    /// NCCL's op for ours.
    pub const fn to_nccl(self) -> NcclOp {
        match self {
            ReduceOp::Sum => NcclOp::Sum,
            ReduceOp::Avg => NcclOp::Avg,
            ReduceOp::Min => NcclOp::Min,
            ReduceOp::Max => NcclOp::Max,
        }
    }
}

/// All-reduce algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum AllReduceAlgo {
    /// One-shot without barriers: every rank pushes its input to every
    /// peer, flags travel with the data. Messages larger than a Lamport
    /// slot run as [`OneShot`](Self::OneShot).
    // NOTE [lamport] in `kernels-gpu/src/lamport.rs`.
    Lamport,
    /// Two-shot without barriers: reduce-scatter and all-gather by stores
    /// into peers' Lamport buffers. Messages larger than its buffers take
    /// run as [`TwoShot`](Self::TwoShot).
    // NOTE [lamport two-shot].
    LamportTwoShot,
    /// Every rank reads every peer's input: lowest latency.
    OneShot,
    /// Reduce-scatter then all-gather over peer loads: bandwidth.
    TwoShot,
    /// Hybrid cube mesh (8 GPUs, DGX-1 links).
    Hcm,
    /// For large messages: every NVLink byte a store, reduce-scatter and
    /// all-gather merged per chunk through rings of slots per block and
    /// peer in the symmetric buffers; memory stays the symmetric buffer
    /// (grown to the push form's scratch) whatever the message. The size
    /// rule picks it at 2 to 4 ranks from the crossover where it was
    /// measured to lead (16 or 32 MiB); at 5 to 8 ranks only a forced call
    /// runs it (`INTRANODE_ALL_REDUCE_ALGO`, `Communicator::all_reduce_with`,
    /// the benchmark's `--algos`). Messages above
    /// `decide::push_max_message_bytes` (16 GiB) run as
    /// [`TwoShot`](Self::TwoShot).
    // NOTE [push all-reduce] in `kernels-gpu/src/push.rs`.
    Push,
    /// NCCL's all-reduce (the fallback).
    Nccl,
}

impl AllReduceAlgo {
    /// The name used by `FORCE_ALGO_ENV` and the benchmark.
    pub const fn name(self) -> &'static str {
        match self {
            AllReduceAlgo::Lamport => "lamport",
            AllReduceAlgo::LamportTwoShot => "lamport-two-shot",
            AllReduceAlgo::OneShot => "one-shot",
            AllReduceAlgo::TwoShot => "two-shot",
            AllReduceAlgo::Hcm => "hcm",
            AllReduceAlgo::Push => "push",
            AllReduceAlgo::Nccl => "nccl",
        }
    }

    /// Parses a [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Self::Lamport,
            Self::LamportTwoShot,
            Self::OneShot,
            Self::TwoShot,
            Self::Hcm,
            Self::Push,
            Self::Nccl,
        ]
        .into_iter()
        .find(|a| a.name() == name.trim())
    }
}

/// How `Communicator::all_reduce_residual_rmsnorm` runs (`decide_norm`
/// picks it; `config::NORM_PATH_ENV` forces it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum NormPath {
    /// One launch: the Lamport one-shot all-reduce with the residual add
    /// and the RMSNorm folded in.
    // NOTE [fused norm] in `kernels-gpu/src/fused_norm.rs`.
    Fused,
    /// The all-reduce the communicator picks (ours or NCCL), then the
    /// residual + RMSNorm kernel.
    Unfused,
}

impl NormPath {
    /// The name used by `config::NORM_PATH_ENV` and the tests.
    pub const fn name(self) -> &'static str {
        match self {
            NormPath::Fused => "fused",
            NormPath::Unfused => "unfused",
        }
    }

    /// Parses a [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Fused, Self::Unfused]
            .into_iter()
            .find(|p| p.name() == name.trim())
    }
}

/// Broadcast paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BroadcastAlgo {
    /// Readers load the root's symmetric buffer over NVLink.
    SymmMem,
    /// NCCL's broadcast.
    Nccl,
}

impl BroadcastAlgo {
    /// The name `FORCE_BROADCAST_ENV` takes.
    pub const fn name(self) -> &'static str {
        match self {
            BroadcastAlgo::SymmMem => "symm-mem",
            BroadcastAlgo::Nccl => "nccl",
        }
    }

    /// Parses a [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::SymmMem, Self::Nccl]
            .into_iter()
            .find(|a| a.name() == name.trim())
    }
}
