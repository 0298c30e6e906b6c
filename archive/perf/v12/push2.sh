#!/bin/bash
# Issue 28, phase 2: the push form (NOTE [push all-reduce] in
# kernels-gpu/src/push.rs) with the defaults from the phase-1 sweep
# (blocks=64, threads=512, chunk=131072, slots=2, scratch=32 MiB) on 2 GPUs.
#   (i)   correctness, reduced counts: `intranode-suite check --algos push`
#         with the defaults (the rings in the grown allocation, 10 MiB
#         buffer for the other forms) and the tiny ring of phase 1 (256
#         KiB buffer, blocks=5,threads=64,chunk=2048,slots=3, no scratch:
#         thousands of tiles, every slot reused). Grids past the old cap
#         of 64 blocks and lookahead 2 are checked by the sweep's bench
#         runs (every result of `bench` is verified against the inputs);
#   (ii)  the default shape beside NCCL, the Lamport two-shot and auto at
#         16/32/64/128 MiB (where auto should pick push: above 16 MiB on
#         2 ranks), graph replay, free-running; 256 MiB and 1 GiB at the
#         end if time is left (phase 1 measured this shape there);
#   (iii) a launch-shape sweep past the old cap (blocks 64..132, chunks
#         64..256 KiB, 2..4 slots, lookahead 1..3; scratch sized to each
#         ring) at 16 / 64 / 256 MiB (1 GiB for the first three shapes),
#         --large-calls 300, most informative first; no step starts after
#         215 s.
# Usage, from the repo root on a 2-GPU machine: archive/perf/v12/push2.sh DIR
# where DIR holds intranode-run, intranode-suite, intranode-bench (plain or
# .gz). Writes only under $OUT. About 4 minutes (the first process
# JIT-compiles the PTX, ~50 s; later ones hit $CUDA_CACHE_PATH).
set -u
BUNDLE=${1:?usage: archive/perf/v12/push2.sh BUNDLE_DIR}
: "${OUT:?OUT must name the output folder}"
export NCCL_NVLS_ENABLE=0 INTRANODE_BARRIER_TIMEOUT_MS=5000 INTRANODE_REQUIRE_GPUS=2
export CUDA_CACHE_PATH=/tmp/cuda-cache CUDA_CACHE_MAXSIZE=4294967296
unset INTRANODE_PUSH_LAUNCH INTRANODE_SYMM_MEM_BUFFER_BYTES
B=/tmp/push2-bin
mkdir -p "$B" "$OUT"
for f in "$BUNDLE"/*; do
  case "$f" in
    *.gz) gunzip -c "$f" > "$B/$(basename "$f" .gz)" ;;
    *.sh) ;;
    *) cp "$f" "$B/" ;;
  esac
done
chmod +x "$B"/*
START=$SECONDS
elapsed() { echo $((SECONDS - START)); }
R="$B/intranode-run --nproc-per-node 2 --failure-wait-secs 10 --timeout"
nvidia-smi -L
nvidia-smi topo -m | head -3

echo "== (i.a) check --algos push, defaults ($(elapsed) s)"
timeout 150 $R 145 -- "$B/intranode-suite" check --algos push --stress-calls 100 \
  --graph-replays 3 --free-replays 1 > "$OUT/check_default.log" 2>&1
echo "rc=$?"; grep -v "done, last" "$OUT/check_default.log" | tail -6

echo "== (i.b) check --algos push, tiny ring: 256 KiB buffer, blocks=5,threads=64,chunk=2048,slots=3,scratch=0 ($(elapsed) s)"
INTRANODE_SYMM_MEM_BUFFER_BYTES=262144 INTRANODE_PUSH_LAUNCH=blocks=5,threads=64,chunk=2048,slots=3,scratch=0 \
  timeout 45 $R 40 -- "$B/intranode-suite" check --algos push --stress-calls 60 \
  --graph-replays 2 --free-replays 0 > "$OUT/check_tiny.log" 2>&1
echo "rc=$?"; grep -v "done, last" "$OUT/check_tiny.log" | tail -4

BENCH="bench --no-decode --no-skew --ks 16 --graph-only --large-calls 300"
row() { grep -E "bytes +algo|^\[0\] +[0-9]+ |auto |wrong|rror" "$1" | grep -v "done, last"; }
echo "== (ii) default shape beside nccl, lamport-two-shot (<= 16 MiB; above, its two-shot fallback) and auto ($(elapsed) s)"
peers() { # NAME MIN MAX ALGOS TIMEOUT
  timeout "$5" $R $(($5 - 5)) -- "$B/intranode-bench" $BENCH --min-bytes "$2" --max-bytes "$3" \
    --algos "$4" --out "$OUT/$1" > "$OUT/$1.log" 2>&1
  echo "rc=$?"; row "$OUT/$1.log" | tail -14
}
peers peers_16_64 16777216 67108864 auto,push,lamport-two-shot,nccl 40
peers peers_32_128 33554432 134217728 auto,push,nccl 35

# BLOCKS CHUNK SLOTS LOOKAHEAD, most informative first; scratch = both
# rings on 2 ranks: 2 x blocks x 1 peer x slots x chunk. 16 - 256 MiB for
# every shape (a 1 GiB size costs ~10 s of host-side inputs and checks per
# shape, past the 4 minutes), then 1 GiB for the first three while time
# is left (phase 1: 1 GiB ran within 2 % of 256 MiB for 8 of 9 shapes).
# Pairs that isolate one cause (archive/perf/PERF_NOTES.md, v12 predictions):
# 5 vs 6 the lookahead at equal rings, 6 vs 1 the ring size at D = 1,
# 8 vs the default (peers run) the lookahead at 64 blocks.
SHAPES="
132 131072 2 1
128 131072 2 1
96 131072 2 1
132 65536 2 1
132 131072 3 2
132 131072 3 1
132 262144 2 1
64 131072 3 2
132 65536 4 3
128 65536 3 2
64 262144 2 1
"
sweep() { # TAG MIN_BYTES MAX_BYTES LIMIT_S COUNT
  echo "sweep $1: shape | busbw per size | mean_us per size ($2 x4 up to $3 bytes)"
  local i=0
  while read -r blocks chunk slots ahead; do
    [ -z "$blocks" ] && continue
    i=$((i + 1))
    [ "$i" -gt "$5" ] && break
    local shape="blocks=$blocks,chunk=$chunk,slots=$slots,lookahead=$ahead,scratch=$((2 * blocks * slots * chunk))"
    if [ "$(elapsed)" -gt "$4" ]; then echo "sweep $1: out of time at $(elapsed) s, skipped $shape"; continue; fi
    local log="$OUT/sweep_$1_$i.log"
    INTRANODE_PUSH_LAUNCH=$shape \
      timeout 30 $R 25 -- "$B/intranode-bench" $BENCH --min-bytes "$2" --max-bytes "$3" \
      --algos push --out "$OUT/sweep_$1_$i" > "$log" 2>&1
    local rc=$?
    local bw us
    bw=$(awk '$3 == "push" {printf " %s", $NF}' "$log")
    us=$(awk '$3 == "push" {printf " %s", $(NF-2)}' "$log")
    echo "sweep $1: $shape |$bw |$us rc=$rc $(grep -m1 -iE 'wrong|error' "$log")"
  done <<< "$SHAPES"
}
echo "== (iii) shape sweep, graph-16 bus bandwidth (GB/s) and mean us ($(elapsed) s)"
sweep lo 16777216 268435456 195 11
sweep 1g 1073741824 1073741824 210 3
# Phase 1 measured this shape at 256 MiB and 1 GiB (343 / 348 GB/s, NCCL
# 301 / 331); again here only if time is left.
if [ "$(elapsed)" -le 215 ]; then
  peers peers_256_1g 268435456 1073741824 push,nccl 25
else
  echo "peers 256 MiB / 1 GiB: out of time at $(elapsed) s (phase 1 has them)"
fi
echo "== done in $(elapsed) s"
