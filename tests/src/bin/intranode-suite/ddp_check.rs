//! `ddp-check`: the GPU checks of data-parallel training (broadcast,
//! `broadcast_coalesced`,
//! gradient buckets and communication hooks), run under `intranode-run`.
//!
// (Over 700 lines, 960: one check per `ddp` feature, sharing the rank set-up
// and the f64 references.)
//!
//! 1. Raw broadcasts through the intra-node kernel: byte counts around the
//!    16-byte vector and half a symmetric buffer, aligned and misaligned,
//!    from every root, checked bit for bit.
//! 2. `broadcast_coalesced` of many mixed bf16/f16/f32 buffers (empty, one
//!    element, odd, larger than a bucket and than the symmetric buffer, a
//!    misaligned view) from every root, on both paths, with two bucket
//!    limits; receivers start poisoned (NaN), every element is compared bit
//!    for bit with the root's, and the root's own data must be unchanged.
//! 3. Broadcasts and all-reduces of random sizes, roots and algorithms
//!    enqueued back to back without synchronizing (the shared call count
//!    and double buffering), then all checked; and a CUDA graph of both
//!    kinds, replayed with fresh inputs.
//! 4. Every hook on random gradients, two steps each, against an f64 host
//!    reference with a stated tolerance (below), outputs bitwise identical
//!    across ranks; the stateful hook's state checked after the steps.
//!
//! Tolerance of a mean (or sum) over W ranks, per element, with `u` the
//! unit roundoff of the type the reduction runs in (2^-24 f32, 2^-8 bf16,
//! 2^-11 f16) and `s = sum_r |g_r|`: `(W + 1) u s` for a reduction in that
//! type (W - 1 additions, a pre- or post-scaling and the final rounding,
//! each at most `u` times a partial sum bounded by `s`), `(W + 2) u s` with
//! compression (each input rounded once more on the way down), divided by
//! W for a mean; plus, for f16, `2 (W + 1) 2^-25` absolute for subnormal
//! values (at most 2W + 1 roundings of half the smallest subnormal each).

use std::hash::Hasher;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail, ensure};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use cudarc::nccl::NcclType;
use fnv::FnvHasher;
use half::{bf16, f16};
use intranode::AllReduceAlgo;
use intranode::BroadcastAlgo;
use intranode::ddp::{
    AllReduceHook, CommHook, CompressHook, DeviceBuffer, GradBucket, PlanItem, StatefulHook,
    all_reduce_flat, broadcast_coalesced_with, plan_buckets,
};
use intranode::kernels::{DType, ElemType};
use intranode::{Communicator, types::ReduceOp};
use intranode_harness::data::{self, mix};
use intranode_harness::rank::Rank;
use intranode_store::{Store, StoreExchange};

#[derive(clap::Args, Debug)]
pub struct DdpCheckArgs {
    /// Seed of every input (all ranks must agree).
    #[arg(long, default_value_t = 0x0dd9_5eed)]
    pub seed: u64,
    /// Broadcasts and all-reduces enqueued back to back in part 3.
    #[arg(long, default_value_t = 600)]
    pub interleaved_calls: usize,
    /// Replays of the captured graph of part 3.
    #[arg(long, default_value_t = 200)]
    pub graph_replays: usize,
}

/// A hash of (seed, call, rank, buffer, element): what every rank can
/// recompute for every other rank.
fn hash(seed: u64, call: u64, rank: usize, buffer: usize, i: usize) -> u64 {
    mix(seed
        ^ mix(call ^ ((rank as u64) << 40) ^ ((buffer as u64) << 20))
        ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93))
}

/// A finite value in [-100, 100), fresh per (seed, call, rank, buffer, i).
fn value(seed: u64, call: u64, rank: usize, buffer: usize, i: usize) -> f64 {
    (hash(seed, call, rank, buffer, i) >> 11) as f64 / (1u64 << 53) as f64 * 200.0 - 100.0
}

fn byte(seed: u64, call: u64, rank: usize, i: usize) -> u8 {
    (hash(seed, call, rank, 0, i) >> 56) as u8
}

/// Bits of a value of one of the kernels' types.
fn bits<T: DType>(v: T) -> u32 {
    match T::ELEM {
        ElemType::Bf16 => bf16::from_f32(v.to_f32()).to_bits() as u32,
        ElemType::F16 => f16::from_f32(v.to_f32()).to_bits() as u32,
        ElemType::F32 => v.to_f32().to_bits(),
        other => panic!("no bit pattern for {other:?}"),
    }
}

