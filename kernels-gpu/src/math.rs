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

/// The Lamport encoding of one 32-bit word (NOTE [lamport] in
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

/// The most 16-byte vectors one call of the bandwidth form takes (16 GiB):
/// its index arithmetic is in u32, which keeps its kernels within their
/// registers (NOTE [bandwidth all-reduce] in `bandwidth.rs`), and every
/// index it forms stays below `2 x BANDWIDTH_MAX_VECS + blocks x world`
/// (a round past the message at most), far from `u32::MAX`. The host hands
/// larger messages to the two-shot (`algo::decide_all_reduce`).
pub const BANDWIDTH_MAX_VECS: u32 = 1 << 30;

/// Vectors per slot of the bandwidth form (NOTE [bandwidth all-reduce] in
/// `bandwidth.rs`) for a message of `vecs` 16-byte vectors: a round lays
/// `blocks x world` slots out in a half of `half_bytes`, so a slot holds
/// at most `half_bytes / 16 / (blocks x world)` vectors; a message that
/// needs fewer is spread over every block's slots in one round. Zero when
/// the half cannot hold one vector per slot (the host refuses that).
pub const fn bandwidth_slot_vecs(half_bytes: u64, blocks: u32, world: u32, vecs: u32) -> u32 {
    let slots = blocks.saturating_mul(world);
    let most = match (half_bytes / VEC_BYTES as u64).checked_div(slots as u64) {
        Some(n) => n,
        None => 0,
    };
    let wanted = match slots {
        0 => 0,
        _ => vecs.div_ceil(slots),
    };
    if (wanted as u64) < most {
        wanted
    } else {
        most as u32
    }
}

/// Rounds of the bandwidth form over `vecs` vectors: each round covers
/// `blocks x world x slot_vecs` of them (zero when that is zero).
pub const fn bandwidth_rounds(vecs: u32, blocks: u32, world: u32, slot_vecs: u32) -> u32 {
    match blocks.saturating_mul(world).saturating_mul(slot_vecs) {
        0 => 0,
        per_round => vecs.div_ceil(per_round),
    }
}

/// The message vectors `[start, end)` that rank `owner` reduces for block
/// `block` in round `round` of the bandwidth form: round by round, block
/// by block, owner by owner, `slot_vecs` each, cut at `vecs` (empty past
/// the message). Every rank computes the same ranges from the same call.
/// For rounds below [`bandwidth_rounds`] and `vecs` at most
/// [`BANDWIDTH_MAX_VECS`], nothing overflows.
pub const fn bandwidth_shard(
    vecs: u32,
    blocks: u32,
    world: u32,
    slot_vecs: u32,
    round: u32,
    block: u32,
    owner: u32,
) -> (u32, u32) {
    let start = ((round * blocks + block) * world + owner) * slot_vecs;
    let end = start + slot_vecs;
    (
        if start < vecs { start } else { vecs },
        if end < vecs { end } else { vecs },
    )
}

