// (Over 700 lines, 834: the table and both sides made from it, the GPU's entry
// points and the host's typed keys, are one contract and change together;
// about 100 lines are the tests that hold the table and the names
// together. If it grows, the host side (module `table`) is the seam for
// a file of its own.)

//! The one table of the kernels' entry points, compiled for the host and
//! the GPU alike.
//!
//! [`kernel_table!`] names every kernel family of the production PTX once:
//! its name (prefix and suffix), element types, world sizes, the argument
//! types it takes, whether it starts by waiting on the previous kernel
//! (`griddepcontrol.wait`, launched with programmatic overlap), and how
//! the GPU side instantiates it. Families that take the same arguments
//! form a group (`Collective`: every kernel taking one
//! `layout::AllReduceParams`).
//!
//! Both sides are generated from it:
//! - on the GPU (module `instances`), one entry point per element type and
//!   world size of each family, named `<prefix>[_<elem>]<suffix>[_w<world>]`
//!   by `concat!` from the table, calling the family's device function
//!   (`crate::all_reduce::one_shot`, `crate::lamport::lamport`, ...); the
//!   few kernels written out by hand (`by_hand`: `add_*`, `axpy_f32`,
//!   `cast_*`, `barrier`) keep their bodies where they are, and the host's
//!   test that the table and the PTX agree both ways holds their names;
//! - on the host, [`Family`] (every family, in table order), one enum per
//!   group ([`Collective`], [`Norm`], [`Cast`], ...) whose `key` returns a
//!   typed [`KernelKey<A>`], `A` being the group's argument tuple, and
//!   [`Kernel`] (family, element type, world size: the untyped key, its
//!   name and its index in the host's kernel table). The indices come from
//!   the table's row sizes (`STARTS`, computed at compile time): no
//!   hand-kept offsets.
//!
//! `intranode::kernels::KernelModule::launch` takes a `KernelKey<A>` and
//! arguments of type `A`: passing `BroadcastParams` to an all-reduce
//! kernel does not compile. What is left to a `SAFETY` comment is the
//! contents of the arguments (live buffers, lengths), not their types.
//!
//! The test and probe kernels are not here: they live in a crate and a
//! PTX of their own (`intranode-test-kernels-gpu`, see `lib.rs`), and the
//! host's list of them is `intranode::kernels::TestKernel`.

