//! `--tune`: crossovers from a run's rows, for `INTRANODE_TUNING_FILE`
//! (`intranode::config::read_crossovers`). Each tune reads the file it
//! writes, so runs at several world sizes fill one file.

use anyhow::Result;
use intranode::config::Crossovers;

use crate::results::Row;

/// Crossovers from the graph-replay medians: each of ours up to the
/// largest size below which it (or a cheaper-latency one of ours) never
/// loses to the algorithms after it: Lamport, Lamport two-shot, one-shot,
/// two-shot, then NCCL; and the push form from the smallest size of the
/// unbroken run up to the largest one where it beats one-shot, two-shot
/// and NCCL (left as it was when no push rows ran; the size rule tries
/// the Lamport forms first, `decide::by_size`).
pub(crate) fn tune(rows: &[Row], world: usize, path: &std::path::Path) -> Result<Crossovers> {
    let mut x = intranode::config::read_crossovers(path).unwrap_or_default();
    let time = |bytes: usize, algo: &str| {
        rows.iter()
            .find(|r| r.bytes == bytes && r.algo == algo)
            .map_or(f64::INFINITY, |r| r.graph_us)
    };
    let mut sizes: Vec<usize> = rows.iter().map(|r| r.bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let order = [
        "lamport",
        "lamport-two-shot",
        "one-shot",
        "two-shot",
        "nccl",
    ];
    // limits[k]: largest size of the unbroken run from the smallest size
    // where the best of order[..=k] beats the best of order[k+1..].
    let mut limits = [0usize; 4];
    for (k, limit) in limits.iter_mut().enumerate() {
        for &s in &sizes {
            let ours = order[..=k]
                .iter()
                .map(|a| time(s, a))
                .fold(f64::INFINITY, f64::min);
            let rest = order[k + 1..]
                .iter()
                .map(|a| time(s, a))
                .fold(f64::INFINITY, f64::min);
            if ours.is_finite() && ours <= rest {
                *limit = s;
            } else {
                break;
            }
        }
    }
    // Beyond a slot the Lamport rows ran as one-shot (its fallback).
    x.lamport_max_bytes[world] =
        limits[0].min(intranode::internals::lamport_max_message_bytes(world));
    // Beyond its buffers the Lamport two-shot rows ran as two-shot.
    x.lamport_two_shot_max_bytes[world] = limits[1]
        .min(intranode::internals::lamport_two_shot_max_message_bytes(
            world,
        ))
        .max(x.lamport_max_bytes[world]);
    x.one_shot_max_bytes[world] = limits[2].max(limits[1]).max(limits[0]);
    x.two_shot_max_bytes[world] = limits[3].max(x.one_shot_max_bytes[world]);
    if sizes.iter().any(|&s| time(s, "push").is_finite()) {
        let mut from = usize::MAX;
        for &s in sizes.iter().rev() {
            let rest = ["one-shot", "two-shot", "nccl"]
                .iter()
                .map(|a| time(s, a))
                .fold(f64::INFINITY, f64::min);
            let push = time(s, "push");
            if push.is_finite() && push <= rest {
                from = s;
            } else {
                break;
            }
        }
        x.push_min_bytes[world] = from;
    }
    Ok(x)
}

/// Reduce-scatter and all-gather crossovers from one run of either
/// (`--collective`, rows `lamport`, `push`, `nccl` from the graph-replay
/// means), for `Crossovers::scatter_gather_push_min_bytes` and
/// `scatter_gather_max_bytes`, which the two collectives share (their
/// crossovers measured the same at 2, 3 and 4 ranks); the last run
/// written wins:
/// - the push form from the smallest size of the unbroken run, down from
///   the largest size, where it is at least as fast as the Lamport form
///   (left as it was unless both forms ran);
/// - ours up to the largest size of the unbroken run, up from the
///   smallest, where the form auto then takes is at least as fast as
///   NCCL (left as it was where no size has both rows).
///
/// A size without both rows of a comparison neither extends nor breaks
/// its run.
pub(crate) fn tune_scatter_gather(
    rows: &[Row],
    world: usize,
    path: &std::path::Path,
) -> Result<Crossovers> {
    let mut x = intranode::config::read_crossovers(path).unwrap_or_default();
    let time = |bytes: usize, algo: &str| {
        rows.iter()
            .find(|r| r.bytes == bytes && r.algo == algo)
            .map_or(f64::INFINITY, |r| r.graph_us)
    };
    let ran = |algo: &str| rows.iter().any(|r| r.algo == algo);
    let mut sizes: Vec<usize> = rows.iter().map(|r| r.bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    // Whether the first form was at least as fast at size `s`, where both
    // ran there.
    let wins = |s: usize, a: &str, b: &str| {
        let (ta, tb) = (time(s, a), time(s, b));
        (ta.is_finite() && tb.is_finite()).then_some(ta <= tb)
    };
    if ran("push") && ran("lamport") {
        let mut from = usize::MAX;
        for &s in sizes.iter().rev() {
            match wins(s, "push", "lamport") {
                Some(true) => from = s,
                Some(false) => break,
                None => {}
            }
        }
        x.scatter_gather_push_min_bytes[world] = from;
    }
    let mut limit = None;
    for &s in &sizes {
        let form = match s >= x.scatter_gather_push_min_bytes[world] {
            true => "push",
            false => "lamport",
        };
        match wins(s, form, "nccl") {
            Some(true) => limit = Some(s),
            Some(false) => {
                limit = Some(limit.unwrap_or(0));
                break;
            }
            None => {}
        }
    }
    if let Some(limit) = limit {
        x.scatter_gather_max_bytes[world] = limit;
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::row;

    /// The reduce-scatter / all-gather crossovers: the push form from
    /// where it beats the Lamport form to the largest size, ours while the
    /// form auto takes beats NCCL; unchanged without the rows they need.
    #[test]
    fn tune_scatter_gather_places_both_crossovers() {
        let path = std::env::temp_dir().join(format!("intranode-tune-sg-{}", std::process::id()));
        let mib = 1usize << 20;
        let mut rows = Vec::new();
        // A measured run: 4 H100, reduce-scatter (us).
        for (bytes, lamport, push, nccl) in [
            (16, 45.49, 56.57, 58.35),
            (64, 184.36, 177.47, 192.78),
            (256, 739.43, 652.60, 677.08),
            (1024, 2959.17, 2526.56, 2533.86),
        ] {
            rows.push(row(4, bytes * mib, "lamport", lamport));
            rows.push(row(4, bytes * mib, "push", push));
            rows.push(row(4, bytes * mib, "nccl", nccl));
        }
        let x = tune_scatter_gather(&rows, 4, &path).unwrap();
        assert_eq!(x.scatter_gather_push_min_bytes[4], 64 * mib);
        assert_eq!(x.scatter_gather_max_bytes[4], 1024 * mib);
        // The same run with NCCL ahead at 1 GiB (the all-gather's 2480
        // against 2495): ours to 256 MiB.
        rows.retain(|r| !(r.bytes == 1024 * mib && r.algo == "nccl"));
        rows.push(row(4, 1024 * mib, "nccl", 2480.0));
        let x = tune_scatter_gather(&rows, 4, &path).unwrap();
        assert_eq!(x.scatter_gather_max_bytes[4], 256 * mib);
        // Losing at the smallest size: NCCL everywhere.
        rows.push(row(4, mib, "lamport", 9.0));
        rows.push(row(4, mib, "nccl", 8.0));
        assert_eq!(
            tune_scatter_gather(&rows, 4, &path)
                .unwrap()
                .scatter_gather_max_bytes[4],
            0
        );
        // Without NCCL rows or without the Lamport rows: those stay.
        let d = Crossovers::default();
        let ours: Vec<_> = rows.iter().filter(|r| r.algo != "nccl").cloned().collect();
        let x = tune_scatter_gather(&ours, 4, &path).unwrap();
        assert_eq!(x.scatter_gather_max_bytes, d.scatter_gather_max_bytes);
        assert_eq!(x.scatter_gather_push_min_bytes[4], 64 * mib);
        let push: Vec<_> = rows
            .iter()
            .filter(|r| r.algo != "lamport")
            .cloned()
            .collect();
        let x = tune_scatter_gather(&push, 4, &path).unwrap();
        assert_eq!(
            x.scatter_gather_push_min_bytes,
            d.scatter_gather_push_min_bytes
        );
        // With the default push crossover (32 MiB of whole buffer) the 1
        // and 16 MiB sizes want Lamport rows, which did not run: skipped,
        // and the push rows from 64 MiB set the limit.
        assert_eq!(x.scatter_gather_max_bytes[4], 256 * mib);
        // Other world sizes are left alone.
        assert_eq!(x.scatter_gather_max_bytes[2], d.scatter_gather_max_bytes[2]);
    }

    /// The push form's crossover: from the smallest size of the unbroken
    /// run of its wins up to the largest size; unchanged without push rows.
    #[test]
    fn tune_places_the_push_form() {
        let path = std::env::temp_dir().join(format!("intranode-tune-{}", std::process::id()));
        let mib = 1usize << 20;
        let mut rows = Vec::new();
        for (bytes, nccl, push) in [(8, 50.0, 60.0), (16, 76.0, 80.0), (32, 120.0, 110.0)] {
            rows.push(row(2, bytes * mib, "nccl", nccl));
            rows.push(row(2, bytes * mib, "push", push));
        }
        rows.push(row(2, 64 * mib, "nccl", 240.0));
        rows.push(row(2, 64 * mib, "push", 210.0));
        let x = tune(&rows, 2, &path).unwrap();
        assert_eq!(x.push_min_bytes[2], 32 * mib);
        // Losing at the largest size: never.
        rows.push(row(2, 128 * mib, "nccl", 400.0));
        rows.push(row(2, 128 * mib, "push", 410.0));
        assert_eq!(tune(&rows, 2, &path).unwrap().push_min_bytes[2], usize::MAX);
        let none: Vec<_> = rows.into_iter().filter(|r| r.algo != "push").collect();
        assert_eq!(
            tune(&none, 2, &path).unwrap().push_min_bytes,
            Crossovers::default().push_min_bytes
        );
    }
}
