//! CPU tests of the request exchange and of [`validate`], on synthetic
//! requests.

use super::request::{PROTOCOL_VERSION, first_failed_request, hostname};
use super::validate::residency;
use super::*;
use crate::config::DEFAULT_BUFFER_BYTES;
use crate::config::*;
use crate::error::Error;
use crate::intra::residency::Residency;
use crate::symm_mem::Backend;
use crate::topology::{MAX_DEVICES, NvlMesh, Topology};

fn req(rank: usize, world: usize, bus: u32) -> RendezvousRequest {
    RendezvousRequest {
        protocol_version: PROTOCOL_VERSION,
        hostname: "node-a".into(),
        rank,
        world,
        device: rank,
        pci_bus_id: format!("0000:{bus:02x}:00.0"),
        uuid: [bus as u8 + 1; 16],
        pid: 1000 + rank as u32,
        buffer_bytes: DEFAULT_BUFFER_BYTES,
        backend: Backend::Vmm,
        debug: DebugLevel::Off,
        push_shape: PushShape::default(),
        sms: 132,
    }
}

#[test]
fn push_shapes_must_agree() {
    let mut g = group(3);
    assert_eq!(push_shape_mismatch(&g), None);
    g[1].push_shape.slots = 8;
    let why = push_shape_mismatch(&g).unwrap();
    assert!(
        why.contains("rank 1") && why.contains(PUSH_LAUNCH_ENV),
        "{why}"
    );
    assert_eq!(push_shape_mismatch(&[]), None);
}

#[test]
fn debug_levels_must_agree() {
    let mut g = group(4);
    assert_eq!(debug_level_mismatch(&g), None);
    for r in &mut g {
        r.debug = DebugLevel::Detail;
    }
    assert_eq!(debug_level_mismatch(&g), None);
    g[2].debug = DebugLevel::Off;
    let why = debug_level_mismatch(&g).unwrap();
    assert!(why.contains("rank 2") && why.contains(DEBUG_ENV), "{why}");
    assert_eq!(debug_level_mismatch(&[]), None);
}

/// `world` ranks on distinct GPUs (bus 0x10 + rank).
fn group(world: usize) -> Vec<RendezvousRequest> {
    (0..world).map(|r| req(r, world, 0x10 + r as u32)).collect()
}

fn full_mesh(world: usize, links: u32) -> NvlMesh {
    let mut m = NvlMesh::zero();
    for a in 0..world {
        for b in 0..world {
            if a != b {
                m.0[a][b] = links;
            }
        }
    }
    m
}

/// DGX-1 hybrid cube mesh: two quads (0-3, 4-7) fully linked inside,
/// plus i <-> i + 4.
fn dgx1() -> NvlMesh {
    let mut m = NvlMesh::zero();
    let mut link = |a: usize, b: usize| {
        m.0[a][b] = 1;
        m.0[b][a] = 1;
    };
    for base in [0, 4] {
        for a in 0..4 {
            for b in a + 1..4 {
                link(base + a, base + b);
            }
        }
    }
    for i in 0..4 {
        link(i, i + 4);
    }
    m
}

fn cfg() -> CommConfig {
    CommConfig::default()
}

#[test]
fn fully_connected_group_is_accepted() {
    for world in 2..=8 {
        let g = validate(&group(world), &full_mesh(world, 18), &cfg()).expect("fully connected");
        assert_eq!(g.world, world);
        assert_eq!(g.topology, Topology::FullyConnected);
        assert_eq!(g.hcm_neighbors, None);
        assert!(!g.overlapping_devices());
        assert_eq!(g.residency, Residency::dedicated(132));
        assert_eq!(g.buffer_bytes, DEFAULT_BUFFER_BYTES);
        assert_eq!(g.backend, Backend::Vmm);
    }
}

