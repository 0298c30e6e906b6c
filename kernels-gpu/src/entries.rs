//! The one list of the kernels' entry points, compiled for the host and
//! the GPU alike.
//!
//! The collective and broadcast kernels (163 of the 181 the product
//! ships) are not written one by one: the lists [`collective_kernels!`]
//! and [`broadcast_kernels!`] name each family once (name prefix,
//! algorithm, world sizes), and both sides are generated from them. On
//! the GPU, `all_reduce.rs` and `broadcast.rs` instantiate one kernel per
//! element type and world size and give it its name (`#[export_name]`,
//! spelled by `concat!` from the list); here, on the host, the same lists
//! become [`Collective`] and [`BROADCAST_WORLDS`], from which [`Kernel`]
//! spells every name. The few other kernels (`add_*`, `axpy_f32`,
//! `cast_*`, `barrier`, `residual_rmsnorm_*`, `rmsnorm_*`, `silu_mul_*`,
//! and the fused norm's `lamport_rmsnorm_*_w*`, one per element type and
//! world size, from a macro in `fused_norm.rs`) are named where they are
//! defined and listed in [`Kernel`].
//!
//! The host resolves every [`Kernel`] once when it loads the PTX, into a
//! table indexed by [`Kernel::index`], so a launch neither formats nor
//! looks up a name. `host/src/kernels` tests that the list and the PTX
//! agree both ways: every listed name is in the PTX, every PTX entry is
//! listed.
//!
//! [`TestKernel`] and [`SCOPE_PROBES`] list the test and probe kernels,
//! which live in a PTX of their own (the `test-kernels` feature, see
//! `lib.rs`).

// The test PTX instantiates none of the lists.
#![cfg_attr(
    all(target_arch = "nvptx64", feature = "test-kernels"),
    allow(unused_macros, unused_imports)
)]

/// The collective kernels: one per (algorithm, element type, world size),
/// each taking one `layout::AllReduceParams`, the op a run-time parameter.
/// Calls `$then!` with one row per algorithm:
/// `Variant = "name prefix", device function, [world sizes], instantiated
/// with;` where the kernel of element type `e` and world size `w` is
/// `<prefix>_<e>_w<w>`, and "instantiated with" says whether the device
/// function's const parameter is the world size (`world`) or the group
/// size, half of it (`group`, for HCM: NOTE [hcm groups] in
/// `all_reduce.rs`).
macro_rules! collective_kernels {
    ($then:ident) => {
        $then! {
            /// Every rank reads every peer's input after one barrier.
            OneShot = "one_shot", one_shot, [2 3 4 5 6 7 8], world;
            /// Reduce-scatter then all-gather by peer loads, two barriers.
            TwoShot = "two_shot", two_shot, [2 3 4 5 6 7 8], world;
            /// Hybrid cube mesh: one-shot within each half, then a swap
            /// with the relay.
            Hcm = "hcm", hcm, [4 6 8], group;
            /// Barrier-free one-shot (NOTE [lamport] in `lamport.rs`).
            Lamport = "lamport", lamport, [2 3 4 5 6 7 8], world;
            /// Barrier-free two-shot (NOTE [lamport two-shot]).
            LamportTwoShot = "lamport2", lamport2, [2 3 4 5 6 7 8], world;
            /// The two-shot's first hop as a collective: reduce-scatter.
            ReduceScatter = "lamport_rs", lamport_rs, [2 3 4 5 6 7 8], world;
            /// The two-shot's second hop as a collective: all-gather.
            AllGather = "lamport_ag", lamport_ag, [2 3 4 5 6 7 8], world;
            /// Large messages: every link byte a store, reduce-scatter and
            /// all-gather merged per chunk through rings of slots (NOTE
            /// [push all-reduce] in `push.rs`).
            Push = "push", push, [2 3 4 5 6 7 8], world;
        }
    };
}
pub(crate) use collective_kernels;

