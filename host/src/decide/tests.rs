//! Unit tests of the decisions: every path of each, and the built-in
//! table against the rules it states.

use super::all_reduce::{HCM_MAX_BYTES, by_size};
use super::scatter_gather::scatter_gather_uses_ours;
use super::*;
use crate::topology::{MAX_DEVICES, Topology};
use crate::types::ElemType;
use crate::types::{AllReduceAlgo, NormPath};

fn call(bytes: usize, world: usize) -> AllReduceCall {
    AllReduceCall {
        elem: Some(ElemType::Bf16),
        bytes,
        world,
        intra: Some(IntraPath {
            topology: Topology::FullyConnected,
            buffer_bytes: 64 << 20,
            hcm_runnable: true,
            push_runnable: true,
        }),
        op_is_ours: true,
        nccl_available: true,
        forced: None,
    }
}

#[test]
fn the_decision_covers_every_path() {
    let x = Crossovers::default();
    let c = call(4096, 2);
    assert_eq!(decide_all_reduce(&c, &x), AllReduceAlgo::Lamport);
    // No intra-node path, or an op only NCCL has: NCCL, forced or not.
    for forced in [None, Some(AllReduceAlgo::OneShot)] {
        let none = AllReduceCall {
            intra: None,
            forced,
            ..c
        };
        assert_eq!(decide_all_reduce(&none, &x), AllReduceAlgo::Nccl);
        let prod = AllReduceCall {
            op_is_ours: false,
            forced,
            ..c
        };
        assert_eq!(decide_all_reduce(&prod, &x), AllReduceAlgo::Nccl);
        // An element type only NCCL reduces (integers, f64).
        let int = AllReduceCall {
            elem: None,
            forced,
            ..c
        };
        assert_eq!(decide_all_reduce(&int, &x), AllReduceAlgo::Nccl);
    }
    // Above every crossover on 5 ranks (no push form by size): NCCL,
    // or two-shot where NCCL is missing.
    let big = call(1 << 30, 5);
    assert_eq!(decide_all_reduce(&big, &x), AllReduceAlgo::Nccl);
    let no_nccl = AllReduceCall {
        nccl_available: false,
        ..big
    };
    assert_eq!(decide_all_reduce(&no_nccl, &x), AllReduceAlgo::TwoShot);
    // A cube mesh this rank cannot run HCM on goes to NCCL.
    let mut cube = call(4096, 8);
    cube.intra = Some(IntraPath {
        topology: Topology::HybridCubeMesh,
        buffer_bytes: 64 << 20,
        hcm_runnable: false,
        push_runnable: true,
    });
    assert_eq!(decide_all_reduce(&cube, &x), AllReduceAlgo::Nccl);
    cube.intra = cube.intra.map(|p| IntraPath {
        hcm_runnable: true,
        ..p
    });
    assert_eq!(decide_all_reduce(&cube, &x), AllReduceAlgo::Hcm);
    // A forced algorithm wins over the size rule...
    let forced = AllReduceCall {
        forced: Some(AllReduceAlgo::TwoShot),
        ..c
    };
    assert_eq!(decide_all_reduce(&forced, &x), AllReduceAlgo::TwoShot);
    // ... the push form at every size, which the size rule picks only
    // where it was measured ahead: past the Lamport two-shot's 16 MiB
    // on 2 ranks, from 16 MiB on 3 (where the Lamport two-shot stops
    // at 4 MiB), from 32 MiB on 4; and only where its rings fit.
    for bytes in [
        16,
        4096,
        16 << 20,
        (16 << 20) + 16,
        24 << 20,
        32 << 20,
        64 << 20,
        1 << 30,
    ] {
        for world in 2..=MAX_DEVICES {
            let c = call(bytes, world);
            let by_size = (world == 2 && bytes > 16 << 20)
                || (world == 3 && bytes >= 16 << 20)
                || (world == 4 && bytes >= 32 << 20);
            assert_eq!(
                decide_all_reduce(&c, &x) == AllReduceAlgo::Push,
                by_size,
                "{bytes} {world}"
            );
            let mut cramped = c;
            cramped.intra = c.intra.map(|p| IntraPath {
                push_runnable: false,
                ..p
            });
            assert_ne!(decide_all_reduce(&cramped, &x), AllReduceAlgo::Push);
            let forced = AllReduceCall {
                forced: Some(AllReduceAlgo::Push),
                ..c
            };
            assert_eq!(decide_all_reduce(&forced, &x), AllReduceAlgo::Push);
        }
    }
    // Past its u32 indices, the two-shot.
    let at = |bytes| AllReduceCall {
        forced: Some(AllReduceAlgo::Push),
        ..call(bytes, 2)
    };
    let most = push_max_message_bytes();
    assert_eq!(most, 16 << 30);
    assert_eq!(decide_all_reduce(&at(most), &x), AllReduceAlgo::Push);
    assert_eq!(decide_all_reduce(&at(most + 2), &x), AllReduceAlgo::TwoShot);
}

