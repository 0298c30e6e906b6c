//! The broadcast's decision: the symmetric-memory kernel or NCCL's.

use crate::topology::Topology;
use crate::types::BroadcastAlgo;

/// The path of one broadcast, from the intra-node path's topology (`None`
/// without one), whether NCCL loaded, and a forced path. Symmetric memory
/// where every reader has a direct NVLink (or NVSwitch) path to the root,
/// that is a fully connected group; NCCL elsewhere. No size crossover:
/// none has been measured. A forced path that does not exist, or no NCCL
/// at all, falls back to the one that does.
pub fn select_broadcast_algo(
    intra: Option<Topology>,
    has_nccl: bool,
    forced: Option<BroadcastAlgo>,
) -> BroadcastAlgo {
    match (forced, intra, has_nccl) {
        (Some(BroadcastAlgo::Nccl), _, true) => BroadcastAlgo::Nccl,
        (Some(BroadcastAlgo::SymmMem), Some(_), _) => BroadcastAlgo::SymmMem,
        (_, Some(Topology::FullyConnected), _) => BroadcastAlgo::SymmMem,
        (_, Some(_), false) => BroadcastAlgo::SymmMem,
        _ => BroadcastAlgo::Nccl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_prefers_symmetric_memory_and_honours_what_exists() {
        use BroadcastAlgo::*;
        let full = Some(Topology::FullyConnected);
        let hcm = Some(Topology::HybridCubeMesh);
        assert_eq!(select_broadcast_algo(full, true, None), SymmMem);
        assert_eq!(select_broadcast_algo(None, true, None), Nccl);
        assert_eq!(select_broadcast_algo(hcm, true, None), Nccl);
        assert_eq!(select_broadcast_algo(hcm, false, None), SymmMem);
        assert_eq!(select_broadcast_algo(hcm, true, Some(SymmMem)), SymmMem);
        assert_eq!(select_broadcast_algo(full, true, Some(Nccl)), Nccl);
        assert_eq!(select_broadcast_algo(full, false, Some(Nccl)), SymmMem);
        assert_eq!(select_broadcast_algo(None, true, Some(SymmMem)), Nccl);
        assert_eq!(BroadcastAlgo::from_name(" nccl "), Some(Nccl));
        assert_eq!(BroadcastAlgo::from_name("symm-mem"), Some(SymmMem));
        assert_eq!(BroadcastAlgo::from_name("ring"), None);
    }
}
