//! Index arithmetic shared by the kernels and the host.
//!
//! Plain `const fn`s without panicking paths: they compile for nvptx64
//! (where a panic would pull in out-of-line `core` code) and for the host,
//! where the unit tests below cover them.

/// Bytes moved by one vector load or store on the main path.
pub const VEC_BYTES: usize = 16;

/// How many elements of `elem_bytes` bytes fill one 16-byte vector.
pub const fn elems_per_vec(elem_bytes: usize) -> usize {
    match VEC_BYTES.checked_div(elem_bytes) {
        Some(n) => n,
        None => 0,
    }
}

/// Splits `elems` into whole 16-byte vectors and a scalar tail:
/// returns `(vectors, tail_start_elem)`.
pub const fn split_vec_tail(elems: usize, elem_bytes: usize) -> (usize, usize) {
    let per_vec = elems_per_vec(elem_bytes);
    if per_vec == 0 {
        return (0, 0);
    }
    let vecs = elems / per_vec;
    (vecs, vecs * per_vec)
}

/// Whether every address is aligned for 16-byte vector accesses.
pub const fn all_vec_aligned(addrs: &[usize]) -> bool {
    let mut acc = 0usize;
    let mut i = 0;
    while i < addrs.len() {
        acc |= addrs[i];
        i += 1;
    }
    acc.is_multiple_of(VEC_BYTES)
}

/// Half-open range `[start, end)` of `total` items owned by `part` of
/// `parts` when they are split as evenly as possible (the first
/// `total % parts` parts get one more). Empty when `parts == 0` or
/// `part >= parts`.
pub const fn even_split(total: usize, parts: usize, part: usize) -> (usize, usize) {
    if parts == 0 || part >= parts {
        return (0, 0);
    }
    let base = total / parts;
    let extra = total % parts;
    let start = part * base + if part < extra { part } else { extra };
    let len = base + if part < extra { 1 } else { 0 };
    (start, start + len)
}

/// Elements of one HCM chunk in a half of `half_bytes`: the half holds
/// the chunk's input vectors and, after them, their partial sums in f32
/// (4 bytes per element), so that the sum of a group is rounded only once,
/// at the very end. Zero when the half cannot hold one vector.
pub const fn hcm_chunk_elems(half_bytes: usize, elem_bytes: usize) -> usize {
    let per_vec = elems_per_vec(elem_bytes);
    match half_bytes.checked_div(VEC_BYTES + 4 * per_vec) {
        Some(vecs) => vecs * per_vec,
        None => 0,
    }
}

/// Sign bit of every element of a 32-bit word of `elem_bytes`-byte
/// elements (2: two lanes, else one).
pub const fn lamport_sign_bits(elem_bytes: usize) -> u32 {
    if elem_bytes == 2 {
        0x8000_8000
    } else {
        0x8000_0000
    }
}

/// The Lamport encoding of one 32-bit word (NOTE \[lamport\] in
/// `lamport.rs`): every -0.0 lane becomes +0.0, then the sign bits flip,
/// so no encoded word is zero (zero means "not arrived").
pub const fn lamport_encode_word(word: u32, elem_bytes: usize) -> u32 {
    let mut w = word;
    if elem_bytes == 2 {
        if w & 0xffff == 0x8000 {
            w &= 0xffff_0000;
        }
        if w >> 16 == 0x8000 {
            w &= 0xffff;
        }
    } else if w == 0x8000_0000 {
        w = 0;
    }
    w ^ lamport_sign_bits(elem_bytes)
}

/// The inverse of [`lamport_encode_word`] up to the sign of zeros.
pub const fn lamport_decode_word(word: u32, elem_bytes: usize) -> u32 {
    word ^ lamport_sign_bits(elem_bytes)
}

/// The most 16-byte vectors one call of the push form takes (16 GiB): its
/// index arithmetic is in u32, which keeps its kernels within their
/// registers (NOTE [push all-reduce] in `push.rs`), and every index it
/// forms stays below `PUSH_MAX_VECS + world x chunk_vecs` (one tile past
/// the message at most), far from `u32::MAX` given
/// [`PUSH_MAX_TILE_VECS`]. The host hands larger messages to the two-shot
/// (`algo::decide_all_reduce`).
pub const PUSH_MAX_VECS: u32 = 1 << 30;

/// The most vectors of one tile of the push form (`world x chunk_vecs`):
/// with [`PUSH_MAX_VECS`], every index stays below 2^31.
pub const PUSH_MAX_TILE_VECS: u32 = 1 << 30;

/// Tiles of the push form over `vecs` vectors: a tile is `world` chunks of
/// `chunk_vecs` vectors, one per owner (zero when a chunk is empty).
pub const fn push_tiles(vecs: u32, world: u32, chunk_vecs: u32) -> u32 {
    match world.saturating_mul(chunk_vecs) {
        0 => 0,
        per_tile => vecs.div_ceil(per_tile),
    }
}

