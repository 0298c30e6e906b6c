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
    pub max_blocks: usize,
    pub threads: usize,
}

/// Launch shapes of the Lamport forms fixed by `INTRANODE_LAMPORT_LAUNCH`;
/// `None` keeps the measured rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LamportShapes {
    pub one_shot: Option<LaunchShape>,
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
    pub max_blocks: usize,
    pub threads: usize,
    pub max_chunk_bytes: usize,
    pub slots: usize,
    /// Tiles of lookahead (`intranode_kernels_gpu::math::push_lookahead`), 0 for
    /// the default of the slots.
    pub lookahead: usize,
    /// The symmetric buffer is allocated `max(buffer_bytes,
    /// scratch_bytes)`; the forms other than the push form keep working
    /// in halves of `buffer_bytes` (`IntraNodeComm::buffer_bytes`).
    pub scratch_bytes: usize,
}

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
        }
    }
}

impl PushShape {
    /// The shape with its blocks capped at the GPU's `sms`: a larger grid
    /// runs in waves, and a block of the first wave could wait on a peer's
    /// block that is only scheduled in a later one. Every rank's capped
    /// shape goes into its rendezvous request, so ranks on GPUs of
    /// different SM counts get a clear mismatch error, not a hang.
    pub fn for_sms(self, sms: usize) -> Self {
        PushShape {
            max_blocks: self.max_blocks.min(sms.max(1)),
            ..self
        }
    }

