//! What the host and the kernels must agree on, defined once: the kernel
//! parameter block, the layout of a signal pad, reduction op codes and the
//! error word. Compiled for both sides, so a change here changes both.
//!
//! NOTE [signal pad layout]: a signal pad is an array of u32 words that
//! every peer maps. Word `flag_index(slot, block, src)` on rank `r`'s pad is
//! written only by rank `src` (block `block`), with the epoch of the call
//! that reached barrier `slot`. The words from [`BLOCKS_DONE`] up to
//! [`SIGNAL_PAD_MIN_BYTES`] are written by rank `r` alone: a block
//! counter, its count of collective calls, its abort word, and
//! per-peer counts of explicit barriers; from [`PUSH_COUNTERS`], the push
//! form's counters, each written by one source rank (NOTE [push
//! all-reduce] in `push.rs`). From [`LAMPORT_OFFSET_BYTES`] on lie the Lamport
//! buffers, which every peer stores data into and rank `r` polls and
//! zeroes (NOTE \[lamport\] in `lamport.rs`). Every word starts at zero (the
//! allocator zero-fills pads).

/// Ranks of one group at most (seed kMaxDevices).
pub const MAX_RANKS: usize = 8;
/// Blocks of one collective launch at most; sizes the flag array and the
/// push form's counters. 264 covers two blocks per SM of an H100 or H200
/// (132 SMs), as the push form runs them with 256 threads a block (a
/// second block runs while the first waits, signals or reduces into its
/// own GPU: measured, the 2-rank push reduce-scatter went from 297 to 351
/// GB/s at 1 GiB, the 4-rank push all-reduce 3 % faster), and one per SM
/// of a B200 (148). The flags and counters of 264 blocks take
/// 60 KiB of the 64 KiB before [`LAMPORT_OFFSET_BYTES`]
/// (`flags_fit_below_the_counters`). The other forms keep their own,
/// smaller caps (`host/src/intra/launch.rs`).
pub const MAX_BLOCKS: usize = 264;
/// Barrier slots per launch: start (0), middle (1), explicit barrier (3);
/// 2 only names Lamport waits in reports ([`SLOT_PUSH`], outside the
/// flags, the push form's waits).
pub const SLOTS: usize = 4;
/// Slot of the barrier after every rank has copied its input in (the
/// push form: its barrier at the start of a call, NOTE [push all-reduce]
/// in `push.rs`).
pub const SLOT_START: usize = 0;
/// Slot of the two-shot barrier after the reduce-scatter, and of HCM's
/// barrier with the relay.
pub const SLOT_MID: usize = 1;
/// Slot named in a timeout report of the Lamport forms, which wait on
/// data, not on flags (NOTE \[lamport\] in `lamport.rs`). Its flags serve
/// the end barrier of the one-shot on a symmetric input ([`SLOT_END`]),
/// which the Lamport forms never write.
pub const SLOT_LAMPORT: usize = 2;
/// Slot of the one-shot's end barrier when it reads the caller's
/// symmetric input in place (NOTE [symmetric input] in `all_reduce.rs`):
/// the flags of slot 2, unused by every other form.
pub const SLOT_END: usize = 2;
/// Named in a timeout report of the push form's waits on its counters
/// (NOTE [push all-reduce] in `push.rs`); no flag of the layout has it.
pub const SLOT_PUSH: usize = 4;
/// Slot of explicit `barrier()` calls.
pub const SLOT_EXPLICIT: usize = 3;

/// Word index of the flag `src` sets on a pad for `(slot, block)`.
pub const fn flag_index(slot: usize, block: usize, src: usize) -> usize {
    (slot * MAX_BLOCKS + block) * MAX_RANKS + src
}

