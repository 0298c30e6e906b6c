//! `soak`: a long run of random all-reduces, every result
//! checked, device memory and open file descriptors watched.
//!
//! Each call draws its element type (bf16, f16, f32), length (1 element to
//! `--max-bytes`, log-uniform, with many tiny and odd lengths), op,
//! algorithm (auto, both Lamport forms, one-shot, two-shot, and HCM where
//! the group has it) and whether it runs in place, from one seeded
//! generator that every rank runs identically, so all ranks make the same
//! calls. A share of the calls runs as replays of CUDA graphs captured at
//! the start (8 all-reduces each, their own buffers).
//!
//! Checking without the host in the way: a million calls of up to a few
//! MiB would move terabytes through the host. Instead the inputs are a
//! pure function of (seed, call, rank, index) (`intranode_kernels_gpu::pattern`), so
//! a fill kernel writes every call's fresh inputs (and poisons its output
//! with NaN) and a check kernel recomputes every rank's inputs and counts
//! the output elements off the expected reduction, into one counter per
//! call. The host reads the counters once per `--batch` calls. A self-test
//! first proves, per element type, that the check counts a poisoned output,
//! passes the host-computed expected output and catches one wrong element,
//! and that the fill wrote exactly the host's pattern.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaSlice, CudaStream};
use cudarc::nccl::NcclType;
use half::{bf16, f16};
use intranode::AllReduceAlgo;
use intranode::kernels::{DType, ElemType, SoakCall, TestKernelModule};
use intranode::types::ReduceOp;
use intranode_harness::rank::Rank;
use intranode_kernels_gpu::layout;
use intranode_kernels_gpu::pattern;

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// All-reduces to run, every one checked.
    #[arg(long, default_value_t = 1_000_000)]
    pub calls: u64,
    /// Seed of every choice and every input (all ranks must agree).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Largest message, in bytes.
    #[arg(long, default_value_t = 6 << 20)]
    pub max_bytes: usize,
    /// Share of the calls run as CUDA-graph replays (0 to 1).
    #[arg(long, default_value_t = 0.25)]
    pub graph_share: f64,
    /// Calls between two reads of the mismatch counters.
    #[arg(long, default_value_t = 512)]
    pub batch: usize,
    /// Calls between two samples of free device memory and open fds.
    #[arg(long, default_value_t = 100_000)]
    pub sample_every: u64,
    /// How far free device memory may fall below the baseline, in MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_slack_mib: usize,
}

/// All-reduces per captured graph, and graphs captured.
const GRAPH_NODES: usize = 8;
const GRAPHS: usize = 4;

/// The generator every rank runs identically: SplitMix64's finalizer
/// (`pattern::mix`) of a counter stepped by its increment.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        pattern::mix(self.0)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One call's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Spec {
    elem: ElemType,
    elems: usize,
    op: ReduceOp,
    /// `None`: the communicator picks.
    algo: Option<AllReduceAlgo>,
    in_place: bool,
}

impl Spec {
    fn draw(rng: &mut Rng, algos: &[Option<AllReduceAlgo>], max_bytes: usize) -> Spec {
        let elem = ElemType::ALL[rng.below(3)];
        let max_elems = (max_bytes / elem.bytes()).max(1);
        let elems = if rng.below(8) == 0 {
            1 + rng.below(64.min(max_elems))
        } else {
            // Log-uniform in [1, max_elems]: as many 10-element calls as
            // 1-MiB ones, so latency paths and chunked paths both get
            // their share.
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            ((max_elems as f64).powf(u) as usize).clamp(1, max_elems)
        };
        Spec {
            elem,
            elems,
            op: ReduceOp::ALL[rng.below(4)],
            algo: algos[rng.below(algos.len())],
            in_place: rng.below(4) == 0,
        }
    }

    fn bytes(&self) -> usize {
        self.elems * self.elem.bytes()
    }
}

/// An input and an output buffer of one element type.
struct Pair<T> {
    input: CudaSlice<T>,
    output: CudaSlice<T>,
}

impl<T: DType + cudarc::driver::ValidAsZeroBits> Pair<T> {
    fn new(stream: &Arc<CudaStream>, elems: usize) -> Result<Self> {
        Ok(Pair {
            input: stream.alloc_zeros::<T>(elems.max(1))?,
            output: stream.alloc_zeros::<T>(elems.max(1))?,
        })
    }
}

/// A pair of whichever element type a spec has.
enum AnyPair {
    Bf16(Pair<bf16>),
    F16(Pair<f16>),
    F32(Pair<f32>),
}

