//! Parity with `cudarc::nccl::Comm`, proved at compile time: the macro
//! `every_method!` calls every method of `Comm` (and of the `Group` from
//! `Comm::group`), with the same argument expressions and a caller's `?`,
//! inferred and with cudarc's explicit type parameters
//! (`comm.all_reduce::<S, R, T>(..)`), and is expanded for each
//! `NcclType` with a device representation (f32, f64, f16, bf16, i8, u8,
//! i32, u32, i64, u64) once on a `cudarc::nccl::Comm` and once on an
//! `intranode::Communicator`; `generic_caller` makes the calls of a
//! program generic over `T: NcclType` (which covers cudarc's `char`,
//! a type no `CudaSlice` holds). If `Communicator` lacks a method, takes
//! other arguments or type parameters, or returns something `?` cannot
//! use, this file does not compile. The functions are never called: they would need NCCL, GPUs
//! and peers (the GPU checks live in `intranode-suite`); the one test
//! says so and only takes their addresses.
//!
//! What differs (NOTE [nccl parity] in `host/src/communicator/mod.rs`): the
//! `Ok` value (`Work` or `()` where cudarc gives an `NcclStatus` or `()`),
//! the error type, and construction (`Communicator::new` over a store).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use cudarc::nccl::result::NcclError;
use cudarc::nccl::{NcclType, ReduceOp};

/// What a caller's `?` converts into: the errors of both communicators.
#[derive(Debug)]
#[allow(dead_code)] // the fields are read by Debug only
enum CallerError {
    Driver(DriverError),
    Nccl(NcclError),
    Intranode(intranode::Error),
}

impl From<DriverError> for CallerError {
    fn from(e: DriverError) -> Self {
        CallerError::Driver(e)
    }
}

impl From<NcclError> for CallerError {
    fn from(e: NcclError) -> Self {
        CallerError::Nccl(e)
    }
}

impl From<intranode::Error> for CallerError {
    fn from(e: intranode::Error) -> Self {
        CallerError::Intranode(e)
    }
}

