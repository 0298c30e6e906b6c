//! [`StoreExchange`]: typed all-gather, broadcast and barrier over a
//! [`Store`], the way PyTorch's symmetric-memory `StoreExchange` does its
//! rendezvous.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::StoreError;
use crate::store::Store;

/// Collective exchanges of serializable values through a [`Store`].
///
/// Every rank creates one `StoreExchange` with the same prefix and calls
/// the same sequence of collectives on it. Each call uses a fresh sequence
/// number, so its keys (`prefix/seq/...`) never collide with an earlier or
/// later call, even when a fast rank runs ahead.
///
// NOTE [exchange key cleanup] is the paragraph below.
/// After reading, each rank increments `prefix/seq/done`; the rank that brings
/// it to `world` knows every rank has read everything and deletes the call's
/// keys and the counter, so a long job does not grow the store. A call that
/// fails part-way (a timeout) leaves its keys behind; the job is broken at
/// that point anyway.
///
// NOTE [missing ranks] is the paragraph below.
/// A rank that dies (or hangs, or calls another collective) never writes its
/// key, so the others' blocking read runs into the store's timeout. Each
/// collective then looks up which of the ranks' keys are still absent and
/// reports them ([`StoreError::MissingRanks`]), so the error names the culprit
/// instead of a list of keys. Every rank's contribution is a key of its own
/// (the barrier too), which is what makes the absentees visible.
///
// NOTE [one group per prefix] is the paragraph below.
/// An exchange's keys are its prefix and a sequence number, so two groups of
/// ranks that share a store and a prefix (two tensor-parallel groups on one
/// torchrun store, each built with the same default prefix) would read each
/// other's contributions as their own. Every contribution is therefore an
/// envelope (world, nonces, writer's process, value) written only where its
/// key is absent (`compare_set` from empty): the second writer of a key fails
/// at once with [`StoreError::ForeignContribution`], naming the first. An
/// all-gather's envelopes also carry the world and a nonce that rank 0 draws
/// (the other ranks read rank 0's key first and copy it), and every reader
/// checks both: a contribution made for another world or under another rank 0
/// is refused on read. That catches groups that meet at the same keys at the
/// same time. It cannot catch everything: no key says which group a rank
/// belongs to, so a rank may pair with the other group's rank 0, and a group
/// that comes after the other deleted its keys, or a broadcast's reader, sees
/// nothing wrong. Groups that share a store need prefixes of their own: a
/// [`PrefixStore`](crate::PrefixStore) per group.
///
/// Values are encoded with bincode 2 (`config::standard()`, serde).
#[derive(Debug, Clone)]
pub struct StoreExchange {
    prefix: String,
    seq: u64,
}

/// One rank's contribution to a collective (NOTE [one group per prefix]).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Envelope {
    /// The world the writer expects.
    world: u64,
    /// The collective's nonce: rank 0's in an all-gather, the writer's own
    /// in a broadcast or barrier.
    group: u64,
    /// The writer's process, for the error that names it.
    pid: u32,
    /// The writer's own nonce: no two writers' envelopes are equal, which
    /// is how `compare_set` tells ours from theirs.
    writer: u64,
    /// The encoded value.
    payload: Vec<u8>,
}

/// A fresh 64-bit nonce: `RandomState`'s per-process random keys over the
/// clock and the process id.
fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

/// `payload` in an envelope for a world of `world` and nonce `group`,
/// encoded for `key`.
fn seal(
    payload: Vec<u8>,
    world: usize,
    group: u64,
    key: &str,
    rank: usize,
) -> Result<Vec<u8>, StoreError> {
    let envelope = Envelope {
        world: world as u64,
        group,
        pid: std::process::id(),
        writer: nonce(),
        payload,
    };
    encode(&envelope, key, rank)
}

/// The error for `key` (rank `rank`'s) holding `theirs`, another group's
/// bytes.
fn foreign(key: &str, rank: usize, world: usize, theirs: &[u8]) -> StoreError {
    let theirs = match decode::<Envelope>(theirs, key, rank) {
        Ok(e) => format!("process {} expecting a world of {}", e.pid, e.world),
        Err(_) => format!("{} bytes that are no exchange contribution", theirs.len()),
    };
    let small = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    StoreError::ForeignContribution {
        key: key.to_owned(),
        rank: small(rank),
        world: small(world),
        theirs,
    }
}

