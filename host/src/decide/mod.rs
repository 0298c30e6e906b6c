//! Every decision between our kernels and NCCL's, in one room: one file
//! per collective ([`all_reduce`], [`norm`] for the fused all-reduce +
//! residual + RMSNorm, [`scatter_gather`] for reduce-scatter and
//! all-gather, [`broadcast`]), each a pure function of the call's facts
//! and of the [`Crossovers`] below. Nothing here knows CUDA: the
//! communicators work out the facts and run what was decided.
//!
//! # The built-in crossovers
//!
//! Bytes of the whole message; "max" cells are inclusive upper bounds,
//! "min" cells lower bounds; `all` = every size, `never` = never by size.
//! Every cell is capped by what the form can take (its buffers:
//! [`lamport_max_message_bytes`] and the like). Where a cell was measured,
//! its line gives the machine, the date and the commit the figures were
//! taken at (CHANGELOG.md names each commit's results folder); the rest
//! follow the rule stated. Times are us per call (graph replay, bf16 sum),
//! "x NCCL" our time over NCCL's in the same run. `intranode-bench bench
//! --tune` writes a file that replaces them per machine
//! (`config::TUNING_FILE_ENV`).
//!
//! | cell | 2 ranks | 3 | 4 | 5-8 |
//! |---|---|---|---|---|
//! | Lamport one-shot, max | 1 MiB | 512 KiB | 256 KiB | 64 KiB |
//! | Lamport two-shot, max | 16 MiB | 4 MiB | 16 MiB | 4 MiB |
//! | push form, min | 16 MiB | 16 MiB | 32 MiB | never |
//! | one-shot, max (after the Lamport forms) | 512 KiB | 256 KiB | 512 KiB | 128 KiB |
//! | two-shot, max (NCCL above) | 4 MiB | 4 MiB | 4 MiB | 4 MiB |
//! | reduce-scatter / all-gather ours, max | all | all | all | the Lamport two-shot's |
//! | reduce-scatter / all-gather push form, min | one slot per shard, + 1 | same | same | same |
//! | fused norm, max | the Lamport one-shot's | same | 1 MiB | same as the one-shot's |
//!
//! - Lamport one-shot, 2 ranks: 2 H200, 2026-11-21, 481c135: 6.31 us at
//!   1 MiB against the Lamport two-shot's 7.59 (0.46x NCCL); even at 4 MiB
//!   (17.56 against 17.50).
//! - Lamport one-shot, 3 ranks: 3 H100, 2026-11-27, 36924c0: even with the
//!   two-shot at 512 KiB (6.27 against 6.24), ahead at 256 KiB (4.75
//!   against 5.38), behind at 1 MiB (9.39 against 7.86).
//! - Lamport one-shot, 4 ranks: 4 H100, 2026-11-27, 36924c0: the two-shot
//!   7.31 us at 512 KiB against the one-shot's 7.79; the one-shot ahead at
//!   256 KiB (5.52 against 6.10). 4 H200, 2026-11-21, 481c135, agreed.
//! - Lamport one-shot, 5-8 ranks: not measured; 64 KiB, since its traffic,
//!   (W - 1) x the message, grows with the world.
//! - Lamport two-shot, 2 and 4 ranks: 2 and 4 H200, 2026-11-21, 481c135:
//!   ahead of every other form to its largest message; 4 ranks 9.55 us at
//!   1 MiB (0.54x NCCL) and 83.5 at 16 MiB (0.86x); 2 ranks 56.1 at 16 MiB
//!   (0.73x).
//! - Lamport two-shot, 3 and 5-8 ranks: 4 H200, 2026-11-21, 74fb30a: 4 MiB
//!   led NCCL by a wide margin at 4 ranks; the other worlds take that
//!   unmeasured.
//! - Push form, 2 ranks: 2 H200, 2026-11-26, 04b694b: 317 / 343 / 348 GB/s
//!   bus bandwidth at 64 MiB / 256 MiB / 1 GiB against NCCL's 272 / 301 /
//!   331; at 16 MiB the Lamport two-shot (tried first) 56.2 us against the
//!   push form's 62.3 and NCCL's 76.4.
//! - Push form, 3 ranks: 3 H100, 2026-11-27, 36924c0: 84.8 / 277.8 / 1026
//!   us at 16 / 64 / 256 MiB against NCCL's 91.6 / 293.8 / 1085 (0.93-
//!   0.95x); 1 GiB not measured.
//! - Push form, 4 ranks: 4 H100, 2026-11-27, 97703c9: on rings of its own
//!   0.96x / 0.98x / 0.98-0.99x / 1.00x / 1.01x NCCL at 64 / 128 / 256 /
//!   512 MiB / 1 GiB; 4 H100, 2026-11-27, 12abacb: 0.96-0.97x at 32 MiB in
//!   three runs. 16 to 32 MiB: NCCL (1.04x at 16 MiB).
//! - Push form, 5-8 ranks: not measured; NCCL.
//! - One-shot and two-shot: 2 and 4 H200, 2026-11-21, 4399c8f (3 and 5-8
//!   ranks: c00d0f4's figures). They run only where a tuning file lowers
//!   the Lamport forms, which beat them at every size measured since
//!   (2 and 4 H200, 2026-11-21, 395c375 and 74fb30a).
//! - Reduce-scatter / all-gather, 2 ranks: 2 H100 and 2 H200, 2026-11-27,
//!   8e1cc53: the push form 0.70-0.89x NCCL from 64 MiB to 1 GiB.
//! - Reduce-scatter / all-gather, 3 ranks: 3 H100, 2026-11-27, 9926c57:
//!   the Lamport form 0.65-0.73x NCCL at 16 MiB, the push form 0.84-0.90x
//!   from 64 to 256 MiB; 4 H100, 2026-11-27, 97703c9: 1 GiB 0.86-0.90x.
//! - Reduce-scatter / all-gather, 4 ranks: 4 H100, 2026-11-27, 9926c57:
//!   reduce-scatter 0.77x / 0.92x / 0.96x NCCL at 16 / 64 / 256 MiB,
//!   all-gather 0.68x / 0.95x / 0.98x; 4 H100, 2026-11-27, 52ec928: the
//!   all-gather on rings of its own 0.96x at 1 GiB, the reduce-scatter
//!   even (0.99-1.00x).
//! - Reduce-scatter / all-gather, 5-8 ranks: not measured; the Lamport
//!   two-shot's crossover with NCCL.
//! - Push form of reduce-scatter / all-gather: where the Lamport form
//!   would need a second launch (a shard past one slot). 2 H100 and 2
//!   H200, 2026-11-27, 8e1cc53: at 16 MiB the Lamport form led (0.61-0.77x
//!   NCCL against 0.71-0.97x), at 64 MiB the push form (all-gather
//!   0.70-0.72x at 2 ranks and 0.94x at 4, against 0.89-1.04x); 3 and 4
//!   H100, 2026-11-27, 9926c57, confirmed it.
//! - Fused norm: the fused kernel is the Lamport one-shot with the norm
//!   folded in, so it takes the one-shot's range; at 4 ranks 1 MiB: 4
//!   H100, 2026-11-27, 46eeda2 (decode, us per layer over no
//!   communication): 512 KiB +13.0 fused against +19.0 for the Lamport
//!   two-shot and the norm, 1 MiB +19.9 against +25.1; at 4 MiB the
//!   one-shot's traffic loses (42.5 against 23.6 us).

