//! Free-running timing on the device: calls follow each other on the
//! stream with no host barrier and no extra all-reduce between them, as in
//! a tensor-parallel decode loop, and every call's time comes from the
//! device (a `%globaltimer` stamp after each call in a graph, a CUDA event
//! after each eager call). The benchmark's modes are built of these:
//!
//! - [`graph_mode`]: a CUDA graph of K back-to-back calls, replayed, each
//!   call optionally preceded by a spin (the benchmark's `graph-K`, `skew`
//!   and `decode` modes; the suite's slow-call detector);
//! - [`eager_mode`]: calls launched one by one;
//! - [`skew_of`]: which rank spins before call `j`, and how long.
//!
//! Every delta between stamps includes one stamp kernel (about half a
//! microsecond of graph node); [`graph_mode`]'s mean comes from the same
//! graph without stamps, timed by events around all replays.

use anyhow::{Context, Result, bail};
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaSlice, DevicePtr};
use intranode::kernels::TestKernelModule;
use serde::{Deserialize, Serialize};

use crate::rank::Rank;

/// The `q` quantile (0 to 1) of `sorted` (ascending): the sample at
/// position `round((n - 1) q)`, so the median of an even count is the upper
/// of the middle two. The one definition behind every median and p99 the
/// suite and the benchmark report; `None` for no samples.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    sorted.get((last as f64 * q).round() as usize).copied()
}

/// [`quantile`] 0.5 of samples in any order; `None` for none.
pub fn median(mut samples: Vec<f64>) -> Option<f64> {
    samples.sort_by(f64::total_cmp);
    quantile(&samples, 0.5)
}

/// Median, tail and count of one mode's per-call times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub median_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub calls: usize,
}

impl Dist {
    /// `None` for no samples.
    pub fn of(mut us: Vec<f64>) -> Option<Dist> {
        if us.is_empty() {
            return None;
        }
        us.sort_by(f64::total_cmp);
        Some(Dist {
            median_us: quantile(&us, 0.5)?,
            p99_us: quantile(&us, 0.99)?,
            max_us: quantile(&us, 1.0)?,
            calls: us.len(),
        })
    }

    /// The worst of every rank's figure, figure by figure: the
    /// collective's distribution as its slowest rank saw it.
    pub fn worst(all: &[Dist]) -> Option<Dist> {
        let first = *all.first()?;
        Some(all.iter().fold(first, |a, b| Dist {
            median_us: a.median_us.max(b.median_us),
            p99_us: a.p99_us.max(b.p99_us),
            max_us: a.max_us.max(b.max_us),
            calls: a.calls.min(b.calls),
        }))
    }

    /// Whether the tail holds the targets: p99 at most 1.5 x
    /// the median and max at most 3 x.
    pub fn tail_ok(&self) -> bool {
        self.p99_us <= 1.5 * self.median_us && self.max_us <= 3.0 * self.median_us
    }
}

/// What one call of the timed loop enqueues: `j` is its index in the
/// graph or loop (each index may have its own buffers).
pub type Enqueue<'a> = dyn FnMut(&Rank, usize) -> Result<()> + 'a;

/// The timing kernels and a stamp log on the device: `[count,
/// stamps...]` (`timing_stamp`).
pub struct Timer {
    module: TestKernelModule,
    log: CudaSlice<u64>,
    /// The log's address, taken once: stamps go into graphs captured with
    /// cudarc's event tracking on, where a tracked launch on a buffer
    /// written before the capture is refused (NOTE [capture and event
    /// tracking] in `host/src/intra/tracked.rs`).
    log_ptr: u64,
}

impl Timer {
    /// Room for `cap` stamps.
    pub fn new(r: &Rank, cap: usize) -> Result<Self> {
        let log = r.stream.alloc_zeros::<u64>(cap + 1)?;
        let log_ptr = {
            let (ptr, _guard) = log.device_ptr(&r.stream);
            ptr
        };
        r.stream.synchronize()?;
        Ok(Timer {
            module: TestKernelModule::load(&r.ctx).context("loading the timing kernels")?,
            log,
            log_ptr,
        })
    }

    /// Stamps past this many are counted, not stored.
    pub fn capacity(&self) -> usize {
        self.log.len() - 1
    }

    pub fn reset(&mut self, r: &Rank) -> Result<()> {
        r.stream.memset_zeros(&mut self.log)?;
        Ok(())
    }

    pub fn stamp(&mut self, r: &Rank) -> Result<()> {
        // SAFETY: the log holds `capacity() + 1` words and lives as long as
        // `self`; only stamps on this stream and the reads and resets above
        // (on the same stream) touch it.
        unsafe {
            self.module
                .stamp_raw(&r.stream, self.log_ptr, self.capacity() as u64)?
        };
        Ok(())
    }

    pub fn spin(&self, r: &Rank, ns: u64) -> Result<()> {
        self.module.spin(&r.stream, ns)?;
        Ok(())
    }

