//! Device primitives: what the collectives are made of, one floor below
//! them. The collectives (`all_reduce`, `lamport`, `push`, `broadcast`,
//! `fused_norm`, `norm`) import from here and from the floors under it
//! ([`crate::sync`], [`crate::packed`], [`crate::ptx`], [`crate::layout`],
//! [`crate::index`]); nothing here imports a collective, and no collective
//! imports another's helpers (the all-reduce entry points, which name
//! every all-reduce form, are the one downward import between them).
//!
//! - [`grid`]: a thread's place in the grid-stride walk, the 4-in-flight
//!   strided copy, and [`unroll!`], the one way the kernels write a loop
//!   out with constant indices.
//! - [`reduce`]: the element-wise combine, the rank-order accumulation
//!   every form uses (so ranks agree bitwise) and the loads of one vector
//!   from every rank, all in flight.
//! - [`slots`]: the Lamport buffers (NOTE [lamport] in `lamport.rs`): the
//!   call's set-up (epoch, buffer), the encoding, the push of a message
//!   into a slot on every rank, the bounded wait for a vector of every
//!   slot, and its zeroing.
//! - [`row`]: the RMSNorm's per-vector math and its sums over a warp or a
//!   block, shared by the fused and the unfused norm.
//!
//! The peer barriers and flags (typed by [`crate::sync::Peers`]) are
//! [`crate::sync`], the vector loads and stores of caller buffers
//! [`crate::packed`]: the floors below this one.

pub mod grid;
pub mod reduce;
pub mod row;
pub mod slots;

pub(crate) use grid::unroll;
