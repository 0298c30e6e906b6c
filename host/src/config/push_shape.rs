//! The push form's launch shape (`INTRANODE_PUSH_LAUNCH`): its fields,
//! the bounds the parser keeps them in, and the measured rule for when a
//! launch runs two blocks per SM ([`PushShape::for_use`]).

use super::MAX_THREADS_PER_BLOCK;

/// The launch shape of the push form (`INTRANODE_PUSH_LAUNCH`): the most
/// blocks and chunk bytes of a launch, its threads and ring slots, and the
/// scratch its rings may take; the host fits the chunk to the symmetric
/// buffer and the message (`intra::launch_shape::push_launch`).
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
    /// Tiles of lookahead (`intranode_kernels_gpu::index::push_lookahead`), 0
    /// for the default of the slots.
    pub lookahead: usize,
    /// The push form's scratch (`scratch=`). The symmetric buffer is
    /// allocated `max(buffer_bytes, scratch)`, the scratch being the most
    /// any use takes (`PushShape::scratch_bytes_for`: at
    /// 4 ranks the all-reduce's own 76 MiB where the rings are unset);
    /// each push launch lays its rings out in its use's scratch
    /// (`IntraNodeComm::push_ring_bytes`), and the forms other than the
    /// push form keep working in halves of `buffer_bytes`
    /// (`IntraNodeComm::buffer_bytes`).
    pub scratch_bytes: usize,
    /// Whether launches run [`doubled`](PushShape::doubled) (`double=0|1`);
    /// `None` (the default): where the measurements (`PushShape::for_use`)
    /// say so.
    pub double: Option<bool>,
    /// Whether `INTRANODE_PUSH_LAUNCH` set the rings (`chunk=`, `slots=`,
    /// `lookahead=` or `scratch=`). Unset (the default), the all-reduce
    /// and the all-gather run the rings measured for their world size
    /// where there are some (`MEASURED_RINGS`).
    pub rings_set: bool,
}

/// What a push launch serves: the rule for doubling its blocks
/// ([`PushShape::for_use`]) differs between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushUse {
    AllReduce,
    ReduceScatter,
    AllGather,
}

/// World sizes whose push all-reduce runs [`PushShape::doubled`] by default. On
/// 4 H100 it was 3.1-3.4 % faster from 64 MiB in four turns over two sessions
/// (4 H100, 2026-11-27, 9926c57 and 926d83a): 321.6 against 332.2 us at 64 MiB,
/// 1207 against 1249 at 256 MiB, 4747 against 4914 at 1 GiB, and even at 16
/// MiB. Ranks that wait and fence per tile leave their SM idle; a second block
/// on it runs meanwhile. On 2 H200 it changed nothing (+0.3 % at 1 GiB, +3 % at
/// 16 MiB), and on 3 H100 it was within 2 % either way (926d83a), so those keep
/// one block per SM.
const ALL_REDUCE_DOUBLED_WORLDS: [usize; 1] = [4];

/// World sizes whose push reduce-scatter runs [`PushShape::doubled`] by
/// default: two blocks share an SM, so one block's pushes go on while the
/// other reduces (a block's reduce stores only into its own GPU, and it
/// runs before the block's pushes of each tile). On 2 H200 (2026-11-27,
/// 9926c57) that took 256 MiB from 464.8 to 406.7 us and
/// 1 GiB from 1805 to 1531 (0.89x NCCL to 0.76x; 350.7 GB/s) and left 64
/// MiB even (124.8 against 125.6). On 3 H100 (2026-11-27, 97703c9) it
/// took 64 MiB / 256 MiB / 1 GiB from 163.4 /
/// 595.8 / 2307.7 us to 161.2 / 566.6 / 2124.7 (NCCL 184.4 / 652.3 /
/// 2369.3), the gain growing with the size as on 2 ranks. On 4 H100 it
/// was 3 % slower (9926c57): the rings of 264 blocks share the same
/// scratch, so the chunks halve to 21 KiB.
const REDUCE_SCATTER_DOUBLED_WORLDS: [usize; 2] = [2, 3];

/// The rings of a push launch: what [`MEASURED_RINGS`] sets in place
/// of the default shape's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rings {
    max_chunk_bytes: usize,
    slots: usize,
    lookahead: usize,
    scratch_bytes: usize,
}