/// Word index of the count of blocks of the current call: those that
/// finished (the barrier forms, `sync::finish_call`) or those that started
/// (the Lamport forms, `sync::start_lamport_call`). The low half of the
/// 8-byte word whose high half is [`CALL_COUNTER`], so the Lamport forms
/// count a block and read the calls in one atomic (NOTE [call count] in
/// `sync.rs`).
pub const BLOCKS_DONE: usize = SLOTS * MAX_BLOCKS * MAX_RANKS;
/// Word index of the owner's count of collective calls (each barrier
/// form's chunk counts as a call).
pub const CALL_COUNTER: usize = BLOCKS_DONE + 1;
/// Word index of the owner's abort word: non-zero once one of this rank's
/// waits on a peer ran out (set by `sync::report` beside the host-mapped
/// [`ErrorWord`]). Later waits poll this word, in the GPU's own memory,
/// instead of the host-mapped one: NOTE [abandoned waits] in `sync.rs`
/// says why. Never cleared: a communicator whose wait ran out is dead.
/// The host passes its address in the parameters (`abort`).
pub const ABORT_WORD: usize = BLOCKS_DONE + 2;
/// Word index of the owner's count of explicit barriers shared with peer 0
/// (peer `p` at `PAIR_COUNTER + p`).
pub const PAIR_COUNTER: usize = BLOCKS_DONE + 32;
/// Word index of the push form's counters (NOTE [push all-reduce] in
/// `push.rs`): [`push_counter_index`] of kind [`PUSH_RS_READY`],
/// [`PUSH_AG_READY`] or [`PUSH_AG_FREE`], block and source rank; every
/// word written by its source rank alone, a count of tiles since the
/// communicator began.
pub const PUSH_COUNTERS: usize = 8704;
/// Reduce-scatter chunks the source pushed into this rank's ring.
pub const PUSH_RS_READY: usize = 0;
/// Reduced chunks the source (an owner) pushed into this rank's
/// all-gather ring; also tells this rank that the owner consumed this
/// rank's reduce-scatter chunks of those tiles.
pub const PUSH_AG_READY: usize = 1;
/// All-gather chunks from this rank that the source copied out of its
/// ring (credits: the slots may be written again).
pub const PUSH_AG_FREE: usize = 2;
/// Word index of counter `kind` of `(block, src)` on a pad.
pub const fn push_counter_index(kind: usize, block: usize, src: usize) -> usize {
    PUSH_COUNTERS + (kind * MAX_BLOCKS + block) * MAX_RANKS + src
}
/// Word index of block `b`'s count of the tiles it ran in the push form
/// (`PUSH_TILES_DONE + b`), written by the pad's owner alone: the base of
/// the counters at the start of a call.
pub const PUSH_TILES_DONE: usize = PUSH_COUNTERS + 3 * MAX_BLOCKS * MAX_RANKS;
/// Smallest signal pad, in bytes, that holds the flags and counters.
pub const SIGNAL_PAD_MIN_BYTES: usize = (PUSH_TILES_DONE + MAX_BLOCKS) * 4;

/// Byte offset in a signal pad of the Lamport buffers (NOTE \[lamport\] in
/// `lamport.rs`), past the flags and counters.
pub const LAMPORT_OFFSET_BYTES: usize = 64 << 10;
/// Lamport buffers per pad: calls alternate between them.
pub const LAMPORT_BUFFERS: usize = 2;
/// Bytes of all Lamport buffers of a pad: 64 MiB, so that one buffer (32
/// MiB) holds a 16 MiB message in the two-shot form (scatter and gather
/// areas) and a 16 MiB one-shot slot on 2 ranks (8 MiB on 4). 16 MiB is
/// the size where NCCL starts to catch up with our kernels on 2 and 4
/// H200 (measured: 0.74x and 0.86x NCCL's time there); the memory is per
/// rank and communicator.
pub const LAMPORT_BYTES: usize = 64 << 20;
/// Bytes of one Lamport buffer; call `e` uses the one at
/// `LAMPORT_OFFSET_BYTES + (e & 1) * LAMPORT_BUFFER_BYTES`, whatever the
/// form (one-shot or two-shot), so the buffers of consecutive calls never
/// overlap.
pub const LAMPORT_BUFFER_BYTES: usize = LAMPORT_BYTES / LAMPORT_BUFFERS;
/// Bytes of a signal pad: flags, counters and Lamport buffers.
pub const SIGNAL_PAD_BYTES: usize = LAMPORT_OFFSET_BYTES + LAMPORT_BYTES;