#[test]
fn lamport_forms_never_take_more_than_their_buffers() {
    let x = Crossovers::default();
    let decide = |algo: AllReduceAlgo, bytes: usize, world: usize| {
        let c = AllReduceCall {
            forced: Some(algo),
            ..call(bytes, world)
        };
        decide_all_reduce(&c, &x)
    };
    for world in 2..=MAX_DEVICES {
        let one = lamport_max_message_bytes(world);
        let two = lamport_two_shot_max_message_bytes(world);
        let l = AllReduceAlgo::Lamport;
        let l2 = AllReduceAlgo::LamportTwoShot;
        assert_eq!(decide(l, one, world), l);
        assert_eq!(decide(l, one + 1, world), AllReduceAlgo::OneShot);
        assert_eq!(decide(l2, two, world), l2);
        assert_eq!(decide(l2, two + 1, world), AllReduceAlgo::TwoShot);
        // The kernel's own condition: every shard fits a slot.
        let slot = intranode_kernels_gpu::layout::lamport_two_shot_slot_bytes(world);
        assert!(two.div_ceil(16).div_ceil(world) * 16 <= slot);
        assert_eq!(
            decide(AllReduceAlgo::TwoShot, 1 << 30, world),
            AllReduceAlgo::TwoShot
        );
        // The size rule never picks a Lamport form past its buffers,
        // whatever a tuning file says.
        let mut lax = Crossovers::default();
        lax.lamport_max_bytes[world] = usize::MAX;
        let c = call(one + 16, world);
        assert_ne!(decide_all_reduce(&c, &lax), l);
    }
}

fn norm(rows: usize, hidden: usize, world: usize) -> NormCall {
    NormCall {
        all_reduce: call(rows * hidden * 2, world),
        hidden,
        aligned: true,
        forced: None,
    }
}

#[test]
fn norm_fuses_where_the_lamport_one_shot_runs() {
    let x = Crossovers::default();
    // Decode shapes on 2 GPUs: hidden 4096 to 16384, 1 to 64 rows of
    // bf16, all within the one-shot's 1 MiB crossover but the largest.
    for hidden in [4096, 8192, 16384] {
        for rows in [1, 8, 32] {
            assert_eq!(decide_norm(&norm(rows, hidden, 2), &x), NormPath::Fused);
        }
    }
    assert_eq!(decide_norm(&norm(64, 8192, 2), &x), NormPath::Fused);
    assert_eq!(decide_norm(&norm(64, 16384, 2), &x), NormPath::Unfused);
    // On 4 GPUs the plain all-reduce of 512 KiB and 1 MiB is the
    // Lamport two-shot; the fused path keeps them (measured ahead
    // there), and stops past 1 MiB.
    for (rows, hidden) in [(64, 4096), (32, 8192), (64, 8192)] {
        let c = norm(rows, hidden, 4);
        assert_eq!(
            decide_all_reduce(&c.all_reduce, &x),
            AllReduceAlgo::LamportTwoShot
        );
        assert_eq!(decide_norm(&c, &x), NormPath::Fused, "{rows} x {hidden}");
    }
    assert_eq!(decide_norm(&norm(64, 16384, 4), &x), NormPath::Unfused);
    // Past the crossover a forced fused path still runs (it fits the
    // buffers); past the buffers nothing forces it.
    let forced = |mut c: NormCall, path| {
        c.forced = Some(path);
        c
    };
    let big = norm(64, 16384, 2);
    assert_eq!(
        decide_norm(&forced(big, NormPath::Fused), &x),
        NormPath::Fused
    );
    let slot = lamport_max_message_bytes(4);
    let huge = norm(slot / (2 * 4096) + 1, 4096, 4);
    assert!(huge.all_reduce.bytes > slot);
    assert_eq!(
        decide_norm(&forced(huge, NormPath::Fused), &x),
        NormPath::Unfused
    );
    let at_slot = norm(slot / (2 * 4096), 4096, 4);
    assert_eq!(
        decide_norm(&forced(at_slot, NormPath::Fused), &x),
        NormPath::Fused
    );
    // Forced unfused wins everywhere.
    let small = norm(1, 4096, 2);
    assert_eq!(
        decide_norm(&forced(small, NormPath::Unfused), &x),
        NormPath::Unfused
    );
    // A forced all-reduce algorithm other than the Lamport one-shot
    // turns fusion off; forcing that one turns it on past the
    // crossover.
    let mut nccl = small;
    nccl.all_reduce.forced = Some(AllReduceAlgo::Nccl);
    assert_eq!(decide_norm(&nccl, &x), NormPath::Unfused);
    let mut lamport = big;
    lamport.all_reduce.forced = Some(AllReduceAlgo::Lamport);
    assert_eq!(decide_norm(&lamport, &x), NormPath::Fused);
}

