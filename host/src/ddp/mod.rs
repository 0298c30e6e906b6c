//! Data-parallel training support (seed comm.hpp): parameters synced by
//! [`broadcast_coalesced`], gradients reduced bucket by bucket through a
//! [`CommHook`].
//!
//! - [`plan`]: pure bucket arithmetic ([`plan_buckets`]): which piece of
//!   which buffer lies where in which flat bucket, one element type per
//!   bucket, every entry 16-byte aligned, no bucket over its limit.
//! - [`broadcast_coalesced`]: mixed bf16/f16/f32 device buffers broadcast
//!   from one rank through flat buckets, over symmetric memory or NCCL.
//! - [`GradBucket`]: a flat gradient buffer and its variables (offsets,
//!   lengths, shapes, parameter ids, optional sparse indices), with
//!   `pack`/`unpack` from and to the gradients.
//! - [`CommHook`] and the built-ins [`AllReduceHook`], [`CompressHook`]
//!   (bf16 or f16 on the wire) and [`StatefulHook`] (user function and
//!   state).
//!
//! Everything is enqueued on the communicator's stream: no host
//! synchronization, as in the rest of the crate.

mod bucket;
mod buffer;
mod coalesced;
mod hooks;
pub mod plan;

pub use bucket::GradBucket;
pub use buffer::{DeviceBuffer, FlatBuffer};
pub use coalesced::{broadcast_coalesced, broadcast_coalesced_with};
pub use hooks::{AllReduceHook, CommHook, CompressHook, HookFuture, StatefulHook, all_reduce_flat};
pub use plan::{BUCKET_ALIGN_BYTES, BucketEntry, BucketPlan, PlanItem, plan_buckets};
