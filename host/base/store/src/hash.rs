// (Over 700 lines, 813: the table, its memory accounting (what every value,
// key and parked waiter is charged, and when freed bytes count toward the
// trim) and the waits on it are one lock's worth of invariants; about a
// fifth is their unit tests.)

//! [`HashStore`]: an in-process store for threads and tests, and the
//! [`MemTable`] that also backs [`crate::TcpStoreServer`].

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::StoreError;
use crate::limits::{ENTRY_OVERHEAD_BYTES, alloc_bytes};
use crate::store::{DEFAULT_TIMEOUT, Store, TimeoutCell, add_to_counter, owned_keys};

/// A stored value, shared with the replies that carry it so that a reply
/// naming a key many times holds one copy (NOTE [memory budget]).
pub(crate) type Value = Arc<Vec<u8>>;

/// Why a wait on a [`MemTable`] ended without the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitFailure {
    TimedOut,
    Closed,
    /// The liveness check said the waiting client has gone.
    ClientGone,
}

/// Bounds a [`MemTable`] enforces on what it stores.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableLimits {
    pub(crate) max_value_bytes: usize,
    pub(crate) max_stored_bytes: usize,
}

impl TableLimits {
    /// No bounds, for the in-process [`HashStore`].
    pub(crate) const NONE: Self = Self {
        max_value_bytes: usize::MAX,
        max_stored_bytes: usize::MAX,
    };
}

/// One parked wait, registered under the one key it waits for next.
#[derive(Debug)]
struct WaiterSlot {
    id: u64,
    wake: Arc<Condvar>,
}

#[derive(Debug, Default)]
struct State {
    map: HashMap<String, Value>,
    /// Sum of [`entry_bytes`] over `map`.
    stored_bytes: usize,
    /// NOTE [waiter index]: key -> the parked waits whose first missing key
    /// it is. A write wakes only the waits of its key, so a set costs the
    /// same with ten thousand unrelated waits parked as with none. A wait
    /// for several keys is registered under one key at a time (the first
    /// missing one) and moves on when woken.
    waiters: HashMap<String, Vec<WaiterSlot>>,
    next_waiter_id: u64,
    closed: bool,
    /// Bytes of entries deleted or overwritten since malloc last gave
    /// free pages back.
    freed_since_trim: usize,
    /// Times the table asked malloc to give pages back, for tests.
    trims: u64,
}

/// What a write freed (NOTE [trim on overwrite]): the old value, dropped
/// after the lock, and whether malloc is due a trim.
#[must_use]
#[derive(Default)]
struct Freed {
    old: Vec<Value>,
    trim: bool,
}

/// After deleting this many counted bytes the table asks malloc to give
/// free pages back ([`crate::malloc::trim`]): often enough that a store
/// emptied of millions of tiny keys shrinks, rarely enough that the walk
/// over malloc's arenas (milliseconds for a large heap) costs nothing.
const TRIM_AFTER_BYTES: usize = 16 << 20;
const TRIM_WHEN_EMPTY_BYTES: usize = 1 << 20;

/// A table with more than this many slots per key, and more than
/// `MIN_SHRINK_SLOTS` slots, is shrunk after a delete: a table grown for
/// millions of keys keeps its slots otherwise.
const SHRINK_WHEN_SLOTS_PER_KEY: usize = 4;
const MIN_SHRINK_SLOTS: usize = 4096;

/// What a key and its value count against `max_stored_bytes`: the heap
/// blocks of the key and of the value (its capacity, which `APPEND` may
/// grow past its length) and the fixed overhead of NOTE [entry cost] in
/// `limits.rs`.
fn entry_bytes(key_bytes: usize, value: &[u8], capacity: usize) -> usize {
    alloc_bytes(key_bytes)
        .saturating_add(alloc_bytes(value.len().max(capacity)))
        .saturating_add(ENTRY_OVERHEAD_BYTES)
}

fn value_entry_bytes(key: &str, value: &Value) -> usize {
    entry_bytes(key.len(), value, value.capacity())
}

impl State {
    fn wake(&self, key: &str) {
        if let Some(slots) = self.waiters.get(key) {
            for slot in slots {
                slot.wake.notify_one();
            }
        }
    }