/// The uses and world sizes whose push launches run rings of their own
/// where `INTRANODE_PUSH_LAUNCH` leaves them unset, and those rings.
///
/// All-reduce, 4 ranks: 3 slots of 16 KiB, lookahead 1, doubled (264
/// blocks): 264 x 3 peers x 3 slots x 2 rings x 16 KiB = 74.25 MiB, so
/// 76 MiB of scratch (33 by default). On 4 H100 (2026-11-27, 926d83a) it
/// ran 313.1 / 1176.9 / 4597 us at 64 MiB /
/// 256 MiB / 1 GiB against the default rings' 320.3 / 1204.3 / 4745:
/// with 2 slots and a lookahead of 1, a block's pushes of tile `t + 1`
/// wait for the peer to free the slot of `t - 1`, so one late peer stalls
/// the ring; a third slot gives one tile of slack. A fourth was slower
/// (4655-4682 us at 1 GiB), and so were longer chunks on 2 slots.
/// On 4 H100 (2026-11-27, 97703c9) it ran 312.5-312.7 / 1173.5-1174.3 /
/// 4581-4585 us at 64 MiB / 256 MiB / 1 GiB in two turns (NCCL
/// 325.0-325.5 / 1187-1197 / 4539-4541), and 600.5 / 2316.9 at 128 / 512
/// MiB against the 2-slot rings' 616.5 / 2398.3; its stress and graph
/// checks passed.
///
/// All-gather, 4 ranks: the default's 2 slots and 132 blocks, chunks of
/// 32 KiB in the same 76 MiB (the default's 33 MiB cut them to 42.6 KiB).
/// On 4 H100 in two runs (2026-11-27, 52ec928) it ran 64
/// MiB / 256 MiB / 1 GiB in 173.0 / 618.5 / 2379 and 170.6 / 615.0 /
/// 2374.7 us against the default's 181.2 / 644.4 / 2468 and 180.9 / 644.6
/// / 2475.1 (NCCL 190.1-190.3 / 657.6-660.5 / 2476-2480), and 128 / 512
/// MiB in 320.1 / 1207.0 against 334.5 / 1260.6. 64 KiB chunks were as
/// fast from 256 MiB (610-624 / 2366-2381 us in four turns, 97703c9 and
/// 52ec928) but 3-4 % slower than the default at 64 MiB (187-190
/// us): 2 tiles a block there. Why 42.6 KiB is slower than both is only
/// partly known. Whole lines were ruled out (52ec928). 2728 vectors
/// over 512 threads leave 1-2 a thread past `prims::grid::copy4`'s
/// rounds of 4; moving those four at a time too took the 42.6 KiB chunks
/// 1.1-1.5 % faster (2026-11-27, 12abacb), a third of the gap. The
/// reduce-scatter gained from neither (52ec928: 32 KiB 3.4 % slower at 1
/// GiB, 64 KiB within 3 % either way).
const MEASURED_RINGS: [(PushUse, usize, Rings); 2] = [
    (
        PushUse::AllReduce,
        4,
        Rings {
            max_chunk_bytes: 16 << 10,
            slots: 3,
            lookahead: 1,
            scratch_bytes: 76 << 20,
        },
    ),
    (
        PushUse::AllGather,
        4,
        Rings {
            max_chunk_bytes: 32 << 10,
            slots: 2,
            lookahead: 0,
            scratch_bytes: 76 << 20,
        },
    ),
];

/// The rings [`MEASURED_RINGS`] gives `what` on `world` ranks, if any.
fn measured_rings(what: PushUse, world: usize) -> Option<Rings> {
    MEASURED_RINGS
        .iter()
        .find(|(u, w, _)| *u == what && *w == world)
        .map(|&(_, _, rings)| rings)
}

/// Registers of one SM of every GPU this crate runs on (sm_80 and sm_90:
/// 64 Ki 32-bit registers), which bound the push form's blocks per SM
/// ([`PushShape::for_sms`]).
const PUSH_REGISTERS_PER_SM: usize = 64 << 10;

/// Most slots per ring of the push form: a bound against typos.
pub const MAX_PUSH_SLOTS: usize = 16;

