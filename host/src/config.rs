//! Every setting of the library in one typed struct, [`CommConfig`], and
//! the one place that reads the environment switches behind them
//! ([`CommConfig::from_env`]); a value a switch cannot mean is a
//! [`ConfigError`] naming the variable, never a silent default.
//!
//! Apart from it: the launcher's rank variables (`dist_env`, read by the
//! application), the store's client settings (`intranode-store`), and
//! `switches::required_gpus` (crate-private; `internals::switches`), which
//! only the GPU test suites read.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::algo::Crossovers;
use crate::types::{AllReduceAlgo, BroadcastAlgo, NormPath};
pub(crate) use switches::*;

/// Default of `INTRANODE_BARRIER_TIMEOUT_MS`: long enough for a slow peer's
/// launch under load, short enough that a dead peer is reported well
/// inside a store timeout.
pub const DEFAULT_BARRIER_TIMEOUT_MS: u64 = 10_000;

/// Most threads per block of the collective kernels (they are built for
/// it: `cargo xtask check-ptx` keeps them within 128 registers a thread).
pub(crate) const MAX_THREADS_PER_BLOCK: usize = 512;

/// Most blocks of a Lamport launch: a bound against typos in
/// `INTRANODE_LAMPORT_LAUNCH` (the kernels count no blocks in the pad).
pub(crate) const MAX_LAMPORT_BLOCKS: usize = 1024;

/// How much the communicators check (from `INTRANODE_DEBUG`). Part of the
/// rendezvous request: the call checks exchange data through the store
/// on every call, so all ranks must run them or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum DebugLevel {
    /// No extra checks.
    #[default]
    Off,
    /// Every all-reduce all-gathers a call fingerprint first.
    Detail,
}

impl DebugLevel {
    /// Parses a value of `INTRANODE_DEBUG` (case-insensitive; empty is off).
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "0" => Some(Self::Off),
            "detail" => Some(Self::Detail),
            _ => None,
        }
    }
}

/// Most blocks and threads per block of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchShape {
    /// The most blocks of the grid (fewer where the message needs fewer).
    pub max_blocks: usize,
    /// Threads per block.
    pub threads: usize,
}

/// Launch shapes of the Lamport forms fixed by `INTRANODE_LAMPORT_LAUNCH`;
/// `None` keeps the measured rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LamportShapes {
    /// The Lamport one-shot's shape (`lamport=BxT`).
    pub one_shot: Option<LaunchShape>,
    /// The Lamport two-shot's shape (`lamport-two-shot=BxT`).
    pub two_shot: Option<LaunchShape>,
}

impl LamportShapes {
    /// Parses a value of `INTRANODE_LAMPORT_LAUNCH`; the error says what is
    /// wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut shapes = LamportShapes::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, shape) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not NAME=BLOCKSxTHREADS"))?;
            let (blocks, threads) = shape
                .split_once('x')
                .ok_or_else(|| format!("{shape:?} is not BLOCKSxTHREADS"))?;
            let number = |s: &str| {
                s.trim()
                    .parse::<usize>()
                    .map_err(|e| format!("{s:?} in {part:?}: {e}"))
            };
            let shape = LaunchShape {
                max_blocks: number(blocks)?,
                threads: number(threads)?,
            };
            // A warp multiple keeps every warp whole; the block bound only
            // guards against typos.
            if !(1..=MAX_LAMPORT_BLOCKS).contains(&shape.max_blocks)
                || !(32..=MAX_THREADS_PER_BLOCK).contains(&shape.threads)
                || !shape.threads.is_multiple_of(32)
            {
                return Err(format!(
                    "{part:?}: blocks must be 1 to {MAX_LAMPORT_BLOCKS}, threads a multiple of 32 up to {MAX_THREADS_PER_BLOCK}"
                ));
            }
            match AllReduceAlgo::from_name(name) {
                Some(AllReduceAlgo::Lamport) => shapes.one_shot = Some(shape),
                Some(AllReduceAlgo::LamportTwoShot) => shapes.two_shot = Some(shape),
                _ => return Err(format!("{name:?} is not lamport or lamport-two-shot")),
            }
        }
        Ok(shapes)
    }
}