impl AnyPair {
    fn new(stream: &Arc<CudaStream>, elem: ElemType, elems: usize) -> Result<Self> {
        Ok(match elem {
            ElemType::Bf16 => AnyPair::Bf16(Pair::new(stream, elems)?),
            ElemType::F16 => AnyPair::F16(Pair::new(stream, elems)?),
            ElemType::F32 => AnyPair::F32(Pair::new(stream, elems)?),
            other => bail!("no buffer pair for {other:?}"),
        })
    }
}

/// A captured graph of [`GRAPH_NODES`] all-reduces over its own buffers.
struct Graph {
    specs: Vec<Spec>,
    pairs: Vec<AnyPair>,
    graph: CudaGraph,
}

/// Everything the calls share.
struct Soak<'a> {
    r: &'a Rank,
    module: TestKernelModule,
    seed: u64,
    counters: CudaSlice<u32>,
}

impl Soak<'_> {
    fn call(&self, call: u64, op: ReduceOp) -> SoakCall {
        SoakCall {
            seed: self.seed,
            call,
            rank: self.r.rank(),
            world: self.r.world(),
            op,
        }
    }

    /// Fills the first `spec.elems` elements of the pair's input with
    /// `call`'s pattern (and poisons the output, unless in place).
    fn fill<T: DType>(&self, pair: &mut Pair<T>, spec: &Spec, call: u64) -> Result<()> {
        let n = spec.elems;
        let sc = self.call(call, spec.op);
        let mut input = pair.input.slice_mut(0..n);
        if spec.in_place {
            self.module
                .soak_fill(&self.r.stream, &mut input, None::<&mut CudaSlice<T>>, &sc)?;
        } else {
            let mut output = pair.output.slice_mut(0..n);
            self.module
                .soak_fill(&self.r.stream, &mut input, Some(&mut output), &sc)?;
        }
        Ok(())
    }

    /// The all-reduce itself, on the pair's first `spec.elems` elements.
    fn reduce<T: DType + NcclType>(&self, pair: &mut Pair<T>, spec: &Spec) -> Result<()> {
        let n = spec.elems;
        if spec.in_place {
            self.r
                .all_reduce_in_place(&mut pair.input.slice_mut(0..n), spec.op, spec.algo)?;
        } else {
            let input = pair.input.slice(0..n);
            let mut output = pair.output.slice_mut(0..n);
            self.r.all_reduce(&input, &mut output, spec.op, spec.algo)?;
        }
        Ok(())
    }

    /// Counts the result's elements off the expected reduction into
    /// counter `slot`.
    fn check<T: DType>(
        &mut self,
        pair: &Pair<T>,
        spec: &Spec,
        call: u64,
        slot: usize,
    ) -> Result<()> {
        let n = spec.elems;
        let sc = self.call(call, spec.op);
        let result = if spec.in_place {
            pair.input.slice(0..n)
        } else {
            pair.output.slice(0..n)
        };
        self.module
            .soak_check(&self.r.stream, &result, &sc, &mut self.counters, slot)?;
        Ok(())
    }

    fn eager<T: DType + NcclType>(
        &mut self,
        pair: &mut Pair<T>,
        spec: &Spec,
        call: u64,
        slot: usize,
    ) -> Result<()> {
        self.fill(pair, spec, call)?;
        self.reduce(pair, spec)?;
        self.check(pair, spec, call, slot)
    }
}

/// Free device memory (bytes) and open file descriptors of this process.
fn sample(r: &Rank) -> Result<(usize, usize)> {
    let (free, _total) = r.ctx.mem_get_info().context("cuMemGetInfo")?;
    let fds = intranode_tests::open_fd_count().context("listing /proc/self/fd")?;
    Ok((free, fds))
}