/// The broadcast kernels, `<prefix>_w<w>`, each taking one
/// `layout::BroadcastParams`: calls `$then!(prefix, [world sizes])`.
macro_rules! broadcast_kernels {
    ($then:ident) => {
        $then!("broadcast", [2 3 4 5 6 7 8]);
    };
}
pub(crate) use broadcast_kernels;

// The host's side of the lists: the table's keys and names. Not built for
// the GPU, where its functions would be compiled into the PTX for nothing.
#[cfg(not(target_arch = "nvptx64"))]
pub use table::*;

#[cfg(not(target_arch = "nvptx64"))]
mod table {
    use core::fmt;

    /// Element types, as kernel names spell them.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Elem {
        Bf16,
        F16,
        F32,
    }

    impl Elem {
        /// Every element type, in the order of the kernel table.
        pub const ALL: [Elem; 3] = [Elem::Bf16, Elem::F16, Elem::F32];

        /// How kernel names spell it (`add_bf16`).
        pub const fn name(self) -> &'static str {
            match self {
                Elem::Bf16 => "bf16",
                Elem::F16 => "f16",
                Elem::F32 => "f32",
            }
        }

        const fn index(self) -> usize {
            match self {
                Elem::Bf16 => 0,
                Elem::F16 => 1,
                Elem::F32 => 2,
            }
        }
    }

    /// The host's side of [`collective_kernels!`]: the [`Collective`] enum.
    macro_rules! define_collective {
        ($($(#[$doc:meta])* $variant:ident = $prefix:literal, $func:ident, [$($world:literal)+], $inst:ident;)+) => {
            /// The algorithms of the collective kernels
            /// (`entries::collective_kernels!`).
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub enum Collective {
                $($(#[$doc])* $variant,)+
            }

            impl Collective {
                /// Every algorithm, in the order of the kernel table.
                pub const ALL: &'static [Collective] = &[$(Collective::$variant),+];

                /// The kernels' name prefix.
                pub const fn prefix(self) -> &'static str {
                    match self {
                        $(Collective::$variant => $prefix,)+
                    }
                }

                /// The world sizes it has kernels for, ascending.
                pub const fn worlds(self) -> &'static [usize] {
                    match self {
                        $(Collective::$variant => &[$($world),+],)+
                    }
                }
            }
        };
    }
    crate::entries::collective_kernels!(define_collective);

    /// The host's side of [`broadcast_kernels!`].
    macro_rules! define_broadcast {
        ($prefix:literal, [$($world:literal)+]) => {
            /// Name prefix of the broadcast kernels.
            pub const BROADCAST_PREFIX: &str = $prefix;
            /// The world sizes with a broadcast kernel, ascending.
            pub const BROADCAST_WORLDS: &[usize] = &[$($world),+];
        };
    }
    crate::entries::broadcast_kernels!(define_broadcast);

    /// The world sizes with a fused all-reduce + residual + RMSNorm kernel
    /// (`Kernel::FusedNorm`), ascending.
    pub const FUSED_NORM_WORLDS: &[usize] = &[2, 3, 4, 5, 6, 7, 8];

    /// A kernel of the production PTX: the key of the host's kernel table.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Kernel {
        /// `add_<e>(a, b, out, n)`.
        Add(Elem),
        /// `axpy_f32(y, x, a, n)`.
        AxpyF32,
        /// `barrier(BarrierParams)`.
        Barrier,
        /// `broadcast_w<world>(BroadcastParams)`.
        Broadcast { world: usize },
        /// `cast_f32_<e>(src, dst, n)`, to bf16 or f16.
        CastFromF32(Elem),
        /// `cast_<e>_f32(src, dst, n)`, from bf16 or f16.
        CastToF32(Elem),
        /// `residual_rmsnorm_<e>(NormParams)`.
        ResidualRmsNorm(Elem),
        /// `rmsnorm_<e>(NormParams)`.
        RmsNorm(Elem),
        /// `silu_mul_<e>(gate_up, out, rows, cols)`.
        SiluMul(Elem),
        /// `lamport_rmsnorm_<e>_w<world>(FusedNormParams)`: the fused
        /// all-reduce + residual + RMSNorm (NOTE [fused norm] in
        /// `fused_norm.rs`), named where it is defined.
        FusedNorm { elem: Elem, world: usize },
        /// `<algo prefix>_<elem>_w<world>(AllReduceParams)`.
        Collective {
            algo: Collective,
            elem: Elem,
            world: usize,
        },
    }

    // Where each kind of kernel starts in the table, in the order of
    // `Kernel::all`.
    const ADD: usize = 0;
    const AXPY_F32: usize = ADD + Elem::ALL.len();
    const BARRIER: usize = AXPY_F32 + 1;
    const BROADCAST: usize = BARRIER + 1;
    const CAST_FROM_F32: usize = BROADCAST + BROADCAST_WORLDS.len();
    /// Only the 16-bit types have casts, hence 2 of each direction.
    const CAST_TO_F32: usize = CAST_FROM_F32 + 2;
    const RESIDUAL_RMSNORM: usize = CAST_TO_F32 + 2;
    const RMSNORM: usize = RESIDUAL_RMSNORM + Elem::ALL.len();
    const SILU_MUL: usize = RMSNORM + Elem::ALL.len();
    const FUSED_NORM: usize = SILU_MUL + Elem::ALL.len();
    const COLLECTIVE: usize = FUSED_NORM + Elem::ALL.len() * FUSED_NORM_WORLDS.len();

    /// Where `algo`'s kernels start in the table.
    const fn collective_start(algo: Collective) -> usize {
        let mut start = COLLECTIVE;
        let mut k = 0;
        while k < Collective::ALL.len() {
            let a = Collective::ALL[k];
            if a as usize == algo as usize {
                break;
            }
            start += Elem::ALL.len() * a.worlds().len();
            k += 1;
        }
        start
    }

    /// The position of `world` in `worlds`.
    const fn position(worlds: &[usize], world: usize) -> Option<usize> {
        let mut k = 0;
        while k < worlds.len() {
            if worlds[k] == world {
                return Some(k);
            }
            k += 1;
        }
        None
    }

    /// The two 16-bit types, the only ones with casts.
    const fn half_index(elem: Elem) -> Option<usize> {
        match elem {
            Elem::Bf16 => Some(0),
            Elem::F16 => Some(1),
            Elem::F32 => None,
        }
    }

    impl Kernel {
        /// Kernels in the production PTX: the size of the host's table.
        pub const COUNT: usize = collective_start_end();

        /// The kernel's place in the host's table, `0..COUNT`; `None` for a
        /// key no kernel has (a world size without kernels, a cast from f32
        /// to f32).
        pub const fn index(self) -> Option<usize> {
            match self {
                Kernel::Add(e) => Some(ADD + e.index()),
                Kernel::AxpyF32 => Some(AXPY_F32),
                Kernel::Barrier => Some(BARRIER),
                Kernel::Broadcast { world } => match position(BROADCAST_WORLDS, world) {
                    Some(k) => Some(BROADCAST + k),
                    None => None,
                },
                Kernel::CastFromF32(e) => match half_index(e) {
                    Some(k) => Some(CAST_FROM_F32 + k),
                    None => None,
                },
                Kernel::CastToF32(e) => match half_index(e) {
                    Some(k) => Some(CAST_TO_F32 + k),
                    None => None,
                },
                Kernel::ResidualRmsNorm(e) => Some(RESIDUAL_RMSNORM + e.index()),
                Kernel::RmsNorm(e) => Some(RMSNORM + e.index()),
                Kernel::SiluMul(e) => Some(SILU_MUL + e.index()),
                Kernel::FusedNorm { elem, world } => match position(FUSED_NORM_WORLDS, world) {
                    Some(k) => Some(FUSED_NORM + elem.index() * FUSED_NORM_WORLDS.len() + k),
                    None => None,
                },
                Kernel::Collective { algo, elem, world } => match position(algo.worlds(), world) {
                    Some(k) => {
                        Some(collective_start(algo) + elem.index() * algo.worlds().len() + k)
                    }
                    None => None,
                },
            }
        }

        /// Every kernel of the production PTX, in table order (`index` is the
        /// position here).
        pub fn all() -> impl Iterator<Item = Kernel> {
            let halves = [Elem::Bf16, Elem::F16];
            Elem::ALL
                .into_iter()
                .map(Kernel::Add)
                .chain([Kernel::AxpyF32, Kernel::Barrier])
                .chain(
                    BROADCAST_WORLDS
                        .iter()
                        .map(|&world| Kernel::Broadcast { world }),
                )
                .chain(halves.into_iter().map(Kernel::CastFromF32))
                .chain(halves.into_iter().map(Kernel::CastToF32))
                .chain(Elem::ALL.into_iter().map(Kernel::ResidualRmsNorm))
                .chain(Elem::ALL.into_iter().map(Kernel::RmsNorm))
                .chain(Elem::ALL.into_iter().map(Kernel::SiluMul))
                .chain(Elem::ALL.into_iter().flat_map(|elem| {
                    FUSED_NORM_WORLDS
                        .iter()
                        .map(move |&world| Kernel::FusedNorm { elem, world })
                }))
                .chain(Collective::ALL.iter().flat_map(|&algo| {
                    Elem::ALL.into_iter().flat_map(move |elem| {
                        algo.worlds().iter().map(move |&world| Kernel::Collective {
                            algo,
                            elem,
                            world,
                        })
                    })
                }))
        }
    }

    /// [`Kernel::COUNT`]: the end of the last collective's kernels.
    const fn collective_start_end() -> usize {
        let last = Collective::ALL[Collective::ALL.len() - 1];
        collective_start(last) + Elem::ALL.len() * last.worlds().len()
    }

    /// The kernel's entry point name.
    impl fmt::Display for Kernel {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match *self {
                Kernel::Add(e) => write!(f, "add_{}", e.name()),
                Kernel::AxpyF32 => f.write_str("axpy_f32"),
                Kernel::Barrier => f.write_str("barrier"),
                Kernel::Broadcast { world } => write!(f, "{BROADCAST_PREFIX}_w{world}"),
                Kernel::CastFromF32(e) => write!(f, "cast_f32_{}", e.name()),
                Kernel::CastToF32(e) => write!(f, "cast_{}_f32", e.name()),
                Kernel::ResidualRmsNorm(e) => write!(f, "residual_rmsnorm_{}", e.name()),
                Kernel::RmsNorm(e) => write!(f, "rmsnorm_{}", e.name()),
                Kernel::SiluMul(e) => write!(f, "silu_mul_{}", e.name()),
                Kernel::FusedNorm { elem, world } => {
                    write!(f, "lamport_rmsnorm_{}_w{world}", elem.name())
                }
                Kernel::Collective { algo, elem, world } => {
                    write!(f, "{}_{}_w{world}", algo.prefix(), elem.name())
                }
            }
        }
    }

    /// A launchable kernel of the test PTX (the `test-kernels` feature): the
    /// key of the host's test-kernel table.
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
        /// `fill_uniform_<e>(out, n, seed, std)`: the decode benchmark's
        /// random fill.
        FillUniform(Elem),
    }

    impl TestKernel {
        /// Launchable kernels of the test PTX: the size of the host's table.
        pub const COUNT: usize = 3 * Elem::ALL.len() + 3;

        /// The kernel's place in the host's table, `0..COUNT`.
        pub const fn index(self) -> usize {
            match self {
                TestKernel::SoakFill(e) => e.index(),
                TestKernel::SoakCheck(e) => Elem::ALL.len() + e.index(),
                TestKernel::TimingStamp => 2 * Elem::ALL.len(),
                TestKernel::TimingSpin => 2 * Elem::ALL.len() + 1,
                TestKernel::PollStorm => 2 * Elem::ALL.len() + 2,
                TestKernel::FillUniform(e) => 2 * Elem::ALL.len() + 3 + e.index(),
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
                ])
                .chain(Elem::ALL.into_iter().map(TestKernel::FillUniform))
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
                TestKernel::FillUniform(e) => write!(f, "fill_uniform_{}", e.name()),
            }
        }
    }

    /// The probe kernels of the test PTX (`probes.rs`): one per ordering
    /// function of `ptx.rs`, never launched; `host/tests/ptx_scopes.rs` reads
    /// their bodies.
    pub const SCOPE_PROBES: &[&str] = &[
        "probe_atom_add_acq_rel_gpu_u32",
        "probe_block_gather_warp_f32",
        "probe_fence_acq_rel_gpu",
        "probe_fence_acq_rel_sys",
        "probe_globaltimer_ns",
        "probe_ld_acquire_sys_u32",
        "probe_ld_global_v4_u32",
        "probe_ld_relaxed_sys_u32",
        "probe_ld_relaxed_sys_v4_u32",
        "probe_st_global_v4_u32",
        "probe_st_relaxed_sys_u32",
        "probe_st_relaxed_sys_v4_u32",
        "probe_st_release_sys_u32",
    ];

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_table_is_dense_and_in_list_order() {
            let all: Vec<Kernel> = Kernel::all().collect();
            assert_eq!(all.len(), Kernel::COUNT);
            for (i, k) in all.iter().enumerate() {
                assert_eq!(k.index(), Some(i), "{k}");
            }
            let names: std::collections::HashSet<String> =
                all.iter().map(|k| k.to_string()).collect();
            assert_eq!(names.len(), Kernel::COUNT, "two kernels share a name");
            // 8 algorithms of 3 element types; HCM has 3 world sizes, the
            // others 7; 7 broadcasts; the fused norm's 3 types of 7 world
            // sizes; 18 others.
            assert_eq!(Kernel::COUNT, 3 * (7 * 7 + 3) + 7 + 3 * 7 + 18);

            let tests: Vec<TestKernel> = TestKernel::all().collect();
            assert_eq!(tests.len(), TestKernel::COUNT);
            for (i, k) in tests.iter().enumerate() {
                assert_eq!(k.index(), i, "{k}");
            }
        }

        #[test]
        fn keys_without_a_kernel_have_no_index() {
            let collective = |algo, world| Kernel::Collective {
                algo,
                elem: Elem::F32,
                world,
            };
            assert_eq!(collective(Collective::OneShot, 1).index(), None);
            assert_eq!(collective(Collective::OneShot, 9).index(), None);
            assert_eq!(collective(Collective::Hcm, 2).index(), None);
            assert_eq!(collective(Collective::Hcm, 5).index(), None);
            assert!(collective(Collective::Hcm, 6).index().is_some());
            assert_eq!(Kernel::Broadcast { world: 1 }.index(), None);
            let fused = |world| Kernel::FusedNorm {
                elem: Elem::Bf16,
                world,
            };
            assert_eq!(fused(1).index(), None);
            assert_eq!(fused(9).index(), None);
            assert!(fused(8).index().is_some());
            assert_eq!(Kernel::CastFromF32(Elem::F32).index(), None);
            assert_eq!(Kernel::CastToF32(Elem::F32).index(), None);
        }

        #[test]
        fn names() {
            let k = Kernel::Collective {
                algo: Collective::LamportTwoShot,
                elem: Elem::Bf16,
                world: 8,
            };
            assert_eq!(k.to_string(), "lamport2_bf16_w8");
            assert_eq!(Kernel::Broadcast { world: 3 }.to_string(), "broadcast_w3");
            assert_eq!(Kernel::CastToF32(Elem::F16).to_string(), "cast_f16_f32");
            assert_eq!(TestKernel::PollStorm.to_string(), "probe_poll_storm");
        }
    }
}
