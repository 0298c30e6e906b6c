//! Parity with `cudarc::nccl::Comm`, proved at compile time: the macro
//! `every_method!` calls every method of `Comm` (and of the `Group` from
//! `Comm::group`), with the same argument expressions and a caller's `?`,
//! and is expanded once on a `cudarc::nccl::Comm` and once on an
//! `intranode::Communicator`. If `Communicator` lacks a method, takes other
//! arguments, or returns something `?` cannot use, this file does not
//! compile. The functions are never called: they would need NCCL, GPUs
//! and peers (the GPU checks live in `intranode-suite`); the one test
//! says so and only takes their addresses.
//!
//! What differs (NOTE [nccl parity] in `host/src/communicator.rs`): the
//! `Ok` value (`Work` or `()` where cudarc gives an `NcclStatus` or `()`),
//! the error type, and construction (`Communicator::new` over a store).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use cudarc::nccl::ReduceOp;
use cudarc::nccl::result::NcclError;

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
/// `i32` roots and peers (variables and literals).
macro_rules! every_method {
    ($comm:expr, $stream:expr) => {{
        let comm = $comm;
        let stream: &Arc<CudaStream> = $stream;
        let n = 1024usize;
        let rank: usize = comm.rank();
        let world: usize = comm.world_size();
        let root: i32 = 0;
        let peer: i32 = ((rank + 1) % world) as i32;
        let op = ReduceOp::Sum;

        // What the communicator is bound to.
        let _stream = comm.stream();
        let _ctx = comm.context().clone();
        let _ordinal: usize = comm.ordinal();

        let send: CudaSlice<f32> = stream.alloc_zeros(n)?;
        let mut recv: CudaSlice<f32> = stream.alloc_zeros(n)?;
        let mut gathered: CudaSlice<f32> = stream.alloc_zeros(n * world)?;

        // Point to point.
        comm.send(&send, peer)?;
        comm.recv(&mut recv, peer)?;

        // Broadcast: the root passes its send buffer, the others may not.
        comm.broadcast(Some(&send), &mut recv, root)?;
        comm.broadcast(None::<&CudaSlice<f32>>, &mut recv, root)?;
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
        comm.reduce(&send, None::<&mut CudaSlice<f32>>, &ReduceOp::Prod, 1)?;
        comm.reduce_in_place(&mut recv, &op, root)?;
        comm.reduce_scatter(&gathered, &mut recv, &ReduceOp::Avg)?;

        // A group: views made before it opens, consumed by its calls.
        let mut bufs: Vec<CudaSlice<f32>> = (0..9)
            .map(|_| stream.alloc_zeros::<f32>(n))
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
        let _ = stream.clone_dtoh(&recv)?;
    }};
}

/// The calls on cudarc's communicator.
fn with_cudarc(comm: &cudarc::nccl::Comm, stream: &Arc<CudaStream>) -> Result<(), CallerError> {
    every_method!(comm, stream);
    Ok(())
}

/// The same calls, character for character, on ours.
fn with_intranode(
    comm: &intranode::Communicator,
    stream: &Arc<CudaStream>,
) -> Result<(), CallerError> {
    every_method!(comm, stream);
    Ok(())
}

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
    let cudarc: Calls<cudarc::nccl::Comm> = with_cudarc;
    let ours: Calls<intranode::Communicator> = with_intranode;
    let usize_roots: fn(_, _) -> _ = with_intranode_usize;
    let _ = (cudarc, ours, usize_roots);
    eprintln!(
        "nccl_parity: checked at compile time (every cudarc::nccl::Comm and Group method, \
         same arguments, on intranode::Communicator); the calls are not run here"
    );
}