/// Tiles that block `block` of `blocks` runs: tiles go to blocks round
/// robin (block `b` takes tiles `b, b + blocks, ...`), so every block's
/// count differs from another's by one at most.
pub const fn push_block_tiles(tiles: u32, blocks: u32, block: u32) -> u32 {
    if blocks == 0 || block >= tiles {
        0
    } else {
        (tiles - block).div_ceil(blocks)
    }
}

/// The message vectors `[start, end)` of owner `owner`'s chunk in block
/// `block`'s tile `t` (its `t`-th, global tile `t x blocks + block`), cut
/// at `vecs` (empty past the message). Every rank computes the same
/// ranges from the same call.
pub const fn push_chunk(
    vecs: u32,
    world: u32,
    chunk_vecs: u32,
    blocks: u32,
    block: u32,
    t: u32,
    owner: u32,
) -> (u32, u32) {
    let start = ((t * blocks + block) * world + owner) * chunk_vecs;
    let end = start + chunk_vecs;
    (
        if start < vecs { start } else { vecs },
        if end < vecs { end } else { vecs },
    )
}

/// Where rank `src`'s chunks sit among the `world - 1` peers' rings of
/// rank `me` (`src != me`): the peers in rank order, `me` left out.
pub const fn push_peer_index(src: u32, me: u32) -> u32 {
    if src < me { src } else { src - 1 }
}

/// The two rings of the push form in a symmetric buffer: the
/// reduce-scatter ring (chunks peers push for this rank to reduce), the
/// first of the two.
pub const PUSH_RING_RS: u32 = 0;
/// The all-gather ring (reduced chunks owners push to this rank), after
/// the reduce-scatter ring.
pub const PUSH_RING_AG: u32 = 1;

/// Bytes of both rings of the push form: per ring, block and peer, `slots`
/// slots of `chunk_vecs` vectors (NOTE [push all-reduce] in `push.rs`).
pub const fn push_ring_bytes(blocks: u32, world: u32, slots: u32, chunk_vecs: u32) -> u64 {
    2 * blocks as u64
        * world.saturating_sub(1) as u64
        * slots as u64
        * chunk_vecs as u64
        * VEC_BYTES as u64
}

/// Byte offset in a rank's symmetric buffer of slot `slot` of the ring
/// `ring` ([`PUSH_RING_RS`] or [`PUSH_RING_AG`]) for block `block` and
/// the peer at `peer_index` ([`push_peer_index`]): ring, then block, then
/// peer, then slot, each slot `chunk_vecs` vectors. Every rank lays its
/// buffer out alike.
#[allow(clippy::too_many_arguments)]
pub const fn push_slot_offset(
    ring: u32,
    blocks: u32,
    world: u32,
    slots: u32,
    chunk_vecs: u32,
    block: u32,
    peer_index: u32,
    slot: u32,
) -> u64 {
    let peers = world.saturating_sub(1) as u64;
    let slot_bytes = chunk_vecs as u64 * VEC_BYTES as u64;
    let index = ((ring as u64 * blocks as u64 + block as u64) * peers + peer_index as u64)
        * slots as u64
        + slot as u64;
    index * slot_bytes
}

/// Lookahead of the push form with `slots` slots per ring: a block pushes
/// its reduce-scatter chunks this many tiles ahead of its reductions, and
/// copies the all-gather chunks out this many tiles behind (NOTE [push
/// all-reduce]: every wait is then on a flag raised that many tiles
/// earlier, and every slot is freed `slots - lookahead` tiles before it is
/// needed again). `requested` where it lies in `1..slots` (the launch
/// shape's `lookahead`), else the default: 1 below 4 slots, `slots / 2`
/// from 4 on. Always at least 1 and at most `slots - 1` (for `slots >=
/// 2`), the range NOTE [push all-reduce] proves free of deadlock.
pub const fn push_lookahead(slots: u32, requested: u32) -> u32 {
    if requested >= 1 && requested < slots {
        requested
    } else if slots < 4 {
        1
    } else {
        slots / 2
    }
}

/// Whether a cumulative counter `value` has reached `base + need`, where
/// `need` may be zero or negative (always reached): counters only grow,
/// by at most a ring of slots ahead of what a waiter needs, so the
/// wrapping difference is exact.
pub const fn push_counter_reached(value: u32, base: u32, need: i32) -> bool {
    need <= 0 || (value.wrapping_sub(base) as i32) >= need
}

