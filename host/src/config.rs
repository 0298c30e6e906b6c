//! Every setting of the library in one typed struct, [`CommConfig`], and
//! the one place that reads the environment switches behind them
//! ([`CommConfig::from_env`]); a value a switch cannot mean is a
//! [`ConfigError`] naming the variable, never a silent default.
//!
//! Apart from it: the launcher's rank variables (`dist_env`, read by the
//! application), the store's client settings (`intranode-store`), and
//! `switches::required_gpus` (crate-private), which only the GPU test
//! suites read.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::decide::Crossovers;
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

// NOTE [l2 prefetch] in `kernels-gpu/src/fused_norm.rs`.
/// The L2 prefetch of the fused all-reduce + residual + RMSNorm
/// (`INTRANODE_L2_PREFETCH`): how many extra blocks ask L2 for the
/// region a caller names
/// ([`Communicator::all_reduce_residual_rmsnorm_prefetch`](crate::Communicator::all_reduce_residual_rmsnorm_prefetch)),
/// and how much of it at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Prefetch {
    /// Extra blocks that prefetch (0: the prefetch is off). Fewer where the
    /// GPU has no SMs left beside the rows' blocks.
    pub blocks: usize,
    /// Most bytes of a region prefetched by one call.
    pub max_bytes: usize,
    /// Where the region is larger than `max_bytes`: spread the pieces
    /// evenly over it (`true`) or take its start (`false`).
    pub spread: bool,
}

impl Default for L2Prefetch {
    /// 8 blocks, 8 MiB from the region's start: about what HBM (~3 TB/s
    /// on H100) brings in the ~3 us a fused call waits on its peers at
    /// TP4, and the best of ten settings in a decode sweep on 4 H100
    /// (2026-11-27, 0236d23: 2 blocks held the kernel ~6 us longer, 32
    /// blocks x 16 MiB gained nothing).
    fn default() -> Self {
        L2Prefetch {
            blocks: 8,
            max_bytes: 8 << 20,
            spread: false,
        }
    }
}

impl L2Prefetch {
    /// Most prefetching blocks (`INTRANODE_L2_PREFETCH`'s bound; the host
    /// gives fewer where the GPU has fewer SMs left).
    pub const MAX_BLOCKS: usize = 256;

    /// Parses a value of `INTRANODE_L2_PREFETCH`: `off` (or `0`), or
    /// comma-separated `blocks=N` (1 to [`MAX_BLOCKS`](Self::MAX_BLOCKS)),
    /// `bytes=N` (a positive multiple of 16) and `spread=0|1`, a part left
    /// out keeping its default; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") || text == "0" {
            return Ok(L2Prefetch {
                blocks: 0,
                ..L2Prefetch::default()
            });
        }
        let mut out = L2Prefetch::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not NAME=VALUE"))?;
            let n = value
                .trim()
                .parse::<usize>()
                .map_err(|e| format!("{value:?} in {part:?}: {e}"))?;
            match name.trim() {
                "blocks" if (1..=Self::MAX_BLOCKS).contains(&n) => out.blocks = n,
                "bytes" if n > 0 && n.is_multiple_of(16) => out.max_bytes = n,
                "spread" if n <= 1 => out.spread = n == 1,
                "blocks" => {
                    return Err(format!(
                        "{part:?}: blocks must be 1 to {}",
                        Self::MAX_BLOCKS
                    ));
                }
                "bytes" => {
                    return Err(format!("{part:?}: bytes must be a positive multiple of 16"));
                }
                "spread" => return Err(format!("{part:?}: spread must be 0 or 1")),
                other => return Err(format!("{other:?} is not blocks, bytes or spread")),
            }
        }
        Ok(out)
    }
}

pub(crate) use push_shape::PushUse;
pub use push_shape::{MAX_PUSH_SCRATCH_BYTES, MAX_PUSH_SLOTS, PushShape};

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
    /// The fused norm's L2 prefetch (`INTRANODE_L2_PREFETCH`).
    pub l2_prefetch: L2Prefetch,
    /// Whether collectives may launch overlapped (`INTRANODE_LAUNCH_OVERLAP`).
    pub launch_overlap: bool,
    /// Which embedded kernel image to load (`INTRANODE_KERNEL_IMAGE`).
    pub kernel_image: KernelImage,
    /// Whether to print the set-up times to stderr (`INTRANODE_TIMING`).
    pub print_setup_times: bool,
    /// The group's name (`INTRANODE_GROUP`): the communicator's store keys
    /// live under `intranode/group/<name>/` ([`key_prefix`](Self::key_prefix)).
    /// Every rank of a group passes the same name; groups sharing a store
    /// pass different ones. `None`: keys under `intranode/`.
    pub group: Option<String>,
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
            l2_prefetch: L2Prefetch::default(),
            launch_overlap: true,
            kernel_image: KernelImage::Auto,
            print_setup_times: false,
            group: None,
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
/// Whether `name` may name a group (`INTRANODE_GROUP`).
fn valid_group(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

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
        let l2_prefetch = match set(var(L2_PREFETCH_ENV)) {
            None => default.l2_prefetch,
            Some(text) => L2Prefetch::parse(&text)
                .map_err(|why| ConfigError::invalid(L2_PREFETCH_ENV, text, why))?,
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
            l2_prefetch,
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
            group: parse_named(
                GROUP_ENV,
                var(GROUP_ENV),
                |v| valid_group(v.trim()).then(|| v.trim().to_owned()),
                "a group name of 1 to 64 letters, digits, '.', '_' or '-'",
            )?,
        })
    }

    /// Where this communicator's store keys live: `intranode`, or
    /// `intranode/group/<name>` for a named group (`INTRANODE_GROUP`).
    /// A name that is no valid group name (set in code) is used as it is,
    /// with its `/` replaced, so keys stay one level deep.
    pub fn key_prefix(&self) -> String {
        match &self.group {
            None => "intranode".to_owned(),
            Some(name) => format!("intranode/group/{}", name.replace('/', "_")),
        }
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
/// this crate (the few its test suites name are in `internals`); users
/// set the variables by name or the fields of [`CommConfig`].
mod push_shape;
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
