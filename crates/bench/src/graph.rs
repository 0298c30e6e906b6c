//! The one way the benchmark captures a CUDA graph.

use std::sync::Arc;

use anyhow::{Context, Result};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};

/// Captures what `body` enqueues on `stream` (after its earlier work is
/// done) into an instantiated graph.
pub fn capture(
    stream: &Arc<CudaStream>,
    body: &mut dyn FnMut() -> Result<()>,
) -> Result<CudaGraph> {
    stream.synchronize()?;
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = body();
    // End the capture whatever happened, so the stream stays usable and
    // the body's error is the one reported.
    let graph = stream
        .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    captured?;
    graph?.context("the capture made no graph")
}
