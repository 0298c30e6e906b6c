//! A Llama-shaped decoder, tensor-parallel as in Megatron: QKV and
//! gate/up are column-parallel (each rank holds its heads and its slice of
//! the intermediate size), O and down are row-parallel (each rank's matmul
//! gives a partial sum of the full output, summed across ranks). Random
//! weights from a fixed seed; one decode step is one token per sequence of
//! the batch through every layer.
//!
//! Attention is real but simple: each layer has a fixed KV cache of
//! `context` random positions per sequence (what a prefill would have left),
//! the new token attends to it and to itself, and the cache is not
//! extended, so every step costs the same. There is no embedding and no
//! LM head: a step's input is the previous step's output (hidden states).

use candle_core::{D, DType, Device, Result, Tensor, bail};

/// The model's shape and the run's batch.
#[derive(Debug, Clone)]
pub struct Config {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub batch: usize,
    pub context: usize,
    pub rope_theta: f64,
    pub eps: f64,
    pub seed: u64,
}

impl Config {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    /// Checks that the shapes split evenly over `world` ranks.
    pub fn validate(&self, world: usize) -> Result<()> {
        if self.heads == 0 || self.kv_heads == 0 || !self.hidden.is_multiple_of(self.heads) {
            bail!(
                "hidden {} is not a multiple of heads {}",
                self.hidden,
                self.heads
            );
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            bail!(
                "heads {} is not a multiple of kv-heads {}",
                self.heads,
                self.kv_heads
            );
        }
        if !self.head_dim().is_multiple_of(2) {
            bail!("the head dimension {} must be even (RoPE)", self.head_dim());
        }
        if !self.kv_heads.is_multiple_of(world) || !self.intermediate.is_multiple_of(world) {
            bail!(
                "kv-heads {} and intermediate {} must be multiples of the world size {world}",
                self.kv_heads,
                self.intermediate
            );
        }
        if self.batch == 0 || self.layers == 0 || self.context == 0 {
            bail!("batch, layers and context must be at least 1");
        }
        Ok(())
    }
}

/// One layer's weights as one rank holds them.
#[derive(Debug)]
pub struct Layer {
    attn_norm: Tensor,
    /// `[hidden, (heads + 2 kv_heads) / world * head_dim]`: this rank's
    /// query, key and value heads (column-parallel).
    wqkv: Tensor,
    /// `[heads / world * head_dim, hidden]` (row-parallel).
    wo: Tensor,
    mlp_norm: Tensor,
    /// `[hidden, 2 intermediate / world]`: this rank's gate and up columns.
    wgu: Tensor,
    /// `[intermediate / world, hidden]` (row-parallel).
    wdown: Tensor,
    /// `[batch, kv_heads / world, context, head_dim]`, keys already rotated.
    k_cache: Tensor,
    v_cache: Tensor,
}

/// What one rank holds: its slice of every layer.
#[derive(Debug)]
pub struct Shard {
    pub rank: usize,
    pub world: usize,
    layers: Vec<Layer>,
}

/// What every rank holds alike: the input, the final norm, RoPE's
/// rotation at the new token's position.
#[derive(Debug)]
pub struct Replicated {
    pub input: Tensor,
    final_norm: Tensor,
    cos: Tensor,
    sin: Tensor,
}

/// Seeds of the random tensors: a function of what the tensor is, so a
/// rank that rebuilds another rank's shard (the reference) gets the same
/// numbers. `rank` is `None` for tensors every rank holds alike.
fn seed(base: u64, layer: usize, tensor: u64, rank: Option<usize>) -> u64 {
    let rank = rank.map_or(0xffff, |r| r as u64);
    base.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((layer as u64) << 32) ^ (tensor << 24) ^ rank
}

/// Normal numbers from `seed` with standard deviation `std`, in bf16:
/// curand on a GPU; on the CPU (the tests), which candle cannot seed, a
/// splitmix64 stream through Box-Muller.
fn randn(device: &Device, seed: u64, std: f64, shape: &[usize]) -> Result<Tensor> {
    normal(device, seed, 0.0, std, shape)?.to_dtype(DType::BF16)
}