/// `ceil(a / b)`, zero when `b == 0`.
pub const fn div_ceil(a: usize, b: usize) -> usize {
    if b == 0 { 0 } else { a.div_ceil(b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_tail_split() {
        assert_eq!(split_vec_tail(0, 2), (0, 0));
        assert_eq!(split_vec_tail(7, 2), (0, 0));
        assert_eq!(split_vec_tail(8, 2), (1, 8));
        assert_eq!(split_vec_tail(4095, 2), (511, 4088));
        assert_eq!(split_vec_tail(4095, 4), (1023, 4092));
        assert_eq!(split_vec_tail(5, 0), (0, 0));
    }

    #[test]
    fn alignment() {
        assert!(all_vec_aligned(&[0, 16, 4096]));
        assert!(!all_vec_aligned(&[0, 16, 4098]));
        assert!(all_vec_aligned(&[]));
    }

    #[test]
    fn even_split_covers_everything_once() {
        for total in [0usize, 1, 7, 8, 4095, 4096, 1 << 20] {
            for parts in 1..=8 {
                let mut next = 0;
                for part in 0..parts {
                    let (s, e) = even_split(total, parts, part);
                    assert_eq!(s, next, "total {total} parts {parts} part {part}");
                    assert!(e - s <= total / parts + 1);
                    next = e;
                }
                assert_eq!(next, total);
            }
        }
        assert_eq!(even_split(10, 0, 0), (0, 0));
        assert_eq!(even_split(10, 2, 2), (0, 0));
    }

    #[test]
    fn hcm_chunks_fit_their_half() {
        for half in [0usize, 16, 47, 48, 4096, 5 << 20] {
            for bytes in [2usize, 4] {
                let elems = hcm_chunk_elems(half, bytes);
                assert_eq!(elems % elems_per_vec(bytes), 0);
                // Input vectors plus 4 bytes of partial sum per element.
                assert!(elems * bytes + elems * 4 <= half, "{half} {bytes}");
                // And no room left for one more vector of either.
                assert!((elems + elems_per_vec(bytes)) * (bytes + 4) > half);
            }
        }
        assert_eq!(hcm_chunk_elems(48, 2), 8);
        assert_eq!(hcm_chunk_elems(32, 4), 4);
        assert_eq!(hcm_chunk_elems(100, 0), 0);
    }

    #[test]
    fn lamport_words_are_never_zero_and_round_trip_up_to_zero_signs() {
        // Every 16-bit lane value, paired with a few others; every f32
        // pattern class around zero and the sign bit.
        let lanes16: Vec<u32> = (0..=0xffffu32).collect();
        for &lo in &lanes16 {
            for hi in [0u32, 0x8000, 0x3c00, 0xbc00, 0x7fff, 0xffff, lo] {
                let w = lo | (hi << 16);
                let e = lamport_encode_word(w, 2);
                assert_ne!(e, 0, "{w:#x}");
                let canon = |l: u32| if l == 0x8000 { 0 } else { l };
                assert_eq!(
                    lamport_decode_word(e, 2),
                    canon(lo) | (canon(hi) << 16),
                    "{w:#x}"
                );
            }
        }
        for w in [
            0u32,
            0x8000_0000,
            1,
            0x8000_0001,
            0x3f80_0000,
            0xffff_ffff,
            0x7fc0_0000,
        ] {
            let e = lamport_encode_word(w, 4);
            assert_ne!(e, 0, "{w:#x}");
            let want = if w == 0x8000_0000 { 0 } else { w };
            assert_eq!(lamport_decode_word(e, 4), want);
        }
        // What the Lamport two-shot owner keeps for its own shard must be
        // what the peers decode: the canonical word, never -0.0.
        assert_eq!(
            lamport_decode_word(lamport_encode_word(0x8000_8000, 2), 2),
            0
        );
    }

    #[test]
    fn push_chunks_cover_the_message_once_in_block_order() {
        for world in 2..=8u32 {
            for chunk in [1u32, 3, 640, 4096] {
                for blocks in [1u32, 3, 32] {
                    for vecs in [1u32, 7, 511, 4096, 1 << 20, (1 << 20) + 3] {
                        let tiles = push_tiles(vecs, world, chunk);
                        assert!(tiles >= 1 && (tiles - 1) * world * chunk < vecs);
                        // Every vector once: walk global tiles in order,
                        // each from the block that owns it.
                        let mut next = 0;
                        let mut counted = 0;
                        for g in 0..tiles {
                            let (block, t) = (g % blocks, g / blocks);
                            assert!(t < push_block_tiles(tiles, blocks, block));
                            for owner in 0..world {
                                let (s, e) =
                                    push_chunk(vecs, world, chunk, blocks, block, t, owner);
                                assert!(s <= e && e - s <= chunk);
                                if s < vecs {
                                    assert_eq!(s, next, "{world} {chunk} {blocks} {vecs}");
                                    next = e;
                                } else {
                                    assert_eq!(e, s);
                                }
                            }
                        }
                        assert_eq!(next, vecs);
                        for block in 0..blocks {
                            let n = push_block_tiles(tiles, blocks, block);
                            counted += n;
                            // Past a block's last tile: nothing.
                            assert_eq!(push_chunk(vecs, world, chunk, blocks, block, n, 0).0, vecs);
                        }
                        assert_eq!(counted, tiles);
                    }
                }
            }
        }
        assert_eq!(push_tiles(10, 2, 0), 0);
        assert_eq!(push_block_tiles(5, 0, 0), 0);
        assert_eq!(push_block_tiles(5, 8, 5), 0);
        assert_eq!(push_block_tiles(5, 8, 4), 1);
        assert_eq!(push_block_tiles(65, 32, 0), 3);
        assert_eq!(push_block_tiles(65, 32, 1), 2);
    }

    #[test]
    fn push_rings_never_overlap_and_fit_their_bytes() {
        for (blocks, world, slots, chunk) in
            [(1u32, 2u32, 2u32, 1u32), (3, 5, 4, 7), (32, 8, 8, 640)]
        {
            let total = push_ring_bytes(blocks, world, slots, chunk);
            let mut spans: Vec<(u64, u64)> = Vec::new();
            for ring in [PUSH_RING_RS, PUSH_RING_AG] {
                for block in 0..blocks {
                    for peer in 0..world - 1 {
                        for slot in 0..slots {
                            let at = push_slot_offset(
                                ring, blocks, world, slots, chunk, block, peer, slot,
                            );
                            let end = at + chunk as u64 * VEC_BYTES as u64;
                            assert!(at.is_multiple_of(VEC_BYTES as u64) && end <= total);
                            spans.push((at, end));
                        }
                    }
                }
            }
            spans.sort_unstable();
            assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
            assert_eq!(spans.len() as u64 * chunk as u64 * VEC_BYTES as u64, total);
        }
        // Peer indices: every rank but `me`, densely.
        for world in 2..=8u32 {
            for me in 0..world {
                let idx: Vec<u32> = (0..world)
                    .filter(|&s| s != me)
                    .map(|s| push_peer_index(s, me))
                    .collect();
                assert_eq!(idx, (0..world - 1).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn push_lookahead_leaves_slack_both_ways() {
        for slots in 2..=16u32 {
            for requested in 0..=20u32 {
                let d = push_lookahead(slots, requested);
                assert!(d >= 1 && d < slots, "{slots} {requested}");
                if (1..slots).contains(&requested) {
                    assert_eq!(d, requested);
                }
            }
        }
        assert_eq!(push_lookahead(2, 0), 1);
        assert_eq!(push_lookahead(3, 0), 1);
        assert_eq!(push_lookahead(3, 2), 2);
        assert_eq!(push_lookahead(3, 3), 1);
        assert_eq!(push_lookahead(4, 0), 2);
        assert_eq!(push_lookahead(8, 0), 4);
    }

    #[test]
    fn push_counters_compare_across_the_wrap() {
        assert!(push_counter_reached(0, 0, 0));
        assert!(push_counter_reached(0, 5, -3));
        assert!(!push_counter_reached(5, 5, 1));
        assert!(push_counter_reached(6, 5, 1));
        assert!(push_counter_reached(2, u32::MAX - 1, 4));
        assert!(!push_counter_reached(1, u32::MAX - 1, 4));
        // A counter a few tiles behind the base (the peer's last credits
        // of the previous call still in flight) reads as not reached.
        assert!(!push_counter_reached(3, 5, 1));
    }

    #[test]
    fn push_indices_stay_in_u32_up_to_the_largest_message() {
        let vecs = PUSH_MAX_VECS;
        for (world, chunk, blocks) in [
            (2u32, 1u32, 1u32),
            (8, 1 << 20, 64),
            (2, 1 << 16, 32),
            (8, PUSH_MAX_TILE_VECS / 8, 64),
        ] {
            let tiles = push_tiles(vecs, world, chunk);
            let last_block = (tiles - 1) % blocks;
            let n = push_block_tiles(tiles, blocks, last_block);
            let end = ((n as u64 - 1) * blocks as u64 + last_block as u64 + 1)
                * world as u64
                * chunk as u64;
            assert!(end < (1u64 << 31) + vecs as u64, "{world} {chunk} {blocks}");
            let (s, e) = push_chunk(vecs, world, chunk, blocks, last_block, n - 1, world - 1);
            assert!(s <= e && e == vecs);
        }
    }

    #[test]
    fn ceil_division() {
        assert_eq!(div_ceil(0, 3), 0);
        assert_eq!(div_ceil(7, 3), 3);
        assert_eq!(div_ceil(7, 0), 0);
    }
}