/// Bytes of the largest slot of one rank in a Lamport buffer of `world`
/// ranks: the largest message the Lamport one-shot takes (a multiple of
/// [`LAMPORT_SLOT_ALIGN`]).
pub const fn lamport_slot_bytes(world: usize) -> usize {
    match LAMPORT_BUFFER_BYTES.checked_div(world) {
        Some(bytes) => bytes & !(LAMPORT_SLOT_ALIGN - 1),
        None => 0,
    }
}

/// Bytes of the largest slot of one rank in each area (scatter, gather) of
/// a Lamport buffer in the two-shot form: the largest shard it takes (a
/// multiple of [`LAMPORT_SLOT_ALIGN`]).
pub const fn lamport_two_shot_slot_bytes(world: usize) -> usize {
    match (LAMPORT_BUFFER_BYTES / 2).checked_div(world) {
        Some(bytes) => bytes & !(LAMPORT_SLOT_ALIGN - 1),
        None => 0,
    }
}

/// Slots of a call start at multiples of this (one cache line), so no
/// line is stored into by two ranks.
pub const LAMPORT_SLOT_ALIGN: usize = 128;

/// Bytes between the slots of a call over `vectors` 16-byte vectors per
/// slot: the slots lie back to back from the start of their area, so a
/// small message touches one or two 2 MiB pages, not one per rank
/// (measured: slots 4 MiB apart cost the 4-rank two-shot 0.2 to 0.6 us
/// from 64 KiB to 1 MiB). At most the largest slot where the
/// message fits it. Every rank computes it from the same message size.
pub const fn lamport_stride_bytes(vectors: usize) -> usize {
    (vectors * 16).next_multiple_of(LAMPORT_SLOT_ALIGN)
}

/// The largest message, in bytes, the Lamport two-shot takes on `world`
/// ranks: every shard (`ceil(vectors / world)` 16-byte vectors) fits a
/// slot.
pub const fn lamport_two_shot_max_bytes(world: usize) -> usize {
    world * lamport_two_shot_slot_bytes(world)
}

/// Reduction operators (`AllReduceParams::op`): the sum.
pub const OP_SUM: u32 = 0;
/// Sum, then times `1 / world`.
pub const OP_AVG: u32 = 1;
/// The least of the ranks' elements.
pub const OP_MIN: u32 = 2;
/// The greatest of the ranks' elements.
pub const OP_MAX: u32 = 3;

/// `ErrorWord::code` values: no wait has failed (the word as allocated).
pub const ERR_NONE: u32 = 0;
/// A bounded wait on a peer's flag ran out.
pub const ERR_BARRIER_TIMEOUT: u32 = 1;

/// Where a kernel reports a failed wait, in host-mapped memory so the host
/// reads it without synchronizing the GPU. First writer wins loosely:
/// concurrent failures may mix fields, each field is still one of theirs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorWord {
    /// [`ERR_NONE`], or why a wait failed ([`ERR_BARRIER_TIMEOUT`]);
    /// written last, with release, so the fields are whole once it is set.
    pub code: u32,
    /// The rank whose flag never came.
    pub peer: u32,
    /// The GPU block (`%ctaid.x`) whose wait ran out.
    pub block: u32,
    /// The barrier slot it waited on (`SLOT_*`; [`SLOT_LAMPORT`] and
    /// [`SLOT_PUSH`] for the waits on data and counters).
    pub slot: u32,
    /// The waiting rank.
    pub rank: u32,
    /// The collective that waited (`FORM_*`).
    pub form: u32,
    /// Unused, zero: keeps the word at 32 bytes.
    pub _pad: [u32; 2],
}