struct Ctx<'c> {
    rank: usize,
    world: usize,
    stream: Arc<CudaStream>,
    store: Arc<dyn Store>,
    exchange: StoreExchange,
    comm: &'c Communicator,
    seed: u64,
    call: u64,
}

impl Ctx<'_> {
    fn next_call(&mut self) -> u64 {
        self.call += 1;
        self.call
    }

    fn all_gather<T: serde::Serialize + serde::de::DeserializeOwned>(
        &mut self,
        v: &T,
    ) -> Result<Vec<T>> {
        Ok(self
            .exchange
            .all_gather(self.store.as_ref(), self.rank, self.world, v)?)
    }

    fn paths(&self) -> Vec<BroadcastAlgo> {
        let mut v = Vec::new();
        if self.comm.intra_reason().is_none() {
            v.push(BroadcastAlgo::SymmMem);
        }
        if self.comm.nccl().is_ok() {
            v.push(BroadcastAlgo::Nccl);
        }
        v
    }
}

// ---------------------------------------------------------------------------
// 1. Raw broadcasts through the kernel.
// ---------------------------------------------------------------------------

fn raw_broadcasts(c: &mut Ctx<'_>) -> Result<usize> {
    let Some(intra) = c.comm.intra() else {
        return Ok(0);
    };
    let half = intra.half_buffer_bytes();
    let sizes = [
        1usize,
        15,
        16,
        17,
        4095,
        65_537,
        half - 1,
        half,
        half + 1,
        intra.buffer_bytes() + 13,
    ];
    let mut cases = 0;
    for root in 0..c.world {
        for &bytes in &sizes {
            for offset in [0usize, 3] {
                let call = c.next_call();
                let (rank, seed) = (c.rank, c.seed);
                let mine: Vec<u8> = (0..bytes + offset)
                    .map(|i| byte(seed, call, rank, i))
                    .collect();
                let mut d: CudaSlice<u8> = c.stream.clone_htod(&mine)?;
                {
                    let mut view = d.slice_mut(offset..);
                    c.comm
                        .broadcast_in_place_with(&mut view, root, BroadcastAlgo::SymmMem)?;
                }
                let got = c.stream.clone_dtoh(&d)?;
                c.stream.synchronize()?;
                c.comm.check()?;
                for (i, &g) in got.iter().enumerate() {
                    let want = if i < offset {
                        mine[i]
                    } else {
                        byte(seed, call, root, i)
                    };
                    if g != want {
                        bail!(
                            "raw broadcast of {bytes} bytes at offset {offset} from root {root}: byte {} is {g:#04x}, want {want:#04x}",
                            i as isize - offset as isize
                        );
                    }
                }
                cases += 1;
            }
        }
    }
    Ok(cases)
}

// ---------------------------------------------------------------------------
// 2. broadcast_coalesced.
// ---------------------------------------------------------------------------

/// One buffer of the coalesced list.
enum Buf {
    Bf16(CudaSlice<bf16>),
    F16(CudaSlice<f16>),
    F32(CudaSlice<f32>),
}

/// Its contents, downloaded.
enum Host {
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    F32(Vec<f32>),
}

/// Rank `rank`'s initial contents of buffer `b`: its data, or poison
/// (NaN) where it receives, which no root's value matches.
fn initial<T: DType>(seed: u64, call: u64, rank: usize, b: usize, i: usize, poison: bool) -> T {
    if poison {
        T::from_f64(f64::NAN)
    } else {
        T::from_f64(value(seed, call, rank, b, i))
    }
}

/// Checks buffer `b` after the broadcast: its first `n` elements (the view
/// that took part) hold the root's values, the rest (one guard element)
/// what this rank put there.
#[allow(clippy::too_many_arguments)]
fn compare<T: DType>(
    got: &[T],
    n: usize,
    seed: u64,
    call: u64,
    root: usize,
    rank: usize,
    b: usize,
    poison: bool,
) -> Result<(), String> {
    for (i, g) in got.iter().enumerate() {
        let want = if i < n {
            T::from_f64(value(seed, call, root, b, i))
        } else {
            initial(seed, call, rank, b, i, poison)
        };
        if bits(*g) != bits(want) {
            return Err(format!(
                "buffer {b} ({:?}, {n} elements broadcast): element {i} is {:?} ({:#x}), want {:?} ({:#x})",
                T::ELEM,
                g.to_f64(),
                bits(*g),
                want.to_f64(),
                bits(want)
            ));
        }
    }
    Ok(())
}