/// Every method of `cudarc::nccl::Comm` and `cudarc::nccl::Group`, called
/// as a user of cudarc calls them: slices and views, `Some` and `None`,
/// `i32` roots and peers (variables and literals), elements of `$t`.
macro_rules! every_method {
    ($comm:expr, $stream:expr, $t:ty) => {{
        let comm = $comm;
        let stream: &Arc<CudaStream> = $stream;
        let n = 1024usize;
        let rank: usize = comm.rank();
        let world: usize = comm.world_size();
        let root: i32 = 0;
        let peer: i32 = ((rank + 1) % world) as i32;
        let op = ReduceOp::Sum;

        // What the communicator is bound to (`Arc<CudaStream>`, owned).
        let _stream: Arc<CudaStream> = comm.stream();
        let _ctx = comm.context().clone();
        let _ordinal: usize = comm.ordinal();

        let send: CudaSlice<$t> = stream.alloc_zeros(n)?;
        let mut recv: CudaSlice<$t> = stream.alloc_zeros(n)?;
        let mut gathered: CudaSlice<$t> = stream.alloc_zeros(n * world)?;

        // Point to point.
        comm.send(&send, peer)?;
        comm.recv(&mut recv, peer)?;

        // Broadcast: the root passes its send buffer, the others may not.
        comm.broadcast(Some(&send), &mut recv, root)?;
        comm.broadcast(None::<&CudaSlice<$t>>, &mut recv, root)?;
        comm.broadcast_in_place(&mut recv, root)?;
        comm.broadcast_in_place(&mut recv, 0)?;

        // Gather and reductions.
        comm.all_gather(&send, &mut gathered)?;
        comm.all_reduce(&send, &mut recv, &op)?;
        comm.all_reduce(
            &send.slice(..n / 2),
            &mut recv.slice_mut(..n / 2),
            &ReduceOp::Max,
        )?;
        comm.all_reduce_in_place(&mut recv, &op)?;
        comm.reduce(&send, Some(&mut recv), &op, root)?;
        comm.reduce(&send, None::<&mut CudaSlice<$t>>, &ReduceOp::Prod, 1)?;
        comm.reduce_in_place(&mut recv, &op, root)?;
        comm.reduce_scatter(&gathered, &mut recv, &ReduceOp::Avg)?;

        // A group: views made before it opens, consumed by its calls.
        let mut bufs: Vec<CudaSlice<$t>> = (0..9)
            .map(|_| stream.alloc_zeros::<$t>(n))
            .collect::<Result<_, _>>()?;
        let mut gathered_views = gathered.split_at_mut(n * world / 2);
        let (g0, _g1) = (&mut gathered_views.0, &mut gathered_views.1);
        let [b0, b1, b2, b3, b4, b5, b6, b7, b8] = &mut bufs[..] else {
            unreachable!()
        };
        let (s0, s1, s2, s3, s4, s5) = (
            send.slice(..),
            send.slice(..),
            send.slice(..n / world),
            send.slice(..),
            send.slice(..),
            send.slice(..),
        );
        {
            let mut group = comm.group();
            let _rank_again: usize = group.comm().rank();
            group.send(s0, peer)?;
            group.recv(b0.slice_mut(..), peer)?;
            group.broadcast(Some(s1), b1.slice_mut(..), root)?;
            group.broadcast(None, b2.slice_mut(..), root)?;
            group.broadcast_in_place(b3.slice_mut(..), root)?;
            group.all_gather(s2, g0.slice_mut(..n))?;
            group.all_reduce(s3, b4.slice_mut(..), &op)?;
            group.all_reduce_in_place(b5.slice_mut(..), &op)?;
            group.reduce(s4, Some(b6.slice_mut(..)), &op, root)?;
            group.reduce_in_place(b7.slice_mut(..), &op, root)?;
            group.reduce_scatter(s5, b8.slice_mut(..n / world), &op)?;
            drop(group);
        }
        // cudarc's explicit type parameters, in full and in part.
        type S = CudaSlice<$t>;
        comm.send::<S, $t>(&send, peer)?;
        comm.recv::<S, $t>(&mut recv, peer)?;
        comm.broadcast::<S, S, $t>(Some(&send), &mut recv, root)?;
        comm.broadcast::<S, S, $t>(None, &mut recv, root)?;
        comm.broadcast_in_place::<S, $t>(&mut recv, root)?;
        comm.all_gather::<S, S, $t>(&send, &mut gathered)?;
        comm.all_reduce::<S, S, $t>(&send, &mut recv, &op)?;
        comm.all_reduce::<_, _, $t>(&send, &mut recv, &ReduceOp::Min)?;
        comm.all_reduce_in_place::<S, $t>(&mut recv, &op)?;
        comm.all_reduce_in_place::<_, $t>(&mut recv, &ReduceOp::Prod)?;
        comm.reduce::<S, S, $t>(&send, Some(&mut recv), &op, root)?;
        comm.reduce::<S, S, $t>(&send, None, &op, root)?;
        comm.reduce_in_place::<S, $t>(&mut recv, &op, root)?;
        comm.reduce_scatter::<S, S, $t>(&gathered, &mut recv, &op)?;
        {
            let (v0, v1) = (send.slice(..), send.slice(..n / world));
            let mut group = comm.group();
            group.all_reduce::<$t>(v0, recv.slice_mut(..), &op)?;
            group.all_gather::<$t>(v1, gathered.slice_mut(..))?;
            drop(group);
        }
        let _: Vec<$t> = stream.clone_dtoh(&recv)?;
    }};
}

/// For one element type: the calls on cudarc's communicator, and the
/// same calls, character for character, on ours.
macro_rules! for_type {
    ($($module:ident: $t:ty),* $(,)?) => {$(
        mod $module {
            use super::*;

            pub fn with_cudarc(
                comm: &cudarc::nccl::Comm,
                stream: &Arc<CudaStream>,
            ) -> Result<(), CallerError> {
                every_method!(comm, stream, $t);
                Ok(())
            }

            pub fn with_intranode(
                comm: &intranode::Communicator,
                stream: &Arc<CudaStream>,
            ) -> Result<(), CallerError> {
                every_method!(comm, stream, $t);
                Ok(())
            }
        }
    )*
        /// Every type's pair, for the test to take the addresses of.
        const EVERY_TYPE: &[(&str, Calls<cudarc::nccl::Comm>, Calls<intranode::Communicator>)] =
            &[$((stringify!($t), $module::with_cudarc, $module::with_intranode)),*];
    };
}

