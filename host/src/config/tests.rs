use super::*;

#[test]
fn config_from_vars() {
    let none = |_: &str| None;
    assert_eq!(
        CommConfig::from_vars(none).expect("defaults"),
        CommConfig::default()
    );
    let vars = |name: &str| {
        Some(
            match name {
                ENABLE_ENV => "0",
                TEST_ENV => "1",
                ALLOW_OVERLAPPING_ENV => "true",
                BUFFER_BYTES_ENV => "4096",
                BACKEND_ENV => "cuda-ipc",
                DEBUG_ENV => "Detail",
                BARRIER_TIMEOUT_ENV => " 2500 ",
                FORCE_ALGO_ENV => "lamport-two-shot",
                FORCE_BROADCAST_ENV => "nccl",
                NORM_PATH_ENV => " unfused ",
                LAMPORT_LAUNCH_ENV => "lamport=8x128",
                PUSH_LAUNCH_ENV => " blocks=16, slots=8 ",
                L2_PREFETCH_ENV => "bytes=4194304",
                LAUNCH_OVERLAP_ENV => "off",
                KERNEL_IMAGE_ENV => " PTX ",
                TIMING_ENV => "1",
                GROUP_ENV => " tp0 ",
                _ => return None,
            }
            .to_owned(),
        )
    };
    let c = CommConfig::from_vars(vars).expect("all set");
    assert_eq!(
        c,
        CommConfig {
            enabled: false,
            allow_overlapping_devices: true,
            force_fully_connected: true,
            buffer_bytes: 4096,
            backend: Backend::CudaIpc,
            debug: DebugLevel::Detail,
            barrier_timeout_ms: 2500,
            forced_algo: Some(AllReduceAlgo::LamportTwoShot),
            forced_broadcast: Some(BroadcastAlgo::Nccl),
            forced_norm: Some(NormPath::Unfused),
            crossovers: Crossovers::default(),
            lamport_shapes: LamportShapes {
                one_shot: Some(LaunchShape {
                    max_blocks: 8,
                    threads: 128
                }),
                two_shot: None,
            },
            push_shape: PushShape {
                max_blocks: 16,
                slots: 8,
                rings_set: true,
                ..PushShape::default()
            },
            l2_prefetch: L2Prefetch {
                max_bytes: 4 << 20,
                ..L2Prefetch::default()
            },
            launch_overlap: false,
            kernel_image: KernelImage::Ptx,
            print_setup_times: true,
            group: Some("tp0".to_owned()),
        }
    );
    assert_eq!(c.key_prefix(), "intranode/group/tp0");
    assert_eq!(CommConfig::default().key_prefix(), "intranode");
    // Empty values mean unset.
    let empty = |_: &str| Some(String::new());
    assert_eq!(
        CommConfig::from_vars(empty).expect("empty"),
        CommConfig::default()
    );
    let auto = |name: &str| (name == NORM_PATH_ENV).then(|| "Auto".to_owned());
    assert_eq!(CommConfig::from_vars(auto).expect("auto").forced_norm, None);
    let fused = |name: &str| (name == NORM_PATH_ENV).then(|| "fused".to_owned());
    assert_eq!(
        CommConfig::from_vars(fused).expect("fused").forced_norm,
        Some(NormPath::Fused)
    );
}

#[test]
fn push_shapes_keep_to_the_sms() {
    let d = PushShape::default();
    // An H100/H200 (132 SMs) takes the default whole; an A100 (108)
    // gets one block per SM; nothing else of the shape moves.
    assert_eq!(d.for_sms(132), d);
    assert_eq!(
        d.for_sms(108),
        PushShape {
            max_blocks: 108,
            ..d
        }
    );
    assert_eq!(d.for_sms(0).max_blocks, 1);
    // Two blocks of 256 threads share an SM (128 registers a thread at
    // most), four of 128.
    let half = PushShape::parse("blocks=264,threads=256").unwrap();
    assert_eq!(half.for_sms(132).max_blocks, 264);
    assert_eq!(half.for_sms(108).max_blocks, 216);
    let quarter = PushShape::parse("blocks=264,threads=128").unwrap();
    assert_eq!(quarter.for_sms(32).max_blocks, 128);
    assert_eq!(
        PushShape::parse("blocks=264,threads=384")
            .unwrap()
            .for_sms(132)
            .max_blocks,
        132
    );
    // Doubled: the same threads per GPU in twice the blocks, still held
    // at once by the same SMs.
    let two = d.for_sms(132).doubled();
    assert_eq!((two.max_blocks, two.threads), (264, 256));
    assert_eq!(two.for_sms(132), two);
    assert_eq!(d.for_sms(108).doubled().for_sms(108).max_blocks, 216);
    let odd = PushShape::parse("blocks=100,threads=192")
        .unwrap()
        .doubled();
    assert_eq!((odd.max_blocks, odd.threads), (200, 96));
    // Where the threads per GPU cannot stay, nothing changes: half of 96
    // is no multiple of 32, 32 does not halve, and 200 blocks cannot
    // double within MAX_BLOCKS.
    for same in [
        "threads=96",
        "threads=32",
        "blocks=200",
        "blocks=264,threads=256",
    ] {
        let shape = PushShape::parse(same).unwrap();
        assert_eq!(shape.doubled(), shape, "{same}");
    }
}

