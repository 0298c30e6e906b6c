//! The Llama-shaped layer stack of `intranode-bench decode`: the shapes,
//! each rank's weight shards, the activations, and one decode step as it
//! goes into the CUDA graph.
//!
//! One layer, as `decode_step.py` (the PyTorch anchor) has
//! it: RMSNorm, QKV GEMM on the rank's shard, the first `q_heads x
//! head_dim / world` columns taken as the attention's output (attention
//! over the KV cache is left out: memory-bound and the same for every
//! variant), O GEMM, all-reduce, residual add, RMSNorm, gate-up GEMM,
//! SiLU(gate) x up, down GEMM, all-reduce, residual add. The residual add
//! and the next norm are one kernel (`Communicator::residual_rmsnorm`),
//! so the stack is one RMSNorm, then per layer the ops above with each
//! (residual add, RMSNorm) pair fused; the last layer's pair norms for the
//! model's final RMSNorm (the one before the LM head in Llama), which the
//! anchor leaves out: one norm more over the whole stack.

use anyhow::{Context, Result, bail};
use cudarc::driver::{CudaSlice, DevicePtr};
use cudarc::nccl::ReduceOp;
use half::bf16;
use intranode::NormPath;
use intranode::kernels::TestKernelModule;

use super::Variant;
use super::blas::Blas;
use intranode_harness::Rank;

/// RMSNorm's epsilon, as the anchor's.
pub const EPS: f32 = 1e-5;
/// Standard deviation of the random weights (the anchor's `randn * 0.01`).
pub const WEIGHT_STD: f32 = 0.01;
/// Standard deviation of the step's input (the anchor's `randn`).
pub const INPUT_STD: f32 = 1.0;

/// A Llama-3 shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub name: &'static str,
    pub hidden: usize,
    pub intermediate: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    /// The whole model's layers, for the time per token.
    pub model_layers: usize,
}

/// The shapes the benchmark knows (those the PyTorch anchor measured).
pub const SHAPES: [Shape; 2] = [
    Shape {
        name: "llama3-8b",
        hidden: 4096,
        intermediate: 14336,
        q_heads: 32,
        kv_heads: 8,
        model_layers: 32,
    },
    Shape {
        name: "llama3-70b",
        hidden: 8192,
        intermediate: 28672,
        q_heads: 64,
        kv_heads: 8,
        model_layers: 80,
    },
];

impl Shape {
    pub fn by_name(name: &str) -> Result<Shape> {
        SHAPES
            .iter()
            .find(|s| s.name == name)
            .copied()
            .with_context(|| {
                let known: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
                format!("unknown model {name:?} (known: {})", known.join(", "))
            })
    }

    /// One rank's shard at tensor parallelism `world`: QKV and gate-up
    /// split by columns, O and down by rows, as Megatron splits them.
    pub fn shard(&self, world: usize) -> Result<Shard> {
        let head_dim = self.hidden / self.q_heads;
        let qkv = (self.q_heads + 2 * self.kv_heads) * head_dim;
        let attn = self.q_heads * head_dim;
        for (what, n) in [
            ("q, k and v columns", qkv),
            ("attention columns", attn),
            ("intermediate size", self.intermediate),
        ] {
            if world == 0 || !n.is_multiple_of(world) {
                bail!(
                    "{}: the {what} ({n}) do not split over {world} ranks",
                    self.name
                );
            }
        }
        Ok(Shard {
            hidden: self.hidden,
            qkv_cols: qkv / world,
            attn_cols: attn / world,
            inter_cols: self.intermediate / world,
        })
    }
}

/// What one rank holds of a layer, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub hidden: usize,
    /// Columns of the QKV GEMM's output.
    pub qkv_cols: usize,
    /// Of which the first are the attention's output (the O GEMM's input).
    pub attn_cols: usize,
    /// Columns of the SiLU x mul's output (the gate-up GEMM has twice).
    pub inter_cols: usize,
}

/// The four weight matrices of a layer, row-major `[in, out]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matrix {
    Qkv,
    O,
    GateUp,
    Down,
}

impl Matrix {
    pub const ALL: [Matrix; 4] = [Matrix::Qkv, Matrix::O, Matrix::GateUp, Matrix::Down];