/// `ErrorWord::form`: which collective's wait ran out. The one-shot
/// all-reduce (`all_reduce.rs`).
pub const FORM_ONE_SHOT: u32 = 1;
/// The two-shot all-reduce (`all_reduce.rs`).
pub const FORM_TWO_SHOT: u32 = 2;
/// The hybrid cube mesh all-reduce (`all_reduce.rs`, NOTE [hcm groups]).
pub const FORM_HCM: u32 = 3;
/// The Lamport one-shot all-reduce (`lamport.rs`).
pub const FORM_LAMPORT: u32 = 4;
/// The Lamport two-shot all-reduce (`lamport.rs`).
pub const FORM_LAMPORT_TWO_SHOT: u32 = 5;
/// The broadcast (`broadcast.rs`).
pub const FORM_BROADCAST: u32 = 6;
/// The explicit barrier kernel (`barrier()`).
pub const FORM_BARRIER: u32 = 7;
/// The reduce-scatter made of the Lamport two-shot's first hop.
pub const FORM_REDUCE_SCATTER: u32 = 8;
/// The all-gather made of the Lamport two-shot's second hop.
pub const FORM_ALL_GATHER: u32 = 9;
/// The fused all-reduce + residual + RMSNorm (`fused_norm.rs`).
pub const FORM_FUSED_NORM: u32 = 10;
/// The push form (`push.rs`).
pub const FORM_PUSH: u32 = 11;

/// Every `FORM_*` code, for the tests that walk them all (host and
/// kernels alike).
pub const FORMS: [u32; 11] = [
    FORM_ONE_SHOT,
    FORM_TWO_SHOT,
    FORM_HCM,
    FORM_LAMPORT,
    FORM_LAMPORT_TWO_SHOT,
    FORM_BROADCAST,
    FORM_BARRIER,
    FORM_REDUCE_SCATTER,
    FORM_ALL_GATHER,
    FORM_FUSED_NORM,
    FORM_PUSH,
];

/// The name of a `FORM_*` code, as the host's algorithm names spell it.
pub const fn form_name(form: u32) -> &'static str {
    match form {
        FORM_ONE_SHOT => "one-shot",
        FORM_TWO_SHOT => "two-shot",
        FORM_HCM => "hcm",
        FORM_LAMPORT => "lamport",
        FORM_LAMPORT_TWO_SHOT => "lamport-two-shot",
        FORM_BROADCAST => "broadcast",
        FORM_BARRIER => "barrier",
        FORM_REDUCE_SCATTER => "reduce-scatter",
        FORM_ALL_GATHER => "all-gather",
        FORM_FUSED_NORM => "all-reduce-residual-rmsnorm",
        FORM_PUSH => "push",
        _ => "unknown collective",
    }
}

/// The one parameter of every collective kernel, passed by value (it lives
/// in the launch's parameter space; a CUDA graph captures it). The kernels
/// index `bufs` and `pads` only with compile-time constants, so the array
/// never moves to local memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllReduceParams {
    /// Every rank's symmetric buffer, mapped into this process.
    pub bufs: [u64; MAX_RANKS],
    /// Every rank's signal pad, mapped into this process.
    pub pads: [u64; MAX_RANKS],
    /// The caller's input (any alignment).
    pub input: u64,
    /// The caller's output (any alignment; may equal `input`).
    pub output: u64,
    /// Elements to reduce.
    pub elems: u64,
    /// Bytes of each half of a symmetric buffer: calls alternate halves so
    /// that no barrier is needed at the end of a call (see NOTE [double
    /// buffering] in `all_reduce.rs`).
    pub half_bytes: u64,
    /// Bound of every wait on a peer, in nanoseconds of `%globaltimer`.
    pub timeout_ns: u64,
    /// Host-mapped [`ErrorWord`].
    pub error: u64,
    /// This rank's abort word (`ABORT_WORD` of its own pad), which its
    /// waits poll once they last (NOTE [abandoned waits] in `sync.rs`):
    /// an address in the parameters, read only on that rare path, costs
    /// the kernels no register (computed from the pad instead, it took
    /// the two-shot kernels from about 90 to about 125).
    pub abort: u64,
    /// Reduce-scatter and all-gather only (NOTE [lamport reduce-scatter
    /// and all-gather] in `lamport.rs`): elements from one shard's start
    /// to the next on the side that holds every shard; 0 means `elems`,
    /// the shards back to back. The host sets it when it cuts shards
    /// larger than a Lamport slot into several calls, each over a slice
    /// of every shard.
    pub shard_stride_elems: u64,
    /// This rank: its index in `bufs` and `pads`.
    pub rank: u32,
    /// One of the `OP_*` codes.
    pub op: u32,
    /// HCM only (NOTE [hcm groups] in `all_reduce.rs`): bit `r` set for
    /// every rank `r` of this rank's group, itself included.
    pub hcm_group_mask: u32,
    /// HCM only: the rank in the other group this rank swaps partial sums
    /// with.
    pub hcm_relay: u32,
    /// HCM only: 1 when the relay's group holds the lower ranks, so its
    /// partial sum comes first in the final combine (the same order on
    /// every rank).
    pub hcm_relay_first: u32,
    /// Push form only (NOTE [push all-reduce] in `push.rs`): 16-byte
    /// vectors per chunk (a ring slot), the same on every rank.
    pub push_chunk_vecs: u32,
    /// Push form only: slots per ring, 2 at least, the same on every rank.
    pub push_slots: u32,
    /// Push form only: the lookahead asked for, the same on every rank
    /// (`index::push_lookahead`: 0 or out of `1..push_slots` takes the
    /// default for the slots).
    pub push_lookahead: u32,
    /// Every rank's copy of the caller's input, mapped into this process,
    /// when the input lies in a symmetric buffer the user allocated (the
    /// same offset in every rank's allocation): the barrier forms then read
    /// the peers' inputs in place instead of copying into `bufs` (NOTE
    /// [symmetric input] in `all_reduce.rs`). All zero otherwise; a
    /// non-zero `in_bufs[0]` is the switch.
    pub in_bufs: [u64; MAX_RANKS],
}