/// Norm weights near one, alike on every rank.
fn norm_weight(device: &Device, seed: u64, hidden: usize) -> Result<Tensor> {
    normal(device, seed, 1.0, 0.1, &[hidden])?.to_dtype(DType::BF16)
}

fn normal(device: &Device, seed: u64, mean: f64, std: f64, shape: &[usize]) -> Result<Tensor> {
    if device.is_cuda() {
        device.set_seed(seed)?;
        return Tensor::randn(mean as f32, std as f32, shape, device);
    }
    let n: usize = shape.iter().product();
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        // 53 random bits in (0, 1].
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64 + f64::EPSILON
    };
    let values: Vec<f32> = (0..n)
        .map(|_| {
            let (u, v) = (next(), next());
            let g = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            (mean + std * g) as f32
        })
        .collect();
    Tensor::from_vec(values, shape, device)
}

impl Shard {
    /// Rank `rank`'s weights and KV cache of a `world`-way split.
    pub fn new(cfg: &Config, rank: usize, world: usize, device: &Device) -> Result<Self> {
        let hd = cfg.head_dim();
        let heads = cfg.heads / world;
        let kv_heads = cfg.kv_heads / world;
        let inter = cfg.intermediate / world;
        let s = cfg.seed;
        let r = Some(rank);
        let mut layers = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let qkv_cols = (heads + 2 * kv_heads) * hd;
            layers.push(Layer {
                attn_norm: norm_weight(device, seed(s, l, 1, None), cfg.hidden)?,
                wqkv: randn(
                    device,
                    seed(s, l, 2, r),
                    (cfg.hidden as f64).powf(-0.5),
                    &[cfg.hidden, qkv_cols],
                )?,
                wo: randn(
                    device,
                    seed(s, l, 3, r),
                    ((heads * hd * world) as f64).powf(-0.5),
                    &[heads * hd, cfg.hidden],
                )?,
                mlp_norm: norm_weight(device, seed(s, l, 4, None), cfg.hidden)?,
                wgu: randn(
                    device,
                    seed(s, l, 5, r),
                    (cfg.hidden as f64).powf(-0.5),
                    &[cfg.hidden, 2 * inter],
                )?,
                wdown: randn(
                    device,
                    seed(s, l, 6, r),
                    (cfg.intermediate as f64).powf(-0.5),
                    &[inter, cfg.hidden],
                )?,
                k_cache: randn(
                    device,
                    seed(s, l, 7, r),
                    1.0,
                    &[cfg.batch, kv_heads, cfg.context, hd],
                )?,
                v_cache: randn(
                    device,
                    seed(s, l, 8, r),
                    1.0,
                    &[cfg.batch, kv_heads, cfg.context, hd],
                )?,
            });
        }
        Ok(Shard {
            rank,
            world,
            layers,
        })
    }

    /// This rank's weights and cache, in bytes.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flat_map(|l| {
                [
                    &l.attn_norm,
                    &l.wqkv,
                    &l.wo,
                    &l.mlp_norm,
                    &l.wgu,
                    &l.wdown,
                    &l.k_cache,
                    &l.v_cache,
                ]
            })
            .map(|t| t.elem_count() * t.dtype().size_in_bytes())
            .sum()
    }
}

impl Replicated {
    pub fn new(cfg: &Config, device: &Device) -> Result<Self> {
        let hd = cfg.head_dim();
        // RoPE at the new token's position (it follows the cache), in the
        // rotate-half layout: the angle of pair i is at i and i + hd/2.
        let pos = cfg.context as f64;
        let angles: Vec<f64> = (0..hd / 2)
            .map(|i| pos * cfg.rope_theta.powf(-2.0 * i as f64 / hd as f64))
            .collect();
        let twice = |f: fn(f64) -> f64| -> Vec<f32> {
            angles
                .iter()
                .chain(angles.iter())
                .map(|&a| f(a) as f32)
                .collect()
        };
        let cos = Tensor::from_vec(twice(f64::cos), hd, device)?.to_dtype(DType::BF16)?;
        let sin = Tensor::from_vec(twice(f64::sin), hd, device)?.to_dtype(DType::BF16)?;
        Ok(Replicated {
            input: randn(
                device,
                seed(cfg.seed, 0, 9, None),
                1.0,
                &[cfg.batch, cfg.hidden],
            )?,
            final_norm: norm_weight(device, seed(cfg.seed, 0, 10, None), cfg.hidden)?,
            cos,
            sin,
        })
    }
}

