//! Unit tests of the all-reduce's launches and their shapes.

use super::*;
use crate::config::{LamportShapes, LaunchShape, MAX_LAMPORT_BLOCKS};
use crate::intra::launch_shape::*;
use intranode_kernels_gpu::layout::MAX_BLOCKS;

#[test]
fn every_algorithm_has_its_kernels() {
    for elem in ElemType::ALL {
        for world in 2..=MAX_RANKS {
            for algo in [
                AllReduceAlgo::Lamport,
                AllReduceAlgo::LamportTwoShot,
                AllReduceAlgo::OneShot,
                AllReduceAlgo::TwoShot,
                AllReduceAlgo::Push,
            ] {
                assert!(collective_kernel(algo, elem, world).is_some());
            }
            let hcm = collective_kernel(AllReduceAlgo::Hcm, elem, world);
            assert_eq!(hcm.is_some(), [4, 6, 8].contains(&world), "hcm w{world}");
        }
        assert_eq!(collective_kernel(AllReduceAlgo::OneShot, elem, 1), None);
        assert_eq!(
            collective_kernel(AllReduceAlgo::OneShot, elem, MAX_RANKS + 1),
            None
        );
    }
    assert_eq!(
        collective_kernel(AllReduceAlgo::Nccl, ElemType::F32, 2),
        None
    );
    let k = collective_kernel(AllReduceAlgo::Hcm, ElemType::Bf16, 6);
    assert_eq!(k.map(|k| k.to_string()), Some("hcm_bf16_w6".into()));
    let k = collective_kernel(AllReduceAlgo::Push, ElemType::F32, 8);
    assert_eq!(k.map(|k| k.to_string()), Some("push_f32_w8".into()));
}

#[test]
fn lamport_launch_follows_the_measured_rule() {
    let l = LamportLaunch::new(132, LamportShapes::parse("").unwrap());
    let one = AllReduceAlgo::Lamport;
    let two = AllReduceAlgo::LamportTwoShot;
    // The shapes that won the shape sweep on 132-SM H200s.
    assert_eq!(l.shape_for(one, 1024, 4), (16, 64));
    assert_eq!(l.shape_for(one, 16384, 4), (128, 128));
    assert_eq!(l.shape_for(one, 65536, 2), (128, 512));
    assert_eq!(l.shape_for(two, 65536, 4), (128, 128));
    assert_eq!(l.shape_for(two, 262144, 4), (128, 512));
    // Never more blocks than SMs, never an empty grid.
    assert_eq!(l.shape_for(one, 1 << 20, 2), (132, 512));
    assert_eq!(l.shape_for(one, 0, 2), (1, 64));
    assert_eq!(l.shape_for(two, 1, 8), (1, 64));
    for sms in [1, 8, 132, 5000] {
        let l = LamportLaunch::new(sms, LamportShapes::parse("").unwrap());
        for vecs in [1usize, 63, 64, 1000, 1 << 16, 1 << 22] {
            for world in 2..=8 {
                for algo in [one, two] {
                    let (b, t) = l.shape_for(algo, vecs, world);
                    assert!((1..=MAX_LAMPORT_BLOCKS.min(sms)).contains(&b));
                    assert!(t.is_power_of_two() && (64..=THREADS).contains(&t));
                }
            }
        }
    }
}

#[test]
fn lamport_launch_env_fixes_shapes_or_says_why_not() {
    let l = LamportLaunch::new(
        132,
        LamportShapes::parse(" lamport-two-shot=128x256 ").unwrap(),
    );
    assert_eq!(l.fixed.one_shot, None);
    let fixed = LaunchShape {
        max_blocks: 128,
        threads: 256,
    };
    assert_eq!(l.fixed.two_shot, Some(fixed));
    assert_eq!(
        l.shape_for(AllReduceAlgo::LamportTwoShot, 4 << 20, 4),
        (128, 256)
    );
    assert_eq!(
        l.shape_for(AllReduceAlgo::LamportTwoShot, 1024, 4),
        (1, 256)
    );
    let l = LamportLaunch::new(
        132,
        LamportShapes::parse("lamport=24x512,lamport-two-shot=64x512").unwrap(),
    );
    assert_eq!(l.shape_for(AllReduceAlgo::Lamport, 1 << 16, 4), (24, 512));
    for bad in [
        "lamport",
        "lamport=12",
        "lamport=0x256",
        "lamport=2000x256",
        "lamport=12x48",
        "lamport=12x2048",
        "lamport=12x1024",
        "lamport=ax64",
        "one-shot=12x64",
    ] {
        let err = LamportShapes::parse(bad).unwrap_err();
        assert!(!err.is_empty(), "{bad}");
    }
}

