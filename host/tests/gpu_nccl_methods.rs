//! The NCCL-backed methods of `Communicator` (those of
//! `cudarc::nccl::Comm` our kernels lack) on one GPU, in a world of one
//! rank: NCCL runs every collective there, so each call's wiring
//! (buffers, lengths, roots, the group's end) is checked against the
//! expected values, and the argument checks are seen to refuse bad calls
//! before NCCL. Several ranks need several GPUs (NCCL refuses ranks that
//! share one); `intranode-suite` checks those. Skips visibly without a GPU
//! or without NCCL.

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use cudarc::nccl::ReduceOp;
use intranode::{Communicator, Error, gpu};
use intranode_store::HashStore;

fn skip(why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED gpu_nccl_methods: {why}");
}

#[test]
fn nccl_methods_in_a_world_of_one() -> Result<(), Box<dyn std::error::Error>> {
    if !gpu::gpus_or_skip(1, "gpu_nccl_methods")? {
        return Ok(());
    }
    if !gpu::nccl_available() {
        skip("libnccl cannot be loaded here");
        return Ok(());
    }
    let ctx = gpu::context(0)?;
    let stream = ctx.new_stream()?;
    let comm = Communicator::new(stream.clone(), Arc::new(HashStore::new()), 0, 1)?;
    assert!(comm.nccl().is_ok(), "{comm:?}");
    assert_eq!(comm.ordinal(), 0);

    let n = 1001;
    let host: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    let send: CudaSlice<f32> = stream.clone_htod(&host)?;
    let poison = vec![f32::NAN; n];

    // Each call writes a poisoned buffer; a world of one gives back send.
    let mut recv = stream.clone_htod(&poison)?;
    comm.all_gather(&send, &mut recv)?;
    assert_eq!(stream.clone_dtoh(&recv)?, host, "all_gather");

    let mut recv = stream.clone_htod(&poison)?;
    comm.reduce_scatter(&send, &mut recv, &ReduceOp::Sum)?;
    assert_eq!(stream.clone_dtoh(&recv)?, host, "reduce_scatter");

    let mut recv = stream.clone_htod(&poison)?;
    comm.reduce(&send, Some(&mut recv), &ReduceOp::Max, 0)?;
    assert_eq!(stream.clone_dtoh(&recv)?, host, "reduce");

    let mut recv = stream.clone_htod(&poison)?;
    comm.broadcast(Some(&send), &mut recv, 0)?;
    assert_eq!(stream.clone_dtoh(&recv)?, host, "broadcast");

    let mut buf = stream.clone_htod(&host)?;
    comm.reduce_in_place(&mut buf, &ReduceOp::Prod, 0)?;
    comm.broadcast_in_place(&mut buf, 0usize)?;
    comm.all_reduce_in_place(&mut buf, &ReduceOp::Sum)?
        .synchronize()?;
    assert_eq!(stream.clone_dtoh(&buf)?, host, "in place");

    // A group: a send to oneself and its receive, and an all-gather.
    let mut got = stream.clone_htod(&poison)?;
    let mut gathered = stream.clone_htod(&poison)?;
    let (s0, s1) = (send.slice(..), send.slice(..));
    let (r0, r1) = (got.slice_mut(..), gathered.slice_mut(..));
    let mut group = comm.group();
    group.send(s0, 0)?;
    group.recv(r0, 0)?;
    group.all_gather(s1, r1)?;
    // The communicator's own calls wait for the group's end.
    let refused = comm
        .all_reduce_in_place(&mut buf, &ReduceOp::Sum)
        .unwrap_err();
    assert!(refused.to_string().contains("a group is open"), "{refused}");
    // So does a second group.
    let second = comm.group();
    let e = comm_err(second.end());
    assert!(e.contains("already open"), "{e}");
    group.end()?.synchronize()?;
    assert_eq!(stream.clone_dtoh(&got)?, host, "group send/recv");
    assert_eq!(stream.clone_dtoh(&gathered)?, host, "group all_gather");

    // Bad calls are refused before NCCL, naming the rank and lengths.
    let mut short = stream.alloc_zeros::<f32>(n - 1)?;
    let e = comm_err(comm.all_gather(&send, &mut short));
    assert!(
        e.contains("all_gather on rank 0: recv has 1000 elements"),
        "{e}"
    );
    let e = comm_err(comm.reduce_scatter(&send, &mut short, &ReduceOp::Sum));
    assert!(
        e.contains("reduce_scatter on rank 0: send has 1001 elements"),
        "{e}"
    );
    let e = comm_err(comm.reduce(&send, None::<&mut CudaSlice<f32>>, &ReduceOp::Sum, 0));
    assert!(e.contains("the root must pass a recv buffer"), "{e}");
    let e = comm_err(comm.broadcast(Some(&send), &mut short, 0));
    assert!(
        e.contains("send has 1001 elements, but must hold as many as recv = 1000"),
        "{e}"
    );
    let e = comm_err(comm.send(&send, 1));
    assert!(e.contains("peer 1 is outside the world of 1"), "{e}");
    let e = comm_err(comm.recv(&mut short, -1));
    assert!(e.contains("peer -1 is outside the world of 1"), "{e}");
    let e = comm_err(comm.reduce_in_place(&mut short, &ReduceOp::Sum, 2));
    assert!(e.contains("root 2 is outside the world of 1"), "{e}");

    // The communicator is still usable after the refusals.
    let mut recv = stream.clone_htod(&poison)?;
    comm.all_gather(&send, &mut recv)?;
    comm.synchronize()?;
    assert_eq!(stream.clone_dtoh(&recv)?, host, "after refusals");
    Ok(())
}

