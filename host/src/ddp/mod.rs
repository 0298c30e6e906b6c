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
//!
//! # Example
//!
//! Parameters synced from rank 0, then one step's gradients averaged
//! through buckets of at most 1 MiB (`examples/01_data_parallel.rs` is a
//! whole training loop):
//!
//! ```no_run
//! # use intranode::{Communicator, dist_env::DistEnv};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let env = DistEnv::from_env()?;
//! # let store = intranode::store::connect_env(&env)?;
//! # let stream = intranode::gpu::context(env.local_rank)?.new_stream()?;
//! # let comm = Communicator::new(stream.clone(), store, env.rank, env.world_size)?;
//! use intranode::ElemType;
//! use intranode::ddp::{
//!     AllReduceHook, CommHook, DeviceBuffer, GradBucket, PlanItem, broadcast_coalesced,
//!     plan_buckets,
//! };
//!
//! let shapes = vec![vec![512, 256], vec![256], vec![10, 512]];
//! let numel = |s: &Vec<usize>| s.iter().product::<usize>();
//! let mut params = shapes
//!     .iter()
//!     .map(|s| stream.alloc_zeros::<f32>(numel(s)))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let mut list: Vec<&mut dyn DeviceBuffer> =
//!     params.iter_mut().map(|p| p as &mut dyn DeviceBuffer).collect();
//! broadcast_coalesced(&comm, &mut list, 1 << 20, 0)?; // rank 0's values everywhere
//!
//! let items: Vec<PlanItem> = shapes.iter().map(|s| PlanItem::new(ElemType::F32, numel(s))).collect();
//! let mut buckets = GradBucket::from_plans(&plan_buckets(&items, 1 << 20)?, &shapes, &stream)?;
//! let mut grads = shapes
//!     .iter()
//!     .map(|s| stream.alloc_zeros::<f32>(numel(s)))
//!     .collect::<Result<Vec<_>, _>>()?;
//! // ... the backward pass writes `grads` ...
//! let mut hook = AllReduceHook::new(&comm); // or CompressHook::bf16(&comm)?
//! let refs: Vec<&dyn DeviceBuffer> = grads.iter().map(|g| g as &dyn DeviceBuffer).collect();
//! for bucket in buckets.iter_mut() {
//!     bucket.pack(&refs, &stream)?;
//!     let future = hook.run_hook(bucket)?;
//!     hook.parse_hook_result(future)?;
//! }
//! let mut refs: Vec<&mut dyn DeviceBuffer> =
//!     grads.iter_mut().map(|g| g as &mut dyn DeviceBuffer).collect();
//! for bucket in &buckets {
//!     bucket.unpack(&mut refs, &stream)?; // the averaged gradients
//! }
//! # Ok(())
//! # }
//! ```

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
