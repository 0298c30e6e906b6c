//! The inputs and checks of the examples that compare every element:
//! small integers, so every partial sum is exact in bf16 whatever the
//! order of the additions, and the expected sum is known on the host.

use anyhow::{Result, ensure};

/// Rank `rank`'s element `i` of call `seed`: an integer in -4..=4.
pub fn value(rank: usize, i: usize, seed: u32) -> f32 {
    ((i as u32)
        .wrapping_mul(7)
        .wrapping_add(seed.wrapping_mul(3).wrapping_add(rank as u32 * 5))
        % 9) as f32
        - 4.0
}

/// Rank `rank`'s `n` elements of call `seed`, made into `T` by `make`.
pub fn pattern<T>(rank: usize, n: usize, seed: u32, make: impl Fn(f32) -> T) -> Vec<T> {
    (0..n).map(|i| make(value(rank, i, seed))).collect()
}

/// Checks `got` (as f32) against the sum over `world` ranks of call
/// `seed`; the error names `what` and the first wrong element.
pub fn check(got: &[f32], world: usize, seed: u32, what: &str) -> Result<()> {
    for (i, &g) in got.iter().enumerate() {
        let want: f32 = (0..world).map(|r| value(r, i, seed)).sum();
        ensure!(g == want, "{what}: element {i}: got {g}, want {want}");
    }
    Ok(())
}

/// Median, p99 and max of per-all-reduce times in us, for a report line.
pub fn quantiles(mut us: Vec<f64>) -> String {
    if us.is_empty() {
        return "no timed replays".into();
    }
    us.sort_by(f64::total_cmp);
    let at = |q: f64| us[((us.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "graph time per all-reduce median {:.2} us, p99 {:.2} us, max {:.2} us over {} replays",
        at(0.5),
        at(0.99),
        at(1.0),
        us.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_of_the_ranks_is_what_check_wants() {
        let world = 4;
        let sums: Vec<f32> = (0..100)
            .map(|i| (0..world).map(|r| pattern(r, 100, 9, |v| v)[i]).sum())
            .collect();
        check(&sums, world, 9, "sum").unwrap();
        let mut wrong = sums.clone();
        wrong[3] += 1.0;
        let e = check(&wrong, world, 9, "sum").unwrap_err().to_string();
        assert!(e.contains("element 3"), "{e}");
        assert!((0..1000).all(|i| (-4.0..=4.0).contains(&value(3, i, 77))));
    }

    #[test]
    fn quantiles_name_median_p99_and_max() {
        let line = quantiles(vec![3.0, 1.0, 2.0]);
        assert!(
            line.contains("median 2.00 us") && line.contains("max 3.00 us"),
            "{line}"
        );
        assert_eq!(quantiles(Vec::new()), "no timed replays");
    }
}
