//! Bucket planning: which piece of which buffer goes where in which flat
//! bucket. Pure arithmetic over element types and lengths, so every rank
//! computes the same plan from the same list and the CPU tests cover it.
//!
//! Rules (c10d's `take_tensors` / `compute_bucket_assignment_by_size`,
//! with one difference):
//! - one element type per bucket; each type fills its own open bucket, in
//!   the order of the list, and a bucket closes when the next item of its
//!   type does not fit;
//! - every entry starts at a multiple of [`BUCKET_ALIGN_BYTES`] inside its
//!   bucket, so each variable's slice of a flat buffer takes the kernels'
//!   16-byte vector path;
//! - a bucket never holds more than the limit, padding included. c10d
//!   lets a tensor larger than the limit make a bucket of its own; here it
//!   is cut into pieces of at most the limit (rounded down to the
//!   alignment), each in a bucket of its own, so the limit bounds every
//!   bucket (and every piece starts 16-byte aligned inside its buffer too);
//! - empty items take no space and appear in no bucket;
//! - buckets are numbered in the order they close; the open buckets left
//!   at the end close in the order bf16, f16, f32.

use crate::error::{Error, Result};
use crate::types::ElemType;

/// Alignment of every entry inside a bucket, in bytes: the kernels' vector
/// width.
pub const BUCKET_ALIGN_BYTES: usize = intranode_kernels_gpu::index::VEC_BYTES;

/// One buffer to place: its element type and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlanItem {
    /// Its element type (items of one type share buckets).
    pub elem: ElemType,
    /// Its length in elements.
    pub elems: usize,
}

impl PlanItem {
    /// An item of `elems` elements of type `elem`.
    pub const fn new(elem: ElemType, elems: usize) -> Self {
        PlanItem { elem, elems }
    }
}

/// A contiguous piece of one item, placed in a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketEntry {
    /// Index of the item in the planned list.
    pub item: usize,
    /// Where the piece starts inside its item, in elements (0 unless the
    /// item was larger than the limit).
    pub item_offset_elems: usize,
    /// Length of the piece, in elements (never 0).
    pub elems: usize,
    /// Where the piece starts inside the bucket, in elements (a multiple
    /// of [`BUCKET_ALIGN_BYTES`] in bytes).
    pub offset_elems: usize,
}

impl BucketEntry {
    /// One past the piece's last element inside the bucket.
    pub const fn end_elems(&self) -> usize {
        self.offset_elems + self.elems
    }
}

/// One flat bucket: its element type, its entries in increasing offset
/// order, and its length (the end of its last entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPlan {
    /// The element type of every entry.
    pub elem: ElemType,
    /// The pieces placed in the bucket, in increasing offset order.
    pub entries: Vec<BucketEntry>,
    /// The bucket's length in elements (the end of its last entry).
    pub elems: usize,
}

