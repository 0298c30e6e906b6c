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
/// `intra/debug.rs`); `off` (or unset) leaves them off.
pub const DEBUG_ENV: &str = "INTRANODE_DEBUG";

/// Bound of every GPU wait on a peer, in milliseconds.
pub const BARRIER_TIMEOUT_ENV: &str = "INTRANODE_BARRIER_TIMEOUT_MS";

/// Forces an all-reduce algorithm: `lamport`, `lamport-two-shot`,
/// `one-shot`, `two-shot`, `hcm`, `push` or `nccl`.
pub const FORCE_ALGO_ENV: &str = "INTRANODE_ALL_REDUCE_ALGO";

/// Forces the path of `Communicator::all_reduce_residual_rmsnorm`:
/// `fused` (the one-launch kernel wherever it can run) or `unfused` (the
/// all-reduce, then the norm kernel), for comparisons; unset, blank or
/// `auto`: `decide::decide_norm` chooses.
pub const NORM_PATH_ENV: &str = "INTRANODE_NORM_PATH";

/// Forces the broadcast path: `symm-mem` or `nccl`.
pub const FORCE_BROADCAST_ENV: &str = "INTRANODE_BROADCAST_ALGO";

/// Path of a crossover file written by `intranode-bench bench --tune`, in
/// place of the built-in [`Crossovers`](super::Crossovers).
pub const TUNING_FILE_ENV: &str = "INTRANODE_TUNING_FILE";

/// Fixes the launch shape of the Lamport forms, for tuning runs:
/// `lamport=BLOCKSxTHREADS,lamport-two-shot=BLOCKSxTHREADS` (either part
/// may be left out; BLOCKS is the most blocks per launch), in place of the
/// rule of NOTE [lamport launch shape] in `intra/all_reduce.rs`. The
/// Lamport kernels tie no rank's grid to another's (each rank polls its
/// own buffer word by word), so ranks may even differ; the barrier-based
/// algorithms keep their fixed shapes, which the pad layout counts on.
pub const LAMPORT_LAUNCH_ENV: &str = "INTRANODE_LAMPORT_LAUNCH";

/// The launch shape of the push form (NOTE [push all-reduce] in
/// `kernels-gpu/src/push.rs`), for tuning runs: comma-separated
/// `blocks=N` (most blocks, 1 to `layout::MAX_BLOCKS` = 264), `threads=N`
/// (a multiple of 32 up to 512), `chunk=BYTES` (most bytes of a ring
/// slot, a multiple of 16), `slots=N` (slots per ring, 2 to 16),
/// `lookahead=N` (tiles the pushes run ahead of the reductions, 1 to
/// `slots - 1`; 0, the default, takes 1 below 4 slots and `slots / 2`
/// from 4 on: `intranode_kernels_gpu::index::push_lookahead`) and `scratch=BYTES`
/// (the symmetric buffer is allocated at least this large for the rings,
/// a multiple of 4096 up to 1 GiB; 0: the rings fit the buffer of
/// `BUFFER_BYTES_ENV`) and `double=0|1` (twice the blocks of half the
/// threads, `PushShape::doubled`; unset, the world sizes where that was
/// measured faster double: `PushShape::for_use`); a part left out keeps its default
/// ([`PushShape::default`](super::PushShape::default)). Where none of
/// `chunk`, `slots`, `lookahead` and `scratch` is set, the all-reduce
/// and the all-gather run the rings measured for their world size (4
/// ranks: the all-reduce 3 slots of 16 KiB, lookahead 1, the all-gather
/// 2 slots of 32 KiB, both in 76 MiB of scratch; `PushShape::for_use`). Its kernels meet per block and lay their
/// rings out from it, so every rank must set the same value (the
/// rendezvous checks). The rendezvous caps `blocks` at the blocks the
/// GPU holds at once (`PushShape::for_sms`): at 80 to 128 registers a
/// thread (`cargo xtask check-ptx`) one block of 512 threads fills an
/// SM's registers (two of 256), and a grid larger than the GPU would run
/// in waves whose first could wait on a peer block of a later one.
pub const PUSH_LAUNCH_ENV: &str = "INTRANODE_PUSH_LAUNCH";

/// The fused all-reduce + residual + RMSNorm's L2 prefetch of a region
/// the caller names (`Communicator::all_reduce_residual_rmsnorm_prefetch`):
/// `off`, or `blocks=N,bytes=N,spread=0|1` (extra prefetching blocks, 1
/// to 256; most bytes a call prefetches, a multiple of 16; whether those
/// bytes are spread over a larger region or taken from its start); a part
/// left out keeps its
/// default ([`L2Prefetch::default`](super::L2Prefetch::default)). Each
/// rank's own: the prefetch changes no result and ties no rank to another.
pub const L2_PREFETCH_ENV: &str = "INTRANODE_L2_PREFETCH";

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

/// The name of this rank's group (`tp0`, `dp1`): every store key a
/// communicator writes lives under `intranode/group/<name>/`, so groups
/// that share one store (a tensor-parallel and a data-parallel group on
/// one torchrun store) never meet at a key. Letters, digits, `.`, `_` and
/// `-`, at most 64; unset: keys under `intranode/`, fine for one group
/// per store.
pub const GROUP_ENV: &str = "INTRANODE_GROUP";

/// Turns a GPU test's skip into a failure: the number of GPUs a device
/// run promises (`INTRANODE_REQUIRE_GPUS=4`). Read by `required_gpus`.
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