/// Parameters of the explicit barrier kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BarrierParams {
    /// Every rank's signal pad, mapped into this process (entries of ranks
    /// outside `rank_mask` are not read).
    pub pads: [u64; MAX_RANKS],
    /// Bit `r` set when rank `r` takes part.
    pub rank_mask: u32,
    /// This rank: its index in `pads`.
    pub rank: u32,
    /// Bound of every wait on a peer, in nanoseconds of `%globaltimer`.
    pub timeout_ns: u64,
    /// Host-mapped [`ErrorWord`].
    pub error: u64,
    /// As [`AllReduceParams::abort`].
    pub abort: u64,
}

/// Parameters of the broadcast kernels (`broadcast.rs`): the collective
/// fields of [`AllReduceParams`] (same buffers, pads, halves, wait bound and
/// error word, so broadcasts and all-reduces share one call count) plus
/// the root.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BroadcastParams {
    /// Every rank's symmetric buffer, mapped into this process.
    pub bufs: [u64; MAX_RANKS],
    /// Every rank's signal pad, mapped into this process.
    pub pads: [u64; MAX_RANKS],
    /// The caller's buffer (any alignment): read on the root, written on
    /// every other rank.
    pub buf: u64,
    /// Bytes to broadcast.
    pub bytes: u64,
    /// Bytes of each half of a symmetric buffer (a multiple of 16).
    pub half_bytes: u64,
    /// Bound of every wait on a peer, in nanoseconds of `%globaltimer`.
    pub timeout_ns: u64,
    /// Host-mapped [`ErrorWord`].
    pub error: u64,
    /// As [`AllReduceParams::abort`].
    pub abort: u64,
    /// This rank: its index in `bufs` and `pads`.
    pub rank: u32,
    /// The rank whose bytes everyone receives.
    pub root: u32,
}

/// Parameters of the residual + RMSNorm kernels (`norm.rs`): `rows` rows
/// of `hidden` elements, `residual += input` (rounded to the element
/// type), then `output = residual * rsqrt(mean(residual^2) + eps) *
/// weight`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NormParams {
    /// `rows x hidden` elements (an all-reduce's output).
    pub input: u64,
    /// `rows x hidden` elements, updated in place.
    pub residual: u64,
    /// `hidden` elements.
    pub weight: u64,
    /// `rows x hidden` elements.
    pub output: u64,
    /// Rows (tokens) to normalize, one warp each.
    pub rows: u64,
    /// Elements of a row: the length of the mean and of `weight`.
    pub hidden: u64,
    /// Added to the mean of squares before `rsqrt`, so a zero row stays
    /// finite.
    pub eps: f32,
    /// Unused, zero: the tail padding as a field, so every byte copied
    /// into the launch's parameters is initialized.
    pub _pad: u32,
}