    /// `(rows, cols)` of this rank's shard: the GEMM's `k` and `n`.
    pub fn dims(self, s: &Shard) -> (usize, usize) {
        match self {
            Matrix::Qkv => (s.hidden, s.qkv_cols),
            Matrix::O => (s.attn_cols, s.hidden),
            Matrix::GateUp => (s.hidden, 2 * s.inter_cols),
            Matrix::Down => (s.inter_cols, s.hidden),
        }
    }
}

/// The fill seed of a weight shard: distinct per layer (so no two layers
/// share weights and the L2 cache holds none from one replay to the next),
/// matrix and rank (each rank's shard is its own part of the weight).
pub fn weight_seed(seed: u64, layer: usize, m: Matrix, rank: usize) -> u64 {
    let m = m as u64 + 1;
    intranode_harness::data::mix(
        seed ^ intranode_harness::data::mix(((layer as u64) << 40) ^ (m << 32) ^ rank as u64),
    )
}

/// The seed of the step's input, the same on every rank (the hidden state
/// is replicated in tensor parallelism).
pub fn input_seed(seed: u64, batch: usize) -> u64 {
    intranode_harness::data::mix(seed ^ 0x1_4E9A ^ ((batch as u64) << 20))
}

/// One layer's shards, with their addresses taken once (see `blas.rs`).
pub struct LayerWeights {
    /// The shards, in [`Matrix::ALL`]'s order: kept alive for `ptrs`, and
    /// named to the fused norm's L2 prefetch.
    mats: [CudaSlice<bf16>; 4],
    pub ptrs: [u64; 4],
}

/// Every layer's shards and the norms' weight (ones, as the anchor's).
pub struct Weights {
    pub layers: Vec<LayerWeights>,
    pub norm: CudaSlice<bf16>,
    pub shard: Shard,
}

impl Weights {
    /// `layers` layers of random shards, filled on the GPU.
    pub fn new(
        r: &Rank,
        kernels: &TestKernelModule,
        shard: Shard,
        layers: usize,
        seed: u64,
    ) -> Result<Self> {
        let mut out = Vec::with_capacity(layers);
        for l in 0..layers {
            let mut mats = Vec::with_capacity(4);
            let mut ptrs = [0u64; 4];
            for (i, m) in Matrix::ALL.into_iter().enumerate() {
                let (k, n) = m.dims(&shard);
                // SAFETY: filled right below, before any read.
                let mut buf = unsafe { r.stream.alloc::<bf16>(k * n) }
                    .with_context(|| format!("allocating {m:?} of layer {l} ({k} x {n} bf16)"))?;
                kernels.fill_uniform(
                    &r.stream,
                    &mut buf,
                    weight_seed(seed, l, m, r.rank()),
                    WEIGHT_STD,
                )?;
                ptrs[i] = addr(&buf, &r.stream);
                mats.push(buf);
            }
            let mats: [CudaSlice<bf16>; 4] = mats
                .try_into()
                .map_err(|_| anyhow::anyhow!("four matrices expected"))?;
            out.push(LayerWeights { mats, ptrs });
        }
        let norm = r.stream.clone_htod(&vec![bf16::ONE; shard.hidden])?;
        r.stream.synchronize()?;
        Ok(Weights {
            layers: out,
            norm,
            shard,
        })
    }
}

/// A buffer's device address, taken outside any capture.
fn addr(buf: &CudaSlice<bf16>, stream: &cudarc::driver::CudaStream) -> u64 {
    let (ptr, _guard) = buf.device_ptr(stream);
    ptr
}

/// One batch's activations.
pub struct Activations {
    pub batch: usize,
    /// The step's input, never written by the step.
    pub x0: CudaSlice<bf16>,
    /// The residual stream (`x0` at the start of every step).
    pub x: CudaSlice<bf16>,
    /// A norm's output, the next GEMM's input.
    pub h: CudaSlice<bf16>,
    pub qkv: CudaSlice<bf16>,
    /// The O GEMM's output, all-reduced in place.
    pub o: CudaSlice<bf16>,
    pub gate_up: CudaSlice<bf16>,
    /// SiLU(gate) x up.
    pub act: CudaSlice<bf16>,
    /// The down GEMM's output, all-reduced in place.
    pub m: CudaSlice<bf16>,
    /// Their addresses, taken once (see `blas.rs`).
    pub ptrs: ActPtrs,
}