impl BucketPlan {
    /// Bytes of the flat bucket (padding between entries included).
    pub const fn bytes(&self) -> usize {
        self.elems * self.elem.bytes()
    }
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on
/// overflow.
const fn align_up(x: usize, align: usize) -> Option<usize> {
    match x.checked_add(align - 1) {
        Some(v) => Some(v & !(align - 1)),
        None => None,
    }
}

/// Index of an element type in the open-bucket table (and the order the
/// last open buckets close in).
const fn type_slot(elem: ElemType) -> usize {
    match elem {
        ElemType::Bf16 => 0,
        ElemType::F16 => 1,
        ElemType::F32 => 2,
    }
}

/// Places `items` into buckets of at most `limit_bytes` bytes each (see the
/// module docs for the rules). Fails when the limit is below
/// [`BUCKET_ALIGN_BYTES`] or an item's byte size overflows.
pub fn plan_buckets(items: &[PlanItem], limit_bytes: usize) -> Result<Vec<BucketPlan>> {
    let cap_bytes = limit_bytes / BUCKET_ALIGN_BYTES * BUCKET_ALIGN_BYTES;
    if cap_bytes == 0 {
        return Err(Error::InvalidArgument(format!(
            "bucket limit of {limit_bytes} bytes is below the {BUCKET_ALIGN_BYTES}-byte alignment of bucket entries"
        )));
    }
    let mut open: [Option<BucketPlan>; 3] = [None, None, None];
    let mut done = Vec::new();
    for (item, it) in items.iter().enumerate() {
        if it.elems == 0 {
            continue;
        }
        let elem_bytes = it.elem.bytes();
        let too_big = || {
            Error::InvalidArgument(format!(
                "buffer {item} of {} elements of {elem_bytes} bytes is too large to address",
                it.elems
            ))
        };
        let item_bytes = it.elems.checked_mul(elem_bytes).ok_or_else(too_big)?;
        let slot = &mut open[type_slot(it.elem)];
        if let Some(bucket) = slot {
            let offset =
                align_up(bucket.elems, BUCKET_ALIGN_BYTES / elem_bytes).ok_or_else(too_big)?;
            // `offset * elem_bytes` is at most the limit plus the
            // alignment: the bucket's end is inside the limit.
            let fits = (offset * elem_bytes)
                .checked_add(item_bytes)
                .is_some_and(|end| end <= limit_bytes);
            if fits {
                bucket.entries.push(BucketEntry {
                    item,
                    item_offset_elems: 0,
                    elems: it.elems,
                    offset_elems: offset,
                });
                bucket.elems = offset + it.elems;
                continue;
            }
            done.extend(slot.take());
        }
        // A fresh bucket: full pieces of an oversized item close at once;
        // the rest (the whole item, usually) stays open for what follows.
        let piece_elems = cap_bytes / elem_bytes;
        let mut start = 0;
        while it.elems - start > piece_elems {
            done.push(BucketPlan {
                elem: it.elem,
                entries: vec![BucketEntry {
                    item,
                    item_offset_elems: start,
                    elems: piece_elems,
                    offset_elems: 0,
                }],
                elems: piece_elems,
            });
            start += piece_elems;
        }
        *slot = Some(BucketPlan {
            elem: it.elem,
            entries: vec![BucketEntry {
                item,
                item_offset_elems: start,
                elems: it.elems - start,
                offset_elems: 0,
            }],
            elems: it.elems - start,
        });
    }
    done.extend(open.into_iter().flatten());
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const BF16: ElemType = ElemType::Bf16;
    const F16: ElemType = ElemType::F16;
    const F32: ElemType = ElemType::F32;

    /// Every rule of the module docs, on one plan.
    fn check_plan(items: &[PlanItem], limit_bytes: usize, plan: &[BucketPlan]) {
        let mut covered = vec![0usize; items.len()];
        for (b, bucket) in plan.iter().enumerate() {
            assert!(!bucket.entries.is_empty(), "bucket {b} is empty");
            assert!(
                bucket.bytes() <= limit_bytes,
                "bucket {b} holds {} bytes, over the limit {limit_bytes}",
                bucket.bytes()
            );
            let mut end = 0;
            for e in &bucket.entries {
                assert_eq!(items[e.item].elem, bucket.elem, "bucket {b} mixes types");
                assert!(e.elems > 0, "bucket {b} has an empty entry");
                assert_eq!(
                    (e.offset_elems * bucket.elem.bytes()) % BUCKET_ALIGN_BYTES,
                    0,
                    "bucket {b}: entry at {} elements is misaligned",
                    e.offset_elems
                );
                assert!(e.offset_elems >= end, "bucket {b}: entries overlap");
                end = e.end_elems();
                // Pieces of one item come in order and without gaps.
                assert_eq!(
                    e.item_offset_elems, covered[e.item],
                    "item {} pieces out of order",
                    e.item
                );
                covered[e.item] += e.elems;
            }
            assert_eq!(bucket.elems, end, "bucket {b}'s length is not its last end");
        }
        for (i, it) in items.iter().enumerate() {
            assert_eq!(
                covered[i], it.elems,
                "item {i} covered {} of {}",
                covered[i], it.elems
            );
        }
    }

    fn plan_ok(items: &[PlanItem], limit_bytes: usize) -> Vec<BucketPlan> {
        let plan = plan_buckets(items, limit_bytes).unwrap();
        check_plan(items, limit_bytes, &plan);
        plan
    }

    #[test]
    fn empty_lists_and_empty_items_make_no_buckets() {
        assert!(plan_ok(&[], 1024).is_empty());
        let empties = [PlanItem::new(F32, 0), PlanItem::new(BF16, 0)];
        assert!(plan_ok(&empties, 1024).is_empty());
        let plan = plan_ok(
            &[
                PlanItem::new(F32, 0),
                PlanItem::new(F32, 3),
                PlanItem::new(F32, 0),
            ],
            1024,
        );
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].entries.len(), 1);
        assert_eq!(plan[0].entries[0].item, 1);
    }

    #[test]
    fn one_element_buffers() {
        let plan = plan_ok(&[PlanItem::new(F16, 1)], 16);
        assert_eq!(
            plan,
            [BucketPlan {
                elem: F16,
                entries: vec![BucketEntry {
                    item: 0,
                    item_offset_elems: 0,
                    elems: 1,
                    offset_elems: 0
                }],
                elems: 1
            }]
        );
        assert_eq!(plan[0].bytes(), 2);
        // Two one-element f32 buffers need 16 + 4 bytes: a 16-byte limit
        // cannot hold both, a 20-byte one can.
        let two = [PlanItem::new(F32, 1), PlanItem::new(F32, 1)];
        assert_eq!(plan_ok(&two, 16).len(), 2);
        let plan = plan_ok(&two, 20);
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].entries[1].offset_elems, 4);
        assert_eq!(plan[0].bytes(), 20);
    }

    #[test]
    fn entries_start_on_16_bytes() {
        let items = [
            PlanItem::new(BF16, 3),
            PlanItem::new(BF16, 5),
            PlanItem::new(BF16, 8),
            PlanItem::new(BF16, 1),
        ];
        let plan = plan_ok(&items, 1 << 20);
        assert_eq!(plan.len(), 1);
        let offsets: Vec<usize> = plan[0].entries.iter().map(|e| e.offset_elems).collect();
        assert_eq!(offsets, [0, 8, 16, 24]);
        assert_eq!(plan[0].elems, 25);
    }

    #[test]
    fn one_type_per_bucket_in_closing_order() {
        let items = [
            PlanItem::new(F32, 4),  // 16 bytes
            PlanItem::new(BF16, 8), // 16 bytes
            PlanItem::new(F32, 4),  // fills f32 bucket 0 to 32 bytes
            PlanItem::new(F32, 1),  // does not fit: f32 bucket closes
            PlanItem::new(F16, 2),
        ];
        let plan = plan_ok(&items, 32);
        let shape: Vec<(ElemType, Vec<usize>)> = plan
            .iter()
            .map(|b| (b.elem, b.entries.iter().map(|e| e.item).collect()))
            .collect();
        assert_eq!(
            shape,
            [
                (F32, vec![0, 2]),
                (BF16, vec![1]),
                (F16, vec![4]),
                (F32, vec![3]),
            ]
        );
    }

    #[test]
    fn oversized_items_are_cut_at_the_aligned_limit() {
        // 100-byte limit: pieces of 96 bytes (24 f32).
        let plan = plan_ok(&[PlanItem::new(F32, 50), PlanItem::new(F32, 3)], 100);
        let pieces: Vec<(usize, usize, usize)> = plan
            .iter()
            .flat_map(|b| {
                b.entries
                    .iter()
                    .map(|e| (e.item, e.item_offset_elems, e.elems))
            })
            .collect();
        assert_eq!(pieces, [(0, 0, 24), (0, 24, 24), (0, 48, 2), (1, 0, 3)]);
        // The tail piece stays open and takes the next item.
        assert_eq!(plan.len(), 3);
        assert_eq!(plan[2].entries[1].offset_elems, 4);
        // An item of exactly the limit is one piece.
        let plan = plan_ok(&[PlanItem::new(BF16, 48)], 96);
        assert_eq!(plan.len(), 1);
    }

    #[test]
    fn bad_limits_and_sizes_are_errors() {
        for limit in [0usize, 1, 15] {
            let err = plan_buckets(&[PlanItem::new(F32, 1)], limit).unwrap_err();
            assert!(err.to_string().contains("below the 16-byte"), "{err}");
        }
        let err = plan_buckets(&[PlanItem::new(F32, usize::MAX / 2)], 1024).unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
    }

    #[test]
    fn random_lists_keep_every_rule() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for case in 0..2000 {
            let n = rng.random_range(0..40);
            let items: Vec<PlanItem> = (0..n)
                .map(|_| {
                    let elem = ElemType::ALL[rng.random_range(0..3)];
                    let elems = match rng.random_range(0..4) {
                        0 => 0,
                        1 => rng.random_range(1..9),
                        2 => rng.random_range(1..300),
                        _ => rng.random_range(1..5000),
                    };
                    PlanItem::new(elem, elems)
                })
                .collect();
            let limit = rng.random_range(16..4096);
            let plan = plan_buckets(&items, limit).unwrap_or_else(|e| panic!("case {case}: {e}"));
            check_plan(&items, limit, &plan);
            // Same input, same plan: every rank agrees.
            assert_eq!(plan, plan_buckets(&items, limit).unwrap());
        }
    }
}