    fn register(&mut self, key: &str, wake: &Arc<Condvar>) -> u64 {
        let id = self.next_waiter_id;
        self.next_waiter_id = self.next_waiter_id.wrapping_add(1);
        self.waiters
            .entry(key.to_owned())
            .or_default()
            .push(WaiterSlot {
                id,
                wake: Arc::clone(wake),
            });
        id
    }

    fn deregister(&mut self, key: &str, id: u64) {
        if let Some(slots) = self.waiters.get_mut(key) {
            if let Some(at) = slots.iter().position(|s| s.id == id) {
                slots.swap_remove(at);
            }
            if slots.is_empty() {
                self.waiters.remove(key);
            }
        }
    }

    /// Checks that replacing `key`'s entry (if any) by one of
    /// `new_entry_bytes` keeps the table within `max_stored_bytes`.
    fn check_room(
        &self,
        op: &'static str,
        old_entry_bytes: usize,
        new_entry_bytes: usize,
        limits: TableLimits,
    ) -> Result<(), StoreError> {
        let after = self
            .stored_bytes
            .saturating_sub(old_entry_bytes)
            .saturating_add(new_entry_bytes);
        if after > limits.max_stored_bytes && new_entry_bytes > old_entry_bytes {
            return Err(StoreError::StoreFull {
                op,
                needed_bytes: new_entry_bytes - old_entry_bytes,
                stored_bytes: self.stored_bytes,
                max_bytes: limits.max_stored_bytes,
            });
        }
        Ok(())
    }

    fn old_entry_bytes(&self, key: &str) -> usize {
        self.map.get(key).map_or(0, |v| value_entry_bytes(key, v))
    }

    /// Inserts without checks; keeps `stored_bytes` exact and wakes the
    /// key's waiters. The replaced value goes into `freed`.
    fn insert(&mut self, key: String, value: Vec<u8>, freed: &mut Freed) {
        let new = entry_bytes(key.len(), &value, value.capacity());
        let old = self.old_entry_bytes(&key);
        self.wake(&key);
        if let Some(replaced) = self.map.insert(key, Arc::new(value)) {
            freed.trim |= self.note_freed(alloc_bytes(replaced.capacity()));
            freed.old.push(replaced);
        }
        self.stored_bytes = self.stored_bytes.saturating_sub(old).saturating_add(new);
    }

    /// NOTE [trim on overwrite]: a SET that replaces a large value by a
    /// small one frees as much as a delete, and small blocks stay in the
    /// arena of the thread that freed them; counting only deletes let a
    /// client fill with 200 KiB values, overwrite them all with empty ones
    /// and refill, a new connection each round, until RSS was four times
    /// `max_stored_bytes` while the counted bytes were a few MiB. Every
    /// freed value counts toward the trim. Returns whether one is due now.
    fn note_freed(&mut self, bytes: usize) -> bool {
        self.freed_since_trim = self.freed_since_trim.saturating_add(bytes);
        // Also when the table has just been emptied, so that a store that
        // is done with its keys gives back their memory.
        let due = self.freed_since_trim >= TRIM_AFTER_BYTES
            || (self.map.is_empty() && self.freed_since_trim >= TRIM_WHEN_EMPTY_BYTES);
        if due {
            self.freed_since_trim = 0;
            self.trims += 1;
        }
        due
    }
}

fn check_value(
    what: &'static str,
    key: &str,
    bytes: usize,
    limits: TableLimits,
) -> Result<(), StoreError> {
    if bytes > limits.max_value_bytes {
        return Err(StoreError::ValueTooLarge {
            what,
            key: key.to_owned(),
            bytes,
            max_bytes: limits.max_value_bytes,
        });
    }
    Ok(())
}

/// A map behind a mutex. Blocking reads park on a condvar of their own,
/// found through the waiter index (NOTE [waiter index]), instead of
/// spinning or rescanning.
#[derive(Debug)]
pub(crate) struct MemTable {
    state: Mutex<State>,
    limits: TableLimits,
}

impl Default for MemTable {
    fn default() -> Self {
        Self::new(TableLimits::NONE)
    }
}

