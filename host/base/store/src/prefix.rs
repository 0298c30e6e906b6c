//! [`PrefixStore`]: a namespace inside another store.

use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;
use crate::store::Store;

/// A view of another store where every key is prefixed with `prefix/`,
/// so independent users (process groups, exchanges) cannot collide.
///
/// Errors name the full (prefixed) keys, which is what a person looking at
/// the underlying store would see. Timeouts and [`Store::num_keys`] are
/// those of the underlying store, as in c10d.
#[derive(Debug, Clone)]
pub struct PrefixStore {
    prefix: String,
    inner: Arc<dyn Store>,
}

impl PrefixStore {
    /// Wraps `inner`, prefixing every key with `prefix/`.
    pub fn new(prefix: impl Into<String>, inner: Arc<dyn Store>) -> Self {
        Self {
            prefix: prefix.into(),
            inner,
        }
    }

    /// The prefix, without the trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }

    fn keys(&self, keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| self.key(k)).collect()
    }
}

fn as_strs(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

impl Store for PrefixStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.inner.set(&self.key(key), value)
    }

    fn get_with_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        self.inner.get_with_timeout(&self.key(key), timeout)
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.inner.add(&self.key(key), delta)
    }

    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        self.inner.compare_set(&self.key(key), expected, desired)
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        self.inner.check(&as_strs(&self.keys(keys)))
    }

    fn wait(&self, keys: &[&str], timeout: Option<Duration>) -> Result<(), StoreError> {
        self.inner.wait(&as_strs(&self.keys(keys)), timeout)
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        self.inner.delete_key(&self.key(key))
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        self.inner.num_keys()
    }

    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.inner.multi_get(&as_strs(&self.keys(keys)))
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError> {
        self.inner.multi_set(&as_strs(&self.keys(keys)), values)
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.inner.append(&self.key(key), value)
    }

    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.inner.set_timeout(timeout);
    }
}