pub mod all_reduce;
pub mod broadcast;
pub mod norm;
pub mod scatter_gather;
#[cfg(test)]
mod tests;

pub use all_reduce::{
    AllReduceCall, IntraPath, decide_all_reduce, lamport_max_message_bytes,
    lamport_two_shot_max_message_bytes, push_max_message_bytes,
};
pub use broadcast::select_broadcast_algo;
pub use norm::{NormCall, decide_norm, fused_norm_runs};
pub use scatter_gather::{
    ScatterGatherCall, scatter_gather_max_shard_bytes, scatter_gather_runs_ours,
    scatter_gather_uses_push,
};

use serde::{Deserialize, Serialize};

use crate::topology::MAX_DEVICES;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Where each form takes over, per world size (index = world size): the
/// built-in table in the module docs, or a tuning file's. Fields a file
/// written before they existed lacks get the built-in values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crossovers {
    /// Up to here the Lamport one-shot.
    #[serde(default = "built_in_lamport_max_bytes")]
    pub lamport_max_bytes: [usize; MAX_DEVICES + 1],
    /// Then the Lamport two-shot, up to here.
    #[serde(default = "built_in_lamport_two_shot_max_bytes")]
    pub lamport_two_shot_max_bytes: [usize; MAX_DEVICES + 1],
    /// Then the one-shot, up to here.
    pub one_shot_max_bytes: [usize; MAX_DEVICES + 1],
    /// Then the two-shot, up to here; above it NCCL, or the push form
    /// from `push_min_bytes` on.
    pub two_shot_max_bytes: [usize; MAX_DEVICES + 1],
    /// From here on the push form (past the Lamport forms' ranges, which
    /// come first), `usize::MAX` where it never runs by size.
    #[serde(default = "built_in_push_min_bytes")]
    pub push_min_bytes: [usize; MAX_DEVICES + 1],
    /// Reduce-scatter and all-gather: our kernels up to here (the whole
    /// buffer, every shard), NCCL above.
    #[serde(default = "built_in_scatter_gather_max_bytes")]
    pub scatter_gather_max_bytes: [usize; MAX_DEVICES + 1],
    /// Reduce-scatter and all-gather: the push form of ours from here on
    /// (the whole buffer), the Lamport form below; `usize::MAX` where it
    /// never runs by size.
    #[serde(default = "built_in_scatter_gather_push_min_bytes")]
    pub scatter_gather_push_min_bytes: [usize; MAX_DEVICES + 1],
    /// The fused all-reduce + residual + RMSNorm: up to here where the
    /// all-reduce alone would be a Lamport form.
    #[serde(default = "built_in_fused_norm_max_bytes")]
    pub fused_norm_max_bytes: [usize; MAX_DEVICES + 1],
}