/// Element counts of the coalesced list: edge sizes of every type, then
/// small random ones so that buckets pack several entries.
fn coalesced_sizes(seed: u64, bucket_bytes: usize, buffer_bytes: usize) -> Vec<(ElemType, usize)> {
    let mut v = Vec::new();
    for (k, elem) in ElemType::ALL.into_iter().enumerate() {
        let eb = elem.bytes();
        for n in [0, 1, 7, 8, 4095, bucket_bytes / eb + 3] {
            v.push((elem, n));
        }
        if elem == ElemType::F32 {
            v.push((elem, buffer_bytes / eb + 5));
        }
        for j in 0..12 {
            v.push((elem, 1 + (mix(seed ^ (k as u64 * 100 + j)) % 700) as usize));
        }
    }
    v
}

fn upload<T: DType>(
    stream: &Arc<CudaStream>,
    (seed, call, rank, b): (u64, u64, usize, usize),
    len: usize,
    poison: bool,
) -> Result<CudaSlice<T>> {
    let host: Vec<T> = (0..len)
        .map(|i| initial(seed, call, rank, b, i, poison))
        .collect();
    Ok(stream.clone_htod(&host)?)
}

/// One call of `broadcast_coalesced`. Every buffer is a view: the first
/// `n` elements of a slice one element longer, whose last element must
/// come through untouched (and which gives the empty buffers storage:
/// the driver does not allocate zero bytes). The last buffer's view also
/// starts one element in, so its address is misaligned.
fn coalesced_case(
    c: &mut Ctx<'_>,
    root: usize,
    algo: BroadcastAlgo,
    bucket_bytes: usize,
    buffer_bytes: usize,
) -> Result<usize> {
    let call = c.next_call();
    let (rank, seed) = (c.rank, c.seed);
    let mut sizes = coalesced_sizes(seed, bucket_bytes, buffer_bytes);
    sizes.push((ElemType::F16, 1000));
    let misaligned = sizes.len() - 1;
    let poison = rank != root;
    let mut slices = Vec::with_capacity(sizes.len());
    for (b, &(elem, n)) in sizes.iter().enumerate() {
        let tag = (seed, call, rank, b);
        let len = n + 1 + usize::from(b == misaligned);
        slices.push(match elem {
            ElemType::Bf16 => Buf::Bf16(upload(&c.stream, tag, len, poison)?),
            ElemType::F16 => Buf::F16(upload(&c.stream, tag, len, poison)?),
            ElemType::F32 => Buf::F32(upload(&c.stream, tag, len, poison)?),
            other => bail!("no buffer kind for {other:?}"),
        });
    }
    {
        let mut views: Vec<Box<dyn DeviceBuffer + '_>> = slices
            .iter_mut()
            .zip(&sizes)
            .enumerate()
            .map(|(b, (buf, &(_, n)))| {
                let range = if b == misaligned { 1..n + 1 } else { 0..n };
                match buf {
                    Buf::Bf16(s) => Box::new(s.slice_mut(range)) as Box<dyn DeviceBuffer + '_>,
                    Buf::F16(s) => Box::new(s.slice_mut(range)),
                    Buf::F32(s) => Box::new(s.slice_mut(range)),
                }
            })
            .collect();
        let mut list: Vec<&mut dyn DeviceBuffer> = views
            .iter_mut()
            .map(|v| &mut **v as &mut dyn DeviceBuffer)
            .collect();
        broadcast_coalesced_with(c.comm, &mut list, bucket_bytes, root, algo)?;
    }
    let what = |e: String| {
        anyhow!(
            "broadcast_coalesced via {} from root {root}, buckets of {bucket_bytes} bytes: {e}",
            algo.name()
        )
    };
    // Download everything, then synchronize once, then compare.
    let mut host = Vec::with_capacity(slices.len());
    for buf in &slices {
        host.push(match buf {
            Buf::Bf16(s) => Host::Bf16(c.stream.clone_dtoh(s)?),
            Buf::F16(s) => Host::F16(c.stream.clone_dtoh(s)?),
            Buf::F32(s) => Host::F32(c.stream.clone_dtoh(s)?),
        });
    }
    c.stream.synchronize()?;
    for (b, h) in host.iter().enumerate() {
        let n = sizes[b].1;
        if b == misaligned {
            // The slice's element 0 lies before the view: it must keep this
            // rank's value; elements 1..=n are the view.
            let Host::F16(v) = h else {
                bail!("buffer {b} changed type");
            };
            let before: f16 = initial(seed, call, rank, b, 0, poison);
            ensure!(
                bits(v[0]) == bits(before),
                what(format!(
                    "buffer {b}: the element before the misaligned view was overwritten"
                ))
            );
            for (k, g) in v[1..=n].iter().enumerate() {
                // View element k is slice element k + 1 on the root too.
                let want = f16::from_f64(value(seed, call, root, b, k + 1));
                ensure!(
                    bits(*g) == bits(want),
                    what(format!(
                        "buffer {b} (misaligned f16 view): element {k} is {g:?}, want {want:?}"
                    ))
                );
            }
            let after: f16 = initial(seed, call, rank, b, n + 1, poison);
            ensure!(
                bits(v[n + 1]) == bits(after),
                what(format!(
                    "buffer {b}: the element after the misaligned view was overwritten"
                ))
            );
            continue;
        }
        match h {
            Host::Bf16(v) => compare(v, n, seed, call, root, rank, b, poison),
            Host::F16(v) => compare(v, n, seed, call, root, rank, b, poison),
            Host::F32(v) => compare(v, n, seed, call, root, rank, b, poison),
        }
        .map_err(what)?;
    }
    c.comm.check()?;
    Ok(sizes.len())
}