/// Parameters of the fused all-reduce + residual add + RMSNorm kernels
/// (`fused_norm.rs`, NOTE [fused norm]): the Lamport one-shot's
/// parameters in `ar` (pads, rank, wait bound, error and abort words;
/// `input` this rank's partial sums, `output` where the all-reduced sum
/// goes, which may be `input`; `elems` = `rows * hidden`; `op` is
/// [`OP_SUM`]) and the norm's, as [`NormParams`] names them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FusedNormParams {
    /// The all-reduce's part: the Lamport one-shot's parameters, as above.
    pub ar: AllReduceParams,
    /// `rows x hidden` elements, updated in place.
    pub residual: u64,
    /// `hidden` elements.
    pub weight: u64,
    /// `rows x hidden` elements: the normed output.
    pub normed: u64,
    /// Rows (tokens): `ar.elems / hidden`.
    pub rows: u64,
    /// Elements of a row: the length of the mean and of `weight`.
    pub hidden: u64,
    /// Added to the mean of squares before `rsqrt`, as [`NormParams::eps`].
    pub eps: f32,
    /// The last `prefetch_blocks` blocks of the grid walk no rows: after
    /// their share of the push they ask L2 for `prefetch_bytes` from
    /// `prefetch` (NOTE [l2 prefetch] in `fused_norm.rs`). 0: no prefetch,
    /// every block walks rows.
    pub prefetch_blocks: u32,
    /// 16-byte aligned device address of the region to bring into L2
    /// (the next GEMM's weights), or 0.
    pub prefetch: u64,
    /// Bytes to prefetch: a multiple of 16 (0: none), asked in pieces of
    /// [`PREFETCH_PIECE_BYTES`] (the last may be shorter).
    pub prefetch_bytes: u64,
    /// Bytes from one piece's start to the next's: `PREFETCH_PIECE_BYTES`
    /// for one contiguous run, more to spread the pieces evenly over a
    /// region larger than `prefetch_bytes`; a multiple of 16.
    pub prefetch_stride: u64,
}

/// Bytes of one L2 prefetch instruction of the fused norm (NOTE [l2
/// prefetch] in `fused_norm.rs`): a thread asks for its pieces one
/// instruction each, so 512 threads cover 16 MiB in one instruction
/// apiece.
pub const PREFETCH_PIECE_BYTES: usize = 32 << 10;

/// Most threads of a fused-norm block (its cross-warp sum holds one word
/// per warp: `ptx::block_gather_warp_f32`).
pub const FUSED_NORM_MAX_THREADS: usize = 512;

/// Threads of a fused-norm block for rows of `row_vecs` 16-byte vectors
/// (NOTE [fused norm] in `fused_norm.rs`): one vector per thread up to
/// [`FUSED_NORM_MAX_THREADS`] (longer rows loop), whole warps, a power of
/// two. A function of the row alone: the order of the sum of squares
/// follows the block's shape, and every rank must get the same bits.
pub const fn fused_norm_threads(row_vecs: usize) -> usize {
    let threads = row_vecs.next_power_of_two();
    if threads < 32 {
        32
    } else if threads > FUSED_NORM_MAX_THREADS {
        FUSED_NORM_MAX_THREADS
    } else {
        threads
    }
}

/// Parameters of `timing::probe_poll_storm`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStormParams {
    /// The word every thread polls: device memory, or page-locked host
    /// memory mapped into the device.
    pub word: u64,
    /// One u64 per thread: how long after its wait the thread got out.
    pub lag_ns: u64,
    /// How long every thread waits, in nanoseconds of `%globaltimer`.
    pub wait_ns: u64,
}