/// Proves the check can fail, per element type (see the module docs).
fn self_test<T: DType + cudarc::driver::ValidAsZeroBits>(s: &mut Soak<'_>) -> Result<()> {
    let n = 1007usize;
    let call = u64::MAX;
    let stream = s.r.stream.clone();
    let mut pair = Pair::<T>::new(&stream, n)?;
    let spec = Spec {
        elem: T::ELEM,
        elems: n,
        op: ReduceOp::Avg,
        algo: None,
        in_place: false,
    };
    stream.memset_zeros(&mut s.counters)?;
    s.fill(&mut pair, &spec, call)?;
    s.check(&pair, &spec, call, 0)?;
    let world = s.r.world() as u32;
    let mut want: Vec<T> = (0..n as u64)
        .map(|i| T::from_f32(pattern::expected(s.seed, call, world, i, layout::OP_AVG)))
        .collect();
    stream.memcpy_htod(&want, &mut pair.output)?;
    s.check(&pair, &spec, call, 1)?;
    want[17] = T::from_f32(want[17].to_f32() + 1.0);
    stream.memcpy_htod(&want, &mut pair.output)?;
    s.check(&pair, &spec, call, 2)?;
    let counts = stream.clone_dtoh(&s.counters)?;
    let filled = stream.clone_dtoh(&pair.input)?;
    stream.synchronize()?;
    let rank = s.r.rank() as u32;
    if let Some(i) = (0..n).find(|&i| {
        filled[i].to_f32() != T::from_f32(pattern::input(s.seed, call, rank, i as u64)).to_f32()
    }) {
        bail!(
            "soak self-test ({:?}): fill wrote element {i} wrong",
            T::ELEM
        );
    }
    if counts[..3] != [n as u32, 0, 1] {
        bail!(
            "soak self-test ({:?}): the check counted {:?} for (poisoned, expected, one element off), want [{n}, 0, 1]",
            T::ELEM,
            &counts[..3]
        );
    }
    Ok(())
}

/// Per-kind call counts, for the report.
#[derive(Debug, Default)]
struct Counts {
    eager: u64,
    graph: u64,
    in_place: u64,
    elem: [u64; 3],
    op: [u64; 4],
    algo: [u64; 7],
    bytes: u128,
}

impl Counts {
    fn add(&mut self, spec: &Spec, graph: bool) {
        if graph {
            self.graph += 1;
        } else {
            self.eager += 1;
        }
        self.in_place += u64::from(spec.in_place);
        self.elem[ElemType::ALL
            .iter()
            .position(|e| *e == spec.elem)
            .unwrap_or(0)] += 1;
        self.op[ReduceOp::ALL
            .iter()
            .position(|o| *o == spec.op)
            .unwrap_or(0)] += 1;
        self.algo[match spec.algo {
            None => 0,
            Some(AllReduceAlgo::Lamport) => 1,
            Some(AllReduceAlgo::OneShot) => 2,
            Some(AllReduceAlgo::TwoShot) => 3,
            Some(AllReduceAlgo::LamportTwoShot) => 5,
            Some(AllReduceAlgo::Push) => 6,
            Some(_) => 4,
        }] += 1;
        self.bytes += spec.bytes() as u128;
    }
}