fn coalesced(c: &mut Ctx<'_>) -> Result<String> {
    let buffer_bytes = c.comm.intra().map_or(10 << 20, |i| i.buffer_bytes());
    let mut cases = 0;
    let mut buffers = 0;
    let paths = c.paths();
    for &algo in &paths {
        for root in 0..c.world {
            for bucket_bytes in [4096usize, 1 << 20] {
                buffers += coalesced_case(c, root, algo, bucket_bytes, buffer_bytes)?;
                cases += 1;
            }
        }
    }
    let names: Vec<&str> = paths.iter().map(|a| a.name()).collect();
    Ok(format!(
        "broadcast_coalesced: {cases} calls ({buffers} buffers) via {names:?}, every root, bitwise"
    ))
}

// ---------------------------------------------------------------------------
// 3. Broadcasts and all-reduces back to back.
// ---------------------------------------------------------------------------

enum Pending {
    Reduce {
        out: CudaSlice<f32>,
        call: u64,
        _input: CudaSlice<f32>,
    },
    Bcast {
        buf: CudaSlice<u8>,
        call: u64,
        root: usize,
    },
}

fn interleaved(c: &mut Ctx<'_>, calls: usize) -> Result<String> {
    let Some(intra) = c.comm.intra() else {
        return Ok("interleaving skipped (no intra-node path)".into());
    };
    let half = intra.half_buffer_bytes();
    let mut rng = c.seed ^ 0xB0CA;
    let mut done = 0;
    let (mut reduces, mut bcasts) = (0, 0);
    while done < calls {
        let batch = (calls - done).min(50);
        let mut pending = Vec::with_capacity(batch);
        for _ in 0..batch {
            rng = mix(rng);
            let call = c.next_call();
            // One call in ten up to 2.5 halves (several chunks in one
            // launch), the rest up to 64 KiB (the latency path).
            let max_bytes = if (rng >> 60) < 2 {
                half * 5 / 2
            } else {
                64 << 10
            };
            let bytes = 1 + (rng >> 8) as usize % max_bytes;
            if rng & 1 == 0 {
                let elems = bytes.div_ceil(4);
                let input = c
                    .stream
                    .clone_htod(&data::inputs::<f32>(c.seed, call, c.rank, elems))?;
                let mut out = c.stream.clone_htod(&vec![data::poison::<f32>(); elems])?;
                let algo = if rng & 2 == 0 {
                    AllReduceAlgo::OneShot
                } else {
                    AllReduceAlgo::TwoShot
                };
                c.comm
                    .all_reduce_with(&input, &mut out, &ReduceOp::Sum.to_nccl(), algo)?;
                pending.push(Pending::Reduce {
                    out,
                    call,
                    _input: input,
                });
                reduces += 1;
            } else {
                let root = (rng >> 4) as usize % c.world;
                let mine: Vec<u8> = (0..bytes).map(|i| byte(c.seed, call, c.rank, i)).collect();
                let mut buf = c.stream.clone_htod(&mine)?;
                c.comm
                    .broadcast_in_place_with(&mut buf, root, BroadcastAlgo::SymmMem)?;
                pending.push(Pending::Bcast { buf, call, root });
                bcasts += 1;
            }
        }
        c.stream.synchronize()?;
        c.comm.check()?;
        let mut got = Vec::with_capacity(pending.len());
        for p in &pending {
            got.push(match p {
                Pending::Reduce { out, .. } => (c.stream.clone_dtoh(out)?, Vec::new()),
                Pending::Bcast { buf, .. } => (Vec::new(), c.stream.clone_dtoh(buf)?),
            });
        }
        c.stream.synchronize()?;
        for (p, (reduced, bytes)) in pending.iter().zip(&got) {
            match p {
                Pending::Reduce { call, .. } => {
                    data::verify(reduced, c.seed, *call, c.world, ReduceOp::Sum)
                        .map_err(|e| anyhow!("interleaved all-reduce (call {call}): {e}"))?;
                }
                Pending::Bcast { call, root, .. } => {
                    if let Some(i) =
                        (0..bytes.len()).find(|&i| bytes[i] != byte(c.seed, *call, *root, i))
                    {
                        bail!(
                            "interleaved broadcast (call {call}) of {} bytes from root {root}: byte {i} differs",
                            bytes.len()
                        );
                    }
                }
            }
        }
        done += batch;
    }
    Ok(format!(
        "{reduces} all-reduces and {bcasts} broadcasts back to back, all correct"
    ))
}