/// The launch shape of the push form (`INTRANODE_PUSH_LAUNCH`): the most
/// blocks and chunk bytes of a launch, its threads and ring slots, and the
/// scratch its rings may take; the host fits the chunk to the symmetric
/// buffer and the message (`comm::all_reduce::push_launch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PushShape {
    /// The most blocks of a launch (`blocks=`, capped at the SM count).
    pub max_blocks: usize,
    /// Threads per block (`threads=`).
    pub threads: usize,
    /// The most bytes per ring slot (`chunk=`), cut to what the
    /// allocation holds.
    pub max_chunk_bytes: usize,
    /// Ring slots per block and peer (`slots=`).
    pub slots: usize,
    /// Tiles of lookahead (`intranode_kernels_gpu::math::push_lookahead`), 0 for
    /// the default of the slots.
    pub lookahead: usize,
    /// The symmetric buffer is allocated `max(buffer_bytes,
    /// scratch_bytes)`; the forms other than the push form keep working
    /// in halves of `buffer_bytes` (`IntraNodeComm::buffer_bytes`).
    pub scratch_bytes: usize,
    /// Whether launches run [`doubled`](PushShape::doubled) (`double=0|1`);
    /// `None` (the default): where [`PushShape::for_use`]'s measurements
    /// say so.
    pub double: Option<bool>,
}

/// What a push launch serves: the rule for doubling its blocks
/// ([`PushShape::for_use`]) differs between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushUse {
    AllReduce,
    ReduceScatter,
    AllGather,
}

/// World sizes whose push all-reduce runs [`PushShape::doubled`] by
/// default. On 4 H100 it was 3.1-3.4 % faster from 64 MiB in four turns
/// over two sessions (v17 call 4, v18 call A; docs/perf/v17/NOTES.md,
/// docs/perf/v18/NOTES.md): 321.6 against 332.2 us at 64 MiB, 1207
/// against 1249 at 256 MiB, 4747 against 4914 at 1 GiB, and even at 16
/// MiB. Ranks that wait and fence per tile leave their SM idle; a second
/// block on it runs meanwhile. On 2 H200 it changed nothing (+0.3 % at 1
/// GiB, +3 % at 16 MiB), and on 3 H100 it was within 2 % either way
/// (v18 call A), so those keep one block per SM.
const ALL_REDUCE_DOUBLED_WORLDS: [usize; 1] = [4];

/// World sizes whose push reduce-scatter runs [`PushShape::doubled`] by
/// default: two blocks share an SM, so one block's pushes go on while the
/// other reduces (a block's reduce stores only into its own GPU, and it
/// runs before the block's pushes of each tile). On 2 H200 (v17,
/// docs/perf/v17/NOTES.md) that took 256 MiB from 464.8 to 406.7 us and
/// 1 GiB from 1805 to 1531 (0.89x NCCL to 0.76x; 350.7 GB/s) and left 64
/// MiB even (124.8 against 125.6). On 4 H100 it was 3 % slower (v17 call
/// 4): the rings of 264 blocks share the same scratch, so the chunks
/// halve to 21 KiB.
const REDUCE_SCATTER_DOUBLED_WORLDS: [usize; 1] = [2];

/// Registers of one SM of every GPU this crate runs on (sm_80 and sm_90:
/// 64 Ki 32-bit registers), which bound the push form's blocks per SM
/// ([`PushShape::for_sms`]).
const PUSH_REGISTERS_PER_SM: usize = 64 << 10;

/// Most slots per ring of the push form: a bound against typos.
pub const MAX_PUSH_SLOTS: usize = 16;

/// Most scratch of the push form ([`PushShape::scratch_bytes`]): 1 GiB, a
/// bound against typos; the largest shape of the issue-28 sweep (132
/// blocks, 4 slots of 256 KiB, 2 ranks) takes 264 MiB.
pub const MAX_PUSH_SCRATCH_BYTES: usize = 1 << 30;