/// Parameters of `timing::probe_ping_pong`: one thread of each of two
/// ranks passes a counter back and forth through a word in each other's
/// memory, the way a Lamport wait sees a peer's store.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PingPongParams {
    /// The word the partner stores to: this rank's memory.
    pub own_word: u64,
    /// The word this rank stores to: the partner's memory, through its
    /// mapping.
    pub peer_word: u64,
    /// Two u64: the nanoseconds of `%globaltimer` the timed round trips
    /// took, and how many round trips completed (warm-up included).
    pub out: u64,
    /// The first value passed; round trip `k` passes `first + k`. Runs
    /// on the same words start past every value an earlier run passed,
    /// so no stale value is taken for a new one.
    pub first: u32,
    /// Round trips before the timed ones: they absorb the partners'
    /// different start times.
    pub warmup: u32,
    /// Timed round trips.
    pub iters: u32,
    /// 1 on the rank that stores first and times; 0 on the partner.
    pub leader: u32,
    /// A wait longer than this ends the run (the count in `out` then
    /// falls short).
    pub timeout_ns: u64,
}

/// Parameters of `timing::probe_store_exit`: thread `t < count` of the
/// one block stores one 16-byte vector of `value` into `dst[t]` the way
/// `prims::slots::put` does, and the kernel ends. A graph of such kernels
/// against one of empty kernels gives what a kernel's end costs once it
/// stored into a peer's memory (`intranode-bench hop`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreExitParams {
    /// Where thread `t` stores: 16-byte aligned words of this rank's
    /// memory or of a peer's, through its mapping.
    pub dst: [u64; MAX_RANKS],
    /// Threads that store, at most `MAX_RANKS`.
    pub count: u32,
    /// The value of each of the vector's four words.
    pub value: u32,
}

/// The phases a Lamport phase probe stamps (`timing::probe_lamport_phases_w*`
/// and `probe_lamport_two_shot_phases_w*`, `intranode-bench phases`): each block
/// writes `%globaltimer` at the end of each, after a block barrier, to
/// `stamps[block * PHASES + phase]`.
pub const PHASES: usize = 5;
/// The block started (after the entry's prologue).
pub const PHASE_START: usize = 0;
/// The call is counted and the buffer known (two-shot only: the one-shot
/// counts inside its push).
pub const PHASE_COUNTED: usize = 1;
/// Every store of this rank's data into the peers is issued (one-shot:
/// the push; two-shot: the scatter).
pub const PHASE_STORED: usize = 2;
/// Two-shot only: this rank's shard is reduced and stored into every
/// rank's gather area.
pub const PHASE_REDUCED: usize = 3;
/// The output is written: the block ends.
pub const PHASE_END: usize = 4;