#[test]
fn hybrid_cube_mesh_is_accepted_with_neighbors() {
    // DGX-1 has 3 in-quad neighbours plus one cross link: 4 each.
    let g = validate(&group(8), &dgx1(), &cfg()).expect("hcm");
    assert_eq!(g.topology, Topology::HybridCubeMesh);
    let hcm = g.hcm_neighbors.expect("hcm table");
    for (x, row) in hcm.iter().enumerate() {
        for &y in row {
            assert!(dgx1().is_linked(x, y), "{x} -> {y}");
        }
    }
}

#[test]
fn disabled_comes_first() {
    let config = CommConfig {
        enabled: false,
        ..cfg()
    };
    assert_eq!(
        validate(&group(1), &NvlMesh::zero(), &config),
        Err(Unsupported::Disabled)
    );
    assert_eq!(
        validate(&group(4), &full_mesh(4, 1), &config),
        Err(Unsupported::Disabled)
    );
}

#[test]
fn world_size_bounds() {
    for world in [0usize, 1, 9, 16] {
        let requests: Vec<_> = (0..world).map(|r| req(r, world, r as u32)).collect();
        let e = validate(&requests, &full_mesh(8, 1), &cfg()).expect_err("bad world");
        assert_eq!(e, Unsupported::WorldSize { world });
        assert!(
            e.to_string().contains(&format!("world size {world}")),
            "{e}"
        );
    }
}

