// A cudarc NCCL program as the Rust clients write one (a daemon per rank
// shipping the id, out-of-place all-reduces into fresh buffers; one
// process with a thread per GPU; NCCL groups; rooted and p2p calls).
// `port_from_cudarc.rs` compiles this text twice: after cudarc's imports
// and after intranode's. Nothing else differs.

use std::ffi::c_char;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use half::bf16;

/// Rank 0: the id's bytes, to send to the other ranks' processes.
pub fn make_id() -> Result<[c_char; 128], NcclError> {
    let id = Id::new()?;
    Ok(*id.internal())
}

/// Every rank: joins the group with the bytes rank 0 sent.
pub fn join(
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
    bytes: [c_char; 128],
) -> Result<Comm, NcclError> {
    Comm::from_rank(stream, rank, world, Id::uninit(bytes))
}

/// One process, a communicator per GPU.
pub fn all_devices(streams: Vec<Arc<CudaStream>>) -> Result<Vec<Comm>, NcclError> {
    Comm::from_devices(streams)
}

/// A row-parallel layer's all-reduce into a fresh output.
pub fn row_parallel(
    comm: &Comm,
    stream: &Arc<CudaStream>,
    x: &CudaSlice<bf16>,
) -> Result<CudaSlice<bf16>, String> {
    let mut y = stream
        .alloc_zeros::<bf16>(x.len())
        .map_err(|e: DriverError| format!("{e:?}"))?;
    comm.all_reduce(x, &mut y, &ReduceOp::Sum)
        .map_err(|e| format!("nccl all-reduce failed: {e:?}"))?;
    Ok(y)
}

/// A helper that hands the status up.
pub fn reduce_in_place(comm: &Comm, buf: &mut CudaSlice<f32>) -> Result<NcclStatus, NcclError> {
    comm.all_reduce_in_place(buf, &ReduceOp::Sum)
}

/// A helper that checks it.
pub fn reduce_checked(comm: &Comm, buf: &mut CudaSlice<f32>) -> Result<bool, NcclError> {
    let status = comm.all_reduce_in_place(buf, &ReduceOp::Avg)?;
    Ok(status == NcclStatus::Success)
}

/// A single thread driving every GPU: the calls grouped, as NCCL needs.
pub fn reduce_all(comms: &[Comm], bufs: &mut [CudaSlice<f32>]) -> Result<(), NcclError> {
    group_start()?;
    for (comm, buf) in comms.iter().zip(bufs.iter_mut()) {
        comm.all_reduce_in_place(buf, &ReduceOp::Max)?;
    }
    group_end()?;
    Ok(())
}

/// Rooted calls, gathers and point-to-point.
pub fn others(
    comm: &Comm,
    send: &CudaSlice<f32>,
    recv: &mut CudaSlice<f32>,
    gathered: &mut CudaSlice<f32>,
) -> Result<(), NcclError> {
    let root = 0i32;
    let mine = (comm.rank() == root as usize).then_some(send);
    comm.broadcast(mine, recv, root)?;
    comm.broadcast_in_place(recv, root)?;
    comm.all_gather(send, gathered)?;
    comm.reduce_scatter(gathered, recv, &ReduceOp::Sum)?;
    comm.reduce(send, Some(recv), &ReduceOp::Min, root)?;
    comm.reduce_in_place(recv, &ReduceOp::Sum, root)?;
    let next = ((comm.rank() + 1) % comm.world_size()) as i32;
    let prev = ((comm.rank() + comm.world_size() - 1) % comm.world_size()) as i32;
    let mut group = comm.group();
    group.send(send.as_view(), next)?;
    group.recv(recv.as_view_mut(), prev)?;
    drop(group);
    let _on: Arc<CudaStream> = comm.stream();
    let _device: usize = comm.ordinal();
    Ok(())
}