/// Whether `flag` has reached `epoch`: it holds `epoch`, or `epoch + 1`
/// (a peer may already have passed this barrier and reached the next one;
/// it cannot get further without this rank). Anything else is stale, at
/// any age: Lamport calls and HCM write no flag of some slots or blocks,
/// so a flag may lag by more than 2^31 calls, which a signed comparison
/// would mistake for "ahead".
pub const fn epoch_reached(flag: u32, epoch: u32) -> bool {
    flag == epoch || flag == epoch.wrapping_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_fit_below_the_counters() {
        const { assert!(flag_index(SLOTS - 1, MAX_BLOCKS - 1, MAX_RANKS - 1) < BLOCKS_DONE) };
        const { assert!(CALL_COUNTER < ABORT_WORD && ABORT_WORD < PAIR_COUNTER) };
        // One 8-byte word: the block count low, the call count high.
        const { assert!(BLOCKS_DONE.is_multiple_of(2) && CALL_COUNTER == BLOCKS_DONE + 1) };
        const { assert!(SIGNAL_PAD_MIN_BYTES <= LAMPORT_OFFSET_BYTES) };
        for world in 1..=MAX_RANKS {
            let slot = lamport_slot_bytes(world);
            assert!(slot.is_multiple_of(16) && slot * world * LAMPORT_BUFFERS <= LAMPORT_BYTES);
        }
        assert_eq!(lamport_slot_bytes(2), 16 << 20);
        assert_eq!(lamport_slot_bytes(4), 8 << 20);
        for world in 1..=MAX_RANKS {
            let slot = lamport_two_shot_slot_bytes(world);
            assert!(slot.is_multiple_of(16) && 2 * slot * world * LAMPORT_BUFFERS <= LAMPORT_BYTES);
        }
        assert_eq!(lamport_two_shot_max_bytes(4), 16 << 20);
        assert_eq!(lamport_two_shot_max_bytes(2), 16 << 20);
        assert_eq!(lamport_slot_bytes(0), 0);
        // A message that fits the largest slot has a stride that fits it.
        for world in 1..=MAX_RANKS {
            let one = lamport_slot_bytes(world);
            assert!(lamport_stride_bytes(one / 16) <= one);
            let two = lamport_two_shot_slot_bytes(world);
            let shard = lamport_two_shot_max_bytes(world)
                .div_ceil(16)
                .div_ceil(world);
            assert!(lamport_stride_bytes(shard) <= two);
        }
        assert_eq!(lamport_stride_bytes(1), 128);
        assert_eq!(lamport_stride_bytes(8), 128);
        assert_eq!(lamport_stride_bytes(9), 256);
        const { assert!(PAIR_COUNTER + MAX_RANKS <= PUSH_COUNTERS) };
        const {
            assert!(
                push_counter_index(PUSH_AG_FREE, MAX_BLOCKS - 1, MAX_RANKS - 1) < PUSH_TILES_DONE
            )
        };
        assert_eq!(SIGNAL_PAD_MIN_BYTES, (PUSH_TILES_DONE + MAX_BLOCKS) * 4);
    }

    #[test]
    fn every_form_has_its_own_name() {
        let forms = FORMS;
        for (i, a) in forms.iter().enumerate() {
            assert_ne!(form_name(*a), "unknown collective");
            for b in &forms[i + 1..] {
                assert_ne!(form_name(*a), form_name(*b));
            }
        }
        // A zeroed word (no report yet) names no collective.
        assert_eq!(form_name(0), "unknown collective");
    }

    #[test]
    fn fused_norm_blocks_are_whole_warps_of_the_row() {
        assert_eq!(fused_norm_threads(0), 32);
        assert_eq!(fused_norm_threads(1), 32);
        assert_eq!(fused_norm_threads(33), 64);
        // Hidden 4096, 8192, 16384 of bf16: 512, 1024, 2048 vectors.
        assert_eq!(fused_norm_threads(512), 512);
        assert_eq!(fused_norm_threads(1024), 512);
        assert_eq!(fused_norm_threads(2048), 512);
        for row_vecs in 0..5000 {
            let t = fused_norm_threads(row_vecs);
            assert!(t.is_power_of_two() && (32..=FUSED_NORM_MAX_THREADS).contains(&t));
            assert!(row_vecs <= t || t == FUSED_NORM_MAX_THREADS, "{row_vecs}");
        }
    }

    #[test]
    fn epochs_wrap() {
        assert!(epoch_reached(5, 5));
        assert!(epoch_reached(6, 5));
        assert!(!epoch_reached(4, 5));
        assert!(!epoch_reached(0, 1));
        assert!(epoch_reached(0, u32::MAX));
        assert!(!epoch_reached(u32::MAX, 0));
        assert!(!epoch_reached(7, 5));
        // Stale by more than 2^31 calls is still stale.
        assert!(!epoch_reached(
            5,
            5u32.wrapping_add(1 << 31).wrapping_add(3)
        ));
        assert!(!epoch_reached(5u32.wrapping_add(1 << 31), 5));
    }

    #[test]
    fn params_are_plain_words() {
        assert_eq!(
            core::mem::size_of::<AllReduceParams>(),
            8 * 8 * 2 + 8 * 8 + 8 * 4 + 8 * 8
        );
        assert_eq!(core::mem::size_of::<ErrorWord>(), 32);
        assert_eq!(core::mem::size_of::<StoreExitParams>(), 8 * 8 + 4 + 4);
        assert_eq!(
            core::mem::size_of::<BroadcastParams>(),
            8 * 8 * 2 + 6 * 8 + 8
        );
        assert_eq!(
            core::mem::size_of::<FusedNormParams>(),
            core::mem::size_of::<AllReduceParams>() + 5 * 8 + 4 + 4 + 3 * 8
        );
    }
}