/// The push form's scratch unit: the symmetric buffer's granularity
/// (`rendezvous::BUFFER_GRANULARITY_BYTES`).
const PUSH_SCRATCH_GRANULARITY_BYTES: usize = 4096;

impl Default for PushShape {
    /// From the issue-28 sweeps on 2 H200 (docs/PERF_NOTES.md, v12;
    /// docs/perf/v12/push2-h200x2/): 132 blocks of 512 threads (one per SM
    /// of an H100/H200: 80 registers a thread at 2 ranks leave room for
    /// one 512-thread block per SM), chunks of 64 KiB, 2 slots per ring,
    /// lookahead 1 was the fastest shape measured at 64 MiB (332 GB/s bus
    /// bandwidth; 271 at 16 MiB, 353 at 256 MiB); 132 blocks of 128 KiB
    /// chunks reached 362 GB/s at 1 GiB. Fewer blocks were slower at every
    /// size (64: 317 / 343 at 64 / 256 MiB), and more slots or lookahead
    /// were slower (one more pipeline fill per call). The rendezvous caps
    /// the blocks at the GPU's SM count (`PushShape::for_sms`). Its rings
    /// take `2 x 132 x (world - 1) x 2 x 64 KiB`: 33 MiB on 2 ranks, the
    /// default scratch. So on 2 ranks the symmetric buffer grows from 10
    /// to 33 MiB per rank and communicator (beside the 64 MiB of the
    /// Lamport buffers in the pad); on more ranks the chunk shrinks to fit
    /// (not measured there, and auto does not pick the push form there,
    /// `algo::Crossovers::push_min_bytes`).
    fn default() -> Self {
        PushShape {
            max_blocks: 132,
            threads: MAX_THREADS_PER_BLOCK,
            max_chunk_bytes: 64 << 10,
            slots: 2,
            lookahead: 0,
            scratch_bytes: 33 << 20,
            double: None,
        }
    }
}

impl PushShape {
    /// The shape with its blocks capped at what the GPU's `sms` hold at
    /// once: a larger grid runs in waves, and a block of the first wave
    /// could wait on a peer's block that is only scheduled in a later
    /// one. An SM holds `PUSH_REGISTERS_PER_SM / (128 x threads)` blocks
    /// (every kernel is within 128 registers a thread, `cargo xtask
    /// check-ptx`): one of 512 threads, two of 256. Every rank's capped
    /// shape goes into its rendezvous request, so ranks on GPUs of
    /// different SM counts get a clear mismatch error, not a hang.
    pub fn for_sms(self, sms: usize) -> Self {
        let per_sm = (PUSH_REGISTERS_PER_SM / (128 * self.threads.max(1))).max(1);
        PushShape {
            max_blocks: self.max_blocks.min(sms.max(1) * per_sm),
            ..self
        }
    }

    /// Twice the blocks of half the threads each: the same threads per
    /// GPU, two blocks where one was. The shape as it is where that cannot
    /// be: twice the blocks past `layout::MAX_BLOCKS`, or threads that do
    /// not halve into a multiple of 32. A shape within
    /// [`for_sms`](Self::for_sms)'s cap stays within it doubled (a block
    /// of half the threads needs half the registers).
    pub fn doubled(self) -> Self {
        let blocks = self.max_blocks * 2;
        let threads = self.threads / 2;
        if blocks > intranode_kernels_gpu::layout::MAX_BLOCKS
            || threads < 32
            || !threads.is_multiple_of(32)
        {
            return self;
        }
        PushShape {
            max_blocks: blocks,
            threads,
            ..self
        }
    }

    /// The shape a launch for `what` on `world` ranks runs: doubled where
    /// `double=1`, or where `double` is unset and the world size is one
    /// the measurements doubled ([`ALL_REDUCE_DOUBLED_WORLDS`],
    /// [`REDUCE_SCATTER_DOUBLED_WORLDS`]; the all-gather never gained).
    /// The one place that decides it, so the rendezvous's runnable check
    /// and the launches agree.
    pub(crate) fn for_use(self, what: PushUse, world: usize) -> Self {
        let double = self.double.unwrap_or(match what {
            PushUse::AllReduce => ALL_REDUCE_DOUBLED_WORLDS.contains(&world),
            PushUse::ReduceScatter => REDUCE_SCATTER_DOUBLED_WORLDS.contains(&world),
            PushUse::AllGather => false,
        });
        if double { self.doubled() } else { self }
    }

