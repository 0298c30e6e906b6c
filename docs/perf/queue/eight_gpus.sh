#!/bin/bash
# For the first machine with 8 GPUs: nothing has run at 8 GPUs yet. One
# rank per GPU, NCCL in the same call:
#   0. `intranode-bench link`: what NVLink carries with every rank writing
#      to (copy engines, SM stores) or reading from every peer at once, the
#      ceiling of the large-message forms; `intranode-bench hop`: one NVLink
#      hop from rank 0 to each peer, the launch floor of a graph of empty
#      kernels and the store floor, the fixed costs of the Lamport forms;
#      `intranode-bench phases`: the Lamport forms' phases on each GPU's
#      clock (all appended to topo.txt);
#   1. the all-reduce sweep at world 8, 1 KiB-1 GiB, every form of ours,
#      auto and NCCL, graph of 16 calls replayed free-running (as
#      docs/perf/results/2026-11-27-h100x4/bench_w4_graph16_1GiB at 4);
#   2. the decode stack at TP8 (8 Llama layers in one graph; none, NCCL,
#      ours, fused, fused-prefetch; llama3-8b and -70b, batch 1-64);
#   3. the GPU suite's check at world 8 with --require-forms (every form
#      of ours checked exactly, reduced counts).
# Usage (lib.sh): OUT=DIR bash docs/perf/queue/eight_gpus.sh
# Writes 8 files into $OUT (no folders): topo.txt, bench_w8.{log,json,csv,png},
# decode_w8.{log,json}, check_w8.log. Every step has its own timeout;
# all of it within 9 minutes.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FAILURE_WAIT_S=10
export INTRANODE_REQUIRE_GPUS=8
queue_start
{ nvidia-smi -L; nvidia-smi topo -m; } >"$OUT/topo.txt" 2>&1
head -8 "$OUT/topo.txt"

echo "== 0. link ceiling at world 8"
ranks 25 8 -- "$D/intranode-bench" link --reps 20 >>"$OUT/topo.txt" 2>&1
echo "rc=$?"
grep -E "^\[[0-9]\] \[[0-9]\] +(ce|sm)" "$OUT/topo.txt" | sort -k3,3 -k4,4n -s | cut -c5- | head -72
ranks 40 8 -- "$D/intranode-bench" hop >>"$OUT/topo.txt" 2>&1
echo "hop rc=$?"
grep -E "0<->|hop:" "$OUT/topo.txt" | head -24
ranks 40 8 -- "$D/intranode-bench" phases --bytes 1024,65536,1048576 >>"$OUT/topo.txt" 2>&1
echo "phases rc=$?"
grep -E "phases" "$OUT/topo.txt" | grep -E "phases:|rank 0:" | head -8

echo "== 1. sweep at world 8, graph of 16 free-running, 1 KiB-1 GiB, NCCL beside"
ranks 245 8 -- "$D/intranode-bench" bench --max-bytes 1073741824 --no-decode --no-skew \
    --ks 16 --graph-only --large-calls 500 --out "$D/bench" >"$OUT/bench_w8.log" 2>&1
echo "rc=$?"
for f in json csv png; do cp "$D/bench/bench_w8.$f" "$OUT/" 2>/dev/null; done
grep -E "^\[0\]\s*(1024|65536|262144|1048576|4194304|16777216|67108864|268435456|1073741824) .*(auto|nccl|push) " \
    "$OUT/bench_w8.log" | head -40

echo "== 2. decode stack at TP8"
ranks 115 8 -- "$D/intranode-bench" decode --variants none,nccl,ours,fused,fused-prefetch \
    --out "$D/decode" >"$OUT/decode_w8.log" 2>&1
echo "rc=$?"
cp "$D/decode/decode_w8.json" "$OUT/" 2>/dev/null
grep -E "^\[0\] \|" "$OUT/decode_w8.log" | head -40

echo "== 3. intranode-suite check --require-forms at world 8"
INTRANODE_BARRIER_TIMEOUT_MS=5000 ranks 140 8 -- "$D/intranode-suite" check --require-forms \
    --stress-calls 300 --graph-replays 5 --free-replays 1 >"$OUT/check_w8.log" 2>&1
echo "rc=$?"
grep -v "done, last" "$OUT/check_w8.log" | grep -E "^\[0\]|FAIL|rror|wrong|panick" | tail -14
echo "== done"