/// RMSNorm as candle's Llama takes it (`candle_nn::RmsNorm`): one
/// kernel, the row's mean square in f32, the result rounded once.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    candle_nn::ops::rms_norm(x, weight, eps as f32)
}

/// Rotates `x` (`[.., head_dim]`) by the position's angles.
fn rope(x: &Tensor, rep: &Replicated) -> Result<Tensor> {
    let hd = x.dim(D::Minus1)?;
    let x1 = x.narrow(D::Minus1, 0, hd / 2)?;
    let x2 = x.narrow(D::Minus1, hd / 2, hd / 2)?;
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
    x.broadcast_mul(&rep.cos)? + rotated.broadcast_mul(&rep.sin)?
}

/// This rank's partial sum of the attention block's output (`[batch,
/// hidden]`), from the normed input `h`.
fn attention_partial(
    cfg: &Config,
    world: usize,
    layer: &Layer,
    rep: &Replicated,
    h: &Tensor,
) -> Result<Tensor> {
    let b = cfg.batch;
    let hd = cfg.head_dim();
    let heads = cfg.heads / world;
    let kv_heads = cfg.kv_heads / world;
    let group = heads / kv_heads;
    let qkv = h.matmul(&layer.wqkv)?;
    let q = qkv
        .narrow(1, 0, heads * hd)?
        .reshape((b, kv_heads, group, hd))?;
    let k = qkv
        .narrow(1, heads * hd, kv_heads * hd)?
        .reshape((b, kv_heads, 1, hd))?;
    let v = qkv
        .narrow(1, (heads + kv_heads) * hd, kv_heads * hd)?
        .reshape((b, kv_heads, 1, hd))?;
    let q = (rope(&q, rep)? * (hd as f64).powf(-0.5))?;
    let k = rope(&k, rep)?;
    // Scores against the cache (a batched matmul over batch x kv-heads,
    // each query head of a group against its key head) and against the
    // new token's own key, softmax over both in f32.
    let s_cache = q.matmul(&layer.k_cache.t()?)?;
    let s_new = q
        .to_dtype(DType::F32)?
        .broadcast_mul(&k.to_dtype(DType::F32)?)?
        .sum_keepdim(D::Minus1)?;
    let s = Tensor::cat(&[&s_cache.to_dtype(DType::F32)?, &s_new], D::Minus1)?;
    let e = s.broadcast_sub(&s.max_keepdim(D::Minus1)?)?.exp()?;
    let p = e
        .broadcast_div(&e.sum_keepdim(D::Minus1)?)?
        .to_dtype(DType::BF16)?;
    let ctx = cfg.context;
    let o_cache = p
        .narrow(D::Minus1, 0, ctx)?
        .contiguous()?
        .matmul(&layer.v_cache)?;
    let o_new = p.narrow(D::Minus1, ctx, 1)?.broadcast_mul(&v)?;
    let o = (o_cache + o_new)?.reshape((b, heads * hd))?;
    o.matmul(&layer.wo)
}

/// This rank's partial sum of the MLP block's output, from the normed
/// input `h`: SwiGLU over its slice of the intermediate size.
fn mlp_partial(cfg: &Config, world: usize, layer: &Layer, h: &Tensor) -> Result<Tensor> {
    let inter = cfg.intermediate / world;
    let gu = h.matmul(&layer.wgu)?;
    let act = (gu.narrow(1, 0, inter)?.silu()? * gu.narrow(1, inter, inter)?)?;
    act.matmul(&layer.wdown)
}

