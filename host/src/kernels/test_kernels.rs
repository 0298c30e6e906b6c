//! The test and probe kernels (feature `test-kernels`): a crate of their
//! own (`crates/test-kernels-gpu`, never published) built to a PTX of its
//! own ([`TEST_PTX`], `host/ptx/test-kernels-<arch>.ptx`), loaded by
//! [`TestKernelModule`], so that the production PTX carries none of them.
//! [`TestKernel`] lists the launchable ones (a host test holds the list
//! and the PTX equal both ways). The soak's fill and check kernels
//! (`soak.rs`), the benchmark's stamps and spins, the poll-storm probe
//! and the ping-pong probe (`timing.rs`) and the decode benchmark's
//! random fill (`fill.rs`) are its methods; the probes of
//! `crates/test-kernels-gpu/src/probes.rs` ([`SCOPE_PROBES`]) are only
//! read, by `host/tests/ptx_scopes.rs`.
//!
//! The list lives here rather than beside the kernels: this crate is
//! published, and a published crate cannot depend on one that is not,
//! even under a feature.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use intranode_kernels_gpu::entries::Elem;

use super::launch::{Function, Grid, KernelArgs, Module};
use crate::error::{Error, Result};

/// PTX of the test and probe kernels (the crate `intranode-test-kernels-gpu`,
/// never published), for [`super::PTX_ARCH`]: the committed
/// `host/ptx/test-kernels-<arch>.ptx`, or built from source where
/// `build.rs` says why.
pub const TEST_PTX: &str = include_str!(env!("INTRANODE_EMBEDDED_TEST_PTX"));

/// A launchable kernel of the test PTX (`intranode-test-kernels-gpu`):
/// the key of [`TestKernelModule`]'s table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TestKernel {
    /// `soak_fill_<e>(SoakParams)`.
    SoakFill(Elem),
    /// `soak_check_<e>(SoakParams)`.
    SoakCheck(Elem),
    /// `timing_stamp(log, cap)`.
    TimingStamp,
    /// `timing_spin(ns)`.
    TimingSpin,
    /// `probe_poll_storm(PollStormParams)`.
    PollStorm,
    /// `probe_ping_pong(PingPongParams)`.
    PingPong,
    /// `probe_store_exit(StoreExitParams)`.
    StoreExit,
    /// `fill_uniform_<e>(out, n, seed, std)`: the decode benchmark's
    /// random fill.
    FillUniform(Elem),
    /// `probe_lamport_phases_w<n>(AllReduceParams, stamps)` (one-shot)
    /// or `probe_lamport_two_shot_phases_w<n>` (two-shot): bf16 sum with its
    /// phases stamped, for `n` in [`TestKernel::PHASE_WORLDS`]
    /// (`world_slot` indexes it; [`TestKernel::phases`] makes them).
    Phases {
        /// The two-shot (`lamport_two_shot`) rather than the one-shot.
        two_shot: bool,
        /// Index into [`TestKernel::PHASE_WORLDS`].
        world_slot: u8,
    },
}

impl TestKernel {
    /// Launchable kernels of the test PTX: the size of the host's table.
    pub const COUNT: usize = 3 * Elem::ALL.len() + 5 + 2 * Self::PHASE_WORLDS.len();

    /// The world sizes the phase probes are built for.
    pub const PHASE_WORLDS: [usize; 3] = [2, 4, 8];

    /// The phase probe of the one-shot or the two-shot on `world`
    /// ranks, if built for it.
    pub fn phases(two_shot: bool, world: usize) -> Option<TestKernel> {
        let slot = Self::PHASE_WORLDS.iter().position(|&w| w == world)?;
        Some(TestKernel::Phases {
            two_shot,
            world_slot: slot as u8,
        })
    }

    /// The kernel's place in the host's table, `0..COUNT`.
    pub const fn index(self) -> usize {
        match self {
            TestKernel::SoakFill(e) => e.index(),
            TestKernel::SoakCheck(e) => Elem::ALL.len() + e.index(),
            TestKernel::TimingStamp => 2 * Elem::ALL.len(),
            TestKernel::TimingSpin => 2 * Elem::ALL.len() + 1,
            TestKernel::PollStorm => 2 * Elem::ALL.len() + 2,
            TestKernel::PingPong => 2 * Elem::ALL.len() + 3,
            TestKernel::StoreExit => 2 * Elem::ALL.len() + 4,
            TestKernel::FillUniform(e) => 2 * Elem::ALL.len() + 5 + e.index(),
            TestKernel::Phases {
                two_shot,
                world_slot,
            } => {
                3 * Elem::ALL.len()
                    + 5
                    + two_shot as usize * Self::PHASE_WORLDS.len()
                    + world_slot as usize
            }
        }
    }