pub fn run(args: &SoakArgs) -> Result<()> {
    let Some(r) = Rank::setup("intranode-suite soak")? else {
        return Ok(());
    };
    if !(0.0..=1.0).contains(&args.graph_share) || args.batch < GRAPH_NODES || args.max_bytes < 4 {
        bail!(
            "soak: --graph-share must be in 0..=1, --batch at least {GRAPH_NODES}, --max-bytes at least 4"
        );
    }
    let (rank, world) = (r.rank(), r.world());
    let mut algos = vec![None];
    algos.extend(r.intra_algos().into_iter().map(Some));
    let module = TestKernelModule::load(&r.ctx)?;
    let counters = r.stream.alloc_zeros::<u32>(args.batch)?;
    let mut s = Soak {
        r: &r,
        module,
        seed: args.seed,
        counters,
    };
    self_test::<bf16>(&mut s)?;
    self_test::<f16>(&mut s)?;
    self_test::<f32>(&mut s)?;
    // The self-tests left their counts behind.
    r.stream.memset_zeros(&mut s.counters)?;

    let mut rng = Rng(args.seed ^ 0x50A4_0000);
    let max_elems = |e: ElemType| (args.max_bytes / e.bytes()).max(1);
    let stream = r.stream.clone();
    let mut eager_bf16 = Pair::<bf16>::new(&stream, max_elems(ElemType::Bf16))?;
    let mut eager_f16 = Pair::<f16>::new(&stream, max_elems(ElemType::F16))?;
    let mut eager_f32 = Pair::<f32>::new(&stream, max_elems(ElemType::F32))?;

    // Graphs: same specs on every rank (same generator), captured once.
    let mut graphs = Vec::new();
    if args.graph_share > 0.0 {
        for _ in 0..GRAPHS {
            let specs: Vec<Spec> = (0..GRAPH_NODES)
                .map(|_| Spec::draw(&mut rng, &algos, args.max_bytes))
                .collect();
            let mut pairs = specs
                .iter()
                .map(|sp| AnyPair::new(&stream, sp.elem, sp.elems))
                .collect::<Result<Vec<_>>>()?;
            stream.synchronize()?;
            stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .context("begin capture")?;
            let mut captured = Ok(());
            for (spec, pair) in specs.iter().zip(pairs.iter_mut()) {
                captured = match pair {
                    AnyPair::Bf16(p) => s.reduce(p, spec),
                    AnyPair::F16(p) => s.reduce(p, spec),
                    AnyPair::F32(p) => s.reduce(p, spec),
                };
                if captured.is_err() {
                    break;
                }
            }
            // End the capture even after an error, so the stream is usable.
            let graph = stream
                .end_capture(
                    CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
                )
                .context("end capture")?;
            captured?;
            let graph = graph.context("the capture produced no graph")?;
            graphs.push(Graph {
                specs,
                pairs,
                graph,
            });
        }
    }

    let mut counts = Counts::default();
    let mut pending: Vec<(u64, Spec, bool)> = Vec::with_capacity(args.batch);
    let mut samples: Vec<(u64, usize, usize)> = Vec::new();
    let mut baseline: Option<(usize, usize)> = None;
    let mut next_sample = 0u64;
    let mut done = 0u64;
    let mut graph_turn = 0usize;
    let start = Instant::now();
    let describe = |call: u64, spec: &Spec, graph: bool| {
        format!(
            "call {call} ({}: {} x {:?}, {:?}, {}{})",
            if graph { "graph replay" } else { "eager" },
            spec.elems,
            spec.elem,
            spec.op,
            spec.algo.map_or("auto", AllReduceAlgo::name),
            if spec.in_place { ", in place" } else { "" }
        )
    };

    while done < args.calls {
        let remaining = args.calls - done;
        let use_graph = !graphs.is_empty()
            && remaining >= GRAPH_NODES as u64
            && (counts.graph as f64) < args.graph_share * done as f64;
        let need = if use_graph { GRAPH_NODES } else { 1 };
        if pending.len() + need > args.batch {
            flush(&mut s, &mut pending, &describe)?;
        }
        // Samples at batch boundaries: the first one (after the graphs
        // and one batch of warm-up, once NCCL and the pools have settled)
        // is the baseline.
        if pending.is_empty() && done >= next_sample && done >= args.batch as u64 {
            stream.synchronize()?;
            let (free, fds) = sample(&r)?;
            baseline.get_or_insert((free, fds));
            samples.push((done, free, fds));
            next_sample = done + args.sample_every.max(1);
            if rank == 0 {
                println!(
                    "soak: {done} calls, {:.1} s, free device memory {} MiB, {fds} open fds",
                    start.elapsed().as_secs_f64(),
                    free >> 20
                );
            }
        }
        if use_graph {
            let turn = graph_turn % graphs.len();
            let g = &mut graphs[turn];
            graph_turn += 1;
            let first = done;
            for (k, (spec, pair)) in g.specs.iter().zip(g.pairs.iter_mut()).enumerate() {
                let call = first + k as u64;
                match pair {
                    AnyPair::Bf16(p) => s.fill(p, spec, call)?,
                    AnyPair::F16(p) => s.fill(p, spec, call)?,
                    AnyPair::F32(p) => s.fill(p, spec, call)?,
                }
            }
            g.graph.launch().context("graph launch")?;
            for (k, (spec, pair)) in g.specs.iter().zip(g.pairs.iter()).enumerate() {
                let call = first + k as u64;
                let slot = pending.len();
                match pair {
                    AnyPair::Bf16(p) => s.check(p, spec, call, slot)?,
                    AnyPair::F16(p) => s.check(p, spec, call, slot)?,
                    AnyPair::F32(p) => s.check(p, spec, call, slot)?,
                }
                pending.push((call, *spec, true));
                counts.add(spec, true);
            }
            done += GRAPH_NODES as u64;
        } else {
            let spec = Spec::draw(&mut rng, &algos, args.max_bytes);
            let slot = pending.len();
            let call = done;
            let result = match spec.elem {
                ElemType::Bf16 => s.eager(&mut eager_bf16, &spec, call, slot),
                ElemType::F16 => s.eager(&mut eager_f16, &spec, call, slot),
                ElemType::F32 => s.eager(&mut eager_f32, &spec, call, slot),
                other => Err(anyhow::anyhow!("no eager buffers for {other:?}")),
            };
            result.with_context(|| format!("rank {rank}: {}", describe(call, &spec, false)))?;
            pending.push((call, spec, false));
            counts.add(&spec, false);
            done += 1;
        }
    }
    flush(&mut s, &mut pending, &describe)?;
    let elapsed = start.elapsed();
    r.comm.check()?;
    let (free, fds) = sample(&r)?;
    samples.push((done, free, fds));
    let baseline = baseline.unwrap_or((free, fds));
    let slack = args.memory_slack_mib << 20;
    let grew: Vec<String> = samples
        .iter()
        .filter(|(_, f, d)| f + slack < baseline.0 || *d > baseline.1)
        .map(|(at, f, d)| format!("after {at} calls: {} MiB free, {d} fds", f >> 20))
        .collect();
    let series = |f: &dyn Fn(&(u64, usize, usize)) -> String| {
        samples.iter().map(f).collect::<Vec<_>>().join(" ")
    };
    let rate = done as f64 / elapsed.as_secs_f64();
    println!(
        "soak rank {rank}/{world}: {done} all-reduces in {:.1} s = {rate:.0} calls/s, every result checked on the GPU, 0 mismatches; \
         {} eager, {} in {} graph replays, {} in place; bf16/f16/f32 {:?}; sum/avg/min/max {:?}; auto/lamport/one-shot/two-shot/hcm/lamport-two-shot/bandwidth {:?}; {:.1} GiB reduced; \
         free device memory MiB [{}]; open fds [{}]",
        elapsed.as_secs_f64(),
        counts.eager,
        counts.graph,
        counts.graph / GRAPH_NODES as u64,
        counts.in_place,
        counts.elem,
        counts.op,
        counts.algo,
        counts.bytes as f64 / (1u64 << 30) as f64,
        series(&|(_, f, _)| (f >> 20).to_string()),
        series(&|(_, _, d)| d.to_string()),
    );
    if !grew.is_empty() {
        bail!(
            "soak rank {rank}: FAIL: resources grew past the baseline ({} MiB free, {} fds; slack {} MiB): {}",
            baseline.0 >> 20,
            baseline.1,
            args.memory_slack_mib,
            grew.join("; ")
        );
    }
    let summary = (done, elapsed.as_secs_f64());
    drop(graphs);
    drop(s);
    let mut r = r;
    let all = r.all_gather(&summary)?;
    if rank == 0 {
        let slowest = all.iter().map(|(_, t)| *t).fold(0.0, f64::max);
        println!(
            "soak: PASS {world} ranks x {done} checked all-reduces, 0 mismatches, slowest rank {slowest:.1} s ({:.0} calls/s), memory and fds flat",
            done as f64 / slowest
        );
    }
    Ok(())
}