/// A CUDA graph of two all-reduces and two broadcasts, replayed with fresh
/// inputs: the kernels' epochs live on the device, so a replayed broadcast
/// and all-reduce keep interleaving correctly.
fn graph_replays(c: &mut Ctx<'_>, replays: usize) -> Result<String> {
    if c.comm.intra_reason().is_some() {
        return Ok("graph replay skipped (no intra-node path)".into());
    }
    let (reduce_elems, bcast_bytes) = ([4095usize, 200_003], [17usize, 300_001]);
    let roots = [c.world - 1, 0];
    let mut ins = Vec::new();
    let mut outs = Vec::new();
    for &n in &reduce_elems {
        ins.push(c.stream.alloc_zeros::<f32>(n)?);
        outs.push(c.stream.alloc_zeros::<f32>(n)?);
    }
    let mut bufs = Vec::new();
    for &n in &bcast_bytes {
        bufs.push(c.stream.alloc_zeros::<u8>(n)?);
    }
    c.stream.synchronize()?;
    c.stream
        .begin_capture(
            cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
        .context("begin capture")?;
    for k in 0..2 {
        let algo = [AllReduceAlgo::OneShot, AllReduceAlgo::TwoShot][k];
        c.comm
            .all_reduce_with(&ins[k], &mut outs[k], &ReduceOp::Sum.to_nccl(), algo)?;
        c.comm
            .broadcast_in_place_with(&mut bufs[k], roots[k], BroadcastAlgo::SymmMem)?;
    }
    let graph = c
        .stream
        .end_capture(
            cudarc::driver::sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
        )
        .context("end capture")?
        .context("capture produced no graph")?;
    for _ in 0..replays {
        let call = c.next_call();
        for k in 0..2 {
            let input = data::inputs::<f32>(c.seed, call * 4 + k as u64, c.rank, reduce_elems[k]);
            c.stream.memcpy_htod(&input, &mut ins[k])?;
            c.stream
                .memcpy_htod(&vec![data::poison::<f32>(); reduce_elems[k]], &mut outs[k])?;
            let mine: Vec<u8> = (0..bcast_bytes[k])
                .map(|i| byte(c.seed, call * 4 + 2 + k as u64, c.rank, i))
                .collect();
            c.stream.memcpy_htod(&mine, &mut bufs[k])?;
        }
        graph.launch().context("graph launch")?;
        let mut reduced = Vec::new();
        let mut received = Vec::new();
        for k in 0..2 {
            reduced.push(c.stream.clone_dtoh(&outs[k])?);
            received.push(c.stream.clone_dtoh(&bufs[k])?);
        }
        c.stream.synchronize()?;
        c.comm.check()?;
        for k in 0..2 {
            data::verify(
                &reduced[k],
                c.seed,
                call * 4 + k as u64,
                c.world,
                ReduceOp::Sum,
            )
            .map_err(|e| anyhow!("graph replay, all-reduce {k}: {e}"))?;
            let tag = call * 4 + 2 + k as u64;
            if let Some(i) =
                (0..bcast_bytes[k]).find(|&i| received[k][i] != byte(c.seed, tag, roots[k], i))
            {
                bail!(
                    "graph replay, broadcast {k} from root {}: byte {i} differs",
                    roots[k]
                );
            }
        }
    }
    Ok(format!(
        "{replays} replays of a graph of 2 all-reduces and 2 broadcasts, all correct"
    ))
}

// ---------------------------------------------------------------------------
// 4. Hooks.
// ---------------------------------------------------------------------------

/// Gradient `i` of variable `v` on `rank`: magnitudes from 1e-3 to 1e2,
/// by variable, so relative and absolute errors both show.
fn grad(seed: u64, call: u64, rank: usize, v: usize, i: usize) -> f64 {
    let scale = [1.0e-3, 0.05, 1.0, 7.0, 100.0][v % 5];
    value(seed, call, rank, v, i) / 100.0 * scale
}

/// Variable shapes of a small model, one larger than the smaller bucket
/// limit (split across buckets) and one above the 4 MiB NCCL crossover.
fn hook_shapes() -> Vec<Vec<usize>> {
    vec![
        vec![1],
        vec![3, 5],
        vec![257, 129],
        vec![8],
        vec![7, 7, 3],
        vec![1024 * 1536],
        vec![33],
        vec![2, 2, 2, 2],
    ]
}

/// What a hook computes, for the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reduction {
    Mean,
    Sum,
}