#[test]
fn block_counts_stay_inside_the_pad_layout() {
    for world in 2..=8 {
        for vecs in [1usize, 7, 512, 513, 1 << 20, 1 << 30] {
            for algo in [AllReduceAlgo::OneShot, AllReduceAlgo::TwoShot] {
                let b = blocks_for(algo, vecs, world);
                assert!(
                    (1..=MAX_BLOCKS).contains(&b),
                    "{algo:?} {vecs} {world}: {b}"
                );
            }
        }
    }
    assert_eq!(blocks_for(AllReduceAlgo::OneShot, 512, 4), 1);
    assert_eq!(blocks_for(AllReduceAlgo::OneShot, 513, 4), 2);
}

#[test]
fn push_launch_fits_the_buffer_and_the_kernels() {
    use intranode_kernels_gpu::index::{
        PUSH_MAX_TILE_VECS, push_block_tiles, push_ring_bytes, push_tiles,
    };
    let shapes = [
        PushShape::default(),
        PushShape::parse("blocks=64,threads=256,chunk=1048576,slots=16").unwrap(),
        PushShape::parse("blocks=1,threads=32,chunk=16,slots=2").unwrap(),
        PushShape::parse("blocks=160,chunk=262144,slots=4").unwrap(),
        PushShape::parse("blocks=264,threads=256").unwrap(),
        PushShape::parse("blocks=132,chunk=131072,slots=3,lookahead=2").unwrap(),
    ];
    for (shape, rings) in shapes.iter().flat_map(|s| [(s, 1usize), (s, 2)]) {
        for world in 2..=8 {
            for buffer in [4096usize, 10 << 20, 256 << 20] {
                for vecs in [1usize, 7, 512, 4096, 1 << 20, 1 << 26, 1 << 30] {
                    let Some(l) = push_launch_rings(shape, vecs, world, buffer, rings) else {
                        // Only a buffer without a vector per slot.
                        assert!(
                            buffer / 16 < rings * shape.max_blocks * (world - 1) * shape.slots,
                            "{shape:?} {world} {buffer}"
                        );
                        continue;
                    };
                    let (b, w, s, c) = (
                        l.blocks as u32,
                        world as u32,
                        l.slots as u32,
                        l.chunk_vecs as u32,
                    );
                    assert!((1..=shape.max_blocks).contains(&l.blocks));
                    assert!(l.blocks <= MAX_BLOCKS && l.threads >= world - 1);
                    assert!(l.chunk_vecs >= 1 && l.slots >= 2);
                    assert!((1..l.slots).contains(&l.lookahead));
                    assert!(l.chunk_vecs * 16 <= shape.max_chunk_bytes);
                    // Whole lines, unless a slot holds less than one.
                    assert!(
                        l.chunk_vecs.is_multiple_of(LINE_VECS) || l.chunk_vecs < LINE_VECS,
                        "{shape:?} {world} {buffer} {vecs}: {l:?}"
                    );
                    assert!(w * c <= PUSH_MAX_TILE_VECS);
                    // `push_ring_bytes` counts two rings.
                    assert!(push_ring_bytes(b, w, s, c) / 2 * rings as u64 <= buffer as u64);
                    // No idle block: each gets a tile at least.
                    let tiles = push_tiles(vecs as u32, w, c);
                    assert!((0..b).all(|k| push_block_tiles(tiles, b, k) >= 1));
                }
            }
        }
    }
    // The default on 2 ranks and its 33 MiB scratch: 132 blocks of 512
    // threads, 2 slots of 64 KiB (the shape sweep's best at 64 MiB),
    // a chunk of one vector per thread for small messages.
    let d = PushShape::default();
    let big = push_launch(&d, 1 << 26, 2, d.scratch_bytes).unwrap();
    assert_eq!(
        big,
        PushLaunch {
            blocks: 132,
            threads: 512,
            chunk_vecs: 4096,
            slots: 2,
            lookahead: 1
        }
    );
    let small = push_launch(&d, 1 << 16, 2, d.scratch_bytes).unwrap();
    assert_eq!((small.blocks, small.chunk_vecs), (64, 512));
    let tiny = push_launch(&d, 100, 2, d.scratch_bytes).unwrap();
    assert_eq!((tiny.blocks, tiny.chunk_vecs), (1, 512));
    // On 8 ranks the chunk shrinks to what the scratch holds.
    let eight = push_launch(&d, 1 << 26, 8, d.scratch_bytes).unwrap();
    assert_eq!((eight.blocks, eight.chunk_vecs), (132, 584));
    // One ring per block and peer (the reduce-scatter and all-gather
    // forms): twice the chunk where the scratch is what cuts it.
    let one = push_launch_rings(&d, 1 << 26, 8, d.scratch_bytes, 1).unwrap();
    assert_eq!((one.blocks, one.chunk_vecs), (132, 1168));
    // 4 ranks, one ring, 33 MiB: 2730 vectors fit, 2728 are whole
    // lines (NOTE [push chunks in whole lines]).
    let four = push_launch_rings(&d, 1 << 26, 4, d.scratch_bytes, 1).unwrap();
    assert_eq!(four.chunk_vecs, 2728);
    // No ring fits: refused.
    assert_eq!(push_launch(&d, 1 << 20, 8, 4096), None);
    assert_eq!(push_launch(&d, 1 << 20, 1, 10 << 20), None);
}