impl MemTable {
    pub(crate) fn new(limits: TableLimits) -> Self {
        Self {
            state: Mutex::new(State::default()),
            limits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No operation panics half-way through a map update, so a poisoned
        // lock still guards a consistent map: keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Unlocks, drops what a write freed (a value may still be shared with
    /// a reply; it goes when that does) and trims if due: without the
    /// lock, since the trim walks every arena.
    fn release(state: MutexGuard<'_, State>, freed: Freed) {
        drop(state);
        drop(freed.old);
        if freed.trim {
            crate::malloc::trim();
        }
    }

    pub(crate) fn set(&self, key: String, value: Vec<u8>) -> Result<(), StoreError> {
        check_value("value", &key, value.len(), self.limits)?;
        let mut state = self.lock();
        let new = entry_bytes(key.len(), &value, value.capacity());
        state.check_room("set", state.old_entry_bytes(&key), new, self.limits)?;
        let mut freed = Freed::default();
        state.insert(key, value, &mut freed);
        Self::release(state, freed);
        Ok(())
    }

    pub(crate) fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let mut state = self.lock();
        let current = state.map.get(key).map(|v| v.as_slice());
        if let Some(v) = current {
            // A counter is at most 20 digits; refuse to parse a huge value.
            if v.len() > 64 {
                return Err(StoreError::NotACounter {
                    key: key.to_owned(),
                    bytes: v.len(),
                });
            }
        }
        let new = add_to_counter(key, current, delta)?;
        let value = new.to_string().into_bytes();
        let new_bytes = entry_bytes(key.len(), &value, value.capacity());
        state.check_room("add", state.old_entry_bytes(key), new_bytes, self.limits)?;
        let mut freed = Freed::default();
        state.insert(key.to_owned(), value, &mut freed);
        Self::release(state, freed);
        Ok(new)
    }

    pub(crate) fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: Vec<u8>,
    ) -> Result<Value, StoreError> {
        check_value("value", key, desired.len(), self.limits)?;
        let mut state = self.lock();
        let swap = match state.map.get(key) {
            None => expected.is_empty(),
            Some(current) => current.as_slice() == expected,
        };
        if !swap {
            return Ok(match state.map.get(key) {
                Some(current) => Arc::clone(current),
                // c10d returns `expected` here; see `Store::compare_set`.
                None => Arc::new(expected.to_vec()),
            });
        }
        let new = entry_bytes(key.len(), &desired, desired.capacity());
        state.check_room("compare_set", state.old_entry_bytes(key), new, self.limits)?;
        let mut freed = Freed::default();
        state.insert(key.to_owned(), desired, &mut freed);
        let stored = state.map.get(key).map(Arc::clone).unwrap_or_default();
        Self::release(state, freed);
        Ok(stored)
    }

    pub(crate) fn check(&self, keys: &[&str]) -> bool {
        let state = self.lock();
        keys.iter().all(|k| state.map.contains_key(*k))
    }

    pub(crate) fn delete(&self, key: &str) -> bool {
        let mut state = self.lock();
        let Some(v) = state.map.remove(key) else {
            return false;
        };
        let freed = value_entry_bytes(key, &v);
        state.stored_bytes = state.stored_bytes.saturating_sub(freed);
        let slots = state.map.capacity();
        if slots > MIN_SHRINK_SLOTS
            && slots > state.map.len().saturating_mul(SHRINK_WHEN_SLOTS_PER_KEY)
        {
            let keep = state.map.len().saturating_mul(2);
            state.map.shrink_to(keep);
        }
        let trim = state.note_freed(freed);
        Self::release(state, Freed { old: vec![v], trim });
        true
    }

    pub(crate) fn num_keys(&self) -> i64 {
        i64::try_from(self.lock().map.len()).unwrap_or(i64::MAX)
    }

    /// Bytes stored, as counted against `max_stored_bytes`.
    #[cfg(test)]
    pub(crate) fn stored_bytes(&self) -> usize {
        self.lock().stored_bytes
    }

    /// Times the table asked malloc to give pages back.
    #[cfg(test)]
    pub(crate) fn trims(&self) -> u64 {
        self.lock().trims
    }