#[test]
fn norm_falls_back_where_the_fused_kernel_cannot_run() {
    let x = Crossovers::default();
    let ok = NormCall {
        forced: Some(NormPath::Fused),
        ..norm(8, 4096, 4)
    };
    assert!(fused_norm_runs(&ok));
    assert_eq!(decide_norm(&ok, &x), NormPath::Fused);
    let mut cases = Vec::new();
    // Rows that are not whole vectors (8 bf16 or f16, 4 f32).
    cases.push(NormCall { hidden: 777, ..ok });
    cases.push(NormCall { hidden: 4092, ..ok });
    let mut f32_odd = NormCall { hidden: 4094, ..ok };
    f32_odd.all_reduce.elem = Some(ElemType::F32);
    cases.push(f32_odd);
    cases.push(NormCall {
        aligned: false,
        ..ok
    });
    cases.push(NormCall { hidden: 0, ..ok });
    let mut no_intra = ok;
    no_intra.all_reduce.intra = None;
    cases.push(no_intra);
    let mut cube = ok;
    cube.all_reduce.world = 8;
    cube.all_reduce.intra = Some(IntraPath {
        topology: Topology::HybridCubeMesh,
        buffer_bytes: 64 << 20,
        hcm_runnable: true,
        push_runnable: true,
    });
    cases.push(cube);
    for world in [1, MAX_DEVICES + 1] {
        let mut w = ok;
        w.all_reduce.world = world;
        cases.push(w);
    }
    for c in cases {
        assert!(!fused_norm_runs(&c), "{c:?}");
        assert_eq!(decide_norm(&c, &x), NormPath::Unfused, "{c:?}");
    }
    // f32 rows of whole 4-lane vectors fuse.
    let mut f32_ok = NormCall { hidden: 4092, ..ok };
    f32_ok.all_reduce.elem = Some(ElemType::F32);
    f32_ok.all_reduce.bytes = 8 * 4092 * 4;
    assert!(fused_norm_runs(&f32_ok));
}

#[test]
fn norm_path_names_round_trip() {
    for p in [NormPath::Fused, NormPath::Unfused] {
        assert_eq!(NormPath::from_name(p.name()), Some(p));
    }
    assert_eq!(NormPath::from_name("auto"), None);
}

#[test]
fn scatter_gather_takes_what_fits_and_pays() {
    let x = Crossovers::default();
    assert!(scatter_gather_uses_ours(4096, 2, &x));
    // At 2, 3 and 4 ranks ours at every size (the push form past a
    // slot per shard); elsewhere to the Lamport two-shot's crossover.
    assert!(scatter_gather_uses_ours(1 << 30, 2, &x));
    assert!(scatter_gather_uses_ours(4 << 30, 4, &x));
    assert!(scatter_gather_uses_ours(3 << 30, 3, &x));
    assert!(!scatter_gather_uses_ours(1 << 30, 5, &x));
    assert!(!scatter_gather_uses_ours(4096, 1, &x));
    assert!(!scatter_gather_uses_ours(4096, MAX_DEVICES + 1, &x));
    // The Lamport form while every shard fits a slot, the push form
    // past it.
    for world in 2..=MAX_DEVICES {
        let one_slot = world * scatter_gather_max_shard_bytes(world);
        assert!(!scatter_gather_uses_push(one_slot, world, &x));
        assert!(scatter_gather_uses_push(one_slot + 1, world, &x));
    }
    assert!(!scatter_gather_uses_push(1 << 30, 1, &x));
}

