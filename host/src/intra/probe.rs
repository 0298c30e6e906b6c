//! What the test PTX's phase probes need of a communicator
//! (`TestKernelModule::lamport_phases`, `intranode-bench phases`): the
//! parameter block and grid of a real Lamport call, so a probe runs
//! exactly as that call would, counts itself in the pad and leaves the
//! buffers as the call does. The test-kernels feature only.

use intranode_kernels_gpu::layout::AllReduceParams;

use super::IntraNodeComm;
use super::all_reduce::RawAllReduce;
use crate::error::{Error, Result};
use crate::types::AllReduceAlgo;
use crate::types::{ElemType, ReduceOp};

impl IntraNodeComm {
    /// The parameter block and the grid (blocks, threads) of a bf16 sum
    /// of `elems` elements with `algo` (`Lamport` or `LamportTwoShot`),
    /// as `all_reduce_raw` would launch it.
    ///
    /// A probe launched with them is one call of this communicator: every
    /// rank must launch it where it would make that call, and nothing else
    /// may run on the communicator meanwhile.
    pub fn lamport_probe_launch(
        &self,
        algo: AllReduceAlgo,
        input: u64,
        output: u64,
        elems: usize,
    ) -> Result<(AllReduceParams, u32, u32)> {
        if !matches!(algo, AllReduceAlgo::Lamport | AllReduceAlgo::LamportTwoShot) {
            return Err(Error::InvalidArgument(format!(
                "lamport_probe_launch on rank {}: {} is not a Lamport form",
                self.rank(),
                algo.name()
            )));
        }
        let launch = self
            .launch_of(&RawAllReduce {
                input,
                output,
                elems,
                elem: ElemType::Bf16,
                op: ReduceOp::Sum,
                algo,
            })?
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "lamport_probe_launch on rank {}: an empty call",
                    self.rank()
                ))
            })?;
        self.check_all_reduce_call(elems, ElemType::Bf16, ReduceOp::Sum, algo)?;
        let (params,) = launch.args;
        Ok((params, launch.grid.blocks, launch.grid.threads))
    }
}