    /// Sets every pair, or (when a value is too large or the table would
    /// be too full) none.
    pub(crate) fn multi_set(&self, pairs: Vec<(String, Vec<u8>)>) -> Result<(), StoreError> {
        for (k, v) in &pairs {
            check_value("value", k, v.len(), self.limits)?;
        }
        let mut state = self.lock();
        // The table after the call: the last pair of each key wins.
        let mut last: HashMap<&str, usize> = HashMap::with_capacity(pairs.len());
        for (k, v) in &pairs {
            last.insert(k.as_str(), entry_bytes(k.len(), v, v.capacity()));
        }
        let old: usize = last
            .keys()
            .map(|k| state.old_entry_bytes(k))
            .fold(0, usize::saturating_add);
        let new: usize = last.values().copied().fold(0, usize::saturating_add);
        state.check_room("multi_set", old, new, self.limits)?;
        drop(last);
        let mut freed = Freed::default();
        for (k, v) in pairs {
            state.insert(k, v, &mut freed);
        }
        Self::release(state, freed);
        Ok(())
    }

    pub(crate) fn append(&self, key: &str, tail: &[u8]) -> Result<(), StoreError> {
        let mut state = self.lock();
        let (old_len, old_capacity) = state
            .map
            .get(key)
            .map_or((0, 0), |v| (v.len(), v.capacity()));
        let new_len = old_len.saturating_add(tail.len());
        check_value("appended value", key, new_len, self.limits)?;
        let old_bytes = state.old_entry_bytes(key);
        state.check_room(
            "append",
            old_bytes,
            entry_bytes(key.len(), &[], new_len),
            self.limits,
        )?;
        // Grow geometrically so repeated appends stay linear, but never
        // past the value limit, and exactly when the table is nearly full.
        let grown = old_capacity
            .saturating_mul(2)
            .min(self.limits.max_value_bytes)
            .max(new_len);
        let room_for_grown = state
            .check_room(
                "append",
                old_bytes,
                entry_bytes(key.len(), &[], grown),
                self.limits,
            )
            .is_ok();
        let capacity = if room_for_grown { grown } else { new_len };
        let Some(entry) = state.map.get_mut(key) else {
            let mut value = Vec::with_capacity(capacity);
            value.extend_from_slice(tail);
            let mut freed = Freed::default();
            state.insert(key.to_owned(), value, &mut freed);
            Self::release(state, freed);
            return Ok(());
        };
        // Copies only when a reply still holds the old value.
        let value = Arc::make_mut(entry);
        if value.capacity() < new_len {
            value.reserve_exact(capacity - value.len());
        }
        value.extend_from_slice(tail);
        let new_bytes = entry_bytes(key.len(), value, value.capacity());
        state.stored_bytes = state
            .stored_bytes
            .saturating_sub(old_bytes)
            .saturating_add(new_bytes);
        state.wake(key);
        Ok(())
    }

    /// Waits until every key in `keys` exists, then returns their values
    /// (in order). A `timeout` too large for `Instant` waits forever.
    ///
    /// `alive`, when given, is asked every `poll` whether the waiting
    /// client is still there (without the lock held); `false` ends the
    /// wait with [`WaitFailure::ClientGone`].
    pub(crate) fn wait_get(
        &self,
        keys: &[&str],
        timeout: Duration,
        mut alive: Option<(&mut dyn FnMut() -> bool, Duration)>,
    ) -> Result<Vec<Value>, WaitFailure> {
        let deadline = Instant::now().checked_add(timeout);
        let wake = Arc::new(Condvar::new());
        // (key, id) of this wait's slot in the index, if registered.
        let mut registered: Option<(String, u64)> = None;
        let mut last_check = Instant::now();
        let mut state = self.lock();
        let result = loop {
            if state.closed {
                break Err(WaitFailure::Closed);
            }
            let Some(missing) = keys.iter().find(|k| !state.map.contains_key(**k)) else {
                break Ok(keys
                    .iter()
                    .map(|k| state.map.get(*k).map(Arc::clone).unwrap_or_default())
                    .collect());
            };
            if registered.as_ref().is_none_or(|(k, _)| k != missing) {
                if let Some((k, id)) = registered.take() {
                    state.deregister(&k, id);
                }
                let id = state.register(missing, &wake);
                registered = Some(((*missing).to_owned(), id));
            }
            let now = Instant::now();
            let mut slice = match deadline {
                Some(deadline) if now >= deadline => break Err(WaitFailure::TimedOut),
                Some(deadline) => deadline - now,
                None => Duration::MAX,
            };
            if let Some((_, poll)) = &alive {
                slice = slice.min(*poll);
            }
            state = wake
                .wait_timeout(state, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            // By elapsed time, not by how the wait ended, so that a stream
            // of wake-ups cannot put the check off.
            if let Some((check, poll)) = &mut alive
                && last_check.elapsed() >= *poll
            {
                drop(state);
                let still_there = check();
                last_check = Instant::now();
                state = self.lock();
                if !still_there {
                    break Err(WaitFailure::ClientGone);
                }
            }
        };
        if let Some((k, id)) = registered {
            state.deregister(&k, id);
        }
        result
    }

    /// Wakes every parked wait and makes it (and later ones) fail with
    /// [`WaitFailure::Closed`].
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        for slots in state.waiters.values() {
            for slot in slots {
                slot.wake.notify_one();
            }
        }
    }

