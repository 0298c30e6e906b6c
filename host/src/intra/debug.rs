//! Debug mode that catches ranks calling a collective with different
//! arguments (PyTorch's `TORCH_DISTRIBUTED_DEBUG=DETAIL` collective
//! fingerprints).
//!
//! NOTE [call fingerprints]: when ranks disagree on an all-reduce (one
//! passes 1000 elements, the others 1024; one reduces f16, the others
//! bf16; one picks NCCL, the others our kernel), the kernels do not fail:
//! they read past a peer's data, reduce garbage, or wait for a peer that is
//! inside another collective until the barrier timeout. With
//! `INTRANODE_DEBUG``=detail` every all-reduce first all-gathers a
//! [`CallFingerprint`] (call number, element count, element type, op,
//! algorithm) through the group's store, and a rank whose call differs
//! makes every rank return [`Error::CallMismatch`] naming the ranks and
//! their calls instead of launching. It costs one store round trip per
//! call, so it is for debugging only.
//!
//! Where the checks happen: `IntraNodeComm::all_reduce_raw` (every
//! intra-node all-reduce funnels through it),
//! `IntraNodeComm::all_reduce_residual_rmsnorm_raw` (the fused norm, as
//! collective `all_reduce_residual_rmsnorm`) and `Communicator` for the
//! calls it sends to NCCL; both use the intra-node communicator's checker when there
//! is one, so a rank on the NCCL path and a rank on ours still meet in the
//! same all-gather and see each other's fingerprint. A call captured into a
//! CUDA graph is checked once, at capture; replays are not checked.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use intranode_store::{Store, StoreExchange};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::types::AllReduceAlgo;
use crate::types::ElemType;

pub use crate::config::DebugLevel;

/// What one rank says about one collective call.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CallFingerprint {
    /// Which collective (`all_reduce`).
    pub collective: String,
    /// The call's number among this communicator's checked calls (from 0).
    pub call: u64,
    /// Elements reduced.
    pub elems: u64,
    /// Element type (`bf16`, `f16`, `f32`).
    pub elem: String,
    /// Reduction op (`sum`, `avg`, `min`, `max`, `prod`).
    pub op: String,
    /// Algorithm the rank picked (`one-shot`, `two-shot`, `nccl`, ...).
    pub algo: String,
}

impl fmt::Display for CallFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} #{} of {} x {}, op {}, algorithm {}",
            self.collective, self.call, self.elems, self.elem, self.op, self.algo
        )
    }
}

/// The fingerprint of an all-reduce call.
pub fn all_reduce_fingerprint(
    call: u64,
    elems: usize,
    elem: ElemType,
    op: &str,
    algo: AllReduceAlgo,
) -> CallFingerprint {
    CallFingerprint {
        collective: "all_reduce".into(),
        call,
        elems: elems as u64,
        elem: elem.suffix().into(),
        op: op.into(),
        algo: algo.name().into(),
    }
}

/// The ranks that made each distinct call, largest group first (ties: the
/// group with the lowest rank first); `None` when all calls agree.
pub fn disagreement(
    fingerprints: &[CallFingerprint],
) -> Option<Vec<(Vec<usize>, CallFingerprint)>> {
    let mut groups: Vec<(Vec<usize>, CallFingerprint)> = Vec::new();
    for (rank, fp) in fingerprints.iter().enumerate() {
        match groups.iter_mut().find(|(_, g)| g == fp) {
            Some((ranks, _)) => ranks.push(rank),
            None => groups.push((vec![rank], fp.clone())),
        }
    }
    if groups.len() <= 1 {
        return None;
    }
    groups.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0[0].cmp(&b.0[0])));
    Some(groups)
}