    /// Every launchable test kernel, in table order.
    pub fn all() -> impl Iterator<Item = TestKernel> {
        Elem::ALL
            .into_iter()
            .map(TestKernel::SoakFill)
            .chain(Elem::ALL.into_iter().map(TestKernel::SoakCheck))
            .chain([
                TestKernel::TimingStamp,
                TestKernel::TimingSpin,
                TestKernel::PollStorm,
                TestKernel::PingPong,
                TestKernel::StoreExit,
            ])
            .chain(Elem::ALL.into_iter().map(TestKernel::FillUniform))
            .chain([false, true].into_iter().flat_map(|two_shot| {
                (0..Self::PHASE_WORLDS.len()).map(move |slot| TestKernel::Phases {
                    two_shot,
                    world_slot: slot as u8,
                })
            }))
    }
}

/// The test kernel's entry point name.
impl fmt::Display for TestKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TestKernel::SoakFill(e) => write!(f, "soak_fill_{}", e.name()),
            TestKernel::SoakCheck(e) => write!(f, "soak_check_{}", e.name()),
            TestKernel::TimingStamp => f.write_str("timing_stamp"),
            TestKernel::TimingSpin => f.write_str("timing_spin"),
            TestKernel::PollStorm => f.write_str("probe_poll_storm"),
            TestKernel::PingPong => f.write_str("probe_ping_pong"),
            TestKernel::StoreExit => f.write_str("probe_store_exit"),
            TestKernel::FillUniform(e) => write!(f, "fill_uniform_{}", e.name()),
            TestKernel::Phases {
                two_shot,
                world_slot,
            } => write!(
                f,
                "probe_lamport{}_phases_w{}",
                if two_shot { "_two_shot" } else { "" },
                Self::PHASE_WORLDS
                    .get(world_slot as usize)
                    .copied()
                    .unwrap_or(0)
            ),
        }
    }
}

/// The probe kernels of the test PTX (`crates/test-kernels-gpu/src/probes.rs`):
/// one per ordering function of `kernels-gpu/src/ptx.rs`, never launched;
/// `host/tests/ptx_scopes.rs` reads their bodies.
pub const SCOPE_PROBES: &[&str] = &[
    "probe_atom_add_acq_rel_gpu_u32",
    "probe_atom_add_relaxed_gpu_u64",
    "probe_block_broadcast_u32",
    "probe_block_gather_warp_f32",
    "probe_fence_acq_rel_gpu",
    "probe_fence_acq_rel_sys",
    "probe_globaltimer_ns",
    "probe_ld_acquire_sys_u32",
    "probe_ld_global_v4_u32",
    "probe_ld_relaxed_sys_u32",
    "probe_ld_relaxed_sys_v4_u32",
    "probe_prefetch_bulk_l2",
    "probe_red_add_relaxed_gpu_u64",
    "probe_st_global_v4_u32",
    "probe_st_relaxed_sys_u32",
    "probe_st_relaxed_sys_v4_u32",
    "probe_st_release_sys_u32",
];

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
    fn the_list_is_dense_and_in_table_order() {
        let tests: Vec<TestKernel> = TestKernel::all().collect();
        assert_eq!(tests.len(), TestKernel::COUNT);
        for (i, k) in tests.iter().enumerate() {
            assert_eq!(k.index(), i, "{k}");
        }
        assert_eq!(TestKernel::PollStorm.to_string(), "probe_poll_storm");
        assert_eq!(
            TestKernel::phases(true, 4)
                .map(|k| k.to_string())
                .as_deref(),
            Some("probe_lamport_two_shot_phases_w4")
        );
    }

    #[test]
    fn test_ptx_calls_nothing_out_of_line() {
        assert!(!TEST_PTX.contains(".extern .func"));
    }
}
