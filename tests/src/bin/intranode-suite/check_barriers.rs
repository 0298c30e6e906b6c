//! The last stage of `intranode-suite check`: GPU barriers, then one a
//! rank never joins.

use anyhow::Result;
use intranode_harness::rank::Rank;

/// GPU barriers over all ranks and over a pair, then a barrier the last
/// rank never joins: every other rank must get `PeerTimeout` naming it
/// from the host-mapped error word, and no GPU may hang. Leaves the
/// intra-node communicator unusable, so it runs last.
pub fn run(r: &mut Rank) -> Result<String> {
    let (rank, last) = (r.rank(), r.world() - 1);
    let Some(intra) = r.comm.intra() else {
        return Ok("barriers skipped (no intra-node path)".into());
    };
    for _ in 0..100 {
        intra.barrier(None, &r.stream)?;
    }
    if rank < 2 {
        for _ in 0..50 {
            intra.barrier(Some(&[0, 1]), &r.stream)?;
        }
    }
    r.stream.synchronize()?;
    intra.health().check()?;
    let t = std::time::Instant::now();
    let outcome = if rank != last {
        intra.barrier(None, &r.stream)?;
        r.stream.synchronize()?;
        match intra.health().check() {
            Err(intranode::Error::PeerTimeout { peer, .. }) if peer == last => Ok(()),
            other => Err(format!(
                "rank {rank}: a barrier without rank {last} gave {other:?}"
            )),
        }
    } else {
        Ok(())
    };
    let waited = t.elapsed();
    let report = match &outcome {
        Ok(()) if rank != last => format!(
            "100 barriers + 50 pair barriers ok; missing rank {last} reported after {:.1} s: {}",
            waited.as_secs_f64(),
            intra
                .health()
                .check()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        ),
        Ok(()) => "100 barriers + 50 pair barriers ok; skipped the last barrier on purpose".into(),
        Err(e) => e.clone(),
    };
    r.store_barrier()?;
    outcome.map_err(|e| anyhow::anyhow!(e))?;
    Ok(report)
}