/// Most scratch of the push form ([`PushShape::scratch_bytes`]): 1 GiB, a
/// bound against typos; the largest shape of the shape sweep on 2 H200
/// (2026-11-26, 04b694b: 132 blocks, 4 slots of 256 KiB, 2 ranks) takes
/// 264 MiB.
pub const MAX_PUSH_SCRATCH_BYTES: usize = 1 << 30;

/// The push form's scratch unit: the symmetric buffer's granularity
/// (`rendezvous::BUFFER_GRANULARITY_BYTES`).
const PUSH_SCRATCH_GRANULARITY_BYTES: usize = 4096;

impl Default for PushShape {
    /// From the shape sweeps on 2 H200 (2026-11-26, 04b694b): 132 blocks
    /// of 512 threads (one per SM of an H100/H200: 80 registers a thread
    /// at 2 ranks leave room for one 512-thread block per SM), chunks of
    /// 64 KiB, 2 slots per ring, lookahead 1 was the fastest shape
    /// measured at 64 MiB (332 GB/s bus bandwidth; 271 at 16 MiB, 353 at
    /// 256 MiB); 132 blocks of 128 KiB chunks reached 362 GB/s at 1 GiB.
    /// Fewer blocks were slower at every size (64: 317 / 343 at 64 / 256
    /// MiB), and more slots or lookahead were slower (one more pipeline
    /// fill per call). The rendezvous caps the blocks at the GPU's SM
    /// count (`PushShape::for_sms`). Its rings take
    /// `2 x 132 x (world - 1) x 2 x 64 KiB`: 33 MiB on 2 ranks, the
    /// default scratch. So on 2 ranks the symmetric buffer grows from 10
    /// to 33 MiB per rank and communicator (beside the 64 MiB of the
    /// Lamport buffers in the pad); on more ranks the chunk shrinks to fit.
    /// At 3 and 4 ranks on 4 H100 (2026-11-27; 0152274, 9926c57, 926d83a)
    /// the shape was measured again: auto takes the push form from 16 MiB
    /// at 3 ranks and from 32 MiB at 4 (`decide::Crossovers::push_min_bytes`),
    /// and 4 ranks run it doubled, on rings of their own: 3 slots of 16
    /// KiB chunks in 76 MiB of scratch (`PushShape::for_use`).
    fn default() -> Self {
        PushShape {
            max_blocks: 132,
            threads: MAX_THREADS_PER_BLOCK,
            max_chunk_bytes: 64 << 10,
            slots: 2,
            lookahead: 0,
            scratch_bytes: 33 << 20,
            double: None,
            rings_set: false,
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
    /// Where the rings are unset, a use also takes its world's measured
    /// rings ([`MEASURED_RINGS`]).
    pub(crate) fn for_use(self, what: PushUse, world: usize) -> Self {
        let double = self.double.unwrap_or(match what {
            PushUse::AllReduce => ALL_REDUCE_DOUBLED_WORLDS.contains(&world),
            PushUse::ReduceScatter => REDUCE_SCATTER_DOUBLED_WORLDS.contains(&world),
            PushUse::AllGather => false,
        });
        let shape = match (self.rings_set, measured_rings(what, world)) {
            (false, Some(rings)) => PushShape {
                max_chunk_bytes: rings.max_chunk_bytes,
                slots: rings.slots,
                lookahead: rings.lookahead,
                scratch_bytes: self.scratch_bytes.max(rings.scratch_bytes),
                ..self
            },
            _ => self,
        };
        if double { shape.doubled() } else { shape }
    }

    /// The scratch a communicator of `world` ranks allocates: the most
    /// any use of it takes ([`for_use`](Self::for_use)).
    pub(crate) fn scratch_bytes_for(self, world: usize) -> usize {
        [
            PushUse::AllReduce,
            PushUse::ReduceScatter,
            PushUse::AllGather,
        ]
        .into_iter()
        .map(|what| self.for_use(what, world).scratch_bytes)
        .max()
        .unwrap_or(self.scratch_bytes)
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
            shape.rings_set |= matches!(name.trim(), "chunk" | "slots" | "lookahead" | "scratch");
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