/// The residual stream of one decode step, as a back-end carries it: each
/// block's row-parallel partial sums are summed across ranks, added to the
/// residual, and the new residual is normed for the next block. The
/// unfused form is candle's ops around an all-reduce ([`Unfused`]); a
/// fused one does the three in one call (`reduce::Fused`).
pub trait Residual {
    /// Starts a step: the residual becomes `x`; returns
    /// `rms_norm(x, weight)`.
    fn start(&mut self, x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor>;
    /// `residual += sum of parts` (one partial per shard this process
    /// holds, summed across ranks), then returns
    /// `rms_norm(residual, weight)`.
    fn add_norm(&mut self, parts: Vec<Tensor>, weight: &Tensor, eps: f64) -> Result<Tensor>;
}

/// The residual as a candle tensor: `x + reduce(parts)`, then
/// [`rms_norm`], each its own candle op.
pub struct Unfused<F> {
    reduce: F,
    x: Option<Tensor>,
}

impl<F: FnMut(Vec<Tensor>) -> Result<Tensor>> Unfused<F> {
    /// `reduce` turns the partial sums of a row-parallel matmul (one per
    /// shard) into the full sum.
    pub fn new(reduce: F) -> Self {
        Unfused { reduce, x: None }
    }
}

impl<F: FnMut(Vec<Tensor>) -> Result<Tensor>> Residual for Unfused<F> {
    fn start(&mut self, x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
        self.x = Some(x.clone());
        rms_norm(x, weight, eps)
    }