/// With the Lamport forms capped by a tuning file, one-shot and
/// two-shot take their ranges again.
fn x_lowered_sends_mid_sizes_to_one_shot(x: &Crossovers) {
    let mut x = x.clone();
    x.lamport_max_bytes[4] = 4096;
    x.lamport_two_shot_max_bytes[4] = 0;
    let fc = Topology::FullyConnected;
    assert_eq!(
        by_size(256 << 10, 4, fc, 10 * MIB, &x),
        AllReduceAlgo::OneShot
    );
    assert_eq!(
        by_size(4 * MIB, 4, fc, 10 * MIB, &x),
        AllReduceAlgo::TwoShot
    );
}

#[test]
fn small_messages_go_one_shot_large_to_nccl() {
    let x = Crossovers::default();
    let fc = Topology::FullyConnected;
    assert_eq!(by_size(4096, 4, fc, 10 * MIB, &x), AllReduceAlgo::Lamport);
    assert_eq!(
        by_size(256 << 10, 4, fc, 10 * MIB, &x),
        AllReduceAlgo::Lamport
    );
    assert_eq!(
        by_size((256 << 10) + 16, 4, fc, 10 * MIB, &x),
        AllReduceAlgo::LamportTwoShot
    );
    assert_eq!(
        by_size(512 << 10, 3, fc, 10 * MIB, &x),
        AllReduceAlgo::Lamport
    );
    x_lowered_sends_mid_sizes_to_one_shot(&x);
    for world in 2..=MAX_DEVICES {
        assert!(x.lamport_max_bytes[world] <= lamport_max_message_bytes(world));
        assert!(x.lamport_two_shot_max_bytes[world] <= lamport_two_shot_max_message_bytes(world));
    }
    assert_eq!(
        by_size(4 * MIB, 4, fc, 10 * MIB, &x),
        AllReduceAlgo::LamportTwoShot
    );
    // 4 ranks: NCCL between the Lamport two-shot and the push form.
    assert_eq!(by_size(24 * MIB, 4, fc, 10 * MIB, &x), AllReduceAlgo::Nccl);
    assert_eq!(by_size(32 * MIB, 4, fc, 10 * MIB, &x), AllReduceAlgo::Push);
    assert_eq!(by_size(64 * MIB, 4, fc, 10 * MIB, &x), AllReduceAlgo::Push);
    assert_eq!(by_size(1 << 30, 4, fc, 10 * MIB, &x), AllReduceAlgo::Push);
    assert_eq!(by_size(1 << 30, 5, fc, 10 * MIB, &x), AllReduceAlgo::Nccl);
}

#[test]
fn cube_meshes_use_hcm_for_small_messages() {
    let x = Crossovers::default();
    let hcm = Topology::HybridCubeMesh;
    assert_eq!(
        by_size(HCM_MAX_BYTES, 8, hcm, 10 * MIB, &x),
        AllReduceAlgo::Hcm
    );
    assert_eq!(
        by_size(HCM_MAX_BYTES + 2, 8, hcm, 10 * MIB, &x),
        AllReduceAlgo::Nccl
    );
    // Never on NVSwitch machines.
    for bytes in [16, 4096, MIB, 64 * MIB] {
        assert_ne!(
            by_size(bytes, 8, Topology::FullyConnected, 10 * MIB, &x),
            AllReduceAlgo::Hcm
        );
    }
}

#[test]
fn unusable_groups_fall_back() {
    let x = Crossovers::default();
    assert_eq!(
        by_size(8, 1, Topology::FullyConnected, MIB, &x),
        AllReduceAlgo::Nccl
    );
    assert_eq!(
        by_size(8, 9, Topology::FullyConnected, MIB, &x),
        AllReduceAlgo::Nccl
    );
    assert_eq!(
        by_size(8, 4, Topology::Unknown, MIB, &x),
        AllReduceAlgo::Nccl
    );
    assert_eq!(
        by_size(8, 4, Topology::FullyConnected, 0, &x),
        AllReduceAlgo::Nccl
    );
}

#[test]
fn names_round_trip() {
    for a in [
        AllReduceAlgo::Lamport,
        AllReduceAlgo::LamportTwoShot,
        AllReduceAlgo::OneShot,
        AllReduceAlgo::TwoShot,
        AllReduceAlgo::Hcm,
        AllReduceAlgo::Push,
        AllReduceAlgo::Nccl,
    ] {
        assert_eq!(AllReduceAlgo::from_name(a.name()), Some(a));
    }
    assert_eq!(AllReduceAlgo::from_name("three-shot"), None);
}