    /// Parses a value of `INTRANODE_PUSH_LAUNCH`; the error says what is wrong
    /// with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut shape = PushShape::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not NAME=NUMBER"))?;
            if name.trim() == "double" {
                shape.double = match value.trim() {
                    "0" => Some(false),
                    "1" => Some(true),
                    _ => return Err(format!("{part:?}: double must be 0 or 1")),
                };
                continue;
            }
            let value = value
                .trim()
                .parse::<usize>()
                .map_err(|e| format!("{value:?} in {part:?}: {e}"))?;
            let (field, ok, expected) = match name.trim() {
                "blocks" => (
                    &mut shape.max_blocks,
                    (1..=intranode_kernels_gpu::layout::MAX_BLOCKS).contains(&value),
                    "1 to 264",
                ),
                "threads" => (
                    &mut shape.threads,
                    (32..=MAX_THREADS_PER_BLOCK).contains(&value) && value.is_multiple_of(32),
                    "a multiple of 32 up to 512",
                ),
                "chunk" => (
                    &mut shape.max_chunk_bytes,
                    value >= 16 && value.is_multiple_of(16),
                    "a positive multiple of 16 bytes",
                ),
                "slots" => (
                    &mut shape.slots,
                    (2..=MAX_PUSH_SLOTS).contains(&value),
                    "2 to 16",
                ),
                "lookahead" => (
                    &mut shape.lookahead,
                    value < MAX_PUSH_SLOTS,
                    "0 (the default) to 15, below slots",
                ),
                "scratch" => (
                    &mut shape.scratch_bytes,
                    value <= MAX_PUSH_SCRATCH_BYTES
                        && value.is_multiple_of(PUSH_SCRATCH_GRANULARITY_BYTES),
                    "a multiple of 4096 bytes up to 1 GiB",
                ),
                other => {
                    return Err(format!(
                        "{other:?} is not blocks, threads, chunk, slots, lookahead, scratch or double"
                    ));
                }
            };
            if !ok {
                return Err(format!("{part:?}: {name} must be {expected}"));
            }
            *field = value;
        }
        if shape.lookahead >= shape.slots {
            return Err(format!(
                "lookahead={} must be below slots={} (0 for the default)",
                shape.lookahead, shape.slots
            ));
        }
        Ok(shape)
    }
}

/// A setting the library cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// An environment switch with a value it cannot mean.
    #[error("{var}={value:?}: expected {expected}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What would have been accepted.
        expected: String,
    },
    /// The crossover file `INTRANODE_TUNING_FILE` names cannot be used.
    #[error("{TUNING_FILE_ENV}={}: {reason}", path.display())]
    TuningFile {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read or parsed.
        reason: String,
    },
}

impl ConfigError {
    fn invalid(var: &'static str, value: String, expected: impl Into<String>) -> Self {
        ConfigError::Invalid {
            var,
            value,
            expected: expected.into(),
        }
    }
}