#[test]
fn push_doubling_follows_the_world_rule_unless_set() {
    let d = PushShape::default().for_sms(132);
    let doubled = |s: PushShape| (s.max_blocks, s.threads) == (264, 256);
    // Unset: the all-reduce doubles at 4 ranks, the reduce-scatter at 2
    // and 3, the all-gather nowhere.
    for world in 2..=8 {
        assert_eq!(
            doubled(d.for_use(PushUse::AllReduce, world)),
            world == 4,
            "{world}"
        );
        assert_eq!(
            doubled(d.for_use(PushUse::ReduceScatter, world)),
            world == 2 || world == 3,
            "{world}"
        );
        assert!(!doubled(d.for_use(PushUse::AllGather, world)), "{world}");
    }
    // Set, every use and world follows it.
    let on = PushShape::parse("double=1").unwrap().for_sms(132);
    let off = PushShape::parse("double=0").unwrap().for_sms(132);
    for what in [
        PushUse::AllReduce,
        PushUse::ReduceScatter,
        PushUse::AllGather,
    ] {
        for world in 2..=8 {
            assert!(doubled(on.for_use(what, world)), "{what:?} {world}");
            let s = off.for_use(what, world);
            assert_eq!((s.max_blocks, s.threads), (132, 512), "{what:?} {world}");
        }
    }
}

#[test]
fn the_all_reduce_and_all_gather_take_their_worlds_rings_unless_set() {
    let d = PushShape::default().for_sms(132);
    let four = d.for_use(PushUse::AllReduce, 4);
    assert_eq!(
        (four.max_blocks, four.threads, four.slots, four.lookahead),
        (264, 256, 3, 1)
    );
    assert_eq!(
        (four.max_chunk_bytes, four.scratch_bytes),
        (16 << 10, 76 << 20)
    );
    assert_eq!(d.scratch_bytes_for(4), 76 << 20);
    // Its rings fit the scratch with whole 16 KiB chunks.
    let launch =
        crate::intra::launch_shape::push_launch(&four, 1 << 26, 4, d.scratch_bytes_for(4)).unwrap();
    assert_eq!(
        (
            launch.blocks,
            launch.chunk_vecs,
            launch.slots,
            launch.lookahead
        ),
        (264, 1024, 3, 1)
    );
    // Other worlds and uses keep the default rings.
    for world in [2, 3, 5, 8] {
        let s = d.for_use(PushUse::AllReduce, world);
        assert_eq!((s.slots, s.max_chunk_bytes), (d.slots, d.max_chunk_bytes));
        assert_eq!(d.scratch_bytes_for(world), d.scratch_bytes, "{world}");
    }
    let rs = d.for_use(PushUse::ReduceScatter, 4);
    assert_eq!(
        (rs.slots, rs.max_chunk_bytes, rs.lookahead, rs.scratch_bytes),
        (2, 64 << 10, 0, 33 << 20)
    );
    // The all-gather at 4 ranks: 32 KiB chunks in the same 76 MiB, so
    // the allocation does not grow; elsewhere the default.
    let ag = d.for_use(PushUse::AllGather, 4);
    assert_eq!(
        (ag.max_blocks, ag.slots, ag.max_chunk_bytes, ag.lookahead),
        (132, 2, 32 << 10, 0)
    );
    assert_eq!(ag.scratch_bytes, 76 << 20);
    let launch =
        crate::intra::launch_shape::push_launch_rings(&ag, 1 << 26, 4, ag.scratch_bytes, 1)
            .unwrap();
    assert_eq!((launch.blocks, launch.chunk_vecs), (132, 2048));
    for world in [2, 3, 5, 8] {
        let s = d.for_use(PushUse::AllGather, world);
        assert_eq!((s.max_chunk_bytes, s.scratch_bytes), (64 << 10, 33 << 20));
    }
    // Any ring part set: every use keeps what was set, at 4 too.
    for set in ["slots=2", "chunk=65536", "lookahead=0", "scratch=0"] {
        let shape = PushShape::parse(set).unwrap().for_sms(132);
        assert!(shape.rings_set, "{set}");
        for what in [PushUse::AllReduce, PushUse::AllGather] {
            let s = shape.for_use(what, 4);
            assert_eq!(
                (s.slots, s.max_chunk_bytes, s.scratch_bytes),
                (shape.slots, shape.max_chunk_bytes, shape.scratch_bytes)
            );
        }
        assert_eq!(shape.scratch_bytes_for(4), shape.scratch_bytes, "{set}");
    }
    // The launch parts alone leave the rings unset.
    for launch in ["blocks=64", "threads=256", "double=0"] {
        let shape = PushShape::parse(launch).unwrap();
        assert!(!shape.rings_set, "{launch}");
        assert_eq!(shape.for_use(PushUse::AllReduce, 4).slots, 3, "{launch}");
    }
}