/// Writes `bytes` at `key` unless the key exists (NOTE [one group per
/// prefix]).
fn put_exclusive(
    store: &dyn Store,
    key: &str,
    rank: usize,
    world: usize,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let stored = store.compare_set(key, &[], bytes)?;
    if stored == bytes {
        Ok(())
    } else {
        Err(foreign(key, rank, world, &stored))
    }
}

/// The envelope at `key` (rank `rank`'s), checked against `world` and,
/// where given, the collective's nonce `group`.
fn open(
    bytes: &[u8],
    key: &str,
    rank: usize,
    world: usize,
    group: Option<u64>,
) -> Result<Envelope, StoreError> {
    let envelope: Envelope = decode(bytes, key, rank)?;
    if envelope.world != world as u64 || group.is_some_and(|g| g != envelope.group) {
        return Err(foreign(key, rank, world, bytes));
    }
    Ok(envelope)
}

fn check_world(rank: usize, world: usize) -> Result<(), StoreError> {
    if world == 0 {
        return Err(StoreError::EmptyWorld);
    }
    if rank >= world {
        return Err(StoreError::RankOutOfRange {
            what: "rank",
            rank,
            world,
        });
    }
    Ok(())
}

fn encode<T: Serialize>(value: &T, key: &str, rank: usize) -> Result<Vec<u8>, StoreError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).map_err(|source| {
        StoreError::Encode {
            key: key.to_owned(),
            rank,
            source,
        }
    })
}

fn decode<T: DeserializeOwned>(bytes: &[u8], key: &str, rank: usize) -> Result<T, StoreError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map(|(value, _read)| value)
        .map_err(|source| StoreError::Decode {
            key: key.to_owned(),
            rank,
            bytes: bytes.len(),
            source,
        })
}

/// Turns a [`StoreError::Timeout`] of a collective into
/// [`StoreError::MissingRanks`] naming the ranks of `expected` (rank, key)
/// whose key is still absent (NOTE [missing ranks]). Any other error, or a
/// look-up that fails or finds every key, keeps the original error.
fn name_missing(
    store: &dyn Store,
    op: &'static str,
    base: &str,
    world: usize,
    expected: &[(usize, &str)],
    err: StoreError,
) -> StoreError {
    let waited = match &err {
        StoreError::Timeout { waited, .. } => *waited,
        _ => return err,
    };
    let mut missing = Vec::new();
    for &(r, key) in expected {
        match store.check(&[key]) {
            Ok(true) => {}
            Ok(false) => missing.push(r),
            Err(_) => return err,
        }
    }
    if missing.is_empty() {
        return err;
    }
    StoreError::MissingRanks {
        op,
        base: base.to_owned(),
        missing,
        world,
        waited,
    }
}