/// Settings of a communicator. [`CommConfig::from_env`] reads every env
/// switch above; nothing else in the library reads them.
/// [`Communicator::new`](crate::Communicator::new) reads the environment;
/// [`Communicator::with_config`](crate::Communicator::with_config) takes
/// settings made in code.
///
/// # Example
///
/// ```
/// use intranode::{AllReduceAlgo, CommConfig};
///
/// // The environment's settings (INTRANODE_*), then two changed in code.
/// let mut config = CommConfig::from_env()?;
/// config.barrier_timeout_ms = 3_000; // report a peer that hangs after 3 s
/// config.forced_algo = Some(AllReduceAlgo::Nccl); // every all-reduce on NCCL
///
/// // Or the defaults, whatever the environment says.
/// let defaults = CommConfig {
///     buffer_bytes: 16 << 20,
///     ..CommConfig::default()
/// };
/// assert!(defaults.enabled);
/// // Then, on every rank (settings the rendezvous compares must agree):
/// // let comm = Communicator::with_config(stream, store, rank, world, &config)?;
/// # Ok::<(), intranode::config::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommConfig {
    /// Whether the fast path may be used at all (`INTRANODE_ENABLE_INTRA_NODE_COMM`).
    pub enabled: bool,
    /// Whether ranks may share a GPU (`INTRANODE_ALLOW_OVERLAPPING_DEVICES`).
    pub allow_overlapping_devices: bool,
    /// Whether to treat the topology as fully connected (`INTRANODE_TEST_INTRA_NODE_COMM`).
    pub force_fully_connected: bool,
    /// Bytes of each rank's symmetric buffer (`INTRANODE_SYMM_MEM_BUFFER_BYTES`).
    pub buffer_bytes: usize,
    /// How symmetric memory is shared (`INTRANODE_SYMM_MEM_BACKEND`).
    pub backend: Backend,
    /// Extra checks of every call (`INTRANODE_DEBUG`).
    pub debug: DebugLevel,
    /// Bound of every GPU wait on a peer, in milliseconds
    /// (`INTRANODE_BARRIER_TIMEOUT_MS`).
    pub barrier_timeout_ms: u64,
    /// The all-reduce algorithm every call must use (`INTRANODE_ALL_REDUCE_ALGO`).
    pub forced_algo: Option<AllReduceAlgo>,
    /// The path every broadcast must take (`INTRANODE_BROADCAST_ALGO`).
    pub forced_broadcast: Option<BroadcastAlgo>,
    /// The path every all-reduce + residual + RMSNorm must take where it
    /// can (`INTRANODE_NORM_PATH`).
    pub forced_norm: Option<NormPath>,
    /// Where each all-reduce algorithm takes over (`INTRANODE_TUNING_FILE`).
    pub crossovers: Crossovers,
    /// Fixed launch shapes of the Lamport forms (`INTRANODE_LAMPORT_LAUNCH`).
    pub lamport_shapes: LamportShapes,
    /// The push form's launch shape (`INTRANODE_PUSH_LAUNCH`).
    pub push_shape: PushShape,
    /// Whether collectives may launch overlapped (`INTRANODE_LAUNCH_OVERLAP`).
    pub launch_overlap: bool,
    /// Which embedded kernel image to load (`INTRANODE_KERNEL_IMAGE`).
    pub kernel_image: KernelImage,
    /// Whether to print the set-up times to stderr (`INTRANODE_TIMING`).
    pub print_setup_times: bool,
}

impl Default for CommConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allow_overlapping_devices: false,
            force_fully_connected: false,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            backend: Backend::Vmm,
            debug: DebugLevel::Off,
            barrier_timeout_ms: DEFAULT_BARRIER_TIMEOUT_MS,
            forced_algo: None,
            forced_broadcast: None,
            forced_norm: None,
            crossovers: Crossovers::default(),
            lamport_shapes: LamportShapes::default(),
            push_shape: PushShape::default(),
            launch_overlap: true,
            kernel_image: KernelImage::Auto,
            print_setup_times: false,
        }
    }
}

/// A value of a switch, `None` when unset or blank (blank means unset for
/// every switch, so `VAR= cmd` restores the default).
fn set(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

fn parse_bool(
    var: &'static str,
    value: Option<String>,
    default: bool,
) -> Result<bool, ConfigError> {
    let Some(value) = set(value) else {
        return Ok(default);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::invalid(
            var,
            value,
            "1/true/yes/on or 0/false/no/off",
        )),
    }
}