/// The table of kernel families: calls `$then!` with every group:
///
/// `Group (argument types) shape launch { Family = "prefix" "suffix",
/// [element types], [world sizes], instantiation; ... }`
///
/// - a kernel's name is `<prefix>[_<elem>]<suffix>[_w<world>]`, for every
///   listed element type and world size (an empty list: the name has no
///   such part);
/// - `shape` is what a key of the group takes (`elem_world`, `elem`,
///   `world`, `unit`);
/// - `launch` is `overlapped` for kernels that begin with
///   `griddepcontrol.wait` / `launch_dependents` (the GPU side emits that
///   prologue for them; the host launches them with programmatic overlap,
///   NOTE in `host/src/kernels/launch.rs`), else `plain`;
/// - the instantiation says how the GPU side builds the entry points:
///   `collective(device fn, world|group)` (the const parameter is the world
///   size, or half of it for HCM: NOTE [hcm groups] in `all_reduce.rs`),
///   `broadcast(fn)`, `fused_norm(fn)`, `norm(fn, residual)`,
///   `silu_mul(fn)`, or `by_hand` (written out in its module).
///
/// A new all-reduce variant is one row of `Collective` (plus its device
/// function and, on the host, its `AllReduceAlgo` and launch shape):
/// `docs/dev/kernel-table.md`.
#[macro_export]
#[doc(hidden)]
macro_rules! kernel_table {
    ($then:path) => {
        $then! {
            /// The all-reduce kernels and the two hops of the Lamport
            /// two-shot as collectives: one `AllReduceParams` each, the op
            /// a run-time parameter.
            Collective (AllReduceParams) elem_world overlapped {
                /// Every rank reads every peer's input after one barrier.
                OneShot = "one_shot" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], collective(one_shot, world);
                /// Reduce-scatter then all-gather by peer loads, two barriers.
                TwoShot = "two_shot" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], collective(two_shot, world);
                /// Hybrid cube mesh: one-shot within each half, then a swap
                /// with the relay.
                Hcm = "hcm" "", [Bf16 F16 F32], [4 6 8], collective(hcm, group);
                /// Barrier-free one-shot (NOTE \[lamport\] in `lamport.rs`).
                Lamport = "lamport" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], collective(lamport, world);
                /// Barrier-free two-shot (NOTE [lamport two-shot]).
                LamportTwoShot = "lamport_two_shot" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], collective(lamport_two_shot, world);
                /// The two-shot's first hop as a collective: reduce-scatter.
                ReduceScatter = "lamport_rs" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], collective(lamport_rs, world);
                /// The two-shot's second hop as a collective: all-gather.
                AllGather = "lamport_ag" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], collective(lamport_ag, world);
                /// Large messages: every link byte a store, reduce-scatter and
                /// all-gather merged per chunk through rings of slots (NOTE
                /// [push all-reduce] in `push.rs`).
                Push = "push" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], collective(push, world);
                /// Reduce-scatter of large shards through the push rings
                /// (NOTE [push reduce-scatter and all-gather] in `push_scatter_gather.rs`).
                PushReduceScatter = "push_rs" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], collective(push_reduce_scatter, world);
                /// All-gather of large shards through the push rings.
                PushAllGather = "push_ag" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], collective(push_all_gather, world);
            }
            /// Broadcast through the root's symmetric buffer.
            Broadcast (BroadcastParams) world overlapped {
                /// The root's bytes to every rank, through its buffer.
                Broadcast = "broadcast" "", [], [2 3 4 5 6 7 8], broadcast(broadcast);
            }
            /// The Lamport one-shot all-reduce with the residual add and
            /// RMSNorm folded in (NOTE [fused norm] in `fused_norm.rs`).
            FusedNorm (FusedNormParams) elem_world overlapped {
                /// Sum the ranks' partial sums, add the residual, normalize:
                /// one launch in place of an all-reduce and a norm.
                FusedNorm = "lamport_rmsnorm" "", [Bf16 F16 F32], [2 3 4 5 6 7 8], fused_norm(lamport_rmsnorm);
            }
            /// RMSNorm, alone or after a residual add, one warp per row.
            Norm (NormParams) elem plain {
                /// `residual += input`, then the RMSNorm of the new residual.
                ResidualRmsNorm = "residual_rmsnorm" "", [Bf16 F16 F32], [], norm(residual_rmsnorm, true);
                /// `p.residual` is not read: the norm of the input alone.
                RmsNorm = "rmsnorm" "", [Bf16 F16 F32], [], norm(residual_rmsnorm, false);
            }
            /// `silu_mul_<e>(gate_up, out, rows, cols)`.
            SiluMul (u64, u64, usize, usize) elem plain {
                /// `silu(gate) * up` over the two halves of each gate-up row.
                SiluMul = "silu_mul" "", [Bf16 F16 F32], [], silu_mul(silu_mul);
            }
            /// `add_<e>(a, b, out, n)`.
            Add (u64, u64, u64, usize) elem plain {
                /// `out[i] = a[i] + b[i]`: the GPU smoke test's kernel.
                Add = "add" "", [Bf16 F16 F32], [], by_hand;
            }
            /// `axpy_f32(y, x, a, n)`.
            Axpy (u64, u64, f32, usize) unit plain {
                /// `y[i] += a * x[i]` in f32: the example's optimizer step.
                AxpyF32 = "axpy_f32" "", [], [], by_hand;
            }
            /// f32 to and from the 16-bit types: `cast_f32_<e>(src, dst, n)`
            /// and `cast_<e>_f32(src, dst, n)`.
            Cast (u64, u64, usize) elem plain {
                /// f32 to the 16-bit type, rounded to nearest even.
                CastFromF32 = "cast_f32" "", [Bf16 F16], [], by_hand;
                /// The 16-bit type to f32 (exact).
                CastToF32 = "cast" "_f32", [Bf16 F16], [], by_hand;
            }
            /// An explicit barrier among some ranks, one block.
            Barrier (BarrierParams) unit overlapped {
                /// Every rank of `rank_mask` waits for the others' arrival.
                Barrier = "barrier" "", [], [], by_hand;
            }
        }
    };
}
pub use kernel_table;