    /// Parses a value of `INTRANODE_PUSH_LAUNCH`; the error says what is wrong
    /// with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut shape = PushShape::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not NAME=NUMBER"))?;
            let value = value
                .trim()
                .parse::<usize>()
                .map_err(|e| format!("{value:?} in {part:?}: {e}"))?;
            let (field, ok, expected) = match name.trim() {
                "blocks" => (
                    &mut shape.max_blocks,
                    (1..=intranode_kernels_gpu::layout::MAX_BLOCKS).contains(&value),
                    "1 to 160",
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
                        "{other:?} is not blocks, threads, chunk, slots, lookahead or scratch"
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
pub(crate) mod switches {
    use super::{ConfigError, set};

    /// `0` turns the fast path off (seed `ENABLE_INTRA_NODE_COMM`); on by
    /// default.
    pub const ENABLE_ENV: &str = "INTRANODE_ENABLE_INTRA_NODE_COMM";

    /// `1` treats the topology as fully connected whatever NVML says (seed
    /// `TEST_INTRA_NODE_COMM`), for tests on machines without NVLink.
    pub const TEST_ENV: &str = "INTRANODE_TEST_INTRA_NODE_COMM";

    /// `1` lets several ranks share one GPU (seed
    /// `allow_overlapping_devices`); they count as fully connected.
    pub const ALLOW_OVERLAPPING_ENV: &str = "INTRANODE_ALLOW_OVERLAPPING_DEVICES";

    /// Size in bytes of each rank's symmetric buffer (default
    /// `DEFAULT_BUFFER_BYTES`), a positive multiple of
    /// `BUFFER_GRANULARITY_BYTES`.
    pub const BUFFER_BYTES_ENV: &str = "INTRANODE_SYMM_MEM_BUFFER_BYTES";

    /// How symmetric memory is shared between processes: `vmm` (default) or
    /// `cuda-ipc`.
    pub const BACKEND_ENV: &str = "INTRANODE_SYMM_MEM_BACKEND";

    /// `detail` turns the call fingerprints on (NOTE [call fingerprints] in
    /// `comm/debug.rs`); `off` (or unset) leaves them off.
    pub const DEBUG_ENV: &str = "INTRANODE_DEBUG";

    /// Bound of every GPU wait on a peer, in milliseconds.
    pub const BARRIER_TIMEOUT_ENV: &str = "INTRANODE_BARRIER_TIMEOUT_MS";

    /// Forces an all-reduce algorithm: `lamport`, `lamport-two-shot`,
    /// `one-shot`, `two-shot`, `hcm`, `push` or `nccl`.
    pub const FORCE_ALGO_ENV: &str = "INTRANODE_ALL_REDUCE_ALGO";

    /// Forces the path of `Communicator::all_reduce_residual_rmsnorm`:
    /// `fused` (the one-launch kernel wherever it can run) or `unfused` (the
    /// all-reduce, then the norm kernel), for comparisons; unset, blank or
    /// `auto`: `algo::decide_norm` chooses.
    pub const NORM_PATH_ENV: &str = "INTRANODE_NORM_PATH";

    /// Forces the broadcast path: `symm-mem` or `nccl`.
    pub const FORCE_BROADCAST_ENV: &str = "INTRANODE_BROADCAST_ALGO";

    /// Path of a crossover file written by `intranode-bench bench --tune`, in
    /// place of the built-in [`Crossovers`](super::Crossovers).
    pub const TUNING_FILE_ENV: &str = "INTRANODE_TUNING_FILE";

    /// Fixes the launch shape of the Lamport forms, for tuning runs:
    /// `lamport=BLOCKSxTHREADS,lamport-two-shot=BLOCKSxTHREADS` (either part
    /// may be left out; BLOCKS is the most blocks per launch), in place of the
    /// rule of NOTE [lamport launch shape] in `comm/all_reduce.rs`. The
    /// Lamport kernels tie no rank's grid to another's (each rank polls its
    /// own buffer word by word), so ranks may even differ; the barrier-based
    /// algorithms keep their fixed shapes, which the pad layout counts on.
    pub const LAMPORT_LAUNCH_ENV: &str = "INTRANODE_LAMPORT_LAUNCH";

    /// The launch shape of the push form (NOTE [push all-reduce] in
    /// `kernels-gpu/src/push.rs`), for tuning runs: comma-separated
    /// `blocks=N` (most blocks, 1 to `layout::MAX_BLOCKS` = 160), `threads=N`
    /// (a multiple of 32 up to 512), `chunk=BYTES` (most bytes of a ring
    /// slot, a multiple of 16), `slots=N` (slots per ring, 2 to 16),
    /// `lookahead=N` (tiles the pushes run ahead of the reductions, 1 to
    /// `slots - 1`; 0, the default, takes 1 below 4 slots and `slots / 2`
    /// from 4 on: `intranode_kernels_gpu::math::push_lookahead`) and `scratch=BYTES`
    /// (the symmetric buffer is allocated at least this large for the rings,
    /// a multiple of 4096 up to 1 GiB; 0: the rings fit the buffer of
    /// `BUFFER_BYTES_ENV`); a part left out keeps its default
    /// ([`PushShape::default`](super::PushShape::default)). Its kernels meet per block and lay their
    /// rings out from it, so every rank must set the same value (the
    /// rendezvous checks). The rendezvous caps `blocks` at the GPU's SM
    /// count (`PushShape::for_sms`): at 80 to 128 registers of 512 threads
    /// (`cargo xtask check-ptx`) one block fills an SM's registers, and a
    /// grid larger than the GPU would run in waves whose first could wait
    /// on a peer block of a later one.
    pub const PUSH_LAUNCH_ENV: &str = "INTRANODE_PUSH_LAUNCH";

    /// `0` turns off launch overlap (programmatic dependent launch of the
    /// collectives, NOTE [launch overlap] in `kernels/launch.rs`); on by
    /// default where the GPU has it (sm_90 and later).
    pub const LAUNCH_OVERLAP_ENV: &str = "INTRANODE_LAUNCH_OVERLAP";

    /// Which embedded kernel image to load: `auto` (default: the machine
    /// code where the device runs it, else the PTX), `cubin` (an error where
    /// the device cannot run it) or `ptx` (the driver JIT compiles the PTX,
    /// as before cubins were embedded: for comparisons).
    pub const KERNEL_IMAGE_ENV: &str = "INTRANODE_KERNEL_IMAGE";

    /// `1` prints each communicator's set-up times (`SetupTimes`: rendezvous,
    /// topology, kernel load, symmetric memory, NCCL) to stderr, one line per
    /// rank; off by default (they are always a `tracing` debug event, and
    /// `Communicator::setup_times`).
    pub const TIMING_ENV: &str = "INTRANODE_TIMING";

    /// Turns a GPU test's skip into a failure: the number of GPUs a device
    /// run promises (`INTRANODE_REQUIRE_GPUS=4`). Read by [`required_gpus`].
    pub const REQUIRE_GPUS_ENV: &str = "INTRANODE_REQUIRE_GPUS";

    /// The number of GPUs a device run promises (`INTRANODE_REQUIRE_GPUS`; 0 when
    /// unset): the GPU test suites fail instead of skipping below it.
    pub fn required_gpus() -> Result<usize, ConfigError> {
        match set(std::env::var(REQUIRE_GPUS_ENV).ok()) {
            None => Ok(0),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| ConfigError::invalid(REQUIRE_GPUS_ENV, v, "a number of GPUs")),
        }
    }
}

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
mod tests {
    use super::*;

    #[test]
    fn config_from_vars() {
        let none = |_: &str| None;
        assert_eq!(
            CommConfig::from_vars(none).expect("defaults"),
            CommConfig::default()
        );
        let vars = |name: &str| {
            Some(
                match name {
                    ENABLE_ENV => "0",
                    TEST_ENV => "1",
                    ALLOW_OVERLAPPING_ENV => "true",
                    BUFFER_BYTES_ENV => "4096",
                    BACKEND_ENV => "cuda-ipc",
                    DEBUG_ENV => "Detail",
                    BARRIER_TIMEOUT_ENV => " 2500 ",
                    FORCE_ALGO_ENV => "lamport-two-shot",
                    FORCE_BROADCAST_ENV => "nccl",
                    NORM_PATH_ENV => " unfused ",
                    LAMPORT_LAUNCH_ENV => "lamport=8x128",
                    PUSH_LAUNCH_ENV => " blocks=16, slots=8 ",
                    LAUNCH_OVERLAP_ENV => "off",
                    KERNEL_IMAGE_ENV => " PTX ",
                    TIMING_ENV => "1",
                    _ => return None,
                }
                .to_owned(),
            )
        };
        let c = CommConfig::from_vars(vars).expect("all set");
        assert_eq!(
            c,
            CommConfig {
                enabled: false,
                allow_overlapping_devices: true,
                force_fully_connected: true,
                buffer_bytes: 4096,
                backend: Backend::CudaIpc,
                debug: DebugLevel::Detail,
                barrier_timeout_ms: 2500,
                forced_algo: Some(AllReduceAlgo::LamportTwoShot),
                forced_broadcast: Some(BroadcastAlgo::Nccl),
                forced_norm: Some(NormPath::Unfused),
                crossovers: Crossovers::default(),
                lamport_shapes: LamportShapes {
                    one_shot: Some(LaunchShape {
                        max_blocks: 8,
                        threads: 128
                    }),
                    two_shot: None,
                },
                push_shape: PushShape {
                    max_blocks: 16,
                    slots: 8,
                    ..PushShape::default()
                },
                launch_overlap: false,
                kernel_image: KernelImage::Ptx,
                print_setup_times: true,
            }
        );
        // Empty values mean unset.
        let empty = |_: &str| Some(String::new());
        assert_eq!(
            CommConfig::from_vars(empty).expect("empty"),
            CommConfig::default()
        );
        let auto = |name: &str| (name == NORM_PATH_ENV).then(|| "Auto".to_owned());
        assert_eq!(CommConfig::from_vars(auto).expect("auto").forced_norm, None);
        let fused = |name: &str| (name == NORM_PATH_ENV).then(|| "fused".to_owned());
        assert_eq!(
            CommConfig::from_vars(fused).expect("fused").forced_norm,
            Some(NormPath::Fused)
        );
    }

    #[test]
    fn push_shapes_keep_to_the_sms() {
        let d = PushShape::default();
        // An H100/H200 (132 SMs) takes the default whole; an A100 (108)
        // gets one block per SM; nothing else of the shape moves.
        assert_eq!(d.for_sms(132), d);
        assert_eq!(
            d.for_sms(108),
            PushShape {
                max_blocks: 108,
                ..d
            }
        );
        assert_eq!(d.for_sms(0).max_blocks, 1);
    }

    #[test]
    fn push_shapes_parse_or_say_why_not() {
        assert_eq!(PushShape::parse("").unwrap(), PushShape::default());
        assert_eq!(
            PushShape::parse("blocks=24,threads=256,chunk=131072,slots=6").unwrap(),
            PushShape {
                max_blocks: 24,
                threads: 256,
                max_chunk_bytes: 128 << 10,
                slots: 6,
                ..PushShape::default()
            }
        );
        assert_eq!(
            PushShape::parse("slots=3,lookahead=2").unwrap(),
            PushShape {
                slots: 3,
                lookahead: 2,
                ..PushShape::default()
            }
        );
        assert_eq!(
            PushShape::parse("blocks=132,scratch=0").unwrap(),
            PushShape {
                max_blocks: 132,
                scratch_bytes: 0,
                ..PushShape::default()
            }
        );
        for bad in [
            "blocks",
            "blocks=0",
            "blocks=161",
            "scratch=100",
            "slots=3,lookahead=3",
            "lookahead=2",
            "scratch=2147483648",
            "threads=48",
            "threads=1024",
            "chunk=0",
            "chunk=100",
            "slots=1",
            "slots=17",
            "warps=4",
            "blocks=x",
        ] {
            let err = PushShape::parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn config_errors_name_the_variable() {
        for (var, value) in [
            (ENABLE_ENV, "maybe"),
            (TEST_ENV, "2"),
            (ALLOW_OVERLAPPING_ENV, "yes please"),
            (BUFFER_BYTES_ENV, "0"),
            (BUFFER_BYTES_ENV, "10MiB"),
            (BARRIER_TIMEOUT_ENV, "abc"),
            (BARRIER_TIMEOUT_ENV, "0"),
            (FORCE_ALGO_ENV, "lamprot"),
            (FORCE_BROADCAST_ENV, "symm"),
            (NORM_PATH_ENV, "fuse"),
            (BUFFER_BYTES_ENV, "4097"),
            (BUFFER_BYTES_ENV, "-4096"),
            (BACKEND_ENV, "nvshmem"),
            (DEBUG_ENV, "verbose"),
            (LAMPORT_LAUNCH_ENV, "lamport=8"),
            (LAMPORT_LAUNCH_ENV, "one-shot=8x128"),
            (LAMPORT_LAUNCH_ENV, "lamport=8x100"),
        ] {
            let e = CommConfig::from_vars(|name| (name == var).then(|| value.to_owned()))
                .expect_err(var);
            assert!(
                matches!(&e, ConfigError::Invalid { var: v, .. } if *v == var),
                "{e}"
            );
            assert!(
                e.to_string().contains(var) && e.to_string().contains(value),
                "{e}"
            );
        }
    }

    #[test]
    fn a_tuning_file_that_cannot_be_used_is_an_error() {
        let missing = "/nonexistent/intranode-crossovers.json";
        let e = CommConfig::from_vars(|name| (name == TUNING_FILE_ENV).then(|| missing.to_owned()))
            .expect_err("missing file");
        assert!(matches!(e, ConfigError::TuningFile { .. }), "{e}");
        assert!(
            e.to_string().contains(TUNING_FILE_ENV) && e.to_string().contains(missing),
            "{e}"
        );

        let dir = std::env::temp_dir().join(format!("intranode-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{not json").expect("write");
        let e = read_crossovers(&bad).expect_err("bad json");
        assert!(e.to_string().contains("parsing"), "{e}");

        let mut x = Crossovers::default();
        x.lamport_max_bytes[2] = 4096;
        let good = dir.join("good.json");
        std::fs::write(&good, serde_json::to_string(&x).expect("json")).expect("write");
        let path = good.to_string_lossy().into_owned();
        let c = CommConfig::from_vars(|name| (name == TUNING_FILE_ENV).then(|| path.clone()))
            .expect("good file");
        assert_eq!(c.crossovers, x);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lamport_shapes_parse_both_forms() {
        assert_eq!(LamportShapes::parse(""), Ok(LamportShapes::default()));
        let s = LamportShapes::parse(" lamport-two-shot=64x256 , lamport=132x64 ").expect("both");
        assert_eq!(
            s.two_shot,
            Some(LaunchShape {
                max_blocks: 64,
                threads: 256
            })
        );
        assert_eq!(s.one_shot.map(|s| s.max_blocks), Some(132));
        for bad in [
            "lamport",
            "lamport=0x64",
            "lamport=1x1024",
            "lamport=1x48",
            "nccl=1x64",
        ] {
            assert!(LamportShapes::parse(bad).is_err(), "{bad}");
        }
    }
}
