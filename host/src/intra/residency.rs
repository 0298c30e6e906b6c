//! How many blocks one collective launch of a rank may have, so that the
//! launches of every rank can be resident on their GPUs at once
//! ([`Residency`], NOTE [co-residency]).
//!
//! NOTE [co-residency]: every form of ours has block `b` of one rank wait
//! for block `b` of its peers (a barrier flag, a pushed slot, a counter),
//! so block `b` can only finish once block `b` of every peer has run.
//! - **One rank per GPU.** A GPU hands out a grid's blocks in index order,
//!   and block `b` waits for nothing of a higher block, so the lowest
//!   blocks of every rank always make progress, whatever else holds SMs:
//!   other work (a GEMM on another stream, another process) ends and frees
//!   its SMs. A grid larger than the GPU holds is slow, never stuck.
//! - **Ranks sharing a GPU** (`INTRANODE_ALLOW_OVERLAPPING_DEVICES`, under
//!   MPS, where their kernels run side by side): the GPU hands out the
//!   blocks of the ranks' grids in no order between them. Once spinning
//!   blocks fill it, none of them can finish if, for every `b`, some
//!   rank's block `b` is not among them: a deadlock that only the wait's
//!   bound breaks, reported as a peer that never came (4 ranks on one H200
//!   under MPS, two-shot grids of 64 blocks of 512 threads, one per SM:
//!   256 blocks for 132 SMs). So each rank's grid is held to its share of
//!   the SMs: with `k` ranks on one GPU, `sms / k` blocks, so the grids of
//!   all `k` ranks fit at once even at one block per SM (every block of
//!   ours fits an SM alone). `sms` is the fewest any rank sees (under MPS
//!   with an active-thread percentage, a client may see fewer), so every
//!   rank launches the same grid, which the forms' block-to-data mapping
//!   needs.
//! - Launch overlap (programmatic dependent launch) lets the next kernel's
//!   blocks take SMs, waiting in `griddepcontrol.wait`, as soon as this
//!   kernel's blocks all started: on a shared GPU those blocks hold room a
//!   peer's current blocks need, so sharing turns launch overlap off.

/// Where the ranks of a group run, as far as block residency goes: the
/// same on every rank (derived from the rendezvous requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Residency {
    /// SMs of the GPU as the rank that sees the fewest reports them.
    pub sms: usize,
    /// The most ranks of the group on one GPU (1: a GPU each).
    pub ranks_per_gpu: usize,
}

impl Residency {
    /// A GPU of `sms` SMs for every rank alone.
    #[cfg(test)]
    pub fn dedicated(sms: usize) -> Self {
        Residency {
            sms: sms.max(1),
            ranks_per_gpu: 1,
        }
    }

    /// Whether some ranks share a GPU.
    pub fn shared(&self) -> bool {
        self.ranks_per_gpu > 1
    }

    /// The most blocks one collective launch may have (NOTE
    /// [co-residency]): no limit on a GPU of its own, the rank's share of
    /// the SMs on a shared one.
    pub fn max_blocks(&self) -> usize {
        if self.shared() {
            (self.sms / self.ranks_per_gpu).max(1)
        } else {
            usize::MAX
        }
    }

    /// The SMs the launch shapes that spread over the GPU (the Lamport
    /// forms, the fused norm) may spread over.
    pub fn launch_sms(&self) -> usize {
        self.sms.min(self.max_blocks()).max(1)
    }

    /// Whether kernels may be launched to overlap the one before them,
    /// given what the configuration asks (`wanted`).
    pub fn launch_overlap(&self, wanted: bool) -> bool {
        wanted && !self.shared()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_each_keeps_every_shape() {
        let r = Residency::dedicated(132);
        assert!(!r.shared());
        assert_eq!(r.max_blocks(), usize::MAX);
        assert_eq!(r.launch_sms(), 132);
        assert!(r.launch_overlap(true));
        assert!(!r.launch_overlap(false));
    }

    #[test]
    fn sharing_ranks_split_the_sms() {
        let r = |k| Residency {
            sms: 132,
            ranks_per_gpu: k,
        };
        assert_eq!(r(2).max_blocks(), 66);
        assert_eq!(r(4).max_blocks(), 33);
        assert_eq!(r(8).max_blocks(), 16);
        assert_eq!(r(4).launch_sms(), 33);
        assert!(!r(2).launch_overlap(true));
        // Every rank's grid fits beside the others' at one block per SM.
        for k in 2..=8 {
            assert!(k * r(k).max_blocks() <= 132);
        }
        let tiny = Residency {
            sms: 3,
            ranks_per_gpu: 8,
        };
        assert_eq!(tiny.max_blocks(), 1);
    }
}
