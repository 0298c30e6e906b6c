//! [`HashStore`]: an in-process store for threads and tests, and the
//! [`MemTable`] that also backs [`crate::TcpStoreServer`].

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::StoreError;
use crate::store::{DEFAULT_TIMEOUT, Store, TimeoutCell, add_to_counter, owned_keys};

/// Why a wait on a [`MemTable`] ended without the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitFailure {
    TimedOut,
    Closed,
}

#[derive(Debug, Default)]
struct State {
    map: HashMap<String, Vec<u8>>,
    closed: bool,
}

/// A map behind a mutex, with a condvar signalled on every insertion so
/// blocking reads park instead of spinning.
#[derive(Debug, Default)]
pub(crate) struct MemTable {
    state: Mutex<State>,
    changed: Condvar,
}

impl MemTable {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No operation panics half-way through a map update, so a poisoned
        // lock still guards a consistent map: keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set(&self, key: &str, value: &[u8]) {
        self.lock().map.insert(key.to_owned(), value.to_vec());
        self.changed.notify_all();
    }

    pub(crate) fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let mut state = self.lock();
        let new = add_to_counter(key, state.map.get(key).map(Vec::as_slice), delta)?;
        state
            .map
            .insert(key.to_owned(), new.to_string().into_bytes());
        drop(state);
        self.changed.notify_all();
        Ok(new)
    }

    pub(crate) fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Vec<u8> {
        let mut state = self.lock();
        let result = match state.map.get_mut(key) {
            None if expected.is_empty() => {
                state.map.insert(key.to_owned(), desired.to_vec());
                desired.to_vec()
            }
            // c10d returns `expected` here; see `Store::compare_set`.
            None => return expected.to_vec(),
            Some(current) if current.as_slice() == expected => {
                *current = desired.to_vec();
                desired.to_vec()
            }
            Some(current) => return current.clone(),
        };
        drop(state);
        self.changed.notify_all();
        result
    }

    pub(crate) fn check(&self, keys: &[&str]) -> bool {
        let state = self.lock();
        keys.iter().all(|k| state.map.contains_key(*k))
    }

    pub(crate) fn delete(&self, key: &str) -> bool {
        self.lock().map.remove(key).is_some()
    }

    pub(crate) fn num_keys(&self) -> i64 {
        i64::try_from(self.lock().map.len()).unwrap_or(i64::MAX)
    }

    pub(crate) fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError> {
        if keys.len() != values.len() {
            return Err(StoreError::LengthMismatch {
                keys: keys.len(),
                values: values.len(),
            });
        }
        let mut state = self.lock();
        for (k, v) in keys.iter().zip(values) {
            state.map.insert((*k).to_owned(), v.to_vec());
        }
        drop(state);
        self.changed.notify_all();
        Ok(())
    }

    pub(crate) fn append(&self, key: &str, value: &[u8]) {
        self.lock()
            .map
            .entry(key.to_owned())
            .or_default()
            .extend_from_slice(value);
        self.changed.notify_all();
    }

    /// Waits until every key in `keys` exists, then returns their values
    /// (in order). A `timeout` too large for `Instant` waits forever.
    pub(crate) fn wait_get(
        &self,
        keys: &[&str],
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>, WaitFailure> {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.lock();
        loop {
            if state.closed {
                return Err(WaitFailure::Closed);
            }
            if keys.iter().all(|k| state.map.contains_key(*k)) {
                return Ok(keys
                    .iter()
                    .map(|k| state.map.get(*k).cloned().unwrap_or_default())
                    .collect());
            }
            state = match deadline {
                None => self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(WaitFailure::TimedOut);
                    }
                    self.changed
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Wakes every parked wait and makes it (and later ones) fail with
    /// [`WaitFailure::Closed`].
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

/// An in-process [`Store`]: a `HashMap` behind a `Mutex`, with a `Condvar`
/// so blocking reads park until a writer signals.
///
/// Share it between threads with `Arc<HashStore>` (or `Arc<dyn Store>`).
#[derive(Debug)]
pub struct HashStore {
    table: MemTable,
    timeout: TimeoutCell,
}

impl Default for HashStore {
    fn default() -> Self {
        Self::new()
    }
}

impl HashStore {
    /// An empty store with the default timeout ([`DEFAULT_TIMEOUT`]).
    pub fn new() -> Self {
        Self::with_timeout(DEFAULT_TIMEOUT)
    }

    /// An empty store whose blocking operations wait up to `timeout`.
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            table: MemTable::default(),
            timeout: TimeoutCell::new(timeout),
        }
    }

    fn wait_get(&self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, StoreError> {
        self.table.wait_get(keys, timeout).map_err(|f| match f {
            WaitFailure::TimedOut => StoreError::Timeout {
                keys: owned_keys(keys),
                waited: timeout,
            },
            WaitFailure::Closed => StoreError::Closed,
        })
    }
}

impl Store for HashStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.table.set(key, value);
        Ok(())
    }

    fn get_with_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        Ok(self
            .wait_get(&[key], timeout)?
            .into_iter()
            .next()
            .unwrap_or_default())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.table.add(key, delta)
    }

    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        Ok(self.table.compare_set(key, expected, desired))
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        Ok(self.table.check(keys))
    }

    fn wait(&self, keys: &[&str], timeout: Option<Duration>) -> Result<(), StoreError> {
        self.wait_get(keys, timeout.unwrap_or_else(|| self.timeout()))
            .map(drop)
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.table.delete(key))
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        Ok(self.table.num_keys())
    }

    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.wait_get(keys, self.timeout())
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError> {
        self.table.multi_set(keys, values)
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.table.append(key, value);
        Ok(())
    }

    fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }
}