#[test]
fn inconsistent_requests() {
    let mut g = group(3);
    g.swap(1, 2);
    let e = validate(&g, &full_mesh(3, 1), &cfg()).expect_err("swapped");
    assert!(
        matches!(e, Unsupported::InconsistentRequest { rank: 1, .. }),
        "{e}"
    );
    let mut g = group(3);
    g[2].world = 4;
    let e = validate(&g, &full_mesh(3, 1), &cfg()).expect_err("world");
    assert!(
        matches!(e, Unsupported::InconsistentRequest { rank: 2, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("world 4"), "{e}");
}

#[test]
fn protocol_mismatch_names_rank_and_host() {
    let mut g = group(4);
    g[3].protocol_version = PROTOCOL_VERSION + 1;
    g[3].hostname = "node-a".into();
    let e = validate(&g, &full_mesh(4, 1), &cfg()).expect_err("version");
    assert!(
        matches!(e, Unsupported::ProtocolMismatch { rank: 3, .. }),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("rank 3") && text.contains("node-a"), "{text}");
}

#[test]
fn different_hosts() {
    let mut g = group(4);
    g[2].hostname = "node-b".into();
    g[3].hostname = "node-c".into();
    let e = validate(&g, &full_mesh(4, 1), &cfg()).expect_err("hosts");
    assert_eq!(
        e,
        Unsupported::DifferentHosts {
            rank: 2,
            host: "node-b".into(),
            host0: "node-a".into()
        }
    );
    assert!(e.to_string().contains("node-b") && e.to_string().contains("node-a"));
}

#[test]
fn buffer_sizes() {
    let mut g = group(2);
    g[1].buffer_bytes = 1 << 20;
    let e = validate(&g, &full_mesh(2, 1), &cfg()).expect_err("sizes");
    assert!(matches!(
        e,
        Unsupported::BufferSizeMismatch {
            rank: 1,
            bytes: 1048576,
            bytes0: DEFAULT_BUFFER_BYTES,
            ..
        }
    ));
    let text = e.to_string();
    assert!(
        text.contains("pci 0000:11:00.0") && text.contains("node-a"),
        "{text}"
    );

    let mut g = group(2);
    g[0].buffer_bytes = 0;
    g[1].buffer_bytes = 0;
    let e = validate(&g, &full_mesh(2, 1), &cfg()).expect_err("zero");
    assert!(
        matches!(e, Unsupported::ZeroBufferSize { rank: 0, .. }),
        "{e}"
    );

    // Sizes the kernels cannot split into two halves of whole vectors
    // (17 bytes would make a zero half: a division by zero on the GPU).
    for bytes in [17, 4095, 4097, (1 << 20) + 16] {
        let mut g = group(3);
        for r in &mut g {
            r.buffer_bytes = bytes;
        }
        let e = validate(&g, &full_mesh(3, 1), &cfg()).expect_err("granularity");
        assert!(
            matches!(e, Unsupported::BufferSizeGranularity { rank: 0, bytes: b, .. } if b == bytes),
            "{e}"
        );
        assert!(e.to_string().contains("multiple of 4096"), "{e}");
    }
    let mut g = group(2);
    for r in &mut g {
        r.buffer_bytes = 3 * BUFFER_GRANULARITY_BYTES;
    }
    assert!(validate(&g, &full_mesh(2, 1), &cfg()).is_ok());
}

#[test]
fn backend_mismatch() {
    let mut g = group(2);
    g[1].backend = Backend::CudaIpc;
    let e = validate(&g, &full_mesh(2, 1), &cfg()).expect_err("backend");
    assert!(
        matches!(e, Unsupported::BackendMismatch { rank: 1, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("cuda-ipc"), "{e}");
    // All on the legacy backend is fine.
    let mut g = group(2);
    for r in &mut g {
        r.backend = Backend::CudaIpc;
    }
    assert_eq!(
        validate(&g, &full_mesh(2, 1), &cfg()).expect("ipc").backend,
        Backend::CudaIpc
    );
}

#[test]
fn overlapping_devices_refused_by_default() {
    // Same PCI address, written differently (NVML vs CUDA spelling).
    let mut g = group(3);
    g[2].pci_bus_id = "00000000:11:00.0".into();
    let e = validate(&g, &full_mesh(3, 1), &cfg()).expect_err("overlap");
    assert!(
        matches!(
            e,
            Unsupported::OverlappingDevices {
                rank_a: 1,
                rank_b: 2,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(ALLOW_OVERLAPPING_ENV), "{e}");
    // Same UUID, different PCI text.
    let mut g = group(2);
    g[1].uuid = g[0].uuid;
    assert!(matches!(
        validate(&g, &full_mesh(2, 1), &cfg()),
        Err(Unsupported::OverlappingDevices {
            rank_a: 0,
            rank_b: 1,
            ..
        })
    ));
}

#[test]
fn all_ranks_on_one_gpu_allowed_are_fully_connected() {
    // Four ranks on one H100: NVML gives no links at all.
    let g: Vec<_> = (0..4)
        .map(|r| RendezvousRequest {
            device: 0,
            ..req(r, 4, 0x42)
        })
        .collect();
    let config = CommConfig {
        allow_overlapping_devices: true,
        ..cfg()
    };
    let v = validate(&g, &NvlMesh::zero(), &config).expect("overlap allowed");
    assert_eq!(v.topology, Topology::FullyConnected);
    assert!(v.overlapping_devices());
    assert!(v.to_string().contains("overlapping devices"), "{v}");
    // Four grids side by side: a quarter of the SMs each, no overlap.
    assert_eq!(v.residency.ranks_per_gpu, 4);
    assert_eq!(v.residency.max_blocks(), 33);
    assert!(!v.residency.launch_overlap(true));
}

#[test]
fn the_fewest_sms_and_the_most_ranks_on_a_gpu_set_the_residency() {
    // Ranks 0-2 on one GPU, rank 3 alone on another; rank 1 is an MPS
    // client held to a share of the SMs.
    let g: Vec<_> = (0..4)
        .map(|r| RendezvousRequest {
            sms: if r == 1 { 66 } else { 132 },
            ..req(r, 4, if r < 3 { 0x10 } else { 0x20 })
        })
        .collect();
    let r = residency(&g);
    assert_eq!(r.ranks_per_gpu, 3);
    assert_eq!(r.sms, 66);
    assert_eq!(r.max_blocks(), 22);
    // A GPU each: no cap, whatever the SMs.
    assert_eq!(residency(&group(8)), Residency::dedicated(132));
}

#[test]
fn partial_overlap_needs_links_between_gpus() {
    // Ranks 0,1 on GPU A, ranks 2,3 on GPU B.
    let g: Vec<_> = (0..4)
        .map(|r| req(r, 4, if r < 2 { 0x10 } else { 0x20 }))
        .collect();
    let config = CommConfig {
        allow_overlapping_devices: true,
        ..cfg()
    };
    let e = validate(&g, &NvlMesh::zero(), &config).expect_err("no NVLink between A and B");
    assert!(matches!(e, Unsupported::Topology { world: 4, .. }), "{e}");
    // With A-B links (as NVML reports them for each rank's GPU).
    let mut m = NvlMesh::zero();
    for a in 0..4 {
        for b in 0..4 {
            if (a < 2) != (b < 2) {
                m.0[a][b] = 4;
            }
        }
    }
    let v = validate(&g, &m, &config).expect("linked");
    assert_eq!(v.topology, Topology::FullyConnected);
}

#[test]
fn unknown_topology_refused_with_mesh() {
    // PCIe only.
    let e = validate(&group(4), &NvlMesh::zero(), &cfg()).expect_err("pcie");
    let text = e.to_string();
    assert!(matches!(e, Unsupported::Topology { world: 4, .. }));
    assert!(text.contains("node-a") && text.contains(TEST_ENV), "{text}");
    assert!(text.contains("rank 3:"), "{text}");
    // One missing pair.
    let mut m = full_mesh(4, 2);
    m.0[1][3] = 0;
    m.0[3][1] = 0;
    assert!(validate(&group(4), &m, &cfg()).is_err());
    // One direction only is not a link.
    let mut m = full_mesh(2, 2);
    m.0[1][0] = 0;
    assert!(validate(&group(2), &m, &cfg()).is_err());
    // DGX-1 with one cross link gone.
    let mut m = dgx1();
    m.0[0][4] = 0;
    m.0[4][0] = 0;
    assert!(validate(&group(8), &m, &cfg()).is_err());
    // DGX-1 mesh but only 4 ranks of another quad mix: 0,1,4,5.
    let mut sub = NvlMesh::zero();
    let ranks = [0usize, 1, 4, 5];
    for (i, &a) in ranks.iter().enumerate() {
        for (j, &b) in ranks.iter().enumerate() {
            sub.0[i][j] = dgx1().0[a][b];
        }
    }
    assert!(validate(&group(4), &sub, &cfg()).is_err());
}

#[test]
fn mesh_entries_outside_the_world_are_ignored() {
    // Links to a ninth... or to ranks beyond the world do not matter.
    let mut m = full_mesh(2, 1);
    m.0[0][5] = 7;
    m.0[6][6] = 3;
    let v = validate(&group(2), &m, &cfg()).expect("fine");
    assert_eq!(v.mesh.links(0, 5), 0);
    assert_eq!(v.mesh.links(6, 6), 0);
}

#[test]
fn test_switch_forces_fully_connected() {
    let config = CommConfig {
        force_fully_connected: true,
        ..cfg()
    };
    let v = validate(&group(4), &NvlMesh::zero(), &config).expect("forced");
    assert_eq!(v.topology, Topology::FullyConnected);
    assert_eq!(v.hcm_neighbors, None);
    // It does not lift the other checks.
    let mut g = group(4);
    g[1].hostname = "elsewhere".into();
    assert!(matches!(
        validate(&g, &NvlMesh::zero(), &config),
        Err(Unsupported::DifferentHosts { rank: 1, .. })
    ));
    assert!(matches!(
        validate(&group(1), &NvlMesh::zero(), &config),
        Err(Unsupported::WorldSize { world: 1 })
    ));
}

#[test]
fn requests_round_trip_through_the_store() {
    let store = intranode_store::HashStore::new();
    let mut exchange = intranode_store::StoreExchange::new("t");
    let r = req(0, 1, 0x1b);
    let published: std::result::Result<RendezvousRequest, String> = Ok(r.clone());
    let back = exchange
        .all_gather(&store, 0, 1, &published)
        .expect("all_gather");
    assert_eq!(back, vec![Ok(r)]);
}

#[test]
fn same_device_rules() {
    let a = req(0, 2, 0x10);
    let mut b = req(1, 2, 0x11);
    assert!(!a.same_device(&b));
    b.pci_bus_id = "0000:10:00.0".into();
    assert!(a.same_device(&b));
    // Zero UUIDs (unknown) never match by themselves.
    let mut c = req(0, 2, 0x30);
    let mut d = req(1, 2, 0x31);
    c.uuid = [0; 16];
    d.uuid = [0; 16];
    assert!(!c.same_device(&d));
    // Unparseable PCI text compares case-insensitively.
    c.pci_bus_id = "weird-X".into();
    d.pci_bus_id = "WEIRD-x".into();
    assert!(c.same_device(&d));
}

#[test]
fn failed_requests_name_the_first_rank() {
    let list = vec![
        Ok(req(0, 3, 0x10)),
        Err("no driver".to_owned()),
        Err("later".to_owned()),
    ];
    assert_eq!(first_failed_request(&list), Some((1, "no driver")));
    assert_eq!(
        first_failed_request(&[Ok(req(0, 2, 0x10)), Ok(req(1, 2, 0x11))]),
        None
    );
}

#[test]
fn exchange_requests_reports_failed_and_missing_ranks() {
    use intranode_store::{HashStore, StoreError};
    // Everyone fine (one rank: the exchange completes at once).
    let store = HashStore::new();
    let mut ex = StoreExchange::new("rq");
    let got = exchange_requests(&store, &mut ex, 0, 1, &Ok(req(0, 1, 0x10))).expect("ok");
    assert_eq!(got, vec![req(0, 1, 0x10)]);

    // Rank 1 published a failure: rank 0 names it.
    let store = HashStore::new();
    let mut ex1 = StoreExchange::new("rq");
    std::thread::scope(|s| {
        let peer =
            s.spawn(|| exchange_requests(&store, &mut ex1, 1, 2, &Err("cuInit failed".to_owned())));
        let mut ex0 = StoreExchange::new("rq");
        let e = exchange_requests(&store, &mut ex0, 0, 2, &Ok(req(0, 2, 0x10)))
            .expect_err("peer failed");
        assert!(
            matches!(&e, Error::PeerFailed { rank: 1, reason, .. } if reason == "cuInit failed"),
            "{e}"
        );
        assert!(peer.join().expect("peer").is_err());
    });

    // Rank 2 never comes: the store timeout names it.
    let store = HashStore::with_timeout(std::time::Duration::from_millis(50));
    let mut ex = StoreExchange::new("rq");
    let e = exchange_requests(&store, &mut ex, 0, 3, &Ok(req(0, 3, 0x10))).expect_err("missing");
    match &e {
        Error::Store {
            rank: 0,
            source: StoreError::MissingRanks { missing, .. },
            ..
        } => assert_eq!(missing, &[1, 2]),
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("rank(s) [1, 2]"), "{e}");
}

#[test]
fn hostname_is_not_empty() {
    assert!(!hostname().is_empty());
}

#[test]
fn verdicts_compare_by_value() {
    let a = Verdict::Ok {
        topology: "fully connected".into(),
        mesh: vec![[1; MAX_DEVICES]; MAX_DEVICES],
    };
    let mut b = a.clone();
    assert_eq!(a, b);
    if let Verdict::Ok { mesh, .. } = &mut b {
        mesh[0][1] = 2;
    }
    assert_ne!(a, b);
}

#[test]
fn rendezvous_error_messages() {
    let e = RendezvousError::from(Unsupported::WorldSize { world: 9 });
    assert!(
        e.to_string().contains("unsupported") && e.to_string().contains("9"),
        "{e}"
    );
    let e = RendezvousError::from(Error::PeerFailed {
        rank: 2,
        phase: "symmetric-memory allocation",
        reason: "out of memory".into(),
    });
    let text = e.to_string();
    assert!(
        text.contains("rank 2") && text.contains("out of memory"),
        "{text}"
    );
}