/// A positive integer switch that must also pass `ok`.
fn parse_positive<T: std::str::FromStr + PartialOrd + Default>(
    var: &'static str,
    value: Option<String>,
    default: T,
    ok: impl Fn(&T) -> bool,
    expected: &'static str,
) -> Result<T, ConfigError> {
    let Some(value) = set(value) else {
        return Ok(default);
    };
    match value.trim().parse::<T>() {
        Ok(v) if v > T::default() && ok(&v) => Ok(v),
        _ => Err(ConfigError::invalid(var, value, expected)),
    }
}

/// A switch that names one of a set of values.
fn parse_named<T>(
    var: &'static str,
    value: Option<String>,
    parse: impl Fn(&str) -> Option<T>,
    expected: &'static str,
) -> Result<Option<T>, ConfigError> {
    match set(value) {
        None => Ok(None),
        Some(v) => parse(&v)
            .map(Some)
            .ok_or_else(|| ConfigError::invalid(var, v, expected)),
    }
}

impl CommConfig {
    /// The settings from the process environment (the `*_ENV` constants);
    /// unset variables take the [`Default`] values.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`CommConfig::from_env`] with variables looked up by `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let default = Self::default();
        let buffer_bytes = parse_positive(
            BUFFER_BYTES_ENV,
            var(BUFFER_BYTES_ENV),
            default.buffer_bytes,
            |b: &usize| b.is_multiple_of(BUFFER_GRANULARITY_BYTES),
            "a positive multiple of 4096 bytes",
        )?;
        let backend = parse_named(
            BACKEND_ENV,
            var(BACKEND_ENV),
            Backend::parse,
            "`vmm` or `cuda-ipc`",
        )?
        .unwrap_or(default.backend);
        let debug = parse_named(
            DEBUG_ENV,
            var(DEBUG_ENV),
            DebugLevel::parse,
            "`detail` or `off`",
        )?
        .unwrap_or(default.debug);
        let barrier_timeout_ms = parse_positive(
            BARRIER_TIMEOUT_ENV,
            var(BARRIER_TIMEOUT_ENV),
            default.barrier_timeout_ms,
            |_| true,
            "a positive number of milliseconds",
        )?;
        let forced_algo = parse_named(
            FORCE_ALGO_ENV,
            var(FORCE_ALGO_ENV),
            AllReduceAlgo::from_name,
            "lamport, lamport-two-shot, one-shot, two-shot, hcm, push or nccl",
        )?;
        let forced_broadcast = parse_named(
            FORCE_BROADCAST_ENV,
            var(FORCE_BROADCAST_ENV),
            BroadcastAlgo::from_name,
            "symm-mem or nccl",
        )?;
        // `auto` is the decision's own choice, as unset.
        let forced_norm = parse_named(
            NORM_PATH_ENV,
            var(NORM_PATH_ENV).filter(|v| !v.trim().eq_ignore_ascii_case("auto")),
            NormPath::from_name,
            "fused, unfused or auto",
        )?;
        let crossovers = match set(var(TUNING_FILE_ENV)) {
            None => default.crossovers,
            Some(path) => read_crossovers(Path::new(&path))?,
        };
        let lamport_shapes = match set(var(LAMPORT_LAUNCH_ENV)) {
            None => default.lamport_shapes,
            Some(text) => LamportShapes::parse(&text)
                .map_err(|why| ConfigError::invalid(LAMPORT_LAUNCH_ENV, text, why))?,
        };
        let push_shape = match set(var(PUSH_LAUNCH_ENV)) {
            None => default.push_shape,
            Some(text) => PushShape::parse(&text)
                .map_err(|why| ConfigError::invalid(PUSH_LAUNCH_ENV, text, why))?,
        };
        Ok(Self {
            enabled: parse_bool(ENABLE_ENV, var(ENABLE_ENV), default.enabled)?,
            allow_overlapping_devices: parse_bool(
                ALLOW_OVERLAPPING_ENV,
                var(ALLOW_OVERLAPPING_ENV),
                default.allow_overlapping_devices,
            )?,
            force_fully_connected: parse_bool(
                TEST_ENV,
                var(TEST_ENV),
                default.force_fully_connected,
            )?,
            buffer_bytes,
            backend,
            debug,
            barrier_timeout_ms,
            forced_algo,
            forced_broadcast,
            forced_norm,
            crossovers,
            lamport_shapes,
            push_shape,
            launch_overlap: parse_bool(
                LAUNCH_OVERLAP_ENV,
                var(LAUNCH_OVERLAP_ENV),
                default.launch_overlap,
            )?,
            kernel_image: parse_named(
                KERNEL_IMAGE_ENV,
                var(KERNEL_IMAGE_ENV),
                |v| v.trim().to_ascii_lowercase().parse().ok(),
                "auto, cubin or ptx",
            )?
            .unwrap_or(default.kernel_image),
            print_setup_times: parse_bool(TIMING_ENV, var(TIMING_ENV), default.print_setup_times)?,
        })
    }

    /// [`barrier_timeout_ms`](Self::barrier_timeout_ms) as a duration.
    pub fn barrier_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.barrier_timeout_ms)
    }
}