impl StoreExchange {
    /// An exchange whose keys live under `prefix/`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            seq: 0,
        }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The sequence number the next collective will use.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Claims the next sequence number; returns `prefix/seq`.
    fn next_base(&mut self) -> String {
        let base = format!("{}/{}", self.prefix, self.seq);
        self.seq += 1;
        base
    }

    /// Marks this rank done with `base`; the last rank deletes `keys` and
    /// the counter (NOTE [exchange key cleanup]).
    fn finish(
        store: &dyn Store,
        base: &str,
        world: usize,
        keys: &[String],
    ) -> Result<(), StoreError> {
        let done_key = format!("{base}/done");
        let done = store.add(&done_key, 1)?;
        if usize::try_from(done).is_ok_and(|d| d == world) {
            for k in keys {
                store.delete_key(k)?;
            }
            store.delete_key(&done_key)?;
        }
        Ok(())
    }

    /// Gathers `value` from every rank; returns them in rank order.
    pub fn all_gather<T>(
        &mut self,
        store: &dyn Store,
        rank: usize,
        world: usize,
        value: &T,
    ) -> Result<Vec<T>, StoreError>
    where
        T: Serialize + DeserializeOwned,
    {
        check_world(rank, world)?;
        let base = self.next_base();
        let keys: Vec<String> = (0..world).map(|r| format!("{base}/{r}")).collect();
        // Rank 0 draws the nonce; the others take it from rank 0's key
        // (NOTE [one group per prefix]).
        let group = if rank == 0 {
            nonce()
        } else {
            let first = store.get(&keys[0]).map_err(|e| {
                name_missing(
                    store,
                    "all_gather",
                    &base,
                    world,
                    &[(0, keys[0].as_str())],
                    e,
                )
            })?;
            open(&first, &keys[0], 0, world, None)?.group
        };
        let payload = encode(value, &keys[rank], rank)?;
        let mine = seal(payload, world, group, &keys[rank], rank)?;
        put_exclusive(store, &keys[rank], rank, world, &mine)?;
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let values = store.multi_get(&key_refs).map_err(|e| {
            let expected: Vec<(usize, &str)> = key_refs.iter().copied().enumerate().collect();
            name_missing(store, "all_gather", &base, world, &expected, e)
        })?;
        let out = values
            .iter()
            .zip(&keys)
            .enumerate()
            .map(|(r, (bytes, key))| {
                let envelope = open(bytes, key, r, world, Some(group))?;
                decode(&envelope.payload, key, r)
            })
            .collect::<Result<Vec<T>, _>>()?;
        Self::finish(store, &base, world, &keys)?;
        Ok(out)
    }

    /// Sends `value` from `root` to every rank; returns it on every rank
    /// (the root gets its own value back through the same encoding).
    /// Non-root ranks pass `None` (a value they pass is ignored).
    pub fn broadcast<T>(
        &mut self,
        store: &dyn Store,
        rank: usize,
        world: usize,
        root: usize,
        value: Option<&T>,
    ) -> Result<T, StoreError>
    where
        T: Serialize + DeserializeOwned,
    {
        check_world(rank, world)?;
        if root >= world {
            return Err(StoreError::RankOutOfRange {
                what: "root",
                rank: root,
                world,
            });
        }
        let base = self.next_base();
        let key = format!("{base}/{root}");
        let out = if rank == root {
            let value = value.ok_or(StoreError::MissingRootValue { root })?;
            let bytes = encode(value, &key, root)?;
            let sealed = seal(bytes.clone(), world, nonce(), &key, root)?;
            put_exclusive(store, &key, root, world, &sealed)?;
            decode(&bytes, &key, root)?
        } else {
            let bytes = store.get(&key).map_err(|e| {
                name_missing(store, "broadcast", &base, world, &[(root, key.as_str())], e)
            })?;
            let envelope = open(&bytes, &key, root, world, None)?;
            decode(&envelope.payload, &key, root)?
        };
        Self::finish(store, &base, world, &[key])?;
        Ok(out)
    }

    /// Returns once every rank has entered the barrier, or fails after
    /// the store's timeout naming the ranks that never entered
    /// ([`StoreError::MissingRanks`]).
    pub fn barrier(
        &mut self,
        store: &dyn Store,
        rank: usize,
        world: usize,
    ) -> Result<(), StoreError> {
        check_world(rank, world)?;
        let base = self.next_base();
        // One key per rank rather than a counter: a timeout can then say
        // who is missing (NOTE [missing ranks]).
        let keys: Vec<String> = (0..world).map(|r| format!("{base}/in/{r}")).collect();
        let mine = seal(Vec::new(), world, nonce(), &keys[rank], rank)?;
        put_exclusive(store, &keys[rank], rank, world, &mine)?;
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        store.wait(&key_refs, None).map_err(|e| {
            let expected: Vec<(usize, &str)> = key_refs.iter().copied().enumerate().collect();
            name_missing(store, "barrier", &base, world, &expected, e)
        })?;
        Self::finish(store, &base, world, &keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::HashStore;

    #[test]
    fn validates_rank_and_world() {
        let store = HashStore::new();
        let mut ex = StoreExchange::new("x");
        assert!(matches!(
            ex.all_gather(&store, 0, 0, &1u32),
            Err(StoreError::EmptyWorld)
        ));
        let err = ex.all_gather(&store, 2, 2, &1u32).unwrap_err();
        assert_eq!(err.to_string(), "rank 2 is out of range for world size 2");
        let err = ex.broadcast(&store, 0, 2, 5, Some(&1u32)).unwrap_err();
        assert_eq!(err.to_string(), "root 5 is out of range for world size 2");
        assert!(matches!(
            ex.broadcast::<u32>(&store, 0, 1, 0, None),
            Err(StoreError::MissingRootValue { root: 0 })
        ));
        assert!(matches!(
            ex.barrier(&store, 3, 1),
            Err(StoreError::RankOutOfRange { .. })
        ));
    }

    #[test]
    fn world_of_one_cleans_up() {
        let store = HashStore::new();
        let mut ex = StoreExchange::new("solo");
        for i in 0..10u64 {
            assert_eq!(ex.all_gather(&store, 0, 1, &i).unwrap(), vec![i]);
            assert_eq!(
                ex.broadcast(&store, 0, 1, 0, Some(&format!("v{i}")))
                    .unwrap(),
                format!("v{i}")
            );
            ex.barrier(&store, 0, 1).unwrap();
        }
        assert_eq!(ex.seq(), 30);
        assert_eq!(store.num_keys().unwrap(), 0);
    }

    #[test]
    fn timeouts_name_the_missing_ranks() {
        use std::time::Duration;
        let store = HashStore::with_timeout(Duration::from_millis(50));
        // Ranks 0 and 2 of 4 contribute; 1 and 3 never come.
        let mut ex0 = StoreExchange::new("mr");
        let mut ex2 = StoreExchange::new("mr");
        store
            .set("mr/0/2", &encode(&7u32, "mr/0/2", 2).unwrap())
            .unwrap();
        let err = ex0.all_gather(&store, 0, 4, &5u32).unwrap_err();
        match &err {
            StoreError::MissingRanks {
                op: "all_gather",
                missing,
                world: 4,
                ..
            } => assert_eq!(missing, &[1, 3]),
            other => panic!("{other}"),
        }
        let text = err.to_string();
        assert!(
            text.contains("rank(s) [1, 3]") && text.contains("mr/0"),
            "{text}"
        );

        // Broadcast: the silent root is named.
        let err = ex2.broadcast::<u32>(&store, 2, 4, 1, None).unwrap_err();
        assert!(
            matches!(&err, StoreError::MissingRanks { op: "broadcast", missing, .. } if missing == &[1]),
            "{err}"
        );

        // Barrier: every rank that did not enter is named.
        let mut ex = StoreExchange::new("b");
        store.set("b/0/in/1", b"").unwrap();
        let err = ex.barrier(&store, 0, 3).unwrap_err();
        assert!(
            matches!(&err, StoreError::MissingRanks { op: "barrier", missing, .. } if missing == &[2]),
            "{err}"
        );
    }

    #[test]
    fn a_second_group_on_the_prefix_fails_at_once() {
        use std::time::Duration;
        let store = std::sync::Arc::new(HashStore::with_timeout(Duration::from_secs(30)));
        // Group A's rank 0 and group B's rank 0 both on prefix "g".
        let mut a0 = StoreExchange::new("g");
        let mut b0 = StoreExchange::new("g");
        let store2 = store.clone();
        let a = std::thread::spawn(move || a0.all_gather(&*store2, 0, 2, &1u32));
        // Let A's rank 0 write first, then B's rank 0 must fail at once
        // (not after the 30 s timeout) naming the key.
        while store.num_keys().unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let started = std::time::Instant::now();
        let err = b0.all_gather(&*store, 0, 2, &2u32).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            matches!(&err, StoreError::ForeignContribution { key, rank: 0, .. } if key == "g/0/0"),
            "{err}"
        );
        // A's own rank 1 still completes A's all-gather.
        let mut a1 = StoreExchange::new("g");
        assert_eq!(a1.all_gather(&*store, 1, 2, &10u32).unwrap(), vec![1, 10]);
        assert_eq!(a.join().unwrap().unwrap(), vec![1, 10]);
        // A different world on the same key is refused on read.
        let mut c0 = StoreExchange::new("w");
        let mut c1 = StoreExchange::new("w");
        let store3 = store.clone();
        let c = std::thread::spawn(move || c0.all_gather(&*store3, 0, 3, &1u32));
        while !store.check(&["w/0/0"]).unwrap() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let err = c1.all_gather(&*store, 1, 2, &2u32).unwrap_err();
        assert!(
            matches!(&err, StoreError::ForeignContribution { world: 2, .. }),
            "{err}"
        );
        drop(c);
    }

    #[test]
    fn decode_error_names_rank_and_key() {
        let store = HashStore::new();
        store.set("bad/0/0", &[0xff, 0xff, 0xff]).unwrap();
        store.set("bad/0/1", &[0xff, 0xff, 0xff]).unwrap();
        let mut ex = StoreExchange::new("bad");
        let err = ex.all_gather(&store, 1, 2, &String::from("x")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("rank 0") && msg.contains("bad/0/0"), "{msg}");
    }
}