#[test]
fn crossover_file_round_trips() {
    let dir = std::env::temp_dir().join(format!("intranode-xo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("xo.json");
    let mut x = Crossovers::default();
    x.one_shot_max_bytes[4] = 12345;
    // A file from before the Lamport crossovers still reads.
    std::fs::write(
        &path,
        r#"{"one_shot_max_bytes":[0,0,1,1,1,1,1,1,1],"two_shot_max_bytes":[0,0,2,2,2,2,2,2,2]}"#,
    )
    .unwrap();
    let old = crate::config::read_crossovers(&path).unwrap();
    assert_eq!(
        old.lamport_max_bytes,
        Crossovers::default().lamport_max_bytes
    );
    assert_eq!(old.two_shot_max_bytes[8], 2);
    std::fs::write(&path, serde_json::to_string(&x).unwrap()).unwrap();
    assert_eq!(crate::config::read_crossovers(&path).unwrap(), x);
    std::fs::write(&path, "{").unwrap();
    assert!(
        crate::config::read_crossovers(&path)
            .unwrap_err()
            .to_string()
            .contains("parsing")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The built-in table, cell by cell, against the rules its docs state.
#[test]
fn the_built_in_table_follows_its_rules() {
    let x = Crossovers::default();
    for world in [0, 1] {
        assert_eq!(x.lamport_max_bytes[world], 0);
        assert_eq!(x.push_min_bytes[world], usize::MAX);
    }
    let measured = [
        (2, MIB, 16 * MIB),
        (3, 512 << 10, 4 * MIB),
        (4, 256 << 10, 16 * MIB),
    ];
    for (world, one, two) in measured {
        assert_eq!(
            x.lamport_max_bytes[world],
            one.min(lamport_max_message_bytes(world))
        );
        assert_eq!(
            x.lamport_two_shot_max_bytes[world],
            two.min(lamport_two_shot_max_message_bytes(world))
        );
        assert_eq!(x.scatter_gather_max_bytes[world], usize::MAX);
    }
    assert_eq!(x.push_min_bytes[2..=4], [16 * MIB, 16 * MIB, 32 * MIB]);
    assert_eq!(
        x.one_shot_max_bytes,
        [
            0,
            0,
            512 << 10,
            256 << 10,
            512 << 10,
            128 << 10,
            128 << 10,
            128 << 10,
            128 << 10
        ]
    );
    for world in 5..=MAX_DEVICES {
        assert_eq!(
            x.lamport_max_bytes[world],
            (64 << 10).min(lamport_max_message_bytes(world))
        );
        assert_eq!(x.push_min_bytes[world], usize::MAX);
        assert_eq!(
            x.scatter_gather_max_bytes[world],
            x.lamport_two_shot_max_bytes[world]
        );
    }
    for world in 2..=MAX_DEVICES {
        assert_eq!(x.two_shot_max_bytes[world], 4 * MIB);
        assert_eq!(
            x.scatter_gather_push_min_bytes[world],
            world * scatter_gather_max_shard_bytes(world) + 1
        );
        let fused = if world == 4 {
            MIB.min(lamport_max_message_bytes(4))
        } else {
            x.lamport_max_bytes[world]
        };
        assert_eq!(x.fused_norm_max_bytes[world], fused);
    }
}

/// Ours where every fact allows it and the size pays, or where NCCL
/// cannot run; NCCL otherwise.
#[test]
fn scatter_gather_runs_ours_only_where_every_fact_allows() {
    let x = Crossovers::default();
    let ours = ScatterGatherCall {
        total_bytes: 4096,
        world: 4,
        intra: true,
        elem_is_ours: true,
        op_is_ours: true,
        nccl_available: true,
        forced_nccl: false,
    };
    assert!(scatter_gather_runs_ours(&ours, &x));
    for not_ours in [
        ScatterGatherCall {
            intra: false,
            ..ours
        },
        ScatterGatherCall {
            elem_is_ours: false,
            ..ours
        },
        ScatterGatherCall {
            op_is_ours: false,
            ..ours
        },
        ScatterGatherCall {
            forced_nccl: true,
            ..ours
        },
    ] {
        assert!(!scatter_gather_runs_ours(&not_ours, &x), "{not_ours:?}");
    }
    // Past the crossover (5 ranks): NCCL, unless NCCL cannot run.
    let big = ScatterGatherCall {
        world: 5,
        total_bytes: 1 << 30,
        ..ours
    };
    assert!(!scatter_gather_runs_ours(&big, &x));
    assert!(scatter_gather_runs_ours(
        &ScatterGatherCall {
            nccl_available: false,
            ..big
        },
        &x
    ));
}