#[test]
fn push_shapes_parse_or_say_why_not() {
    assert_eq!(PushShape::parse("").unwrap(), PushShape::default());
    assert_eq!(
        PushShape::parse("blocks=24,threads=256,chunk=131072,slots=6").unwrap(),
        PushShape {
            max_blocks: 24,
            threads: 256,
            max_chunk_bytes: 128 << 10,
            slots: 6,
            rings_set: true,
            ..PushShape::default()
        }
    );
    assert_eq!(
        PushShape::parse("slots=3,lookahead=2").unwrap(),
        PushShape {
            slots: 3,
            lookahead: 2,
            rings_set: true,
            ..PushShape::default()
        }
    );
    assert_eq!(
        PushShape::parse("blocks=132,scratch=0").unwrap(),
        PushShape {
            max_blocks: 132,
            scratch_bytes: 0,
            rings_set: true,
            ..PushShape::default()
        }
    );
    assert_eq!(PushShape::parse("double=0").unwrap().double, Some(false));
    assert_eq!(PushShape::parse("double=1").unwrap().double, Some(true));
    for bad in [
        "double=2",
        "double=yes",
        "blocks",
        "blocks=0",
        "blocks=265",
        "scratch=100",
        "slots=3,lookahead=3",
        "lookahead=2",
        "scratch=2147483648",
        "threads=48",
        "threads=1024",
        "chunk=0",
        "chunk=100",
        "slots=1",
        "slots=17",
        "warps=4",
        "blocks=x",
    ] {
        let err = PushShape::parse(bad).unwrap_err();
        assert!(!err.is_empty(), "{bad}");
    }
}

#[test]
fn config_errors_name_the_variable() {
    for (var, value) in [
        (ENABLE_ENV, "maybe"),
        (TEST_ENV, "2"),
        (ALLOW_OVERLAPPING_ENV, "yes please"),
        (BUFFER_BYTES_ENV, "0"),
        (BUFFER_BYTES_ENV, "10MiB"),
        (BARRIER_TIMEOUT_ENV, "abc"),
        (BARRIER_TIMEOUT_ENV, "0"),
        (FORCE_ALGO_ENV, "lamprot"),
        (FORCE_BROADCAST_ENV, "symm"),
        (NORM_PATH_ENV, "fuse"),
        (BUFFER_BYTES_ENV, "4097"),
        (BUFFER_BYTES_ENV, "-4096"),
        (BACKEND_ENV, "nvshmem"),
        (DEBUG_ENV, "verbose"),
        (LAMPORT_LAUNCH_ENV, "lamport=8"),
        (LAMPORT_LAUNCH_ENV, "one-shot=8x128"),
        (LAMPORT_LAUNCH_ENV, "lamport=8x100"),
        (L2_PREFETCH_ENV, "blocks=0"),
        (L2_PREFETCH_ENV, "bytes=100"),
        (L2_PREFETCH_ENV, "size=4096"),
    ] {
        let e =
            CommConfig::from_vars(|name| (name == var).then(|| value.to_owned())).expect_err(var);
        assert!(
            matches!(&e, ConfigError::Invalid { var: v, .. } if *v == var),
            "{e}"
        );
        assert!(
            e.to_string().contains(var) && e.to_string().contains(value),
            "{e}"
        );
    }
}