/// Reads a crossover file (JSON, as `intranode-bench bench --tune` writes).
pub fn read_crossovers(path: &Path) -> Result<Crossovers, ConfigError> {
    let fail = |reason: String| ConfigError::TuningFile {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("reading: {e}")))?;
    serde_json::from_str(&text).map_err(|e| fail(format!("parsing: {e}")))
}

/// The names of the environment switches [`CommConfig::from_env`] reads
/// (README, "Environment"), and the GPU test suites' requirement: for
/// this crate and, through `internals::switches`, its test suites and
/// benchmark; users set the variables by name or the fields of
/// [`CommConfig`].
pub(crate) mod switches;

// Values the settings take, defined here (the bottom floor) and
// re-exported where they are used: `symm_mem` (Backend,
// DEFAULT_BUFFER_BYTES), `rendezvous` (BUFFER_GRANULARITY_BYTES),
// `kernels` (KernelImage).

/// Default size of each rank's data buffer: 10 MiB (PyTorch's
/// `kDefaultBufferSize`).
pub const DEFAULT_BUFFER_BYTES: usize = 10 << 20;

/// What the intra-node comm's symmetric buffer size must be a multiple of.
/// The kernels split the buffer into two halves of whole 16-byte vectors
/// and require a non-zero half (`run_chunks` divides by it), so anything
/// below 32 bytes, or not a multiple of it, would be undefined behaviour on
/// the GPU; one page is a round bound that keeps every half 16-byte
/// aligned with room to spare.
pub const BUFFER_GRANULARITY_BYTES: usize = 4096;

/// How blocks are shared between the ranks' processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Backend {
    /// CUDA virtual memory management with POSIX file descriptors.
    Vmm,
    /// Legacy `cuIpcGetMemHandle` / `cuIpcOpenMemHandle`.
    CudaIpc,
}

impl Backend {
    /// The backend named `text` (`vmm`, `cuda-ipc`; case-insensitive,
    /// `_` for `-` accepted).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "vmm" => Some(Self::Vmm),
            "cuda-ipc" | "ipc" => Some(Self::CudaIpc),
            _ => None,
        }
    }

    /// The name [`Backend::parse`] accepts.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Vmm => "vmm",
            Self::CudaIpc => "cuda-ipc",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which embedded image a [`KernelModule`](crate::kernels::KernelModule) loads (`INTRANODE_KERNEL_IMAGE`,
/// `config::KERNEL_IMAGE_ENV`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelImage {
    /// The cubin where the device can run it, else the PTX (JIT compiled
    /// by the driver).
    #[default]
    Auto,
    /// The cubin, or an error where the device cannot run it.
    Cubin,
    /// Always the PTX: the driver JIT compiles it (or takes it from its
    /// cache), as before cubins were embedded; for comparisons.
    Ptx,
}

impl std::str::FromStr for KernelImage {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "" | "auto" => Ok(KernelImage::Auto),
            "cubin" => Ok(KernelImage::Cubin),
            "ptx" => Ok(KernelImage::Ptx),
            other => Err(format!("{other:?} is not auto, cubin or ptx")),
        }
    }
}

#[cfg(test)]
mod tests;
