//! The [`Store`] trait: the c10d key-value operations every backend offers.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::StoreError;

/// Default timeout of blocking operations, as in c10d (300 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A c10d-style key-value store shared by the ranks of a job.
///
/// Object safe: pass `&dyn Store` or `Arc<dyn Store>` around. Values are
/// raw bytes; counters made by [`Store::add`] are stored as decimal ASCII
/// (`b"42"`), as c10d does, so `get` on a counter key reads its value.
///
/// Blocking operations ([`Store::get`], [`Store::wait`],
/// [`Store::multi_get`]) wait up to [`Store::timeout`] unless given a
/// timeout of their own, then fail with [`StoreError::Timeout`] naming the
/// keys waited for.
pub trait Store: Send + Sync + fmt::Debug {
    /// Sets `key` to `value`, replacing any previous value.
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError>;

    /// Reads `key`, waiting up to `timeout` for it to appear.
    fn get_with_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError>;

    /// Reads `key`, waiting up to [`Store::timeout`] for it to appear.
    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.get_with_timeout(key, self.timeout())
    }

    /// Adds `delta` to the counter at `key` (missing counts as 0) and
    /// returns the new value.
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError>;

    /// Atomic compare-and-set with c10d semantics:
    ///
    /// - key missing and `expected` empty: sets `desired`, returns `desired`;
    /// - key missing and `expected` non-empty: changes nothing, returns
    ///   `expected` (c10d does this too, so success is `result == desired`);
    /// - current value equals `expected`: sets `desired`, returns it;
    /// - otherwise changes nothing and returns the current value.
    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError>;

    /// Whether all `keys` exist right now (does not wait).
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError>;

    /// Waits until all `keys` exist, up to `timeout` or, if `None`,
    /// [`Store::timeout`].
    fn wait(&self, keys: &[&str], timeout: Option<Duration>) -> Result<(), StoreError>;

    /// Deletes `key`; returns whether it existed.
    fn delete_key(&self, key: &str) -> Result<bool, StoreError>;

    /// Number of keys in the store (for a [`crate::PrefixStore`], in the
    /// whole underlying store, as c10d does).
    fn num_keys(&self) -> Result<i64, StoreError>;

    /// Reads all `keys`, waiting up to [`Store::timeout`] for all of them.
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError>;

    /// Sets `keys[i]` to `values[i]` for every `i`, atomically with respect
    /// to other operations on the same store.
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError>;

    /// Appends `value` to `key`, creating it if missing.
    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError>;

    /// The default timeout of blocking operations.
    fn timeout(&self) -> Duration;

    /// Changes the default timeout of blocking operations.
    fn set_timeout(&self, timeout: Duration);
}

/// A `Duration` settable through `&self`, for [`Store::set_timeout`].
#[derive(Debug)]
pub(crate) struct TimeoutCell {
    // Nanoseconds; u64 covers 584 years, longer timeouts saturate.
    nanos: AtomicU64,
}

impl TimeoutCell {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            nanos: AtomicU64::new(duration_to_nanos(timeout)),
        }
    }

    pub(crate) fn get(&self) -> Duration {
        // Relaxed: the timeout is a standalone value, ordering with other
        // memory does not matter.
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    pub(crate) fn set(&self, timeout: Duration) {
        self.nanos
            .store(duration_to_nanos(timeout), Ordering::Relaxed);
    }
}

fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Parses a c10d counter value (decimal ASCII, optional sign).
pub(crate) fn parse_counter(key: &str, value: &[u8]) -> Result<i64, StoreError> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .ok_or_else(|| StoreError::NotACounter {
            key: key.to_owned(),
            bytes: value.len(),
        })
}

/// Applies `add` to an optional current counter value; returns the new
/// value.
pub(crate) fn add_to_counter(
    key: &str,
    current: Option<&[u8]>,
    delta: i64,
) -> Result<i64, StoreError> {
    let current = match current {
        Some(v) => parse_counter(key, v)?,
        None => 0,
    };
    current
        .checked_add(delta)
        .ok_or_else(|| StoreError::CounterOverflow {
            key: key.to_owned(),
            current,
            delta,
        })
}

/// Owned copies of `keys`, for error messages.
pub(crate) fn owned_keys(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}