/// NCCL's route captured into a CUDA graph under cudarc's event tracking
/// (on once the context has a second stream): every buffer was written
/// before the capture, which cudarc's own NCCL calls would make the
/// captured stream wait on (NOTE [nccl under capture]).
#[test]
fn nccl_calls_capture_under_event_tracking() -> Result<(), Box<dyn std::error::Error>> {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    if !gpu::gpus_or_skip(1, "gpu_nccl_methods (capture)")? {
        return Ok(());
    }
    if !gpu::nccl_available() {
        skip("libnccl cannot be loaded here");
        return Ok(());
    }
    let ctx = gpu::context(0)?;
    let stream = ctx.new_stream()?;
    let upload = ctx.new_stream()?;
    assert!(ctx.is_managing_stream_synchronization());
    let comm = Communicator::new(stream.clone(), Arc::new(HashStore::new()), 0, 1)?;
    let n = 4097;
    let host: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 13.0).collect();
    let send = upload.clone_htod(&host)?;
    let mut sum = stream.alloc_zeros::<f32>(n)?;
    let mut gathered = stream.alloc_zeros::<f32>(n)?;
    let mut in_place = upload.clone_htod(&host)?;
    upload.synchronize()?;

    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = (|| -> Result<(), Error> {
        comm.all_reduce_with(
            &send,
            &mut sum,
            &ReduceOp::Sum,
            intranode::AllReduceAlgo::Nccl,
        )?;
        comm.all_gather(&send, &mut gathered)?;
        comm.all_reduce_in_place(&mut in_place, &ReduceOp::Max)?;
        Ok(())
    })();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    captured?;
    let graph = graph?.ok_or("the capture made no graph")?;
    for _ in 0..3 {
        graph.launch()?;
    }
    stream.synchronize()?;
    comm.check()?;
    assert_eq!(stream.clone_dtoh(&sum)?, host, "captured all_reduce");
    assert_eq!(stream.clone_dtoh(&gathered)?, host, "captured all_gather");
    assert_eq!(stream.clone_dtoh(&in_place)?, host, "captured in place");
    Ok(())
}

fn comm_err<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    r.expect_err("should be refused").to_string()
}