/// The GPU side of [`kernel_table!`]: every entry point but the `by_hand`
/// ones, named from the table.
#[cfg(target_arch = "nvptx64")]
mod instances {
    use crate::all_reduce::{hcm, one_shot, two_shot};
    use crate::broadcast::broadcast;
    use crate::decode::kernels::silu_mul;
    use crate::fused_norm::lamport_rmsnorm;
    use crate::lamport::{lamport, lamport_ag, lamport_rs, lamport_two_shot};
    use crate::layout::{
        AllReduceParams, BroadcastParams, FusedNormParams, NormParams, OP_AVG, OP_MAX, OP_MIN,
        OP_SUM,
    };
    use crate::norm::residual_rmsnorm;
    use crate::packed::{Bf16, F16};
    use crate::ptx;
    use crate::push::push;
    use crate::push_scatter_gather::{push_all_gather, push_reduce_scatter};

    /// Walks the table: one `instance!` per family.
    macro_rules! define_instances {
        ($($(#[$gdoc:meta])* $group:ident ($($arg:ty),*) $shape:ident $launch:ident {
            $($(#[$doc:meta])* $family:ident = $prefix:literal $suffix:literal,
                [$($elem:ident)*], [$($world:literal)*], $inst:ident $(($($iarg:tt)*))?;)+
        })+) => {$($(
            instance!($inst $(($($iarg)*))?, $launch, $prefix, $suffix, [$($elem)*], [$($world)*]);
        )+)+};
    }

    /// The element type of a table's element name, and how names spell it.
    macro_rules! elem_ty {
        (Bf16) => {
            Bf16
        };
        (F16) => {
            F16
        };
        (F32) => {
            f32
        };
    }
    macro_rules! elem_name {
        (Bf16) => {
            "bf16"
        };
        (F16) => {
            "f16"
        };
        (F32) => {
            "f32"
        };
    }

    /// The start of an `overlapped` kernel (see [`kernel_table!`]).
    macro_rules! prologue {
        (overlapped) => {
            ptx::griddepcontrol_wait();
            ptx::griddepcontrol_launch_dependents();
            crate::schedule::delay(crate::schedule::SITE_START);
        };
        (plain) => {};
    }

    /// The entry points of one family.
    macro_rules! instance {
        (by_hand, $launch:ident, $prefix:literal, $suffix:literal, $elems:tt, $worlds:tt) => {};
        (collective($func:ident, $inst:ident), $launch:ident, $prefix:literal, $suffix:literal, [$($elem:ident)*], $worlds:tt) => {$(
            instance!(@collective $func, $inst, $launch, $prefix, $suffix, $elem, $worlds);
        )*};
        (@collective $func:ident, $inst:ident, $launch:ident, $prefix:literal, $suffix:literal, $elem:ident, [$($world:literal)*]) => {$(
            const _: () = {
                /// # Safety
                /// See the algorithm's function; launched only by the host crate.
                #[unsafe(export_name = concat!($prefix, "_", elem_name!($elem), $suffix, "_w", $world))]
                pub unsafe extern "ptx-kernel" fn kernel(p: AllReduceParams) {
                    prologue!($launch);
                    // SAFETY: the host upholds the algorithm's contract.
                    unsafe {
                        match p.op {
                            OP_SUM => $func::<elem_ty!($elem), { const_param!($inst, $world) }, OP_SUM>(&p),
                            OP_AVG => $func::<elem_ty!($elem), { const_param!($inst, $world) }, OP_AVG>(&p),
                            OP_MIN => $func::<elem_ty!($elem), { const_param!($inst, $world) }, OP_MIN>(&p),
                            OP_MAX => $func::<elem_ty!($elem), { const_param!($inst, $world) }, OP_MAX>(&p),
                            _ => ptx::trap(),
                        }
                    }
                }
            };
        )*};
        (broadcast($func:ident), $launch:ident, $prefix:literal, $suffix:literal, [], [$($world:literal)*]) => {$(
            const _: () = {
                /// # Safety
                /// See the family's function; launched only by the host crate.
                #[unsafe(export_name = concat!($prefix, $suffix, "_w", $world))]
                pub unsafe extern "ptx-kernel" fn kernel(p: BroadcastParams) {
                    prologue!($launch);
                    // SAFETY: the host upholds the function's contract.
                    unsafe { $func::<$world>(&p) }
                }
            };
        )*};
        (fused_norm($func:ident), $launch:ident, $prefix:literal, $suffix:literal, [$($elem:ident)*], $worlds:tt) => {$(
            instance!(@fused_norm $func, $launch, $prefix, $suffix, $elem, $worlds);
        )*};
        (@fused_norm $func:ident, $launch:ident, $prefix:literal, $suffix:literal, $elem:ident, [$($world:literal)*]) => {$(
            const _: () = {
                /// # Safety
                /// See the family's function; launched only by the host crate.
                #[unsafe(export_name = concat!($prefix, "_", elem_name!($elem), $suffix, "_w", $world))]
                pub unsafe extern "ptx-kernel" fn kernel(p: FusedNormParams) {
                    prologue!($launch);
                    // SAFETY: the host upholds the function's contract.
                    unsafe { $func::<elem_ty!($elem), $world>(&p) }
                }
            };
        )*};
        (norm($func:ident, $residual:literal), $launch:ident, $prefix:literal, $suffix:literal, [$($elem:ident)*], []) => {$(
            const _: () = {
                /// # Safety
                /// See the family's function; launched only by the host
                /// crate, in whole warps.
                #[unsafe(export_name = concat!($prefix, "_", elem_name!($elem), $suffix))]
                pub unsafe extern "ptx-kernel" fn kernel(p: NormParams) {
                    prologue!($launch);
                    // SAFETY: the host upholds the function's contract.
                    unsafe { $func::<elem_ty!($elem), $residual>(&p) }
                }
            };
        )*};
        (silu_mul($func:ident), $launch:ident, $prefix:literal, $suffix:literal, [$($elem:ident)*], []) => {$(
            const _: () = {
                /// # Safety
                /// See the family's function; launched only by the host crate.
                #[unsafe(export_name = concat!($prefix, "_", elem_name!($elem), $suffix))]
                pub unsafe extern "ptx-kernel" fn kernel(
                    gate_up: *const elem_ty!($elem),
                    out: *mut elem_ty!($elem),
                    rows: usize,
                    cols: usize,
                ) {
                    prologue!($launch);
                    // SAFETY: the host upholds the function's contract.
                    unsafe { $func(gate_up, out, rows, cols) }
                }
            };
        )*};
    }

    /// The const parameter of a collective's device function: the world
    /// size, or the group size, half of it (HCM, NOTE [hcm groups]).
    macro_rules! const_param {
        (world, $world:literal) => {
            $world
        };
        (group, $world:literal) => {
            $world / 2
        };
    }

    crate::kernel_table!(define_instances);
}

// The host's side of the table: the keys and names. Not built for the
// GPU, where its functions would be compiled into the PTX for nothing.
#[cfg(not(target_arch = "nvptx64"))]
pub use table::*;

#[cfg(not(target_arch = "nvptx64"))]
mod table {
    use core::fmt;
    use core::marker::PhantomData;

