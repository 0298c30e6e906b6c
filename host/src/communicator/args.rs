//! The argument checks of the collectives, made before anything is
//! enqueued, so a bad call never reaches NCCL or a kernel. Pure: tested
//! without a GPU. Every message names the call, the rank and the lengths.

use super::RankIndex;
use crate::error::{Error, Result};
use crate::types::AllReduceAlgo;

/// `value` (a root or peer, named `what`) as an index below `world`.
pub(super) fn rank_in_world(
    op: &'static str,
    rank: usize,
    world: usize,
    what: &'static str,
    value: impl RankIndex,
) -> Result<usize> {
    match value.index() {
        Some(i) if i < world => Ok(i),
        _ => Err(Error::RankOutOfWorld {
            op,
            rank,
            what,
            value: value.as_i64(),
            world,
        }),
    }
}

/// Send and receive buffers of one length (all-reduce).
pub(super) fn same_len(op: &'static str, rank: usize, send: usize, recv: usize) -> Result<()> {
    if send == recv {
        return Ok(());
    }
    Err(Error::BufferLength {
        op,
        rank,
        buffer: "recv",
        elems: recv,
        expected_elems: Some(send),
        rule: "as many as send".into(),
    })
}

/// The rule of every `_with` variant (`all_reduce_with`,
/// `all_reduce_in_place_with`, `broadcast_in_place_with`): the named
/// algorithm runs, or the call fails; none falls back to NCCL. NCCL's runs
/// when named (or when the automatic choice picks it). An algorithm of
/// ours needs the intra-node path (`intra`: why there is none), an op our
/// kernels have, and an element type they have (`elem`: NCCL's name of a
/// type they lack). What runs is then `decide_all_reduce` with the
/// algorithm forced (a Lamport form hands messages larger than its
/// buffers to its barrier twin, as documented on `AllReduceAlgo`).
pub(super) fn explicit_algo(
    op: &str,
    rank: usize,
    algo: AllReduceAlgo,
    intra: std::result::Result<(), &str>,
    op_is_ours: bool,
    elem: std::result::Result<(), &str>,
) -> Result<()> {
    if algo == AllReduceAlgo::Nccl {
        return Ok(());
    }
    if let Err(why) = intra {
        return Err(Error::InvalidArgument(format!(
            "{op} on rank {rank}: {} needs the intra-node path, which is unavailable: {why}",
            algo.name()
        )));
    }
    if !op_is_ours {
        return Err(Error::InvalidArgument(format!(
            "{op} on rank {rank}: product is only served by nccl"
        )));
    }
    if let Err(name) = elem {
        return Err(Error::InvalidArgument(format!(
            "{op} on rank {rank}: {name} elements are only reduced by nccl"
        )));
    }
    Ok(())
}

/// The buffer only the root uses (`name`: broadcast's send, reduce's
/// recv): on the root it must be there, with `other_len` elements
/// (the length of the buffer every rank passes, `other`); elsewhere it
/// is ignored, as NCCL ignores it.
pub(super) fn root_buffer(
    op: &'static str,
    rank: usize,
    root: usize,
    name: &'static str,
    len: Option<usize>,
    other: &'static str,
    other_len: usize,
) -> Result<()> {
    if rank != root {
        return Ok(());
    }
    match len {
        None => Err(Error::MissingRootBuffer {
            op,
            rank,
            buffer: name,
        }),
        Some(n) if n != other_len => Err(Error::BufferLength {
            op,
            rank,
            buffer: name,
            elems: n,
            expected_elems: Some(other_len),
            rule: format!("as many as {other}"),
        }),
        Some(_) => Ok(()),
    }
}

/// All-gather: `recv` holds `world` x `send` elements.
pub(super) fn all_gather(rank: usize, world: usize, send: usize, recv: usize) -> Result<()> {
    let expected_elems = world.checked_mul(send);
    if expected_elems == Some(recv) {
        return Ok(());
    }
    Err(Error::BufferLength {
        op: "all_gather",
        rank,
        buffer: "recv",
        elems: recv,
        expected_elems,
        rule: format!("world size {world} x send {send}"),
    })
}

