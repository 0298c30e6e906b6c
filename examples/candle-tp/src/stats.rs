//! The timing plan and its statistics, pure and std-only so that they are
//! tested without CUDA (`cargo xtask ci --only candle-lock` compiles this
//! file alone with `rustc --test`; `cargo test` in the example runs the
//! same tests where candle builds).
//!
//! Why windows: on a shared machine the same back-end's tokens/s moved
//! 20-40% between two runs a minute apart (at TP4), more
//! than any difference between back-ends. Short windows in which every
//! back-end runs once, in an order that rotates from window to window,
//! put each back-end next to NCCL under the same conditions; the ratio
//! within a window cancels the drift, and the spread of the ratios over
//! the windows says how far a single window can be trusted.

/// The order in which `backends` back-ends run in window `window`: each
/// starts a window in turn (window `w` starts at back-end `w % backends`),
/// so that none is always first after the line-up or always last.
pub fn window_order(backends: usize, window: usize) -> Vec<usize> {
    (0..backends)
        .map(|i| (window + i) % backends.max(1))
        .collect()
}

/// The `q` quantile (0 to 1) of `sorted` (ascending), linearly
/// interpolated between the two nearest ranks (as numpy's default), so the
/// 0.5 quantile of an even count is the mean of the middle two. `None` for
/// an empty slice or `q` outside 0..=1.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// The median and spread of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub samples: usize,
    pub median: f64,
    /// The 10th and 90th percentiles.
    pub p10: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `None` for no samples or any sample that is not finite (a window
    /// that took no time would give an infinite rate: better no figure
    /// than a wrong one).
    pub fn of(samples: &[f64]) -> Option<Spread> {
        if samples.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Spread {
            samples: sorted.len(),
            median: quantile(&sorted, 0.5)?,
            p10: quantile(&sorted, 0.1)?,
            p90: quantile(&sorted, 0.9)?,
            min: *sorted.first()?,
            max: *sorted.last()?,
        })
    }
}

/// Tokens per second of each window: `tokens` tokens (batch x steps) in
/// each window's seconds.
pub fn rates(tokens: usize, window_secs: &[f64]) -> Vec<f64> {
    window_secs.iter().map(|&s| tokens as f64 / s).collect()
}

/// Each window's speed ratio of a back-end to the baseline that ran in the
/// same window (its tokens/s over the baseline's: above 1 is faster), as
/// the baseline's seconds over the back-end's. Windows beyond the shorter
/// list are dropped.
pub fn window_ratios(secs: &[f64], base_secs: &[f64]) -> Vec<f64> {
    secs.iter().zip(base_secs).map(|(&s, &b)| b / s).collect()
}

/// What the per-window ratios to the baseline say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Faster than the baseline in at least 90% of the windows (the 10th
    /// percentile of the ratios is above 1).
    Gain,
    /// Slower in at least 90% of the windows (90th percentile below 1).
    Loss,
    /// Neither: the difference, if any, is inside the spread.
    WithinSpread,
}

impl Verdict {
    pub fn of(ratios: &Spread) -> Verdict {
        if ratios.p10 > 1.0 {
            Verdict::Gain
        } else if ratios.p90 < 1.0 {
            Verdict::Loss
        } else {
            Verdict::WithinSpread
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Verdict::Gain => "gain (p10 > 1)",
            Verdict::Loss => "loss (p90 < 1)",
            Verdict::WithinSpread => "within the spread",
        }
    }
}

/// How many of `ratios` are above 1: the windows the back-end won.
pub fn faster_windows(ratios: &[f64]) -> usize {
    ratios.iter().filter(|&&r| r > 1.0).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_runs_once_per_window_and_each_leads_in_turn() {
        for n in 1..=5 {
            let mut firsts = vec![0usize; n];
            let mut lasts = vec![0usize; n];
            for w in 0..4 * n {
                let order = window_order(n, w);
                let mut seen = order.clone();
                seen.sort_unstable();
                assert_eq!(seen, (0..n).collect::<Vec<_>>(), "window {w} of {n}");
                firsts[order[0]] += 1;
                lasts[order[n - 1]] += 1;
            }
            // Over 4n windows every back-end leads 4 times and closes 4
            // times: no position is any back-end's habit.
            assert!(firsts.iter().all(|&c| c == 4), "{firsts:?}");
            assert!(lasts.iter().all(|&c| c == 4), "{lasts:?}");
        }
        assert_eq!(window_order(3, 0), [0, 1, 2]);
        assert_eq!(window_order(3, 1), [1, 2, 0]);
        assert_eq!(window_order(3, 5), [2, 0, 1]);
        assert!(window_order(0, 3).is_empty());
    }

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), Some(2.5));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(4.0));
        // numpy.percentile([1, 2, 3, 4], 10) = 1.3
        assert!((quantile(&v, 0.1).unwrap() - 1.3).abs() < 1e-12);
        assert_eq!(quantile(&[7.0], 0.9), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&v, 1.5), None);
    }

    #[test]
    fn spread_sorts_its_samples() {
        let s = Spread::of(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.samples, 5);
        assert_eq!(s.median, 3.0);
        assert_eq!((s.min, s.max), (1.0, 5.0));
        assert!((s.p10 - 1.4).abs() < 1e-12, "{s:?}");
        assert!((s.p90 - 4.6).abs() < 1e-12, "{s:?}");
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::INFINITY]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn ratios_cancel_a_drift_that_moves_every_backend_alike() {
        // The machine slows by half over the run; the back-end is 10%
        // faster than the baseline in every window. The rates spread over
        // 2x, the ratios not at all.
        let base: Vec<f64> = (0..30).map(|w| 0.1 * (1.0 + w as f64 / 29.0)).collect();
        let ours: Vec<f64> = base.iter().map(|s| s / 1.1).collect();
        let rate = Spread::of(&rates(80, &ours)).unwrap();
        assert!(rate.max / rate.min > 1.9, "{rate:?}");
        let r = window_ratios(&ours, &base);
        let spread = Spread::of(&r).unwrap();
        assert!((spread.median - 1.1).abs() < 1e-9, "{spread:?}");
        assert!(spread.max - spread.min < 1e-9, "{spread:?}");
        assert_eq!(Verdict::of(&spread), Verdict::Gain);
        assert_eq!(faster_windows(&r), 30);
    }

    #[test]
    fn rates_are_tokens_over_seconds() {
        assert_eq!(rates(80, &[0.5, 2.0]), [160.0, 40.0]);
        // Half the time of the baseline is twice its speed.
        assert_eq!(window_ratios(&[0.5, 1.0, 9.0], &[1.0, 1.0]), [2.0, 1.0]);
    }

    #[test]
    fn verdict_needs_nine_windows_in_ten() {
        let gain: Vec<f64> = (0..20).map(|w| 1.02 + 0.001 * w as f64).collect();
        assert_eq!(Verdict::of(&Spread::of(&gain).unwrap()), Verdict::Gain);
        let loss: Vec<f64> = gain.iter().map(|r| 2.0 - r).collect();
        assert_eq!(Verdict::of(&Spread::of(&loss).unwrap()), Verdict::Loss);
        // A median above 1 with a quarter of the windows below: not a gain.
        let mixed: Vec<f64> = (0..20).map(|w| if w < 5 { 0.95 } else { 1.05 }).collect();
        let s = Spread::of(&mixed).unwrap();
        assert!(s.median > 1.0);
        assert_eq!(Verdict::of(&s), Verdict::WithinSpread);
        assert_eq!(faster_windows(&mixed), 15);
    }
}