/// Unit roundoff of a type.
fn unit_roundoff(elem: ElemType) -> f64 {
    match elem {
        ElemType::F32 => 2f64.powi(-24),
        ElemType::Bf16 => 2f64.powi(-8),
        ElemType::F16 => 2f64.powi(-11),
        other => panic!("no unit roundoff for {other:?}"),
    }
}

/// The module docs' tolerance.
fn tolerance(world: usize, wire: ElemType, compressed: bool, red: Reduction, s: f64) -> f64 {
    let w = world as f64;
    let steps = if compressed { w + 2.0 } else { w + 1.0 };
    let mut tol = steps * unit_roundoff(wire) * s;
    if red == Reduction::Mean {
        tol /= w;
    }
    if wire == ElemType::F16 {
        // Every rounding of a subnormal f16 (cast, NCCL's pre-scaling per
        // rank, each addition, the result) is off by up to half the
        // smallest subnormal, 2^-25, whatever the magnitudes.
        tol += 2.0 * (w + 1.0) * 2f64.powi(-25);
    }
    tol
}

/// Runs `hook` over the buckets of `shapes` (element type `T`) for two
/// steps of fresh gradients and checks every variable.
#[allow(clippy::too_many_arguments)]
fn run_hook_case<T: DType + NcclType + DeviceRepr + ValidAsZeroBits>(
    c: &mut Ctx<'_>,
    hook: &mut dyn CommHook,
    name: &str,
    bucket_bytes: usize,
    wire: ElemType,
    compressed: bool,
    red: Reduction,
) -> Result<HookOutcome> {
    let shapes = hook_shapes();
    let numels: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
    let items: Vec<PlanItem> = numels.iter().map(|&n| PlanItem::new(T::ELEM, n)).collect();
    let plans = plan_buckets(&items, bucket_bytes)?;
    let mut buckets = GradBucket::from_plans(&plans, &shapes, &c.stream)?;
    let mut fp = FnvHasher::default();
    let mut worst = 0.0f64;
    for _step in 0..2 {
        let call = c.next_call();
        let (rank, seed, world) = (c.rank, c.seed, c.world);
        let mut vars: Vec<CudaSlice<T>> = Vec::with_capacity(numels.len());
        for (v, &n) in numels.iter().enumerate() {
            let host: Vec<T> = (0..n)
                .map(|i| T::from_f64(grad(seed, call, rank, v, i)))
                .collect();
            vars.push(c.stream.clone_htod(&host)?);
        }
        {
            let refs: Vec<&dyn DeviceBuffer> =
                vars.iter().map(|v| v as &dyn DeviceBuffer).collect();
            for b in buckets.iter_mut() {
                b.pack(&refs, &c.stream)?;
            }
        }
        // All hooks first, then the results: the futures are stream-ordered.
        for b in buckets.iter_mut() {
            let fut = hook.run_hook(b)?;
            hook.parse_hook_result(fut)?;
        }
        // Poison the variables, so an entry that never comes back shows.
        for (v, &n) in numels.iter().enumerate() {
            c.stream
                .memcpy_htod(&vec![data::poison::<T>(); n], &mut vars[v])?;
        }
        {
            let mut refs: Vec<&mut dyn DeviceBuffer> = vars
                .iter_mut()
                .map(|v| v as &mut dyn DeviceBuffer)
                .collect();
            for b in &buckets {
                b.unpack(&mut refs, &c.stream)?;
            }
        }
        for (v, &n) in numels.iter().enumerate() {
            let got = c.stream.clone_dtoh(&vars[v])?;
            c.stream.synchronize()?;
            for (i, g) in got.iter().enumerate().take(n) {
                // The reference starts from what each rank fed in: its
                // gradient rounded to the variable's type.
                let inputs: Vec<f64> = (0..world)
                    .map(|r| T::from_f64(grad(seed, call, r, v, i)).to_f64())
                    .collect();
                let sum: f64 = inputs.iter().sum();
                let s: f64 = inputs.iter().map(|x| x.abs()).sum();
                let want = match red {
                    Reduction::Mean => sum / world as f64,
                    Reduction::Sum => sum,
                };
                let tol = tolerance(world, wire, compressed, red, s);
                let err = (g.to_f64() - want).abs();
                if !err.le(&tol) {
                    bail!(
                        "{name}, buckets of {bucket_bytes} bytes: variable {v} element {i}: got {}, want {want} (error {err:e}, tolerance {tol:e})",
                        g.to_f64()
                    );
                }
                if tol > 0.0 {
                    worst = worst.max(err / tol);
                }
                fp.write(&bits(*g).to_le_bytes());
            }
        }
    }
    c.comm.check()?;
    Ok(HookOutcome {
        fingerprint: fp.finish(),
        buckets: buckets.len(),
        worst_error_ratio: worst,
    })
}