/// Byte offset, in a rank's symmetric buffer, of slot `slot` of block
/// `block` in the half of `epoch` (halves of `half_bytes`): a block's
/// `world` slots lie side by side, the blocks one after another, each slot
/// `slot_vecs` vectors. Every rank lays its buffer out alike.
pub const fn bandwidth_slot_offset(
    half_bytes: u64,
    epoch: u32,
    block: u32,
    world: u32,
    slot: u32,
    slot_vecs: u32,
) -> u64 {
    (epoch & 1) as u64 * half_bytes
        + (block as u64 * world as u64 + slot as u64) * slot_vecs as u64 * VEC_BYTES as u64
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
    fn bandwidth_shards_cover_the_message_once_and_fit_the_half() {
        for half in [2048u64, 4096, 5 << 20] {
            for blocks in [1u32, 3, 32] {
                for world in 2..=8u32 {
                    if half / (VEC_BYTES as u64) < (blocks * world) as u64 {
                        assert_eq!(bandwidth_slot_vecs(half, blocks, world, 1), 0);
                        continue;
                    }
                    for vecs in [1u32, 7, 511, 4096, 1 << 20, (1 << 22) + 3] {
                        let l = bandwidth_slot_vecs(half, blocks, world, vecs);
                        assert!(l >= 1);
                        // A round's slots fit the half.
                        assert!((blocks * world * l) as u64 * VEC_BYTES as u64 <= half);
                        let rounds = bandwidth_rounds(vecs, blocks, world, l);
                        // A message that fits one round is spread over all
                        // blocks: no round more than needed.
                        assert!(rounds >= 1 && (rounds - 1) * blocks * world * l < vecs);
                        let mut next = 0;
                        for round in 0..rounds {
                            for block in 0..blocks {
                                for owner in 0..world {
                                    let (s, e) = bandwidth_shard(
                                        vecs, blocks, world, l, round, block, owner,
                                    );
                                    assert!(s <= e && e - s <= l);
                                    if s < vecs {
                                        assert_eq!(s, next, "{half} {blocks} {world} {vecs}");
                                        next = e;
                                    } else {
                                        assert_eq!(e, s);
                                    }
                                }
                            }
                        }
                        assert_eq!(next, vecs);
                        // Past the last round: nothing.
                        assert_eq!(
                            bandwidth_shard(vecs, blocks, world, l, rounds, 0, 0).0,
                            vecs
                        );
                    }
                }
            }
        }
        // Slots never overlap and stay inside their half.
        for (half, blocks, world, vecs) in
            [(2048u64, 3u32, 5u32, 1u32 << 20), (5 << 20, 32, 8, 1 << 30)]
        {
            let l = bandwidth_slot_vecs(half, blocks, world, vecs);
            for epoch in [6u32, 7] {
                let mut spans: Vec<(u64, u64)> = Vec::new();
                for block in 0..blocks {
                    for slot in 0..world {
                        let at = bandwidth_slot_offset(half, epoch, block, world, slot, l);
                        let end = at + l as u64 * VEC_BYTES as u64;
                        let half_start = (epoch & 1) as u64 * half;
                        assert!(at >= half_start && end <= half_start + half);
                        assert!(at.is_multiple_of(VEC_BYTES as u64));
                        spans.push((at, end));
                    }
                }
                spans.sort_unstable();
                assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
            }
        }
        assert_eq!(bandwidth_slot_vecs(4096, 0, 2, 10), 0);
        assert_eq!(bandwidth_rounds(10, 0, 2, 1), 0);
        assert_eq!(bandwidth_slot_vecs(5 << 20, 32, 2, 100), 2);
        assert_eq!(bandwidth_slot_vecs(5 << 20, 32, 2, 1 << 30), 5120);
        // A half larger than u32 vectors still gives a slot that fits u32.
        assert_eq!(bandwidth_slot_vecs(1 << 40, 1, 2, 1 << 30), 1 << 29);
    }

    #[test]
    fn bandwidth_indices_stay_in_u32_up_to_the_largest_message() {
        // The largest message, the smallest and the largest geometry: the
        // last round's last shard ends below u32::MAX (no overflow).
        let vecs = BANDWIDTH_MAX_VECS;
        for (half, blocks, world) in [
            (2048u64, 1u32, 2u32),
            (1 << 40, 32, 8),
            (5 << 20, 32, 8),
            (4096, 16, 8),
        ] {
            let l = bandwidth_slot_vecs(half, blocks, world, vecs);
            let rounds = bandwidth_rounds(vecs, blocks, world, l);
            let last = ((rounds as u64 * blocks as u64 - 1) * world as u64 + world as u64 - 1)
                * l as u64
                + l as u64;
            assert!(last < u32::MAX as u64, "{half} {blocks} {world}");
            let (s, e) = bandwidth_shard(vecs, blocks, world, l, rounds - 1, blocks - 1, world - 1);
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