    /// The stamps taken since the last reset (synchronizes the stream).
    pub fn read(&self, r: &Rank) -> Result<Vec<u64>> {
        let all = r.stream.clone_dtoh(&self.log)?;
        r.stream.synchronize()?;
        let n = all[0] as usize;
        if n > all.len() - 1 {
            bail!(
                "stamp log overflowed: {n} stamps for {} places",
                all.len() - 1
            );
        }
        Ok(all[1..=n].to_vec())
    }
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

/// What runs before call `j` of a graph on this rank: a spin of so many
/// nanoseconds (0: nothing).
pub type SpinBefore<'a> = &'a dyn Fn(usize) -> u64;

fn capture(
    r: &Rank,
    k: usize,
    enqueue: &mut Enqueue<'_>,
    spin_before: SpinBefore<'_>,
    timer: &mut Timer,
    stamps: bool,
) -> Result<CudaGraph> {
    r.stream.synchronize()?;
    r.stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let body = (|| -> Result<()> {
        if stamps {
            timer.stamp(r)?;
        }
        for j in 0..k {
            let ns = spin_before(j);
            if ns > 0 {
                timer.spin(r, ns)?;
            }
            enqueue(r, j)?;
            if stamps {
                timer.stamp(r)?;
            }
        }
        Ok(())
    })();
    // End the capture whatever happened, so the stream stays usable.
    let graph = r
        .stream
        .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    body?;
    graph?.context("capture produced no graph")
}

/// Per-call times (us) of `replays` free-running replays of a graph of
/// `k` calls, from stamps; minus `net_of(j)` for call `j`. Plus the mean
/// per call of the same graph without stamps.
#[allow(clippy::too_many_arguments)]
pub fn graph_mode(
    r: &Rank,
    k: usize,
    replays: usize,
    enqueue: &mut Enqueue<'_>,
    spin_before: SpinBefore<'_>,
    net_of: &dyn Fn(usize) -> f64,
    timer: &mut Timer,
) -> Result<(Vec<f64>, f64)> {
    if replays * (k + 1) > timer.capacity() {
        bail!(
            "{replays} replays of {k} calls need more than {} stamps",
            timer.capacity()
        );
    }
    let plain = capture(r, k, enqueue, spin_before, timer, false)?;
    plain.launch()?;
    let (start, end) = (event(r)?, event(r)?);
    start.record(&r.stream)?;
    for _ in 0..replays {
        plain.launch()?;
    }
    end.record(&r.stream)?;
    end.synchronize()?;
    let mean_us = start.elapsed_ms(&end)? as f64 * 1000.0 / (replays * k) as f64;
    drop(plain);

    let stamped = capture(r, k, enqueue, spin_before, timer, true)?;
    stamped.launch()?;
    timer.reset(r)?;
    for _ in 0..replays {
        stamped.launch()?;
    }
    let stamps = timer.read(r)?;
    drop(stamped);
    if stamps.len() != replays * (k + 1) {
        bail!("{} stamps for {replays} replays of {k} calls", stamps.len());
    }
    let mut us = Vec::with_capacity(replays * k);
    for rep in stamps.chunks_exact(k + 1) {
        for (j, w) in rep.windows(2).enumerate() {
            us.push(w[1].wrapping_sub(w[0]) as f64 / 1000.0 - net_of(j));
        }
    }
    Ok((us, mean_us))
}

fn event(r: &Rank) -> Result<CudaEvent> {
    Ok(r.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?)
}

/// Per-call times (us) of `calls` eager calls launched back to back, from
/// an event recorded after each; and the mean.
pub fn eager_mode(r: &Rank, calls: usize, enqueue: &mut Enqueue<'_>) -> Result<(Vec<f64>, f64)> {
    let events = (0..=calls).map(|_| event(r)).collect::<Result<Vec<_>>>()?;
    enqueue(r, 0)?;
    events[0].record(&r.stream)?;
    for (j, e) in events[1..].iter().enumerate() {
        enqueue(r, j)?;
        e.record(&r.stream)?;
    }
    events[calls].synchronize()?;
    let mut us = Vec::with_capacity(calls);
    for w in events.windows(2) {
        us.push(w[0].elapsed_ms(&w[1])? as f64 * 1000.0);
    }
    let mean = events[0].elapsed_ms(&events[calls])? as f64 * 1000.0 / calls as f64;
    Ok((us, mean))
}

/// The skew of call `j` of a graph: which rank spins before it and for
/// how many nanoseconds (0 to 20 us), the same on every rank for the same
/// `seed`.
pub fn skew_of(seed: u64, world: usize, j: usize) -> (usize, u64) {
    let h = crate::data::mix(seed ^ (j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    ((h % world as u64) as usize, (h >> 32) % 20_001)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_a_sample() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        // Even counts: the upper middle sample, as `v[n / 2]` gives.
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(median(vec![7.0]), Some(7.0));
        assert_eq!(median(Vec::new()), None);
        let sorted: Vec<f64> = (0..=10).map(f64::from).collect();
        assert_eq!(quantile(&sorted, 0.0), Some(0.0));
        assert_eq!(quantile(&sorted, 0.25), Some(3.0));
        assert_eq!(quantile(&sorted, 1.0), Some(10.0));
    }

    #[test]
    fn distribution() {
        let d = Dist::of((1..=100).map(f64::from).collect()).expect("samples");
        assert_eq!(
            (d.median_us, d.p99_us, d.max_us, d.calls),
            (51.0, 99.0, 100.0, 100)
        );
        assert!(!d.tail_ok());
        let flat = Dist::of(vec![2.0; 1000]).expect("samples");
        assert!(flat.tail_ok());
        assert!(Dist::of(Vec::new()).is_none());
        let w = Dist::worst(&[d, flat]).expect("two");
        assert_eq!((w.median_us, w.max_us, w.calls), (51.0, 100.0, 100));
    }

    #[test]
    fn skews_agree_and_stay_in_range() {
        let mut ranks = [0usize; 4];
        for j in 0..10_000 {
            let (rank, ns) = skew_of(7, 4, j);
            assert_eq!((rank, ns), skew_of(7, 4, j));
            assert!(ns <= 20_000);
            ranks[rank] += 1;
        }
        assert!(ranks.iter().all(|&n| n > 2000), "{ranks:?}");
    }
}
