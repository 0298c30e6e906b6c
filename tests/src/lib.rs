//! Multi-process integration tests of `intranode`, run under
//! `intranode-run` (see `src/bin/`), and helpers they share.
//!
//! - `intranode-suite`: the GPU test suites (`check`, `ddp-check`,
//!   `faults`, `bad-input`, `faults-suite`, `soak`, `recreate`); what they share with
//!   the benchmark is `intranode-harness`.
//! - `symm_check`: symmetric memory across ranks (every rank reads and
//!   writes every peer's block through its mapping), `get_buffer` bounds,
//!   and create/drop cycles that must leak nothing.

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// The seed of rank `rank`'s pattern in round `round`: distinct for every
/// (rank, round) pair a test uses.
pub fn pattern_seed(rank: usize, round: usize) -> u64 {
    // Spread with a 64-bit odd constant (SplitMix64's increment).
    ((rank as u64) << 32 ^ round as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED
}

/// `bytes` pseudo-random bytes, the same for the same (rank, round) in
/// every process.
pub fn pattern(rank: usize, round: usize, bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes];
    StdRng::seed_from_u64(pattern_seed(rank, round)).fill_bytes(&mut out);
    out
}

/// The first index where `got` differs from `want`, with both bytes.
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<(usize, Option<u8>, Option<u8>)> {
    let n = got.len().max(want.len());
    (0..n).find_map(|i| {
        let (g, w) = (got.get(i).copied(), want.get(i).copied());
        (g != w).then_some((i, g, w))
    })
}

/// Number of open file descriptors of this process (entries of
/// `/proc/self/fd`, less the one the listing itself holds).
pub fn open_fd_count() -> std::io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/fd")?
        .count()
        .saturating_sub(1))
}

/// Number of threads of this process (entries of `/proc/self/task`).
pub fn thread_count() -> std::io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_deterministic_and_distinct() {
        assert_eq!(pattern(3, 7, 1000), pattern(3, 7, 1000));
        assert_ne!(pattern(0, 0, 64), pattern(1, 0, 64));
        assert_ne!(pattern(0, 0, 64), pattern(0, 1, 64));
        assert_ne!(pattern(1, 0, 64), pattern(0, 1, 64));
        // A prefix of a longer pattern is the shorter one.
        assert_eq!(pattern(2, 5, 4096)[..100], pattern(2, 5, 100)[..]);
        let mut seeds = std::collections::HashSet::new();
        for rank in 0..8 {
            for round in 0..100 {
                assert!(seeds.insert(pattern_seed(rank, round)));
            }
        }
    }

    #[test]
    fn differences() {
        assert_eq!(first_difference(b"abc", b"abc"), None);
        assert_eq!(
            first_difference(b"abc", b"abd"),
            Some((2, Some(b'c'), Some(b'd')))
        );
        assert_eq!(first_difference(b"ab", b"abc"), Some((2, None, Some(b'c'))));
    }

    #[test]
    fn fd_count_sees_new_descriptors() {
        let before = open_fd_count().expect("count");
        let f = std::fs::File::open("/proc/self/stat").expect("open");
        assert_eq!(open_fd_count().expect("count"), before + 1);
        drop(f);
        assert_eq!(open_fd_count().expect("count"), before);
    }
}