/// What one hook case found.
struct HookOutcome {
    fingerprint: u64,
    buckets: usize,
    /// Largest error over its tolerance (at most 1).
    worst_error_ratio: f64,
}

/// The stateful hook's state: what it saw.
#[derive(Debug, Default)]
struct SeenState {
    calls: usize,
    elems: usize,
    indices: Vec<usize>,
    lasts: usize,
}

fn hooks(c: &mut Ctx<'_>) -> Result<String> {
    let mut report = Vec::new();
    let mut fingerprints = Vec::new();
    let mut worst = 0.0f64;
    for bucket_bytes in [64usize << 10, 8 << 20] {
        let comm = c.comm;
        let mut all_f32 = AllReduceHook::new(comm);
        let mut all_bf16 = AllReduceHook::new(comm);
        let mut bf = CompressHook::bf16(comm)?;
        let mut hf = CompressHook::f16(comm)?;
        let cases: [(&mut dyn CommHook, &str, bool, ElemType, bool); 4] = [
            (
                &mut all_f32,
                "all-reduce hook (f32)",
                false,
                ElemType::F32,
                false,
            ),
            (
                &mut all_bf16,
                "all-reduce hook (bf16)",
                true,
                ElemType::Bf16,
                false,
            ),
            (
                &mut bf,
                "bf16 compression hook",
                false,
                ElemType::Bf16,
                true,
            ),
            (&mut hf, "f16 compression hook", false, ElemType::F16, true),
        ];
        for (hook, name, bf16_vars, wire, compressed) in cases {
            let out = if bf16_vars {
                run_hook_case::<bf16>(
                    c,
                    hook,
                    name,
                    bucket_bytes,
                    wire,
                    compressed,
                    Reduction::Mean,
                )?
            } else {
                run_hook_case::<f32>(
                    c,
                    hook,
                    name,
                    bucket_bytes,
                    wire,
                    compressed,
                    Reduction::Mean,
                )?
            };
            fingerprints.push(out.fingerprint);
            worst = worst.max(out.worst_error_ratio);
        }

        let mut stateful = StatefulHook::new(
            comm,
            SeenState::default(),
            |s: &mut SeenState, comm: &Communicator, b: &mut GradBucket| {
                s.calls += 1;
                s.elems += b.buffer().elems();
                s.indices.push(b.index());
                s.lasts += usize::from(b.is_last());
                all_reduce_flat(comm, b.buffer_mut(), &cudarc::nccl::ReduceOp::Sum)
            },
        );
        let out = run_hook_case::<f32>(
            c,
            &mut stateful,
            "stateful hook (sum)",
            bucket_bytes,
            ElemType::F32,
            false,
            Reduction::Sum,
        )?;
        fingerprints.push(out.fingerprint);
        worst = worst.max(out.worst_error_ratio);
        let buckets = out.buckets;
        let state = stateful.into_state();
        let items: Vec<PlanItem> = hook_shapes()
            .iter()
            .map(|s| PlanItem::new(ElemType::F32, s.iter().product()))
            .collect();
        let plan_elems: usize = plan_buckets(&items, bucket_bytes)?
            .iter()
            .map(|p| p.elems)
            .sum();
        let want_indices: Vec<usize> = (0..2).flat_map(|_| 0..buckets).collect();
        ensure!(
            state.calls == 2 * buckets
                && state.indices == want_indices
                && state.lasts == 2
                && state.elems == 2 * plan_elems,
            "stateful hook, buckets of {bucket_bytes} bytes: state {state:?}, want {} calls over buckets {want_indices:?}, 2 last buckets, {} elements",
            2 * buckets,
            2 * plan_elems
        );
        report.push(format!(
            "{buckets} f32 buckets of <= {bucket_bytes} bytes, stateful hook state {{calls: {}, elems: {}, lasts: {}}}",
            state.calls, state.elems, state.lasts
        ));
    }

    // Refusals: compression of a non-f32 bucket, any built-in on a sparse
    // bucket.
    let items = [PlanItem::new(ElemType::Bf16, 10)];
    let plans = plan_buckets(&items, 1024)?;
    let mut b = GradBucket::from_plans(&plans, &[vec![10]], &c.stream)?;
    let mut bf = CompressHook::bf16(c.comm)?;
    ensure!(
        bf.run_hook(&mut b[0]).is_err(),
        "the bf16 compression hook took a bf16 bucket"
    );
    let items = [PlanItem::new(ElemType::F32, 10)];
    let plans = plan_buckets(&items, 1024)?;
    let mut b = GradBucket::from_plans(&plans, &[vec![10]], &c.stream)?;
    b[0].set_sparse_indices(Some(c.stream.alloc_zeros::<i64>(10)?));
    ensure!(
        AllReduceHook::new(c.comm).run_hook(&mut b[0]).is_err(),
        "the all-reduce hook took a sparse bucket"
    );
    c.stream.synchronize()?;

    let all = c.all_gather(&fingerprints)?;
    if let Some(r) = all.iter().position(|f| *f != fingerprints) {
        bail!(
            "hook results differ between rank {} and rank {r} (fingerprints {fingerprints:x?} vs {:x?})",
            c.rank,
            all[r]
        );
    }
    Ok(format!(
        "hooks all-reduce (f32, bf16), bf16/f16 compression, stateful: 2 steps each within tolerance of the f64 reference (worst error {:.3} of its tolerance), bitwise identical across ranks; {}",
        worst,
        report.join("; ")
    ))
}