/// Reads the counters of the pending calls and fails on the first call
/// with mismatches; then clears them.
fn flush(
    s: &mut Soak<'_>,
    pending: &mut Vec<(u64, Spec, bool)>,
    describe: &dyn Fn(u64, &Spec, bool) -> String,
) -> Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let stream = s.r.stream.clone();
    let counts = stream.clone_dtoh(&s.counters)?;
    stream.synchronize()?;
    s.r.comm.check()?;
    for (slot, (call, spec, graph)) in pending.iter().enumerate() {
        if counts[slot] != 0 {
            bail!(
                "soak rank {}: FAIL: {}: {} of {} elements off the expected result",
                s.r.rank(),
                describe(*call, spec, *graph),
                counts[slot],
                spec.elems
            );
        }
    }
    stream.memset_zeros(&mut s.counters)?;
    pending.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_draws_the_same_calls() {
        let algos = [
            None,
            Some(AllReduceAlgo::OneShot),
            Some(AllReduceAlgo::TwoShot),
        ];
        let draw = |seed| {
            let mut rng = Rng(seed);
            (0..1000)
                .map(|_| Spec::draw(&mut rng, &algos, 6 << 20))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn draws_cover_the_space() {
        let algos = [
            None,
            Some(AllReduceAlgo::OneShot),
            Some(AllReduceAlgo::TwoShot),
        ];
        let mut rng = Rng(1);
        let specs: Vec<Spec> = (0..20_000)
            .map(|_| Spec::draw(&mut rng, &algos, 6 << 20))
            .collect();
        assert!(specs.iter().all(|s| s.elems >= 1 && s.bytes() <= 6 << 20));
        assert!(specs.iter().any(|s| s.elems == 1));
        assert!(
            specs.iter().any(|s| s.bytes() > 5 << 20),
            "multi-chunk calls"
        );
        assert!(specs.iter().filter(|s| s.elems % 8 != 0).count() > 10_000);
        for e in ElemType::ALL {
            assert!(specs.iter().any(|s| s.elem == e));
        }
        for o in ReduceOp::ALL {
            assert!(specs.iter().any(|s| s.op == o));
        }
        for a in algos {
            assert!(specs.iter().any(|s| s.algo == a && s.in_place));
            assert!(specs.iter().any(|s| s.algo == a && !s.in_place));
        }
        // Log-uniform: small calls are common, big ones present.
        let small = specs.iter().filter(|s| s.bytes() <= 4096).count();
        assert!(small > 5_000 && small < 15_000, "{small}");
    }
}