    /// Parked waits in the index, for tests.
    #[cfg(test)]
    pub(crate) fn parked_waits(&self) -> usize {
        self.lock().waiters.values().map(Vec::len).sum()
    }
}

/// An in-process [`Store`]: a `HashMap` behind a `Mutex`, with a condvar
/// per blocking read so that it parks until a writer of its key signals.
/// It trusts its callers: no size limits apply.
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
        match self.table.wait_get(keys, timeout, None) {
            Ok(values) => Ok(values.into_iter().map(Arc::unwrap_or_clone).collect()),
            Err(WaitFailure::TimedOut) => Err(StoreError::Timeout {
                keys: owned_keys(keys),
                waited: timeout,
            }),
            // No liveness check is passed, so only a close ends it early.
            Err(WaitFailure::Closed | WaitFailure::ClientGone) => Err(StoreError::Closed),
        }
    }
}

impl Store for HashStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.table.set(key.to_owned(), value.to_vec())
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
        self.table
            .compare_set(key, expected, desired.to_vec())
            .map(Arc::unwrap_or_clone)
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
        if keys.len() != values.len() {
            return Err(StoreError::LengthMismatch {
                keys: keys.len(),
                values: values.len(),
            });
        }
        let pairs = keys
            .iter()
            .zip(values)
            .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
            .collect();
        self.table.multi_set(pairs)
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.table.append(key, value)
    }

    fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    fn limited(max_value_bytes: usize, max_stored_bytes: usize) -> MemTable {
        MemTable::new(TableLimits {
            max_value_bytes,
            max_stored_bytes,
        })
    }

    #[test]
    fn value_and_append_limits() {
        let t = limited(10, 1 << 20);
        t.set("k".into(), vec![0; 10]).unwrap();
        let err = t.set("k".into(), vec![0; 11]).unwrap_err();
        assert!(err.to_string().contains("max_value_bytes"), "{err}");
        t.set("a".into(), vec![0; 6]).unwrap();
        let err = t.append("a", &[0; 5]).unwrap_err();
        assert!(
            err.to_string().contains("appended value of 11 bytes"),
            "{err}"
        );
        t.append("a", &[1; 4]).unwrap();
        let err = t.compare_set("a", &[], vec![0; 11]).unwrap_err();
        assert!(matches!(err, StoreError::ValueTooLarge { .. }), "{err}");
        let err = t
            .multi_set(vec![("x".into(), vec![]), ("y".into(), vec![0; 11])])
            .unwrap_err();
        assert!(matches!(err, StoreError::ValueTooLarge { .. }), "{err}");
        assert!(!t.check(&["x"]), "multi_set is all or nothing");
    }

    #[test]
    fn stored_bytes_are_counted_and_capped() {
        let cap = 4 * ENTRY_OVERHEAD_BYTES;
        let t = limited(1 << 20, cap);
        t.set("a".into(), vec![0; 100]).unwrap();
        // Key and value as malloc chunks: 32 and 112 bytes.
        assert_eq!(t.stored_bytes(), 32 + 112 + ENTRY_OVERHEAD_BYTES);
        // Replacing a value counts the difference only.
        t.set("a".into(), vec![0; 50]).unwrap();
        assert_eq!(t.stored_bytes(), 32 + 64 + ENTRY_OVERHEAD_BYTES);
        let err = t.set("b".into(), vec![0; cap]).unwrap_err();
        assert!(err.to_string().contains("store is full"), "{err}");
        // Empty keys are not free.
        let mut refused = None;
        for i in 0..10 {
            if let Err(e) = t.set(format!("e{i}"), Vec::new()) {
                refused = Some(e);
                break;
            }
        }
        assert!(matches!(refused, Some(StoreError::StoreFull { .. })));
        assert!(t.stored_bytes() <= cap);
        for i in 0..10 {
            t.delete(&format!("e{i}"));
        }
        t.delete("a");
        assert_eq!(t.stored_bytes(), 0);
        // Appends grow a value within the cap, then stop.
        let mut appended = 0;
        while t.append("log", &[7; 16]).is_ok() {
            appended += 16;
        }
        assert!(appended > 0 && t.stored_bytes() <= cap, "{appended}");
        let counted = t.stored_bytes();
        t.delete("log");
        assert!(counted >= appended, "{counted} < {appended}");
        assert_eq!(t.stored_bytes(), 0);
    }

    /// Issue 36: fill with 200 KiB values (below malloc's mmap threshold,
    /// so they live in the arenas), overwrite every one with an empty
    /// value, refill. Before NOTE [trim on overwrite] no round trimmed, and
    /// RSS grew by a fill each round.
    #[test]
    fn overwriting_with_small_values_trims_like_deleting() {
        let value_bytes = 200 << 10;
        // A little over three trims' worth per round.
        let keys = 3 * TRIM_AFTER_BYTES / value_bytes + 8;
        let t = limited(1 << 20, 1 << 30);
        for round in 0..3u64 {
            for i in 0..keys {
                t.set(format!("k{i}"), vec![1; value_bytes]).unwrap();
            }
            let filled = t.stored_bytes();
            for i in 0..keys {
                t.set(format!("k{i}"), Vec::new()).unwrap();
            }
            assert!(t.stored_bytes() < filled / 100, "round {round}");
            // Three trims' worth freed by overwriting each round.
            assert!(
                t.trims() >= 3 * (round + 1),
                "round {round}: {} trims",
                t.trims()
            );
        }
        // multi_set and compare_set replace values too.
        let before = t.trims();
        for _ in 0..2 {
            let pairs = (0..keys)
                .map(|i| (format!("k{i}"), vec![2; value_bytes]))
                .collect();
            t.multi_set(pairs).unwrap();
            for i in 0..keys {
                t.compare_set(&format!("k{i}"), &vec![2; value_bytes], Vec::new())
                    .unwrap();
            }
        }
        assert!(t.trims() >= before + 6, "{} trims", t.trims() - before);
    }

    #[test]
    fn a_set_wakes_only_the_waiters_of_its_key() {
        let t = Arc::new(MemTable::default());
        let waiters: Vec<_> = (0..50)
            .map(|i| {
                let t = Arc::clone(&t);
                thread::spawn(move || {
                    let key = format!("k{i}");
                    t.wait_get(&[&key, "common"], Duration::from_secs(60), None)
                })
            })
            .collect();
        while t.parked_waits() < 50 {
            thread::yield_now();
        }
        // Each wait sits under its own first missing key.
        assert_eq!(t.lock().waiters.len(), 50);
        for i in 0..50 {
            t.set(format!("k{i}"), vec![1]).unwrap();
        }
        // All have moved on to the shared key.
        while t.lock().waiters.get("common").map_or(0, Vec::len) < 50 {
            thread::yield_now();
        }
        assert_eq!(t.lock().waiters.len(), 1);
        t.set("common".into(), b"go".to_vec()).unwrap();
        for w in waiters {
            let values = w.join().unwrap().unwrap();
            assert_eq!(values[1].as_slice(), b"go");
        }
        assert_eq!(t.parked_waits(), 0, "every wait deregistered itself");
    }

    #[test]
    fn a_wait_whose_client_is_gone_ends() {
        let t = MemTable::default();
        let mut polls = 0;
        let mut alive = || {
            polls += 1;
            polls < 3
        };
        let r = t.wait_get(
            &["never"],
            Duration::from_secs(600),
            Some((&mut alive, Duration::from_millis(1))),
        );
        assert_eq!(r, Err(WaitFailure::ClientGone));
        assert_eq!(t.parked_waits(), 0);
    }
}