    #[allow(unused_imports)]
    use crate::layout::{
        AllReduceParams, BarrierParams, BroadcastParams, FusedNormParams, NormParams,
    };

    /// Element types, as kernel names spell them.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Elem {
        /// bfloat16 (`bf16`): 8 exponent bits, 7 mantissa bits.
        Bf16,
        /// IEEE half precision (`f16`).
        F16,
        /// IEEE single precision (`f32`).
        F32,
    }

    impl Elem {
        /// Every element type.
        pub const ALL: [Elem; 3] = [Elem::Bf16, Elem::F16, Elem::F32];

        /// How kernel names spell it (`add_bf16`).
        pub const fn name(self) -> &'static str {
            match self {
                Elem::Bf16 => "bf16",
                Elem::F16 => "f16",
                Elem::F32 => "f32",
            }
        }

        /// Its place in [`Elem::ALL`] (the order of the host's tables).
        pub const fn index(self) -> usize {
            self as usize
        }
    }

    /// One family of the table, as the host reads it.
    #[derive(Clone, Copy, Debug)]
    struct Row {
        prefix: &'static str,
        suffix: &'static str,
        elems: &'static [Elem],
        worlds: &'static [usize],
        overlapped: bool,
        launch_op: &'static str,
    }

    impl Row {
        /// Kernels of the family: one per element type and world size.
        const fn len(&self) -> usize {
            at_least_one(self.elems.len()) * at_least_one(self.worlds.len())
        }
    }

    const fn at_least_one(n: usize) -> usize {
        if n == 0 { 1 } else { n }
    }

    macro_rules! overlapped {
        (overlapped) => {
            true
        };
        (plain) => {
            false
        };
    }

    /// What a key of a group takes, by the group's shape.
    macro_rules! group_key {
        (elem_world, $args:ty) => {
            /// The kernel of this family for `elem` on `world` ranks;
            /// `None` where the family has none.
            pub const fn key(self, elem: Elem, world: usize) -> Option<KernelKey<$args>> {
                KernelKey::new(Kernel {
                    family: self.family(),
                    elem: Some(elem),
                    world: Some(world),
                })
            }
        };
        (elem, $args:ty) => {
            /// The kernel of this family for `elem`; `None` where the
            /// family has none.
            pub const fn key(self, elem: Elem) -> Option<KernelKey<$args>> {
                KernelKey::new(Kernel {
                    family: self.family(),
                    elem: Some(elem),
                    world: None,
                })
            }
        };
        (world, $args:ty) => {
            /// The kernel of this family on `world` ranks; `None` where
            /// the family has none.
            pub const fn key(self, world: usize) -> Option<KernelKey<$args>> {
                KernelKey::new(Kernel {
                    family: self.family(),
                    elem: None,
                    world: Some(world),
                })
            }
        };
        (unit, $args:ty) => {
            /// The family's one kernel.
            pub const fn key(self) -> Option<KernelKey<$args>> {
                KernelKey::new(Kernel {
                    family: self.family(),
                    elem: None,
                    world: None,
                })
            }
        };
    }

    /// The host's side of [`kernel_table!`](crate::kernel_table).
    macro_rules! define_table {
        ($($(#[$gdoc:meta])* $group:ident ($($arg:ty),*) $shape:ident $launch:ident {
            $($(#[$doc:meta])* $family:ident = $prefix:literal $suffix:literal,
                [$($elem:ident)*], [$($world:literal)*], $inst:ident $(($($iarg:tt)*))?;)+
        })+) => {
            /// Every kernel family of the production PTX, in table order.
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub enum Family {
                $($($(#[$doc])* $family,)+)+
            }

            impl Family {
                /// Every family, in table order.
                pub const ALL: &'static [Family] = &[$($(Family::$family,)+)+];
            }

            /// The rows, at `Family as usize`.
            const ROWS: &[Row] = &[$($(Row {
                prefix: $prefix,
                suffix: $suffix,
                elems: &[$(Elem::$elem),*],
                worlds: &[$($world),*],
                overlapped: overlapped!($launch),
                launch_op: concat!("cuLaunchKernel(", $prefix, $suffix, ")"),
            },)+)+];

            $(
                $(#[$gdoc])*
                #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
                pub enum $group {
                    $($(#[$doc])* $family,)+
                }

                impl $group {
                    /// Every family of the group, in table order.
                    pub const ALL: &'static [$group] = &[$($group::$family),+];

                    /// The family in the whole table.
                    pub const fn family(self) -> Family {
                        match self {
                            $($group::$family => Family::$family,)+
                        }
                    }

                    /// The kernels' name prefix.
                    pub const fn prefix(self) -> &'static str {
                        self.family().prefix()
                    }

                    /// The world sizes it has kernels for, ascending (empty:
                    /// one kernel for every world).
                    pub const fn worlds(self) -> &'static [usize] {
                        self.family().worlds()
                    }

                    group_key!($shape, ($($arg,)*));
                }
            )+
        };
    }
    crate::kernel_table!(define_table);

    /// Where each family starts in the host's table (`STARTS[f]`), and the
    /// table's size (`STARTS[ROWS.len()]`).
    const STARTS: [usize; ROWS.len() + 1] = {
        let mut starts = [0; ROWS.len() + 1];
        let mut k = 0;
        while k < ROWS.len() {
            starts[k + 1] = starts[k] + ROWS[k].len();
            k += 1;
        }
        starts
    };

    impl Family {
        const fn row(self) -> &'static Row {
            &ROWS[self as usize]
        }

        /// The kernels' name prefix.
        pub const fn prefix(self) -> &'static str {
            self.row().prefix
        }

        /// The element types it has kernels for (empty: names without one).
        pub const fn elems(self) -> &'static [Elem] {
            self.row().elems
        }

        /// The world sizes it has kernels for, ascending (empty: names
        /// without one).
        pub const fn worlds(self) -> &'static [usize] {
            self.row().worlds
        }

        /// Whether its kernels begin with `griddepcontrol.wait` (launched
        /// with programmatic overlap where the device has it).
        pub const fn overlapped(self) -> bool {
            self.row().overlapped
        }

        /// The operation a failed launch is reported as.
        pub const fn launch_op(self) -> &'static str {
            self.row().launch_op
        }
    }

    /// A kernel of the production PTX, untyped: its family, element type
    /// and world size (each `None` where the family's names have none).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Kernel {
        /// The table row: its name's prefix and suffix, its launch.
        pub family: Family,
        /// The element type in its name (`_bf16`), if the family has one.
        pub elem: Option<Elem>,
        /// The world size in its name (`_w4`), if the family has one.
        pub world: Option<usize>,
    }

    /// The position of a kernel's element type in its family's list:
    /// `Some(0)` where the family's names have none and the key gives
    /// none, its position where they have one and the key gives a listed
    /// one; else `None` (no kernel).
    const fn elem_part(listed: &[Elem], given: Option<Elem>) -> Option<usize> {
        match given {
            None if listed.is_empty() => Some(0),
            Some(x) if !listed.is_empty() => {
                let mut k = 0;
                while k < listed.len() {
                    if listed[k] as u8 == x as u8 {
                        return Some(k);
                    }
                    k += 1;
                }
                None
            }
            _ => None,
        }
    }

    /// The same for a world size.
    const fn world_part(listed: &[usize], given: Option<usize>) -> Option<usize> {
        match given {
            None if listed.is_empty() => Some(0),
            Some(x) if !listed.is_empty() => {
                let mut k = 0;
                while k < listed.len() {
                    if listed[k] == x {
                        return Some(k);
                    }
                    k += 1;
                }
                None
            }
            _ => None,
        }
    }

    impl Kernel {
        /// Kernels in the production PTX: the size of the host's table.
        pub const COUNT: usize = STARTS[ROWS.len()];

        /// The kernel's place in the host's table, `0..COUNT`; `None` for a
        /// key no kernel has (a world size without kernels, a cast from f32
        /// to f32).
        pub const fn index(self) -> Option<usize> {
            let row = self.family.row();
            let Some(e) = elem_part(row.elems, self.elem) else {
                return None;
            };
            let Some(w) = world_part(row.worlds, self.world) else {
                return None;
            };
            Some(STARTS[self.family as usize] + e * at_least_one(row.worlds.len()) + w)
        }

        /// The kernel at `index` of the host's table (`index < COUNT`).
        const fn at(index: usize) -> Kernel {
            let mut f = 0;
            while f + 1 < ROWS.len() && STARTS[f + 1] <= index {
                f += 1;
            }
            let row = &ROWS[f];
            let k = index - STARTS[f];
            let per_elem = at_least_one(row.worlds.len());
            Kernel {
                family: Family::ALL[f],
                elem: if row.elems.is_empty() {
                    None
                } else {
                    Some(row.elems[k / per_elem])
                },
                world: if row.worlds.is_empty() {
                    None
                } else {
                    Some(row.worlds[k % per_elem])
                },
            }
        }

        /// Every kernel of the production PTX, in table order (`index` is
        /// the position here).
        pub fn all() -> impl Iterator<Item = Kernel> {
            (0..Self::COUNT).map(Kernel::at)
        }
    }

    /// The kernel's entry point name: `<prefix>[_<elem>]<suffix>[_w<world>]`.
    impl fmt::Display for Kernel {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let row = self.family.row();
            f.write_str(row.prefix)?;
            if let Some(e) = self.elem {
                write!(f, "_{}", e.name())?;
            }
            f.write_str(row.suffix)?;
            if let Some(w) = self.world {
                write!(f, "_w{w}")?;
            }
            Ok(())
        }
    }

    /// A kernel that exists, typed by the arguments it takes (`A`, a tuple:
    /// `(AllReduceParams,)`, `(u64, u64, u64, usize)`): only the groups'
    /// `key` functions make one, so a launch of a key with arguments of
    /// another type does not compile.
    ///
    /// An all-reduce kernel's key is typed by `AllReduceParams`:
    ///
    /// ```
    /// use intranode_kernels_gpu::entries::{Collective, Elem, KernelKey};
    /// use intranode_kernels_gpu::layout::AllReduceParams;
    /// let key: Option<KernelKey<(AllReduceParams,)>> = Collective::Lamport.key(Elem::Bf16, 2);
    /// assert_eq!(key.map(|k| k.to_string()).as_deref(), Some("lamport_bf16_w2"));
    /// ```
    ///
    /// and is no broadcast kernel's key (the same line with the broadcast's
    /// parameters does not compile):
    ///
    /// ```compile_fail,E0308
    /// use intranode_kernels_gpu::entries::{Collective, Elem, KernelKey};
    /// use intranode_kernels_gpu::layout::BroadcastParams;
    /// let key: Option<KernelKey<(BroadcastParams,)>> = Collective::Lamport.key(Elem::Bf16, 2);
    /// ```
    pub struct KernelKey<A> {
        kernel: Kernel,
        index: usize,
        args: PhantomData<fn(A)>,
    }

    impl<A> KernelKey<A> {
        /// `kernel` typed, where it exists. Private: the types come from
        /// the table through the groups' `key`.
        const fn new(kernel: Kernel) -> Option<Self> {
            match kernel.index() {
                Some(index) => Some(KernelKey {
                    kernel,
                    index,
                    args: PhantomData,
                }),
                None => None,
            }
        }

        /// The kernel, untyped.
        pub const fn kernel(self) -> Kernel {
            self.kernel
        }

        /// Its place in the host's table, `0..Kernel::COUNT`.
        pub const fn index(self) -> usize {
            self.index
        }
    }

    impl<A> Clone for KernelKey<A> {
        fn clone(&self) -> Self {
            *self
        }
    }
    impl<A> Copy for KernelKey<A> {}
    impl<A> PartialEq for KernelKey<A> {
        fn eq(&self, other: &Self) -> bool {
            self.index == other.index
        }
    }
    impl<A> Eq for KernelKey<A> {}
    impl<A> fmt::Debug for KernelKey<A> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "KernelKey({})", self.kernel)
        }
    }
    impl<A> fmt::Display for KernelKey<A> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.kernel.fmt(f)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_table_is_dense_and_in_table_order() {
            let all: Vec<Kernel> = Kernel::all().collect();
            assert_eq!(all.len(), Kernel::COUNT);
            for (i, k) in all.iter().enumerate() {
                assert_eq!(k.index(), Some(i), "{k}");
            }
            let names: std::collections::HashSet<String> =
                all.iter().map(|k| k.to_string()).collect();
            assert_eq!(names.len(), Kernel::COUNT, "two kernels share a name");
            // 10 collectives of 3 element types; HCM has 3 world sizes,
            // the others 7; 7 broadcasts; the fused norm's 3 types of 7
            // world sizes; 18 others.
            assert_eq!(Kernel::COUNT, 3 * (9 * 7 + 3) + 7 + 3 * 7 + 18);
        }

        #[test]
        fn keys_without_a_kernel_have_none() {
            let f32 = Elem::F32;
            assert_eq!(Collective::OneShot.key(f32, 1), None);
            assert_eq!(Collective::OneShot.key(f32, 9), None);
            assert_eq!(Collective::Hcm.key(f32, 2), None);
            assert_eq!(Collective::Hcm.key(f32, 5), None);
            assert!(Collective::Hcm.key(f32, 6).is_some());
            assert_eq!(Broadcast::Broadcast.key(1), None);
            assert_eq!(FusedNorm::FusedNorm.key(Elem::Bf16, 1), None);
            assert_eq!(FusedNorm::FusedNorm.key(Elem::Bf16, 9), None);
            assert!(FusedNorm::FusedNorm.key(Elem::Bf16, 8).is_some());
            assert_eq!(Cast::CastFromF32.key(f32), None);
            assert_eq!(Cast::CastToF32.key(f32), None);
            assert!(Barrier::Barrier.key().is_some());
            // An untyped key with a part its family's names lack, or
            // without one they have.
            let k = |family, elem, world| {
                Kernel {
                    family,
                    elem,
                    world,
                }
                .index()
            };
            assert_eq!(k(Family::Barrier, Some(f32), None), None);
            assert_eq!(k(Family::Add, None, None), None);
            assert_eq!(k(Family::Add, Some(f32), Some(2)), None);
        }

        #[test]
        fn names() {
            let name = |k: Option<KernelKey<(AllReduceParams,)>>| k.map(|k| k.to_string());
            assert_eq!(
                name(Collective::LamportTwoShot.key(Elem::Bf16, 8)),
                Some("lamport_two_shot_bf16_w8".into())
            );
            assert_eq!(
                name(Collective::Hcm.key(Elem::Bf16, 6)),
                Some("hcm_bf16_w6".into())
            );
            assert_eq!(
                Broadcast::Broadcast.key(3).map(|k| k.to_string()),
                Some("broadcast_w3".into())
            );
            assert_eq!(
                Cast::CastToF32.key(Elem::F16).map(|k| k.to_string()),
                Some("cast_f16_f32".into())
            );
            assert_eq!(
                Cast::CastFromF32.key(Elem::Bf16).map(|k| k.to_string()),
                Some("cast_f32_bf16".into())
            );
            assert_eq!(
                FusedNorm::FusedNorm
                    .key(Elem::F32, 2)
                    .map(|k| k.to_string()),
                Some("lamport_rmsnorm_f32_w2".into())
            );
            assert_eq!(
                Axpy::AxpyF32.key().map(|k| k.to_string()),
                Some("axpy_f32".into())
            );
        }

        #[test]
        fn launch_properties_come_from_the_table() {
            for family in Family::ALL {
                let overlapped = matches!(
                    family,
                    Family::Barrier | Family::Broadcast | Family::FusedNorm
                ) || Collective::ALL.iter().any(|c| c.family() == *family);
                assert_eq!(family.overlapped(), overlapped, "{family:?}");
            }
            assert_eq!(Family::Lamport.launch_op(), "cuLaunchKernel(lamport)");
            assert_eq!(Family::CastToF32.launch_op(), "cuLaunchKernel(cast_f32)");
        }
    }
}