pub fn run(args: &DdpCheckArgs) -> Result<()> {
    let Some(r) = Rank::setup("intranode-suite ddp-check")? else {
        return Ok(());
    };
    let Rank {
        env,
        ctx: _ctx,
        stream,
        store,
        exchange,
        comm,
    } = r;
    let mut c = Ctx {
        rank: env.rank,
        world: env.world_size,
        stream,
        store,
        exchange,
        comm: &comm,
        seed: args.seed,
        call: 0,
    };
    let t0 = std::time::Instant::now();
    let raw = raw_broadcasts(&mut c).context("raw broadcasts")?;
    let coalesced = coalesced(&mut c).context("broadcast_coalesced")?;
    let inter = interleaved(&mut c, args.interleaved_calls).context("interleaving")?;
    let graph = graph_replays(&mut c, args.graph_replays).context("graph replay")?;
    let hooks = hooks(&mut c).context("hooks")?;
    let (rank, world) = (c.rank, c.world);
    let (store, mut exchange) = (c.store.clone(), c.exchange);
    exchange.barrier(store.as_ref(), rank, world)?;
    let path = match c.comm.intra_reason() {
        None => format!("intra-node {:?}", c.comm.topology()),
        Some(why) => format!("no intra-node path ({why})"),
    };
    println!(
        "ddp-check rank {rank}/{world} ok ({path}, {:.1} s): {raw} raw broadcasts bitwise; {coalesced}; {inter}; {graph}; {hooks}",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