/// Reduce-scatter: `send` holds `world` x `recv` elements.
pub(super) fn reduce_scatter(rank: usize, world: usize, send: usize, recv: usize) -> Result<()> {
    let expected_elems = world.checked_mul(recv);
    if expected_elems == Some(send) {
        return Ok(());
    }
    Err(Error::BufferLength {
        op: "reduce_scatter",
        rank,
        buffer: "send",
        elems: send,
        expected_elems,
        rule: format!("world size {world} x recv {recv}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_with_variant_runs_what_it_names_or_fails() {
        let ok = Ok(());
        let algo = AllReduceAlgo::Lamport;
        assert!(explicit_algo("all_reduce", 0, algo, ok, true, ok).is_ok());
        // NCCL named: whatever the group, op or type.
        let none = Err("one process per GPU only");
        let nccl = AllReduceAlgo::Nccl;
        assert!(explicit_algo("x", 0, nccl, none, false, Err("i32")).is_ok());
        // Ours named where it cannot run: an error, never NCCL.
        let err = |intra, op_is_ours, elem| {
            explicit_algo("all_reduce_in_place", 3, algo, intra, op_is_ours, elem)
                .unwrap_err()
                .to_string()
        };
        let no_intra = err(none, true, ok);
        assert!(no_intra.contains("rank 3"), "{no_intra}");
        assert!(
            no_intra.contains("lamport needs the intra-node path"),
            "{no_intra}"
        );
        assert!(no_intra.contains("one process per GPU only"), "{no_intra}");
        assert!(err(ok, false, ok).contains("only served by nccl"));
        assert!(err(ok, true, Err("i32")).contains("i32 elements are only reduced by nccl"));
    }

    fn message(r: crate::error::Result<impl std::fmt::Debug>) -> String {
        r.expect_err("should be refused").to_string()
    }

    #[test]
    fn roots_and_peers_are_checked_against_the_world() {
        assert_eq!(rank_in_world("reduce", 1, 4, "root", 3i32).unwrap(), 3);
        assert_eq!(rank_in_world("send", 1, 4, "peer", 0usize).unwrap(), 0);
        assert_eq!(
            message(rank_in_world("reduce", 1, 4, "root", 4i32)),
            "invalid argument: reduce on rank 1: root 4 is outside the world of 4"
        );
        assert_eq!(
            message(rank_in_world("send", 2, 4, "peer", -1i32)),
            "invalid argument: send on rank 2: peer -1 is outside the world of 4"
        );
        assert!(matches!(
            rank_in_world("recv", 0, 2, "peer", usize::MAX),
            Err(Error::RankOutOfWorld {
                value: i64::MAX,
                world: 2,
                ..
            })
        ));
        assert!(matches!(
            rank_in_world("send", 2, 4, "peer", -1i32),
            Err(Error::RankOutOfWorld { value: -1, .. })
        ));
        assert_eq!((-1i32).index(), None);
        assert_eq!(i32::MAX.index(), Some(i32::MAX as usize));
    }

    #[test]
    fn all_gather_recv_is_world_times_send() {
        all_gather(0, 4, 3, 12).unwrap();
        all_gather(0, 4, 0, 0).unwrap();
        assert_eq!(
            message(all_gather(1, 4, 3, 10)),
            "invalid argument: all_gather on rank 1: recv has 10 elements, but must hold world size 4 x send 3 = 12"
        );
        // The recv of the send's length (an all-reduce's shape) is refused.
        assert!(all_gather(0, 2, 8, 8).is_err());
        assert!(matches!(
            all_gather(0, 8, usize::MAX / 2, 0),
            Err(Error::BufferLength {
                expected_elems: None,
                ..
            })
        ));
        let huge = message(all_gather(0, 8, usize::MAX / 2, 0));
        assert!(huge.contains("more than usize::MAX"), "{huge}");
    }

    #[test]
    fn reduce_scatter_send_is_world_times_recv() {
        reduce_scatter(3, 4, 12, 3).unwrap();
        assert_eq!(
            message(reduce_scatter(3, 4, 12, 4)),
            "invalid argument: reduce_scatter on rank 3: send has 12 elements, but must hold world size 4 x recv 4 = 16"
        );
        assert!(reduce_scatter(0, 2, 7, 3).is_err());
    }

    #[test]
    fn only_the_root_needs_its_buffer() {
        // Not the root: whatever it passes is ignored, as NCCL ignores it.
        root_buffer("reduce", 1, 0, "recv", None, "send", 5).unwrap();
        root_buffer("reduce", 1, 0, "recv", Some(3), "send", 5).unwrap();
        root_buffer("broadcast", 0, 0, "send", Some(5), "recv", 5).unwrap();
        assert_eq!(
            message(root_buffer("broadcast", 2, 2, "send", None, "recv", 5)),
            "invalid argument: broadcast on rank 2: the root must pass a send buffer (got None)"
        );
        assert_eq!(
            message(root_buffer("reduce", 0, 0, "recv", Some(4), "send", 5)),
            "invalid argument: reduce on rank 0: recv has 4 elements, but must hold as many as send = 5"
        );
    }

    #[test]
    fn all_reduce_lengths_match() {
        same_len("all_reduce", 0, 7, 7).unwrap();
        assert!(matches!(
            same_len("all_reduce", 1, 10000, 9999),
            Err(Error::BufferLength {
                buffer: "recv",
                elems: 9999,
                expected_elems: Some(10000),
                ..
            })
        ));
        assert_eq!(
            message(same_len("all_reduce", 1, 10000, 9999)),
            "invalid argument: all_reduce on rank 1: recv has 9999 elements, but must hold as many as send = 10000"
        );
    }
}