    fn add_norm(&mut self, parts: Vec<Tensor>, weight: &Tensor, eps: f64) -> Result<Tensor> {
        let Some(x) = self.x.take() else {
            bail!("add_norm before start");
        };
        let x = (x + (self.reduce)(parts)?)?;
        let h = rms_norm(&x, weight, eps);
        self.x = Some(x);
        h
    }
}

/// One decode step: `x` (`[batch, hidden]`, alike on every rank) through
/// every layer, then the final norm. `shards` holds this rank's shard, or,
/// for the reference, every rank's; `residual` sums, adds and norms
/// between the blocks. Each block's output norm is the next block's input
/// norm (the last one the final norm), so every all-reduce is followed by
/// a residual add and an RMSNorm: the shape the fused call takes.
pub fn forward(
    cfg: &Config,
    shards: &[&Shard],
    rep: &Replicated,
    x: &Tensor,
    residual: &mut dyn Residual,
) -> Result<Tensor> {
    let Some(first) = shards.first() else {
        bail!("forward needs at least one shard");
    };
    let Some(layer0) = first.layers.first() else {
        bail!("forward needs at least one layer");
    };
    let world = first.world;
    let mut h = residual.start(x, &layer0.attn_norm, cfg.eps)?;
    for l in 0..cfg.layers {
        let parts = shards
            .iter()
            .map(|s| attention_partial(cfg, world, &s.layers[l], rep, &h))
            .collect::<Result<Vec<_>>>()?;
        h = residual.add_norm(parts, &first.layers[l].mlp_norm, cfg.eps)?;
        let parts = shards
            .iter()
            .map(|s| mlp_partial(cfg, world, &s.layers[l], &h))
            .collect::<Result<Vec<_>>>()?;
        let next = first
            .layers
            .get(l + 1)
            .map_or(&rep.final_norm, |n| &n.attn_norm);
        h = residual.add_norm(parts, next, cfg.eps)?;
    }
    Ok(h)
}

/// The reference's reduction: the partial sums added in f32 in rank
/// order, then rounded to bf16, as intranode's kernels sum.
pub fn local_sum(parts: Vec<Tensor>) -> Result<Tensor> {
    let mut it = parts.into_iter();
    let Some(first) = it.next() else {
        bail!("no partial sums to add");
    };
    let mut acc = first.to_dtype(DType::F32)?;
    for p in it {
        acc = (acc + p.to_dtype(DType::F32)?)?;
    }
    acc.to_dtype(DType::BF16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Config {
        Config {
            hidden: 64,
            intermediate: 96,
            layers: 2,
            heads: 8,
            kv_heads: 4,
            batch: 3,
            context: 5,
            rope_theta: 10_000.0,
            eps: 1e-5,
            seed: 7,
        }
    }

    /// The world-1 shard that holds what `shards` hold, laid out as the
    /// unsharded model: column-parallel pieces side by side per kind
    /// (queries, keys, values; gate, up), row-parallel ones stacked, the
    /// caches' KV heads concatenated.
    fn merge(cfg: &Config, shards: &[Shard]) -> Result<Shard> {
        let world = shards.len();
        let hd = cfg.head_dim();
        let (heads, kv_heads, inter) = (
            cfg.heads / world,
            cfg.kv_heads / world,
            cfg.intermediate / world,
        );
        let cat = |l: usize, dim: usize, f: &dyn Fn(&Layer) -> Result<Tensor>| {
            let parts = shards
                .iter()
                .map(|s| f(&s.layers[l]))
                .collect::<Result<Vec<_>>>()?;
            Tensor::cat(&parts, dim)
        };
        let mut layers = Vec::new();
        for l in 0..cfg.layers {
            let q = cat(l, 1, &|x| x.wqkv.narrow(1, 0, heads * hd))?;
            let k = cat(l, 1, &|x| x.wqkv.narrow(1, heads * hd, kv_heads * hd))?;
            let v = cat(l, 1, &|x| {
                x.wqkv.narrow(1, (heads + kv_heads) * hd, kv_heads * hd)
            })?;
            let gate = cat(l, 1, &|x| x.wgu.narrow(1, 0, inter))?;
            let up = cat(l, 1, &|x| x.wgu.narrow(1, inter, inter))?;
            let first = &shards[0].layers[l];
            layers.push(Layer {
                attn_norm: first.attn_norm.clone(),
                wqkv: Tensor::cat(&[q, k, v], 1)?,
                wo: cat(l, 0, &|x| Ok(x.wo.clone()))?,
                mlp_norm: first.mlp_norm.clone(),
                wgu: Tensor::cat(&[gate, up], 1)?,
                wdown: cat(l, 0, &|x| Ok(x.wdown.clone()))?,
                k_cache: cat(l, 1, &|x| Ok(x.k_cache.clone()))?,
                v_cache: cat(l, 1, &|x| Ok(x.v_cache.clone()))?,
            });
        }
        Ok(Shard {
            rank: 0,
            world: 1,
            layers,
        })
    }

    fn max_rel_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
        let a = a.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let b = b.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        Ok(diff / scale)
    }

    /// The split is Megatron's: two ranks' shards, their row-parallel
    /// partials summed, compute what one model holding both shards'
    /// weights computes (heads, KV-head groups and caches in the same
    /// order). A wrong head, group or column order fails it.
    #[test]
    fn tensor_parallel_split_matches_the_whole_model() -> Result<()> {
        let cfg = tiny();
        cfg.validate(2)?;
        let dev = Device::Cpu;
        let shards = [Shard::new(&cfg, 0, 2, &dev)?, Shard::new(&cfg, 1, 2, &dev)?];
        let rep = Replicated::new(&cfg, &dev)?;
        let split = forward(
            &cfg,
            &[&shards[0], &shards[1]],
            &rep,
            &rep.input,
            &mut Unfused::new(local_sum),
        )?;
        let whole = merge(&cfg, &shards)?;
        let y = forward(
            &cfg,
            &[&whole],
            &rep,
            &rep.input,
            &mut Unfused::new(local_sum),
        )?;
        assert_eq!(y.dims(), [cfg.batch, cfg.hidden]);
        let rel = max_rel_diff(&split, &y)?;
        assert!(rel < 2e-2, "relative difference {rel}");
        // And the check can tell: rank 1's shard alone is another model.
        let one = forward(
            &cfg,
            &[&shards[1]],
            &rep,
            &rep.input,
            &mut Unfused::new(local_sum),
        )?;
        assert!(max_rel_diff(&one, &y)? > 0.1);
        Ok(())
    }

    #[test]
    fn shards_must_split_evenly() {
        let cfg = tiny();
        assert!(cfg.validate(4).is_ok());
        assert!(cfg.validate(3).is_err());
        assert!(cfg.validate(8).is_err(), "4 KV heads over 8 ranks");
        let odd = Config {
            heads: 6,
            kv_heads: 2,
            ..tiny()
        };
        assert!(odd.validate(1).is_err(), "hidden 64 over 6 heads");
    }
}
