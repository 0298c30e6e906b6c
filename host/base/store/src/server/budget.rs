//! The byte budget that requests and replies in flight on all connections
//! share (NOTE [memory budget] in `limits.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How often a connection waiting for buffer space looks at the shutdown
/// flag.
const BUDGET_POLL: Duration = Duration::from_millis(100);

/// The shared byte budget of NOTE [memory budget]: requests and replies
/// in flight on all connections together.
#[derive(Debug)]
pub(super) struct Budget {
    pub(super) used_bytes: Mutex<usize>,
    pub(super) freed: Condvar,
    pub(super) max_bytes: usize,
}

/// Bytes taken from a [`Budget`], given back on drop.
#[derive(Debug)]
pub(super) struct Reservation<'a> {
    budget: &'a Budget,
    pub(super) bytes: usize,
}

impl Budget {
    fn used(&self) -> MutexGuard<'_, usize> {
        // A counter cannot be left half-updated.
        self.used_bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `bytes` (at most the whole budget), waiting for other
    /// connections to give some back; `None` once `deadline` passes or the
    /// server shuts down.
    pub(super) fn reserve(
        &self,
        bytes: usize,
        deadline: Instant,
        stop: &AtomicBool,
    ) -> Option<Reservation<'_>> {
        let bytes = bytes.min(self.max_bytes);
        let mut used = self.used();
        loop {
            if self.max_bytes - *used >= bytes {
                *used += bytes;
                return Some(Reservation {
                    budget: self,
                    bytes,
                });
            }
            // Acquire pairs with the Release store in `shutdown`.
            if stop.load(Ordering::Acquire) {
                return None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            used = self
                .freed
                .wait_timeout(used, left.min(BUDGET_POLL))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Reservation<'_> {
    /// One reservation holding both.
    pub(super) fn merge(mut self, other: Option<Self>) -> Self {
        if let Some(mut other) = other {
            self.bytes += other.bytes;
            other.bytes = 0;
        }
        self
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut used = self.budget.used();
        *used = used.saturating_sub(self.bytes);
        drop(used);
        self.budget.freed.notify_all();
    }
}
