//! The test and probe kernels (feature `test-kernels`): a PTX of their own
//! ([`TEST_PTX`], `host/ptx/test-kernels-<arch>.ptx`), loaded by
//! [`TestKernelModule`], so that the production PTX carries none of them.
//! The soak's fill and check kernels (`soak.rs`), the benchmark's stamps
//! and spins, the poll-storm probe and the ping-pong probe (`timing.rs`)
//! and the decode benchmark's random fill (`fill.rs`) are its methods;
//! the probes of `kernels-gpu/src/probes.rs` are only read, by
//! `host/tests/ptx_scopes.rs`.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use intranode_kernels_gpu::entries::TestKernel;

use super::launch::{Function, Grid, KernelArgs, Module};
use crate::error::{Error, Result};

/// PTX of the test and probe kernels of `intranode-kernels-gpu` (its feature
/// `test-kernels`), for [`super::PTX_ARCH`]: the committed
/// `host/ptx/test-kernels-<arch>.ptx`, or built from source where
/// `build.rs` says why.
pub const TEST_PTX: &str = include_str!(env!("INTRANODE_EMBEDDED_TEST_PTX"));

/// The test kernels loaded into one device's context.
#[derive(Debug)]
pub struct TestKernelModule {
    module: Module,
    /// Every `TestKernel`, at `TestKernel::index`.
    functions: Box<[Function]>,
}

impl TestKernelModule {
    /// Loads [`TEST_PTX`] into `ctx` and resolves every launchable test
    /// kernel.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
        let module = Module::load(ctx, TEST_PTX)?;
        let functions = module.resolve(TestKernel::all())?;
        Ok(TestKernelModule { module, functions })
    }

    /// The context the module lives in.
    pub fn context(&self) -> &Arc<CudaContext> {
        self.module.context()
    }

    /// Enqueues `kernel` on `stream` in `grid`, with `args` as its
    /// parameters.
    ///
    /// # Safety
    /// As for `Module::launch`: `args` are exactly `kernel`'s parameters,
    /// their addresses stay valid until `stream` passes the kernel, and
    /// `grid` suits the kernel.
    pub(super) unsafe fn launch(
        &self,
        kernel: TestKernel,
        grid: Grid,
        stream: &CudaStream,
        args: impl KernelArgs,
    ) -> Result<()> {
        let f = self
            .functions
            .get(kernel.index())
            .ok_or_else(|| Error::MissingKernel {
                name: kernel.to_string(),
            })?;
        let op = match kernel {
            TestKernel::SoakFill(_) | TestKernel::SoakCheck(_) => "cuLaunchKernel(soak)",
            TestKernel::TimingStamp => "cuLaunchKernel(timing_stamp)",
            TestKernel::TimingSpin => "cuLaunchKernel(timing_spin)",
            TestKernel::PollStorm => "cuLaunchKernel(probe_poll_storm)",
            TestKernel::PingPong => "cuLaunchKernel(probe_ping_pong)",
            TestKernel::StoreExit => "cuLaunchKernel(probe_store_exit)",
            TestKernel::FillUniform(_) => "cuLaunchKernel(fill_uniform)",
            TestKernel::Phases { .. } => "cuLaunchKernel(probe_lamport_phases)",
        };
        // SAFETY: forwarded from the caller; `f` is `kernel`'s entry point
        // (the table is in `TestKernel::index` order).
        unsafe { self.module.launch(*f, op, grid, stream, false, args) }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use intranode_kernels_gpu::entries::SCOPE_PROBES;

    use super::*;
    use crate::kernels::entry_names;

    /// The test kernels' list and their PTX agree both ways.
    #[test]
    fn the_test_kernel_list_is_exactly_the_test_ptx() {
        let listed: BTreeSet<String> = TestKernel::all()
            .map(|k| k.to_string())
            .chain(SCOPE_PROBES.iter().map(|p| (*p).to_owned()))
            .collect();
        let in_ptx: BTreeSet<String> = entry_names(TEST_PTX)
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(listed, in_ptx);
    }

    #[test]
    fn test_ptx_calls_nothing_out_of_line() {
        assert!(!TEST_PTX.contains(".extern .func"));
    }
}