#[test]
fn a_tuning_file_that_cannot_be_used_is_an_error() {
    let missing = "/nonexistent/intranode-crossovers.json";
    let e = CommConfig::from_vars(|name| (name == TUNING_FILE_ENV).then(|| missing.to_owned()))
        .expect_err("missing file");
    assert!(matches!(e, ConfigError::TuningFile { .. }), "{e}");
    assert!(
        e.to_string().contains(TUNING_FILE_ENV) && e.to_string().contains(missing),
        "{e}"
    );

    let dir = std::env::temp_dir().join(format!("intranode-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{not json").expect("write");
    let e = read_crossovers(&bad).expect_err("bad json");
    assert!(e.to_string().contains("parsing"), "{e}");

    let mut x = Crossovers::default();
    x.lamport_max_bytes[2] = 4096;
    let good = dir.join("good.json");
    std::fs::write(&good, serde_json::to_string(&x).expect("json")).expect("write");
    let path = good.to_string_lossy().into_owned();
    let c = CommConfig::from_vars(|name| (name == TUNING_FILE_ENV).then(|| path.clone()))
        .expect("good file");
    assert_eq!(c.crossovers, x);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lamport_shapes_parse_both_forms() {
    assert_eq!(LamportShapes::parse(""), Ok(LamportShapes::default()));
    let s = LamportShapes::parse(" lamport-two-shot=64x256 , lamport=132x64 ").expect("both");
    assert_eq!(
        s.two_shot,
        Some(LaunchShape {
            max_blocks: 64,
            threads: 256
        })
    );
    assert_eq!(s.one_shot.map(|s| s.max_blocks), Some(132));
    for bad in [
        "lamport",
        "lamport=0x64",
        "lamport=1x1024",
        "lamport=1x48",
        "nccl=1x64",
    ] {
        assert!(LamportShapes::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn l2_prefetch_parses_off_and_both_parts() {
    assert_eq!(L2Prefetch::parse(" off ").map(|p| p.blocks), Ok(0));
    assert_eq!(L2Prefetch::parse("0").map(|p| p.blocks), Ok(0));
    assert_eq!(
        L2Prefetch::parse(" blocks=32 , bytes=16777216, spread=1 "),
        Ok(L2Prefetch {
            blocks: 32,
            max_bytes: 16 << 20,
            spread: true,
        })
    );
    assert_eq!(
        L2Prefetch::parse("blocks=4").map(|p| p.max_bytes),
        Ok(L2Prefetch::default().max_bytes)
    );
    for bad in [
        "blocks",
        "blocks=257",
        "bytes=0",
        "bytes=24",
        "blocks=x",
        "spread=2",
    ] {
        assert!(L2Prefetch::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn group_names_are_one_key_level() {
    let with = |v: &'static str| move |name: &str| (name == GROUP_ENV).then(|| v.to_owned());
    for good in ["dp1", "tp-0", "a.b_c", &"x".repeat(64)] {
        let g = good.to_owned();
        let c =
            CommConfig::from_vars(|name: &str| (name == GROUP_ENV).then(|| g.clone())).expect(good);
        assert_eq!(c.group.as_deref(), Some(good));
    }
    for bad in ["a/b", "tp 0", "tp0:1"] {
        let e = CommConfig::from_vars(with(bad)).expect_err(bad);
        assert!(e.to_string().contains(GROUP_ENV), "{e}");
    }
    let long = "x".repeat(65);
    let e = CommConfig::from_vars(|name: &str| (name == GROUP_ENV).then(|| long.clone()))
        .expect_err("65 characters");
    assert!(e.to_string().contains("64"), "{e}");
    // Set in code, a slash cannot add a key level.
    let c = CommConfig {
        group: Some("a/b".to_owned()),
        ..CommConfig::default()
    };
    assert_eq!(c.key_prefix(), "intranode/group/a_b");
}