/// `ranks [0, 1] called X; rank [2] called Y`.
pub fn describe(groups: &[(Vec<usize>, CallFingerprint)]) -> String {
    groups
        .iter()
        .map(|(ranks, fp)| {
            let who = if ranks.len() == 1 { "rank" } else { "ranks" };
            format!("{who} {ranks:?} called {fp}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One communicator's fingerprint exchange (see NOTE [call fingerprints]).
pub struct CallChecker {
    store: Arc<dyn Store>,
    exchange: Mutex<StoreExchange>,
    calls: AtomicU64,
    rank: usize,
    world: usize,
}

impl fmt::Debug for CallChecker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallChecker")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("calls", &self.calls.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl CallChecker {
    /// A checker whose all-gathers use keys under `prefix/` of `store`;
    /// every rank of the group must create one with the same prefix.
    pub fn new(store: Arc<dyn Store>, prefix: String, rank: usize, world: usize) -> Self {
        Self {
            store,
            exchange: Mutex::new(StoreExchange::new(prefix)),
            calls: AtomicU64::new(0),
            rank,
            world,
        }
    }

    /// Number of calls checked so far.
    #[cfg(any(test, intranode_internals))]
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// All-gathers this rank's fingerprint of the next call (`make` gets
    /// the call number) and fails when any rank's differs. A rank that
    /// never makes the call shows up as a store timeout naming it.
    pub fn check(&self, make: impl FnOnce(u64) -> CallFingerprint) -> Result<()> {
        // The lock spans the call count and the exchange, so that two
        // threads of one rank cannot interleave them.
        let mut exchange = self.exchange.lock().unwrap_or_else(PoisonError::into_inner);
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let mine = make(call);
        let all: Vec<CallFingerprint> = exchange
            .all_gather(self.store.as_ref(), self.rank, self.world, &mine)
            .map_err(|source| Error::Store {
                op: "all-gather of call fingerprints (INTRANODE_DEBUG=detail)",
                rank: self.rank,
                source,
            })?;
        match disagreement(&all) {
            None => Ok(()),
            Some(groups) => Err(Error::CallMismatch {
                rank: self.rank,
                detail: describe(&groups),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intranode_store::{HashStore, StoreError};

    fn fp(call: u64, elems: u64, elem: &str, op: &str, algo: &str) -> CallFingerprint {
        CallFingerprint {
            collective: "all_reduce".into(),
            call,
            elems,
            elem: elem.into(),
            op: op.into(),
            algo: algo.into(),
        }
    }

    #[test]
    fn levels_parse() {
        assert_eq!(DebugLevel::parse("DETAIL"), Some(DebugLevel::Detail));
        assert_eq!(DebugLevel::parse(" detail "), Some(DebugLevel::Detail));
        assert_eq!(DebugLevel::parse(""), Some(DebugLevel::Off));
        assert_eq!(DebugLevel::parse("off"), Some(DebugLevel::Off));
        assert_eq!(DebugLevel::parse("verbose"), None);
    }

    #[test]
    fn agreeing_calls_pass() {
        let a = fp(3, 1024, "bf16", "sum", "one-shot");
        assert_eq!(disagreement(&[a.clone(), a.clone(), a.clone()]), None);
        assert_eq!(disagreement(&[a]), None);
        assert_eq!(disagreement(&[]), None);
    }

    #[test]
    fn disagreement_groups_ranks_majority_first() {
        let good = fp(7, 1024, "bf16", "sum", "one-shot");
        let short = fp(7, 1000, "bf16", "sum", "one-shot");
        let typed = fp(7, 1024, "f16", "sum", "one-shot");
        let all = [
            short.clone(),
            good.clone(),
            good.clone(),
            typed.clone(),
            good.clone(),
        ];
        let groups = disagreement(&all).expect("differs");
        assert_eq!(
            groups,
            vec![(vec![1, 2, 4], good), (vec![0], short), (vec![3], typed)]
        );
        let text = describe(&groups);
        assert!(
            text.starts_with("ranks [1, 2, 4] called all_reduce #7 of 1024 x bf16"),
            "{text}"
        );
        assert!(
            text.contains("rank [0] called all_reduce #7 of 1000 x bf16"),
            "{text}"
        );
        assert!(
            text.contains("rank [3] called all_reduce #7 of 1024 x f16"),
            "{text}"
        );
    }

    #[test]
    fn every_field_counts() {
        let base = fp(1, 8, "f32", "max", "two-shot");
        for other in [
            fp(2, 8, "f32", "max", "two-shot"),
            fp(1, 9, "f32", "max", "two-shot"),
            fp(1, 8, "bf16", "max", "two-shot"),
            fp(1, 8, "f32", "min", "two-shot"),
            fp(1, 8, "f32", "max", "nccl"),
            CallFingerprint {
                collective: "barrier".into(),
                ..base.clone()
            },
        ] {
            assert!(
                disagreement(&[base.clone(), other.clone()]).is_some(),
                "{other}"
            );
        }
    }

    /// Four ranks on threads over one store: the same calls pass, then
    /// rank 2 passes a different length and every rank gets the mismatch
    /// naming it, then rank 3 never calls and the others name it.
    #[test]
    fn checker_over_a_store() {
        let store: Arc<dyn Store> =
            Arc::new(HashStore::with_timeout(std::time::Duration::from_secs(2)));
        let world = 4;
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..world)
                .map(|rank| {
                    let store = store.clone();
                    s.spawn(move || {
                        let c = CallChecker::new(store, "dbg".into(), rank, world);
                        for _ in 0..5 {
                            c.check(|call| fp(call, 64, "bf16", "sum", "one-shot"))
                                .expect("same calls agree");
                        }
                        let elems = if rank == 2 { 60 } else { 64 };
                        let mismatch = c.check(|call| fp(call, elems, "bf16", "sum", "one-shot"));
                        let missing = (rank != 3)
                            .then(|| c.check(|call| fp(call, 1, "f32", "avg", "two-shot")));
                        (mismatch, missing, c.calls())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("rank"))
                .collect()
        });
        for (rank, (mismatch, missing, calls)) in results.into_iter().enumerate() {
            let e = mismatch.expect_err("lengths differ");
            let text = e.to_string();
            assert!(
                matches!(&e, Error::CallMismatch { rank: r, .. } if *r == rank),
                "{text}"
            );
            assert!(
                text.contains("ranks [0, 1, 3] called all_reduce #5 of 64 x bf16"),
                "{text}"
            );
            assert!(
                text.contains("rank [2] called all_reduce #5 of 60 x bf16"),
                "{text}"
            );
            if let Some(missing) = missing {
                let e = missing.expect_err("rank 3 never calls");
                assert!(
                    matches!(&e, Error::Store { source: StoreError::MissingRanks { missing, .. }, .. } if missing == &[3]),
                    "{e}"
                );
                assert_eq!(calls, 7);
            }
        }
    }
}