for_type!(
    t_f32: f32,
    t_f64: f64,
    t_f16: half::f16,
    t_bf16: half::bf16,
    t_i8: i8,
    t_u8: u8,
    t_i32: i32,
    t_u32: u32,
    t_i64: i64,
    t_u64: u64,
);

/// The calls of a program generic over the element type, as it would be
/// written for `cudarc::nccl::Comm` (so nothing but `NcclType` is asked
/// of `T`); expanded for both communicators.
macro_rules! generic_calls {
    ($name:ident, $comm:ty) => {
        fn $name<T: NcclType>(
            comm: &$comm,
            send: &CudaSlice<T>,
            recv: &mut CudaSlice<T>,
            gathered: &mut CudaSlice<T>,
        ) -> Result<(), CallerError> {
            let op = ReduceOp::Sum;
            comm.all_reduce(send, recv, &op)?;
            comm.all_reduce::<_, _, T>(send, recv, &ReduceOp::Max)?;
            comm.all_reduce_in_place(recv, &op)?;
            comm.broadcast(Some(send), recv, 0)?;
            comm.broadcast_in_place(recv, 0)?;
            comm.reduce(send, Some(&mut *recv), &op, 0)?;
            comm.reduce_in_place(recv, &op, 0)?;
            comm.all_gather(send, gathered)?;
            comm.reduce_scatter(&*gathered, recv, &op)?;
            comm.send(send, 1)?;
            comm.recv(recv, 1)?;
            Ok(())
        }
    };
}

generic_calls!(generic_cudarc, cudarc::nccl::Comm);
generic_calls!(generic_intranode, intranode::Communicator);

type Generic<C, T> =
    fn(&C, &CudaSlice<T>, &mut CudaSlice<T>, &mut CudaSlice<T>) -> Result<(), CallerError>;

/// Ours also takes `usize` roots and peers (the rest of the crate's
/// ranks) and returns a `Work` per collective.
fn with_intranode_usize(
    comm: &intranode::Communicator,
    stream: &Arc<CudaStream>,
) -> Result<intranode::Work, CallerError> {
    let mut buf: CudaSlice<f32> = stream.alloc_zeros(16)?;
    let root: usize = comm.world_size() - 1;
    comm.broadcast_in_place(&mut buf, root)?;
    comm.send(&buf, root)?;
    Ok(comm.reduce_in_place(&mut buf, &ReduceOp::Sum, root)?)
}

type Calls<C> = fn(&C, &Arc<CudaStream>) -> Result<(), CallerError>;

#[test]
fn communicator_has_every_method_of_cudarc_nccl_comm() {
    // Compiling this file is the check; running the calls needs NCCL and
    // a group of GPUs, which this test never asks for.
    let usize_roots: fn(_, _) -> _ = with_intranode_usize;
    let generic: [(
        Generic<cudarc::nccl::Comm, char>,
        Generic<intranode::Communicator, char>,
    ); 1] = [(generic_cudarc::<char>, generic_intranode::<char>)];
    let _ = (usize_roots, generic);
    let types: Vec<&str> = EVERY_TYPE.iter().map(|(t, _, _)| *t).collect();
    assert_eq!(types.len(), 10, "{types:?}");
    eprintln!(
        "nccl_parity: checked at compile time (every cudarc::nccl::Comm and Group method, \
         same arguments and type parameters, on intranode::Communicator, for {}, and for \
         any T: NcclType); the calls are not run here",
        types.join(", ")
    );
}

/// Views of symmetric buffers go into a group's calls as cudarc's views
/// do (compiled, not run: the GPU suites run the group calls).
#[allow(dead_code)]
fn group_takes_symmetric_views(
    comm: &intranode::Communicator,
    a: &intranode::SymmetricBuffer<f32>,
    b: &mut intranode::SymmetricBuffer<f32>,
    c: &mut intranode::SymmetricBuffer<f32>,
) -> intranode::Result<()> {
    let op = cudarc::nccl::ReduceOp::Sum;
    let (send, recv, in_place) = (a.slice(..)?, b.slice_mut(..)?, c.slice_mut(..)?);
    let mut group = comm.group();
    group.all_reduce(send, recv, &op)?;
    group.all_reduce_in_place(in_place, &op)?;
    group.end()?;
    Ok(())
}