/// One column of the built-in table: the cells of one world size.
struct BuiltIn {
    lamport_max: usize,
    lamport_two_shot_max: usize,
    push_min: usize,
    one_shot_max: usize,
    two_shot_max: usize,
    /// `None`: the Lamport two-shot's cell.
    scatter_gather_max: Option<usize>,
    /// `None`: the Lamport one-shot's cell.
    fused_norm_max: Option<usize>,
}

/// The built-in cells of `world` ranks (2..=8), before the caps of what
/// each form can take; the module docs give each cell's provenance.
const fn built_in(world: usize) -> BuiltIn {
    match world {
        2 => BuiltIn {
            lamport_max: MIB,
            lamport_two_shot_max: 16 * MIB,
            push_min: 16 * MIB,
            one_shot_max: 512 * KIB,
            two_shot_max: 4 * MIB,
            scatter_gather_max: Some(usize::MAX),
            fused_norm_max: None,
        },
        3 => BuiltIn {
            lamport_max: 512 * KIB,
            lamport_two_shot_max: 4 * MIB,
            push_min: 16 * MIB,
            one_shot_max: 256 * KIB,
            two_shot_max: 4 * MIB,
            scatter_gather_max: Some(usize::MAX),
            fused_norm_max: None,
        },
        4 => BuiltIn {
            lamport_max: 256 * KIB,
            lamport_two_shot_max: 16 * MIB,
            push_min: 32 * MIB,
            one_shot_max: 512 * KIB,
            two_shot_max: 4 * MIB,
            scatter_gather_max: Some(usize::MAX),
            fused_norm_max: Some(MIB),
        },
        _ => BuiltIn {
            lamport_max: 64 * KIB,
            lamport_two_shot_max: 4 * MIB,
            push_min: usize::MAX,
            one_shot_max: 128 * KIB,
            two_shot_max: 4 * MIB,
            scatter_gather_max: None,
            fused_norm_max: None,
        },
    }
}

impl Default for Crossovers {
    /// The built-in table (module docs), capped by what each form takes.
    fn default() -> Self {
        let none = [0; MAX_DEVICES + 1];
        let mut x = Crossovers {
            lamport_max_bytes: none,
            lamport_two_shot_max_bytes: none,
            one_shot_max_bytes: none,
            two_shot_max_bytes: none,
            push_min_bytes: [usize::MAX; MAX_DEVICES + 1],
            scatter_gather_max_bytes: none,
            scatter_gather_push_min_bytes: [usize::MAX; MAX_DEVICES + 1],
            fused_norm_max_bytes: none,
        };
        for world in 2..=MAX_DEVICES {
            let cells = built_in(world);
            let lamport_most = lamport_max_message_bytes(world);
            let lamport_max = cells.lamport_max.min(lamport_most);
            let lamport_two_shot_max = cells
                .lamport_two_shot_max
                .min(lamport_two_shot_max_message_bytes(world));
            x.lamport_max_bytes[world] = lamport_max;
            x.lamport_two_shot_max_bytes[world] = lamport_two_shot_max;
            x.one_shot_max_bytes[world] = cells.one_shot_max;
            x.two_shot_max_bytes[world] = cells.two_shot_max;
            x.push_min_bytes[world] = cells.push_min;
            x.scatter_gather_max_bytes[world] =
                cells.scatter_gather_max.unwrap_or(lamport_two_shot_max);
            x.scatter_gather_push_min_bytes[world] =
                world * scatter_gather_max_shard_bytes(world) + 1;
            x.fused_norm_max_bytes[world] = cells
                .fused_norm_max
                .map_or(lamport_max, |max| max.min(lamport_most));
        }
        x
    }
}

fn built_in_lamport_max_bytes() -> [usize; MAX_DEVICES + 1] {
    Crossovers::default().lamport_max_bytes
}

fn built_in_lamport_two_shot_max_bytes() -> [usize; MAX_DEVICES + 1] {
    Crossovers::default().lamport_two_shot_max_bytes
}

fn built_in_push_min_bytes() -> [usize; MAX_DEVICES + 1] {
    Crossovers::default().push_min_bytes
}

fn built_in_scatter_gather_max_bytes() -> [usize; MAX_DEVICES + 1] {
    Crossovers::default().scatter_gather_max_bytes
}

fn built_in_scatter_gather_push_min_bytes() -> [usize; MAX_DEVICES + 1] {
    Crossovers::default().scatter_gather_push_min_bytes
}

fn built_in_fused_norm_max_bytes() -> [usize; MAX_DEVICES + 1] {
    Crossovers::default().fused_norm_max_bytes
}