/// The addresses of [`Activations`], taken once.
#[derive(Debug, Clone, Copy)]
pub struct ActPtrs {
    pub x0: u64,
    pub x: u64,
    pub h: u64,
    pub qkv: u64,
    pub o: u64,
    pub gate_up: u64,
    pub act: u64,
    pub m: u64,
}

impl Activations {
    pub fn new(
        r: &Rank,
        kernels: &TestKernelModule,
        s: &Shard,
        batch: usize,
        seed: u64,
    ) -> Result<Self> {
        let zeros = |n: usize| r.stream.alloc_zeros::<bf16>(batch * n);
        let mut x0 = zeros(s.hidden)?;
        kernels.fill_uniform(&r.stream, &mut x0, input_seed(seed, batch), INPUT_STD)?;
        let (x, h, qkv, o) = (
            zeros(s.hidden)?,
            zeros(s.hidden)?,
            zeros(s.qkv_cols)?,
            zeros(s.hidden)?,
        );
        let (gate_up, act, m) = (
            zeros(2 * s.inter_cols)?,
            zeros(s.inter_cols)?,
            zeros(s.hidden)?,
        );
        let st = &r.stream;
        let ptrs = ActPtrs {
            x0: addr(&x0, st),
            x: addr(&x, st),
            h: addr(&h, st),
            qkv: addr(&qkv, st),
            o: addr(&o, st),
            gate_up: addr(&gate_up, st),
            act: addr(&act, st),
            m: addr(&m, st),
        };
        r.stream.synchronize()?;
        Ok(Activations {
            batch,
            x0,
            x,
            h,
            qkv,
            o,
            gate_up,
            act,
            m,
            ptrs,
        })
    }
}

/// The ops of one layer, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Qkv,
    O,
    AllReduceO,
    ResidualNorm1,
    GateUp,
    SiluMul,
    Down,
    AllReduceDown,
    ResidualNorm2,
}

impl Op {
    pub const ALL: [Op; 9] = [
        Op::Qkv,
        Op::O,
        Op::AllReduceO,
        Op::ResidualNorm1,
        Op::GateUp,
        Op::SiluMul,
        Op::Down,
        Op::AllReduceDown,
        Op::ResidualNorm2,
    ];
}

/// Everything a step needs.
pub struct Step<'a> {
    pub r: &'a Rank,
    pub blas: &'a Blas,
    pub weights: &'a Weights,
    pub variant: Variant,
}

