//! Typed launches of the soak's fill and check kernels
//! (`crates/test-kernels-gpu/src/soak.rs`; the pattern is
//! `intranode_kernels_gpu::pattern`): `intranode-suite soak` writes every
//! call's inputs and checks every output on the GPU, so a million checked
//! all-reduces cost the host nothing but launches.

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use intranode_kernels_gpu::pattern::SoakParams;

use super::launch::Grid;
use super::{DType, ElemType, TestKernel, TestKernelModule};
use crate::error::{Error, Result};
use crate::types::ReduceOp;

/// Which call of the soak, for which rank: what the pattern depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoakCall {
    /// The run's seed, the same on every rank.
    pub seed: u64,
    /// The call's number: every call gets fresh inputs.
    pub call: u64,
    /// The rank whose input is made or whose output is checked.
    pub rank: usize,
    /// Ranks in the group: the expected sum depends on it.
    pub world: usize,
    /// The reduction the output is checked against.
    pub op: ReduceOp,
}

/// Grid of the soak kernels: one element per thread per step, at most 8
/// blocks of 256 per SM of a 132-SM H200.
fn soak_grid(elems: usize) -> Grid {
    const BLOCK: usize = 256;
    const MAX_BLOCKS: usize = 132 * 8;
    let blocks = intranode_kernels_gpu::index::div_ceil(elems.max(1), BLOCK).clamp(1, MAX_BLOCKS);
    Grid::new(blocks, BLOCK)
}

fn params(call: &SoakCall, elem: ElemType, elems: usize) -> Result<SoakParams> {
    if call.world == 0 || call.rank >= call.world || call.world > u32::MAX as usize {
        return Err(Error::InvalidArgument(format!(
            "soak: rank {} of world {}",
            call.rank, call.world
        )));
    }
    Ok(SoakParams {
        elems: elems as u64,
        seed: call.seed,
        call: call.call,
        rank: call.rank as u32,
        world: call.world as u32,
        op: call.op.code(),
        elem_bytes: elem.bytes() as u32,
        is_f16: u32::from(elem == ElemType::F16),
        ..SoakParams::default()
    })
}

impl TestKernelModule {
    fn launch_soak(&self, kernel: TestKernel, stream: &CudaStream, p: SoakParams) -> Result<()> {
        let grid = soak_grid(p.elems as usize);
        // SAFETY: every soak kernel takes one SoakParams by value; the
        // callers checked that the buffers in `p` hold `p.elems` elements
        // (and the counter one u32) and keep them alive until the stream
        // passes the kernel.
        unsafe { self.launch(kernel, grid, stream, (p,)) }
    }

    /// Writes `call`'s pattern into `input` and poisons `output` (NaN);
    /// pass `None` for an in-place call (the output is the input).
    pub fn soak_fill<T: DType>(
        &self,
        stream: &CudaStream,
        input: &mut impl DevicePtrMut<T>,
        output: Option<&mut impl DevicePtrMut<T>>,
        call: &SoakCall,
    ) -> Result<()> {
        let elems = input.len();
        let mut p = params(call, T::ELEM, elems)?;
        let (in_ptr, _in_guard) = input.device_ptr_mut(stream);
        p.input = in_ptr;
        p.output = in_ptr;
        let _out_guard = match output {
            Some(out) => {
                if out.len() != elems {
                    return Err(Error::InvalidArgument(format!(
                        "soak_fill: input has {elems} elements, output {}",
                        out.len()
                    )));
                }
                let (out_ptr, guard) = out.device_ptr_mut(stream);
                p.output = out_ptr;
                Some(guard)
            }
            None => None,
        };
        if elems == 0 {
            return Ok(());
        }
        self.launch_soak(TestKernel::SoakFill(T::ELEM.into()), stream, p)
    }

    /// Adds the number of elements of `output` that are off `call`'s
    /// expected reduction to `counters[slot]`.
    pub fn soak_check<T: DType>(
        &self,
        stream: &CudaStream,
        output: &impl DevicePtr<T>,
        call: &SoakCall,
        counters: &mut impl DevicePtrMut<u32>,
        slot: usize,
    ) -> Result<()> {
        if slot >= counters.len() {
            return Err(Error::InvalidArgument(format!(
                "soak_check: counter slot {slot} of {}",
                counters.len()
            )));
        }
        let elems = output.len();
        let mut p = params(call, T::ELEM, elems)?;
        let (out_ptr, _out_guard) = output.device_ptr(stream);
        let (counter_ptr, _counter_guard) = counters.device_ptr_mut(stream);
        p.input = out_ptr;
        p.output = out_ptr;
        p.mismatches = counter_ptr + (slot * std::mem::size_of::<u32>()) as u64;
        if elems == 0 {
            return Ok(());
        }
        self.launch_soak(TestKernel::SoakCheck(T::ELEM.into()), stream, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_params_and_grid() {
        let call = SoakCall {
            seed: 1,
            call: 2,
            rank: 3,
            world: 4,
            op: ReduceOp::Avg,
        };
        let p = params(&call, ElemType::F16, 10).expect("valid");
        assert_eq!(
            (p.rank, p.world, p.op, p.elem_bytes, p.is_f16),
            (3, 4, intranode_kernels_gpu::layout::OP_AVG, 2, 1)
        );
        assert!(params(&SoakCall { rank: 4, ..call }, ElemType::F32, 1).is_err());
        assert_eq!(soak_grid(0), Grid::new(1, 256));
        assert_eq!(soak_grid(257), Grid::new(2, 256));
        assert_eq!(soak_grid(1 << 30), Grid::new(1056, 256));
    }
}