impl Step<'_> {
    /// Enqueues the whole step on the rank's stream: `x = x0`, the first
    /// norm, then every layer. Nothing in it synchronizes or touches the
    /// host, so it can be captured.
    pub fn enqueue(&self, acts: &mut Activations) -> Result<()> {
        self.start(acts)?;
        for l in 0..self.weights.layers.len() {
            self.layer(acts, l)?;
        }
        Ok(())
    }

    /// `x = x0` and the first norm (`h = rmsnorm(x)`).
    pub fn start(&self, acts: &mut Activations) -> Result<()> {
        let (r, p) = (self.r, acts.ptrs);
        let bytes = acts.batch * self.weights.shard.hidden * std::mem::size_of::<bf16>();
        // SAFETY: x0 and x are distinct live buffers of `bytes` bytes,
        // ordered on this stream (raw, so it can be captured; see blas.rs).
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(p.x, p.x0, bytes, r.stream.cu_stream())
        }
        .context("copying x0 into x")?;
        r.comm
            .rmsnorm(&acts.x, &self.weights.norm, EPS, &mut acts.h)?;
        Ok(())
    }

    /// Every op of layer `l`.
    pub fn layer(&self, acts: &mut Activations, l: usize) -> Result<()> {
        for op in Op::ALL {
            self.op(acts, l, op)?;
        }
        Ok(())
    }

    /// One op of layer `l` (the checks run the first layer op by op).
    pub fn op(&self, acts: &mut Activations, l: usize, op: Op) -> Result<()> {
        let (r, s) = (self.r, &self.weights.shard);
        let norm = &self.weights.norm;
        match op {
            Op::Qkv => self.gemm(acts, l, Matrix::Qkv)?,
            Op::O => self.gemm(acts, l, Matrix::O)?,
            Op::AllReduceO => self.all_reduce(&mut acts.o)?,
            Op::GateUp => self.gemm(acts, l, Matrix::GateUp)?,
            Op::SiluMul => {
                r.comm
                    .silu_mul(&acts.gate_up, &mut acts.act, s.inter_cols)?;
            }
            Op::Down => self.gemm(acts, l, Matrix::Down)?,
            Op::AllReduceDown => self.all_reduce(&mut acts.m)?,
            Op::ResidualNorm1 | Op::ResidualNorm2 => {
                // The partial sums of the all-reduce this tail follows.
                let partial = if op == Op::ResidualNorm1 {
                    &mut acts.o
                } else {
                    &mut acts.m
                };
                let (x, h) = (&mut acts.x, &mut acts.h);
                match self.variant {
                    Variant::Fused => {
                        r.comm.all_reduce_residual_rmsnorm_with(
                            partial,
                            x,
                            norm,
                            EPS,
                            h,
                            Some(NormPath::Fused),
                        )?;
                    }
                    Variant::FusedPrefetch => {
                        r.comm.all_reduce_residual_rmsnorm_prefetch(
                            partial,
                            x,
                            norm,
                            EPS,
                            h,
                            self.next_weights(l, op),
                            Some(NormPath::Fused),
                        )?;
                    }
                    _ => {
                        r.comm.residual_rmsnorm(partial, x, norm, EPS, h)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The weights of the GEMM after op `op` of layer `l`, for the L2
    /// prefetch: gate-up after the first residual norm, the next layer's
    /// QKV after the second (the stack's first layer after its last: in a
    /// replayed graph, the layer that comes next).
    fn next_weights(&self, l: usize, op: Op) -> &CudaSlice<bf16> {
        let layers = &self.weights.layers;
        match op {
            Op::ResidualNorm1 => &layers[l].mats[Matrix::GateUp as usize],
            _ => &layers[(l + 1) % layers.len()].mats[Matrix::Qkv as usize],
        }
    }

    /// Layer `l`'s GEMM of `m`: its input, output and row strides.
    fn gemm(&self, acts: &Activations, l: usize, m: Matrix) -> Result<()> {
        let s = &self.weights.shard;
        let p = &acts.ptrs;
        let (k, n) = m.dims(s);
        let (a, lda, c) = match m {
            Matrix::Qkv => (p.h, s.hidden, p.qkv),
            // The attention's stand-in: the first `attn_cols` columns of
            // each QKV row, read in place (rows `qkv_cols` apart).
            Matrix::O => (p.qkv, s.qkv_cols, p.o),
            Matrix::GateUp => (p.h, s.hidden, p.gate_up),
            Matrix::Down => (p.act, s.inter_cols, p.m),
        };
        let w = self.weights.layers[l].ptrs[m as usize];
        // SAFETY: the shard holds `k x n` elements (`Matrix::dims`); `a`
        // holds `batch` rows of `lda >= k` and `c` `batch x n` (the widths
        // `Activations::new` gave them, for the shard these weights were
        // made for); all live as long as `self` and `acts`, ordered on this
        // one stream, and `c` is a buffer of its own.
        unsafe { self.blas.gemm_bf16(a, lda, w, c, acts.batch, n, k) }
    }

    /// The variant's all-reduce (sum, in place) of a GEMM's partial sums.
    /// The fused variant has none here: its residual norm op
    /// (`ResidualNorm1`, `ResidualNorm2`) all-reduces too.
    fn all_reduce(&self, buf: &mut CudaSlice<bf16>) -> Result<()> {
        let comm = &self.r.comm;
        match self.variant {
            Variant::None | Variant::Fused | Variant::FusedPrefetch => {}
            Variant::Nccl => {
                comm.all_reduce_in_place_with(buf, &ReduceOp::Sum, intranode::AllReduceAlgo::Nccl)?;
            }
            Variant::Ours => {
                comm.all_reduce_in_place(buf, &ReduceOp::Sum)?;
            }
        }
        Ok(())
    }
}
